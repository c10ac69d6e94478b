"""Stiff problems: Rodas5 with the discrete adjoint against diffrax's Kvaerno5 (first slice).

Robertson's kinetics on [0, 40] (rates 0.04, 1e4, 3e7); the loss is ``w . y(40)`` and we time,
in the same run and interleaved: our forward solve, our gradient and `jax.jacrev` with
respect to the three rates (Rodas5, `DiscreteAdjoint`), and diffrax's `Kvaerno5` with its
default adjoint (`RecursiveCheckpointAdjoint`) and `PIDController` at the same tolerances.
Errors are against SciPy's Radau on the augmented forward-sensitivity system (rtol 1e-11).

    python benchmarks/bench_stiff.py [--out benchmarks/results/stiff.json]
"""

from __future__ import annotations

import argparse

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from _common import compile_jitted, rel_error, time_interleaved, write_json

import jaxadjoint as ja
from jaxadjoint.problems import robertson_problem

jax.config.update("jax_enable_x64", True)

PROBLEM = robertson_problem(40.0)
WEIGHTS = jnp.asarray([1.0, 1e4, 1.0])  # y2 is ~1e-5: weight it to matter


def reference_jacobian() -> np.ndarray:
    """``dy(40)/dk`` from SciPy Radau on the augmented system."""
    from scipy.integrate import solve_ivp

    k = np.asarray(PROBLEM.args)

    def augmented(t, z):
        (y1, y2, y3), sens = z[:3], z[3:].reshape(3, 3)
        k1, k2, k3 = k
        f = [-k1 * y1 + k2 * y2 * y3, k1 * y1 - k2 * y2 * y3 - k3 * y2**2, k3 * y2**2]
        jac = np.array([[-k1, k2 * y3, k2 * y2], [k1, -k2 * y3 - 2 * k3 * y2, -k2 * y2],
                        [0.0, 2 * k3 * y2, 0.0]])
        f_k = np.array([[-y1, y2 * y3, 0.0], [y1, -y2 * y3, -y2**2], [0.0, 0.0, y2**2]])
        return np.concatenate([f, (jac @ sens + f_k * k).ravel()])

    z0 = np.concatenate([[1.0, 0.0, 0.0], np.zeros(9)])
    out = solve_ivp(augmented, (0.0, 40.0), z0, method="Radau", rtol=1e-11, atol=1e-15)
    return out.y[3:, -1].reshape(3, 3) / k  # back from k_j dy/dk_j


def ours(k, rtol):
    return ja.solve(PROBLEM.rhs, PROBLEM.y0, 0.0, 40.0, k, solver=ja.Rodas5(), rtol=rtol,
                    atol=rtol * 1e-4).ys[-1]


def theirs(k, rtol):
    term = diffrax.ODETerm(lambda t, y, a: PROBLEM.rhs(t, y, a))
    sol = diffrax.diffeqsolve(
        term, diffrax.Kvaerno5(), 0.0, 40.0, None, PROBLEM.y0, args=k,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=rtol * 1e-4),
        max_steps=4096,
    )
    return sol.ys[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/stiff.json")
    args = parser.parse_args()
    jac_ref = reference_jacobian()
    records = []
    k = PROBLEM.args
    for rtol in (1e-6, 1e-8):
        fns = {
            "ours forward": lambda k, r=rtol: ours(k, r),
            "ours grad": jax.grad(lambda k, r=rtol: ours(k, r) @ WEIGHTS),
            "ours jacrev": jax.jacrev(lambda k, r=rtol: ours(k, r)),
            "diffrax Kvaerno5 grad": jax.grad(lambda k, r=rtol: theirs(k, r) @ WEIGHTS),
            "diffrax Kvaerno5 jacrev": jax.jacrev(lambda k, r=rtol: theirs(k, r)),
        }
        compiled, compile_s = {}, {}
        for name, fn in fns.items():
            compiled[name], compile_s[name] = compile_jitted(fn, k)
        timings = time_interleaved({name: (lambda c=c: c(k)) for name, c in compiled.items()},
                                   budget_s=5.0)
        for name, c in compiled.items():
            out = np.asarray(c(k))
            if "jacrev" in name:
                error = rel_error(out * np.asarray(k), jac_ref * np.asarray(k))
            elif "grad" in name:
                error = rel_error(out * np.asarray(k), (np.asarray(WEIGHTS) @ jac_ref)
                                  * np.asarray(k))
            else:
                error = None
            t = timings[name]
            records.append(dict(problem=PROBLEM.name, rtol=rtol, method=name,
                                median_s=t.median, min_s=t.min, max_s=t.max,
                                compile_s=compile_s[name], error_normalised=error))
            print(f"rtol {rtol:g}  {name:26s} {t.median * 1e3:9.2f} ms  compile "
                  f"{compile_s[name]:5.1f} s  error {error}")
        med = {r["method"]: r["median_s"] for r in records if r["rtol"] == rtol}
        print(f"  grad / diffrax grad = {med['ours grad'] / med['diffrax Kvaerno5 grad']:.2f}, "
              f"jacrev / diffrax jacrev = "
              f"{med['ours jacrev'] / med['diffrax Kvaerno5 jacrev']:.2f}, "
              f"grad / forward = {med['ours grad'] / med['ours forward']:.2f}")
    write_json(args.out, records, benchmark="stiff")


if __name__ == "__main__":
    main()
