"""Many save times: the cost of evaluating ``n_save`` times on the dense output.

The steps do not depend on the save times, so a solve with ``n_save`` save times takes
the same steps as one without; what the saves add is one row of dense output per step
that holds saves, a prefix sum over the save times (which row each reads), one gather
and one polynomial evaluation per save (forward), and their transposes (gradient).
Compares, in one interleaved run, the same solve and gradient with ``n_save`` save times
and with none (``y(t1)`` only), for several ``n_save`` and ``max_steps``: the cost must
follow ``n_save``, never ``n_save * max_steps``.  diffrax runs the same four calls in the
same rounds (Dopri5, `PIDController` at the same tolerances, `SaveAt(ts=...)`, its default
`RecursiveCheckpointAdjoint`), as a peer: what the saves cost there, and the time ratio of
the two libraries with the saves.

    python benchmarks/bench_many_saves.py            # -> results/many-saves.json
    python benchmarks/bench_many_saves.py --quick
"""

from __future__ import annotations

import argparse
import os

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from _common import compile_jitted, time_interleaved, write_json  # noqa: E402

import jaxadjoint as ja  # noqa: E402
from jaxadjoint.problems.lotka_volterra import glv_rhs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def lotka_volterra(t, y, args):
    a, b, c, d = args
    return jnp.stack([a * y[0] - b * y[0] * y[1], d * y[0] * y[1] - c * y[1]])


def neural_ode():
    """diffrax's neural-ODE example's field (MLP 2 -> 64 -> 64 -> 2, softplus) at its
    initialisation, in float64; ``args`` are the MLP's arrays."""
    mlp = eqx.nn.MLP(2, 2, 64, 2, activation=jax.nn.softplus, key=jax.random.PRNGKey(0))
    mlp = jax.tree.map(lambda x: x.astype(jnp.float64) if eqx.is_array(x) else x, mlp)
    params, static = eqx.partition(mlp, eqx.is_array)

    def rhs(t, y, params):
        return eqx.combine(params, static)(y)

    return rhs, jnp.array([2.0, 0.0]), params


def problems():
    rng = np.random.default_rng(0)
    A = jnp.asarray(rng.normal(size=(10, 10)) * 0.3 - np.eye(10))
    mlp_rhs, mlp_y0, mlp_params = neural_ode()
    return {
        "neural ODE N=2": (mlp_rhs, mlp_y0, mlp_params, 10.0, 1e-10),
        "lotka-volterra N=2": (lotka_volterra, jnp.array([1.0, 1.0]),
                               jnp.array([1.5, 1.0, 3.0, 1.0]), 10.0, 1e-5),
        "glv N=10": (glv_rhs, jnp.linspace(0.5, 1.0, 10), (jnp.linspace(0.5, 1.0, 10), A), 10.0,
                     1e-6),
    }


