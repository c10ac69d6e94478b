"""Small systems' reverse steps in a branch of their own, and their records in windows
(`_sequential`).

The branch and the windows must be there for small systems and only for them, must leave
the gradient as it was up to rounding (under `jax.vmap` too) and the steps as they were
bit for bit, and must make XLA's CPU runtime run its kernels in order (what they are for).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_dense_output import THETA, Y0, lotka_volterra

import jaxadjoint as ja
from jaxadjoint import _adjoint
from jaxadjoint.problems.lotka_volterra import glv_rhs
from jaxadjoint.problems.robertson import robertson_rhs

jax.config.update("jax_enable_x64", True)
pytestmark = pytest.mark.clears_jax_caches  # `in_mode`: conftest.py runs these last

TS = jnp.linspace(0.0, 5.0, 12)
LV = (lotka_volterra, Y0, THETA, 5.0)
ROBERTSON = (robertson_rhs, jnp.array([1.0, 0.0, 0.0]), jnp.array([0.04, 1e4, 3e7]), 40.0)


def loss_of(problem, solver=None, saveat=None, rtol=1e-6, atol=1e-8):
    rhs, y0, _, t1 = problem

    def loss(args, y0=y0):
        sol = ja.solve(rhs, y0, 0.0, t1, args, solver=solver or ja.Dopri5(), saveat=saveat,
                       rtol=rtol, atol=atol, max_steps=512)
        return jnp.sum(sol.ys ** 2)

    return loss


def in_mode(monkeypatch, sequential: bool, fn, *args):
    """``fn(*args)`` traced with or without the branch (the setting is read at trace time;
    `ja.solve` is jitted inside, so the caches are cleared around it)."""
    monkeypatch.setenv("JAXADJOINT_SEQUENTIAL", "1" if sequential else "0")
    jax.clear_caches()
    try:
        return fn(*args)
    finally:
        jax.clear_caches()


def _sequential_branches(jaxpr) -> int:
    """The `cond`s whose taken branch starts with an optimization barrier (`in_sequence`)."""
    count = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "cond":
            first = eqn.params["branches"][1].jaxpr.eqns
            count += bool(first) and first[0].primitive.name == "optimization_barrier"
        for inner in jax.extend.core.jaxprs_in_params(eqn.params):
            count += _sequential_branches(inner)
    return count


@pytest.mark.parametrize("sequential", [True, False])
def test_the_branch_is_there_for_small_systems_only(monkeypatch, sequential):
    """Lotka-Volterra's gradient, with and without saves: one branch, in the reverse
    sweep; none with ``JAXADJOINT_SEQUENTIAL=0``, none in a forward solve, none for a
    10-species GLV (its interaction matrix, 800 bytes, is over XLA's 512)."""
    count = lambda fn, *a: _sequential_branches(jax.make_jaxpr(fn)(*a).jaxpr)  # noqa: E731
    args = LV[2]
    expected = 1 if sequential else 0
    for saveat in (None, ja.SaveAt(ts=TS)):
        grad = jax.grad(loss_of(LV, saveat=saveat))
        assert in_mode(monkeypatch, sequential, count, grad, args) == expected
    assert in_mode(monkeypatch, sequential, count, loss_of(LV), args) == 0
    rng = np.random.default_rng(0)
    A = jnp.asarray(rng.normal(size=(10, 10)) * 0.3 - np.eye(10))
    big = (glv_rhs, jnp.linspace(0.5, 1.0, 10), (jnp.linspace(0.5, 1.0, 10), A), 2.0)
    assert in_mode(monkeypatch, sequential, count, jax.grad(loss_of(big)), big[2]) == 0


@pytest.mark.parametrize("case", ["lotka-volterra saves", "robertson Rodas5",
                                  "robertson Kvaerno5"])
def test_gradient_is_the_inline_one_to_rounding(monkeypatch, case):
    """Same operations, so the same gradient; XLA fuses the branch on its own, so the
    last bits may differ (Lotka-Volterra: 4e-15 relative).  (Against the replays of the
    recorded grid: `test_gradients`, `test_rosenbrock`, `test_esdirk`, which run with the
    branch.)"""
    if case == "lotka-volterra saves":
        loss, args = loss_of(LV, saveat=ja.SaveAt(ts=TS)), LV[2]
    else:
        solver = ja.Rodas5() if case.endswith("Rodas5") else ja.Kvaerno5()
        loss, args = loss_of(ROBERTSON, solver=solver, rtol=1e-6, atol=1e-10), ROBERTSON[2]
    grad = jax.jit(jax.grad(loss))
    branched = in_mode(monkeypatch, True, grad, args)
    inline = in_mode(monkeypatch, False, grad, args)
    # Off the CPU, Robertson with Kvaerno5 differed by 1.0e-13 and 2.2e-13 (H100, H200).
    np.testing.assert_allclose(branched, inline, rtol=1e-13 if helpers.ON_CPU else 1e-12, atol=0)
    assert np.all(np.isfinite(branched)) and np.any(branched != 0)


def test_under_vmap(monkeypatch):
    """A batch of solves runs its own shared reverse loop (`_batched_reverse`), which has no
    branch: the program compiles as inline, and each lane's gradient is the unbatched one
    to rounding.  Under `jax.jacrev` (`vmap` over cotangent seeds) the one-solve sweep is
    batched: the branch stays a `cond` (its predicate, whether any lane runs, is
    unbatched, where a batched one would make it a select of both branches), and the
    Jacobian is the inline one to rounding."""
    loss = loss_of(LV, saveat=ja.SaveAt(ts=TS))
    y0s = LV[1] * jnp.linspace(0.8, 1.2, 3)[:, None]
    batched = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0)))

    def program(compiled):
        text = compiled.as_text()
        return re.sub(r"[0-9]+", "", re.sub(r"metadata=\{[^}]*\}", "", text))

    def compile_batched(args):
        return batched.lower(args, y0s).compile()

    # Each mode compiled once; the first program also gives the lanes' gradients.
    with_branch = in_mode(monkeypatch, True, compile_batched, LV[2])
    assert program(with_branch) == program(in_mode(monkeypatch, False, compile_batched, LV[2]))
    lanes = with_branch(LV[2], y0s)
    single = jax.jit(jax.grad(loss))
    for lane, y0 in zip(lanes, y0s):
        np.testing.assert_allclose(lane, single(LV[2], y0), rtol=1e-13, atol=0)

    rhs, y0, args, t1 = LV

    def saves(args):
        return ja.solve(rhs, y0, 0.0, t1, args, saveat=ja.SaveAt(ts=TS), rtol=1e-6,
                        atol=1e-8, max_steps=512).ys

    jacobian = jax.jacrev(saves)
    count = lambda: _sequential_branches(jax.make_jaxpr(jacobian)(args).jaxpr)  # noqa: E731
    assert in_mode(monkeypatch, True, count) == 1
    branched = in_mode(monkeypatch, True, jax.jit(jacobian), args)
    inline = in_mode(monkeypatch, False, jax.jit(jacobian), args)
    np.testing.assert_allclose(branched, inline, rtol=1e-13, atol=1e-14)


