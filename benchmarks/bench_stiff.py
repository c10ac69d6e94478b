"""Stiff problems: Rodas5 and Kvaerno5 with the discrete adjoint against diffrax's Kvaerno5.

Three problems, each with the loss ``w . y(t1)`` and its gradient with respect to the
parameters ``args``:

- Robertson's kinetics on [0, 40] (rates 0.04, 1e4, 3e7; ``atol = 1e-4 rtol``, as y2 ~ 1e-5);
  also `jax.jacrev` of ``y(40)``;
- Van der Pol, mu = 1e3 on [0, 2] (the paper's scaling and initial state; the interval
  holds one relaxation jump, near t = 0.81; ``atol = rtol``);
- the Brusselator on 2 x 64 grid values on [0, 10] (stiff through diffusion; ``atol = rtol``).

Timed in the same run, interleaved: diffrax's `Kvaerno5` (Newton iterations, its default
`RecursiveCheckpointAdjoint`, `PIDController`) at ``rtol`` 1e-6 and 1e-8, and ours --
`Rodas5` (Rosenbrock), `Kvaerno5` (the same ESDIRK method as diffrax's) with `StoreStates`
(Rodas5's default; Kvaerno5's until 2026-11-27), and both with `StoreStages` (Kvaerno5's
default since) (Kvaerno5: no Newton replay in the reverse pass;
Rodas5: the increments ``U_i`` kept, no stage chain in the reverse pass) --
over a sweep of ``rtol`` (1e-5 .. 1e-11), so that each diffrax run can be compared with
ours at equal ``rtol`` *and* at equal or better accuracy (the cheapest of our runs whose
error is at most diffrax's: a work-precision comparison).  ``rtol`` is a traced argument:
one compilation serves every tolerance.  Errors (relative max-norm; gradients normalised,
``k_j dL/dk_j``) are against SciPy at rtol 1e-12 (Radau; DOP853 for the Brusselator) on
the augmented forward-sensitivity system, fields and Jacobians evaluated by JAX.  Records
hold wall and process-CPU medians.

    python benchmarks/bench_stiff.py [--out benchmarks/results/stiff.json] [--budget 2]
    python benchmarks/bench_stiff.py --quick     # Robertson only, rtol 1e-6 and 1e-8
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from _common import compile_jitted, rel_error, time_interleaved, write_json

import jaxadjoint as ja
from jaxadjoint.problems import (
    brusselator_stiff_problem,
    robertson_problem,
    van_der_pol_problem,
)

jax.config.update("jax_enable_x64", True)

MAX_STEPS = 16384


def _flat(problem):
    shape = problem.y0.shape

    def rhs(t, y, args):
        return problem.rhs(t, y.reshape(shape), args).ravel()

    return rhs, problem.y0.ravel()


def _cases():
    """name -> (rhs on flat states, y0, args, t1, weights, atol / rtol, with jacrev,
    SciPy method of the reference)."""
    robertson = robertson_problem(40.0)
    vdp = van_der_pol_problem(1e3, 2.0)
    bruss = brusselator_stiff_problem(64, 10.0)
    cases = {}
    # The Brusselator's reference is DOP853: its stiffness (eigenvalues to -340) costs an
    # explicit method ~1e3 steps at most, cheaper than Radau's 512 x 512 factorisations.
    for problem, weights, atol_factor, jacrev, method in (
        (robertson, jnp.asarray([1.0, 1e4, 1.0]), 1e-4, True, "Radau"),  # y2 ~ 1e-5
        (vdp, jnp.asarray([1.0, 1.0]), 1.0, False, "Radau"),
        (bruss, None, 1.0, False, "DOP853"),
    ):
        rhs, y0 = _flat(problem)
        if weights is None:
            weights = jnp.cos(jnp.arange(y0.shape[0], dtype=y0.dtype))
        cases[problem.name] = (rhs, y0, problem.args, problem.t1, weights, atol_factor, jacrev,
                               method)
    return cases


def reference(rhs, y0, args, t1, method):
    """``(y(t1), dy(t1)/dargs)`` from SciPy (rtol 1e-12) on the augmented system."""
    from scipy.integrate import solve_ivp

    n, p = y0.shape[0], args.shape[0] if args.ndim else 1
    flat_args = jnp.atleast_1d(args)

    def field(z):
        y, sens = z[:n], z[n:].reshape(n, p)

        def f(y, a):
            return rhs(0.0, y, a.reshape(args.shape))

        jac_y = jax.jacfwd(f)(y, flat_args)
        jac_p = jax.jacfwd(f, argnums=1)(y, flat_args)
        return jnp.concatenate([f(y, flat_args), (jac_y @ sens + jac_p).ravel()])

    fun = jax.jit(field)
    jac = jax.jit(jax.jacfwd(field))
    z0 = np.concatenate([np.asarray(y0), np.zeros(n * p)])
    options = dict(jac=lambda t, z: np.asarray(jac(z))) if method == "Radau" else {}
    out = solve_ivp(lambda t, z: np.asarray(fun(z)), (0.0, t1), z0, method=method,
                    rtol=1e-12, atol=1e-16, **options)
    assert out.status == 0, out.message
    z = out.y[:, -1]
    return z[:n], z[n:].reshape(n, p)


SOLVERS = {
    # name -> (our solver, checkpoint strategy, timed kinds)
    "ours Rodas5": (ja.Rodas5(), ja.StoreStates(), ("forward", "grad", "jacrev")),
    "ours Kvaerno5": (ja.Kvaerno5(), ja.StoreStates(), ("forward", "grad", "jacrev")),
    "ours Kvaerno5 StoreStages": (ja.Kvaerno5(), ja.StoreStages(), ("grad", "jacrev")),
    "ours Rodas5 StoreStages": (ja.Rodas5(), ja.StoreStages(), ("grad", "jacrev")),
}


def ours(rhs, y0, args, t1, rtol, atol, solver, checkpoint):
    sol = ja.solve(rhs, y0, 0.0, t1, args, solver=solver, rtol=rtol, atol=atol,
                   max_steps=MAX_STEPS, sensitivity=ja.DiscreteAdjoint(checkpoint))
    return sol.ys[-1], sol.stats["num_accepted_steps"]


def theirs(rhs, y0, args, t1, rtol, atol):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs), diffrax.Kvaerno5(), 0.0, t1, None, y0, args=args,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol), max_steps=MAX_STEPS,
    )
    return sol.ys[-1], sol.stats["num_accepted_steps"]


def _functions(rhs, y0, t1, weights, atol_factor, with_jacrev):
    """``label -> fn(args, rtol)``: forward, gradient and jacrev of each peer."""
    solves = {who: functools.partial(ours, solver=solver, checkpoint=checkpoint)
              for who, (solver, checkpoint, _) in SOLVERS.items()}
    solves["diffrax Kvaerno5"] = theirs
    kinds = {who: kinds for who, (_, _, kinds) in SOLVERS.items()}
    kinds["diffrax Kvaerno5"] = ("forward", "grad", "jacrev")
    fns = {}
    for who, solve in solves.items():
        def value(a, rtol, solve=solve):
            return solve(rhs, y0, a, t1, rtol, atol_factor * rtol)[0]

        if "forward" in kinds[who]:
            fns[f"{who} forward"] = (
                lambda a, rtol, solve=solve: solve(rhs, y0, a, t1, rtol, atol_factor * rtol))
        if "grad" in kinds[who]:
            fns[f"{who} grad"] = jax.grad(lambda a, rtol, value=value: value(a, rtol) @ weights)
        if with_jacrev and "jacrev" in kinds[who]:
            fns[f"{who} jacrev"] = jax.jacrev(value)
    return fns


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/stiff.json")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per timing round")
    parser.add_argument("--rtols", type=float, nargs="+", default=[1e-6, 1e-8],
                        help="diffrax's tolerances (ours are swept around them)")
    parser.add_argument("--sweep", type=float, nargs="+",
                        default=[1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11],
                        help="our tolerances")
    parser.add_argument("--problems", nargs="+", default=None, help="a subset, by name")
    parser.add_argument("--quick", action="store_true",
                        help="Robertson only, ours at diffrax's tolerances only")
    parser.add_argument("--table", metavar="JSON",
                        help="print the README tables of a results file and exit")
    options = parser.parse_args()
    if options.table:
        with open(options.table) as f:
            print_tables(json.load(f)["records"])
        return
    if options.quick:
        options.problems = options.problems or ["robertson-t40"]
        options.sweep = options.rtols
    records = []
    for name, case in _cases().items():
        if options.problems is not None and name not in options.problems:
            continue
        rhs, y0, args, t1, weights, atol_factor, with_jacrev, method = case
        start = time.perf_counter()
        y_ref, jac_ref = reference(rhs, y0, args, t1, method)
        print(f"{name}: SciPy {method} reference in {time.perf_counter() - start:.1f} s",
              flush=True)
        grad_ref = (np.asarray(weights) @ jac_ref).reshape(np.shape(args))
        scale = np.atleast_1d(np.asarray(args))
        fns = _functions(rhs, y0, t1, weights, atol_factor, with_jacrev)
        compiled, compile_s = {}, {}
        rtol0 = jnp.asarray(options.rtols[0], y0.dtype)
        for label, fn in fns.items():
            compiled[label], compile_s[label] = compile_jitted(fn, args, rtol0)
        calls = {}
        for label, c in compiled.items():
            rtols = options.rtols if label.startswith("diffrax") else options.sweep
            for rtol in rtols:
                r = jnp.asarray(rtol, y0.dtype)
                calls[(label, rtol)] = lambda c=c, r=r: c(args, r)
        timings = time_interleaved(dict(calls), budget_s=options.budget)
        for (label, rtol), call in calls.items():
            out = call()
            steps = None
            if label.endswith("forward"):
                y, steps = out
                error = rel_error(y, y_ref)
                steps = int(steps)
            elif label.endswith("jacrev"):
                error = rel_error(np.asarray(out) * scale, jac_ref * scale)
            else:
                # Normalised (k_j dL/dk_j): the rates differ by orders of magnitude.
                error = rel_error(np.atleast_1d(np.asarray(out)) * scale,
                                  np.atleast_1d(grad_ref) * scale)
            t = timings[(label, rtol)]
            records.append(dict(problem=name, size=int(y0.shape[0]), rtol=rtol,
                                atol=rtol * atol_factor, method=label, median_s=t.median,
                                min_s=t.min, max_s=t.max, cpu_median_s=t.cpu_median,
                                repeats=t.repeats, compile_s=compile_s[label],
                                steps=steps, error=error))
            print(f"{name:22s} rtol {rtol:g}  {label:34s} {t.median * 1e3:9.2f} ms "
                  f"(cpu {t.cpu_median * 1e3:9.2f})  compile {compile_s[label]:5.1f} s  "
                  f"steps {steps}  error {error:.1e}", flush=True)
        print_comparisons([r for r in records if r["problem"] == name], options.rtols)
    write_json(options.out, records, benchmark="stiff")


def _find(records, method, rtol):
    for r in records:
        if r["method"] == method and r["rtol"] == rtol:
            return r
    return None


def equal_accuracy(records: list[dict], method: str, target: dict) -> dict | None:
    """The fastest (process CPU time, as the tables) of our runs of ``method`` whose error is
    at most ``target``'s."""
    runs = [r for r in records if r["method"] == method and r["error"] <= target["error"]]
    return min(runs, key=lambda r: r["cpu_median_s"]) if runs else None


