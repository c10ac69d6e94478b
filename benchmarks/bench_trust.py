"""When is a gradient of an ODE solve trustworthy?  The measurements behind the stiffness flag.

Three parts, written to one JSON file:

1. ``table``: the README's table.  Dopri5 on Van der Pol, ``mu = 1000``, ``t`` in ``[0, 5]``,
   ``y0 = (2, 0)``, loss ``x(5)``, gradient with respect to ``(y0, mu)``, at a sweep of
   ``rtol = atol``: the gradient the discrete adjoint computes (with
   ``accept_stiff_steps=True``, so that it is returned), its relative error (2-norm) against
   Vern8 at ``1e-12``, the solve's stiffness statistics, and what a user who does not opt out
   is told (the error raised at differentiation, or nothing).
2. ``thresholds``: ``longest_stiff_run`` (accepted steps with ``h rho / B >= AT_BOUNDARY``,
   in a run broken by more than ``GAP`` steps in a row below it) on the suite's problems for
   Dopri5, Tsit5 and CashKarp at several tolerances, with the gradient's relative error
   against a Vern8 reference at ``1e-11``.  `STIFF_RUN` must lie above every non-stiff case.
3. ``cost``: the forward solve of Lotka–Volterra (Dopri5, ``rtol = 1e-6``) with and without
   the stiffness estimate, timed interleaved in the same process (median wall and CPU).

    python benchmarks/bench_trust.py [--out benchmarks/results/trust.json] [--quick]
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _common import time_interleaved, write_json

import jaxadjoint as ja
from jaxadjoint import problems as jp
from jaxadjoint._stiffness import AT_BOUNDARY, GAP, STIFF_RUN

jax.config.update("jax_enable_x64", True)

MAX_STEPS = 60_000


def _flat(tree: Any) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


def _rel(x: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def _told(fn, *args) -> str:
    """What differentiation tells a user: the first sentence of the error, or "nothing"."""
    try:
        jax.block_until_ready(fn(*args))
    except Exception as e:  # noqa: BLE001 - any failure is what the user sees
        found = re.search(r"(Untrustworthy gradient: .*?sat at the method's stability boundary)",
                          str(e))
        return found.group(1) if found else f"error: {str(e)[:200]}"
    return "nothing"


def _gradient_fns(problem: ja.problems.ODEProblem, loss):
    """Jitted ``(grad, stats)`` of ``loss(y(t1))`` in ``(y0, args)``, ``rtol`` traced."""

    def value(y0, args, rtol, solver, sensitivity):
        sol = ja.solve(problem.rhs, y0, problem.t0, problem.t1, args, solver=solver,
                       rtol=rtol, atol=rtol, max_steps=MAX_STEPS, sensitivity=sensitivity)
        return loss(sol.ys[-1]), sol.stats

    grad = jax.jit(jax.grad(value, argnums=(0, 1), has_aux=True), static_argnums=(3, 4))
    return grad


def table(rtols: list[float]) -> list[dict]:
    problem = jp.ODEProblem("van-der-pol-mu1000", jp.van_der_pol_rhs, jnp.array([2.0, 0.0]),
                            jnp.asarray(1000.0), 0.0, 5.0)
    grad = _gradient_fns(problem, lambda y: y[0])
    accepting = ja.DiscreteAdjoint(accept_stiff_steps=True)
    reference = _flat(grad(problem.y0, problem.args, 1e-12, ja.Vern8(), ja.DiscreteAdjoint())[0])
    records = []
    for rtol in rtols:
        g, stats = grad(problem.y0, problem.args, rtol, ja.Dopri5(), accepting)
        g = _flat(g)
        told = _told(grad, problem.y0, problem.args, rtol, ja.Dopri5(), ja.DiscreteAdjoint())
        records.append(dict(
            part="table", problem=problem.name, solver="Dopri5", rtol=rtol,
            gradient=g.tolist(), reference=reference.tolist(), rel_error=_rel(g, reference),
            stats={k: float(v) for k, v in stats.items()}, told=told,
        ))
        print(f"vdp mu=1000 rtol={rtol:.0e}: grad={np.array2string(g, precision=2)} "
              f"err={records[-1]['rel_error']:.1e} run={int(stats['longest_stiff_run'])} "
              f"told: {told[:90]}", flush=True)
    return records


def thresholds(rtols: list[float], solvers: list[ja.AbstractERK]) -> list[dict]:
    cases = {
        "lotka-volterra": (jp.lotka_volterra_problem(), lambda y: jnp.sum(y**2)),
        "glv-5": (jp.glv_problem(5), lambda y: jnp.sum(y**2)),
        "van-der-pol-mu1": (jp.van_der_pol_problem(mu=1.0), lambda y: y[0]),
        "van-der-pol-mu10": (jp.van_der_pol_problem(mu=10.0), lambda y: y[0]),
        "brusselator-16": (jp.brusselator_problem(), lambda y: jnp.sum(y**2)),
        "heat-6": (jp.heat_problem(6), lambda y: jnp.sum(y**2)),
    }
    accepting = ja.DiscreteAdjoint(accept_stiff_steps=True)
    records = []
    for name, (problem, loss) in cases.items():
        grad = _gradient_fns(problem, loss)
        reference = _flat(grad(problem.y0, problem.args, 1e-11, ja.Vern8(), accepting)[0])
        for solver in solvers:
            for rtol in rtols:
                g, stats = grad(problem.y0, problem.args, rtol, solver, accepting)
                err = _rel(_flat(g), reference)
                run = int(stats["longest_stiff_run"])
                records.append(dict(
                    part="thresholds", problem=name, solver=type(solver).__name__, rtol=rtol,
                    rel_error=err, stats={k: float(v) for k, v in stats.items()},
                    flagged=run >= STIFF_RUN,
                ))
                print(f"{name:18} {type(solver).__name__:9} rtol={rtol:.0e} run={run:4d} "
                      f"stiff={int(stats['num_stiff_steps']):5d}/"
                      f"{int(stats['num_accepted_steps']):5d} grad err={err:.1e}", flush=True)
    return records


class _Dopri5WithoutDetection(ja.Dopri5):
    """Dopri5 with the stiffness estimate switched off: the cost baseline."""

    def stiffness(self, step, k_next, h):
        del step, k_next, h
        return None


def cost(budget_s: float) -> list[dict]:
    problem = jp.lotka_volterra_problem()

    def forward(solver):
        fn = jax.jit(lambda y0, args: ja.solve(problem.rhs, y0, problem.t0, problem.t1, args,
                                               solver=solver, rtol=1e-6, atol=1e-6).ys)
        jax.block_until_ready(fn(problem.y0, problem.args))
        return lambda: fn(problem.y0, problem.args)

    timings = time_interleaved(
        {"with detection": forward(ja.Dopri5()),
         "without detection": forward(_Dopri5WithoutDetection())},
        budget_s=budget_s, max_repeats=41,
    )
    base = timings["without detection"]
    records = []
    for name, t in timings.items():
        records.append(dict(part="cost", problem=problem.name, method=name, median=t.median,
                            min=t.min, max=t.max, cpu_median=t.cpu_median,
                            ratio_to_without=t.median / base.median,
                            cpu_ratio_to_without=t.cpu_median / base.cpu_median))
        print(f"forward LV {name:18} median {t.median * 1e6:8.1f} us  cpu {t.cpu_median * 1e6:8.1f}"
              f" us  ratio {t.median / base.median:.3f} (cpu {t.cpu_median / base.cpu_median:.3f})")
    return records


def markdown_table(records: list[dict]) -> str:
    """The README's table from the ``table`` records."""
    lines = ["| rtol | Dopri5 gradient (∂x(5)/∂x0, ∂x(5)/∂v0, ∂x(5)/∂μ) | relative error "
             "| stiff steps (longest run) | what the user is told |",
             "| --- | --- | --- | --- | --- |"]
    for r in (r for r in records if r["part"] == "table"):
        g = ", ".join(f"{x:.3g}" for x in r["gradient"])
        stats = r["stats"]
        told = r["told"]
        found = re.search(r"from t = ([0-9.e+-]+) on, (\d+) accepted steps", told)
        if found:
            told = f"error: {found.group(2)} steps at the stability boundary from t = " \
                   f"{float(found.group(1)):.3g}"
        lines.append(
            f"| {r['rtol']:.0e} | ({g}) | {r['rel_error']:.1e} | "
            f"{int(stats['num_stiff_steps'])} of {int(stats['num_accepted_steps'])} "
            f"({int(stats['longest_stiff_run'])}) | {told} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/trust.json")
    parser.add_argument("--quick", action="store_true", help="fewer tolerances and solvers")
    parser.add_argument("--budget", type=float, default=5.0, help="seconds of timing")
    options = parser.parse_args()
    if options.quick:
        table_rtols = [1e-4, 1e-6, 1e-8]
        threshold_rtols, solvers = [1e-3, 1e-6], [ja.Dopri5()]
    else:
        table_rtols = [1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 3e-8, 1e-8, 1e-9]
        threshold_rtols = [1e-2, 1e-3, 3e-4, 1e-4, 1e-5, 1e-6, 1e-8]
        solvers = [ja.Dopri5(), ja.Tsit5(), ja.CashKarp()]
    records = table(table_rtols) + thresholds(threshold_rtols, solvers) + cost(options.budget)
    write_json(options.out, records, at_boundary=AT_BOUNDARY, stiff_run=STIFF_RUN, gap=GAP)
    print(markdown_table(records))


if __name__ == "__main__":
    main()
