"""Save times on the continuous extension, exact landing, and the dense solution.

The solver sweep (`test_gradients`, `test_checkpoints`, `test_sensitivity`) already checks
interpolated saves against the replay for every solver, controller and checkpoint
strategy; this file checks what is particular to dense output: the steps do not depend
on the save times, the save-time derivative is the interpolant's own, `land_on_ts`,
`Solution.evaluate`, bad save times inside `jit`, and that many save times cost little.
"""

from __future__ import annotations

import functools

import equinox as eqx
import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxadjoint as ja


def lotka_volterra(t, y, args):
    a, b, c, d = args
    return jnp.stack([a * y[0] - b * y[0] * y[1], d * y[0] * y[1] - c * y[1]])


Y0 = jnp.array([1.0, 1.0])
THETA = jnp.array([1.5, 1.0, 3.0, 1.0])
T1 = 6.0
# Save times inside steps, on t0 and t1, and repeated.
TS = jnp.array([0.0, 0.0, 0.35, 1.1, 2.0, 2.0, 3.3, 4.75, 5.9, 6.0])
WEIGHTS = jnp.cos(jnp.arange(TS.shape[0] * 2.0)).reshape(TS.shape[0], 2)


@eqx.filter_jit
def loss_and_sol(y0, theta, ts, saveat_kind, solver, sensitivity):
    saveat = {
        "interpolate": ts,
        "land": ja.SaveAt(ts=ts, land_on_ts=True),
        "dense": ja.SaveAt(ts=ts, dense=True),
    }[saveat_kind]
    sol = ja.solve(lotka_volterra, y0, 0.0, T1, theta, saveat=saveat, solver=solver,
                   rtol=1e-7, atol=1e-7, sensitivity=sensitivity, max_steps=512)
    return jnp.sum(WEIGHTS * sol.ys), sol


@eqx.filter_jit
def value_grad_and_sol(y0, theta, ts, saveat_kind, solver, sensitivity):
    """``(loss, d loss / d(y0, theta, ts), sol)``: one compilation serves a test's solve,
    its gradient and its finite differences."""
    (value, sol), grads = jax.value_and_grad(
        lambda *a: loss_and_sol(*a, saveat_kind, solver, sensitivity), argnums=(0, 1, 2),
        has_aux=True,
    )(y0, theta, ts)
    return value, grads, sol


def replay_gradient(solver, grid, weights=WEIGHTS, times=TS):
    """`jax.grad` of the replay on ``grid`` (compiled: much cheaper than running it op by
    op)."""

    def loss(y0, theta, ts):
        ys, _ = ja.replay_on_grid(lotka_volterra, solver, y0, theta, grid, ts)
        return jnp.sum(weights * ys)

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(Y0, THETA, times)


# Three kinds of interpolant: on the step's stages (Tsit5), with extra stages (Vern6), with
# the end stage f(t_{n+1}, y_{n+1}) of a non-FSAL method (Fehlberg45).  Dopri5: `test_land_on_ts`.
@pytest.mark.parametrize("solver", [ja.Tsit5(), ja.Vern6(), ja.Fehlberg45()],
                         ids=["Tsit5", "Vern6", "Fehlberg45"])
def test_save_time_gradient_is_the_interpolants(solver):
    """d/d(ts) is the interpolant's time derivative, exactly as the replay's autodiff gives
    it (with y0 and parameters), and finite differences of the saves agree with it."""
    adjoint = ja.DiscreteAdjoint()
    _, ours, sol = value_grad_and_sol(Y0, THETA, TS, "interpolate", solver, adjoint)
    reference = replay_gradient(solver, helpers.accepted_grid(sol))
    # Verner's stage sums round differently in the replay (coefficients in the hundreds).
    assert helpers.max_rel_diff(ours, reference) < (1e-10 if "Vern" in solver.tableau.name
                                                    else 1e-12)
    # Finite differences in one interior save time (the grid does not move with it).
    k, eps = 3, 1e-6
    bump = jnp.zeros_like(TS).at[k].set(eps)
    plus = value_grad_and_sol(Y0, THETA, TS + bump, "interpolate", solver, adjoint)[0]
    minus = value_grad_and_sol(Y0, THETA, TS - bump, "interpolate", solver, adjoint)[0]
    assert abs(float((plus - minus) / (2 * eps)) - float(ours[2][k])) < 1e-7


