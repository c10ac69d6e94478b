"""Gradients through `solve` with `DiscreteAdjoint`.

The reference for "exact" is the replay: a plain Runge–Kutta integration on the recorded
step grid, differentiated by JAX's own autodiff (`helpers.replay`, and its jit-friendly
twin `solve_cases.replay_traced`, which one compiled function serves for every grid).
The discrete adjoint must agree with it to round-off (~1e-12 relative; a little more for
Verner's large coefficients).  Further checks: the exact solution of a linear problem, the analytic
problems of `jaxadjoint.problems`, finite differences, composition with
`vmap`/`jacrev`/`jit`, float32, and a property-based test over random problems.

Compile time dominates, so nearly everything runs through the shared compiled functions
of `solve_cases` (one per solver/controller), varying only data.
"""

from __future__ import annotations

import equinox as eqx
import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import solve_cases as sc
from hypothesis import HealthCheck, given, settings, strategies as st
from jax.flatten_util import ravel_pytree

import jaxadjoint as ja
import jaxadjoint.problems as jp

SOLVER_IDS = sc.SOLVER_NAMES


# ------------------------------------------------------------------------------------------
# Every solver against the replay reference.


@pytest.mark.parametrize("solver", helpers.ALL_SOLVERS, ids=SOLVER_IDS)
def test_gradient_matches_replay(solver):
    """Pytree state, args pytree, an `eqx.Module` rhs with a closed-over array, an
    integrand and save times (at t0, inside, at t1; repeated), forwards and backwards."""
    diff = sc.make_inputs(sc.layout_for(solver))
    kwargs = sc.sweep_kwargs(solver)
    for t0, t1, saveat in (sc.FORWARD, sc.BACKWARD):
        sol, (d_y0, d_args, d_rhs), _ = sc.check_against_replay(diff, t0, t1, saveat, kwargs)
        # Every kind of input receives a gradient.
        assert np.any(np.asarray(d_rhs.b) != 0)
        assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves((d_y0, d_args)))


def test_final_state_only_without_integrand():
    """The plain use: ``saveat=None`` (only y(t1)), no integrand, automatic first step."""
    solver = ja.BogackiShampine()
    diff = sc.make_inputs("flat")
    kwargs = sc.solve_kwargs(solver, with_integral=False)
    for t0, t1 in ((0.1, 2.1), (2.1, -0.3)):
        sol, _, _ = sc.check_against_replay(diff, t0, t1, None, kwargs)
        assert sol.integral is None
        assert sol.ys.shape == (1, sc.N)
        assert float(sol.ts[0]) == t1


def test_a_nan_loss_has_a_nan_gradient():
    """A loss that is NaN at one save, or through the integral, has a NaN gradient, as JAX
    gives: not the finite gradient of the loss without that term, and no blow-up blamed on
    the right-hand side (the program of `test_gradient_matches_replay`, NaN in its weights)."""
    solver = helpers.ALL_SOLVERS[0]
    diff = sc.make_inputs(sc.layout_for(solver))
    kwargs = sc.sweep_kwargs(solver)
    t0, t1, saveat = sc.FORWARD
    _, _, (w_ys, w_q), _ = sc.run_arguments(diff, t0, t1, saveat, kwargs)
    first, *others = jax.tree.leaves(w_ys)
    at_one_save = jax.tree.unflatten(jax.tree.structure(w_ys),
                                     [first.at[1].set(jnp.nan), *others])
    through_integral = {**w_q, "sq": jnp.asarray(jnp.nan)}
    for weights in ((at_one_save, w_q), (w_ys, through_integral)):
        value, (grads, _), sol = sc.run(diff, t0, t1, saveat, kwargs, weights)
        assert sol.result == ja.RESULTS.successful and np.isnan(float(value))
        # Every input the NaN term depends on: the state's dynamics (not `w`, which only the
        # integrand reads, nor the times of the other saves).
        d_y0, d_args, d_rhs = grads
        for leaf in jax.tree.leaves((d_y0, d_args["M"], d_args["eps"], d_rhs)):
            assert np.all(np.isnan(np.asarray(leaf))), leaf


# That the checkpoint strategies agree bit for bit is tested in test_bitwise.py.


