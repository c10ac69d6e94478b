"""The reverse pass of a batch of solves under `jax.vmap` (many initial states, one model).

Under `vmap` over solves whose step counts differ, the lanes share one reverse loop
(`jaxadjoint._batched_reverse`, `jaxadjoint._batched_recursive`).  Checked here:

1. each lane's gradient is the unbatched gradient of that solve, for `vmap(grad)` (one
   gradient per lane) and for `grad(vmap)` (JAX sums the lanes of the shared parameters),
   with lanes that take different numbers of steps, on all three reverse paths (blocks of
   steps, one step, joint stage VJPs), all three checkpoint strategies, per-lane end times
   and nested `vmap`;
2. what the batched reverse loop compiles to: the parameters of the right-hand side are
   shared by the lanes, not copied per lane, and the per-lane parameter cotangent is not
   selected twice per iteration (both were the cost of `vmap` of the one-solve sweep).

The forward solves of a batch round like the unbatched ones only up to XLA's vector
rounding (the controller's error norm is a reduction), so gradients are compared to a
relative 1e-12, not bit for bit; the lanes' step counts are checked to be equal to the
unbatched ones first.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import equations
from jax.extend import core as jex

import jaxadjoint as ja
from jaxadjoint import _reverse

LANES = 5
T1S = jnp.asarray([1.0, 3.0, 2.0, 0.5, 4.0])  # per-lane end times: different step counts


def elementwise(t, y, args):
    a, b, c, d = args
    return -a * y + b * jnp.tanh(c * y + d) + 0.1 * jnp.cos(t)


def _args(n: int, many: bool, seed: int = 0) -> tuple:
    """``many``: four parameter vectors of length ``n`` (>= 1024 parameters for ``n = 256``:
    blocks of steps in the unbatched sweep); else two vectors and two scalars."""
    rng = np.random.default_rng(seed)
    vectors = tuple(jnp.asarray(rng.uniform(0.5, 1.5, n)) for _ in range(4 if many else 2))
    return vectors if many else vectors + (jnp.asarray(1.0), jnp.asarray(0.2))


# (state size, many parameters): the three paths of the unbatched reverse sweep.
PATHS = {
    "blocks": (256, True),  # blocks of four steps, isolated stage VJPs (branches)
    "one-step": (3, True),  # a block of one step (12 parameters), no branches
    "joint": (40, False),  # joint stage VJPs in branches, no block rows
    "small-joint": (3, False),  # the same for a small state with 8 parameters
}
CHECKPOINTS = {
    "StoreStates": ja.StoreStates(), "StoreStages": ja.StoreStages(),
    "Recursive": ja.Recursive(3),
}


def _problem(path: str):
    n, many = PATHS[path]
    args = _args(n, many, seed=n)
    y0s = jnp.asarray(np.random.default_rng(n + 1).uniform(-2.0, 2.0, (LANES, n)))
    return args, y0s


def _solve(y0, args, t1, checkpoint):
    return ja.solve(elementwise, y0, 0.0, t1, args, rtol=1e-7, atol=1e-7,
                    sensitivity=ja.DiscreteAdjoint(checkpoint=checkpoint))


def _loss(y0, args, t1, checkpoint):
    """The loss, and the number of accepted steps (aux: the lanes' step counts come from
    the same compiled programs as their gradients)."""
    sol = _solve(y0, args, t1, checkpoint)
    return jnp.sum(jnp.sin(sol.ys[0])), sol.stats["num_accepted_steps"]


# Compiled once per module and shared by the tests (a fresh `jax.jit(jax.vmap(...))` in each
# test would compile the same program again): the gradient of one solve, `vmap(grad)` over
# lanes with per-lane end times, and the sum over lanes' gradient (`grad(vmap)`); each also
# returns the accepted step counts.
_grad = jax.grad(_loss, argnums=(0, 1), has_aux=True)
single_grad = jax.jit(_grad, static_argnums=3)
per_lane_grads = jax.jit(jax.vmap(_grad, in_axes=(0, None, 0, None)), static_argnums=3)


def _max_rel(x, y) -> float:
    xs, ys = jax.tree.leaves(x), jax.tree.leaves(y)
    num = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(xs, ys))
    return num / max(max(float(jnp.max(jnp.abs(b))) for b in ys), 1e-300)


def test_paths_are_the_intended_ones():
    for path, (n, many) in PATHS.items():
        args = _args(n, many)
        blocks, joint = _reverse.block_size(args, n), _reverse.joint_stage_vjps(args, n)
        assert (blocks, joint) == {"blocks": (4, False), "one-step": (1, False),
                                   "joint": (1, True), "small-joint": (1, True)}[path]


# Every reverse path and every strategy, each once (all nine pairs cost ~2 min more of
# compilation for little more coverage; `test_checkpoint_strategies_agree_under_vmap`
# runs every strategy on every path).
@pytest.mark.parametrize(
    "path, checkpoint",
    [("blocks", "StoreStates"), ("one-step", "Recursive"), ("joint", "StoreStages"),
     ("small-joint", "Recursive")],
)
def test_each_lane_is_its_unbatched_gradient(path, checkpoint):
    args, y0s = _problem(path)
    ck = CHECKPOINTS[checkpoint]
    single, single_steps = zip(*[single_grad(y0s[i], args, T1S[i], ck) for i in range(LANES)])
    single_steps = [int(n) for n in single_steps]
    assert len(set(single_steps)) >= 3  # lanes stop at different steps

    # vmap(grad): one gradient per lane, after the same steps as the unbatched solve.
    per_lane, steps = per_lane_grads(y0s, args, T1S, ck)
    assert list(np.asarray(steps)) == single_steps
    for i in range(LANES):
        assert _max_rel(jax.tree.map(lambda x, i=i: x[i], per_lane), single[i]) < 1e-12

    # grad(vmap): JAX sums the lanes' cotangents of the shared parameters.
    def summed_loss(y0s, args):
        losses, _ = jax.vmap(_loss, in_axes=(0, None, 0, None))(y0s, args, T1S, ck)
        return jnp.sum(losses)

    g_y0s, g_args = jax.jit(jax.grad(summed_loss, argnums=(0, 1)))(y0s, args)
    assert _max_rel(g_y0s, jnp.stack([g[0] for g in single])) < 1e-12
    total = jax.tree.map(lambda *gs: sum(gs), *[g[1] for g in single])
    assert _max_rel(g_args, total) < 1e-12


def test_a_batch_of_one_is_the_single_solve():
    """`vmap` of size 1 (also `jax.jacrev` of a scalar loss) runs the unbatched loops
    (`_lanes.run_single_lane`): the gradient is bitwise the single solve's."""
    args, y0s = _problem("blocks")
    ck = CHECKPOINTS["StoreStates"]
    one = per_lane_grads(y0s[:1], args, T1S[:1], ck)
    single = single_grad(y0s[0], args, T1S[0], ck)
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(single)):
        assert a.shape == (1,) + b.shape
        assert np.array_equal(np.asarray(a[0]), np.asarray(b))
    jac, _ = jax.jit(jax.jacrev(_loss, argnums=1, has_aux=True), static_argnums=3)(
        y0s[0], args, T1S[0], ck)
    for a, b in zip(jax.tree.leaves(jac), jax.tree.leaves(single[0][1])):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("path", list(PATHS))
