"""What a hand-off to XLA's CPU thread pool costs, and how often a small gradient pays it.

XLA on CPU runs a compiled computation (the entry, a loop body, a branch) with a
`ThunkExecutor`.  Unless it runs the computation's kernels strictly in order (all of its
buffers at most 512 bytes, at most 8 kernels, or a chain), it keeps a queue of kernels
whose inputs are ready, and it hands work to its thread pool in two cases (jaxlib 0.10.x):

- **a wide queue**: when more than 8 other kernels are ready as it takes the next one
  (`Thunk::ExecuteSession::kSplitThreshold`), it moves the back half of the queue to a
  pool thread;
- **a kernel that may block** (a YNNPACK or XNNPACK fusion, e.g. a small batched matrix
  product in float32) while other kernels are ready.

A pool thread that sleeps must be woken; if the calling thread then runs out of ready
work, the rest of the program continues on the pool thread, and the calling thread, which
waits for the result, must be woken in turn.  On a virtual machine each of those wake-ups
costs tens of microseconds.  This script measures:

1. ``handoff``: ``sum_i W_i @ x`` over ``k`` independent 16 x 16 products, jitted, for
   ``k`` = 6 ... 16.  At ``k <= 9`` the entry never has more than 8 other ready kernels; at
   ``k >= 10`` it hands half of them off once per call.  Reported: time per call and the
   voluntary context switches of XLA's pool threads per call (Linux, from ``/proc``).
2. ``neural_ode``: the time-series benchmark's neural ODE at B = 1 (`bench_timeseries.py`),
   `jax.jit(jax.value_and_grad(loss))` for both libraries, with the same counts.

    python benchmarks/bench_handoffs.py                  # ~1 min; results/handoffs.json
    taskset -c 1 python benchmarks/bench_handoffs.py     # the same on one core

Context switches need Linux's ``/proc/self/task/*/status``; elsewhere they are ``None``.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_timeseries  # noqa: E402
from _common import write_json  # noqa: E402

POOL_THREAD = "XLAEigen"  # the name XLA gives its CPU pool threads (tf_XLAEigen/...)


def pool_switches() -> int | None:
    """Voluntary context switches so far of this process's XLA pool threads (Linux)."""
    total, found = 0, False
    for task in glob.glob("/proc/self/task/*"):
        try:
            with open(task + "/comm") as f:
                if POOL_THREAD not in f.read():
                    continue
            with open(task + "/status") as f:
                status = f.read()
        except OSError:
            continue
        found = True
        total += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return total if found else None


def measure(calls: dict[str, Callable[[], object]], rounds: int, number: int) -> dict:
    """Median and min time per call (interleaved rounds) and pool switches per call."""
    for fn in calls.values():
        for _ in range(20):
            jax.block_until_ready(fn())
    switches = {}
    for name, fn in calls.items():
        before = pool_switches()
        for _ in range(500):
            jax.block_until_ready(fn())
        after = pool_switches()
        switches[name] = None if before is None else (after - before) / 500
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            start = time.perf_counter()
            for _ in range(number):
                jax.block_until_ready(fn())
            times[name].append((time.perf_counter() - start) / number)
    return {name: {"time_median_s": statistics.median(t), "time_min_s": min(t),
                   "pool_switches_per_call": switches[name]} for name, t in times.items()}


def handoff_calls() -> dict[str, Callable[[], object]]:
    weights = [jax.random.normal(jax.random.PRNGKey(i), (16, 16)) for i in range(16)]
    x = jnp.ones(16)
    calls = {}
    for k in (6, 8, 9, 10, 12, 16):
        fn = jax.jit(lambda x, k=k: sum(w @ x for w in weights[:k]))
        calls[f"{k} independent products"] = lambda fn=fn: fn(x)
    return calls


def neural_ode_calls(case: bench_timeseries.Case, data: tuple) -> dict[str, Callable[[], object]]:
    params, static = eqx.partition(data[0], eqx.is_array)
    calls = {}
    for method in bench_timeseries.METHODS:
        solve = bench_timeseries.trajectory(method, case)

        def loss(p, y0s, targets, solve=solve):
            model = eqx.combine(p, static)
            ys, _, _ = jax.vmap(lambda y0: solve(model, y0))(y0s)
            return jnp.mean((ys - targets) ** 2)

        fn = jax.jit(jax.value_and_grad(loss))
        calls[method] = lambda fn=fn: fn(params, data[1], data[2])
    return calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--output", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results", "handoffs.json"))
    options = parser.parse_args(argv)
    records = []
    for name, row in measure(handoff_calls(), options.rounds, 200).items():
        records.append({"workload": "handoff", "case": name, **row})
    with bench_timeseries.problem_case("neural_ode", 1) as (case, data):
        for name, row in measure(neural_ode_calls(case, data), options.rounds, 20).items():
            records.append({"workload": "neural_ode B=1 value_and_grad (jax.jit)", "case": name,
                            **row})
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    write_json(options.output, records, cpu_affinity=affinity)
    print(f"{'workload':42s} {'case':26s} {'median us':>10s} {'min us':>8s} {'switches':>9s}")
    for r in records:
        s = r["pool_switches_per_call"]
        print(f"{r['workload']:42s} {r['case']:26s} {r['time_median_s'] * 1e6:10.1f} "
              f"{r['time_min_s'] * 1e6:8.1f} {'-' if s is None else f'{s:.2f}':>9s}")


if __name__ == "__main__":
    main()