def test_blocked_reverse_pass():
    """With many parameters (>= 1024 here) the reverse pass goes through blocks of steps
    with one parameter VJP per block: the same exact gradient."""
    solver = ja.Dopri5()
    y0, args, rhs = sc.make_inputs("flat")
    args["P"] = jnp.asarray(np.random.default_rng(0).normal(size=(3, 342)))
    kwargs = sc.sweep_kwargs(solver)
    for t0, t1, saveat in (sc.FORWARD, sc.BACKWARD):
        _, (_, d_args, _), _ = sc.check_against_replay((y0, args, rhs), t0, t1, saveat, kwargs)
        assert np.all(np.asarray(d_args["P"]) != 0)


@pytest.mark.parametrize("checkpoint", [ja.StoreStates(), ja.StoreStages(), ja.Recursive(2)],
                         ids=["StoreStates", "StoreStages", "Recursive"])
def test_joint_stage_vjps_of_a_small_state(checkpoint):
    """A small state with fewer than 4 parameters per component takes joint stage VJPs in
    branches (`_reverse.joint_stage_vjps`): `jax.jacrev` of its saves and of the integral
    (cotangent seeds batched) is the replay's, for every checkpoint strategy."""
    from jaxadjoint._reverse import ISOLATED_VJP_MIN_SIZE, joint_stage_vjps

    def rhs(t, y, p):
        return jnp.stack([p["a"] * y[0] - p["b"][0] * y[0] * y[1],
                          -p["b"][1] * y[1] + 0.3 * y[0] * y[1] + 0.1 * jnp.sin(t)])

    def integrand(t, y, p):
        return p["a"] * y**2

    p = {"a": jnp.asarray(1.1), "b": jnp.array([0.4, 0.5])}
    y0, saveat = jnp.array([1.0, 0.8]), np.array([0.0, 0.7, 0.7, 2.0, 3.0])
    assert joint_stage_vjps(p, 2) and 2 < ISOLATED_VJP_MIN_SIZE

    def solve(y0, p):
        return ja.solve(rhs, y0, 0.0, 3.0, p, saveat=jnp.asarray(saveat), integrand=integrand,
                        rtol=1e-7, atol=1e-7, sensitivity=ja.DiscreteAdjoint(checkpoint))

    def outputs(y0, p):
        sol = solve(y0, p)
        return sol.ys, sol.integral

    jac = jax.jit(jax.jacrev(outputs, argnums=(0, 1)))(y0, p)
    grid = helpers.accepted_grid(solve(y0, p))
    assert grid.size > 8

    def ref_outputs(y0, p):
        return helpers.replay(rhs, ja.Dopri5().tableau, y0, p, grid, saveat, integrand)

    ref = jax.jacrev(ref_outputs, argnums=(0, 1))(y0, p)
    assert helpers.max_rel_diff(jac, ref) < 1e-12


def test_python_closure_rhs():
    """Arrays closed over by a plain Python function are differentiated (closure conversion)."""
    A = jnp.array([[-0.3, 1.1], [-0.9, -0.2]])
    y0 = jnp.array([0.5, -1.0])
    args = jnp.array([0.2, 0.4])
    saveat = np.array([0.5, 1.5])
    w = jnp.array([[1.0, -2.0], [0.5, 0.3]])

    def make_rhs(A):
        return lambda t, y, args: A @ jnp.tanh(y) + jnp.cos(t) * args

    @jax.jit
    def loss(A, y0, args):
        sol = ja.solve(make_rhs(A), y0, 0.0, 1.5, args, saveat=jnp.asarray(saveat),
                       rtol=1e-7, atol=1e-7)
        return jnp.vdot(w, sol.ys), sol

    (value, sol), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(A, y0, args)
    grid = helpers.accepted_grid(sol)

    def ref_loss(A, y0, args):
        ys, _ = helpers.replay(make_rhs(A), ja.Dopri5().tableau, y0, args, grid, saveat)
        return jnp.vdot(w, ys)

    ref = jax.grad(ref_loss, argnums=(0, 1, 2))(A, y0, args)
    assert helpers.max_rel_diff(grads, ref) < 1e-12
    assert np.all(np.asarray(grads[0]) != 0)