def test_checkpoint_strategies_agree_under_vmap(path):
    """To rounding, not bit for bit: XLA fuses the lanes' loop differently around each
    strategy's reads (the unbatched sweeps usually agree bitwise, `test_bitwise.py`)."""
    args, y0s = _problem(path)
    grads = [per_lane_grads(y0s, args, T1S, ck)[0] for ck in CHECKPOINTS.values()]
    for other in grads[1:]:
        assert _max_rel(other, grads[0]) < 1e-14


@pytest.mark.parametrize("checkpoint", ["StoreStates", "Recursive"])
def test_saves_integrand_and_backward_time(checkpoint):
    """Save times (their cotangents enter the lanes' adjoints at different steps), an
    integrand (its cotangent ``mu``), and solves backwards in time."""
    args, y0s = _problem("one-step")
    ck = CHECKPOINTS[checkpoint]

    def loss(y0, args, t1):
        sol = ja.solve(elementwise, y0, t1, -0.5, args, rtol=1e-7, atol=1e-7,
                       saveat=jnp.linspace(t1, -0.5, 4)[1:], integrand=lambda t, y, a: y**2,
                       sensitivity=ja.DiscreteAdjoint(checkpoint=ck))
        return jnp.sum(jnp.sin(sol.ys)) + jnp.sum(sol.integral)

    grad = jax.grad(loss, argnums=(0, 1))
    per_lane = jax.jit(jax.vmap(grad, in_axes=(0, None, 0)))(y0s, args, T1S)
    for i in range(LANES):
        single = jax.jit(grad)(y0s[i], args, T1S[i])
        assert _max_rel(jax.tree.map(lambda x, i=i: x[i], per_lane), single) < 1e-12


