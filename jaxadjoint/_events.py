"""Events: a zero crossing of ``g(t, y, args)`` located on the solver's continuous extension.

After every accepted step from ``t_n`` to ``t_{n+1}`` the forward loop compares the sign
of each condition at the two ends of the step (``g(t_n, y_n)`` and ``g(t_{n+1},
y_{n+1})``).  A change of sign in the condition's direction is an event.  Its time is the
root of

    phi(theta) = g(t_n + theta h, u(theta)),    u(theta) = y_n + h sum_m b_m(theta) k_m,

on the step's continuous extension ``u`` (`_dense`), found by a bracketed Newton iteration
(`locate_roots`) converged to round-off in ``theta``.  Of several conditions crossing in
one step the earliest root wins; the solve (or the segment, for events with a jump) stops
there, and the event state is ``u(t*)``.  A condition that crosses zero and back within
one step has the same sign at both ends and is not seen: the steps must resolve it (lower
``rtol``/``atol`` or ``dt0``).

**Simultaneous crossings.**  Roots within the resolution of time (16 ulps of ``t``) of the
earliest are one instant, and the first of them in the order of `events` fires.  Another
condition crossed in the step at that instant, or at or past its zero at ``u(t*)`` within
round-off (64 ulps of its scale in the step), is *pending*: the next segment starts at
``t*`` from the state after the jump, and if the jump left the condition at its zero or
did not move it, it fires at ``theta = 0`` of that segment's first step, whatever the step
does next (a recorded crossing of a ball's height still counts after the bounce reversed
the ball).  Each such event is a root of its own condition, so the implicit function
theorem below differentiates it as any other: two identical balls bouncing together get
each ball's own derivative.  A jump that moves another condition off its zero does not
fire it (events are crossings of the trajectory, not of the jumps).

**A rebound shorter than a step.**  A condition that its jump leaves at zero and turns
back (a bounce: its rate of change along the trajectory after the jump points away from
the side it crossed to) is watched in the next segment's first step: ending that step
through its zero again, it rebounded and came back within one step, which no sign change
shows (a ball coming to rest, whose bounces shrink geometrically).  The solve then stops
with `RESULTS.event_chattering` rather than let the ball fall through the floor.

**Derivative.**  ``t*`` solves ``g(t*, u(t*; y_n, k, p), p) = 0`` on the *computed*
interpolant, so by the implicit function theorem, with ``gdot = dg/dt + dg/dy . u'(t*)``,

    dt* = -(dg/dy . du|_t + dg/dp . dp) / gdot.

In the reverse pass a cotangent ``tbar`` of ``t*`` (its own plus ``ybar . u'(t*)`` from the
event state) therefore becomes a cotangent ``-(tbar / gdot) dg/dy`` of ``u(t*)`` at a fixed
time (a save, which the dense-output machinery carries to the step's ``y_n`` and slopes)
and ``-(tbar / gdot) dg/dp`` of the parameters (`event_cotangents`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from ._dense import DenseRows
from ._user_warning import warn

_DIRECTIONS = {1: 1, -1: -1, 0: 0, "rising": 1, "falling": -1, "either": 0}


class Event(eqx.Module):
    """A zero crossing of ``cond(t, y, args)`` that stops the solve, makes the state jump, or
    is recorded.

    Arguments:
        cond: ``cond(t, y, args)``, returning a real scalar.  May close over arrays (they
            are differentiated, as those of ``rhs`` are).
        direction: which crossings count: ``"rising"`` (or ``1``: from negative to
            non-negative), ``"falling"`` (``-1``: from positive to non-positive) or
            ``"either"`` (``0``, the default), as the solve proceeds (for ``t1 < t0``,
            as time runs backwards).
        jump: ``None`` (the default), or ``jump(t, y, args)`` returning the state just after
            the event (same structure, shapes and dtypes as ``y``), from which integration
            continues.
        terminal: whether the solve stops at the event.  By default, when there is no
            ``jump``.  ``terminal=False`` without a ``jump`` *records* the event (its time,
            state and condition in ``sol.events``) and integration goes on from the same
            state (restarted at the event time: a new segment, as after a jump).

    The event time is located on the solver's continuous extension and differentiated
    exactly (implicit function theorem on the computed interpolant); see `solve`.

    A crossing needs a sign change after ``t0``: a condition that is exactly zero at ``t0``
    does not fire there (nor when it then moves away from zero).  Conditions crossing at
    the same instant (within round-off) fire one after the other in the order of
    ``events``, each in a segment of zero length and differentiated by its own condition;
    a later one fires if it is still at its zero after the earlier ones' jumps.  A terminal
    one ends the solve when its turn comes.
    """

    cond: Callable[[Array, Any, Any], Any]
    direction: int = eqx.field(static=True)
    jump: Callable[[Array, Any, Any], Any] | None
    terminal: bool = eqx.field(static=True)

    def __init__(self, cond: Callable, direction: int | str = 0, jump: Callable | None = None,
                 terminal: bool | None = None):
        self.cond = cond
        self.direction = _direction(direction)
        self.jump = jump
        self.terminal = jump is None if terminal is None else terminal
        _check_scipy_attributes(cond, self.direction, self.terminal)

    def __check_init__(self) -> None:
        if not callable(self.cond):
            raise TypeError(f"`Event.cond` must be callable as cond(t, y, args), got "
                            f"{type(self.cond).__name__}")
        if self.jump is not None and not callable(self.jump):
            raise TypeError(f"`Event.jump` must be None or callable as jump(t, y, args), got "
                            f"{type(self.jump).__name__}")
        if not isinstance(self.terminal, bool):
            raise TypeError(f"`Event.terminal` must be None, True or False, got "
                            f"{self.terminal!r}")
        if self.terminal and self.jump is not None:
            raise ValueError("`Event(..., jump=J, terminal=True)`: an event with a `jump` "
                             "continues the solve; drop `jump` for an event that stops it")


def _check_scipy_attributes(cond: Any, direction: int, terminal: bool) -> None:
    """Refuse a ``cond`` whose scipy-style ``terminal``/``direction`` attributes (as
    ``solve_ivp`` reads them) say otherwise than the `Event`: they are not read, and a
    ported event would silently stop where scipy's went on (terminal is scipy's opt-in,
    and our default without a jump), or fire on crossings scipy's ignored."""
    said = []
    wanted = getattr(cond, "terminal", None)
    if isinstance(wanted, int):  # bool included
        if not isinstance(wanted, bool) and wanted > 1:
            raise ValueError(f"`cond.terminal = {wanted}` (scipy's stop after {wanted} "
                             "occurrences) has no equivalent: record the events "
                             "(`Event(cond, terminal=False)`) and count `sol.events`")
        if bool(wanted) != terminal:
            said.append(f"terminal={bool(wanted)}")
    wanted = getattr(cond, "direction", None)
    if isinstance(wanted, (int, float)) and not isinstance(wanted, bool):
        sign = (wanted > 0) - (wanted < 0)
        if sign != direction:
            said.append(f"direction={sign}")
    if said:
        raise ValueError(
            f"`Event.cond` has the attribute(s) {', '.join(said)} (scipy's solve_ivp "
            f"convention), which `Event` does not read; this Event has terminal={terminal}, "
            f"direction={direction}. Pass them to the Event: "
            f"`Event(cond, {', '.join(said)})`.")


