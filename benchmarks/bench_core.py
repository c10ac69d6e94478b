"""Core benchmark: forward solve, gradient and full Jacobian, jaxadjoint against diffrax.

Measured in one run, on the same problem data, for each problem, size and tolerance:

- `forward`:  `x(t1)` (plus step statistics);
- `gradient`: `grad` of the scalar loss `L = 0.5 * sum(x(t1)^2)` with respect to the
  parameters `args`;
- `jacobian`: `jax.jacrev` of `x(t1)` with respect to `args` (the full `dx(t1)/dp`);

for three methods:

- `jaxadjoint`:   `jaxadjoint.solve` (default `DiscreteAdjoint()`, `IController`);
- `diffrax`:      `diffrax.diffeqsolve` with `RecursiveCheckpointAdjoint()` (its default);
- `diffrax-full`: `RecursiveCheckpointAdjoint(checkpoints=max_steps)` (a checkpoint per step,
  no recomputation; the fastest diffrax setting when memory allows).

Both libraries use Dopri5, an I controller (`jaxadjoint.IController()` / diffrax
`PIDController(rtol, atol)`, both: RMS norm of `err / (atol + rtol max(|y|, |y_new|))`,
safety 0.9, step factor clipped to [0.2, 10], exponent 1/5), `max_steps = 4096`, float64,
`rtol = atol = tol`. Every function is `jax.jit`-compiled with the data and the tolerance as
*arguments* (one compilation serves all tolerances; nothing is constant-folded); compile time
(trace + lower + compile, cold caches) is measured apart and run times are medians of
interleaved repeats after a warm-up.

Errors are relative max-norm errors against a tight reference, jaxadjoint at
`rtol = atol = 1e-13` (`max_steps = 65536`), cross-checked against diffrax at the same
tolerance. The `max_steps` study re-times forward and gradient of jaxadjoint and of diffrax
(default adjoint) with `max_steps = 65536`: the solve takes exactly the same steps, so any
difference is the cost of the larger buffers.

Run `python benchmarks/bench_core.py --help`; results go to `benchmarks/results/core.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxadjoint as ja  # noqa: E402
from jaxadjoint.problems import (  # noqa: E402
    ODEProblem,
    brusselator_problem,
    glv_problem,
    van_der_pol_problem,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    compile_jitted,
    memory_bytes,
    rel_error,
    time_interleaved,
    write_json,
)

MAX_STEPS = 4096
BIG_MAX_STEPS = 65536
REFERENCE_TOL = 1e-13
METHODS = ("jaxadjoint", "diffrax", "diffrax-full")
OPERATIONS = ("forward", "gradient", "jacobian")
METHOD_NOTES = {
    "jaxadjoint": "jaxadjoint.solve(..., solver=Dopri5(), controller=IController(), "
    "sensitivity=DiscreteAdjoint())",
    "diffrax": "diffrax.diffeqsolve(..., Dopri5(), PIDController(rtol, atol), "
    "adjoint=RecursiveCheckpointAdjoint())",
    "diffrax-full": "diffrax.diffeqsolve(..., Dopri5(), PIDController(rtol, atol), "
    "adjoint=RecursiveCheckpointAdjoint(checkpoints=max_steps))",
}
# Targets: ratio of jaxadjoint to the faster diffrax configuration (median against median).
GRADIENT_TARGET = {"glv": 0.5, "vdp": 0.2, "brusselator": 0.2}
JACOBIAN_TARGET = 0.4
GRADIENT_OVER_FORWARD_TARGET = 4.0
COMPILE_TARGET = 0.5
MAX_STEPS_TARGET = 0.10


# --- problems -------------------------------------------------------------------------------


def make_problem(kind: str, size: int) -> ODEProblem:
    """The benchmark problem `kind` ("glv", "vdp", "brusselator") of the given size."""
    if kind == "glv":
        return glv_problem(size, seed=0, t1=10.0)
    if kind == "vdp":
        return van_der_pol_problem(mu=10.0, t1=5.0)
    if kind == "brusselator":
        return brusselator_problem(size, t1=20.0)
    raise ValueError(f"unknown problem {kind!r}")


# --- the functions being timed ----------------------------------------------------------------


def final_state(method: str, problem: ODEProblem, max_steps: int) -> Callable:
    """`(y0, args, tol) -> (x(t1), accepted steps, attempted steps)` for one method."""
    if method == "jaxadjoint":

        def solve(y0, args, tol):
            sol = ja.solve(
                problem.rhs, y0, problem.t0, problem.t1, args, solver=ja.Dopri5(),
                controller=ja.IController(), rtol=tol, atol=tol, max_steps=max_steps,
            )
            return sol.ys[-1], sol.stats["num_accepted_steps"], sol.stats["num_steps"]

        return solve

    if method == "diffrax":
        adjoint = diffrax.RecursiveCheckpointAdjoint()
    elif method == "diffrax-full":
        adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=max_steps)
    else:
        raise ValueError(f"unknown method {method!r}")
    term = diffrax.ODETerm(problem.rhs)

    def solve(y0, args, tol):
        sol = diffrax.diffeqsolve(
            term, diffrax.Dopri5(), problem.t0, problem.t1, None, y0, args,
            stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
            max_steps=max_steps, adjoint=adjoint,
        )
        return sol.ys[-1], sol.stats["num_accepted_steps"], sol.stats["num_steps"]

    return solve


def operation(op: str, method: str, problem: ODEProblem, max_steps: int) -> Callable:
    """The function `(y0, args, tol) -> result` timed for operation `op`."""
    solve = final_state(method, problem, max_steps)
    if op == "forward":
        return solve

    def x1(args, y0, tol):
        return solve(y0, args, tol)[0]

    if op == "gradient":

        def gradient(y0, args, tol):
            return jax.grad(lambda a: 0.5 * jnp.sum(x1(a, y0, tol) ** 2))(args)

        return gradient
    if op == "jacobian":
        return lambda y0, args, tol: jax.jacrev(x1)(args, y0, tol)
    raise ValueError(f"unknown operation {op!r}")


# --- one problem ------------------------------------------------------------------------------

# (method, operation, max_steps) of the compiled functions: the timed ones, those of the
# `max_steps` study, and the tight references (jaxadjoint, cross-checked by diffrax).
MAIN = [(m, op, MAX_STEPS) for m in METHODS for op in OPERATIONS
        if (m, op) != ("diffrax-full", "forward")]
# The study functions double as the references; the reference Jacobian reuses the
# `max_steps = 4096` one when the tight solve fits in it.
STUDY = [(m, op, BIG_MAX_STEPS) for m in ("jaxadjoint", "diffrax") for op in ("forward",
                                                                               "gradient")]


def bench_problem(
    kind: str, size: int, tols: list[float], options: argparse.Namespace, log: Callable
) -> tuple[list[dict], dict]:
    """All measurements for one problem and size: (records, reference summary)."""
    problem = make_problem(kind, size)
    y0, args = problem.y0, problem.args
    tol_array = lambda tol: jnp.asarray(tol, dtype=jnp.float64)  # noqa: E731
    timed = MAIN + (STUDY if options.max_steps_study else [])
    compiled: dict[tuple, Any] = {}
    compile_s: dict[tuple, tuple[float, float]] = {}
    memory: dict[tuple, int | None] = {}

    def build(key):
        method, op, max_steps = key
        fn = operation(op, method, problem, max_steps)
        cpu = time.process_time()
        compiled[key], wall = compile_jitted(fn, y0, args, tol_array(tols[0]))
        compile_s[key] = (wall, time.process_time() - cpu)
        memory[key] = memory_bytes(compiled[key])
        log(f"  compiled {method:13s} {op:9s} max_steps={max_steps:<6d} "
            f"wall {compile_s[key][0]:6.2f} s, cpu {compile_s[key][1]:6.2f} s")

    for key in MAIN + STUDY:
        build(key)

    # Tight references: jaxadjoint at 1e-13, cross-checked with diffrax at 1e-13.
    tight = tol_array(REFERENCE_TOL)
    ref_x1, ref_acc, ref_steps = compiled[("jaxadjoint", "forward", BIG_MAX_STEPS)](y0, args, tight)
    jacobian_key = ("jaxadjoint", "jacobian", MAX_STEPS if ref_steps < MAX_STEPS else BIG_MAX_STEPS)
    if jacobian_key not in compiled:
        build(jacobian_key)
    ref = {
        "forward": ref_x1,
        "gradient": compiled[("jaxadjoint", "gradient", BIG_MAX_STEPS)](y0, args, tight),
        "jacobian": compiled[jacobian_key](y0, args, tight),
    }
    dfx_x1, dfx_acc, _ = compiled[("diffrax", "forward", BIG_MAX_STEPS)](y0, args, tight)
    dfx_grad = compiled[("diffrax", "gradient", BIG_MAX_STEPS)](y0, args, tight)
    reference = {
        "problem": kind, "size": size, "tolerance": REFERENCE_TOL, "method": "jaxadjoint",
        "max_steps": BIG_MAX_STEPS, "accepted_steps": int(ref_acc), "steps": int(ref_steps),
        "diffrax_accepted_steps": int(dfx_acc),
        "diffrax_vs_reference_forward": rel_error(dfx_x1, ref_x1),
        "diffrax_vs_reference_gradient": rel_error(dfx_grad, ref["gradient"]),
    }
    log(f"  reference: {int(ref_acc)} steps (diffrax {int(dfx_acc)}); diffrax vs reference: "
        f"x(t1) {reference['diffrax_vs_reference_forward']:.1e}, "
        f"gradient {reference['diffrax_vs_reference_gradient']:.1e}")

    records = []
    for tol in tols:
        t = tol_array(tol)
        steps = {}
        for method in ("jaxadjoint", "diffrax"):
            _, acc, total = compiled[(method, "forward", MAX_STEPS)](y0, args, t)
            steps[method] = (int(acc), int(total))
        steps["diffrax-full"] = steps["diffrax"]
        # One interleaved group per tolerance: every ratio we report (peer against peer,
        # gradient against forward, big against small `max_steps`) is then taken between
        # calls made side by side, under the same load from other processes.
        calls = {k: (lambda c=compiled[k]: c(y0, args, t)) for k in timed}
        timings = time_interleaved(
            calls, budget_s=options.budget, min_repeats=options.min_repeats,
            max_repeats=options.max_repeats,
        )
        for op in OPERATIONS:
            group = [k for k in timed if k[1] == op]
            for key in group:
                method, _, max_steps = key
                out = calls[key]()
                value = out[0] if op == "forward" else out
                timing = timings[key]
                records.append({
                    "problem": kind, "size": size, "tolerance": tol, "method": method,
                    "operation": op, "max_steps": max_steps,
                    "time_median_s": timing.median, "time_min_s": timing.min,
                    "time_max_s": timing.max, "cpu_median_s": timing.cpu_median,
                    "repeats": timing.repeats,
                    "calls_per_repeat": timing.number, "compile_wall_s": compile_s[key][0],
                    "compile_cpu_s": compile_s[key][1],
                    "memory_bytes": memory[key], "accepted_steps": steps[method][0],
                    "steps": steps[method][1], "error": rel_error(value, ref[op]),
                })
            log("  " + format_group(records[-len(group):]))
    return records, reference


def format_group(group: list[dict]) -> str:
    first = group[0]
    parts = [f"tol={first['tolerance']:.0e} {first['operation']:9s}"]
    for r in group:
        suffix = "" if r["max_steps"] == MAX_STEPS else f"@{r['max_steps']}"
        parts.append(f"{r['method']}{suffix}={r['time_median_s'] * 1e3:.3g}ms")
    return " ".join(parts)


# --- ratios, targets and the table --------------------------------------------------------


def _index(records: list[dict]) -> dict[tuple, dict]:
    return {
        (r["problem"], r["size"], r["tolerance"], r["method"], r["operation"], r["max_steps"]): r
        for r in records
    }


def summarise(records: list[dict]) -> list[dict]:
    """Ratios of medians measured in the same run, with each target's verdict."""
    index = _index(records)
    cases = sorted({(r["problem"], r["size"], r["tolerance"]) for r in records},
                   key=lambda c: (c[0], c[1], -c[2]))
    rows = []
    for kind, size, tol in cases:
        def get(method, op, max_steps=MAX_STEPS):
            return index.get((kind, size, tol, method, op, max_steps))

        ours = {op: get("jaxadjoint", op) for op in OPERATIONS}
        row: dict[str, Any] = {"problem": kind, "size": size, "tolerance": tol}
        for op in ("gradient", "jacobian"):
            peers = {m: get(m, op) for m in ("diffrax", "diffrax-full")}
            for m, peer in peers.items():
                row[f"{op}_vs_{m}"] = ours[op]["time_median_s"] / peer["time_median_s"]
            row[f"{op}_vs_best_diffrax"] = ours[op]["time_median_s"] / min(
                p["time_median_s"] for p in peers.values())
            # Robustness checks against load from other processes: the same ratio of the
            # fastest repeats and of median CPU times.
            for stat in ("time_min_s", "cpu_median_s"):
                row[f"{op}_vs_best_diffrax_{stat[:-2]}"] = ours[op][stat] / min(
                    p[stat] for p in peers.values())
        # Compile time in process CPU seconds: robust to other processes' load (wall is in
        # the records too).
        row["compile_gradient_vs_best_diffrax"] = ours["gradient"]["compile_cpu_s"] / min(
            get(m, "gradient")["compile_cpu_s"] for m in ("diffrax", "diffrax-full"))
        row["compile_gradient_cpu_s"] = ours["gradient"]["compile_cpu_s"]
        row["compile_gradient_wall_s"] = ours["gradient"]["compile_wall_s"]
        row["gradient_over_forward"] = (
            ours["gradient"]["time_median_s"] / ours["forward"]["time_median_s"])
        row["accepted_steps_jaxadjoint"] = ours["forward"]["accepted_steps"]
        row["accepted_steps_diffrax"] = get("diffrax", "forward")["accepted_steps"]
        for method in ("jaxadjoint", "diffrax"):
            for op in ("forward", "gradient"):
                big, small = get(method, op, BIG_MAX_STEPS), get(method, op)
                if big is not None and small is not None:
                    row[f"max_steps_16x_{op}_{method}"] = (
                        big["time_median_s"] / small["time_median_s"] - 1)
                    row[f"max_steps_16x_{op}_{method}_cpu"] = (
                        big["cpu_median_s"] / small["cpu_median_s"] - 1)
        row["targets"] = {
            "gradient": row["gradient_vs_best_diffrax"] <= GRADIENT_TARGET[kind],
            "jacobian": row["jacobian_vs_best_diffrax"] <= JACOBIAN_TARGET,
            "gradient_over_forward": row["gradient_over_forward"] <= GRADIENT_OVER_FORWARD_TARGET,
            "compile": row["compile_gradient_vs_best_diffrax"] <= COMPILE_TARGET,
        }
        for op in ("forward", "gradient"):
            extra = row.get(f"max_steps_16x_{op}_jaxadjoint")
            if extra is not None:
                row["targets"][f"max_steps_{op}"] = extra < MAX_STEPS_TARGET
        rows.append(row)
    return rows


