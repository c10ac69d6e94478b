"""Checkpoint strategies give bit-for-bit the same outputs and gradients.

`StoreStates` recomputes the stages inside the reverse loop, `StoreStages` loads the
stored ones, `Recursive` replays steps from a few checkpoints and reverses segment by
segment; all three run the same arithmetic on the same recorded grid (see the module
docstring of `jaxadjoint._reverse` for what keeps XLA from rounding it differently).  So
the leaves are compared with `np.array_equal`, not a tolerance: the solution, the loss,
the gradients with respect to the initial state, the args and the array closed over by
the rhs, and the time gradients.  Covered: both block sizes (the parameter adjoint per
step; blocks of four steps when the parameters are many, where the segments of `Recursive`
start and end inside blocks), several solvers, with and without an integrand, forwards
and backwards in time, and `jax.jacrev` (the pullback under `vmap` over seeds).

`StoreStages` linearises at the stage values the forward loop computed, the others at
values the reverse pass recomputes.  The values agree bitwise; the parameter VJPs agree
because every path keeps the stage cotangents materialised (`_reverse.joint_stage_vjps`;
without that, Vern7 here differed by an ulp in the gradient with respect to ``eps``).

Compile time dominates: the one-step cases use an integrand, so that their `StoreStates`
runs are the compilations of `test_gradients.py`; each configuration is compiled once and
run in both time directions.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import solve_cases as sc

import jaxadjoint as ja
from jaxadjoint._reverse import block_size

STATES, STAGES = ja.StoreStates(), ja.StoreStages()

# (solver, parameters, integrand?, strategies compared with StoreStates).  Recursive(2)
# reverses segments of one or two steps, Recursive(5) longer ones: with blocks of four
# steps they start and end blocks at varying places.
CASES = [
    (ja.Heun(), "few", True, (STAGES, ja.Recursive(2))),
    (ja.Dopri5(), "few", True, (STAGES, ja.Recursive(5))),
    (ja.Vern7(), "few", False, (STAGES, ja.Recursive(2))),
    (ja.Heun(), "many", False, (STAGES, ja.Recursive(2), ja.Recursive(5))),
    (ja.Dopri5(), "many", True, (ja.Recursive(2),)),
]


def _case_id(case) -> str:
    solver, params, integrand, strategies = case
    names = "-".join(f"{type(s).__name__}{getattr(s, 'num_checkpoints', '')}"
                     for s in strategies)
    return f"{type(solver).__name__}-{params}-{'integrand' if integrand else 'plain'}-{names}"


def inputs(solver, params):
    """The shared test problem; "many" adds 1026 parameters (the blocked reverse path)."""
    y0, args, rhs = sc.make_inputs(sc.layout_for(solver))
    if params == "many":
        args["P"] = jnp.asarray(np.random.default_rng(0).normal(size=(3, 342)))
    assert block_size(args, sc.N) == (4 if params == "many" else 1)
    return y0, args, rhs


def outputs(diff, times, solver, checkpoint, integrand):
    """Everything `solve_value_and_grad` returns, by name."""
    kwargs = sc.sweep_kwargs(solver, checkpoint=checkpoint, with_integral=integrand)
    value, (grads, time_grads), sol = sc.run(diff, *times, kwargs)
    assert sol.result == ja.RESULTS.successful
    return dict(value=value, y0=grads[0], args=grads[1], rhs=grads[2], times=time_grads,
                ys=sol.ys, integral=sol.integral, steps=sol.steps)


def assert_bitwise(result, reference, what):
    leaves, ref_leaves = jax.tree.leaves(result), jax.tree.leaves(reference)
    assert len(leaves) == len(ref_leaves), what
    for i, (a, b) in enumerate(zip(leaves, ref_leaves)):
        a, b = np.asarray(a), np.asarray(b)
        assert np.array_equal(a, b, equal_nan=True), (
            f"{what}, leaf {i}: max |difference| {np.max(np.abs(a - b)):.2e}"
        )


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_strategies_bitwise(case):
    solver, params, integrand, strategies = case
    diff = inputs(solver, params)
    for times in (sc.FORWARD, sc.BACKWARD):
        reference = outputs(diff, times, solver, STATES, integrand)
        # More steps than checkpoints and than a block: Recursive replays and cuts blocks.
        assert np.sum(np.isfinite(np.asarray(reference["steps"]))) > 6
        for checkpoint in strategies:
            result = outputs(diff, times, solver, checkpoint, integrand)
            for key in reference:
                assert_bitwise(result[key], reference[key], f"{checkpoint}, {key}, {times}")


@eqx.filter_jit
def saved_states_jacobian(diff, times, kwargs):
    """`jax.jacrev` of the saved states with respect to ``(y0, args, rhs)``."""
    t0, t1, saveat = times

    def saved_states(diff):
        y0, args, rhs = diff
        return ja.solve(rhs, y0, t0, t1, args, saveat=saveat, **kwargs).ys

    return jax.jacrev(saved_states)(diff)


def test_jacrev_bitwise():
    """The pullback under `vmap` over cotangent seeds, on the blocked path (the block's
    batched stage cotangents are handed from one segment of `Recursive` to the next)."""
    solver = ja.Heun()
    diff = inputs(solver, "many")
    for t0, t1, saveat in (sc.FORWARD, sc.BACKWARD):
        times = (sc.f64(t0), sc.f64(t1), sc.f64(saveat))
        reference, *others = (
            saved_states_jacobian(diff, times, sc.sweep_kwargs(
                solver, checkpoint=checkpoint, with_integral=False))
            for checkpoint in (STATES, STAGES, ja.Recursive(3))
        )
        for jacobian in others:
            assert_bitwise(jacobian, reference, f"jacrev ({t0} -> {t1})")


def _stencil_rhs(t, u, alpha):
    """A 5-point Laplacian with zero boundary values (a discretised heat equation)."""
    del t
    inner = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    return jnp.pad(alpha * inner, 1)


def test_stencil_bitwise_and_exact():
    """A state large enough (7 x 7) for each stage's VJP to run in its own branch
    (`_reverse._apply_vjp`): strategies stay bitwise equal, and equal the replay."""
    from helpers import max_rel_diff, replay

    from jaxadjoint._reverse import ISOLATED_VJP_MIN_SIZE

    x = np.linspace(0.0, 1.0, 7)
    u0 = jnp.asarray(np.outer(np.sin(np.pi * x), np.sin(np.pi * x * 2)) + 0.1 * np.outer(x, x))
    assert u0.size >= ISOLATED_VJP_MIN_SIZE
    alpha = jnp.asarray(1.3)

    @eqx.filter_jit
    def value_and_grad(u0, alpha, checkpoint):
        def loss(u0, alpha):
            sol = ja.solve(_stencil_rhs, u0, 0.0, 1.0, alpha, solver=ja.Dopri5(),
                           rtol=1e-8, atol=1e-8, sensitivity=ja.DiscreteAdjoint(checkpoint))
            return jnp.sum(sol.ys[-1] ** 3), sol.steps

        return jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(u0, alpha)

    (value, grid), reference = value_and_grad(u0, alpha, STATES)
    assert accepted_grid_len(grid) > 6
    for checkpoint in (STAGES, ja.Recursive(3)):
        (other_value, _), grads = value_and_grad(u0, alpha, checkpoint)
        assert_bitwise((other_value, grads), (value, reference), str(checkpoint))

    def replayed_loss(u0, alpha):
        ys, _ = replay(_stencil_rhs, ja.Dopri5(), u0, alpha, accepted_grid_of(grid))
        return jnp.sum(ys[-1] ** 3)

    expected = jax.grad(replayed_loss, argnums=(0, 1))(u0, alpha)
    assert max_rel_diff(reference, expected) < 1e-12


def accepted_grid_of(grid):
    grid = np.asarray(grid)
    return grid[np.isfinite(grid)]


def accepted_grid_len(grid):
    return accepted_grid_of(grid).size - 1
