"""The README's first command, `python -m jaxadjoint.tour`, runs and verifies itself."""

import subprocess
import sys


def test_tour_runs_and_verifies():
    result = subprocess.run(
        [sys.executable, "-m", "jaxadjoint.tour"], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: every derivative matches the replay to round-off." in result.stdout
    assert "Generalised LV (20 species)" in result.stdout