def print_tables(records: list[dict], rows: list[dict]) -> None:
    index = _index(records)
    print("\nMedian wall time [ms] (max_steps = 4096); steps = accepted steps jaxadjoint/diffrax;"
          " err = relative max-norm error vs the 1e-13 reference")
    header = (f"{'problem':12s} {'N':>4s} {'tol':>6s} {'op':9s} {'jaxadj':>9s} {'diffrax':>9s} "
              f"{'dfx-full':>9s} {'ours/best':>9s} {'steps':>10s} {'err ours':>9s} "
              f"{'err dfx':>9s} {'err full':>9s}")
    print(header)
    print("-" * len(header))
    for row in rows:
        kind, size, tol = row["problem"], row["size"], row["tolerance"]
        for op in OPERATIONS:
            get = lambda m: index.get((kind, size, tol, m, op, MAX_STEPS))  # noqa: E731
            cells = [get(m) for m in METHODS]
            times = [f"{c['time_median_s'] * 1e3:9.3f}" if c else f"{'-':>9s}" for c in cells]
            errs = [f"{c['error']:9.1e}" if c else f"{'-':>9s}" for c in cells]
            peer = min(c["time_median_s"] for c in cells[1:] if c)
            steps = f"{row['accepted_steps_jaxadjoint']}/{row['accepted_steps_diffrax']}"
            print(f"{kind:12s} {size:4d} {tol:6.0e} {op:9s} {' '.join(times)} "
                  f"{cells[0]['time_median_s'] / peer:9.3f} {steps:>10s} {' '.join(errs)}")
    print("\nTargets (ratios of medians in this run; 'best diffrax' = the faster of the two "
          "diffrax configurations)")
    header = (f"{'problem':12s} {'N':>4s} {'tol':>6s} {'grad/dfx':>10s} {'jac/dfx':>10s} "
              f"{'grad/fwd':>10s} {'compile':>10s} {'16x fwd':>10s} {'16x grad':>10s}")
    print(header)
    print("-" * len(header))
    met = {}
    for row in rows:
        t = row["targets"]
        for name, ok in t.items():
            met.setdefault(name, []).append(ok)

        def cell(value, ok, percent=False):
            if value is None:
                return f"{'-':>10s}"
            text = f"{value * 100:+.0f}%" if percent else f"{value:.3f}"
            return f"{text + ('' if ok else ' X'):>10s}"

        print(f"{row['problem']:12s} {row['size']:4d} {row['tolerance']:6.0e} "
              f"{cell(row['gradient_vs_best_diffrax'], t['gradient'])} "
              f"{cell(row['jacobian_vs_best_diffrax'], t['jacobian'])} "
              f"{cell(row['gradient_over_forward'], t['gradient_over_forward'])} "
              f"{cell(row['compile_gradient_vs_best_diffrax'], t['compile'])} "
              f"{cell(row.get('max_steps_16x_forward_jaxadjoint'), t.get('max_steps_forward'), True)} "  # noqa: E501
              f"{cell(row.get('max_steps_16x_gradient_jaxadjoint'), t.get('max_steps_gradient'), True)}")  # noqa: E501
    print("X = target missed. Targets: gradient <= 0.5 (GLV) / 0.2 (VdP, Brusselator) x diffrax; "
          "Jacobian <= 0.4 x; gradient <= 4 x own forward; compile <= 0.5 x; 16x max_steps "
          "< +10 %.")
    for name, oks in met.items():
        print(f"  {name:22s} met in {sum(oks)}/{len(oks)} cases")


