"""Time-series benchmark: losses over many save times, batched with `jax.vmap`, vs diffrax.

The workload users run most: fit an ODE to trajectories observed at many times, with the
batch of trajectories `jax.vmap`-ed *inside* the loss. Two problems, the same data arrays for
both libraries:

- `neural_ode`: diffrax's neural-ODE example. The vector field is
  `eqx.nn.MLP(in_size=2, out_size=2, width_size=64, depth=2, activation=jax.nn.softplus)`
  (`rhs(t, y, args) = mlp(y)`), float32, Tsit5, `rtol=1e-3, atol=1e-6`, `dt0 = ts[1] - ts[0]`,
  t in [0, 10], 100 save times `linspace(0, 10, 100)`. Targets: the example's spirals
  (`y' = (x_2, -x_1)` with `x = y / (1 + y)`, `y(0) ~ U(-0.6, 1)^2`). Loss: the mean squared
  error over a batch of `B` trajectories (B = 1, 32, 256), gradient w.r.t. the MLP.
- `latent_ode`: a neural ODE on a larger state, as latent-ODE models have: the field is
  `eqx.nn.MLP(32, 32, width_size=128, depth=2, activation=tanh)`, float32, Tsit5,
  `rtol=1e-3, atol=1e-6`, `dt0 = ts[1] - ts[0]`, 50 save times on [0, 5]; targets are the
  trajectories of a damped rotation `y' = M y` in 32 dimensions from `N(0, 1)` initial
  states; B = 16 and 64.
- `heat`: a discretised PDE, the paper's 2-D heat equation on a 24 x 24 grid (576 states,
  `heat_rhs`), float64, Tsit5, `rtol=1e-6, atol=1e-8`, 10 save times in [0.001, 0.01];
  each trajectory starts from its own mix of the first sine modes; targets are RK4
  trajectories at diffusivity 1; the loss is evaluated at diffusivity 0.8 and
  differentiated with respect to it; B = 8.
- `glv`: a 10-species generalised Lotka–Volterra fit (`glv_problem(10, seed=0)`), float64,
  Tsit5, `rtol = atol = 1e-6`, `dt0` by each library's own rule, 100 noisy observation times
  `linspace(0.1, 10, 100)`. Loss: the mean squared error against the observations at
  perturbed parameters, gradient w.r.t. the growth rates `r` and the interaction matrix `A`,
  for B = 1 and B = 8 initial states.

Operations (each compiled once with `equinox.filter_jit`; parameters, initial states and
targets are arguments, the save times and tolerances constants of both libraries' programs):

- `value_and_grad`: `eqx.filter_jit(eqx.filter_value_and_grad(loss))(params, y0s, targets)`,
  the batch `jax.vmap`-ed inside `loss` (the timed training step);
- `forward`: the batched solve alone (`jax.vmap` of the solution and its step counts);
- `lax_map`: `jax.lax.map` over the batch of the per-trajectory `value_and_grad`, averaged
  (the same value and gradient as `value_and_grad`; the `vmap / lax.map` ratio says what
  batching buys or costs).

Methods: `jaxadjoint` (`ja.solve(..., solver=ja.Tsit5(), saveat=ts)`, default
`DiscreteAdjoint()`, `IController`) and `diffrax` (`diffeqsolve(..., Tsit5(),
saveat=SaveAt(ts=ts), stepsize_controller=PIDController(rtol, atol),
adjoint=RecursiveCheckpointAdjoint())`, the example's configuration). Run times are medians
(min and max recorded) of calls interleaved across *all* methods and operations of one
problem and batch size, after a warm-up; compile time is the first call (trace, lower,
compile, run) minus the steady-state median, with caches cleared once per problem and batch
size and `value_and_grad` compiled first (cold for both libraries). The loss and gradient of
the two libraries are compared as a sanity check (they differ by the solver tolerance: the two
take different steps).

Run `python benchmarks/bench_timeseries.py --help`; results go to
`benchmarks/results/timeseries.json` (`timeseries-quick.json` with `--quick`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import jaxadjoint as ja
from jaxadjoint.problems import glv_problem, heat_grid, heat_rhs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import rel_error, time_interleaved, write_json  # noqa: E402

METHODS = ("jaxadjoint", "diffrax")
OPERATIONS = ("value_and_grad", "forward", "lax_map")
NUM_TIMES = 100
METHOD_NOTES = {
    "jaxadjoint": "jaxadjoint.solve(rhs, y0, t0, t1, args, solver=ja.Tsit5(), rtol, atol, "
    "dt0, saveat=ts) (default DiscreteAdjoint(), IController)",
    "diffrax": "diffrax.diffeqsolve(ODETerm(rhs), Tsit5(), t0, t1, dt0, y0, args, "
    "saveat=SaveAt(ts=ts), stepsize_controller=PIDController(rtol, atol), "
    "adjoint=RecursiveCheckpointAdjoint())",
}
PROBLEM_NOTES = {
    "neural_ode": "diffrax's neural-ODE example: MLP(2, 2, width 64, depth 2, softplus), "
    "float32, Tsit5, rtol=1e-3, atol=1e-6, dt0=ts[1]-ts[0], t in [0, 10], 100 save times; "
    "MSE against spiral trajectories; gradient w.r.t. the MLP",
    "latent_ode": "MLP(32, 32, width 128, depth 2, tanh), float32, Tsit5, rtol=1e-3, "
    "atol=1e-6, dt0=ts[1]-ts[0], t in [0, 5], 50 save times; MSE against trajectories of a "
    "damped rotation in 32 dimensions; gradient w.r.t. the MLP",
    "heat": "heat_rhs on a 24 x 24 grid, float64, Tsit5, rtol=1e-6, atol=1e-8, dt0 automatic, "
    "10 save times in [0.001, 0.01]; initial states mixes of sine modes; MSE against "
    "diffusivity-1 trajectories at diffusivity 0.8; gradient w.r.t. the diffusivity",
    "glv": "glv_problem(10, seed=0), float64, Tsit5, rtol=atol=1e-6, dt0 automatic, 100 noisy "
    "observation times in [0.1, 10]; MSE at perturbed parameters; gradient w.r.t. (r, A)",
}


# --- the problems: one set of data arrays, shared by both libraries ----------------------------


class Case(eqx.Module):
    """One problem at one batch size: everything both libraries are given.

    `params` is what the loss is differentiated with respect to (the vector field module for
    the neural ODE, `(r, A)` for GLV); `rhs(params) -> f(t, y, args)` builds the vector field;
    `y0s` (B, N) and `targets` (B, T, N) are the batch, observed at `ts` in `[t0, t1]`.
    """

    params: Any
    y0s: jax.Array
    targets: jax.Array
    ts: jax.Array
    t0: float = eqx.field(static=True)
    t1: float = eqx.field(static=True)
    rhs: Callable = eqx.field(static=True)
    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    dt0: float | None = eqx.field(static=True)


class Func(eqx.Module):
    """A neural vector field `f(t, y, args) = mlp(y)`: by default diffrax's example, an MLP
    2 -> 64 -> 64 -> 2 with softplus; the latent ODE uses other sizes and tanh."""

    mlp: eqx.nn.MLP

    def __init__(self, size: int = 2, width: int = 64, activation: Callable = jax.nn.softplus,
                 *, key: jax.Array):
        self.mlp = eqx.nn.MLP(in_size=size, out_size=size, width_size=width, depth=2,
                              activation=activation, key=key)

    def __call__(self, t, y, args):
        del t, args
        return self.mlp(y)


def _spiral_rhs(t, y, args):
    """The data-generating field of diffrax's neural-ODE example."""
    del t, args
    x = y / (1 + y)
    return jnp.stack([x[1], -x[0]])


