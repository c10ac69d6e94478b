"""Small loops as single kernels: the same workloads with and without `ja.compile_small_loops()`.

XLA's CPU runtime dispatches each kernel of a `while_loop` body on every iteration; a solve
of a small system is mostly that dispatch.  `ja.compile_small_loops()` raises XLA's
`xla_cpu_small_while_loop_byte_threshold` (1 KB -> 1 MiB) so that loops whose buffers fit
are compiled into one kernel each (`jaxadjoint/_small_loops.py`).  The flag is read when JAX
starts, so each setting runs in a process of its own: `--rounds` times each, alternating.
Within a process both libraries are timed interleaved, on the same data.

Workloads (forward solve and gradient, jaxadjoint and diffrax):

- `lotka-volterra`: N = 2, Dopri5, rtol = atol = 1e-6 on [0, 10], `y(t1)`, gradient with
  respect to the four rates (float64);
- `robertson`: Robertson's kinetics to t = 40 at rtol 1e-8 (atol 1e-12), gradient with
  respect to the three rates (float64): ours with Rodas5 and Kvaerno5, diffrax's Kvaerno5;
- `van-der-pol`: mu = 1000 on [0, 2] (one relaxation jump) at rtol = atol = 1e-8, gradient
  with respect to mu, the same solvers, `max_steps` 16 384 for both (diffrax needs ~4 000);
- `neural_ode` B = 1 and 32, `glv` B = 1 and 8, `heat` B = 8: the time-series workloads of
  `bench_timeseries.py` (`value_and_grad` of the batch loss through `equinox.filter_jit`);
- `stiff-sweep` (only when named): ours alone, Rodas5 and Kvaerno5 on Robertson and Van der
  Pol at rtol 1e-5 ... 1e-11 (a traced argument: one compilation per solver), `max_steps`
  16 384, for the gradient's cost in forward solves.

    python benchmarks/bench_small_loops.py            # ~6 min; writes results/small-loops.json
    python benchmarks/bench_small_loops.py --rounds 1 --workloads robertson lotka-volterra
    python benchmarks/bench_small_loops.py --workloads stiff-sweep \
        --output benchmarks/results/small-loops-stiff-sweep.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("lotka-volterra", "robertson", "van-der-pol", "neural_ode-1", "neural_ode-32",
             "glv-1", "glv-8", "heat-8", "stiff-sweep")
# Not run by default: `--workloads stiff-sweep`.
DEFAULT_WORKLOADS = WORKLOADS[:-1]
SWEEP_RTOLS = (1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11)
MODES = ("default", "small-loops")


def _child(mode: str, workloads: list[str], budget: float, output: str) -> None:
    """One process, one setting: time every workload's calls, both libraries interleaved."""
    import jaxadjoint as ja

    if mode == "small-loops":
        ja.compile_small_loops()  # before JAX's first computation
    import diffrax
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, HERE)
    from _common import time_interleaved
    from bench_timeseries import operation, precision, problem_case

    from jaxadjoint.problems import robertson_problem, van_der_pol_problem
    from jaxadjoint.problems.robertson import robertson_rhs

    def single(rhs: Callable, y0: Any, args: Any, t1: float, rtol: float, atol: float,
               ours: dict, peer: Any, max_steps: int = 4096) -> dict:
        """Forward `y(t1)` and gradient of `sum(y(t1)^2)` for each solver."""
        calls = {}
        for name, solver in ours.items():
            def loss(a, solver=solver):
                return jnp.sum(ja.solve(rhs, y0, 0.0, t1, a, solver=solver, rtol=rtol,
                                        atol=atol, max_steps=max_steps).ys ** 2)
            calls[(f"jaxadjoint {name}", "forward")] = jax.jit(loss)
            calls[(f"jaxadjoint {name}", "gradient")] = jax.jit(jax.grad(loss))

        def peer_loss(a):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(rhs), peer, 0.0, t1, None, y0, a, max_steps=max_steps,
                stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol))
            return jnp.sum(sol.ys ** 2)

        calls[(f"diffrax {type(peer).__name__}", "forward")] = jax.jit(peer_loss)
        calls[(f"diffrax {type(peer).__name__}", "gradient")] = jax.jit(jax.grad(peer_loss))
        return {key: (lambda f=f: f(args)) for key, f in calls.items()}

    def lotka_volterra(t, y, args):
        a, b, c, d = args
        return jnp.stack([a * y[0] - b * y[0] * y[1], d * y[0] * y[1] - c * y[1]])

    records = []
    for workload in workloads:
        if workload == "lotka-volterra":
            with precision("float64"):
                calls = single(lotka_volterra, jnp.array([1.0, 1.0]),
                               jnp.array([1.5, 1.0, 3.0, 1.0]), 10.0, 1e-6, 1e-6,
                               {"Dopri5": ja.Dopri5()}, diffrax.Dopri5())
                timings = _time(calls, budget, time_interleaved)
        elif workload == "robertson":
            with precision("float64"):
                calls = single(robertson_rhs, jnp.array([1.0, 0.0, 0.0]),
                               jnp.array([0.04, 1e4, 3e7]), 40.0, 1e-8, 1e-12,
                               {"Rodas5": ja.Rodas5(), "Kvaerno5": ja.Kvaerno5()},
                               diffrax.Kvaerno5())
                timings = _time(calls, budget, time_interleaved)
        elif workload == "stiff-sweep":
            with precision("float64"):
                timings = {}
                for prob, atol_factor in ((robertson_problem(40.0), 1e-4),
                                          (van_der_pol_problem(1e3, 2.0), 1.0)):
                    for name in ("Rodas5", "Kvaerno5"):
                        def loss(a, rtol, prob=prob, solver=getattr(ja, name)(),
                                 atol_factor=atol_factor):
                            return jnp.sum(ja.solve(
                                prob.rhs, prob.y0, 0.0, prob.t1, a, solver=solver, rtol=rtol,
                                atol=atol_factor * rtol, max_steps=16384).ys ** 2)
                        forward, gradient = jax.jit(loss), jax.jit(jax.grad(loss))
                        for rtol in SWEEP_RTOLS:
                            r = jnp.asarray(rtol)
                            label = f"jaxadjoint {name} {prob.name} rtol={rtol:g}"
                            timings.update(_time(
                                {(label, "forward"): lambda r=r, f=forward, p=prob: f(p.args, r),
                                 (label, "gradient"): lambda r=r, g=gradient, p=prob: g(p.args, r)},
                                budget / 7, time_interleaved))
        elif workload == "van-der-pol":
            with precision("float64"):
                vdp = van_der_pol_problem(1e3, 2.0)
                calls = single(vdp.rhs, vdp.y0, vdp.args, vdp.t1, 1e-8, 1e-8,
                               {"Rodas5": ja.Rodas5(), "Kvaerno5": ja.Kvaerno5()},
                               diffrax.Kvaerno5(), max_steps=16384)
                timings = _time(calls, budget, time_interleaved)
        else:
            kind, batch = workload.rsplit("-", 1)
            with problem_case(kind, int(batch)) as (case, data):
                calls = {}
                for method in ("jaxadjoint", "diffrax"):
                    for op, label in (("value_and_grad", "gradient"), ("forward", "forward")):
                        fn = operation(op, method, case)
                        calls[(method, label)] = lambda fn=fn: fn(*data)
                timings = _time(calls, budget, time_interleaved)
        for (method, op), seconds in timings.items():
            records.append(dict(workload=workload, method=method, operation=op, mode=mode,
                                time_median_s=seconds))
        print(f"  {mode:11s} {workload}", flush=True)
    with open(output, "w") as f:
        json.dump(records, f)


