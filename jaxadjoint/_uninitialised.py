"""Buffers that are allocated but not filled, so their cost follows the steps taken.

The forward loop records into buffers of length ``max_steps``; it writes slot ``n``
before the reverse pass reads it and never reads a slot past the last accepted step.
Zero-filling such a buffer would cost time (and resident memory) in proportion to
``max_steps`` on every call, however few steps the solve takes.

`jax.lax.empty` is uninitialised on GPU and TPU (XLA's ``AllocateBuffer``), but XLA on
CPU lowers it to a zero broadcast.  On CPU we therefore allocate through an XLA FFI
custom call whose handler does nothing: XLA allocates the result buffer and the handler
leaves it as it is.  The handler is a `ctypes` callback, so no compiled extension is
needed; it runs once per buffer per call of the compiled program (microseconds).

The handler reads XLA's FFI call frame by hand, a layout that is no Python-level API and
that a future jaxlib could change (crashing the process, not failing).  So it is used only
on the jaxlib releases it was tested on (`TESTED_JAXLIB`: 0.10.0 to 0.10.2, and 0.11.2).
On any other release, or if registration fails, or with ``JAXADJOINT_UNINITIALISED=zeros``,
a warning says why and the buffers are zero-filled (`jax.lax.empty`, a zero broadcast on CPU);
``JAXADJOINT_UNINITIALISED=ffi`` uses the handler on any release.  Results are the same
(only written slots are read); the cost is a pass over every buffer on every call, which
matters only for large states with a large ``max_steps`` (figures: benchmarks/README.md,
"Design measurements").

Small buffers are zero-filled all the same (below `SMALL_BUFFER_BYTES`, 256 KiB).  The
handler is Python, so it needs the GIL; when the compiled program starts, the caller's
thread usually still holds it, finishing its own dispatch (``equinox.filter_jit``'s
Python costs up to half a millisecond a call on our 2-core CPU), and the whole
computation waits for it instead of overlapping with it.  A zero fill of 256 KiB costs a
few microseconds.  On diffrax's neural-ODE training step at batch 1 (four steps,
float32), allocating its small buffers through the handler made the gradient call
1.2-1.3x slower (benchmarks/README.md, "Time series").  So a buffer's cost follows
``max_steps`` only up to that bound.

``JAXADJOINT_UNINITIALISED=nan`` fills every buffer, on every platform, with NaN (integers
with their most negative value): a sanitiser for tests.  On GPU and TPU the unwritten slots
hold whatever the memory held, NaN and Inf included, and under `jax.vmap` or in a
transposed program a value computed from an unwritten slot and then discarded by a
``select`` still multiplies cotangents (``0 * NaN = NaN``).  CPU's zero fill hides that;
the NaN fill shows it on CPU.

Under `jax.vmap` the buffer must come out batched already: a batched loop carry whose
initial value is unbatched is broadcast, which would fill it.  Callers therefore pass a
scalar ``witness`` that is batched exactly when the recorded values will be, and the
allocation is batched with it.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import jaxlib
from jax import Array

from ._allocator import hint_if_large
from ._user_warning import warn

_TARGET = "jaxadjoint_uninitialised"
# The jaxlib releases the handler was run and checked on, as inclusive ranges: all of
# tests/test_uninitialised.py and tests/test_cost_follows_steps.py pass (0.11.2: checked
# 2026-11-28 on a device machine's CPU backend, with the rest of the suite).  To add a
# release, run them there with ``JAXADJOINT_UNINITIALISED=ffi``.
TESTED_JAXLIB = (((0, 10, 0), (0, 10, 2)), ((0, 11, 2), (0, 11, 2)))
ENVIRONMENT_VARIABLE = "JAXADJOINT_UNINITIALISED"
# Buffers smaller than this are zero-filled, not allocated through the handler: see
# "Small buffers" in the module docstring.
SMALL_BUFFER_BYTES = 256 * 1024

# The XLA FFI C API (xla/ffi/api/c_api.h), as far as this handler reads it:
#   XLA_FFI_CallFrame      { size_t struct_size; XLA_FFI_Extension_Base* extension_start; ... }
#   XLA_FFI_Extension_Base { size_t struct_size; int type; XLA_FFI_Extension_Base* next; }
#   XLA_FFI_Metadata_Extension { XLA_FFI_Extension_Base base; XLA_FFI_Metadata* metadata; }
#   XLA_FFI_Metadata       { size_t struct_size;
#                            XLA_FFI_Api_Version { size_t; void*; int major; int minor; } ... }
_POINTER = ctypes.sizeof(ctypes.c_void_p)
_CALL_FRAME_EXTENSIONS = _POINTER
_EXTENSION_TYPE = _POINTER
_EXTENSION_NEXT = 2 * _POINTER
_METADATA_EXTENSION_METADATA = 3 * _POINTER
_METADATA_MAJOR = 3 * _POINTER
_METADATA_MINOR = 3 * _POINTER + ctypes.sizeof(ctypes.c_int)
_EXTENSION_METADATA = 1
# The oldest FFI version XLA accepts; the handler uses nothing newer.
_API_VERSION = (0, 1)


def _pointer_at(address: int) -> int | None:
    return ctypes.c_void_p.from_address(address).value


def _do_nothing(call_frame: int) -> None:
    """The FFI handler: answer XLA's metadata query; at run time, leave the result as is."""
    extension = _pointer_at(call_frame + _CALL_FRAME_EXTENSIONS)
    while extension:
        if ctypes.c_int.from_address(extension + _EXTENSION_TYPE).value == _EXTENSION_METADATA:
            metadata = _pointer_at(extension + _METADATA_EXTENSION_METADATA)
            ctypes.c_int.from_address(metadata + _METADATA_MAJOR).value = _API_VERSION[0]
            ctypes.c_int.from_address(metadata + _METADATA_MINOR).value = _API_VERSION[1]
        extension = _pointer_at(extension + _EXTENSION_NEXT)
    return None  # NULL: success