def _rk4_at(rhs: Callable, y0: jax.Array, t0: float, ts: jax.Array, substeps: int = 20):
    """The solution of `y' = rhs(t, y, None)` at `ts` by classical RK4, `substeps` equal steps
    between consecutive save times (from `t0`).

    Only for making data (once, the same arrays for both libraries): a fixed-step scan
    compiles in a fraction of a second, where an adaptive solve costs seconds of the quick run.
    """

    def step(i, state):
        y, t, h = state
        k1 = rhs(t, y, None)
        k2 = rhs(t + h / 2, y + h / 2 * k1, None)
        k3 = rhs(t + h / 2, y + h / 2 * k2, None)
        k4 = rhs(t + h, y + h * k3, None)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), t + h, h

    def interval(carry, t_next):
        y, t = carry
        y, _, _ = jax.lax.fori_loop(0, substeps, step, (y, t, (t_next - t) / substeps))
        return (y, t_next), y

    return jax.lax.scan(interval, (y0, jnp.asarray(t0, ts.dtype)), ts)[1]


def neural_ode_case(batch: int, seed: int = 0) -> Case:
    """`batch` spirals of diffrax's example (float32) and a freshly initialised neural field.

    The batch is the first `batch` of 256 trajectories, so every batch size sees the same
    data. The targets are computed once by RK4 with 20 steps between save times (float32).
    """
    data_key, model_key = jax.random.split(jax.random.PRNGKey(seed))
    ts = jnp.linspace(0.0, 10.0, NUM_TIMES, dtype=jnp.float32)
    y0s = jax.random.uniform(data_key, (256, 2), jnp.float32, minval=-0.6, maxval=1.0)[:batch]
    targets = jax.jit(jax.vmap(lambda y0: _rk4_at(_spiral_rhs, y0, 0.0, ts)))(y0s)
    model = Func(key=model_key)
    return Case(model, y0s, targets, ts, t0=0.0, t1=10.0, rhs=lambda model: model, rtol=1e-3,
                atol=1e-6, dt0=float(ts[1] - ts[0]))


