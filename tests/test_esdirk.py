"""ESDIRK (Kvaerno5): tableau, Newton-iterated steps and their implicit-function adjoint.

* The tableau has orders 5 and 4 by the rooted-tree order conditions, and is L-stable.
* The gradient equals `jax.grad` of a plain replay on the recorded grid whose stages are
  solved by *full* Newton to convergence (written out below: exact Jacobian at each
  iterate, `jnp.linalg.solve`, no shared code): to ~1e-11 with a Newton tolerance at
  round-off (``kappa`` tiny), and to the level of the Newton tolerance by default.  The
  same holds with saves on the cubic Hermite dense output (values, ``d/d(y0, args, ts)``).
* `DiscreteForward` (the tangent of the implicit function theorem) equals
  `DiscreteAdjoint`; every checkpoint strategy gives the same; `vmap(grad)` is the
  gradients one by one; finite differences agree coarsely.
* Robertson's sensitivities to the three rates match SciPy's Radau (augmented system,
  from test_rosenbrock, which checks Rodas5 the same way); forward mode, finite
  differences and every checkpoint strategy agree.
* A stage that Newton cannot solve fails through `result` (and raises with ``throw``).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    accepted_grid,
    extension_orders,
    max_rel_diff,
    one_step_extension,
    vmap_grad_with_stored_stages_is_single_grads,
)
from test_rosenbrock import ROBERTSON, ROBERTSON_TS, _scipy_normalised_sensitivities
from test_tableaus import order_defects

import jaxadjoint as ja
from jaxadjoint.problems import (
    brusselator_problem,
    brusselator_rhs,
    robertson_problem,
    van_der_pol_initial_state,
    van_der_pol_rhs,
)
from jaxadjoint.solvers._esdirk import ITERATIVE_ADJOINT_MIN_SIZE, HermiteWeights
from jaxadjoint.solvers._esdirk_tableaus import KVAERNO5, ESDIRKTableau
from jaxadjoint.solvers._newton import solve_transposed_stage

VDP_MU = 1e3
VDP_Y0 = jnp.asarray(van_der_pol_initial_state(VDP_MU))
EPS = np.finfo(np.float64).eps
# The Newton tolerance floored at round-off (10 eps / rtol): stages converged to ~eps.
# (kappa as an array: the tests share one compiled solve for both tolerances.)
TIGHT = ja.Kvaerno5(kappa=jnp.asarray(1e-15))
DEFAULT = ja.Kvaerno5(kappa=jnp.asarray(1e-2))


# ------------------------------------------------------------------------------------------
# The tableau.


def test_order_conditions():
    """b has order exactly 5, bhat exactly 4 (all rooted-tree conditions to round-off)."""
    for weights, order in ((KVAERNO5.b, 5), (KVAERNO5.b_embedded, 4)):
        orders, defects, scales = order_defects(KVAERNO5.a, weights, order + 1)
        met = np.abs(defects) <= 16 * EPS * np.maximum(scales, 1.0)
        assert np.all(met[orders <= order]), defects[orders <= order]
        assert np.max(np.abs(defects[orders == order + 1])) > 1e-4


def test_stability():
    """L-stable propagated solution (R(z) -> 0 as z -> -inf), A-stable on the imaginary
    axis; the embedded solution is not small at infinity (why filtering helps)."""
    a, s = KVAERNO5.a, KVAERNO5.num_stages

    def r(z, b):
        return abs(1 + z * b @ np.linalg.solve(np.eye(s) - z * a, np.ones(s)))

    # R(z) ~ C / z far out (evaluated where round-off is still small).
    assert r(-1e6, KVAERNO5.b) < 1e-5 and r(-1e8, KVAERNO5.b) < 1e-7
    assert max(r(1j * w, KVAERNO5.b) for w in np.logspace(-2, 4, 61)) <= 1 + 1e-12
    assert r(-1e8, KVAERNO5.b_embedded) > 0.5
    assert KVAERNO5.stiffly_accurate


@pytest.mark.parametrize("change, match", [
    (dict(c=np.zeros(7)), "row sums"),
    (dict(a=KVAERNO5.a + np.eye(7) * 0.01), "diagonal"),
    (dict(b=KVAERNO5.b * 1.01), "sum to 1"),
])
def test_tableau_validation(change, match):
    fields = dict(name="bad", gamma=KVAERNO5.gamma, a=KVAERNO5.a, b=KVAERNO5.b,
                  b_embedded=KVAERNO5.b_embedded, c=KVAERNO5.c, predictor=KVAERNO5.predictor,
                  order=5, error_order=4)
    with pytest.raises(ValueError, match=match):
        ESDIRKTableau(**{**fields, **change})


# ------------------------------------------------------------------------------------------
# The reference: the same method on the recorded grid, stages by full Newton.

NEWTON_ITERATIONS = 12


def replay(rhs, tableau, y0, args, grid, ts=None):
    """``y_T`` (or the saves at ``ts``) of the ESDIRK formulas on ``grid``.

    Each implicit stage ``k = f(t_i, base + gamma h k)`` is solved by full Newton (exact
    Jacobian at every iterate, dense solve), from the previous stage's slope, for a fixed
    number of iterations: `jax.grad` through converged Newton iterations is the
    derivative of the root.  Saves: the cubic with ``y_n``, ``y_{n+1}``, the end slope
    ``k_s`` and ``p'(c_j) - r_j p'(0) = k_j - r_j k_1`` (`HermiteWeights`), written out.
    """
    g, s = tableau.gamma, tableau.num_stages
    a, b, c = (np.asarray(x) for x in (tableau.a, tableau.b, tableau.c))
    # The interior stage j and its echo r_j of the first slope's stiff error.
    r = [1.0]
    for i in range(1, s):
        r.append(-sum(a[i, m] * r[m] for m in range(i)) / g)
    j = HermiteWeights.interior_stage(tableau)
    c_j, r_j = float(c[j]), r[j]
    den = (1 - c_j) * (1 - 3 * c_j) - r_j

    def step(y, times):
        t, t_next = times
        h = t_next - t
        ks = [rhs(t, y, args)]
        for i in range(1, s):
            base = y + h * sum(a[i, j] * ks[j] for j in range(i))
            t_i = t_next if c[i] == 1 else t + c[i] * h

            def newton(_, k, base=base, t_i=t_i):
                z = base + g * h * k
                jac = jax.jacfwd(lambda x: rhs(t_i, x, args))(z)
                return k - jnp.linalg.solve(jnp.eye(y.shape[0]) - g * h * jac,
                                            k - rhs(t_i, z, args))

            ks.append(jax.lax.fori_loop(0, NEWTON_ITERATIONS, newton, ks[-1]))
        y_new = y + h * sum(b[i] * ks[i] for i in range(s))
        return y_new, (y, ks[j] - r_j * ks[0], ks[-1])

    grid = jnp.asarray(grid)
    y_final, (ys, k_inner, k_last) = jax.lax.scan(step, y0, (grid[:-1], grid[1:]))
    if ts is None:
        return y_final
    # The step holding each save (a constant); padding repeats t_T, whose saves (theta =
    # 0) are read on the last row.
    index = jnp.searchsorted(grid, jax.lax.stop_gradient(ts), side="right") - 1
    last = grid.shape[0] - 1
    index = jnp.minimum(index, last)
    # Each step's end: the next state (the final state for the last step).
    ys_end = jnp.concatenate([ys[1:], y_final[None]])
    ys, ys_end = (jnp.concatenate([x, y_final[None]]) for x in (ys, ys_end))
    # The last row (saves at t_T, theta = 0) only needs its slope at 0 to be f(t_T, y_T).
    k_inner = jnp.concatenate([k_inner, den * rhs(grid[last], y_final, args)[None]])
    k_last = jnp.concatenate([k_last, jnp.zeros_like(k_last[:1])])
    h = jnp.concatenate([grid[1:] - grid[:-1], jnp.ones(1)])[index][:, None]
    theta = ((ts - grid[index]) / h[:, 0])[:, None]
    mean = (ys_end[index] - ys[index]) / h
    u = (k_inner[index] - 6 * c_j * (1 - c_j) * mean
         - (3 * c_j**2 - 2 * c_j) * k_last[index]) / den
    return ys[index] + h * (theta**2 * (3 - 2 * theta) * mean + u * theta * (1 - theta) ** 2
                            - theta**2 * (1 - theta) * k_last[index])


def _brusselator_flat(t, y, args):
    """The Brusselator on 2 x 16 grid values as a flat state of 32: at
    `ITERATIVE_ADJOINT_MIN_SIZE`, so its reverse steps solve the stage systems iteratively."""
    return brusselator_rhs(t, y.reshape(2, -1), args).ravel()


BRUSSELATOR = brusselator_problem(16, 2.0)
assert BRUSSELATOR.y0.size >= ITERATIVE_ADJOINT_MIN_SIZE

CASES = {
    # (rhs, y0, args, t1, rtol, atol, save times)
    "vdp-mu1e3": (van_der_pol_rhs, VDP_Y0, jnp.asarray(VDP_MU), 0.3, 1e-6, 1e-6,
                  jnp.array([0.0, 0.0137, 0.1, 0.2718, 0.3])),
    "robertson": (ROBERTSON.rhs, ROBERTSON.y0, ROBERTSON.args, 40.0, 1e-7, 1e-9,
                  jnp.array([0.0, 0.4, 3.3, 17.0, 40.0])),
    "brusselator-2x16": (_brusselator_flat, BRUSSELATOR.y0.ravel(), BRUSSELATOR.args, 2.0,
                         1e-6, 1e-6, jnp.array([0.0, 1.0, 2.0])),
}


GRID_SLOTS = 256  # replay grids are padded to this length (one compiled replay per case)


def _weights(case, with_saves):
    _, y0, *_, ts = CASES[case]
    n_out = ts.shape[0] if with_saves else 1
    weights = jnp.sin(jnp.arange(n_out * y0.shape[0], dtype=y0.dtype) + 1.0)
    return weights.reshape(n_out, y0.shape[0])


@functools.cache
def _ours(case, with_saves):
    """``(loss, sol), dL/d(y0, args, ts)`` of a solve, compiled once per case: the solver
    (its ``kappa`` an array) is an argument."""
    rhs, _, _, t1, rtol, atol, _ = CASES[case]

    def loss(y0, args, ts, solver):
        sol = ja.solve(rhs, y0, 0.0, t1, args, solver=solver, rtol=rtol, atol=atol,
                       saveat=ts if with_saves else None)
        return jnp.sum(sol.ys * _weights(case, with_saves)), sol

    return eqx.filter_jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))


@functools.cache
def _reference(case, with_saves):
    """The replay's loss and gradient on a grid padded with zero steps (which leave the
    state as it is) to `GRID_SLOTS` times."""
    rhs = CASES[case][0]

    def loss(y0, args, ts, grid):
        out = replay(rhs, KVAERNO5, y0, args, grid, ts if with_saves else None)
        return jnp.sum(out * _weights(case, with_saves))

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))


def _loss_and_grad(case, solver, with_saves):
    _, y0, args, *_, ts = CASES[case]
    (value, sol), grads = _ours(case, with_saves)(y0, args, ts, solver)
    grid = accepted_grid(sol)
    assert grid.shape[0] <= GRID_SLOTS
    grid = np.concatenate([grid, np.full(GRID_SLOTS - grid.shape[0], grid[-1])])
    reference = _reference(case, with_saves)(y0, args, ts, jnp.asarray(grid))
    return value, grads, reference, sol


def _per_parameter(ours, ref):
    """max_p |ours_p - ref_p| / |ref_p| (Robertson's rates differ by 9 orders)."""
    ours, ref = np.atleast_1d(ours), np.atleast_1d(ref)
    return float(np.max(np.abs(ours - ref) / np.abs(ref)))


@pytest.mark.parametrize("case", CASES)
def test_gradient_is_the_converged_replays(case):
    """Newton to round-off: value and dL/d(y0, args) are the replay's to ~1e-11
    (measured 1e-12 and below)."""
    value, ours, (ref_value, reference), sol = _loss_and_grad(case, TIGHT, False)
    stats = {key: int(value) for key, value in sol.stats.items() if key.startswith("num")}
    assert 3 <= stats["num_accepted_steps"] <= 200
    # Honest counts: one Jacobian per attempted step; k1, then per step its Newton
    # iterations and f(t_{n+1}, y_{n+1}).  The tight Newton tolerance takes 5-7 iterations
    # a stage here (measured), well above one (what a count of stages would give).
    steps, newton = stats["num_steps"], stats["num_rhs_evals"] - 1 - stats["num_steps"]
    assert stats["num_jacobians"] == steps
    assert 6 * 3 * steps <= newton <= 6 * 10 * steps + 2, stats
    assert abs(value - ref_value) <= 1e-12 * max(1.0, abs(ref_value))
    assert max_rel_diff(ours[0], reference[0]) < 1e-11
    assert _per_parameter(ours[1], reference[1]) < 1e-11


@pytest.mark.parametrize("case", ["vdp-mu1e3"])
def test_gradient_default_newton_tolerance(case):
    """The default Newton tolerance (kappa = 1e-2 of the local error tolerance): the
    gradient differs from the converged replay's by about the Newton error."""
    rtol = CASES[case][4]
    value, ours, (ref_value, reference), _ = _loss_and_grad(case, DEFAULT, False)
    # Measured: values 1e-9 (Robertson) to 1e-8 (Van der Pol, 4 stiff steps), gradients
    # 2e-9 to 3e-5 relative: the Newton error (a hundredth of the local tolerance per
    # stage) amplified by the stiff dynamics, not round-off.
    assert abs(value - ref_value) <= rtol * max(1.0, abs(ref_value))
    assert max_rel_diff(ours[0], reference[0]) < 100 * rtol
    assert _per_parameter(ours[1], reference[1]) < 100 * rtol
    # ... and the tolerance matters: the gradients are not equal to round-off.
    assert max_rel_diff(ours[0], reference[0]) > 1e-13


@pytest.mark.parametrize("case", ["robertson"])
def test_interpolated_saves_gradient_is_the_replays(case):
    """Saves on the Hermite dense output: values and dL/d(y0, args, ts) are the replay's;
    the steps are those of the solve without saves; saves at t0, t1 are the nodes."""
    _, y0, *_ = CASES[case]
    value, ours, (ref_value, reference), sol = _loss_and_grad(case, TIGHT, True)
    _, _, _, plain = _loss_and_grad(case, TIGHT, False)
    np.testing.assert_array_equal(np.asarray(sol.steps), np.asarray(plain.steps))
    np.testing.assert_array_equal(np.asarray(sol.ys[0]), np.asarray(y0))
    np.testing.assert_array_equal(np.asarray(sol.ys[-1]), np.asarray(plain.ys[-1]))
    assert abs(value - ref_value) <= 1e-12 * max(1.0, abs(ref_value))
    assert max_rel_diff(ours[0], reference[0]) < 1e-11
    assert _per_parameter(ours[1], reference[1]) < 1e-11
    assert max_rel_diff(ours[2], reference[2]) < 1e-11


def _augmented(rhs):
    """``(y, q)' = (f(t, y), |y|^2)``: a solve with ``integrand=`` as one plain system."""
    return lambda t, z, args: jnp.concatenate([rhs(t, z[:-1], args), _energy(t, z[:-1], args)])


def _energy(t, y, args):
    del t, args
    return jnp.sum(y**2, keepdims=True)


@pytest.mark.parametrize("case, checkpoint", [
    ("vdp-mu1e3", ja.Recursive(2)), ("brusselator-2x16", ja.StoreStates()),
], ids=["vdp-recursive", "brusselator-states"])
def test_integrand_gradient_from_stored_states_is_the_replays(case, checkpoint):
    """Strategies that recompute a step's stages (`StoreStates`, `Recursive`: the step
    factors an integrand's system by blocks) against the converged replay of the augmented
    system; the Brusselator's 33 unknowns take the iterative transposed solves.  (Once a
    `TypeError`.)"""
    rhs, y0, args, t1, rtol, atol, _ = CASES[case]

    def loss(y0, args):
        sol = ja.solve(rhs, y0, 0.0, t1, args, solver=TIGHT, rtol=rtol, atol=atol,
                       integrand=lambda t, y, a: _energy(t, y, a)[0],
                       sensitivity=ja.DiscreteAdjoint(checkpoint))
        return sol.integral + jnp.sum(sol.ys[-1] ** 2), sol

    (_, sol), ours = eqx.filter_jit(jax.value_and_grad(loss, (0, 1), has_aux=True))(y0, args)

    def reference(y0, args):
        z = replay(_augmented(rhs), KVAERNO5, jnp.append(y0, 0.0), args, accepted_grid(sol))
        return z[-1] + jnp.sum(z[:-1] ** 2)

    expected = jax.grad(reference, (0, 1))(y0, args)
    assert max_rel_diff(ours[0], expected[0]) < 1e-11
    assert _per_parameter(ours[1], expected[1]) < 1e-11


def test_transposed_stage_solve_is_a_direct_solve():
    """The iterated transposed solve of the reverse step (large states) gives
    ``M^{-T} kbar`` to round-off when the step's ``M_0`` is close to ``M`` (the usual
    case: the iteration's rate is the forward Newton rate), and hands over to the direct
    solve when the iteration diverges."""
    rng = np.random.default_rng(0)
    n = 40
    base = np.eye(n) + rng.normal(size=(n, n)) / np.sqrt(n)
    kbar = jnp.asarray(rng.normal(size=n))

    def direct(m):
        return lambda v: jnp.linalg.solve(jnp.asarray(m).T, v)

    for perturbation, fallback in ((0.02, False), (3.0, True)):
        matrix = base + perturbation * rng.normal(size=(n, n)) / np.sqrt(n)
        lu = jax.scipy.linalg.lu_factor(jnp.asarray(base))
        u = solve_transposed_stage(lambda u, m=matrix: jnp.asarray(m).T @ u, lu, kbar,
                                   direct(matrix))
        exact = np.linalg.solve(matrix.T, np.asarray(kbar))
        assert np.abs(np.asarray(u) - exact).max() <= 1e-13 * np.abs(exact).max()
        # A NaN fallback shows whether the iteration alone converged.
        iterated = solve_transposed_stage(lambda u, m=matrix: jnp.asarray(m).T @ u, lu, kbar,
                                          lambda v: jnp.full_like(v, jnp.nan))
        assert bool(jnp.any(jnp.isnan(iterated))) == fallback


def test_continuous_extension_order():
    """One step of size h on a smooth non-autonomous problem: the Hermite extension's
    error at theta = 0.3, 0.75 is O(h^4); at theta = 1 it is y_1 to round-off."""
    results = one_step_extension(TIGHT)
    for r in results:
        assert int(r["steps"]) == 1
        # theta = 1: y_1 (order 5) to within its own error.
        assert np.abs(r["ys"][2] - r["exact"][2]).max() < 1e-5 * r["h"]**5 / 0.2**5
    slopes = extension_orders(results)
    assert np.all(np.abs(slopes - 4) < 0.3), slopes


# ------------------------------------------------------------------------------------------
# Sensitivity methods and strategies.


def _robertson_jacobian(solver, sensitivity):
    def ys(k):
        return ja.solve(
            ROBERTSON.rhs, ROBERTSON.y0, 0.0, 40.0, k, solver=solver, rtol=1e-8,
            atol=1e-8, saveat=ja.SaveAt(ts=jnp.asarray(ROBERTSON_TS), land_on_ts=True),
            sensitivity=sensitivity,
        ).ys

    if isinstance(sensitivity, ja.DiscreteForward):
        return np.asarray(jax.jacfwd(ys)(ROBERTSON.args))
    return np.asarray(jax.jacrev(ys)(ROBERTSON.args))


def test_robertson_sensitivities_match_scipy_and_all_strategies():
    """Jacobian of y(0.4, 4, 40) wrt the three rates with Kvaerno5 at rtol 1e-8: SciPy's
    Radau (1e-5 relative per output and time, as Rodas5 in test_rosenbrock); every checkpoint
    strategy and forward mode (the implicit-function tangent) give the same; central
    finite differences (each bumped solve on its own grid) agree to 1e-5."""
    reference = _scipy_normalised_sensitivities()
    k = np.asarray(ROBERTSON.args)
    jac = _robertson_jacobian(ja.Kvaerno5(), ja.DiscreteAdjoint())
    error = np.abs(jac * k - reference).max(axis=2) / np.abs(reference).max(axis=2)
    assert np.all(error < 1e-5), error
    # (`jac` keeps the stages, Kvaerno5's default; `StoreStates`: test_vmap_grad.)
    other = _robertson_jacobian(ja.Kvaerno5(), ja.DiscreteAdjoint(ja.Recursive(3)))
    assert max_rel_diff(other, jac) < 1e-13
    forward = _robertson_jacobian(ja.Kvaerno5(), ja.DiscreteForward())
    assert max_rel_diff(forward, jac) < 1e-11
    fd = _robertson_jacobian(ja.Kvaerno5(), ja.FiniteDifferences(1e-4))
    error = np.abs((fd - jac) * k).max(axis=2) / np.abs(reference).max(axis=2)
    assert np.all(error < 1e-5), error


def test_vmap_grad():
    """vmap(grad) over mu equals the gradients one by one; the batch keeps the stages
    (`StoreStages`), the single solves the states."""
    rhs, y0, _, t1, rtol, atol, _ = CASES["vdp-mu1e3"]
    diff = vmap_grad_with_stored_stages_is_single_grads(rhs, y0, t1, ja.Kvaerno5(), rtol, atol)
    assert diff < 1e-12


def test_default_checkpoint_keeps_newton_stages():
    """`DiscreteAdjoint()` keeps the stages of Newton-iterated solvers (`StoreStages`),
    and only theirs."""
    sens = ja.DiscreteAdjoint()
    assert isinstance(sens.checkpoint_for(ja.Kvaerno5()), ja.StoreStages)
    for solver in (ja.Rodas5(), ja.Tsit5()):
        assert isinstance(sens.checkpoint_for(solver), ja.StoreStates)
    assert isinstance(ja.DiscreteAdjoint(ja.Recursive(4)).checkpoint_for(ja.Kvaerno5()),
                      ja.Recursive)


def test_long_horizon_jacobian_matches_forward_mode():
    """Robertson to t = 4e10 (steps up to 7e9): the default reverse pass linearises at the
    forward pass's own stages, as `DiscreteForward`'s replay does, and they agree (2e-6
    here: round-off through the stage matrices' conditioning).  Stages
    solved again in the reverse pass (`StoreStates`) differed by up to 0.2 of the error
    tolerance and the Jacobian by 2e-3; the unweighted blow-up monitor refused the rows
    of y1 and y3 (one step has dy1/dy2 = -4e10, with y2 ~ 1e-13)."""
    problem = robertson_problem(4e10)
    kw = dict(solver=ja.Kvaerno5(), rtol=1e-6, atol=1e-10)

    def final(args, sensitivity):
        return ja.solve(problem.rhs, problem.y0, 0.0, 4e10, args, sensitivity=sensitivity,
                        **kw).ys[-1]

    forward = jax.jacfwd(lambda a: final(a, ja.DiscreteForward()))(problem.args)
    reverse = jax.jacrev(lambda a: final(a, ja.DiscreteAdjoint()))(problem.args)
    rel = np.max(np.abs(np.asarray(reverse - forward)) / np.abs(np.asarray(forward)))
    assert rel < 1e-4, rel


def test_forward_mode_replays_the_solves_own_stages():
    """`DiscreteForward`'s replay takes the stage values the solve kept instead of solving
    the Newton stages again (`replay_step`).  Solved again, in float32 on Robertson to
    t = 4e5, the replay drifted from the solve: its tangent was 19 % off at t = 1e4, then
    NaN, without a word.  Now it agrees with `ForwardSensitivity` (which runs its own
    Newton iterations on the augmented system) and with SciPy's -0.2363 at t = 4e5."""
    args = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), ROBERTSON.args)
    y0 = ROBERTSON.y0.astype(jnp.float32)
    ts = jnp.array([1e3, 1e4, 1e5, 4e5], jnp.float32)
    direction = jnp.zeros(3, jnp.float32).at[0].set(1.0)

    def tangent(sensitivity):
        def saves(args):
            return ja.solve(ROBERTSON.rhs, y0, 0.0, 4e5, args, solver=ja.Kvaerno5(),
                            rtol=1e-4, atol=1e-8, saveat=ts, sensitivity=sensitivity).ys[:, 0]

        return np.asarray(jax.jvp(saves, (args,), (direction,))[1])

    replayed, augmented = tangent(ja.DiscreteForward()), tangent(ja.ForwardSensitivity())
    assert np.all(np.isfinite(replayed)), replayed
    np.testing.assert_allclose(replayed, augmented, rtol=2e-3)
    np.testing.assert_allclose(replayed[-1], -0.2363, rtol=2e-3)


