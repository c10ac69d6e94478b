"""`ContinuousAdjoint`: solve the adjoint ODE backwards (the paper's CASA).

For a loss ``L(y(t_1..t_n), q)`` with ``q = int R dt``, the adjoint ``lam(t) = dL/dy(t)``
and the parameter adjoint ``pbar`` satisfy, backwards from ``t1`` to ``t0``,

    lam'  = -J_y^T lam - R_y^T mu,        lam(t1) = 0,  lam += dL/dy(t_i) at each save,
    pbar' = -J_p^T lam - R_p^T mu,        pbar(t1) = 0,

with ``mu = dL/dq``; then ``dL/dy0 = lam(t0)`` and ``dL/dp = pbar(t0)``.  The backward
solve is an ordinary adaptive Runge–Kutta solve of the augmented system (same solver and
controller, its own steps), split at the save times where the cotangents of the saves
are added.  Its accuracy follows the tolerances — it is the derivative of the exact
solution approximated to ``rtol``, not the derivative of the computed solution.

The Jacobian products need ``y(t)`` on the way back.  Two ways, ``state=``:

- ``"backsolve"``: re-integrate ``y' = f`` backwards from ``y(t1)`` alongside the adjoint.
  Memory ``O(N)``, no storage; but integrating a dissipative system backwards is
  unstable, so errors in ``y`` grow and the gradient can be poor (the paper observes
  this: CASA with backward state is the least accurate method).
- ``"checkpointed"`` (default): the forward pass stores every accepted state ``y_n`` and
  slope ``f(t_n, y_n)``, plus ``y''`` (one JVP of ``f`` per accepted step, after the
  forward solve); the backward pass reads ``y(t)`` by quintic Hermite interpolation on
  the forward step that contains ``t``.  Memory ``O(3 N max_steps)``; the interpolant's
  error is ``O(h^6)`` on a step of size ``h`` (below the local error of an order-5
  step), it is stable, and it costs no evaluation of ``f`` on the way back.  The
  interpolant is only ``C^2`` across forward steps, so the backward steps also stop at
  every forward grid point (at least as many steps as the forward solve).  Solvers whose
  own interpolant is of higher order (Vern6, Vern7, Vern8) read ``y(t)`` from it instead
  (every step's dense-output row kept, as for stiff solvers below: ``(s + e + 1) N`` numbers
  a step, 17 N for Vern8): over Vern8's long steps the Hermite interpolant's error was the
  gradient's largest (`_uses_dense_trajectory`).

With a stiff solver (Rosenbrock, Kvaerno5) the backward system is stiff too and is solved
with the same method, its linear systems block by block (`_block_solve`): ``lam`` with
``I + gamma h J^T`` (one ``N x N`` LU per step; ``pbar`` is a quadrature), plus the
state with ``I - gamma h J`` when backsolving.  ``"checkpointed"`` then reads ``y(t)`` from
the solver's own continuous extension (every forward step's dense output kept,
`_DenseTrajectory`), not from the quintic Hermite interpolant, whose node derivatives
``f(y_n)`` and ``J f`` amplify the tolerated error of ``y_n`` by the stiff eigenvalues.
``"backsolve"`` integrates the stiff state backwards in time, where its decaying modes
grow: it fails (``max_steps``, or a blown-up adjoint) on genuinely stiff problems.

Time derivatives use the same continuous formulas as every method.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._adjoint import plain_solve, to_solve_output
from ._adjoint_health import all_finite, healthy, raise_if_blown_up
from ._block_solve import Block, with_blocks
from ._controllers import AbstractController, StepTo, Tolerances
from ._dense import DenseRows, interpolate
from ._forward import Recorder, forward_loop, padded_grid, write_slot
from ._results import RESULTS
from ._runtime_error import raise_if
from ._sensitivity_base import AbstractSensitivity, SolveOutput
from ._sensitivity_common import (
    DerivedSystem,
    combine,
    derived_kwargs,
    fail_if_differentiated_failure,
    integrand_or_empty,
    mask_params,
    ravel,
    save_slopes,
)
from ._stiffness import flag_stiff_gradient
from ._system import Problem, System
from ._time_switches import warn_if_differentiating_a_switch_time
from ._uninitialised import uninitialised
from .solvers._base import AbstractStiffFamily, StepOutput
from .solvers._explicit import AbstractERK
from .solvers._interpolants import interpolant_for

# The order of `_Trajectory`'s quintic Hermite interpolant (local error O(h^6)).
HERMITE_ORDER = 5


class _StatesAndSlopes(Recorder):
    """Keep ``y_n`` and ``k_n = f(t_n, y_n)`` of every accepted step (slot ``n``)."""

    def init(
        self, max_steps: int, y0: Array, num_live: int, witness: Array
    ) -> tuple[Array, Array]:
        del num_live
        shape = (max_steps + 1,) + y0.shape
        return (uninitialised(shape, y0.dtype, witness, "states"),
                uninitialised(shape, y0.dtype, witness, "slopes"))

    def record(self, store, n: Array, y: Array, step: StepOutput, live: tuple, active: Array):
        del live
        ys, ks = store
        return write_slot(ys, n, y, active), write_slot(ks, n, step.ks[0], active)


class _Trajectory(eqx.Module):
    """Quintic Hermite interpolation of the forward solution on its accepted grid.

    On the step ``[tau_n, tau_n + h]`` the interpolant matches ``y``, ``y'`` and ``y''`` at
    both ends (``y'' = dF/dtau + J F``, one JVP per accepted step after the forward
    solve): error ``O(h^6)``, below that of an order-5 step, and ``C^2`` across steps.
    """

    grid: Array  # forward internal time, inf-padded
    ys: Array
    ks: Array  # slopes in forward internal time
    accs: Array  # second derivatives in forward internal time
    num_accepted: Array
    direction: Array  # of the forward solve

    def __call__(self, t: Array) -> Array:
        tau = self.direction * t
        last = jnp.maximum(self.num_accepted - 1, 0)
        n = jnp.clip(jnp.searchsorted(self.grid, tau, side="right") - 1, 0, last)
        ta, tb = self.grid[n], self.grid[n + 1]
        h = tb - ta
        s = jnp.where(h > 0, (tau - ta) / jnp.where(h > 0, h, 1), 0)
        s2, s3 = s * s, s * s * s
        s4, s5 = s3 * s, s3 * s2
        h2 = h * h
        return ((1 - 10 * s3 + 15 * s4 - 6 * s5) * self.ys[n]
                + (s - 6 * s3 + 8 * s4 - 3 * s5) * h * self.ks[n]
                + 0.5 * (s2 - 3 * s3 + 3 * s4 - s5) * h2 * self.accs[n]
                + 0.5 * (s3 - 2 * s4 + s5) * h2 * self.accs[n + 1]
                + (-4 * s3 + 7 * s4 - 3 * s5) * h * self.ks[n + 1]
                + (10 * s3 - 15 * s4 + 6 * s5) * self.ys[n + 1])


def _trajectory(system: System, problem: Problem, out) -> _Trajectory:
    """The interpolant from the forward pass's stored states and slopes."""
    ys, ks = out.store
    num = out.num_accepted
    tau_final = out.grid[num]
    params, direction = problem.params, problem.direction

    def f(tau, y):
        return system.field(tau, y, params, direction)

    ys = ys.at[num].set(out.y_final)
    ks = ks.at[num].set(f(tau_final, out.y_final))

    def acceleration(n, accs):
        tau = out.grid[n]
        one = jnp.ones_like(tau)
        _, acc = jax.jvp(f, (tau, ys[n]), (one, ks[n]))
        return accs.at[n].set(acc)

    # Slots 0..num are written; the interpolant reads no other.  (``ys[0, 0]`` only lends
    # its batching to the allocation.)
    accs = uninitialised(ys.shape, ys.dtype, ys[0, 0], "accelerations")
    accs = jax.lax.fori_loop(0, num + 1, acceleration, accs)
    return _Trajectory(grid=padded_grid(out.grid, num), ys=ys, ks=ks, accs=accs,
                       num_accepted=num, direction=direction)


