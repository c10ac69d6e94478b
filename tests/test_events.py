"""Events: terminal events, jumps, several conditions, under vmap, and bad input.

Gradients are checked against

- an independent replay (`jaxadjoint.replay_on_grid`, the textbook formulas in a scan),
  whose event time is one Newton step of the replayed interpolant from the recorded root
  (value: the root; derivative: the implicit one), differentiated by JAX: on the recorded
  grid for a terminal event, and after each jump on the grid ``t* + cumsum(h)`` (recorded
  step sizes, a last step clipped to ``t1``) that moves with the replayed event time
  ``t*``.  To round-off (``1e-11`` relative) for `StoreStates`, `Recursive` and
  `DiscreteForward`; the replay with the continuous restart rule (``-f dt*``) differs by
  the solver's error, so these tests see it;
- closed forms: a drag-free projectile (landing time and range in launch speed, angle
  and gravity; the solution is a quadratic, which Dopri5 and its interpolant reproduce to
  round-off), a bouncing ball's heights at fixed times after several bounces and its
  bounce times (in the restitution coefficient and initial height), and a one-compartment
  drug model dosed whenever the concentration falls below a threshold (to the solver's
  tolerance).

The projectile and the ball are each one model with one compiled Jacobian per method,
shared by the replay, closed-form and vmap tests (the drag-free projectile and the plain
ball are the models with some parameters set to zero).
"""

from __future__ import annotations

import warnings

import equinox as eqx
import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxadjoint as ja

# --- a projectile with quadratic drag: the replay reference ------------------------------


def projectile(t, y, args):
    g, drag = args["g"], args["drag"]
    speed = jnp.sqrt(y[2] ** 2 + y[3] ** 2)
    return jnp.stack([y[2], y[3], -drag * speed * y[2], -g - drag * speed * y[3]])


def ground(t, y, args):
    return y[1] - args["ground"]


LAND = ja.Event(ground, direction="falling")
ARGS = {"g": jnp.array(9.81), "drag": jnp.array(0.05), "ground": jnp.array(-0.5)}


def launch(v, angle):
    return jnp.stack([jnp.zeros_like(v), jnp.zeros_like(v), v * jnp.cos(angle),
                      v * jnp.sin(angle)])


TS = jnp.array([0.2, 0.9, 1.5, 5.0])  # the last one after landing


def landing(p, args, sensitivity):
    """Landing time, range and heights at ``TS[:3]`` of the projectile; and the solution."""
    sol = ja.solve(projectile, launch(p[0], p[1]), 0.0, 10.0, args, events=LAND,
                   saveat=TS, rtol=1e-8, atol=1e-8, sensitivity=sensitivity, max_steps=256)
    out = jnp.concatenate([sol.events.times[:1], sol.events.ys[0, :1], sol.ys[:3, 1]])
    return out, (sol.ys, sol)


@eqx.filter_jit
def landing_jacobian(p, args, sensitivity=ja.DiscreteAdjoint()):
    """``d landing / d(p, args)`` with ``(saves, sol)``: one compilation per method, shared."""
    jac = jax.jacfwd if isinstance(sensitivity, ja.DiscreteForward) else jax.jacrev
    return jac(landing, argnums=(0, 1), has_aux=True)(p, args, sensitivity)


P = jnp.array([12.0, 0.8])


def replay_event(rhs, solver, y0, args, grid, cond, t_star, ts):
    """``(t*, y(t*), y(ts))`` on the replayed interpolant (one replay for all of them).

    ``t*`` is one Newton step of ``cond(t, u(t)) = 0`` from the recorded root: its value is
    the root, its derivative the implicit one.  ``y(t*)`` is ``u(t0) + u'(t0) (t* - t0)``
    around the recorded root ``t0``: the value ``u(t0)``, the derivative of ``u(t*)``.
    """
    t_star = jax.lax.stop_gradient(t_star)

    def replay(t):
        return ja.replay_on_grid(rhs, solver, y0, args, grid, jnp.concatenate([t[None], ts]))[0]

    ys, slopes = jax.jvp(replay, (t_star,), (jnp.ones_like(t_star),))
    u, u_dot = ys[0], slopes[0]
    g0, g_u = jax.jvp(lambda t, u: cond(t, u, args), (t_star, u),
                      (jnp.ones_like(t_star), u_dot))
    t = t_star - (g0 - jax.lax.stop_gradient(g0)) / g_u
    return t, u + u_dot * (t - t_star), ys[1:]


def replay_landing(p, args, grid, t_star):
    t, y, ys = replay_event(projectile, ja.Dopri5(), launch(p[0], p[1]), args, grid, ground,
                            t_star, TS[:3])
    return jnp.concatenate([t[None], y[:1], ys[:, 1]])


@pytest.fixture(scope="module")
def reference():
    jac, (ys, sol) = landing_jacobian(P, ARGS)
    grid = helpers.accepted_grid(sol)
    t_star = sol.events.times[0]
    want = jax.jit(jax.jacfwd(lambda p, a: replay_landing(p, a, grid, t_star),
                              argnums=(0, 1)))(P, ARGS)
    return sol, ys, jac, want


@pytest.mark.parametrize("sensitivity", [None, ja.DiscreteForward()], ids=["states", "forward"])
def test_terminal_gradient_matches_replay(reference, sensitivity):
    """(`Recursive` is checked through jumps, whose segments end at events the same way.)"""
    sol, _, jac, want = reference
    assert sol.result == ja.RESULTS.successful and int(sol.events.count) == 1
    if sensitivity is not None:
        jac, _ = landing_jacobian(P, ARGS, sensitivity)
    got_p, got_args = jac
    want_p, want_args = want
    assert helpers.max_rel_diff(got_p, want_p) < 1e-11
    for key in ("g", "drag", "ground"):  # the condition's parameter included
        assert helpers.max_rel_diff(got_args[key], want_args[key]) < 1e-11


def test_terminal_event_state_and_saves(reference):
    sol, ys, _, _ = reference
    t = sol.events.times[0]
    assert abs(float(sol.events.ys[0, 1] - ARGS["ground"])) < 1e-12  # on the ground
    assert int(sol.events.which[0]) == 0
    # Saves after the event are NaN; saveat=None reports the event time and state.
    assert np.all(np.isnan(ys[3])) and np.all(np.isfinite(ys[:3]))
    # Under `jit` as the reference's solve, the times constants and `P` an argument (a
    # direct call traces the times: the event's last bit can differ).
    end = jax.jit(lambda p, args: ja.solve(projectile, launch(p[0], p[1]), 0.0, 10.0, args,
                                           events=LAND, rtol=1e-8, atol=1e-8,
                                           max_steps=256))(P, ARGS)
    assert float(end.ts[0]) == float(t)
    np.testing.assert_array_equal(end.ys[0], sol.events.ys[0])


# --- closed forms --------------------------------------------------------------------------


