"""Jacobians of many saves: the saves' cotangents stay per save under `jax.jacrev`.

Under `jax.jacrev` the reverse pass runs once per cotangent seed, and there are
``n_save * N`` seeds.  Summed into the dense-output rows for every seed, the saves'
cotangents took ``seeds x rows x L x N`` numbers, quadratic in the number of saves; the
sweep now sums a row's saves when it reaches the row (`jaxadjoint._save_cotangents`).
Checked here: the Jacobians against `jax.jacrev` of the plain replay (every checkpoint
strategy; saves that share a step, repeated ones, at ``t0`` and ``t1``, steps without
saves; an interpolant with extra stages; saves together with the dense solution, whose
cotangents come per row), lanes of a batch against single solves, and that the compiled
Jacobian's memory is that of the seeds, not 16 times it.
"""

from __future__ import annotations

import equinox as eqx
import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_dense_output import T1, THETA, Y0, lotka_volterra

import jaxadjoint as ja

# Many saves in a few steps, repeated ones, t0 and t1, and none after t = 3.3 but t1:
# steps that hold several saves, one, or none.
TS = jnp.concatenate([jnp.linspace(0.0, 1.0, 13), jnp.array([1.0, 2.2, 3.3, 3.3, T1])])
EVALUATE = jnp.array([0.4, 2.9, 5.1])


@eqx.filter_jit
def save_jacobian(y0, theta, ts, solver, checkpoint):
    """`jax.jacrev` of the saves in ``(y0, theta, ts)``, and the solve's step grid."""

    def saves(y0, theta, ts):
        sol = ja.solve(lotka_volterra, y0, 0.0, T1, theta, saveat=ts, solver=solver,
                       rtol=1e-7, atol=1e-7, max_steps=256,
                       sensitivity=ja.DiscreteAdjoint(checkpoint))
        return sol.ys, sol.steps

    return jax.jacrev(saves, argnums=(0, 1, 2), has_aux=True)(y0, theta, ts)


@eqx.filter_jit
def replay_jacobian(y0, theta, ts, grid, solver):
    return jax.jacrev(
        lambda y0, theta, ts: ja.replay_on_grid(lotka_volterra, solver, y0, theta, grid, ts)[0],
        argnums=(0, 1, 2))(y0, theta, ts)


def _grid(steps) -> jnp.ndarray:
    """The accepted grid from ``sol.steps`` (padded with ``inf``)."""
    steps = np.asarray(steps)
    return jnp.asarray(steps[np.isfinite(steps)])


# Tsit5: the end stage's cotangent is carried to the next step; Vern6: extra stages.  Vern6's
# Jacobian in the save times differs from the replay's by 3e-12 (relative to its largest
# entry), as it did when the saves were summed into rows (bitwise the same Jacobian): its
# interpolant's weights are large and cancel, so its rounding is larger.
@pytest.mark.parametrize(("solver", "checkpoint", "tolerance"), [
    (ja.Tsit5(), ja.StoreStates(), 1e-12),
    (ja.Tsit5(), ja.StoreStages(), 1e-12),
    (ja.Tsit5(), ja.Recursive(3), 1e-12),
    (ja.Vern6(), ja.StoreStates(), 1e-11),
], ids=["Tsit5-StoreStates", "Tsit5-StoreStages", "Tsit5-Recursive3", "Vern6-StoreStates"])
def test_jacobian_of_many_saves_is_the_replays(solver, checkpoint, tolerance):
    jac, steps = save_jacobian(Y0, THETA, TS, solver, checkpoint)
    reference = replay_jacobian(Y0, THETA, TS, _grid(steps), solver)
    assert helpers.max_rel_diff(jac, reference) < tolerance


@eqx.filter_jit
def dense_jacobian(y0, theta):
    """`jax.jacrev` of the saves and of ``sol.evaluate`` (cotangents per save and per row)."""

    def outputs(y0, theta):
        sol = ja.solve(lotka_volterra, y0, 0.0, T1, theta, saveat=ja.SaveAt(ts=TS, dense=True),
                       solver=ja.Tsit5(), rtol=1e-7, atol=1e-7, max_steps=256)
        return jnp.concatenate([sol.ys, sol.evaluate(EVALUATE)]), sol.steps

    return jax.jacrev(outputs, argnums=(0, 1), has_aux=True)(y0, theta)


def test_jacobian_of_saves_and_dense_output_is_the_replays():
    jac, steps = dense_jacobian(Y0, THETA)
    grid = _grid(steps)

    def replayed(y0, theta):
        ys = ja.replay_on_grid(lotka_volterra, ja.Tsit5(), y0, theta, grid, TS)[0]
        ev = ja.replay_on_grid(lotka_volterra, ja.Tsit5(), y0, theta, grid, EVALUATE)[0]
        return jnp.concatenate([ys, ev])

    reference = jax.jit(jax.jacrev(replayed, argnums=(0, 1)))(Y0, THETA)
    assert helpers.max_rel_diff(jac, reference) < 1e-12


def test_lanes_of_jacobians_are_single_jacobians():
    """`jax.vmap` over solves of `jax.jacrev` of the saves: lanes with their own steps (the
    shared loop sums each lane's saves into rows) and seeds inside each lane."""
    y0s = jnp.array([[1.0, 1.0], [0.6, 1.4]])

    @jax.jit
    def batched(y0s):
        return jax.vmap(lambda y0: save_jacobian(y0, THETA, TS, ja.Tsit5(), ja.StoreStates())[0])(
            y0s)

    lanes = batched(y0s)
    for i in range(2):
        single = save_jacobian(y0s[i], THETA, TS, ja.Tsit5(), ja.StoreStates())[0]
        assert helpers.max_rel_diff(jax.tree.map(lambda x: x[i], lanes), single) < 1e-12


def test_jacobian_memory_is_that_of_its_seeds():
    """The compiled Jacobian of 200 saves needs about the seeds' own memory (``n_save N``
    seeds of ``n_save N`` numbers): 2x here, where rows for every seed took 16x."""
    ts = jnp.linspace(0.0, T1, 200)

    def saves(theta):
        return ja.solve(lotka_volterra, Y0, 0.0, T1, theta, saveat=ts, solver=ja.Tsit5(),
                        rtol=1e-7, atol=1e-7, max_steps=256).ys

    temp = jax.jit(jax.jacrev(saves)).lower(THETA).compile().memory_analysis().temp_size_in_bytes
    seeds = (ts.shape[0] * Y0.shape[0]) ** 2 * 8
    assert temp < 4 * seeds, (temp, seeds)
