"""Adjoint blow-up: a reverse sweep whose adjoint grows beyond what its steps can explain.

Reversing step ``n`` maps ``lam_{n+1} = dL/dy_{n+1}`` to ``lam_n = (dy_{n+1}/dy_n)^T lam_{n+1}``.
For an accepted step of an error-controlled method that factor is modest: a step is at most
a few times ``h ||J||`` away from the identity, and ``h ||J||`` is bounded by accuracy or
stability.  So a sweep that multiplies the adjoint by many orders of magnitude within a few
steps, or turns it into NaN or Inf, is differentiating something the forward solve did not
see (a right-hand side with a singular derivative on the solution, ``sqrt`` or ``log`` at
zero, a division by a vanishing quantity), and its gradient would be meaningless.

Each sweep carries a `Health`: ``excess``, the growth of ``||lam||_inf`` beyond `ALLOWANCE`
per step, accumulated over consecutive steps and never below zero (a one-sided cumulative
sum: decay and allowed growth forget, a streak of excessive growth adds up), and the first
step (the latest in time, the sweep runs backwards) at which ``excess`` passed `BLOW_UP` or
the adjoint stopped being finite.  Save cotangents added between steps are not growth of the
step map: the factor compares a step's output with its input.  `raise_if_blown_up` fails the
gradient with that step and time.  Two max-norms per step; no effect on the arithmetic.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._runtime_error import raise_if

ALLOWANCE = 10.0  # growth of ||lam|| per step that needs no explanation
BLOW_UP = 1e8  # growth beyond the allowance, over a streak of steps, that is a blow-up


class Health(NamedTuple):
    """The blow-up monitor of a reverse sweep (one per solve; scalars)."""

    excess: Array  # log of the growth beyond ALLOWANCE per step, over the current streak
    step: Array  # int32: the step at which the adjoint blew up, -1 while healthy
    time: Array  # internal time tau at the start of that step (nan while healthy)


def healthy(dtype: Any) -> Health:
    """A monitor that has seen nothing."""
    return Health(jnp.zeros((), dtype), jnp.int32(-1), jnp.full((), jnp.nan, dtype))


def _size(x: Array) -> Array:
    return jnp.max(jnp.abs(x)) if x.size else jnp.zeros((), x.dtype)


def step_weight(y: Array | None, stages: Array | None, atol: Array) -> Array:
    """``|y_n| + atol``, the weight of each component of the adjoint (`observe`); ``y_n``
    from the record (``stages[0]`` where it keeps stages)."""
    y = stages[0] if y is None else y
    return jnp.abs(jax.lax.optimization_barrier(y)) + atol


def integrand_feed(system: Any, params: Any, direction: Array, tau: Array, t_next: Array,
                   y: Array | None, stages: Array | None, mu: Array) -> Array | None:
    """``|h| |R_y(t_n, y_n)^T mu|``: about what the integrand's cotangent ``mu`` adds to the
    adjoint in one step (`observe`'s floor), one vector-Jacobian product of ``R``; None
    without an integrand."""
    if not system.has_integrand:
        return None
    y = stages[0] if y is None else y
    _, vjp = jax.vjp(lambda x: system.integrand(direction * tau, x, params), y)
    return jnp.abs(t_next - tau) * jnp.abs(vjp(mu)[0])


def observe(health: Health, n: Array, tau: Array, lam_in: Array, lam_out: Array,
            fed: Array | None = None, weight: Array | None = None,
            feed: Array | None = None) -> Health:
    """Account for reversing step ``n`` (from ``tau``): ``lam_in`` -> ``lam_out``.

    The growth is that of ``||weight * lam||_inf`` with ``weight = |y_n| + atol``
    (`step_weight`): the change of the loss under a perturbation of each component at its
    own scale.  Unweighted, a stiff problem's tiny components make legitimate adjoints
    "grow": one Kvaerno5 step of Robertson at t = 3e10 (h = 7e9) has ``dy1_{n+1}/dy2_n
    = -4e10`` with ``y2 = 2.5e-13``, a factor the weights reduce to ~1e5.  A derivative
    that is singular on the solution still shows (``cbrt`` at ``1e-30``: 1e20 unweighted,
    1e14 with ``atol = 1e-6``), and a non-finite adjoint always does.

    ``fed`` is the slope cotangent that saves inside the step (or the previous step's end
    stage, `_reverse.save_slopes_cotangent`) add within its reverse pass: growth in a step
    that received one is explained by it (it may start from an adjoint that is nearly
    zero), so such a step adds no excess.  Non-finite values are still caught.
    ``feed`` (`integrand_feed`) is what an integrand's cotangent adds in every step: the
    growth is measured from at least that (weighted), not from an adjoint the loss left
    nearly zero at ``t1`` (``1e-12 y(t1) + integral``: a growth of 1e11 in one step, taken
    for a blow-up).
    The norms read the adjoint through an optimisation barrier, so that watching it does
    not change how XLA fuses (and so rounds) the sweep's own arithmetic.
    """
    lam_in, lam_out = jax.lax.optimization_barrier((lam_in, lam_out))
    if weight is not None:
        lam_in, lam_out = weight * lam_in, weight * lam_out
    size_in, size_out = _size(lam_in), _size(lam_out)
    if feed is not None:
        feed = jax.lax.optimization_barrier(feed)
        size_in = jnp.maximum(size_in, _size(feed if weight is None else weight * feed))
    both = (size_in > 0) & (size_out > 0)
    if fed is not None:
        both = both & ~jnp.any(jax.lax.optimization_barrier(fed) != 0)
    log_growth = jnp.where(
        both, jnp.log(jnp.where(both, size_out, 1)) - jnp.log(jnp.where(both, size_in, 1)), 0
    )
    excess = jnp.maximum(health.excess + log_growth - math.log(ALLOWANCE), 0)
    bad = ~jnp.isfinite(size_out) | (excess > math.log(BLOW_UP))
    first = bad & (health.step < 0)
    return Health(
        excess=jnp.where(jnp.isfinite(excess), excess, health.excess),
        step=jnp.where(first, n.astype(jnp.int32), health.step),
        time=jnp.where(first, tau, health.time),
    )


def all_finite(*trees: Any) -> Array:
    """Whether every floating-point leaf of ``trees`` is finite.

    Of the cotangents the loss gave a solve: a NaN or Inf there comes from the loss (it is
    NaN at a save, or takes ``sqrt`` of a negative one), not from the solve, so its gradient
    is then NaN, as JAX's own derivatives give, and no blow-up is reported against the
    right-hand side.
    """
    finite = jnp.array(True)
    for leaf in jax.tree.leaves(trees):
        if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
            finite = finite & jnp.all(jnp.isfinite(leaf))
    return finite


def raise_if_blown_up(
    health: Health, lam: Array, pbar: Any, direction: Array, given_finite: Array | None = None
) -> tuple[Array, Any]:
    """``(lam, pbar)``, unchanged; fails the gradient if the sweep blew up, naming the step
    and time (return values must be used: `_runtime_error.raise_if`).

    Also fails when the final ``dL/dy0`` or parameter cotangent is not finite although no
    step was caught (a NaN from the parameter derivative alone, or from ``t0``).  Not
    where ``given_finite`` (`all_finite` of what the loss gave) is false: the NaN came in
    with the cotangents and goes out in the gradient.  The message names both causes seen:
    a singular derivative, and explicit steps beyond the stability boundary (fixed steps
    past it blow the adjoint up too).  The forward solve's stiff-step count is not passed
    in: as an operand of the check it changed how XLA fused the reverse pass, and with it
    the gradient's last bits (`tests/test_bitwise.py::test_issue_heat_case_bitwise`).
    """
    finite = all_finite(lam, pbar)

    def message(step: np.ndarray, time: np.ndarray) -> str:
        where = (
            f"while reversing accepted step {int(step)} (which starts at t = {float(time):.6g})"
            if step >= 0 else "in the parameter cotangents (the state adjoint stayed finite)"
        )
        return (
            f"The adjoint blew up {where}: dL/dy grew by more than "
            f"{BLOW_UP:.0e} beyond {ALLOWANCE:g}x per step, or became NaN/Inf, so the "
            "gradient is not returned. No accepted step of an error-controlled solve "
            "explains such growth. If sol.stats['num_stiff_steps'] is above 0, steps at or "
            "beyond the explicit method's stability boundary are the likely cause (fixed "
            "steps, ConstantStep or a fixed-step solver's dt0, past the boundary make the "
            "solution itself wrong): use smaller fixed steps, an adaptive controller or a "
            "stiff solver (solver=jaxadjoint.Rodas5()). Otherwise the derivative of the "
            "right-hand side (or of the loss) is probably infinite or huge on the solution "
            "there (sqrt, log, a division or a power of a quantity that reaches zero): check "
            "jax.jacobian(rhs) along sol.ys near that time; smooth the model (e.g. "
            "sqrt(x**2 + eps)) or keep the solution away from the singularity."
        )

    failed = (health.step >= 0) | ~finite
    if given_finite is not None:
        failed = failed & given_finite
    return raise_if((lam, pbar), failed, message, health.step, direction * health.time)