def test_nested_vmap_and_jacrev_of_vmap():
    """Batches of batches, and `jacrev` (seeds) around a batch of solves."""
    args, y0s = _problem("one-step")
    ck = ja.StoreStates()
    grid_y0s = jnp.stack([y0s, 0.5 * y0s])  # (2, LANES, n)
    nested, _ = jax.jit(jax.vmap(jax.vmap(_grad, in_axes=(0, None, 0, None)),
                                 in_axes=(0, None, None, None)), static_argnums=3)(
        grid_y0s, args, T1S, ck
    )
    for k in range(2):
        for i in range(LANES):
            single, _ = single_grad(grid_y0s[k, i], args, T1S[i], ck)
            assert _max_rel(jax.tree.map(lambda x, k=k, i=i: x[k, i], nested), single) < 1e-12

    def finals(args):
        return jax.vmap(lambda y0, t1: _solve(y0, args, t1, ck).ys[0])(y0s, T1S)

    jac = jax.jit(jax.jacrev(finals))(args)
    # One compiled unbatched Jacobian serves every lane (eager `jacrev` traced each anew).
    single_jacobian = jax.jit(jax.jacrev(lambda a, y0, t1: _solve(y0, a, t1, ck).ys[0]))
    for i in range(LANES):
        single = single_jacobian(args, y0s[i], T1S[i])
        assert _max_rel(jax.tree.map(lambda x, i=i: x[i], jac), single) < 1e-12


# ------------------------------------------------------------------------------------------
# What the batched reverse loop compiles to (a neural ODE: parameters shared by the lanes).

WIDTH = 24  # the hidden width: (WIDTH, WIDTH) is the shape of the shared weight matrix




def per_lane_weight_costs(jaxpr: jex.Jaxpr, lanes: int) -> list[dict[str, int]]:
    """For each ``while`` loop that carries a per-lane copy of the (WIDTH, WIDTH) weight's
    cotangent: how often its body (branches and inner loops included) broadcasts the
    shared weight to the lanes, multiplies by such a per-lane copy, and selects a per-lane
    weight-shaped array."""
    weight, per_lane = (WIDTH, WIDTH), (lanes, WIDTH, WIDTH)
    found = []
    for eqn in equations(jaxpr):
        if eqn.primitive.name != "while":
            continue
        body = eqn.params["body_jaxpr"].jaxpr
        if per_lane not in [v.aval.shape for v in body.invars]:
            continue
        counts = {"broadcasts": 0, "products": 0, "selects": 0}
        for e in equations(body):
            out = e.outvars[0].aval.shape if e.outvars else ()
            if e.primitive.name == "broadcast_in_dim" and out == per_lane \
                    and e.invars[0].aval.shape == weight:
                counts["broadcasts"] += 1
            elif e.primitive.name == "dot_general" and any(
                    getattr(v.aval, "shape", None) == per_lane for v in e.invars):
                counts["products"] += 1
            elif e.primitive.name == "select_n" and out == per_lane:
                counts["selects"] += 1
        found.append(counts)
    return found


def _mlp_batch_jaxpr(checkpoint) -> jex.Jaxpr:
    mlp = eqx.nn.MLP(2, 2, WIDTH, depth=2, activation=jax.nn.softplus,
                     key=jax.random.PRNGKey(0))
    mlp = jax.tree.map(lambda x: x.astype(jnp.float64) if eqx.is_inexact_array(x) else x, mlp)
    params, static = eqx.partition(mlp, eqx.is_array)
    y0s = jnp.asarray(np.random.default_rng(1).uniform(-1.0, 1.0, (LANES, 2)))

    def loss(params, y0s):
        model = eqx.combine(params, static)

        def final(y0):
            return ja.solve(lambda t, y, args: model(y), y0, 0.0, 5.0, rtol=1e-6, atol=1e-6,
                            sensitivity=ja.DiscreteAdjoint(checkpoint=checkpoint)).ys[0]

        return jnp.sum(jax.vmap(final)(y0s) ** 2)

    return jax.make_jaxpr(jax.grad(loss))(params, y0s).jaxpr


