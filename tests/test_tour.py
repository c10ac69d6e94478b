"""The README's first command, `python -m jaxadjoint`, runs the tour, which verifies itself."""

import subprocess
import sys


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=600)


def test_tour_runs_and_verifies():
    result = _run("jaxadjoint")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: every derivative matches the replay to round-off." in result.stdout
    assert "Generalised LV (20 species)" in result.stdout


def test_tour_module_is_the_same_entry_point():
    """`python -m jaxadjoint.tour` (the older spelling) still works; `--help` keeps it cheap."""
    result = _run("jaxadjoint.tour", "--help")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("usage: python -m jaxadjoint.tour")
    assert "A short tour: real sensitivities, verified and timed." in result.stdout
