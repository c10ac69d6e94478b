"""Dense output: the continuous extension of the accepted steps, and saves evaluated on it.

A step from ``(t_n, y_n)`` of size ``h`` has a continuous extension

    y(t_n + theta h) = y_n + h sum_m b_m(theta) k_m,      b_m(theta) = sum_j W[m, j] theta^(j+1)

over the interpolation stages ``m`` (some of the method's stages, and for some methods
extra stages evaluated after the step; `_interpolants`).  Save times do not shorten
steps: the forward loop writes one `DenseRows` row, ``(t_n, h, y_n, k_m)``, for each
accepted step that contains a save time (``t_n <= t < t_{n+1}``), and after the loop
every save is evaluated on its row, all at once.  The state at ``t1`` is a last row of
its own with ``theta = 0``, so a save at ``t1`` (or at any node) is bitwise the state.

Cost: one row write per accepted step that holds saves, and one vectorised evaluation of
``n_save`` polynomials; nothing grows with ``n_save * max_steps``.  Under the discrete
adjoint the cotangent of a save goes to ``y_n`` and, with weights ``h b_m(theta)``, to
the stage slopes ``k_m`` of its step (`save_cotangents`): the reverse pass adds them when
it reverses that step.  The derivative with respect to a save time is the interpolant's
own time derivative ``sum_m b_m'(theta) k_m``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._matmul import matmul
from ._save_cotangents import PendingSaves, pending_saves
from ._uninitialised import uninitialised
from ._validation import is_concrete
from .solvers import _interpolants
from .solvers._base import AbstractDenseWeights, continuous_extension
from .solvers._explicit import AbstractERK, linear_combination, stage_time


def _sum(terms: list[Array]) -> Array:
    """``terms[0] + terms[1] + ...`` in that order."""
    acc = terms[0]
    for term in terms[1:]:
        acc = acc + term
    return acc


class StageWeights(AbstractDenseWeights):
    """``b_m(theta)`` of the interpolation stages ``m`` in ``stages`` (static data).

    Evaluated by `_interpolants.weights_at` (Bernstein basis): Verner's monomial
    coefficients reach ``1e6`` and would cost digits.  Equal (and hashed) by the identity
    of the interpolant, a module constant, so that it can be a static field.
    """

    def __init__(self, interpolant: _interpolants.Interpolant, stages: tuple[int, ...]):
        self.interpolant = interpolant
        self.stages = stages

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, StageWeights) and other.interpolant is self.interpolant
                and other.stages == self.stages)

    def __hash__(self) -> int:
        return hash((id(self.interpolant), self.stages))

    def weight_list(self, theta: Array) -> list[Array]:
        """``[b_l(theta) for l in stages]``, each shaped like ``theta``.

        The same polynomials as `_interpolants.weights_at` (Bernstein basis, first weight
        ``theta - sum of the others``), written as unrolled elementwise arithmetic with the
        coefficients as constants: XLA fuses it into one loop over the times, where a
        matrix product with a handful of columns per time runs many times slower on CPU.
        """
        bern = self.interpolant.bernstein
        degree = bern.shape[1] - 1
        one_minus = 1 - theta
        up, down = [jnp.ones_like(theta)], [jnp.ones_like(theta)]
        for _ in range(degree):
            up.append(up[-1] * theta)
            down.append(down[-1] * one_minus)
        basis = [math.comb(degree, i) * up[i] * down[degree - i] for i in range(degree + 1)]
        rest = []
        for m in self.stages[1:]:
            terms = [float(bern[m, i]) * basis[i] for i in range(degree + 1) if bern[m, i] != 0]
            rest.append(_sum(terms) if terms else jnp.zeros_like(theta))
        first = theta - _sum(rest) if rest else theta
        return [first, *rest]

    def weight_matrix(self, theta: Array) -> Array:
        """``(M, L)`` weights at ``theta (M,)``, as the product of the ``(M, D + 1)``
        Bernstein basis with the ``(D + 1, L)`` coefficients (the first weight's row is
        ``i / D`` minus the others': ``theta = sum_i (i / D) B_i(theta)``).

        A matrix product, so that XLA materialises the weights once: the elementwise
        `weight_list` fused into a consumer over ``(M, L, N)`` is re-evaluated for every
        element, all of the polynomials for each (the first weight needs the others).  At
        full precision (`_matmul`).
        """
        bern = np.asarray(self.interpolant.bernstein, np.float64)[list(self.stages)]
        degree = bern.shape[1] - 1
        coefficients = bern.copy()
        coefficients[0] = np.arange(degree + 1) / degree - bern[1:].sum(axis=0)
        one_minus = 1 - theta
        basis = jnp.stack([math.comb(degree, i) * theta ** i * one_minus ** (degree - i)
                           for i in range(degree + 1)], axis=1)
        return matmul(basis, jnp.asarray(coefficients.T, theta.dtype))


class StagePlan(NamedTuple):
    """The stages a step computes and which of them the output reads, as static data.

    Stages ``0 .. s-1`` are the tableau's, ``s .. s+e-1`` the interpolant's extra stages
    (evaluated from ``y_n`` and earlier slopes, like any stage).  ``a``/``c`` cover all
    of them; ``b`` is zero for the extra ones.
    """

    a: np.ndarray  # (S, S)
    b: np.ndarray  # (S,)
    c: np.ndarray  # (S,)
    num_main: int  # s
    live: tuple[int, ...]  # stages the reverse pass linearises (solution and saves)
    interpolation_stages: tuple[int, ...]  # stages whose slopes the interpolant reads
    weights: AbstractDenseWeights  # b_m(theta) of each interpolation stage
    end_stages: tuple[int, ...]  # stages equal to f(t_{n+1}, y_{n+1}): evaluated at t_{n+1}
    # The interpolation slot of an end stage that the reverse pass does not linearise: its
    # slope is the next step's first slope, so its save cotangent is carried there
    # (`_reverse.save_slopes_cotangent`); ``None`` if there is none.
    carried_end: int | None = None


def stage_plan(solver: AbstractERK, interpolating: bool) -> StagePlan:
    """The stages of ``solver``'s step; with ``interpolating``, also those its saves read.

    Without interpolated saves (no ``saveat``, or steps landing on the save times) a save
    is a node, ``theta = 0``, and only the stages that reach ``y_{n+1}`` are live.
    """
    tableau = solver.tableau
    interp = _interpolants.interpolant_for(tableau)
    s = tableau.num_stages
    e = interp.c_extra.shape[0]
    a = np.zeros((s + e, s + e))
    a[:s, :s] = tableau.a
    a[s:, :] = interp.a_extra
    b = np.concatenate([tableau.b, np.zeros(e)])
    c = np.concatenate([tableau.c, interp.c_extra])
    used = tuple(m for m in range(s + e) if np.any(interp.weights[m] != 0))
    weights = StageWeights(interp, used)
    end = () if interp.end_stage is None else (interp.end_stage,)
    carried = carried_end_stage(a, b, used, end) if interpolating else None
    if interpolating:
        needed = [False] * (s + e)
        for m in reversed(range(s + e)):
            read = m in used and m != carried
            needed[m] = (b[m] != 0 or read
                         or any(needed[q] and a[q, m] != 0 for q in range(m + 1, s + e)))
        live = tuple(m for m in range(s + e) if needed[m])
    else:
        live = tableau.live_stages
    slot = None if carried is None else used.index(carried)
    return StagePlan(a, b, c, s, live, used, weights, end, slot)


def carried_end_stage(
    a: np.ndarray, b: np.ndarray, used: tuple[int, ...], end: tuple[int, ...]
) -> int | None:
    """The end stage whose save cotangent the reverse pass carries to the next step.

    An end stage's slope is ``f(t_{n+1}, y_{n+1})``, computed once and reused as the next
    step's first slope ``k_1`` (FSAL, or the loop's ``k_next``), at the same point, bitwise.
    If only saves read it (``b = 0``, no later stage uses it), its cotangent can join that
    of the next step's ``k_1``: one vector–Jacobian product of the right-hand side at
    ``(t_{n+1}, y_{n+1})`` serves both, and each step's reverse pass linearises one stage
    fewer (Tsit5 and Dopri5 with saves: 6 instead of 7).  The last step's end stage is
    adjoined once before the sweep (`_adjoint`).
    """
    if not end or 0 not in used or used.index(0) != 0:
        return None
    (m,) = end
    if m not in used or b[m] != 0 or np.any(a[m + 1:, m] != 0):
        return None
    return m


def saves_stage_plan(system: Any) -> StagePlan:
    """The stage plan of a system's solver (`System` or a derived one)."""
    return system.solver.stage_plan(system.interpolate_saves or system.dense)