def latent_ode_case(batch: int, seed: int = 0, size: int = 32, width: int = 128) -> Case:
    """`batch` trajectories of a damped rotation `y' = M y` (`M` = a random skew-symmetric
    matrix minus `0.1 I`, float32) and a freshly initialised neural field on the same state.

    The batch is the first `batch` of 256 initial states, as for the neural ODE.
    """
    data_key, matrix_key, model_key = jax.random.split(jax.random.PRNGKey(seed), 3)
    ts = jnp.linspace(0.0, 5.0, 50, dtype=jnp.float32)
    y0s = jax.random.normal(data_key, (256, size), jnp.float32)[:batch]
    g = jax.random.normal(matrix_key, (size, size), jnp.float32) / jnp.sqrt(size)
    matrix = g - g.T - 0.1 * jnp.eye(size, dtype=jnp.float32)
    targets = jax.jit(jax.vmap(
        lambda y0: _rk4_at(lambda t, y, args: matrix @ y, y0, 0.0, ts)))(y0s)
    model = Func(size, width, jnp.tanh, key=model_key)
    return Case(model, y0s, targets, ts, t0=0.0, t1=5.0, rhs=lambda model: model, rtol=1e-3,
                atol=1e-6, dt0=float(ts[1] - ts[0]))


def heat_case(batch: int, seed: int = 0, n_points: int = 24) -> Case:
    """`batch` heat-equation trajectories (float64) from mixes of the first sine modes.

    Initial state `sum_{j,k <= 3} c_jk sin(j pi x) sin(k pi y)` with `c ~ N(0, 1)` (zero on
    the boundary); targets at diffusivity 1 by RK4 (20 steps between save times, well inside
    its stability limit); the loss is evaluated at diffusivity 0.8.
    """
    x, y = heat_grid(n_points)
    rng = np.random.default_rng(seed)
    coefficients = rng.standard_normal((256, 3, 3))[:batch]
    modes = np.stack([np.sin(j * np.pi * x) * np.sin(k * np.pi * y)
                      for j in range(1, 4) for k in range(1, 4)])
    y0s = np.einsum("bm,mij->bij", coefficients.reshape(batch, 9), modes)
    y0s[:, [0, -1], :] = 0.0
    y0s[:, :, [0, -1]] = 0.0
    y0s = jnp.asarray(y0s)
    ts = jnp.linspace(0.001, 0.01, 10)
    targets = jax.jit(jax.vmap(
        lambda y0: _rk4_at(lambda t, u, args: heat_rhs(t, u, 1.0), y0, 0.0, ts)))(y0s)

    def field(alpha):
        return lambda t, u, args: heat_rhs(t, u, alpha)

    return Case(jnp.asarray(0.8), y0s, targets, ts, t0=0.0, t1=0.01, rhs=field, rtol=1e-6,
                atol=1e-8, dt0=None)