@pytest.mark.parametrize("checkpoint", list(CHECKPOINTS))
def test_batched_reverse_shares_the_parameters(checkpoint):
    """No copy of the weights per lane, no product with one, and one select (lanes that
    are done stand still) of the per-lane weight cotangent per loop."""
    loops = per_lane_weight_costs(_mlp_batch_jaxpr(CHECKPOINTS[checkpoint]), LANES)
    assert loops, "no reverse loop found"
    for counts in loops:
        assert counts["broadcasts"] == 0 and counts["products"] == 0, counts
        assert counts["selects"] <= 1, counts


def test_the_check_sees_per_lane_copies():
    """`per_lane_weight_costs` flags what `vmap` makes of a loop with a lane-dependent trip
    count and a lane-dependent branch using shared weights (the old batched sweep)."""
    weight = jnp.ones((WIDTH, WIDTH))

    def sweep(count, v):
        def body(carry):
            n, acc = carry
            grad = jax.lax.cond(n % 2 == 0, lambda w: jnp.outer(w @ v, v), jnp.zeros_like,
                                weight)
            return n - 1, acc + grad

        return jax.lax.while_loop(lambda c: c[0] > 0, body, (count, jnp.zeros((WIDTH, WIDTH))))

    jaxpr = jax.make_jaxpr(jax.vmap(sweep))(jnp.arange(LANES), jnp.ones((LANES, WIDTH))).jaxpr
    (counts,) = per_lane_weight_costs(jaxpr, LANES)
    assert counts["broadcasts"] >= 1 and counts["products"] >= 1 and counts["selects"] >= 2


def test_many_parameters_keep_the_stage_vjps_inline():
    """A neural ODE of 32 states under `vmap`: each stage's VJP also gives the per-lane
    (lanes x parameters) cotangent, so it is not isolated in a branch
    (`_reverse.isolated_vjps`: the branch wrote that part out and the sum read it again,
    2.5-2.9x the gradient's time); with few parameters the same state size keeps its
    branches."""
    n, width = 32, 16
    mlp = eqx.nn.MLP(n, n, width, depth=2, activation=jnp.tanh, key=jax.random.PRNGKey(2))
    mlp = jax.tree.map(lambda x: x.astype(jnp.float64) if eqx.is_inexact_array(x) else x, mlp)
    params, static = eqx.partition(mlp, eqx.is_array)
    assert _reverse.block_size(params, n) > 1
    assert not _reverse.isolated_vjps(params, n, with_params=True)
    assert _reverse.isolated_vjps(params, n, with_params=False)
    assert _reverse.isolated_vjps((jnp.ones(n),), n, with_params=True)
    y0s = jnp.asarray(np.random.default_rng(3).uniform(-1.0, 1.0, (LANES, n)))

    def loss(params, y0s):
        model = eqx.combine(params, static)

        def final(y0, t1):
            return ja.solve(lambda t, y, args: model(y), y0, 0.0, t1, rtol=1e-6,
                            atol=1e-6).ys[0]

        return jnp.sum(jax.vmap(final)(y0s, T1S) ** 2)

    jaxpr = jax.make_jaxpr(jax.grad(loss))(params, y0s).jaxpr
    per_lane = (LANES, width, width)
    lane_loops = [e for e in equations(jaxpr) if e.primitive.name == "while"
                  and per_lane in [v.aval.shape for v in e.params["body_jaxpr"].jaxpr.invars]]
    assert lane_loops, "no batched reverse loop found"
    for loop in lane_loops:
        branches_with_params = [
            e for e in equations(loop.params["body_jaxpr"].jaxpr) if e.primitive.name == "cond"
            and any(v.aval.shape == per_lane for v in e.outvars)]
        assert not branches_with_params
