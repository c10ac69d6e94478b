"""Tests of the continuous extensions (dense output): structure, order conditions, convergence.

Plain NumPy, plus JAX for `weights_at`'s traced path.  The interpolants are data, and these tests
check the data against the theory of continuous Runge–Kutta methods:

* ``y_n + h sum_m b_m(theta) k_m`` has local error ``O(h^(p+1))`` uniformly in ``theta`` iff
  ``sum_m b_m(theta) Phi_m(tau) = theta^|tau| / gamma(tau)`` as polynomials in ``theta`` for every
  rooted tree ``tau`` with ``|tau| <= p`` (Hairer, Nørsett & Wanner, Solving ODEs I, II.6), the
  elementary weights ``Phi_m`` taken over main and extra stages.  The rooted trees are those of
  ``test_tableaus``.  Every interpolant meets its conditions to round-off and fails some of order
  ``p + 1`` by far more, so its order is exactly ``p``.
* Convergence, one step from an exact point: on a smooth nonlinear problem, and on the graded
  problem of ``test_tableaus``, whose local error is exactly ``C(theta) h^(p+1)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_tableaus import TREES, graded_problem

from jaxadjoint.solvers import _interpolants, _tableaus
from jaxadjoint.solvers._interpolants import (
    ALL_INTERPOLANTS,
    Interpolant,
    extended_a,
    interpolant_for,
    live_interpolant_stages,
    weights_at,
)
from jaxadjoint.solvers._tableaus import ALL_TABLEAUS, ButcherTableau

EPS = np.finfo(np.float64).eps
INTERPOLANTS = list(ALL_INTERPOLANTS.values())
ids = [i.tableau.name for i in INTERPOLANTS]

# --------------------------------------------------------------------------------------------
# Order conditions of continuous Runge–Kutta methods.


def continuous_defects(
    a: np.ndarray, weights: np.ndarray, max_order: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tree up to ``max_order``: its order, the defect polynomial, and its round-off scale.

    ``a`` is the extended stage matrix (nodes enter as its row sums, as in ``test_tableaus``).
    The defect of tree ``tau`` is ``sum_m b_m(theta) Phi_m(tau) - theta^|tau| / gamma(tau)``,
    returned as its coefficients of ``theta, theta^2, ...``; ``Phi_m = g_m(tau)`` with
    ``g(leaf) = 1`` and ``g(tau) = prod_children (a @ g(child))``.  The same recursion on ``|a|``
    and ``|W|`` gives the size of the terms summed per coefficient, against which a defect is
    judged (Verner's weights reach 1.4e6 with heavy cancellation).
    """
    n, degree = weights.shape
    width = max(degree, max_order)
    abs_a, abs_w = np.abs(a), np.abs(weights)
    g: list[np.ndarray] = []
    g_abs: list[np.ndarray] = []
    orders, defects, scales = [], [], []
    for tree in (tree for tree in TREES if tree.order <= max_order):
        v, v_abs = np.ones(n), np.ones(n)
        for i in tree.children:
            v = v * (a @ g[i])
            v_abs = v_abs * (abs_a @ g_abs[i])
        g.append(v)
        g_abs.append(v_abs)
        defect, scale = np.zeros(width), np.zeros(width)
        defect[:degree] = v @ weights
        defect[tree.order - 1] -= 1 / tree.gamma
        scale[:degree] = v_abs @ abs_w
        orders.append(tree.order)
        defects.append(defect)
        scales.append(scale)
    return np.array(orders), np.array(defects), np.array(scales)


def satisfied(a: np.ndarray, weights: np.ndarray, max_order: int) -> np.ndarray:
    """For n = 1..max_order: whether every condition of order n holds to round-off."""
    orders, defects, scales = continuous_defects(a, weights, max_order)
    # 16 * EPS * scale: the shipped interpolants meet their conditions within ~1 * EPS * scale
    # (Tsit5's rounded published coefficients included), and a change of 1e-6 in one weight
    # fails them by ~1e9 of that (test_order_conditions_catch_a_perturbation).
    ok = np.all(np.abs(defects) <= 16 * EPS * scales, axis=1)
    return np.array([bool(np.all(ok[orders == n])) for n in range(1, max_order + 1)])


