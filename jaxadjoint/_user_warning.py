"""Warnings attributed to the user's line, not to the library or the JAX machinery.

A warning raised while `solve` is traced sits under frames of jaxadjoint, equinox's
`filter_jit` and JAX; a fixed ``stacklevel`` pointed into those (every warning of `solve`
said ``equinox/_jit.py:55``), which made its location useless and
``warnings.filterwarnings(module=...)`` impossible.  `warn` counts the frames to the first
one outside them.
"""

from __future__ import annotations

import os
import sys
import warnings

import equinox
import jax

_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(module.__file__)) + os.sep
    for module in (sys.modules[__package__], jax, equinox)
)
_PLUMBING = (os.sep + "contextlib.py", os.sep + "functools.py")


def _outside(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not path.startswith(_LIBRARY_DIRS) and not path.endswith(_PLUMBING)


def warn(message: str, category: type[Warning] = UserWarning, every_trace: bool = False
         ) -> None:
    """`warnings.warn` at the innermost caller outside jaxadjoint, JAX and equinox.

    Python shows a warning once per line by default.  With ``every_trace`` it is shown
    each time this runs (each time a solve is traced: another solver, other static
    options, a new ``rhs``), for warnings about a derivative that is silently wrong: a
    notebook that took one gradient and then another from the same line saw the warning
    only for the first (a battery modeller's test, 2026-11-29).  Filters still apply
    (``"ignore"`` silences it).
    """
    frame = sys._getframe(1)
    level = 2
    while frame is not None and not _outside(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    if every_trace and frame is not None:
        # No registry: nothing remembers that this line has warned before.
        warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                               module=frame.f_globals.get("__name__"), registry=None,
                               module_globals=frame.f_globals)
        return
    warnings.warn(message, category, stacklevel=level if frame is not None else 2)
