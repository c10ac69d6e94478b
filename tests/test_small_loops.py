"""`compile_small_loops`: the XLA flag that compiles small loops into one kernel, set before
JAX starts (and refused after), merged with other flags; with it, a small solve's loops,
stiff ones included, become single kernels and give the same gradients."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import compile_flags
import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_dense_output import THETA, Y0, lotka_volterra

import jaxadjoint as ja
from jaxadjoint import _small_loops
from jaxadjoint.problems.robertson import robertson_rhs

FLAG = "xla_cpu_small_while_loop_byte_threshold"


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-5, ValueError), (1.5, TypeError),
                                        (True, TypeError)])
def test_bad_sizes_are_refused(bad, error):
    with pytest.raises(error, match="`max_bytes`"):
        ja.compile_small_loops(bad)


def test_refused_once_jax_has_started(monkeypatch):
    jax.devices()
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    with pytest.raises(RuntimeError, match="before JAX's first computation"):
        ja.compile_small_loops()
    assert not _small_loops.small_loops_compiled()


def test_merged_with_other_flags_and_an_existing_threshold_kept(monkeypatch):
    monkeypatch.setattr(_small_loops, "_backends_started", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false "
                       "--xla_backend_extra_options=some_option=1")
    assert ja.compile_small_loops(4096)
    assert os.environ["XLA_FLAGS"] == (
        "--xla_cpu_enable_fast_math=false "
        f"--xla_backend_extra_options=some_option=1,{FLAG}=4096")
    assert _small_loops.small_loops_compiled()
    assert ja.compile_small_loops(2**20)  # a threshold is there already: kept
    assert os.environ["XLA_FLAGS"].endswith(f"{FLAG}=4096")
    monkeypatch.setenv("XLA_FLAGS", "")
    assert ja.compile_small_loops()
    assert os.environ["XLA_FLAGS"] == f"--xla_backend_extra_options={FLAG}={2**20}"
    monkeypatch.setenv("XLA_FLAGS", f"--xla_backend_extra_options={FLAG}=1024")
    assert not _small_loops.small_loops_compiled()  # XLA's default: nothing larger


RATES = jnp.array([0.04, 1e4, 3e7])
_CASES = {
    "Dopri5": (lotka_volterra, Y0, THETA, 10.0, 1e-6, 1e-6),
    "Rodas5": (robertson_rhs, jnp.array([1.0, 0.0, 0.0]), RATES, 40.0, 1e-6, 1e-10),
    "Kvaerno5": (robertson_rhs, jnp.array([1.0, 0.0, 0.0]), RATES, 40.0, 1e-6, 1e-10),
}


def _gradient(name):
    rhs, y0, args, t1, rtol, atol = _CASES[name]
    solver = getattr(ja, name)()

    def loss(args):
        return jnp.sum(ja.solve(rhs, y0, 0.0, t1, args, solver=solver, rtol=rtol,
                                atol=atol).ys ** 2)

    return jax.jit(jax.grad(loss)), args


_IN_A_FRESH_PROCESS = """
import json, sys
import jaxadjoint as ja
assert ja.compile_small_loops()
import jax
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, sys.argv[1])
from test_small_loops import _gradient
out = {}
for name in ("Dopri5", "Rodas5", "Kvaerno5"):
    gradient, args = _gradient(name)
    text = gradient.lower(args).compile().as_text()
    out[name] = dict(gradient=[float(x) for x in gradient(args)],
                     single_kernels=text.count('xla_cpu_small_call="true"'),
                     lapack="lapack" in text)
# The unrolled arithmetic against the replays, with the suite's own checks (they assert).
jax.config.update("jax_numpy_dtype_promotion", "strict")
import test_esdirk, test_rosenbrock
test_rosenbrock.test_gradient_is_the_replays("vdp-mu1e3")  # Rodas5
test_esdirk.test_gradient_is_the_converged_replays("robertson")
out["replays"] = "checked"
print(json.dumps(out))
"""


@helpers.requires_cpu
def test_small_solves_compile_into_single_kernels_with_the_same_gradients():
    """In a fresh process (the flag is read when JAX starts): the forward loop and the reverse
    sweep of an explicit, a Rosenbrock and an ESDIRK solve of a tiny system are compiled as
    single kernels, with no LAPACK call left (the stiff solvers factorise in unrolled
    arithmetic); the gradients match this process's, computed with the library calls, to
    round-off.  There too, a Rodas5 (Van der Pol) and a Kvaerno5 (Robertson) gradient of the
    stiff tests are checked against `jax.grad` of their replays on the recorded grid, with
    those tests' own bounds (1e-12; Kvaerno5 with tight Newton, 1e-11)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", _IN_A_FRESH_PROCESS, here],
                         capture_output=True, text=True, timeout=600,
                         env=compile_flags.environment_with_only_the_suites_flag())
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.splitlines()[-1])
    assert results.pop("replays") == "checked"
    for name, result in results.items():
        gradient, args = _gradient(name)
        assert result["single_kernels"] >= 2, name  # forward loop and reverse sweep
        assert not result["lapack"], name
        np.testing.assert_allclose(result["gradient"], gradient(args), rtol=1e-9,
                                   err_msg=name)
