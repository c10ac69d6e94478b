"""Solves with a dense LU (`solvers._linear_solver`): the unrolled substitution that tiny
systems use (`DenseLU.solver`, `transposed_solver`) against LAPACK's `lu_solve` and
against the residual, with pivoting and leading (seed) axes; larger systems keep the
library solve."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

from jaxadjoint.solvers._linear_solver import SMALL_SYSTEM_MAX_SIZE, DenseLU


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
    if size <= 2:  # the same arithmetic as the library's substitution
        assert np.array_equal(np.asarray(x), np.asarray(x_ref))