class _DenseTrajectory(eqx.Module):
    """The forward solution on the stiff solver's own continuous extension (every step's
    dense-output row kept).

    For stiff problems the quintic Hermite interpolant of `_Trajectory` is no good: its
    node data ``f(t_n, y_n)`` and ``y''_n = J f`` amplify the (tolerated) distance of ``y_n``
    from the slow manifold by ``|lambda|`` and ``|lambda|^2``, and so does the adjoint's
    Jacobian along the interpolant (Robertson to t = 40: gradients 0.1-100 % off).  The
    method's continuous extension is built from its stages, which stay on the manifold.
    """

    grid: Array  # forward internal time, inf-padded
    rows: DenseRows
    weights: Any = eqx.field(static=True)
    num_accepted: Array
    direction: Array  # of the forward solve

    def __call__(self, t: Array) -> Array:
        tau = self.direction * t
        return interpolate(self.weights, self.rows, jnp.reshape(tau, (1,)))[0]


def _dense_trajectory(system: System, problem: Problem) -> tuple[Any, _DenseTrajectory]:
    """Forward pass keeping every step's dense output: ``(ForwardOutput, trajectory)``.

    Keeping rows does not change the steps or the saves (`_dense`).
    """
    dense_system = dataclasses.replace(system, dense=True)
    out = forward_loop(dense_system, problem, Recorder())
    trajectory = _DenseTrajectory(
        grid=padded_grid(out.grid, out.num_accepted), rows=out.rows,
        weights=dense_system.stage_plan.weights, num_accepted=out.num_accepted,
        direction=problem.direction,
    )
    return out, trajectory


