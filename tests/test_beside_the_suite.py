"""Whole test modules run in a second pytest process, beside the in-process tests.

XLA compiles on one core at a time and the suite's time is mostly compilation, so on a
2-core machine one pytest process leaves a core idle.  When this module is collected
together with the modules of `MODULES` (a full run), `conftest.py` deselects their tests
from this process and the test below runs them, unchanged, in a background job
(`background_jobs.py`) on the other core; its failure shows their pytest output.  Run
alone (``pytest tests/test_events.py``), a module runs in-process as usual.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import background_jobs as background
import pytest

# Self-contained, compile-heavy modules: with the notebooks and the tour (the other
# background jobs) they take about as long as the rest of the suite in this process.
# (2026-11-27: with the first seven only, the in-process tests took 13 minutes on two cores
# and the background jobs about 6; the last three, about a minute run alone, move work to
# the idle side.  Moving `test_sequential.py` too made the jobs the longer side: the suite
# then waited three minutes for them.)
MODULES = ("test_events.py", "test_stiff_sensitivities.py", "test_rosenbrock.py",
           "test_esdirk.py", "test_sensitivity.py", "test_stiffness.py", "test_trust.py",
           "test_save_cotangents.py", "test_checkpoints.py", "test_reverse_paths.py")
# Set in the second process: it must not delegate again.
IN_SECOND_PROCESS = "JAXADJOINT_TESTS_SECOND_PROCESS"
TESTS = Path(__file__).resolve().parent


@background.job("modules beside the suite")
def _run_modules():
    env = dict(os.environ, **{IN_SECOND_PROCESS: "1"})
    files = [str(TESTS / name) for name in MODULES]
    return background.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *files], timeout=2400, cwd=TESTS.parent, env=env)


@pytest.mark.background("modules beside the suite")
def test_modules_beside_the_suite_pass():
    result = background.result("modules beside the suite")
    output = result.stdout[-20000:] + result.stderr[-5000:]
    assert result.returncode == 0, output
    assert " passed" in result.stdout.splitlines()[-1], output
