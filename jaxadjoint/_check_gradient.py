"""`check_gradient`: can I trust this gradient?  One call, three comparisons, a verdict.

The question users ask most is "why does my adjoint disagree with finite differences?".  The
answer is almost always that the two differentiate different things:

- the discrete methods (`DiscreteAdjoint`, `DiscreteForward`) give the exact derivative of
  the *computed* solution, on the step grid the solver took (to round-off);
- finite differences and a solve at a tighter tolerance approximate the derivative of the
  *exact* solution of the ODE, and differ from the former by the truncation error.

So the loss's gradient from the chosen method is compared with three others, and each
difference is put in the class it should fall in:

1. forward mode on the same step grid (`DiscreteForward`, same tolerances): the same
   derivative computed another way; anything above **round-off** means a bug (or a method
   that does not differentiate the discretisation, such as `ContinuousAdjoint`, whose
   difference is then truncation-sized);
2. the same method at a tighter tolerance (``rtol / tighter``): the derivative of the
   discretisation should converge to that of the ODE, so the difference should be
   **truncation**-sized, i.e. of the order of ``rtol``;
3. central finite differences of the loss solved at the tighter tolerance, with the step
   chosen from that tolerance: truncation of the solve plus the error of the difference
   quotient.

A difference above round-off that passes only a threshold of `MEANINGFUL_THRESHOLD` (0.5) or
more is **inconclusive**: relative differences are at most 2, so such a threshold accepts any
gradient (chaotic Lorenz over [0, 40]: the loss moved by 25 % between the tolerances, and
gradients of opposite signs passed as OK).  The check is then not ``ok``, unless only the
central differences are that wide (a strongly curved loss): a note says so.

A difference above its class is flagged **wrong**: the gradient is not the derivative of the
ODE solution that the loss means (typically a stiff problem whose explicit steps ride the
stability boundary: the exact derivative of those steps can be astronomically large), or
something is broken.

Thresholds (relative differences ``||g - g_ref||_2 / max(||g||_2, ||g_ref||_2)``), all
stored in the result.  Each has a floor from the tolerances and is widened by what the problem
itself shows, measured, so that an ill-conditioned but healthy problem (a stiff relaxation
oscillation: round-off and global error both amplified) is not called wrong:

- round-off: ``roundoff_factor * eps`` (``eps`` of the gradient's dtype; default factor
  ``1e4``: the reverse and forward sweeps sum thousands of products in different orders), or
  ``NOISE_FACTOR`` times the measured round-off noise if larger: how far each of the two
  gradients moves when the parameters move by one unit in the last place, or when the loss's
  cotangent seed is ``1 + k eps`` instead of 1 (`_roundoff_noise`; on Van der Pol at
  mu = 1e3 with Rodas5, 1e-9 for forward mode against 2e-16 x 1e4 = 2e-12); never above the
  truncation threshold;
- truncation: ``truncation_factor * max(rtol, loss_change)`` (default factor ``100``:
  gradients of adaptive solves are typically accurate to a few times the tolerance), where
  ``loss_change`` is the loss's own relative change between the two tolerances: where the
  global error is many times ``rtol`` (stiff problems, long integrations), the gradient's is
  allowed the same factor;
- finite differences: the truncation threshold plus ``truncation_factor * rtol_fd ** (2/3)``,
  the error of a central difference with step ``h = rtol_fd ** (1/3) * max(1, |p|)`` on a
  loss known to ``rtol_fd`` (balancing ``h**2`` against ``rtol_fd / h``), plus the difference
  between the central differences at ``h`` and ``2 h``: about three times the ``h**2`` error
  of the one at ``h`` (Richardson), large where the loss curves strongly in the parameters.

**Component by component** (`component_mismatches`): the norms hide one small wrong
component (a switch time behind ``jnp.where``, whose derivative is zero), so each component is
also compared with its own central difference, where that difference is reliable; a mismatch
makes the check not ``ok`` and is named.

**At a stationary point** (a fitted optimum) the gradient is near zero, and a relative
difference of two near-zero gradients measures nothing: their difference is the truncation
or round-off of terms that cancel.  The point counts as stationary when the central
differences' first-order change of the loss over the step, ``|g_fd h|``, is below half its
second-order change ``|L(p + h) - 2 L(p) + L(p - h)|`` (the gradient being checked plays no
part, so a wrong one cannot make a point look stationary), and the second differences at
``2 h`` are about four times those at ``h`` (a quadratic, not a jump of the loss).  There
the differences from the tighter solve and the central differences are taken relative to
``max(||g||, ||g_ref||, ||H_ii max(1, |p_i|)||)`` (the second differences' diagonal
curvature times the parameters' size): how far the difference would move the minimum,
relative to the parameters (`stationary_scales`, with a note in the report).  Forward and
reverse mode on the same steps stay relative to the gradient itself: they sum the same
terms, so their round-off is relative to those, stationary or not.  The loss's own change
between the tolerances is likewise relative to ``||H_ii max(1, |p_i|)^2||`` as well as the
loss: a model fitted to its own output has a loss of its truncation error squared, which
changes by 100 % between the tolerances (Lotka-Volterra: ``loss_change`` 1.0, so every
difference counted as inconclusive).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.flatten_util import ravel_pytree

from ._adjoint import DiscreteAdjoint
from ._discrete_forward import DiscreteForward
from ._sensitivity_base import AbstractSensitivity
from ._validation import is_scalar_atol

ROUNDOFF = "round-off"
TRUNCATION = "truncation"
WRONG = "WRONG"
INCONCLUSIVE = "inconclusive"
# Relative differences are at most 2, and one of 0.5 is a gradient half wrong: a threshold
# this wide (a loss that moves by 0.5 % between the tolerances, at the default factor)
# accepts any gradient, so a difference it lets through decides nothing.
MEANINGFUL_THRESHOLD = 0.5
# The same-grid threshold is this many times the measured round-off noise (if above the floor).
NOISE_FACTOR = 10.0
# One-ulp perturbations of the parameters used to measure that noise.
NOISE_SAMPLES = 2
# Cotangent seeds ``1 + k eps`` of the loss, each another rounding of the same reverse sweep.
NOISE_SEEDS = (3.0, 7.0)
# Above this many rtol of change in the loss between the tolerances, an OK is qualified.
LOOSE_LOSS_CHANGE = 100.0
# A component is flagged when it differs from its central difference by this fraction of
# itself, where the central differences at h and 2h agree to `COMPONENT_FD_AGREEMENT` and
# the mismatch is `COMPONENT_TRUNCATION` times the component's change between tolerances.
COMPONENT_MISMATCH = 0.5
COMPONENT_FD_AGREEMENT = 0.1
COMPONENT_TRUNCATION = 10.0
# ... and above the central difference's round-off, this many eps of the loss over its step.
FD_ROUNDOFF = 10.0


@dataclasses.dataclass(frozen=True)
class GradientComparison:
    """One row of a `GradientCheck`.

    Attributes:
        name: what the gradient was compared with.
        reference: that gradient, flattened (``jax.flatten_util.ravel_pytree`` order).
        difference: ``||g - reference||_2 / max(||g||_2, ||reference||_2)`` (at a
            stationary point with the curvature scale in the maximum too, module docstring).
        expected: the class the difference should fall in (``"round-off"`` or
            ``"truncation"``).
        threshold: the largest difference accepted for ``expected``.
        verdict: ``"round-off"``, ``"truncation"`` or ``"WRONG"``; ``"inconclusive"``
            when the difference is above round-off and the threshold it passed is so wide
            (`MEANINGFUL_THRESHOLD`) that it would accept any gradient.
    """

    name: str
    reference: np.ndarray
    difference: float
    expected: str
    threshold: float
    verdict: str

    @property
    def ok(self) -> bool:
        """Whether the difference is within the class it should fall in."""
        if self.expected == ROUNDOFF:
            return self.verdict == ROUNDOFF
        return self.verdict not in (WRONG, INCONCLUSIVE)


@dataclasses.dataclass(frozen=True)
class GradientCheck:
    """The result of `check_gradient`; ``print`` it for a table.

    Attributes:
        gradient: the gradient being checked (same pytree as ``params``; ``None`` where
            ``params`` holds something other than a floating-point array).
        method: the name of the sensitivity method.
        rtol, atol: the tolerances it was computed at (``atol`` as given: a number, or
            per component an array or pytree).
        roundoff, truncation: the floors of the round-off and truncation thresholds (from
            ``eps`` and ``rtol``); each row holds the threshold it was judged by.
        comparisons: one `GradientComparison` per reference.
        roundoff_noise: the measured round-off noise of the two same-grid gradients
            (`_roundoff_noise`); ``loss_change``: the loss's relative change between the
            two tolerances; ``fd_error``: the difference of the central differences at
            ``h`` and ``2 h``.  Each widens a threshold (module docstring).
        stationary_scale: 0, or at a stationary point the gradient scale that the
            differences are relative to (module docstring).
        mismatched: ``(name, gradient, central difference)`` of each component that
            differs from its own central difference by more than `COMPONENT_MISMATCH` of
            itself, where that difference is reliable (`component_mismatches`), largest
            first.  The three comparisons are norms over all components, and one wrong
            small component hides in them.
    """

    gradient: Any
    method: str
    rtol: float
    atol: Any
    roundoff: float
    truncation: float
    comparisons: tuple[GradientComparison, ...]
    roundoff_noise: float = 0.0
    loss_change: float = 0.0
    fd_error: float = 0.0
    stationary_scale: float = 0.0
    mismatched: tuple[tuple[str, float, float], ...] = ()

    @property
    def ok(self) -> bool:
        """True when every difference is in its expected class (central differences too
        wide to decide anything are not held against the gradient: a note says so), and no
        component disagrees with its own central difference (`mismatched`)."""
        same_grid, tighter, fd = self.comparisons
        return (same_grid.ok and tighter.ok and (fd.ok or fd.verdict == INCONCLUSIVE)
                and not self.mismatched)

    @property
    def summary(self) -> str:
        """One sentence: can the gradient be trusted, and if not, why."""
        same_grid, tighter, fd = self.comparisons
        discrete = same_grid.expected == ROUNDOFF
        if self.ok:
            exact = (
                "the gradient is the exact derivative of the computed solution (in t0 and "
                "t1, if differentiated, by the continuous rule f(t, y)), and it "
                if discrete else "the gradient "
            )
            if self.loss_change > LOOSE_LOSS_CHANGE * self.rtol:
                # The thresholds widened with the loss: "within the tolerance" would mislead
                # (a forcing table's jumps: 0.4 % off, reported as plain OK; a UAT).
                return (
                    f"OK, but only loosely: {exact}agrees with the derivative of the ODE to "
                    f"within what the solution itself has converged to, and the loss moved by "
                    f"{self.loss_change:.1e} (relative, "
                    f"{self.loss_change / self.rtol:.0f}x rtol) between the two tolerances. "
                    "Tighten rtol until the loss agrees between them, or remove what keeps "
                    "the solve from converging (a switch or jumps in time: README, 'Inputs "
                    "that switch in time')."
                )
            return f"OK: {exact}agrees with the derivative of the ODE to within the tolerance."
        if not all(np.isfinite(c.difference) for c in self.comparisons):
            return "WRONG: the gradient or a reference is not finite."
        if self.mismatched and same_grid.ok and tighter.ok and (
                fd.ok or fd.verdict == INCONCLUSIVE):
            name, value, reference = self.mismatched[0]
            more = (f" ({len(self.mismatched) - 1} more component(s) too)"
                    if len(self.mismatched) > 1 else "")
            return (
                f"UNRELIABLE: the component {name} is {value:.4g} by this method and "
                f"{reference:.4g} by central differences (which agree at twice their step)"
                f"{more}; the comparisons above are norms over all components, and this one "
                "hides in them. A zero there typically comes from a switch on that parameter "
                "(`jnp.where(t < p, ...)` has no derivative in `p`; make it an `Event`, "
                "README 'Inputs that switch in time'). Check that parameter on its own."
            )
        if tighter.verdict == INCONCLUSIVE and same_grid.ok:
            return (
                f"INCONCLUSIVE: the loss itself changes by {self.loss_change:.1e} (relative) "
                "between the two tolerances: the solution has not converged, so differences "
                "as large as the gradient itself count as truncation, and nothing can be "
                "said about the gradient at this tolerance. Tighten rtol until the loss "
                "agrees between the tolerances; a chaotic system over a long horizon may not "
                "get there in float64 (shorten the horizon, or fit over shorter windows)."
            )
        if tighter.verdict == WRONG:
            if not same_grid.ok:
                amplified = (
                    f" Even forward and reverse mode on the same steps agree only to "
                    f"{same_grid.difference:.0e}: round-off is amplified along with the "
                    "gradient.")
            elif self.roundoff_noise > self.roundoff:
                amplified = (
                    f" One-ulp changes of the parameters or of the loss's cotangent seed move "
                    f"the gradient by "
                    f"{self.roundoff_noise:.0e}: round-off is amplified along with it.")
            else:
                amplified = ""
            return (
                "UNRELIABLE: the derivative of the discretisation has not converged to the "
                "derivative of the ODE (it changes with the tolerance by more than truncation "
                "explains). "
                "Typical causes: a stiff problem solved with an explicit method (steps on "
                "the stability boundary: use a Rosenbrock solver such as ja.Rodas5()); a "
                "tolerance too loose for the gradient, which can converge more slowly than "
                "the solution (tighten rtol and check again); or a right-hand side that "
                "switches in time or state (a `jnp.where` on t: make the switch an `Event`, "
                "README 'Inputs that switch in time')." + amplified
            )
        if not same_grid.ok:
            if discrete:
                return (
                    "WRONG: the method disagrees with forward mode on the same step grid by "
                    "more than round-off: this is a bug, please report it."
                )
            return (
                "WRONG: the method disagrees with the exact derivative of the discrete "
                "solution by more than truncation."
            )
        return (
            "UNRELIABLE: finite differences disagree beyond truncation while the tolerances "
            "agree: the loss may be non-smooth in the parameters (a switch such as "
            "`jnp.where(t < p, ...)` has no derivative in `p`; make it an `Event`, README "
            "'Inputs that switch in time'), or the finite-difference step too large for it."
        )

    def __str__(self) -> str:
        grad = ravel_pytree(self.gradient)[0]
        lines = [
            f"Gradient check of {self.method} at rtol={self.rtol:.1e}, {_describe(self.atol)} "
            f"(|grad| = {float(jnp.linalg.norm(grad)):.3e})",
            f"  {'compared with':<46} {'rel. diff':>10}  {'expected':<22} verdict",
        ]
        for c in self.comparisons:
            expected = f"{c.expected} <= {c.threshold:.1e}"
            lines.append(
                f"  {c.name:<46} {c.difference:>10.2e}  {expected:<22} {c.verdict}"
            )
        for name, value, reference in self.mismatched[:3]:
            lines.append(f"  component {name}: {value:.4g}, central differences {reference:.4g}")
        lines.extend(f"  {note}" for note in self.notes)
        lines.append(f"  {self.summary}")
        return "\n".join(lines)

    @property
    def notes(self) -> list[str]:
        """Why a difference above its threshold's floor was accepted (the measured
        widenings of the module docstring), one line each."""
        notes = []
        same_grid, tighter, fd = self.comparisons
        if self.stationary_scale > 0:
            notes.append(
                f"a stationary point: the loss is flat to first order over the central "
                f"differences' step, so the last two differences are relative to the "
                f"curvature times the parameters' size, {self.stationary_scale:.1e}, not to "
                "|grad| (how far they would move the minimum)")
        if (same_grid.expected == ROUNDOFF and same_grid.difference > self.roundoff
                and same_grid.ok):
            notes.append(
                f"round-off is amplified here: one-ulp changes of the parameters or of the "
                f"loss's cotangent seed move the gradients by up to {self.roundoff_noise:.1e}, "
                f"so the same-grid threshold is "
                f"{same_grid.threshold:.1e}")
        if (self.truncation < tighter.difference <= tighter.threshold
                and tighter.verdict != INCONCLUSIVE):
            notes.append(
                f"the loss itself moved by {self.loss_change:.1e} between the tolerances "
                f"({self.loss_change / self.rtol:.0f}x rtol): truncation is allowed the same "
                "factor")
        if fd.verdict == INCONCLUSIVE and tighter.verdict != INCONCLUSIVE:
            notes.append(
                f"central differences decide nothing here: at twice the step they differ by "
                f"{self.fd_error:.1e}, which widens their threshold to {fd.threshold:.1e}")
        elif fd.threshold - self.fd_error < fd.difference <= fd.threshold:
            notes.append(
                f"central differences at twice the step differ by {self.fd_error:.1e}: "
                "their own error, allowed for")
        return notes


def _relative(a: np.ndarray, b: np.ndarray, floor: float = 0.0) -> float:
    scale = max(float(np.linalg.norm(a)), float(np.linalg.norm(b)), floor)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("inf")
    return 0.0 if scale == 0.0 else float(np.linalg.norm(a - b)) / scale


def _accepting_stiff_steps(method: AbstractSensitivity) -> AbstractSensitivity:
    """``method`` with ``accept_stiff_steps=True`` where it has the option."""
    if getattr(method, "accept_stiff_steps", True):
        return method
    return dataclasses.replace(method, accept_stiff_steps=True)


def _classify(difference: float, roundoff: float, truncation: float) -> str:
    if difference <= roundoff:
        return ROUNDOFF
    if difference > truncation:
        return WRONG
    return INCONCLUSIVE if truncation >= MEANINGFUL_THRESHOLD else TRUNCATION


def _classify_fd(difference: float, roundoff: float, threshold: float) -> str:
    """`_classify` for the central differences, which cannot call a gradient wrong when
    their own threshold is that wide: a central difference whose error (``h`` against
    ``2 h``) is of the order of itself decides nothing, either way.  Lorenz at t = 20: a
    gradient 1.5 % from the truth was 0.88 from differences that moved by 0.5 at twice
    their step (a chaotic-systems acceptance test, 2026-11-29)."""
    verdict = _classify(difference, roundoff, threshold)
    return INCONCLUSIVE if verdict == WRONG and threshold >= MEANINGFUL_THRESHOLD else verdict


def check_gradient(
    loss: Callable[..., Any],
    params: Any,
    *,
    sensitivity: AbstractSensitivity | None = None,
    rtol: float = 1e-6,
    atol: Any = None,
    tighter: float = 100.0,
    roundoff_factor: float = 1e4,
    truncation_factor: float = 100.0,
) -> GradientCheck:
    """Check the gradient of ``loss`` at ``params``: is it exact, converged, and trustworthy?

    Arguments:
        loss: ``loss(params, *, sensitivity, rtol, atol) -> scalar``; it must forward the
            three keyword arguments to `jaxadjoint.solve` (for example with
            ``def loss(p, **options): sol = ja.solve(rhs, y0, t0, t1, p, **options)``).
        params: the point: a pytree of floating arrays, or one holding other leaves too
            (an `equinox.Module` such as a neural network, with its activation
            functions): its floating-point arrays are checked, as `equinox.filter_grad`
            differentiates them, and ``loss`` receives the whole pytree.
        sensitivity: the method whose gradient is checked (default `DiscreteAdjoint()`).
        rtol, atol: the tolerances it is used at (``atol`` defaults to ``rtol``; it may be
            per component, an array or a pytree, as `jaxadjoint.solve` takes it).
        tighter: the factor by which the reference solves tighten both tolerances (less
            where it would take ``rtol`` below 16 eps of the parameters' dtype).
        roundoff_factor, truncation_factor: the thresholds, see the module docstring.

    Returns:
        A `GradientCheck`: ``print`` it for the table, ``.ok`` for a boolean.

    Costs three compiled functions (the method's gradient at both tolerances, forward mode,
    and the finite differences, vmapped over ``2P`` bumped solves), so it is meant for
    diagnosis, with a modest number ``P`` of parameters.
    """
    method = DiscreteAdjoint() if sensitivity is None else sensitivity
    # A diagnosis must see the gradient that differentiation would refuse (stiff steps).
    method = _accepting_stiff_steps(method)
    atol = rtol if atol is None else jax.tree.map(np.asarray, atol)
    if not (rtol > 0 and all(np.all(a >= 0) for a in jax.tree.leaves(atol)) and tighter > 1):
        raise ValueError(
            f"need rtol > 0, atol >= 0 and tighter > 1; got rtol={rtol!r}, atol={atol!r}, "
            f"tighter={tighter!r}"
        )
    params, others = _float_arrays(params)
    flat, unravel_arrays = ravel_pytree(params)

    def unravel(x):
        """The whole pytree, with the floating-point arrays from ``x``."""
        return eqx.combine(unravel_arrays(x), others)

    eps = float(jnp.finfo(flat.dtype).eps)
    # Not below the dtype's resolution, where round-off sets the error (and `solve` warns
    # about an rtol the user never gave: float32 at rtol 1e-5 made 1e-7; a UAT).
    if rtol <= 16 * eps:
        raise ValueError(
            f"check_gradient: rtol={rtol:g} is at the resolution of {flat.dtype} (16 eps = "
            f"{16 * eps:.1e}), so no tighter solve can tell truncation from the gradient's "
            "error: check at a looser rtol (e.g. 1e-4 in float32), or in float64 "
            "(jax.config.update('jax_enable_x64', True)).")
    factor = min(tighter, rtol / (16 * eps))
    tight_rtol, tight_atol = rtol / factor, jax.tree.map(lambda a: a / factor, atol)
    _check_options_reach_solve(loss, unravel(flat), method, atol)

    def value_and_grad_of(method_):
        # The loss times its seed ``1 + k eps`` (exactly 1 for k = 0); the value unseeded.
        def value(x, rtol_, atol_, k):
            v_ = loss(unravel(x), sensitivity=method_, rtol=rtol_, atol=atol_)
            return v_ * _seed(k, v_.dtype), v_

        return jax.jit(jax.value_and_grad(value, has_aux=True))

    def as_array(x, dtype=flat.dtype):
        return jnp.asarray(x, dtype=dtype)

    def evaluate(fn, x, rtol_, atol_, k=0.0):
        """The loss and its gradient (seeded by ``1 + k eps``, divided out again)."""
        (_, v_), g_ = fn(x, as_array(rtol_), jax.tree.map(as_array, atol_), as_array(k))
        g_ = np.asarray(g_)
        return float(v_), g_ / float(_seed(k, v_.dtype)) if k else g_

    grad_method = value_and_grad_of(method)
    v, g = evaluate(grad_method, flat, rtol, atol)
    v_tight, g_tight = evaluate(grad_method, flat, tight_rtol, tight_atol)
    same_grid = value_and_grad_of(DiscreteForward(accept_stiff_steps=True))
    g_grid = evaluate(same_grid, flat, rtol, atol)[1]

    # Central differences of the tightly solved loss; step balances h^2 against rtol_fd / h.
    # The same at 2h estimates their own error (Richardson: the h^2 term quadruples).
    fd_rel_step = max(tight_rtol, eps) ** (1.0 / 3.0)
    steps = fd_rel_step * jnp.maximum(1.0, jnp.abs(flat))
    bumps = jnp.concatenate([jnp.diag(steps), -jnp.diag(steps)])

    @jax.jit
    def bumped_losses(bumps):
        def one(b):
            return loss(unravel(flat + b), sensitivity=method, rtol=tight_rtol, atol=tight_atol)

        return jax.vmap(one)(bumps)

    centre = jnp.zeros_like(bumps[:1])
    try:
        values = np.asarray(bumped_losses(jnp.concatenate([bumps, 2 * bumps, centre])))
    except Exception as error:  # a runtime error of a solve, under jit: its own class
        raise RuntimeError(
            "check_gradient: a solve of the loss at parameters moved for the central "
            f"differences (by {fd_rel_step:.1e} x max(1, |p|) each, at rtol={tight_rtol:.0e}) "
            "failed, so the gradient cannot be checked against them here: the loss is not "
            "defined (or not solvable) that close to `params`, which points to a solution "
            "near the edge of what the solver can do (a near-collision, a blow-up, a "
            "stiff transient). Check the solve at `params` itself (its stats, or "
            "`throw=False` and `sol.result`); a smaller `tighter` makes the step smaller. "
            f"The failure: {error}") from error
    n = flat.size
    g_fd = (values[:n] - values[n:2 * n]) / (2 * np.asarray(steps))
    g_fd_double = (values[2 * n:3 * n] - values[3 * n:4 * n]) / (4 * np.asarray(steps))
    scale, loss_scale = stationary_scales(
        g_fd, values[:n] - 2 * values[-1] + values[n:2 * n],
        values[2 * n:3 * n] - 2 * values[-1] + values[3 * n:4 * n], np.asarray(steps),
        np.asarray(flat))
    fd_error = _relative(g_fd, g_fd_double, scale)
    fd_error = fd_error if np.isfinite(fd_error) else 0.0

    roundoff = roundoff_factor * eps
    loss_change = _relative(np.asarray(v), np.asarray(v_tight), loss_scale)
    loss_change = loss_change if np.isfinite(loss_change) else 0.0
    truncation_floor = truncation_factor * rtol
    truncation = truncation_factor * max(rtol, loss_change)
    fd_threshold = (truncation + truncation_factor * max(tight_rtol, eps) ** (2.0 / 3.0)
                    + fd_error)
    # Only the discrete methods differentiate the computed solution itself.
    noise = 0.0
    if isinstance(method, (DiscreteAdjoint, DiscreteForward)):
        noise = _roundoff_noise((grad_method, same_grid), (g, g_grid), v, flat, rtol, atol,
                                evaluate)
        grid_expected = ROUNDOFF
        grid_threshold = min(max(roundoff, NOISE_FACTOR * noise), truncation)
    else:
        grid_expected, grid_threshold = TRUNCATION, truncation
    rows = []
    for name, ref, expected, threshold in (
        ("same step grid, forward mode (DiscreteForward)", g_grid, grid_expected,
         grid_threshold),
        (f"same method, tighter rtol={tight_rtol:.0e}", g_tight, TRUNCATION, truncation),
        (f"central differences (step {fd_rel_step:.0e}, rtol={tight_rtol:.0e})", g_fd,
         TRUNCATION, fd_threshold),
    ):
        # Forward and reverse mode on the same steps sum the same terms: their round-off
        # is relative to the gradient itself, stationary or not.
        diff = _relative(g, ref, scale if expected != ROUNDOFF else 0.0)
        bound = threshold if expected == ROUNDOFF else roundoff
        verdict = (_classify_fd if ref is g_fd else _classify)(diff, bound, threshold)
        rows.append(GradientComparison(name, ref, diff, expected, threshold, verdict))
    mismatched = () if scale > 0 else component_mismatches(
        params, g, g_tight, g_fd, g_fd_double, roundoff,
        _fd_noise(values[-1], eps, np.asarray(steps)))
    return GradientCheck(
        gradient=unravel_arrays(jnp.asarray(g)), method=type(method).__name__, rtol=float(rtol),
        atol=float(atol) if is_scalar_atol(atol) else atol, roundoff=roundoff,
        truncation=truncation_floor,
        comparisons=tuple(rows), roundoff_noise=noise, loss_change=loss_change, fd_error=fd_error,
        stationary_scale=scale, mismatched=mismatched,
    )


def component_mismatches(params: Any, g: np.ndarray, g_tight: np.ndarray, g_fd: np.ndarray,
                         g_fd_double: np.ndarray, roundoff: float, fd_noise: np.ndarray
                         ) -> tuple[tuple[str, float, float], ...]:
    """The components of ``g`` that differ from their central differences ``g_fd`` by more
    than `COMPONENT_MISMATCH` of the larger of the two, where that difference is reliable:
    ``g_fd`` agrees with the differences at twice the step (``g_fd_double``) to
    `COMPONENT_FD_AGREEMENT` of itself, and the mismatch is `COMPONENT_TRUNCATION` times the
    component's own change between the tolerances, ``|g - g_tight|`` (its truncation, as
    measured: a component that is small by cancellation moves with the tolerance as much as
    it misses the differences), and above ``roundoff`` times the gradient's norm and the
    differences' own round-off ``fd_noise`` (`_fd_noise`).  Named by their path in
    ``params``; largest mismatch first.

    A loss that does not depend on the parameters (a conserved total) has the gradient 0
    exactly, and its differences are noise (9e-13 on a loss of 42): a chemist's check called
    that UNRELIABLE before the noise floor.

    An epidemic model's lockdown date behind `jnp.where(t > t_lock, ...)`: 0 against 0.105,
    beside seven rates with a gradient of norm 89; every norm comparison said OK.
    """
    names = _component_names(params)
    difference = np.abs(g - g_fd)
    size = np.maximum(np.abs(g), np.abs(g_fd))
    reliable = np.abs(g_fd - g_fd_double) <= COMPONENT_FD_AGREEMENT * np.abs(g_fd)
    truncation = COMPONENT_TRUNCATION * np.abs(g - g_tight)
    floor = roundoff * max(float(np.linalg.norm(g)), float(np.linalg.norm(g_fd)))
    flagged = (reliable & (difference > COMPONENT_MISMATCH * size) & (difference > truncation)
               & (difference > floor) & (difference > fd_noise) & np.isfinite(difference))
    order = np.argsort(-np.where(flagged, difference, -1.0))
    return tuple((names[i], float(g[i]), float(g_fd[i])) for i in order if flagged[i])


def _check_options_reach_solve(loss: Callable, params: Any, method: Any, atol: Any) -> None:
    """Refuse a ``loss`` that does not pass its keyword options on to `jaxadjoint.solve`.

    The check compares solves at two tolerances and two methods through those options; a
    loss that drops them compares each solve with itself, and every row said 0 and OK (a
    newcomer's ``def loss(theta)``, 2026-11-29).  Probed with ``rtol=-1``, which a solve
    refuses at once: a loss that returns a finite value never handed it on."""
    # A loss jitted on its own refuses the rtol at run time, in a host callback whose
    # failure JAX logs with a traceback: expected here, so not shown.
    callback_log = logging.getLogger("jax._src.callback")
    disabled, callback_log.disabled = callback_log.disabled, True
    try:
        value = loss(params, sensitivity=method, rtol=-1.0, atol=atol)
    except TypeError as error:
        if "unexpected keyword argument" not in str(error):
            return
        raise TypeError(OPTIONS_NOT_FORWARDED + f" (calling it failed: {error})") from error
    except Exception:  # noqa: BLE001 (the solve refused rtol=-1: the options reach it)
        return
    finally:
        callback_log.disabled = disabled
    if np.all(np.isfinite(np.asarray(value))):
        raise ValueError(OPTIONS_NOT_FORWARDED + " (with rtol=-1, which a solve refuses, it "
                         "returned a value).")


OPTIONS_NOT_FORWARDED = (
    "check_gradient calls loss(params, sensitivity=..., rtol=..., atol=...) and compares "
    "solves at two tolerances and two methods through these options, so the loss must pass "
    "them on to every ja.solve: def loss(p, **options): sol = ja.solve(rhs, y0, t0, t1, p, "
    "**options); ... The loss given does not"
)


def _fd_noise(value: Any, eps: float, steps: np.ndarray) -> np.ndarray:
    """The round-off of each central difference: `FD_ROUNDOFF` ``eps`` of the loss
    ``value``, divided by the step ``h`` (a difference over ``2 h`` of two losses each
    rounded).  Not the tight solve's rtol: the losses of nearby parameters share their
    truncation error smoothly (a conserved total plus 1e-6 of a temperature: the differences
    agreed with the gradient to 6e-6 where rtol / h is 5e-6 of the loss), and the step's own
    error is caught by the agreement at ``2 h``."""
    return FD_ROUNDOFF * eps * abs(float(value)) / steps


def _component_names(params: Any) -> list[str]:
    """A name per component of ``ravel_pytree(params)``: the leaf's path and the index in
    it (``['tl']``, ``['A'][2, 3]``)."""
    names = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        base = jax.tree_util.keystr(path) or "params"
        shape = np.shape(leaf)
        if not shape:
            names.append(base)
            continue
        for index in np.ndindex(*shape):
            names.append(f"{base}[{', '.join(map(str, index))}]")
    return names


def _float_arrays(params: Any) -> tuple[Any, Any]:
    """``params`` split into its floating-point arrays (what is checked, as
    `equinox.filter_grad` differentiates) and the rest (`equinox.partition`)."""
    arrays, others = eqx.partition(params, eqx.is_inexact_array_like)
    if not jax.tree.leaves(arrays):
        raise TypeError(
            "check_gradient: `params` holds no floating-point arrays to check (got "
            f"{type(params).__name__}); pass the parameters the loss differentiates, e.g. "
            "a float array, a pytree of them, or an equinox.Module holding them")
    return jax.tree.map(jnp.asarray, arrays), others


def _seed(k: Any, dtype: Any) -> Array:
    """``1 + k eps`` in ``dtype``: a cotangent seed that rounds the reverse sweep anew."""
    return 1 + jnp.asarray(k, dtype) * jnp.finfo(dtype).eps


def stationary_scales(g_fd: np.ndarray, second: np.ndarray, second_double: np.ndarray,
                      steps: np.ndarray, params: np.ndarray) -> tuple[float, float]:
    """The gradient and loss scales at a stationary point, ``||H_ii m_i||`` and
    ``||H_ii m_i^2||`` with ``m_i = max(1, |p_i|)``, where the loss is flat to first order
    over the central differences' step (``||g_fd h|| < ||second|| / 2``, ``second`` the
    changes ``L(p + h) - 2 L(p) + L(p - h)``) and curves like a quadratic (``second_double``,
    the same at ``2 h``, within ``[2, 6]`` times ``second``: a jump of the loss, a dose
    landing on ``t1``, is no curvature); else ``(0, 0)``."""
    first_order = float(np.linalg.norm(g_fd * steps))
    second_order = float(np.linalg.norm(second))
    if not (np.isfinite(first_order) and np.isfinite(second_order)
            and np.all(np.isfinite(second_double))):
        return 0.0, 0.0
    if first_order >= 0.5 * second_order:
        return 0.0, 0.0
    if np.any(np.abs(second_double - 4 * second) > 2 * np.abs(second)):
        return 0.0, 0.0
    curvature = np.abs(second) / steps**2
    size = np.maximum(1.0, np.abs(params))
    return float(np.linalg.norm(curvature * size)), float(np.linalg.norm(curvature * size**2))


def _describe(atol: Any) -> str:
    """``atol=1.0e-06``, or the range of a per-component one."""
    if is_scalar_atol(atol):
        return f"atol={float(atol):.1e}"
    leaves = [np.asarray(a) for a in jax.tree.leaves(atol)]
    low = min(float(a.min()) for a in leaves)
    high = max(float(a.max()) for a in leaves)
    return f"atol per component in [{low:.1e}, {high:.1e}]"


def _roundoff_noise(fns: tuple, gradients: tuple, value: float, flat: Array, rtol: float,
                    atol: Any, evaluate: Callable) -> float:
    """How far the gradients of ``fns`` move when each parameter moves by one unit in its
    last place (`NOISE_SAMPLES` random signs), or when the loss's cotangent seed is
    ``1 + k eps`` (`NOISE_SEEDS`): their round-off noise on this step grid, relative to
    the gradients themselves (stationary or not, as the same-grid row they widen).

    The seeds leave the forward solve, and so the steps, untouched and round every product
    of the reverse sweep anew.  They are what measures an ill-conditioned stiff step: on
    A + B <-> C -> P with kf = 1e9 (Rodas5, ``gamma h kf ~ 1e10``) one-ulp parameter
    changes all changed the step grid (not counted, below), while the seeds moved the
    gradients by 2e-8 to 2e-7, as far as reverse and forward mode differ (1.3e-7).

    Differentiable arithmetic that amplifies round-off (a stiff relaxation, thousands of
    steps) makes the reverse and forward sweeps disagree by that much with no bug (Van der
    Pol at mu = 1e3, Rodas5: forward mode moves by 1e-9, reverse mode by 2e-11, and the two
    differ by 2e-10).  A sample whose loss moved by more than its first-order change plus
    round-off took other steps (a step-size decision flipped) and is not counted.
    """
    eps = float(jnp.finfo(flat.dtype).eps)
    rng = np.random.default_rng(0)
    noise = 0.0
    for _ in range(NOISE_SAMPLES):
        signs = rng.choice(np.array([-1.0, 1.0]), size=flat.shape)
        moved = flat + jnp.asarray(signs * eps, flat.dtype) * jnp.abs(flat)
        delta = np.asarray(moved - flat)
        for fn, g in zip(fns, gradients):
            v, g_moved = evaluate(fn, moved, rtol, atol)
            expected = abs(float(np.dot(g, delta))) + 1e3 * eps * abs(value)
            if abs(v - value) > 2 * expected or not np.all(np.isfinite(g_moved)):
                continue
            noise = max(noise, _relative(g_moved, g))
    for k in NOISE_SEEDS:
        for fn, g in zip(fns, gradients):
            g_seeded = evaluate(fn, flat, rtol, atol, k)[1]
            if np.all(np.isfinite(g_seeded)):
                noise = max(noise, _relative(g_seeded, g))
    return noise