def print_comparisons(records: list[dict], rtols: list[float]) -> None:
    """Ours against diffrax at equal rtol and at equal or better accuracy; our gradient
    against our forward solve."""
    for rtol in rtols:
        for kind in ("forward", "grad", "jacrev"):
            theirs_ = _find(records, f"diffrax Kvaerno5 {kind}", rtol)
            if theirs_ is None:
                continue
            for who in SOLVERS:
                same = _find(records, f"{who} {kind}", rtol)
                if same is None:
                    continue
                line = (f"  rtol {rtol:g} {kind:7s} {who:26s}/ diffrax: equal rtol "
                        f"{same['median_s'] / theirs_['median_s']:.3f} (error "
                        f"{same['error']:.1e} vs {theirs_['error']:.1e})")
                match = equal_accuracy(records, f"{who} {kind}", theirs_)
                if match is not None:
                    line += (f"; equal accuracy {match['median_s'] / theirs_['median_s']:.3f}"
                             f" (ours at rtol {match['rtol']:g}, error {match['error']:.1e})")
                else:
                    line += "; no run of ours as accurate"
                print(line)
    for who in SOLVERS:
        for rtol in sorted({r["rtol"] for r in records}):
            forward = _find(records, f"{who.replace(' StoreStages', '')} forward", rtol)
            grad = _find(records, f"{who} grad", rtol)
            if forward and grad:
                print(f"  {who:26s} rtol {rtol:g}: grad / forward "
                      f"{grad['median_s'] / forward['median_s']:.2f} wall, "
                      f"{grad['cpu_median_s'] / forward['cpu_median_s']:.2f} cpu")