def test_projectile_closed_form():
    """Without drag, from the ground: the solution is a quadratic, which Dopri5 and its
    interpolant reproduce to round-off."""
    args = {"g": jnp.array(9.81), "drag": jnp.array(0.0), "ground": jnp.array(0.0)}

    def closed(p, g):
        v, a = p
        t = 2 * v * jnp.sin(a) / g
        return jnp.stack([t, v * jnp.cos(a) * t])

    (jac_p, jac_args), (_, sol) = landing_jacobian(P, args)
    value = jnp.stack([sol.events.times[0], sol.events.ys[0, 0]])
    np.testing.assert_allclose(value, closed(P, args["g"]), rtol=1e-12)
    want_p, want_g = jax.jacfwd(closed, argnums=(0, 1))(P, args["g"])
    np.testing.assert_allclose(jac_p[:2], want_p, rtol=1e-11)
    np.testing.assert_allclose(jac_args["g"][:2], want_g, rtol=1e-11)


# --- jumps: a forced ball bouncing on a moving floor ----------------------------------------


GRAVITY = 9.81
T1 = 2.495  # just after the third bounce: that bounce's step is clipped to end on t1
BALL_TS = jnp.array([0.5, 1.0, 2.0, T1])  # the last three after a bounce


def ball(t, y, p):
    """Height and velocity under gravity and a forcing ``p[2] sin(3 t)`` (non-autonomous)."""
    return jnp.stack([y[1], -GRAVITY + p[2] * jnp.sin(3.0 * t)])


def floor(t, y, p):
    """Height above a floor at ``p[3] sin(2 t)``: a condition that depends on time."""
    return y[0] - p[3] * jnp.sin(2.0 * t)


def rebound(t, y, p):
    """Restitution ``p[0]`` and a kick ``p[4] t`` that grows with the bounce time."""
    return jnp.stack([y[0], -p[0] * y[1] + p[4] * t])


BOUNCE = ja.Event(floor, direction="falling", jump=rebound)
# p = (restitution, initial height, forcing, floor, kick)
FREE = jnp.array([0.8, 2.0, 0.0, 0.0, 0.0])  # a plain bouncing ball: closed forms
FORCED = jnp.array([0.8, 2.0, 1.5, 0.1, 0.05])


FORWARD = jnp.array([0.0, T1])  # (t0, t1): traced, so that both directions share a compile
BACKWARD = jnp.array([T1, 0.0])


def bouncing(p, sensitivity=ja.DiscreteAdjoint(), span=FORWARD, ts=BALL_TS, max_events=8):
    """Heights and velocities at ``ts`` and the first three bounce times; and the solution."""
    sol = ja.solve(ball, jnp.stack([p[1], jnp.zeros_like(p[1])]), span[0], span[1], p,
                   events=BOUNCE, saveat=ts, rtol=1e-8, atol=1e-8, max_events=max_events,
                   sensitivity=sensitivity, max_steps=64, throw=False)
    out = jnp.concatenate([sol.ys[:, 0], sol.ys[:, 1], jnp.nan_to_num(sol.events.times[:3])])
    return out, (out, sol)


@eqx.filter_jit
def _ball_jacobian(p, sensitivity, span, ts):
    jac = jax.jacfwd if isinstance(sensitivity, ja.DiscreteForward) else jax.jacrev
    return jac(bouncing, has_aux=True)(p, sensitivity, span, ts)


def ball_jacobian(p, sensitivity=ja.DiscreteAdjoint(), span=FORWARD, ts=BALL_TS):
    """``d bouncing / dp`` with ``(outputs, sol)``: one compilation per method, shared (the
    arguments always passed alike: `equinox.filter_jit` keys on how they are passed)."""
    return _ball_jacobian(p, sensitivity, span, ts)


def ball_closed_form(p, bounces):
    """Heights at BALL_TS (given the bounces before each) and the first three bounce times
    of the free ball, ``p = (restitution, initial height)``."""
    e, h0 = p
    t_first = jnp.sqrt(2 * h0 / GRAVITY)
    starts, speeds = [t_first], [e * GRAVITY * t_first]  # bounce times, speeds after
    for _ in range(2):
        starts.append(starts[-1] + 2 * speeds[-1] / GRAVITY)
        speeds.append(e * speeds[-1])
    heights = []
    for t, k in zip(np.asarray(BALL_TS), bounces):
        if k == 0:
            heights.append(h0 - 0.5 * GRAVITY * t ** 2)
        else:
            dt = t - starts[k - 1]
            heights.append(speeds[k - 1] * dt - 0.5 * GRAVITY * dt ** 2)
    return jnp.concatenate([jnp.stack(heights), jnp.stack(starts)])


def test_bouncing_ball_closed_form():
    jac, (out, sol) = ball_jacobian(FREE)
    assert sol.result == ja.RESULTS.successful
    times = np.asarray(sol.events.times)
    assert int(sol.events.count) == 3 and np.all(np.isnan(times[3:]))
    bounces = [int(np.sum(times[:3] <= t)) for t in np.asarray(BALL_TS)]
    assert bounces == [0, 1, 2, 3]
    outputs = np.r_[0:4, 8:11]  # heights and bounce times
    np.testing.assert_allclose(out[outputs], ball_closed_form(FREE[:2], bounces), rtol=1e-10,
                               atol=1e-12)
    want = jax.jacfwd(ball_closed_form)(FREE[:2], bounces)
    np.testing.assert_allclose(jac[outputs, :2], want, rtol=1e-9)
    forward, _ = ball_jacobian(FREE, ja.DiscreteForward())
    np.testing.assert_allclose(forward[outputs, :2], want, rtol=1e-9)


def test_saves_on_the_ends_keep_their_time_derivative():
    """With events every segment clips the save times into itself; `jnp.clip` split the
    derivative of a save on ``t0`` or ``t1`` equally between the save time and the end (a
    user's acceptance test: half the velocity, and half of it on ``t1``)."""
    ts = jnp.array([0.0, 1.0, T1])

    def saves(span, ts):
        return bouncing(FREE, ja.DiscreteAdjoint(), span, ts)[0][:6]  # heights, velocities

    d_span, d_ts = jax.jit(jax.jacrev(saves, argnums=(0, 1)))(FORWARD, ts)
    velocities = saves(FORWARD, ts)[3:]
    np.testing.assert_allclose(jnp.diag(d_ts[:3]), velocities, rtol=1e-12)
    np.testing.assert_allclose(jnp.diag(d_ts[3:]), -GRAVITY, rtol=1e-12)
    # A save at t0 moves with the start (-f), none moves with t1.
    np.testing.assert_allclose(d_span[3, 0], GRAVITY, rtol=1e-12)
    np.testing.assert_array_equal(d_span[:, 1], 0.0)


def test_bounce_times_second_derivatives_closed_form():
    """`DiscreteForward`'s Hessians of bounce times: ``t_k = t_1 (1 + 2e + ... + 2e^(k-1))``
    with ``t_1 = sqrt(2 h0 / g)``.  The event time's replay took one Newton step from the
    recorded root, exact to first order only: d2 t_3 / de2 came out 23.9 for 4 t_1 = 2.55."""

    def times(q):
        p = FREE.at[:2].set(q)
        return bouncing(p, ja.DiscreteForward())[0][8:11]

    def closed_form(q):
        return ball_closed_form(q, [0, 1, 2, 3])[4:]

    q = FREE[:2]
    want = jax.hessian(closed_form)(q)
    np.testing.assert_allclose(jax.jit(jax.jacfwd(jax.jacfwd(times)))(q), want, rtol=1e-8,
                               atol=1e-10)
    np.testing.assert_allclose(jax.jit(jax.hessian(times))(q), want, rtol=1e-8, atol=1e-10)


