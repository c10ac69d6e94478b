"""Shared test helpers: the independent replay reference and tree comparisons.

`replay` integrates with a plain Runge–Kutta step written here from the tableau alone
(no code of jaxadjoint's step or reverse pass), on a given step grid, with `lax.scan`;
`jax.grad` of it is the reference every gradient path is tested against.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex

import jaxadjoint as ja

# For tests of what XLA on CPU compiles or allocates (kernels, host memory, buffer sizes):
# on a GPU backend those are the device's and the checks do not apply.
ON_CPU = jax.default_backend() == "cpu"
requires_cpu = pytest.mark.skipif(not ON_CPU,
                                  reason="checks what XLA on CPU compiles or allocates")

ADAPTIVE_SOLVERS = [
    ja.BogackiShampine(), ja.Fehlberg45(), ja.CashKarp(), ja.Dopri5(), ja.Tsit5(), ja.Vern6(),
    ja.Vern7(), ja.Vern8(),
]
FIXED_SOLVERS = [ja.Euler(), ja.Heun(), ja.RK4()]
ALL_SOLVERS = FIXED_SOLVERS + ADAPTIVE_SOLVERS


def fast_equilibrium(t, y, p):
    """A + B <-> C -> P with log rates ``p = log(kf, kr, kc)``: a fast equilibrium for
    ``kf >> 1`` (stiff steps whose ``I - gamma h J`` is ill-conditioned)."""
    del t
    kf, kr, kc = jnp.exp(p)
    a, b, c, _ = y
    r = kf * a * b - kr * c
    return jnp.stack([-r, -r, r - kc * c, kc * c])


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


# ------------------------------------------------------------------------------------------
# Order of a continuous extension (the stiff families' dense output).

EXTENSION_THETAS = (0.3, 0.75, 1.0)
EXTENSION_STEPS = 0.2 / 2.0 ** np.arange(4)


def one_step_extension(solver: Any, with_plain_end: bool = False) -> list[dict[str, Any]]:
    """One step of each size in `EXTENSION_STEPS` on a smooth non-autonomous pendulum,
    saved at ``t0 + theta h`` for `EXTENSION_THETAS`, against SciPy's DOP853 at rtol 1e-13.

    Per step size: ``h``, ``ys`` (the saves), ``exact`` (the reference at the saves),
    ``steps`` (accepted steps: must be 1) and, with ``with_plain_end``, ``end``: ``y_1`` of
    the same step solved without saves.  One compiled program serves every ``h``.
    """
    import jax.numpy as jnp
    from scipy.integrate import solve_ivp

    def rhs(t, y, args):
        return jnp.stack([y[1], -args * jnp.sin(y[0]) + jnp.cos(t)])

    y0, t0 = jnp.array([0.3, -0.2]), 0.1
    thetas = jnp.asarray(EXTENSION_THETAS)

    @jax.jit
    def one_step(h):
        sol = ja.solve(rhs, y0, t0, t0 + h, jnp.asarray(1.0), solver=solver,
                       controller=ja.ConstantStep(h), saveat=t0 + thetas * h)
        out = {"ys": sol.ys, "steps": sol.stats["num_accepted_steps"]}
        if with_plain_end:
            out["end"] = ja.solve(rhs, y0, t0, t0 + h, jnp.asarray(1.0), solver=solver,
                                  controller=ja.ConstantStep(h)).ys[-1]
        return out

    def exact(t):
        def f(t, y):
            return [y[1], -np.sin(y[0]) + np.cos(t)]
        return solve_ivp(f, (t0, t), np.asarray(y0), method="DOP853", rtol=1e-13,
                         atol=1e-15).y[:, -1]

    results = []
    for h in EXTENSION_STEPS:
        out = {k: np.asarray(v) for k, v in one_step(h).items()}
        out["h"] = h
        out["exact"] = np.stack([exact(t0 + theta * h) for theta in EXTENSION_THETAS])
        results.append(out)
    return results


def extension_orders(results: list[dict[str, Any]]) -> np.ndarray:
    """Observed orders ``d log(error) / d log(h)`` at the interior thetas (0.3, 0.75),
    one row per halving of ``h``: ``order + 1`` for an extension of order ``order``."""
    errors = np.array([[np.abs(r["ys"][i] - r["exact"][i]).max() for i in range(2)]
                       for r in results])
    hs = np.array([r["h"] for r in results])
    return np.diff(np.log(errors), axis=0) / np.diff(np.log(hs))[:, None]


def vmap_grad_with_stored_stages_is_single_grads(rhs, y0, t1, solver, rtol, atol) -> float:
    """``vmap(grad)`` over three scalar parameters with `StoreStages` (each lane's record
    holds its stages) against the gradients one by one with `StoreStates`: their
    `max_rel_diff`.  The loss is ``y_0(t1) + 2 y_1(t1)``."""

    def loss(mu, checkpoint):
        sol = ja.solve(rhs, y0, 0.0, t1, mu, solver=solver, rtol=rtol, atol=atol,
                       sensitivity=ja.DiscreteAdjoint(checkpoint))
        return sol.ys[-1, 0] + 2 * sol.ys[-1, 1]

    mus = jnp.array([900.0, 1000.0, 1100.0])
    batched = jax.jit(jax.vmap(jax.grad(lambda mu: loss(mu, ja.StoreStages()))))(mus)
    single = jax.jit(jax.grad(lambda mu: loss(mu, ja.StoreStates())))
    return max_rel_diff(batched, np.array([float(single(m)) for m in mus]))
