"""Step-size controllers and the automatic initial step.

Controllers work in the solver's internal forward time ``tau = direction * t`` (so
``tau`` always increases and step sizes are positive).  Their decisions — which steps
are accepted and how long they are — are *recorded constants* of the solve: gradients
are exact derivatives of the computation on that grid, never through the controller.
The forward loop runs outside differentiation (inside the custom VJP), so no
``stop_gradient`` is needed here.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._validation import is_concrete, step_grid_valid, step_valid
from .solvers._base import AbstractSolver

ControllerState = Any


class Tolerances(eqx.Module):
    """Relative and absolute tolerance of the local error test, as arrays."""

    rtol: Array
    atol: Array


def leading_tolerances(tol: Tolerances, n: int) -> Tolerances:
    """``tol`` for the first ``n`` components of the state (all of a scalar ``atol``)."""
    return Tolerances(tol.rtol, tol.atol[:n]) if jnp.ndim(tol.atol) else tol


def rms_norm(x: Array) -> Array:
    """Root-mean-square norm, Hairer's choice: independent of the number of components."""
    return jnp.sqrt(jnp.mean(jnp.square(x))) if x.size else jnp.zeros((), x.dtype)


def scaled_error(y: Array, y_new: Array, y_error: Array, tol: Tolerances) -> Array:
    """``||err_i / (atol + rtol * max(|y_i|, |y_new_i|))||_rms``; accept when <= 1."""
    scale = tol.atol + tol.rtol * jnp.maximum(jnp.abs(y), jnp.abs(y_new))
    return rms_norm(y_error / scale)


class AbstractController(eqx.Module):
    """Chooses the steps of the forward loop.

    `init` gives the first step and the controller's state, `propose` the time the next
    step aims for, and `adapt` decides from the step just taken whether to accept it
    and what step to try next.
    """

    @property
    @abc.abstractmethod
    def adaptive(self) -> bool:
        """Whether the controller uses the solver's error estimate."""

    @abc.abstractmethod
    def init(
        self,
        f: Callable[[Array, Array], Array],
        tau0: Array,
        tau1: Array,
        y0: Array,
        k0: Array,
        dt0: Array | None,
        solver: AbstractSolver,
        tol: Tolerances,
        direction: Array,
    ) -> tuple[Array, ControllerState, int]:
        """Return ``(first step, state, number of rhs evaluations spent)``."""

    def inputs_valid(self, tau0: Array, tau1: Array, direction: Array) -> Array:
        """Whether the controller's own traced inputs are valid (a ``throw=False`` solve
        with invalid ones does not start: `RESULTS.invalid_controller`)."""
        del tau0, tau1, direction
        return jnp.array(True)

    def propose(self, tau: Array, h: Array, state: ControllerState) -> Array:
        """The time the next step aims for (before landing on save times or ``t1``)."""
        del state
        return tau + h

    @abc.abstractmethod
    def adapt(
        self,
        y: Array,
        y_new: Array,
        y_error: Array | None,
        k0: Array,
        h: Array,
        state: ControllerState,
        solver: AbstractSolver,
        tol: Tolerances,
    ) -> tuple[Array, Array, ControllerState]:
        """Return ``(accept, next step, state)`` after a step of size ``h``."""


