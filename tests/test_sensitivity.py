"""Every sensitivity method behind one `solve`, checked against the discrete adjoint.

One small problem drives most tests: a two-species Lotka–Volterra system with a time-
dependent forcing (so `rhs` depends on `t`), an initial state that depends on the
parameters, save times including `t0`, and a two-component integrand; the loss uses
every output, and gradients are taken with respect to the parameters and all the times.

- forward-mode methods on the recorded grid (`DiscreteForward`, `ForwardSensitivity`
  without error control) equal `DiscreteAdjoint` to round-off;
- continuous methods (`ForwardSensitivity` with error control, `ContinuousAdjoint` both
  ways) approach a tight reference as `rtol` shrinks;
- `FiniteDifferences` matches a tight reference to ~1e-6;
- all of them match closed-form sensitivities (including `t0`, `t1`) on `y' = a cos(t) y`.

Compiled functions are module-level and take the method as a static argument and the
tolerance as an array, so each (method, transformation) pair compiles once.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import accepted_grid, max_rel_diff, replay

import jaxadjoint as ja

MAX_STEPS = 160
SAVES = jnp.array([0.0, 0.7, 1.6])
WEIGHTS = jnp.array([[1.0, -0.5], [0.3, 2.0], [1.5, 0.7]])
INTEGRAL_WEIGHTS = jnp.array([0.4, -1.1])


def rhs(t, y, args):
    r, A = args
    return y * (r + A @ y) + 0.1 * jnp.sin(2.0 * t)


def integrand(t, y, args):
    del args
    return jnp.stack([jnp.sum(y**2), y[0] * jnp.cos(t)])


def initial_state(r):
    return 0.4 + 0.2 * jnp.tanh(r)  # the initial state depends on the parameters


INPUTS = (
    jnp.array([0.8, -0.4]),  # r
    jnp.array([[-1.0, -0.6], [0.7, -0.5]]),  # A
    jnp.array(0.0),  # t0
    jnp.array(2.0),  # t1
    SAVES,
)


def loss(inputs, method, tol):
    r, A, t0, t1, ts = inputs
    sol = ja.solve(
        rhs, initial_state(r), t0, t1, (r, A), rtol=tol, atol=tol, saveat=ts,
        sensitivity=method, integrand=integrand, max_steps=MAX_STEPS,
    )
    return jnp.sum(WEIGHTS * sol.ys**2) + jnp.dot(INTEGRAL_WEIGHTS, sol.integral)


grad_loss = jax.jit(jax.grad(loss), static_argnums=1)
jacfwd_loss = jax.jit(jax.jacfwd(loss), static_argnums=1)

TOL = jnp.array(1e-7)


@pytest.fixture(scope="module")
def discrete_gradient():
    return grad_loss(INPUTS, ja.DiscreteAdjoint(), TOL)


@pytest.fixture(scope="module")
def tight_gradient():
    return grad_loss(INPUTS, ja.DiscreteAdjoint(), jnp.array(1e-12))


@pytest.mark.parametrize(
    "method,mode",
    [
        (ja.DiscreteForward(), "jacfwd"),
        (ja.DiscreteForward(), "grad"),  # by transposing the replay
        (ja.ForwardSensitivity(error_control=False), "jacfwd"),
    ],
    ids=["discrete-forward-jacfwd", "discrete-forward-grad", "forward-sensitivity-jacfwd"],
)
def test_forward_mode_on_the_grid_equals_discrete_adjoint(method, mode, discrete_gradient):
    fn = jacfwd_loss if mode == "jacfwd" else grad_loss
    got = fn(INPUTS, method, TOL)
    for name, g, ref in zip(["r", "A", "t0", "t1", "ts"], got, discrete_gradient):
        assert max_rel_diff(g, ref) < 1e-11, name


@pytest.mark.parametrize(
    "method",
    [ja.ForwardSensitivity(), ja.ContinuousAdjoint(), ja.ContinuousAdjoint(state="backsolve")],
    ids=["forward-sensitivity", "adjoint-checkpointed", "adjoint-backsolve"],
)
def test_continuous_methods_converge_with_rtol(method, tight_gradient):
    errors = [max_rel_diff(grad_loss(INPUTS, method, jnp.array(tol)), tight_gradient)
              for tol in (1e-5, 1e-9)]
    assert errors[1] < 1e-6
    assert errors[1] < errors[0] / 30


def test_a_nan_loss_has_a_nan_gradient_with_continuous_adjoint():
    """Fed a NaN cotangent, the backward solve fails; that is not reported as its failure
    (nor a blow-up) but comes out as the NaN gradient JAX gives (it came out as 0)."""

    def nan_at_a_save(inputs):
        r, A, t0, t1, ts = inputs
        sol = ja.solve(rhs, initial_state(r), t0, t1, (r, A), saveat=ts, max_steps=MAX_STEPS,
                       sensitivity=ja.ContinuousAdjoint())
        return jnp.sum(jnp.sqrt(sol.ys - 0.45))  # y_2(0) = 0.32: sqrt of a negative number

    value, (r_bar, A_bar, *_) = jax.value_and_grad(nan_at_a_save)(INPUTS)
    assert np.isnan(float(value))
    assert np.all(np.isnan(np.asarray(r_bar))) and np.all(np.isnan(np.asarray(A_bar)))


@pytest.mark.parametrize(
    "method,mode,bound",
    [
        (ja.FiniteDifferences(step=1e-6), "grad", 1e-6),
        (ja.FiniteDifferences(step=1e-7, scheme="forward"), "jacfwd", 1e-4),
    ],
    ids=["central-grad", "forward-jacfwd"],
)
def test_finite_differences_match_tight_reference(method, mode, bound, tight_gradient):
    fn = jacfwd_loss if mode == "jacfwd" else grad_loss
    got = fn(INPUTS, method, jnp.array(1e-12))
    assert max_rel_diff(got, tight_gradient) < bound


# --- closed form: y' = a cos(t) y, y(t0) = c^2 ------------------------------------------


def growth_rhs(t, y, a):
    return a * jnp.cos(t) * y


GROWTH_SAVES = jnp.array([0.5, 1.5, 3.0])


def growth_outputs(x, method):
    """``y`` at the saves and at ``t1``, with ``y0 = c^2``: a function of ``(c, a, t0, t1)``."""
    c, a, t0, t1 = x
    saveat = jnp.concatenate([GROWTH_SAVES, t1[None]])  # the last save moves with t1
    return ja.solve(growth_rhs, c**2, t0, t1, a, rtol=1e-10, atol=1e-10, saveat=saveat,
                    sensitivity=method, max_steps=MAX_STEPS).ys


def growth_exact(x):
    c, a, t0, t1 = x
    times = jnp.concatenate([GROWTH_SAVES, t1[None]])
    return c**2 * jnp.exp(a * (jnp.sin(times) - jnp.sin(t0)))


GROWTH_X = (jnp.array(1.2), jnp.array(0.8), jnp.array(0.2), jnp.array(3.5))
jac_growth = jax.jit(jax.jacrev(growth_outputs), static_argnums=1)


@pytest.mark.parametrize(
    "method,bound",
    [
        (ja.DiscreteForward(), 1e-8),
        (ja.ForwardSensitivity(), 1e-8),
        (ja.ContinuousAdjoint(), 1e-7),
        (ja.ContinuousAdjoint(state="backsolve"), 1e-7),
        (ja.FiniteDifferences(), 1e-6),
    ],
    ids=lambda m: type(m).__name__ + getattr(m, "state", "") if not isinstance(m, float) else "",
)
def test_against_closed_form_sensitivities(method, bound):
    # The exact Jacobian in (c, a, t0, t1): dy/dt1 = f(t1, y(t1)) and dy/dt0 = -Phi f(t0, y0).
    got = jac_growth(GROWTH_X, method)
    exact = jax.jacrev(growth_exact)(GROWTH_X)
    assert max_rel_diff(got, exact) < bound


def test_finite_differences_of_repeated_and_end_save_times():
    """Save times repeated (twice, three times) and at ``t0`` and ``t1``: a bumped time
    may pass its neighbours (the perturbed solve saves at the sorted times), and one at
    an end is bumped inward.  Before, such columns failed as "a perturbed solve failed".
    ``y' = -k y``: ``dy(t_j)/dt_j = -k y0 exp(-k t_j)``."""
    ts = jnp.array([0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 2.0, 2.0])

    def saves(ts):
        return ja.solve(lambda t, y, k: -k * y, jnp.array([1.0]), 0.0, 2.0, 0.7, saveat=ts,
                        rtol=1e-10, atol=1e-10, sensitivity=ja.FiniteDifferences()).ys[:, 0]

    got = jnp.diagonal(jax.jacrev(saves)(ts))
    np.testing.assert_allclose(got, -0.7 * jnp.exp(-0.7 * ts), rtol=1e-5)


