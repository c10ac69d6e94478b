"""Solves with events: one segment, or segments joined by jumps (and their input checks).

A solve whose events are all terminal is one call of the sensitivity method: the forward
loop stops at the first event (`_events`), and the method's derivative rule differentiates
the event time and state.

With jumps ``y+ = J(t*, y-, args)`` the solve is a sequence of such segments: segment
``k + 1`` starts at the event time ``t*_k`` of segment ``k`` from ``J(t*_k, u(t*_k))``
(an event that is only recorded, ``terminal=False`` without a jump, is the jump
``J(t, y) = y``).
The segments are the iterations of one `jax.lax.scan` of ``max_events + 1`` segments (a
solve that ends early runs empty segments, from ``t1`` to ``t1``), so reverse mode goes
through the scan to each segment's own derivative rule, and JAX differentiates the jumps:
the adjoint reaches ``y-`` through ``dJ/dy`` and the event time through ``dJ/dt`` and
the next segment's start time.  A segment that starts at an event (``System.event_start``)
is differentiated with respect to its start on its own grid, ``t* + cumsum(h)`` with the
recorded steps and a last step clipped to ``t1`` (`_start_time`): the discrete
counterpart of the saltation matrix.  Everything through events is therefore the exact
derivative of the computed solution; only the first segment's start, the user's ``t0``,
keeps the continuous rule of every solve (``dL/dt0 = -lam_0 . f(t0, y0)``).

Conditions crossing at the same instant fire in consecutive segments, the later ones of
zero length (`_events`): a segment passes on which conditions are still pending, and the
conditions that fired at the instant start the next segment at zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array
from jax.flatten_util import ravel_pytree

from ._adjoint import DiscreteAdjoint
from ._controllers import StepTo
from ._discrete_forward import DiscreteForward
from ._events import Event
from ._results import RESULTS
from ._saveat import SaveAt
from ._sensitivity_base import AbstractSensitivity, EventOutput, SolveOutput
from ._sensitivity_common import fail_when_differentiated
from ._solution import EventLog, Solution
from ._stiffness import combine_segment_stats
from ._system import Problem, System
from ._validation import save_times_valid


class EventsOutput(NamedTuple):
    """A solve with events, flat: what `solve` turns into a `Solution`."""

    ys: Array  # (n_save, N) NaN after a terminal event
    t_end: Array  # where the solve ended: a terminal event's time or t1
    y_end: Array  # (N,) the state there
    times: Array  # (K,) event times in order, NaN after the last
    states: Array  # (K, N) the state just before each event (NaN after the last)
    which: Array  # (K,) int32 the condition of each event, -1 after the last
    count: Array  # int32 number of events
    steps: Array  # (max_steps + 1,) or, with jumps, (K, max_steps + 1) per segment
    stats: dict[str, Array]
    result: RESULTS


def single_segment(sensitivity: AbstractSensitivity, system: System,
                   problem: Problem) -> EventsOutput:
    """Terminal events only: one solve that stops at the first event."""
    out = sensitivity(system, problem)
    e = out.event
    nan = jnp.full((1,), jnp.nan, e.y.dtype)
    return EventsOutput(
        ys=out.ys, t_end=e.t, y_end=e.y,
        times=jnp.where(e.fired, e.t, nan), states=jnp.where(e.fired, e.y, nan[:, None]),
        which=e.which[None], count=e.fired.astype(jnp.int32),
        steps=out.record.steps, stats=out.record.stats, result=out.record.result,
    )


def _fire_pending_at_t1(e: EventOutput, empty: Array, pending: Array, t_start: Array,
                        y_start: Array, conditions: Callable) -> EventOutput:
    """``e``, or where the segment is empty (it starts at ``t1``) and conditions are pending,
    the first of them fired at its start.

    A pending condition fires at ``theta = 0`` of the next segment's first step; from ``t1``
    to ``t1`` there is none, so of several events at one instant exactly at ``t1`` only the
    first fired (two synchronous PWM phases: one stayed on; a power-electronics test,
    2026-11-29).  Its time and state are the segment's start, differentiated as they are (the
    instant of the event before it); the others stay pending for the segments after it."""
    fire = empty & jnp.any(pending)
    first = jnp.argmax(pending).astype(jnp.int32)
    others = pending & (jnp.arange(pending.shape[0], dtype=jnp.int32) != first)
    g = jax.lax.stop_gradient(conditions(t_start, y_start))
    scale = jnp.maximum(jnp.abs(g), jnp.finfo(g.dtype).tiny)
    return e._replace(
        t=jnp.where(fire, t_start, e.t), y=jnp.where(fire, y_start, e.y),
        fired=e.fired | fire, which=jnp.where(fire, first, e.which),
        pending=jnp.where(fire, jnp.where(others, scale, 0), e.pending))


def jump_segments(
    sensitivity: AbstractSensitivity,
    system: System,
    problem: Problem,
    jumps: tuple[Any, ...],
    conditions: Any,
    max_events: int,
    recorded: tuple[bool, ...],
) -> EventsOutput:
    """Segments joined by jumps (module docstring).

    ``jumps[i](t, y)`` is the jump of condition ``i`` on the flat state in real time, or
    ``None`` for a terminal condition; ``conditions(t, y)`` all conditions, ``(E,)``.
    ``recorded[i]``: condition ``i`` is only recorded (its "jump" is the identity).
    At most ``max_events`` jumps: a further one fails with `RESULTS.max_events_reached`.
    """
    direction = problem.direction
    taus = direction * problem.ts
    tau1 = direction * problem.t1
    dtype = problem.y0.dtype
    eps = jnp.finfo(dtype).eps
    num_segments = max_events + 1
    is_jump = jnp.asarray([j is not None for j in jumps])
    is_recorded = jnp.asarray(recorded)
    branches = [(lambda t, y, j=j: y if j is None else j(t, y)) for j in jumps]
    num_cond = len(jumps)

    directions = jnp.asarray(system.event_directions, dtype)

    def rate(t, y):
        """``dg/dtau`` of every condition along the trajectory through ``(t, y)``."""
        field = system.rhs(t, y, problem.params)
        return direction * jax.jvp(conditions, (t, y), (jnp.ones_like(t), field))[1]

    def segment(carry, k):
        t_start, y_start, zero_start, pending, watch, burst, active, ys, result = carry
        tau_start = direction * t_start
        # An inactive segment is empty (t1 to t1); saves outside the segment are clipped
        # into it and not used.  The clip moves values only: a save on the segment's start
        # or end (t0, t1, an event time) keeps the whole derivative in its own time, where
        # `clip` would split it equally with the bound it meets.
        t0 = jnp.where(active, t_start, problem.t1)
        clipped = jax.lax.stop_gradient(jnp.clip(taus, direction * t0, tau1))
        ts = direction * (clipped + (taus - jax.lax.stop_gradient(taus)))  # exactly clipped
        seg_system = eqx.tree_at(
            lambda s: (s.event_zero_start, s.event_pending, s.event_watch, s.event_start),
            system, (zero_start, pending, watch, k > 0), is_leaf=lambda x: x is None)
        out: SolveOutput = sensitivity(seg_system, Problem(
            y0=y_start, params=problem.params, t0=t0, t1=problem.t1, ts=ts))
        e: EventOutput = _fire_pending_at_t1(out.event, active & (t0 == problem.t1), pending,
                                             t_start, y_start, conditions)
        fired = active & e.fired
        jumped = fired & is_jump[jnp.maximum(e.which, 0)]
        tau_end = direction * e.t
        in_segment = active & (taus >= tau_start) & (taus <= tau_end)
        ys = jnp.where(in_segment[:, None], out.ys, ys)
        y_plus = jax.lax.switch(jnp.maximum(e.which, 0), branches, e.t, e.y)
        # A condition the jump leaves at its zero (a bounce keeps the height) starts the
        # next segment at exactly zero, so its own root is not a crossing again.
        # A recorded event leaves the state where it is, at the root just located: the
        # condition starts there at zero whatever round-off is left in it (judged against
        # the step's own values, a residual of 1e-15 on the far side of zero was taken
        # for a fresh crossing, logged twice and stopped as chattering).
        # Decisions, not values: nothing here is differentiated.
        #
        # "At its zero" is judged against the larger of two scales: the condition's
        # values in the step, and what the resolution of time leaves of a root, the rate
        # before the jump times 64 ulps of time.  The second matters at the end of a Zeno
        # sequence, where each bounce's step is shorter than the last: the residuals of
        # the roots (1e-27 to 1e-24) dwarfed 64 ulps of the step's heights (1e-35), so a
        # bounce that left the ball a round-off below the floor was not watched.  In one
        # step longer than its rebound it then fell through the floor (seen on GPU).
        g_plus = jax.lax.stop_gradient(conditions(e.t, y_plus))
        time_scale = jnp.maximum(jnp.abs(tau_end), jnp.abs(tau1 - tau_start))
        rate_before = jax.lax.stop_gradient(jnp.abs(rate(e.t, e.y)))
        zero_scale = jnp.maximum(e.scale, rate_before * time_scale)
        at_zero = (jnp.abs(g_plus) <= 64 * eps * zero_scale) | is_recorded
        this = jnp.arange(num_cond, dtype=jnp.int32) == e.which
        # Events at the same instant (``burst``: the conditions that fired there, before
        # this one): conditions crossing together fire one after the other, each in its own
        # segment of zero length (`_events`).  One firing twice there, or a jump firing
        # again almost at once (a Zeno ball), ends the solve.
        span = jnp.abs(tau_end - tau_start)
        instant = span <= 64 * eps * jnp.maximum(jnp.abs(tau_end), jnp.abs(tau1 - tau_start))
        chatter = jumped & instant & jnp.any(burst & this)
        burst_next = this | (instant & burst)
        # Every condition that fired at this instant and is still at its zero starts the
        # next segment there.
        zero_next = burst_next & at_zero
        g_minus, e_pending = jax.lax.stop_gradient((conditions(e.t, e.y), e.pending))
        g_rate = jax.lax.stop_gradient(rate(e.t, y_plus))
        # Conditions that crossed at this instant and have not fired fire at the start of
        # the next segment if the jump left them at their zero, or did not move them
        # (`_events`).
        tol = 64 * eps * jnp.maximum(e_pending, jnp.abs(g_minus))
        pending_next = (e_pending > 0) & ((jnp.abs(g_plus) <= tol)
                                          | (jnp.abs(g_plus - g_minus) <= tol))
        # A condition that just fired and that its jump turned back (a bounce): watched in
        # the next segment's first step, which must not take it through its zero again.
        turned_back = jnp.where(directions == 0, g_rate != 0, directions * g_rate < 0)
        watch_next = jnp.where(zero_next & turned_back & ~is_recorded, g_rate, 0)
        seg_result = RESULTS.where(active, out.record.result, RESULTS.successful)
        result = RESULTS.where(result == RESULTS.successful, seg_result, result)
        result = RESULTS.where(chatter & (result == RESULTS.successful),
                               RESULTS.event_chattering, result)
        go_on = jumped & ~chatter & (out.record.result == RESULTS.successful)
        new = (
            jnp.where(go_on, e.t, t_start),
            jnp.where(go_on, y_plus, y_start),
            jnp.where(go_on, zero_next, zero_start),
            jnp.where(go_on, pending_next, pending),
            jnp.where(go_on, watch_next, watch),
            jnp.where(go_on, burst_next, burst),
            go_on,
            ys,
            result,
        )
        nan = jnp.full((), jnp.nan, dtype)
        log = (
            jnp.where(fired, e.t, nan), jnp.where(fired, e.y, nan), e.which, active, e.t, e.y,
            out.record.steps, out.record.stats,
        )
        return new, log

    n_save = taus.shape[0]
    no_conditions = jnp.zeros((num_cond,), bool)
    # Each segment sees the saves clipped into it, none outside: the times given are
    # checked here, against the whole interval, and invalid ones leave every segment
    # empty (a save past t1 under `jit` was NaN with a successful result; a UAT).
    saves_ok = save_times_valid(taus, direction * problem.t0, tau1)
    init = (
        problem.t0, problem.y0, no_conditions, no_conditions, jnp.zeros((num_cond,), dtype),
        no_conditions, saves_ok,
        jnp.full((n_save, problem.y0.shape[0]), jnp.nan, dtype),
        RESULTS.where(saves_ok, RESULTS.successful, RESULTS.invalid_save_times),
    )
    final, log = jax.lax.scan(segment, init, jnp.arange(num_segments, dtype=jnp.int32))
    times, states, which, active, t_ends, y_ends, steps, stats = log
    _, _, _, _, _, _, still_going, ys, result = final
    result = RESULTS.where(still_going & (result == RESULTS.successful),
                           RESULTS.max_events_reached, result)
    # The end of the last active segment.
    last = jnp.sum(active.astype(jnp.int32)) - 1
    t_end, y_end = t_ends[last], y_ends[last]
    # A solve stopped by too many or chattering events did not reach t1: with
    # `saveat=None` it reports y(t1) as NaN, as a solve out of `max_steps` does (it gave
    # the state before the last jump, at that event's time).
    cut_short = (result == RESULTS.max_events_reached) | (result == RESULTS.event_chattering)
    t_end = jnp.where(cut_short, problem.t1, t_end)
    y_end = jnp.where(cut_short, jnp.nan, y_end)
    # Empty segments (after the end) spend a few evaluations on their start: not counted.
    stats = combine_segment_stats(stats, active)
    if system.throw:
        ys, t_end, y_end, times, states = result.error_if(
            (ys, t_end, y_end, times, states), result != RESULTS.successful)
        # Read off a checked value (the same numbers), so that a program reading only the
        # stats runs the check too.
        stats = jax.tree.map(lambda x: jnp.where(jnp.isnan(t_end), 0, x), stats)
    # Events in order (every active segment but the last ends with one), counted on their
    # times (NaN where none fired): with ``throw`` those are checked, so that a program
    # reading only the count or the conditions runs the check too (it got a count of 6
    # from `max_events=5` without an error).
    count = jnp.sum(~jnp.isnan(times), dtype=jnp.int32)
    which = jnp.where(jnp.isnan(times), -1, which)
    # Each segment's own pass refuses its own failure; reaching `max_events` or chattering
    # is decided here, after segments that succeeded.
    ys, t_end, y_end, times, states = fail_when_differentiated(
        system, (ys, t_end, y_end, times, states), result)
    return EventsOutput(ys=ys, t_end=t_end, y_end=y_end, times=times, states=states,
                        which=which, count=count, steps=steps, stats=stats, result=result)


def checked_condition(i: int, cond: Callable, t0: Array, y0: Any, args: Any) -> Callable:
    """``events[i].cond`` after checking at trace time that it returns a real scalar."""
    try:
        out = eqx.filter_eval_shape(cond, t0, y0, args)
    except Exception as e:  # noqa: BLE001 - re-raised with context
        raise type(e)(f"calling `events[{i}].cond(t0, y0, args)` failed: {e}") from e
    if not (hasattr(out, "shape") and out.shape == () and jnp.issubdtype(out.dtype, jnp.floating)):
        shape = getattr(out, "shape", type(out).__name__)
        dtype = getattr(out, "dtype", "")
        raise ValueError(f"`events[{i}].cond` must return a real floating scalar, got "
                         f"{shape} {dtype}".rstrip())
    return cond


def check_events(events: tuple[Event, ...], saveat: SaveAt, sensitivity: AbstractSensitivity,
                 integrand: Any, controller: Any, max_events: int) -> None:
    """What events do not support (yet): a clear error, not a wrong answer."""
    if not isinstance(sensitivity, (DiscreteAdjoint, DiscreteForward)):
        raise ValueError(f"`events` are not supported with `sensitivity="
                         f"{type(sensitivity).__name__}()` yet: use `DiscreteAdjoint` (the "
                         "default) or `DiscreteForward`")
    if integrand is not None:
        raise ValueError("`integrand` is not supported with `events` yet: add the integral "
                         "as an extra state component")
    if saveat.dense:
        raise ValueError("`SaveAt(dense=True)` is not supported with `events` yet: pass the "
                         "times you need as `saveat` times")
    if not isinstance(max_events, int) or isinstance(max_events, bool) or max_events < 1:
        raise ValueError(f"`max_events` must be a positive integer, got {max_events!r}")
    if any(not e.terminal for e in events) and isinstance(controller, StepTo):
        raise ValueError("`controller=StepTo(ts)` cannot restart after a jump: use an "
                         "adaptive controller or `ConstantStep`")
    if any(not e.terminal for e in events) and saveat.land_on_ts:
        # Steps clipped to save times after a jump would move with the event time in a way
        # the restart's derivative (`_start_time`) does not follow.
        raise ValueError("`SaveAt(land_on_ts=True)` is not supported yet with events that "
                         "restart the solve (a jump, or `terminal=False`): save times are "
                         "interpolated exactly (the default `SaveAt(ts)`)")


def checked_jump(i: int, jump: Callable, t0: Array, y0: Any, args: Any) -> None:
    """A jump must return a state of ``y0``'s structure, shapes and dtypes."""
    try:
        out = eqx.filter_eval_shape(jump, t0, y0, args)
    except Exception as e:  # noqa: BLE001 - re-raised with context
        raise type(e)(f"calling `events[{i}].jump(t, y, args)` failed: {e}") from e
    want = jax.tree.map(lambda x: (x.shape, x.dtype), y0)
    got = jax.tree.map(lambda x: (getattr(x, "shape", None), getattr(x, "dtype", None)), out)
    if jax.tree.structure(out) != jax.tree.structure(y0) or want != got:
        raise ValueError(f"`events[{i}].jump` must return a state like `y0` (same structure, "
                         f"shapes and dtypes): expected {want}, got {got}")


