"""Runtime errors whose message holds values known only at run time (a step, a time).

`equinox.error_if` raises a clean error under `jit` and `vmap`, but its message is fixed
when the program is traced.  The diagnostics of a gradient must say *where* it went wrong
(the step and time), so `raise_if` formats the message on the host, in a
`jax.pure_callback` that runs only when the condition holds (a `lax.cond` branch whose
predicate stays unbatched under `vmap`: it asks whether any member of the batch failed).
Under `jit` JAX reports the exception as a `JaxRuntimeError` whose text ends with ours.

**Why a value goes through it.**  A pure callback is kept only if something reads its
output, so `raise_if` returns its argument ``x`` tied to the callback's result in the
failing branch (unchanged in the other).  The obvious alternative, a `jax.debug.callback`,
needs no output but is a side *effect*, and a jitted program with an effect is dispatched
through JAX's Python path on every call instead of its C++ fast path: about 1 ms more per
call of a neural-ODE training step at batch 1 (1.8 ms against 0.7 ms), a constant that
dominates small solves.  `tests/test_jaxpr.py` checks that gradients carry no effects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._lanes import any_in_batch

T = TypeVar("T")


class GradientError(RuntimeError):
    """A derivative of a solve that must not be returned as a number."""


class _WithoutGradientErrors(logging.Filter):
    """Drops JAX's log record of a `GradientError` raised in a pure callback.

    JAX logs every exception a pure callback raises, with the callback's traceback
    (``jax.pure_callback failed``), before the error reaches the caller as a
    `JaxRuntimeError` that carries our whole message.  For a `GradientError` that record
    says nothing more, and a sampler that catches the error and goes on printed ten lines
    of it per rejected point (a UQ tester's log, 2026-11-29).  Other exceptions keep it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, GradientError)


logging.getLogger("jax._src.callback").addFilter(_WithoutGradientErrors())


def raise_if(x: T, pred: Array, message: Callable[..., str], *values: Array) -> T:
    """``x``, unchanged; raises `GradientError(message(*values))` at run time where ``pred``
    is true.

    ``x`` (a pytree with at least one floating-point leaf) must be used by what the caller
    returns: the check runs only while its result is needed.  ``message`` receives the
    ``values`` as NumPy scalars (of the first solve whose ``pred`` holds, under `vmap`,
    whose index in the batch and count of failed solves the message then ends with).
    """
    leaves = jax.tree.leaves(x)
    if not any(jnp.issubdtype(jnp.result_type(leaf), jnp.inexact) for leaf in leaves):
        raise TypeError("raise_if needs a value with a floating-point leaf to attach to")

    def host(pred: Any, *values: Any) -> np.ndarray:
        pred = np.asarray(pred)
        if pred.any():
            first = np.unravel_index(int(np.argmax(pred)), pred.shape) if pred.ndim else ()
            picked = [np.asarray(v)[first] if np.ndim(v) == pred.ndim else np.asarray(v)
                      for v in values]
            text = message(*picked)
            if pred.ndim:  # batched by jax.vmap: say which solve of the batch
                lane = first[0] if len(first) == 1 else tuple(int(i) for i in first)
                text += (f" (Under jax.vmap: this is solve {lane} of a batch of shape "
                         f"{pred.shape}; {int(pred.sum())} of its solves failed this check.)")
            raise GradientError(text)
        return np.zeros(pred.shape, np.bool_)

    def failing(x: T) -> T:
        raised = jax.pure_callback(host, jax.ShapeDtypeStruct(jnp.shape(pred), jnp.bool_),
                                   pred, *values, vmap_method="broadcast_all")
        # Unbatched, so that the branch does not batch ``x``; never reached with a value
        # (the host raised), but it keeps the callback alive.  A select on the callback's
        # flag, not ``leaf + 0 * flag``: XLA rewrites the latter to ``select(flag, 0, 0)``,
        # then to 0, and on the GPU it went on to drop the callback as dead code (no error
        # was raised there).
        raised = any_in_batch(jnp.any(raised))
        return jax.tree.map(
            lambda leaf: jnp.where(raised, jnp.asarray(jnp.nan, leaf.dtype), leaf)
            if jnp.issubdtype(leaf.dtype, jnp.inexact) else leaf, x)

    return jax.lax.cond(any_in_batch(jnp.any(pred)), failing, lambda x: x, x)