def print_tables(records: list[dict]) -> None:
    """Markdown tables of a results file: per problem and diffrax ``rtol``, each of our
    methods at equal ``rtol`` and at equal or better accuracy (cpu-time ratios, errors)."""
    print("| problem | diffrax rtol | kind | ours | steps ours / diffrax (equal rtol) "
          "| time ratio, equal rtol | error ours / diffrax | time ratio, equal accuracy "
          "(our rtol, error) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    problems = list(dict.fromkeys(r["problem"] for r in records))
    for problem in problems:
        rs = [r for r in records if r["problem"] == problem]
        diffrax_rtols = sorted({r["rtol"] for r in rs if r["method"].startswith("diffrax")},
                               reverse=True)
        for rtol in diffrax_rtols:
            steps_theirs = _find(rs, "diffrax Kvaerno5 forward", rtol)["steps"]
            for kind in ("grad", "jacrev"):
                theirs_ = _find(rs, f"diffrax Kvaerno5 {kind}", rtol)
                if theirs_ is None:
                    continue
                for who in SOLVERS:
                    same = _find(rs, f"{who} {kind}", rtol)
                    if same is None:
                        continue
                    fwd = _find(rs, f"{who.replace(' StoreStages', '')} forward", rtol)
                    match = equal_accuracy(rs, f"{who} {kind}", theirs_)
                    at_accuracy = "none as accurate"
                    if match is not None:
                        at_accuracy = (f"{match['cpu_median_s'] / theirs_['cpu_median_s']:.3f}"
                                       f" ({match['rtol']:g}, {match['error']:.1e})")
                    print(f"| {problem} | {rtol:g} | {kind} | {who.replace('ours ', '')} | "
                          f"{fwd['steps']} / {steps_theirs} | "
                          f"{same['cpu_median_s'] / theirs_['cpu_median_s']:.3f} | "
                          f"{same['error']:.1e} / {theirs_['error']:.1e} | {at_accuracy} |")
    print()
    print("| problem | rtol | " + " | ".join(f"{who.replace('ours ', '')} grad / forward"
                                            for who in SOLVERS) + " |")
    print("| --- | --- |" + " --- |" * len(SOLVERS))
    for problem in problems:
        rs = [r for r in records if r["problem"] == problem]
        for rtol in sorted({r["rtol"] for r in rs}, reverse=True):
            cells = []
            for who in SOLVERS:
                fwd = _find(rs, f"{who.replace(' StoreStages', '')} forward", rtol)
                grad = _find(rs, f"{who} grad", rtol)
                cells.append(f"{grad['cpu_median_s'] / fwd['cpu_median_s']:.1f}"
                             if fwd and grad else "")
            print(f"| {problem} | {rtol:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
