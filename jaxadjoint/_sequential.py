"""Small loop bodies run as a plain sequence of kernels on XLA's CPU runtime.

XLA on CPU executes a compiled computation (the entry, a loop body, a branch) as a
sequence of "thunks": fused kernels, copies, library calls.  Its `ThunkExecutor` runs
such a sequence in one of two ways:

- **in order**, one thunk after another, when every buffer any thunk uses is at most
  512 bytes, or the sequence has at most 8 thunks, or its dependencies form a chain;
- otherwise **as a task graph**: it counts each thunk's unfinished inputs with atomics
  and hands ready thunks to its thread pool.

Both constants are fixed in XLA (`ThunkExecutor::Options`, jaxlib 0.10.x), not flags.
For kernels of a few flops the graph costs more than the work.  A reverse sweep's loop
body never qualified, however small the system, because it reads the record of the
forward pass (``max_steps`` slots, kilobytes).

`in_sequence` moves the arithmetic of such a body into a `jax.lax.cond` branch: a branch
is a computation of its own, with its own executor, and when everything it touches is
small that executor runs in order.  The record's reads stay outside.  Lotka–Volterra's
gradient (N = 2) takes 0.6–0.8x the time, Robertson's and Van der Pol's 0.8–0.93x
with the branch alone (benchmarks/README.md, "Steps in order").  What makes it work:

- XLA's conditional simplifier turns a `cond` whose branches are only elementwise
  arithmetic into a `select` of both (small steps are exactly that), so the branch
  starts with a `jax.lax.optimization_barrier`, which it does not count as cheap;
- the predicate is the loop's own condition: true whenever the body runs, but not known
  to the compiler;
- the branch not taken passes the loop's carry through, so that XLA updates the carry's
  buffers in place (a branch of zeros cost a copy of every output, and the gain).

Where anything would not fit (a neural network's weights, a 10-species interaction
matrix, the stage stack of a larger state), or with ``JAXADJOINT_SEQUENTIAL=0``, the
arithmetic stays inline.  Under `jax.vmap` the predicate is whether any lane runs (a
batched one would make the `cond` a select of both branches); the lanes' buffers are
larger and may not fit, but the branch then costs no more than the noise (`jax.jacrev`
of Robertson's and Lotka–Volterra's saves: 0.99–1.01x; a batch of solves reverses in a
loop of its own, `_batched_reverse`, without the branch).  The branch holds the same
operations, but XLA fuses it on its own, so results agree with the inline ones to
rounding, not bitwise.  That is why the forward loop does not use it: a solve's steps
must not depend, even in the last bits, on whether it records them or has save times.

**Windows of the record** (`window_size`).  The loops that write or read the record
itself (the gradient's forward loop, the reverse sweep's body) touch all of it.  They run
as an outer loop over windows of a few slots: the outer body copies the window's slots out
of the record, an inner loop takes (or reverses) up to that many steps on the copy, and
the outer body copies them back.  The inner body then holds only small buffers and runs in
order; the outer one runs once per window.  The steps are the same operations in a loop
body, not a branch, and come out bitwise the same (`tests/test_sequential.py`).  With both,
Lotka–Volterra's gradient (``y(t1)``) takes 0.36–0.53x, Robertson's 0.65–0.72x and Van der
Pol's 0.46–0.66x the time of neither (benchmarks/README.md, "Steps in order").  With saves, the
forward loop's dense-output rows and save times, and the reverse sweep's rows of their
cotangents, are windowed too.  A solve that records nothing keeps one loop under a trace,
where what it does not read is dropped (not through nested loops); called on concrete
values, every output is read, and it writes its grid (and rows) in windows
(`System.every_output_read`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex_core

from ._lanes import any_in_batch

# XLA's `ThunkExecutor::Options::execute_sequential_buffer_threshold`.
SEQUENTIAL_BUFFER_BYTES = 512


def _enabled() -> bool:
    return os.environ.get("JAXADJOINT_SEQUENTIAL", "1") != "0"


# The most slots a record window holds (larger windows copy the record less often).
MAX_WINDOW = 16


def fits(*trees: Any) -> bool:
    """Whether every array (or shape) among ``trees`` is within `SEQUENTIAL_BUFFER_BYTES`."""
    return all(_nbytes(x) <= SEQUENTIAL_BUFFER_BYTES for x in jax.tree.leaves(trees))


def slot_bytes(tree: Any) -> int:
    """The size in bytes of one slot (leading index) of the largest buffer in ``tree``."""
    return max((x.dtype.itemsize * x[0].size for x in jax.tree.leaves(tree)), default=0)


def slots(tree: Any, start: Any, size: int) -> Any:
    """Slots ``start .. start + size - 1`` (leading axis) of every buffer in ``tree``."""
    return jax.tree.map(lambda b: jax.lax.dynamic_slice_in_dim(b, start, size), tree)


def window_size(bytes_per_slot: int, max_slots: int) -> int:
    """How many slots of a record a loop body may hold in small buffers, or 0 for none.

    A loop that writes (or reads) one slot per iteration of a ``max_steps``-long record
    touches kilobytes, so XLA runs its body as a task graph however small the rest is.
    Running it as an outer loop over windows of ``w`` slots, with an inner loop that only
    sees copies of the window (``w * bytes_per_slot``, ``bytes_per_slot`` the largest
    buffer's slot), lets the inner body run in order, at the price of one slice and one
    update of the record per window.  ``w`` is the largest power of two up to `MAX_WINDOW`
    (and ``max_slots``) that keeps those copies within `SEQUENTIAL_BUFFER_BYTES`; 0 (no
    windows) when it would be under 4 or with ``JAXADJOINT_SEQUENTIAL=0``.  The caller
    checks that the rest of the body fits (`fits`).
    """
    if not _enabled():
        return 0
    size = MAX_WINDOW
    while size >= 4 and size * bytes_per_slot > SEQUENTIAL_BUFFER_BYTES:
        size //= 2
    size = min(size, max_slots)
    return size if size >= 4 else 0


def _nbytes(aval: Any) -> int:
    shape = getattr(aval, "shape", None)
    dtype = getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _largest_value(jaxpr: Any) -> int:
    """The size in bytes of the largest value ``jaxpr`` (and any jaxpr inside it) holds."""
    values = (*jaxpr.invars, *jaxpr.constvars, *(v for e in jaxpr.eqns for v in e.outvars))
    largest = max((_nbytes(v.aval) for v in values), default=0)
    for eqn in jaxpr.eqns:
        for inner in jex_core.jaxprs_in_params(eqn.params):
            largest = max(largest, _largest_value(inner))
    return largest


def in_sequence(
    running: Any, compute: Callable[..., Any], idle: Callable[..., Any], *operands: Any
) -> Any:
    """``compute(*operands)``, in a branch of its own that XLA runs in order when small.

    ``running`` is the enclosing loop's condition: true whenever this runs, but unknown
    to the compiler.  The other branch, never taken, is ``idle(shape, *operands)``
    (``shape``: ``compute``'s output, as `jax.ShapeDtypeStruct` leaves): it should pass
    the loop's carry through, as an idle iteration would, so that XLA can update the
    carry's buffers in place (a branch of zeros cost a copy of every output).  Where anything
    ``compute`` holds is larger than `SEQUENTIAL_BUFFER_BYTES` (checked on its jaxpr),
    or with ``JAXADJOINT_SEQUENTIAL=0``, this is ``compute(*operands)``, inline.
    ``compute`` is traced once, here; the branch evaluates that trace.
    """
    flat, in_tree = jax.tree.flatten(operands)
    if not _enabled() or not fits(flat):
        return compute(*operands)  # without tracing it twice: large problems stop here
    closed, out_shape = jax.make_jaxpr(compute, return_shape=True)(*operands)
    jaxpr, consts = closed.jaxpr, list(closed.consts)
    out_tree = jax.tree.structure(out_shape)

    def evaluate(consts: list, flat: list) -> list:
        return jex_core.jaxpr_as_fun(jex_core.ClosedJaxpr(jaxpr, consts))(*flat)

    largest = max([_largest_value(jaxpr), *(_nbytes(c) for c in consts)])
    if largest > SEQUENTIAL_BUFFER_BYTES:
        return jax.tree.unflatten(out_tree, evaluate(consts, flat))

    # Under `jax.vmap` (`jax.jacrev`'s seeds, for the reverse sweep) the predicate is
    # whether any lane runs, so that the `cond` stays a `cond` (a batched one would be a
    # select of both branches); every lane computes, as it would inline.
    return jax.tree.unflatten(out_tree, jax.lax.cond(
        any_in_batch(running),
        lambda consts, flat: evaluate(consts, jax.lax.optimization_barrier(flat)),
        lambda consts, flat: jax.tree.leaves(
            idle(out_shape, *jax.tree.unflatten(in_tree, flat))),
        consts, flat,
    ))
