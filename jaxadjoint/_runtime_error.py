"""Runtime errors whose message holds values known only at run time (a step, a time).

`equinox.error_if` raises a clean error under `jit` and `vmap`, but its message is fixed
when the program is traced.  The diagnostics of a gradient must say *where* it went wrong
(the step and time), so `raise_if` formats the message on the host, in a
`jax.debug.callback` that runs only when the condition holds (a `lax.cond` branch whose
predicate stays unbatched under `vmap`: it asks whether any member of the batch failed).
A debug callback is an effect: XLA keeps it even though nothing reads its output.  Under
`jit` JAX reports the exception as a `JaxRuntimeError` whose text ends with ours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array


class GradientError(RuntimeError):
    """A derivative of a solve that must not be returned as a number."""


def raise_if(pred: Array, message: Callable[..., str], *values: Array) -> None:
    """Raise `GradientError(message(*values))` at run time where ``pred`` is true.

    ``message`` receives the ``values`` as NumPy scalars (of the first solve whose ``pred``
    holds, under `vmap`).
    """

    def host(pred: Any, *values: Any) -> None:
        pred = np.asarray(pred)
        if not pred.any():
            return
        first = np.unravel_index(int(np.argmax(pred)), pred.shape) if pred.ndim else ()
        picked = [np.asarray(v)[first] if np.ndim(v) == pred.ndim else np.asarray(v)
                  for v in values]
        raise GradientError(message(*picked))

    jax.lax.cond(
        _any_in_batch(jnp.any(pred)), lambda: jax.debug.callback(host, pred, *values),
        lambda: None,
    )


@jax.custom_batching.custom_vmap
def _any_in_batch(pred: Array) -> Array:
    """``pred``; under `jax.vmap`, whether it holds for any member of the batch (unbatched).

    Keeps the `lax.cond` of `raise_if` unbatched, so that the host is called only when
    something failed, not once per member of every batch (`jax.jacrev`'s seeds included).
    """
    return pred


@_any_in_batch.def_vmap
def _any_in_batch_rule(axis_size: int, in_batched: list, pred: Array) -> tuple[Array, bool]:
    del axis_size
    return (jnp.any(pred) if in_batched[0] else pred), False
