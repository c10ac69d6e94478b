"""Why a solve ended: an enumeration that travels through `jit` and `vmap`."""

import equinox as eqx

# The end of the messages of a solve that stopped before t1.
WHERE_IT_STOPPED = (" Where it stopped: solve with `throw=False` and read `sol.steps`, the "
                    "accepted steps, `inf` after the last one reached.")


class RESULTS(eqx.Enumeration):
    """Outcome of `jaxadjoint.solve`, stored in `Solution.result`.

    Each message tells the user what to do about it.
    """

    # Not empty, so that ``print(sol.result)`` says it (`RESULTS<successful>`); never raised.
    successful = "successful"
    max_steps_reached = (
        "The solve reached `max_steps` before `t1`. Increase `max_steps` or loosen "
        "`rtol`/`atol` (with fixed steps, `ConstantStep` or a fixed-step solver, or an "
        "adaptive controller's `dtmax`: increase `max_steps` or the step). With an "
        "explicit method, check whether the "
        "problem is stiff: with `throw=False`, `sol.stats['num_stiff_steps']` counts the "
        "steps that sat at the method's stability boundary (the longest run of them "
        "starts at `sol.stats['stiff_run_start']`); explicit Runge–Kutta methods need "
        "tiny steps there: use Rodas5 or Kvaerno5. "
        "With an implicit one, many rejected steps (`sol.stats['num_rejected_steps']`) "
        "point to a Newton iteration limit too low or a right-hand side that switches "
        "in time or state (`jnp.where`): make such a switch an `Event`. A solution that "
        "grows without bound (blows up in finite time) also ends here."
        + WHERE_IT_STOPPED
    )
    nonfinite = (
        "The right-hand side produced NaN or Inf and shrinking the step did not help. "
        "Check `y0` and `args` for NaN/Inf (when no step was accepted), and `rhs` for "
        "divisions by zero, logs of negative numbers or blow-up of the solution before "
        "`t1`. With a stiff solver the Jacobian d rhs / dy may be the culprit (NaN or Inf "
        "entries, e.g. sqrt at 0, make I - gamma h J singular for every step size); with "
        "`ForwardSensitivity` or `ContinuousAdjoint`, the sensitivity or adjoint equations "
        "(derivatives of `rhs`) may be what went NaN or Inf."
        + WHERE_IT_STOPPED
    )
    nonfinite_fixed_step = (
        "A fixed step (`ConstantStep`, `StepTo`, or a fixed-step solver's `dt0`) produced "
        "NaN or Inf. The step may be too large for the method's stability (the solution "
        "then grows without bound): take smaller steps, an adaptive controller, or a stiff "
        "solver (Rodas5, Kvaerno5). Otherwise check `y0` and `args` for NaN/Inf, and `rhs` "
        "for divisions by zero or logs of negative numbers."
    )
    step_size_too_small = (
        "The step size fell below the resolution of the time variable: the error "
        "estimate could not be brought below the tolerance. The problem is probably "
        "stiff or singular where it stopped, or its solution blows up in finite time there "
        "(grows without bound, the steps shrinking with it); loosen `rtol`/`atol` or use a "
        "shorter interval."
        + WHERE_IT_STOPPED
    )
    newton_failed = (
        "Newton's method did not converge on the stages of the implicit solver, even "
        "with the step size shrunk to the resolution of the time variable (with a fixed "
        "step, `ConstantStep` or `StepTo`: at that step; take smaller steps or an "
        "adaptive controller). Check `rhs` for NaN/Inf or non-smooth terms and the "
        "Jacobian `d rhs / dy` for singularities; or increase `max_newton_iterations` / "
        "use a Rosenbrock solver."
        + WHERE_IT_STOPPED
    )
    invalid_save_times = (
        "`saveat` must hold finite times inside [t0, t1], ordered from t0 towards t1 "
        "(non-decreasing when t1 > t0, non-increasing when t1 < t0); the solve did not start. "
        "Under jax.vmap with save times per solve, pad each row with its own last time (or "
        "its t1) and mask those saves out of the loss: NaN, 0 or a time beyond a solve's "
        "t1 are refused; with throw=False, sol.result tells which solves have bad times."
    )
    invalid_times = (
        "`t0` and `t1` must be finite and different (an empty interval has no solution "
        "to differentiate); the solve did not start."
    )
    invalid_tolerances = (
        "`rtol` and `atol` must be finite and non-negative, and not both zero; the solve "
        "did not start."
    )
    invalid_first_step = "`dt0` must be finite and non-zero; the solve did not start."
    invalid_controller = (
        "The controller's steps are invalid: `ConstantStep.dt` and an adaptive "
        "controller's `dtmax` must be finite and non-zero, `StepTo.ts` must start at t0, "
        "end at t1 and move strictly from t0 towards t1; the solve did not start."
    )
    event_condition_nonfinite = (
        "An event condition returned NaN or Inf at the start or after an accepted step: "
        "its sign, and so the event, is undefined. Check `Event.cond`."
    )
    event_jump_nonfinite = (
        "An event's jump returned a state with NaN or Inf, so the solve cannot go on after "
        "the event. Check `Event.jump` (and the state it receives, `sol.events.ys`)."
    )
    max_events_reached = (
        "The solve reached `max_events` events before `t1` (events with a `jump`, or "
        "recorded ones with `terminal=False`). Increase `max_events`, or make the event "
        "terminal (no `jump`, `terminal=True`) if the solve should stop there."
    )
    event_chattering = (
        "An event with a jump fired again almost at once (events accumulating in a "
        "vanishing interval, e.g. a ball coming to rest): the solve stopped there. Make "
        "the jump move the state away from the condition's zero, or add a terminal event "
        "that stops the solve (e.g. when the bounce speed falls below a threshold)."
    )
    adjoint_solve_failed = (
        "The backward (adjoint) solve of `ContinuousAdjoint` failed, although the forward "
        "solve succeeded: it reached `max_steps`, its step became too small, or it produced "
        "NaN or Inf. The adjoint equations of a stiff problem can be much harder than the "
        "problem itself, in float32 especially. Use `DiscreteAdjoint` (no backward solve: "
        "the exact derivative of the forward steps), float64, looser tolerances for the "
        "backward solve alone (`ContinuousAdjoint(rtol=..., atol=...)`), or a larger "
        "`max_steps` (which did not help on Robertson's kinetics to t = 4e9 and beyond)."
    )
    failed_solve_differentiated = (
        "A solve that failed (see `sol.result`) was differentiated; its gradient would "
        "be meaningless. Fix what `sol.result` names (its inputs, or e.g. `max_steps`) "
        "before taking gradients."
    )


def is_successful(result: RESULTS) -> bool:
    """`result == RESULTS.successful`, as a (possibly traced) boolean."""
    return result == RESULTS.successful