def test_finite_differences_under_vmap_over_times():
    """`jax.vmap` over the save times and ``t1`` (irregular time series, each trajectory its
    own): a bare AssertionError from `jax.custom_batching` (the one-sided difference's
    `cond` had a batched predicate), a user's acceptance test.  ``y' = -k y``:
    ``dy(t_j)/dt_j = -k y(t_j)``, ``d/dk = -t_j y(t_j)``; a lane whose save is on ``t1``
    takes its one-sided difference."""
    ts = jnp.array([[0.3, 0.8], [0.5, 1.5]])
    t1 = jnp.array([1.0, 1.5])

    def saves(k, ts, t1):
        def one(ts, t1):
            return ja.solve(lambda t, y, k: -k * y, jnp.array([1.0]), 0.0, t1, k, saveat=ts,
                            rtol=1e-10, atol=1e-10, sensitivity=ja.FiniteDifferences()).ys[:, 0]

        return jax.vmap(one)(ts, t1)

    d_k, d_ts, d_t1 = jax.jit(jax.jacrev(saves, argnums=(0, 1, 2)))(0.7, ts, t1)
    y = jnp.exp(-0.7 * ts)
    np.testing.assert_allclose(d_k, -ts * y, rtol=1e-5)
    np.testing.assert_allclose(jnp.einsum("ijij->ij", d_ts), -0.7 * y, rtol=1e-5)
    np.testing.assert_allclose(d_t1, 0.0, atol=1e-7)


