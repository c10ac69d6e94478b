"""Stiffness detection: explicit steps that ride the stability boundary.

On a stiff problem an explicit method's step is limited by stability, not accuracy: the
controller settles where ``h rho(J)`` is about the method's real stability boundary ``B``
(`ButcherTableau.real_stability_boundary`), rejecting and shrinking the step whenever
``|R(h lambda)|`` exceeds 1.  The forward solution stays accurate because the controller
keeps correcting it, but the derivative on the *recorded* step grid sees none of that
feedback: it is the product of the steps' Jacobians, each with ``|R(h lambda)|`` hovering
around 1, and grows like their product over the stretch (Van der Pol with ``mu = 1000``,
Dopri5 at ``rtol = 1e-6``: a gradient of 4e83).  Such a gradient is the exact derivative of
what was computed, and useless as a sensitivity of the ODE.

The solve estimates ``h rho(J) / B`` on every step from two stages at the same time
(`AbstractSolver.stiffness`, Hairer's test in DOPRI5) and counts the accepted steps where it
reaches `AT_BOUNDARY`, the longest run of them and where that run starts (`sol.stats`).  A run
survives up to `GAP` consecutive accepted steps below the boundary (the controller's
corrections dip below it now and then; Hairer's DOPRI5 forgives 6) and counts only the steps
at the boundary.  A differentiated solve with a run of at least `STIFF_RUN` steps fails at
differentiation time (`flag_stiff_gradient`) unless the sensitivity method was built with
``accept_stiff_steps=True``.  The forward solve alone only reports.

Thresholds (measured with `benchmarks/bench_trust.py`, Dopri5, Tsit5 and CashKarp at rtol
1e-2 ... 1e-8): on Lotka–Volterra, generalised Lotka–Volterra, Van der Pol with mu <= 10 and
the heat equation no run exceeds 4 steps.  The Brusselator (2 x 16 grid) rides the boundary
through its diffusion at loose tolerances: runs of 105–137 at rtol 1e-3 and looser, where
the gradient is wrong by 18 % to 6e8; 31–36 at 1e-4 (gradient within 14–190 times rtol);
at most 22 from 1e-5 on.  Van der Pol with mu = 1000 gives runs of 155–433 wherever Dopri5's
gradient is off by more than 5e3 times rtol.  Hence `STIFF_RUN` = 40 steps at
`AT_BOUNDARY` = 0.9 of the boundary or more, `GAP` = 2 (Hairer's DOPRI5 warns after 15 stiff
steps, but it judges efficiency, not the derivative).
"""

from __future__ import annotations

from typing import Any, TypeVar

import jax.numpy as jnp
from jax import Array

from ._runtime_error import raise_if

T = TypeVar("T")

AT_BOUNDARY = 0.9
STIFF_RUN = 40
GAP = 2


def tracker_init(tau0: Array) -> dict[str, Array]:
    """The loop's stiffness counters before the first step."""
    zero = jnp.int32(0)
    nan = jnp.full_like(tau0, jnp.nan)
    return dict(count=zero, run=zero, miss=zero, run_start=nan, longest=zero,
                longest_start=nan)


def tracker_update(state: dict[str, Array], ratio: Array | None, accept: Array,
                   tau: Array) -> dict[str, Array]:
    """Count an accepted step of ``h rho / B = ratio`` that started at ``tau``.

    A rejected attempt neither extends nor breaks a run; more than `GAP` accepted steps
    below the boundary in a row end it.
    """
    if ratio is None:
        return state
    at = accept & (ratio >= AT_BOUNDARY)
    below = accept & ~at
    miss = jnp.where(at, 0, state["miss"] + below.astype(jnp.int32))
    ended = miss > GAP
    run = jnp.where(at, state["run"] + 1, jnp.where(ended, 0, state["run"]))
    run_start = jnp.where(at & (state["run"] == 0), tau, state["run_start"])
    longer = run > state["longest"]
    return dict(
        count=state["count"] + at.astype(jnp.int32),
        run=run,
        miss=jnp.where(ended, GAP + 1, miss),
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


def combine_segment_stats(stats: dict[str, Array], active: Array) -> dict[str, Array]:
    """The stats of a solve cut into segments (at events, `_segments`), from each segment's
    (leading axis; ``active`` marks the segments that ran).

    Counts add up; the longest stiff run is the longest of any segment, with that segment's
    start time (a run is counted within a segment, as the gradient's check sees it).  A sum
    of run lengths and of their start times, as before, gave a start time past ``t1`` and a
    run the check never saw (a PK user's stiff absorption with three doses, 2026-12-07).
    """
    out = {name: jnp.sum(jnp.where(active, x, 0), axis=0) for name, x in stats.items()
           if name not in ("longest_stiff_run", "stiff_run_start")}
    if "longest_stiff_run" in stats:
        runs = jnp.where(active, stats["longest_stiff_run"], 0)
        longest = jnp.argmax(runs)
        out["longest_stiff_run"] = runs[longest]
        out["stiff_run_start"] = jnp.where(runs[longest] > 0,
                                           stats["stiff_run_start"][longest], jnp.nan)
    return out


def flag_stiff_gradient(x: T, system: Any, stats: dict[str, Array], accept: bool) -> T:
    """``x``, unchanged; raises at differentiation time when the solve has a stretch of
    `STIFF_RUN` steps.  ``x`` must be a value every derivative reads (`raise_if`).

    Called by every sensitivity method's derivative rule with the forward solve's
    ``stats``; ``accept`` is the method's ``accept_stiff_steps``.  Only adaptive step
    control is flagged: steps the user fixed (`ConstantStep`, `StepTo`) below the
    boundary give a stable derivative, and above it the solve itself blows up.
    """
    if accept or not system.controller.adaptive:
        return x
    solver_name = type(system.solver).__name__
    run, start = stats["longest_stiff_run"], stats["stiff_run_start"]

    def message(run, start) -> str:
        return (
            f"Untrustworthy gradient: from t = {float(start):.6g} on, {int(run)} accepted steps "
            f"of {solver_name} sat at the method's stability boundary (h * rho(J) near its "
            f"limit, never more than {GAP} steps in a row below it): the problem is stiff "
            "there for an explicit method and the step "
            "sizes were set by stability, not accuracy. The exact derivative of such steps "
            "amplifies perturbations step after step and can be wrong by orders of magnitude "
            "although the solution looks fine (on diffusion-dominated problems it can also be "
            "accurate: jaxadjoint.check_gradient tells which). Use a stiff solver "
            "(solver=jaxadjoint.Rodas5()). A tighter rtol/atol helps only where it shortens "
            "the steps below the boundary, which on a stiff stretch it often cannot (an "
            "explicit Vern8 at rtol 1e-12 was still refused on a battery model). To accept "
            "this gradient anyway, build the sensitivity method with accept_stiff_steps=True "
            "(e.g. DiscreteAdjoint(accept_stiff_steps=True)). See sol.stats['num_stiff_steps']."
        )

    return raise_if(x, run >= STIFF_RUN, message, run, start)