def attained_order(a: np.ndarray, weights: np.ndarray) -> int:
    """The largest ``p <= 9`` (the trees of ``test_tableaus``) with every condition ``<= p``."""
    ok = satisfied(a, weights, 9)
    return int(np.argmin(ok)) if not np.all(ok) else 9


def extended(interp: Interpolant) -> np.ndarray:
    a, _ = extended_a(interp.tableau, interp)
    return a


# --------------------------------------------------------------------------------------------
# The catalogue.

# name: (kind, order, extra stages, degree, end stage, stages not read).  Derived by hand: the
# Hermite interpolants are order min(p, 3); Cash–Karp's and Fehlberg's quartics, Dormand–Prince's
# and Tsitouras' interpolants order 4; Verner's 6, 6 (Vern7: see test_vern7_order) and 8.
EXPECTED = {
    "Euler": ("cubic Hermite", 1, 1, 3, 1, ()),
    "Heun": ("cubic Hermite", 2, 1, 3, 2, ()),
    "RK4": ("cubic Hermite", 3, 1, 3, 4, ()),
    "BogackiShampine": ("cubic Hermite", 3, 0, 3, 3, ()),
    "Fehlberg45": ("quartic Hermite (order 4, derived here)", 4, 1, 4, 6, ()),
    "CashKarp": ("quartic Hermite (order 4, derived here)", 4, 1, 4, 6, ()),
    "Dopri5": ("Dormand-Prince dense output", 4, 0, 4, 6, ()),
    "Tsit5": ("Tsitouras interpolant", 4, 0, 4, 6, ()),
    "Vern6": ("Verner interpolant", 6, 3, 6, 8, ()),
    # The error-estimate stages (Vern7's 10th, Vern8's 13th) feed no interpolated value.
    "Vern7": ("Verner interpolant", 6, 6, 7, 10, (9,)),
    "Vern8": ("Verner interpolant", 8, 8, 8, 13, (12,)),
}


def test_catalogue() -> None:
    assert set(ALL_INTERPOLANTS) == set(ALL_TABLEAUS) == set(EXPECTED)
    for name, tableau in ALL_TABLEAUS.items():
        interp = interpolant_for(tableau)
        assert interp is ALL_INTERPOLANTS[name]
        assert interp.tableau is tableau
        kind, order, extra, degree, end, dead = EXPECTED[name]
        assert (interp.kind, interp.order, interp.num_extra_stages) == (kind, order, extra)
        assert (interp.degree, interp.end_stage) == (degree, end)
        assert interp.num_stages == tableau.num_stages + extra
        live = tuple(m for m in range(interp.num_stages) if m not in dead)
        assert live_interpolant_stages(interp) == live


def test_interpolant_for_other_tableaus() -> None:
    # Equal coefficients under another name: the same method, the same interpolant.
    copy = dataclasses.replace(_tableaus.DOPRI5, name="my Dopri5")
    assert interpolant_for(copy) is _interpolants.DOPRI5_DENSE
    a, c = extended_a(copy, _interpolants.DOPRI5_DENSE)
    assert a.shape == (7, 7) and c.shape == (7,)
    # Any other tableau: cubic Hermite, with the extra stage f(t_{n+1}, y_{n+1}) unless FSAL.
    ralston = ButcherTableau(
        name="Ralston", a=[[0, 0], [2 / 3, 0]], b=[1 / 4, 3 / 4], c=[0, 2 / 3], order=2
    )
    interp = interpolant_for(ralston)
    assert (interp.kind, interp.order, interp.num_extra_stages, interp.end_stage) == (
        "cubic Hermite",
        2,
        1,
        2,
    )
    assert attained_order(extended(interp), interp.weights) == 2
    heun_fsal = ButcherTableau(
        name="Heun FSAL",
        a=[[0, 0, 0], [1, 0, 0], [1 / 2, 1 / 2, 0]],
        b=[1 / 2, 1 / 2, 0],
        c=[0, 1, 1],
        order=2,
    )
    interp = interpolant_for(heun_fsal)
    assert (interp.kind, interp.order, interp.num_extra_stages, interp.end_stage) == (
        "cubic Hermite",
        2,
        0,
        2,
    )
    assert attained_order(extended(interp), interp.weights) == 2
    with pytest.raises(ValueError, match="extends Dopri5, not Tsit5"):
        extended_a(_tableaus.TSIT5, _interpolants.DOPRI5_DENSE)