def test_forward_mode_second_derivatives():
    """``jax.jacfwd(jax.jacfwd(...))`` through the kept stages: y' = -k y, y(2) = e^(-2k),
    whose second derivative in k is 4 e^(-2k).  The stages' tangent was taken at a fixed
    stage value, so the second derivative missed how the stage moves: 0.558 for 0.986."""

    def final(k):
        return ja.solve(lambda t, y, k: -k * y, jnp.ones(1), 0.0, 2.0, k, solver=ja.Kvaerno5(),
                        rtol=1e-10, atol=1e-12, sensitivity=ja.DiscreteForward()).ys[-1, 0]

    k = jnp.asarray(0.7)
    second = float(jax.jit(jax.jacfwd(jax.jacfwd(final)))(k))
    np.testing.assert_allclose(second, 4 * np.exp(-1.4), rtol=1e-7)
    first = jax.jit(jax.jacfwd(final))
    bump = 1e-4
    np.testing.assert_allclose(second, float(first(k + bump) - first(k - bump)) / (2 * bump),
                               rtol=1e-6)


# ------------------------------------------------------------------------------------------
# Failures and unsupported options.


def test_newton_failure_is_reported_not_nan():
    """An infinite Jacobian (sqrt at 0) makes every Newton iteration NaN, at any step
    size: the solve fails with `RESULTS.newton_failed`, never a silent NaN, and
    `throw=True` raises with the message."""

    def rhs(t, y, args):
        return -jnp.sqrt(jnp.abs(y)) * args

    def run(throw):
        return ja.solve(rhs, jnp.zeros(2), 0.0, 1.0, jnp.asarray(1.0), solver=ja.Kvaerno5(),
                        throw=throw)

    sol = run(False)
    assert sol.result == ja.RESULTS.newton_failed, sol.result
    with pytest.raises(Exception, match="Newton's method did not converge"):
        run(True)


