"""What the user's functions read besides their inputs, as part of the compile-cache key.

`jaxadjoint.solve` runs a compiled function (`equinox.filter_jit`) that takes ``rhs`` (and
``integrand``, the events' functions) as a static argument, cached by identity.  A value
the function reads from outside -- a module-level ``beta = 0.4``, a global array, a
forcing function redefined -- is baked into the compiled program when it is traced, so a
direct call after ``beta = 0.2`` returned the old solution, without a word (a newcomer
from `scipy.integrate.solve_ivp`, running scenarios by changing a global, 2026-11-29).
Under the user's own `jax.jit` that is JAX's rule and theirs to know; called directly, the
user never asked for compilation.

So a direct call (not inside a `jit` trace) traces each function once more, outside, and
hashes what the trace depends on beyond the inputs: the jaxpr's text (Python numbers it
read appear there as literals, other functions it called as equations) and the values of
the concrete arrays it closed over (its constants; a `Module`'s own arrays are inputs of
the solve, not constants).  The hash is a static argument of the compiled solve: a
changed global compiles again and is used; an unchanged one reuses the program.  The
trace costs about what tracing ``rhs`` costs (well under a millisecond for small fields).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import equinox as eqx
import jax
import numpy as np


def fingerprint(functions: Iterable[Callable | None], t: Any, y: Any, args: Any) -> str | None:
    """A hash of what ``functions`` (each called as ``f(t, y, args)``) read besides their
    inputs; ``None`` where one cannot be traced here (the solve then reports the error)."""
    digest = hashlib.blake2b()
    args_dynamic, args_static = eqx.partition(args, eqx.is_array)
    for fn in functions:
        if fn is None:
            continue
        fn_dynamic, fn_static = eqx.partition(fn, eqx.is_array)

        def call(fn_dynamic, t, y, args_dynamic, fn_static=fn_static):
            return eqx.combine(fn_dynamic, fn_static)(t, y, eqx.combine(args_dynamic,
                                                                        args_static))

        try:
            closed = jax.make_jaxpr(call)(fn_dynamic, t, y, args_dynamic)
        except Exception:  # noqa: BLE001 (the solve's own checks name the problem)
            return None
        digest.update(str(closed.jaxpr).encode())
        for const in closed.consts:
            if isinstance(const, jax.core.Tracer):
                continue  # closed over from an outer transformation: an input of the solve
            const = np.asarray(const)
            digest.update(f"{const.dtype}{const.shape}".encode())
            digest.update(np.ascontiguousarray(const).tobytes())
    return digest.hexdigest()