_VLOG_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    import jaxadjoint as ja

    def rhs(t, y, a):
        return jnp.stack([a[0] * y[0] - a[1] * y[0] * y[1], a[3] * y[0] * y[1] - a[2] * y[1]])

    def loss(a):
        return jnp.sum(ja.solve(rhs, jnp.ones(2), 0.0, 5.0, a, max_steps=512).ys ** 2)

    jax.block_until_ready(jax.jit(jax.grad(loss))(jnp.array([1.5, 1.0, 3.0, 1.0])))
""")


def _executors(sequential: bool) -> list[tuple[int, bool]]:
    """``(thunks, runs in order)`` of every executor XLA built for the gradient."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="thunk_executor=2",
               JAXADJOINT_SEQUENTIAL="1" if sequential else "0")
    out = subprocess.run([sys.executable, "-c", _VLOG_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    found = re.findall(r"ThunkExecutor with (\d+) thunks.*is_sequential=(\w+)", out.stderr)
    return [(int(n), flag == "true") for n, flag in found]


def test_xla_runs_the_branch_in_order():
    """What the branch and the windows are for, checked on XLA itself (its executor's
    log): with them, the reverse step's ~50 kernels, the windowed forward step's ~45 and
    the reverse window's ~20 run in order; without them every executor of 20 kernels or
    more builds a task graph."""
    branched = _executors(True)
    if not branched:
        pytest.skip("this XLA does not log its thunk executors")
    assert len([n for n, seq in branched if seq and n >= 40]) >= 2, branched
    assert len([n for n, seq in branched if seq and n >= 15]) >= 3, branched
    assert not [n for n, seq in _executors(False) if seq and n >= 20]


def _loops_in_loops(jaxpr, depth: int = 0) -> int:
    """The `while` loops inside another `while` loop's body (record windows, here)."""
    count = 0
    for eqn in jaxpr.eqns:
        is_loop = eqn.primitive.name == "while"
        count += is_loop and depth > 0
        for inner in jax.extend.core.jaxprs_in_params(eqn.params):
            count += _loops_in_loops(inner, depth + is_loop)
    return count


@pytest.mark.parametrize("sequential", [True, False])
def test_records_in_windows_for_small_systems(monkeypatch, sequential):
    """A gradient of a small system records its steps, and reverses them, in windows of a
    few slots (`_sequential.window_size`): one loop inside the forward loop and one inside
    the reverse sweep.  With 12 saves the forward loop's rows and the reverse sweep's
    rows of save cotangents are windowed too.  No windows for a 10-species GLV (its
    matrix is over 512 bytes), in a solve that records nothing (no gain), or with
    ``JAXADJOINT_SEQUENTIAL=0``."""
    count = lambda fn, *a: _loops_in_loops(jax.make_jaxpr(fn)(*a).jaxpr)  # noqa: E731
    args = LV[2]
    windows = 2 if sequential else 0
    assert in_mode(monkeypatch, sequential, count, jax.grad(loss_of(LV)), args) == windows
    few_saves = loss_of(LV, saveat=ja.SaveAt(ts=TS[:3]))
    assert in_mode(monkeypatch, sequential, count, jax.grad(few_saves), args) == windows
    rodas = jax.grad(loss_of(ROBERTSON, solver=ja.Rodas5()))
    assert in_mode(monkeypatch, sequential, count, rodas, ROBERTSON[2]) == windows
    many_saves = loss_of(LV, saveat=ja.SaveAt(ts=TS))
    assert in_mode(monkeypatch, sequential, count, jax.grad(many_saves), args) == windows
    assert in_mode(monkeypatch, sequential, count, many_saves, args) == 0
    assert in_mode(monkeypatch, sequential, count, loss_of(LV), args) == 0
    rng = np.random.default_rng(0)
    A = jnp.asarray(rng.normal(size=(10, 10)) * 0.3 - np.eye(10))
    big = (glv_rhs, jnp.linspace(0.5, 1.0, 10), (jnp.linspace(0.5, 1.0, 10), A), 2.0)
    assert in_mode(monkeypatch, sequential, count, jax.grad(loss_of(big)), big[2]) == 0


def test_a_solve_called_on_concrete_values_writes_its_grid_in_windows(monkeypatch):
    """Called on concrete values, `solve` hands back its grid and statistics, whose buffers
    made the forward loop's body a task graph (a Kepler orbit of 3 380 Dopri5 steps: 5.9 ms
    in one loop, 3.2 ms in windows; 1.9 ms reading only ``ys`` under `jit`, where the
    loop stays one so that what is not read is dropped: XLA does not drop it through
    nested loops).  The steps and outputs are bitwise those of the jitted solve."""
    from jaxadjoint._integrate import _jaxadjoint_solve as _solve

    rhs, y0, args, t1 = LV

    def traced(every_output_read):
        def solve(args):
            return _solve(rhs, y0, 0.0, t1, args, ja.Dopri5(), 1e-6, 1e-8, None, None,
                          ja.SaveAt(), ja.DiscreteAdjoint(), None, 4096, True, (), 16,
                          every_output_read).ys
        return _loops_in_loops(jax.make_jaxpr(solve)(args).jaxpr)

    assert in_mode(monkeypatch, True, traced, True) == 1
    assert in_mode(monkeypatch, True, traced, False) == 0
    assert in_mode(monkeypatch, False, traced, True) == 0
    seen = []
    spied = _adjoint.forward_loop

    def forward_loop(system, problem, recorder):
        seen.append(system.every_output_read)
        return spied(system, problem, recorder)

    monkeypatch.setattr(_adjoint, "forward_loop", forward_loop)

    def solve(args):
        return ja.solve(rhs, y0, 0.0, t1, args, rtol=1e-6, atol=1e-8)

    def closing_over(args):  # constant inputs under `jit`, a traced value in `rhs`
        return ja.solve(lambda t, y, _: rhs(t, y, args), y0, 0.0, t1, None, rtol=1e-6,
                        atol=1e-8)

    eager, jitted = in_mode(monkeypatch, True, lambda: (solve(args), jax.jit(solve)(args)))
    in_mode(monkeypatch, True, jax.jit(closing_over), args)
    assert seen == [True, False, False]
    for got, want in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
        np.testing.assert_array_equal(got, want)


def _recorded(max_steps: int, checkpoint=None, throw: bool = True):
    """Lotka-Volterra's solve as the gradient's forward pass runs it (its primal output),
    and the gradient of ``sum(y(t1)^2)``."""
    rhs, y0, args, t1 = LV
    sensitivity = ja.DiscreteAdjoint(checkpoint or ja.StoreStates())

    def solve(args):
        return ja.solve(rhs, y0, 0.0, t1, args, rtol=1e-6, atol=1e-8, max_steps=max_steps,
                        sensitivity=sensitivity, throw=throw)

    sol, _ = jax.vjp(solve, args)
    if not throw:
        return sol, None
    return sol, jax.grad(lambda a: jnp.sum(solve(a).ys ** 2))(args)


@pytest.mark.parametrize("margin", [0, 3, 20])
@pytest.mark.parametrize("checkpoint", [ja.StoreStates(), ja.Recursive(4)],
                         ids=["StoreStates", "Recursive"])
def test_windows_up_to_the_end_of_the_record(monkeypatch, margin, checkpoint):
    """With ``max_steps`` just enough (``margin`` slots to spare, so the last windows are
    moved back from the record's end and overlap the one before), the windowed forward
    loop takes bitwise the steps of the plain one, and the gradient agrees to rounding.
    `Recursive` keeps its checkpoint stack whole; only its grid is windowed."""
    steps = int(in_mode(monkeypatch, False, _recorded, 512)[0].stats["num_steps"])
    windowed, grad = in_mode(monkeypatch, True, _recorded, steps + margin, checkpoint)
    plain, plain_grad = in_mode(monkeypatch, False, _recorded, steps + margin, checkpoint)
    assert windowed.result == ja.RESULTS.successful
    np.testing.assert_array_equal(windowed.steps, plain.steps)
    np.testing.assert_array_equal(windowed.ys, plain.ys)
    np.testing.assert_allclose(grad, plain_grad, rtol=1e-13, atol=0)


def test_max_steps_reached_inside_a_window(monkeypatch):
    """A solve that runs out of steps in the middle of a window stops there and says so."""
    sol, _ = in_mode(monkeypatch, True, _recorded, 13, None, False)
    assert sol.result == ja.RESULTS.max_steps_reached
    assert int(sol.stats["num_steps"]) == 13
    plain, _ = in_mode(monkeypatch, False, _recorded, 13, None, False)
    np.testing.assert_array_equal(sol.steps, plain.steps)


@pytest.mark.parametrize("num_saves", [12, 400])
def test_saves_in_windows(monkeypatch, num_saves):
    """With saves, the gradient's forward loop windows the dense-output rows and the save
    times as well (with 400 saves a window of 63 save times covers a few steps only).
    Saves and steps are bitwise those of one loop, and those of the solve that records
    nothing (not windowed); the gradient agrees to rounding."""
    rhs, y0, args, t1 = LV
    ts = jnp.concatenate([jnp.zeros(1), jnp.linspace(0.0, t1, num_saves - 2), jnp.full(1, t1)])

    def solve(args):
        return ja.solve(rhs, y0, 0.0, t1, args, saveat=ja.SaveAt(ts=ts), rtol=1e-6,
                        atol=1e-8, max_steps=64)

    def run():
        recorded, _ = jax.vjp(solve, args)
        return solve(args), recorded, jax.grad(lambda a: jnp.sum(solve(a).ys ** 2))(args)

    count = lambda: _loops_in_loops(  # noqa: E731
        jax.make_jaxpr(jax.grad(lambda a: jnp.sum(solve(a).ys ** 2)))(args).jaxpr)
    assert in_mode(monkeypatch, True, count) >= 1
    (plain, recorded, grad), (plain_off, recorded_off, grad_off) = (
        in_mode(monkeypatch, mode, run) for mode in (True, False))
    for sol, sol_off in ((plain, plain_off), (recorded, recorded_off)):
        np.testing.assert_array_equal(sol.ys, sol_off.ys)
        np.testing.assert_array_equal(sol.steps, sol_off.steps)
    np.testing.assert_array_equal(plain.ys, recorded.ys)
    np.testing.assert_allclose(grad, grad_off, rtol=1e-13, atol=0)
