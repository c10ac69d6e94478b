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
    y: Array,
    stages: Array | None,
    lam: Array,
    mu: Array,
    params: Any,
    direction: Array,
) -> tuple[Array, Any]:
    """Adjoint of one step: returns ``(lam_n, pbar of this step)``.

    ``stages`` holds the live stage values ``Y_m`` if the forward pass stored them;
    otherwise they are recomputed from ``y = y_n`` with exactly the forward arithmetic.

    The state adjoints ``Ybar_m`` must be computed stage by stage, but the parameter
    adjoint is linear in the ``kbar_m``: it is computed once per step, as one
    vector–Jacobian product of the stages stacked along a new axis.  For parameters
    entering as matrices (``A y``) that is one matrix–matrix product instead of ``s``
    outer products, and XLA can no longer pull the stage arithmetic into an ``N^2`` loop.
    """
    tableau = system.solver.tableau
    a, b, c = tableau.a, tableau.b, tableau.c
    live = tableau.live_stages
    quad = [m for m in live if b[m] != 0] if system.has_integrand else []
    ks: list[Array | None] = [None] * tableau.num_stages
    stage_values, stage_times, state_vjps, integrand_vjps = {}, {}, {}, {}
    for i, m in enumerate(live):
        t_m = stage_time(tau, h, c[m])
        stage = stages[i] if stages is not None else linear_combination(y, h, a[m, :m], ks)
        stage_values[m], stage_times[m] = stage, t_m
        ks[m], state_vjps[m] = jax.vjp(
            lambda Y, t_m=t_m: system.field(t_m, Y, params, direction), stage
        )
        if m in quad:
            _, integrand_vjps[m] = jax.vjp(
                lambda Y, t_m=t_m: system.field_integrand(t_m, Y, params, direction), stage
            )

    stage_bars: dict[int, Array] = {}
    kbars: dict[int, Array] = {}
    for m in reversed(live):
        later = [q for q in live if q > m and a[q, m] != 0]
        kbars[m] = linear_combination(
            jnp.zeros_like(lam), h, [b[m]] + [a[q, m] for q in later],
            [lam] + [stage_bars[q] for q in later],
        )
        (stage_bar,) = state_vjps[m](kbars[m])
        if m in quad:
            (r_bar,) = integrand_vjps[m]((float(b[m]) * h) * mu)
            stage_bar = stage_bar + r_bar
        stage_bars[m] = stage_bar
    lam_n = lam
    for m in live:
        lam_n = lam_n + stage_bars[m]

    # One parameter VJP for all stages of the step.
    live_times = jnp.stack([stage_times[m] for m in live])
    live_stages = jnp.stack([stage_values[m] for m in live])

    def stage_fields(p):
        return jax.vmap(lambda t, Y: system.field(t, Y, p, direction))(live_times, live_stages)

    _, params_vjp = jax.vjp(stage_fields, params)
    (pbar,) = params_vjp(jnp.stack([kbars[m] for m in live], axis=-2))
    if quad:
        quad_times = jnp.stack([stage_times[m] for m in quad])
        quad_stages = jnp.stack([stage_values[m] for m in quad])
        weights = jnp.asarray([b[m] for m in quad], mu.dtype)[:, None] * h

        def stage_integrands(p):
            return jax.vmap(lambda t, Y: system.field_integrand(t, Y, p, direction))(
                quad_times, quad_stages
            )

        _, integrand_params_vjp = jax.vjp(stage_integrands, params)
        (r_pbar,) = integrand_params_vjp(weights * mu[..., None, :])
        pbar = tree_add(pbar, r_pbar)
    return lam_n, pbar


def inject_saves(
    lam: Array, ys_bar: Array, save_state_index: Array, j: Array, n: Array
) -> tuple[Array, Array]:
    """Add the cotangents of the saves of state ``y_n`` (indices ``j, j-1, ...``)."""

    def cond(carry):
        _, j = carry
        return (j >= 0) & (save_state_index[jnp.maximum(j, 0)] == n)

    def body(carry):
        lam, j = carry
        return lam + ys_bar[j], j - 1

    return jax.lax.while_loop(cond, body, (lam, j))


def reverse_sweep(
    system: System,
    params: Any,
    direction: Array,
    grid: Array,
    n_hi: Array,
    n_lo: Array,
    read: Callable[[Array], tuple[Array, Array | None]],
    lam: Array,
    pbar: Any,
    mu: Array,
    ys_bar: Array,
    save_state_index: Array,
    j: Array,
) -> tuple[Array, Any, Array]:
    """Reverse through steps ``n_hi - 1, ..., n_lo``; returns ``(lam_{n_lo}, pbar, j)``.

    ``lam`` enters as ``dL/dy_{n_hi}`` *before* the saves of ``y_{n_hi}`` are added.
    ``read(n)`` returns ``(y_n, stages_n or None)``.  It is called one iteration ahead
    and its result carried, because slicing a stored buffer inside the body lets XLA
    fuse the slice into every consumer of the stage arithmetic and lose vectorisation.
    """
    lam, j = inject_saves(lam, ys_bar, save_state_index, j, n_hi)

    def cond(carry):
        return carry[0] >= n_lo

    def body(carry):
        n, (y, stages), lam, pbar, j = carry
        tau = grid[n]
        h = grid[n + 1] - tau
        lam, p_step = reverse_step(system, tau, h, y, stages, lam, mu, params, direction)
        pbar = tree_add(pbar, p_step)
        lam, j = inject_saves(lam, ys_bar, save_state_index, j, n)
        return n - 1, read(jnp.maximum(n - 1, 0)), lam, pbar, j

    init = (n_hi - 1, read(jnp.maximum(n_hi - 1, 0)), lam, pbar, j)
    _, _, lam, pbar, j = jax.lax.while_loop(cond, body, init)
    return lam, pbar, j
