"""`ForwardSensitivity` and `ContinuousAdjoint` with the stiff solvers (Rodas5, Kvaerno5).

* The block-triangular solve (`_block_solve`) equals a dense LU of the whole augmented
  ``I - gamma h A`` (and its transpose), for the forward-sensitivity layout and for both
  adjoint layouts.
* A forward-sensitivity solve factorises one ``N x N`` matrix per step, nothing larger.
* Robertson to t = 40, sensitivities of y(0.4, 4, 40) to the three (log) rates:
  - Rodas5, ``error_control=False``: the steps are the plain solve's and the
    sensitivities equal `DiscreteAdjoint`'s to round-off (the Rosenbrock step of the
    augmented system, with its exact Jacobian, is the derivative of the Rosenbrock step);
  - Kvaerno5, ``error_control=False`` on the plain solve's grid: equal to
    `DiscreteAdjoint`'s up to the Newton tolerance;
  - with error control: within the tolerance of SciPy's Radau on the augmented system
    (rtol 1e-11), and closer to it than without;
  - `jax.grad` in ``(y0, rates)``: forward sensitivities transposed = `DiscreteAdjoint`;
  - `ContinuousAdjoint` (on the stiff solver's continuous extension): within the tolerance.
* `ContinuousAdjoint(state="backsolve")` with a stiff solver (three blocks) on a problem
  with a closed form.
* ``integrand=`` with a stiff solver (the quadrature as extra state): the closed-form
  integral and its gradient, the steps and saves of the solve without it, and forward
  sensitivities equal to the discrete adjoint.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import accepted_grid, equations, fast_equilibrium, max_rel_diff
from test_rosenbrock import ROBERTSON, ROBERTSON_TS, _scipy_normalised_sensitivities

import jaxadjoint as ja
from jaxadjoint._block_solve import Block, BlockTriangularSolver
from jaxadjoint.solvers import _dense_lu

SAVES = ja.SaveAt(ts=jnp.asarray(ROBERTSON_TS), land_on_ts=True)
LOG_RATES = jnp.log(ROBERTSON.args)
RODAS5 = ja.Rodas5()
KVAERNO5 = ja.Kvaerno5(kappa=jnp.asarray(1e-2))  # kappa traced: one compilation per use


@functools.cache
def _reference() -> np.ndarray:
    """``dy_i/dlog k_j`` at the save times (SciPy Radau, augmented system, rtol 1e-11)."""
    return _scipy_normalised_sensitivities()


def _rel_error(jac: jax.Array) -> float:
    """max over saves and outputs of ``|ours - reference| / max_j |reference|``."""
    ref = _reference()
    return float((np.abs(np.asarray(jac) - ref).max(axis=2) / np.abs(ref).max(axis=2)).max())


def _solve(log_k, rtol, solver, sensitivity, controller=None):
    return ja.solve(ROBERTSON.rhs, ROBERTSON.y0, 0.0, 40.0, jnp.exp(log_k), solver=solver,
                    rtol=rtol, atol=1e-4 * rtol, saveat=SAVES, sensitivity=sensitivity,
                    controller=controller)


@eqx.filter_jit
def _forward_jacobian(log_k, rtol, solver, sensitivity, controller=None):
    """``(d ys / d log k, accepted steps)`` by `jax.jacfwd`."""
    def ys(x):
        sol = _solve(x, rtol, solver, sensitivity, controller)
        return sol.ys, sol.stats["num_accepted_steps"]

    return jax.jacfwd(ys, has_aux=True)(log_k)


@eqx.filter_jit
def _reverse_jacobian(log_k, rtol, solver, sensitivity, controller=None):
    return jax.jacrev(lambda x: _solve(x, rtol, solver, sensitivity, controller).ys)(log_k)


# --- the block-triangular solve --------------------------------------------------------


def _van_der_pol(y, p):
    return jnp.stack([y[1], p[0] * (1 - y[0] ** 2) * y[1] - p[1] * y[0]])


Y = jnp.asarray([1.3, -0.4])
P = jnp.asarray([7.0, 1.5])
S = jnp.asarray([[0.3, -1.1], [2.0, 0.5]])
LAM, Q = jnp.asarray([0.7, -0.2]), jnp.asarray([0.1, 0.4])


def _sensitivity_field(t, z):
    """``(f, J S + J_p)`` with ``S`` (2 x 2) row major after ``y``."""
    del t
    y, s = z[:2], z[2:].reshape(2, 2)
    jac = jax.jacfwd(_van_der_pol)(y, P)
    return jnp.concatenate([_van_der_pol(y, P), (jac @ s + jax.jacfwd(_van_der_pol, 1)(y, P))
                            .reshape(-1)])


def _adjoint_field(t, a):
    """``(-J^T lam, -J_p^T lam, f)`` at ``a = (lam, pbar, y)`` (a backsolve adjoint)."""
    del t
    lam, y = a[:2], a[4:]
    _, vjp = jax.vjp(_van_der_pol, y, P)
    y_bar, p_bar = vjp(-lam)
    return jnp.concatenate([y_bar, p_bar, _van_der_pol(y, P)])


LAYOUTS = {
    "forward-sensitivity": (
        _sensitivity_field, jnp.concatenate([Y, S.reshape(-1)]),
        (Block(0, 2, "jacobian"), Block(2, 4, "columns", columns=2, of=0)),
    ),
    "adjoint-checkpointed": (
        lambda t, a: _adjoint_field(t, jnp.concatenate([a, Y]))[:4],
        jnp.concatenate([LAM, Q]), (Block(0, 2, "jacobian"), Block(2, 2, "zero")),
    ),
    "adjoint-backsolve": (
        _adjoint_field, jnp.concatenate([LAM, Q, Y]),
        (Block(4, 2, "jacobian"), Block(0, 2, "jacobian"), Block(2, 2, "zero")),
    ),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_block_solve_is_the_dense_solve(layout):
    field, z, blocks = LAYOUTS[layout]

    @jax.jit
    def solves(z, gamma_h, b, seeds):
        t = jnp.zeros(())
        matrix = jnp.eye(z.shape[0]) - gamma_h * jax.jacfwd(lambda x: field(t, x))(z)
        factor = BlockTriangularSolver(blocks).factor(field, t, z, gamma_h)
        ours = factor.solve(b), factor.solve_transposed(seeds)
        dense = jnp.linalg.solve(matrix, b), jnp.linalg.solve(matrix.T, seeds.T).T
        lu_shapes = [lu[0].shape for lu in factor.lus if lu is not None]
        return ours, dense, matrix, lu_shapes

    b = jnp.sin(jnp.arange(1.0, z.shape[0] + 1.0))
    seeds = jnp.stack([b, jnp.cos(b)])
    ours, dense, matrix, lu_shapes = solves(z, jnp.asarray(0.37), b, seeds)
    assert max_rel_diff(ours, dense) < 1e-13
    # Only the diagonal blocks' LUs are formed.
    assert lu_shapes == [(2, 2)] * sum(b.diagonal == "jacobian" for b in blocks)
    # The blocks are coupled: a block-diagonal solve would not pass (the test can fail).
    first = blocks[0].slice
    rest = np.setdiff1d(np.arange(z.shape[0]), np.arange(z.shape[0])[first])
    assert float(jnp.abs(matrix[rest][:, first]).max()) > 0.1


@pytest.mark.parametrize("solver", [RODAS5, KVAERNO5], ids=["Rodas5", "Kvaerno5"])
def test_one_small_lu_per_step(solver, monkeypatch):
    """Only LUs of the user's 3 x 3 ``I - gamma h J``: one in the forward loop's step.
    (LAPACK's, as by default: with `compile_small_loops` they are unrolled arithmetic.)"""
    monkeypatch.setattr(_dense_lu, "small_loops_compiled", lambda: False)
    jaxpr = jax.make_jaxpr(
        lambda x: jax.jacfwd(lambda x: _solve(x, 1e-6, solver, ja.ForwardSensitivity()).ys)(x)
    )(LOG_RATES)
    lus = [eqn for eqn in equations(jaxpr.jaxpr) if eqn.primitive.name == "lu"]
    assert len(lus) == 1, len(lus)
    assert lus[0].invars[0].aval.shape == (3, 3)


# --- forward sensitivities on Robertson ------------------------------------------------


def test_rodas5_without_error_control_is_the_discrete_derivative():
    """Same steps as the plain solve; sensitivities = DiscreteAdjoint's to round-off."""
    rtol = jnp.asarray(1e-6)
    fwd, steps = _forward_jacobian(LOG_RATES, rtol, RODAS5,
                                   ja.ForwardSensitivity(error_control=False))
    plain = _solve(LOG_RATES, rtol, RODAS5, ja.DiscreteAdjoint())
    assert int(steps) == int(plain.stats["num_accepted_steps"])
    rev = _reverse_jacobian(LOG_RATES, rtol, RODAS5, ja.DiscreteAdjoint())
    assert max_rel_diff(fwd, rev) < 1e-12
    assert _rel_error(fwd) < 1e-5


def test_kvaerno5_without_error_control_is_the_discrete_derivative_to_newton_tolerance():
    """On the plain solve's grid: DiscreteAdjoint's up to the Newton tolerance (tighter
    ``kappa``, closer)."""
    rtol = jnp.asarray(1e-6)
    grid = jnp.asarray(accepted_grid(_solve(LOG_RATES, rtol, KVAERNO5, ja.DiscreteAdjoint())))
    diffs = []
    for kappa in (1e-2, 1e-4):
        solver = ja.Kvaerno5(kappa=jnp.asarray(kappa))
        fwd, _ = _forward_jacobian(LOG_RATES, rtol, solver,
                                   ja.ForwardSensitivity(error_control=False), ja.StepTo(grid))
        rev = _reverse_jacobian(LOG_RATES, rtol, solver, ja.DiscreteAdjoint(), ja.StepTo(grid))
        diffs.append(max_rel_diff(fwd, rev))
    assert diffs[0] < 1e-6 and diffs[1] < min(1e-8, diffs[0] / 10), diffs


@pytest.mark.parametrize("solver, bound", [(RODAS5, 5e-7), (KVAERNO5, 3e-6)],
                         ids=["Rodas5", "Kvaerno5"])
def test_error_control_on_sensitivities(solver, bound):
    """With error control the sensitivities are within the tolerance of SciPy's (rtol
    1e-6), more accurate than without, at the price of more steps."""
    rtol = jnp.asarray(1e-6)
    controlled, more_steps = _forward_jacobian(LOG_RATES, rtol, solver, ja.ForwardSensitivity())
    plain, steps = _forward_jacobian(LOG_RATES, rtol, solver,
                                     ja.ForwardSensitivity(error_control=False))
    assert _rel_error(controlled) < bound
    assert _rel_error(controlled) < _rel_error(plain)
    assert int(more_steps) > int(steps)


WEIGHTS = jnp.asarray([1.0, 1e4, 1.0])  # of y1, y2, y3 at every save: comparable sizes


@eqx.filter_jit
def _gradient(y0, log_k, solver, sensitivity):
    """``jax.grad`` of ``sum WEIGHTS * ys`` in ``(y0, log k)``, rtol 1e-8."""
    def loss(y0, log_k):
        sol = ja.solve(ROBERTSON.rhs, y0, 0.0, 40.0, jnp.exp(log_k), solver=solver, rtol=1e-8,
                       atol=1e-12, saveat=SAVES, sensitivity=sensitivity)
        return jnp.sum(sol.ys * WEIGHTS)

    return jax.grad(loss, argnums=(0, 1))(y0, log_k)


def test_gradients_wrt_initial_state_and_rates():
    """`jax.grad` (the forward sensitivities transposed; columns for y0 and the rates):
    `ForwardSensitivity(error_control=False)` is `DiscreteAdjoint`'s to round-off."""
    discrete = _gradient(ROBERTSON.y0, LOG_RATES, RODAS5, ja.DiscreteAdjoint())
    forward = _gradient(ROBERTSON.y0, LOG_RATES, RODAS5,
                        ja.ForwardSensitivity(error_control=False))
    for a, b in zip(forward, discrete):
        assert max_rel_diff(a, b) < 1e-12, (a, b)


# --- continuous adjoint ----------------------------------------------------------------


@pytest.mark.parametrize("solver", [RODAS5, KVAERNO5], ids=["Rodas5", "Kvaerno5"])
def test_continuous_adjoint_matches_the_reference(solver):
    """At rtol 1e-8, within about the tolerance of SciPy's sensitivities (and, for the
    initial state, of `DiscreteAdjoint`'s)."""
    y0_bar, log_k_bar = _gradient(ROBERTSON.y0, LOG_RATES, solver, ja.ContinuousAdjoint())
    expected = np.einsum("sij,i->j", _reference(), np.asarray(WEIGHTS))
    assert max_rel_diff(log_k_bar, expected) < 2e-6, (log_k_bar, expected)
    if solver is RODAS5:
        discrete = _gradient(ROBERTSON.y0, LOG_RATES, RODAS5, ja.DiscreteAdjoint())[0]
        assert max_rel_diff(y0_bar, discrete) < 1e-6


def test_continuous_adjoint_backsolve_with_a_stiff_solver():
    """``y' = -k * y`` (two rates): ``d y_i(1) / d k_i = -y0_i exp(-k_i)``, by Rodas5 solving
    the (state, adjoint, quadrature) system backwards with two LUs per step."""
    y0, k = jnp.asarray([1.0, 2.0]), jnp.asarray([0.5, 3.0])

    def loss(k):
        sol = ja.solve(lambda t, y, k: -k * y, y0, 0.0, 1.0, k, solver=RODAS5, rtol=1e-8,
                       atol=1e-10, sensitivity=ja.ContinuousAdjoint(state="backsolve"))
        return jnp.sum(sol.ys[-1])

    grad = jax.grad(loss)(k)
    np.testing.assert_allclose(grad, -y0 * jnp.exp(-k), rtol=1e-6)


# --- integrand -------------------------------------------------------------------------

DECAY_Y0 = jnp.asarray([1.0, 2.0])


def _decay(t, y, k):
    return -k * y


def _integral(k, sensitivity, saveat=None):
    """``int_0^1 |y|^2 dt`` of ``y' = -k y`` (a dict, to check the pytree layout)."""
    return ja.solve(_decay, DECAY_Y0, 0.0, 1.0, k, solver=RODAS5, rtol=1e-8, atol=1e-10,
                    integrand=lambda t, y, k: {"energy": jnp.sum(y**2)}, saveat=saveat,
                    sensitivity=sensitivity)


def _exact_integral(k):
    return jnp.sum(DECAY_Y0**2 * (1 - jnp.exp(-2 * k)) / (2 * k))


def test_integrand_with_a_stiff_solver():
    k = jnp.asarray([0.5, 3.0])
    sol = _integral(k, ja.DiscreteAdjoint(), saveat=jnp.asarray([0.3, 1.0]))
    plain = ja.solve(_decay, DECAY_Y0, 0.0, 1.0, k, solver=RODAS5, rtol=1e-8, atol=1e-10,
                     saveat=jnp.asarray([0.3, 1.0]))
    assert int(sol.stats["num_accepted_steps"]) == int(plain.stats["num_accepted_steps"])
    # The same steps; two programs (the integral rides as extra state), whose times are
    # arguments, not constants: equal to round-off (they were bitwise with constant times).
    np.testing.assert_allclose(sol.ys, plain.ys, rtol=1e-14, atol=0)
    np.testing.assert_array_equal(sol.ts, plain.ts)
    assert abs(float(sol.integral["energy"] / _exact_integral(k)) - 1) < 1e-7

    grads = {}
    for name, sensitivity in (("discrete", ja.DiscreteAdjoint()),
                              ("forward", ja.ForwardSensitivity(error_control=False))):
        grads[name] = eqx.filter_jit(jax.grad(
            lambda k, s=sensitivity: _integral(k, s).integral["energy"]))(k)
    exact = jax.grad(_exact_integral)(k)
    assert max_rel_diff(grads["discrete"], exact) < 1e-6
    assert max_rel_diff(grads["forward"], grads["discrete"]) < 1e-12


def test_kvaerno5_takes_its_steps_without_the_integrand():
    """The integral is no part of Kvaerno5's Newton test (`BlockTriangularSolver.newton_tested`):
    nothing reads it, so it converges with the state.  With it in the test, Van der Pol's
    final state differed by 5.6e-8 with and without the integrand; now by round-off."""

    def vdp(t, y, mu):
        return jnp.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])

    def run(integrand):
        return ja.solve(vdp, jnp.asarray([2.0, 0.0]), 0.0, 50.0, 100.0, solver=ja.Kvaerno5(),
                        rtol=1e-6, atol=1e-9, max_steps=256, integrand=integrand)

    plain = run(None)
    with_integral = run(lambda t, y, mu: y[0] ** 2)
    steps = int(plain.stats["num_accepted_steps"])
    assert int(with_integral.stats["num_accepted_steps"]) == steps
    # The same steps, to the round-off of two compiled programs (one node 6e-11 apart).
    np.testing.assert_allclose(with_integral.steps[:steps + 1], plain.steps[:steps + 1],
                               rtol=1e-9)
    np.testing.assert_allclose(with_integral.ys, plain.ys, rtol=1e-13)
    assert 100 < float(with_integral.integral) < 200  # y0^2 is between 0 and ~4 (165)