def _uses_dense_trajectory(system: System, sens: ContinuousAdjoint) -> bool:
    """Checkpointed solves read the state from the solver's own continuous extension
    (`_DenseTrajectory`): stiff solvers that have one, and explicit ones whose interpolant
    is of a higher order than the quintic Hermite's 5 (`HERMITE_ORDER`; Vern6, Vern7 and
    Vern8).  Vern8's long steps on a Kepler orbit (e = 0.7, 20 periods) put the Hermite
    interpolant's error into the gradient: 1.7e-2, 5.8e-4 and 6.4e-6 off at rtol 1e-8,
    1e-10 and 1e-12, where `DiscreteAdjoint` was 4.7e-5, 4.9e-7 and 7.7e-10 off (an
    astrophysicist's acceptance test, 2026-11-29)."""
    solver = system.solver
    if sens.state != "checkpointed":
        return False
    if isinstance(solver, AbstractERK):
        return interpolant_for(solver.tableau).order > HERMITE_ORDER
    if not isinstance(solver, AbstractStiffFamily):
        return False
    try:
        solver.stage_plan(True)
    except (NotImplementedError, ValueError):
        return False
    return True


class _StopAtGrid(AbstractController):
    """``inner``, but no step crosses a forward grid point (``stops``, increasing).

    The Hermite interpolant is a polynomial on each forward step but only ``C^2``
    across steps; an adjoint step straddling a forward grid point would see that kink in its
    error estimate and shrink to nothing at tight tolerances.
    """

    inner: AbstractController
    stops: Array  # in the adjoint's internal time, increasing

    @property
    def adaptive(self) -> bool:
        return self.inner.adaptive

    def init(self, f, tau0, tau1, y0, k0, dt0, solver, tol, direction):
        return self.inner.init(f, tau0, tau1, y0, k0, dt0, solver, tol, direction)

    def propose(self, tau, h, state):
        index = jnp.searchsorted(self.stops, tau, side="right")
        stop = self.stops[jnp.minimum(index, self.stops.shape[0] - 1)]
        stop = jnp.where(stop > tau, stop, jnp.inf)
        return jnp.minimum(self.inner.propose(tau, h, state), stop)

    def adapt(self, y, y_new, y_error, k0, h, state, solver, tol):
        return self.inner.adapt(y, y_new, y_error, k0, h, state, solver, tol)


class _AdjointSystem(DerivedSystem):
    """``a = [lam, pbar (differentiated leaves), y (backsolve only)]`` in internal time."""

    n_state: int = eqx.field(static=True)
    params_off: Any
    mu: Array
    trajectory: _Trajectory | _DenseTrajectory | None  # None: y is in ``a`` (backsolve)

    def field(self, tau, a, params_on, direction):
        t = direction * tau
        n = self.n_state
        lam = a[:n]
        y = a[a.shape[0] - n:] if self.trajectory is None else self.trajectory(t)
        base = self.base

        def rhs(y, p_on):
            return base.rhs(t, y, combine(p_on, self.params_off))

        dy, vjp = jax.vjp(rhs, y, params_on)
        lam_dot, p_dot = vjp(-lam)
        if base.has_integrand:
            _, vjp_r = jax.vjp(
                lambda y, p_on: base.integrand(t, y, combine(p_on, self.params_off)),
                y, params_on,
            )
            lr, pr = vjp_r(-self.mu)
            lam_dot = lam_dot + lr
            p_dot = jax.tree.map(jnp.add, p_dot, pr)
        parts = [lam_dot, ravel(p_dot, a.dtype)[0]]
        if self.trajectory is None:
            parts.append(dy)
        return direction * jnp.concatenate(parts)


