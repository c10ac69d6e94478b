"""`retain_freed_memory`: applied on glibc, refused with a clear error for bad sizes."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

import jaxadjoint as ja

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


@pytest.mark.parametrize("bad, error, match", [
    (-1, ValueError, r"`pad_bytes` must be in \[0, 2\*\*31\), got -1"),
    (2**31, ValueError, r"`pad_bytes` must be in \[0, 2\*\*31\)"),
    (1.5e8, TypeError, "`pad_bytes` must be an int, got float"),
    (True, TypeError, "`pad_bytes` must be an int, got bool"),
])
def test_bad_sizes_are_refused(bad, error, match):
    with pytest.raises(error, match=match):
        ja.retain_freed_memory(bad)
