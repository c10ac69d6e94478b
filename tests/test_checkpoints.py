"""Checkpoint strategies: same gradients, bounded memory, bounded recomputation.

`StoreStates`, `StoreStages` and `Recursive` run the same reverse step on the same grid;
`Recursive` replays forward steps from checkpoints with the forward loop's arithmetic.
"""

import equinox as eqx
import helpers
import jax
import jax.numpy as jnp
import pytest
from helpers import accepted_grid, max_rel_diff, replay

import jaxadjoint as ja
from jaxadjoint.problems import glv_problem

STRATEGIES = {
    "states": ja.StoreStates(),
    "stages": ja.StoreStages(),
    "rec2": ja.Recursive(2),
    "rec3": ja.Recursive(3),
}
# XLA on CPU contracts ``a * b + c`` into fused multiply-adds depending on how it fuses the
# surrounding loop, so the same step compiled in the forward loop, in a replay loop or in the
# reverse step can differ in the last bit (StoreStages vs StoreStates too).  Gradients then
# agree to a few ulps, not bitwise; where the compiled arithmetic coincides they are equal.
ULPS = 1e-14

GLV = glv_problem(5, seed=1, t1=6.0)
SAVEAT = jnp.linspace(0.5, 6.0, 5)


def _integrand(t, y, args):
    del t, args
    return jnp.sum(y**2)[None]


@eqx.filter_jit
def _glv_loss_grad(y0, args, checkpoint):
    """BogackiShampine on GLV with saves and an integrand; gradient in y0 and args."""

    def loss(y0, args):
        sol = ja.solve(
            GLV.rhs, y0, 0.0, 6.0, args, solver=ja.BogackiShampine(), saveat=SAVEAT,
            integrand=_integrand, rtol=1e-7, atol=1e-7, max_steps=256,
            sensitivity=ja.DiscreteAdjoint(checkpoint),
        )
        return jnp.sum(jnp.sin(sol.ys)) + jnp.sum(sol.integral), sol

    (_, sol), grad = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(y0, args)
    return grad, sol


def _growth_rhs(t, y, a):
    return a * y + jnp.cos(t) * y[::-1]


@eqx.filter_jit
def _backward_grad(y0, a, checkpoint):
    """Heun, constant steps, backward in time (t1 < t0) with saves."""

    def loss(y0, a):
        sol = ja.solve(
            _growth_rhs, y0, 3.0, 0.0, a, solver=ja.Heun(), dt0=-0.05, max_steps=64,
            saveat=jnp.array([2.0, 1.0, 0.0]), sensitivity=ja.DiscreteAdjoint(checkpoint),
        )
        return jnp.sum(sol.ys**2)

    return jax.grad(loss, argnums=(0, 1))(y0, a)


@eqx.filter_jit
def _glv_jacrev(args, checkpoint):
    """`jacrev` (vmap over cotangent seeds) of the saved states with respect to args."""

    def states(args):
        sol = ja.solve(
            GLV.rhs, GLV.y0, 0.0, 6.0, args, solver=ja.RK4(), dt0=0.1, saveat=SAVEAT,
            max_steps=64, sensitivity=ja.DiscreteAdjoint(checkpoint),
        )
        return sol.ys

    return jax.jacrev(states)(args)


def _assert_same(results):
    ref = results["states"]
    for name, res in results.items():
        assert max_rel_diff(res, ref) < ULPS, name


def test_saveat_integrand_same_gradients_and_replay():
    names = ("states", "rec3")
    results = {k: _glv_loss_grad(GLV.y0, GLV.args, STRATEGIES[k])[0] for k in names}
    _assert_same(results)
    _, sol = _glv_loss_grad(GLV.y0, GLV.args, STRATEGIES["rec3"])
    grid = accepted_grid(sol)
    assert len(grid) - 1 > 20  # far more steps than 3 checkpoints

    def ref_loss(y0, args):
        ys, q = replay(GLV.rhs, ja.BogackiShampine.tableau, y0, args, grid, SAVEAT, _integrand)
        return jnp.sum(jnp.sin(ys)) + jnp.sum(q)

    ref = jax.grad(ref_loss, argnums=(0, 1))(GLV.y0, GLV.args)
    assert max_rel_diff(results["rec3"], ref) < 1e-12