def test_finite_differences_name_an_input_that_cannot_be_bumped():
    """A save time at ``t0`` of an interval shorter than the bump leaves ``[t0, t1]``
    either way: the error says so, and no longer only blames a failed solve."""

    def save(ts):
        return ja.solve(lambda t, y, k: -k * y, jnp.array([1.0]), 0.0, 1e-7, 0.7, saveat=ts,
                        sensitivity=ja.FiniteDifferences()).ys[0, 0]

    with pytest.raises(Exception, match=r"could not be bumped to either side"):
        jax.block_until_ready(jax.grad(save)(jnp.array([0.0])))


# --- second order and the sensitivity trajectory ------------------------------------------


def test_discrete_forward_hessian_matches_replay():
    """`jax.hessian` (jacfwd of jacrev) through `DiscreteForward` is exact on the grid."""
    x = jnp.array([1.5, 0.8])  # (y0, a)

    def final_loss(x, method):
        sol = ja.solve(growth_rhs, x[0], 0.0, 3.0, x[1], rtol=1e-6, atol=1e-6,
                       sensitivity=method, max_steps=40)
        return jnp.sum(sol.ys**3)

    hess = jax.jit(jax.hessian(final_loss), static_argnums=1)(x, ja.DiscreteForward())
    grid = accepted_grid(ja.solve(growth_rhs, x[0], 0.0, 3.0, x[1], rtol=1e-6, atol=1e-6))

    def replay_loss(x):
        return jnp.sum(replay(growth_rhs, ja.Dopri5.tableau, x[0], x[1], grid)[0] ** 3)

    assert max_rel_diff(hess, jax.jit(jax.hessian(replay_loss))(x)) < 1e-10


