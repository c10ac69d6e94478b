"""Shared test helpers: the independent replay reference and tree comparisons.

`replay` integrates with a plain Runge–Kutta step written here from the tableau alone
(no code of jaxadjoint's step or reverse pass), on a given step grid, with `lax.scan`;
`jax.grad` of it is the reference every gradient path is tested against.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex

import jaxadjoint as ja

ADAPTIVE_SOLVERS = [
    ja.BogackiShampine(), ja.Fehlberg45(), ja.CashKarp(), ja.Dopri5(), ja.Tsit5(), ja.Vern6(),
    ja.Vern7(), ja.Vern8(),
]
FIXED_SOLVERS = [ja.Euler(), ja.Heun(), ja.RK4()]
ALL_SOLVERS = FIXED_SOLVERS + ADAPTIVE_SOLVERS


def tree_allclose(x: Any, y: Any, *, rtol: float = 1e-12, atol: float = 0.0) -> bool:
    same = jax.tree.structure(x) == jax.tree.structure(y)
    pairs = zip(jax.tree.leaves(x), jax.tree.leaves(y))
    return same and all(np.allclose(a, b, rtol=rtol, atol=atol) for a, b in pairs)


def max_rel_diff(x: Any, y: Any) -> float:
    """max |x - y| / max |y| over all leaves (a scale-aware relative difference)."""
    xs, ys = jax.tree.leaves(x), jax.tree.leaves(y)
    num = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(xs, ys))
    den = max(float(np.max(np.abs(np.asarray(b)))) for b in ys)
    return num / max(den, 1e-300)


def accepted_grid(sol: ja.Solution) -> np.ndarray:
    steps = np.asarray(sol.steps)
    return steps[np.isfinite(steps)]


def replay(rhs, tableau, y0, args, grid, saveat=None, integrand=None):
    """Plain RK integration on ``grid``: `jaxadjoint.replay_on_grid`, whose code shares
    nothing with `solve`'s step or reverse pass (it is the textbook formulas in a scan)."""
    return ja.replay_on_grid(rhs, tableau, y0, args, grid, saveat, integrand)


def subjaxprs(eqn) -> Iterator[jex.Jaxpr]:
    """The jaxprs nested in an equation's parameters (loop bodies, branches, calls)."""
    for value in eqn.params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, jex.ClosedJaxpr):
                yield v.jaxpr
            elif isinstance(v, jex.Jaxpr):
                yield v


def equations(jaxpr: jex.Jaxpr) -> Iterator:
    """Every equation of ``jaxpr``, recursively."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in subjaxprs(eqn):
            yield from equations(sub)
