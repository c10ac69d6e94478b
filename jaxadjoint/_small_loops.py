"""Let XLA on CPU compile small loops into one kernel each: a process setting for small systems.

XLA's CPU runtime runs a compiled program as a sequence of "thunks" (a fused kernel, a
library call, a loop), and a `jax.lax.while_loop` runs its body's thunks once per
iteration.  Each costs a fixed ~0.1-1 us to dispatch, whatever its size.  A solve of a
small system (a few species, a kinetic model, N <= ~20) does little arithmetic per step,
so its forward loop and its reverse sweep cost mostly that dispatch: Lotka-Volterra
(N = 2, Dopri5, rtol 1e-6) takes 0.034 ms to solve and 0.49 ms for the gradient, ~6 us per
reverse step for ~80 thunks of a few flops each.

XLA has a pass for this (``SmallWhileLoopHoistingPass``): a while loop that its cost
analysis says reads and writes fewer than ``xla_cpu_small_while_loop_byte_threshold`` bytes
(1 KB by default) is compiled, body and all, into a single kernel.  It skips loops that
contain a matrix product (``dot``, unless XLA rewrote a small one as a reduction), a
scatter or a library call (LAPACK).  The estimate grows with the state, the lanes of a
batch and the stages, not with ``max_steps`` (the record is written a row at a time): a
10-species GLV solve's loops qualify at 1 MiB with ``max_steps = 65536``.  Raised to
1 MiB, it made that gradient 5.4x faster (0.091 ms; diffrax's 8x, to 0.110 ms); see README,
"Performance", and `benchmarks/bench_small_loops.py`.

The threshold is an XLA flag, read once when JAX starts its CPU backend, for every program
of the process: `compile_small_loops` sets it, and must run before JAX's first
computation.  It is not free for large problems: a loop compiled this way runs on one
thread, and large ones got slower in our benchmarks (a batch of heat equations with 1 GB
as threshold: diffrax 1.4x, ours 1.07x); 1 MiB left them alone.  So jaxadjoint never
sets it by itself.

With the setting made, the stiff solvers factorise systems of up to
``SMALL_SYSTEM_MAX_SIZE`` unknowns in unrolled JAX arithmetic instead of calling LAPACK
(`solvers._dense_lu.lu_factor`), so that their loops qualify too: the same pivots,
factors equal to round-off.  Without it the library call is faster, and stays.
"""

from __future__ import annotations

import os
import re

_FLAG = "xla_cpu_small_while_loop_byte_threshold"
# XLA's default threshold (bytes).
XLA_DEFAULT_BYTES = 1024
DEFAULT_MAX_BYTES = 2**20


def _threshold_in(flags: str) -> int | None:
    match = re.search(_FLAG + r"=(\d+)", flags)
    return int(match.group(1)) if match else None


def small_loops_compiled() -> bool:
    """Whether the process asked XLA to compile loops larger than its default into one
    kernel (``XLA_FLAGS``), as `compile_small_loops` does.  Read at trace time."""
    threshold = _threshold_in(os.environ.get("XLA_FLAGS", ""))
    return threshold is not None and threshold > XLA_DEFAULT_BYTES


def _backends_started() -> bool:
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - private module moved
        return False
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started()) if started is not None else False


def compile_small_loops(max_bytes: int = DEFAULT_MAX_BYTES) -> bool:
    """Ask XLA on CPU to compile every loop that moves fewer than ``max_bytes`` per pass
    into one kernel: solves of small systems get several times faster.

    Call it at the start of the program, before JAX computes anything (it starts its
    backend then, and reads the flag once).  It adds
    ``--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=<max_bytes>``
    to ``XLA_FLAGS`` (the same as setting that before Python starts), next to any options
    already there.  Returns ``True`` if the setting is in place (also when ``XLA_FLAGS``
    already had a threshold: that one is kept); raises `RuntimeError` if JAX's backend has
    already started, when the flag would be silently ignored.  It applies to the whole
    process; see the `jaxadjoint._small_loops` docstring for what it costs large problems.
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
        raise TypeError(f"`max_bytes` must be an int, got {type(max_bytes).__name__}")
    if max_bytes <= 0:
        raise ValueError(f"`max_bytes` must be positive, got {max_bytes}")
    flags = os.environ.get("XLA_FLAGS", "")
    if _threshold_in(flags) is not None:
        return True
    if _backends_started():
        raise RuntimeError(
            "compile_small_loops() must run before JAX's first computation: JAX has started "
            "its backend and will not read the flag again. Call it right after the imports, "
            f"or start Python with XLA_FLAGS='--xla_backend_extra_options={_FLAG}="
            f"{max_bytes}'.")
    option = f"{_FLAG}={max_bytes}"
    match = re.search(r"--xla_backend_extra_options=(\S*)", flags)
    if match:
        merged = match.group(1) + ("," if match.group(1) else "") + option
        flags = flags[:match.start(1)] + merged + flags[match.end(1):]
    else:
        flags = (flags + " " if flags else "") + f"--xla_backend_extra_options={option}"
    os.environ["XLA_FLAGS"] = flags
    return True