@pytest.mark.parametrize("solver", [ja.Tsit5(), ja.Rodas5()], ids=["Tsit5", "Rodas5"])
def test_discrete_forward_hessian_in_the_end_times(solver):
    """Second derivatives in t0 and t1 follow the continuous formulas, as the first do:
    d2y(t1)/dt1^2 was the final row's own curvature (Dopri5: -5.7 f; stiff solvers: 0)
    and d2/dt0^2 missed half its terms (y' = -y + cos t, against its closed form; the
    mixed one was right)."""

    def final(t01):
        sol = ja.solve(lambda t, y, a: -y + jnp.cos(t), jnp.asarray(1.0), t01[0], t01[1],
                       solver=solver, rtol=1e-11, atol=1e-11,
                       sensitivity=ja.DiscreteForward(), max_steps=MAX_STEPS)
        return sol.ys[-1]

    def closed(t01):
        t0, t1 = t01
        c = (1 - (jnp.cos(t0) + jnp.sin(t0)) / 2) * jnp.exp(t0)
        return (jnp.cos(t1) + jnp.sin(t1)) / 2 + c * jnp.exp(-t1)

    x = jnp.array([0.5, 1.5])
    np.testing.assert_allclose(jax.jit(jax.hessian(final))(x), jax.hessian(closed)(x),
                               atol=1e-9)


@pytest.mark.parametrize("method", [ja.ForwardSensitivity(), ja.FiniteDifferences()],
                         ids=["ForwardSensitivity", "FiniteDifferences"])
def test_first_order_methods_refuse_second_derivatives(method):
    """Their rules compute the derivative from constants, so JAX differentiated them to
    zero (`jax.hessian` of y(1) = exp(-p) gave 0, not exp(-1)); now a `TypeError` at trace
    time, through `jax.jit` too, while first derivatives work in both modes."""

    def final(p):
        return ja.solve(growth_rhs, jnp.asarray(1.5), 0.0, 1.0, p, rtol=1e-8, atol=1e-8,
                        sensitivity=method, max_steps=MAX_STEPS).ys[-1]

    p = jnp.asarray(0.8)
    np.testing.assert_allclose(jax.grad(final)(p), jax.jacfwd(final)(p), rtol=1e-12)
    for second in (jax.hessian(final), jax.hessian(jax.jit(final))):
        with pytest.raises(TypeError, match="gives first derivatives only"):
            second(p)

    # Inside `lax.scan` JAX never calls the marker's rule: the Hessian was zero there, it
    # is NaN now (two shooting intervals, the parameter scanned over; a control user's
    # acceptance test), while the first derivative stays that of the plain loop.
    def shooting(ps):
        def interval(y, p):
            return ja.solve(growth_rhs, y, 0.0, 0.5, p, rtol=1e-8, atol=1e-8,
                            sensitivity=method, max_steps=MAX_STEPS).ys[-1], None

        return jax.lax.scan(interval, jnp.asarray(1.5), ps)[0]

    ps = jnp.array([0.8, 0.6])
    assert np.all(np.isnan(np.asarray(jax.jit(jax.hessian(shooting))(ps))))
    plain = jax.grad(lambda ps: final_of_two(ps, ja.DiscreteAdjoint()))(ps)
    np.testing.assert_allclose(jax.jit(jax.grad(shooting))(ps), plain, rtol=1e-6)


def final_of_two(ps, method):
    """`y` after two intervals of length 0.5 with parameters ``ps[0]``, ``ps[1]``."""
    y = jnp.asarray(1.5)
    for p in ps:
        y = ja.solve(growth_rhs, y, 0.0, 0.5, p, rtol=1e-8, atol=1e-8, sensitivity=method,
                     max_steps=MAX_STEPS).ys[-1]
    return y


