"""XLA's older CPU code generator for the suite: the same programs, compiled in half the time.

Compilation is most of the suite's time.  XLA on CPU emits each fused kernel through its
MLIR-based fusion emitters by default; with ``--xla_cpu_use_fusion_emitters=false`` it uses
its older elemental emitters, which compile the same HLO in less than half the CPU time
(measured 2026-11-27, jax 0.10.2, CPU seconds: a Dopri5 gradient 4.7 -> 2.1, Vern7 9.4 ->
4.9; the whole suite on 2 cores, split between its processes as it then was, 1423 -> 818 s
of wall time).  The programs it compiles run slower (the neural-ODE benchmark's gradient
1.75x), so it is for the tests only.  Nothing the tests check depends on the emitter except
bits: two different programs doing the same arithmetic can round differently under either
one (`test_bitwise.py` saw 1-ulp differences between checkpoint strategies with the older
emitter), so the bitwise tests run in their own process with XLA's defaults, as users'
programs are compiled (`DEFAULTS_ONLY`).

Set ``JAXADJOINT_TESTS_XLA_DEFAULTS=1`` to run everything with XLA's defaults.  Where this
jaxlib does not know the flag (XLA aborts on unknown flags), the suite keeps the defaults.
jaxlib 0.11.2 is such a release: it no longer has the flag, nor an equivalent one (seen
2026-11-27 on its CPU backend; of the CPU flags it lists, ``--xla_backend_optimization_level=0``
compiled Dopri5, Tsit5 and Vern7 gradients in 0.63-0.72x the CPU time but changed their value at
5e-12, and the others saved at most 10 % on Dopri5 and Tsit5).  There the suite takes about
twice as long (about 24 minutes on 2 cores, as it did before this module).
"""

from __future__ import annotations

import os
import subprocess
import sys

FLAG = "--xla_cpu_use_fusion_emitters=false"
FLAG_NAME = FLAG.split("=")[0]
KEEP_DEFAULTS = "JAXADJOINT_TESTS_XLA_DEFAULTS"
# Modules whose checks are about bits of XLA's default code generation.
DEFAULTS_ONLY = ("test_bitwise.py",)


def _accepted(xla_flags: str) -> bool:
    """Whether a fresh process with ``XLA_FLAGS=xla_flags`` starts XLA's CPU backend."""
    probe = "import jax; jax.numpy.zeros(1, 'float32').block_until_ready()"
    env = dict(os.environ, XLA_FLAGS=xla_flags, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                            timeout=120)
    return result.returncode == 0


def in_effect() -> bool:
    """Whether this process's ``XLA_FLAGS`` hold `FLAG`."""
    return FLAG in os.environ.get("XLA_FLAGS", "").split()


def use_faster_compiles() -> bool:
    """Add `FLAG` to ``XLA_FLAGS`` in this process's environment (inherited by every process
    the suite starts) unless asked not to or already decided; call before XLA starts.
    Whether the flag is in effect."""
    flags = os.environ.get("XLA_FLAGS", "")
    if FLAG_NAME in flags:
        return in_effect()
    if os.environ.get(KEEP_DEFAULTS):
        return False
    candidate = f"{flags} {FLAG}".strip()
    if not _accepted(candidate):
        return False
    os.environ["XLA_FLAGS"] = candidate
    return True


def defaults_environment() -> dict[str, str]:
    """This process's environment with XLA's default CPU emitters (for `DEFAULTS_ONLY`)."""
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                     if not f.startswith(FLAG_NAME))
    env = dict(os.environ, **{KEEP_DEFAULTS: "1"})
    if flags:
        env["XLA_FLAGS"] = flags
    else:
        env.pop("XLA_FLAGS", None)
    return env


def environment_with_only_the_suites_flag() -> dict[str, str]:
    """This process's environment with no ``XLA_FLAGS`` but `FLAG` where it is in effect
    (for a fresh process that sets its own flags)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if in_effect():
        env["XLA_FLAGS"] = FLAG
    return env
