"""`DiscreteForward`: forward mode through the recorded Runge–Kutta steps.

The primal is the ordinary adaptive solve.  Its JVP rule (attached with
`equinox.filter_custom_jvp`) takes the grid the solve recorded as a constant — exactly as
the discrete adjoint does — and replays the same steps with `jax.jvp`:

    ydot_{n+1} = ydot_n + h sum_m b_m (J_y(t_m, Y_m) Ydot_m + J_p(t_m, Y_m) pdot),

which is the derivative of the computed discrete solution, so it agrees with
`DiscreteAdjoint` to round-off (forward and reverse mode of the same function).

The replay is a `lax.scan` over ``max_steps`` whose steps past the last accepted one are
skipped by `lax.cond`, in chunks of `REPLAY_CHUNK` slots: a chunk past the last step is
skipped whole, one branch for 16 slots.  A scan (unlike a `while_loop`) can be
transposed, so the tangent map is linear and transposable and `jax.grad`, `jax.jacrev`
and `jax.hessian` (``jacfwd(jacrev)``) work through it too; JAX then differentiates the
replay itself, which is again exact on the recorded grid.  Slot by slot, the unused slots
of the default ``max_steps`` (4096) took a fifth of a 50-step `jax.jacfwd` (GLV, 110
parameters, 5.7 ms against 4.5 ms at ``max_steps=64``); in chunks it takes 3.2–3.5 ms at
either.  Under `jax.vmap` over solves whose step counts differ, a slot's branch becomes a
select (every lane computes the step, a lane past its end keeps its state), but a chunk is
skipped when no lane needs it (`_lanes.any_in_batch`), and the dense-output rows are
written outside the branch, so that the select does not copy them: 4 GLV lanes' `jacfwd`
took 1.86 s slot by slot at ``max_steps=4096`` and takes 17 ms (diffrax 19 ms).
For reverse mode prefer `DiscreteAdjoint`, which is the same derivative with a
hand-written reverse pass.

Times use the continuous formulas of every method: ``dy(t_i)/dt_i = f(t_i, y(t_i))``, a
perturbation of ``t0`` enters as ``ydot_0 = -f(t0, y0) t0dot`` (and ``-R(t0, y0) t0dot``
for the integral), and ``dq/dt1 = R(t1, y(t1))``; the start of a segment restarted at an
event moves the recorded grid instead (`_start_time`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from ._adjoint import plain_solve, to_solve_output
from ._checkpoints import StoreStages
from ._dense import (
    DenseRows,
    final_row_slopes,
    first_weight_curvature,
    interpolate,
    row_slopes,
    save_rows,
)
from ._events import event_state
from ._forward import EventRecord, Recorder, forward_loop, quadrature_increment
from ._lanes import any_in_batch
from ._sensitivity_base import AbstractSensitivity, EventOutput, SolveOutput
from ._sensitivity_common import (
    fail_if_differentiated_failure,
    integrand_or_empty,
    materialise_tangent,
)
from ._start_time import interpolate_moved, moved_record
from ._stiffness import flag_stiff_gradient
from ._system import Problem, System
from ._time_switches import warn_if_differentiating_a_switch_time


def replay_event(
    system: System, problem: Problem, rows: DenseRows, event: EventRecord, y_end: Array
) -> tuple[Array, Array]:
    """``(tau*, u(tau*))`` on replayed ``rows``: the event time's implicit derivative.

    Newton steps of ``g(tau, u(tau)) = 0`` from the recorded root, whose value is the root
    itself and whose derivative is ``-(dg) / gdot`` (`_events`); a solve that no event
    stopped ends at ``(t1, y_end)``, the replay's state at ``t1`` as a save there reads it
    (with its second derivative in ``t1``: on the final row alone it was the row's
    curvature, d2h/dT2 = +50 for a falling ball's -9.81).  Two steps: one, from the fixed
    recorded root, has the root's first derivatives; the second, from that moving point,
    its second derivatives too (Newton's quadratic convergence, in the perturbation), for
    Hessians.  With one step a bounce time's second derivative was 23.9 where it is 1.81.
    The second step's residual is a Taylor polynomial of ``g`` at the root (exact to the
    order it needs): evaluating ``g`` at the moving point instead made XLA on CPU fail to
    compile `jax.hessian` ("Failed to translate module to LLVM IR", jax 0.10.2).
    """
    params, direction = problem.params, problem.direction
    weights = system.stage_plan.weights
    tau_star = jax.lax.stop_gradient(event.tau)

    def g(tau):
        u = event_state(weights, rows, event.row, tau)
        return system.conditions(tau, u, params, direction)[jnp.maximum(event.which, 0)]

    one = jnp.ones_like(tau_star)

    def slope(tau):
        return jax.jvp(g, (tau,), (one,))

    (g_star, gdot), (_, curvature) = jax.jvp(slope, (tau_star,), (one,))
    # Without an event the Newton steps are discarded, and their slope may be zero (an
    # empty segment after the last event, from a state at rest): dividing by it there
    # made the transposed steps NaN (``0 / 0``) and so every reverse-mode derivative.
    gdot = jnp.where(event.fired, gdot, 1)
    first = tau_star - (g_star - jax.lax.stop_gradient(g_star)) / gdot
    # The second step's residual g(first), by its Taylor polynomial at the root in the
    # offset (zero in value): exact to second order in the inputs, which is what the step
    # needs.  Its divisor's own derivatives do not matter (the residual is zero to first
    # order): the slope at the root serves.
    offset = first - tau_star
    g_first = g_star + gdot * offset + 0.5 * curvature * offset**2
    second = first - (g_first - jax.lax.stop_gradient(g_first)) / gdot
    tau = jnp.where(event.fired, second, direction * problem.t1)
    return tau, jnp.where(event.fired, event_state(weights, rows, event.row, tau), y_end)


# Slots of ``max_steps`` per chunk of the replay: a chunk past the last accepted step is
# skipped by one branch instead of one per slot (module docstring).
REPLAY_CHUNK = 16


def replay(
    system: System, problem: Problem, grid: Array, num_accepted: Array, rows: DenseRows,
    stages: Array | None = None, with_end: bool = False,
) -> tuple[Array, ...]:
    """Re-run the solve on a fixed grid: ``(ys, integral, rows)``, differentiable by JAX;
    ``with_end``: and the state at ``t1`` as a save there would read it.

    Performs the forward loop's arithmetic step for step (``k1 = f(t_n, y_n)``, the
    stage at ``t_next`` is evaluated at the grid value), so the values are those of the
    solve, and refills the dense-output ``rows`` of the solve (same steps, same slots)
    from which the saves are evaluated.  Derivatives follow the continuous time formulas
    for ``t0``/``t1`` (module docstring; the ``stop_gradient`` differences below are zero
    in value and carry only the tangent), and the interpolant's time derivative for the
    save times.  ``stages``: the stage values the solve kept (`StoreStages`), for solvers
    whose stages are not solved again (`AbstractSolver.replay_step`).
    """
    params, direction = problem.params, problem.direction
    grid = jax.lax.stop_gradient(grid)
    rows = jax.lax.stop_gradient(rows)
    solver = system.solver
    plan = system.stage_plan
    t0, t1 = problem.t0, problem.t1
    dt0 = t0 - jax.lax.stop_gradient(t0)
    restart = system.event_start is not None
    if restart:
        # A segment restarted at an event moves its grid with its start (`_start_time`).
        grid, rows = moved_record(grid, num_accepted, rows, direction * t1,
                                  jnp.where(system.event_start, direction * dt0, 0))
        dt0 = jnp.where(system.event_start, 0, dt0)
    # ``y0 - dt0 f`` to first order, and to second (a Hessian in t0) the midpoint rule:
    # the state at the fixed grid start of the solution through (t0 + dt0, y0).
    f0 = system.rhs(t0, problem.y0, params)
    y0 = problem.y0 - dt0 * system.rhs(t0 - dt0 / 2, problem.y0 - dt0 / 2 * f0, params)

    def f(tau, y):
        return system.field(tau, y, params, direction)

    q = jnp.zeros_like(integrand_or_empty(system, t0, problem.y0, params))
    row_y = jnp.zeros(rows.y.shape, y0.dtype)
    row_k = jnp.zeros(rows.k.shape, y0.dtype)

    def take(n, state):
        """One step from ``state = (y, q, j)``: the new state, and the row the step
        writes (``(hit, y_n, slopes)``; ``j`` counts the rows written)."""
        y, q, j = state
        tau, tau_next = grid[n], grid[n + 1]
        h = tau_next - tau
        if stages is None:
            step = solver.step(f, tau, y, h, f(tau, y), tau_next)
        else:
            step = solver.replay_step(f, tau, y, h, f(tau, y), tau_next, stages[n])
        if system.has_integrand:
            q = q + quadrature_increment(system, tau, h, step, params, direction)
        k_next = step.ks[-1] if solver.fsal else f(tau_next, step.y_new)
        slot = jnp.minimum(j, rows.size - 1)
        hit = (j < rows.count) & (rows.step[slot] == n)
        ks = row_slopes(plan, f, tau, h, y, step.ks, k_next, hit)
        return (step.y_new, q, j + hit.astype(j.dtype)), (hit, y, ks)

    def stand(state):
        return state, (jnp.zeros((), bool), state[0], jnp.zeros(row_k.shape[1:], row_k.dtype))

    def body(carry, n):
        y, q, j, row_y, row_k = carry
        # Under `jax.vmap` over solves the branch is a select, so the rows are written
        # outside it (a select would copy them), and a lane past its end computes
        # ``take`` too and discards it.  That must not read slots the solve never wrote:
        # on GPU they hold anything, NaN included, and a discarded NaN still turns the
        # transposed replay's cotangents into NaN (``0 * NaN``).  Such a lane replays its
        # own last step instead.
        taken = jnp.minimum(n, jnp.maximum(num_accepted - 1, 0))
        (y, q, j_next), (hit, y_row, ks) = jax.lax.cond(
            n < num_accepted, lambda s: take(taken, s), stand, (y, q, j))
        slot = jnp.minimum(j, rows.size - 1)
        row_y = row_y.at[slot].set(jnp.where(hit, y_row, row_y[slot]))
        row_k = row_k.at[slot].set(jnp.where(hit, ks, row_k[slot]))
        return (y, q, j_next, row_y, row_k), None

    def chunk(carry, start):
        def run(c):
            slots = start + jnp.arange(REPLAY_CHUNK, dtype=jnp.int32)
            return jax.lax.scan(body, c, slots)[0]

        # Under `jax.vmap` over solves: whether any lane has steps in the chunk (a lane
        # with none stands still through it, slot by slot).
        needed = any_in_batch(start < num_accepted)
        return jax.lax.cond(needed, run, lambda c: c, carry), None

    init = (y0, q, jnp.int32(0), row_y, row_k)
    num_chunks = -(-system.max_steps // REPLAY_CHUNK)
    (y_final, q, _, row_y, row_k), _ = jax.lax.scan(
        chunk, init, REPLAY_CHUNK * jnp.arange(num_chunks, dtype=jnp.int32)
    )
    # The last row is the final state's (`_dense.write_final_row`).
    last = rows.count - 1
    tau_final = grid[num_accepted]
    row_y = row_y.at[last].set(y_final)
    k_final = f(tau_final, y_final)
    final_slopes = final_row_slopes(plan, k_final)
    row_k = row_k.at[last].set(final_slopes)
    final = eqx.tree_at(lambda r: (r.y, r.k), rows, (row_y, row_k))
    taus = direction * problem.ts
    if restart:
        ys = interpolate_moved(plan.weights, final, taus)
    else:
        ys = interpolate(plan.weights, final, taus, save_rows(final))
    # Saves at t_T (t1) are read on the final state's row, exact to first order in their
    # time (``f``).  To second order (a Hessian in t1 or in such a save time) the solution
    # curves by ``d/dt f(t, y(t))``; the row by another amount: add the difference times
    # ``delta^2 / 2``, zero in value and in first derivative.
    curvature = jax.jvp(f, (tau_final, y_final), (jnp.ones_like(tau_final), k_final))[1]
    bend = curvature - first_weight_curvature(plan) * final_slopes[0]
    bend = jnp.where(jnp.isfinite(bend), bend, 0)  # must not turn the value into NaN

    def bent(tau: Array) -> Array:
        """The correction at the times ``tau`` (``(n,)``): ``(n, N)``."""
        delta = jnp.where(tau >= jax.lax.stop_gradient(tau_final), tau - tau_final, 0)
        return 0.5 * (delta**2)[:, None] * bend

    ys = ys + bent(taus)
    if with_end:
        tau_end = direction * t1
        y_end = event_state(plan.weights, final, last, tau_end) + bent(tau_end[None])[0]
    if system.has_integrand:
        dt1 = t1 - jax.lax.stop_gradient(t1)
        # Midpoint rules, exact to second order as ``y0`` above.
        y1_mid = y_final + dt1 / 2 * direction * k_final  # k_final = f in internal time
        q = (q - dt0 * system.integrand(t0 - dt0 / 2, problem.y0 - dt0 / 2 * f0, params)
             + dt1 * system.integrand(t1 - dt1 / 2, y1_mid, params))
    return (ys, q, final, y_end) if with_end else (ys, q, final)


@eqx.filter_custom_jvp
def _solve(problem: Problem, system: System, sens: DiscreteForward) -> SolveOutput:
    del sens
    return plain_solve(system, problem)


@_solve.def_jvp
def _solve_jvp(primals: Any, tangents: Any) -> tuple[SolveOutput, SolveOutput]:
    problem, system, sens = primals
    problem_dot = tangents[0]
    warn_if_differentiating_a_switch_time(system.rhs, problem.t0, problem.y0, problem.params,
                                          problem_dot.params)
    # The grid is recorded by an undifferentiated solve: its decisions are constants.
    fixed = jax.lax.stop_gradient(problem)
    # Newton-iterated stages are kept and not solved again by the replay (`replay_step`).
    keep = system.solver.keeps_stages_by_default
    fwd = forward_loop(system, fixed, StoreStages() if keep else Recorder())
    out = to_solve_output(system, fixed, fwd)
    # Every derivative reads the recorded grid: a failed solve stops here, as it does in
    # `DiscreteAdjoint`'s backward pass (with throw=True the solve raised its own error).
    grid = fail_if_differentiated_failure(system, fwd.grid, fwd.result)
    fwd = fwd._replace(grid=flag_stiff_gradient(grid, system, fwd.stats,
                                                sens.accept_stiff_steps))

    problem_dot = materialise_tangent(problem, problem_dot)

    def run(p: Problem) -> tuple[Array, Array, DenseRows, Any]:
        stages = fwd.store if keep else None
        if fwd.event is None:
            ys, q, rows = replay(system, p, fwd.grid, fwd.num_accepted, fwd.rows, stages)
            return ys, q, rows, None
        ys, q, rows, y_end = replay(system, p, fwd.grid, fwd.num_accepted, fwd.rows, stages,
                                    with_end=True)
        tau, y = replay_event(system, p, rows, fwd.event, y_end)
        # Saves after a terminal event are NaN constants.
        ys = jnp.where((direction * p.ts > fwd.event.tau)[:, None], jnp.nan, ys)
        return ys, q, rows, (direction * tau, y)

    direction = problem.direction
    (ys_r, q_r, rows_r, ev_r), (ys_dot, q_dot, rows_dot, ev_dot) = jax.jvp(
        run, (problem,), (problem_dot,))
    # Value of the solve, derivative of the replay (their values agree to round-off);
    # under an outer `jax.jvp` (e.g. `jax.hessian`) the replay carries the outer tangent.
    ys = out.ys + (ys_r - jax.lax.stop_gradient(ys_r))
    q = out.integral + (q_r - jax.lax.stop_gradient(q_r))
    event = event_dot = None
    if ev_r is not None:
        (t_r, y_r), (t_dot, y_dot) = ev_r, ev_dot
        event = out.event._replace(t=out.event.t + (t_r - jax.lax.stop_gradient(t_r)),
                                   y=out.event.y + (y_r - jax.lax.stop_gradient(y_r)))
        event_dot = EventOutput(t_dot, y_dot, None, None, None)
    dense = dense_dot = None
    if system.dense:
        dense = eqx.tree_at(
            lambda r: (r.y, r.k), out.dense,
            (out.dense.y + (rows_r.y - jax.lax.stop_gradient(rows_r.y)),
             out.dense.k + (rows_r.k - jax.lax.stop_gradient(rows_r.k))),
        )
        dense_dot = DenseRows(step=None, tau=None, h=None, y=rows_dot.y, k=rows_dot.k,
                              count=None, starts=None)
    primal = SolveOutput(ys, q, out.record, dense, event)
    tangent = SolveOutput(ys_dot, q_dot, jax.tree.map(lambda _: None, out.record), dense_dot,
                          event_dot)
    return primal, tangent


class DiscreteForward(AbstractSensitivity):
    """Forward mode through the recorded Runge–Kutta steps.

    Makes `jax.jvp` and `jax.jacfwd` work, and agrees with `DiscreteAdjoint` to
    round-off: both differentiate the computed discrete solution on its recorded grid.
    Cost of `jax.jacfwd` with ``P`` inputs: one solve plus one replay whose tangent
    arithmetic is batched over ``P`` (matrix–matrix products), the natural choice when
    there are few inputs and many outputs (e.g. a whole sensitivity trajectory).
    `jax.grad`, `jax.jacrev` and `jax.hessian` also work, by transposing the replay of
    all ``max_steps`` slots (time and memory ``O(max_steps)``, not the steps taken);
    `DiscreteAdjoint` is the faster reverse mode, and ``jax.jacfwd(jax.jacfwd(...))`` the
    Hessian whose cost follows the steps.
    ``accept_stiff_steps`` as for `DiscreteAdjoint`.  With a Newton-iterated solver
    (`Kvaerno5`) the solve keeps its stage values (``max_steps x s x N``, as
    `StoreStages`) and the replay linearises at them rather than solving them again.
    """

    accept_stiff_steps: bool = eqx.field(static=True, default=False)
    supports_dense: ClassVar[bool] = True

    def __call__(self, system: System, problem: Problem) -> SolveOutput:
        return _solve(problem, system, self)
