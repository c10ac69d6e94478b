"""Tests of the Rosenbrock tableaus: order conditions, L-stability, validation.

Plain NumPy, no JAX.  The order conditions of a Rosenbrock method (with the exact Jacobian)
are Butcher's, ``b . Phi(tau) = 1 / gamma(tau)`` for every rooted tree ``tau``, with the
elementary weights built from the classical form ``(alpha, Gamma, b)``: the edge below a
vertex with exactly one child carries ``beta = alpha + Gamma`` (the Jacobian terms
``h J sum_j gamma_ij k_j`` contribute only there), a vertex with several children
multiplies ``alpha @ g(child)`` (Hairer & Wanner II, Section IV.7; with the diagonal of
``Gamma`` kept in ``beta`` the right-hand sides are ``1 / gamma(tau)`` rather than
polynomials in ``gamma``).  Each method must meet every condition up to its order and
fail one of the next, for the propagated and the embedded solution.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_tableaus import TREES

from jaxadjoint.solvers._rosenbrock_tableaus import (
    ALL_ROSENBROCK_TABLEAUS,
    RODAS4,
    RosenbrockTableau,
)

EPS = np.finfo(np.float64).eps
ids = [t.name for t in ALL_ROSENBROCK_TABLEAUS]


def rosenbrock_defects(tableau: RosenbrockTableau, b: np.ndarray, max_order: int):
    """Per tree up to ``max_order``: ``(order, b . Phi - 1/gamma, round-off scale)``."""
    alpha = tableau.alpha
    beta = alpha + tableau.big_gamma
    g, g_abs, out = [], [], []
    for tree in TREES:
        if tree.order > max_order:
            break
        if len(tree.children) == 1:
            (child,) = tree.children
            v, v_abs = beta @ g[child], np.abs(beta) @ g_abs[child]
        else:
            v, v_abs = np.ones(len(b)), np.ones(len(b))
            for child in tree.children:
                v = v * (alpha @ g[child])
                v_abs = v_abs * (np.abs(alpha) @ g_abs[child])
        g.append(v)
        g_abs.append(v_abs)
        out.append((tree.order, b @ v - 1 / tree.gamma, np.abs(b) @ v_abs))
    return out


def attained_order(tableau: RosenbrockTableau, b: np.ndarray) -> int:
    """The largest ``p`` with every condition of order ``<= p`` met to round-off.

    The coefficients are published to 16 digits and the classical form is computed from
    them (an inverse of ``Gamma``), so a condition counts as met within ``1e4 eps`` of the
    size of its terms; the first failing order misses by more than ``1e-4``.
    """
    defects = rosenbrock_defects(tableau, b, 8)
    for p in range(1, 9):
        if any(abs(d) > 1e4 * EPS * max(scale, 1.0) for o, d, scale in defects if o == p):
            return p - 1
    return 8


@pytest.mark.parametrize("tableau", ALL_ROSENBROCK_TABLEAUS, ids=ids)
def test_order_conditions(tableau: RosenbrockTableau) -> None:
    assert attained_order(tableau, tableau.b) == tableau.order
    assert attained_order(tableau, tableau.b_embedded) == tableau.error_order
    # The first failing order fails clearly (not a tolerance artefact).
    worst = max(abs(d) for o, d, _ in rosenbrock_defects(tableau, tableau.b, tableau.order + 1)
                if o == tableau.order + 1)
    assert worst > 1e-4


@pytest.mark.parametrize("tableau", ALL_ROSENBROCK_TABLEAUS, ids=ids)
def test_structure(tableau: RosenbrockTableau) -> None:
    s = tableau.num_stages
    assert np.allclose(np.diag(tableau.big_gamma), tableau.gamma, rtol=1e-14)
    assert np.all(np.triu(tableau.alpha) == 0) or np.allclose(np.triu(tableau.alpha), 0)
    # Stiffly accurate: the solution is the last stage's input plus U_s, error U_s.
    assert tableau.c[-1] == 1 and tableau.m[-1] == 1
    np.testing.assert_array_equal(tableau.m[:-1], tableau.a[-1, :-1])
    np.testing.assert_array_equal(tableau.m_error, np.eye(s)[-1])


def stability_function(tableau: RosenbrockTableau, z: complex) -> complex:
    """``R(z) = 1 + z b^T (I - z (alpha + Gamma))^{-1} 1`` (the step applied to y' = z y / h)."""
    s = tableau.num_stages
    beta = tableau.alpha + tableau.big_gamma
    return 1 + z * tableau.b @ np.linalg.solve(np.eye(s) - z * beta, np.ones(s))


@pytest.mark.parametrize("tableau", ALL_ROSENBROCK_TABLEAUS, ids=ids)
def test_l_stable(tableau: RosenbrockTableau) -> None:
    """``|R(z)| <= 1`` on the imaginary axis and in the left half-plane, ``R(-inf) = 0``."""
    for y in np.logspace(-3, 6, 200):
        assert abs(stability_function(tableau, 1j * y)) <= 1 + 1e-12
    rng = np.random.default_rng(0)
    for z in -np.abs(rng.standard_cauchy(200)) * 10 + 1j * rng.standard_cauchy(200) * 10:
        assert abs(stability_function(tableau, z)) <= 1 + 1e-12
    assert abs(stability_function(tableau, -1e12)) < 1e-9
    # The exponential to the method's order near 0: R(z) - e^z = O(z^(p+1)).
    z = 1e-2
    assert abs(stability_function(tableau, z) - np.exp(z)) < 10 * z ** (tableau.order + 1)


def test_a_typo_is_caught() -> None:
    """A relative change of 1e-9 in any coupling coefficient breaks an order condition."""
    rows, cols = np.nonzero(RODAS4.C)
    for i, j in zip(rows, cols):
        C = RODAS4.C.copy()
        C[i, j] *= 1 + 1e-9
        try:
            changed = dataclasses.replace(RODAS4, C=C)
        except ValueError:
            continue  # the sums of the classical form caught it already
        assert (attained_order(changed, changed.b) < 4
                or attained_order(changed, changed.b_embedded) < 3), (i, j)


def test_validation() -> None:
    with pytest.raises(ValueError, match="strictly lower"):
        dataclasses.replace(RODAS4, a=RODAS4.a + np.eye(6))
    with pytest.raises(ValueError, match="row sums of alpha"):
        dataclasses.replace(RODAS4, c=RODAS4.c + 0.01)
    with pytest.raises(ValueError, match="row sums of Gamma"):
        dataclasses.replace(RODAS4, d=RODAS4.d + 0.01)
    with pytest.raises(ValueError, match="sum to 1"):
        dataclasses.replace(RODAS4, m=RODAS4.m * 1.01)