def solve_events(system: System, problem: Problem, sensitivity: AbstractSensitivity,
                 events: tuple[Event, ...], saveat: SaveAt, ts: Array, args: Any,
                 unravel_y: Callable, y0_flat: Array, max_events: int) -> Solution:
    """`solve` with event conditions: one segment, or segments joined by jumps."""
    if all(e.terminal for e in events):
        out = single_segment(sensitivity, system, problem)
    else:
        y0 = unravel_y(y0_flat)
        for i, e in enumerate(events):
            if e.jump is not None:
                checked_jump(i, e.jump, problem.t0, y0, args)

        def flat_jump(event):
            if event.terminal:
                return None
            if event.jump is None:
                return lambda t, y: y  # recorded only: the solve goes on from u(t*)
            return lambda t, y: ravel_pytree(event.jump(t, unravel_y(y), args))[0]

        def conditions(t, y):
            return system.conditions(problem.direction * t, y, problem.params,
                                     problem.direction)

        jumps = tuple(flat_jump(e) for e in events)
        recorded = tuple(not e.terminal and e.jump is None for e in events)
        out = jump_segments(sensitivity, system, problem, jumps, conditions, max_events,
                            recorded)
    if saveat.ts is None:
        ts, ys = out.t_end[None], out.y_end[None]
    else:
        ys = out.ys
    log = EventLog(times=out.times, ys=jax.vmap(unravel_y)(out.states), which=out.which,
                   count=out.count)
    return Solution(
        ts=ts, ys=jax.vmap(unravel_y)(ys), steps=jax.lax.stop_gradient(out.steps),
        integral=None, stats=out.stats, result=out.result, events=log,
    )