@pytest.mark.parametrize("interp", INTERPOLANTS, ids=ids)
def test_structure(interp: Interpolant) -> None:
    tableau = interp.tableau
    s, e, n, degree = tableau.num_stages, interp.num_extra_stages, interp.num_stages, interp.degree
    assert interp.a_extra.shape == (e, n) and interp.c_extra.shape == (e,)
    assert interp.weights.shape == (n, degree) and interp.bernstein.shape == (n, degree + 1)
    for x in (interp.a_extra, interp.c_extra, interp.weights, interp.bernstein):
        assert x.dtype == np.float64 and np.all(np.isfinite(x))
    a, c = extended_a(tableau, interp)
    assert np.all(np.tril(a, -1) == a)  # explicit: every stage reads earlier stages only
    np.testing.assert_array_equal(a[:s, :s], tableau.a)
    np.testing.assert_allclose(a.sum(axis=1), c, rtol=0, atol=1e-13)
    w = interp.weights
    # b_m(1) = b_m, and 0 for the extra stages: theta = 1 gives y_{n+1}.
    b_end = np.concatenate([tableau.b, np.zeros(e)])
    assert np.all(np.abs(w.sum(axis=1) - b_end) <= 1e-14 * np.maximum(1, np.abs(w).sum(axis=1)))
    # sum_m b_m(theta) = theta, as polynomials.
    unit = np.eye(degree)[0]
    assert np.all(np.abs(w.sum(axis=0) - unit) <= 1e-14 * np.maximum(1, np.abs(w).sum(axis=0)))
    # b'(0) = e_1 exactly: the slope at the start of the step is k_1 = f(t_n, y_n).
    np.testing.assert_array_equal(w[:, 0], np.eye(n)[0])
    # The end stage evaluates f(t_{n+1}, y_{n+1}): its row is b at c = 1.
    end = interp.end_stage
    assert end is not None and c[end] == 1
    np.testing.assert_array_equal(a[end, :s], tableau.b)
    assert not np.any(a[end, s:])
    # Bernstein and monomial forms are the same polynomials; B[:, 0] = b(0) = 0.
    assert not np.any(interp.bernstein[:, 0])
    np.testing.assert_allclose(interp.bernstein[:, -1], b_end, rtol=0, atol=1e-13)


@pytest.mark.parametrize("interp", INTERPOLANTS, ids=ids)
def test_read_only(interp: Interpolant) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        interp.order = 99  # type: ignore[misc]
    for x in (interp.a_extra, interp.c_extra, interp.weights, interp.bernstein):
        with pytest.raises(ValueError, match="read-only"):
            x[...] = 0.0


# --------------------------------------------------------------------------------------------
# Order conditions.


@pytest.mark.parametrize("interp", INTERPOLANTS, ids=ids)
def test_order_conditions(interp: Interpolant) -> None:
    """Every condition up to ``order`` holds to round-off, and not all of ``order + 1``."""
    assert attained_order(extended(interp), interp.weights) == interp.order


@pytest.mark.parametrize("interp", INTERPOLANTS, ids=ids)
def test_order_violations_are_not_round_off(interp: Interpolant) -> None:
    # The order is not understated: some condition of order + 1 fails by far more than
    # round-off (for Vern7 by a coefficient of 1.3e-4, see test_vern7_order).
    orders, defects, scales = continuous_defects(extended(interp), interp.weights, interp.order + 1)
    last = orders == interp.order + 1
    assert np.any(np.abs(defects[last]) > 1e6 * EPS * scales[last])