def test_finite_differences_default_step_follows_the_dtype():
    """In float32 the float64 default bump (1e-6) divided round-off by itself: 45 % off
    on Lotka-Volterra; the default is now eps^(1/3) there."""
    y0 = jnp.array([1.0, 1.0], jnp.float32)
    p0 = jnp.array([1.5, 1.0, 3.0, 1.0], jnp.float32)

    def loss(p, method):
        def lv(t, y, p):
            return jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1],
                              p[3] * y[0] * y[1] - p[2] * y[1]])
        return jnp.sum(ja.solve(lv, y0, 0.0, 5.0, p, rtol=1e-5, atol=1e-5,
                                sensitivity=method, max_steps=MAX_STEPS).ys ** 2)

    exact = jax.grad(loss)(p0, ja.DiscreteAdjoint())
    fd = jax.grad(loss)(p0, ja.FiniteDifferences())
    assert max_rel_diff(fd, exact) < 5e-3
    assert ja.FiniteDifferences().bump(jnp.float64) == 1e-6


def test_finite_differences_bump_follows_the_least_precise_leaf():
    """A float32 leaf of a mixed float32/float64 ``y0`` reaches the right-hand side rounded
    to float32: the float64 bump (1e-6) drowned in that rounding, 1.2e-3 off."""
    def rhs(t, y, k):
        return (-k[0].astype(y[0].dtype) * y[0], -k[1] * y[1])

    def f(y0, k, method):
        ys = ja.solve(rhs, y0, 0.0, 1.0, k, rtol=1e-10, atol=1e-10, sensitivity=method).ys
        return jnp.stack([ys[0][0].astype(jnp.float64), ys[1][0]])

    y0 = (jnp.array(1.0, jnp.float32), jnp.array(1.0))
    k = jnp.array([0.5, 0.5])
    with jax.numpy_dtype_promotion("standard"):  # ravel_pytree of mixed dtypes promotes
        fd = jax.jacrev(f, argnums=1)(y0, k, ja.FiniteDifferences())
    np.testing.assert_allclose(np.diag(fd), -np.exp(-0.5), rtol=1e-4)


def test_finite_differences_one_sided_at_an_end_is_second_order():
    """``y(t1)`` (no save times) is a save at ``t1``: bumping ``t1`` down would leave it
    outside, so that side is replaced by ``t1 + 2 h``.  Its first-order fallback was off by
    ``h f'' / 2`` (1.8e-3 here with ``step=1e-3``; float32's default step is 4.9e-3)."""
    def f(t1):
        return ja.solve(growth_rhs, jnp.array(1.0), 0.0, t1, 1.0, rtol=1e-12, atol=1e-12,
                        sensitivity=ja.FiniteDifferences(step=1e-3)).ys[-1]

    # y = exp(sin t): dy(t1)/dt1 = cos(t1) exp(sin t1).
    np.testing.assert_allclose(jax.grad(f)(2.0), np.cos(2.0) * np.exp(np.sin(2.0)), rtol=2e-4)


def test_finite_differences_bump_times_by_the_interval():
    """Times far from 0: their bump was ``step * |t|``, 1.0 on [1e6, 1e6 + 3] in float64,
    and ``dy(t1)/dt1`` came out as +0.658 for -0.0498.  Now ``step * max(1, |t1 - t0|)``."""
    t0 = 1e6

    def decay(t, y, a):
        return -(1.0 + a) * y

    def g(t0, t1, ts):
        return ja.solve(decay, jnp.array(1.0), t0, t1, 0.0, saveat=ts, rtol=1e-10,
                        atol=1e-10, sensitivity=ja.FiniteDifferences()).ys

    ts = jnp.array([t0 + 1.5, t0 + 3.0])
    d_t0, d_t1, d_ts = jax.jacfwd(g, argnums=(0, 1, 2))(t0, t0 + 3.0, ts)
    exact = np.exp(-np.array([1.5, 3.0]))
    np.testing.assert_allclose(d_t0, exact, rtol=1e-5)
    np.testing.assert_allclose(d_t1, [0.0, 0.0], atol=1e-6)  # the saves' times are fixed
    np.testing.assert_allclose(np.diag(d_ts), -exact, rtol=1e-5)