def _time(calls: dict, budget: float, time_interleaved: Callable) -> dict:
    import jax

    for call in calls.values():
        jax.block_until_ready(call())
    timings = time_interleaved(calls, budget_s=budget, min_repeats=7, max_repeats=41)
    return {key: t.median for key, t in timings.items()}


def summarise(records: list[dict]) -> list[dict]:
    """Per workload, method and operation: the median over rounds of each setting's time,
    the ratio small-loops / default, and ours / diffrax's in each setting."""
    rows: dict[tuple, dict] = {}
    for r in records:
        key = (r["workload"], r["method"], r["operation"])
        rows.setdefault(key, {m: [] for m in MODES})[r["mode"]].append(r["time_median_s"])
    out = []
    for (workload, method, op), times in rows.items():
        med = {m: statistics.median(v) for m, v in times.items() if v}
        out.append(dict(workload=workload, method=method, operation=op,
                        default_ms=med["default"] * 1e3, small_loops_ms=med["small-loops"] * 1e3,
                        ratio=med["small-loops"] / med["default"],
                        rounds={m: [t * 1e3 for t in v] for m, v in times.items()}))
    for row in out:
        peers = [p for p in out if p["workload"] == row["workload"]
                 and p["operation"] == row["operation"] and p["method"].startswith("diffrax")]
        if row["method"].startswith("jaxadjoint") and peers:
            peer = peers[0]
            row["vs_diffrax_default"] = row["default_ms"] / peer["default_ms"]
            row["vs_diffrax_small_loops"] = row["small_loops_ms"] / peer["small_loops_ms"]
    return out


def print_table(rows: list[dict]) -> None:
    print("| workload | method | operation | default (ms) | small loops (ms) | small / default "
          "| ours / diffrax, default | ours / diffrax, small loops |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        versus = (f"{r['vs_diffrax_default']:.2f} | {r['vs_diffrax_small_loops']:.2f}"
                  if "vs_diffrax_default" in r else " | ")
        print(f"| {r['workload']} | {r['method']} | {r['operation']} | {r['default_ms']:.3g} | "
              f"{r['small_loops_ms']:.3g} | {r['ratio']:.2f} | {versus} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS,
                        default=list(DEFAULT_WORKLOADS))
    parser.add_argument("--rounds", type=int, default=2,
                        help="processes per setting, alternating")
    parser.add_argument("--budget", type=float, default=2.0,
                        help="seconds of timing per workload and process")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "small-loops.json"))
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--child-output", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        _child(options.child, options.workloads, options.budget, options.child_output)
        return
    sys.path.insert(0, HERE)
    from _common import write_json

    start = time.perf_counter()
    records = []
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    for round_ in range(options.rounds):
        for mode in MODES:
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
                path = tmp.name
            print(f"[{time.perf_counter() - start:6.1f} s] round {round_ + 1}, {mode}",
                  flush=True)
            subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode,
                            "--child-output", path, "--budget", str(options.budget),
                            "--workloads", *options.workloads], check=True, env=env)
            with open(path) as f:
                records += [dict(r, round=round_) for r in json.load(f)]
            os.unlink(path)
    rows = summarise(records)
    write_json(options.output, records, summary=rows, options=vars(options),
               flag="--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold="
                    "1048576 (ja.compile_small_loops())")
    print_table(rows)
    print(f"[{time.perf_counter() - start:6.1f} s] done; results in {options.output}")


if __name__ == "__main__":
    main()
