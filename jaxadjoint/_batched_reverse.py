"""The reverse sweep of a batch of solves under `jax.vmap`: one loop, lanes that are done stand still.

`jax.vmap` of a loss over many initial states (a neural ODE trained on a batch) batches
the whole backward pass, the recorded step counts included.  Left to `vmap`, the reverse
sweep of `_reverse.reverse_sweep` becomes

- a `while_loop` with a batched predicate: after every iteration JAX selects between the
  old and the new carry of every lane, the per-lane parameter cotangent ``pbar`` (lanes x
  parameters) and the block of stage rows included;
- a select in place of the `jax.lax.cond` that adds a block's parameter adjoint (its
  predicate depends on the lane's step count): *every* iteration runs the block's
  parameter VJP for every lane (four times the work, with blocks of four steps), and
  before that JAX broadcasts the branch's operands to the batch -- the parameters of the
  right-hand side are copied once per lane and every product with them becomes a
  per-lane matrix product;
- the same select-and-broadcast for the isolated stage VJPs of large states
  (`_reverse._apply_vjp`), which `_lanes.any_lane_cond` now avoids.

Here (`reverse_all_steps`, for `StoreStates` and `StoreStages`) the lanes share one
`while_loop` instead, as the forward loop does (`_forward.forward_loop`).  Iteration ``i``
reverses step ``num_steps - 1 - i`` of every lane that still has one; a lane that is done
stands still (a select of its adjoint and its rows: a few states per lane, not its
parameter cotangent).  Since every lane starts at its own last step, the blocks of steps
(`_reverse.block_size`) line up: a block is complete on the same iteration in every lane.
Block parameter VJPs run in a `jax.lax.cond` whose predicate is the same for all lanes
("some lane completed a block, or every lane is done"); a lane whose last, partial block
is pending waits for that flush (its rows stand still meanwhile).  So the batch takes as
many parameter VJPs as its longest solve, each over the whole batch, and selects the
parameter cotangent only then.

**What stays unbatched.**  Nothing in this sweep is batched that `vmap` did not batch: the
parameters of the right-hand side, when shared by the batch (the network of a neural ODE),
stay one unbatched array, so the stage recomputations and state VJPs of all lanes are
matrix products against it (batch rows times parameters).  The per-lane parameter
cotangent *is* batched (lanes x parameters): the backward pass cannot tell
``grad(vmap(f))``, where JAX sums the lanes after it, from ``vmap(grad(f))``, which wants
one gradient per lane, so it must return per-lane values; it is written once per block.
Under `jax.jacrev` (`vmap` over cotangent seeds) the record and the step counts are not
batched, nothing here applies, and the sweep is `vmap` of the one-solve sweep: recorded
states and recomputed stages stay unbatched, only the adjoints carry the seeds.

**Gradients.**  Each lane reverses the same steps with the same arithmetic as the sweep
of one solve (the same `_reverse` functions, the same block rows summed in the same
order, the same masking of unwritten rows), so each lane's gradient equals the unbatched
one up to the rounding of XLA's batched kernels (`tests/test_batched_reverse.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from . import _reverse
from ._lanes import lanes_where
from ._reverse import inject_saves, reverse_step
from ._system import System


def reverse_all_steps(
    system: System,
    params: Any,
    direction: Array,
    grid: Array,
    num_steps: Array,
    read: Callable[[Array], tuple[Array | None, Array | None]],
    lam: Array,
    pbar: Any,
    mu: Array,
    ys_bar: Array,
    save_state_index: Array,
) -> tuple[Array, Any]:
    """`_reverse.reverse_all_steps`; under `jax.vmap` over solves, one shared loop.

    Returns ``(dL/dy0, dL/dparams)``.  ``read(n)`` may close over the record (it is
    closure-converted, so that the record can be batched).
    """
    read = eqx.filter_closure_convert(read, jnp.int32(0))
    args = (system, params, direction, grid, num_steps, read, lam, pbar, mu, ys_bar,
            save_state_index)
    dynamic, static = eqx.partition(args, eqx.is_array)

    def unpack(dyn: Any) -> tuple:
        return eqx.combine(dyn, static)

    @jax.custom_batching.custom_vmap
    def sweep(dyn: Any) -> tuple[Array, Any]:
        return _reverse.reverse_all_steps(*unpack(dyn))

    @sweep.def_vmap
    def sweep_batch(axis_size: int, in_batched: list, dyn: Any) -> tuple[tuple, Any]:
        (batched,) = in_batched
        axes = jax.tree.map(lambda b: 0 if b else None, batched)
        num_steps_batched = unpack(batched)[4]
        if num_steps_batched is True:
            out = _shared_loop(unpack, axes, axis_size, dyn)
        else:
            # Every lane takes the same steps (`jax.jacrev`: lanes are cotangent seeds):
            # `vmap` of one sweep has an unbatched loop and branch predicates already.
            out = jax.vmap(
                lambda d: _reverse.reverse_all_steps(*unpack(d)), in_axes=(axes,),
                axis_size=axis_size,
            )(dyn)
        return out, jax.tree.map(lambda _: True, out)

    return sweep(dynamic)


def _shared_loop(unpack: Callable, axes: Any, axis_size: int, dyn: Any) -> tuple[Array, Any]:
    """The sweeps of all lanes in one loop; ``dyn`` holds the lanes' arguments (see above)."""

    def each(fn: Callable) -> Callable:
        """``fn(lane arguments, lane carry)`` over the lanes (the carry is batched)."""
        return jax.vmap(lambda d, c: fn(unpack(d), c), in_axes=(axes, 0), axis_size=axis_size)

    def read_step(a: tuple, n: Array) -> tuple:
        grid, read = a[3], a[5]
        n = jnp.maximum(n, 0)  # the read ahead of a lane's last iteration: not used
        return read(n), grid[n], grid[n + 1]

    def start(a: tuple, _: Any) -> dict:
        _, _, _, _, num_steps, _, lam, pbar, _, ys_bar, save_state_index = a
        j = jnp.int32(save_state_index.shape[0] - 1)
        lam, j = inject_saves(lam, ys_bar, save_state_index, j, num_steps)
        return dict(n=num_steps - 1, data=read_step(a, num_steps - 1), lam=lam, j=j, pbar=pbar)

    def advance(a: tuple, c: dict) -> dict:
        """One reverse step of one lane: `reverse_step`, parameters stage by stage."""
        system, params, direction, _, _, _, _, _, mu, ys_bar, save_state_index = a
        n, ((y, stages), tau, t_next) = c["n"], c["data"]
        lam, pbar = reverse_step(
            system, tau, t_next - tau, y, stages, c["lam"], mu, params, direction, c["pbar"]
        )
        lam, j = inject_saves(lam, ys_bar, save_state_index, c["j"], n)
        return dict(n=n - 1, data=read_step(a, n - 1), lam=lam, j=j, pbar=pbar)

    def running(c: dict) -> Array:
        return c["n"] >= 0

    def body(c: dict) -> dict:
        return lanes_where(running(c), each(advance)(dyn, c), c)

    carry = each(start)(dyn, jnp.zeros((axis_size,), jnp.int32))
    final = jax.lax.while_loop(lambda c: jnp.any(running(c)), body, carry)
    return final["lam"], final["pbar"]
