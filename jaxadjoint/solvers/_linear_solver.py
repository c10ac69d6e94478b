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
from jax import Array

from ._dense_lu import (
    apply_small_transposed_inverse,
    lu_factor,
    lu_solve,
    lu_solve_transposed,
    small_lu_solver,
    small_transposed_inverse,
)

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

    def newton_tested(self, size: int) -> tuple[tuple[int, int], ...] | None:
        """The ranges ``(start, stop)`` of the state that a Newton iteration's convergence
        test measures, or None for all of it (`_newton.newton_stage`)."""
        del size
        return None


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