def _backward(
    sens: ContinuousAdjoint, system: System, problem: Problem, params_on: Any, params_off: Any,
    ys_bar: Array, mu: Array, y_final: Array, trajectory: Any,
) -> tuple[Array, Array, Array, Array | None]:
    """Integrate the adjoint from ``t1`` to ``t0``: ``(lam(t0), pbar flat, result, y)``, with
    ``y`` the state re-integrated back to ``t0`` (backsolve; ``None`` otherwise)."""
    dtype = problem.y0.dtype
    n = problem.y0.shape[0]
    num_p = ravel(params_on, dtype)[0].shape[0]
    if isinstance(system.controller, StepTo):
        raise ValueError(
            "`ContinuousAdjoint` chooses its own backward steps and cannot follow "
            "`controller=StepTo(...)`; use an adaptive controller or `ConstantStep`"
        )
    tol = system.tol
    solver = system.solver
    per_component = jnp.ndim(system.tol.atol) > 0
    if per_component and sens.atol is None:
        raise ValueError(
            "`ContinuousAdjoint` with a per-component `atol`: the backward solve's state "
            "(the adjoint and the parameter integral) has other components, so it needs a "
            "scalar absolute tolerance of its own: pass `ContinuousAdjoint(atol=...)`")
    if sens.rtol is not None or sens.atol is not None:
        tol = Tolerances(
            tol.rtol if sens.rtol is None else jnp.asarray(sens.rtol, dtype),
            tol.atol if sens.atol is None else jnp.asarray(sens.atol, dtype),
        )
    if per_component:
        # The Newton test of implicit solvers takes the backward solve's tolerances too.
        solver = solver.with_tolerances(tol.rtol, tol.atol)
    controller = system.controller
    if trajectory is not None:
        # Adjoint internal time is -(forward internal time); stop at every grid point.
        k = jnp.arange(trajectory.grid.shape[0], dtype=jnp.int32)
        index = jnp.maximum(trajectory.num_accepted - k, 0)
        controller = _StopAtGrid(controller, -trajectory.grid[index])
    # Stiff solvers solve with the adjoint system's Jacobian block by block (`_block_solve`):
    # the state (backsolve) with J, then lam with -J^T, then the quadrature pbar.
    blocks = [Block(start=n, size=num_p, diagonal="zero")]
    blocks.insert(0, Block(start=0, size=n, diagonal="jacobian"))
    if trajectory is None:
        blocks.insert(0, Block(start=n + num_p, size=n, diagonal="jacobian"))
    adj = _AdjointSystem(
        **derived_kwargs(system, tol=tol, controller=controller,
                         solver=with_blocks(solver, blocks),
                         dt0=system.dt0 if not system.controller.adaptive else None,
                         interpolate_saves=False, land_on_ts=False),
        n_state=n, params_off=params_off, mu=mu, trajectory=trajectory,
    )
    ends = jnp.concatenate([problem.ts[::-1], problem.t0[None]])
    bars = jnp.concatenate([ys_bar[::-1], jnp.zeros((1, n), dtype)])
    a0 = [jnp.zeros((n + num_p,), dtype)]
    if trajectory is None:
        a0.append(y_final)

    def segment(carry, xs):
        a, start, result = carry
        end, bar = xs
        seg = Problem(y0=a, params=params_on, t0=start, t1=end, ts=end[None])
        out = forward_loop(adj, seg, Recorder())
        a = out.y_final.at[:n].add(bar)
        result = RESULTS.where(result == RESULTS.successful, out.result, result)
        return (a, end, result), None

    (a, _, result), _ = jax.lax.scan(
        segment, (jnp.concatenate(a0), problem.t1, RESULTS.successful), (ends, bars)
    )
    y_back = a[n + num_p:] if trajectory is None else None
    return a[:n], a[n:n + num_p], result, y_back


# The state re-integrated back to t0 (backsolve) may miss y0 by this many units of the
# forward tolerance, ``atol + rtol max(|y0|, |y(t1)|)``, before the gradient is refused
# (the default of `ContinuousAdjoint.max_drift`).
BACKSOLVE_DRIFT = 100.0


