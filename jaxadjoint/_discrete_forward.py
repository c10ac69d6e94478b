"""`DiscreteForward`: forward mode through the recorded Runge–Kutta steps.

The primal is the ordinary adaptive solve.  Its JVP rule (attached with
`equinox.filter_custom_jvp`) takes the grid the solve recorded as a constant — exactly as
the discrete adjoint does — and replays the same steps with `jax.jvp`:

    ydot_{n+1} = ydot_n + h sum_m b_m (J_y(t_m, Y_m) Ydot_m + J_p(t_m, Y_m) pdot),

which is the derivative of the computed discrete solution, so it agrees with
`DiscreteAdjoint` to round-off (forward and reverse mode of the same function).

The replay is a `lax.scan` over ``max_steps`` whose steps past the last accepted one are
skipped by `lax.cond`.  A scan (unlike a `while_loop`) can be transposed, so the tangent
map is linear and transposable and `jax.grad`, `jax.jacrev` and `jax.hessian`
(``jacfwd(jacrev)``) work through it too; JAX then differentiates the replay itself,
which is again exact on the recorded grid.  The price is a small cost per unused slot of
``max_steps`` (roughly 0.3 µs each on CPU): keep ``max_steps`` near what the solve
needs.  For reverse mode prefer `DiscreteAdjoint`, which is the same derivative with a
hand-written reverse pass.

Times use the continuous formulas of every method: ``dy(t_i)/dt_i = f(t_i, y(t_i))``, a
perturbation of ``t0`` enters as ``ydot_0 = -f(t0, y0) t0dot`` (and ``-R(t0, y0) t0dot``
for the integral), and ``dq/dt1 = R(t1, y(t1))``.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from ._adjoint import plain_solve, to_solve_output
from ._forward import Recorder, forward_loop, quadrature_increment
from ._sensitivity_base import AbstractSensitivity, SolveOutput
from ._sensitivity_common import integrand_or_empty, materialise_tangent, save_slopes
from ._solvers import erk_step
from ._system import Problem, System


def replay(
    system: System,
    problem: Problem,
    grid: Array,
    num_accepted: Array,
    save_state_index: Array,
) -> tuple[Array, Array]:
    """Re-run the solve on a fixed grid: ``(ys, integral)``, differentiable by plain JAX.

    Performs the forward loop's arithmetic step for step (``k1 = f(t_n, y_n)``, the
    stage at ``t_next`` is evaluated at the grid value), so the values are those of the
    solve.  Derivatives follow the continuous time formulas (module docstring): the
    ``stop_gradient`` differences below are zero in value and carry only the tangent.
    """
    params, direction = problem.params, problem.direction
    grid = jax.lax.stop_gradient(grid)
    tableau = system.solver.tableau
    t0, t1, ts = problem.t0, problem.t1, problem.ts
    dt0 = t0 - jax.lax.stop_gradient(t0)
    y0 = problem.y0 - dt0 * system.rhs(t0, problem.y0, params)
    n_save = ts.shape[0]

    def f(tau, y):
        return system.field(tau, y, params, direction)

    ys = jnp.where((save_state_index == 0)[:, None], y0[None, :], jnp.zeros((n_save,) + y0.shape,
                                                                            y0.dtype))
    q = jnp.zeros_like(integrand_or_empty(system, t0, problem.y0, params))

    def take(n, carry):
        y, ys, q = carry
        tau, tau_next = grid[n], grid[n + 1]
        h = tau_next - tau
        step = erk_step(tableau, f, tau, y, h, f(tau, y), tau_next)
        if system.has_integrand:
            q = q + quadrature_increment(system, tau, h, step, params, direction)
        ys = jnp.where((save_state_index == n + 1)[:, None], step.y_new[None, :], ys)
        return step.y_new, ys, q

    def body(carry, n):
        carry = jax.lax.cond(n < num_accepted, lambda c: take(n, c), lambda c: c, carry)
        return carry, None

    (y_final, ys, q), _ = jax.lax.scan(
        body, (y0, ys, q), jnp.arange(system.max_steps, dtype=jnp.int32)
    )
    dts = ts - jax.lax.stop_gradient(ts)
    ys = ys + dts[:, None] * save_slopes(system, params, ts, ys)
    if system.has_integrand:
        dt1 = t1 - jax.lax.stop_gradient(t1)
        q = (q - dt0 * system.integrand(t0, problem.y0, params)
             + dt1 * system.integrand(t1, y_final, params))
    return ys, q


@eqx.filter_custom_jvp
def _solve(problem: Problem, system: System) -> SolveOutput:
    return plain_solve(system, problem)


@_solve.def_jvp
def _solve_jvp(primals: Any, tangents: Any) -> tuple[SolveOutput, SolveOutput]:
    problem, system = primals
    problem_dot, _ = tangents
    # The grid is recorded by an undifferentiated solve: its decisions are constants.
    fixed = jax.lax.stop_gradient(problem)
    fwd = forward_loop(system, fixed, Recorder())
    out = to_solve_output(system, fixed, fwd)

    problem_dot = materialise_tangent(problem, problem_dot)

    def run(p: Problem) -> tuple[Array, Array]:
        return replay(system, p, fwd.grid, fwd.num_accepted, fwd.save_state_index)

    (ys_r, q_r), (ys_dot, q_dot) = jax.jvp(run, (problem,), (problem_dot,))
    # Value of the solve, derivative of the replay (their values agree to round-off);
    # under an outer `jax.jvp` (e.g. `jax.hessian`) the replay carries the outer tangent.
    ys = out.ys + (ys_r - jax.lax.stop_gradient(ys_r))
    q = out.integral + (q_r - jax.lax.stop_gradient(q_r))
    primal = SolveOutput(ys, q, out.record)
    tangent = SolveOutput(ys_dot, q_dot, jax.tree.map(lambda _: None, out.record))
    return primal, tangent


class DiscreteForward(AbstractSensitivity):
    """Forward mode through the recorded Runge–Kutta steps.

    Makes `jax.jvp` and `jax.jacfwd` work, and agrees with `DiscreteAdjoint` to
    round-off: both differentiate the computed discrete solution on its recorded grid.
    Cost of `jax.jacfwd` with ``P`` inputs: one solve plus one replay whose tangent
    arithmetic is batched over ``P`` (matrix–matrix products), the natural choice when
    there are few inputs and many outputs (e.g. a whole sensitivity trajectory).
    `jax.grad`, `jax.jacrev` and `jax.hessian` also work, by transposing the replay
    (memory ``O(max_steps)`` stage values); `DiscreteAdjoint` is the faster reverse mode.
    """

    def __call__(self, system: System, problem: Problem) -> SolveOutput:
        return _solve(problem, system)
