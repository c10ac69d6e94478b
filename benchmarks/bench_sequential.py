"""Reverse steps of small systems in a branch of their own (`jaxadjoint/_sequential.py`).

XLA's CPU runtime runs a loop body's kernels in order when every buffer they touch is at
most 512 bytes, and as a task graph (atomics, hand-offs to its thread pool) otherwise.  A
reverse sweep's body reads the record (``max_steps`` slots), so it never ran in order;
with the step's arithmetic in a `jax.lax.cond` branch of its own, that branch does when
the system is small.  This benchmark times the same calls built both ways in one process
(``JAXADJOINT_SEQUENTIAL`` is read when a function is traced), interleaved with each
other and with diffrax on the same data:

- `lotka-volterra`: N = 2, Dopri5, rtol = atol = 1e-6 on [0, 10]; gradient of
  ``sum(y(t1)^2)`` and of the squared error at 100 save times, and the forward solve;
- `lotka-volterra-8`: the 100-save loss `jax.vmap`-ed over 8 initial states (the batched
  path: the branch becomes a select there, so this checks that nothing is lost);
- `robertson`: to t = 40 at rtol 1e-8 (atol 1e-12), Rodas5 and Kvaerno5 (diffrax
  Kvaerno5), gradient with respect to the three rates, and the forward solves;
- `van-der-pol`: mu = 1000 on [0, 2] at rtol = atol = 1e-8, Rodas5 and Kvaerno5;
- `glv-1`, `glv-8`, `neural_ode-1`: the time-series workloads of `bench_timeseries.py`,
  whose reverse steps do not fit (a 10 x 10 interaction matrix, an MLP): unchanged.

    python benchmarks/bench_sequential.py                 # writes results/sequential.json
    python benchmarks/bench_sequential.py --workloads robertson --budget 1
    python benchmarks/bench_sequential.py --small-loops --output results/sequential-small-loops.json
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import diffrax
import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import time_interleaved, write_json  # noqa: E402
from bench_many_saves import lotka_volterra  # noqa: E402
from bench_timeseries import operation, problem_case  # noqa: E402

import jaxadjoint as ja  # noqa: E402
from jaxadjoint.problems import van_der_pol_problem  # noqa: E402
from jaxadjoint.problems.robertson import robertson_rhs  # noqa: E402

WORKLOADS = ("lotka-volterra", "lotka-volterra-8", "robertson", "van-der-pol", "glv-1",
             "glv-8", "neural_ode-1")
MODES = ("sequential", "inline")


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """Trace (and compile) with the reverse step in its branch, or inline.  JAX's caches
    are cleared on the way in and out: `ja.solve` is jitted inside, and a trace cached in
    one mode would serve the other."""
    old = os.environ.get("JAXADJOINT_SEQUENTIAL")
    os.environ["JAXADJOINT_SEQUENTIAL"] = "1" if name == "sequential" else "0"
    jax.clear_caches()
    try:
        yield
    finally:
        if old is None:
            del os.environ["JAXADJOINT_SEQUENTIAL"]
        else:
            os.environ["JAXADJOINT_SEQUENTIAL"] = old
        jax.clear_caches()


def compiled(fn: Callable, *args: Any) -> Callable[[], Any]:
    """``fn`` compiled now (under the current mode), as a call without arguments."""
    executable = jax.jit(fn).lower(*args).compile()
    return lambda: executable(*args)


def ours_and_peer(rhs: Callable, y0: Any, args: Any, t1: float, rtol: float, atol: float,
                  solvers: dict, peer: Any, ts: Any = None, max_steps: int = 4096,
                  lanes: int = 0) -> dict:
    """``{(method, operation): call}``: ours in both modes, diffrax once."""
    saveat = None if ts is None else ja.SaveAt(ts=ts)
    target = None if ts is None else jnp.cos(ts)[:, None] + 1.0

    def error(ys):
        return jnp.sum(ys ** 2) if target is None else jnp.sum((ys - target) ** 2)

    def batched(loss):
        if not lanes:
            return loss, y0
        y0s = y0 * jnp.linspace(0.8, 1.2, lanes)[:, None]
        return (lambda a, y0s: jnp.sum(jax.vmap(loss, in_axes=(None, 0))(a, y0s))), y0s

    calls = {}
    for name, solver in solvers.items():
        def loss(a, y0, solver=solver):
            return error(ja.solve(rhs, y0, 0.0, t1, a, solver=solver, saveat=saveat,
                                  rtol=rtol, atol=atol, max_steps=max_steps).ys)
        fn, data = batched(loss)
        for m in MODES:
            with mode(m):
                calls[(f"jaxadjoint {name} {m}", "gradient")] = compiled(
                    jax.grad(fn), args, data)
                calls[(f"jaxadjoint {name} {m}", "forward")] = compiled(fn, args, data)

    def peer_loss(a, y0):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(rhs), peer, 0.0, t1, None, y0, a, max_steps=max_steps,
            saveat=diffrax.SaveAt(t1=True) if ts is None else diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol))
        return error(sol.ys)

    fn, data = batched(peer_loss)
    calls[(f"diffrax {type(peer).__name__}", "gradient")] = compiled(jax.grad(fn), args, data)
    calls[(f"diffrax {type(peer).__name__}", "forward")] = compiled(fn, args, data)
    return calls


def workload_calls(workload: str) -> dict:
    lv = (lotka_volterra, jnp.array([1.0, 1.0]), jnp.array([1.5, 1.0, 3.0, 1.0]), 10.0,
          1e-6, 1e-6, {"Dopri5": ja.Dopri5()}, diffrax.Dopri5())
    ts = jnp.linspace(0.0, 10.0, 100)
    if workload == "lotka-volterra":
        calls = ours_and_peer(*lv)
        calls.update({(m + " 100 saves", op): c for (m, op), c in
                      ours_and_peer(*lv, ts=ts).items()})
        return calls
    if workload == "lotka-volterra-8":
        return ours_and_peer(*lv, ts=ts, lanes=8)
    if workload == "robertson":
        return ours_and_peer(robertson_rhs, jnp.array([1.0, 0.0, 0.0]),
                             jnp.array([0.04, 1e4, 3e7]), 40.0, 1e-8, 1e-12,
                             {"Rodas5": ja.Rodas5(), "Kvaerno5": ja.Kvaerno5()},
                             diffrax.Kvaerno5())
    if workload == "van-der-pol":
        vdp = van_der_pol_problem(1e3, 2.0)
        return ours_and_peer(vdp.rhs, vdp.y0, vdp.args, vdp.t1, 1e-8, 1e-8,
                             {"Rodas5": ja.Rodas5(), "Kvaerno5": ja.Kvaerno5()},
                             diffrax.Kvaerno5(), max_steps=16384)
    kind, batch = workload.rsplit("-", 1)
    with problem_case(kind, int(batch)) as (case, data):
        calls = {}
        for m in MODES:
            with mode(m):
                fn = operation("value_and_grad", "jaxadjoint", case)
                jax.block_until_ready(fn(*data))  # traced and compiled in this mode
                calls[(f"jaxadjoint {m}", "gradient")] = lambda fn=fn: fn(*data)
        fn = operation("value_and_grad", "diffrax", case)
        calls[("diffrax", "gradient")] = lambda fn=fn: fn(*data)
        return calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--budget", type=float, default=3.0,
                        help="seconds of timing per workload")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "sequential.json"))
    parser.add_argument("--small-loops", action="store_true",
                        help="with `ja.compile_small_loops()` (must come before any "
                             "computation: this process has made none yet)")
    options = parser.parse_args(argv)
    if options.small_loops:
        ja.compile_small_loops()
    records = []
    print("| workload | method | operation | sequential (ms) | inline (ms) | sequential / "
          "inline | diffrax (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for workload in options.workloads:
        calls = workload_calls(workload)
        for call in calls.values():
            jax.block_until_ready(call())
        timings = time_interleaved(calls, budget_s=options.budget, min_repeats=7,
                                   max_repeats=41)
        for (method, op), t in timings.items():
            records.append(dict(workload=workload, method=method, operation=op,
                                median_ms=t.median * 1e3, min_ms=t.min * 1e3,
                                max_ms=t.max * 1e3, cpu_median_ms=t.cpu_median * 1e3))
        for (method, op), t in timings.items():
            if not method.endswith(" sequential") and " sequential " not in method:
                continue
            inline = timings[(method.replace("sequential", "inline"), op)]
            peer = [p for (pm, pop), p in timings.items() if pm.startswith("diffrax")
                    and pop == op and (" saves" in pm) == (" saves" in method)]
            peer_ms = f"{peer[0].median * 1e3:.3g}" if peer else ""
            print(f"| {workload} | {method.replace(' sequential', '')} | {op} | "
                  f"{t.median * 1e3:.3g} | {inline.median * 1e3:.3g} | "
                  f"{t.median / inline.median:.2f} | {peer_ms} |", flush=True)
    write_json(options.output, records, benchmark="sequential")


if __name__ == "__main__":
    main()
