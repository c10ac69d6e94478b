"""The forward loop: an adaptive explicit Runge–Kutta solve that records its grid.

One `jax.lax.while_loop` takes steps until ``t1``.  Each iteration proposes a step
(shortened to end on ``t1``, or with ``SaveAt(land_on_ts=True)`` on the next save time),
takes it, and lets the controller accept or reject it.  Accepted step end-times go into
``grid`` (the record the reverse pass replays); an accepted step that holds save times
writes a row of dense output (`_dense`), on which the saves are evaluated after the
loop; a `Recorder` keeps whatever else a sensitivity method needs (states, stages or
checkpoints).  Buffers have length ``max_steps`` but are never
filled (`_uninitialised`) and each iteration writes one slot, so the cost follows the
steps taken, not ``max_steps``; under `jax.vmap` too (`forward_loop`).  A small system's
solve that records its steps writes them through windows of a few slots, so that XLA runs
the step's kernels in order (`advance_window`, `_sequential`).  The grid's slots
after the last accepted step stay unwritten: `padded_grid` fills them with ``inf`` only
where they are shown (``sol.steps``).  With event conditions (`_events`) each accepted step
also compares their signs at its two ends; the step where one crosses gets a row, the
crossing is located on it, and the loop stops there (`EventRecord`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._dense import (
    DenseRows,
    RowWindow,
    allocate_rows,
    count_before,
    interpolate,
    row_slopes,
    save_rows,
    write_final_row,
    write_row,
)
from ._events import crossings, event_state, locate_roots
from ._lanes import run_single_lane
from ._results import RESULTS
from ._sequential import SEQUENTIAL_BUFFER_BYTES, fits, slot_bytes, slots, window_size
from ._stiffness import tracker_init, tracker_stats, tracker_update
from ._system import Problem, System
from ._uninitialised import uninitialised
from ._validation import input_result, save_times_valid
from .solvers._base import StepOutput
from .solvers._explicit import stage_time

# The smallest step, as a fraction of |t1 - t0|, that an adaptive solve may shrink to near
# t = 0 (`advance`): 2^-74, i.e. 16 eps sqrt(eps) of float64 in every precision.
MIN_STEP_FRACTION = 2.0**-74


class Recorder(eqx.Module):
    """What the forward loop keeps for the reverse pass, beyond the step grid.

    `init` allocates the store; `record` is called once per attempted step with the
    index ``n`` of the step (its start state is ``y_n``) and writes slot ``n`` or
    ``n + 1``; a rejected attempt is overwritten by the next attempt at the same ``n``.
    Where ``active`` is false (a solve of a batch that is already done) it writes nothing.
    Buffers of length ``max_steps`` come from `uninitialised` with the ``witness`` that
    `init` receives, so that their cost follows the steps taken (also under `jax.vmap`).
    """

    # Whether `record` writes slot ``n`` of each buffer and nothing else, so that the loop
    # may hand it a window of the buffers (`_loop`'s ``advance_window``).
    writes_slot_n: ClassVar[bool] = True

    def init(self, max_steps: int, y0: Array, num_live: int, witness: Array) -> Any:
        del max_steps, y0, num_live, witness
        return None

    def record(
        self, store: Any, n: Array, y: Array, step: StepOutput, live: tuple, active: Array
    ) -> Any:
        del n, y, step, live, active
        return store


def write_slot(buffer: Array, index: Array, value: Array, where: Array) -> Array:
    """``buffer`` with slot ``index`` set to ``value`` if ``where``, else unchanged.

    The guarded write every recorder uses, so that a solve of a batch that is already done
    (``where`` false) leaves its buffers as they are; one slot is read, not the buffer.
    """
    return buffer.at[index].set(jnp.where(where, value, buffer[index]))


class ForwardOutput(NamedTuple):
    ys: Array  # (n_save, N) states at the save times
    integral: Array  # (Q,) the RK quadrature of the integrand (empty without one)
    grid: Array  # (max_steps + 1,) accepted step end-times in tau; slots > T unspecified
    num_accepted: Array  # T, the number of accepted steps
    rows: DenseRows  # the continuous extension of the steps holding saves (every step: dense)
    y_final: Array  # y_T = y(t1)
    stats: dict[str, Array]
    result: RESULTS
    store: Any
    event: EventRecord | None = None  # with event conditions


class EventRecord(NamedTuple):
    """Where the solve ended, with event conditions (`_events`).

    If an event fired: its internal time ``tau*``, the dense-output row of its step and
    the state ``u(tau*)`` on it.  Otherwise ``tau1``, the final state's row and ``y_T``, so
    that both cases are differentiated alike (`_adjoint`).
    """

    tau: Array  # internal time where the solve ended
    row: Array  # int32 dense-output row holding it
    y: Array  # (N,) the state there
    fired: Array  # bool
    which: Array  # int32: the condition that fired, -1 if none
    scale: Array  # max |g| at the ends of the event step (what "zero" means after it)
    # (E,) for each other condition crossed in the event's step whose root is at the
    # event too (at or past zero there, or within round-off): its scale, else 0 (`_events`).
    pending: Array | None = None


def padded_grid(grid: Array, num_accepted: Array) -> Array:
    """``grid`` with the slots after ``num_accepted`` set to ``inf`` (as ``sol.steps``).

    The forward loop leaves those slots unwritten; the reverse pass never reads them.
    Padding is a pass over all ``max_steps + 1`` slots, so it is done only where the
    padded grid is used (``sol.steps``, the continuous adjoint's interpolant), and XLA
    drops it when ``sol.steps`` is not used.
    """
    slots = jnp.arange(grid.shape[-1], dtype=jnp.int32)
    return jnp.where(slots <= num_accepted, grid, jnp.inf)


def quadrature_increment(
    system: System, tau: Array, h: Array, step: StepOutput, params: Any, direction: Array
) -> Array:
    """``h * sum_m b_m R(t_m, Y_m)``: the paper's RK quadrature of the integrand."""
    tableau = system.solver.tableau
    acc = None
    for m, b_m in enumerate(tableau.b):
        if b_m == 0:
            continue
        r = system.field_integrand(
            stage_time(tau, h, tableau.c[m]), step.stages[m], params, direction
        )
        acc = float(b_m) * r if acc is None else acc + float(b_m) * r
    return h * acc


def batch_witness(dtype: Any, *trees: Any) -> Array:
    """A scalar zero that is batched under `jax.vmap` whenever any leaf of ``trees`` is.

    Passed to `uninitialised`, it makes the loop's record buffers come out batched when
    the recorded values will be, instead of being broadcast (and so filled) by the loop.
    """
    firsts = [jnp.ravel(leaf)[:1].astype(dtype) for leaf in jax.tree.leaves(trees)
              if isinstance(leaf, jax.Array | np.ndarray) and leaf.size]
    return jnp.zeros((), dtype) * sum(jnp.sum(x) for x in firsts)


# Why the step loop refuses to be differentiated (`forward_loop`).
DIFFERENTIATED_INSIDE = (
    "JAX tried to differentiate the step loop of a jaxadjoint solve, which no sensitivity "
    "method allows (each gives the derivative by its own rule). This happens when a "
    "derivative is differentiated again through a jax.jit that hides it from jaxadjoint's "
    "own check, as in jax.jacfwd(jax.jit(jax.grad(loss))) or "
    "jax.jacrev(jax.jit(jax.grad(loss))) with DiscreteAdjoint or ContinuousAdjoint. For "
    "second derivatives solve with sensitivity=jaxadjoint.DiscreteForward() (jax.hessian, or "
    "jax.jacfwd(jax.jacfwd(...))), or take differences of DiscreteAdjoint gradients."
)

# Results of traced inputs found invalid before the first step (`input_result`).
NOT_STARTED = (RESULTS.invalid_times, RESULTS.invalid_save_times, RESULTS.invalid_tolerances,
               RESULTS.invalid_first_step, RESULTS.invalid_controller)


def forward_loop(system: System, problem: Problem, recorder: Recorder) -> ForwardOutput:
    """Integrate from ``t0`` to ``t1``, saving at ``ts``; see the module docstring.

    Under `jax.vmap` the solves of a batch share one `while_loop` that runs until every
    one of them is done (a solve that is done leaves its carry as it is; see `_loop`).
    Left to itself, `vmap` of a `while_loop` with a batched predicate would select
    between the old and the new carry after every step, *whole* record buffers
    included: a cost of ``max_steps * N`` per step.  Not differentiable (it is the primal
    of custom derivative rules).
    """
    dynamic, static = eqx.partition((system, problem, recorder), eqx.is_array)

    def parts(dyn: Any) -> _Loop:
        return _loop(*eqx.combine(dyn, static))

    @jax.custom_batching.custom_vmap
    def solve(dyn: Any) -> ForwardOutput:
        loop = parts(dyn)
        return loop.finish(jax.lax.while_loop(loop.running, loop.advance_window, loop.start()))

    @solve.def_vmap
    def solve_batch(axis_size: int, in_batched: list, dyn: Any) -> tuple[ForwardOutput, Any]:
        if not any(jax.tree.leaves(in_batched)):
            out = solve(dyn)
            return out, jax.tree.map(lambda _: False, out)
        if axis_size == 1:
            return run_single_lane(solve, dyn, in_batched[0])
        axes = jax.tree.map(lambda batched: 0 if batched else None, in_batched[0])

        def each(fn: Callable) -> Callable:
            return jax.vmap(lambda d, c: fn(parts(d), c), in_axes=(axes, 0))

        carry = jax.vmap(lambda d: parts(d).start(), in_axes=(axes,))(dyn)
        running = each(lambda loop, c: loop.running(c))
        advance = each(lambda loop, c: loop.advance(c))
        carry = jax.lax.while_loop(
            lambda c: jnp.any(running(dyn, c)), lambda c: advance(dyn, c), carry
        )
        out = each(lambda loop, c: loop.finish(c))(dyn, carry)
        return out, jax.tree.map(lambda _: True, out)

    # Reached by JAX's differentiation only through a `jax.jit` that hid the solve from its
    # own check (`jax.jacrev(jax.jit(jax.grad(loss)))`): JAX then failed inside, with
    # "Linearization failed to produce known values" (reverse), or at a run-time check's
    # callback, "Pure callbacks do not support JVP" (forward).  Say what happened instead.
    @jax.custom_jvp
    def undifferentiable(dyn: Any) -> ForwardOutput:
        return solve(dyn)

    @undifferentiable.defjvp
    def refuse(primals: tuple, tangents: tuple) -> tuple:
        del primals, tangents
        raise TypeError(DIFFERENTIATED_INSIDE)

    return undifferentiable(dynamic)


class _Loop(NamedTuple):
    """The forward loop of one solve in four parts (so that `vmap` can share the loop)."""

    start: Callable[[], dict]
    running: Callable[[dict], Array]
    advance: Callable[[dict], dict]
    finish: Callable[[dict], ForwardOutput]
    # A solve on its own: up to a window of steps, recorded into small buffers.
    advance_window: Callable[[dict], dict]


def _loop(system: System, problem: Problem, recorder: Recorder) -> _Loop:
    """``start``, ``running``, ``advance`` and ``finish`` of the forward loop.

    ``advance`` leaves a carry for which ``running`` is false unchanged, so a batch of
    solves can keep advancing until the last of them is done.
    """
    solver, controller, tol = system.solver, system.controller, system.tol
    plan = system.stage_plan
    params, y0 = problem.params, problem.y0
    dtype = y0.dtype
    direction = problem.direction
    tau0, tau1 = direction * problem.t0, direction * problem.t1
    taus = direction * problem.ts
    n_save = taus.shape[0]
    eps = jnp.finfo(dtype).eps
    live = tuple(m for m in plan.live if m < plan.num_main)
    evals_per_step = solver.rhs_evals_per_step + (0 if solver.fsal else 1)
    stiff = bool(solver.jacobians_per_step)
    # Stiff steps whose Jacobian is kept across a rejection (`linearise`); with "never" the
    # step computes its own, fused with the rest of the step (no carry, no branch).
    reuse = stiff and solver.reuse_jacobian != "never"
    # Without save times (y(t1) only) the final state is the only row: no row in the loop.
    directions = getattr(system, "event_directions", ())
    has_events = bool(directions)
    rows_in_loop = (system.dense or system.interpolate_saves or system.land_on_ts
                    or has_events)
    if system.dense:
        num_rows = system.max_steps + 1
    else:
        # The rows of steps holding saves, the event step's, the final state's.
        num_rows = min(n_save, system.max_steps) + 1 + has_events if rows_in_loop else 1

    def f(tau, y):
        return system.field(tau, y, params, direction)

    def conditions(tau, y):
        return system.conditions(tau, y, params, direction)

    # The user's interval must not be empty; internal solves may be (a segment of the
    # continuous adjoint between a save at t1 and t1, an event segment at t1).
    check_times = isinstance(system, System) and system.event_start is None

    def start() -> dict:
        k0 = f(tau0, y0)
        h0, cstate, init_evals = controller.init(
            f, tau0, tau1, y0, k0, system.dt0, solver, tol, direction
        )
        if system.has_integrand:
            num_q = system.field_integrand(tau0, y0, params, direction).shape[0]
        else:
            num_q = 0
        # Everything the recorded values can depend on, for their batching under vmap.
        witness = batch_witness(dtype, y0, params, tau0, tau1, taus, h0, cstate, system)
        # Slots past the last accepted step stay unwritten (see `padded_grid`).
        grid = uninitialised((system.max_steps + 1,), dtype, witness, "grid").at[0].set(tau0)
        carry = dict(
            tau=tau0,
            y=y0,
            k0=k0,
            h=h0,
            cstate=cstate,
            rows=allocate_rows(num_rows, n_save, y0, len(plan.interpolation_stages), witness),
            integral=jnp.zeros((num_q,), dtype),
            grid=grid,
            store=recorder.init(system.max_steps, y0, len(live), witness),
            num_steps=jnp.int32(0),
            num_rhs_evals=jnp.int32(0),
            num_accepted=jnp.int32(0),
            init_evals=jnp.int32(init_evals),
            stiffness=tracker_init(tau0),
            # Traced inputs that are invalid stop the solve before it starts (with
            # throw=True `solve` has raised already).
            result=input_result(tau0, tau1, tol.rtol, tol.atol, system.dt0,
                                save_times_valid(taus, tau0, tau1),
                                controller.inputs_valid(tau0, tau1, direction), check_times),
        )
        if reuse:
            # Room for the step's linearisation (J, ...): computed by the first attempt.
            shapes = jax.eval_shape(lambda: solver.linearise(f, tau0, y0))
            carry.update(
                linearisation=jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes),
                linearisation_current=jnp.array(False),
                num_jacobians=jnp.int32(0),
            )
        if has_events:
            carry.update(event_start(y0))
            carry["result"] = RESULTS.where(
                jnp.all(jnp.isfinite(carry["g"])), carry["result"],
                RESULTS.event_condition_nonfinite)
            if system.event_start is not None:
                # A segment that starts after a jump: a NaN there is the jump's, not the
                # condition's (whose message it got, an acceptance test).
                carry["result"] = RESULTS.where(
                    system.event_start & ~jnp.all(jnp.isfinite(y0)),
                    RESULTS.event_jump_nonfinite, carry["result"])
        return carry

    def event_start(y0: Array) -> dict:
        g = conditions(tau0, y0)
        start = dict(fired=jnp.array(False), event_tau=tau1, event_row=jnp.int32(0),
                     which=jnp.int32(-1), event_scale=jnp.zeros((), dtype),
                     pending=jnp.zeros_like(g))
        if system.event_pending is not None:
            # At a restart (`_segments`): conditions that fire at the start of the first
            # step (crossing at this instant), and those whose jump just turned them back
            # (their rate of change, else 0), watched in the first step (`_events`).
            start["at_root"] = system.event_pending
            start["watch"] = system.event_watch
        if system.event_zero_start is not None:
            # A condition that just fired is at its root: not a crossing in the first step.
            g = jnp.where(system.event_zero_start, 0, g)
        return dict(start, g=g)

    def linearise(kept: Any, current: Array, tau: Array, y: Array) -> Any:
        """The stiff step's linearisation at ``(tau, y)`` (``J``; `solvers._base`): ``kept``
        where ``current``, else computed.

        ``current`` is true after a rejected step: the next attempt starts from the same
        ``(tau, y)``, so ``kept`` is bitwise what it would compute, and only the LU of
        ``I - gamma h J`` (it depends on ``h``) is redone.  Unbatched this is a real branch:
        the Jacobian's ``N`` JVPs are skipped.  Under `jax.vmap` (a batch of solves sharing
        the loop) the predicate differs between lanes, so `lax.cond` becomes a select that
        evaluates both branches: every lane computes ``J`` on every attempt, as without
        reuse, and takes the kept one where it may (same values, same count reported).
        """
        return jax.lax.cond(current, lambda kept, tau, y: kept,
                            lambda kept, tau, y: solver.linearise(f, tau, y), kept, tau, y)

    def running(c: dict) -> Array:
        going = (c["tau"] < tau1) & (c["result"] == RESULTS.successful) & (
            c["num_steps"] < system.max_steps
        )
        return going & ~c["fired"] if has_events else going

    def locate(tau, h, y, ks, g_start, g_end, crossed, at_root):
        """The earliest crossing in the step: ``(theta*, condition, pending)`` (`_events`).

        ``at_root``: conditions whose root is the step's start (``theta = 0``).
        ``pending``: for each other crossed condition at or past its zero at ``theta*``,
        or within round-off of it (a simultaneous crossing), its scale in the step (what
        "zero" means for it: the larger of its magnitudes at the step's ends); 0 for the
        others.
        """

        def phi(theta):
            # Condition i at theta_i on the step's continuous extension.
            m = theta.shape[0]
            us = plan.weights.combine(theta, jnp.broadcast_to(y, (m,) + y.shape),
                                      jnp.broadcast_to(h, (m,)),
                                      jnp.broadcast_to(ks, (m,) + ks.shape))
            return jnp.stack([system.condition(i, tau + theta[i] * h, us[i], params,
                                               direction) for i in range(m)])

        thetas = locate_roots(phi, crossed & ~at_root, g_start, dtype)
        thetas = jnp.where(at_root, 0, thetas)
        thetas = jnp.where(crossed, thetas, jnp.inf)
        # Roots within the resolution of time of the earliest are one instant: of those,
        # the first in the order of `events` fires.
        resolution = 16 * eps * jnp.maximum(jnp.abs(tau), jnp.abs(tau + h)) / jnp.abs(h)
        same = crossed & (thetas <= jnp.min(thetas) + resolution + 8 * eps)
        which = jnp.argmax(same).astype(jnp.int32)
        theta = thetas[which]
        g_at_event = phi(jnp.full_like(g_start, theta))
        others = crossed & (jnp.arange(g_start.shape[0], dtype=jnp.int32) != which)
        # At the event: at the same instant, or at or past its zero there within
        # round-off (the event state, read back from the row at ``tau*``, can land on
        # either side of a zero that ``phi`` puts on one).
        scale = jnp.maximum(jnp.abs(g_start), jnp.abs(g_end))
        at_event = same | (g_start * g_at_event <= 0) | (
            jnp.abs(g_at_event) <= 64 * eps * scale)
        pending = jnp.where(others & at_event, jnp.maximum(scale, jnp.finfo(dtype).tiny), 0)
        return theta, which, pending

    def advance(c: dict) -> dict:
        active = running(c)
        tau, y, h, n = c["tau"], c["y"], c["h"], c["num_accepted"]
        tau_prop = controller.propose(tau, h, c["cstate"])
        target = tau1
        if system.land_on_ts:
            # The first save time after tau: steps end exactly on every save time.
            after = count_before(taus, tau, inclusive=True)
            target = jnp.where(after < n_save, taus[jnp.minimum(after, n_save - 1)], tau1)
        lands = tau_prop >= target - 4 * eps * jnp.abs(target)
        tau_next = jnp.where(lands, target, tau_prop)
        h_used = tau_next - tau
        if reuse:
            current = c["linearisation_current"]
            linearisation = linearise(c["linearisation"], current, tau, y)
            step = solver.step(f, tau, y, h_used, c["k0"], tau_next, linearisation)
        else:
            step = solver.step(f, tau, y, h_used, c["k0"], tau_next)
        finite = jnp.all(jnp.isfinite(step.y_new))
        if step.y_error is not None:
            finite = finite & jnp.all(jnp.isfinite(step.y_error))
        accept, h_next, cstate = controller.adapt(
            y, step.y_new, step.y_error, c["k0"], h_used, c["cstate"], solver, tol
        )
        # An implicit step whose stage equations were not solved is rejected (and at least
        # halved, whatever the controller made of its error estimate).
        converged = jnp.array(True) if step.converged is None else step.converged
        accept = accept & finite & converged & active
        h_next = jnp.where(finite, h_next, 0.2 * h_used)
        h_next = jnp.where(converged | ~finite, h_next, 0.5 * h_used)
        if system.land_on_ts:
            # A step shortened to land on a save time says little about the next one.
            h_next = jnp.where(accept & lands, jnp.maximum(h_next, h), h_next)
        result = c["result"]
        if controller.adaptive:
            # A step is too small when it barely moves t where the solve is (not where it
            # ends: a long horizon such as Robertson's [0, 4e10] needs steps far below
            # eps * t1 early on).  The floor, a fixed fraction of the interval, stops a
            # solve that cannot leave t = 0 (a NaN right-hand side) after a few dozen
            # rejections.  It does not scale with eps: Robertson in float32 to t = 4e7
            # needs first steps of ~1e-6, under sqrt(eps) eps |t1 - t0| = 0.03.
            floor = MIN_STEP_FRACTION * jnp.abs(tau1 - tau0)
            too_small = ~accept & (h_next <= jnp.maximum(
                16 * eps * jnp.maximum(jnp.abs(tau), jnp.abs(tau_next)), floor))
            result = RESULTS.where(too_small, RESULTS.nonfinite, result)
            result = RESULTS.where(too_small & finite, RESULTS.step_size_too_small, result)
            result = RESULTS.where(too_small & ~converged, RESULTS.newton_failed, result)
        else:
            # A fixed step cannot shrink: the first failed attempt ends the solve.  An
            # implicit step whose Newton iteration failed is reported as such, though
            # its error estimate is then infinite.
            result = RESULTS.where(~finite, RESULTS.nonfinite_fixed_step, result)
            result = RESULTS.where(~converged, RESULTS.newton_failed, result)

        new_tau = jnp.where(accept, tau_next, tau)
        new_y = jnp.where(accept, step.y_new, y)
        k_next = step.ks[-1] if solver.fsal else f(tau_next, step.y_new)
        new_k0 = jnp.where(accept, k_next, c["k0"])
        # Two norms of stages already computed: is the step limited by stability?
        stiffness = tracker_update(
            c["stiffness"], solver.stiffness(step, k_next, h_used), accept, tau
        )
        integral = c["integral"]
        if system.has_integrand:
            dq = quadrature_increment(system, tau, h_used, step, params, direction)
            integral = integral + jnp.where(accept, dq, 0)
        # Slot writes: a rejected attempt leaves data past the accepted grid, overwritten by
        # the next attempt; a solve that is done writes nothing.
        # In a window of the record (`advance_window`), slot n is the window's n - start.
        slot = n - c["window_start"] if "window_start" in c else n
        grid = write_slot(c["grid"], slot + 1, tau_next, active)
        store = recorder.record(c["store"], slot if recorder.writes_slot_n else n, y, step,
                                live, active)
        # A row of dense output for an accepted step that holds save times (every step
        # with `dense`): the saves are evaluated on it after the loop.
        rows = c["rows"]
        events = {}
        if rows_in_loop:
            # The first save at or after tau (from a window of the save times that holds
            # it, in `advance_window`).
            window = None
            if "saves_start" in c:
                window = RowWindow(c["rows_start"], c["saves_start"], num_rows)
                first = window.save_start + count_before(c["save_times"], tau)
            else:
                first = count_before(taus, tau)
            if system.dense:
                has_row = accept
            else:
                last = jnp.minimum(first, n_save - 1)
                if window is None:
                    next_save = taus[last]
                else:
                    next_save = c["save_times"][last - window.save_start]
                has_row = accept & (first < n_save) & (next_save < tau_next)
            if has_events:
                g_end = conditions(tau_next, step.y_new)
                crossed = accept & crossings(c["g"], g_end, directions)
                if "at_root" in c:
                    crossed = crossed | (accept & c["at_root"])
                    # Turned back by its jump, yet through its zero again by the end of
                    # the first step: a rebound shorter than a step (events piling up,
                    # a ball coming to rest), which no sign change shows.
                    d = jnp.asarray(directions, dtype)
                    came_back = accept & (c["watch"] * g_end < 0) & ((d == 0) | (d * g_end > 0))
                    result = RESULTS.where(jnp.any(came_back), RESULTS.event_chattering,
                                           result)
                fires = jnp.any(crossed)
                has_row = has_row | fires
                if system.event_start is not None:
                    # A segment of a solve with jumps: the reverse pass re-takes a last
                    # step clipped to t1 from its row (`_start_time`).
                    has_row = has_row | (accept & (tau_next >= tau1))
            slopes = row_slopes(plan, f, tau, h_used, y, step.ks, k_next, has_row)
            if has_events:
                at_root = c.get("at_root", jnp.zeros_like(crossed))
                theta, which, pending = jax.lax.cond(
                    fires, locate,
                    lambda *_: (jnp.ones((), dtype), jnp.int32(-1), jnp.zeros_like(g_end)),
                    tau, h_used, y, slopes, c["g"], g_end, crossed, at_root,
                )
                scale = jnp.max(jnp.maximum(jnp.abs(c["g"]), jnp.abs(g_end)))
                bad_g = accept & ~jnp.all(jnp.isfinite(g_end))
                result = RESULTS.where(bad_g, RESULTS.event_condition_nonfinite, result)
                events = dict(
                    g=jnp.where(accept, g_end, c["g"]),
                    fired=c["fired"] | fires,
                    event_tau=jnp.where(fires, tau + theta * h_used, c["event_tau"]),
                    event_row=jnp.where(fires, jnp.minimum(rows.count, rows.size - 1),
                                        c["event_row"]),
                    which=jnp.where(fires, which, c["which"]),
                    event_scale=jnp.where(fires, scale, c["event_scale"]),
                    pending=jnp.where(fires, pending, c["pending"]),
                )
                if "at_root" in c:
                    # The first step only.
                    events["at_root"] = c["at_root"] & ~accept
                    events["watch"] = jnp.where(accept, 0, c["watch"])
            rows = write_row(rows, has_row, n, tau, h_used, y, slopes, first, window)
        n_new = n + accept.astype(jnp.int32)
        if step.num_rhs_evals is None:
            step_evals = jnp.int32(evals_per_step)
        else:  # Newton iterations, and k_next (a non-FSAL method evaluates it)
            step_evals = step.num_rhs_evals + (0 if solver.fsal else 1)
        small = dict(h=h_next, cstate=cstate, result=result,
                     num_steps=c["num_steps"] + 1,
                     num_rhs_evals=c["num_rhs_evals"] + step_evals)
        if reuse:
            # Kept for the next attempt if it starts from the same point (a rejection).
            small.update(linearisation_current=~accept,
                         num_jacobians=c["num_jacobians"] + (~current).astype(jnp.int32))
        small = jax.tree.map(
            lambda new, old: jnp.where(active, new, old),
            small, {key: c[key] for key in small},
        )
        return dict(
            c,
            tau=new_tau,
            y=new_y,
            k0=new_k0,
            rows=rows,
            integral=integral,
            grid=grid,
            store=store,
            num_accepted=n_new,
            stiffness=stiffness,
            # Not guarded by `active`: a finished lane's is J at its own (unchanged) point
            # (kept or recomputed), and no step of that lane uses it again.
            **({"linearisation": linearisation} if reuse else {}),
            **small,
            **events,
        )

    def finish(final: dict) -> ForwardOutput:
        stopped = final["fired"] if has_events else jnp.array(False)
        result = RESULTS.where(
            (final["result"] == RESULTS.successful) & (final["tau"] < tau1) & ~stopped,
            RESULTS.max_steps_reached,
            final["result"],
        )
        num_steps, num_accepted = final["num_steps"], final["num_accepted"]
        stats = dict(
            num_steps=num_steps,
            num_accepted_steps=num_accepted,
            num_rejected_steps=num_steps - num_accepted,
            num_rhs_evals=1 + final["init_evals"] + final["num_rhs_evals"],
            **tracker_stats(final["stiffness"], direction),
        )
        if reuse:
            stats["num_jacobians"] = final["num_jacobians"]
        elif stiff:
            stats["num_jacobians"] = solver.jacobians_per_step * num_steps
        rows = write_final_row(plan, final["rows"], num_accepted, final["tau"], final["y"],
                               final["k0"], taus)
        ys = interpolate(plan.weights, rows, taus, save_rows(rows))
        # A solve that did not start (invalid traced inputs) has no saves: NaN, not ``y0``
        # (nor, for save times before t0, the first row extrapolated).
        did_not_start = jnp.any(jnp.stack([final["result"] == r for r in NOT_STARTED]))
        ys = jnp.where(did_not_start | (taus < tau0)[:, None], jnp.nan, ys)
        event = None
        if has_events:
            fired = final["fired"]
            tau_end = jnp.where(fired, final["event_tau"], final["tau"])
            row = jnp.where(fired, final["event_row"], rows.count - 1)
            event = EventRecord(
                tau=tau_end, row=row, y=event_state(plan.weights, rows, row, tau_end),
                fired=fired, which=final["which"], scale=final["event_scale"],
                pending=final["pending"],
            )
            # Saves after a terminal event are NaN: the solution does not go there.
            ys = jnp.where((taus > tau_end)[:, None], jnp.nan, ys)
        return ForwardOutput(
            ys=ys,
            integral=final["integral"],
            grid=final["grid"],
            num_accepted=num_accepted,
            rows=rows,
            y_final=final["y"],
            stats=stats,
            result=result,
            store=final["store"],
            event=event,
        )

    # Rows of dense output in windows too: the saves' rows (a window of the save times
    # tells each step where its saves are), not `dense` (a row per step), `land_on_ts` or
    # events.
    rows_windowed = (rows_in_loop and n_save > 0 and not system.dense
                     and not system.land_on_ts and not has_events)

    def window_sizes(c: dict) -> dict[str, int] | None:
        """Slots per window of each windowed buffer, or ``None`` for no windows."""
        steps = window_size(slot_bytes(c["store"]) if recorder.writes_slot_n else 0,
                            system.max_steps)  # (a plain solve: the grid's slots alone)
        if not steps:
            return None
        sizes = dict(grid=steps + 1, store=steps if recorder.writes_slot_n else None)
        if rows_windowed:
            # A window's slopes are one buffer per stage (`cut`): a row's largest buffer
            # is then one state.
            rows = window_size(c["rows"].y[0].nbytes, num_rows)
            # Save times: as many as fit (a step may hold several).
            saves = min(n_save, SEQUENTIAL_BUFFER_BYTES // max(dtype.itemsize, 4) - 1)
            if not rows:
                return None
            sizes.update(rows=rows, saves=saves)
        return sizes

    def cut(c: dict, sizes: dict, starts: dict) -> dict:
        """The inner loop's carry: ``c`` with the windows of the record (and rows)."""
        def part(tree, key):
            return slots(tree, starts[key], sizes[key])

        inner = dict(c, window_start=starts["grid"], grid=part(c["grid"], "grid"))
        if sizes["store"] is not None:
            inner["store"] = part(c["store"], "store")
        if "rows" in sizes:
            rows = c["rows"]
            inner.update(
                rows=DenseRows(
                    step=part(rows.step, "rows"), tau=part(rows.tau, "rows"),
                    h=part(rows.h, "rows"), y=part(rows.y, "rows"),
                    # One buffer per stage, so that each is small.
                    k=tuple(jnp.moveaxis(part(rows.k, "rows"), 1, 0)),
                    count=rows.count,
                    starts=slots(rows.starts, starts["saves"], sizes["saves"] + 1)),
                rows_start=starts["rows"], saves_start=starts["saves"],
                save_times=part(taus, "saves"),
            )
        return inner

    def paste(c: dict, inner: dict, sizes: dict, starts: dict) -> dict:
        """``c`` updated from the inner loop's carry (`cut`'s inverse)."""
        def put(whole, window, key):
            return jax.tree.map(
                lambda b, p: jax.lax.dynamic_update_slice_in_dim(b, p, starts[key], 0),
                whole, window)

        out = {key: value for key, value in inner.items()
               if key not in ("window_start", "rows_start", "saves_start", "save_times")}
        out["grid"] = put(c["grid"], inner["grid"], "grid")
        if sizes["store"] is not None:
            out["store"] = put(c["store"], inner["store"], "store")
        if "rows" in sizes:
            rows, part = c["rows"], inner["rows"]
            out["rows"] = DenseRows(
                step=put(rows.step, part.step, "rows"), tau=put(rows.tau, part.tau, "rows"),
                h=put(rows.h, part.h, "rows"), y=put(rows.y, part.y, "rows"),
                k=put(rows.k, jnp.stack(part.k, axis=1), "rows"), count=part.count,
                starts=put(rows.starts, part.starts, "saves"))
        return out

    def advance_window(c: dict) -> dict:
        """Up to a window of accepted steps, with the record's slots in small copies.

        The record (grid and store: ``max_steps`` slots; the dense-output rows of the
        saves) makes XLA run the loop body as a task graph (`_sequential`); an inner loop
        that writes windows of at most 512 bytes each runs in order.  A window starts at
        the next slot to write, moved back where it would run past the buffer's end;
        slots before that are copied in and out unchanged.  With rows, the inner loop also
        stops when its rows are full or the next step starts after the window's last save
        time, so that every step finds its saves in the window.  The steps are the same
        operations as in one loop, so the same bits (`tests/test_sequential.py`).  A
        solve that records nothing keeps one loop under a trace: its grid and statistics
        are often not read there, and XLA then drops them (its body is small); with saves,
        the windows made Lotka–Volterra's plain solve 1.0x (100 saves) to 1.4x (10 000)
        slower, where they make its gradient 0.83x faster (up to 1 000 saves; 1.0x at
        10 000).  Called on concrete values (`System.every_output_read`), it writes its
        grid (and rows) in windows.
        """
        if c["store"] is None and not system.every_output_read:
            # A plain solve under a trace: the grid and statistics that nothing reads are
            # dropped from one loop, not from nested ones (XLA's dead-code elimination
            # does not reach through them).  Read (a solve called on concrete values
            # returns them all), the grid made the body a task graph: a Kepler orbit of
            # 3 380 Dopri5 steps took 6.0 ms in one loop, 3.5 ms in windows, 1.8 ms with
            # only `ys` read under `jit`; with 50 / 1 000 / 10 000 saves 8.7 / 9.6 / 11.0
            # ms against 5.0 / 5.7 / 7.6 in windows (2026-11-29).
            return advance(c)
        sizes = window_sizes(c)
        if sizes is None:
            return advance(c)
        # Everything the inner body holds must be small.
        anywhere = dict.fromkeys(("grid", "store", "rows", "saves"), jnp.int32(0))
        shapes = jax.eval_shape(lambda c: cut(c, sizes, anywhere), c)
        if not fits(shapes, params, taus if rows_in_loop and "rows" not in sizes else ()):
            return advance(c)
        n = c["num_accepted"]
        starts = dict(grid=jnp.minimum(n, system.max_steps - (sizes["grid"] - 1)))
        starts["store"] = starts["grid"]
        if "rows" in sizes:
            starts["rows"] = jnp.minimum(c["rows"].count, num_rows - sizes["rows"])
            starts["saves"] = jnp.minimum(count_before(taus, c["tau"]), n_save - sizes["saves"])

        def more(s: dict) -> Array:
            going = running(s) & (s["num_accepted"] - s["window_start"] < sizes["grid"] - 1)
            if "rows" in sizes:
                # Every step must find its saves in the window: it starts at or before
                # the window's last save time, or the window runs to the last save.
                saves_here = ((s["tau"] <= s["save_times"][-1])
                              | (s["saves_start"] + sizes["saves"] >= n_save))
                going = (going & (s["rows"].count - s["rows_start"] < sizes["rows"])
                         & saves_here)
            return going

        inner = jax.lax.while_loop(more, advance, cut(c, sizes, starts))
        return paste(c, inner, sizes, starts)

    return _Loop(start, running, advance, finish, advance_window)
