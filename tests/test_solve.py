"""The forward solve: what it records, how accurate it is, and its order of convergence.

Runs through the compiled functions of `solve_cases` that the gradient tests compile
anyway, so most of this file costs run time only.
"""

from __future__ import annotations

import equinox as eqx
import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import solve_cases as sc
from scipy.integrate import solve_ivp

import jaxadjoint as ja
import jaxadjoint.problems as jp


@pytest.mark.parametrize("solver", helpers.ALL_SOLVERS, ids=sc.SOLVER_NAMES)
def test_record_and_stats(solver):
    """`sol.steps` is the accepted grid from t0 to t1 (exactly), inf-padded to max_steps + 1,
    strictly monotone and independent of the save times; the counters add up."""
    diff = sc.make_inputs(sc.layout_for(solver))
    kwargs = sc.sweep_kwargs(solver)
    tableau = solver.tableau
    for t0, t1, saveat in (sc.FORWARD, sc.BACKWARD):
        _, _, sol = sc.run(diff, t0, t1, saveat, kwargs)
        steps = np.asarray(sol.steps)
        stats = {k: int(v) for k, v in sol.stats.items() if k != "stiff_run_start"}
        accepted = stats["num_accepted_steps"]
        assert steps.shape == (sc.MAX_STEPS + 1,)
        assert np.all(np.isfinite(steps[: accepted + 1]))
        assert np.all(np.isposinf(steps[accepted + 1:]))
        grid = steps[: accepted + 1]
        assert grid[0] == t0 and grid[-1] == t1
        assert np.all(np.sign(t1 - t0) * np.diff(grid) > 0)
        # Other save times (as many, so the same compiled solve) leave the steps as they are.
        other = tuple(t0 + (t1 - t0) * x for x in (0.0, 0.37, 0.61))
        _, _, sol_other = sc.run(diff, t0, t1, other, kwargs)
        np.testing.assert_array_equal(sol_other.steps, sol.steps)
        np.testing.assert_array_equal(sol.ts, np.asarray(saveat))
        # A save at t0 is y0 itself; repeated save times get the same state.
        if saveat[0] == t0:
            assert all(np.array_equal(a[0], b) for a, b in
                       zip(jax.tree.leaves(sol.ys), jax.tree.leaves(diff[0])))
        if saveat[1] == saveat[2]:
            assert all(np.array_equal(a[1], a[2]) for a in jax.tree.leaves(sol.ys))

        assert stats["num_steps"] == accepted + stats["num_rejected_steps"]
        if not solver.adaptive:
            assert stats["num_rejected_steps"] == 0
        # One evaluation per stage, the first reused (FSAL) or computed after the step, plus
        # f(t0, y0); dt0 is given here, so no evaluation for the initial step.
        per_step = tableau.num_stages - 1 if tableau.fsal else tableau.num_stages
        assert stats["num_rhs_evals"] == per_step * stats["num_steps"] + 1


def test_rejected_steps_are_not_recorded():
    """A far too large first step is rejected (several times); only accepted steps enter
    the grid, and the gradient on it is still exact."""
    solver = ja.Dopri5()
    diff = sc.make_inputs(sc.layout_for(solver))
    kwargs = sc.sweep_kwargs(solver, dt0=2.0)
    sol, _, _ = sc.check_against_replay(diff, *sc.FORWARD, kwargs)
    stats = {k: int(v) for k, v in sol.stats.items() if k != "stiff_run_start"}
    assert stats["num_rejected_steps"] >= 1
    assert len(helpers.accepted_grid(sol)) == stats["num_accepted_steps"] + 1
    assert stats["num_rhs_evals"] == 6 * stats["num_steps"] + 1


@eqx.filter_jit
def _solve_with_dt0(diff, saveat):
    y0, args, rhs = diff
    return ja.solve(rhs, y0, 0.1, 2.1, args, solver=ja.Heun(), dt0=0.1, saveat=saveat,
                    integrand=sc.integrand, max_steps=sc.MAX_STEPS)


def test_dt0_is_constant_step():
    """For a fixed-step solver ``dt0=`` means `ConstantStep(dt0)`: the same grid and states
    as the sweep's `ConstantStep(0.1)` (a different compiled program: not bitwise)."""
    solver = ja.Heun()
    diff = sc.make_inputs(sc.layout_for(solver))
    t0, t1, saveat = sc.FORWARD
    _, _, sol = sc.run(diff, t0, t1, saveat, sc.sweep_kwargs(solver, dt=0.1))
    with_dt0 = _solve_with_dt0(diff, sc.f64(saveat))
    np.testing.assert_array_equal(with_dt0.steps, sol.steps)
    assert helpers.max_rel_diff(with_dt0.ys, sol.ys) < 1e-14
    assert len(helpers.accepted_grid(sol)) == 21