# Kept alive for the life of the process: XLA holds the raw function pointer.
_HANDLER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(_do_nothing)


def handler_choice(jaxlib_version: str, forced: str | None) -> str | None:
    """Whether to use the handler: None for yes, else the reason not to (for the warning).

    ``forced`` is the value of ``JAXADJOINT_UNINITIALISED``: unset, empty or ``"auto"``
    (use the handler on the tested jaxlib releases only), ``"ffi"`` (use it on any jaxlib),
    ``"zeros"`` or ``"nan"`` (never use it; `poisoned`).  Pre-releases and development
    builds are not tested.
    """
    forced = _normalised(forced)
    if forced not in ("auto", "ffi", "zeros", "nan"):
        raise ValueError(f"{ENVIRONMENT_VARIABLE} must be 'auto', 'ffi', 'zeros' or 'nan', "
                         f"got {forced!r}")
    if forced in ("zeros", "nan"):
        return f"{ENVIRONMENT_VARIABLE}={forced}"
    if forced == "ffi":
        return None
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", jaxlib_version)
    version = None if match is None else tuple(map(int, match.groups()))
    if version is None or not any(low <= version <= high for low, high in TESTED_JAXLIB):
        tested = ", ".join(tested_releases())
        return (f"jaxlib {jaxlib_version} is not one of the releases its handler was tested "
                f"on, {tested}; set {ENVIRONMENT_VARIABLE}=ffi to use it anyway")
    return None


def tested_releases() -> list[str]:
    """`TESTED_JAXLIB` as text, one entry per range (``0.10.0–0.10.2``, ``0.11.2``)."""
    dotted = [tuple(".".join(map(str, v)) for v in bounds) for bounds in TESTED_JAXLIB]
    return [low if low == high else f"{low}–{high}" for low, high in dotted]


def _normalised(forced: str | None) -> str:
    """The value of ``JAXADJOINT_UNINITIALISED`` as `handler_choice` reads it."""
    return (forced or "auto").strip().lower()


