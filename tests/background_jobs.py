"""End-to-end checks in their own processes, started when the test session starts.

The tour (`python -m jaxadjoint`) and the notebooks run in subprocesses and share nothing
with the test process.  XLA compiles on one core at a time, so on a 2-core machine they
can run beside the in-process tests instead of after them: `conftest.py` starts the jobs
of the selected tests when collection ends, one background thread runs them one after
another, and each test waits for its job and checks the result.  Nothing about what is
checked changes; only when the work is done.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_JOBS: dict[str, Callable[[], Any]] = {}
_FUTURES: dict[str, Future] = {}
_RUNNING: set[subprocess.Popen] = set()
_LOCK = threading.Lock()
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background-job")


def job(name: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register ``fn`` as the background job ``name`` (a test marks itself
    ``@pytest.mark.background(name)`` and calls `result`)."""

    def register(fn: Callable[[], Any]) -> Callable[[], Any]:
        _JOBS[name] = fn
        return fn

    return register


def start(names: list[str]) -> None:
    """Queue the jobs ``names`` (in this order) that are not queued yet."""
    for name in names:
        if name not in _FUTURES:
            _FUTURES[name] = _POOL.submit(_JOBS[name])


def result(name: str) -> Any:
    """The job's return value (queued now if it was not); re-raises its exception."""
    start([name])
    return _FUTURES[name].result()


def run(args: list[str], timeout: float = 900, **kwargs: Any) -> subprocess.CompletedProcess:
    """`subprocess.run` with text output captured, which `stop` can end."""
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          **kwargs) as process:
        with _LOCK:
            _RUNNING.add(process)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        finally:
            with _LOCK:
                _RUNNING.discard(process)
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def stop() -> None:
    """Drop queued jobs and end running ones (the session is over)."""
    for future in _FUTURES.values():
        future.cancel()
    with _LOCK:
        for process in _RUNNING:
            process.kill()
    _POOL.shutdown(wait=True)