def test_backward_time_same_gradients():
    y0, a = jnp.array([1.0, -0.5]), jnp.asarray(0.4)
    results = {k: _backward_grad(y0, a, c) for k, c in STRATEGIES.items()}
    _assert_same(results)


def test_jacrev_same_jacobians():
    results = {k: _glv_jacrev(GLV.args, STRATEGIES[k]) for k in ("states", "rec3")}
    _assert_same(results)


# --- Long solves: T far beyond num_checkpoints, and the replay count --------------------

_REPLAYED = [0]


def _decay_rhs(t, y, k):
    del t
    return -k * y + 0.1 * jnp.sin(y[::-1])


def _euler_grad(y0, k, checkpoint):
    def loss(y0, k):
        sol = ja.solve(
            _decay_rhs, y0, 0.0, 10.0, k, solver=ja.Euler(), dt0=0.01, max_steps=1000,
            sensitivity=ja.DiscreteAdjoint(checkpoint),
        )
        return jnp.sum(sol.ys**2)

    return jax.grad(loss, argnums=(0, 1))(y0, k)


def _replay_bound(T, C):
    """``t = min{r : binom(C - C // 2 + r, r) >= d}``, ``d`` the forward's final interval."""
    from math import comb

    cf = C // 2
    d = 1
    while (T - 1) // d + 1 > cf:
        d *= 2
    t = 0
    while comb(C - cf + t, t) < d:
        t += 1
    return t


@pytest.mark.parametrize("num_checkpoints", [4, 2000])
def test_long_solve_recomputation_bound(num_checkpoints, monkeypatch):
    """1000 Euler steps: same gradients; replayed steps counted and within ``t T``."""
    from jaxadjoint import _recursive

    def counting_step(solver, *args):
        jax.debug.callback(lambda: _REPLAYED.__setitem__(0, _REPLAYED[0] + 1))
        return solver.step(*args)

    monkeypatch.setattr(_recursive, "replay_step", counting_step)
    y0, k = jnp.array([1.0, 0.5, -0.3]), jnp.asarray(0.3)
    g_ref = jax.jit(_euler_grad, static_argnums=2)(y0, k, ja.StoreStates())
    _REPLAYED[0] = 0
    g = jax.jit(_euler_grad, static_argnums=2)(y0, k, ja.Recursive(num_checkpoints))
    assert max_rel_diff(g, g_ref) < ULPS
    T, slots = 1000, min(num_checkpoints, 1001)
    t = _replay_bound(T, slots)
    assert 0 < _REPLAYED[0] <= t * T
    if num_checkpoints == 2000:
        assert t == 1  # at most one extra forward pass
    else:
        assert t >= 5  # 4 checkpoints for 1000 steps: more replays, still exact


@helpers.requires_cpu
def test_memory_grows_only_by_the_step_grid():
    """Compiled temporaries of `Recursive` grow with ``max_steps`` by the step grid alone:
    one float64 per step (``max_steps + 1`` times), nothing of the state's size."""
    y0 = jnp.ones(512)

    def temp_bytes(checkpoint, max_steps):
        def loss(y0):
            sol = ja.solve(
                lambda t, y, a: -jnp.sin(y), y0, 0.0, 1.0, None, solver=ja.Euler(), dt0=0.1,
                max_steps=max_steps, sensitivity=ja.DiscreteAdjoint(checkpoint),
            )
            return jnp.sum(sol.ys)

        mem = jax.jit(jax.grad(loss)).lower(y0).compile().memory_analysis()
        return mem.temp_size_in_bytes + mem.output_size_in_bytes

    rec = ja.Recursive(8)
    grow = temp_bytes(rec, 4096) - temp_bytes(rec, 64)
    assert abs(grow - 8 * (4096 - 64)) <= 1024  # 8 bytes a step, up to buffer alignment
    assert temp_bytes(ja.StoreStates(), 4096) >= 8 * 512 * 4096  # the states buffer


def test_store_shapes():
    y0, witness = jnp.zeros(7), jnp.zeros(())
    assert ja.Recursive(5).init(100, y0, 3, witness)[0].shape == (5, 7)
    assert ja.Recursive(500).init(10, y0, 3, witness)[0].shape == (11, 7)


@pytest.mark.parametrize("bad", [1, 0, -3, 2.5, True, "4", None])
def test_invalid_num_checkpoints(bad):
    with pytest.raises(ValueError, match="num_checkpoints"):
        ja.Recursive(bad)
