"""The exact derivative of a segment with respect to its start, when it starts at an event.

A solve with jumps restarts at each event time ``t*`` (`_segments`).  The restarted
segment's grid is ``t_n = t* + h_0 + ... + h_{n-1}``, its recorded step sizes ``h_i`` held
constant as the discrete adjoint holds every decision of the controller constant, except
a last step clipped to end on ``t1``: its size ``t1 - t_{N-1}`` shrinks as ``t*`` grows.
So ``t*`` enters the computed solution through

- the times of the stages, ``t_n + c_m h_n`` (a non-autonomous right-hand side);
- the dense-output rows: a save, or the next event, at time ``tau`` on the row of step
  ``n`` is read at ``theta = (tau - t_n) / h_n``;
- the clipped last step.

In internal time (`_system`), moving every grid point by ``d`` with the steps kept is a
shift of time, whose derivative is

    T = direction * sbar - sum_p ubar_p . u'(tau_p)

``sbar`` is the cotangent of an offset ``s`` added to every (real) time argument of the
right-hand side: the reverse sweep computes it as one more parameter (`StartShifted`).
The sum runs over the points read on the rows of the steps (saves, and the event, whose
``ubar`` includes its implicit derivative, `_events.event_cotangents`): each is read at a
``theta`` smaller by ``d / h``.  A condition is not shifted: it is evaluated at the event
time itself, which the implicit derivative moves.  The last grid point ``t_N = t1`` of a
clipped step stays: its own derivative

    H = lam_N . dy_N/dh + kbar . (dk/dh + k / h) - sum_{p on its row} theta_p ubar_p . u'(tau_p)

comes off.  ``y_N`` and the last row's slopes ``k`` as functions of the step size are
differentiated by one `jax.jvp` of the step (the solver's own, which covers the stage
times ``t_n + c_m h`` too); ``kbar`` is the slopes' cotangent from the points on the row
and ``lam_N`` the final state's; the ``k / h`` and ``theta`` terms are the interpolant's
own dependence on ``h``.  So ``dL/dtau* = T - H`` when the last step was clipped to ``t1``
(an event may have fired in it) and ``T`` otherwise.  Points on the final state's row lie
at ``t_N`` and move with it: they are in neither sum.  Every term is the derivative of
what was computed: the reverse pass (`restart_cotangent`) and the forward-mode replay,
which moves the recorded grid instead (`moved_record`), agree with a replay on the grid
``t* + cumsum(h)`` differentiated by JAX to round-off (`tests/test_events.py`).

The first segment starts at the user's ``t0``, whose derivative keeps the rule of every
solve (``dL/dt0 = -lam_0 . f(t0, y0)``, DESIGN).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from ._dense import DenseRows, row_slopes, save_rows
from ._save_cotangents import SaveCotangents, row_slopes_cotangent, row_state_cotangent
from ._system import Problem, System


class StartShifted(System):
    """A `System` whose parameters are ``(params, s)``: every time argument of ``rhs`` and
    ``integrand`` becomes ``t + s``.

    With ``s = 0`` the values are the system's, bitwise; the cotangent of ``s`` is the
    derivative with respect to shifting every stage time (in real time).
    """

    def rhs(self, t: Array, y: Array, params: Any) -> Array:
        params, s = params
        return super().rhs(t + s, y, params)

    def integrand(self, t: Array, y: Array, params: Any) -> Array:
        params, s = params
        return super().integrand(t + s, y, params)

    def condition(self, i: int, tau: Array, y: Array, params: Any, direction: Array) -> Array:
        params, _ = params
        return super().condition(i, tau, y, params, direction)


def start_shifted(system: System, problem: Problem) -> tuple[StartShifted, Problem]:
    """``system`` as a `StartShifted` and ``problem`` with parameters ``(params, 0)``."""
    fields = {f.name: getattr(system, f.name) for f in dataclasses.fields(system)}
    zero = jnp.zeros_like(problem.t0)
    shifted = Problem(y0=problem.y0, params=(problem.params, zero), t0=problem.t0,
                      t1=problem.t1, ts=problem.ts)
    return StartShifted(**fields), shifted


def _landed(grid: Array, num_accepted: Array, tau1: Array) -> Array:
    """Whether the last accepted step was clipped to end on ``t1``: it ends there exactly."""
    return (num_accepted > 0) & (grid[num_accepted] >= tau1)


def restart_cotangent(
    system: System,
    params: Any,
    direction: Array,
    rows: DenseRows,
    grid: Array,
    num_accepted: Array,
    tau1: Array,
    saves: SaveCotangents,
    taus: Array,
    taus_bar: Array,
    event_row: Array,
    event_tau: Array,
    event_time_bar: Array,
) -> Array:
    """``dL/dtau*`` of a restarted segment through its grid (internal time): ``T`` without
    its ``sbar`` term, less ``H`` if the last step was clipped (module docstring).

    ``taus_bar`` is each save's ``ybar . u'(tau)`` (`_dense.save_cotangents`) and
    ``event_time_bar`` the event's ``ubar . u'(tau*)`` (zero if none fired).  The forward
    loop gives a restarted segment's clipped last step a row (`_forward`): it is the one
    before the final state's.
    """
    last = rows.count - 1  # the final state's row
    index = save_rows(rows)
    moved = -jnp.sum(jnp.where(index < last, taus_bar, 0)) - event_time_bar

    r = jnp.maximum(last - 1, 0)
    landed = _landed(grid, num_accepted, tau1) & (rows.step[r] == num_accepted - 1)
    t_r, h_r, y_r = rows.tau[r], rows.h[r], rows.y[r]
    solver, plan = system.solver, system.stage_plan

    def f(tau, y):
        return system.field(tau, y, params, direction)

    def last_step(h):
        # The forward loop's step and row, with the end time t_r + h (that is, t1).
        step = solver.step(f, t_r, y_r, h, f(t_r, y_r), t_r + h)
        k_next = step.ks[-1] if solver.fsal else f(t_r + h, step.y_new)
        return step.y_new, row_slopes(plan, f, t_r, h, y_r, step.ks, k_next, jnp.array(True))

    _, (y_dot, k_dot) = jax.jvp(last_step, (h_r,), (jnp.ones_like(h_r),))
    theta = (taus - rows.tau[index]) / rows.h[index]
    theta_event = (event_tau - t_r) / h_r
    on_row = jnp.sum(jnp.where(index == r, theta * taus_bar, 0))
    on_row = on_row + jnp.where(event_row == r, theta_event * event_time_bar, 0)
    ybar_last = row_state_cotangent(saves, last, single=True)
    kbar_r = row_slopes_cotangent(saves, r, single=True)
    clipped = jnp.vdot(ybar_last, y_dot) + jnp.vdot(kbar_r, k_dot + rows.k[r] / h_r) - on_row
    return moved - jnp.where(landed, clipped, 0)


def moved_record(
    grid: Array, num_accepted: Array, rows: DenseRows, tau1: Array, shift: Array
) -> tuple[Array, DenseRows]:
    """The recorded grid and rows of a segment restarted ``shift`` later (internal time).

    Every grid point moves except a last one clipped to ``t1``; the rows move with their
    steps (the final state's row with ``t_N``).  ``shift`` is zero in value (the record
    is bitwise unchanged) and carries the start time's tangent, so that a replay on the
    moved record (`_discrete_forward`) differentiates the restart exactly.
    """
    slots = jnp.arange(grid.shape[0], dtype=num_accepted.dtype)
    moves = (slots < num_accepted) | ((slots == num_accepted)
                                      & ~_landed(grid, num_accepted, tau1))
    offset = jnp.where(moves, shift, jnp.zeros_like(shift))
    last_slot = grid.shape[0] - 1
    start = offset[jnp.clip(rows.step, 0, last_slot)]
    end = offset[jnp.clip(rows.step + 1, 0, last_slot)]
    final = rows.step >= num_accepted  # the final state's row: h is a placeholder
    moved = eqx.tree_at(lambda r: (r.tau, r.h), rows,
                        (rows.tau + start, rows.h + jnp.where(final, 0, end - start)))
    return grid + offset, moved


def interpolate_moved(weights: Any, rows: DenseRows, taus: Array) -> Array:
    """`_dense.interpolate` at the save times, differentiable in the rows' times and sizes
    too (rows from `moved_record`)."""
    index = save_rows(rows)
    h = rows.h[index]
    ys = weights.combine((taus - rows.tau[index]) / h, rows.y[index], h, rows.k[index])
    last = jax.lax.stop_gradient(rows.tau[jnp.maximum(rows.count - 1, 0)])
    return jnp.where((taus > last)[:, None], jnp.nan, ys)
