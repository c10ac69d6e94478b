"""`DiscreteAdjoint`: the exact reverse-mode derivative of the computed solution.

The forward pass runs the adaptive loop once and records the accepted grid (and what
the checkpoint strategy keeps).  The backward pass, attached with
`equinox.filter_custom_vjp`, replays the recorded steps backwards with the hand-derived
reverse step of `_reverse.py`.  The grid is a constant of the computation, so the result
is the derivative of exactly what was computed, to round-off.

Saves are evaluated on the continuous extension of their step (`_dense`): their
cotangents go to the step's start state and, with weights ``h b_m(theta)``, to its stage
slopes, which the sweep adds when it reverses that step.  The derivative with respect to
a save time is the interpolant's time derivative.  ``t0`` and ``t1`` use the continuous
formulas ``dL/dt0 = -lam_0 . f(t0, y0) - mu . R(t0, y0)`` and ``dL/dt1 = mu . R(t1, y(t1))``
(plus the save at ``t1`` when ``saveat`` is ``None``, whose time is ``t1``), except the
start of a segment restarted at an event, which is differentiated on its grid
(`_start_time`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from ._adjoint_health import all_finite, raise_if_blown_up, raise_if_unresolved
from ._checkpoints import AbstractCheckpoint, StoreStages, StoreStates
from ._dense import DenseRows, live_save_cotangents, save_cotangents
from ._events import event_cotangents
from ._forward import EventRecord, ForwardOutput, Recorder, forward_loop, padded_grid
from ._results import RESULTS
from ._reverse import SaveCotangents, last_end_stage_adjoint, tree_add
from ._sensitivity_base import AbstractSensitivity, EventOutput, Record, SolveOutput
from ._sensitivity_common import fail_if_differentiated_failure
from ._start_time import restart_cotangent, start_shifted
from ._stiffness import flag_stiff_gradient
from ._system import Problem, System
from ._time_switches import warn_if_differentiating_a_switch_time


def to_solve_output(system: System, problem: Problem, out: ForwardOutput) -> SolveOutput:
    """Package a forward pass: grid back to real time, failures raised if ``throw``.

    The failure check runs here, inside the (non-differentiated) forward computation,
    so that it never has to be differentiated itself.
    """
    steps = padded_grid(problem.direction * out.grid, out.num_accepted)
    ys, integral, result = out.ys, out.integral, out.result
    dense = out.rows if system.dense else None
    event = None
    if out.event is not None:
        e = out.event
        event = EventOutput(problem.direction * e.tau, e.y, e.fired, e.which,
                            jax.lax.stop_gradient(e.scale), jax.lax.stop_gradient(e.pending))
    stats = out.stats
    if system.throw:
        # The statistics too: a program that reads only them (integers, `sol.stats`)
        # otherwise got a failed solve's counts without an error.  (Not ``steps``: tied,
        # its padding could no longer be dropped where it is not read, `padded_grid`.)
        ys, integral, dense, event, stats = result.error_if(
            (ys, integral, dense, event, stats), result != RESULTS.successful
        )
    return SolveOutput(ys, integral, Record(steps, stats, result), dense, event)


def plain_solve(system: System, problem: Problem) -> SolveOutput:
    """The forward solve with nothing recorded for a reverse pass: every method's primal."""
    return to_solve_output(system, problem, forward_loop(system, problem, Recorder()))


@eqx.filter_custom_vjp
def _solve(problem: Problem, system: System, sens: DiscreteAdjoint) -> SolveOutput:
    del sens
    return plain_solve(system, problem)


@_solve.def_fwd
def _solve_fwd(perturbed, problem, system, sens):
    warn_if_differentiating_a_switch_time(system.rhs, problem.t0, problem.y0, problem.params,
                                          perturbed.params)
    out = forward_loop(system, problem, sens.checkpoint_for(system.solver))
    residuals = (
        out.store, out.grid, out.num_accepted, out.rows, out.y_final, out.integral, out.result,
        out.stats, out.event,
    )
    return to_solve_output(system, problem, out), residuals


def _dense_cotangent(dense_bar: DenseRows | None) -> tuple[Array | None, Array | None]:
    """``(ybar, kbar)`` of the dense-output rows returned to the user (``None`` if unused)."""
    if dense_bar is None:
        return None, None
    return dense_bar.y, dense_bar.k