def _glv_field(params):
    r, A = params

    def rhs(t, x, args):
        del t, args
        return x * (r + A @ x)

    return rhs


def glv_case(batch: int, seed: int = 0, noise: float = 0.01) -> Case:
    """Noisy observations of `glv_problem(10, seed)` at 100 times from `batch` initial states.

    The first initial state is the problem's own, the others `U(0.05, 0.5)^10`. The
    observations are the true solution (RK4, 20 steps between observations: relative error
    below 1e-9) plus Gaussian noise
    of standard deviation `noise`; the loss is evaluated at `r (1 + 0.1 e_r)`, `A + 0.05 e_A`
    (standard normal `e`), away from the optimum so that the gradient is not small.
    """
    problem = glv_problem(10, seed=seed, t1=10.0)
    rng = np.random.default_rng(seed + 1)
    n = problem.y0.shape[0]
    y0s = np.concatenate([np.asarray(problem.y0)[None], rng.uniform(0.05, 0.5, (batch - 1, n))])
    y0s = jnp.asarray(y0s)
    ts = jnp.linspace(0.1, 10.0, NUM_TIMES)
    truth = jax.jit(jax.vmap(lambda y0: _rk4_at(_glv_field(problem.args), y0, 0.0, ts)))(y0s)
    targets = truth + noise * jnp.asarray(rng.standard_normal(truth.shape))
    r, A = problem.args
    params = (r * (1 + 0.1 * jnp.asarray(rng.standard_normal(r.shape))),
              A + 0.05 * jnp.asarray(rng.standard_normal(A.shape)))
    return Case(params, y0s, targets, ts, t0=0.0, t1=10.0, rhs=_glv_field, rtol=1e-6,
                atol=1e-6, dt0=None)


PROBLEMS = {"neural_ode": (neural_ode_case, "float32"), "latent_ode": (latent_ode_case, "float32"),
            "heat": (heat_case, "float64"), "glv": (glv_case, "float64")}


@contextlib.contextmanager
def precision(dtype: str) -> Iterator[None]:
    """Run with `jax_enable_x64` set for `dtype` (float32 as neural-ODE users run it)."""
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", dtype == "float64")
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


@contextlib.contextmanager
def problem_case(kind: str, batch: int) -> Iterator[tuple[Case, tuple]]:
    """``(case, data)`` of problem ``kind`` at ``batch`` trajectories, built and used in its
    precision; ``data`` is the loss's arguments ``(params, y0s, targets)``."""
    make, dtype = PROBLEMS[kind]
    with precision(dtype):
        case = make(batch)
        yield case, (case.params, case.y0s, case.targets)


# --- the functions being timed -----------------------------------------------------------------


def trajectory(method: str, case: Case) -> Callable:
    """`(params, y0) -> (y at ts, accepted steps, attempted steps)` for one trajectory."""
    ts = case.ts
    if method == "jaxadjoint":

        def solve(params, y0):
            sol = ja.solve(case.rhs(params), y0, case.t0, case.t1, None, solver=ja.Tsit5(),
                           rtol=case.rtol, atol=case.atol, dt0=case.dt0, saveat=ts)
            return sol.ys, sol.stats["num_accepted_steps"], sol.stats["num_steps"]

        return solve
    if method == "diffrax":

        def solve(params, y0):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(case.rhs(params)), diffrax.Tsit5(),
                case.t0, case.t1, case.dt0, y0, None,
                saveat=diffrax.SaveAt(ts=ts),
                stepsize_controller=diffrax.PIDController(rtol=case.rtol, atol=case.atol),
                adjoint=diffrax.RecursiveCheckpointAdjoint(),
            )
            return sol.ys, sol.stats["num_accepted_steps"], sol.stats["num_steps"]

        return solve
    raise ValueError(f"unknown method {method!r}")


