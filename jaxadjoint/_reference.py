"""An independent reference: plain Runge–Kutta on a given grid, differentiable by JAX.

`replay_on_grid` re-integrates with the textbook formulas of a tableau on a recorded
step grid (e.g. ``sol.steps``) using `jax.lax.scan`, with none of `solve`'s machinery,
and evaluates save times on the method's continuous extension (`_interpolants`).
`jax.grad` of it is what the discrete adjoint must reproduce to round-off, so users
(and our tests) can check any gradient themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .solvers import _interpolants
from .solvers._explicit import AbstractERK
from .solvers._tableaus import ButcherTableau


def replay_on_grid(
    rhs: Callable[[Any, Any, Any], Any],
    method: AbstractERK | ButcherTableau,
    y0: Any,
    args: Any,
    grid: Any,
    saveat: Any = None,
    integrand: Callable[[Any, Any, Any], Any] | None = None,
) -> tuple[Any, Any]:
    """Integrate ``rhs`` with ``method`` on ``grid`` and return ``(ys, integral)``.

    Arguments:
        rhs: ``rhs(t, y, args)`` as for `solve`.
        method: a solver (e.g. ``Dopri5()``) or its tableau.
        y0, args: as for `solve`.
        grid: the times ``t_0, ..., t_T`` (``inf`` entries, as in ``sol.steps``, are
            dropped).  May be traced, to differentiate with respect to the grid's times
            (e.g. a grid ``t0 + cumsum(h)`` that moves with its start); its entries must
            then all be finite.
        saveat: times at which to return the state, each evaluated with the method's
            continuous extension on the grid step that contains it (``theta = 1`` of the
            last step for ``t_T``), as `solve` does; ``None`` returns the final state with
            a leading axis of length 1, like ``sol.ys``.  May be traced (differentiated).
        integrand: ``R(t, y, args)``; the integral uses the same quadrature as `solve`.

    Returns:
        ``(ys, integral)``; ``integral`` is ``None`` without an integrand.
    """
    if not isinstance(method, (AbstractERK, ButcherTableau)):
        raise TypeError(
            f"`replay_on_grid` replays explicit Runge–Kutta methods; got "
            f"{type(method).__name__}. For a Rosenbrock or implicit solver, compare "
            "`DiscreteAdjoint` with `DiscreteForward` (exact on the same grid) or with "
            "`ja.check_gradient`")
    tableau = method if isinstance(method, ButcherTableau) else method.tableau
    interp = _interpolants.interpolant_for(tableau)
    try:
        grid = np.asarray(grid)
        grid = grid[np.isfinite(grid)]
    except jax.errors.TracerArrayConversionError:
        pass  # a traced grid: its times are differentiated
    s = tableau.num_stages
    e = interp.c_extra.shape[0]
    # The step's stages, then the interpolant's extra stages, in one lower-triangular table.
    a = np.zeros((s + e, s + e))
    a[:s, :s] = tableau.a
    a[s:] = interp.a_extra
    c = np.concatenate([tableau.c, interp.c_extra])
    b = tableau.b

    # As `solve`: the state in the widest dtype of its leaves, `rhs` and `integrand` seeing
    # each leaf in its own dtype, and each leaf returned in its own (a mixed float32/float64
    # state failed in the scan, whose carry changed dtype).
    dtype = jnp.result_type(*jax.tree.leaves(y0))
    leaf_dtypes = jax.tree.map(jnp.result_type, y0)

    def own_dtypes(ys):
        return jax.tree.map(lambda u, d: u.astype(d), ys, leaf_dtypes)

    def widened_rhs(t, y, args):
        return jax.tree.map(lambda o: jnp.asarray(o, dtype), rhs(t, own_dtypes(y), args))

    y0 = jax.tree.map(lambda x: jnp.asarray(x, dtype), y0)

    def add(y, h, coeffs, ks):
        for coeff, k in zip(coeffs, ks):
            if coeff != 0:
                y = jax.tree.map(lambda u, v, coeff=coeff: u + h * float(coeff) * v, y, k)
        return y

    def stages(y, t, h, ks, first, last):
        """``ks`` extended by the stages ``first .. last - 1`` of the table."""
        ks = list(ks)
        for m in range(first, last):
            stage = add(y, h, a[m, :m], ks)
            ks.append(widened_rhs(t + float(c[m]) * h, stage, args))
        return ks

    def step(carry, time_and_step):
        y, q = carry
        t, h = time_and_step
        ks, rs = [], []
        for m in range(s):
            stage = add(y, h, a[m, :m], ks)
            ks.append(widened_rhs(t + float(c[m]) * h, stage, args))
            if integrand is not None:
                rs.append(integrand(t + float(c[m]) * h, own_dtypes(stage), args))
        y_new = add(y, h, b, ks)
        if integrand is not None:
            q = add(q, h, b, rs)
        return (y_new, q), (y, ks)

    if isinstance(grid, np.ndarray):
        starts = jnp.asarray(grid[:-1], dtype)
        steps = jnp.asarray(grid[1:] - grid[:-1], dtype)
    else:
        grid = grid.astype(dtype)
        starts, steps = grid[:-1], grid[1:] - grid[:-1]
    q0 = None
    if integrand is not None:
        q0 = jax.tree.map(jnp.zeros_like, integrand(starts[0], own_dtypes(y0), args))
    (y_final, q), (states, slopes) = jax.lax.scan(step, (y0, q0), (starts, steps))
    if saveat is None:
        return own_dtypes(jax.tree.map(lambda x: x[None], y_final)), q
    # Each save on the step t_n <= t < t_{n+1} (the last step for t = t_T), in real time.
    times = jnp.asarray(saveat, dtype)
    # The step of each save (not differentiated), on the grid sorted forward in time.
    sign = jnp.where(grid[-1] >= grid[0], 1, -1)
    sorted_grid = jax.lax.stop_gradient(sign * jnp.asarray(grid))
    taus = jax.lax.stop_gradient(sign.astype(dtype) * times)
    index = jnp.clip(jnp.searchsorted(sorted_grid[:-1], taus, side="right") - 1,
                     0, grid.shape[0] - 2)
    theta = (times - starts[index]) / steps[index]
    weights = _interpolants.weights_at(interp, theta)  # (n_save, s + e)
    # Each save's step: its state and slopes, and the interpolant's extra stages computed
    # for the saves only (in the scan, every step's would be; jax.grad of Vern7's replay
    # then compiled for 130 s on an 8 x 8 two-field grid, against 26 s without saves).
    save_states, save_slopes = jax.tree.map(lambda x: x[index], (states, slopes))
    save_slopes = jax.vmap(lambda y, t, h, ks: stages(y, t, h, ks, s, s + e))(
        save_states, starts[index], steps[index], save_slopes)

    def at_save(value, *leaf_slopes):
        h = steps[index].reshape((-1,) + (1,) * (value.ndim - 1))
        for m, k in enumerate(leaf_slopes):
            w = weights[:, m].reshape(h.shape)
            value = value + h * w * k
        return value

    return own_dtypes(jax.tree.map(at_save, save_states, *save_slopes)), q