def test_new_python_numbers_do_not_compile_again():
    """A direct call with a new Python-number ``t0``, ``t1``, ``rtol``, ``atol`` or ``dt0``
    reuses the compiled solve (they are passed as arrays: `_integrate._numbers_as_arrays`;
    it compiled again, ~1 s, for each new value), with the results of array inputs, and
    the checks of those numbers still raise before the solve."""
    from jaxadjoint._integrate import _jaxadjoint_solve

    def decay(t, y, k):
        return -k * y

    y0 = jnp.array([1.0, 2.0])
    ja.solve(decay, y0, 0.0, 1.0, 0.5, rtol=1e-7, atol=1e-9, dt0=0.01)
    compiled = _jaxadjoint_solve._cached._cache_size()
    for t0, t1, rtol, atol, dt0 in [(0, 2.0, 1e-7, 1e-9, 0.01), (0.25, 1.5, 1e-6, 1e-8, 0.02)]:
        sol = ja.solve(decay, y0, t0, t1, 0.5, rtol=rtol, atol=atol, dt0=dt0)
    assert _jaxadjoint_solve._cached._cache_size() == compiled
    arrays = ja.solve(decay, y0, *(jnp.asarray(x) for x in (0.25, 1.5)), 0.5,
                      rtol=jnp.asarray(1e-6), atol=jnp.asarray(1e-8), dt0=jnp.asarray(0.02))
    np.testing.assert_array_equal(sol.ys, arrays.ys)
    np.testing.assert_allclose(sol.ys[-1], y0 * np.exp(-0.5 * 1.25), rtol=1e-5)
    for bad, match in [(dict(t1=0.0), "`t1` must differ from `t0`"),
                       (dict(t1=float("nan")), "`t0` and `t1` must be finite"),
                       (dict(rtol=-1.0), "`rtol` and `atol` must be finite"),
                       (dict(dt0=0.0), "`dt0` must be finite and non-zero")]:
        kwargs = dict(dict(t1=1.0, rtol=1e-7, dt0=0.01), **bad)
        with pytest.raises(ValueError, match=match):
            ja.solve(decay, y0, 0.0, kwargs.pop("t1"), 0.5, **kwargs)


def test_automatic_initial_step_costs_one_evaluation():
    solver = ja.BogackiShampine()
    kwargs = sc.solve_kwargs(solver, with_integral=False)  # no dt0: chosen automatically
    _, _, sol = sc.run(sc.make_inputs("flat"), 0.1, 2.1, None, kwargs)
    assert int(sol.stats["num_rhs_evals"]) == 3 * int(sol.stats["num_steps"]) + 2


# ------------------------------------------------------------------------------------------
# Convergence: log(error) against log(dt) with constant steps, for the solution and for the
# gradient (the discrete gradient converges to the exact sensitivity at the same order).

CONVERGENCE = [
    (ja.Euler(), [16, 32, 64, 128]),
    (ja.Heun(), [8, 16, 32, 64]),
    (ja.RK4(), [4, 8, 16, 32]),
    (ja.Dopri5(), [8, 16, 32, 64]),
]


@pytest.mark.parametrize("solver, steps", CONVERGENCE, ids=[type(s).__name__ for s, _ in
                                                              CONVERGENCE])
def test_convergence_order(solver, steps):
    diff = sc.make_inputs(sc.layout_for(solver), eps=0.0)
    t0, t1, saveat = 0.1, 2.1, (0.6, 1.1, 2.1)  # save times on every grid below
    dts = np.array([(t1 - t0) / n for n in steps])
    errors = []
    for dt in dts:
        controller = ja.ConstantStep(jnp.asarray(dt))
        kwargs = sc.sweep_kwargs(solver, controller=controller)
        errors.append(sc.compare_with_exact(diff, t0, t1, saveat, kwargs))
    errors = np.array(errors)
    order = solver.order
    for k, what in enumerate(["solution", "gradient", "time gradient"]):
        slope = np.polyfit(np.log(dts), np.log(errors[:, k]), 1)[0]
        assert abs(slope - order) < 0.3, (what, slope, errors[:, k])


# ------------------------------------------------------------------------------------------
# Against SciPy.


_vdp = jp.van_der_pol_problem(mu=1.0, t1=6.0)
_VDP_TIMES = np.array([0.5, 1.7, 3.0, 4.4, 6.0])


@jax.jit
def _vdp_solve(y0, mu):
    return ja.solve(_vdp.rhs, y0, _vdp.t0, _vdp.t1, mu, saveat=jnp.asarray(_VDP_TIMES),
                    rtol=1e-12, atol=1e-12)