def operation(op: str, method: str, case: Case) -> Callable:
    """The function `(params, y0s, targets) -> result` timed for operation `op`.

    `value_and_grad` and `lax_map` return `((loss, (accepted, attempted)), grads)`, the step
    counts of every trajectory riding along as auxiliary output (free: the solve computes
    them anyway); `forward` returns `(ys, accepted, attempted)`.
    """
    solve = trajectory(method, case)

    def loss(params, y0s, targets):
        # As in diffrax's example: the batch is vmapped inside the loss.
        ys, accepted, attempted = jax.vmap(lambda y0: solve(params, y0))(y0s)
        return jnp.mean((ys - targets) ** 2), (accepted, attempted)

    if op == "value_and_grad":
        return eqx.filter_jit(eqx.filter_value_and_grad(loss, has_aux=True))
    if op == "forward":

        @eqx.filter_jit
        def forward(params, y0s, targets):
            del targets
            return jax.vmap(lambda y0: solve(params, y0))(y0s)

        return forward
    if op == "lax_map":

        def lane_loss(params, y0, target):
            ys, accepted, attempted = solve(params, y0)
            return jnp.mean((ys - target) ** 2), (accepted, attempted)

        lane = eqx.filter_value_and_grad(lane_loss, has_aux=True)

        @eqx.filter_jit
        def mapped(params, y0s, targets):
            # Every trajectory has the same number of points: the batch loss is the mean of
            # the lanes' losses, its gradient the mean of their gradients.
            (values, steps), grads = jax.lax.map(lambda a: lane(params, *a), (y0s, targets))
            return (jnp.mean(values), steps), jax.tree.map(lambda g: jnp.mean(g, axis=0), grads)

        return mapped
    raise ValueError(f"unknown operation {op!r}")


# --- one problem at one batch size -------------------------------------------------------------


def _steps(accepted: Any, attempted: Any) -> dict:
    accepted, attempted = np.asarray(accepted), np.asarray(attempted)
    return {"accepted_steps_mean": float(accepted.mean()),
            "accepted_steps_max": int(accepted.max()),
            "steps_mean": float(attempted.mean()), "steps_max": int(attempted.max())}


def bench_case(kind: str, batch: int, ops: list[str], options: argparse.Namespace,
               log: Callable) -> list[dict]:
    """Every (method, operation) of one problem and batch size, timed interleaved.

    Compile time = first call - steady-state median, through the same `filter_jit` call that
    is timed. Caches are cleared once per group, so `value_and_grad` (compiled first) is cold
    for both libraries; `forward` and `lax_map` come after it and may reuse some of their
    library's inner traces (alike for both libraries).
    """
    with problem_case(kind, batch) as (case, data):
        keys = [(m, op) for op in OPERATIONS if op in ops for m in METHODS
                if not (op == "lax_map" and batch == 1)]
        jax.clear_caches()
        jax.block_until_ready(jax.jit(jnp.sin)(case.y0s))  # backend warm-up, paid by neither
        fns, first, results = {}, {}, {}
        for key in keys:
            fns[key] = operation(key[1], key[0], case)
            start = time.perf_counter()
            results[key] = jax.block_until_ready(fns[key](*data))
            first[key] = time.perf_counter() - start
            log(f"  first call {key[0]:10s} {key[1]:14s} {first[key]:6.2f} s")
        calls = {key: (lambda f=fns[key]: f(*data)) for key in keys}
        timings = time_interleaved(calls, budget_s=options.budget,
                                   min_repeats=options.min_repeats,
                                   max_repeats=options.max_repeats)

    steps, losses = {}, {}
    for (method, op), out in results.items():
        if op == "forward":
            steps.setdefault(method, _steps(*out[1:]))
        else:
            (value, (accepted, attempted)), grads = out
            steps.setdefault(method, _steps(accepted, attempted))
            losses[(method, op)] = float(value), eqx.filter(grads, eqx.is_inexact_array)
    sanity = {}
    if all((m, "value_and_grad") in losses for m in METHODS):
        (lj, gj), (ld, gd) = (losses[(m, "value_and_grad")] for m in METHODS)
        sanity = {"loss_rel_diff": abs(lj - ld) / abs(ld), "grad_rel_diff": rel_error(gj, gd)}
    records = []
    for method, op in keys:
        timing = timings[(method, op)]
        record = {
            "problem": kind, "batch": batch, "dtype": PROBLEMS[kind][1], "method": method,
            "operation": op, "time_median_s": timing.median, "time_min_s": timing.min,
            "time_max_s": timing.max, "cpu_median_s": timing.cpu_median,
            "repeats": timing.repeats, "calls_per_repeat": timing.number,
            "first_call_s": first[(method, op)],
            "compile_s": first[(method, op)] - timing.median, **steps[method], **sanity,
        }
        if (method, op) in losses:
            record["loss"] = losses[(method, op)][0]
        if op == "lax_map" and (method, "value_and_grad") in losses:
            # The same loss and gradient, computed lane by lane: a check of the batching.
            record["lax_map_vs_vmap_grad_rel_diff"] = rel_error(
                losses[(method, op)][1], losses[(method, "value_and_grad")][1])
        records.append(record)
    log("  " + " ".join(f"{m}/{op}={timings[(m, op)].median * 1e3:.3g}ms" for m, op in keys))
    if sanity:
        log(f"  loss jaxadjoint vs diffrax: relative difference {sanity['loss_rel_diff']:.1e}, "
            f"gradient {sanity['grad_rel_diff']:.1e}; accepted steps (mean over the batch) "
            f"{steps['jaxadjoint']['accepted_steps_mean']:.1f} / "
            f"{steps['diffrax']['accepted_steps_mean']:.1f}")
    return records


