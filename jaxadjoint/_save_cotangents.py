"""The cotangents of the saves, as the reverse sweep reads them: per row, or still per save.

A save ``j`` is evaluated on the dense-output row ``r`` of the step that holds it
(`_dense`): ``y(t_j) = y_n + sum_l w_jl k_l`` with ``w_jl = h b_l(theta_j)``.  Its cotangent
``ybar_j`` therefore adds ``ybar_j`` to the row's ``y_n`` and ``w_jl ybar_j`` to its slopes;
the sweep adds a row's sums when it reverses the row's step:

    ybar_r = sum_{j in r} ybar_j,        kbar_r[l] = sum_{j in r} w_jl ybar_j.

**Two forms.**  Summed into rows once, before the sweep (`materialise`: one sorted
scatter-add each), a row costs ``N`` and ``L N`` numbers.  Under `jax.jacrev` of the saves,
though, the cotangent seeds are ``n_save N``, and rows for every seed are
``n_save N x R x L N`` numbers, quadratic in the number of saves (200 GLV saves: 225 MB,
and 127 of the Jacobian's 154 ms).  So the saves stay *pending* (`PendingSaves`, per save,
``n_save N`` numbers a seed) where the sweep runs under `vmap` over seeds
(`_batched_reverse.batch_over_solves`), and the sweep sums a row's saves when it reaches
the row (`row_state_cotangent`, `row_slopes_cotangent`: a loop over the row's saves, whose
work follows them).  A solve on its own and the lanes of a batch of solves use rows: one
scatter beats a loop per step there, and their arithmetic is the one every checkpoint
strategy shares (`tests/test_bitwise.py`).

Cotangents given per row (``SaveAt(dense=True)``, events) are kept in ``ybar``/``kbar``
in both forms.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import Array

from ._sequential import slots


class PendingSaves(NamedTuple):
    """The saves' cotangents not yet summed into rows."""

    first: Array  # (R + 1,) int32: the saves of row r are first[r] .. first[r + 1] - 1
    index: Array  # (n_save,) int32: the row of each save (sorted)
    ys_bar: Array  # (..., n_save, N) their cotangents (NaN-free, zero past a failed end)
    weights: Array | None  # (n_save, L): h b_l(theta_j); None when every save is a node


class SaveCotangents(NamedTuple):
    """Cotangents of the dense-output rows (`_dense.DenseRows`), read by the reverse sweep.

    Row ``r`` belongs to step ``step[r]`` (rows sorted by step; the final state's row has
    step ``T``).  ``ybar[r]`` adds to ``dL/dy_n`` and ``kbar[r]`` to the cotangents of the
    step's interpolation-stage slopes, and so do the ``pending`` saves of the row (module
    docstring).  Slopes have no cotangent (``kbar`` is ``None`` and so are the pending
    weights) when every save is a node (``theta = 0``).
    """

    step: Array  # (R,) int32
    count: Array  # rows written: rows count..R-1 are padding
    ybar: Array | None  # (..., R, N); None: no row-level part
    kbar: Array | None  # (..., R, L, N); None: no row-level part
    pending: PendingSaves | None = None  # saves not yet in ybar/kbar


def pending_saves(
    num_rows: int, index: Array, ys_bar: Array, weights: Array | None
) -> PendingSaves:
    """`PendingSaves` of saves on rows ``index`` (sorted) among ``num_rows`` rows."""
    rows = jnp.arange(num_rows + 1, dtype=index.dtype)
    first = jnp.searchsorted(index, rows, side="left").astype(jnp.int32)
    return PendingSaves(first, index, ys_bar, weights)


def has_slopes(saves: SaveCotangents) -> bool:
    """Whether the saves give the slopes a cotangent (static)."""
    if saves.kbar is not None:
        return True
    return saves.pending is not None and saves.pending.weights is not None


def _into_rows(values: Array, index: Array, num_rows: int) -> Array:
    """``values (n_save, ...)`` summed into ``num_rows`` rows by the saves' rows ``index``
    (sorted): one sorted scatter-add."""
    zeros = jnp.zeros((num_rows,) + values.shape[1:], values.dtype)
    return zeros.at[index].add(values, indices_are_sorted=True, mode="promise_in_bounds")


def materialise(saves: SaveCotangents) -> SaveCotangents:
    """``saves`` with every pending save summed into its row (one sorted scatter-add each
    for ``ybar`` and ``kbar``: each weight is computed once per save, multiplied into the
    save's cotangent, and the products summed into the rows)."""
    pending = saves.pending
    if pending is None:
        return saves
    num_rows = saves.step.shape[-1]

    def into_rows(values: Array, extra: Array | None) -> Array:
        summed = _into_rows(values, pending.index, num_rows)
        return summed if extra is None else extra + summed

    ybar = into_rows(pending.ys_bar, saves.ybar)
    kbar = saves.kbar
    if pending.weights is not None:
        products = pending.weights[:, :, None] * pending.ys_bar[:, None, :]
        kbar = into_rows(products, saves.kbar)
    return saves._replace(ybar=ybar, kbar=kbar, pending=None)


