"""Strict numerics for every test: float64, and no silent dtype promotion.

Also chooses XLA's CPU code generator for the run (`compile_flags.py`), and starts the
background jobs (`background_jobs.py`) of the selected tests once they are
collected, and ends them with the session.
"""

import gc

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")


def _memory_maps_nearly_exhausted() -> bool:
    """Whether this process holds more than half of Linux's ``vm.max_map_count`` mappings
    (always true where ``/proc`` cannot tell: clear after every module there)."""
    try:
        with open("/proc/sys/vm/max_map_count") as limit_file:
            limit = int(limit_file.read())
        with open("/proc/self/maps") as maps_file:
            count = sum(1 for _ in maps_file)
    except (OSError, ValueError):
        return True
    return count > limit // 2


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop every compiled program when a test module ends and memory maps run short.

    Each XLA CPU executable holds memory mappings (about 80 per program here); one pytest
    process that keeps all ~800 of the suite's programs alive reaches Linux's default
    ``vm.max_map_count`` (65 530), and LLVM then crashes (a segmentation fault inside
    ``backend_compile_and_load``, seen twice at ~87 % of the suite).  Clearing after every
    module cost about two minutes of recompiling small shared programs, so the caches are
    dropped only once the process holds half of the allowed mappings.
    """
    yield
    if not _memory_maps_nearly_exhausted():
        return
    jax.clear_caches()
    gc.collect()
    # Trace counters describe the caches just cleared: a later module starts from zero.
    import sys

    cases = sys.modules.get("solve_cases")
    if cases is not None:
        cases.TRACES.clear()


def pytest_configure(config):
    """Before anything starts XLA: its faster-compiling CPU emitters (`compile_flags.py`),
    unless the run names a module that needs XLA's defaults (it then runs with them)."""
    from pathlib import Path

    import compile_flags

    named = {Path(arg.split("::")[0]).name for arg in config.args}
    if not named & set(compile_flags.DEFAULTS_ONLY):
        compile_flags.use_faster_compiles()
    config.addinivalue_line(
        "markers", "background(*names): checks the results of jobs of tests/background_jobs.py"
    )
    config.addinivalue_line(
        "markers", "clears_jax_caches: calls jax.clear_caches() (runs after the other tests)"
    )


@pytest.hookimpl(trylast=True)  # after `-k` and `-m` have deselected
def pytest_collection_modifyitems(session, config, items):
    """In a full run, the modules that `test_beside_the_suite.py` runs in other processes
    (`MODULES`, and `compile_flags.DEFAULTS_ONLY` with XLA's defaults) are deselected here
    (each test runs once, there).

    Tests that wait for a background job go last, in their order: placed where their module
    sorts, one of them would hold this process idle until its job ends while in-process tests
    are still queued behind it.  Before them go the tests that clear JAX's caches, so that
    the tests after them do not compile again what earlier ones had compiled (with
    `test_sequential.py` last, `test_solve.py` took 11 s instead of 54).
    """
    import os

    import compile_flags
    import test_beside_the_suite as beside

    items.sort(key=lambda item: (item.get_closest_marker("background") is not None,
                                 item.get_closest_marker("clears_jax_caches") is not None))
    if os.environ.get(beside.IN_SECOND_PROCESS):
        return
    if any(item.path.name == "test_beside_the_suite.py" for item in items):
        elsewhere = set(beside.MODULES) | set(compile_flags.DEFAULTS_ONLY)
        moved = [item for item in items if item.path.name in elsewhere]
        if moved:
            items[:] = [item for item in items if item.path.name not in elsewhere]
            config.hook.pytest_deselected(items=moved)
    if compile_flags.in_effect():
        skip = pytest.mark.skip(reason="compares bits of XLA's default CPU code: name its "
                                       "module on the command line, or run the full suite")
        for item in items:
            if item.path.name in compile_flags.DEFAULTS_ONLY:
                item.add_marker(skip)


def pytest_collection_finish(session):
    import background_jobs as background

    names = [name for item in session.items for m in item.iter_markers("background")
             for name in m.args]
    background.start(names)


def pytest_unconfigure(config):
    import background_jobs as background

    background.stop()