# --- ratios and the table ----------------------------------------------------------------------


def summarise(records: list[dict]) -> list[dict]:
    """Ratios of medians measured side by side: jaxadjoint / diffrax, and vmap / lax.map."""
    index = {(r["problem"], r["batch"], r["method"], r["operation"]): r for r in records}
    rows = []
    for kind, batch in dict.fromkeys((r["problem"], r["batch"]) for r in records):
        row: dict[str, Any] = {"problem": kind, "batch": batch}
        for op in OPERATIONS:
            ours, peer = (index.get((kind, batch, m, op)) for m in METHODS)
            if ours and peer:
                row[f"{op}_ratio"] = ours["time_median_s"] / peer["time_median_s"]
                row[f"{op}_ratio_min"] = ours["time_min_s"] / peer["time_min_s"]
                row[f"{op}_compile_ratio"] = ours["compile_s"] / peer["compile_s"]
        for method in METHODS:
            vmapped, mapped = (index.get((kind, batch, method, op))
                               for op in ("value_and_grad", "lax_map"))
            if vmapped and mapped:
                row[f"vmap_over_lax_map_{method}"] = (
                    vmapped["time_median_s"] / mapped["time_median_s"])
        any_record = next(r for r in records if (r["problem"], r["batch"]) == (kind, batch))
        for field in ("loss_rel_diff", "grad_rel_diff"):
            row[field] = any_record.get(field)
        row["accepted_steps_mean"] = {
            r["method"]: r["accepted_steps_mean"] for r in records
            if (r["problem"], r["batch"]) == (kind, batch)}
        rows.append(row)
    return rows


def print_table(records: list[dict], rows: list[dict]) -> None:
    index = {(r["problem"], r["batch"], r["method"], r["operation"]): r for r in records}
    print("\nMedian wall time [ms] (min-max); ratio = jaxadjoint / diffrax (medians; in brackets "
          "the ratio of the fastest repeats); compile = first call - median [s]")
    header = (f"{'problem':10s} {'B':>4s} {'operation':14s} {'jaxadjoint':>22s} "
              f"{'diffrax':>22s} {'ratio':>13s} {'compile ja/dfx':>15s} {'steps ja/dfx':>13s}")
    print(header)
    print("-" * len(header))
    for row in rows:
        kind, batch = row["problem"], row["batch"]
        for op in OPERATIONS:
            cells = [index.get((kind, batch, m, op)) for m in METHODS]
            if not all(cells):
                continue
            times = [f"{c['time_median_s'] * 1e3:.3g} ({c['time_min_s'] * 1e3:.3g}-"
                     f"{c['time_max_s'] * 1e3:.3g})" for c in cells]
            steps = "/".join(f"{c['accepted_steps_mean']:.0f}" for c in cells)
            compile_s = "/".join(f"{c['compile_s']:.1f}" for c in cells)
            ratio = f"{row[f'{op}_ratio']:.2f} [{row[f'{op}_ratio_min']:.2f}]"
            print(f"{kind:10s} {batch:4d} {op:14s} {times[0]:>22s} {times[1]:>22s} "
                  f"{ratio:>13s} {compile_s:>15s} {steps:>13s}")
    print("\nvmap / lax.map (value_and_grad, median times) and agreement of the two libraries "
          "(relative difference of the loss and max-norm of the gradient)")
    for row in rows:
        maps = " ".join(f"{m} {row[f'vmap_over_lax_map_{m}']:.2f}" for m in METHODS
                        if f"vmap_over_lax_map_{m}" in row)
        loss, grad = row.get("loss_rel_diff"), row.get("grad_rel_diff")
        agree = "" if loss is None else f"loss {loss:.1e}, gradient {grad:.1e}"
        print(f"  {row['problem']:10s} B={row['batch']:<4d} vmap/lax.map: {maps or '-':28s} "
              f"{agree}")


