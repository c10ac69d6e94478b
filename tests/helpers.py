"""Shared test helpers: the independent replay reference and tree comparisons.

`replay` integrates with a plain Runge–Kutta step written here from the tableau alone
(no code of jaxadjoint's step or reverse pass), on a given step grid, with `lax.scan`;
`jax.grad` of it is the reference every gradient path is tested against.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jaxadjoint as ja

ADAPTIVE_SOLVERS = [
    ja.BogackiShampine(), ja.Fehlberg45(), ja.CashKarp(), ja.Dopri5(), ja.Tsit5(), ja.Vern6(),
    ja.Vern7(), ja.Vern8(),
]
FIXED_SOLVERS = [ja.Euler(), ja.Heun(), ja.RK4()]
ALL_SOLVERS = FIXED_SOLVERS + ADAPTIVE_SOLVERS


def tree_allclose(x: Any, y: Any, *, rtol: float = 1e-12, atol: float = 0.0) -> bool:
    same = jax.tree.structure(x) == jax.tree.structure(y)
    return same and all(
        np.allclose(a, b, rtol=rtol, atol=atol) for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y))
    )


def max_rel_diff(x: Any, y: Any) -> float:
    """max |x - y| / max |y| over all leaves (a scale-aware relative difference)."""
    xs, ys = jax.tree.leaves(x), jax.tree.leaves(y)
    num = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(xs, ys))
    den = max(float(np.max(np.abs(np.asarray(b)))) for b in ys)
    return num / max(den, 1e-300)


def accepted_grid(sol: ja.Solution) -> np.ndarray:
    steps = np.asarray(sol.steps)
    return steps[np.isfinite(steps)]


def replay(
    rhs, tableau, y0, args, grid: np.ndarray, saveat: np.ndarray | None = None, integrand=None
):
    """Plain RK integration of ``rhs`` on ``grid`` (t_0..t_T); returns (ys at saves, integral).

    ``saveat=None`` returns the final state with a leading axis of length 1.
    """
    a, b, c = (jnp.asarray(x) for x in (tableau.a, tableau.b, tableau.c))
    s = tableau.num_stages
    t_n = jnp.asarray(grid[:-1])
    h_n = jnp.asarray(grid[1:] - grid[:-1])

    def add(y, h, coeffs, ks):
        out = y
        for coeff, k in zip(coeffs, ks):
            out = jax.tree.map(lambda o, kk: o + h * coeff * kk, out, k)
        return out

    def step(carry, th):
        y, q = carry
        t, h = th
        ks, qs = [], []
        for m in range(s):
            Y = add(y, h, [a[m, j] for j in range(m)], ks)
            ks.append(rhs(t + c[m] * h, Y, args))
            if integrand is not None:
                qs.append(integrand(t + c[m] * h, Y, args))
        y_new = add(y, h, list(b), ks)
        if integrand is not None:
            q = add(q, h, list(b), qs)
        return (y_new, q), y_new

    q0 = None
    if integrand is not None:
        q0 = jax.tree.map(jnp.zeros_like, integrand(grid[0], y0, args))
    (y_final, q), states = jax.lax.scan(step, (y0, q0), (t_n, h_n))
    if saveat is None:
        ys = jax.tree.map(lambda x: x[None], y_final)
    else:
        all_states = jax.tree.map(lambda y, s: jnp.concatenate([y[None], s]), y0, states)
        idx = np.array([int(np.flatnonzero(grid == t)[-1]) for t in np.asarray(saveat)])
        ys = jax.tree.map(lambda s: s[idx], all_states)
    return ys, q