def _direction(d: Any) -> int:
    if isinstance(d, bool) or d not in _DIRECTIONS:
        raise ValueError(f"`Event.direction` must be 'rising', 'falling', 'either' (or 1, -1, "
                         f"0), got {d!r}")
    return _DIRECTIONS[d]


def as_events(events: Any) -> tuple[Event, ...]:
    """``events=`` of `solve` as a tuple of `Event` (``None``: no events)."""
    if events is None:
        return ()
    if isinstance(events, Event):
        return (events,)
    if isinstance(events, Sequence) and all(isinstance(e, Event) for e in events):
        if not events:
            raise ValueError("`events` must not be an empty sequence (pass None for no events)")
        return tuple(events)
    raise TypeError(f"`events` must be a jaxadjoint.Event or a sequence of them, got {events!r}")


def warn_of_roots_at_start(events: tuple[Event, ...], t0: Array, y0: Any, args: Any) -> None:
    """Warn, on concrete values, for each event whose condition is exactly 0 at ``t0`` (the
    solve's start time, an array in the state's dtype).

    Events fire where their condition crosses zero inside the solve; one that starts on its
    root does not fire there.  A dosing table that starts at ``t = 0`` written as events
    ``t - T_i`` lost its first dose without a word, and the concentrations were wrong until
    the second (a pharmacometrician's acceptance test, 2026-12-07).  Only where every value
    is concrete (a direct call): under `jax.jit` the condition's value is not known.
    """
    for i, event in enumerate(events):
        try:
            g = float(event.cond(t0, y0, args))
        except Exception:  # noqa: BLE001 - the traced checks report bad conditions
            continue
        if g == 0.0:
            warn(f"`events[{i}]`'s condition is 0 at t0 = {float(t0):g}: an event fires "
                 "where its condition crosses zero after t0, so this one does not fire (nor "
                 "jump) at t0. Apply a jump at the start (a dose at t0) to `y0` yourself; "
                 "a condition that starts on its root fires at its next crossing.")