def _refuse_lost_state(x: Any, system: System, problem: Problem, y_back: Array,
                       y_final: Array, max_drift: float) -> Any:
    """``x``, unchanged; fails the gradient when backsolve's state, integrated back from
    ``y(t1)``, arrives at ``t0`` more than ``max_drift`` tolerance units away from ``y0``.
    ``x`` holds the state and the parameter cotangents, every value the gradient returns, so
    that the check is not dropped with an unused one.

    The unit is the forward solve's at the larger of the two ends, component by component:
    a component that starts at zero and grows (a CNF's log-density, an accumulated dose) is
    measured on the scale it reaches, not on ``atol`` alone (an FFJORD flow's log-density
    was refused at 223 units of ``atol`` where diffrax's backsolve gradient was 1e-3 off; an
    ML researcher's test, 2026-11-29).

    The backward solve evaluates the adjoint's Jacobians on that state: on a dissipative
    problem it grows away from the forward trajectory (the backward flow amplifies the
    forward solve's errors), and the gradient with it.  Its end is the one point where the
    truth is known.  A grey-box building model (Dopri5, rtol 1e-6, 48 h): the state came back
    3e11 times the size of ``y0`` and one parameter's derivative was 1e12 for 66, with nothing
    raised (user-acceptance run, 2026-11-28); the suite's backsolve cases arrive within 0.4 to
    2.1 units.
    """
    size = jnp.maximum(jnp.abs(problem.y0), jnp.abs(y_final))
    scale = system.tol.atol + system.tol.rtol * size
    miss = jnp.abs(y_back - problem.y0)
    # (`atol = 0` with a zero component: a scale of 0, which only an exact return passes.)
    failed = ~jnp.all(miss <= max_drift * scale)
    units = jnp.where(scale > 0, miss / jnp.where(scale > 0, scale, 1), jnp.inf)
    drift = jnp.max(jnp.where(miss == 0, 0, units))

    def message(drift: np.ndarray) -> str:
        return (
            "Untrustworthy gradient: ContinuousAdjoint(state='backsolve') integrates the state "
            "back from y(t1) to evaluate the adjoint, and it arrived at t0 "
            f"{float(drift):.3g} tolerance units (atol + rtol max(|y0|, |y(t1)|)) away from "
            f"y0 (more than max_drift={max_drift:g}): the backward flow amplified the "
            "forward solve's errors, "
            "which happens on dissipative problems and over long horizons of conservative "
            "ones (an orbit's phase error grows with every period, forward and back), and "
            "the adjoint was evaluated on a different trajectory. Use ContinuousAdjoint() "
            "(state='checkpointed', the default), which reads the state from the forward "
            "steps, or DiscreteAdjoint(). To accept this drift, raise it: "
            "ContinuousAdjoint(state='backsolve', max_drift=...) (float('inf') never "
            "refuses)."
        )

    return raise_if(x, failed, message, drift)


@eqx.filter_custom_vjp
def _solve(problem: Problem, system: System, sens: ContinuousAdjoint) -> SolveOutput:
    del sens
    return plain_solve(system, problem)


@_solve.def_fwd
def _solve_fwd(perturbed, problem, system, sens):
    warn_if_differentiating_a_switch_time(system.rhs, problem.t0, problem.y0, problem.params,
                                          perturbed.params)
    if _uses_dense_trajectory(system, sens):
        out, trajectory = _dense_trajectory(system, problem)
    else:
        recorder = _StatesAndSlopes() if sens.state == "checkpointed" else Recorder()
        out = forward_loop(system, problem, recorder)
        trajectory = _trajectory(system, problem, out) if sens.state == "checkpointed" else None
    residuals = (out.ys, out.y_final, out.result, trajectory, out.stats)
    return to_solve_output(system, problem, out), residuals


