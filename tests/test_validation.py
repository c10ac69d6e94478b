"""Every bad input gets a clear error naming the argument; every failure has a `RESULTS` code.

Structural problems raise at trace time (`ValueError`/`TypeError`, nothing compiles);
values only known at run time (traced tolerances, times, save times) raise an
`equinox.EquinoxRuntimeError` when the compiled program runs; with ``throw=False`` a
failed solve reports ``sol.result`` and differentiating it raises (a `GradientError`
that names the failed lane under `vmap`).
"""

from __future__ import annotations

import functools
import re
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import solve_cases as sc

import jaxadjoint as ja


def decay(t, y, args):
    del t
    return -args * y


Y0 = jnp.array([1.0, 2.0])
K = jnp.asarray(0.5)


def solve(**kwargs):
    """`ja.solve` of the decay problem with keyword overrides (traces only up to the error)."""
    call = dict(rhs=decay, y0=Y0, t0=0.0, t1=1.0, args=K)
    call.update(kwargs)
    return ja.solve(call.pop("rhs"), call.pop("y0"), call.pop("t0"), call.pop("t1"),
                    call.pop("args"), **call)


# ------------------------------------------------------------------------------------------
# Trace-time errors.


@pytest.mark.parametrize(
    "rhs, match",
    [
        (lambda t, y, args: {"a": y}, "structure of `y0`"),
        (lambda t, y, args: jnp.zeros(3), r"returned shape \(3,\).*`y0` has shape \(2,\)"),
        (lambda t, y, args: jnp.zeros(2, jnp.int32), "must return floating arrays"),
        (lambda t, y, args: y.astype(jnp.float32), "returned float32 at the root but `y0` is "
         "float64 there"),
    ],
    ids=["structure", "shape", "integer", "lower precision"],
)
def test_rhs_output_mismatch(rhs, match):
    with pytest.raises(ValueError, match=match):
        solve(rhs=rhs)


def test_rhs_output_mismatch_in_pytree_state():
    y0 = {"x": jnp.zeros(2), "v": jnp.zeros(())}
    with pytest.raises(ValueError, match=r"returned shape \(3,\) at \['x'\]"):
        solve(rhs=lambda t, y, args: {"x": jnp.zeros(3), "v": y["v"]}, y0=y0)
    with pytest.raises(ValueError, match="structure of `y0`"):
        solve(rhs=lambda t, y, args: (y["x"], y["v"]), y0=y0)
    # A SciPy user's list `y0` with a vector field (an acceptance test: no hint).
    with pytest.raises(ValueError, match=r"A list `y0` is a pytree of 2 entries.*jnp.asarray"):
        solve(rhs=lambda t, y, args: -jnp.stack(y), y0=[1.0, 2.0])


def test_solve_ivp_habits_get_the_fix_named():
    """A newcomer from solve_ivp (2026-11-29): ``return [dx, dy]`` for an array state, ``fun(t,
    y, a, b)`` with ``args=(a, b)``, and an ``if`` on the state got JAX's or Python's bare
    messages; each now says what to write instead."""
    with pytest.raises(ValueError, match=r"returned a list of 2 entries.*jnp.stack"):
        solve(rhs=lambda t, y, args: [-y[0], y[0]])
    with pytest.raises(TypeError, match=r"`args` whole: write `def rhs\(t, y, args\): a, b = "
                       r"args`.*missing 1 required positional argument"):
        solve(rhs=lambda t, y, a, b: -a * y, args=(1.0, 2.0))

    def branching(t, y, args):
        return -y if y[0] > 0 else y

    with pytest.raises(TypeError, match=r"jnp.where\(y\[0\] > 0, a, b\)` for an `if`"):
        solve(rhs=branching)


def test_rhs_may_return_python_numbers():
    """A leaf of ``rhs``'s or ``integrand``'s output may be a Python number (a clock's rate,
    a constant cost): it takes the state's dtype, as in arithmetic, with no precision
    warning.  It crashed the output checks (`'float' object has no attribute 'shape'`; a
    JAX user's acceptance test), and so did a bool."""
    state = {"x": jnp.array(1.0, jnp.float32), "clock": jnp.array(0.0, jnp.float32)}

    def rhs(t, y, k):
        return {"x": -k * y["x"], "clock": 1.0}

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ys = ja.solve(rhs, state, 0.0, 1.0, 1.0, rtol=1e-5, atol=1e-5).ys
    np.testing.assert_allclose(ys["clock"], [1.0], rtol=1e-6)
    assert ys["clock"].dtype == jnp.float32
    np.testing.assert_allclose(ja.solve(lambda t, y, a: 1.0, 0.0, 0.0, 2.0).ys, [2.0], rtol=1e-14)
    # So in an integrand's output (the solve's dtype); a bool is no number there.
    sol = ja.solve(rhs, state, 0.0, 1.0, 1.0, rtol=1e-5, atol=1e-5,
                   integrand=lambda t, y, k: {"time": 1.0, "x": y["x"]})
    np.testing.assert_allclose(sol.integral["time"], 1.0, rtol=1e-6)
    assert sol.integral["time"].dtype == jnp.float32
    with pytest.raises(ValueError, match="`rhs` must return floating arrays, got dtype bool"):
        ja.solve(lambda t, y, a: True, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="`integrand` must return floating arrays, got dtype "
                                         "bool"):
        ja.solve(rhs, state, 0.0, 1.0, 1.0, integrand=lambda t, y, k: True)


def test_differentiating_under_disable_jit_is_refused_clearly():
    """Under `jax.disable_jit()` every method's derivative failed with equinox's
    "Closure-converted function called with different dynamic arguments"; now a clear
    `TypeError`, while the solve itself still runs (a JAX user's acceptance test)."""

    def loss(k):
        return jnp.sum(ja.solve(lambda t, y, k: -k * y, jnp.ones(2), 0.0, 1.0, k).ys)

    with jax.disable_jit():
        np.testing.assert_allclose(loss(1.0), 2 * np.exp(-1.0), rtol=1e-5)
        with pytest.raises(TypeError, match=r"cannot be differentiated under `jax.disable_jit"):
            jax.grad(loss)(1.0)


def test_rhs_that_fails_is_reported_with_context():
    def bad(t, y, args):
        raise TypeError("boom")

    with pytest.raises(TypeError, match=r"calling `rhs\(t0, y0, args\)` failed: boom"):
        solve(rhs=bad)