def _sum_row_saves(values: Array, weights: Array | None, lo: Array, hi: Array) -> Array:
    """``sum_{lo <= j < hi} weights[j] (x) values[..., j, :]``: ``(..., K, N)``, or
    ``(..., N)`` without ``weights``; a loop over the saves ``lo .. hi - 1``, so that the
    work follows the row's saves (none for a row without saves).

    One save per iteration: the loop runs where the values carry many cotangent seeds
    (module docstring), so an iteration is a product over the seeds; a window of several
    saves, masked at the row's ends, measured slower (`jax.jacrev` of 50 GLV saves:
    7.0 ms with one save per iteration, 8.1, 8.7 and 9.5 ms with 2, 4 and 8).
    """
    axis = values.ndim - 2

    def body(carry):
        total, j = carry
        value = jax.lax.dynamic_index_in_dim(values, j, axis=axis, keepdims=False)
        if weights is None:
            return total + value, j + 1
        weight = jax.lax.dynamic_index_in_dim(weights, j, axis=0, keepdims=False)
        return total + weight[:, None] * value[..., None, :], j + 1

    shape = values.shape[:-2] + (() if weights is None else (weights.shape[-1],)) \
        + values.shape[-1:]
    total = jnp.zeros(shape, values.dtype)
    return jax.lax.while_loop(lambda c: c[1] < hi, body, (total, lo))[0]


def _scatter_then_read(values: Array, weights: Array, index: Array, row: Array,
                       num_rows: int) -> Array:
    """`_sum_one_row` of one solve's saves (``values (n_save, N)``): summed into rows
    (`_into_rows`) and read at ``row``."""
    rows = _into_rows(weights[:, :, None] * values[:, None, :], index, num_rows)
    return jax.lax.dynamic_index_in_dim(rows, row, axis=0, keepdims=False)


def _masked_sum(values: Array, weights: Array, index: Array, row: Array) -> Array:
    """`_sum_one_row` as one masked contraction over all saves.

    An `einsum`, which XLA runs as a dot: written as a product and a sum, XLA on CPU handed
    the reduction to YNNPACK, which took 3.5 ms of a 13 ms `jax.jacrev` (400 seeds, 50
    saves; benchmarks/README.md, "Joint stage VJPs for small states")."""
    mine = (index == row)[:, None]
    return jnp.einsum("jk,...jn->...kn", jnp.where(mine, weights, 0), values)


def _sum_one_row(values: Array, weights: Array | None, index: Array, row: Array,
                 num_rows: int) -> Array:
    """The sum of `_sum_row_saves` for the saves of one row, outside the sweep.

    For one solve and for lanes, summed into rows by one sorted scatter-add (``K N``
    numbers a save; ``K`` is one where this is used) and read at ``row``: a masked reduction
    over all saves made a batch of 32 neural-ODE gradients 4-6 % slower.  Under `vmap`
    over seeds only (`jax.jacrev`), the masked reduction: rows for every seed cost
    ``seeds x R x N`` (32 MB and 15 of 60 ms for 200 GLV saves).
    """
    ones = weights is None
    weights = jnp.ones(values.shape[-2:-1] + (1,), values.dtype) if ones else weights

    @jax.custom_batching.custom_vmap
    def one_row(values, weights, index, row):
        return _scatter_then_read(values, weights, index, row, num_rows)

    @one_row.def_vmap
    def batched(axis_size, in_batched, values, weights, index, row):
        if in_batched[0] and not any(in_batched[1:]):
            return _masked_sum(values, weights, index, row), True
        axes = tuple(0 if b else None for b in in_batched)
        out = jax.vmap(lambda v, w, i, r: _scatter_then_read(v, w, i, r, num_rows),
                       in_axes=axes, axis_size=axis_size)(values, weights, index, row)
        return out, True

    out = one_row(values, weights, index, row)
    return out[..., 0, :] if ones else out


def _bounds(pending: PendingSaves, row: Array, needed: Array | None) -> tuple[Array, Array]:
    """The saves ``lo .. hi - 1`` of ``row`` to sum: none where not ``needed``."""
    lo, hi = pending.first[row], pending.first[row + 1]
    return lo, hi if needed is None else jnp.where(needed, hi, lo)


def _pending_sum(pending: PendingSaves, weights: Array | None, row: Array, num_rows: int,
                 single: bool, needed: Array | None) -> Array:
    """The pending saves of ``row`` summed with ``weights`` (`_sum_row_saves`)."""
    if single:
        return _sum_one_row(pending.ys_bar, weights, pending.index, row, num_rows)
    return _sum_row_saves(pending.ys_bar, weights, *_bounds(pending, row, needed))