def test_function_in_args_closing_over_traced_arrays():
    """``args={"u": lambda t: ...}`` with the lambda closing over what is differentiated,
    and a rhs that closes over nothing: JAX refused with a `CustomVJPException` (Equinox
    does not trace a function without a closure, so the lambda's arrays reached the custom
    VJP as closed-over values).  The gradient now equals that of the same field with the
    array passed in ``args`` (a trajectory engineer's acceptance test, 2026-11-29)."""
    y0 = jnp.array([0.5, -1.0])

    def rhs(t, y, args):
        return -args["u"](t) * y

    def with_function(k):
        args = {"u": lambda t: k * (1 + t)}
        return ja.solve(rhs, y0, 0.0, 1.0, args, saveat=jnp.array([0.5, 1.0])).ys

    def with_array(k):
        return ja.solve(lambda t, y, k: -k * (1 + t) * y, y0, 0.0, 1.0, k,
                        saveat=jnp.array([0.5, 1.0])).ys

    k = jnp.array([0.7, 1.3])
    got = jax.jacrev(with_function)(k)
    assert helpers.max_rel_diff(got, jax.jacrev(with_array)(k)) < 1e-14
    assert helpers.max_rel_diff(
        jax.vmap(jax.grad(lambda k: with_function(k).sum()))(jnp.stack([k, 2 * k])),
        jax.vmap(jax.grad(lambda k: with_array(k).sum()))(jnp.stack([k, 2 * k]))) < 1e-14

    # An event's condition reading it: DiscreteForward's jit(grad) gave 0.0 for -0.59, the
    # other transforms crashed (an adversarial acceptance test, 2026-11-29).
    def stop_time(k, sensitivity):
        event = ja.Event(lambda t, y, args: y[0] - args["u"](t))  # e^-t = k t
        return ja.solve(lambda t, y, args: -y, jnp.ones(1), 0.0, 5.0, {"u": lambda t: k * t},
                        sensitivity=sensitivity, events=event, rtol=1e-10, atol=1e-10).ts[-1]

    # t* solves e^-t = k t: dt*/dk = -t* / (k + e^-t*).
    t_star = stop_time(0.7, ja.DiscreteAdjoint())
    exact = -t_star / (0.7 + jnp.exp(-t_star))
    for sensitivity in (ja.DiscreteAdjoint(), ja.DiscreteForward()):
        got = jax.jit(jax.grad(stop_time), static_argnums=1)(0.7, sensitivity)
        np.testing.assert_allclose(got, exact, rtol=1e-8)


class NeuralField(eqx.Module):
    """A neural ODE right-hand side: ``y' = mlp(y) * (1 + 0.1 t)``."""

    mlp: eqx.nn.MLP

    def __call__(self, t, y, args):
        del args
        return self.mlp(y) * (1.0 + 0.1 * t)


def test_neural_ode_module():
    """An `equinox.Module` rhs: every weight and bias of the MLP gets the exact gradient."""
    mlp = eqx.nn.MLP(2, 2, width_size=8, depth=2, activation=jnp.tanh,
                     key=jax.random.PRNGKey(0))
    mlp = jax.tree.map(lambda x: x.astype(jnp.float64) if eqx.is_inexact_array(x) else x, mlp)
    diff = (jnp.array([0.4, -0.8]), None, NeuralField(mlp))
    kwargs = sc.solve_kwargs(ja.BogackiShampine(), with_integral=False)
    sol, (_, _, d_rhs), _ = sc.check_against_replay(diff, 0.0, 2.0, (0.5, 2.0), kwargs)
    assert all(np.any(np.asarray(x) != 0) for x in jax.tree.leaves(eqx.filter(d_rhs, eqx.is_array)))


# ------------------------------------------------------------------------------------------
# Exact and analytic sensitivities.


def test_exact_solution_of_forced_linear_problem():
    """With eps = 0 the sweep problem is linear with a matrix-exponential solution: at tight
    tolerance the outputs and every gradient (states, args, closed-over array, t0, t1 and
    the save times) match the exact ones, forwards and backwards."""
    solver = ja.Dopri5()
    diff = sc.make_inputs(sc.layout_for(solver), eps=0.0)
    kwargs = sc.sweep_kwargs(solver, rtol=1e-12, atol=1e-12)
    for t0, t1, saveat in (sc.FORWARD, sc.BACKWARD):
        errors = sc.compare_with_exact(diff, t0, t1, saveat, kwargs)
        assert max(errors) < 1e-9, errors