class DenseRows(eqx.Module):
    """Continuous extensions of some accepted steps, one row each, sorted by time.

    Rows past ``count`` are allocated but never read (`find_rows` searches the first
    ``count`` only; slot ``count`` may hold a step without saves, see `write_row`), so a
    row buffer of ``max_steps`` costs nothing unused.
    The last written row is the final state (``theta = 0`` only; its ``k`` holds
    ``f(t_T, y_T)`` in the first interpolation stage so that the time derivative there
    is the slope).
    """

    step: Array  # (R,) int32: the step ``n`` of the row (its start state is ``y_n``)
    tau: Array  # (R,) ``t_n`` in internal time
    h: Array  # (R,) step size (the last row: the last step's, or 1)
    y: Array  # (R, N) ``y_n``
    k: Array  # (R, L, N) slopes of the interpolation stages
    count: Array  # rows written
    # (n_save + 1,) how many rows have save i as their first save (saves sorted):
    # the row of save i is then a prefix sum (`save_rows`), no search needed.
    starts: Array

    @property
    def size(self) -> int:
        return self.tau.shape[-1]


SEARCH_BLOCK = 64


def count_before(taus: Array, t: Array, inclusive: bool = False) -> Array:
    """``#{i: taus_i < t}`` (``<= t`` if ``inclusive``) for sorted ``taus``: `searchsorted`.

    The forward loop asks this once per step.  A binary search is ``log2(n_save)``
    dependent scalar lookups, which XLA runs as as many small kernels.  Instead: count
    the blocks of ``SEARCH_BLOCK`` times that start before ``t``, then the times before
    ``t`` in the one block that can straddle it (shifted to end at the last time if it
    would run past it; the times it then adds before ``t`` are counted all the same):
    two fused reductions of ``n_save / SEARCH_BLOCK`` and ``SEARCH_BLOCK`` comparisons.
    """

    def count(times):
        before = times <= t if inclusive else times < t
        return jnp.sum(before, dtype=jnp.int32)

    n = taus.shape[0]
    if n <= 2 * SEARCH_BLOCK:
        return count(taus)
    block = jnp.maximum(count(taus[::SEARCH_BLOCK]) - 1, 0)
    start = jnp.minimum(block * SEARCH_BLOCK, n - SEARCH_BLOCK)
    return start + count(jax.lax.dynamic_slice_in_dim(taus, start, SEARCH_BLOCK))