class ConstantStep(AbstractController):
    """Steps of fixed size ``dt`` (the last step before a save time or ``t1`` is shortened).

    Step ``n`` ends at ``t0 + n dt`` computed directly, not by accumulation, so long runs
    do not drift.  Only ``|dt|`` counts: the steps always go from ``t0`` towards ``t1``.
    """

    dt: float | Array

    @property
    def adaptive(self) -> bool:
        return False

    def inputs_valid(self, tau0, tau1, direction):
        del tau0, tau1, direction
        return step_valid(jnp.asarray(self.dt))

    def init(self, f, tau0, tau1, y0, k0, dt0, solver, tol, direction):
        del f, tau1, y0, k0, dt0, solver, tol, direction
        h = jnp.abs(jnp.asarray(self.dt, tau0.dtype))
        return h, (tau0, h), 0

    def propose(self, tau, h, state):
        # The grid is t0 + n dt with the constant dt of the state: the step actually taken
        # (``h``, shortened to land on save times and perturbed by round-off) must not feed
        # back, or the grid drifts and can stall.
        del h
        tau0, dt = state
        # Index of the grid point at or just behind tau, tolerant of the round-off of
        # tau - tau0, which grows with |tau| and |tau0|: a fixed allowance (1e-9 once) is
        # below float32's, and below float64's at t0 = 1e5 with dt = 1e-3; the grid point
        # reached was then "just ahead" and the solve stalled on steps of zero length.
        eps = jnp.finfo(jnp.result_type(tau)).eps
        slack = 16 * eps * (jnp.abs(tau) + jnp.abs(tau0) + dt) / dt
        n = jnp.floor((tau - tau0) / dt + slack)
        following = tau0 + (n + 1) * dt
        return jnp.where(following > tau, following, tau0 + (n + 2) * dt)

    def adapt(self, y, y_new, y_error, k0, h, state, solver, tol):
        del y, y_new, y_error, k0, h, solver, tol
        return jnp.array(True), state[1], state


class StepTo(AbstractController):
    """Step exactly to the given times; ``ts[0]`` must be ``t0`` and ``ts[-1]`` ``t1``."""

    ts: Array

    @property
    def adaptive(self) -> bool:
        return False

    def inputs_valid(self, tau0, tau1, direction):
        return step_grid_valid(direction * jnp.asarray(self.ts, tau0.dtype), tau0, tau1)

    def init(self, f, tau0, tau1, y0, k0, dt0, solver, tol, direction):
        del f, tau1, y0, k0, dt0, solver, tol
        grid = direction * jnp.asarray(self.ts, tau0.dtype)
        return grid[1] - grid[0], grid, 0

    def propose(self, tau, h, state):
        grid = state
        index = jnp.searchsorted(grid, tau, side="right")
        return grid[jnp.minimum(index, grid.shape[0] - 1)]

    def adapt(self, y, y_new, y_error, k0, h, state, solver, tol):
        del y, y_new, y_error, k0, solver, tol
        return jnp.array(True), h, state


def initial_step(
    f: Callable[[Array, Array], Array],
    tau0: Array,
    y0: Array,
    k0: Array,
    order: int,
    tol: Tolerances,
) -> Array:
    """Hairer, Nørsett & Wanner's starting step (Solving ODEs I, II.4), 1 rhs evaluation.

    With ``sc = atol + rtol |y0|``: ``h0 = 0.01 ||y0/sc|| / ||f0/sc||``; one explicit
    Euler step estimates the second derivative ``d2``, and
    ``h1 = (0.01 / max(||f0/sc||, d2)) ** (1 / (order + 1))``; the step is
    ``min(100 h0, h1)``.
    """
    scale = tol.atol + tol.rtol * jnp.abs(y0)
    d0 = rms_norm(y0 / scale)
    d1 = rms_norm(k0 / scale)
    tiny = 1e-5
    h0 = jnp.where((d0 < tiny) | (d1 < tiny), 1e-6, 0.01 * d0 / d1)
    k1 = f(tau0 + h0, y0 + h0 * k0)
    d2 = rms_norm((k1 - k0) / scale) / h0
    big = jnp.maximum(d1, d2)
    h1 = jnp.where(
        big <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3), (0.01 / big) ** (1.0 / (order + 1))
    )
    h = jnp.minimum(100 * h0, h1)
    # A non-finite f(t0, y0) makes the estimate NaN, and a NaN step is never "too small":
    # start small instead, so that the forward loop rejects and shrinks the step until it
    # reports `RESULTS.nonfinite`.
    return jnp.where(jnp.isfinite(h), h, 1e-6)