def row_state_cotangent(saves: SaveCotangents, row: Array, single: bool = False,
                        needed: Array | None = None) -> Array:
    """``ybar_r``: the cotangent of row ``row``'s ``y_n``, ``(..., N)``.  ``single``: for
    one row outside the sweep (`_sum_one_row`).  Where ``needed`` is false the pending
    saves are not summed (the result is then to be discarded)."""
    out = None if saves.ybar is None else saves.ybar[..., row, :]
    if saves.pending is not None:
        summed = _pending_sum(saves.pending, None, row, saves.step.shape[-1], single, needed)
        out = summed if out is None else out + summed
    return out


def row_slopes_cotangent(saves: SaveCotangents, row: Array, slot: int | None = None,
                         single: bool = False, needed: Array | None = None) -> Array:
    """``kbar_r``: the cotangents of row ``row``'s slopes, ``(..., L, N)``, or of its slope
    ``slot`` alone, ``(..., N)``.  Only if `has_slopes`; ``single`` and ``needed`` as in
    `row_state_cotangent`."""
    out = None
    if isinstance(saves.kbar, tuple):  # a window's, one buffer per slope (`window_of`)
        out = (jnp.stack([k[row] for k in saves.kbar]) if slot is None
               else saves.kbar[slot][row])
    elif saves.kbar is not None:
        out = saves.kbar[..., row, :, :] if slot is None else saves.kbar[..., row, slot, :]
    pending = saves.pending
    if pending is not None and pending.weights is not None:
        weights = pending.weights if slot is None else pending.weights[:, slot:slot + 1]
        summed = _pending_sum(pending, weights, row, saves.step.shape[-1], single, needed)
        summed = summed if slot is None else summed[..., 0, :]
        out = summed if out is None else out + summed
    return out


def window_of(saves: SaveCotangents, start: Array, size: int) -> SaveCotangents:
    """Rows ``start .. start + size - 1`` of ``saves`` (summed into rows: no pending
    saves), as a sweep in windows reads them with row indices less ``start``
    (`_reverse.reverse_all_steps`).  The slopes' cotangents are one buffer per slope,
    so that each is small."""
    if saves.pending is not None:
        raise AssertionError("a window of saves needs them summed into rows")

    step, ybar, kbar = slots((saves.step, saves.ybar, saves.kbar), start, size)
    kbar = None if kbar is None else tuple(jnp.moveaxis(kbar, 1, 0))
    return SaveCotangents(step, saves.count, ybar, kbar)


def row_at(saves: SaveCotangents, j: Array, n: Array) -> tuple[Array, Array]:
    """``(hit, row)``: whether row ``j`` (the latest not yet added) belongs to step ``n``."""
    row = jnp.maximum(j, 0)
    return (j >= 0) & (saves.step[row] == n), row


def save_state_cotangent(saves: SaveCotangents, j: Array, n: Array) -> tuple[Array, Array]:
    """``(ybar, j)``: the cotangent of ``y_n`` from row ``j`` (zero if the row is not step
    ``n``'s), and the latest row not yet added once it is."""
    hit, row = row_at(saves, j, n)
    return jnp.where(hit, row_state_cotangent(saves, row, needed=hit), 0), j - hit.astype(j.dtype)


def add_save_state(
    lam: Array, saves: SaveCotangents, j: Array, n: Array
) -> tuple[Array, Array]:
    """Add the cotangent of ``y_n`` from row ``j`` if it belongs to step ``n``; ``(lam, j)``."""
    ybar, j = save_state_cotangent(saves, j, n)
    return lam + ybar, j


def save_slopes_cotangent(
    saves: SaveCotangents, j: Array, n: Array, carried_end: int | None
) -> Array | None:
    """The slope cotangents ``(L, N)`` of step ``n`` from row ``j`` (zero without a row).

    With ``carried_end`` (`_dense.StagePlan.carried_end`), the first slope's cotangent also
    takes that of step ``n - 1``'s end stage, the same slope ``f(t_n, y_n)``: the end
    stage itself is not linearised (`_dense.carried_end_stage`).
    """
    if not has_slopes(saves):
        return None
    hit, row = row_at(saves, j, n)
    kbar = jnp.where(hit, row_slopes_cotangent(saves, row, needed=hit), 0)
    if carried_end is not None:
        before, before_row = row_at(saves, j - hit.astype(j.dtype), n - 1)
        carried = jnp.where(
            before, row_slopes_cotangent(saves, before_row, carried_end, needed=before), 0)
        kbar = kbar.at[..., 0, :].add(carried)
    return kbar


def last_row(saves: SaveCotangents) -> Array:
    """The index of the last written row, where a sweep over all steps starts."""
    return (saves.count - 1).astype(jnp.int32)
