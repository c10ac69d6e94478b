"""Helpers for code that runs on a batch of solves ("lanes") under `jax.vmap`.

`jax.vmap` turns a `jax.lax.cond` whose predicate differs between lanes into a select:
every lane runs *both* branches, and before that every operand the branches share,
batched or not, is broadcast to the batch (JAX does so for the safety of reverse-mode
differentiation, jax-ml/jax#1052).  In the reverse sweep that broadcast copies the
parameters of the right-hand side once per lane, and the vector–Jacobian products then
run as per-lane matrix products against those copies instead of one matrix product
against the shared parameters.  `any_lane_cond` avoids both where the two branches agree
on the lanes whose predicate is false.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array


def lanes_where(mask: Array, new: Any, old: Any) -> Any:
    """``new`` on the lanes where ``mask`` (shape ``(lanes,)``) is true, else ``old``.

    ``new`` and ``old`` are trees of arrays with the lane axis in front.
    """

    def select(a: Array, b: Array) -> Array:
        return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(select, new, old)


def any_lane_cond(
    pred: Array, true_fun: Callable, false_fun: Callable, *operands: Any
) -> Any:
    """`jax.lax.cond` for a ``true_fun`` that agrees with ``false_fun`` where ``pred`` is false.

    Without `jax.vmap`, or with a predicate that is the same for every lane, this is
    ``jax.lax.cond(pred, true_fun, false_fun, *operands)``.  Under `jax.vmap` with a
    batched predicate, every lane takes ``true_fun`` if any lane's predicate is true and
    ``false_fun`` otherwise: one branch runs, on operands that stay as batched as they
    were (no select, no broadcast of shared operands).  The caller guarantees that this
    is the same as ``jax.lax.cond`` per lane: ``true_fun`` must return ``false_fun``'s
    result on the lanes whose predicate is false (e.g. a vector–Jacobian product, linear
    in its cotangent, against a branch of zeros, where the cotangent is zero).  Outputs
    come out batched.  Both functions may close over traced values (they are
    closure-converted here).
    """
    true_cc = eqx.filter_closure_convert(true_fun, *operands)
    false_cc = eqx.filter_closure_convert(false_fun, *operands)
    dynamic, static = eqx.partition((true_cc, false_cc), eqx.is_array)

    @jax.custom_batching.custom_vmap
    def branch(pred: Array, dynamic: Any, operands: tuple) -> Any:
        true_fn, false_fn = eqx.combine(dynamic, static)
        # (Plain functions as branches: `cond` hashes its branches, a closure-converted
        # module need not be hashable.)
        return jax.lax.cond(
            pred, lambda *ops: true_fn(*ops), lambda *ops: false_fn(*ops), *operands
        )

    @branch.def_vmap
    def branch_batch(
        axis_size: int, in_batched: list, pred: Array, dynamic: Any, operands: tuple
    ) -> tuple[Any, Any]:
        pred_batched, dynamic_batched, operands_batched = in_batched
        axes = jax.tree.map(lambda b: 0 if b else None, (dynamic_batched, operands_batched))

        def lanes(which: int) -> Callable:
            def run(dynamic: Any, operands: tuple) -> Any:
                def one(d: Any, ops: tuple) -> Any:
                    return eqx.combine(d, static)[which](*ops)

                return jax.vmap(one, in_axes=axes, axis_size=axis_size)(dynamic, operands)

            return run

        take = jnp.any(pred) if pred_batched else pred
        out = jax.lax.cond(take, lanes(0), lanes(1), dynamic, operands)
        return out, jax.tree.map(lambda _: True, out)

    return branch(pred, dynamic, operands)



def run_single_lane(fn: Callable[[Any], Any], dyn: Any, batched: Any) -> tuple[Any, Any]:
    """A batch of one lane (``jax.vmap`` of size 1) run as the unbatched ``fn``.

    ``dyn`` holds the array leaves, with the lane axis in front where ``batched`` (a tree
    of bools like ``dyn``) says.  The lane is taken out, ``fn`` runs on it as on a single
    solve, and its outputs get the lane axis back: all batched.  A batch of one is common
    (`jax.jacrev` of a scalar loss is `vmap` over one cotangent seed; a mini-batch of one
    trajectory) and batching would cost it, for nothing, the dynamic updates of its
    record turned into scatters with per-lane indices, and a select after every step.
    Returns ``(outputs, out_batched)`` as a ``custom_vmap`` rule does.
    """
    lane = jax.tree.map(lambda x, b: x[0] if b else x, dyn, batched)
    out = jax.tree.map(lambda x: x[None], fn(lane))
    return out, jax.tree.map(lambda _: True, out)


@jax.custom_batching.custom_vmap
def any_in_batch(pred: Array) -> Array:
    """``pred``; under `jax.vmap`, whether it holds for any member of the batch (unbatched).

    Keeps a `jax.lax.cond` on it unbatched: `_runtime_error.raise_if` calls the host only
    when something failed, not once per member of every batch (`jax.jacrev`'s seeds
    included), and `DiscreteForward`'s replay skips a chunk of slots that no lane needs.
    Its input is a boolean, so it carries no derivative.
    """
    return pred


@any_in_batch.def_vmap
def _any_in_batch_rule(axis_size: int, in_batched: list, pred: Array) -> tuple[Array, bool]:
    del axis_size
    return (jnp.any(pred) if in_batched[0] else pred), False