def test_vern7_order() -> None:
    """Verner's "order 7" interpolant of Vern7 has order 6, missing 7 by a small margin.

    The failing conditions of order 7 are those of 12 of the 20 trees ``[tau]`` with
    ``|tau| = 6`` (in exact arithmetic the others hold), by coefficients up to 1.3e-4, far above
    round-off, but their defect polynomials stay below 3e-7 on ``[0, 1]``: on a smooth problem
    it converges as if of order 7 (``test_convergence_smooth_problem``), while the graded
    problem shows order 6 (``test_convergence_graded_problem``).
    """
    interp = _interpolants.VERN7_INTERPOLANT
    orders, defects, scales = continuous_defects(extended(interp), interp.weights, 7)
    failing = ~np.all(np.abs(defects) <= 16 * EPS * scales, axis=1)
    trees = [tree for tree in TREES if tree.order <= 7]
    single_child_of_order_six = np.array(
        [len(t.children) == 1 and TREES[t.children[0]].order == 6 for t in trees]
    )
    assert np.all(single_child_of_order_six[failing])
    assert failing.sum() == 12 and single_child_of_order_six.sum() == 20
    assert 1e-4 < np.abs(defects[failing]).max() < 2e-4
    theta = np.linspace(0, 1, 201)
    values = defects[failing] @ theta ** np.arange(1, defects.shape[1] + 1)[:, None]
    assert 2e-7 < np.abs(values).max() < 3e-7


@pytest.mark.parametrize("interp", INTERPOLANTS, ids=ids)
def test_order_conditions_catch_a_perturbation(interp: Interpolant) -> None:
    """Changing the data by 1e-6 breaks an order condition: the checks above can fail.

    Three ways, at a few random places: one weight (which validation also rejects); a change
    ``1e-6 (theta^2 - theta^3) (e_i - e_j)`` of two stages' weights with ``c_i != c_j``, which
    keeps ``b(1) = b`` and ``sum_m b_m = theta`` and so passes validation (only for order >= 2:
    at order 1 it is still a first-order interpolant); and one entry of an extra stage, with
    its node moved to keep the row sum.
    """
    rng = np.random.default_rng(0)
    a, c = extended_a(interp.tableau, interp)
    p = interp.order

    def holds(a: np.ndarray, weights: np.ndarray) -> bool:
        return bool(np.all(satisfied(a, weights, p)))

    assert holds(a, interp.weights)
    for m, j in [tuple(ix) for ix in rng.permutation(np.argwhere(interp.weights != 0))[:4]]:
        w = interp.weights.copy()
        w[m, j] += 1e-6
        assert not holds(a, w), (m, j)
        with pytest.raises(ValueError):
            dataclasses.replace(interp, weights=w, bernstein=None)
    if p >= 2:
        live = live_interpolant_stages(interp)
        pairs = [(i, j) for i in live for j in live if c[i] != c[j]]
        for k in rng.permutation(len(pairs))[:4]:
            i, j = pairs[k]
            w = interp.weights.copy()
            w[[i, j], 1] += [1e-6, -1e-6]
            w[[i, j], 2] -= [1e-6, -1e-6]
            dataclasses.replace(interp, weights=w, bernstein=None)  # valid structure
            assert not holds(a, w), (i, j)
    s = interp.tableau.num_stages
    entries = [(r, col) for r, col in np.argwhere(interp.a_extra != 0) if s + r != interp.end_stage]
    for k in rng.permutation(len(entries))[:4]:
        r, col = entries[k]
        a_extra, c_extra = interp.a_extra.copy(), interp.c_extra.copy()
        delta = 1e-6 * a_extra[r, col]
        a_extra[r, col] += delta
        c_extra[r] += delta
        changed = dataclasses.replace(interp, a_extra=a_extra, c_extra=c_extra)
        assert not holds(extended(changed), interp.weights), (r, col)


# --------------------------------------------------------------------------------------------
# Validation.


def _heun(**overrides: object) -> Interpolant:
    """Cubic Hermite for Heun, written out: stages k1, k2 and k3 = f(t_{n+1}, y_{n+1})."""
    fields: dict[str, object] = dict(
        name="bad",
        tableau=_tableaus.HEUN,
        order=2,
        a_extra=[[0.5, 0.5, 0.0]],
        c_extra=[1.0],
        weights=[[1.0, -0.5, 0.0], [0.0, 1.5, -1.0], [0.0, -1.0, 1.0]],
        kind="cubic Hermite",
    )
    fields.update(overrides)
    return Interpolant(**fields)  # type: ignore[arg-type]


