"""What JAX traces and compiles: the reverse pass under `vmap`, and no silent recompiles.

`jax.jacrev` is `vmap` of the pullback over cotangent seeds.  The discrete adjoint's
reverse pass recomputes the stage values ``Y_m`` from the stored states; they depend only
on the recorded solve, not on the seed, so they must stay *unbatched* — one matrix–vector
product ``A @ Y_m`` per stage — while the vector–Jacobian products carry the batch and
become matrix–matrix products ``Kbar @ A``.  (Batched recomputation would be correct but
would redo the same stage arithmetic once per seed.)

How to check this by hand::

    print(jax.make_jaxpr(jax.jacrev(make_F(None)))(A))

and find the two big ``while`` loops: the forward solve (no 11 anywhere in it) and the
reverse sweep, whose carry holds the batched adjoint ``f64[11,5]`` (11 = the number of
seeds; ``f64[11,5,5]`` for the parameter adjoint).  In its body, the stage
recomputation shows up as ``dot_general`` of ``f64[5,5]`` with ``f64[5]`` (contracting
``A``'s dimension 1) and the state VJPs as ``dot_general`` of ``f64[11,5]`` with
``f64[5,5]`` (contracting ``A``'s dimension 0).  A ``dot_general`` contracting ``A``'s
dimension 1 against an operand with an 11 in its shape would mean the recomputation
was batched.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import solve_cases as sc
from helpers import equations, subjaxprs
from jax.extend import core as jex

import jaxadjoint as ja

N = 5  # state size
SEEDS = 11  # outputs of F = number of cotangent seeds of jacrev (distinct from every
# other size in the program: N, the number of stages, blocks of stages, max_steps + 1)
MAX_STEPS = 64

A = jnp.asarray(np.random.default_rng(0).normal(size=(N, N)) * 0.3)
C = jnp.asarray(np.random.default_rng(1).normal(size=(SEEDS, N)))
Y0 = jnp.linspace(1.0, 2.0, N)


# Enough extra parameters (>= 1024) to send the reverse pass through blocks of steps.
P = jnp.asarray(np.random.default_rng(2).normal(size=(N, 210)) * 1e-3)


def linear(t, y, args):
    del t
    A, P = args
    out = A @ y
    if P is not None:
        out = out + P @ jnp.tile(jnp.tanh(y), P.shape[1] // N)
    return out


def make_F(P):
    def F(A):
        """``C y(1)`` for ``y' = A y (+ P g(y))``: SEEDS outputs, so `jacrev` vmaps over
        SEEDS seeds."""
        return C @ ja.solve(linear, Y0, 0.0, 1.0, (A, P), max_steps=MAX_STEPS).ys[0]

    return F




def while_loops(jaxpr: jex.Jaxpr) -> list:
    """The outermost ``while`` equations of ``jaxpr`` (not those nested in a loop)."""
    loops = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "while":
            loops.append(eqn)
        else:
            for sub in subjaxprs(eqn):
                loops.extend(while_loops(sub))
    return loops


def is_batched(var) -> bool:
    return SEEDS in getattr(var.aval, "shape", ())


def classify_products(eqns) -> dict[str, int]:
    """Count the ``dot_general``s involving the (N, N) matrix by role and batching.

    ``forward``: ``A`` contracted on its dimension 1 (``A @ y``, the rhs itself);
    ``transposed``: contracted on dimension 0 (``kbar @ A``, a vector–Jacobian product).
    """
    counts = {"forward unbatched": 0, "forward batched": 0,
              "transposed unbatched": 0, "transposed batched": 0}
    for eqn in eqns:
        if eqn.primitive.name != "dot_general":
            continue
        (lhs_contract, rhs_contract), _ = eqn.params["dimension_numbers"]
        lhs, rhs = eqn.invars
        for matrix, other, contract in ((lhs, rhs, lhs_contract), (rhs, lhs, rhs_contract)):
            if matrix.aval.shape == (N, N) and len(contract) == 1:
                role = "forward" if contract[0] == 1 else "transposed"
                batch = "batched" if (is_batched(other) or is_batched(eqn.outvars[0])) \
                    else "unbatched"
                counts[f"{role} {batch}"] += 1
    return counts


def test_classifier_sees_a_batched_matrix_vector_product():
    """The counting below would notice a batched recomputation: check it on one."""
    jaxpr = jax.make_jaxpr(jax.vmap(lambda y: A @ y))(jnp.ones((SEEDS, N)))
    assert classify_products(equations(jaxpr.jaxpr))["forward batched"] == 1
    jaxpr = jax.make_jaxpr(lambda y: A @ y)(jnp.ones(N))
    assert classify_products(equations(jaxpr.jaxpr))["forward unbatched"] == 1


@pytest.mark.parametrize("P", [None, P], ids=["one-step", "blocked"])
def test_jacrev_reverse_pass_recomputes_stages_unbatched(P):
    jaxpr = jax.make_jaxpr(jax.jacrev(make_F(P)))(A).jaxpr
    loops = while_loops(jaxpr)
    batched_loops = [
        loop for loop in loops
        if any(is_batched(v) for v in loop.outvars)
    ]
    unbatched_loops = [loop for loop in loops if loop not in batched_loops]
    # The forward solve runs once, unbatched (its loop has no seed axis anywhere).
    forward = [loop for loop in unbatched_loops
               if classify_products(equations(loop.params["body_jaxpr"].jaxpr))
               ["forward unbatched"] > 0]
    assert forward, "no forward solve loop found"
    for loop in forward:
        body = list(equations(loop.params["body_jaxpr"].jaxpr))
        assert not any(is_batched(v) for eqn in body for v in eqn.outvars)
    # The reverse sweep: the loop that carries the batched adjoint and multiplies by A.
    reverse = [loop for loop in batched_loops
               if sum(classify_products(equations(loop.params["body_jaxpr"].jaxpr)).values())]
    assert len(reverse) == 1, f"expected one reverse loop, found {len(reverse)}"
    counts = classify_products(equations(reverse[0].params["body_jaxpr"].jaxpr))
    live_stages = len(ja.Dopri5().tableau.live_stages)
    assert counts["forward batched"] == 0, counts  # no stage recomputed per seed
    assert counts["forward unbatched"] >= live_stages, counts  # stages recomputed, once
    assert counts["transposed batched"] >= live_stages, counts  # batched VJPs
    assert counts["transposed unbatched"] == 0, counts


def test_no_recompile_for_new_values():
    """Calling the compiled gradient again with new values (inputs, times, save times,
    tolerances, first step) does not trace it again."""
    solver = ja.Dopri5()
    diff = sc.make_inputs(sc.layout_for(solver))
    kwargs = sc.sweep_kwargs(solver)
    t0, t1, saveat = sc.FORWARD
    sc.run(diff, t0, t1, saveat, kwargs)
    assert sc.traces_of_run(diff, t0, t1, saveat, kwargs) == 1
    new_diff = sc.make_inputs(sc.layout_for(solver), eps=0.1, u0=(0.3, 0.2, 0.1))
    new_kwargs = sc.sweep_kwargs(solver, rtol=1e-5, atol=1e-6, dt0=0.3)
    sc.run(new_diff, *sc.BACKWARD, new_kwargs)
    sc.run(new_diff, -1.0, 0.5, (-0.5, 0.0, 0.5), new_kwargs)
    assert sc.traces_of_run(diff, t0, t1, saveat, kwargs) == 1
    assert sc.traces_of_run(new_diff, -1.0, 0.5, (-0.5, 0.0, 0.5), new_kwargs) == 1


def _is_transposed_product(eqn, size: int) -> bool:
    """A ``dot_general`` contracting dimension 0 of a (size, size) matrix: ``kbar @ M``."""
    if eqn.primitive.name != "dot_general":
        return False
    (lhs_contract, rhs_contract), _ = eqn.params["dimension_numbers"]
    return any(v.aval.shape == (size, size) and tuple(c) == (0,)
               for v, c in zip(eqn.invars, (lhs_contract, rhs_contract)))


@pytest.mark.parametrize("size", [4, 36])
def test_stage_vjps_run_in_their_own_branch_for_large_states(size, monkeypatch):
    """From `ISOLATED_VJP_MIN_SIZE` state components on, each live stage's VJP in the
    reverse sweep is a `cond` of its own (so XLA materialises its cotangents instead of
    re-summing them in every consumer); below, it is inline (a branch costs more than a
    tiny state's recomputation).  (The whole reverse step of a small system is in a branch
    of its own, `_sequential`: not counted here.)"""
    from jaxadjoint._reverse import ISOLATED_VJP_MIN_SIZE

    monkeypatch.setenv("JAXADJOINT_SEQUENTIAL", "0")

    matrix = -jnp.eye(size) + 0.01

    def loss(y0):
        sol = ja.solve(lambda t, y, M: M @ y, y0, 0.0, 1.0, matrix, max_steps=MAX_STEPS)
        return jnp.sum(sol.ys**2)

    jaxpr = jax.make_jaxpr(jax.grad(loss))(jnp.ones(size)).jaxpr
    body = [e for loop in while_loops(jaxpr)
            for e in equations(loop.params["body_jaxpr"].jaxpr)]
    vjps = sum(_is_transposed_product(e, size) for e in body)
    branched = [e for e in body if e.primitive.name == "cond"
                and any(_is_transposed_product(x, size)
                        for b in e.params["branches"] for x in equations(b.jaxpr))]
    live_stages = len(ja.Dopri5().tableau.live_stages)
    assert vjps >= live_stages
    assert len(branched) == (live_stages if size >= ISOLATED_VJP_MIN_SIZE else 0)


@pytest.mark.parametrize("sensitivity", [
    ja.DiscreteAdjoint(), ja.ContinuousAdjoint(), ja.DiscreteForward(),
    ja.ForwardSensitivity(), ja.FiniteDifferences(),
], ids=lambda s: type(s).__name__)
def test_gradients_have_no_effects_and_keep_their_checks(sensitivity):
    """A jitted program with a side effect (a `jax.debug.callback`) is dispatched through
    JAX's Python path on every call (~1 ms for a neural-ODE training step at batch 1), so
    the gradient's run-time checks (`_runtime_error.raise_if`: the stiff-step flag, the
    adjoint's blow-up) are pure callbacks tied to the derivative's values: no effects,
    and still in the program."""

    def loss(k):
        sol = ja.solve(lambda t, y, k: -k * y, jnp.ones(2), 0.0, 1.0, k, solver=ja.Tsit5(),
                       saveat=jnp.asarray([0.5, 1.0]), sensitivity=sensitivity)
        return jnp.sum(sol.ys)

    jaxpr = jax.make_jaxpr(jax.grad(loss))(jnp.asarray(0.7)).jaxpr
    assert not jaxpr.effects
    names = {eqn.primitive.name for eqn in equations(jaxpr)}
    assert "debug_callback" not in names
    assert "pure_callback" in names


# --- The library's own matrix products run at full precision ------------------------------


def _lotka_volterra(t, y, a):
    del t
    return jnp.stack([a[0] * y[0] - y[0] * y[1], y[0] * y[1] - a[1] * y[1]])


def _float32_loss(solver, sensitivity):
    y0, ts = jnp.array([1.0, 0.5], jnp.float32), jnp.linspace(0, 2, 7, dtype=jnp.float32)

    def loss(a):
        return jnp.sum(ja.solve(_lotka_volterra, y0, 0.0, 2.0, a, solver=solver, saveat=ts,
                                sensitivity=sensitivity).ys)
    return loss


def _dense_loss(a):
    sol = ja.solve(_lotka_volterra, jnp.array([1.0, 0.5], jnp.float32), 0.0, 2.0, a,
                   saveat=ja.SaveAt(dense=True))
    return jnp.sum(sol.evaluate(jnp.float32(0.3)))


@pytest.mark.parametrize("case", ["Vern8 saves", "ForwardSensitivity", "FiniteDifferences",
                                  "Kvaerno5", "dense"])
def test_library_products_are_not_rounded_to_tf32(case):
    """A GPU's default float32 matrix product rounds its inputs to TF32 (10 bits).  On an
    H200, Vern8's interpolation weights in float32 were off by 0.24 (of 50) through it; every
    product the library adds (the field's own are the user's) asks for full precision.
    The field here has none, so every ``dot_general`` in the program is the library's."""
    a = jnp.array([1.0, 1.0], jnp.float32)
    if case == "dense":
        program = jax.grad(_dense_loss)
    elif case in ("ForwardSensitivity", "FiniteDifferences"):
        loss = _float32_loss(ja.Tsit5(), getattr(ja, case)())
        program = lambda a: jax.jvp(loss, (a,), (a,))  # noqa: E731
    else:
        solver = ja.Vern8() if case == "Vern8 saves" else ja.Kvaerno5()
        program = jax.grad(_float32_loss(solver, ja.DiscreteAdjoint()))
    products = [e for e in equations(jax.make_jaxpr(program)(a).jaxpr)
                if e.primitive.name == "dot_general"]
    assert products, "the case must exercise a matrix product"
    highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
    assert all(e.params["precision"] == highest for e in products), [
        e.params["precision"] for e in products]