def end_height(x, h0, save_at_end):
    """Height at ``t1 = x[0]`` of the free ball with restitution ``x[1]`` dropped from ``h0``
    (`DiscreteForward`, ``saveat=None`` or a save on ``t1``): ``(height, gradient)``."""

    def height(x):
        p = FREE.at[0].set(x[1]).at[1].set(h0)
        sol = ja.solve(ball, jnp.stack([h0, jnp.zeros_like(h0)]), 0.0, x[0], p, events=BOUNCE,
                       saveat=x[:1] if save_at_end else None, rtol=1e-8, atol=1e-8,
                       max_events=2, max_steps=64, sensitivity=ja.DiscreteForward())
        return sol.ys[-1, 0]

    def gradient(x):
        value, gradient = jax.value_and_grad(height)(x)
        return gradient, (value, gradient)

    return jax.jacfwd(gradient, has_aux=True)(x)


@pytest.mark.parametrize("save_at_end", [False, True], ids=["no-saves", "save-on-t1"])
def test_discrete_forward_reverse_mode_and_t1_hessian_through_jumps(save_at_end):
    """`DiscreteForward` with a jump, differentiated in ``t1`` and the restitution: reverse
    mode (`jax.grad`, the inner derivative of `jax.hessian`) against the closed form, when
    no bounce happens before ``t1`` and after one.  Without a bounce the gradient was NaN:
    the event's replayed Newton step divided by the condition's slope, zero in the empty
    segment after the end (a ball at rest), and its transpose made ``0 / 0``.  With
    ``saveat=None`` d2h/dT2 was +50.4 for -9.81: the end state was read on the final row,
    whose interpolant curves by its own amount (a hybrid-systems acceptance test)."""

    def closed_form(x, h0, bounced):
        t, e = x
        if not bounced:
            return h0 - 0.5 * GRAVITY * t**2
        t_bounce = jnp.sqrt(2 * h0 / GRAVITY)
        return e * GRAVITY * t_bounce * (t - t_bounce) - 0.5 * GRAVITY * (t - t_bounce) ** 2

    compiled = jax.jit(end_height, static_argnums=2)
    x = jnp.array([1.5, 0.8])
    for h0, bounced in [(20.0, False), (5.0, True)]:
        hessian, (value, gradient) = compiled(x, jnp.asarray(h0), save_at_end)
        np.testing.assert_allclose(value, closed_form(x, h0, bounced), rtol=1e-8)
        np.testing.assert_allclose(gradient, jax.grad(closed_form)(x, h0, bounced), rtol=1e-8,
                                   atol=1e-12)
        np.testing.assert_allclose(hessian, jax.hessian(closed_form)(x, h0, bounced),
                                   rtol=1e-7, atol=1e-10)


@jax.jit
def replay_segment(p, y, t_start, grid, clipped, t_end, discrete, ts):
    """One segment of the ball replayed on ``grid`` (`replay_event`, the textbook formulas):
    ``(bounce time, state just before it, states at ts)``.

    With ``discrete = 1`` the grid is ``t_start + cumsum(h)`` with the recorded step sizes
    ``h``, except the points marked ``clipped`` (a last step that the solve clipped to end on
    ``t1``): the derivative of the computed solution.  With ``discrete = 0`` the recorded
    grid stays and the start state moves by ``-f dt_start`` instead (the rule for a solve's
    own ``t0``), which the solve's derivative must *not* match.  Grids are padded with steps
    past their end (so that every segment has the same shapes: one compilation).
    """
    moved = t_start + jnp.concatenate([jnp.zeros(1), jnp.cumsum(jnp.diff(grid))])
    moved = jnp.where(clipped, grid, moved)
    grid = grid + discrete * (moved - grid)  # exactly one or the other
    dt = t_start - jax.lax.stop_gradient(t_start)
    y = y - (1 - discrete) * dt * ball(t_start, y, p)
    return replay_event(ball, ja.Dopri5(), y, p, grid, floor, t_end, ts)


def ball_replay(sol, span=FORWARD, ts=BALL_TS):
    """``replay(p, discrete)``: the ball replayed segment after segment (`replay_segment`),
    joined by the jumps; a function of ``p`` for JAX to differentiate."""
    steps, times = np.asarray(sol.steps), np.asarray(sol.events.times)
    count = int(sol.events.count)
    grids = [steps[k][np.isfinite(steps[k])] for k in range(count + 1)]
    size = max(len(g) for g in grids) + 1
    t0, t1 = (float(t) for t in span)
    sign = 1.0 if t1 > t0 else -1.0

    def replay(p, discrete):
        y, t_start = jnp.stack([p[1], jnp.zeros_like(p[1])]), t0 + 0.0 * p[0]
        ys, bounce_times = jnp.zeros((ts.shape[0], 2)), []
        for k, grid in enumerate(grids):
            past_end = grid[-1] + sign * np.arange(1.0, size - len(grid) + 1)
            padded = np.concatenate([grid, past_end])
            clipped = np.arange(size) == (len(grid) - 1 if grid[-1] == t1 else -1)
            t_end = t1 if k == count else times[k]
            t_event, y_minus, ys_k = replay_segment(p, y, t_start, padded, clipped, t_end,
                                                    discrete, ts)
            lo, hi = sorted((grid[0], t_end))
            inside = (ts >= lo) & (ts <= hi)
            ys = jnp.where(inside[:, None], ys_k, ys)
            bounce_times.append(t_event)
            t_start, y = t_event, rebound(t_event, y_minus, p)
        return jnp.concatenate([ys[:, 0], ys[:, 1], jnp.stack(bounce_times[:3])])

    return replay


@pytest.fixture(scope="module")
def forced_ball():
    """The forced ball's Jacobian and solution; the replay's Jacobians (both rules) and value
    (differentiated in forward mode, outside `jax.jit`: `replay_segment` compiles once)."""
    jac, (out, sol) = ball_jacobian(FORCED)
    replay = ball_replay(sol)
    jacobian = jax.jacfwd(lambda p, d: (replay(p, d), replay(p, d)), has_aux=True)
    (want, value), (old, _) = jacobian(FORCED, 1.0), jacobian(FORCED, 0.0)
    return jac, out, sol, want, value, old