def crossings(g_start: Array, g_end: Array, directions: tuple[int, ...]) -> Array:
    """``(E,)`` whether each condition crosses zero in its direction over a step.

    Rising: from ``< 0`` to ``>= 0``; falling: from ``> 0`` to ``<= 0``.  A condition that
    starts the step at exactly zero does not cross (it fired at the step's start).
    """
    d = jnp.asarray(directions)
    rising = (g_start < 0) & (g_end >= 0)
    falling = (g_start > 0) & (g_end <= 0)
    return ((d >= 0) & rising) | ((d <= 0) & falling)


MAX_ROOT_ITERATIONS = 64


def locate_roots(phi: Callable[[Array], Array], crossed: Array, f0: Array, dtype: Any) -> Array:
    """``(E,)`` roots in ``[0, 1]`` of the ``E`` scalar functions ``phi(theta)_i``.

    ``phi`` maps ``(E,)`` thetas to ``(E,)`` values, component ``i`` depending on
    ``theta_i`` only; ``f0 = phi(0)``.  For each ``crossed`` condition the bracket
    ``[0, 1]`` holds a sign change; a Newton step from the latest iterate (its derivative
    by `jax.jvp`) is taken when it stays strictly inside the current bracket, a bisection
    otherwise, until a step moves ``theta`` by at most a few ulps (at most
    `MAX_ROOT_ITERATIONS`, which bisection alone would need to reach round-off).
    Conditions not crossed get ``theta = 1``.
    """
    eps = jnp.finfo(dtype).eps
    one = jnp.ones_like(f0)
    f1 = phi(one)
    # Regula falsi start (the root of the chord); the bracket is [lo, hi] with f(lo) of
    # the sign of f0.
    denom = jnp.where(f1 != f0, f1 - f0, 1)
    x0 = jnp.clip(jnp.where(f1 != f0, -f0 / denom, 0.5), 0, 1)

    def body(carry):
        i, x, lo, hi, done = carry
        fx, dfx = jax.jvp(phi, (x,), (one,))
        same = jnp.sign(fx) == jnp.sign(f0)
        lo = jnp.where(same, x, lo)
        hi = jnp.where(same, hi, x)
        newton = x - fx / jnp.where(dfx != 0, dfx, 1)
        inside = (dfx != 0) & (newton > lo) & (newton < hi) & jnp.isfinite(newton)
        x_new = jnp.where(inside, newton, 0.5 * (lo + hi))
        x_new = jnp.where(fx == 0, x, x_new)
        converged = (jnp.abs(x_new - x) <= 4 * eps) | (hi - lo <= 4 * eps) | (fx == 0)
        x_new = jnp.where(done, x, x_new)
        return i + 1, x_new, lo, hi, done | converged

    def cond(carry):
        i, _, _, _, done = carry
        return (i < MAX_ROOT_ITERATIONS) & ~jnp.all(done)

    init = (jnp.int32(0), x0, jnp.zeros_like(f0), one, ~crossed)
    _, x, _, _, _ = jax.lax.while_loop(cond, body, init)
    return jnp.where(crossed, jnp.clip(x, 0, 1), one)