def plot(rows: list[dict], path: str) -> None:
    """Bar charts of the ratios (jaxadjoint / faster diffrax) with the targets drawn in."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys((r["problem"], r["size"]) for r in rows))
    tols = sorted({r["tolerance"] for r in rows}, reverse=True)
    panels = [
        ("gradient_vs_best_diffrax", "gradient / diffrax", None),
        ("jacobian_vs_best_diffrax", "Jacobian / diffrax", JACOBIAN_TARGET),
        ("gradient_over_forward", "gradient / own forward", GRADIENT_OVER_FORWARD_TARGET),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8))
    width = 0.8 / len(tols)
    labels = [f"{k}-{n}" if k != "vdp" else "vdp" for k, n in cases]
    for ax, (field, title, target) in zip(axes, panels):
        for j, tol in enumerate(tols):
            values = [next((r[field] for r in rows if (r["problem"], r["size"], r["tolerance"])
                            == (k, n, tol)), float("nan")) for k, n in cases]
            ax.bar([i + (j - (len(tols) - 1) / 2) * width for i in range(len(cases))], values,
                   width, label=f"tol {tol:.0e}")
        if target is not None:
            ax.axhline(target, color="k", linestyle="--", linewidth=1, label="target")
        else:
            for i, (k, _) in enumerate(cases):
                ax.hlines(GRADIENT_TARGET[k], i - 0.45, i + 0.45, color="k", linestyle="--",
                          linewidth=1, label="target" if i == 0 else None)
        ax.axhline(1.0, color="gray", linewidth=0.5)
        ax.set_xticks(range(len(cases)), labels, rotation=30)
        ax.set_title(title + " (median time ratio)")
        ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown_table(records: list[dict], rows: list[dict]) -> str:
    """The README's results table: medians in ms, ratios, step counts, errors."""
    index = _index(records)
    lines = [
        "| problem | N | tol | steps ja/dfx | forward ja / dfx | gradient ja / dfx / dfx-full "
        "| grad ratio | Jacobian ja / dfx / dfx-full | jac ratio | grad/fwd | compile grad "
        "ja / best dfx (CPU s) | 16x max_steps fwd, grad (ja) | error grad ja / dfx |",
        "|" + "---|" * 13,
    ]
    for row in rows:
        kind, size, tol = row["problem"], row["size"], row["tolerance"]

        def ms(method, op):
            r = index.get((kind, size, tol, method, op, MAX_STEPS))
            return f"{r['time_median_s'] * 1e3:.3g}" if r else "-"

        def mark(ok):
            return "" if ok else " ✗"

        t = row["targets"]
        ours = index[(kind, size, tol, "jaxadjoint", "gradient", MAX_STEPS)]
        dfx = index[(kind, size, tol, "diffrax", "gradient", MAX_STEPS)]
        best_compile = ours["compile_cpu_s"] / row["compile_gradient_vs_best_diffrax"]
        big = [row.get(f"max_steps_16x_{op}_jaxadjoint") for op in ("forward", "gradient")]
        big_text = ", ".join("-" if b is None else f"{b * 100:+.0f}%" for b in big)
        if any(b is not None and b >= MAX_STEPS_TARGET for b in big):
            big_text += " ✗"
        lines.append(
            f"| {kind} | {size} | {tol:.0e} | {row['accepted_steps_jaxadjoint']}/"
            f"{row['accepted_steps_diffrax']} | {ms('jaxadjoint', 'forward')} / "
            f"{ms('diffrax', 'forward')} | {ms('jaxadjoint', 'gradient')} / "
            f"{ms('diffrax', 'gradient')} / {ms('diffrax-full', 'gradient')} | "
            f"{row['gradient_vs_best_diffrax']:.2f}{mark(t['gradient'])} | "
            f"{ms('jaxadjoint', 'jacobian')} / {ms('diffrax', 'jacobian')} / "
            f"{ms('diffrax-full', 'jacobian')} | "
            f"{row['jacobian_vs_best_diffrax']:.2f}{mark(t['jacobian'])} | "
            f"{row['gradient_over_forward']:.1f}{mark(t['gradient_over_forward'])} | "
            f"{ours['compile_cpu_s']:.1f} / {best_compile:.1f} = "
            f"{row['compile_gradient_vs_best_diffrax']:.2f}{mark(t['compile'])} | {big_text} | "
            f"{ours['error']:.0e} / {dfx['error']:.0e} |"
        )
    return "\n".join(lines)


