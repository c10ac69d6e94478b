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

**Slow growth in unresolved components.**  An explicit method amplifies a component whose
``h lambda`` lies outside its stability region by ``|R(h lambda)|`` per step, which can be
barely above one: Dopri5 multiplies an oscillatory component with ``h lambda = 2i`` by 1.03
(``|R(iy)| > 1`` from ``y = 0.95`` to 3.3).  If the forward solution never carries such a
component (a smooth state of a discretised PDE), its error estimate never sees it and
nothing limits the step; the reverse sweep, seeded by a loss that reads the state at a few
points, carries every component, and the adjoint grows by 1.05 to 1.2 per step, far below
`ALLOWANCE`, to 1e6 or 1e7 over a hundred steps (advection by central differences on 64
points, Dopri5 or Tsit5 at rtol 1e-3 and 1e-4: ``dL/dy0`` 8e5 to 4e7 times too large).  The
exact derivative of what was computed, and no sensitivity of the ODE.  Such a step is
recognised by the adjoint changing by as much as its own size across it,
``||w (lam_n - lam_{n+1})|| >= UNRESOLVED_CHANGE ||w lam_{n+1}||`` (2-norms, weighted by
``w = |y_n| + atol`` as for the blow-up, so that rescaling a component changes nothing: a
damped rotation in components of sizes 1, 1e-4 and 50 looked unresolved unweighted): about
``h ||J^T||`` along the adjoint, at most ~1 for components the step resolves.
``unresolved`` sums the log growth of such steps, and the log *decay* of the others, never
below zero, so that the resolved steps of a problem whose adjoint legitimately rises and
falls (an oscillator, a relaxation cycle, a chaotic attractor) pay back what it gained; past
`UNRESOLVED_GROWTH`, `raise_if_unresolved` fails the gradient unless the method accepts stiff
steps.  Saves inside a step feed its adjoint: the growth of such a step is measured from at
least `INJECTION_FACTOR` times what they add (``sum_m ||w kbar_m|| / |h|``), so that a save's
cotangent arriving on a small adjoint is no growth.

