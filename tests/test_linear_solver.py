"""Solves with a dense LU (`solvers._dense_lu`): the unrolled substitution that tiny
systems use (`DenseLU.solver`, `transposed_solver`) against LAPACK's `lu_solve` and
against the residual, with pivoting and leading (seed) axes; larger systems keep the
library solve."""

from __future__ import annotations

import helpers
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

from jaxadjoint.solvers._dense_lu import SMALL_SYSTEM_MAX_SIZE
from jaxadjoint.solvers._linear_solver import DenseLU


@pytest.mark.parametrize("size", [1, 2, 5, SMALL_SYSTEM_MAX_SIZE, SMALL_SYSTEM_MAX_SIZE + 1])
def test_small_substitution_is_the_lu_solve(size: int) -> None:
    rng = np.random.default_rng(size)
    # Rows out of order, so that the LU pivots.
    matrix = jnp.asarray(rng.normal(size=(size, size)) + 3 * np.eye(size)[::-1])
    rhs = jnp.asarray(rng.normal(size=(3, size)))  # a leading (seed) axis
    factorisation = DenseLU(jsl.lu_factor(matrix), matrix)
    x = jax.vmap(factorisation.solver())(rhs)
    xt = factorisation.transposed_solver()(rhs)
    x_ref = jax.vmap(lambda b: jsl.lu_solve(factorisation.lu, b))(rhs)
    xt_ref = factorisation.solve_transposed(rhs)
    np.testing.assert_allclose(x, x_ref, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(xt, xt_ref, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(x @ matrix.T, rhs, atol=1e-13)
    np.testing.assert_allclose(xt @ matrix, rhs, atol=1e-13)
    if size <= 2 and helpers.ON_CPU:  # the same arithmetic as LAPACK's substitution
        assert np.array_equal(np.asarray(x), np.asarray(x_ref))


# --- With small loops compiled into one kernel (`compile_small_loops`): no library calls ---

from jaxadjoint.solvers import _dense_lu  # noqa: E402


@pytest.fixture
def unrolled(monkeypatch):
    """The setting `compile_small_loops` makes, as `_dense_lu` reads it."""
    monkeypatch.setattr(_dense_lu, "small_loops_compiled", lambda: True)


def _pivoting_matrix(size: int, seed: int) -> jax.Array:
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=(size, size)) + 3 * np.eye(size)[::-1])


@pytest.mark.parametrize("size", [1, 3, SMALL_SYSTEM_MAX_SIZE])
def test_unrolled_lu_is_lapacks(unrolled, size: int) -> None:
    """Same pivots as LAPACK's `getrf` (the first largest entry), factors to round-off;
    solves with ``M`` and ``M^T`` (leading seed axes) against LAPACK's and the residual."""
    for seed in range(4):
        matrix = _pivoting_matrix(size, seed)
        lu, pivots = _dense_lu.lu_factor(matrix)
        lu_ref, pivots_ref = jsl.lu_factor(matrix)
        assert np.array_equal(np.asarray(pivots), np.asarray(pivots_ref))
        np.testing.assert_allclose(lu, lu_ref, rtol=1e-13, atol=1e-14)
        b = jnp.asarray(np.random.default_rng(seed).normal(size=(3, size)))
        x = jax.vmap(lambda v: _dense_lu.lu_solve((lu, pivots), v))(b)
        xt = _dense_lu.lu_solve_transposed((lu, pivots), b)
        xt_one = jax.vmap(lambda v: _dense_lu.lu_solve((lu, pivots), v, trans=1))(b)
        np.testing.assert_allclose(x @ matrix.T, b, atol=1e-13)
        np.testing.assert_allclose(xt @ matrix, b, atol=1e-13)
        np.testing.assert_array_equal(xt, xt_one)
        perm = _dense_lu._permutation(pivots, size, unrolled=True)
        perm_ref = jax.lax.linalg.lu_pivots_to_permutation(pivots_ref, size)
        assert np.array_equal(np.asarray(perm), np.asarray(perm_ref))


def test_unrolled_lu_under_vmap_has_no_library_call_or_scatter(unrolled) -> None:
    """What lets XLA compile a stiff solver's loop into one kernel: the batched factorisation,
    permutation and transposed solves of a stage block (`_esdirk._DirectTransposed`) and a
    vector-matrix product lower to fusible arithmetic only."""
    matrices = jnp.stack([_pivoting_matrix(3, seed) for seed in range(4)])

    def work(matrices, b):
        lus = jax.vmap(_dense_lu.lu_factor)(matrices)
        inverses = jax.vmap(_dense_lu.small_transposed_inverse)(lus)
        x = jax.vmap(lambda lu, v: _dense_lu.lu_solve(lu, v, trans=1))(lus, b)
        return inverses, x, _dense_lu.vector_times_matrix(b[0], matrices[0])

    b = jnp.ones((4, 3))
    text = jax.jit(work).lower(matrices, b).as_text()
    for unwanted in ("custom_call", "scatter", "dot_general", "stablehlo.while"):
        assert unwanted not in text, unwanted
    inverses, x, product = work(matrices, b)
    np.testing.assert_allclose(inverses, jnp.linalg.inv(matrices).transpose(0, 2, 1),
                               rtol=1e-12)
    transposed = matrices.transpose(0, 2, 1)
    np.testing.assert_allclose(x, jnp.linalg.solve(transposed, b[..., None])[..., 0],
                               rtol=1e-12)
    np.testing.assert_allclose(product, b[0] @ matrices[0], rtol=1e-14)


def test_without_the_setting_the_library_calls_stay(monkeypatch) -> None:
    """The default: LAPACK's factorisation, bitwise what `jax.scipy.linalg` gives."""
    monkeypatch.setattr(_dense_lu, "small_loops_compiled", lambda: False)
    matrix = _pivoting_matrix(3, 0)
    lu, pivots = _dense_lu.lu_factor(matrix)
    lu_ref, pivots_ref = jsl.lu_factor(matrix)
    assert np.array_equal(np.asarray(lu), np.asarray(lu_ref))
    assert "custom_call" in jax.jit(_dense_lu.lu_factor).lower(matrix).as_text()


@pytest.mark.parametrize("small_loops", [False, True], ids=["library", "unrolled"])
def test_a_non_finite_matrix_gives_nan_factors(monkeypatch, small_loops: bool) -> None:
    """``[[inf, 0], [0, 1]]``: LAPACK's factors are finite (``inf`` and 0) and a solve gives
    ``[0, 1]``, a finite answer to a system that has none; cuSOLVER did the same with NaN
    entries.  The factors are NaN instead, so the step fails and the solver's nonfinite
    handling takes over, on every platform."""
    monkeypatch.setattr(_dense_lu, "small_loops_compiled", lambda: small_loops)
    for bad in (jnp.inf, jnp.nan):
        matrix = jnp.array([[bad, 0.0], [0.0, 1.0]])
        lu = _dense_lu.lu_factor(matrix)
        assert bool(jnp.all(jnp.isnan(lu[0])))
        assert bool(jnp.all(jnp.isnan(_dense_lu.lu_solve(lu, jnp.ones(2)))))
    # Per matrix under vmap: a finite lane keeps its factors.
    matrices = jnp.stack([jnp.array([[jnp.inf, 0.0], [0.0, 1.0]]), 2 * jnp.eye(2)])
    factors, _ = jax.vmap(_dense_lu.lu_factor)(matrices)
    assert bool(jnp.all(jnp.isnan(factors[0])))
    np.testing.assert_array_equal(factors[1], 2 * jnp.eye(2))
