"""The uninitialised-buffer handler is used only where it was tested, and the fallback works.

`_uninitialised` reads XLA's FFI call frame by hand, so it registers its handler only on
the jaxlib releases in `TESTED_JAXLIB` (or when ``JAXADJOINT_UNINITIALISED=ffi``); on any
other it warns and zero-fills the ``max_steps``-long buffers.  The fallback is run here
in a fresh process (the choice is made once per process): the same gradients, under
`jax.vmap` too, no FFI call in the compiled program, and the warning.  Both processes are
background jobs (`background_jobs.py`), run beside the in-process tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import background_jobs as background
import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxadjoint as ja
from jaxadjoint import _uninitialised
from jaxadjoint._uninitialised import ENVIRONMENT_VARIABLE, handler_choice

# Gradients through every kind of recorded buffer, printed as JSON: run in a fresh process
# with the handler (``JAXADJOINT_UNINITIALISED=ffi``), in one zero-filled (``=zeros``) and
# in one NaN-filled (``=nan``, what unwritten memory on GPU can hold).
PROGRAM = """
import json, warnings
import jax, jax.numpy as jnp
import jaxadjoint as ja
from jaxadjoint import _uninitialised
jax.config.update("jax_enable_x64", True)

def rhs(t, y, args):
    A, b = args
    return jnp.tanh(A @ y) + b * jnp.cos(t)

def gradient(sensitivity):
    def loss(y0, args):
        sol = ja.solve(rhs, y0, 0.0, 2.0, args, saveat=jnp.array([0.5, 2.0]), rtol=1e-6,
                       atol=1e-6, max_steps=30_000, sensitivity=sensitivity)
        return jnp.sum(sol.ys ** 2)
    return jax.grad(loss, argnums=(0, 1))

A = jnp.array([[-0.5, 0.3, 0.1], [0.2, -0.4, 0.3], [0.1, -0.2, -0.6]])
b = jnp.array([0.1, -0.2, 0.3])
y0s = jnp.array([[0.5, 1.0, -0.7], [0.2, -0.5, 1.0]])
out, hlo = {}, ""
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name, sensitivity, batched in [
            ("StoreStates, vmap", ja.DiscreteAdjoint(), True),
            ("StoreStages", ja.DiscreteAdjoint(checkpoint=ja.StoreStages()), False),
            ("ContinuousAdjoint", ja.ContinuousAdjoint(), False)]:
        grad = gradient(sensitivity)
        grad = jax.vmap(grad, in_axes=(0, None)) if batched else grad
        y0 = y0s if batched else y0s[0]
        compiled = jax.jit(grad).lower(y0, (A, b)).compile()
        hlo += compiled.as_text()
        out[name] = jax.tree.map(lambda x: x.tolist(), compiled(y0, (A, b)))
out["ffi call"] = "jaxadjoint_uninitialised" in hlo
out["handler"] = _uninitialised.host_allocation_available()
out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
print(json.dumps(out))
"""


def _run(mode: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{ENVIRONMENT_VARIABLE: mode})
    return background.run([sys.executable, "-c", PROGRAM], env=env)


for _mode in ("ffi", "zeros", "nan"):
    background.job(f"uninitialised {_mode}")(lambda mode=_mode: _run(mode))


def _output(mode: str) -> dict:
    result = background.result(f"uninitialised {mode}")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_choice_follows_the_tested_versions():
    assert _uninitialised.tested_releases() == ["0.10.0–0.10.2", "0.11.2"]
    for tested in ("0.10.0", "0.10.1", "0.10.2", "0.11.2"):
        assert handler_choice(tested, None) is None
        assert handler_choice(tested, "") is None
        assert handler_choice(tested, "auto") is None
    # Between the ranges, beyond them, and pre-releases and development builds.
    for untested in ("0.4.30", "0.10.3", "0.11.0", "0.11.1", "0.11.3", "1.0.0",
                     "0.11.2.dev20270101", "0.11.2rc1"):
        reason = handler_choice(untested, None)
        assert reason is not None and untested in reason and "=ffi" in reason
        assert "0.10.0–0.10.2, 0.11.2" in reason


def test_choice_can_be_forced():
    assert handler_choice("0.99.0", "ffi") is None
    assert handler_choice("0.10.2", " ZEROS ") == f"{ENVIRONMENT_VARIABLE}=zeros"
    assert handler_choice("0.10.2", "nan") == f"{ENVIRONMENT_VARIABLE}=nan"
    with pytest.raises(ValueError, match=ENVIRONMENT_VARIABLE):
        handler_choice("0.10.2", "uninitialised")


def test_installed_jaxlib_is_tested():
    """The suite runs on a jaxlib the handler was tested on; on a new release, run this file
    and tests/test_cost_follows_steps.py with ``JAXADJOINT_UNINITIALISED=ffi`` and, if they
    pass, add the release to `TESTED_JAXLIB`."""
    import jaxlib

    assert handler_choice(jaxlib.__version__, None) is None, (
        f"jaxlib {jaxlib.__version__} is outside TESTED_JAXLIB: see this test's docstring"
    )


@pytest.mark.background("uninitialised ffi", "uninitialised zeros", "uninitialised nan")
@helpers.requires_cpu
def test_fallback_gives_the_same_gradients_and_warns():
    """The same gradients whatever the unwritten slots hold: the handler's leftovers,
    zeros, or NaN (no result may read a slot the solve did not write)."""
    with_handler = _output("ffi")
    zero_filled = _output("zeros")
    nan_filled = _output("nan")
    assert not nan_filled["ffi call"]
    assert with_handler["handler"] and with_handler["ffi call"]
    assert not with_handler["warnings"]
    assert not zero_filled["handler"] and not zero_filled["ffi call"]
    (message,) = zero_filled["warnings"]
    assert f"{ENVIRONMENT_VARIABLE}=zeros" in message and "zero-filled" in message
    for name, value in with_handler.items():
        if name not in ("ffi call", "handler", "warnings"):
            for other in (zero_filled, nan_filled):
                jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-13, atol=0),
                             value, other[name])


def test_fallback_allocation(monkeypatch):
    """The fallback itself, in this process: `jax.lax.empty`, batched like the witness."""
    monkeypatch.setattr(_uninitialised, "host_allocation_available", lambda: False)
    out = jax.jit(lambda w: _uninitialised.uninitialised((4, 3), jnp.float64, w, "test"))(1.0)
    assert out.shape == (4, 3)
    batched = jax.vmap(lambda w: _uninitialised.uninitialised((4,), jnp.float64, w, "test"))
    assert batched(jnp.ones(5)).shape == (5, 4)
    sol = ja.solve(lambda t, y, k: -k * y, jnp.array([1.0]), 0.0, 1.0, jnp.array(0.5),
                   rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(sol.ys[-1], np.exp(-0.5), rtol=1e-8)