@pytest.mark.parametrize(
    "y0, match",
    [
        (jnp.array([1, 2]), r"`y0` has dtype int.*floating"),
        (jnp.array([1.0 + 1j, 2.0]), r"`y0` has complex dtype"),
        ({"a": jnp.zeros(2), "b": jnp.array([True])}, r"`y0\['b'\]` has dtype bool"),
        ({}, "`y0` must contain at least one array"),
        (jnp.zeros((0,)), "`y0` has no elements"),
    ],
    ids=["int", "complex", "bool-leaf", "empty-tree", "no-elements"],
)
def test_bad_initial_state(y0, match):
    with pytest.raises(ValueError, match=match):
        solve(y0=y0, rhs=lambda t, y, args: y)


def test_complex_args():
    with pytest.raises(ValueError, match=r"`args\[1\]` has complex dtype"):
        solve(args=(K, jnp.array([1j])), rhs=lambda t, y, args: -args[0] * y)


@pytest.mark.parametrize(
    "rtol, atol",
    [(-1e-6, 1e-6), (1e-6, -1e-6), (0.0, 0.0), (np.inf, 1e-6), (1e-6, np.nan)],
    ids=["negative-rtol", "negative-atol", "both-zero", "inf", "nan"],
)
def test_bad_tolerances(rtol, atol):
    with pytest.raises(ValueError, match="`rtol` and `atol` must be finite and non-negative"):
        solve(rtol=rtol, atol=atol)


def test_tolerance_must_be_real_scalar():
    with pytest.raises(ValueError, match="`rtol` must be a scalar"):
        solve(rtol=jnp.array([1e-6, 1e-6]))
    with pytest.raises(ValueError, match="`atol` must be real"):
        solve(atol=1e-6 + 1e-6j)


@pytest.mark.parametrize(
    "t0, t1, match",
    [
        (0.0, 0.0, "`t1` must differ from `t0`"),
        (0.0, np.inf, "`t0` and `t1` must be finite"),
        (np.nan, 1.0, "`t0` and `t1` must be finite"),
        (jnp.zeros(2), 1.0, "`t0` must be a scalar"),
        (0.0, "1.0", "`t1` must be a real number or array"),
        (0.0, 1.0 + 0.5j, "`t1` must be real"),
    ],
    ids=["equal", "inf", "nan", "array", "string", "complex"],
)
def test_bad_times(t0, t1, match):
    with pytest.raises(ValueError, match=match):
        solve(t0=t0, t1=t1)


@pytest.mark.parametrize(
    "saveat, t0, t1, first_bad",
    [
        ([0.5, 0.2], 0.0, 1.0, "saveat[1] = 0.2 comes after saveat[0] = 0.5"),
        ([0.5, 1.5], 0.0, 1.0, "saveat[1] = 1.5 is outside [0.0, 1.0] by 0.5"),
        ([-0.1, 0.5], 0.0, 1.0, "saveat[0] = -0.1 is outside [0.0, 1.0] by 0.1"),
        ([0.5, np.nan], 0.0, 1.0, "saveat[1] is nan"),
        # A backwards solve: the times must decrease.
        ([0.2, 0.5], 1.0, 0.0, "(non-increasing, as t1 < t0); saveat[1] = 0.5 comes after"),
    ],
    ids=["unsorted", "after-t1", "before-t0", "nan", "wrong-direction"],
)
def test_bad_saveat(saveat, t0, t1, first_bad):
    """Concrete save times (a list, a NumPy or a JAX array outside `jit`) raise before the
    solve is traced, naming the first bad entry; traced ones fail at run time
    (`test_bad_save_times_inside_jit_...` in test_dense_output.py, and the sweep below)."""
    match = "`saveat` must hold finite times inside.*" + re.escape(first_bad)
    for times in (saveat, np.asarray(saveat), jnp.asarray(saveat)):
        with pytest.raises(ValueError, match=match):
            solve(saveat=times, t0=t0, t1=t1)
    with pytest.raises(ValueError, match=match):
        solve(saveat=ja.SaveAt(ts=saveat, dense=True), t0=t0, t1=t1)


def test_save_times_are_checked_as_the_solve_uses_them():
    """Before `jit` as inside it: integers are times, and float32 times of a float64 solve
    are within their own rounding of its ends (float32(0.1) is 0.1 + 1.5e-9: it is t1)."""
    ys = np.asarray(solve(saveat=jnp.array([0.0, 1.0, 1.0])).ys)
    for integers in ([0, 1, 1], np.array([0, 1, 1]), jnp.array([0, 1, 1])):
        np.testing.assert_array_equal(np.asarray(solve(saveat=integers).ys), ys)
    observed = np.array([0.05, 0.1], np.float32)
    at_t1 = np.asarray(solve(t1=0.1).ys[-1])
    np.testing.assert_array_equal(np.asarray(solve(t1=0.1, saveat=observed).ys[-1]), at_t1)
    traced = jax.jit(lambda ts: solve(t1=0.1, saveat=ts).ys[-1])(jnp.asarray(observed))
    np.testing.assert_array_equal(np.asarray(traced), at_t1)


def test_saveat_as_a_list_of_times():
    """A list or tuple of numbers is an array of save times (as in `SaveAt(ts=...)`)."""
    expected = np.asarray(solve(saveat=jnp.array([0.2, 0.5, 1.0])).ys)
    np.testing.assert_array_equal(np.asarray(solve(saveat=[0.2, 0.5, 1.0]).ys), expected)
    np.testing.assert_array_equal(np.asarray(solve(saveat=(0.2, 0.5, 1)).ys), expected)


@pytest.mark.parametrize("saveat", [jnp.zeros((2, 2)), jnp.zeros((0,)), jnp.asarray(0.5)],
                         ids=["2-D", "empty", "scalar"])
def test_saveat_must_be_nonempty_1d(saveat):
    with pytest.raises(ValueError, match="`saveat` must be a non-empty 1-D array"):
        solve(saveat=saveat)