def test_kvaerno5_interpolated_sensitivities_on_a_fast_equilibrium():
    """Between nodes, Kvaerno5's saves are a cubic that leaves out ``k_1 = f(t_n, y_n)``:
    that slope amplified the Newton error of the sensitivity columns along the fast mode
    (kf = 1e7, steps of ~44) and every stage slope echoed it, so `ForwardSensitivity`'s
    interpolated sensitivities were 1-20 % off while its nodes agreed with
    `DiscreteForward` to 2e-9.  Now the interpolated ones agree to the Newton tolerance."""
    ts = jnp.array([60.0, 100.0, 450.0])

    def saves(p, sensitivity):
        sol = ja.solve(fast_equilibrium, jnp.array([1.0, 0.8, 0.0, 0.0]), 0.0, 450.0, p,
                       solver=ja.Kvaerno5(), saveat=ja.SaveAt(ts=ts), rtol=1e-8, atol=1e-8,
                       sensitivity=sensitivity, max_steps=4096)
        return sol.ys

    p = jnp.log(jnp.array([1e7, 1e6, 1e-3]))
    sens = jax.jacfwd(saves)(p, ja.ForwardSensitivity(error_control=False))
    discrete = jax.jacfwd(saves)(p, ja.DiscreteForward(accept_stiff_steps=True))
    assert max_rel_diff(sens, discrete) < 1e-4


def test_kvaerno5_interpolant_is_exact_for_cubics_and_blind_to_the_first_slope():
    from jaxadjoint.solvers._esdirk import HermiteWeights, first_stage_echo
    from jaxadjoint.solvers._esdirk_tableaus import KVAERNO5

    weights = HermiteWeights(KVAERNO5)
    stages = weights.stages(KVAERNO5)
    theta = jnp.linspace(0.0, 1.0, 11)
    w = np.stack([np.asarray(x) for x in weights.weight_list(theta)], axis=-1)  # (11, L)
    c = np.asarray(KVAERNO5.c)[list(stages)]
    # y = t^3 - t^2 + t/2 on a step of h = 1 from 0: the slopes at the stage times.
    np.testing.assert_allclose(w @ (3 * c**2 - 2 * c + 0.5), theta**3 - theta**2 + theta / 2,
                               atol=1e-15)
    np.testing.assert_allclose(w @ first_stage_echo(KVAERNO5)[list(stages)], 0.0, atol=1e-15)
    np.testing.assert_array_equal(w[-1], np.asarray(KVAERNO5.b)[list(stages)])
