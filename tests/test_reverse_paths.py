"""Both reverse-pass paths against the replay reference.

`_reverse.block_size` picks one step per iteration (joint state/parameter VJPs) when the
parameters are few, and blocks of four steps (one batched parameter VJP per block) when
they outnumber the states.  Each path is checked with repeated save times (saves at t0
and t1 twice), an integrand whose integral the loss may or may not use, and both time
directions, for every checkpoint strategy.
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


Y0 = jnp.linspace(0.5, 1.5, 4)
CASES = {
    "one step per iteration": (_few_params, jnp.array(0.7)),
    "blocks of four": (_many_params, 0.4 * jnp.eye(4)[::-1] + 0.1),
}


def _integrand(t, y, args):
    del args
    return jnp.sum(y**2) * (1 + 0.1 * t)


@pytest.mark.parametrize("case", list(CASES))
def test_block_size_choice(case):
    rhs, args = CASES[case]
    expected = 1 if case == "one step per iteration" else 4
    assert block_size(args, Y0.shape[0]) == expected


# (case, interval, whether the loss uses the integral, checkpoint): every path, both time
# directions and an unused integral, without compiling every combination (agreement
# between checkpoint strategies is tested in test_checkpoints.py).
COMBINATIONS = [
    ("one step per iteration", (0.0, 2.0), True, ja.StoreStates()),
    ("one step per iteration", (2.0, -1.0), False, ja.Recursive(3)),
    ("blocks of four", (0.0, 2.0), False, ja.StoreStages()),
    ("blocks of four", (2.0, -1.0), True, ja.StoreStates()),
    ("blocks of four", (0.0, 2.0), True, ja.Recursive(3)),
]


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
