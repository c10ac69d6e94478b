"""`retain_freed_memory`: applied on glibc, refused with a clear error for bad sizes, and
suggested (once) when a solve's record is large."""

from __future__ import annotations

import platform
import subprocess
import sys
import warnings

import helpers
import jax
import jax.numpy as jnp
import pytest

import jaxadjoint as ja
from jaxadjoint import _allocator, _uninitialised

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="the setting exists in glibc only")
def test_applied_on_glibc():
    """In a process of its own: the setting is global to the process (and glibc stops
    adapting its other thresholds once it is made), so the suite's process keeps its own."""
    code = ("import jaxadjoint as ja; "
            "print(ja.retain_freed_memory(), ja.retain_freed_memory(2**20))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.split() == ["True", "True"]


_FAULTS_PER_CALL = """
import resource, sys
import equinox as eqx, jax, jax.numpy as jnp
import jaxadjoint as ja

mlp = eqx.nn.MLP(32, 32, 128, 2, activation=jnp.tanh, key=jax.random.PRNGKey(0))
params, static = eqx.partition(mlp, eqx.is_array)

def loss(params, y0s):
    field = eqx.combine(params, static)
    def one(y0):
        return jnp.sum(ja.solve(lambda t, y, args: field(y), y0, 0.0, 1.0).ys ** 2)
    return jnp.sum(jax.vmap(one)(y0s))

gradient = jax.jit(jax.grad(loss))
y0s = jnp.ones((64, 32)) * jnp.linspace(0.5, 1.0, 64)[:, None]
jax.block_until_ready(gradient(params, y0s))
if sys.argv[1] == "retain":
    assert ja.retain_freed_memory()
for _ in range(3):
    jax.block_until_ready(gradient(params, y0s))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    jax.block_until_ready(gradient(params, y0s))
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


def _faults_per_call(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", _FAULTS_PER_CALL, mode], capture_output=True,
                         text=True, check=True, timeout=300)
    return float(out.stdout.split()[-1])


@pytest.mark.skipif(not GLIBC, reason="the setting exists in glibc only")
@helpers.requires_cpu
def test_freed_memory_is_reused_even_when_set_after_the_first_call():
    """A batched gradient whose temporaries exceed glibc's 32 MiB reuse threshold (64 lanes,
    `max_steps` 4096: the record alone is 33.5 MB) faults in ~2 200 fresh pages on every call
    by default.  With the setting made only after the first call, as a user may, most pages
    are reused.  (The earlier setting, ``M_TOP_PAD`` alone, left it at ~2 200 that way.)"""
    default = _faults_per_call("default")
    retained = _faults_per_call("retain")
    assert default > 500
    # 0-130 on a quiet machine, up to ~450 beside other work; the old setting: ~all.
    assert retained < 0.5 * default, (retained, default)


@pytest.mark.parametrize("bad, error, match", [
    (-1, ValueError, r"`pad_bytes` must be in \[0, 2\*\*31\), got -1"),
    (2**31, ValueError, r"`pad_bytes` must be in \[0, 2\*\*31\)"),
    (1.5e8, TypeError, "`pad_bytes` must be an int, got float"),
    (True, TypeError, "`pad_bytes` must be an int, got bool"),
])
def test_bad_sizes_are_refused(bad, error, match):
    with pytest.raises(error, match=match):
        ja.retain_freed_memory(bad)


def _trace_gradient_of_a_large_solve():
    """Traces (does not compile) a gradient whose record is 4096 x 1024 float64: 32 MiB."""

    def loss(y0):
        return jnp.sum(ja.solve(lambda t, y, args: -y, y0, 0.0, 1.0, max_steps=4096).ys)

    jax.make_jaxpr(jax.grad(loss))(jnp.ones(1024))


@pytest.mark.parametrize("retained", [False, True])
def test_a_large_record_suggests_the_setting_once(monkeypatch, retained):
    """`hint_if_large`: a record of 32 MiB or more on CPU with glibc warns once per process,
    naming `retain_freed_memory`; not after the setting was made."""
    if not (GLIBC and helpers.ON_CPU and _uninitialised.host_allocation_available()):
        pytest.skip("the hint is for glibc and the CPU allocation handler")
    monkeypatch.setattr(_allocator, "_state", {"retained": retained, "hinted": False})
    monkeypatch.delenv("MALLOC_TOP_PAD_", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trace_gradient_of_a_large_solve()
        _trace_gradient_of_a_large_solve()
    hints = [str(w.message) for w in caught if "retain_freed_memory" in str(w.message)]
    if retained:
        assert hints == []
    else:
        assert len(hints) == 1
        assert "buffer of 32 MiB" in hints[0] and "lower max_steps" in hints[0]