def allocate_rows(
    num_rows: int, num_saves: int, y0: Array, num_stages: int, witness: Array
) -> DenseRows:
    """Rows to be written by the forward loop; the slots past ``count`` stay unwritten."""
    dtype = y0.dtype
    return DenseRows(
        starts=jnp.zeros((num_saves + 1,), jnp.int32) + witness.astype(jnp.int32),
        step=uninitialised((num_rows,), jnp.int32, witness, "dense step"),
        tau=uninitialised((num_rows,), dtype, witness, "dense tau"),
        h=uninitialised((num_rows,), dtype, witness, "dense h"),
        y=uninitialised((num_rows,) + y0.shape, dtype, witness, "dense y"),
        k=uninitialised((num_rows, num_stages) + y0.shape, dtype, witness, "dense k"),
        count=jnp.int32(0),
    )


class RowWindow(NamedTuple):
    """Where a window of the rows sits in the whole (the forward loop's `advance_window`):
    its row buffers start at row ``row_start`` of ``num_rows``, its ``starts`` at save
    ``save_start``."""

    row_start: Array
    save_start: Array
    num_rows: int


def write_row(rows: DenseRows, where: Array, n: Array, tau: Array, h: Array, y: Array,
              ks: Array, first_save: Array, window: RowWindow | None = None) -> DenseRows:
    """``rows`` with the next row set to ``(n, tau, h, y, ks)`` if ``where``.

    The slot ``count`` is written whether or not ``where``: it is past the rows written
    so far, so a step without a row leaves data there that no one reads and the next row
    overwrites.  That makes the write an in-place update with no read of the buffer (a
    guarded write costs a read, a select and a scatter per buffer, in every step).
    ``first_save`` is the index of the first save time ``>= tau`` (``n_save`` if none).
    With a ``window``, ``rows`` holds that window's buffers (``count`` is the whole's, and
    ``k`` is a tuple of one buffer per stage).
    """
    if window is None:
        slot = jnp.minimum(rows.count, rows.size - 1)
    else:
        slot = jnp.minimum(rows.count, window.num_rows - 1) - window.row_start
        first_save = first_save - window.save_start

    def put(buffer, value):
        value = jnp.asarray(value, buffer.dtype)[None]
        return jax.lax.dynamic_update_index_in_dim(buffer, value, slot, 0)

    if isinstance(rows.k, tuple):  # a window's slopes, one buffer per stage
        k = tuple(put(buffer, ks[m]) for m, buffer in enumerate(rows.k))
    else:
        k = put(rows.k, ks)
    return DenseRows(
        step=put(rows.step, n), tau=put(rows.tau, tau), h=put(rows.h, h), y=put(rows.y, y),
        k=k, count=rows.count + where.astype(jnp.int32),
        starts=rows.starts.at[first_save].add(where.astype(jnp.int32)),
    )


