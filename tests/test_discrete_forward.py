"""`DiscreteForward`'s replay runs in chunks of `REPLAY_CHUNK` slots of ``max_steps``.

A chunk past the last accepted step is skipped whole.  Checked where the chunks do not
divide ``max_steps`` and the solve uses every slot: the Jacobian equals `jax.jacfwd` of
the plain replay on the recorded grid (`replay_on_grid`) to round-off.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxadjoint as ja
from jaxadjoint._discrete_forward import REPLAY_CHUNK

MAX_STEPS = 37  # three chunks of 16 slots, the last one past max_steps
TS = jnp.asarray([0.35, 1.0, 2.45, 3.7])


def rhs(t, y, args):
    a, b = args
    return jnp.stack([a * y[0] - b * y[0] * y[1], -y[1] + 0.5 * y[0] * y[1]])


@pytest.mark.parametrize("steps", [MAX_STEPS, 20])
def test_chunked_replay_is_the_replay(steps):
    """``steps`` constant steps: all ``MAX_STEPS`` slots used, or some chunks skipped."""
    assert MAX_STEPS % REPLAY_CHUNK != 0 and steps <= MAX_STEPS
    dt = 3.7 / steps
    y0, args = jnp.asarray([1.0, 0.8]), (jnp.asarray(0.9), jnp.asarray(0.6))

    def saves(args):
        return ja.solve(rhs, y0, 0.0, 3.7, args, solver=ja.RK4(), controller=ja.ConstantStep(dt),
                        saveat=TS, max_steps=MAX_STEPS, sensitivity=ja.DiscreteForward()).ys

    sol = ja.solve(rhs, y0, 0.0, 3.7, args, solver=ja.RK4(), controller=ja.ConstantStep(dt),
                   max_steps=MAX_STEPS)
    assert int(sol.stats["num_accepted_steps"]) == steps
    grid = sol.steps

    def reference(args):
        return ja.replay_on_grid(rhs, ja.RK4(), y0, args, grid, saveat=TS)[0]

    ours = jax.jit(jax.jacfwd(saves))(args)
    expected = jax.jacfwd(reference)(args)
    for a, b in zip(ours, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


LANE_Y0S = jnp.asarray([[1.0, 0.8], [2.5, 0.3], [0.4, 1.9]])


def _lane_saves(args, y0):
    return ja.solve(rhs, y0, 0.0, 3.7, args, solver=ja.Tsit5(), rtol=1e-8, atol=1e-8,
                    saveat=TS, max_steps=200, sensitivity=ja.DiscreteForward()).ys


def test_lanes_under_vmap_skip_chunks_no_lane_needs():
    """`jax.vmap` over solves with different step counts: chunks that no lane needs are
    skipped (`_lanes.any_in_batch`); each lane's `jacfwd` and `grad` (the replay
    transposed) are its unbatched ones."""
    args = (jnp.asarray(0.9), jnp.asarray(0.6))
    steps = [int(ja.solve(rhs, y0, 0.0, 3.7, args, solver=ja.Tsit5(), rtol=1e-8, atol=1e-8,
                          max_steps=200).stats["num_accepted_steps"]) for y0 in LANE_Y0S]
    assert len(set(steps)) == 3 and max(steps) < 200 - REPLAY_CHUNK

    jac = jax.jit(jax.jacfwd(_lane_saves))
    lanes = jax.jit(jax.vmap(jax.jacfwd(_lane_saves), in_axes=(None, 0)))(args, LANE_Y0S)

    def loss(args, y0):
        return jnp.sum(_lane_saves(args, y0) ** 2)

    grad = jax.jit(jax.grad(loss))
    lane_grads = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0)))(args, LANE_Y0S)
    for i, y0 in enumerate(LANE_Y0S):
        for a, b in zip(lanes, jac(args, y0)):
            np.testing.assert_allclose(a[i], b, rtol=1e-12, atol=1e-14)
        for a, b in zip(lane_grads, grad(args, y0)):
            np.testing.assert_allclose(a[i], b, rtol=1e-12, atol=1e-14)


_GRAD_OF_VMAPPED_SOLVES = """
import sys
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import jaxadjoint as ja
assert "diffrax" not in sys.modules and "lineax" not in sys.modules

def loss(k, sensitivity):
    solve = lambda y0: ja.solve(lambda t, y, k: -k * y, y0, 0.0, 1.0, k,
                                sensitivity=sensitivity).ys
    return jnp.sum(jax.vmap(solve)(jnp.array([[1.0, 2.0], [0.5, 0.1]])))

k = jnp.array([0.5, 1.5])
forward = jax.grad(loss)(k, ja.DiscreteForward())
adjoint = jax.grad(loss)(k, ja.DiscreteAdjoint())
print(float(jnp.max(jnp.abs(forward - adjoint) / jnp.abs(adjoint))))
"""


def test_grad_of_vmapped_solves():
    """`jax.grad` of a loss that `jax.vmap`s `DiscreteForward` solves (the batched
    training pattern): the replay's per-solve `cond` becomes a batched one, whose operands
    JAX wraps in ``stop_gradient``, which had no transpose (`_jax_workarounds`).  In a
    fresh process without diffrax, whose lineax registers the same rule.

    Its buffers are NaN-filled (``JAXADJOINT_UNINITIALISED=nan``), as unwritten memory on
    GPU can be: the batched ``cond`` runs its untaken branch too, and that branch read the
    grid past a lane's last step, so the gradient came out NaN on GPU (``0 * NaN`` in the
    transposed replay) while CPU's zero fill hid it."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, JAXADJOINT_UNINITIALISED="nan")
    out = subprocess.run([sys.executable, "-c", _GRAD_OF_VMAPPED_SOLVES],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert float(out.stdout.split()[-1]) < 1e-12, out.stdout