def poisoned() -> bool:
    """Whether ``JAXADJOINT_UNINITIALISED=nan`` asks for NaN-filled buffers (read at trace
    time, so a test can switch it between compilations)."""
    return _normalised(os.environ.get(ENVIRONMENT_VARIABLE)) == "nan"


def _poison(shape: tuple[int, ...], dtype: Any) -> Array:
    """NaN for floating dtypes, the most negative value for integers."""
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.full(shape, jnp.nan, dtype)
    return jnp.full(shape, jnp.iinfo(dtype).min, dtype)


@functools.cache
def host_allocation_available() -> bool:
    """Register the handler with XLA's CPU client (once); False, with a warning, if it must
    not be used (`handler_choice`) or cannot be registered.

    The CPU client is created first, so that registration happens now and a refusal
    raises here (where it can fall back to zero-filled buffers) rather than at the
    client's start-up.
    """
    reason = handler_choice(jaxlib.__version__, os.environ.get(ENVIRONMENT_VARIABLE))
    if reason is None:
        try:
            jax.devices("cpu")
            jax.ffi.register_ffi_target(_TARGET, jax.ffi.pycapsule(_HANDLER), platform="cpu")
        except Exception as error:  # noqa: BLE001 - any refusal means: fall back
            reason = f"it could not be registered with XLA's CPU client: {error}"
    if reason is None:
        return True
    if jax.default_backend() != "cpu":
        # The zero fill costs only where a program runs on the CPU; on a GPU backend the
        # buffers are `jax.lax.empty` (uninitialised) and the warning would be noise.
        return False
    warn(
        f"jaxadjoint does not use its uninitialised-buffer handler ({reason}). On CPU, "
        "buffers of length max_steps will be zero-filled, so every solve costs time and "
        "memory in proportion to max_steps, not to the steps taken.",
        RuntimeWarning,
    )
    return False


def _allocate(shape: tuple[int, ...], dtype: Any, witness: Array, purpose: str) -> Array:
    """The allocation itself: the FFI call on CPU for buffers of at least
    `SMALL_BUFFER_BYTES`, `jax.lax.empty` (a zero fill on CPU) for smaller ones and
    elsewhere."""

    def on_host(w: Array) -> Array:
        # ``purpose`` keeps XLA from merging two allocations with the same witness into one
        # (which it would then have to copy, touching every slot).
        return jax.ffi.ffi_call(_TARGET, jax.ShapeDtypeStruct(shape, dtype))(w, purpose=purpose)

    def elsewhere(w: Array) -> Array:
        del w
        return jax.lax.empty(shape, dtype)

    if poisoned():
        return _poison(shape, dtype)
    nbytes = math.prod(shape) * jnp.dtype(dtype).itemsize
    if nbytes < SMALL_BUFFER_BYTES or not host_allocation_available():
        return elsewhere(witness)
    hint_if_large(nbytes, purpose)
    return jax.lax.platform_dependent(witness, cpu=on_host, default=elsewhere)


def uninitialised(shape: tuple[int, ...], dtype: Any, witness: Array, purpose: str) -> Array:
    """An array of ``shape`` whose contents are undefined, batched like ``witness``.

    ``witness`` is an array whose value is ignored (and not differentiated); under
    `jax.vmap` the result gains a batch axis exactly when ``witness`` has one.  (A bare
    `jax.lax.empty` is batched by every enclosing `vmap`, witness or not, which would
    make undifferentiated outputs of a forward-mode rule look batched.)  ``purpose``
    names the buffer; buffers allocated with the same witness need distinct purposes.
    Read only the slots you have written.
    """

    @jax.custom_batching.custom_vmap
    def allocate(w: Array) -> Array:
        return _allocate(shape, dtype, w, purpose)

    @allocate.def_vmap
    def _batched(axis_size: int, in_batched: list[bool], w: Array) -> tuple[Array, bool]:
        (batched,) = in_batched
        if batched:
            return uninitialised((axis_size,) + shape, dtype, w, purpose), True
        return allocate(w), False

    return allocate(jax.lax.stop_gradient(witness))