def event_state(weights: Any, rows: DenseRows, row: Array, tau: Array) -> Array:
    """``u(tau)`` on dense-output row ``row``: the state at the event, ``(N,)``.

    The interpolant's arithmetic (`_dense.interpolate`), differentiable in the row's time
    and size too: a segment restarted at an event moves its rows with its start
    (`_start_time`).
    """
    h = rows.h[row][None]
    theta = (tau[None] - rows.tau[row][None]) / h
    return weights.combine(theta, rows.y[row][None], h, rows.k[row][None])[0]


def event_cotangents(
    weights: Any,
    rows: DenseRows,
    row: Array,
    tau: Array,
    condition: Callable[[Array, Array, Any], Array],
    params: Any,
    tau_bar: Array,
    y_bar: Array,
    fired: Array,
) -> tuple[Array, Array, Any, Array, Array]:
    """Cotangents from the event outputs ``(tau*, u(tau*))`` (module docstring).

    ``condition(tau, y, params)`` is the condition that fired, in internal time.  Returns
    ``(ybar_rows, kbar_rows, pbar, tau_bar_total, time_bar)``: the cotangents of every
    row's ``y_n`` and slopes (nonzero on ``row`` only), of the parameters (through the
    condition), the total cotangent of ``tau*`` (its own plus ``y_bar . u'(tau*)``), which
    is what a solve that did not fire passes on to ``t1``, and, where an event fired, the
    cotangent of ``tau*`` as the time at which the row is read, ``ubar . u'(tau*)`` with
    ``ubar`` the cotangent of ``u(tau*)`` at fixed time (what moving the row costs,
    `_start_time`).  Where ``fired`` is false the implicit function theorem is skipped.
    """

    def value(y, k, t):
        new = eqx.tree_at(lambda r: (r.y, r.k), rows, (y, k))
        return event_state(weights, new, row, t)

    u, vjp = jax.vjp(value, rows.y, rows.k, tau)
    slope = jax.jvp(lambda t: value(rows.y, rows.k, t), (tau,), (jnp.ones_like(tau),))[1]
    tau_total = tau_bar + jnp.vdot(y_bar, slope)
    g, g_vjp = jax.vjp(condition, tau, u, params)
    dg_dtau, dg_dy, dg_dp = g_vjp(jnp.ones_like(g))
    gdot = dg_dtau + jnp.vdot(dg_dy, slope)
    # A grazing event (gdot = 0) has no derivative: the division gives inf, not a guess.
    w = jnp.where(fired, -tau_total / jnp.where(fired, gdot, 1), 0)
    u_bar = y_bar + w * dg_dy
    ybar_rows, kbar_rows, _ = vjp(u_bar)
    pbar = jax.tree.map(lambda x: w * x, dg_dp)
    time_bar = jnp.where(fired, jnp.vdot(u_bar, slope), 0)
    return ybar_rows, kbar_rows, pbar, jnp.where(fired, 0, tau_total), time_bar