def plot(rows: list[dict], path: str) -> None:
    """Bar chart of the time ratios jaxadjoint / diffrax per problem, batch and operation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['problem']}\nB={r['batch']}" for r in rows]
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(rows), 3.4))
    ops = [op for op in OPERATIONS if any(f"{op}_ratio" in r for r in rows)]
    width = 0.8 / len(ops)
    for j, op in enumerate(ops):
        values = [r.get(f"{op}_ratio", float("nan")) for r in rows]
        ax.bar([i + (j - (len(ops) - 1) / 2) * width for i in range(len(rows))], values, width,
               label=op)
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("time jaxadjoint / diffrax")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- command line ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke test (about a minute): value_and_grad only, B=8 of each "
                        "problem, few repeats")
    parser.add_argument("--problems", nargs="+", choices=tuple(PROBLEMS),
                        default=list(PROBLEMS))
    parser.add_argument("--neural-batches", nargs="+", type=int, default=[1, 32, 256])
    parser.add_argument("--latent-batches", nargs="+", type=int, default=[16, 64])
    parser.add_argument("--heat-batches", nargs="+", type=int, default=[8])
    parser.add_argument("--glv-batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--operations", nargs="+", choices=OPERATIONS, default=list(OPERATIONS))
    parser.add_argument("--budget", type=float, default=10.0,
                        help="seconds of timing per problem and batch size (all calls "
                        "interleaved)")
    parser.add_argument("--min-repeats", type=int, default=5)
    parser.add_argument("--max-repeats", type=int, default=21)
    parser.add_argument("--retain-freed-memory", action="store_true",
                        help="call ja.retain_freed_memory() first (glibc keeps freed heap "
                        "memory for reuse; applies to both libraries, same process)")
    parser.add_argument("--no-plot", dest="plot", action="store_false")
    parser.add_argument("--output", default=None,
                        help="JSON file (default benchmarks/results/timeseries.json, "
                        "timeseries-quick.json with --quick)")
    options = parser.parse_args(argv)
    if options.quick:
        # Each operation costs a cold compile per library (2-13 s each): the gradient only.
        options.neural_batches = options.latent_batches = [8]
        options.heat_batches = options.glv_batches = [8]
        options.operations = ["value_and_grad"]
        options.budget, options.min_repeats, options.max_repeats = 1.0, 3, 5
    if options.output is None:
        name = "timeseries-quick.json" if options.quick else "timeseries.json"
        options.output = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name)
    return options


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    start = time.perf_counter()
    if options.retain_freed_memory:
        options.retain_freed_memory = ja.retain_freed_memory()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {message}", flush=True)

    records = []
    for kind in options.problems:
        batches = {"neural_ode": options.neural_batches, "latent_ode": options.latent_batches,
                   "heat": options.heat_batches, "glv": options.glv_batches}[kind]
        for batch in batches:
            log(f"{kind} B={batch} ({PROBLEMS[kind][1]})")
            records += bench_case(kind, batch, options.operations, options, log)
            write_json(options.output, records, methods=METHOD_NOTES, problems=PROBLEM_NOTES,
                       summary=summarise(records), options=vars(options))
    rows = summarise(records)
    print_table(records, rows)
    if options.plot:
        plot(rows, os.path.splitext(options.output)[0] + ".png")
    log(f"done; results in {options.output}")


if __name__ == "__main__":
    main()