def test_forward_sensitivity_in_t1_alone():
    """Only ``t1`` (or a save time) moving leaves no sensitivity column: the augmented
    system failed to build ("Need at least one array to concatenate")."""

    def final(t1):
        return ja.solve(growth_rhs, jnp.asarray(1.5), 0.0, t1, 0.8, rtol=1e-10, atol=1e-10,
                        sensitivity=ja.ForwardSensitivity(), max_steps=MAX_STEPS).ys[-1]

    t1 = jnp.asarray(2.0)
    y1 = final(t1)
    np.testing.assert_allclose(jax.grad(final)(t1), growth_rhs(t1, y1, 0.8), rtol=1e-8)


def test_sensitivity_trajectory_and_normalised():
    a, y0 = jnp.array(0.8), jnp.array(1.5)
    ts = jnp.linspace(0.0, 4.0, 5)
    traj = ja.sensitivity_trajectory(growth_rhs, y0, 0.0, 4.0, a, saveat=ts, rtol=1e-10,
                                     atol=1e-10, max_steps=MAX_STEPS)
    exact = y0 * jnp.exp(a * jnp.sin(ts))
    np.testing.assert_allclose(traj.ys, exact, rtol=1e-8)
    np.testing.assert_allclose(traj.dy0, jnp.exp(a * jnp.sin(ts)), rtol=1e-8)
    np.testing.assert_allclose(traj.dargs, exact * jnp.sin(ts), rtol=1e-7, atol=1e-12)
    normalised = ja.normalised_sensitivities(traj, a)
    np.testing.assert_allclose(normalised, a * jnp.sin(ts), rtol=1e-7, atol=1e-12)


# --- bad input ---------------------------------------------------------------------------


def test_bad_options_raise():
    with pytest.raises(ValueError, match="state"):
        ja.ContinuousAdjoint(state="forwards")
    with pytest.raises(ValueError, match="rtol"):
        ja.ContinuousAdjoint(rtol=-1.0)
    with pytest.raises(ValueError, match="step"):
        ja.FiniteDifferences(step=0.0)
    with pytest.raises(ValueError, match="scheme"):
        ja.FiniteDifferences(scheme="backward")
    with pytest.raises(TypeError, match="error_control"):
        ja.ForwardSensitivity(error_control="yes")
    with pytest.raises(ValueError, match="sensitivity_rtol"):
        ja.ForwardSensitivity(sensitivity_rtol=-1e-6)


def test_continuous_adjoint_rejects_step_to():
    def f(a):
        sol = ja.solve(growth_rhs, jnp.array(1.0), 0.0, 1.0, a, solver=ja.RK4(),
                       controller=ja.StepTo(jnp.linspace(0.0, 1.0, 5)),
                       sensitivity=ja.ContinuousAdjoint())
        return jnp.sum(sol.ys)

    with pytest.raises(ValueError, match="StepTo"):
        jax.grad(f)(jnp.array(0.5))


def _two_rates(t, y, k):
    return -k * y  # rates 1 and 30: the backward flow amplifies errors by e^(30 t)


