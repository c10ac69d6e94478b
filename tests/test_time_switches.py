"""A right-hand side that switches in time, with a solver whose error estimate cannot see
it (Rodas5), gets a `TimeSwitchWarning` when the solve is traced; other solvers, smooth
time dependence and switches in the state do not.  Traced with `jax.eval_shape` only:
nothing is compiled."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import pytest

import jaxadjoint as ja
from jaxadjoint._time_switches import switches_in_time


def switched(t, y, k):
    return -k * y + jnp.where(t < 1.0, 1.0, 0.0)


def smooth(t, y, k):
    return -k * y + jnp.sin(t)


def switched_in_state(t, y, k):
    return -k * y * jnp.where(y > 0, 1.0, 0.0)


def tabulated(t, y, k):
    return -k * y + jnp.interp(t, jnp.array([0.0, 1.0, 2.0]), jnp.array([0.0, 1.0, 0.0]))


def nested_cond(t, y, k):
    inner = jax.jit(lambda s: jax.lax.cond(s > 1.0, lambda: 0.0, lambda: 1.0))
    return -k * y + inner(2.0 * t)


def clamped_table(t, y, k):
    return -k * y + jnp.take(jnp.array([1.0, 0.0, 0.0]), t.astype(jnp.int32), mode="clip")


def signed(t, y, k):
    return -k * y + (jnp.sign(1.0 - t) + 1.0) / 2.0


def rectified(t, y, k):
    return -k * y + jax.nn.relu(1.0 - t)


def switch_time_in_args(t, y, args):
    return -args["k"] * y + jnp.where(t < args["T"], 1.0, 0.0)


def _warnings(rhs, solver, args=1.0, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jax.eval_shape(lambda a: ja.solve(rhs, jnp.array([1.0]), 0.0, 3.0, a, solver=solver,
                                          **options).ys, args)
    return [w for w in caught if issubclass(w.category, ja.TimeSwitchWarning)]


@pytest.mark.parametrize("rhs", [switched, tabulated, nested_cond, clamped_table, signed,
                                 rectified])
def test_rodas5_warns_of_a_switch_in_time(rhs):
    """Comparisons, and the jumps and kinks that are no comparison in the jaxpr (a clamped
    table index, ``sign``, ``relu``: unwarned before, 2.9e-4 and 1.6e-6 off at rtol 1e-9 in
    a control user's test)."""
    (warning,) = _warnings(rhs, ja.Rodas5())
    message = str(warning.message)
    assert "Rodas5's error estimate does not see a step across the switch" in message
    assert "`Event`" in message


def test_a_switch_time_in_args_is_found():
    assert _warnings(switch_time_in_args, ja.Rodas5(), {"k": 1.0, "T": jnp.array(1.0)})


@pytest.mark.parametrize("rhs, solver", [
    (switched, ja.Rodas4()), (switched, ja.Rodas3()), (switched, ja.Kvaerno5()),
    (switched, ja.Dopri5()), (smooth, ja.Rodas5()), (switched_in_state, ja.Dopri5()),
    (lambda t, y, k: -k * jnp.maximum(y, 0.0), ja.Rodas5()),
], ids=["rodas4", "rodas3", "kvaerno5", "dopri5", "smooth", "state-dopri5", "state-kink"])
def test_no_warning_where_the_estimate_sees_it_or_nothing_switches_in_time(rhs, solver):
    assert not _warnings(rhs, solver)


def test_no_warning_with_fixed_steps():
    assert not _warnings(switched, ja.Rodas5(), controller=ja.ConstantStep(0.1))


def test_which_estimates_see_changes_in_time():
    """Rodas5's main and embedded solutions differ only in stages at ``t_n + h``."""
    assert not ja.Rodas5().estimate_sees_time_changes
    assert ja.Rodas4().estimate_sees_time_changes
    assert ja.Rodas3().estimate_sees_time_changes


def test_the_search_follows_t_only():
    y, t = jnp.array([1.0]), jnp.array(0.0)
    assert switches_in_time(switched, t, y, 1.0)
    assert not switches_in_time(switched_in_state, t, y, 1.0)
    # A comparison of parameters alone does not read t.
    assert not switches_in_time(lambda t, y, a: y * jnp.where(a > 0, 1.0, 2.0), t, y,
                                jnp.array(1.0))


def _derivative_warnings(differentiate, sensitivity, argument="T"):
    """The warnings of tracing a derivative of ``y(3)`` in ``args[argument]`` (Dopri5)."""
    def end(x):
        args = {"k": jnp.asarray(1.0), "T": jnp.asarray(1.0)} | {argument: x}
        return ja.solve(switch_time_in_args, jnp.array([1.0]), 0.0, 3.0, args,
                        sensitivity=sensitivity).ys[-1, 0]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jax.eval_shape(differentiate(end), jnp.asarray(1.0))
    return [str(w.message) for w in caught if issubclass(w.category, ja.TimeSwitchWarning)]


@pytest.mark.parametrize("differentiate, sensitivity", [
    (jax.grad, ja.DiscreteAdjoint()), (jax.jacfwd, ja.DiscreteForward()),
    (jax.grad, ja.ContinuousAdjoint()), (jax.jacfwd, ja.ForwardSensitivity()),
], ids=["discrete-adjoint", "discrete-forward", "continuous-adjoint", "forward-sensitivity"])
def test_differentiating_a_switch_time_warns(differentiate, sensitivity):
    """``jnp.where(t < T, ...)`` differentiated in ``T``: the comparison's derivative is zero,
    so the gradient misses the switch (an epidemiologist's lockdown date: 0 for 0.105), with
    any solver; the default Dopri5 said nothing (its own estimate sees the jump)."""
    (message,) = _derivative_warnings(differentiate, sensitivity)
    assert "`rhs` compares the time `t` with a value computed from an argument you are " \
           "differentiating" in message
    assert "`Event` with the condition `t - t_switch`" in message


def test_the_warning_comes_at_every_trace():
    """Under Python's default filter a warning shows once per line; a notebook that took a
    second gradient (another solver) from the same line got a silent 0 (a battery
    modeller's test).  Each trace warns."""

    def rhs(t, y, args):  # a function of its own: no trace of it is cached yet
        return switch_time_in_args(t, y, args)

    def end(T, solver):
        args = {"k": jnp.asarray(1.0), "T": T}
        return ja.solve(rhs, jnp.array([1.0]), 0.0, 3.0, args, solver=solver).ys[-1, 0]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for solver in (ja.Tsit5(), ja.Dopri5()):
            jax.eval_shape(jax.grad(lambda T: end(T, solver)), jnp.asarray(1.0))
    assert len([w for w in caught if issubclass(w.category, ja.TimeSwitchWarning)]) == 2
    assert all(w.filename == __file__ for w in caught)


def test_no_switch_time_warning_for_other_arguments():
    """Differentiating the rate alone (the switch time a constant) warns of nothing."""
    assert not _derivative_warnings(jax.grad, ja.DiscreteAdjoint(), argument="k")


def test_a_solve_nested_in_rhs_is_no_switch():
    """A solve inside ``rhs`` whose ``t1`` follows the outer ``t``: its step control
    compares times with ``t1`` (so with ``t`` and the differentiated rate) at every step,
    and the outer solve warned of a switch, though its gradient is exact (a trajectory
    engineer's test, 2026-11-29).  A comparison of the same values in ``rhs`` itself still
    warns."""

    def inner(t, y, k):
        return -k * y

    def nested(t, y, k):
        return -ja.solve(inner, y, 0.0, 1.0 + 0.1 * t, k).ys[-1]

    def compared(t, y, k):
        return jnp.where(t < k, -y, y)

    for rhs, expected in ((nested, 0), (compared, 1)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jax.eval_shape(jax.grad(
                lambda k, rhs=rhs: ja.solve(rhs, jnp.ones(1), 0.0, 1.0, k).ys[-1, 0]),
                jnp.asarray(2.0))
        found = [w for w in caught if issubclass(w.category, ja.TimeSwitchWarning)]
        assert len(found) == expected, rhs.__name__


def test_a_jump_on_the_state_warns():
    """An ideal diode, ``v' = where(v > 0, -1, 0)`` from ``v(0) = 1``: ``v(2)`` is 0, and
    Rodas5 gave -0.085 at rtol 1e-10 (its estimate cannot see the jump), with no warning;
    every method's derivative in ``v0`` was 1 where it is 0 (a power-electronics engineer's
    test, 2026-11-29).  Rodas5 now warns when it is traced, every method when a derivative
    is; a kink (``jnp.maximum(c, 0)``, a common guard) does not."""
    (warning,) = _warnings(switched_in_state, ja.Rodas5())
    assert "Rodas5's error estimate does not see a step across the jump" in str(warning.message)

    def end(rhs, solver):
        return lambda v0: ja.solve(rhs, v0, 0.0, 2.0, 1.0, solver=solver).ys[-1, 0]

    for solver in (ja.Dopri5(), ja.Rodas4()):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jax.eval_shape(jax.grad(end(switched_in_state, solver)), jnp.array([1.0]))
        (warning,) = [w for w in caught if issubclass(w.category, ja.TimeSwitchWarning)]
        assert "the gradient misses how the crossing time moves" in str(warning.message)
    # Neither a kink nor the NaN tests inside smooth functions (`softplus` is `logaddexp`,
    # which tests `x != x`: a hydrologist's smoothed threshold warned, 2026-11-29).
    for smooth_in_state in (lambda t, y, k: -k * jnp.maximum(y, 0.0),
                            lambda t, y, k: -k * jax.nn.softplus(y - 0.5),
                            lambda t, y, k: -k * jnp.logaddexp(y, 0.0)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jax.eval_shape(jax.grad(end(smooth_in_state, ja.Dopri5())), jnp.array([1.0]))
        assert not [w for w in caught if issubclass(w.category, ja.TimeSwitchWarning)]
