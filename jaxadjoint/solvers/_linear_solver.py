"""How a stiff step solves with ``I - gamma h J``: the hook between a family and a system.

Rosenbrock and ESDIRK steps need one operation beyond the right-hand side: solving
``(I - gamma h J) x = b`` with ``J = df/dy(t_n, y_n)``, factorised once per step and used
for every stage (and every Newton iteration).  They ask their ``linear_solver`` for it:

- `AbstractLinearSolver.factor(f, t, y, gamma_h)` returns an `AbstractFactorisation`,
  in two parts: `jacobian(f, t, y)` (what does not depend on the step size: ``J`` itself,
  the expensive part) and `factor_jacobian(jac, f, t, y, gamma_h)` (the LU of
  ``I - gamma h J``).  The forward loop keeps ``jac`` across a rejected step, which restarts
  from the same ``(t, y)`` with a smaller ``h`` (`_forward`), so only the LU is redone;
- its `solve(b)` applies ``(I - gamma h J)^{-1}``, and `solve_transposed(b)` its
  transpose (the adjoint of a linear solve); `solver()` and `transposed_solver()` return
  them prepared for several right-hand sides (for tiny dense systems, unrolled JAX
  arithmetic with the LU factors instead of library calls).

The default, `DenseLinearSolver`, forms ``J`` with `jax.jacfwd` (``N`` JVPs of ``f``) and
takes one LU of the ``N x N`` matrix.  A system with structure supplies its own: the
augmented systems of `ForwardSensitivity` and `ContinuousAdjoint` are block triangular
and are solved with the LU of the user's ``N x N`` matrix alone (`_block_solve`), where a
dense solve would factorise the whole ``N (1 + P)`` system.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import Array

from .._small_loops import small_loops_compiled

# f(t, y) -> dy/dt on flat vectors (`_base.FlatField`; not imported: `_base` imports this).
FlatField = Callable[[Array, Array], Array]


class AbstractFactorisation(eqx.Module):
    """``I - gamma h J`` at one point, ready to solve with."""

    @abc.abstractmethod
    def solve(self, b: Array) -> Array:
        """``(I - gamma h J)^{-1} b`` for ``b`` of shape ``(N,)``."""

    @abc.abstractmethod
    def solve_transposed(self, b: Array) -> Array:
        """``(I - gamma h J)^{-T} b``; ``b`` may carry leading (seed) axes."""

    def solver(self) -> Callable[[Array], Array]:
        """`solve`, prepared for several right-hand sides given one by one (the stages of
        a step): by default `solve` itself."""
        return self.solve

    def transposed_solver(self) -> Callable[[Array], Array]:
        """`solve_transposed`, prepared for several right-hand sides given one by one (the
        stages of a reverse step): by default `solve_transposed` itself."""
        return self.solve_transposed


class AbstractLinearSolver(eqx.Module):
    """Factorises ``I - gamma h J(t, y)`` for a stiff step (module docstring)."""

    @abc.abstractmethod
    def jacobian(self, f: FlatField, t: Array, y: Array) -> Any:
        """``J = df/dy(t, y)`` in the solver's own form (a pytree of arrays)."""

    @abc.abstractmethod
    def factor_jacobian(
        self, jac: Any, f: FlatField, t: Array, y: Array, gamma_h: Array
    ) -> AbstractFactorisation:
        """The factorisation of ``I - gamma_h J`` for ``jac = self.jacobian(f, t, y)``."""

    def factor(self, f: FlatField, t: Array, y: Array, gamma_h: Array) -> AbstractFactorisation:
        """The factorisation of ``I - gamma_h df/dy(t, y)``."""
        return self.factor_jacobian(self.jacobian(f, t, y), f, t, y, gamma_h)


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
    n = matrix.shape[-1]
    if not _unrolled(matrix):
        return jsl.lu_factor(matrix)
    rows = jnp.arange(n, dtype=jnp.int32)
    below_pivot_rows = [rows > k for k in range(n)]
    a = matrix
    pivots = []
    for k in range(n):
        magnitude = jnp.where(rows >= k, jnp.abs(a[:, k]), -1)
        p = jnp.argmax(magnitude).astype(jnp.int32)
        row_k, row_p = a[k], jax.lax.dynamic_index_in_dim(a, p, 0, keepdims=False)
        a = jnp.where((rows == k)[:, None], row_p[None, :],
                      jnp.where((rows == p)[:, None], row_k[None, :], a))
        pivots.append(p)
        below = below_pivot_rows[k]
        multipliers = a[:, k] / a[k, k]
        update = below[:, None] & (rows > k)[None, :]
        a = jnp.where(update, a - multipliers[:, None] * a[k][None, :], a)
        a = jnp.where(below[:, None] & (rows == k)[None, :], multipliers[:, None], a)
    return a, jnp.stack(pivots)


