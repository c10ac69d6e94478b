"""`Recursive`'s reverse pass for a batch of solves under `jax.vmap`: one shared loop.

Each solve of the batch has its own checkpoint schedule (it depends on its step count),
so left to `vmap` the outer loop of `Recursive.reverse` has a batched predicate and
selects every lane's carry, the per-lane parameter cotangent included, after every
segment, and every sweep inside it is the batched `reverse_sweep` that
`_batched_reverse` describes (a select per iteration, a parameter VJP per iteration for
every lane).  Here the lanes share the outer loop: each iteration plans one segment per
lane (a leaf to reverse or a split to push) exactly as `Recursive._reverse_one` does,
replays every lane's states in one batched loop, and reverses the leaves with
`_batched_reverse.lanes_sweep` (lanes with nothing to reverse stand still).  A lane whose
schedule is done stands still too.  The parameters stay unbatched; see `_batched_reverse`
for what is batched and how each lane's gradient relates to the unbatched one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from ._adjoint_health import healthy
from ._batched_reverse import Lane, lanes_sweep
from ._lanes import lanes_where
from ._recursive import _replay, _split_length
from ._reverse import add_save_state, last_row


def reverse_lanes(unpack: Callable, axes: Any, axis_size: int, dyn: Any) -> tuple:
    """The rule of `Recursive.reverse` for lanes with different step counts.

    ``unpack(d)`` gives one lane's ``(checkpoint, system, params, direction, store, grid,
    num_accepted, lam, pbar, mu, saves)``; see
    `_batched_reverse.batch_over_solves`.  Mirrors `Recursive._reverse_one` step for step.
    """

    def each(fn: Callable) -> Callable:
        return jax.vmap(lambda d, c: fn(unpack(d), c), in_axes=(axes, 0), axis_size=axis_size)

    def start(a: tuple, _: Any) -> dict:
        _, _, _, _, (stack, d), _, num_accepted, lam, pbar, _, saves = a
        size = stack.shape[0]
        count = jnp.where(num_accepted > 0, (num_accepted - 1) // d + 1, 1)
        slots = jnp.arange(size, dtype=jnp.int32)
        positions = jnp.where(slots < count, slots * d, 0)
        lam, j = add_save_state(
            lam, saves, last_row(saves), jnp.where(num_accepted == 0, 0, -1)
        )
        return dict(end=num_accepted, depth=count.astype(jnp.int32),
                    positions=positions.astype(jnp.int32), stack=stack, lam=lam, pbar=pbar, j=j,
                    health=healthy(lam.dtype))

    def plan(a: tuple, c: dict) -> dict:
        """Replay to the lane's next split or leaf (nothing for a lane that is done)."""
        _, system, params, direction, _, grid, _, _, _, _, _ = a
        end, positions, stack = c["end"], c["positions"], c["stack"]
        active = end > 0
        size = stack.shape[0]
        depth = jnp.maximum(c["depth"], 1)
        top = positions[depth - 1]
        length = jnp.where(active, end - top, 1)
        free = size - depth
        leaf = length <= free + 1
        split = end - _split_length(length, jnp.maximum(free, 1), grid.dtype)
        target = jnp.where(leaf, end - 1, split)
        stack = _replay(
            system, params, direction, grid, top, stack[depth - 1],
            jnp.where(active, target - top, 0), stack, depth, leaf,
        )
        slot = jnp.minimum(depth, size - 1)
        positions = positions.at[slot].set(jnp.where(leaf, positions[slot], split))
        return dict(c, positions=positions, stack=stack, top=top, leaf=leaf,
                    n_lo=jnp.where(leaf & active, top, end))

    def running(c: dict) -> Array:
        return c["end"] > 0

    def body(c: dict) -> dict:
        active = running(c)
        p = each(plan)(dyn, c)

        def lane(d: tuple) -> Lane:
            d, (stack, depth, top) = d
            _, system, params, direction, _, grid, _, _, _, mu, saves = unpack(d)

            def read(n: Array) -> tuple[Array, None]:
                return stack[depth - 1 + n - top], None

            return Lane(system, params, direction, grid, read, mu, saves)

        # A leaf reverses [top, end); a split, or a lane that is done, reverses nothing.
        lam, pbar, j, health = lanes_sweep(
            lane, (axes, (0, 0, 0)), axis_size, (dyn, (p["stack"], c["depth"], p["top"])),
            c["end"], p["n_lo"], c["lam"], c["pbar"], c["j"], c["health"],
        )
        leaf = p["leaf"]
        new = dict(
            end=jnp.where(leaf, p["top"], c["end"]),
            depth=jnp.where(leaf, c["depth"] - 1, c["depth"] + 1),
            positions=p["positions"], stack=p["stack"], lam=lam, pbar=pbar, j=j,
            health=health,
        )
        # A lane that is done keeps its carry (its parameter cotangent was not touched).
        pbar = new.pop("pbar")
        return dict(lanes_where(active, new, {k: c[k] for k in new}), pbar=pbar)

    carry = each(start)(dyn, jnp.zeros((axis_size,), jnp.int32))
    final = jax.lax.while_loop(lambda c: jnp.any(running(c)), body, carry)
    return final["lam"], final["pbar"], final["health"]