def row_slopes(
    plan: StagePlan, f: Callable[[Array, Array], Array], tau: Array, h: Array, y: Array,
    ks: list[Array], k_next: Array, has_row: Array,
) -> Array:
    """The slopes the interpolant reads, stacked ``(L, N)``: the step's, and extra stages.

    A stage equal to ``f(t_{n+1}, y_{n+1})`` is ``k_next``, which the loop computes
    anyway; other extra stages are evaluated only for a step that gets a row (their
    arithmetic is that of the reverse pass, `_reverse._stage_adjoints`).
    """
    s, total = plan.num_main, plan.a.shape[0]
    extra = [m for m in range(s, total) if m not in plan.end_stages]

    def with_extra(ks):
        ks = list(ks) + [None] * (total - s)
        for m in range(s, total):
            if m in plan.end_stages:
                ks[m] = k_next
            else:
                stage = linear_combination(y, h, plan.a[m, :m], ks)
                ks[m] = f(stage_time(tau, h, plan.c[m]), stage)
        return jnp.stack([ks[m] for m in plan.interpolation_stages])

    if not extra:
        return with_extra(ks)
    shape = (len(plan.interpolation_stages),) + y.shape
    return jax.lax.cond(has_row, with_extra, lambda ks: jnp.zeros(shape, y.dtype), ks)


def final_row_slopes(plan: StagePlan, k: Array) -> Array:
    """The slopes of the final state's row: ``k / b_1'(0)`` first (``k = f(t_T, y_T)``),
    zeros after.

    The row is only read at ``theta = 0``: its value is ``y_T`` bitwise and its time
    derivative ``b_1'(0)`` times the first slope, i.e. ``k``.  Every Runge–Kutta interpolant
    has ``b_1'(0) = 1`` (the slope exactly); a Rosenbrock extension's ``b_1'(0)`` is
    another number (`_rosenbrock.RosenbrockWeights.initial_slope`).
    """
    if isinstance(plan.weights, StageWeights) and plan.interpolation_stages[0] != 0:
        raise AssertionError("an interpolant must read the first stage")
    scale = plan.weights.initial_slope()
    first = k if scale == 1 else k / scale
    return jnp.zeros((len(plan.interpolation_stages),) + k.shape, k.dtype).at[0].set(first)


def first_weight_curvature(plan: StagePlan) -> float:
    """``b_1''(0)``: the final state's row (`final_row_slopes`), whose only slope is the
    first, curves by this times that slope at ``theta = 0``, not as the solution does."""
    with jax.ensure_compile_time_eval():
        def first_weight(theta):
            return plan.weights.weight_matrix(jnp.reshape(theta, (1,)))[0, 0]

        zero = jnp.zeros((), jnp.result_type(float))
        return float(jax.grad(jax.grad(first_weight))(zero))


def write_final_row(plan: StagePlan, rows: DenseRows, num_accepted: Array, tau: Array,
                    y: Array, k: Array, taus: Array) -> DenseRows:
    """Append the final state ``y_T`` at ``t_T`` as a row (`final_row_slopes`)."""
    return write_row(rows, jnp.array(True), num_accepted, tau, jnp.ones_like(tau), y,
                     final_row_slopes(plan, k), count_before(taus, tau))


