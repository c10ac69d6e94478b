"""Step-size controllers: the grids they record, their rules, and gradients on those grids.

The gradient never goes through a controller (the grid is a recorded constant), so each
controller is paired with one solver and checked against the replay on its grid, forwards
and backwards; their step rules are checked directly on hand-made error values.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import solve_cases as sc

import jaxadjoint as ja
from jaxadjoint._controllers import Tolerances


def step_to_grid(t0: float, t1: float, saveat) -> jnp.ndarray:
    """13 uneven times from t0 to t1 (the save times among them)."""
    fractions = np.sort(np.concatenate([np.linspace(0.0, 1.0, 10) ** 1.5, [0.11, 0.47, 0.83]]))
    ts = t0 + fractions * (t1 - t0)
    ts[0], ts[-1] = t0, t1
    for s in saveat:  # snap the nearest grid time onto each save time
        ts[np.argmin(np.abs(ts - s))] = s
    return jnp.asarray(ts)


def controller_cases():
    """(solver, controller factory) pairs; every controller is covered once."""
    return [
        (ja.Dopri5(), lambda t0, t1, saveat: None),  # IController, the default
        (ja.BogackiShampine(), lambda t0, t1, saveat: ja.PIController()),
        (ja.CashKarp(), lambda t0, t1, saveat: ja.OdeintController()),  # the paper's pair
        (ja.Dopri5(), lambda t0, t1, saveat: ja.ConstantStep(jnp.asarray(0.05))),
        (ja.Heun(), lambda t0, t1, saveat: ja.StepTo(step_to_grid(t0, t1, saveat))),
        # A traced step limit (scipy's max_step): the steps it caps are recorded like any.
        (ja.Tsit5(), lambda t0, t1, saveat: ja.IController(dtmax=jnp.asarray(DTMAX))),
    ]


CASE_IDS = ["Dopri5-I", "BogackiShampine-PI", "CashKarp-Odeint", "Dopri5-ConstantStep",
            "Heun-StepTo", "Tsit5-I-dtmax"]
DTMAX = 0.15


@pytest.mark.parametrize("case", controller_cases(), ids=CASE_IDS)
def test_gradient_matches_replay(case):
    solver, make_controller = case
    diff = sc.make_inputs(sc.layout_for(solver))
    for t0, t1, saveat in (sc.FORWARD, sc.BACKWARD):
        kwargs = sc.sweep_kwargs(solver, controller=make_controller(t0, t1, saveat))
        sol, _, _ = sc.check_against_replay(diff, t0, t1, saveat, kwargs)
        if isinstance(kwargs["controller"], ja.StepTo):
            # StepTo steps exactly to its times (the save times are among them).
            assert np.array_equal(sc.helpers.accepted_grid(sol), kwargs["controller"].ts)
        if getattr(kwargs["controller"], "dtmax", None) is not None:
            steps = np.abs(np.diff(sc.helpers.accepted_grid(sol)))
            # It binds: every step but those shortened to land on t1 is dtmax.
            assert steps.max() <= DTMAX * (1 + 1e-12) and np.sum(steps > 0.99 * DTMAX) > 5


@pytest.mark.parametrize("case", controller_cases()[:3], ids=CASE_IDS[:3])
def test_adaptive_controllers_meet_the_tolerance(case):
    """At rtol = atol = 1e-7 the global error against the exact solution is small."""
    solver, make_controller = case
    diff = sc.make_inputs(sc.layout_for(solver), eps=0.0)
    t0, t1, saveat = sc.FORWARD
    kwargs = sc.sweep_kwargs(solver, controller=make_controller(t0, t1, saveat),
                             rtol=1e-7, atol=1e-7)
    output_error, grad_error, _ = sc.compare_with_exact(diff, t0, t1, saveat, kwargs)
    assert output_error < 1e-5
    assert grad_error < 1e-4


def test_constant_step_grid_does_not_drift():
    """Steps end at t0 + n dt computed directly, however long the run (a regression test:
    the step actually taken used to feed back into the next one, so the grid drifted
    and could stall below a grid point)."""
    solver = ja.Dopri5()
    diff = sc.make_inputs(sc.layout_for(solver))
    t0, t1, saveat = 0.1, 2.1, (0.4, 0.7, 1.9)
    for dt in (0.1, 0.01, 1 / 120):
        kwargs = sc.sweep_kwargs(solver, controller=ja.ConstantStep(jnp.asarray(dt)))
        _, _, sol = sc.run(diff, t0, t1, saveat, kwargs)
        grid = sc.helpers.accepted_grid(sol)
        n = round((t1 - t0) / dt)
        assert len(grid) == n + 1  # the save times are grid points: no extra steps
        np.testing.assert_allclose(grid, t0 + dt * np.arange(n + 1), rtol=0, atol=1e-13)
    # Backwards, with save times off the grid: they do not change the steps (dense output);
    # landing on them (`land_on_ts`), the steps after a save resume on the grid.
    kwargs = sc.sweep_kwargs(solver, controller=ja.ConstantStep(jnp.asarray(0.25)))
    _, _, sol = sc.run(diff, 2.1, -0.3, (1.5, 1.0, 0.05), kwargs)
    grid = sc.helpers.accepted_grid(sol)
    on_grid = np.concatenate([2.1 - 0.25 * np.arange(10), [-0.3]])
    np.testing.assert_allclose(grid, on_grid, rtol=0, atol=1e-13)
    y0, args, rhs = diff
    landing = ja.solve(rhs, y0, 2.1, -0.3, args, solver=solver, controller=ja.ConstantStep(0.25),
                       saveat=ja.SaveAt(ts=jnp.array([1.5, 1.0, 0.05]), land_on_ts=True),
                       max_steps=sc.MAX_STEPS)
    expected = np.sort(np.concatenate([2.1 - 0.25 * np.arange(10), [1.5, 1.0, 0.05, -0.3]]))
    np.testing.assert_allclose(sc.helpers.accepted_grid(landing), expected[::-1], rtol=0,
                               atol=1e-13)


# ------------------------------------------------------------------------------------------
# The step rules, on hand-made errors (order p = 5, embedded order 4, as Dopri5/CashKarp).

TOL = Tolerances(jnp.asarray(1e-3), jnp.asarray(1e-3))
Y = jnp.ones(4)


def scaled(err: float) -> jnp.ndarray:
    """An error vector whose scaled RMS norm (and max norm) is ``err`` for ``Y`` fixed."""
    return jnp.full(4, err * (1e-3 + 1e-3 * 1.0))


def test_i_controller_rule():
    c = ja.IController()
    solver = ja.Dopri5()  # error estimate of order 4, so q = 5
    accept, h, rejected = c.adapt(Y, Y, scaled(0.5), Y, jnp.asarray(1.0), jnp.array(False),
                                  solver, TOL)
    assert bool(accept) and not bool(rejected)
    np.testing.assert_allclose(h, 0.9 * 0.5 ** (-1 / 5))
    accept, h, rejected = c.adapt(Y, Y, scaled(2.0), Y, jnp.asarray(1.0), jnp.array(False),
                                  solver, TOL)
    assert not bool(accept) and bool(rejected)
    np.testing.assert_allclose(h, 0.9 * 2.0 ** (-1 / 5))
    # After a rejection the step may not grow; growth and shrinkage are clipped.
    _, h, _ = c.adapt(Y, Y, scaled(1e-3), Y, jnp.asarray(1.0), jnp.array(True), solver, TOL)
    np.testing.assert_allclose(h, 1.0)
    _, h, _ = c.adapt(Y, Y, scaled(0.0), Y, jnp.asarray(1.0), jnp.array(False), solver, TOL)
    np.testing.assert_allclose(h, 10.0)
    _, h, _ = c.adapt(Y, Y, scaled(1e6), Y, jnp.asarray(1.0), jnp.array(False), solver, TOL)
    np.testing.assert_allclose(h, 0.2)


def test_pi_controller_rule():
    c = ja.PIController()
    solver = ja.Dopri5()
    prev = jnp.asarray(0.5)
    accept, h, state = c.adapt(Y, Y, scaled(0.25), Y, jnp.asarray(1.0), prev, solver, TOL)
    assert bool(accept)
    np.testing.assert_allclose(h, 0.9 * 0.25 ** (-0.7 / 5) * 0.5 ** (0.4 / 5))
    np.testing.assert_allclose(state, 0.25)
    accept, h, state = c.adapt(Y, Y, scaled(3.0), Y, jnp.asarray(1.0), prev, solver, TOL)
    assert not bool(accept)
    np.testing.assert_allclose(h, 0.9 * 3.0 ** (-0.7 / 5) * 0.5 ** (0.4 / 5))
    np.testing.assert_allclose(state, 0.5)  # a rejected error is not remembered


def test_odeint_controller_rule():
    """boost::odeint (paper eqs. 9-11): reject and shrink above 1, grow below 1/2 (at most
    5x), keep the step in between; the error is scaled by atol + rtol (|y| + h |f|)."""
    c = ja.OdeintController()
    solver = ja.CashKarp()  # p_S = 5, p_E = 4
    k0 = jnp.zeros(4)  # so that the scale is atol + rtol |y|, as in `scaled`
    h = jnp.asarray(1.0)
    accept, h_new, _ = c.adapt(Y, Y, scaled(3.0), k0, h, None, solver, TOL)
    assert not bool(accept)
    np.testing.assert_allclose(h_new, max(0.9 * 3.0 ** (-1 / 3), 0.2))
    accept, h_new, _ = c.adapt(Y, Y, scaled(0.2), k0, h, None, solver, TOL)
    assert bool(accept)
    np.testing.assert_allclose(h_new, 0.9 * 0.2 ** (-1 / 5))
    accept, h_new, _ = c.adapt(Y, Y, scaled(0.7), k0, h, None, solver, TOL)
    assert bool(accept)
    np.testing.assert_allclose(h_new, 1.0)
    _, h_new, _ = c.adapt(Y, Y, scaled(0.0), k0, h, None, solver, TOL)
    np.testing.assert_allclose(h_new, 0.9 * 5.0)
    # The derivative term of the scale: h |f| adds to |y|.
    _, h_new, _ = c.adapt(Y, Y, scaled(0.7), jnp.ones(4), h, None, solver, TOL)
    np.testing.assert_allclose(h_new, 0.9 * (0.7 / 1.5) ** (-1 / 5))


@pytest.mark.parametrize("t0, dt, dtype", [(0.3, 0.1, jnp.float32), (0.0, 0.01, jnp.float32),
                                           (1e5, 1e-3, jnp.float64)],
                         ids=["f32", "f32-small-dt", "f64-late-t0"])
def test_constant_step_advances_through_round_off(t0, dt, dtype):
    """``ConstantStep`` finds the grid point it stands on with an allowance for the
    round-off of ``t - t0``: with a fixed 1e-9 it took the point it had reached for one
    just ahead, and stalled on steps of zero length until `max_steps` (NaN with
    ``throw=False``) in float32, and in float64 at ``t0 = 1e5``."""
    steps = 20
    t1 = t0 + steps * dt
    sol = ja.solve(lambda t, y, k: -k * y, jnp.ones(1, dtype), t0, t1, 0.7,
                   controller=ja.ConstantStep(dt), max_steps=4 * steps, throw=False)
    assert sol.result == ja.RESULTS.successful, sol.result
    assert int(sol.stats["num_accepted_steps"]) == steps
    np.testing.assert_allclose(np.asarray(sol.ys[0, 0]), np.exp(-0.7 * (t1 - t0)),
                               rtol=1e-5 if dtype == jnp.float32 else 1e-9)


@pytest.mark.parametrize("make", [ja.IController, ja.PIController, ja.OdeintController,
                                  ja.PredictiveController])
def test_dtmax_caps_every_step(make):
    """Each adaptive controller keeps every step, the first (``dt0``) included, within
    ``dtmax``; the solution stays accurate (a short pulse the default steps can miss)."""
    def pulse(t, y, k):  # a dose of 1 over [5, 5.1], decaying at rate k
        return -k * y + jnp.where((t > 5.0) & (t < 5.1), 10.0, 0.0)

    sol = ja.solve(pulse, jnp.ones(1), 0.0, 10.0, 0.5, controller=make(dtmax=0.05),
                   dt0=1.0, rtol=1e-8, atol=1e-10)
    steps = np.diff(sc.helpers.accepted_grid(sol))
    assert steps[0] == 0.05 and steps.max() <= 0.05 * (1 + 1e-12)
    exact = np.exp(-5.0) + 10 * (np.exp(-0.5 * 4.9) - np.exp(-0.5 * 5.0)) / 0.5
    np.testing.assert_allclose(np.asarray(sol.ys[-1, 0]), exact, rtol=1e-5)  # the pulse's edges


def test_a_new_dtmax_does_not_compile_again():
    """A Python-number ``dtmax`` is an argument of the compiled solve, as ``t1`` is: a
    new value reuses it (a UAT scanned it: 3-4 s per value); the controller stays hashable
    (another UAT used it as a static argument)."""
    from jaxadjoint._integrate import _jaxadjoint_solve

    def decay(t, y, k):
        return -k * y

    def steps(dtmax):
        sol = ja.solve(decay, jnp.ones(1), 0.0, 1.0, 0.5, controller=ja.IController(dtmax=dtmax))
        return int(sol.stats["num_accepted_steps"])

    first = steps(0.05)
    compiled = _jaxadjoint_solve._cached._cache_size()
    assert steps(0.04) == 25 and first == 20
    assert _jaxadjoint_solve._cached._cache_size() == compiled
    # The controller itself keeps the number: hashable, a static argument of a user's `jit`.
    assert hash(ja.IController(dtmax=0.05)) == hash(ja.IController(dtmax=0.05))


def test_bad_dtmax_is_refused():
    with pytest.raises(ValueError, match=r"`PIController\(dtmax=...\)` must be a finite "):
        ja.PIController(dtmax=0.0)
    with pytest.raises(ValueError, match="finite non-zero step"):
        ja.IController(dtmax=float("nan"))
    with pytest.raises(ValueError, match="finite non-zero step"):
        ja.IController(dtmax=jnp.asarray(jnp.inf))  # a concrete array too
    assert ja.IController(dtmax=-0.5).dtmax == -0.5  # its sign is ignored, as dt0's

    @jax.jit
    def result(dtmax):  # traced: through the result
        return ja.solve(lambda t, y, k: -k * y, jnp.ones(1), 0.0, 1.0, 0.5, throw=False,
                        controller=ja.IController(dtmax=dtmax)).result

    assert result(jnp.asarray(0.0)) == ja.RESULTS.invalid_controller
    assert result(jnp.asarray(-0.5)) == ja.RESULTS.successful
    # A step limit known before `jit` that max_steps cannot reach t1 with (a UAT: 48 h at
    # dtmax 0.01 ran out of steps with a message that did not say why).
    for controller, name in [(ja.IController(dtmax=0.01), "`IController.dtmax` = 0.01"),
                             (ja.ConstantStep(0.01), "`ConstantStep.dt` = 0.01")]:
        with pytest.raises(ValueError, match=f"{re.escape(name)} needs at least 4800 steps "
                           "from t0 = 0 to t1 = 48, more than `max_steps=4096`"):
            ja.solve(lambda t, y, k: -k * y, jnp.ones(1), 0.0, 48.0, 0.5, controller=controller)


@pytest.mark.parametrize("make, match", [
    (lambda: ja.PIController(factor_min=2.0, factor_max=0.5), "factor_min"),
    (lambda: ja.PredictiveController(safety=0.0), "safety"),
    (lambda: ja.IController(factor_max=1.0), "factor_max"),
], ids=["pi-bounds", "predictive-safety", "i-max"])
def test_controller_arguments_are_checked(make, match):
    """Step factors that can never shrink a rejected step (or grow an accepted one) are
    refused at construction; they ran to `max_steps` blaming stiffness."""
    with pytest.raises(ValueError, match=match):
        make()