def test_newton_failure_at_a_fixed_step_is_reported_as_such():
    """A fixed step too large for Newton's method on ``y' = -100 y^3`` ends the solve with
    `RESULTS.newton_failed` (its infinite error estimate once made it "NaN or Inf")."""
    sol = ja.solve(lambda t, y, k: -k * y**3, jnp.array([1.0]), 0.0, 1.0, 100.0,
                   solver=ja.Kvaerno5(), controller=ja.ConstantStep(0.5), throw=False)
    assert sol.result == ja.RESULTS.newton_failed, sol.result


# (Unsupported options: `test_rosenbrock.test_unsupported_options_raise`, both families.)


def test_bad_solver_arguments_raise():
    with pytest.raises(ValueError, match="max_newton_iterations"):
        ja.Kvaerno5(max_newton_iterations=0)
    with pytest.raises(ValueError, match="kappa"):
        ja.Kvaerno5(kappa=2.0)


def test_very_stiff_stages_transposed_by_lu_solves():
    """A + B <-> C -> P with ``kf = 1e9`` (``gamma h |lambda|`` up to ~1e11; a user's
    acceptance test): the reverse pass solved each stage's transposed system by a product
    with an explicitly formed ``M_i^{-T}`` alone, whose rounding ``J(Z_i)^T`` amplified,
    and the gradient came out -15.5 for 0.0604.  With a step of iterative refinement it
    agrees with forward mode (to 2e-6 here)."""

    def mech(t, y, log_k):
        kf, kr, kc = jnp.exp(log_k)
        a, b, c, _ = y
        r1, r2 = kf * a * b - kr * c, kc * c
        return jnp.stack([-r1, -r1, r1 - r2, r2])

    log_k = jnp.log(jnp.array([1e9, 1e8, 1e-3]))

    def c450(log_k, sensitivity):
        return ja.solve(mech, jnp.array([1.0, 1.0, 0.0, 0.0]), 0.0, 3000.0, log_k,
                        solver=ja.Kvaerno5(kappa=1e-12), rtol=1e-7, atol=1e-9,
                        saveat=jnp.array([450.0]), sensitivity=sensitivity).ys[0, 2]

    adjoint = jax.grad(c450)(log_k, ja.DiscreteAdjoint())
    forward = jax.jacfwd(c450)(log_k, ja.DiscreteForward())
    np.testing.assert_allclose(adjoint, forward, rtol=1e-4)
    assert abs(float(forward[0]) - 0.0604) < 1e-3