def measure(name, problem, n_save, max_steps, budget):
    rhs, y0, args, t1, tol = problem
    ts = jnp.linspace(0.0, t1, n_save)

    def solve(args, saveat):
        return ja.solve(rhs, y0, 0.0, t1, args, saveat=saveat, rtol=tol, atol=tol,
                        max_steps=max_steps)

    def forward(args, ts):
        return solve(args, ts).ys

    def forward_none(args):
        return solve(args, None).ys

    def grad(args, ts):
        return jax.grad(lambda a: jnp.sum(solve(a, ts).ys ** 2))(args)

    def grad_none(args):
        return jax.grad(lambda a: jnp.sum(solve(a, None).ys ** 2))(args)

    def peer(args, saveat):
        return diffrax.diffeqsolve(
            diffrax.ODETerm(rhs), diffrax.Dopri5(), 0.0, t1, None, y0, args, saveat=saveat,
            stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol), max_steps=max_steps,
        )

    def peer_forward(args, ts):
        return peer(args, diffrax.SaveAt(ts=ts)).ys

    def peer_forward_none(args):
        return peer(args, diffrax.SaveAt(t1=True)).ys

    def peer_grad(args, ts):
        return jax.grad(lambda a: jnp.sum(peer_forward(a, ts) ** 2))(args)

    def peer_grad_none(args):
        return jax.grad(lambda a: jnp.sum(peer_forward_none(a) ** 2))(args)

    functions = {
        ("jaxadjoint", "forward", "saves"): (forward, (args, ts)),
        ("jaxadjoint", "forward", "none"): (forward_none, (args,)),
        ("jaxadjoint", "gradient", "saves"): (grad, (args, ts)),
        ("jaxadjoint", "gradient", "none"): (grad_none, (args,)),
        ("diffrax", "forward", "saves"): (peer_forward, (args, ts)),
        ("diffrax", "forward", "none"): (peer_forward_none, (args,)),
        ("diffrax", "gradient", "saves"): (peer_grad, (args, ts)),
        ("diffrax", "gradient", "none"): (peer_grad_none, (args,)),
    }
    calls = {}
    for key, (fn, fn_args) in functions.items():
        compiled = compile_jitted(fn, *fn_args, clear_caches=False)[0]
        calls[key] = lambda compiled=compiled, fn_args=fn_args: compiled(*fn_args)
    timings = time_interleaved(calls, budget_s=budget, max_repeats=41)
    steps = int(solve(args, ts).stats["num_accepted_steps"])
    peer_steps = int(peer(args, diffrax.SaveAt(ts=ts)).stats["num_accepted_steps"])
    records = []
    for op in ("forward", "gradient"):
        with_saves = timings[("jaxadjoint", op, "saves")]
        none = timings[("jaxadjoint", op, "none")]
        peer_saves = timings[("diffrax", op, "saves")]
        peer_none = timings[("diffrax", op, "none")]
        records.append(dict(
            problem=name, operation=op, n_save=n_save, max_steps=max_steps, steps=steps,
            median_s=with_saves.median, min_s=with_saves.min, max_s=with_saves.max,
            none_median_s=none.median, ratio=with_saves.median / none.median,
            # Process CPU time: less disturbed than wall time by other jobs on the machine.
            cpu_median_s=with_saves.cpu_median, none_cpu_median_s=none.cpu_median,
            cpu_ratio=with_saves.cpu_median / none.cpu_median,
            diffrax_steps=peer_steps, diffrax_median_s=peer_saves.median,
            diffrax_none_median_s=peer_none.median,
            diffrax_ratio=peer_saves.median / peer_none.median,
            vs_diffrax=with_saves.median / peer_saves.median,
        ))
        print(f"{name:20s} {op:9s} n_save={n_save:6d} max_steps={max_steps:6d} steps={steps:3d}"
              f"  {with_saves.median * 1e3:7.3f} ms vs {none.median * 1e3:7.3f} ms without"
              f"  ratio {with_saves.median / none.median:5.2f}"
              f" (CPU time {with_saves.cpu_median / none.cpu_median:5.2f});"
              f" diffrax ({peer_steps} steps) {peer_saves.median * 1e3:7.3f} ms vs"
              f" {peer_none.median * 1e3:7.3f} ms,"
              f" ratio {peer_saves.median / peer_none.median:5.2f};"
              f" jaxadjoint / diffrax with saves {with_saves.median / peer_saves.median:5.2f}")
    return records


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--budget", type=float, default=2.0)
    options = parser.parse_args()
    sizes = [(100, 4096), (10_000, 4096)] if options.quick else [
        (100, 4096), (1000, 4096), (10_000, 4096), (10_000, 16_384)]
    records = []
    for name, problem in problems().items():
        for n_save, max_steps in sizes:
            records += measure(name, problem, n_save, max_steps, options.budget)
    out = os.path.join(HERE, "results", "many-saves-quick.json" if options.quick
                       else "many-saves.json")
    write_json(out, records, benchmark="many save times against none, interleaved")
    print("wrote", out)


if __name__ == "__main__":
    main()