def test_agrees_with_scipy_dop853():
    """Van der Pol (mu = 1, nonlinear, a limit cycle) against `solve_ivp(DOP853)`."""
    mu = float(_vdp.args)

    def f(t, y):
        return [y[1], mu * ((1 - y[0] ** 2) * y[1] - y[0])]

    ref = solve_ivp(f, (_vdp.t0, _vdp.t1), np.asarray(_vdp.y0), method="DOP853",
                    t_eval=_VDP_TIMES, rtol=1e-13, atol=1e-13)
    assert ref.success
    sol = _vdp_solve(_vdp.y0, _vdp.args)
    np.testing.assert_allclose(np.asarray(sol.ys), ref.y.T, rtol=1e-9, atol=1e-10)


def test_args_may_be_a_module_with_non_array_fields():
    """An `equinox.nn.MLP` (its activation is a function) passed as ``args``, the diffrax
    idiom: the solve and its gradient equal those with the network closed over."""
    mlp = eqx.nn.MLP(2, 2, 8, 1, activation=jax.nn.softplus, key=jax.random.PRNGKey(0),
                     dtype=jnp.float64)
    y0, ts = jnp.array([0.5, -0.3]), jnp.linspace(0.0, 1.0, 5)

    def as_args(m):
        return jnp.sum(ja.solve(lambda t, y, a: a(y), y0, 0.0, 1.0, m, saveat=ts).ys ** 2)

    def closed_over(m):
        return jnp.sum(ja.solve(lambda t, y, a: m(y), y0, 0.0, 1.0, None, saveat=ts).ys ** 2)

    (v1, g1), (v2, g2) = (eqx.filter_value_and_grad(f)(mlp) for f in (as_args, closed_over))
    assert v1 == v2
    for a, b in zip(jax.tree.leaves(eqx.filter(g1, eqx.is_array)),
                    jax.tree.leaves(eqx.filter(g2, eqx.is_array))):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-16)
    leaves = jax.tree.leaves(eqx.filter(g1, eqx.is_array))
    assert any(float(jnp.max(jnp.abs(a))) > 0 for a in leaves)


_RATE = 0.4
_RATES = jnp.array([0.4, 1.0])


def _decay_by_globals(t, y, args):
    return -_RATE * _RATES * y


def test_a_direct_call_sees_changed_globals():
    """A newcomer from solve_ivp ran scenarios by changing a module-level rate: the second
    direct call returned the first one's solution (the compiled solve had baked it in),
    without a word (2026-11-29).  Called directly, a solve now keys its compiled program on
    what ``rhs`` reads besides its inputs (`_fingerprint`): a changed Python number or array
    global gives the new solution, an unchanged one reuses the program."""
    global _RATE, _RATES
    from jaxadjoint._integrate import _jaxadjoint_solve

    y0 = jnp.array([1.0, 2.0])

    def end():
        return np.asarray(ja.solve(_decay_by_globals, y0, 0.0, 1.0, None, rtol=1e-10,
                                   atol=1e-10).ys[-1])

    try:
        first = end()
        compiled = _jaxadjoint_solve._cached._cache_size()
        np.testing.assert_array_equal(end(), first)
        assert _jaxadjoint_solve._cached._cache_size() == compiled  # nothing compiled again
        np.testing.assert_allclose(first, y0 * np.exp(-0.4 * np.array([0.4, 1.0])), rtol=1e-8)
        _RATE = 0.2
        np.testing.assert_allclose(end(), y0 * np.exp(-0.2 * np.array([0.4, 1.0])), rtol=1e-8)
        _RATES = jnp.array([0.4, 3.0])
        np.testing.assert_allclose(end(), y0 * np.exp(-0.2 * np.array([0.4, 3.0])), rtol=1e-8)
        # Under the user's own jit it is JAX's rule: the value at tracing time.
        jitted = jax.jit(lambda y0: ja.solve(_decay_by_globals, y0, 0.0, 1.0, None).ys[-1])
        before = jitted(y0)
        _RATE = 0.4
        np.testing.assert_array_equal(jitted(y0), before)
    finally:
        _RATE, _RATES = 0.4, jnp.array([0.4, 1.0])


def test_a_stiff_solve_with_an_integrand_compiles_once():
    """Rodas5 with ``integrand=`` integrates it as extra state through a wrapper that was
    a fresh closure on every call: each direct call compiled again (2.2 s; an adversarial
    acceptance test, 2026-11-29).  The wrapper is a Module now, equal for equal functions."""
    from jaxadjoint._integrate import _jaxadjoint_solve

    def rhs(t, y, k):
        return -k * y

    def integrand(t, y, k):
        return jnp.sum(y**2)

    def run():
        return ja.solve(rhs, jnp.ones(2), 0.0, 1.0, 0.5, solver=ja.Rodas5(),
                        integrand=integrand).integral

    first = run()
    compiled = _jaxadjoint_solve._cached._cache_size()
    np.testing.assert_array_equal(run(), first)
    assert _jaxadjoint_solve._cached._cache_size() == compiled
    np.testing.assert_allclose(first, 2 * (1 - np.exp(-1.0)), rtol=1e-5)  # 2 int_0^1 e^-t
