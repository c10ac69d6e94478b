"""The README's first command, `python -m jaxadjoint`, runs the tour, which verifies itself.

The tour runs in a background job (`background_jobs.py`), beside the in-process tests.
"""

import subprocess
import sys

import background_jobs as background
import pytest


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=600)


@background.job("tour")
def _tour() -> subprocess.CompletedProcess:
    return background.run([sys.executable, "-m", "jaxadjoint"])


@pytest.mark.background("tour")
def test_tour_runs_and_verifies():
    result = background.result("tour")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: every derivative matches the replay to round-off." in result.stdout
    assert "Generalised LV (20 species)" in result.stdout


def test_tour_module_is_the_same_entry_point():
    """`python -m jaxadjoint.tour` (the older spelling) still works; `--help` keeps it cheap."""
    result = _run("jaxadjoint.tour", "--help")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("usage: python -m jaxadjoint.tour")
    assert "A short tour: real sensitivities, verified and timed." in result.stdout
