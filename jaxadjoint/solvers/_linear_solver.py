"""How a stiff step solves with ``I - gamma h J``: the hook between a family and a system.

Rosenbrock and ESDIRK steps need one operation beyond the right-hand side: solving
``(I - gamma h J) x = b`` with ``J = df/dy(t_n, y_n)``, factorised once per step and used
for every stage (and every Newton iteration).  They ask their ``linear_solver`` for it:

- `AbstractLinearSolver.factor(f, t, y, gamma_h)` returns an `AbstractFactorisation`;
- its `solve(b)` applies ``(I - gamma h J)^{-1}``, and `solve_transposed(b)` its
  transpose (the adjoint of a linear solve).

The default, `DenseLinearSolver`, forms ``J`` with `jax.jacfwd` (``N`` JVPs of ``f``) and
takes one LU of the ``N x N`` matrix.  A system with structure supplies its own: the
augmented systems of `ForwardSensitivity` and `ContinuousAdjoint` are block triangular
and are solved with the LU of the user's ``N x N`` matrix alone (`_block_solve`), where a
dense solve would factorise the whole ``N (1 + P)`` system.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import Array

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


class AbstractLinearSolver(eqx.Module):
    """Factorises ``I - gamma h J(t, y)`` for a stiff step (module docstring)."""

    @abc.abstractmethod
    def factor(self, f: FlatField, t: Array, y: Array, gamma_h: Array) -> AbstractFactorisation:
        """The factorisation of ``I - gamma_h df/dy(t, y)``."""


class DenseLU(AbstractFactorisation):
    """An LU factorisation (`jax.scipy.linalg.lu_factor`) of the dense matrix, and the
    Jacobian ``J`` it was formed from (the ESDIRK reverse step reuses both)."""

    lu: tuple[Array, Array]
    jac: Array

    def solve(self, b: Array) -> Array:
        return jsl.lu_solve(self.lu, b)

    def solve_transposed(self, b: Array) -> Array:
        return jnp.vectorize(lambda w: jsl.lu_solve(self.lu, w, trans=1),
                             signature="(n)->(n)")(b)


class DenseLinearSolver(AbstractLinearSolver):
    """``J`` by `jax.jacfwd` (``N`` forward-mode products), one LU of ``I - gamma h J``."""

    def factor(self, f: FlatField, t: Array, y: Array, gamma_h: Array) -> DenseLU:
        jac = jax.jacfwd(lambda x: f(t, x))(y)
        return DenseLU(jsl.lu_factor(jnp.eye(y.shape[0], dtype=y.dtype) - gamma_h * jac), jac)