@_solve.def_bwd
def _solve_bwd(residuals, grad_obj, perturbed, problem, system, sens):
    store, grid, num_accepted, rows, y_final, integral, result, stats, event = residuals
    checkpoint = sens.checkpoint_for(system.solver)
    ys_bar, integral_bar, _, dense_bar, event_bar = grad_obj
    # A segment restarted at an event: the exact derivative of its start time needs that of
    # a shift of every stage time, one more parameter (`_start_time`).
    restart = system.event_start is not None and bool(perturbed.t0)
    if restart:
        system, problem = start_shifted(system, problem)
    params, direction = problem.params, problem.direction
    taus = direction * problem.ts
    # Outputs the loss does not use have no cotangent: they contribute zero.
    if ys_bar is None:
        ys_bar = jnp.zeros(taus.shape + y_final.shape, y_final.dtype)
    mu = jnp.zeros_like(integral) if integral_bar is None else integral_bar
    ys_bar = fail_if_differentiated_failure(system, ys_bar, result)
    ys_bar = flag_stiff_gradient(ys_bar, system, stats, sens.accept_stiff_steps)

    # Saves are evaluated on the dense-output rows: their cotangents go to the rows'
    # states and slopes, which the sweep adds when it reverses the rows' steps.
    plan = system.stage_plan
    if event is not None:
        # Saves after a terminal event are NaN constants.
        ys_bar = jnp.where((taus > event.tau)[:, None], 0, ys_bar)
    ys_bar = live_save_cotangents(rows, taus, ys_bar)
    given_finite = all_finite(ys_bar, integral_bar, dense_bar, event_bar)
    interpolating = system.interpolate_saves or system.dense
    pending, taus_bar = save_cotangents(plan.weights, rows, taus, ys_bar, interpolating,
                                        bool(perturbed.ts) or restart)
    # Cotangents given per row: of the dense output the user read, and of an event.
    ybar = kbar = None
    if system.dense:
        ybar, kbar = _dense_cotangent(dense_bar)
    pbar = jax.tree.map(jnp.zeros_like, params)
    t1_event_bar = event_time_bar = None
    if event is not None:
        ybar_e, kbar_e, pbar, t1_event_bar, event_time_bar = _event_cotangents(
            system, problem, rows, event, event_bar)
        ybar = ybar_e if ybar is None else ybar + ybar_e
        kbar = kbar_e if kbar is None else kbar + kbar_e
    saves = SaveCotangents(rows.step, rows.count, ybar, kbar if interpolating else None,
                           pending)

    lam = jnp.zeros_like(problem.y0)
    end = last_end_stage_adjoint(system, params, direction, saves, grid[num_accepted],
                                 y_final, num_accepted)
    if end is not None:
        lam, end_pbar = end
        pbar = tree_add(pbar, end_pbar)
    lam, pbar, health = checkpoint.reverse(
        system, params, direction, store, grid, num_accepted, lam, pbar, mu, saves
    )
    lam, pbar = raise_if_blown_up(health, lam, pbar, direction, given_finite)
    # Tied to both: a check tied to ``lam`` alone was dropped by XLA when only parameters
    # were differentiated (``dL/dy0`` unused), and a gradient 1e26 times too large was
    # returned (a neural field turned stiff, acceptance test 2026-12-07).
    lam, pbar = raise_if_unresolved((lam, pbar), health, direction,
                                    type(system.solver).__name__, sens.accept_stiff_steps)

    def integrand_dot(t, y):
        if not system.has_integrand:
            return jnp.zeros((), y_final.dtype)
        return jnp.vdot(mu, system.integrand(t, y, params))

    t0_bar = t1_bar = ts_bar = None
    if perturbed.t0:
        slope = system.rhs(problem.t0, problem.y0, params)
        t0_bar = -jnp.vdot(lam, slope) - integrand_dot(problem.t0, problem.y0)
    if restart:
        pbar, shift_bar = pbar
        at_event = shift_bar + direction * restart_cotangent(
            system, params, direction, rows, grid, num_accepted, direction * problem.t1,
            saves, taus, taus_bar, event.row, event.tau, event_time_bar)
        # A restarted segment that reached t1 without a step (a jump on t1 itself) has no
        # grid to move: its end is its start.  Moving the event earlier by d gives it one
        # step of size d, so its start's derivative is the rule of t0 (the left derivative,
        # as forward mode's moved grid gives it; the loss jumps to the right).  It was 0: a
        # dose on t1 had dy(t1)/dT = -k y- for k D (pharmacokinetics acceptance test).
        reached_without_step = (num_accepted == 0) & ~event.fired
        at_event = jnp.where(reached_without_step, t0_bar, at_event)
        t0_bar = jnp.where(system.event_start, at_event, t0_bar)
    if perturbed.t1:
        t1_bar = integrand_dot(problem.t1, y_final)
        if t1_event_bar is not None:
            # A solve that no event stopped ends at t1: its end time and state move with it.
            t1_bar = t1_bar + direction * t1_event_bar
    if perturbed.ts:
        ts_bar = direction * taus_bar
    y0_bar = lam if perturbed.y0 else None
    return Problem(y0=y0_bar, params=pbar, t0=t0_bar, t1=t1_bar, ts=ts_bar)