def lu_solve(lu: tuple[Array, Array], b: Array, trans: int = 0) -> Array:
    """`jax.scipy.linalg.lu_solve` (``trans=1``: with ``M^T``) for one right-hand side
    ``b (N,)``; unrolled substitution (`_substitute`) where `_unrolled`, as `lu_factor`."""
    factors, pivots = lu
    size = factors.shape[-1]
    if not _unrolled(factors):
        return jsl.lu_solve(lu, b, trans=trans)
    perm = _permutation(pivots, size, unrolled=True)
    return (_substitute_transposed if trans else _substitute)(factors, perm, b)


def lu_solve_columns(lu: tuple[Array, Array], columns: Array, trans: int = 0) -> Array:
    """`jax.scipy.linalg.lu_solve` for the columns of ``columns (N, K)``; unrolled where
    `_unrolled`, as `lu_solve`."""
    factors, pivots = lu
    if not _unrolled(factors):
        return jsl.lu_solve(lu, columns, trans=trans)
    return lu_solve(lu, columns.T, trans=trans).T


def vector_times_matrix(u: Array, matrix: Array) -> Array:
    """``u @ matrix`` (``u (..., N)``); where `_unrolled`, as a product and a sum, since a
    matrix product keeps XLA on CPU from compiling a loop around it into one kernel."""
    if not _unrolled(matrix):
        return u @ matrix
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
    factors, pivots = lu
    if _unrolled(factors):
        perm = _permutation(pivots, factors.shape[-1], unrolled=True)
        return _substitute_transposed(factors, perm, b)
    return jnp.vectorize(lambda w: jsl.lu_solve(lu, w, trans=1), signature="(n)->(n)")(b)


class DenseLU(AbstractFactorisation):
    """An LU factorisation (`jax.scipy.linalg.lu_factor`) of the dense matrix, and the
    Jacobian ``J`` it was formed from (the ESDIRK reverse step reuses both)."""

    lu: tuple[Array, Array]
    jac: Array

    def solve(self, b: Array) -> Array:
        return lu_solve(self.lu, b)

    def solve_transposed(self, b: Array) -> Array:
        return lu_solve_transposed(self.lu, b)

    def solver(self) -> Callable[[Array], Array]:
        """For ``N <= SMALL_SYSTEM_MAX_SIZE``: the substitution unrolled in JAX arithmetic
        (`_substitute`), which fuses, instead of two triangular-solve library calls."""
        return small_lu_solver(self.lu) or self.solve

    def transposed_solver(self) -> Callable[[Array], Array]:
        """For ``N <= SMALL_SYSTEM_MAX_SIZE``: ``b -> M^{-T} b`` as one fused product with
        ``M^{-T}``, formed once by `_substitute` (its rows are ``M^{-1} e_k``); the same
        solution to round-off.  (A transposed substitution per solve, with its
        permutation, measured 1.5x slower in the Rosenbrock reverse step.)"""
        inverse_t = small_transposed_inverse(self.lu)
        if inverse_t is None:
            return self.solve_transposed
        return lambda b: apply_small_transposed_inverse(inverse_t, b)


class DenseLinearSolver(AbstractLinearSolver):
    """``J`` by `jax.jacfwd` (``N`` forward-mode products), one LU of ``I - gamma h J``."""

    def jacobian(self, f: FlatField, t: Array, y: Array) -> Array:
        return jax.jacfwd(lambda x: f(t, x))(y)

    def factor_jacobian(self, jac: Array, f: FlatField, t: Array, y: Array,
                        gamma_h: Array) -> DenseLU:
        del f, t
        return DenseLU(lu_factor(jnp.eye(y.shape[0], dtype=y.dtype) - gamma_h * jac), jac)