def test_forced_ball_segments(forced_ball):
    """Three bounces: segments ending at a bounce inside the step and one in a step clipped
    to t1, then a last one clipped to t1; the replay gives the solve's values."""
    _, out, sol, _, value, _ = forced_ball
    assert sol.result == ja.RESULTS.successful and int(sol.events.count) == 3
    steps = np.asarray(sol.steps)  # one row per segment
    ends = [steps[k][np.isfinite(steps[k])][-1] for k in range(4)]
    assert ends[0] > sol.events.times[0] and ends[1] > sol.events.times[1]
    assert ends[2] == ends[3] == T1
    np.testing.assert_allclose(value, out, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("sensitivity", [
    None, ja.DiscreteAdjoint(ja.Recursive(3)), ja.DiscreteForward(),
], ids=["states", "recursive", "forward"])
def test_jump_gradient_matches_segment_replay(forced_ball, sensitivity):
    """Through jumps (the bounce time and state, a condition and a jump with parameters and
    time, a forcing in time), the derivative of the computed solution to round-off."""
    jac, _, _, want, _, old = forced_ball
    if sensitivity is not None:
        jac, _ = ball_jacobian(FORCED, sensitivity)
    assert helpers.max_rel_diff(jac, want) < 1e-11
    # The test can fail: the continuous restart rule is off by the solver's error.
    assert helpers.max_rel_diff(old, want) > 1e-9


def test_jump_gradient_backward_in_time(forced_ball):
    """The forced ball from ``t = T1`` back to 0: time runs backwards in every segment (the
    same compiled functions: the direction is traced)."""
    ts = BALL_TS[::-1]
    jac, (out, sol) = ball_jacobian(FORCED, span=BACKWARD, ts=ts)
    assert sol.result == ja.RESULTS.successful and int(sol.events.count) >= 2
    replay = ball_replay(sol, BACKWARD, ts)
    want, value = jax.jacfwd(lambda p: (replay(p, 1.0), replay(p, 1.0)), has_aux=True)(FORCED)
    np.testing.assert_allclose(value, out, rtol=1e-12, atol=1e-14)
    assert helpers.max_rel_diff(jac, want) < 1e-11
    forward, _ = ball_jacobian(FORCED, ja.DiscreteForward(), span=BACKWARD, ts=ts)
    assert helpers.max_rel_diff(forward, want) < 1e-11


def dosing(t, y, args):
    return -args["k"] * y


def dose(t, y, args):
    return y + args["dose"]


LOW = ja.Event(lambda t, y, args: y[0] - args["threshold"], direction="falling", jump=dose)


def concentration(theta):
    sol = ja.solve(dosing, jnp.array([4.0]), 0.0, 5.0, theta, events=LOW,
                   saveat=jnp.array([5.0]), rtol=1e-11, atol=1e-11, max_events=4)
    return sol.ys[0, 0], sol


def test_threshold_dosing_closed_form():
    theta = {"k": jnp.array(0.9), "threshold": jnp.array(1.0), "dose": jnp.array(1.5)}

    def closed(theta):
        k, c, d = theta["k"], theta["threshold"], theta["dose"]
        t_dose = jnp.log(4.0 / c) / k
        period = jnp.log((c + d) / c) / k
        last = t_dose + 3 * period  # doses at t_dose + j period, j = 0..3 (before t = 5)
        return (c + d) * jnp.exp(-k * (5.0 - last))

    (value, sol), got = jax.jit(jax.value_and_grad(concentration, has_aux=True))(theta)
    assert int(sol.events.count) == 4 and sol.result == ja.RESULTS.successful
    np.testing.assert_allclose(value, closed(theta), rtol=1e-9)
    want = jax.grad(closed)(theta)
    for key in theta:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-7)


_BOLUS = ja.Event(lambda t, y, p: t - p["T"], direction="rising",
                  jump=lambda t, y, p: y + p["D"])


@pytest.mark.parametrize("checkpoint", [ja.StoreStates(), ja.Recursive(4)])
def test_a_dose_on_t1_has_its_left_derivative(checkpoint):
    """A bolus exactly at ``t1`` fires (the value includes it), and the segment after it
    reaches ``t1`` without a step.  ``DiscreteAdjoint`` gave that segment's start no
    derivative: d y(t1)/dT = -k y- (-0.18) for the left derivative k D (1.5) that forward
    mode and the closed form give (a pharmacokinetics acceptance test)."""

    def y_end(p, sensitivity, saveat):
        sol = ja.solve(lambda t, y, p: -p["k"] * y, jnp.array([1.0]), 0.0, 2.0, p,
                       events=[_BOLUS], max_events=2, rtol=1e-10, atol=1e-10,
                       sensitivity=sensitivity, saveat=saveat)
        return sol.ys[-1, 0]

    p = {"k": jnp.array(0.5), "T": jnp.array(2.0), "D": jnp.array(3.0)}
    for saveat in (None, jnp.array([1.0, 2.0])):
        reverse = jax.grad(y_end)(p, ja.DiscreteAdjoint(checkpoint=checkpoint), saveat)
        forward = jax.jacfwd(y_end)(p, ja.DiscreteForward(), saveat)
        np.testing.assert_allclose(reverse["T"], 0.5 * 3.0, rtol=1e-12)
        for key in p:
            np.testing.assert_allclose(reverse[key], forward[key], rtol=1e-12, atol=1e-15)


def test_a_condition_on_its_root_at_t0_warns_on_a_direct_call():
    """A dose at t0 as an event (``t - T`` with ``T = t0``) does not fire: a direct call says
    so (it was dropped without a word, a PK acceptance test); one that starts off its root
    does not warn."""
    y0, p = jnp.array([1.0]), {"k": jnp.array(0.5), "T": jnp.array(0.0), "D": jnp.array(3.0)}
    with pytest.warns(UserWarning, match=r"`events\[0\]`'s condition is 0 at t0 = 0: .* does "
                      r"not fire \(nor jump\) at t0. Apply a jump at the start .* to `y0`"):
        sol = ja.solve(lambda t, y, p: -p["k"] * y, y0, 0.0, 2.0, p, events=[_BOLUS])
    assert int(sol.events.count) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sol = ja.solve(lambda t, y, p: -p["k"] * y, y0, 0.0, 2.0, dict(p, T=jnp.array(1.0)),
                       events=[_BOLUS])
    assert int(sol.events.count) == 1


def _absorption(t, y, p):
    # Gut -> plasma with a fast absorption rate: stiff for an explicit method once the gut
    # is empty (Dopri5 rides its stability boundary there).
    gut, plasma = y
    return jnp.stack([-p["ka"] * gut, p["ka"] * gut - p["ke"] * plasma])


def test_stiffness_stats_of_a_solve_with_jumps_are_those_of_its_segments():
    """With doses as events, ``longest_stiff_run`` is the longest run of any segment and
    ``stiff_run_start`` that run's start, as the gradient's refusal reports them; counts add
    up.  Both used to be sums over the segments (a start time past ``t1``: 72.3 on [0, 48],
    a PK acceptance test).  Compared with the two segments solved one after the other."""
    p = {"ka": jnp.array(300.0), "ke": jnp.array(0.15), "T": jnp.array(4.0),
         "D": jnp.array([5.0, 0.0])}
    sol = ja.solve(_absorption, jnp.array([5.0, 0.0]), 0.0, 8.0, p, solver=ja.Dopri5(),
                   events=[_BOLUS], max_events=2, rtol=1e-6, atol=1e-6, max_steps=8192)
    assert int(sol.events.count) == 1
    parts = [ja.solve(_absorption, jnp.array([5.0, 0.0]), 0.0, 4.0, p, solver=ja.Dopri5(),
                      rtol=1e-6, atol=1e-6, max_steps=8192)]
    parts.append(ja.solve(_absorption, parts[0].ys[-1] + p["D"], 4.0, 8.0, p,
                          solver=ja.Dopri5(), rtol=1e-6, atol=1e-6, max_steps=8192))
    runs = [int(s.stats["longest_stiff_run"]) for s in parts]
    assert min(runs) > 0  # the test can fail: both segments have a run
    longest = int(np.argmax(runs))
    assert int(sol.stats["longest_stiff_run"]) == runs[longest]
    np.testing.assert_allclose(sol.stats["stiff_run_start"],
                               parts[longest].stats["stiff_run_start"], rtol=1e-6)
    assert 0.0 <= float(sol.stats["stiff_run_start"]) <= 8.0
    for name in ("num_stiff_steps", "num_accepted_steps"):
        # (The step that locates the event is clipped at it: a step more or less.)
        assert abs(int(sol.stats[name]) - sum(int(s.stats[name]) for s in parts)) <= 2


