"""LU factorisations and solves of dense systems, and the unrolled arithmetic of tiny ones.

`lu_factor`, `lu_solve` and their relatives have `jax.scipy.linalg`'s conventions
(``(lu, pivots)`` with LAPACK's partial pivoting).  For systems of up to
``SMALL_SYSTEM_MAX_SIZE`` unknowns they work in unrolled JAX arithmetic where that is
faster:

- the substitutions of `small_lu_solver` and `small_transposed_inverse` always (a
  triangular-solve library call costs far more than its ``N^2`` work, and the unrolled
  arithmetic fuses with what surrounds it);
- the factorisation, the other solves and `vector_times_matrix` when small loops are
  compiled into one kernel (`jaxadjoint._small_loops`): a library call, a matrix product or
  a scatter in a loop keeps XLA from doing that, and without the setting the library calls
  are the faster ones.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import Array

from .._matmul import matmul
from .._small_loops import small_loops_compiled

# Up to this size `DenseLU.solver` and `transposed_solver` work with the LU factors in
# unrolled JAX arithmetic: for tiny systems each triangular-solve library call costs far
# more than its N^2 work, and the unrolled arithmetic fuses with what surrounds it.
SMALL_SYSTEM_MAX_SIZE = 8


def _substitute(lu: Array, perm: Array, b: Array) -> Array:
    """``M^{-1} b`` from ``P M = L U`` (row ``i`` of ``P M`` is row ``perm[i]`` of ``M``) by
    forward and back substitution unrolled over the ``N`` rows: the arithmetic of a
    triangular solve, in fusible JAX operations; ``b (..., N)``."""
    n = lu.shape[-1]
    rows = [b[..., perm[i]] for i in range(n)]
    for i in range(n):  # L (unit lower)
        for j in range(i):
            rows[i] = rows[i] - lu[i, j] * rows[j]
    for i in reversed(range(n)):  # U
        for j in range(i + 1, n):
            rows[i] = rows[i] - lu[i, j] * rows[j]
        rows[i] = rows[i] / lu[i, i]
    return jnp.stack(rows, axis=-1)


def small_lu_solver(lu: tuple[Array, Array]) -> Callable[[Array], Array] | None:
    """``b -> M^{-1} b`` by `_substitute` from the LU of `jax.scipy.linalg.lu_factor`, for
    ``N <= SMALL_SYSTEM_MAX_SIZE``; else ``None``."""
    factors, pivots = lu
    size = factors.shape[-1]
    if size > SMALL_SYSTEM_MAX_SIZE:
        return None
    perm = _permutation(pivots, size, unrolled=_unrolled(factors))
    return lambda b: _substitute(factors, perm, b)


def _substitute_transposed(lu: Array, perm: Array, b: Array) -> Array:
    """``M^{-T} b`` from ``P M = L U``: ``M^T = U^T L^T P``, so solve with ``U^T`` (lower),
    then ``L^T`` (unit upper), then undo the row permutation; unrolled like `_substitute`."""
    n = lu.shape[-1]
    rows = [b[..., i] for i in range(n)]
    for i in range(n):  # U^T
        for j in range(i):
            rows[i] = rows[i] - lu[j, i] * rows[j]
        rows[i] = rows[i] / lu[i, i]
    for i in reversed(range(n)):  # L^T
        for j in range(i + 1, n):
            rows[i] = rows[i] - lu[j, i] * rows[j]
    # x[perm[i]] = rows[i]: a sum over a one-hot mask, not a scatter.
    placed = perm[:, None] == jnp.arange(n, dtype=perm.dtype)[None, :]
    stacked = jnp.stack(rows, axis=-1)
    return jnp.sum(jnp.where(placed, stacked[..., :, None], 0), axis=-2)


def _permutation(pivots: Array, size: int, unrolled: bool) -> Array:
    """`jax.lax.linalg.lu_pivots_to_permutation`; where `_unrolled`, its row swaps as
    selects (the library's loop becomes a scatter under `jax.vmap`, which keeps XLA from
    compiling the loop around it into one kernel)."""
    if not unrolled:
        return jax.lax.linalg.lu_pivots_to_permutation(pivots, size)
    rows = jnp.arange(size, dtype=jnp.int32)
    perm = rows
    for k in range(size):
        target = pivots[k]
        at_k, at_target = perm[k], jax.lax.dynamic_index_in_dim(perm, target, 0, False)
        perm = jnp.where(rows == k, at_target, jnp.where(rows == target, at_k, perm))
    return perm


def _unrolled(matrix: Array) -> bool:
    """Whether `lu_factor`, `lu_solve` and `vector_times_matrix` use unrolled arithmetic:
    a single ``N x N`` matrix, ``N <= SMALL_SYSTEM_MAX_SIZE``, and small loops compiled
    into one kernel (`_small_loops`).  Without that setting a library call costs fewer
    kernels than the unrolled arithmetic (Robertson, N = 3: Rodas5's gradient 1.12x and
    Kvaerno5's 1.15x slower unrolled), and the results stay bitwise those of before."""
    return (matrix.ndim == 2 and matrix.shape[-1] <= SMALL_SYSTEM_MAX_SIZE
            and small_loops_compiled())


def lu_factor(matrix: Array) -> tuple[Array, Array]:
    """The ``(lu, pivots)`` of `jax.scipy.linalg.lu_factor` for an ``N x N`` matrix.

    Where `_unrolled`, the elimination is unrolled in JAX arithmetic, with LAPACK's
    partial pivoting (the first entry of largest magnitude in the column): the same
    pivots, factors equal to round-off.  No library call is left in the step, so XLA on
    CPU can compile a solver's loop into one kernel (`compile_small_loops`), which a
    library call inside it prevents (Robertson, Rodas5: gradient 5x faster).
    """
    if not _unrolled(matrix):
        factors, pivots = jsl.lu_factor(matrix)
    else:
        factors, pivots = _unrolled_lu_factor(matrix)
    return _nan_unless_finite(matrix, factors), pivots


def _nan_unless_finite(matrix: Array, factors: Array) -> Array:
    """The factors, or NaN where ``matrix`` has a NaN or Inf entry.

    LAPACK on CPU carries a non-finite entry into the factors and on into every solve,
    which is what makes a step fail and shrink.  cuSOLVER on GPU need not: the Rodas3
    step of ``y' = -sqrt|y|`` at ``y = 0`` (Jacobian entries -Inf and NaN) solved to
    exactly 0 there and the solve reported success.  Poisoning the factors makes every
    platform fail the same way, for an ``N^2`` check beside the ``N^3`` factorisation.
    """
    finite = jnp.all(jnp.isfinite(matrix), axis=(-2, -1), keepdims=True)
    return jnp.where(finite, factors, jnp.asarray(jnp.nan, factors.dtype))


def _unrolled_lu_factor(matrix: Array) -> tuple[Array, Array]:
    """`lu_factor`'s elimination unrolled in JAX arithmetic, LAPACK's pivots."""
    n = matrix.shape[-1]
    rows = jnp.arange(n, dtype=jnp.int32)
    a = matrix
    pivots = []
    for k in range(n):
        magnitude = jnp.where(rows >= k, jnp.abs(a[:, k]), -1)
        p = jnp.argmax(magnitude).astype(jnp.int32)
        row_k, row_p = a[k], jax.lax.dynamic_index_in_dim(a, p, 0, keepdims=False)
        a = jnp.where((rows == k)[:, None], row_p[None, :],
                      jnp.where((rows == p)[:, None], row_k[None, :], a))
        pivots.append(p)
        below = rows > k  # the rows below the pivot, and the columns right of it
        multipliers = a[:, k] / a[k, k]
        update = below[:, None] & below[None, :]
        a = jnp.where(update, a - multipliers[:, None] * a[k][None, :], a)
        a = jnp.where(below[:, None] & (rows == k)[None, :], multipliers[:, None], a)
    return a, jnp.stack(pivots)


def lu_solve(lu: tuple[Array, Array], b: Array, trans: int = 0) -> Array:
    """`jax.scipy.linalg.lu_solve` (``trans=1``: with ``M^T``) for one right-hand side
    ``b (N,)``; unrolled substitution (`_substitute`) where `_unrolled`, as `lu_factor`,
    and then ``b`` may carry leading axes."""
    factors, pivots = lu
    if not _unrolled(factors):
        return jsl.lu_solve(lu, b, trans=trans)
    perm = _permutation(pivots, factors.shape[-1], unrolled=True)
    return (_substitute_transposed if trans else _substitute)(factors, perm, b)


def lu_solve_columns(lu: tuple[Array, Array], columns: Array, trans: int = 0) -> Array:
    """`jax.scipy.linalg.lu_solve` for the columns of ``columns (N, K)``; unrolled where
    `_unrolled`, as `lu_solve`."""
    if not _unrolled(lu[0]):
        return jsl.lu_solve(lu, columns, trans=trans)
    return lu_solve(lu, columns.T, trans=trans).T


def vector_times_matrix(u: Array, matrix: Array) -> Array:
    """``u @ matrix`` (``u (..., N)``); where `_unrolled`, as a product and a sum, since a
    matrix product keeps XLA on CPU from compiling a loop around it into one kernel."""
    if not _unrolled(matrix):
        return matmul(u, matrix)
    return jnp.sum(u[..., :, None] * matrix, axis=-2)


def small_transposed_inverse(lu: tuple[Array, Array]) -> Array | None:
    """``M^{-T}`` from the LU of `jax.scipy.linalg.lu_factor`, formed by `_substitute` (its
    rows are ``M^{-1} e_k``), for ``N <= SMALL_SYSTEM_MAX_SIZE``; else ``None``.  Applied
    as `apply_small_transposed_inverse`: the transposed solve to round-off, as one fused
    product."""
    solve = small_lu_solver(lu)
    if solve is None:
        return None
    factors = lu[0]
    return solve(jnp.eye(factors.shape[-1], dtype=factors.dtype))


def apply_small_transposed_inverse(inverse_t: Array, b: Array) -> Array:
    """``M^{-T} b`` for ``inverse_t`` from `small_transposed_inverse`; ``b (..., N)``."""
    return jnp.sum(inverse_t * b[..., None, :], axis=-1)


def lu_solve_transposed(lu: tuple[Array, Array], b: Array) -> Array:
    """``M^{-T} b`` from the LU of `jax.scipy.linalg.lu_factor`; ``b`` may carry leading
    (seed) axes."""
    if _unrolled(lu[0]):
        return lu_solve(lu, b, trans=1)
    return jnp.vectorize(lambda w: jsl.lu_solve(lu, w, trans=1), signature="(n)->(n)")(b)
