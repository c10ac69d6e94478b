"""Missing pieces of JAX that jaxadjoint's transformations need, added at import.

**A transpose for ``stop_gradient``** (JAX issues #22011 and #39219).  When `jax.vmap`
batches the predicate of a `jax.lax.cond`, its batching rule wraps the operands in
``stop_gradient``.  Inside the linearised program of a ``custom_jvp`` rule those operands
can be tangents, and the transpose of that program then needs a rule ``stop_gradient``
does not have: `jax.grad` of a loss that `jax.vmap`s `DiscreteForward` solves failed with
``NotImplementedError`` (its replay steps under a per-solve ``cond``).  As a map on
values ``stop_gradient`` is the identity, so its transpose passes the cotangent through.
The rule is registered only if JAX has none (lineax, which diffrax imports, registers
the same one).
"""

from __future__ import annotations

from jax.interpreters import ad

try:  # a private module: if it moves, the workaround is skipped, not the library
    from jax._src.ad_util import stop_gradient_p
except ImportError:  # pragma: no cover
    stop_gradient_p = None


def _stop_gradient_transpose(cotangent, operand):
    del operand
    return (cotangent,)


def register() -> bool:
    """Register the transpose if JAX lacks one; whether a rule is now in place."""
    if stop_gradient_p is None:
        return False
    ad.primitive_transposes.setdefault(stop_gradient_p, _stop_gradient_transpose)
    return True


register()
