"""Peak memory and time of the gradient for every checkpoint strategy, and diffrax.

Each configuration runs in its own subprocess so that its peak resident memory (VmHWM)
is its own.  Recorded per run: XLA's compiled memory analysis of the jitted gradient
(temp + argument + output bytes: what the gradient needs, from the compiler), the
process's peak RSS, the gradient's wall time (median of ``--reps`` after compilation) and
the number of accepted steps.

Problems:

- ``heat``: 2-D heat equation, 5-point Laplacian on an ``n x n`` grid (Dirichlet),
  Dopri5 at loose tolerance, gradient of ``sum(u(t1)^2)`` in ``(u0, alpha)``;
- ``vdp``: Van der Pol, ``mu = 10`` on ``[0, t1]`` (thousands of steps), Dopri5;
- ``brusselator``: the 1-D Brusselator with 2 x 32 unknowns on its limit cycle, ``[0, t1]``
  (thousands of steps): a long horizon with a state of moderate size;
- ``maxsteps``: the same heat solve at ``max_steps`` 4096 and 65536 (time ~ T?);
- ``scale``: heat with Euler, constant steps, a horizon 100x what fits with
  ``StoreStates`` under a stated memory cap.

Usage: ``python benchmarks/bench_memory.py [--quick] [--problems heat vdp ...]``; writes
``benchmarks/results/memory.json`` (with ``--problems``, only those problems' records are
replaced).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

OUT = os.path.join(os.path.dirname(__file__), "results", "memory.json")


def _vmhwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return -1


def _laplacian(u, alpha):
    import jax.numpy as jnp

    n = u.shape[0]
    inner = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    return jnp.pad(alpha * (n - 1) ** 2 * inner, 1)


def _problem(cfg):
    import jax.numpy as jnp
    import numpy as np

    if cfg["problem"] in ("heat", "maxsteps", "scale"):
        n = cfg["n"]
        x = np.linspace(0.0, 1.0, n)
        u0 = np.sin(np.pi * x)[:, None] * np.sin(np.pi * x)[None, :]
        # Rough data (all modes present), so the steps are stability-limited, as in practice.
        noise = np.random.default_rng(0).uniform(-0.01, 0.01, (n, n))
        noise[0, :] = noise[-1, :] = noise[:, 0] = noise[:, -1] = 0.0
        u0 = u0 + noise

        def rhs(t, u, alpha):
            del t
            return _laplacian(u, alpha)

        return rhs, jnp.asarray(u0), jnp.asarray(1.0)

    if cfg["problem"] == "brusselator":
        from jaxadjoint.problems import brusselator_problem

        problem = brusselator_problem(cfg["n"], cfg["t1"])
        return problem.rhs, problem.y0, problem.args

    def vdp(t, y, mu):
        del t
        x, v = y[0], y[1]
        return jnp.stack([v, mu * ((1 - x**2) * v - x)])

    return vdp, jnp.array([2.0, -0.6]), jnp.asarray(10.0)


def _grad_fn(cfg):
    import jax
    import jax.numpy as jnp

    rhs, y0, args = _problem(cfg)
    t1, ms, method = cfg["t1"], cfg["max_steps"], cfg["method"]
    tol = cfg.get("tol", 1e-3)
    if method == "diffrax":
        import diffrax

        solver = diffrax.Euler() if cfg.get("euler") else diffrax.Dopri5()
        ctrl = (diffrax.ConstantStepSize() if cfg.get("euler")
                else diffrax.PIDController(rtol=tol, atol=tol))

        def solve(y0, args):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(rhs), solver, 0.0, t1, cfg.get("dt"), y0, args,
                stepsize_controller=ctrl, max_steps=ms,
                adjoint=diffrax.RecursiveCheckpointAdjoint(),
            )
            return sol.ys[-1], sol.stats["num_accepted_steps"]
    else:
        import jaxadjoint as ja

        checkpoint = {"StoreStates": ja.StoreStates(), "StoreStages": ja.StoreStages()}.get(
            method) or ja.Recursive(int(method.split(":")[1]))
        kw = dict(solver=ja.Euler(), dt0=cfg["dt"]) if cfg.get("euler") else dict(
            rtol=tol, atol=tol)

        def solve(y0, args):
            sol = ja.solve(rhs, y0, 0.0, t1, args, max_steps=ms,
                           sensitivity=ja.DiscreteAdjoint(checkpoint), **kw)
            return sol.ys[-1], sol.stats["num_accepted_steps"]

    def loss(y0, args):
        y, steps = solve(y0, args)
        return jnp.sum(y**2), steps

    return jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True)), (y0, args)


def run_one(cfg: dict) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    fn, inputs = _grad_fn(cfg)
    t = time.perf_counter()
    compiled = fn.lower(*inputs).compile()
    compile_s = time.perf_counter() - t
    mem = compiled.memory_analysis()
    xla = dict(temp=mem.temp_size_in_bytes, argument=mem.argument_size_in_bytes,
               output=mem.output_size_in_bytes)
    rec = dict(cfg, compile_s=compile_s, xla_bytes=xla, xla_total=sum(xla.values()))
    if cfg.get("compile_only"):
        return rec
    times = []
    for _ in range(cfg.get("reps", 3)):
        t = time.perf_counter()
        (g, steps) = jax.block_until_ready(compiled(*inputs))
        times.append(time.perf_counter() - t)
    times.sort()
    rec.update(time_median=times[len(times) // 2], time_min=times[0], time_max=times[-1],
               steps=int(steps), peak_rss=_vmhwm_bytes(),
               grad_norm=float(sum(float(abs(x).sum()) for x in jax.tree.leaves(g))))
    return rec


def interleaved_times(cfgs: list[dict], rounds: int) -> list[list[float]]:
    """Wall times of the gradients of ``cfgs``, measured in turn, ``rounds`` times over.

    Peers timed in the same process, interleaved, see the same machine load (the
    per-configuration subprocesses give each its own peak RSS, but run at different times).
    """
    import jax

    jax.config.update("jax_enable_x64", True)
    compiled = []
    for cfg in cfgs:
        fn, inputs = _grad_fn(cfg)
        c = fn.lower(*inputs).compile()
        jax.block_until_ready(c(*inputs))
        compiled.append((c, inputs))
    times: list[list[float]] = [[] for _ in cfgs]
    for _ in range(rounds):
        for (c, inputs), ts in zip(compiled, times):
            t = time.perf_counter()
            jax.block_until_ready(c(*inputs))
            ts.append(time.perf_counter() - t)
    return times


def _spawn(cfg: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", json.dumps(cfg)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return dict(cfg, error=out.stderr.strip().splitlines()[-1:])
    return json.loads(out.stdout.strip().splitlines()[-1])


CONFIG_KEYS = ("problem", "n", "t1", "max_steps", "tol", "method", "euler", "dt", "reps")


def configs(quick: bool) -> list[dict]:
    strategies = ["StoreStates", "StoreStages", "Recursive:16", "Recursive:32", "Recursive:64",
                  "diffrax"]
    n = 128 if quick else 192
    heat = dict(problem="heat", n=n, t1=1e-3 if quick else 2e-3, max_steps=1024, tol=1e-3,
                reps=3 if quick else 7)
    vdp = dict(problem="vdp", t1=100.0 if quick else 300.0, max_steps=16384, tol=1e-6)
    out = [dict(heat, method=m) for m in strategies]
    out += [dict(vdp, method=m) for m in strategies]
    brusselator = dict(problem="brusselator", n=32, t1=80.0 if quick else 200.0,
                       max_steps=8192, tol=1e-6)
    out += [dict(brusselator, method=m) for m in strategies]
    small = dict(problem="maxsteps", n=64, t1=2e-3, tol=1e-3, reps=5)
    for ms in (4096, 65536):
        # StoreStages at 65536 reserves ~13 GB of address space, of which the 19 steps
        # touch a few MB: the records are allocated, not filled.
        out += [dict(small, max_steps=ms, method=m)
                for m in ("StoreStates", "StoreStages", "Recursive:64")]
    # 100x: Euler on a 64 x 64 grid (32 KiB a state).  A 64 MiB cap holds 2048 states, so
    # StoreStates fits T ~ 2000 steps; Recursive runs T = 200 000 in the same cap.
    dt = 2.5e-5 if not quick else 5e-5
    scale = dict(problem="scale", n=64, euler=True, dt=dt, reps=1)
    big_T = 200_000 if not quick else 20_000
    out += [dict(scale, method="StoreStates", t1=2000 * dt, max_steps=2048),
            dict(scale, method="StoreStates", t1=big_T * dt, max_steps=big_T + 8,
                 compile_only=True),
            dict(scale, method="Recursive:64", t1=big_T * dt, max_steps=big_T + 8)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--one")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--problems", nargs="+", default=None,
                        help="run only these problems and keep the other records")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    results = []
    for cfg in configs(args.quick):
        if args.problems and cfg["problem"] not in args.problems:
            continue
        rec = _spawn(cfg)
        results.append(rec)
        print(json.dumps({k: rec.get(k) for k in (
            "problem", "method", "max_steps", "steps", "time_median", "xla_total", "peak_rss",
            "error")}), flush=True)
    # Interleaved timing of the strategies and diffrax, one problem at a time.
    for problem in ("heat", "vdp", "brusselator"):
        group = [r for r in results if r["problem"] == problem and "error" not in r]
        if not group:
            continue
        rounds = 3 if args.quick else (7 if problem == "heat" else 15)
        times = interleaved_times([{k: r[k] for k in r if k in CONFIG_KEYS} for r in group],
                                  rounds)
        for r, ts in zip(group, times):
            ts.sort()
            r.update(interleaved_median=ts[len(ts) // 2], interleaved_min=ts[0])
            print(problem, r["method"], f"interleaved median {r['interleaved_median']:.4f} s",
                  flush=True)
    if args.problems and os.path.exists(OUT):
        with open(OUT) as f:
            kept = [r for r in json.load(f)["results"] if r["problem"] not in args.problems]
        results = kept + results
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(dict(machine=os.uname().machine, cpus=os.cpu_count(), results=results), f,
                  indent=1)


if __name__ == "__main__":
    main()