class _AdaptiveController(AbstractController):
    """A controller that sets steps from the error estimate; every one takes ``dtmax``.

    ``dtmax`` (keyword only; scipy's ``max_step``): no step is longer than ``|dtmax|``
    (its sign is ignored, as ``dt0``'s), the first included.  For what the error estimate
    cannot see: a pulse or a switch in the right-hand side shorter than the steps around
    it (a dose, a forcing that is zero most of the time), or an event whose condition
    crosses zero and back within one step.
    Steps are recorded, so gradients stay exact whatever limits them.
    """

    # A Python number stays one (the controller stays hashable, a static argument of a
    # user's `jit`); `solve` hands it to the compiled solve as an array (`_integrate`).
    dtmax: float | Array | None = eqx.field(default=None, kw_only=True)

    @property
    def adaptive(self) -> bool:
        return True

    def inputs_valid(self, tau0, tau1, direction):
        del tau0, tau1, direction
        if self.dtmax is None:
            return jnp.array(True)
        return step_valid(jnp.asarray(self.dtmax))

    def _cap(self, h: Array) -> Array:
        """``h`` limited to ``|dtmax|``."""
        if self.dtmax is None:
            return h
        return jnp.minimum(h, jnp.abs(jnp.asarray(self.dtmax, jnp.result_type(h))))

    def __check_init__(self) -> None:
        """``0 < safety <= 1`` and ``0 < factor_min < 1 < factor_max`` where a controller
        has them as Python numbers: other values never shrink a rejected step (or never
        grow an accepted one), and the solve ran to `max_steps` blaming stiffness.  A
        concrete ``dtmax`` must be finite and non-zero (a traced one that is not stops the
        solve: `RESULTS.invalid_controller`); its sign is ignored, as ``dt0``'s."""
        def number(name):
            value = getattr(self, name, None)
            return value if isinstance(value, (int, float)) else None

        safety, low, high = number("safety"), number("factor_min"), number("factor_max")
        name = type(self).__name__
        if isinstance(self.dtmax, (int, float, np.ndarray)) or (
                isinstance(self.dtmax, jax.Array) and is_concrete(self.dtmax)):
            dtmax = np.asarray(self.dtmax)
            if dtmax.ndim or not (np.isfinite(dtmax) and dtmax != 0):
                raise ValueError(f"`{name}(dtmax=...)` must be a finite non-zero step (its "
                                 f"sign is ignored), got {dtmax.tolist()!r}")
        if safety is not None and not 0 < safety <= 1:
            raise ValueError(f"`{name}(safety=...)` must be in (0, 1], got {safety!r}")
        if low is not None and not 0 < low < 1:
            raise ValueError(f"`{name}(factor_min=...)` must be in (0, 1), got {low!r}")
        if high is not None and not high > 1:
            raise ValueError(f"`{name}(factor_max=...)` must be greater than 1, got {high!r}")

    def _first_step(self, f, tau0, y0, k0, dt0, solver, tol, direction):
        if dt0 is not None:
            return self._cap(jnp.abs(jnp.asarray(dt0, tau0.dtype))), 0
        return self._cap(initial_step(f, tau0, y0, k0, solver.order, tol)), 1


def _exponent_order(solver: AbstractSolver) -> int:
    """Order ``q`` of the error estimate's leading term is ``min(p, p_hat) + 1``."""
    return min(solver.order, solver.error_order) + 1


class IController(_AdaptiveController):
    """Hairer's standard (integral) controller.

    ``err = ||e / (atol + rtol max(|y|, |y_new|))||_rms``; accept when ``err <= 1``;
    next step ``h * clip(safety * err ** (-1/q), factor_min, factor_max)`` with ``q`` the
    order of the error estimate plus one.  After a rejection the step may not grow.

    Every adaptive controller takes ``dtmax=`` (keyword): the longest step allowed.
    """

    safety: float = 0.9
    factor_min: float = 0.2
    factor_max: float = 10.0

    def init(self, f, tau0, tau1, y0, k0, dt0, solver, tol, direction):
        del tau1
        h, evals = self._first_step(f, tau0, y0, k0, dt0, solver, tol, direction)
        return h, jnp.array(False), evals

    def adapt(self, y, y_new, y_error, k0, h, state, solver, tol):
        del k0
        rejected_before = state
        err = scaled_error(y, y_new, y_error, tol)
        accept = err <= 1
        q = _exponent_order(solver)
        factor = self.safety * jnp.where(err == 0, jnp.inf, err ** (-1.0 / q))
        factor = jnp.clip(factor, self.factor_min, self.factor_max)
        factor = jnp.where(rejected_before | ~accept, jnp.minimum(factor, 1.0), factor)
        return accept, self._cap(h * factor), ~accept