def test_steps_do_not_depend_on_saves_and_nodes_are_exact():
    """The same steps as the solve without save times; a save at t1 is y(t1) bitwise, a
    save at t0 is y0, repeated times give the same state."""
    solver = ja.Tsit5()
    _, _, sol = value_grad_and_sol(Y0, THETA, TS, "interpolate", solver, ja.DiscreteAdjoint())
    plain = ja.solve(lotka_volterra, Y0, 0.0, T1, THETA, solver=solver, rtol=1e-7, atol=1e-7,
                     max_steps=512)
    np.testing.assert_array_equal(sol.steps, plain.steps)
    np.testing.assert_array_equal(sol.ys[-1], plain.ys[0])
    np.testing.assert_array_equal(sol.ys[0], Y0)
    np.testing.assert_array_equal(sol.ys[4], sol.ys[5])
    np.testing.assert_array_equal(sol.ys[0], sol.ys[1])


def test_interpolated_saves_are_as_accurate_as_the_steps():
    """Dense output of a 5th-order pair is accurate to about the tolerance between steps."""
    _, sol = loss_and_sol(Y0, THETA, TS, "interpolate", ja.Dopri5(), ja.DiscreteAdjoint())
    ref = ja.solve(lotka_volterra, Y0, 0.0, T1, THETA, saveat=ja.SaveAt(ts=TS, land_on_ts=True),
                   solver=ja.Vern8(), rtol=1e-13, atol=1e-13, max_steps=4096)
    error = float(jnp.max(jnp.abs(sol.ys - ref.ys)))
    final = float(jnp.max(jnp.abs(sol.ys[-1] - ref.ys[-1])))
    assert error < 1e-5
    assert error < 20 * max(final, 1e-7)


@pytest.mark.parametrize("solver", [ja.Dopri5(), ja.RK4()], ids=["Dopri5", "RK4"])
def test_land_on_ts(solver):
    """``land_on_ts=True``: steps end on every save time, saves are nodes (bitwise the
    replay's states), and the gradient is the replay's."""
    if not solver.adaptive:
        sol = ja.solve(lotka_volterra, Y0, 0.0, T1, THETA, solver=solver, dt0=0.05,
                       saveat=ja.SaveAt(ts=TS, land_on_ts=True), max_steps=512)
        grid = helpers.accepted_grid(sol)
        assert all(t in grid for t in np.asarray(TS))
        ys, _ = ja.replay_on_grid(lotka_volterra, solver, Y0, THETA, grid, TS)
        assert helpers.max_rel_diff(sol.ys, ys) < 1e-13
        return
    adjoint = ja.DiscreteAdjoint()
    _, ours, sol = value_grad_and_sol(Y0, THETA, TS, "land", solver, adjoint)
    grid = helpers.accepted_grid(sol)
    assert all(t in grid for t in np.asarray(TS))
    assert helpers.max_rel_diff(ours, replay_gradient(solver, grid)) < 1e-12


