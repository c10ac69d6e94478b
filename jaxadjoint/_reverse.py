"""The reverse step of an explicit Runge–Kutta method and the reverse sweep over a grid.

For one step ``y_{n+1} = y_n + h sum_m b_m k_m``, ``k_m = f(t_n + c_m h, Y_m, p)``,
``Y_m = y_n + h sum_{j<m} a_mj k_j``, given ``lam = dL/dy_{n+1}`` (and ``mu = dL/dq`` for
the quadrature ``q_{n+1} = q_n + h sum_m b_m R(t_m, Y_m)``), the adjoint is

    for m = s .. 1 (live stages only):
        kbar_m = h (b_m lam + sum_{q>m} a_qm Ybar_q)
        Ybar_m, pbar_m = (df/dY, df/dp)(t_m, Y_m)^T kbar_m
                         + (dR/dY, dR/dp)(t_m, Y_m)^T (h b_m mu)
    lam_n = lam + sum_m Ybar_m,        pbar += sum_m pbar_m

(paper, section 3.3 and Appendix A).  ``h`` and ``t_n`` come from the recorded grid and
are constants.  Under `jax.vmap` over cotangent seeds only ``lam``, ``kbar``, ``Ybar`` and
``pbar`` carry the batch axis: the stage values depend on the record alone, so XLA sees
one unbatched stage recomputation and batched (matrix–matrix) vector–Jacobian products.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from ._solvers import linear_combination, stage_time
from ._system import System


def tree_add(a: Any, b: Any) -> Any:
    return jax.tree.map(jnp.add, a, b)


def reverse_step(
    system: System,
    tau: Array,
    h: Array,
    y: Array | None,
    stages: Array | None,
    lam: Array,
    mu: Array,
    params: Any,
    direction: Array,
) -> tuple[Array, Any]:
    """Adjoint of one step: returns ``(lam_n, pbar of this step)``.

    One joint vector–Jacobian product per stage, with respect to the stage value and
    the parameters together, so the right-hand side is linearised once per stage.
    (Batching the parameter products of several steps into one VJP, so that matrix
    parameters get one matrix–matrix product per block, measured no faster on
    Lotka–Volterra N = 10..200 and doubled the compile time.)
    """
    tableau = system.solver.tableau
    a, b, c = tableau.a, tableau.b, tableau.c
    live = tableau.live_stages
    ks: list[Array | None] = [None] * tableau.num_stages
    field_vjps, integrand_vjps = {}, {}
    for i, m in enumerate(live):
        t_m = stage_time(tau, h, c[m])
        stage = stages[i] if stages is not None else linear_combination(y, h, a[m, :m], ks)
        ks[m], field_vjps[m] = jax.vjp(
            lambda Y, p, t_m=t_m: system.field(t_m, Y, p, direction), stage, params
        )
        if system.has_integrand and b[m] != 0:
            _, integrand_vjps[m] = jax.vjp(
                lambda Y, p, t_m=t_m: system.field_integrand(t_m, Y, p, direction), stage, params
            )
    stage_bars: dict[int, Array] = {}
    pbar = None
    for m in reversed(live):
        later = [q for q in live if q > m and a[q, m] != 0]
        kbar = linear_combination(
            jnp.zeros_like(lam), h, [b[m]] + [a[q, m] for q in later],
            [lam] + [stage_bars[q] for q in later],
        )
        stage_bar, p_bar = field_vjps[m](kbar)
        if m in integrand_vjps:
            r_stage_bar, r_p_bar = integrand_vjps[m]((float(b[m]) * h) * mu)
            stage_bar = stage_bar + r_stage_bar
            p_bar = tree_add(p_bar, r_p_bar)
        stage_bars[m] = stage_bar
        pbar = p_bar if pbar is None else tree_add(pbar, p_bar)
    lam_n = lam
    for m in live:
        lam_n = lam_n + stage_bars[m]
    return lam_n, pbar


def group_saves(ys_bar: Array, save_state_index: Array) -> tuple[Array, Array]:
    """Sum the cotangents of saves of the same state; one row per distinct state.

    Save times may repeat or coincide with ``t0``, so several saves can hold the same
    state ``y_n``.  After grouping, each state appears once, groups are right-aligned
    (the last row is the latest state) and padding rows at the front get index ``-2``,
    which no step matches.  `inject_saves` then needs one select per step, no loop.
    """
    n_save = save_state_index.shape[0]
    rows = jnp.arange(n_save, dtype=jnp.int32)
    is_start = jnp.concatenate(
        [jnp.ones((1,), bool), save_state_index[1:] != save_state_index[:-1]]
    )
    group = jnp.cumsum(is_start.astype(jnp.int32)) - 1
    num_groups = group[-1] + 1
    sums = jax.ops.segment_sum(jnp.moveaxis(ys_bar, -2, 0), group, num_segments=n_save)
    sums = jnp.moveaxis(sums, 0, -2)
    group_index = jax.ops.segment_max(save_state_index, group, num_segments=n_save)
    source = rows - (n_save - num_groups)
    valid = source >= 0
    source = jnp.maximum(source, 0)
    grouped_index = jnp.where(valid, group_index[source], -2)
    grouped_bar = jnp.where(valid[:, None], jnp.take(sums, source, axis=-2), 0)
    return grouped_bar, grouped_index


def inject_saves(
    lam: Array, ys_bar: Array, save_state_index: Array, j: Array, n: Array
) -> tuple[Array, Array]:
    """Add the cotangent of the save of state ``y_n``, if row ``j`` holds it.

    ``ys_bar``/``save_state_index`` come from `group_saves` (one row per state, sorted),
    and ``j`` points at the latest row not yet added; returns ``(lam, j)`` updated.
    """
    row = jnp.maximum(j, 0)
    hit = (j >= 0) & (save_state_index[row] == n)
    return lam + jnp.where(hit, ys_bar[..., row, :], 0), j - hit.astype(j.dtype)


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
    ys_bar: Array,
    save_state_index: Array,
    j: Array,
) -> tuple[Array, Any, Array]:
    """Reverse through steps ``n_hi - 1, ..., n_lo``; returns ``(lam_{n_lo}, pbar, j)``.

    ``lam`` enters as ``dL/dy_{n_hi}`` *before* the saves of ``y_{n_hi}`` are added;
    ``ys_bar``/``save_state_index``/``j`` are as for `inject_saves`.  ``read(n)`` returns
    ``(y_n or None, live stages of step n or None)``.  It is called one iteration ahead
    and its result carried, because slicing a stored buffer inside the body lets XLA
    fuse the slice into every consumer of the stage arithmetic and lose vectorisation.
    """
    lam, j = inject_saves(lam, ys_bar, save_state_index, j, n_hi)

    def cond(carry):
        return carry[0] >= n_lo

    def body(carry):
        n, (y, stages), lam, pbar, j = carry
        tau = grid[n]
        lam, p_step = reverse_step(
            system, tau, grid[n + 1] - tau, y, stages, lam, mu, params, direction
        )
        lam, j = inject_saves(lam, ys_bar, save_state_index, j, n)
        return n - 1, read(jnp.maximum(n - 1, 0)), lam, tree_add(pbar, p_step), j

    init = (n_hi - 1, read(jnp.maximum(n_hi - 1, 0)), lam, pbar, j)
    _, _, lam, pbar, j = jax.lax.while_loop(cond, body, init)
    return lam, pbar, j