# --- command line -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: GLV N=10 only (unless --problems is given), "
                        "tol 1e-6, few repeats")
    parser.add_argument("--problems", nargs="+", choices=("glv", "vdp", "brusselator"),
                        default=None, help="default: all three (GLV only with --quick)")
    parser.add_argument("--sizes", nargs="+", type=int, default=[10, 50, 100, 200],
                        help="GLV sizes N (number of species)")
    parser.add_argument("--brusselator-sizes", nargs="+", type=int, default=[16],
                        help="Brusselator grid sizes")
    parser.add_argument("--tols", nargs="+", type=float, default=[1e-6, 1e-8, 1e-10])
    parser.add_argument("--budget", type=float, default=4.0,
                        help="seconds of timing per tolerance (all calls interleaved)")
    parser.add_argument("--min-repeats", type=int, default=5)
    parser.add_argument("--max-repeats", type=int, default=21)
    parser.add_argument("--no-max-steps", dest="max_steps_study", action="store_false",
                        help="skip the max_steps = 65536 timings")
    parser.add_argument("--no-plot", dest="plot", action="store_false",
                        help="do not write the PNG of ratios next to the JSON")
    parser.add_argument("--from-json", default=None, metavar="PATH",
                        help="measure nothing: reload the records of PATH, recompute the summary "
                        "and print the tables (and --markdown)")
    parser.add_argument("--markdown", action="store_true",
                        help="also print the results as a Markdown table (for README.md)")
    parser.add_argument("--output", default=None,
                        help="JSON file (default benchmarks/results/core.json, "
                        "core-quick.json with --quick)")
    options = parser.parse_args(argv)
    if options.problems is None:
        options.problems = ["glv"] if options.quick else ["vdp", "brusselator", "glv"]
    if options.quick:
        options.sizes, options.brusselator_sizes, options.tols = [10], [16], [1e-6]
        options.budget, options.min_repeats, options.max_repeats = 1.0, 3, 7
    if options.output is None:
        name = "core-quick.json" if options.quick else "core.json"
        options.output = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name)
    return options


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    start = time.perf_counter()
    if options.from_json:
        with open(options.from_json) as f:
            records = json.load(f)["records"]
        rows = summarise(records)
        print_tables(records, rows)
        if options.markdown:
            print("\n" + markdown_table(records, rows))
        if options.plot:
            plot(rows, os.path.splitext(options.from_json)[0] + ".png")
        return

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f} s] {message}", flush=True)

    cases = []
    for kind in options.problems:
        sizes = {"glv": options.sizes, "brusselator": options.brusselator_sizes, "vdp": [2]}[kind]
        cases += [(kind, size) for size in sizes]
    # Large GLV Jacobians are slow: fewer repeats there.
    records, references, failures = [], [], []
    for kind, size in cases:
        log(f"{kind} N={size}")
        local = argparse.Namespace(**vars(options))
        if kind == "glv" and size >= 100:
            local.min_repeats = max(3, options.min_repeats // 2)
        try:
            recs, reference = bench_problem(kind, size, options.tols, local, log)
        except Exception as error:  # noqa: BLE001 - keep the other cases' results
            log(f"  FAILED: {type(error).__name__}: {error}")
            failures.append({"problem": kind, "size": size, "error": repr(error)})
            continue
        records += recs
        references.append(reference)
        write_json(options.output, records, methods=METHOD_NOTES, references=references,
                   failures=failures, summary=summarise(records), options=vars(options))
    rows = summarise(records)
    write_json(options.output, records, methods=METHOD_NOTES, references=references,
               failures=failures, summary=rows, options=vars(options))
    print_tables(records, rows)
    if options.markdown:
        print("\n" + markdown_table(records, rows))
    if options.plot:
        plot(rows, os.path.splitext(options.output)[0] + ".png")
    log(f"done; results in {options.output}")


if __name__ == "__main__":
    main()