_decay = jp.exponential_decay_problem()
_linear = jp.linear_system_problem()
_growth = jp.periodic_growth_problem()
TIGHT = dict(rtol=1e-12, atol=1e-12)


@jax.jit
def _decay_final(p):
    """y(t1) of y' = -p y, y(0) = p^2 y0: the parameter enters the rate and the start."""
    return ja.solve(_decay.rhs, p**2 * _decay.y0, _decay.t0, _decay.t1, p, **TIGHT).ys[0]


def test_exponential_decay_with_parameter_dependent_initial_state():
    p = jnp.asarray(0.7)
    w = jnp.array([1.0, -0.5, 2.0])
    grad = jax.grad(lambda p: jnp.vdot(w, _decay_final(p)))(p)
    t = _decay.t1
    # Chain rule on y = p^2 y0 exp(-p t): dy/dp = (2 p - t p^2) exp(-p t) y0.
    by_hand = jnp.vdot(w, (2 * p - t * p**2) * jnp.exp(-p * t) * _decay.y0)
    d_y0, d_k = jp.exponential_decay_sensitivity(t, p**2 * _decay.y0, p)
    from_problem = jnp.vdot(w, d_y0 * 2 * p * _decay.y0 + d_k)
    assert abs(float(grad - by_hand)) < 1e-10 * abs(float(by_hand))
    assert abs(float(grad - from_problem)) < 1e-10 * abs(float(by_hand))


def _linear_final(y0, M):
    return ja.solve(_linear.rhs, y0, _linear.t0, _linear.t1, M, **TIGHT).ys[0]


_linear_row_grad = jax.jit(
    jax.grad(lambda y0, M, e: jnp.vdot(e, _linear_final(y0, M)), argnums=(0, 1))
)
_linear_jacrev = jax.jit(jax.jacrev(_linear_final, argnums=(0, 1)))


def test_linear_system_expm_and_jacrev():
    """y' = M y: `jax.jacrev` equals the stacked `jax.grad`s and the exact expm sensitivity."""
    y0, M = _linear.y0, _linear.args
    jac_y0, jac_M = _linear_jacrev(y0, M)
    exact_y0, exact_M = jp.linear_system_sensitivity(_linear.t1, y0, M)
    assert helpers.max_rel_diff(jac_y0, exact_y0) < 1e-10
    assert helpers.max_rel_diff(jac_M, exact_M) < 1e-10
    rows = [_linear_row_grad(y0, M, e) for e in jnp.eye(3)]
    assert helpers.max_rel_diff(jnp.stack([r[0] for r in rows]), jac_y0) < 1e-12
    assert helpers.max_rel_diff(jnp.stack([r[1] for r in rows]), jac_M) < 1e-12


def _growth_final(y0, a, t0, t1):
    return ja.solve(_growth.rhs, y0, t0, t1, a, **TIGHT).ys[0]


def _growth_exact(y0, a, t0, t1):
    """y' = a cos(t) y from y(t0) = y0: y(t1) = y0 exp(a (sin t1 - sin t0))."""
    return y0 * jnp.exp(a * (jnp.sin(t1) - jnp.sin(t0)))


_grad_growth = jax.jit(jax.grad(_growth_final, argnums=(0, 1, 2, 3)))


@pytest.mark.parametrize("t0, t1", [(0.0, 4.0), (4.0, 0.5)], ids=["forward", "backward"])
def test_periodic_growth_time_dependent(t0, t1):
    """A time-dependent field: gradients w.r.t. y0, a, t0 and t1, both directions."""
    args = (_growth.y0, _growth.args, jnp.asarray(t0), jnp.asarray(t1))
    grads = _grad_growth(*args)
    exact = jax.grad(_growth_exact, argnums=(0, 1, 2, 3))(*args)
    for g, e in zip(grads, exact):
        assert abs(float(g - e)) < 1e-9 * max(1.0, abs(float(e)))
    if t0 == 0.0:
        d_y0, d_a = jp.periodic_growth_sensitivity(t1, _growth.y0, _growth.args)
        assert abs(float(grads[0] - d_y0)) < 1e-10 * abs(float(d_y0))
        assert abs(float(grads[1] - d_a)) < 1e-10 * abs(float(d_a))


# ------------------------------------------------------------------------------------------
# Finite differences and time derivatives.