Measured with the rule above (peak of the sum; README, "When is a gradient trustworthy?"),
Dopri5 and Tsit5 at rtol 1e-3, 1e-4 and 1e-6 with none, 20 or 200 saves: at most 10^1.4 on
Lotka–Volterra, GLV (20 species), Van der Pol (mu = 10), the heat equation and Lorenz
(t1 = 20); 10^1.8 on that scaled rotation and on the Brusselator at rtol 1e-3 (which
`_stiffness` refuses, its gradient wrong by 100 %).  Refused: advection by central
differences (48 and 64 points) at rtol 1e-3, 10^3.4 to 10^4.5, ``dL/du0`` 2e3 to 1e5 times
too large; a 24 x 24 heat equation started on its first mode, one step over the whole
interval at any rtol, 10^4.6 (``dL/du0`` 1.6e5 times too large).  Not all: the same
advection at rtol 1e-4 reaches 10^1.4 to 10^3.4 (gradients about 1e3 times too large), the
heat equation with 20 or 200 saves 10^3.0 to 10^3.2.  Explicit Runge–Kutta only, and not
in solves with events: an event's cotangents enter the adjoint as saves do, unaccounted for,
and two balls bouncing together were refused (`tests/test_events.py`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._runtime_error import raise_if
from .solvers._explicit import AbstractERK

T = TypeVar("T")

ALLOWANCE = 10.0  # growth of ||lam|| per step that needs no explanation
BLOW_UP = 1e8  # growth beyond the allowance, over a streak of steps, that is a blow-up
UNRESOLVED_CHANGE = 1.5  # ||lam_n - lam_{n+1}|| / ||lam_{n+1}|| of a step that does not resolve it
UNRESOLVED_GROWTH = 1e3  # net growth over such steps that fails the gradient
INJECTION_FACTOR = 4.0  # what a step makes of the saves it receives, against their size


class Health(NamedTuple):
    """The blow-up monitor of a reverse sweep (one per solve; scalars)."""

    excess: Array  # log of the growth beyond ALLOWANCE per step, over the current streak
    step: Array  # int32: the step at which the adjoint blew up, -1 while healthy
    time: Array  # internal time tau at the start of that step (nan while healthy)
    unresolved: Array  # log of the net growth over steps that do not resolve the adjoint
    unresolved_time: Array  # internal time at which it passed UNRESOLVED_GROWTH (nan: never)


def watches_unresolved(system: Any) -> bool:
    """Whether the reverse sweep of ``system`` counts growth over unresolved steps: explicit
    Runge–Kutta steps, in a solve without events (module docstring)."""
    return isinstance(system.solver, AbstractERK) and not system.event_directions


def healthy(dtype: Any) -> Health:
    """A monitor that has seen nothing."""
    nan = jnp.full((), jnp.nan, dtype)
    return Health(jnp.zeros((), dtype), jnp.int32(-1), nan, jnp.zeros((), dtype), nan)


def _norm(x: Array) -> Array:
    return jnp.sqrt(jnp.sum(jnp.square(x)))


def _norm_rows(x: Array) -> Array:
    return jnp.sqrt(jnp.sum(jnp.square(x), axis=-1))


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
            feed: Array | None = None, explicit: bool = False,
            h: Array | None = None) -> Health:
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
    not change how XLA fuses (and so rounds) the sweep's own arithmetic.  With
    ``explicit`` (an explicit Runge–Kutta step of size ``h``) the step also counts towards
    ``unresolved`` (module docstring), with 2-norms weighted by ``weight``.
    """
    lam_in, lam_out = jax.lax.optimization_barrier((lam_in, lam_out))
    fed_any = None if fed is None else jnp.any(jax.lax.optimization_barrier(fed) != 0)
    unresolved, unresolved_time = health.unresolved, health.unresolved_time
    if explicit:
        scaled = (lambda x: x) if weight is None else (lambda x: weight * x)
        norm_in, norm_out = _norm(scaled(lam_in)), _norm(scaled(lam_out))
        if feed is not None:
            norm_in = jnp.maximum(norm_in, _norm(scaled(jax.lax.optimization_barrier(feed))))
        if fed is not None and h is not None:
            # What saves inside the step add: their state cotangents, about
            # sum_m ||kbar_m|| / |h|, times what the step's stages make of them.
            rows = _norm_rows(scaled(jax.lax.optimization_barrier(fed)))
            injected = jnp.sum(rows) / jnp.where(h != 0, jnp.abs(h), 1)
            norm_in = jnp.maximum(norm_in, INJECTION_FACTOR * injected)
        counted = (norm_in > 0) & (norm_out > 0) & jnp.isfinite(norm_out)
        safe_in = jnp.where(counted, norm_in, 1)
        growth = jnp.where(counted, jnp.log(jnp.where(counted, norm_out, 1)) - jnp.log(safe_in), 0)
        unresolved_step = _norm(scaled(lam_out - lam_in)) >= UNRESOLVED_CHANGE * safe_in
        unresolved = jnp.maximum(
            unresolved + jnp.where(unresolved_step, growth, jnp.minimum(growth, 0)), 0)
        passed = (unresolved > math.log(UNRESOLVED_GROWTH)) & jnp.isnan(unresolved_time)
        unresolved_time = jnp.where(passed, tau, unresolved_time)
    if weight is not None:
        lam_in, lam_out = weight * lam_in, weight * lam_out
    size_in, size_out = _size(lam_in), _size(lam_out)
    if feed is not None:
        feed = jax.lax.optimization_barrier(feed)
        size_in = jnp.maximum(size_in, _size(feed if weight is None else weight * feed))
    both = (size_in > 0) & (size_out > 0)
    if fed_any is not None:
        both = both & ~fed_any
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
        unresolved=unresolved,
        unresolved_time=unresolved_time,
    )



def observe_step(health: Health, system: Any, params: Any, direction: Array, n: Array,
                 tau: Array, t_next: Array, y: Array | None, stages: Array | None,
                 lam_in: Array, lam_out: Array, kbar_saves: Array | None,
                 mu: Array) -> Health:
    """`observe` the reverse step ``n`` of ``system`` from ``tau`` to ``t_next``, with what
    the step's record gives (``y_n`` or its stages): the weights (`step_weight`), the
    integrand's feed (`integrand_feed`) and whether it counts towards ``unresolved``
    (`watches_unresolved`).  The one call of both reverse sweeps (`_reverse.reverse_sweep`,
    `_batched_reverse.lanes_sweep`)."""
    return observe(health, n, tau, lam_in, lam_out, kbar_saves,
                   step_weight(y, stages, system.tol.atol),
                   integrand_feed(system, params, direction, tau, t_next, y, stages, mu),
                   explicit=watches_unresolved(system), h=t_next - tau)


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
        if step >= 0:
            what = (
                f"The adjoint blew up while reversing accepted step {int(step)} (which starts "
                f"at t = {float(time):.6g}): dL/dy grew by more than {BLOW_UP:.0e} beyond "
                f"{ALLOWANCE:g}x per step, or became NaN/Inf, so the gradient is not returned. "
                "No accepted step of an error-controlled solve explains such growth."
            )
        else:
            what = (
                "The adjoint blew up in the gradient's last sums: dL/dy stayed finite and "
                "within bounds step by step, but the parameter cotangents or dL/dy0 came out "
                "NaN or Inf (they add up every stage's contribution, which can overflow, or "
                "the derivative of the right-hand side in its parameters is itself NaN/Inf), "
                "so the gradient is not returned."
            )
        return (
            what + " If sol.stats['num_stiff_steps'] is above 0, steps at or "
            "beyond the explicit method's stability boundary are the likely cause (fixed "
            "steps, ConstantStep or a fixed-step solver's dt0, past the boundary make the "
            "solution itself wrong): use smaller fixed steps, an adaptive controller or a "
            "stiff solver (solver=jaxadjoint.Rodas5()). Otherwise the derivative of the "
            "right-hand side (or of the loss) is probably infinite or huge on the solution "
            "there (sqrt, log, a division or a power of a quantity that reaches zero): check "
            "jax.jacobian(rhs) along sol.ys near that time; smooth the model (e.g. "
            "sqrt(x**2 + eps)) or keep the solution away from the singularity. A third "
            "cause: a sensitivity that really grows exponentially, a chaotic system over a "
            "long horizon (Lorenz to t = 1000: e^(0.9 t)), overflowed the floating-point "
            "range; such a gradient is meaningless even where it is finite (check "
            "ja.check_gradient at a shorter horizon; fit over shorter windows)."
        )

    failed = (health.step >= 0) | ~finite
    if given_finite is not None:
        failed = failed & given_finite
    return raise_if((lam, pbar), failed, message, health.step, direction * health.time)


def raise_if_unresolved(x: T, health: Health, direction: Array, solver_name: str,
                        accept: bool) -> T:
    """``x``, unchanged; fails the gradient where the adjoint grew by `UNRESOLVED_GROWTH`
    over steps that do not resolve it (module docstring), unless ``accept`` (the method's
    ``accept_stiff_steps``).  ``x`` must hold every value the gradient returns (the state
    and the parameter cotangents: `raise_if`'s check runs only while its result is read)."""
    if accept:
        return x

    def message(time: np.ndarray) -> str:
        return (
            f"Untrustworthy gradient: reversing the steps of {solver_name} from the end back "
            f"to t = {float(time):.6g}, the adjoint dL/dy grew by more than a factor of "
            f"{UNRESOLVED_GROWTH:.0e} over steps across which it changed by "
            f"more than {UNRESOLVED_CHANGE:g} times its own size: steps that do not resolve "
            "the components that carry it. Those are components the forward solution hardly "
            "contains, so its error estimate never limited the step for them, and the "
            "explicit method amplifies them slowly, step after step: typically oscillatory "
            "modes beyond the method's stability on the imaginary axis (central differences "
            "for advection) or stiff modes of a discretised PDE started smooth. The "
            "gradient is the exact derivative of those steps and can be wrong by orders of "
            "magnitude as a sensitivity of the ODE. Use a stiff solver "
            "(solver=jaxadjoint.Rodas5()) or a dissipative discretisation (upwind "
            "differences); a tighter rtol/atol helps only once the steps resolve those "
            "components (a tight explicit solve can be wrong without being refused, README). "
            "jaxadjoint.check_gradient tells whether this gradient is usable. To accept it "
            "anyway, build the sensitivity method with "
            "accept_stiff_steps=True (e.g. DiscreteAdjoint(accept_stiff_steps=True))."
        )

    failed = ~jnp.isnan(health.unresolved_time)
    return raise_if(x, failed, message, direction * health.unresolved_time)
