"""The reverse step of an explicit Runge–Kutta method and the reverse sweep over a grid.

For one step ``y_{n+1} = y_n + h sum_m b_m k_m``, ``k_m = f(t_n + c_m h, Y_m, p)``,
``Y_m = y_n + h sum_{j<m} a_mj k_j``, given ``lam = dL/dy_{n+1}`` (and ``mu = dL/dq`` for
the quadrature ``q_{n+1} = q_n + h sum_m b_m R(t_m, Y_m)``), the adjoint is

    for m = s .. 1 (live stages only):
        kbar_m = h (b_m lam + sum_{q>m} a_qm Ybar_q)
        Ybar_m = (df/dY)(t_m, Y_m)^T kbar_m + (dR/dY)(t_m, Y_m)^T (h b_m mu)
    lam_n = lam + sum_m Ybar_m
    pbar += sum_m (df/dp)(t_m, Y_m)^T kbar_m + (dR/dp)(t_m, Y_m)^T (h b_m mu)

(paper, section 3.3 and Appendix A).  ``h`` and ``t_n`` come from the recorded grid and
are constants.  For states of 32 components or more each stage's VJP is its own
`jax.lax.cond` branch, so that ``kbar_m`` and ``Ybar_m`` are materialised once instead of
being re-summed inside every consumer (`_apply_vjp`, `isolated_vjps`).  Under `jax.vmap`
over cotangent seeds only ``lam``, ``kbar``, ``Ybar`` and ``pbar`` carry the batch axis:
the stage values depend on the record alone, so XLA sees one unbatched stage
recomputation and batched (matrix–matrix) vector–Jacobian products.  Under `jax.vmap`
over solves (whose step counts differ) the sweeps of the batch share one loop instead:
`_batched_reverse`.

**Across checkpoint strategies.**  `StoreStates`, `StoreStages` and `Recursive` run the
same operations in the same order on the same grid: stage values are built by
`linear_combination` wherever they are computed (forward loop, `Recursive`'s replay, this
reverse step), and the parameter adjoint is summed in an order fixed by the solve, not by
the strategy (`reverse_sweep`).  So their gradients agree to round-off, not always bit for
bit: XLA optimises the forward loop, the replay and the reverse step as separate loops
and branches, and the same operations can compile to different rounding.  LLVM contracts
``a * b + c`` into a fused multiply-add, and for ``u v + x y`` which product it keeps
unrounded depends on the expression around it; that expression differs where a value is a
constant in one place and an operand in another (a `jax.lax.cond` branch sees its operands
as unknowns: `Recursive`'s replay is a plain loop for that reason, see
`_recursive._replay`).  The order of a reduction can also depend on the fusion.
The reverse pass keeps the compiled arithmetic alike where it can (stage cotangents
materialised in branches, each addition to ``pbar`` with one product operand), so the
strategies are usually bitwise equal (`tests/test_bitwise.py` pins this on fixed cases and
checks agreement to round-off on random ones).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from ._adjoint_health import Health, healthy, observe_step
from ._lanes import any_lane_cond
from ._save_cotangents import (
    SaveCotangents,
    add_save_state,
    has_slopes,
    last_row,
    row_at,
    row_slopes_cotangent,
    save_slopes_cotangent,
    save_state_cotangent,
    window_of,
)
from ._sequential import fits, in_sequence, slot_bytes, slots, window_size
from ._system import System
from .solvers._explicit import linear_combination, stage_time


def tree_add(a: Any, b: Any) -> Any:
    return jax.tree.map(jnp.add, a, b)


class StageCotangents(NamedTuple):
    """What the reverse pass of some steps leaves for the parameter adjoint.

    The parameter adjoint of a step is ``sum_m (df/dp)(t_m, Y_m)^T kbar_m`` plus the
    integrand's ``sum_m (dR/dp)(t_m, Y_m)^T (h b_m mu)``: linear in the cotangents, so
    many stages (of many steps) can share one vector–Jacobian product.  Rows are stages.
    """

    times: Array  # (L,) live stage times
    stages: Array  # (L, N) live stage values Y_m
    kbars: Array  # (..., L, N) their cotangents (batched under vmap over seeds)
    quad_times: Array  # (Q,) times of stages with b_m != 0 (integrand only)
    quad_stages: Array  # (Q, N)
    quad_weights: Array  # (Q,) h b_m


def _quadrature_stages(system: System) -> list[int]:
    """The live stages that enter the quadrature of the integrand (``b_m != 0``)."""
    if not system.has_integrand:
        return []
    tableau = system.solver.tableau
    return [m for m in tableau.live_stages if tableau.b[m] != 0]


# Below this many state components a stage's cotangent is cheaper to recompute than a
# branch (~0.2 us on CPU) is to take (figures: benchmarks/README.md, "Design measurements").
ISOLATED_VJP_MIN_SIZE = 32
# Smaller states take joint stage VJPs (in branches) when they have fewer than this many
# parameters per state component (`joint_stage_vjps`).
JOINT_PARAMS_PER_STATE = 4
# Set while `_batched_reverse` traces its lanes' reverse steps (`tracing_lanes`).
_TRACING_LANES: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxadjoint_tracing_lanes", default=False)


@contextlib.contextmanager
def tracing_lanes() -> Iterator[None]:
    """Trace reverse steps for the lanes of a batch of solves (`_batched_reverse`).

    There small states keep their joint stage VJPs inline (`isolated_vjps`): the branches
    that speed up one solve's `jax.jacrev` made the batched gradient of an 8-state spring
    chain (20 parameters) 2-10 % slower.
    """
    token = _TRACING_LANES.set(True)
    try:
        yield
    finally:
        _TRACING_LANES.reset(token)


def _apply_vjp(vjp: Callable[[Array], tuple], cotangent: Array, h: Array, isolate: bool) -> tuple:
    """``vjp(cotangent)``; with ``isolate``, compiled on its own: a `jax.lax.cond` branch
    taken when ``h != 0``.

    XLA on CPU copies cheap elementwise producers into every consumer.  A transposed
    stencil (the right-hand side of a discretised PDE) gives a stage cotangent
    ``Ybar_m`` that is a sum of shifted arrays, never materialised: each later ``kbar``,
    and each tap of each later stencil, summed it again (several times slower on a 2-D
    heat equation).  A branch's operands and results are materialised buffers;
    `jax.lax.optimization_barrier` does not separate fusions on CPU.  The other branch
    is exact: when ``h == 0`` every ``kbar`` is ``h * (...) = 0``, and a vector–Jacobian
    product is linear in its cotangent.  That is also why, under `jax.vmap` with lanes
    whose ``h`` differ, every lane may take the VJP (`_lanes.any_lane_cond`) instead of
    `vmap`'s select of both branches, which copies the parameters once per lane.
    `isolated_vjps` says when to isolate.
    """
    if not isolate:
        return vjp(cotangent)

    def skip(cotangent):
        shapes = jax.eval_shape(vjp, cotangent)
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    return any_lane_cond(h != 0, vjp, skip, cotangent)


def isolated_vjps(params: Any, state_size: int, with_params: bool) -> bool:
    """Whether each stage's VJP runs in its own branch (`_apply_vjp`).

    From `ISOLATED_VJP_MIN_SIZE` state components on; smaller states skip the branch (it
    costs more than a small stage's recomputation), except for their joint VJPs in one
    solve's sweep (`joint_stage_vjps`): with the branch, `jax.jacrev` of a spring chain's
    saves took 0.50x the old path's time, inline 0.58x (Lotka–Volterra 0.54x and 1.01x),
    and `Recursive` stays bitwise equal to `StoreStates` (a Kepler orbit with Vern8,
    `tests/test_bitwise.py`).  Not for VJPs that also give the
    parameter part when the parameters are many (`block_size` above one): that happens
    only in the batched reverse pass (`_batched_reverse`), where the part is a
    lanes x parameters array.  Out of a branch, each stage's rank-one updates fuse into one
    pass over the running ``pbar``; a branch writes the part out, and the sum reads it
    again.  A neural ODE of 64 (32) states with a 256 (128)-wide MLP, 16 (64) lanes: the
    gradient took 3.4x (2.9x) the time with the branches (benchmarks/README.md, "Time
    series").  Dense fields (products with weight matrices) leave nothing to re-sum.
    """
    if with_params and not _TRACING_LANES.get() and joint_stage_vjps(params, state_size):
        return True
    if state_size < ISOLATED_VJP_MIN_SIZE:
        return False
    return not (with_params and block_size(params, state_size) > 1)


def _stage_adjoints(
    system: System,
    tau: Array,
    t_next: Array,
    y: Array | None,
    stages: Array | None,
    lam: Array,
    mu: Array,
    params: Any,
    direction: Array,
    pbar: Any,
    kbar_saves: Array | None,
) -> tuple[Array, dict, dict, dict, Any]:
    """The adjoint recurrence of one step (module docstring), shared by both reverse paths.

    Recomputes (or takes) the live stages, linearises the right-hand side at each, and runs
    ``kbar_m``/``Ybar_m`` from the last stage to the first.  ``kbar_saves`` (``(L, N)``,
    or ``None``) is the cotangent of the interpolation stages' slopes from saves that lie
    inside this step (`_save_cotangents`): it adds to their ``kbar``.  Given a running
    ``pbar`` the VJPs are taken jointly in the stage and the parameters and each stage's
    parameter part is added to ``pbar`` on its own, so that every addition has one product
    operand and LLVM fuses it into the same multiply-add whatever else the loop computes
    (a sum of two products, ``u v + x y``, may become ``fma(u, v, x y)`` or
    ``fma(x, y, u v)``).  With ``pbar=None`` only the state is differentiated and the
    parameter adjoint is left to `params_cotangent`.  Returns ``(lam_n, stage values,
    stage times, kbars, pbar)``.
    """
    plan = system.stage_plan
    a, b, c = plan.a, plan.b, plan.c
    live = plan.live
    h = t_next - tau
    stored = [m for m in live if m < plan.num_main]
    if y is None:
        y = stages[stored.index(0)]  # the first stage is y_n itself
    quad = _quadrature_stages(system)
    with_params = pbar is not None
    isolate = isolated_vjps(params, lam.shape[-1], with_params)
    primals = (params,) if with_params else ()
    ks: list[Array | None] = [None] * a.shape[0]
    stage_values, stage_times, field_vjps, integrand_vjps = {}, {}, {}, {}
    for m in live:
        # A stage equal to f(t_{n+1}, y_{n+1}) is evaluated at the grid value, as forward.
        t_m = t_next if m in plan.end_stages else stage_time(tau, h, c[m])
        if stages is not None and m in stored:
            stage = stages[stored.index(m)]
        else:
            stage = linear_combination(y, h, a[m, :m], ks)
        stage_values[m], stage_times[m] = stage, t_m

        def field(Y, *p, t_m=t_m):
            return system.field(t_m, Y, p[0] if p else params, direction)

        ks[m], field_vjps[m] = jax.vjp(field, stage, *primals)
        if m in quad:

            def integrand(Y, *p, t_m=t_m):
                return system.field_integrand(t_m, Y, p[0] if p else params, direction)

            _, integrand_vjps[m] = jax.vjp(integrand, stage, *primals)

    stage_bars: dict[int, Array] = {}
    kbars: dict[int, Array] = {}
    for m in reversed(live):
        later = [q for q in live if q > m and a[q, m] != 0]
        kbars[m] = linear_combination(
            jnp.zeros_like(lam), h, [b[m]] + [a[q, m] for q in later],
            [lam] + [stage_bars[q] for q in later],
        )
        if kbar_saves is not None and m in plan.interpolation_stages:
            kbars[m] = kbars[m] + kbar_saves[..., plan.interpolation_stages.index(m), :]
        stage_bar, *p_bar = _apply_vjp(field_vjps[m], kbars[m], h, isolate)
        if with_params:
            pbar = tree_add(pbar, p_bar[0])
        if m in integrand_vjps:
            r_stage_bar, *r_p_bar = _apply_vjp(
                integrand_vjps[m], (float(b[m]) * h) * mu, h, isolate)
            stage_bar = stage_bar + r_stage_bar
            if with_params:
                pbar = tree_add(pbar, r_p_bar[0])
        stage_bars[m] = stage_bar
    lam_n = lam
    for m in live:
        lam_n = lam_n + stage_bars[m]
    return lam_n, stage_values, stage_times, kbars, pbar


def reverse_step_state(
    system: System,
    tau: Array,
    t_next: Array,
    y: Array | None,
    stages: Array | None,
    lam: Array,
    mu: Array,
    params: Any,
    direction: Array,
    kbar_saves: Array | None,
) -> tuple[Array, StageCotangents]:
    """State adjoint of one step: returns ``lam_n`` and the stage cotangents.

    ``stages`` holds the live stage values ``Y_m`` if the forward pass stored them;
    otherwise they are recomputed from ``y = y_n`` with exactly the forward arithmetic.
    """
    lam_n, stage_values, stage_times, kbars, _ = _stage_adjoints(
        system, tau, t_next, y, stages, lam, mu, params, direction, None, kbar_saves
    )
    tableau = system.solver.tableau
    live = system.stage_plan.live
    h = t_next - tau
    quad = _quadrature_stages(system)
    dtype = lam.dtype
    if quad:
        quad_times = jnp.stack([stage_times[m] for m in quad])
        quad_stages = jnp.stack([stage_values[m] for m in quad])
        quad_weights = h * jnp.asarray([tableau.b[m] for m in quad], dtype)
    else:
        quad_times = quad_weights = jnp.zeros((0,), dtype)
        quad_stages = jnp.zeros((0,) + lam.shape[-1:], dtype)
    cotangents = StageCotangents(
        times=jnp.stack([stage_times[m] for m in live]),
        stages=jnp.stack([stage_values[m] for m in live]),
        kbars=jnp.stack([kbars[m] for m in live], axis=-2),
        quad_times=quad_times,
        quad_stages=quad_stages,
        quad_weights=quad_weights,
    )
    return lam_n, cotangents


def params_cotangent(
    system: System, params: Any, direction: Array, cot: StageCotangents, mu: Array
) -> Any:
    """``sum_m (df/dp)^T kbar_m + (dR/dp)^T (w_m mu)`` over all stages in ``cot``.

    One vector–Jacobian product of the right-hand side mapped over the stacked stages:
    for parameters entering as matrices (``A y``) this is one matrix–matrix product
    rather than an outer product per stage.
    """

    def stage_fields(p):
        return jax.vmap(lambda t, Y: system.field(t, Y, p, direction))(cot.times, cot.stages)

    _, vjp = jax.vjp(stage_fields, params)
    (pbar,) = vjp(cot.kbars)
    if cot.quad_times.shape[0]:

        def stage_integrands(p):
            return jax.vmap(lambda t, Y: system.field_integrand(t, Y, p, direction))(
                cot.quad_times, cot.quad_stages
            )

        _, integrand_vjp = jax.vjp(stage_integrands, params)
        (r_pbar,) = integrand_vjp(cot.quad_weights[:, None] * mu[..., None, :])
        pbar = tree_add(pbar, r_pbar)
    return pbar


def erk_reverse_step(
    system: System,
    tau: Array,
    t_next: Array,
    y: Array | None,
    stages: Array | None,
    lam: Array,
    mu: Array,
    params: Any,
    direction: Array,
    pbar: Any,
    kbar_saves: Array | None,
) -> tuple[Array, Any]:
    """Adjoint of one step: returns ``(lam_n, pbar + the parameter adjoint of the step)``.

    One joint vector–Jacobian product per stage, with respect to the stage value and
    the parameters together: no stage data is stacked and the right-hand side is
    linearised once per stage.  Used for large states with few parameters
    (`joint_stage_vjps`).
    """
    lam_n, _, _, _, pbar = _stage_adjoints(
        system, tau, t_next, y, stages, lam, mu, params, direction, pbar, kbar_saves
    )
    return lam_n, pbar


def last_end_stage_adjoint(
    system: System, params: Any, direction: Array, saves: SaveCotangents, tau: Array,
    y: Array, num_steps: Array,
) -> tuple[Array, Any] | None:
    """``(Ybar, pbar)`` of the last step's carried end stage ``f(t_T, y_T)``, or ``None``.

    The one end stage no later step takes (`save_slopes_cotangent`): adjoined once,
    before the sweep, at the final state.
    """
    slot = system.stage_plan.carried_end
    if not has_slopes(saves) or slot is None:
        return None
    # The final state's row is the last; the last step's is the one before, if any.
    hit, row = row_at(saves, last_row(saves) - 1, num_steps - 1)
    kbar = jnp.where(hit, row_slopes_cotangent(saves, row, slot, single=True), 0)

    def field(Y, p):
        return system.field(tau, Y, p, direction)

    _, vjp = jax.vjp(field, y, params)
    return vjp(kbar)


def block_size(params: Any, state_size: int) -> int:
    """Steps whose parameter adjoint is taken as one vector–Jacobian product.

    The parameter adjoint of a block is one VJP over all its stages.  Under
    `jax.jacrev` that writes the (seeds x parameters) cotangent once per block instead of
    once per stage, which is what bounds the Jacobian's speed when the parameters
    outnumber the states (an interaction matrix, a neural network).  A block also keeps
    every stage of its steps alive at once, so for large states with few parameters (a
    discretised PDE with a handful of coefficients) one step at a time uses less memory,
    and small problems compile faster.  The threshold is a measured trade-off
    (benchmarks/README.md, "Design measurements").
    """
    return 4 if _num_params(params) >= max(4 * state_size, 1024) else 1


def _num_params(params: Any) -> int:
    return sum(x.size for x in jax.tree.leaves(params))


def joint_stage_vjps(params: Any, state_size: int) -> bool:
    """Whether each stage's VJP also gives its parameter part (no block of stage rows).

    True for states of at least `ISOLATED_VJP_MIN_SIZE` components with few parameters,
    and for smaller states with fewer than `JOINT_PARAMS_PER_STATE` parameters per component.
    Each joint VJP then runs in its own branch (`_apply_vjp`, `isolated_vjps`), so every
    consumer sees the same materialised ``kbar``, and the right-hand side is linearised
    once per stage (a separate parameter VJP would linearise it again).  The other small states (a
    10-species GLV: 110 parameters) take the parameter adjoint per step, as a block of
    one step: one VJP over the step's stage rows, in one branch a step.

    Why few parameters go joint: the block VJP sums the stages' parts by a reduction over
    the stage axis wherever a parameter enters elementwise (a rate times a state), and
    under `jax.jacrev` that is a reduction of (seeds, stages, parameters); XLA on CPU
    hands such small reductions to YNNPACK, which took 20-40 us for each of them (jaxlib
    0.10).  An 8-state spring chain with 20 parameters, `jax.jacrev` of 50 saves: 13.0 ms
    against diffrax's 8.4 ms before, 4.4 ms (diffrax 8.0) with joint VJPs in float32;
    12.0 and 6.0 ms against 11.0 in float64 (benchmarks/README.md, "Design
    measurements").  Where parameters enter through matrix products (GLV's interaction
    matrix) the block VJP is one matrix product and stays.
    """
    if block_size(params, state_size) > 1:
        return False
    return (state_size >= ISOLATED_VJP_MIN_SIZE
            or _num_params(params) < JOINT_PARAMS_PER_STATE * state_size)


def initial_block(system: System, params: Any, lam: Array, y: Array) -> StageCotangents | None:
    """The stage rows of a block of steps before any of its steps is reversed.

    ``None`` when each stage's VJP gives its parameter part (`joint_stage_vjps`).  A block
    holds `block_size` steps' live stages (``L`` rows per step, step by step); each row is
    overwritten when its step is reversed.
    A row still unwritten when the block's adjoint is taken (steps below 0 in the bottom
    block) gets a zero cotangent there; its stage value is the finite state ``y``, so it
    adds exactly zero.
    """
    if not system.solver.stage_rows or joint_stage_vjps(params, lam.shape[-1]):
        return None  # (families other than explicit RK adjoin a whole step at once)
    block = block_size(params, lam.shape[-1])
    rows = block * len(system.stage_plan.live)
    quad_rows = block * len(_quadrature_stages(system))
    dtype = lam.dtype
    return StageCotangents(
        times=jnp.zeros((rows,), dtype),
        stages=jnp.broadcast_to(y, (rows,) + y.shape),
        kbars=jnp.zeros(lam.shape[:-1] + (rows,) + y.shape, dtype),
        quad_times=jnp.zeros((quad_rows,), dtype),
        quad_stages=jnp.broadcast_to(y, (quad_rows,) + y.shape),
        quad_weights=jnp.zeros((quad_rows,), dtype),
    )


def _row_axis(x: Array) -> int:
    return x.ndim - 2 if x.ndim > 1 else 0  # kbars may carry a batch axis in front


def _write_rows(rows: StageCotangents, step: StageCotangents, slot: Array) -> StageCotangents:
    """``rows`` with the rows of one step written at its position ``slot`` in the block."""

    def write(buffer, value):
        start = [jnp.zeros((), jnp.int32)] * buffer.ndim
        start[_row_axis(buffer)] = slot * value.shape[_row_axis(value)]
        return jax.lax.dynamic_update_slice(buffer, value, start)

    return jax.tree.map(write, rows, step)


def reverse_sweep(
    system: System,
    params: Any,
    direction: Array,
    grid: Array,
    n_hi: Array,
    n_lo: Array,
    read: Callable[[Array], tuple[Array | None, Array | None]],
    lam: Array,
    pbar: Any,
    mu: Array,
    saves: SaveCotangents,
    j: Array,
    num_steps: Array,
    rows: StageCotangents | None,
    health: Health,
    grid_start: Array | None = None,
) -> tuple[Array, Any, Array, StageCotangents | None, Health]:
    """Reverse through steps ``n_hi - 1, ..., n_lo``: ``(lam_{n_lo}, pbar, j, rows, health)``.

    ``lam`` enters as ``dL/dy_{n_hi}`` *before* the saves of ``y_{n_hi}`` are added;
    ``saves`` holds the cotangents of the dense-output rows and ``j`` the latest row not
    yet added (a row's slope cotangents enter the reverse step of its step).
    ``read(n)`` returns ``(y_n or None, live stages of step n or None)``, called with
    ``n_lo <= n < n_hi`` (with ``n_lo`` itself when the range is empty).  A step's data
    is read one iteration ahead and carried, because slicing a stored buffer inside the
    body lets XLA fuse the slice into every consumer and lose vectorisation.  ``grid``
    may be a window of the grid that starts at slot ``grid_start``.

    One step per iteration.  The step's arithmetic (`reverse_one`) runs in a branch of its
    own when everything in it is small, so that XLA's CPU runtime executes its kernels in
    order rather than as a task graph (`_sequential.in_sequence`); the reads of the record
    and of the saves' cotangents stay in the loop body.

    For large states with few parameters (``rows`` is ``None``, see `joint_stage_vjps`,
    and every family but explicit RK) the solver's `reverse_step`
    (`erk_reverse_step` for explicit RK) adds each stage's parameter adjoint to ``pbar`` on
    its own.  Otherwise the step's stage rows are written into the block's ``rows`` (a
    block of `block_size` steps: one, or four for many parameters) and the parameter adjoint
    of a block is one VJP, taken (in a `jax.lax.cond` branch, compiled on its own) when
    its last step is reversed.  Blocks are fixed by the solve, not by the sweep: the
    block of step ``n`` holds the steps ``m`` with ``(num_steps - 1 - m) // B`` equal to
    its own, whatever part of the steps this sweep covers.  A sweep that stops inside a
    block (`Recursive` reverses segment after segment) hands its ``rows`` to the next, so
    every block's VJP sees the same rows, summed in the same order, as in one sweep over
    all steps.  Start from `initial_block`.  ``health`` watches the adjoint for blow-up
    (`_adjoint_health`), step by step.
    """
    lam, j = add_save_state(lam, saves, j, n_hi)
    block = 1 if rows is None else block_size(params, lam.shape[-1])

    def read_step(n):
        n = jnp.maximum(n, n_lo)  # the read ahead of the last iteration: not used
        slot = n if grid_start is None else n - grid_start
        return read(n), grid[slot], grid[slot + 1]

    def add_block(pbar, rows, slot):
        # Rows after `slot` belong to steps below 0 (the bottom block): zero cotangents.
        per_slot = rows.times.shape[0] // block
        per_quad = rows.quad_times.shape[0] // block
        written = jnp.arange(block, dtype=slot.dtype) <= slot
        rows = rows._replace(
            kbars=jnp.where(jnp.repeat(written, per_slot)[:, None], rows.kbars, 0),
            quad_weights=jnp.where(jnp.repeat(written, per_quad), rows.quad_weights, 0),
        )
        return tree_add(pbar, params_cotangent(system, params, direction, rows, mu))

    def cond(carry):
        return carry[0] >= n_lo

    def body(carry):
        n, step_data, lam, pbar, j, rows, health = carry
        # The saves' rows are buffers of every save: read here, outside the step's branch.
        kbar_saves = save_slopes_cotangent(saves, j, n, system.stage_plan.carried_end)
        ybar_saves, j = save_state_cotangent(saves, j, n)
        lam, pbar, rows, health = in_sequence(
            n >= n_lo, reverse_one, lambda shape, n, data, kbar, *state: state,
            n, step_data, kbar_saves, lam, pbar, rows, health,
        )
        return n - 1, read_step(n - 1), lam + ybar_saves, pbar, j, rows, health

    def reverse_one(n, step_data, kbar_saves, lam, pbar, rows, health):
        """Step ``n``'s reverse step: its arithmetic, apart from the record's reads."""
        (y, stages), tau, t_next = step_data
        lam_in = lam
        if rows is None:
            lam, pbar = system.solver.reverse_step(
                system, tau, t_next, y, stages, lam, mu, params, direction, pbar, kbar_saves
            )
        else:
            lam, cot = reverse_step_state(
                system, tau, t_next, y, stages, lam, mu, params, direction, kbar_saves
            )
            slot = (num_steps - 1 - n) % block
            rows = _write_rows(rows, cot, slot)
            pbar = jax.lax.cond(
                (slot == block - 1) | (n == 0), add_block, lambda pbar, rows, slot: pbar,
                pbar, rows, slot,
            )
        health = observe_step(health, system, params, direction, n, tau, t_next, y, stages,
                              lam_in, lam, kbar_saves, mu)
        return lam, pbar, rows, health

    init = (n_hi - 1, read_step(n_hi - 1), lam, pbar, j, rows, health)
    _, _, lam, pbar, j, rows, health = jax.lax.while_loop(cond, body, init)
    return lam, pbar, j, rows, health


def reverse_all_steps(
    system: System,
    params: Any,
    direction: Array,
    grid: Array,
    num_steps: Array,
    read: Callable[[Array], tuple[Array | None, Array | None]],
    lam: Array,
    pbar: Any,
    mu: Array,
    saves: SaveCotangents,
) -> tuple[Array, Any, Health]:
    """One sweep through steps ``num_steps - 1, ..., 0``: ``(dL/dy0, dL/dparams, health)``.

    The reverse pass of a strategy that can read every step (`StoreStates`,
    `StoreStages`); ``read`` as in `reverse_sweep`.  A `RecordReader` of a small system is
    reversed in windows of a few steps: an outer loop copies each window's part of the
    record out, and `reverse_sweep` reverses it in an inner loop whose buffers are all
    small, so that XLA runs it in order (`_sequential.window_size`).  The sweeps of the
    windows chain as `Recursive`'s segments do (the saves' row index ``j`` and the
    parameter blocks carry over), so the operations are those of one sweep.
    """
    j = last_row(saves)
    y, stages = read(jnp.int32(0))
    y = stages[0] if y is None else y
    rows, health = initial_block(system, params, lam, y), healthy(lam.dtype)
    size = 0
    if isinstance(read, RecordReader) and fits(params, lam, pbar, mu, rows):
        size = window_size(slot_bytes(read.store), grid.shape[0] - 1)
    # The saves' rows in windows too where they are large: a window of steps start ..
    # n_hi - 1 reads the rows of steps start - 1 .. n_hi, at most size + 2 rows at and
    # below the latest not yet added.
    num_rows = saves.step.shape[-1]
    saves_size = None
    if size and not fits(saves):
        saves_size = min(size + 2, num_rows)
        if saves.pending is not None or not fits(jax.eval_shape(
                lambda s: window_of(s, jnp.int32(0), saves_size), saves)):
            size = 0
    if not size:
        lam, pbar, _, _, health = reverse_sweep(
            system, params, direction, grid, num_steps, jnp.int32(0), read, lam, pbar, mu,
            saves, j, num_steps, rows, health,
        )
        return lam, pbar, health

    # In windows of `size` steps, each reversed by an inner loop that sees a copy of its
    # part of the record (`_sequential.window_size`): steps n_hi - 1 .. start.
    def window(carry):
        n_hi, lam, pbar, j, rows, health = carry
        start = jnp.maximum(n_hi - size, 0)
        window_saves, first_row = saves, None
        if saves_size is not None:
            first_row = jnp.maximum(j - (saves_size - 1), 0)
            window_saves, j = window_of(saves, first_row, saves_size), j - first_row
        lam, pbar, j, rows, health = reverse_sweep(
            system, params, direction, slots(grid, start, size + 1),
            n_hi, start, read.window(start, size), lam, pbar, mu, window_saves, j,
            num_steps, rows, health, grid_start=start,
        )
        if first_row is not None:
            j = j + first_row
        return start, lam, pbar, j, rows, health

    _, lam, pbar, j, _, health = jax.lax.while_loop(
        lambda carry: carry[0] > 0, window, (num_steps, lam, pbar, j, rows, health))
    # The saves at y_0 when there are no steps (a sweep adds them at its first step).
    lam, _ = add_save_state(lam, saves, j, jnp.int32(0))
    return lam, pbar, health


class RecordReader(eqx.Module):
    """Step ``n``'s part of a record with one slot per step: ``read_slot(store, n)``.

    `window` gives a reader of a copy of slots ``start .. start + size - 1`` only, for a
    sweep in windows (`reverse_all_steps`), called with the same ``n``.
    """

    store: Any
    read_slot: Callable[[Any, Array], tuple[Array | None, Array | None]] = eqx.field(
        static=True)
    start: Array | None = None

    def __call__(self, n: Array) -> tuple[Array | None, Array | None]:
        return self.read_slot(self.store, n if self.start is None else n - self.start)

    def window(self, start: Array, size: int) -> RecordReader:
        return RecordReader(slots(self.store, start, size), self.read_slot, start)