def test_backsolve_that_loses_the_state_is_refused():
    """`ContinuousAdjoint(state="backsolve")` re-integrates the state backwards: on a
    dissipative problem it comes back to ``t0`` far from ``y0`` and the adjoint is evaluated
    off the trajectory.  Refused (a grey-box user's gradient was 1e12 for 66, returned);
    checkpointed, and backsolve on a short interval, give the closed form."""
    y0, k = jnp.array([1.0, 2.0]), jnp.array([1.0, 30.0])

    def loss(y0, k, sensitivity, t1):
        return jnp.sum(ja.solve(_two_rates, y0, 0.0, t1, k, rtol=1e-8, atol=1e-8,
                                sensitivity=sensitivity).ys[-1])

    grad = eqx.filter_jit(jax.grad(loss, argnums=(0, 1)))
    with pytest.raises(Exception, match=r"state='backsolve'\) integrates the state back from "
                       r"y\(t1\) .* arrived at t0 [0-9.e+]+ tolerance units .*more than "
                       r"max_drift=100\).*max_drift=\.\.\."):
        jax.block_until_ready(grad(y0, k, ja.ContinuousAdjoint(state="backsolve"), 2.0))
    # Also when only the rates are differentiated, dL/dy0 unused (the check is tied to the
    # rates' cotangents too; here it also held when tied to dL/dy0 alone).
    grad_k = eqx.filter_jit(jax.grad(loss, argnums=1))
    with pytest.raises(Exception, match=r"state='backsolve'\) integrates the state back"):
        jax.block_until_ready(grad_k(y0, k, ja.ContinuousAdjoint(state="backsolve"), 2.0))
    # Accepted where the user says so (an FFJORD user's opt-out), and then off.
    accepted = grad(y0, k, ja.ContinuousAdjoint(state="backsolve", max_drift=float("inf")), 2.0)
    # d y_2(2) / d k_2 is -4 e^(-60) ~ -3.5e-26; off the trajectory it came out -5.4e-9.
    assert abs(float(accepted[1][1])) > 1e-12
    for bad in (0.0, -1.0, "100", True):
        with pytest.raises(ValueError, match="`max_drift` must be a positive number"):
            ja.ContinuousAdjoint(state="backsolve", max_drift=bad)
    with pytest.raises(ValueError, match="applies to `state='backsolve'` only"):
        ja.ContinuousAdjoint(max_drift=10.0)
    for sensitivity, t1 in [(ja.ContinuousAdjoint(), 2.0),
                            (ja.ContinuousAdjoint(state="backsolve"), 0.1)]:
        got = grad(y0, k, sensitivity, t1)
        want = (jnp.exp(-k * t1), -t1 * y0 * jnp.exp(-k * t1))
        assert max_rel_diff(got, want) < 1e-6


def _oscillator(t, y, w):
    return jnp.stack([y[1], -w**2 * y[0]])


def test_checkpointed_continuous_adjoint_reads_high_order_interpolants():
    """Vern8's steps are long: between them the quintic Hermite interpolant of the state
    was the gradient's largest error (an orbit over 20 periods: 1.7e-2 at rtol 1e-8, against
    4.7e-5 for `DiscreteAdjoint`).  Solvers whose own interpolant is of higher order read
    the state from it: here 7e-9 (Hermite: 7e-7) of the closed form
    ``d cos(w T)/dw = -T sin(w T)``."""
    from types import SimpleNamespace

    from jaxadjoint._continuous_adjoint import _uses_dense_trajectory

    for solver, dense in [(ja.Vern8(), True), (ja.Vern6(), True), (ja.Dopri5(), False),
                          (ja.Tsit5(), False)]:
        system = SimpleNamespace(solver=solver)  # (only the solver decides)
        assert _uses_dense_trajectory(system, ja.ContinuousAdjoint()) == dense
        assert not _uses_dense_trajectory(system, ja.ContinuousAdjoint(state="backsolve"))

    def loss(w):
        return ja.solve(_oscillator, jnp.array([1.0, 0.0]), 0.0, 50.0, w, solver=ja.Vern8(),
                        rtol=1e-8, atol=1e-8, sensitivity=ja.ContinuousAdjoint()).ys[-1, 0]

    w = 1.3
    np.testing.assert_allclose(jax.grad(loss)(w), -50.0 * np.sin(w * 50.0), rtol=1e-7)