def test_finite_differences_and_time_derivatives():
    """Central differences of the (nonlinear) loss at tight tolerance: a directional
    derivative in (y0, args, rhs), and dL/dt0, dL/dt1, dL/dts_i, both directions."""
    solver = ja.Dopri5()
    kwargs = sc.sweep_kwargs(solver, rtol=1e-12, atol=1e-12)
    diff = sc.make_inputs(sc.layout_for(solver))
    rng = np.random.default_rng(0)
    direction = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=jnp.shape(x))), diff)
    for t0, t1, saveat in (sc.INTERIOR_FORWARD, sc.INTERIOR_BACKWARD):
        _, (grads, time_grads), _ = sc.run(diff, t0, t1, saveat, kwargs)

        def value(diff=diff, t0=t0, t1=t1, saveat=saveat):
            return float(sc.run(diff, t0, t1, saveat, kwargs)[0])

        delta = 1e-4
        plus = jax.tree.map(lambda x, d: x + delta * d, diff, direction)
        minus = jax.tree.map(lambda x, d: x - delta * d, diff, direction)
        fd = (value(plus) - value(minus)) / (2 * delta)
        ad = sum(float(jnp.vdot(g, d)) for g, d in
                 zip(jax.tree.leaves(grads), jax.tree.leaves(direction)))
        assert abs(fd - ad) < 1e-6 * abs(ad)

        d_t0, d_t1, d_ts = (float(time_grads[0]), float(time_grads[1]),
                            np.asarray(time_grads[2]))
        fd_t0 = (value(t0=t0 + delta) - value(t0=t0 - delta)) / (2 * delta)
        fd_t1 = (value(t1=t1 + delta) - value(t1=t1 - delta)) / (2 * delta)
        assert abs(fd_t0 - d_t0) < 1e-6 * max(1.0, abs(fd_t0))
        assert abs(fd_t1 - d_t1) < 1e-6 * max(1.0, abs(fd_t1))
        saves = np.asarray(saveat)
        for i in range(len(saves)):
            up, down = saves.copy(), saves.copy()
            up[i] += delta
            down[i] -= delta
            fd_ts = (value(saveat=tuple(up)) - value(saveat=tuple(down))) / (2 * delta)
            assert abs(fd_ts - d_ts[i]) < 1e-6 * max(1.0, abs(fd_ts))


# ------------------------------------------------------------------------------------------
# Composition with JAX transformations, and float32.


_vmap_grad_growth = jax.jit(jax.vmap(_grad_growth, in_axes=(0, None, None, None)))
_grad_vmap_growth = jax.jit(
    jax.grad(
        lambda y0s, a, t0, t1: jnp.sum(
            jax.vmap(_growth_final, in_axes=(0, None, None, None))(y0s, a, t0, t1)
        ),
        argnums=(0, 1),
    )
)


def test_vmap_and_grad_compose():
    """`vmap(grad)` equals a loop of grads, and `grad(vmap)` their sum (all under `jit`)."""
    y0s = jnp.array([0.5, 1.0, 1.5, 3.0])
    a, t0, t1 = jnp.asarray(0.8), jnp.asarray(0.0), jnp.asarray(3.0)
    loop = [_grad_growth(y, a, t0, t1) for y in y0s]
    batched = _vmap_grad_growth(y0s, a, t0, t1)
    for i in range(4):
        assert helpers.max_rel_diff(batched[i], jnp.stack([g[i] for g in loop])) < 1e-12
    summed = _grad_vmap_growth(y0s, a, t0, t1)
    assert helpers.max_rel_diff(summed[0], batched[0]) < 1e-12
    assert helpers.max_rel_diff(summed[1], jnp.sum(batched[1])) < 1e-12


def test_float32():
    """A float32 state gives float32 outputs and gradients, close to the exact ones."""
    y0 = _decay.y0.astype(jnp.float32)
    k = jnp.asarray(0.7, jnp.float32)

    def loss(y0, k):
        sol = ja.solve(_decay.rhs, y0, 0.0, 2.0, k, rtol=1e-5, atol=1e-5)
        return jnp.sum(sol.ys), sol

    (value, sol), (g_y0, g_k) = jax.jit(
        jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)
    )(y0, k)
    assert sol.ys.dtype == jnp.float32 and sol.ts.dtype == jnp.float32
    assert g_y0.dtype == jnp.float32 and g_k.dtype == jnp.float32
    exact_y0, exact_k = jp.exponential_decay_sensitivity(2.0, _decay.y0, 0.7)
    assert np.allclose(g_y0, exact_y0, rtol=1e-4)
    assert np.allclose(g_k, jnp.sum(exact_k), rtol=1e-4)


