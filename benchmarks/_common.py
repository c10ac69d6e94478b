"""Timing, compile-time and JSON helpers shared by the benchmark scripts.

Generic on purpose: nothing here knows about ODEs. The rules every benchmark follows:

- compile time is measured separately (`compile_jitted`: trace + lower + XLA compile, from
  cold caches) and never included in run times;
- run times are taken after a warm-up call, with `jax.block_until_ready` on every result;
- peers are timed **interleaved** (`time_interleaved`: repeat 1 of every peer, then repeat 2
  of every peer, ...), so that load from other processes on a shared machine hits all of them
  alike; we report the median, min and max over repeats, and compare medians.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class Timing:
    """Time of one call, in seconds, over `repeats` repeats of `number` calls each.

    `median`, `min`, `max` are wall times; `cpu_median` is the median process CPU time (all
    threads), less sensitive than wall time to other processes competing for the cores.
    """

    median: float
    min: float
    max: float
    cpu_median: float
    repeats: int
    number: int


def compile_jitted(fn: Callable, *args: Any, clear_caches: bool = True) -> tuple[Any, float]:
    """`jax.jit(fn).lower(*args).compile()` and its wall time in seconds.

    With `clear_caches` (the default) JAX's tracing and compilation caches are emptied first,
    so the time includes tracing every inner `jit` (e.g. `equinox.filter_jit`) afresh and does
    not depend on what was compiled before. Returns the compiled executable, which is called
    directly by the timing functions (no dispatch-cache lookups).
    """
    if clear_caches:
        jax.clear_caches()
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - start


def memory_bytes(compiled: Any) -> int | None:
    """XLA's static estimate of temporary plus output buffer bytes, or `None` if unavailable."""
    try:
        stats = compiled.memory_analysis()
        return int(stats.temp_size_in_bytes + stats.output_size_in_bytes)
    except Exception:  # noqa: BLE001 - not every backend/version provides it
        return None


def _time_once(fn: Callable[[], Any], number: int) -> tuple[float, float]:
    """(wall, process CPU) seconds per call, over `number` calls."""
    cpu, start = time.process_time(), time.perf_counter()
    for _ in range(number):
        jax.block_until_ready(fn())
    wall = time.perf_counter() - start
    return wall / number, (time.process_time() - cpu) / number


def time_interleaved(
    calls: Mapping[str, Callable[[], Any]],
    *,
    budget_s: float = 1.0,
    min_repeats: int = 3,
    max_repeats: int = 15,
    min_repeat_s: float = 0.01,
) -> dict[str, Timing]:
    """Time zero-argument callables against each other, interleaving their repeats.

    Each callable is first called once as a warm-up (its duration sets `number`, the calls per
    repeat, so that one repeat lasts at least `min_repeat_s` and timer resolution does not
    matter). The repeat count is `budget_s` divided by the time of one round over all
    callables, clipped to `[min_repeats, max_repeats]`; each repeat times one round, peers in
    turn. Every call's result is waited for with `jax.block_until_ready`.
    """
    warm = {name: max(_time_once(fn, 1)[0], 1e-7) for name, fn in calls.items()}
    number = {name: max(1, min(1000, math.ceil(min_repeat_s / t))) for name, t in warm.items()}
    round_s = sum(warm[name] * number[name] for name in calls)
    repeats = int(min(max_repeats, max(min_repeats, budget_s // max(round_s, 1e-9))))
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            samples[name].append(_time_once(fn, number[name]))
    timings = {}
    for name, s in samples.items():
        wall = [w for w, _ in s]
        timings[name] = Timing(
            median=statistics.median(wall), min=min(wall), max=max(wall),
            cpu_median=statistics.median(c for _, c in s), repeats=repeats, number=number[name],
        )
    return timings


def rel_error(value: Any, reference: Any) -> float:
    """`max |value - reference| / max |reference|` over all leaves (a relative max-norm)."""
    x = np.concatenate([np.ravel(np.asarray(v)) for v in jax.tree.leaves(value)])
    r = np.concatenate([np.ravel(np.asarray(v)) for v in jax.tree.leaves(reference)])
    scale = np.max(np.abs(r))
    return float(np.max(np.abs(x - r)) / scale) if scale > 0 else float(np.max(np.abs(x)))


def environment() -> dict[str, Any]:
    """Date, machine and library versions, for the header of a results file."""
    import importlib.metadata as md

    versions = {}
    for package in ("jax", "jaxlib", "equinox", "diffrax", "jaxadjoint", "numpy"):
        try:
            versions[package] = md.version(package)
        except md.PackageNotFoundError:
            versions[package] = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "python": sys.version.split()[0],
        "versions": versions,
        "command": " ".join(sys.argv),
    }


def write_json(path: str, records: Sequence[Mapping[str, Any]], **header: Any) -> None:
    """Write `{"environment": ..., **header, "records": records}` to `path` (dirs created)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    payload = {"environment": environment(), **header, "records": list(records)}
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=_jsonable)
        f.write("\n")


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic | np.ndarray | jax.Array):
        return np.asarray(x).tolist()
    if dataclasses.is_dataclass(x):
        return dataclasses.asdict(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
