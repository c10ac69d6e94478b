"""Stiffness detection: explicit steps that ride the stability boundary.

On a stiff problem an explicit method's step is limited by stability, not accuracy: the
controller settles where ``h rho(J)`` is about the method's real stability boundary ``B``
(`ButcherTableau.real_stability_boundary`), rejecting and shrinking the step whenever
``|R(h lambda)|`` exceeds 1.  The forward solution stays accurate because the controller
keeps correcting it, but the derivative on the *recorded* step grid sees none of that
feedback: it is the product of the steps' Jacobians, each with ``|R(h lambda)|`` hovering
around 1, and grows like their product over the stretch (Van der Pol with ``mu = 1000``,
Dopri5 at ``rtol = 1e-6``: a gradient of 1e58).  Such a gradient is the exact derivative of
what was computed, and useless as a sensitivity of the ODE.

The solve estimates ``h rho(J) / B`` on every step from two stages at the same time
(`AbstractSolver.stiffness`, Hairer's test in DOPRI5) and counts the accepted steps where it
reaches `AT_BOUNDARY`, the longest run of consecutive ones and where that run starts
(`sol.stats`).  A differentiated solve with a run of at least `STIFF_RUN` steps fails at
differentiation time (`flag_stiff_gradient`) unless the sensitivity method was built with
``accept_stiff_steps=True``.  The forward solve alone only reports.

Thresholds (measured, `benchmarks/bench_trust.py`): a step counts when its estimate is at
least `AT_BOUNDARY` of the boundary; a stretch is `STIFF_RUN` consecutive such steps
(Hairer reports stiffness after 15).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import Array

from ._runtime_error import raise_if

AT_BOUNDARY = 0.9
STIFF_RUN = 40


def tracker_init(tau0: Array) -> dict[str, Array]:
    """The loop's stiffness counters before the first step."""
    zero = jnp.int32(0)
    nan = jnp.full_like(tau0, jnp.nan)
    return dict(count=zero, run=zero, run_start=nan, longest=zero, longest_start=nan)


def tracker_update(state: dict[str, Array], ratio: Array | None, accept: Array,
                   tau: Array) -> dict[str, Array]:
    """Count an accepted step of ``h rho / B = ratio`` that started at ``tau``.

    A rejected attempt neither extends nor breaks a run; an accepted step below the
    boundary ends it.
    """
    if ratio is None:
        return state
    at = accept & (ratio >= AT_BOUNDARY)
    run = jnp.where(at, state["run"] + 1, jnp.where(accept, 0, state["run"]))
    run_start = jnp.where(at & (state["run"] == 0), tau, state["run_start"])
    longer = run > state["longest"]
    return dict(
        count=state["count"] + at.astype(jnp.int32),
        run=run,
        run_start=run_start,
        longest=jnp.where(longer, run, state["longest"]),
        longest_start=jnp.where(longer, run_start, state["longest_start"]),
    )


def tracker_stats(state: dict[str, Array], direction: Array) -> dict[str, Array]:
    """The `sol.stats` entries (times back in real time ``t = direction * tau``)."""
    return dict(
        num_stiff_steps=state["count"],
        longest_stiff_run=state["longest"],
        stiff_run_start=direction * state["longest_start"],
    )


def flag_stiff_gradient(system: Any, stats: dict[str, Array], accept: bool) -> None:
    """Raise at differentiation time when the solve has a stretch of `STIFF_RUN` steps.

    Called by every sensitivity method's derivative rule with the forward solve's
    ``stats``; ``accept`` is the method's ``accept_stiff_steps``.  Only adaptive step
    control is flagged: steps the user fixed (`ConstantStep`, `StepTo`) below the
    boundary give a stable derivative, and above it the solve itself blows up.
    """
    if accept or not system.controller.adaptive:
        return
    solver_name = type(system.solver).__name__
    run, start = stats["longest_stiff_run"], stats["stiff_run_start"]

    def message(run, start) -> str:
        return (
            f"Untrustworthy gradient: {int(run)} consecutive accepted steps of "
            f"{solver_name}, starting at t = {float(start):.6g}, sat at the method's stability "
            "boundary (h * rho(J) near its limit): the problem is stiff there and the step "
            "sizes were set by stability, not accuracy. The exact derivative of such steps "
            "amplifies perturbations step after step and can be wrong by orders of magnitude "
            "although the solution looks fine. Use a stiff solver (solver=jaxadjoint.Rodas5()) "
            "or a much tighter rtol/atol, and check with jaxadjoint.check_gradient. To accept "
            "this gradient anyway, build the sensitivity method with accept_stiff_steps=True "
            "(e.g. DiscreteAdjoint(accept_stiff_steps=True)). See sol.stats['num_stiff_steps']."
        )

    raise_if(run >= STIFF_RUN, message, run, start)
