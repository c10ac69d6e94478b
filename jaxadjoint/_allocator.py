"""Keep freed heap memory for reuse: a C-allocator setting that batched gradients need on CPU.

XLA on CPU allocates a compiled program's buffers with the C library's ``malloc`` on every
call and frees them when it returns.  glibc hands large blocks back to the operating system
when they are freed (it trims the top of the heap, or unmaps a block it mapped on its
own), so the next call gets fresh pages, and the kernel faults in and zeroes every page the
program touches, again on every call.  A batched gradient (`jax.vmap` over solves) has
megabytes of buffers (the record of each lane, the dense-output rows, the lanes' parameter
cotangents), so it pays this on each training step; diffrax's program, with smaller
buffers, mostly does not.  Measured on a 2-core CPU (benchmarks/README.md, "Time series"):
a neural ODE of 32 states, 64 lanes, took 6.7-17 ms per gradient by default and 3.7 ms
with the setting below; a 10-species Lotka–Volterra fit, 256 lanes, 12 ms and 5.4-6.2 ms.

What happens, from ``strace`` of that neural ODE's gradient: every call maps and unmaps
one block of 45 MB (XLA's buffer of the program's temporaries, the record among them),
larger than the 32 MiB up to which glibc learns to keep freed blocks, so every page of
every temporary in it is new on every call.

`retain_freed_memory` makes three glibc settings (``mallopt``), for the whole process:

- ``M_MMAP_MAX = 0``: no block gets a mapping of its own, so none is unmapped when freed;
  every block comes from the heap;
- ``M_TRIM_THRESHOLD = pad_bytes``: freed memory at the top of the heap is returned to the
  system only beyond ``pad_bytes``;
- ``M_TOP_PAD = pad_bytes``: the heap grows in steps of ``pad_bytes`` more than asked.

The next call then reuses the pages of the last.  ``M_TOP_PAD`` alone, the earlier setting,
worked only when made before the program's first call: made after it (the latent ODE at 64
lanes, once run), every call still faulted in 2 200 pages (9 MB) and took 5.5-6.3 ms, against
0-4 pages and 2.8-2.9 ms with the three (`tests/test_allocator.py` checks this).  glibc stops
adapting its threshold for mapping blocks once any is set.  Costs: the process keeps up to
``pad_bytes`` of freed memory at the top of its heap, and memory freed below a block still
in use stays with the process (fragmentation), instead of going back at once.
`hint_if_large` tells the user, once, when a solve's record alone is past that 32 MiB.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

import jax

from ._user_warning import warn

# glibc's <malloc.h>: mallopt parameters.
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4
DEFAULT_PAD_BYTES = 256 * 2**20
# From this size on, one buffer alone puts a program past glibc's largest reuse threshold
# (32 MiB), so `hint_if_large` suggests `retain_freed_memory`.
LARGE_BUFFER_BYTES = 32 * 2**20
_state = {"retained": False, "hinted": False}


def _glibc() -> bool:
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def retain_freed_memory(pad_bytes: int = DEFAULT_PAD_BYTES) -> bool:
    """Let the C allocator keep ``pad_bytes`` of freed heap memory for reuse (glibc only).

    Call it once in a program that trains on batches (`jax.vmap` over solves) on CPU,
    before or after its first solve; see the module docstring for why and what it costs.
    Returns ``True`` if the settings were applied, ``False`` where the C library has no
    such settings (not Linux with glibc), in which case nothing changed.
    """
    if isinstance(pad_bytes, bool) or not isinstance(pad_bytes, int):
        raise TypeError(f"`pad_bytes` must be an int, got {type(pad_bytes).__name__}")
    if not 0 <= pad_bytes < 2**31:
        raise ValueError(f"`pad_bytes` must be in [0, 2**31), got {pad_bytes}")
    if not _glibc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, pad_bytes), (_M_TOP_PAD, pad_bytes))
    applied = all([bool(mallopt(param, value)) for param, value in settings])
    _state["retained"] = _state["retained"] or applied
    return applied


def hint_if_large(nbytes: int, purpose: str) -> None:
    """Warn, once per process, that a buffer of ``nbytes`` wants `retain_freed_memory`.

    Called at trace time for each record buffer (``purpose`` names it).  Silent below
    `LARGE_BUFFER_BYTES`, off CPU, off glibc, and once the setting was made (by
    `retain_freed_memory`, ``MALLOC_TOP_PAD_`` or ``MALLOC_MMAP_MAX_``).
    """
    if (nbytes < LARGE_BUFFER_BYTES or _state["retained"] or _state["hinted"]
            or "MALLOC_TOP_PAD_" in os.environ or "MALLOC_MMAP_MAX_" in os.environ
            or not _glibc()
            or jax.default_backend() != "cpu"):
        return
    _state["hinted"] = True
    warn(
        f"jaxadjoint: this solve allocates a buffer of {nbytes / 2**20:.0f} MiB ({purpose}: "
        "max_steps x the state's size, x the lanes under jax.vmap; allocated, not written). "
        "On CPU with glibc, a program with buffers this large gets fresh memory pages on "
        "every call, which made gradients up to 2-4x slower in our benchmarks. Call "
        "jaxadjoint.retain_freed_memory() once at the start (README, 'Performance'), or "
        "lower max_steps. Shown once per process.",
        RuntimeWarning,
    )
