"""``integrand=`` with stiff solvers: the quadrature as extra state, solved block by block.

Explicit methods add ``h sum_m b_m R(t_m, Y_m)`` to the integral (the paper's Runge–Kutta
quadrature).  A Rosenbrock method has no weights ``b`` on right-hand side values, so with a
stiff solver the integral is integrated as the state ``q`` of ``q' = R(t, y)``, ``q(t0) = 0``,
appended to ``y``, by the same method: that is the Rosenbrock (or ESDIRK) quadrature of
``R`` with the exact Jacobian of the augmented system ``[[J, 0], [R_y, 0]]``.  Its diagonal
block for ``q`` is zero, so the linear solves need only the user's ``N x N`` LU
(`_block_solve`); and the local error test looks at ``y`` alone (`_StateErrorOnly`), so
a Rosenbrock solve takes the steps of the solve without an integrand (to round-off), as
with explicit methods.  So does Kvaerno5: its Newton test leaves ``q`` out too
(`BlockTriangularSolver.newton_tested`).  Every sensitivity method then differentiates
``q`` as part of the state.

``sol.integral`` is ``q(t1)`` (a save at ``t1`` appended to the user's save times and
removed again).  Not with events or ``SaveAt(dense=True)`` (their conditions and the
interpolant would see the augmented state): those raise in `solve`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from . import _validation as check
from ._block_solve import Block, with_blocks
from ._controllers import AbstractController, IController, leading_tolerances
from ._saveat import SaveAt
from ._solution import Solution
from .solvers._base import AbstractSolver, AbstractStiffFamily


class _StateErrorOnly(AbstractController):
    """``inner`` applied to the first ``n_state`` components (the quadrature is not
    error-controlled, as with explicit methods)."""

    inner: AbstractController
    n_state: int = eqx.field(static=True)

    @property
    def adaptive(self) -> bool:
        return self.inner.adaptive

    def inputs_valid(self, tau0, tau1, direction):
        return self.inner.inputs_valid(tau0, tau1, direction)

    def init(self, f, tau0, tau1, y0, k0, dt0, solver, tol, direction):
        n, rest = self.n_state, y0[self.n_state:]

        def f_state(tau, y):
            return f(tau, jnp.concatenate([y, rest]))[:n]

        return self.inner.init(f_state, tau0, tau1, y0[:n], k0[:n], dt0, solver,
                               leading_tolerances(tol, n), direction)

    def propose(self, tau, h, state):
        return self.inner.propose(tau, h, state)

    def adapt(self, y, y_new, y_error, k0, h, state, solver, tol):
        n = self.n_state
        err = None if y_error is None else y_error[:n]
        return self.inner.adapt(y[:n], y_new[:n], err, k0[:n], h, state, solver,
                                leading_tolerances(tol, n))


def uses_quadrature_state(solver: Any, integrand: Any, saveat: SaveAt, events: Any) -> bool:
    """Whether `solve` routes through `solve_with_quadrature_state`."""
    return (integrand is not None and callable(integrand)
            and isinstance(solver, AbstractStiffFamily) and not saveat.dense and not events)


class _Augmented(eqx.Module):
    """``(t, (y, q), args) -> (rhs, integrand)``.  A Module, so that a direct call with the
    same functions reuses the compiled solve: a closure made afresh on every call compiled
    again every time (Rodas5 with ``integrand=``: 2.2 s per repeated call; 2026-11-29)."""

    rhs: Callable
    integrand: Callable

    def __call__(self, t: Any, z: Any, args: Any) -> Any:
        y, _ = z
        return self.rhs(t, y, args), self.integrand(t, y, args)


def solve_with_quadrature_state(
    solve: Callable[..., Solution], rhs: Callable, integrand: Callable, y0: Any,
    t0: Any, t1: Any, args: Any, solver: AbstractSolver, saveat: SaveAt,
    controller: AbstractController | None, **kwargs: Any,
) -> Solution:
    """`solve` with ``integrand`` and a stiff solver (module docstring)."""
    y0 = jax.tree.map(jnp.asarray, y0)
    dtype = ravel_pytree(y0)[0].dtype
    t0_ = jnp.asarray(t0, dtype)
    shapes = jax.eval_shape(integrand, t0_, y0, args)
    q0 = jax.tree.map(lambda s: jnp.zeros(s.shape, dtype), shapes)
    n = ravel_pytree(y0)[0].shape[0]
    num_q = ravel_pytree(q0)[0].shape[0]

    augmented = _Augmented(rhs, integrand)
    end = jnp.reshape(jnp.asarray(t1, dtype), (1,))
    ts = end if saveat.ts is None else jnp.concatenate([jnp.asarray(saveat.ts, dtype), end])
    if controller is None or controller.adaptive:
        controller = _StateErrorOnly(IController() if controller is None else controller, n)
    solver = with_blocks(solver, [Block(start=0, size=n, diagonal="jacobian"),
                                  Block(start=n, size=num_q, diagonal="zero")])
    atol = kwargs.get("atol")
    if atol is not None and not check.is_scalar_atol(atol):
        # Per-component: the integral's components, which neither the error test nor the
        # Newton test reads, take the state's smallest tolerance (to fill the structure).
        flat = jnp.asarray(check.per_component_atol(atol, y0, dtype))
        q_atol = jax.tree.map(lambda q: jnp.full(q.shape, jnp.min(flat), dtype), q0)
        kwargs["atol"] = (ravel_pytree(y0)[1](flat), q_atol)
    sol = solve(augmented, (y0, q0), t0, t1, args, solver=solver, controller=controller,
                saveat=SaveAt(ts=ts, land_on_ts=saveat.land_on_ts), **kwargs)
    ys, qs = sol.ys
    keep = slice(None) if saveat.ts is None else slice(0, -1)
    return Solution(
        ts=sol.ts[keep], ys=jax.tree.map(lambda a: a[keep], ys), steps=sol.steps,
        integral=jax.tree.map(lambda a: a[-1], qs), stats=sol.stats, result=sol.result,
    )