class PIController(_AdaptiveController):
    """Proportional–integral controller (Gustafsson; Söderlind).

    ``factor = safety * err_n ** (-beta1/q) * err_{n-1} ** (beta2/q)``, clipped to
    ``[factor_min, factor_max]``.  The memory of the previous error smooths step-size
    sequences on problems where the I controller oscillates between accept and reject.

    Every adaptive controller takes ``dtmax=`` (keyword): the longest step allowed.
    """

    beta1: float = 0.7
    beta2: float = 0.4
    safety: float = 0.9
    factor_min: float = 0.2
    factor_max: float = 10.0

    def init(self, f, tau0, tau1, y0, k0, dt0, solver, tol, direction):
        del tau1
        h, evals = self._first_step(f, tau0, y0, k0, dt0, solver, tol, direction)
        return h, jnp.ones((), tau0.dtype), evals

    def adapt(self, y, y_new, y_error, k0, h, state, solver, tol):
        del k0
        prev_err = state
        err = scaled_error(y, y_new, y_error, tol)
        accept = err <= 1
        q = _exponent_order(solver)
        safe_err = jnp.maximum(err, 1e-10)
        factor = self.safety * safe_err ** (-self.beta1 / q) * prev_err ** (self.beta2 / q)
        factor = jnp.clip(factor, self.factor_min, self.factor_max)
        factor = jnp.where(accept, factor, jnp.minimum(factor, 1.0))
        return accept, self._cap(h * factor), jnp.where(accept, safe_err, prev_err)


class OdeintController(_AdaptiveController):
    """The step-size rule of boost::odeint, as used in the paper (section 2.1, eqs. 9–11).

    ``v = max_i |e_i| / (atol + rtol (|y_i| + h |f(t_n, y_n)_i|))`` (odeint's
    ``default_error_checker`` with ``a_x = a_dxdt = 1`` and the max norm), then

    - ``v > 1``: reject, ``h' = h * max(0.9 v^(-1/(p_E - 1)), 0.2)``;
    - ``v < 0.5``: accept, ``h' = h * 0.9 v^(-1/p_S)`` (``v`` floored at ``5^(-p_S)``,
      so the growth is at most 5×);
    - otherwise accept with ``h' = h``.

    ``p_S`` is the order of the propagated solution and ``p_E`` that of the error
    estimator (odeint's ``stepper_order`` and ``error_order``).

    Every adaptive controller takes ``dtmax=`` (keyword): the longest step allowed.
    """

    def init(self, f, tau0, tau1, y0, k0, dt0, solver, tol, direction):
        del tau1
        h, evals = self._first_step(f, tau0, y0, k0, dt0, solver, tol, direction)
        return h, None, evals

    def adapt(self, y, y_new, y_error, k0, h, state, solver, tol):
        del y_new
        scale = tol.atol + tol.rtol * (jnp.abs(y) + h * jnp.abs(k0))
        v = jnp.max(jnp.abs(y_error) / scale) if y.size else jnp.zeros((), y.dtype)
        p_s, p_e = solver.order, solver.error_order
        shrink = jnp.maximum(0.9 * v ** (-1.0 / (p_e - 1)), 0.2)
        grow = 0.9 * jnp.maximum(v, 5.0 ** (-p_s)) ** (-1.0 / p_s)
        factor = jnp.where(v > 1, shrink, jnp.where(v < 0.5, grow, 1.0))
        return v <= 1, self._cap(h * factor), state
