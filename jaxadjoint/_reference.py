"""An independent reference: plain Runge–Kutta on a given grid, differentiable by JAX.

`replay_on_grid` re-integrates with the textbook formulas of a tableau on a recorded
step grid (e.g. ``sol.steps``) using `jax.lax.scan`, with none of `solve`'s machinery.
`jax.grad` of it is what the discrete adjoint must reproduce to round-off, so users
(and our tests) can check any gradient themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._solvers import AbstractERK
from ._tableaus import ButcherTableau


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
            dropped); must be concrete.
        saveat: times (each a grid point) at which to return the state; ``None`` returns
            the final state with a leading axis of length 1, like ``sol.ys``.
        integrand: ``R(t, y, args)``; the integral uses the same quadrature as `solve`.

    Returns:
        ``(ys, integral)``; ``integral`` is ``None`` without an integrand.
    """
    tableau = method if isinstance(method, ButcherTableau) else method.tableau
    grid = np.asarray(grid)
    grid = grid[np.isfinite(grid)]
    a, b, c = tableau.a, tableau.b, tableau.c
    s = tableau.num_stages

    def add(y, h, coeffs, ks):
        for coeff, k in zip(coeffs, ks):
            if coeff != 0:
                y = jax.tree.map(lambda u, v, coeff=coeff: u + h * float(coeff) * v, y, k)
        return y

    def step(carry, time_and_step):
        y, q = carry
        t, h = time_and_step
        ks, rs = [], []
        for m in range(s):
            stage = add(y, h, a[m, :m], ks)
            ks.append(rhs(t + float(c[m]) * h, stage, args))
            if integrand is not None:
                rs.append(integrand(t + float(c[m]) * h, stage, args))
        y_new = add(y, h, b, ks)
        if integrand is not None:
            q = add(q, h, b, rs)
        return (y_new, q), y_new

    dtype = jnp.result_type(*jax.tree.leaves(y0))
    starts = jnp.asarray(grid[:-1], dtype)
    steps = jnp.asarray(grid[1:] - grid[:-1], dtype)
    q0 = None
    if integrand is not None:
        q0 = jax.tree.map(jnp.zeros_like, integrand(starts[0], y0, args))
    (y_final, q), states = jax.lax.scan(step, (y0, q0), (starts, steps))
    if saveat is None:
        return jax.tree.map(lambda x: x[None], y_final), q
    all_states = jax.tree.map(lambda u, v: jnp.concatenate([u[None], v]), y0, states)
    index = np.array([int(np.flatnonzero(grid == t)[-1]) for t in np.asarray(saveat)])
    return jax.tree.map(lambda x: x[index], all_states), q