def _event_cotangents(
    system: System, problem: Problem, rows: DenseRows, event: EventRecord, event_bar: Any
) -> tuple[Array, Array, Any, Array, Array]:
    """Row and parameter cotangents of the event outputs (`_events.event_cotangents`)."""
    params, direction = problem.params, problem.direction
    dtype = problem.y0.dtype
    t_bar = y_bar = None
    if event_bar is not None:
        t_bar, y_bar = event_bar.t, event_bar.y
    tau_bar = jnp.zeros((), dtype) if t_bar is None else direction * t_bar
    y_bar = jnp.zeros_like(problem.y0) if y_bar is None else y_bar

    def condition(tau, y, p):
        # The condition that fired (any one if none did: its derivative is not used).
        values = system.conditions(tau, y, p, direction)
        return values[jnp.maximum(event.which, 0)]

    return event_cotangents(system.stage_plan.weights, rows, event.row, event.tau, condition,
                            params, tau_bar, y_bar, event.fired)


class DiscreteAdjoint(AbstractSensitivity):
    """Reverse mode through the recorded Runge–Kutta steps (the default).

    Exact to round-off: the gradient is the derivative of the discrete solution that
    was computed, on its recorded step grid.  ``checkpoint`` chooses what the forward
    pass keeps: `StoreStates`, `StoreStages` or `Recursive`; by default (``None``)
    `StoreStates`, and `StoreStages` for Newton-iterated solvers (`Kvaerno5`), whose stages
    a reverse pass cannot recompute to round-off (`checkpoint_for`).
    `jax.jvp`, `jax.jacfwd` and `jax.hessian` need `DiscreteForward` instead (a clear
    error says so).

    ``accept_stiff_steps=True`` returns the gradient even when the solve rode the
    stability boundary of an explicit method (see `jaxadjoint.solve`'s notes on stiffness);
    by default that is an error at differentiation time.
    """

    checkpoint: AbstractCheckpoint | None = None
    accept_stiff_steps: bool = eqx.field(static=True, default=False)
    reverse_mode_only: ClassVar[bool] = True
    supports_dense: ClassVar[bool] = True

    def __check_init__(self):
        if not (self.checkpoint is None or isinstance(self.checkpoint, AbstractCheckpoint)):
            given = self.checkpoint
            hint = (f" (pass an instance: `{given.__name__}()`)" if isinstance(given, type)
                    and issubclass(given, AbstractCheckpoint) else "")
            raise TypeError(
                "`DiscreteAdjoint(checkpoint=...)` takes `StoreStates()`, `StoreStages()` or "
                f"`Recursive(n)`, got {given!r}{hint}")

    def checkpoint_for(self, solver: Any) -> AbstractCheckpoint:
        """The strategy for ``solver``: ``checkpoint`` if given, else the solver's default.

        Newton-iterated stages (`Kvaerno5`) are kept (`StoreStages`): solved again in the
        reverse pass, by a separately compiled program, the iteration can stop at another
        iterate within its tolerance.  On Robertson to t = 4e10 (rtol 1e-8) the recomputed
        stages differed from the forward's by up to 0.2 of the error tolerance, and the
        gradient by 0.3 % from the forward-mode one at the forward's stages (or blew up).
        """
        if self.checkpoint is not None:
            return self.checkpoint
        return StoreStages() if solver.keeps_stages_by_default else StoreStates()

    def __call__(self, system: System, problem: Problem) -> SolveOutput:
        return _solve(problem, system, self)
