"""The reverse pass against the replay reference in the corners of its bookkeeping.

Repeated save times (saves at t0 and at t1, twice), an integrand whose integral the loss
may or may not use (an unused output has no cotangent), both time directions, and both
reverse paths (one step per iteration for few parameters, blocks of four steps with one
batched parameter VJP when the parameters are many), across the checkpoint strategies.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import accepted_grid, max_rel_diff, replay

import jaxadjoint as ja
from jaxadjoint._reverse import block_size


def _few_params(t, y, k):
    return -k * y + jnp.sin(t) * y[::-1]


def _many_params(t, y, A):
    return jnp.tanh(A @ y) - 0.5 * y


def _wide_params(t, y, W):
    return jnp.tanh(W @ jnp.tanh(W.T @ y)) - 0.5 * y


Y0 = jnp.linspace(0.5, 1.5, 4)
CASES = {
    "scalar parameter": (_few_params, jnp.array(0.7)),
    "matrix parameter": (_many_params, 0.4 * jnp.eye(4)[::-1] + 0.1),
    # Enough parameters for the blocked reverse path (see `block_size`).
    "large matrix parameter": (_wide_params, 0.01 * jnp.ones((4, 300))),
}


def _integrand(t, y, args):
    del args
    return jnp.sum(y**2) * (1 + 0.1 * t)


# (case, interval, whether the loss uses the integral, checkpoint): both parameter kinds,
# both time directions and an unused integral, without compiling every combination (agreement
# between checkpoint strategies is tested in test_checkpoints.py).
COMBINATIONS = [
    ("scalar parameter", (0.0, 2.0), True, ja.StoreStates()),
    ("scalar parameter", (2.0, -1.0), False, ja.Recursive(3)),
    ("matrix parameter", (0.0, 2.0), False, ja.StoreStages()),
    ("matrix parameter", (2.0, -1.0), True, ja.StoreStates()),
    ("matrix parameter", (0.0, 2.0), True, ja.Recursive(3)),
    ("large matrix parameter", (0.0, 2.0), True, ja.StoreStates()),
    ("large matrix parameter", (2.0, -1.0), False, ja.Recursive(3)),
]


@pytest.mark.parametrize("case, block", [("scalar parameter", 1), ("large matrix parameter", 4)])
def test_block_size(case, block):
    assert block_size(CASES[case][1], Y0.shape[0]) == block


@pytest.mark.parametrize("case, interval, use_integral, checkpoint", COMBINATIONS)
def test_reverse_paths_match_replay(case, interval, use_integral, checkpoint):
    rhs, args = CASES[case]
    t0, t1 = interval
    ts = jnp.array([t0, t0, 0.5 * (t0 + t1), t1, t1])
    kw = dict(rtol=1e-8, atol=1e-8, saveat=ts, integrand=_integrand,
              sensitivity=ja.DiscreteAdjoint(checkpoint))

    def loss(y0, p):
        sol = ja.solve(rhs, y0, t0, t1, p, **kw)
        out = jnp.sum(jnp.cos(sol.ys))
        return out + sol.integral if use_integral else out

    grad = jax.grad(loss, (0, 1))(Y0, args)
    sol = ja.solve(rhs, Y0, t0, t1, args, rtol=1e-8, atol=1e-8, saveat=ts, integrand=_integrand)
    grid = accepted_grid(sol)

    def reference(y0, p):
        ys, q = replay(rhs, ja.Dopri5.tableau, y0, p, grid, np.asarray(ts), _integrand)
        out = jnp.sum(jnp.cos(ys))
        return out + q if use_integral else out

    expected = jax.grad(reference, (0, 1))(Y0, args)
    assert max_rel_diff(grad, expected) < 1e-12
