"""Work–precision of every sensitivity method on generalised Lotka–Volterra (paper, figure 3).

For GLV communities of `N` species (`jaxadjoint.problems.glv_problem(N)`, `t in [0, 10]`) the
benchmark times the gradient of `L = 0.5 * sum(x(t1)^2)` with respect to all `N + N^2`
parameters `args = (r, A)`, at tolerances `rtol = atol = tol`, for

- `DiscreteAdjoint` (default; exact derivative of the computed solution),
- `ForwardSensitivity` (CFSA; with error control on the sensitivities, and without),
- `ContinuousAdjoint` (CASA; state from checkpoints, and re-integrated backwards),
- `FiniteDifferences(step=1e-6)` (ND, central: `2 (N + N^2)` extra solves),

all with Dopri5 and the I controller, float64, `max_steps = 1024`, in the same run on the
same data. Each method is compiled once with the tolerance as an argument; run times are
medians of interleaved repeats after a warm-up (`benchmarks/_common.py`). The error is the relative
max-norm error of the gradient against `DiscreteAdjoint` at `tol = 1e-13`
(cross-checked against `ForwardSensitivity` at the same tolerance; the difference is
recorded in the JSON header).

Run `python benchmarks/bench_sensitivity.py [--quick]`; results go to
`benchmarks/results/sensitivity.json` and the plot to
`benchmarks/results/sensitivity.png`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

import jaxadjoint as ja  # noqa: E402
from jaxadjoint.problems import glv_problem  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import rel_error, time_interleaved, write_json  # noqa: E402

METHODS = {
    "DiscreteAdjoint": ja.DiscreteAdjoint(),
    "ForwardSensitivity": ja.ForwardSensitivity(),
    "ForwardSensitivity(error_control=False)": ja.ForwardSensitivity(error_control=False),
    "ContinuousAdjoint(checkpointed)": ja.ContinuousAdjoint(),
    "ContinuousAdjoint(backsolve)": ja.ContinuousAdjoint(state="backsolve"),
    "FiniteDifferences(1e-6)": ja.FiniteDifferences(step=1e-6),
}
MAX_STEPS = 1024  # ample for tol >= 1e-10 here; buffers of unused length cost time


def make_gradient(problem, method, max_steps=MAX_STEPS):
    def loss(args, tol):
        sol = ja.solve(problem.rhs, problem.y0, problem.t0, problem.t1, args, rtol=tol,
                       atol=tol, sensitivity=method, max_steps=max_steps)
        return 0.5 * jnp.sum(sol.ys**2)

    return jax.jit(jax.grad(loss))


def steps_taken(problem, tol):
    sol = ja.solve(problem.rhs, problem.y0, problem.t0, problem.t1, problem.args, rtol=tol,
                   atol=tol, max_steps=MAX_STEPS)
    return int(sol.stats["num_accepted_steps"])


def run(sizes, tols, methods, budget_s):
    records, checks = [], {}
    for n in sizes:
        problem = glv_problem(n)
        args = problem.args
        tight = jnp.asarray(1e-13)
        reference = make_gradient(problem, ja.DiscreteAdjoint(), 65536)(args, tight)
        cross = make_gradient(problem, ja.ForwardSensitivity(), 65536)(args, tight)
        checks[n] = rel_error(cross, reference)
        print(f"N={n}: reference cross-check (CFSA vs discrete adjoint at 1e-13) "
              f"{checks[n]:.2e}", flush=True)
        grads = {}
        for name in methods:
            start = time.perf_counter()
            grads[name] = make_gradient(problem, METHODS[name]).lower(
                args, jnp.asarray(tols[0])).compile()
            print(f"  compiled {name} in {time.perf_counter() - start:.1f} s", flush=True)
        for tol in tols:
            tol_a = jnp.asarray(tol)
            steps = steps_taken(problem, tol_a)
            ok, values = {}, {}
            for name, g in grads.items():
                try:  # a method may fail (backsolve: unstable backward state)
                    values[name] = jax.block_until_ready(g(args, tol_a))
                    ok[name] = g
                except Exception as e:  # noqa: BLE001
                    message = str(e).split("\n")[0][:200]
                    records.append(dict(
                        problem="glv", size=n, num_params=n + n * n, tolerance=tol,
                        method=name, failed=message, forward_steps=steps,
                    ))
                    print(f"  tol={tol:.0e} {name:42s} FAILED: {message}", flush=True)
            calls = {name: (lambda g=g: g(args, tol_a)) for name, g in ok.items()}
            timings = time_interleaved(calls, budget_s=budget_s, min_repeats=3)
            for name in ok:
                err = rel_error(values[name], reference)
                t = timings[name]
                records.append(dict(
                    problem="glv", size=n, num_params=n + n * n, tolerance=tol, method=name,
                    median_s=t.median, min_s=t.min, max_s=t.max, cpu_median_s=t.cpu_median,
                    repeats=t.repeats, forward_steps=steps, error=err,
                ))
                print(f"  tol={tol:.0e} {name:42s} {t.median * 1e3:10.2f} ms  err={err:.2e}",
                      flush=True)
    return records, checks


def summarise(records):
    """Time ratio ForwardSensitivity / DiscreteAdjoint per (N, tol), and at equal error."""
    out = {}
    sizes = sorted({r["size"] for r in records})
    for n in sizes:
        rows = [r for r in records if r["size"] == n]
        by = {(r["method"], r["tolerance"]): r for r in rows if "failed" not in r}
        ratios = {}
        for tol in sorted({r["tolerance"] for r in rows}):
            da, fs = by.get(("DiscreteAdjoint", tol)), by.get(("ForwardSensitivity", tol))
            if da and fs:
                ratios[f"{tol:.0e}"] = fs["median_s"] / da["median_s"]
        out[n] = ratios
    return out


def plot(records, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["size"] for r in records})
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 4), squeeze=False)
    markers = dict(zip(METHODS, "osdv^x"))
    for ax, n in zip(axes[0], sizes):
        for name in METHODS:
            rows = sorted((r for r in records if r["size"] == n and r["method"] == name
                           and "failed" not in r), key=lambda r: -r["tolerance"])
            if not rows:
                continue
            ax.loglog([max(r["error"], 1e-16) for r in rows], [r["median_s"] for r in rows],
                      marker=markers[name], label=name)
        ax.set_title(f"GLV N = {n} ({n + n * n} parameters)")
        ax.set_xlabel("relative gradient error")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("gradient time [s] (median)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 10, 30, 40])
    parser.add_argument("--tols", type=float, nargs="+", default=[1e-4, 1e-6, 1e-8, 1e-10])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per timing round")
    parser.add_argument("--quick", action="store_true", help="N = 2, 10; two tolerances")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                      "sensitivity.json"))
    a = parser.parse_args()
    if a.quick:
        a.sizes, a.tols = [2, 10], [1e-5, 1e-8]
    records, checks = run(a.sizes, a.tols, a.methods, a.budget)
    ratios = summarise(records)
    print("time ForwardSensitivity / DiscreteAdjoint:", ratios)
    write_json(a.out, records, reference_cross_check=checks,
               ratio_forward_sensitivity_over_discrete_adjoint=ratios)
    plot(records, os.path.splitext(a.out)[0] + ".png")


if __name__ == "__main__":
    main()