# --- vmap, several conditions ---------------------------------------------------------------


def test_vmap_lanes_have_their_own_events():
    """Lanes with 3, 2 and 3 bounces (the second at a higher restitution), one forced."""
    ps = jnp.stack([FORCED, FREE.at[0].set(0.9), FREE.at[0].set(0.7)])
    grads, (outs, sols) = jax.jit(jax.vmap(lambda p: ball_jacobian(p)))(ps)
    for i in range(3):
        jac, (one, sol) = ball_jacobian(ps[i])
        np.testing.assert_allclose(outs[i], one, rtol=1e-13)
        assert int(sols.events.count[i]) == int(sol.events.count)
        np.testing.assert_allclose(sols.events.times[i], sol.events.times, rtol=1e-13)
        np.testing.assert_allclose(grads[i], jac, rtol=1e-12)
    assert len({int(c) for c in sols.events.count}) > 1


@pytest.mark.parametrize("sensitivity", [ja.DiscreteAdjoint(), ja.DiscreteForward()],
                         ids=["adjoint", "forward"])
def test_implicit_solver_through_a_jump_closed_form(sensitivity):
    """Kvaerno5 through a bounce: the restarted segment's clipped last step is
    differentiated in its size, which reaches the Newton stages through ``gamma h``; that
    dependence was dropped (d height / d h0 was 1.167, not 1.346)."""

    def height(p):
        sol = ja.solve(ball, jnp.stack([p[1], jnp.zeros_like(p[1])]), 0.0, 1.4, p,
                       events=BOUNCE, solver=ja.Kvaerno5(), rtol=1e-7, atol=1e-7,
                       max_events=4, max_steps=64, sensitivity=sensitivity)
        return sol.ys[0, 0]

    p = FREE
    derivative = jax.jacfwd if isinstance(sensitivity, ja.DiscreteForward) else jax.grad
    got = jax.jit(derivative(height))(p)
    e, h0 = p[0], p[1]
    t_bounce = jnp.sqrt(2 * h0 / GRAVITY)

    def closed(q):
        e, h0 = q
        t_b = jnp.sqrt(2 * h0 / GRAVITY)
        dt = 1.4 - t_b
        return e * GRAVITY * t_b * dt - 0.5 * GRAVITY * dt**2

    assert float(t_bounce) < 1.4
    np.testing.assert_allclose(got[:2], jax.grad(closed)(jnp.stack([e, h0])), rtol=1e-9)


# --- conditions crossing at the same instant -----------------------------------------------


def two_balls(t, y, p):
    return jnp.stack([y[1], -GRAVITY + 0 * y[0], y[3], -GRAVITY + 0 * y[2]])


def bounce_of(i):
    """Ball ``i`` bounces off the floor with restitution ``p[0]``."""
    return ja.Event(lambda t, y, p: y[2 * i], direction="falling",
                    jump=lambda t, y, p: y.at[2 * i + 1].set(-p[0] * y[2 * i + 1]))


TWO_BOUNCES = (bounce_of(0), bounce_of(1))


def two_balls_heights(p, sensitivity):
    """Both balls' heights at BALL_TS, ``p = (restitution, height 1, height 2)``."""
    y0 = jnp.stack([p[1], jnp.zeros_like(p[1]), p[2], jnp.zeros_like(p[2])])
    sol = ja.solve(two_balls, y0, 0.0, T1, p, events=TWO_BOUNCES, saveat=BALL_TS,
                   rtol=1e-6, atol=1e-6, max_events=8, max_steps=64, sensitivity=sensitivity,
                   throw=False)
    out = jnp.concatenate([sol.ys[:, 0], sol.ys[:, 2]])
    return out, (out, sol)


@pytest.mark.parametrize("sensitivity", [ja.DiscreteAdjoint(), ja.DiscreteForward()],
                         ids=["adjoint", "forward"])