def test_checkpoint_class_instead_of_instance_is_named():
    with pytest.raises(TypeError, match=r"pass an instance: `StoreStates\(\)`"):
        ja.DiscreteAdjoint(ja.StoreStates)
    with pytest.raises(TypeError, match=r"takes `StoreStates\(\)`, `StoreStages\(\)` or"):
        ja.DiscreteAdjoint(checkpoint=3)


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda x: dict(controller=ja.StepTo(jnp.array([0.0, 0.3, x, 1.0])), solver=ja.RK4()),
         "controller.ts"),
        (lambda x: dict(controller=ja.ConstantStep(x), solver=ja.RK4()), "controller.dt"),
        (lambda x: dict(dt0=x, solver=ja.RK4()), "dt0"),
        (lambda x: dict(dt0=x), "dt0"),
        (lambda x: dict(rtol=x * 1e-6), "rtol"),
        (lambda x: dict(atol={"a": 1e-6, "b": x * 1e-6}, y0={"a": 1.0, "b": 2.0},
                        rhs=lambda t, y, k: jax.tree.map(lambda u: -k * u, y)),
         "atol['b']"),
    ],
    ids=["step-to", "constant-step", "fixed-dt0", "adaptive-dt0", "rtol", "atol-leaf"],
)
@pytest.mark.parametrize("mode", ["grad", "jvp"])
def test_differentiated_steps_are_refused_clearly(build, name, mode):
    """Tolerances and step sizes are constants of every derivative: the reverse-mode
    methods failed with equinox's "Unexpected tangent", the forward ones returned 0."""
    def f(x):
        return jax.tree.leaves(solve(**build(x)).ys)[-1][-1]

    with pytest.raises(TypeError, match=re.escape(f"`{name}` depends on what is being "
                                                  "differentiated") + ".*stop_gradient"):
        if mode == "grad":
            jax.grad(f)(0.25)
        else:
            jax.jvp(f, (0.25,), (1.0,))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rtol=jnp.array([1e-6, 1e-8])), r"`rtol` must be a scalar, got shape \(2,\).*"
         "`atol` may be given per component"),
        (dict(atol=jnp.array([1e-6, 1e-8, 1e-8])), r"`atol` has shape \(3,\), which does not "
         r"broadcast to the shape \(2,\) of `y0`"),
        (dict(atol={"a": 1e-6}), "`atol` must be a scalar, an array that broadcasts to `y0`"),
        (dict(y0={"a": Y0, "b": 1.0}, atol=jnp.array([1e-6, 1e-8, 1e-8]),
              rhs=lambda t, y, k: jax.tree.map(lambda u: -k * u, y)),
         "or a pytree with the structure of `y0`"),
        (dict(y0={"a": Y0, "b": 1.0}, atol={"a": jnp.ones(3), "b": 1e-6},
              rhs=lambda t, y, k: jax.tree.map(lambda u: -k * u, y)),
         r"`atol\['a'\]` has shape \(3,\).*`y0\['a'\]`"),
        (dict(atol=np.array([1e-6, -1e-8])), r"atol\[1\]=-1e-08 \(component 1 of the "
         r"flattened state\)"),
        (dict(rtol=0.0, atol=[1e-6, 0.0]), r"not both zero; got rtol=0.0, atol\[1\]=0.0"),
        (dict(atol=[1e-6, 1e-6j]), "`atol` must be real"),
        (dict(y0={"a": Y0, "b": 1.0}, atol={"a": np.array([1e-6, np.nan]), "b": 1e-6},
              rhs=lambda t, y, k: jax.tree.map(lambda u: -k * u, y)),
         r"`atol\['a'\]` must be finite and non-negative; got nan at index \(1,\)"),
    ],
    ids=["vector-rtol", "atol-shape", "atol-tree-for-array", "array-atol-for-tree",
         "atol-leaf-shape", "negative-component", "zero-component", "complex-component",
         "nan-in-a-leaf"],
)
def test_per_component_tolerances_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        solve(**kwargs)


@pytest.mark.parametrize("max_steps", [0, -3, 2.5, True, "10"])
def test_bad_max_steps(max_steps):
    with pytest.raises(ValueError, match="`max_steps` must be a positive integer"):
        solve(max_steps=max_steps)


def test_max_steps_as_numpy_or_jax_integer():
    """A NumPy or concrete JAX integer is a valid count (it said "got JitTracer");
    a traced one cannot size buffers, and the message says so."""
    for max_steps in (np.int64(64), jnp.int32(64)):
        assert solve(max_steps=max_steps).result == ja.RESULTS.successful
    with pytest.raises(ValueError, match="`max_steps` must be a Python int: it sets the size"):
        jax.jit(lambda m: solve(max_steps=m).ys)(64)


def test_python_float_nan_in_args_is_named():
    """A Python float in `args` is a constant of the compiled solve; a NaN one made equinox
    fail with a message about closure conversion."""
    with pytest.raises(ValueError, match=r"`args\['k'\]` is a Python float NaN"):
        solve(args={"k": float("nan")}, rhs=lambda t, y, a: -a["k"] * y)


def test_values_that_do_not_fit_the_dtype_are_named():
    """Times and tolerances take `y0`'s dtype; a value that overflows or underflows there
    was reported as the number it became (``t1=inf``, ``rtol=0.0``)."""
    with pytest.raises(ValueError, match=r"`t1` = 100000 does not fit the solve's dtype "
                                         r"float16 .*it became inf"):
        solve(y0=jnp.ones(1, jnp.float16), t1=1e5)
    with pytest.raises(ValueError, match=r"`rtol` = 1e-50 does not fit .* float32"):
        solve(y0=jnp.ones(1, jnp.float32), rtol=1e-50, atol=0.0)


def test_save_times_computed_from_the_ends_may_round_past_them():
    """``t0 + (t1 - t0) * s`` lands a few ulps past ``t1`` (t0 = 5, t1 = 1e-5): such a time
    is ``t1`` (it was refused as outside [t0, t1]), eagerly and under jit."""
    t0, t1 = 5.0, 1e-5
    ts = t0 + (t1 - t0) * jnp.array([0.0, 0.3, 1.0])
    assert float(ts[-1]) != t1
    sol = solve(t0=t0, t1=t1, saveat=ts)
    np.testing.assert_allclose(sol.ys[-1], Y0 * np.exp(-0.5 * (t1 - t0)), rtol=1e-5)
    assert jax.jit(lambda ts: solve(t0=t0, t1=t1, saveat=ts).result)(ts) == \
        ja.RESULTS.successful