@_solve.def_bwd
def _solve_bwd(residuals, grad_obj, perturbed, problem, system, sens):
    ys, y_final, result, trajectory, stats = residuals
    ys_bar, integral_bar = grad_obj.ys, grad_obj.integral
    dtype = ys.dtype
    if ys_bar is None:
        ys_bar = jnp.zeros_like(ys)
    params = problem.params
    num_q = integrand_or_empty(system, problem.t0, problem.y0, params).shape[0]
    mu = jnp.zeros((num_q,), dtype) if integral_bar is None else integral_bar
    ys_bar = fail_if_differentiated_failure(system, ys_bar, result)
    ys_bar = flag_stiff_gradient(ys_bar, system, stats, sens.accept_stiff_steps)
    params_on, params_off = mask_params(params, perturbed.params)
    lam, pbar_flat, adj_result, y_back = _backward(
        sens, system, problem, params_on, params_off, ys_bar, mu, y_final, trajectory
    )
    if y_back is not None:
        lam, pbar_flat = _refuse_lost_state((lam, pbar_flat), system, problem, y_back,
                                            y_final, sens.max_drift)
    # A failed backward solve, or a non-finite adjoint, is never returned as a number
    # (whatever `throw` says about the forward solve).
    # Its own message: the forward solve's (e.g. "explicit methods need tiny steps")
    # would blame the wrong solve.
    # A NaN the loss gave (`all_finite`) is no failure of the backward solve: it
    # comes out as a NaN gradient.
    given_finite = all_finite(ys_bar, integral_bar)
    lam, pbar_flat = RESULTS.adjoint_solve_failed.error_if(
        (lam, pbar_flat), (adj_result != RESULTS.successful) & given_finite)
    lam, pbar_flat = raise_if_blown_up(healthy(dtype), lam, pbar_flat, problem.direction,
                                       given_finite)
    # The failed backward solve's adjoint is not the NaN it should be (it stopped early).
    lam, pbar_flat = (jnp.where(given_finite, x, jnp.nan) for x in (lam, pbar_flat))
    pbar = ravel(params_on, dtype)[1](pbar_flat)

    def integrand_dot(t, y):
        if not system.has_integrand:
            return jnp.zeros((), dtype)
        return jnp.vdot(mu, system.integrand(t, y, params))

    t0_bar = t1_bar = ts_bar = None
    if perturbed.t0:
        t0_bar = (-jnp.vdot(lam, system.rhs(problem.t0, problem.y0, params))
                  - integrand_dot(problem.t0, problem.y0))
    if perturbed.t1:
        t1_bar = integrand_dot(problem.t1, y_final)
    if perturbed.ts:
        ts_bar = jnp.sum(ys_bar * save_slopes(system, params, problem.ts, ys), axis=-1)
    y0_bar = lam if perturbed.y0 else None
    return Problem(y0=y0_bar, params=pbar, t0=t0_bar, t1=t1_bar, ts=ts_bar)


class ContinuousAdjoint(AbstractSensitivity):
    """Reverse mode by solving the continuous adjoint ODE backwards in time.

    Arguments:
        state: how the backward pass knows ``y(t)``: ``"checkpointed"`` (default;
            quintic Hermite interpolation of the stored forward steps, stable) or ``"backsolve"``
            (re-integrate the state backwards; no storage, can be unstable).
        rtol, atol: tolerances of the backward solve (default: those of the forward;
            ``atol`` is required when the forward one is per component).
        accept_stiff_steps: return the gradient even when the forward solve rode the
            stability boundary of an explicit method (default: an error).
        max_drift: with ``state="backsolve"``, how far the state integrated back may
            arrive from ``y0``, in units of the forward tolerance at the larger end
            (``atol + rtol max(|y0|, |y(t1)|)``), before the gradient is refused (default
            100; ``float("inf")`` accepts any drift).

    The gradient approximates the derivative of the exact solution to about the
    tolerance; `DiscreteAdjoint` gives the exact derivative of the computed solution.
    Cost: one forward solve plus one adaptive backward solve of ``2N + P``
    (backsolve) or ``N + P`` equations, with one VJP of ``f`` per stage.  With stiff
    solvers use ``state="checkpointed"`` (module docstring).
    """

    state: Literal["checkpointed", "backsolve"] = eqx.field(static=True, default="checkpointed")
    rtol: float | None = eqx.field(static=True, default=None)
    atol: float | None = eqx.field(static=True, default=None)
    accept_stiff_steps: bool = eqx.field(static=True, default=False)
    max_drift: float = eqx.field(static=True, default=BACKSOLVE_DRIFT)
    reverse_mode_only: ClassVar[bool] = True

    def __check_init__(self):
        if self.state not in ("checkpointed", "backsolve"):
            raise ValueError(
                f"`state` must be 'checkpointed' or 'backsolve', got {self.state!r}"
            )
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise ValueError(f"`{name}` must be a positive number or None, got {value!r}")
        if self.state != "backsolve" and self.max_drift != BACKSOLVE_DRIFT:
            raise ValueError("`max_drift` applies to `state='backsolve'` only (the default "
                             "'checkpointed' state reads y(t) from the forward steps)")
        if not (isinstance(self.max_drift, int | float) and not isinstance(self.max_drift, bool)
                and self.max_drift > 0):
            raise ValueError(
                f"`max_drift` must be a positive number (float('inf') accepts any drift), "
                f"got {self.max_drift!r}")

    def __call__(self, system: System, problem: Problem) -> SolveOutput:
        return _solve(problem, system, self)