@pytest.mark.parametrize(
    "sensitivity",
    [ja.DiscreteAdjoint(), ja.DiscreteAdjoint(ja.Recursive(3)), ja.DiscreteForward()],
    ids=["adjoint", "recursive", "forward"],
)
def test_dense_solution(sensitivity):
    """`sol.evaluate(t)` anywhere in [t0, t1]: the saves' values, differentiable in the
    inputs and in t like the replay's interpolant; NaN outside."""
    solver = ja.Tsit5()
    ours, sol = dense_grad(Y0, THETA, DENSE_TIMES, solver, sensitivity)
    np.testing.assert_allclose(sol.evaluate(TS), sol.ys, rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(sol.evaluate(T1), sol.ys[-1])
    outside = jnp.array([-0.1, T1 + 0.1])
    with pytest.raises(ValueError, match=r"outside the solved interval \[0.0, 6.0\]"):
        sol.evaluate(outside)
    assert np.all(np.isnan(np.asarray(jax.jit(lambda t: sol.evaluate(t))(outside))))
    with pytest.raises(ValueError, match=r"or NaN: \[nan\]"):
        sol.evaluate(jnp.array([1.0, jnp.nan]))
    # Round-off past an end (t0 + n dt one ulp past t1) is read at the end.
    past = jnp.array([0.0, T1 * (1 + 2 * np.finfo(np.float64).eps)])
    np.testing.assert_array_equal(sol.evaluate(past), sol.ys[jnp.array([0, -1])])
    reference = _dense_reference(tuple(helpers.accepted_grid(sol).tolist()))
    assert helpers.max_rel_diff(ours, reference) < 1e-12


DENSE_TIMES = jnp.array([0.2, 1.7, 1.7, 5.5])
DENSE_WEIGHTS = jnp.sin(jnp.arange(8.0)).reshape(4, 2)


@eqx.filter_jit
def dense_grad(y0, theta, times, solver, sensitivity):
    """The gradient of a loss on ``sol.evaluate(times)``, and the dense solution (with
    saves at ``TS``) it was taken on."""

    def loss(y0, theta, times):
        sol = ja.solve(lotka_volterra, y0, 0.0, T1, theta, saveat=ja.SaveAt(ts=TS, dense=True),
                       solver=solver, rtol=1e-7, atol=1e-7, sensitivity=sensitivity,
                       max_steps=512)
        return jnp.sum(DENSE_WEIGHTS * sol.evaluate(times)), sol

    grads, sol = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(y0, theta, times)
    return grads, sol


@functools.cache
def _dense_reference(grid: tuple) -> tuple:
    """The replay's gradient on a grid, computed once for the strategies that share it."""
    return replay_gradient(ja.Tsit5(), np.asarray(grid), DENSE_WEIGHTS, DENSE_TIMES)


def test_evaluate_needs_a_dense_solution():
    sol = ja.solve(lotka_volterra, Y0, 0.0, 1.0, THETA)
    with pytest.raises(ValueError, match=r"SaveAt\(dense=True\)"):
        sol.evaluate(0.5)


def test_evaluate_of_a_batch_says_to_vmap():
    sols = jax.vmap(lambda theta: ja.solve(lotka_volterra, Y0, 0.0, 1.0, theta,
                                           saveat=ja.SaveAt(dense=True)))(
        jnp.stack([THETA, THETA]))
    with pytest.raises(ValueError, match=r"holds a batch.*jax.vmap"):
        sols.evaluate(0.5)


def test_dense_needs_a_supporting_method():
    with pytest.raises(ValueError, match="not supported with `sensitivity=ContinuousAdjoint"):
        ja.solve(lotka_volterra, Y0, 0.0, 1.0, THETA, saveat=ja.SaveAt(dense=True),
                 sensitivity=ja.ContinuousAdjoint())


@pytest.mark.parametrize(
    "make_saveat, match",
    [
        (lambda: ja.SaveAt(land_on_ts=True), "needs save times"),
        (lambda: ja.SaveAt(ts=TS, dense=1), "must be True or False"),
        (lambda: "0.5", "must be None, a 1-D array"),
        (lambda: jnp.array([False, True]), "must be real numbers, got booleans"),
    ],
    ids=["land-without-ts", "dense-not-bool", "string", "booleans"],
)
def test_bad_saveat_options(make_saveat, match):
    with pytest.raises((TypeError, ValueError), match=match):
        ja.solve(lotka_volterra, Y0, 0.0, 1.0, THETA, saveat=make_saveat())


@eqx.filter_jit
def _no_throw(ts):
    return ja.solve(lotka_volterra, Y0, 0.0, T1, THETA, saveat=ts, throw=False)


@eqx.filter_jit
def _throwing(ts):
    return ja.solve(lotka_volterra, Y0, 0.0, T1, THETA, saveat=ts).ys


@pytest.mark.parametrize(
    "ts",
    [[0.5, 0.2, 1.0], [0.5, 1.0, 7.0], [-1.0, 0.5, 1.0], [0.5, jnp.nan, 1.0]],
    ids=["unsorted", "after-t1", "before-t0", "nan"],
)
def test_bad_save_times_inside_jit_fail_through_result(ts):
    """Traced save times that are invalid stop the solve: `sol.result` says why, and with
    ``throw=True`` the run-time error carries the same message."""
    sol = _no_throw(jnp.asarray(ts))
    assert sol.result == ja.RESULTS.invalid_save_times
    # No save of a solve that did not start is a number (one before t0 was extrapolated).
    assert np.all(np.isnan(np.asarray(sol.ys)))
    assert "`saveat` must hold finite times" in ja.RESULTS[ja.RESULTS.invalid_save_times]

    with pytest.raises(eqx.EquinoxRuntimeError, match="`saveat` must hold finite times"):
        jax.block_until_ready(_throwing(jnp.asarray(ts)))


def test_vmap_over_save_times_and_states():
    """A batch with its own save times and initial states equals the single solves."""
    ts = jnp.stack([TS, TS * 0.5 + 1.0])
    y0s = jnp.stack([Y0, Y0 * 1.3])

    def one(y0, ts):
        return loss_and_sol(y0, THETA, ts, "interpolate", ja.Tsit5(), ja.DiscreteAdjoint())[1].ys

    batched = jax.vmap(one)(y0s, ts)
    for i in range(2):
        # The single solves: the compilation of `test_save_time_gradient_is_the_interpolants`.
        single = value_grad_and_sol(y0s[i], THETA, ts[i], "interpolate", ja.Tsit5(),
                                    ja.DiscreteAdjoint())[2].ys
        np.testing.assert_allclose(batched[i], single, rtol=1e-13, atol=1e-13)


def test_many_save_times_cost_follows_the_saves():
    """10 000 save times on a solve of ~40 steps: the compiled gradient holds no buffer of
    n_save x max_steps, and its temporaries grow with n_save, not with max_steps."""

    def temp_bytes(n_save, max_steps):
        # The save times as an argument: as a constant, XLA would fold 10 000 of them.
        ts = jnp.linspace(0.0, T1, n_save)

        def loss(theta, ts):
            sol = ja.solve(lotka_volterra, Y0, 0.0, T1, theta, saveat=ts, max_steps=max_steps)
            return jnp.sum(sol.ys ** 2)

        compiled = jax.jit(jax.grad(loss)).lower(THETA, ts).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    small, large = temp_bytes(10_000, 1024), temp_bytes(10_000, 16_384)
    # A buffer of n_save x max_steps states would be 10_000 x 16_384 x 2 x 8 = 2.6 GB; the
    # rows of dense output are at most min(n_save, max_steps) + 1 long (a few MB here), and
    # the rest grows with max_steps alone (the states record, 16_384 x 2 x 8 = 0.26 MB).
    assert large < 20e6
    assert large - small < 10_000 * 40 * 2 * 8 + 16_384 * 8 * 8


@pytest.mark.parametrize("n_save", [1, 5, 128, 129, 300])
def test_count_before_is_searchsorted(n_save):
    """The forward loop's save-time search (`_dense.count_before`, blocked for many saves)
    agrees with `numpy.searchsorted`, left and right, across block boundaries."""
    from jaxadjoint._dense import SEARCH_BLOCK, count_before

    rng = np.random.default_rng(n_save)
    # Sorted, with repeats, so that ties and block edges are both exercised.
    taus = np.sort(rng.choice(np.linspace(0.0, 1.0, max(2, n_save // 3)), n_save))
    edges = taus[:: SEARCH_BLOCK]
    queries = np.concatenate([taus, edges - 1e-9, edges + 1e-9, [-1.0, 2.0, 0.5]])
    search = jax.jit(jax.vmap(lambda t: (count_before(jnp.asarray(taus), t),
                                         count_before(jnp.asarray(taus), t, inclusive=True))))
    left, right = search(jnp.asarray(queries))
    np.testing.assert_array_equal(left, np.searchsorted(taus, queries, side="left"))
    np.testing.assert_array_equal(right, np.searchsorted(taus, queries, side="right"))


@pytest.mark.parametrize(
    "solver, carried",
    [(ja.Tsit5(), 6), (ja.Dopri5(), 6), (ja.Fehlberg45(), 6), (ja.Vern6(), None)],
    ids=["Tsit5", "Dopri5", "Fehlberg45", "Vern6"],
)
def test_end_stage_cotangent_is_carried_to_the_next_step(solver, carried):
    """With saves, the slope ``f(t_{n+1}, y_{n+1})`` that only saves read is not linearised
    again: its cotangent joins the next step's first slope (one VJP fewer per step). The
    gradients of `test_save_time_gradient_is_the_interpolants` (saves in some steps and
    not others, one in the last step) check the arithmetic against the replay; here, that
    the stage is dropped where it may be and kept where a later stage reads it (Vern6)."""
    plan = solver.stage_plan(True)
    end_stage = carried if carried is not None else plan.end_stages[0]
    assert plan.end_stages == (end_stage,)
    if carried is None:
        assert plan.carried_end is None and end_stage in plan.live
    else:
        assert plan.interpolation_stages[plan.carried_end] == carried
        assert carried not in plan.live