def test_validation_accepts_good_interpolant() -> None:
    interp = _heun()
    np.testing.assert_array_equal(interp.weights, _interpolants.HEUN_HERMITE.weights)
    np.testing.assert_array_equal(interp.bernstein, _interpolants.HEUN_HERMITE.bernstein)
    assert interp.end_stage == 2 and attained_order(extended(interp), interp.weights) == 2


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(a_extra=[[0.5, 0.5]]), r"a_extra must be \(e, s \+ e\)"),
        (dict(a_extra=[0.5, 0.5, 0.0]), r"a_extra must be \(e, s \+ e\)"),
        (dict(c_extra=[1.0, 1.0]), r"c_extra must have shape \(1,\)"),
        (dict(weights=[[1.0, -0.5, 0.0], [0.0, 1.5, -1.0]]), r"weights must be \(s \+ e, D\)"),
        (dict(weights=np.zeros((3, 0))), r"weights must be \(s \+ e, D\)"),
        (dict(c_extra=[np.nan]), "coefficients must be finite"),
        (dict(a_extra=[[0.5, 0.0, 0.5]]), "may read only stages < s"),
        (dict(c_extra=[0.9]), "c_extra must equal the row sums"),
        (
            dict(weights=[[1.0, -0.5, 1e-6], [0.0, 1.5, -1.0], [0.0, -1.0, 1.0]]),
            r"b\(1\) must equal the tableau's b",
        ),
        (
            dict(weights=[[1.0, -0.5 + 1e-6, -1e-6], [0.0, 1.5, -1.0], [0.0, -1.0, 1.0]]),
            "the weights must sum to theta",
        ),
        (dict(order=3), "order must be between 1 and the tableau's order 2"),
        (dict(order=0), "order must be between 1"),
        (dict(bernstein=np.zeros((3, 3))), r"bernstein must be finite, \(s \+ e, D \+ 1\)"),
        (dict(bernstein=np.zeros((3, 4))), "bernstein and weights are different polynomials"),
    ],
)
def test_validation_rejects(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _heun(**overrides)


def test_validation_does_not_alias_inputs() -> None:
    weights = np.array([[1.0, -0.5, 0.0], [0.0, 1.5, -1.0], [0.0, -1.0, 1.0]])
    interp = _heun(weights=weights)
    weights[0, 0] = 5.0  # the caller's array stays writeable and the interpolant keeps its own
    assert interp.weights[0, 0] == 1.0


# --------------------------------------------------------------------------------------------
# Evaluation.


@pytest.mark.parametrize("interp", INTERPOLANTS, ids=ids)
def test_weights_at(interp: Interpolant) -> None:
    w, n, degree = interp.weights, interp.num_stages, interp.degree
    theta = np.linspace(0, 1, 11)
    powers = theta[:, None] ** np.arange(degree + 1)
    values = weights_at(interp, theta)
    slopes = weights_at(interp, theta, derivative=True)
    # Against the monomial form, within the round-off of evaluating it (which is large for
    # Verner's coefficients: the reason weights_at uses the Bernstein form).
    monomial = powers[:, 1:] @ w.T
    monomial_slopes = (powers[:, :-1] * np.arange(1, degree + 1)) @ w.T
    scale = powers[:, 1:] @ np.abs(w).T
    slope_scale = (powers[:, :-1] * np.arange(1, degree + 1)) @ np.abs(w).T
    # The first weight is theta minus the others: it carries their round-off.
    scale[:, 0] = scale.sum(axis=1)
    slope_scale[:, 0] = slope_scale.sum(axis=1)
    assert values.shape == slopes.shape == (11, n)
    assert np.all(np.abs(values - monomial) <= 64 * EPS * np.maximum(1, scale))
    assert np.all(np.abs(slopes - monomial_slopes) <= 64 * EPS * np.maximum(1, slope_scale))
    # theta = 0 gives y_n, with slope k_1; theta = 1 gives y_{n+1}; the weights sum to theta.
    np.testing.assert_array_equal(values[0], np.zeros(n))
    np.testing.assert_array_equal(slopes[0], np.eye(n)[0])
    b_end = np.concatenate([interp.tableau.b, np.zeros(interp.num_extra_stages)])
    np.testing.assert_allclose(values[-1], b_end, rtol=0, atol=1e-13)
    assert np.all(np.abs(values.sum(axis=1) - theta) <= 4 * EPS * np.abs(values).sum(axis=1))
    # Shapes broadcast; scalars work.
    assert weights_at(interp, np.zeros((2, 3))).shape == (2, 3, n)
    assert weights_at(interp, 0.5).shape == (n,)


@pytest.mark.parametrize(
    "interp", [_interpolants.DOPRI5_DENSE, _interpolants.VERN8_INTERPOLANT], ids=["Dopri5", "Vern8"]
)
def test_weights_at_jax(interp: Interpolant) -> None:
    """With a JAX ``theta``, traced or not: the NumPy values, and the derivative as gradient."""
    theta = np.linspace(0, 1, 11)
    values = weights_at(interp, theta)
    slopes = weights_at(interp, theta, derivative=True)
    # A GPU fuses the polynomial differently (Vern8 on an H200: 1.24e-12 off in one weight).
    atol = 1e-12 if helpers.ON_CPU else 5e-12
    np.testing.assert_allclose(
        weights_at(interp, jnp.asarray(theta)), values, rtol=1e-13, atol=atol
    )
    jitted = jax.jit(lambda t: weights_at(interp, t, derivative=True))
    np.testing.assert_allclose(jitted(jnp.asarray(theta)), slopes, rtol=1e-13, atol=atol)
    grad = jax.vmap(jax.jacfwd(lambda t: weights_at(interp, t)))(jnp.asarray(theta))
    np.testing.assert_allclose(grad, slopes, rtol=0, atol=1e-10)
    as_float32 = weights_at(interp, jnp.asarray(theta, dtype=jnp.float32))
    assert as_float32.dtype == jnp.float32
    np.testing.assert_allclose(as_float32, values, rtol=0, atol=1e-3)


def test_weights_at_accuracy() -> None:
    """The Bernstein form and the closed sum keep Vern8's interpolated values accurate.

    One step of ``h = 0.1`` on the smooth problem below, whose true interpolation error (40-digit
    arithmetic, exact coefficients) is 9e-16: ``weights_at`` stays within a few times that,
    while the monomial form, evaluated directly, is off by more than 1e-12.
    """
    interp = _interpolants.VERN8_INTERPOLANT
    theta = np.linspace(0.1, 0.9, 9)
    a, c = extended_a(interp.tableau, interp)
    y0, h = smooth_solution(0.0), 0.1
    k = np.zeros((interp.num_stages, 2))
    for m in range(interp.num_stages):
        k[m] = smooth_field(c[m] * h, y0 + h * (a[m, :m] @ k[:m]))
    exact = np.array([smooth_solution(x * h) for x in theta])
    monomial = (theta[:, None] ** np.arange(1, interp.degree + 1)) @ interp.weights.T
    assert np.abs(y0 + h * weights_at(interp, theta) @ k - exact).max() < 1e-14
    assert np.abs(y0 + h * monomial @ k - exact).max() > 1e-12


def test_weights_at_rejects_integer_theta() -> None:
    with pytest.raises(ValueError, match="floating-point"):
        weights_at(_interpolants.DOPRI5_DENSE, jnp.asarray(1))


# --------------------------------------------------------------------------------------------
# Convergence of one interpolated step.


def interpolated_step(
    interp: Interpolant,
    f: Callable[[float, np.ndarray], np.ndarray],
    t0: float,
    y0: np.ndarray,
    h: float,
    theta: np.ndarray,
) -> np.ndarray:
    """``y(t0 + theta h)`` from one step of ``interp``'s method and its extension: ``(len, N)``."""
    a, c = extended_a(interp.tableau, interp)
    k = np.zeros((interp.num_stages, y0.size))
    for m in range(interp.num_stages):
        k[m] = f(t0 + c[m] * h, y0 + h * (a[m, :m] @ k[:m]))
    return y0 + h * (weights_at(interp, theta) @ k)


def fitted_order(errors: np.ndarray, h: np.ndarray) -> float:
    """Least-squares slope of ``log(error)`` against ``log(h)``."""
    return float(np.polyfit(np.log(h), np.log(errors), 1)[0])


def smooth_field(t: float, y: np.ndarray) -> np.ndarray:
    return np.array([y[0] * (1 - y[0]), np.cos(t) * y[1]])


def smooth_solution(t: float) -> np.ndarray:
    return np.array([1 / (1 + np.exp(-t)), np.exp(np.sin(t))])


# Step sizes per order: errors from ~1e-5 down to well above round-off.
SMOOTH_STEPS = {
    **{p: 0.1 * 2.0 ** -np.arange(4) for p in (1, 2, 3, 4)},
    6: 0.8 * 2.0 ** -np.arange(4),
    8: 0.8 * 2.0 ** -np.arange(3),
}


@pytest.mark.parametrize("interp", INTERPOLANTS, ids=ids)
def test_convergence_smooth_problem(interp: Interpolant) -> None:
    """Logistic growth and ``exp(sin t)``: one step from ``t = 0``, ``theta`` in ``(0, 1)``.

    The maximum error over ``theta`` decreases like ``h^(p+1)``: within 0.3 for ``p <= 4``.
    Verner's interpolants have so small principal error terms that on smooth problems the
    next terms dominate down to round-off (slopes 7.5, 7.7 and 9.8 for orders 6, 6 and 8; in
    40-digit arithmetic Vern8 reaches 9.0 at errors of 1e-16), so for them the slope is only
    required not to fall below ``p + 1``; the graded problem below shows every order exactly.
    """
    p = interp.order
    h = SMOOTH_STEPS[p]
    theta = np.linspace(0.1, 0.9, 9)
    errors = np.array(
        [
            np.abs(
                interpolated_step(interp, smooth_field, 0.0, smooth_solution(0.0), step, theta)
                - np.array([smooth_solution(x * step) for x in theta])
            ).max()
            for step in h
        ]
    )
    assert np.all(errors > 1e-13)  # far from round-off
    slope = fitted_order(errors, h)
    if p <= 4:
        assert abs(slope - (p + 1)) < 0.3
    else:
        assert slope > p + 1 - 0.3


@pytest.mark.parametrize("interp", INTERPOLANTS, ids=ids)
def test_convergence_graded_problem(interp: Interpolant) -> None:
    """On ``graded_problem(p + 1)`` the local error is exactly ``C(theta) h^(p+1)``.

    There ``u_k(lambda t) = lambda^k u_k(t)`` for the solution from ``u(0) = 0`` (component
    ``k`` has weight ``k``, time weight 1), and a Runge–Kutta step respects the same scaling,
    so one step of size ``h`` from 0 has error ``h^k E_k(theta)`` in component ``k``.  An
    interpolant of order ``p`` is exact in components ``k <= p`` and not in the last: the slope
    is exactly ``p + 1``, for any ``h``, at errors far above round-off.
    """
    p = interp.order
    f, at_one = graded_problem(p + 1)
    h = np.array([1, 1 / 2, 1 / 3, 1 / 4])
    theta = np.array([0.25, 0.5, 0.75])
    weights = np.arange(1, p + 2)
    errors = []
    for step in h:
        y = interpolated_step(interp, f, 0.0, np.zeros(p + 1), step, theta)
        exact = (theta[:, None] * step) ** weights * at_one
        # Exact but for round-off, which reaches 6e-11 for Vern6 at h = 1: its extra stage 12
        # combines k_7 and k_8 (c = 0.9995, 1) with coefficients -3819 and 3732.
        np.testing.assert_allclose(y[:, :-1], exact[:, :-1], rtol=0, atol=1e-9)
        errors.append(np.abs(y[:, -1] - exact[:, -1]))
        assert np.all(errors[-1] > 1e3 * EPS * np.abs(exact[:, -1]))
    errors = np.array(errors)
    for i in range(len(theta)):
        assert abs(fitted_order(errors[:, i], h) - (p + 1)) < 0.01