def test_simultaneous_bounces_all_fire_with_their_own_derivatives(sensitivity):
    """Two identical balls bounce at the same instants: each bounce fires (ball 2 fell
    through the floor before, with success reported), in a segment of zero length, and the
    derivative of each ball's heights is its own closed form, also in ball 2's height,
    which moves its bounces away from ball 1's."""
    jac = jax.jacfwd if isinstance(sensitivity, ja.DiscreteForward) else jax.jacrev
    p = jnp.array([0.8, 2.0, 2.0])
    J, (out, sol) = jax.jit(jac(two_balls_heights, has_aux=True), static_argnums=1)(
        p, sensitivity)
    assert sol.result == ja.RESULTS.successful
    assert int(sol.events.count) == 6
    assert list(np.asarray(sol.events.which[:7])) == [0, 1, 0, 1, 0, 1, -1]
    times = np.asarray(sol.events.times[:6])
    np.testing.assert_array_equal(times[0::2], times[1::2])
    bounces = [0, 1, 2, 3]
    want = ball_closed_form(p[:2], bounces)[:4]
    np.testing.assert_allclose(out, jnp.concatenate([want, want]), rtol=1e-10, atol=1e-12)
    dwant = jax.jacfwd(ball_closed_form)(p[:2], bounces)[:4]
    zero = jnp.zeros((4, 1))
    expected = jnp.concatenate([jnp.concatenate([dwant, zero], 1),
                                jnp.concatenate([dwant[:, :1], zero, dwant[:, 1:]], 1)])
    np.testing.assert_allclose(J, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_simultaneous_recorded_event_is_logged_in_either_order(order):
    """A recorded event on ball 1's height crosses with its bounce: logged at every bounce,
    whichever comes first in `events` (the jump reverses the velocity; the record still
    sees the crossing it shares with the bounce)."""
    record = ja.Event(lambda t, y, p: y[0], direction="falling", terminal=False)
    events = [(bounce_of(0), record)[i] for i in order]
    y0 = jnp.array([2.0, 0.0, 1.0, 0.0])
    sol = ja.solve(two_balls, y0, 0.0, T1, jnp.array([0.8]), events=events, rtol=1e-8,
                   atol=1e-8, max_events=8)
    assert int(sol.events.count) == 6
    assert sorted(np.asarray(sol.events.which[:6]).tolist()) == [0, 0, 0, 1, 1, 1]
    times = np.asarray(sol.events.times[:6])
    np.testing.assert_array_equal(times[0::2], times[1::2])
    np.testing.assert_allclose(times[0::2], ball_closed_form(jnp.array([0.8, 2.0]),
                                                             [0, 1, 2, 3])[4:], rtol=1e-12)


def test_simultaneous_bounces_far_from_zero_time():
    """At t0 = 1000 an ulp of time (1e-13) moves a ball by more than round-off of its
    height: ball 2's crossing was judged "past zero" by more than round-off and lost
    (it fell through the floor with success reported).  Crossings are at one instant by
    time, within its resolution."""
    y0 = jnp.array([2.0, 0.0, 2.0, 0.0])
    sol = ja.solve(two_balls, y0, 1000.0, 1003.0, jnp.array([0.8]), events=TWO_BOUNCES,
                   rtol=1e-8, atol=1e-8, max_events=16)
    assert list(np.asarray(sol.events.which[:7])) == [0, 1, 0, 1, 0, 1, -1]
    np.testing.assert_allclose(sol.ys[0, 0], sol.ys[0, 2], rtol=1e-12)
    assert float(sol.ys[0, 2]) > 0


def test_jump_fires_before_a_terminal_event_listed_after_it():
    """A terminal condition on the same height, scaled differently, listed last: its root
    came out a few ulps earlier for some heights, so it stopped the solve before the
    bounce.  Roots within the resolution of time fire in the order of `events`."""
    stop = ja.Event(lambda t, y, p: 3.0 * y[0] + 0.1 * jnp.sin(y[0]), direction="falling")

    @jax.jit
    def run(h):
        sol = ja.solve(ball, jnp.stack([h, 0.0]), 0.0, 2.0, FREE, events=[BOUNCE, stop],
                       max_events=4)
        return sol.events.which[:3], sol.ys[0]

    for h in np.linspace(1.0, 3.0, 9):
        which, y = run(jnp.asarray(h))
        assert list(np.asarray(which)) == [0, 1, -1], h
        assert float(y[1]) > 0  # stopped just after the bounce, rising


def test_out_of_events_without_saves_reports_nan_at_t1():
    """Three bounces needed, `max_events=2`: with `saveat=None` the solve returned the
    state before the last jump at that event's time; like a solve out of `max_steps` it
    now reports y(t1) as NaN."""
    sol = ja.solve(ball, jnp.array([2.0, 0.0]), 0.0, 3.0, FREE, events=BOUNCE,
                   max_events=2, throw=False)
    assert sol.result == ja.RESULTS.max_events_reached
    assert "(events with a `jump`, or recorded ones with `terminal=False`)" in str(sol.result)
    np.testing.assert_array_equal(sol.ts, [3.0])
    assert np.all(np.isnan(np.asarray(sol.ys)))


@pytest.mark.parametrize("read", ["times", "count", "which", "stats"])
def test_a_failed_solve_raises_when_only_event_times_are_read(read):
    """``throw=True`` under `jit`: a program reading only the event times of a solve out of
    `max_events` returned them silently, and so one reading only integers (the count 3
    from ``max_events=2``; a hybrid-systems acceptance test)."""

    def bounce_log(p):
        sol = ja.solve(ball, jnp.array([2.0, 0.0]), 0.0, 3.0, p, events=BOUNCE, max_events=2)
        return sol.stats if read == "stats" else getattr(sol.events, read)

    with pytest.raises(Exception, match="reached `max_events`"):
        jax.block_until_ready(jax.jit(bounce_log)(FREE))


def test_zeno_ball_at_a_loose_tolerance_fails_clearly():
    """Restitution 0.5 at rtol 1e-6: the bounces' rebounds shrink below a step, and the
    ball, turned back by its last bounce, came back through the floor within the next
    step, which no sign change shows: it fell to y = -320 with success reported."""
    sol = ja.solve(ball, jnp.array([2.0, 0.0]), 0.0, 10.0, FREE.at[0].set(0.5),
                   events=BOUNCE, max_events=200, max_steps=64, throw=False)
    assert sol.result in (ja.RESULTS.event_chattering, ja.RESULTS.max_events_reached)


def test_a_bounce_left_a_round_off_below_the_floor_is_watched():
    """The GPU's round-off left the Zeno ball of the test above a hair below the floor
    after a late bounce (by less than the root's resolution in time times the impact
    speed, but more than 64 ulps of the step's heights); not taken to be at its zero, the
    ball was not watched, and within the next step it rebounded and fell through the
    floor: y = -320 with success.  A jump that leaves the ball 8 ulps of time below the
    floor reproduces it on any platform."""
    eps = jnp.finfo(jnp.float64).eps

    def low_rebound(t, y, p):
        return jnp.stack([y[0] - 8 * eps * jnp.abs(y[1]) * t, -p[0] * y[1]])

    low_bounce = ja.Event(floor, direction="falling", jump=low_rebound)
    for restitution in (0.5, 0.8):
        sol = ja.solve(ball, jnp.array([2.0, 0.0]), 0.0, 10.0,
                       FREE.at[0].set(restitution), events=low_bounce, max_events=200,
                       max_steps=64, throw=False)
        assert sol.result == ja.RESULTS.event_chattering, restitution
        # Stopped at the accumulation point of the bounces, sqrt(2 h / g) (1 + 2e / (1 - e)).
        zeno = np.sqrt(2 * 2.0 / GRAVITY) * (1 + 2 * restitution / (1 - restitution))
        last = sol.events.times[sol.events.count - 1]
        np.testing.assert_allclose(last, zeno, rtol=1e-6)


def drift(t, y, args):
    return jnp.ones_like(y)


def test_two_crossings_in_one_step_in_time_order():
    """y = t crosses 0.5 and 0.3 in the same (first, very long) step: 0.3 fires."""
    events = [ja.Event(lambda t, y, args: y[0] - 0.5, direction="rising"),
              ja.Event(lambda t, y, args: y[0] - 0.3)]
    # A falling-only condition crossed (rising) first does not count.
    events.append(ja.Event(lambda t, y, args: y[0] - 0.2, direction="falling"))
    sol = ja.solve(drift, jnp.array([0.0]), 0.0, 1.0, events=events, solver=ja.RK4(),
                   dt0=1.0)
    assert int(sol.events.which[0]) == 1 and int(sol.events.count) == 1
    np.testing.assert_allclose(sol.ts[0], 0.3, rtol=1e-14)


def test_jumps_and_a_terminal_event_together():
    """y = t, dropped by d whenever it rises through a, stopped at t = 0.9: with a = 0.5 and
    d = 0.25 it jumps at t = a and t = a + d, and ends at y = 0.9 - 2 d."""

    def run(theta):
        a, d = theta
        events = [ja.Event(lambda t, y, th: y[0] - th[0], direction="rising",
                           jump=lambda t, y, th: y - th[1]),
                  ja.Event(lambda t, y, th: t - 0.9)]
        sol = ja.solve(drift, jnp.array([0.0]), 0.0, 2.0, theta, events=events,
                       solver=ja.RK4(), dt0=0.1, max_events=4)
        out = jnp.stack([sol.ys[0, 0], sol.events.times[1]])
        return out, sol

    theta = jnp.array([0.5, 0.25])
    jac, sol = jax.jit(jax.jacrev(run, has_aux=True))(theta)
    assert int(sol.events.count) == 3 and list(np.asarray(sol.events.which[:4])) == [0, 0, 1, -1]
    np.testing.assert_allclose(sol.events.times[:3], [0.5, 0.75, 0.9], rtol=1e-14)
    np.testing.assert_allclose(sol.ts[0], 0.9, rtol=1e-14)
    np.testing.assert_allclose(sol.ys[0, 0], 0.4, rtol=1e-13)
    # d(y_end)/d(a, d) = (0, -2); d(second jump time)/d(a, d) = (1, 1).
    np.testing.assert_allclose(jac, [[0.0, -2.0], [1.0, 1.0]], atol=1e-13)


def decay(t, y, k):
    return -k * y


def test_recorded_events():
    """Events only recorded (``terminal=False``, no jump) on ``y' = -k y``, ``y(0) = 1``: the
    half-life and the quarter-life, in time order, the solution unchanged by them; their
    derivatives in ``k`` are the closed forms."""
    events = [ja.Event(lambda t, y, k: y[0] - 0.25, terminal=False),
              ja.Event(lambda t, y, k: y[0] - 0.5, terminal=False)]

    def run(k):
        sol = ja.solve(decay, jnp.array([1.0]), 0.0, 3.0, k, events=events,
                       saveat=jnp.array([0.5, 2.5]), rtol=1e-10, atol=1e-10, max_events=4)
        out = jnp.concatenate([sol.events.times[:2], sol.ys[:, 0]])
        return out, (out, sol)

    def closed(k):
        return jnp.stack([jnp.log(2.0) / k, jnp.log(4.0) / k, jnp.exp(-0.5 * k),
                          jnp.exp(-2.5 * k)])

    k = jnp.array(0.9)
    jac, (out, sol) = jax.jit(jax.jacrev(run, has_aux=True))(k)
    assert sol.result == ja.RESULTS.successful and int(sol.events.count) == 2
    assert list(np.asarray(sol.events.which[:3])) == [1, 0, -1]
    np.testing.assert_allclose(out, closed(k), rtol=1e-9)
    np.testing.assert_allclose(jac, jax.jacfwd(closed)(k), rtol=1e-8)


# --- failures -------------------------------------------------------------------------------


def test_condition_of_wrong_shape_is_rejected():
    with pytest.raises(ValueError, match=r"events\[0\]\.cond.*scalar"):
        ja.solve(drift, jnp.array([0.0, 1.0]), 0.0, 1.0, events=ja.Event(lambda t, y, a: y))


def test_nonfinite_condition_fails_clearly():
    event = ja.Event(lambda t, y, a: jnp.log(0.5 - y[0]))  # NaN past y = 0.5
    with pytest.raises(Exception, match="event condition returned NaN"):
        ja.solve(drift, jnp.array([0.0]), 0.0, 1.0, events=event)


def test_a_jump_to_nan_is_blamed_on_the_jump():
    # It was reported as "An event condition returned NaN ... Check `Event.cond`" (a
    # hybrid-systems acceptance test): the condition was fine, the jump was not.
    event = ja.Event(lambda t, y, p: y[0], direction="falling",
                     jump=lambda t, y, p: jnp.stack([y[0], jnp.sqrt(-1.0 - y[1] ** 2)]))
    sol = ja.solve(ball, jnp.array([1.0, 0.0]), 0.0, 2.0, FREE, events=event, throw=False)
    assert sol.result == ja.RESULTS.event_jump_nonfinite


def test_zeno_ball_fails_clearly():
    """Restitution 0.5 from 2 m: infinitely many bounces before t = 1.92 (Zeno)."""
    _, (_, sol) = jax.jit(bouncing)(FREE.at[0].set(0.5))
    assert sol.result in (ja.RESULTS.max_events_reached, ja.RESULTS.event_chattering)


@pytest.mark.parametrize("sensitivity", [ja.DiscreteAdjoint(), ja.DiscreteForward()],
                         ids=["adjoint", "forward"])
def test_differentiating_a_solve_out_of_events_raises(sensitivity):
    """A solve that reached `max_events` failed although each of its segments succeeded:
    its derivative raises, as every failed solve's does (it was returned before)."""
    p = FREE.at[0].set(0.5)  # the Zeno ball

    def heights(p):
        return jnp.sum(bouncing(p, sensitivity, max_events=2)[0][:3])

    derivative = jax.grad if isinstance(sensitivity, ja.DiscreteAdjoint) else jax.jacfwd
    with pytest.raises(Exception, match="solve that failed"):
        jax.block_until_ready(jax.jit(derivative(heights))(p))


@pytest.mark.parametrize("direction, tol", [("rising", 1e-8), ("falling", 1e-10)])
def test_recorded_event_is_logged_once_per_crossing(direction, tol):
    """``x = cos(2t)``: a recorded event (no jump) restarts at its root, where the
    condition's round-off could lie on the far side of zero; it was taken for a new
    crossing, logged twice and stopped as chattering."""
    event = ja.Event(lambda t, y, w: y[0], direction=direction, terminal=False)
    sol = ja.solve(lambda t, y, w: jnp.stack([y[1], -w**2 * y[0]]), jnp.array([1.0, 0.0]),
                   0.0, 10.0, 2.0, events=event, max_events=12, rtol=tol, atol=tol,
                   throw=False)
    assert sol.result == ja.RESULTS.successful, sol.result
    first = 0.75 * np.pi if direction == "rising" else 0.25 * np.pi
    expected = first + np.pi * np.arange(3)
    assert int(sol.events.count) == 3
    assert sol.events.count.dtype == jnp.int32  # as with terminal events only (was int64)
    np.testing.assert_allclose(np.asarray(sol.events.times[:3]), expected, rtol=1e-6)


def test_jump_changing_the_shape_is_rejected():
    event = ja.Event(lambda t, y, a: y[0] - 0.5, jump=lambda t, y, a: jnp.concatenate([y, y]))
    with pytest.raises(ValueError, match=r"events\[0\]\.jump` must return a state like `y0`"):
        ja.solve(drift, jnp.array([0.0]), 0.0, 1.0, events=event)


@pytest.mark.parametrize("sensitivity", [ja.ForwardSensitivity(), ja.ContinuousAdjoint(),
                                         ja.FiniteDifferences()])
def test_unsupported_sensitivities_raise(sensitivity):
    with pytest.raises(ValueError, match="`events` are not supported"):
        ja.solve(drift, jnp.array([0.0]), 0.0, 1.0, events=LAND, sensitivity=sensitivity)


def test_bad_event_arguments():
    with pytest.raises(ValueError, match="direction"):
        ja.Event(ground, direction="up")
    with pytest.raises(ValueError, match="terminal=True"):
        ja.Event(ground, jump=rebound, terminal=True)
    with pytest.raises(TypeError, match="events"):
        ja.solve(drift, jnp.array([0.0]), 0.0, 1.0, events=ground)
    with pytest.raises(ValueError, match="land_on_ts"):
        ja.solve(drift, jnp.array([0.0]), 0.0, 1.0, events=BOUNCE,
                 saveat=ja.SaveAt(ts=jnp.array([0.5]), land_on_ts=True))
    with pytest.raises(ValueError, match="integrand"):
        ja.solve(drift, jnp.array([0.0]), 0.0, 1.0, events=LAND,
                 integrand=lambda t, y, a: y)



def test_traced_save_times_outside_the_interval_with_jumps():
    """Segments see the saves clipped into them; the times given are checked against the
    whole interval (a save past t1 under `jit` was NaN with a successful result; a UAT)."""
    dose = ja.Event(lambda t, y, k: t - 2.0, direction="rising", jump=lambda t, y, k: y + 1.0)

    @jax.jit
    def saves(ts):
        sol = ja.solve(lambda t, y, k: -k * y, jnp.array([1.0]), 0.0, 5.0, 0.5, saveat=ts,
                       events=dose, throw=False)
        return sol.ys[:, 0], sol.result

    for ts in ([1.0, 3.0, 6.0], [-1.0, 3.0], [3.0, 1.0]):
        ys, result = saves(jnp.asarray(ts))
        assert result == ja.RESULTS.invalid_save_times, ts
        assert np.all(np.isnan(ys))
    ys, result = saves(jnp.asarray([1.0, 3.0, 5.0]))
    assert result == ja.RESULTS.successful
    np.testing.assert_allclose(ys, [np.exp(-0.5), np.exp(-1.5) + np.exp(-0.5),
                                    np.exp(-2.5) + np.exp(-1.5)], rtol=1e-5)


def test_scipy_event_attributes_are_not_silently_ignored():
    """A condition ported from scipy's solve_ivp carries ``terminal``/``direction``
    attributes; where they say otherwise than the `Event`, it is refused (a UAT: the
    solve stopped at a crossing scipy ignored), and where they agree it is built."""
    def hit(t, y, args):
        return y[0] - 0.5

    hit.terminal, hit.direction = False, -1
    with pytest.raises(ValueError, match=r"terminal=False, direction=-1 \(scipy's solve_ivp"):
        ja.Event(hit)
    with pytest.raises(ValueError, match=r"`Event\(cond, direction=-1\)`"):
        ja.Event(hit, terminal=False)
    assert ja.Event(hit, direction="falling", terminal=False).direction == -1
    hit.terminal = 2
    with pytest.raises(ValueError, match="stop after 2 occurrences"):
        ja.Event(hit, direction=-1, terminal=False)


# --- an input switched off at a time: the README's dosing recipe --------------------------


def _infusion(t, s, p):
    amount, rate = s
    return jnp.stack([-p["k"] * amount + rate, jnp.zeros_like(rate)])


_STOP_INFUSION = ja.Event(lambda t, s, p: t - p["T"], direction="rising",
                          jump=lambda t, s, p: s.at[1].set(0.0))


def _infused_amount(T, t):
    """Closed form of the amount at ``t`` for unit rate until ``T`` and ``k = 1``."""
    at_stop = 1 - np.exp(-T)
    return np.where(t < T, 1 - np.exp(-t), at_stop * np.exp(-(t - T)))


def test_an_input_switched_off_by_an_event_converges_and_differentiates_in_its_time():
    """An infusion that stops at ``T``, with Rodas5: as an event, the saves converge with
    ``rtol`` and d y(3)/dT is the closed form's, where a ``jnp.where(t < T, ...)`` switch in
    the rhs is stepped over by Rodas5's error estimate and has no derivative in ``T``
    (README, "Inputs that switch in time")."""
    ts = jnp.array([0.5, 1.5, 3.0])

    @jax.jit
    def amounts(T, rtol):
        sol = ja.solve(_infusion, jnp.array([0.0, 1.0]), 0.0, 3.0, {"k": 1.0, "T": T},
                       solver=ja.Rodas5(), saveat=ts, rtol=rtol, atol=rtol / 100,
                       events=[_STOP_INFUSION])
        return sol.ys[:, 0]

    exact = _infused_amount(1.0, np.asarray(ts))
    for rtol, bound in [(1e-6, 1e-5), (1e-9, 1e-8), (1e-12, 1e-11)]:
        np.testing.assert_allclose(amounts(1.0, rtol), exact, rtol=bound)
    # d/dT of (1 - e^-T) e^-(3 - T) = e^-3 + (1 - e^-T) e^-(3 - T)
    slope = jax.grad(lambda T: amounts(T, 1e-9)[-1])(1.0)
    np.testing.assert_allclose(slope, np.exp(-3.0) + (1 - np.exp(-1.0)) * np.exp(-2.0),
                               rtol=1e-8)


@pytest.mark.parametrize("sensitivity", [ja.DiscreteAdjoint(), ja.DiscreteForward()],
                         ids=["discrete-adjoint", "discrete-forward"])
def test_simultaneous_events_exactly_at_t1_all_fire(sensitivity):
    """Two jumps at one instant that is ``t1``: only the first fired (the second was
    pending, and a pending event fires in the next segment's first step, which a segment
    from ``t1`` to ``t1`` does not take: two synchronous PWM phases, one stayed on; a
    power-electronics engineer's test, 2026-11-29).  Both fire now, in the order of
    ``events``, with the derivatives of ``y0 e^(-k/2) + (a, b)``."""

    def rhs(t, s, p):
        return -p["k"] * s

    events = [ja.Event(lambda t, s, p: t - 0.5, direction="rising",
                       jump=lambda t, s, p, i=i, key=key: s.at[i].add(p[key]))
              for i, key in enumerate("ab")]
    p = {"k": jnp.asarray(1.0), "a": jnp.asarray(2.0), "b": jnp.asarray(3.0)}
    y0 = jnp.array([1.0, 1.0])

    def end(p, t1=0.5):
        sol = ja.solve(rhs, y0, 0.0, t1, p, events=events, sensitivity=sensitivity,
                       rtol=1e-10, atol=1e-10)
        return sol.ys[-1], sol.events.count, sol.events.which

    value, count, which = end(p)
    assert int(count) == 2 and list(np.asarray(which[:2])) == [0, 1]
    np.testing.assert_allclose(value, y0 * np.exp(-0.5) + np.array([2.0, 3.0]), rtol=1e-9)
    derivative = jax.jacrev if isinstance(sensitivity, ja.DiscreteAdjoint) else jax.jacfwd
    jac = derivative(lambda p: end(p)[0])(p)
    np.testing.assert_allclose(jac["k"], -0.5 * np.exp(-0.5) * np.ones(2), rtol=1e-9)
    np.testing.assert_array_equal(jac["a"], [1.0, 0.0])
    np.testing.assert_array_equal(jac["b"], [0.0, 1.0])
    # The same on the recorded grid: a plain replay to t1, then both jumps, by JAX's AD.
    grid = helpers.accepted_grid(ja.solve(rhs, y0, 0.0, 0.5, p, rtol=1e-10, atol=1e-10))

    def replayed(p):
        y, _ = helpers.replay(rhs, ja.Dopri5().tableau, y0, p, grid, jnp.array([0.5]))
        return y[-1] + jnp.stack([p["a"], p["b"]])

    want = jax.jacrev(replayed)(p)
    assert helpers.max_rel_diff(jac, want) < 1e-12