# ------------------------------------------------------------------------------------------
# Property-based: random problems through the compiled sweep functions.


@st.composite
def random_case(draw):
    solver = draw(st.sampled_from(helpers.ALL_SOLVERS))
    seed = draw(st.integers(0, 2**31 - 1))
    linear = draw(st.booleans())
    backwards = draw(st.booleans())
    t0 = draw(st.floats(-1.0, 1.0))
    length = draw(st.floats(0.3, 2.5))
    fractions = sorted(draw(st.lists(st.sampled_from([0.0, 0.25, 1.0]) | st.floats(0.0, 1.0),
                                     min_size=3, max_size=3)))
    return solver, seed, linear, backwards, t0, length, fractions


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=random_case())
def test_property_random_problems(case):
    """Random small systems (linear or not), save times, directions, tolerances and first
    steps; the state layout is the solver's (a fixed small set, so no recompilation)."""
    solver, seed, linear, backwards, t0, length, fractions = case
    rng = np.random.default_rng(seed)
    t1 = t0 - length if backwards else t0 + length
    saveat = tuple(t0 if f == 0 else t1 if f == 1 else t0 + f * (t1 - t0) for f in fractions)
    if backwards:
        saveat = tuple(min(max(s, t1), t0) for s in saveat)
    else:
        saveat = tuple(min(max(s, t0), t1) for s in saveat)
    diff = sc.make_inputs(
        sc.layout_for(solver),
        M=rng.uniform(-1.0, 1.0, size=(3, 3)),
        b=tuple(rng.uniform(-1, 1, size=3)),
        eps=0.0 if linear else float(rng.uniform(0.0, 0.5)),
        w=tuple(rng.uniform(-1, 1, size=3)),
        u0=tuple(rng.uniform(-1.5, 1.5, size=3)),
    )
    low_order = type(solver).__name__ == "BogackiShampine"
    tol = 10 ** rng.uniform(-7 if low_order else -9, -5)
    kwargs = sc.sweep_kwargs(
        solver, dt=length / rng.integers(8, 60), dt0=length * 10 ** rng.uniform(-3, 0),
        rtol=tol, atol=tol,
    )
    sc.check_against_replay(diff, t0, t1, saveat, kwargs, rtol=1e-10)
    # New values never recompile: one trace per solver (shared with the sweep above).
    assert sc.traces_of_run(diff, t0, t1, saveat, kwargs) == 1


@pytest.mark.parametrize("solver", [ja.Tsit5(), ja.CashKarp()], ids=["Tsit5", "CashKarp"])
def test_replay_traced_is_helpers_replay(solver):
    """The jit-friendly replay of `solve_cases` is the textbook replay of `helpers`, at the
    nodes and at interpolated saves (Cash–Karp's interpolant has an extra stage)."""
    y0, args, rhs = sc.make_inputs("tuple")
    grid = np.array([0.1, 0.25, 0.7, 1.2, 1.3])
    ys, q = helpers.replay(rhs, solver, y0, args, grid, None, sc.integrand)
    states, slopes, q2 = sc.replay_traced(
        rhs, solver.tableau, y0, args, jnp.asarray(grid), sc.integrand
    )
    assert helpers.max_rel_diff(ys, jax.tree.map(lambda x: x[-1:], states)) < 1e-14
    assert helpers.max_rel_diff(q, q2) < 1e-14
    saveat = np.array([0.1, 0.2, 0.7, 0.9, 1.3])
    ys_saved, _ = helpers.replay(rhs, solver, y0, args, grid, saveat)
    _, index, theta = sc.save_points(grid, saveat, length=len(grid) - 1)
    flat = jax.vmap(lambda x: ravel_pytree(x)[0])(states)
    ours = sc.interpolate_saves(solver.tableau, jnp.asarray(grid), flat, slopes, index, theta)
    theirs = jax.vmap(lambda x: ravel_pytree(x)[0])(ys_saved)
    assert helpers.max_rel_diff(ours, theirs) < 1e-14