def find_rows(rows: DenseRows, taus: Array) -> Array:
    """For each time, the last written row with ``tau_row <= tau`` (row 0 if none).

    A binary search over the first ``count`` rows: ``log2(R)`` vectorised probes, each
    reading one row per time, so unwritten rows are never touched.  For many times the
    probes run as a `fori_loop`: unrolled, XLA fuses each probe with all earlier ones and
    recomputes them per element (10x slower for 10 000 times); for a few times (the
    continuous adjoint's single time per stage) the unrolled probes are one fused kernel.
    """
    tau_rows = jax.lax.stop_gradient(rows.tau)
    taus = jax.lax.stop_gradient(taus)

    def probe(_, bounds):
        lo, hi = bounds
        mid = (lo + hi) // 2
        go_up = (lo < hi) & (jnp.take(tau_rows, mid, mode="clip") <= taus)
        return jnp.where(go_up, mid + 1, lo), jnp.where(go_up | (lo >= hi), hi, mid)

    lo = jnp.zeros(taus.shape, jnp.int32)
    hi = jnp.broadcast_to(rows.count.astype(jnp.int32), taus.shape)
    num_probes = max(1, int(rows.size).bit_length())
    unroll = taus.size <= FIND_ROWS_UNROLL_MAX
    lo, _ = jax.lax.fori_loop(0, num_probes, probe, (lo, hi), unroll=unroll)
    return jnp.maximum(lo - 1, 0)


# Up to this many times, `find_rows` unrolls its probes (see there).
FIND_ROWS_UNROLL_MAX = 64


def save_rows(rows: DenseRows) -> Array:
    """The row of each save time (sorted saves): a prefix sum of ``rows.starts``.

    XLA runs `jnp.cumsum` as one kernel of ``n^2 / 2`` additions, and a parallel scan as
    ``2 log2(n)`` kernels of ``n``: the first for a few hundred saves, the second beyond.
    """
    starts = rows.starts[:-1]
    if starts.shape[0] <= 512:
        counts = jnp.cumsum(starts, dtype=jnp.int32)
    else:
        counts = jax.lax.associative_scan(jnp.add, starts)
    return jnp.maximum(counts - 1, 0)


def interpolate(
    weights: AbstractDenseWeights, rows: DenseRows, taus: Array, index: Array | None = None
) -> Array:
    """The continuous extension at the internal times ``taus``: ``(len(taus), N)``.

    Each time is evaluated on the row of the step with ``t_n <= tau < t_{n+1}`` (the last
    row, the final state, for ``tau = t_T``); times past the last row (a solve that
    stopped early) give NaN.  ``index`` gives the rows when ``taus`` are the save times
    (`save_rows`); other times are searched (`find_rows`).  Differentiable in
    ``rows.y``, ``rows.k`` and ``taus``; ``rows.tau`` and ``rows.h`` are constants.
    """
    if index is None:
        index, sorted_index = find_rows(rows, taus), False
    else:
        sorted_index = True

    def at(buffer: Array) -> Array:
        # Indices are in range; "clip" gathers run ~2x faster on CPU than the default.
        return jnp.take(buffer, index, axis=0, mode="clip", indices_are_sorted=sorted_index)

    tau_n, h = at(jax.lax.stop_gradient(rows.tau)), at(jax.lax.stop_gradient(rows.h))
    w = weights.weight_matrix((taus - tau_n) / h)
    ys = continuous_extension(at(rows.y), h, [w[:, i] for i in range(w.shape[1])], at(rows.k))
    last = jax.lax.stop_gradient(rows.tau[jnp.maximum(rows.count - 1, 0)])
    return jnp.where((taus > last)[:, None], jnp.nan, ys)


def interpolant_slopes(weights: AbstractDenseWeights, rows: DenseRows, taus: Array) -> Array:
    """``d/dtau`` of `interpolate` at the save times: the continuous extension's slope."""
    index = save_rows(rows)
    return jax.jvp(lambda t: interpolate(weights, rows, t, index), (taus,),
                   (jnp.ones_like(taus),))[1]


def live_save_cotangents(rows: DenseRows, taus: Array, ys_bar: Array) -> Array:
    """``ys_bar`` with zeros for the saves past the last accepted step.

    Those saves (of a solve that failed) are NaN constants: they get no cotangent, whatever
    the loss gave them (saves after a terminal event are masked by the caller).  Every
    other entry is passed on as it is, NaN included: a loss that is NaN at a save has a
    NaN gradient, as JAX gives.
    """
    last = jax.lax.stop_gradient(rows.tau)[jnp.maximum(rows.count - 1, 0)]
    return jnp.where((taus > last)[:, None], 0, ys_bar)