def test_float32_times_either_side_of_the_ends_are_the_ends():
    """float32's 4.7 lies 0.4 of its ulps below a float64 ``t1 = 4.7`` (4.8's above 4.8):
    either is ``t1`` (a user's acceptance test found the one below evaluated 1e-6 off),
    and keeps its time derivative ``f(t1, y(t1))``; other times near the ends stay."""
    for t1 in (4.7, 4.8):
        ts = np.array([0.0, 1.0, t1], np.float32)
        assert (float(ts[-1]) < t1) == (t1 == 4.7)
        sol = solve(t1=t1, saveat=ts)
        np.testing.assert_array_equal(sol.ys[-1], solve(t1=t1).ys[-1])
    # Only the ends' own rounding, not 16 ulps of the larger end: at t1 = 2e3 that is 4e-3
    # in float32, and a save at 2e-3 came back as y0 (another acceptance test: t1 = 1e5).
    early = solve(t1=2e3, saveat=np.array([2e-3, 1.0], np.float32), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(early.ys[0], Y0 * np.exp(-0.5 * float(np.float32(2e-3))), rtol=1e-7)
    below = jnp.asarray([0.0, 1.0, 4.7], jnp.float32)
    slope = jax.grad(lambda ts: solve(t1=4.7, saveat=ts).ys[-1, 0])(below)
    end = solve(t1=4.7).ys[-1, 0]
    np.testing.assert_allclose(slope[-1], -0.5 * end, rtol=1e-6)


def test_warnings_point_at_the_callers_line():
    """A warning of `solve` is attributed to the line that called it: a fixed stacklevel
    pointed into equinox's `filter_jit` (``equinox/_jit.py:55``) for every warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ja.solve(lambda t, y, a: -y, jnp.ones(2, jnp.float32), 0.0, 1.0, rtol=1e-9, atol=1e-9)
    (warning,) = [w for w in caught if "below the resolution" in str(w.message)]
    assert warning.filename == __file__, warning.filename


def test_replay_on_grid_takes_a_mixed_precision_state():
    """A float32 leaf and a float64 leaf: the replay widens the state as `solve` does, `rhs`
    sees each leaf in its own dtype and each comes back in its own (the scan failed on the
    carry's dtypes; a JAX user's acceptance test).  It agrees with the solve to the float32
    leaf's precision, not to round-off: the two round their stages to float32 at slightly
    different float64 values."""
    state = {"b": jnp.array([1.0, 2.0], jnp.float32), "s": jnp.array(0.3)}

    def rhs(t, y, k):
        return {"b": -k * y["b"].astype(jnp.float64), "s": y["b"][0].astype(jnp.float64)
                - 0.5 * y["s"]}

    def solved(k):
        return ja.solve(rhs, state, 0.0, 1.0, k, rtol=1e-10, atol=1e-10).ys

    with warnings.catch_warnings(), jax.numpy_dtype_promotion("standard"):
        warnings.simplefilter("ignore")  # rhs returns float64 for the float32 leaf
        sol = ja.solve(rhs, state, 0.0, 1.0, 1.3, rtol=1e-10, atol=1e-10)
        replayed = ja.replay_on_grid(rhs, ja.Dopri5(), state, 1.3, sol.steps)[0]
        assert replayed["b"].dtype == jnp.float32 and replayed["s"].dtype == jnp.float64
        np.testing.assert_allclose(replayed["s"], sol.ys["s"], rtol=1e-6)
        np.testing.assert_allclose(
            jax.grad(lambda k: ja.replay_on_grid(rhs, ja.Dopri5(), state, k,
                                                 sol.steps)[0]["s"][0])(1.3),
            jax.grad(lambda k: solved(k)["s"][0])(1.3), rtol=1e-5)


def test_replay_on_grid_names_what_it_replays():
    with pytest.raises(TypeError, match="replays explicit Runge–Kutta methods; got Rodas5"):
        ja.replay_on_grid(decay, ja.Rodas5(), Y0, K, jnp.array([0.0, 1.0]))


def test_dt0_with_a_given_step_grid_is_refused():
    """`dt0` beside `ConstantStep`/`StepTo` was silently ignored."""
    with pytest.raises(ValueError, match=r"`dt0` is not used with `controller=ConstantStep"):
        solve(solver=ja.RK4(), controller=ja.ConstantStep(0.1), dt0=0.5)


def test_step_to_takes_a_list_as_saveat_does():
    sol = solve(solver=ja.RK4(), controller=ja.StepTo([0.0, 0.5, 1.0]))
    np.testing.assert_allclose(sol.steps[:3], [0.0, 0.5, 1.0])


def test_unstable_fixed_step_says_so():
    """Heun with a step past its stability limit (y' = -50 y, h = 0.1): the message names
    the fixed step, not "shrinking the step did not help"."""
    sol = solve(args=jnp.asarray(50.0), solver=ja.Heun(), controller=ja.ConstantStep(0.1),
                t1=100.0, throw=False)
    assert sol.result == ja.RESULTS.nonfinite_fixed_step
    assert "too large for the method's stability" in ja.RESULTS[sol.result]


def test_fixed_step_solver_needs_a_step():
    with pytest.raises(ValueError, match=r"`solver=RK4\(\)` has no error estimate.*`dt0=`"):
        solve(solver=ja.RK4())


@pytest.mark.parametrize(
    "controller", [ja.IController(), ja.PIController(), ja.OdeintController()],
    ids=["I", "PI", "Odeint"],
)
def test_adaptive_controller_needs_adaptive_solver(controller):
    name = type(controller).__name__
    with pytest.raises(ValueError, match=rf"`controller={name}\(\)` needs an error estimate"):
        solve(solver=ja.Euler(), controller=controller)


@pytest.mark.parametrize(
    "ts",
    [[0.1, 0.3, 0.5, 1.0], [0.0, 0.3, 0.5, 0.9], [0.0, 0.6, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0],
     [0.0, float("nan"), 0.5, 1.0]],
    ids=["not-at-t0", "not-at-t1", "unsorted", "repeated", "nan"],
)
@pytest.mark.parametrize("kind", ["list", "numpy", "jax"])
def test_bad_step_to_grid(ts, kind):
    """Times known before `jit` (a list of NumPy numbers, a NumPy or a concrete JAX array)
    raise a `ValueError` there; they reached the jitted solve as traced arrays (a list as
    tracers that NumPy could not read) and failed only at run time."""
    grid = {"list": list(np.asarray(ts)), "numpy": np.asarray(ts), "jax": jnp.asarray(ts)}[kind]
    with pytest.raises(ValueError, match="`StepTo.ts` must start at t0, end at"):
        solve(solver=ja.RK4(), controller=ja.StepTo(grid))


def test_traced_bad_step_to_grid_raises_at_run_time():
    run = eqx.filter_jit(lambda ts: solve(solver=ja.RK4(), controller=ja.StepTo(ts)).ys)
    np.testing.assert_array_equal(run(jnp.array([0.0, 0.5, 0.6, 1.0])),
                                  solve(solver=ja.RK4(),
                                        controller=ja.StepTo(list(np.array([0.0, 0.5, 0.6,
                                                                            1.0])))).ys)
    with pytest.raises(eqx.EquinoxRuntimeError, match="`StepTo.ts` must start at t0, end at"):
        jax.block_until_ready(run(jnp.array([0.0, 0.6, 0.5, 1.0])))


@pytest.mark.parametrize("ts", [[1.0], [[0.0, 1.0]]], ids=["single", "2-D"])
def test_step_to_grid_shape(ts):
    with pytest.raises(ValueError, match="`StepTo.ts` must be a 1-D array of at least two"):
        solve(solver=ja.RK4(), controller=ja.StepTo(jnp.asarray(ts)))


@pytest.mark.parametrize("dt", [0.0, np.inf, np.nan])
def test_bad_constant_step(dt):
    with pytest.raises(ValueError, match="`ConstantStep.dt` must be finite and non-zero"):
        solve(solver=ja.RK4(), controller=ja.ConstantStep(dt))
    with pytest.raises(ValueError, match="`dt0` must be finite and non-zero"):
        solve(solver=ja.RK4(), dt0=dt)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rhs=3.0), "`rhs` must be callable"),
        (dict(solver="Dopri5"), "`solver` must be a jaxadjoint solver"),
        (dict(controller="I"), "`controller` must be a jaxadjoint controller"),
        (dict(sensitivity="adjoint"), "`sensitivity` must be a jaxadjoint sensitivity method"),
        (dict(integrand=1.0), "`integrand` must be callable"),
    ],
    ids=["rhs", "solver", "controller", "sensitivity", "integrand"],
)
def test_wrong_types(kwargs, match):
    with pytest.raises(TypeError, match=match):
        solve(**kwargs)


def test_bad_integrand_output():
    with pytest.raises(ValueError, match="`integrand` must return floating arrays"):
        solve(integrand=lambda t, y, args: jnp.zeros(2, jnp.int32))
    with pytest.raises(ValueError, match="`integrand` returned no arrays"):
        solve(integrand=lambda t, y, args: {})


# ------------------------------------------------------------------------------------------
# Run-time errors of traced values, through the shared compiled sweep function (so that
# nothing new compiles: its tolerances, times and save times are traced).

SOLVER = ja.Dopri5()
DIFF = sc.make_inputs(sc.layout_for(SOLVER))


def run(t0=0.1, t1=2.1, saveat=(0.4, 0.7, 1.9), diff=DIFF, **kwargs):
    return sc.run(diff, t0, t1, saveat, sc.sweep_kwargs(SOLVER, **kwargs))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rtol=-1.0), "`rtol` and `atol` must be finite and non-negative"),
        (dict(rtol=0.0, atol=0.0), "`rtol` and `atol` must be finite and non-negative"),
        (dict(t0=1.0, t1=1.0, saveat=(1.0, 1.0, 1.0)), "`t1` must differ from `t0`"),
        (dict(t1=np.inf), "`t0` and `t1` must be finite"),
        (dict(saveat=(0.4, 1.9, 0.7)), "`saveat` must hold finite times inside"),
        (dict(saveat=(0.4, 0.7, 2.5)), "`saveat` must hold finite times inside"),
        (dict(dt0=np.nan), "`dt0` must be finite and non-zero"),
        (dict(dt0=0.0), "`dt0` must be finite and non-zero"),
    ],
    ids=["negative-rtol", "zero-tolerances", "equal-times", "inf-time", "unsorted-saveat",
         "saveat-outside", "nan-dt0", "zero-dt0"],
)
def test_traced_bad_values_raise_at_run_time(kwargs, match):
    with pytest.raises(eqx.EquinoxRuntimeError, match=match):
        jax.block_until_ready(run(**kwargs))


def test_traced_zero_constant_step_raises_at_run_time():
    solver = ja.Euler()
    diff = sc.make_inputs(sc.layout_for(solver))
    kwargs = sc.sweep_kwargs(solver, dt=0.0)
    with pytest.raises(eqx.EquinoxRuntimeError, match="`ConstantStep.dt` must be finite"):
        jax.block_until_ready(sc.run(diff, *sc.FORWARD, kwargs))


# ------------------------------------------------------------------------------------------
# throw=False: failures are reported in `sol.result`; differentiating them raises.


@eqx.filter_jit
def _solve_forward(diff, t1, rtol, dt0, throw):
    y0, args, rhs = diff
    return ja.solve(rhs, y0, 0.1, t1, args, solver=SOLVER, rtol=rtol, atol=rtol, dt0=dt0,
                    max_steps=sc.MAX_STEPS, throw=throw)


def solve_no_throw(diff, t1, rtol, dt0=0.05, throw=False):
    """Forward solve (``throw=False`` by default); values as arrays so that they are traced."""
    dt0 = None if dt0 is None else jnp.asarray(dt0)
    return _solve_forward(diff, jnp.asarray(t1), jnp.asarray(rtol), dt0, throw)


def with_nan(diff):
    """The sweep problem with a NaN in the forcing: the rhs returns NaN."""
    y0, args, rhs = diff
    return y0, args, eqx.tree_at(lambda r: r.b, rhs, jnp.array([jnp.nan, 0.0, 0.0]))


def test_results_without_throwing():
    sol = solve_no_throw(DIFF, 2.1, 1e-7)
    assert sol.result == ja.RESULTS.successful
    assert repr(sol.result).endswith("RESULTS<successful>")  # not an empty `RESULTS<>`
    sol = solve_no_throw(DIFF, 60.0, 1e-12)
    assert sol.result == ja.RESULTS.max_steps_reached
    assert int(sol.stats["num_steps"]) == sc.MAX_STEPS
    # Steps are recorded up to where the solve stopped; the rest is inf padding.
    steps = np.asarray(sol.steps)
    accepted = int(sol.stats["num_accepted_steps"])
    assert np.all(np.isfinite(steps[: accepted + 1])) and np.all(np.isinf(steps[accepted + 1:]))
    sol = solve_no_throw(with_nan(DIFF), 2.1, 1e-7)
    assert sol.result == ja.RESULTS.nonfinite
    assert int(sol.stats["num_accepted_steps"]) == 0


@pytest.mark.parametrize(
    "t1, rtol, dt0, expected",
    [
        (0.1, 1e-7, 0.05, "invalid_times"),  # t1 == t0
        (np.nan, 1e-7, 0.05, "invalid_times"),
        (2.1, -1.0, 0.05, "invalid_tolerances"),
        (2.1, np.nan, 0.05, "invalid_tolerances"),
        (2.1, 1e-7, 0.0, "invalid_first_step"),
        (np.nan, -1.0, 0.0, "invalid_times"),  # the first invalid input is reported
    ],
)
def test_traced_bad_values_without_throw_fail_through_result(t1, rtol, dt0, expected):
    """Inside `jit` with throw=False bad times, tolerances and first steps used to raise
    anyway; now the solve does not start and says why (one compiled program for all)."""
    sol = solve_no_throw(DIFF, t1, rtol, dt0)
    assert sol.result == getattr(ja.RESULTS, expected)
    assert int(sol.stats["num_steps"]) == 0
    # No state of a solve that did not start (it was y0).
    assert all(np.all(np.isnan(np.asarray(x))) for x in jax.tree.leaves(sol.ys))


@eqx.filter_jit
def _fixed_step_result(controller):
    return ja.solve(decay, Y0, 0.0, 1.0, K, solver=ja.RK4(), controller=controller,
                    throw=False).result


def test_traced_bad_controller_without_throw_fails_through_result():
    assert _fixed_step_result(ja.ConstantStep(jnp.asarray(0.1))) == ja.RESULTS.successful
    for dt in (0.0, np.nan):
        result = _fixed_step_result(ja.ConstantStep(jnp.asarray(dt)))
        assert result == ja.RESULTS.invalid_controller
    good, unsorted = jnp.array([0.0, 0.5, 0.6, 1.0]), jnp.array([0.0, 0.6, 0.5, 1.0])
    assert _fixed_step_result(ja.StepTo(good)) == ja.RESULTS.successful
    assert _fixed_step_result(ja.StepTo(unsorted)) == ja.RESULTS.invalid_controller
    assert _fixed_step_result(ja.StepTo(good.at[-1].set(0.9))) == ja.RESULTS.invalid_controller


def test_rhs_that_jax_cannot_trace_or_differentiate_is_named():
    y0 = jnp.ones(2)
    with pytest.raises(TypeError, match=r"calling `rhs\(t0, y0, args\)` failed.*jax.numpy"):
        ja.solve(lambda t, y, a: jnp.asarray(np.asarray(y)), y0, 0.0, 1.0, 1.0)

    def opaque(t, y, a):  # a host callback has no derivative rule
        return jax.pure_callback(lambda v: -np.asarray(v), jax.ShapeDtypeStruct(y.shape,
                                                                                 y.dtype), y)

    for solver in (ja.Rodas5(), ja.Kvaerno5()):
        with pytest.raises(ValueError, match=f"`{type(solver).__name__}` needs the Jacobian"):
            ja.solve(opaque, y0, 0.0, 1.0, 1.0, solver=solver)
    # An explicit solver needs no derivative to solve.
    assert np.isfinite(np.asarray(ja.solve(opaque, y0, 0.0, 1.0, 1.0).ys)).all()


def test_failures_raise_with_throw():
    with pytest.raises(eqx.EquinoxRuntimeError, match="reached `max_steps` before `t1`"):
        jax.block_until_ready(solve_no_throw(DIFF, 60.0, 1e-12, throw=True))
    with pytest.raises(eqx.EquinoxRuntimeError, match="produced NaN or Inf"):
        jax.block_until_ready(solve_no_throw(with_nan(DIFF), 2.1, 1e-7, throw=True))


def test_failures_raise_when_only_integers_are_read():
    """``throw=True`` under `jit`: a program that read only ``sol.stats`` of a solve out of
    ``max_steps`` got them without an error."""

    def record(k):
        sol = ja.solve(lambda t, y, k: -k * y, jnp.ones(2), 0.0, 10.0, k, max_steps=3,
                       rtol=1e-10, atol=1e-10)
        return sol.stats

    with pytest.raises(Exception, match="reached `max_steps` before `t1`"):
        jax.block_until_ready(jax.jit(record)(1.0))


def test_failure_under_grad_reports_its_cause():
    """With throw=True the forward pass's own message (here max_steps) reaches the user:
    the backward pass's 'failed solve was differentiated' check runs only with throw=False."""
    with pytest.raises(eqx.EquinoxRuntimeError, match="reached `max_steps` before `t1`"):
        jax.block_until_ready(run(t1=60.0, rtol=1e-12, atol=1e-12))


def test_nonfinite_at_t0_with_automatic_initial_step():
    """A regression test: f(t0, y0) = NaN made the automatic first step NaN, which is never
    'too small', so the solve used to run to max_steps and report the wrong cause."""
    sol = solve_no_throw(with_nan(DIFF), 2.1, 1e-7, dt0=None)
    assert sol.result == ja.RESULTS.nonfinite


def blow_up(t, y, args):
    """y' = y^2 from y(0) = 1: y = 1 / (1 - t) is singular at t = 1."""
    del t, args
    return y * y


def test_step_size_too_small_at_a_singularity():
    sol = ja.solve(blow_up, jnp.array([1.0]), 0.0, 2.0, rtol=1e-8, atol=1e-8, throw=False)
    assert sol.result == ja.RESULTS.step_size_too_small
    last = np.asarray(sol.steps)[int(sol.stats["num_accepted_steps"])]
    assert 0.99 < last < 1.01  # it stopped at the singularity
    # The message names the blow-up and says where to read the time it stopped at (an
    # epidemiologist's acceptance test: the error said "near the current time", no time).
    message = str(sol.result)
    assert "blows up in finite time" in message
    assert "`throw=False` and read `sol.steps`" in message


def test_differentiating_a_failed_solve_raises():
    kwargs = sc.sweep_kwargs(SOLVER, rtol=1e-12, atol=1e-12, throw=False)
    with pytest.raises(Exception, match="failed .* was differentiated"):
        jax.block_until_ready(sc.run(DIFF, 0.1, 60.0, (0.4, 0.7, 1.9), kwargs))


def test_a_refused_gradient_logs_no_callback_traceback(caplog):
    """JAX logs every exception of a pure callback with its traceback; for our refusals
    (a `GradientError`, whose whole message the raised error carries) that is dropped: a
    sampler that rejects failed points printed ten lines per point (a UQ tester's log)."""

    def loss(k):  # y' = 50 y^3 blows up at t = 0.01
        sol = ja.solve(lambda t, y, k: -k * y**3, jnp.ones(1), 0.0, 1.0, k, max_steps=16,
                       throw=False)
        return jnp.sum(sol.ys)

    with caplog.at_level("DEBUG"), pytest.raises(Exception, match="was differentiated"):
        jax.grad(loss)(-50.0)
    assert not [r for r in caplog.records if r.name == "jax._src.callback"]


@pytest.mark.parametrize("sensitivity", [ja.DiscreteAdjoint(), ja.ContinuousAdjoint()],
                         ids=["DiscreteAdjoint", "ContinuousAdjoint"])
@pytest.mark.parametrize("mode", ["jvp", "jacfwd", "hessian", "jit-hessian"])
def test_forward_mode_through_reverse_only_sensitivity(sensitivity, mode):
    """JAX cannot push tangents through a custom VJP (`jax.hessian` used to fail with a bare
    AssertionError from inside JAX): the error names the sensitivity and the alternative."""

    def loss(k):
        sol = ja.solve(lambda t, y, k: -k * y, jnp.ones(2), 0.0, 1.0, k,
                       sensitivity=sensitivity)
        return jnp.sum(sol.ys**2)

    transforms = {
        "jvp": lambda: jax.jvp(loss, (0.5,), (1.0,)),
        "jacfwd": lambda: jax.jacfwd(loss)(0.5),
        "hessian": lambda: jax.hessian(loss)(0.5),
        "jit-hessian": lambda: jax.jit(jax.hessian(loss))(0.5),
    }
    with pytest.raises(TypeError, match=r"reverse mode only.*DiscreteForward"):
        transforms[mode]()


@pytest.mark.parametrize("sensitivity", [ja.DiscreteAdjoint(), ja.ContinuousAdjoint()],
                         ids=["DiscreteAdjoint", "ContinuousAdjoint"])
@pytest.mark.parametrize("mode", ["jacrev-grad", "grad-grad", "jit-jacrev-grad"])
def test_reverse_over_reverse_mode_through_reverse_only_sensitivity(sensitivity, mode):
    """Second derivatives by reverse over reverse differentiate the hand-written reverse
    pass, which JAX cannot (it failed with "Linearization failed to produce known values"):
    the error says so and names the alternative."""

    def loss(k):
        sol = ja.solve(lambda t, y, k: -k * y, jnp.ones(2), 0.0, 1.0, k,
                       sensitivity=sensitivity)
        return jnp.sum(sol.ys**2)

    transforms = {
        "jacrev-grad": lambda: jax.jacrev(jax.grad(loss))(0.5),
        "grad-grad": lambda: jax.grad(lambda k: jax.grad(loss)(k) ** 2)(0.5),
        "jit-jacrev-grad": lambda: jax.jit(jax.jacrev(jax.grad(loss)))(0.5),
    }
    with pytest.raises(TypeError, match=r"first derivatives only.*DiscreteForward"):
        transforms[mode]()


@pytest.mark.parametrize("sensitivity", [ja.DiscreteAdjoint(), ja.ContinuousAdjoint()],
                         ids=["DiscreteAdjoint", "ContinuousAdjoint"])
@pytest.mark.parametrize("mode", ["jacfwd-jit-grad", "jvp-jit-grad", "jacrev-jit-grad"])
def test_second_derivative_through_a_jitted_gradient_is_refused(sensitivity, mode):
    """A `jax.jit` around the gradient hides the reverse sweep from the solve's trace-time
    check, so JAX differentiated the library's own code and failed deep inside it ("Pure
    callbacks do not support JVP", "Linearization failed to produce known values"). The
    step loop now refuses, saying why and what to use; `DiscreteForward` still works."""

    def loss(k, sensitivity=sensitivity):
        sol = ja.solve(lambda t, y, k: -k * y, jnp.ones(2), 0.0, 1.0, k,
                       sensitivity=sensitivity)
        return jnp.sum(sol.ys**2)

    transforms = {
        "jacfwd-jit-grad": lambda f: jax.jacfwd(jax.jit(jax.grad(f)))(0.5),
        "jvp-jit-grad": lambda f: jax.jvp(jax.jit(jax.grad(f)), (0.5,), (1.0,))[1],
        "jacrev-jit-grad": lambda f: jax.jacrev(jax.jit(jax.grad(f)))(0.5),
    }
    with pytest.raises(TypeError, match=r"step loop.*jax.jit.*DiscreteForward"):
        transforms[mode](loss)
    if isinstance(sensitivity, ja.ContinuousAdjoint):
        return  # DiscreteForward once is enough
    # d2/dk2 of 2 exp(-2k) (y0 = (1, 1), t = 1): 8 exp(-2k), to the solve's tolerance.
    second = transforms[mode](functools.partial(loss, sensitivity=ja.DiscreteForward()))
    assert jnp.allclose(second, 8 * jnp.exp(-1.0), rtol=1e-4)


@pytest.mark.parametrize("sensitivity", [ja.DiscreteAdjoint(), ja.DiscreteForward(),
                                         ja.ContinuousAdjoint(), ja.FiniteDifferences()],
                         ids=["DiscreteAdjoint", "DiscreteForward", "ContinuousAdjoint",
                              "FiniteDifferences"])
def test_jitted_gradient_of_a_linear_loss_of_a_failed_solve_raises(sensitivity):
    """`jax.jit(jax.grad(loss))` with `loss` linear in `sol.ys`: the gradient never reads
    the saves' values, so XLA dropped the forward pass's check (`throw=True`) and zeros
    came back.  The derivative now checks too, with the failure's own message."""

    def loss(k):
        sol = ja.solve(lambda t, y, k: -k * y, jnp.ones(2), 0.0, 10.0, k, rtol=1e-10,
                       atol=1e-10, max_steps=5, sensitivity=sensitivity)
        return jnp.sum(sol.ys)

    with pytest.raises(Exception, match="reached `max_steps` before `t1`"):
        jax.block_until_ready(jax.jit(jax.grad(loss))(0.5))


def test_a_failed_adjoint_solve_names_itself():
    """Float32 Robertson with Rodas5: the forward solve succeeds in 23 steps, the
    continuous adjoint's backward solve does not; the error blamed the forward solve
    ("explicit Runge-Kutta methods need tiny steps")."""

    def robertson(t, y, k):
        return jnp.stack([-k[0] * y[0] + k[2] * y[1] * y[2],
                          k[0] * y[0] - k[1] * y[1] ** 2 - k[2] * y[1] * y[2],
                          k[1] * y[1] ** 2])

    k = jnp.array([0.04, 3e7, 1e4], jnp.float32)
    y0 = jnp.array([1.0, 0.0, 0.0], jnp.float32)

    def final(k):
        return ja.solve(robertson, y0, 0.0, 40.0, k, solver=ja.Rodas5(), rtol=1e-4,
                        atol=1e-7, sensitivity=ja.ContinuousAdjoint()).ys[-1, 0]

    assert np.isfinite(float(final(k)))
    with pytest.raises(Exception, match=r"backward \(adjoint\) solve of `ContinuousAdjoint`"):
        jax.block_until_ready(jax.jit(jax.grad(final))(k))


@pytest.mark.parametrize("sensitivity", [ja.DiscreteAdjoint(), ja.DiscreteForward()],
                         ids=["DiscreteAdjoint", "DiscreteForward"])
def test_a_failed_lane_of_a_batch_is_named(sensitivity):
    """``throw=False`` under `jax.vmap`: lanes 2 and 3 of 4 exhaust ``max_steps`` and the
    loss masks them out.  The gradient still raises, and its message now says which solve
    of the batch failed first, how many did, and why (it said none of it: a user with a bad
    sample in a batch of 256 could not find it; an acceptance test)."""
    t1s = jnp.array([1.0, 1.0, 50.0, 50.0])

    def loss(k):
        def one(t1):
            return ja.solve(lambda t, y, k: -k * y, jnp.ones(2), 0.0, t1, k, max_steps=8,
                            throw=False, sensitivity=sensitivity).ys

        ys = jax.vmap(one)(t1s)
        return jnp.sum(jnp.where(jnp.isfinite(ys), ys, 0.0))

    with pytest.raises(Exception, match=r"(?s)failed .* was differentiated.*The failure: The "
                                        r"solve reached `max_steps`.*this is solve 2 of a "
                                        r"batch of shape \(4,\); 2 of its solves failed"):
        jax.block_until_ready(jax.jit(jax.grad(loss))(0.5))


def _failed_solve_loss(sensitivity):
    """A loss whose solve exhausts ``max_steps`` (``throw=False``: failure via result)."""

    def loss(k):
        sol = ja.solve(lambda t, y, k: -k * y, jnp.ones(2), 0.0, 10.0, k, rtol=1e-10,
                       atol=1e-10, max_steps=5, throw=False, sensitivity=sensitivity)
        return jnp.sum(sol.ys**2)

    return loss


@pytest.mark.parametrize("sensitivity", [ja.DiscreteForward(), ja.ForwardSensitivity(),
                                         ja.FiniteDifferences()],
                         ids=["DiscreteForward", "ForwardSensitivity", "FiniteDifferences"])
@pytest.mark.parametrize("transform", [jax.grad, jax.jacfwd], ids=["grad", "jacfwd"])
def test_forward_mode_methods_refuse_a_failed_solve(sensitivity, transform):
    """The forward-mode methods used to return 0 (DiscreteForward's gradient) or NaN
    silently; like `DiscreteAdjoint` they now raise, while the value keeps its result."""
    loss = _failed_solve_loss(sensitivity)
    assert not np.isfinite(float(loss(0.5)))  # the primal alone is no error
    with pytest.raises(Exception, match="failed .* was differentiated"):
        jax.block_until_ready(transform(loss)(0.5))


def test_a_nan_jacobian_fails_a_stiff_solve_with_a_message_that_names_it():
    """rhs is finite, J = d rhs / dy is NaN at y = 2 (0 * sqrt'(0)): no step size cures
    I - gamma h J; the failure says that the Jacobian may be the cause."""

    def rhs(t, y, args):
        return -y + 0.0 * jnp.sqrt(jnp.abs(y - 2.0))

    sol = ja.solve(rhs, jnp.full(1, 2.0), 0.0, 1.0, solver=ja.Rodas5(), throw=False)
    assert sol.result == ja.RESULTS.nonfinite
    assert "Jacobian" in ja.RESULTS[sol.result]


def test_precision_surprises_warn():
    """A float32 `y0` with an `rhs` that returns float64 (parameters made under x64) solves
    in float32, silently before; and an `rtol` below float32's resolution only adds
    round-off.  Both warn; a float64 solve at the same `rtol` does not."""
    y0 = jnp.ones(1, jnp.float32)
    # (The suite promotes strictly; users' programs promote float32 * float64 to float64.)
    with jax.numpy_dtype_promotion("standard"), pytest.warns(
            UserWarning, match="the solve runs in float32, the precision of `y0`"):
        ja.solve(lambda t, y, k: -k * y, y0, 0.0, 1.0, jnp.asarray(0.5, jnp.float64))
    with pytest.warns(UserWarning, match=r"rtol=1e-10 is below the resolution.*Loosen "
                      r"rtol, or solve in float64 \(jax.config.update\(\"jax_enable_x64\", "
                      r"True\) at the start, and a float64 `y0`\)\."):
        ja.solve(lambda t, y, k: -k * y, y0, 0.0, 1.0, 0.5, rtol=1e-10, atol=1e-10)
    # In float64 it does not suggest float64.
    with pytest.warns(UserWarning, match=r"rtol=1e-20 is below the resolution.*Loosen "
                      r"rtol\.$"):
        ja.solve(lambda t, y, k: -k * y, jnp.ones(1), 0.0, 0.1, 0.5, rtol=1e-20, atol=1e-20,
                 max_steps=100_000, throw=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ja.solve(lambda t, y, k: -k * y, jnp.ones(1), 0.0, 1.0, 0.5, rtol=1e-10, atol=1e-10)
    # Leaves of two dtypes: the solve runs in the widest and returns each leaf in its own.
    mixed = {"u": y0, "v": jnp.ones(1)}
    with jax.numpy_dtype_promotion("standard"), pytest.warns(
            UserWarning, match=r"runs in float64 \(the widest dtype of `y0`'s leaves\) but "
                               "`rhs` sees this leaf rounded to float32 at every evaluation"):
        sol = ja.solve(lambda t, y, k: jax.tree.map(lambda x: -k * x, y), mixed, 0.0, 1.0,
                       jnp.asarray(0.5, jnp.float64))
    assert sol.ys["u"].dtype == jnp.float32 and sol.ys["v"].dtype == jnp.float64
    # A weakly typed float64 leaf (`jnp.full`) makes a float64 solve too: the warning said
    # "runs in float32" (a user-acceptance find).
    weak = {"u": y0, "v": jnp.full((1,), 1.0)}
    with jax.numpy_dtype_promotion("standard"), pytest.warns(
            UserWarning, match=r"runs in float64 \(the widest dtype of `y0`'s leaves\)"):
        ja.solve(lambda t, y, k: jax.tree.map(lambda x: -k * x, y), weak, 0.0, 1.0,
                 jnp.asarray(0.5, jnp.float64))