def test_jacrev_of_a_large_implicit_solve_factorises_no_matrix_per_seed():
    """`jax.jacrev` through an ESDIRK solve at ``N >= ITERATIVE_ADJOINT_MIN_SIZE``: the
    reverse pass's fallback LU of ``M_i = I - gamma h J(Z_i)`` (when the transposed
    iteration fails) stays unbatched.  Under a `jax.lax.cond` on the per-seed
    ``converged`` it was one LU per seed, ``(seeds, N, N)``, on every implicit stage, and
    two such batched LAPACK calls at once hung jaxlib's CPU backend (Burgers, N = 64)."""
    from jaxadjoint.solvers._esdirk import ITERATIVE_ADJOINT_MIN_SIZE

    size, outputs = ITERATIVE_ADJOINT_MIN_SIZE, 5
    dx = 1.0 / size

    def heat(t, u, k):
        return k * (jnp.roll(u, 1) - 2 * u + jnp.roll(u, -1)) / dx**2

    def observed(k):
        u0 = jnp.sin(2 * jnp.pi * dx * jnp.arange(size, dtype=jnp.float64)) + 1.0
        sol = ja.solve(heat, u0, 0.0, 0.1, k, solver=ja.Kvaerno5(), rtol=1e-6, atol=1e-6,
                       max_steps=64)
        return sol.ys[-1][:outputs]

    jaxpr = jax.make_jaxpr(jax.jacrev(observed))(jnp.float64(0.01)).jaxpr
    lus = [eqn.invars[0].aval.shape for eqn in equations(jaxpr) if eqn.primitive.name == "lu"]
    assert (size, size) in lus, lus  # the reverse pass's fallback is in the program
    assert all(len(shape) == 2 for shape in lus), lus
