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

A difference above its class is flagged **wrong**: the gradient is not the derivative of the
ODE solution that the loss means (typically a stiff problem whose explicit steps ride the
stability boundary: the exact derivative of those steps can be astronomically large), or
something is broken.

Thresholds (relative differences ``||g - g_ref||_2 / max(||g||_2, ||g_ref||_2)``), all
stored in the result:

- round-off: ``roundoff_factor * eps`` (``eps`` of the gradient's dtype; default factor
  ``1e4``: the reverse and forward sweeps sum thousands of products in different orders);
- truncation: ``truncation_factor * rtol`` (default factor ``100``: gradients of adaptive
  solves are typically accurate to a few times the tolerance);
- finite differences: the truncation threshold plus ``truncation_factor * rtol_fd ** (2/3)``,
  the error of a central difference with step ``h = rtol_fd ** (1/3) * max(1, |p|)`` on a
  loss known to ``rtol_fd`` (balancing ``h**2`` against ``rtol_fd / h``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ._adjoint import DiscreteAdjoint
from ._discrete_forward import DiscreteForward
from ._sensitivity_base import AbstractSensitivity

ROUNDOFF = "round-off"
TRUNCATION = "truncation"
WRONG = "WRONG"


@dataclasses.dataclass(frozen=True)
class GradientComparison:
    """One row of a `GradientCheck`.

    Attributes:
        name: what the gradient was compared with.
        reference: that gradient, flattened (``jax.flatten_util.ravel_pytree`` order).
        difference: ``||g - reference||_2 / max(||g||_2, ||reference||_2)``.
        expected: the class the difference should fall in (``"round-off"`` or
            ``"truncation"``).
        threshold: the largest difference accepted for ``expected``.
        verdict: ``"round-off"``, ``"truncation"`` or ``"WRONG"``.
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
        return self.verdict != WRONG


@dataclasses.dataclass(frozen=True)
class GradientCheck:
    """The result of `check_gradient`; ``print`` it for a table.

    Attributes:
        gradient: the gradient being checked (same pytree as ``params``).
        method: the name of the sensitivity method.
        rtol, atol: the tolerances it was computed at.
        roundoff: the round-off threshold; ``truncation``: the truncation threshold.
        comparisons: one `GradientComparison` per reference.
    """

    gradient: Any
    method: str
    rtol: float
    atol: float
    roundoff: float
    truncation: float
    comparisons: tuple[GradientComparison, ...]

    @property
    def ok(self) -> bool:
        """True when every difference is in its expected class."""
        return all(c.ok for c in self.comparisons)

    @property
    def summary(self) -> str:
        """One sentence: can the gradient be trusted, and if not, why."""
        same_grid, tighter = self.comparisons[0], self.comparisons[1]
        discrete = same_grid.expected == ROUNDOFF
        if self.ok:
            exact = (
                "the gradient is the exact derivative of the computed solution, and it "
                if discrete else "the gradient "
            )
            return f"OK: {exact}agrees with the derivative of the ODE to within the tolerance."
        if not all(np.isfinite(c.difference) for c in self.comparisons):
            return "WRONG: the gradient or a reference is not finite."
        if tighter.verdict == WRONG:
            amplified = (
                f" Even forward and reverse mode on the same steps agree only to "
                f"{same_grid.difference:.0e}: round-off is amplified along with the gradient."
                if not same_grid.ok else ""
            )
            return (
                "UNRELIABLE: the derivative of the discretisation has not converged to the "
                "derivative of the ODE (it changes with the tolerance far beyond truncation). "
                "Typical causes: a stiff problem solved with an explicit method (steps on "
                "the stability boundary; try a Rosenbrock solver, ja.Rodas5(), or tighter "
                "tolerances), or a right-hand side that switches in time or state (a "
                "`jnp.where` on t: make the switch an `Event`, README 'Inputs that switch in "
                "time')." + amplified
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
            f"Gradient check of {self.method} at rtol={self.rtol:.1e}, atol={self.atol:.1e} "
            f"(|grad| = {float(jnp.linalg.norm(grad)):.3e})",
            f"  {'compared with':<46} {'rel. diff':>10}  {'expected':<22} verdict",
        ]
        for c in self.comparisons:
            expected = f"{c.expected} <= {c.threshold:.1e}"
            lines.append(
                f"  {c.name:<46} {c.difference:>10.2e}  {expected:<22} {c.verdict}"
            )
        lines.append(f"  {self.summary}")
        return "\n".join(lines)


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    scale = max(float(np.linalg.norm(a)), float(np.linalg.norm(b)))
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
    return TRUNCATION if difference <= truncation else WRONG


def check_gradient(
    loss: Callable[..., Any],
    params: Any,
    *,
    sensitivity: AbstractSensitivity | None = None,
    rtol: float = 1e-6,
    atol: float | None = None,
    tighter: float = 100.0,
    roundoff_factor: float = 1e4,
    truncation_factor: float = 100.0,
) -> GradientCheck:
    """Check the gradient of ``loss`` at ``params``: is it exact, converged, and trustworthy?

    Arguments:
        loss: ``loss(params, *, sensitivity, rtol, atol) -> scalar``; it must forward the
            three keyword arguments to `jaxadjoint.solve` (for example with
            ``def loss(p, **options): sol = ja.solve(rhs, y0, t0, t1, p, **options)``).
        params: the point (a pytree of floating arrays).
        sensitivity: the method whose gradient is checked (default `DiscreteAdjoint()`).
        rtol, atol: the tolerances it is used at (``atol`` defaults to ``rtol``).
        tighter: the factor by which the reference solves tighten both tolerances.
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
    atol = rtol if atol is None else atol
    if not (rtol > 0 and atol >= 0 and tighter > 1):
        raise ValueError(
            f"need rtol > 0, atol >= 0 and tighter > 1; got rtol={rtol!r}, atol={atol!r}, "
            f"tighter={tighter!r}"
        )
    flat, unravel = ravel_pytree(params)
    eps = float(jnp.finfo(flat.dtype).eps)
    tight_rtol, tight_atol = rtol / tighter, atol / tighter

    def grad_of(method_):
        def value(x, rtol_, atol_):
            return loss(unravel(x), sensitivity=method_, rtol=rtol_, atol=atol_)

        return jax.jit(jax.grad(value))

    def as_array(x, dtype=flat.dtype):
        return jnp.asarray(x, dtype=dtype)

    grad_method = grad_of(method)
    g = np.asarray(grad_method(flat, as_array(rtol), as_array(atol)))
    g_tight = np.asarray(grad_method(flat, as_array(tight_rtol), as_array(tight_atol)))
    same_grid = grad_of(DiscreteForward(accept_stiff_steps=True))
    g_grid = np.asarray(same_grid(flat, as_array(rtol), as_array(atol)))

    # Central differences of the tightly solved loss; step balances h^2 against rtol_fd / h.
    fd_rel_step = max(tight_rtol, eps) ** (1.0 / 3.0)
    steps = fd_rel_step * jnp.maximum(1.0, jnp.abs(flat))
    bumps = jnp.concatenate([jnp.diag(steps), -jnp.diag(steps)])

    @jax.jit
    def bumped_losses(bumps):
        def one(b):
            return loss(unravel(flat + b), sensitivity=method, rtol=tight_rtol, atol=tight_atol)

        return jax.vmap(one)(bumps)

    values = np.asarray(bumped_losses(bumps))
    n = flat.size
    g_fd = (values[:n] - values[n:]) / (2 * np.asarray(steps))

    roundoff = roundoff_factor * eps
    truncation = truncation_factor * rtol
    fd_threshold = truncation + truncation_factor * max(tight_rtol, eps) ** (2.0 / 3.0)
    # Only the discrete methods differentiate the computed solution itself.
    if isinstance(method, (DiscreteAdjoint, DiscreteForward)):
        grid_expected, grid_threshold = ROUNDOFF, roundoff
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
        diff = _relative(g, ref)
        verdict = _classify(diff, roundoff, threshold)
        rows.append(GradientComparison(name, ref, diff, expected, threshold, verdict))
    return GradientCheck(
        gradient=unravel(jnp.asarray(g)), method=type(method).__name__, rtol=float(rtol),
        atol=float(atol), roundoff=roundoff, truncation=truncation, comparisons=tuple(rows),
    )