def save_cotangents(
    weights: AbstractDenseWeights, rows: DenseRows, taus: Array, ys_bar: Array,
    with_slopes: bool, with_times: bool,
) -> tuple[PendingSaves, Array | None]:
    """``(pending, taus_bar)``: the cotangents of `interpolate` at the saves for ``ys_bar``,
    per save (`_save_cotangents`).

    Save ``j`` on row ``r`` gives ``ys_bar_j`` to ``y_n`` of the row and
    ``h b_l(theta_j) ys_bar_j`` to the slope of its ``l``-th interpolation stage (the
    weights only ``with_slopes``).  ``taus_bar`` (the interpolant's slope times
    ``ys_bar``) only ``with_times``.  ``ys_bar`` is that of `live_save_cotangents`.

    Written out rather than left to `jax.vjp` of `interpolate`: the transpose of its
    unrolled weights is a chain of pads and adds over ``(n_save, L, N)`` that XLA fuses
    into one loop re-evaluating every weight polynomial for each of the ``L`` stages
    (5x slower at 10 000 saves).  Here each weight is computed once per save, as a
    Bernstein-basis matrix product.
    """
    index = save_rows(rows)
    tau_rows, h_rows = jax.lax.stop_gradient(rows.tau), jax.lax.stop_gradient(rows.h)
    scaled = None
    if with_slopes:

        def at(buffer: Array) -> Array:
            return jnp.take(buffer, index, axis=0, mode="clip", indices_are_sorted=True)

        h = at(h_rows)
        theta = (jax.lax.stop_gradient(taus) - at(tau_rows)) / h
        scaled = h[:, None] * weights.weight_matrix(theta)
    taus_bar = None
    if with_times:
        slopes = interpolant_slopes(weights, rows, taus)
        taus_bar = jnp.sum(jnp.where(jnp.isnan(slopes), 0, slopes) * ys_bar, axis=-1)
    return pending_saves(rows.size, index, ys_bar, scaled), taus_bar


class DenseInterpolation(eqx.Module):
    """The solution as a function of time, ``sol.evaluate(t)`` (``SaveAt(dense=True)``).

    Built from the continuous extension of every accepted step; differentiable with
    respect to everything the solve is, and to ``t``.
    """

    rows: DenseRows
    direction: Array
    weights: AbstractDenseWeights = eqx.field(static=True)
    unravel_y: Callable[[Array], Any] = eqx.field(static=True)

    def evaluate(self, t: Any) -> Any:
        """The state at time ``t`` (a scalar or a 1-D array of times in ``[t0, t1]``).

        Returns a pytree like ``y0``; with an array of times each leaf gets a leading
        time axis.  Times within round-off outside the interval (``16 eps max(|t0|, |t1|)``,
        such as ``t0 + n dt`` landing one ulp past ``t1``) are read at its end.  Times further
        out, and NaN times, raise a `ValueError` when they and the solution are concrete,
        and give NaN under `jax.jit` (with a zero gradient, so that a loss may mask them
        out).
        """
        if self.rows.tau.ndim > 1:
            raise ValueError(
                "`evaluate` works on one solution; this one holds a batch (from `jax.vmap`). "
                "Evaluate each: `jax.vmap(lambda sol: sol.evaluate(t))(sol)`")
        t = jnp.asarray(t, self.rows.tau.dtype)
        if t.ndim > 1:
            raise ValueError(f"`evaluate` takes a scalar or a 1-D array of times, got {t.shape}")
        taus = jnp.atleast_1d(self.direction * t)
        tau_rows = jax.lax.stop_gradient(self.rows.tau)
        first = tau_rows[0]
        last = tau_rows[jnp.maximum(self.rows.count - 1, 0)]
        slack = 16 * jnp.finfo(taus.dtype).eps * jnp.maximum(jnp.abs(first), jnp.abs(last))
        inside = jnp.clip(taus, first, last)
        outside = (jnp.abs(taus - inside) > slack) | jnp.isnan(taus)
        if all(is_concrete(x) for x in (taus, tau_rows, self.rows.count)) and bool(
                jnp.any(outside)):
            bad = np.asarray(self.direction * taus)[np.asarray(outside)]
            ends = np.asarray(self.direction * jnp.stack([first, last]))
            raise ValueError(f"`evaluate` got times outside the solved interval "
                             f"[{ends[0]}, {ends[1]}], or NaN: {bad[:5]}")
        # Read at the end (the value clipped, the time derivative kept).
        taus = jnp.where(outside, taus, taus + jax.lax.stop_gradient(inside - taus))
        ys = interpolate(self.weights, self.rows, taus)
        ys = jnp.where((taus < first)[:, None], jnp.nan, ys)
        out = jax.vmap(self.unravel_y)(ys)
        return jax.tree.map(lambda x: x[0], out) if t.ndim == 0 else out
