"""Stiff problems: Rodas5 and Kvaerno5 with the discrete adjoint against diffrax's Kvaerno5.

Three problems, each with the loss ``w . y(t1)`` and its gradient with respect to the
parameters ``args``:

- Robertson's kinetics on [0, 40] (rates 0.04, 1e4, 3e7; ``atol = 1e-4 rtol``, as y2 ~ 1e-5);
  also `jax.jacrev` of ``y(40)``;
- Van der Pol, mu = 1e3 on [0, 2] (the paper's scaling and initial state; the interval
  holds one relaxation jump, near t = 0.81; ``atol = rtol``);
- the Brusselator on 2 x 64 grid values on [0, 10] (stiff through diffusion; ``atol = rtol``).

At ``rtol`` 1e-6 and 1e-8 we time, in the same run and interleaved: our forward solve and our
gradient (Rodas5 as "ours", and our Kvaerno5, both `DiscreteAdjoint`), and diffrax's
`Kvaerno5` (the same ESDIRK method, Newton iterations)
with its default adjoint (`RecursiveCheckpointAdjoint`) and `PIDController` at the same
tolerances. Errors (relative max-norm) are against SciPy at rtol 1e-12 (Radau; DOP853 for the
Brusselator) on the augmented forward-sensitivity system, fields and Jacobians evaluated by
JAX. Records hold wall and process-CPU medians (CPU time is less sensitive to other jobs).

    python benchmarks/bench_stiff.py [--out benchmarks/results/stiff.json] [--budget 3]
"""

from __future__ import annotations

import argparse
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


def ours(rhs, y0, args, t1, rtol, atol, solver=ja.Rodas5()):
    sol = ja.solve(rhs, y0, 0.0, t1, args, solver=solver, rtol=rtol, atol=atol,
                   max_steps=MAX_STEPS)
    return sol.ys[-1], sol.stats["num_accepted_steps"]


def ours_kvaerno5(rhs, y0, args, t1, rtol, atol):
    return ours(rhs, y0, args, t1, rtol, atol, solver=ja.Kvaerno5())


def theirs(rhs, y0, args, t1, rtol, atol):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs), diffrax.Kvaerno5(), 0.0, t1, None, y0, args=args,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol), max_steps=MAX_STEPS,
    )
    return sol.ys[-1], sol.stats["num_accepted_steps"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/stiff.json")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per timing round")
    parser.add_argument("--rtols", type=float, nargs="+", default=[1e-6, 1e-8])
    parser.add_argument("--problems", nargs="+", default=None, help="a subset, by name")
    options = parser.parse_args()
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
        for rtol in options.rtols:
            atol = rtol * atol_factor
            solve_fns = {"ours": ours, "ours Kvaerno5": ours_kvaerno5,
                         "diffrax Kvaerno5": theirs}
            fns = {}
            for who, solve in solve_fns.items():
                def value(a, solve=solve):
                    return solve(rhs, y0, a, t1, rtol, atol)[0]
                fns[f"{who} forward"] = lambda a, solve=solve: solve(rhs, y0, a, t1, rtol, atol)
                fns[f"{who} grad"] = jax.grad(lambda a, value=value: value(a) @ weights)
                if with_jacrev:
                    fns[f"{who} jacrev"] = jax.jacrev(value)
            compiled, compile_s = {}, {}
            for method, fn in fns.items():
                compiled[method], compile_s[method] = compile_jitted(fn, args)
            timings = time_interleaved(
                {method: (lambda c=c: c(args)) for method, c in compiled.items()},
                budget_s=options.budget)
            for method, c in compiled.items():
                out = c(args)
                steps = None
                if method.endswith("forward"):
                    y, steps = out
                    error = rel_error(y, y_ref)
                    steps = int(steps)
                elif method.endswith("jacrev"):
                    error = rel_error(np.asarray(out) * scale, jac_ref * scale)
                else:
                    # Normalised (k_j dL/dk_j): the rates differ by orders of magnitude.
                    error = rel_error(np.atleast_1d(np.asarray(out)) * scale,
                                      np.atleast_1d(grad_ref) * scale)
                t = timings[method]
                records.append(dict(problem=name, size=int(y0.shape[0]), rtol=rtol, atol=atol,
                                    method=method, median_s=t.median, min_s=t.min,
                                    max_s=t.max, cpu_median_s=t.cpu_median,
                                    repeats=t.repeats, compile_s=compile_s[method],
                                    steps=steps, error=error))
                print(f"{name:22s} rtol {rtol:g}  {method:26s} {t.median * 1e3:9.2f} ms "
                      f"(cpu {t.cpu_median * 1e3:9.2f})  compile {compile_s[method]:5.1f} s  "
                      f"steps {steps}  error {error:.1e}", flush=True)
            med = {r["method"]: r for r in records if r["problem"] == name and r["rtol"] == rtol}
            for kind in ("forward", "grad", "jacrev"):
                b = med.get(f"diffrax Kvaerno5 {kind}")
                for who, label in (("ours", "Rodas5"), ("ours Kvaerno5", "Kvaerno5")):
                    a = med.get(f"{who} {kind}")
                    if a and b:
                        print(f"  {kind}: ours {label} / diffrax = "
                              f"{a['median_s'] / b['median_s']:.2f} wall, "
                              f"{a['cpu_median_s'] / b['cpu_median_s']:.2f} cpu")
    write_json(options.out, records, benchmark="stiff")


if __name__ == "__main__":
    main()
