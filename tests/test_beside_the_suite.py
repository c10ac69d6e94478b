"""Whole test modules run in other pytest processes, beside the in-process tests.

The suite's time is mostly compilation: Python tracing, on one core, and XLA's compiler, on
about one and a half (CPU time over wall time of a Dopri5 gradient's compilation: 1.45 with
the suite's emitters, 1.67 with XLA's defaults; 2026-11-27), so on a 2-core machine one
pytest process leaves much of a core idle.  When this module is collected
together with the modules of `MODULES` (a full run), `conftest.py` deselects their tests
from this process and the test below runs them, unchanged, in a background job
(`background_jobs.py`) on the other core; its failure shows their pytest output.  The
modules of `compile_flags.DEFAULTS_ONLY` run the same way in a third process, with XLA's
default CPU emitters.  Run alone (``pytest tests/test_events.py``), a module runs in-process
as usual.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import background_jobs as background
import compile_flags
import pytest

# Self-contained, compile-heavy modules: with the notebooks, the tour and the modules of
# `compile_flags.DEFAULTS_ONLY` (the other background jobs) they take about as long as the
# rest of the suite in this process.  Rebalance when either side finishes long before the
# other (the last waits of a `--durations` run show it).
MODULES = ("test_events.py", "test_stiff_sensitivities.py", "test_rosenbrock.py",
           "test_esdirk.py", "test_stiffness.py", "test_save_cotangents.py")
# Set in the second process: it must not delegate again.
IN_SECOND_PROCESS = "JAXADJOINT_TESTS_SECOND_PROCESS"
TESTS = Path(__file__).resolve().parent


def _pytest_process(modules: tuple[str, ...], env: dict[str, str]):
    """``pytest`` on ``modules`` in a fresh process with ``env`` (told not to delegate)."""
    files = [str(TESTS / name) for name in modules]
    return background.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *files], timeout=2400, cwd=TESTS.parent,
                          env=dict(env, **{IN_SECOND_PROCESS: "1"}))


@background.job("modules beside the suite")
def _run_modules():
    return _pytest_process(MODULES, dict(os.environ))


@background.job("modules with XLA's defaults")
def _run_modules_with_defaults():
    """`compile_flags.DEFAULTS_ONLY`: their own process, with XLA's default CPU emitters."""
    return _pytest_process(compile_flags.DEFAULTS_ONLY, compile_flags.defaults_environment())


def _check(result) -> None:
    output = result.stdout[-20000:] + result.stderr[-5000:]
    assert result.returncode == 0, output
    assert " passed" in result.stdout.splitlines()[-1], output


@pytest.mark.background("modules beside the suite")
def test_modules_beside_the_suite_pass():
    _check(background.result("modules beside the suite"))


@pytest.mark.background("modules with XLA's defaults")
def test_modules_with_xlas_defaults_pass():
    _check(background.result("modules with XLA's defaults"))
