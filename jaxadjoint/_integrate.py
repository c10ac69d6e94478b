"""`solve`: the one entry point.  Validates, packs, dispatches to a sensitivity method."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.flatten_util import ravel_pytree

from . import _validation as check
from ._adjoint import DiscreteAdjoint
from ._controllers import AbstractController, ConstantStep, IController, StepTo, Tolerances
from ._dense import DenseInterpolation
from ._events import Event, as_events, warn_of_roots_at_start
from ._fingerprint import fingerprint
from ._saveat import SaveAt, as_saveat
from ._segments import check_events, checked_condition, solve_events
from ._sensitivity_base import AbstractSensitivity
from ._solution import Solution
from ._stiff_quadrature import solve_with_quadrature_state, uses_quadrature_state
from ._system import Problem, System
from ._time_switches import warn_if_switching_in_time
from .solvers._base import AbstractSolver
from .solvers._explicit import AbstractERK, Dopri5


def _split_params(tree: Any) -> tuple[Any, Any, Any]:
    """(floating arrays, other arrays, non-arrays) of ``tree``."""
    params, rest = eqx.partition(tree, eqx.is_inexact_array)
    aux, static = eqx.partition(rest, eqx.is_array)
    return params, aux, static


def _closure_convert(fn: Callable, t0: Any, y0: Any, args: Any) -> Callable:
    """``fn`` (``rhs``, ``integrand``, an event's condition) with every array it closes over
    made an input (`equinox.filter_closure_convert`), also the arrays that a function inside
    ``args`` closes over.

    Equinox skips tracing a plain function that closes over nothing, which is right for
    the function itself but misses a traced array held by a callable in ``args``
    (``args={"u": lambda t: spline.evaluate(t / T)}`` under `jax.grad` in ``T``): it
    reached the solve's custom VJP as a closed-over value, and JAX refused with its
    `CustomVJPException`.  A closure around ``fn`` makes Equinox trace the call, so those
    arrays become inputs like the others.
    """
    if any(callable(leaf) for leaf in jax.tree.leaves(eqx.filter(args, eqx.is_array,
                                                                  inverse=True))):
        inner = fn
        fn = lambda t, y, args: inner(t, y, args)  # noqa: E731 (a closure, on purpose)
    return eqx.filter_closure_convert(fn, t0, y0, args)


def _default_controller(
    solver: AbstractSolver, controller: AbstractController | None, dt0: Any
) -> AbstractController:
    name = type(solver).__name__
    if controller is None:
        if solver.adaptive:
            return IController()
        if dt0 is None:
            raise ValueError(
                f"`solver={name}()` has no error estimate, so it cannot choose its steps: "
                "pass `dt0=` (constant steps) or `controller=ConstantStep(dt)`/`StepTo(ts)`"
            )
        return ConstantStep(dt0)
    if not isinstance(controller, AbstractController):
        raise TypeError(f"`controller` must be a jaxadjoint controller, got {controller!r}")
    if controller.adaptive and not solver.adaptive:
        raise ValueError(
            f"`controller={type(controller).__name__}()` needs an error estimate but "
            f"`solver={name}()` has none; use an embedded pair (e.g. Dopri5) or "
            "`ConstantStep`/`StepTo`"
        )
    return controller


def _has_dense_output(solver: AbstractSolver) -> bool:
    """Whether a stiff solver has a continuous extension (Rosenbrock tableaus with one,
    and every implicit method: cubic Hermite)."""
    from .solvers._esdirk import AbstractESDIRK

    if isinstance(solver, AbstractESDIRK):
        return True
    return getattr(solver, "tableau", None) is not None and solver.tableau.dense is not None


def _check_family(
    solver: AbstractSolver, saveat: SaveAt, sensitivity: AbstractSensitivity, integrand: Any
) -> None:
    """What a stiff solver does not support yet: a clear error, not a wrong answer.

    Explicit methods support everything.  Rosenbrock and implicit (ESDIRK) methods
    interpolate saves on their continuous extension (a method without one needs saves
    on the grid) and integrate an integrand as extra state (`_stiff_quadrature`; not with
    events or dense output); they work with every
    sensitivity method (`ForwardSensitivity` and `ContinuousAdjoint` through
    `_block_solve`).
    """
    if isinstance(solver, AbstractERK):
        return
    name = f"`solver={type(solver).__name__}()`"
    if integrand is not None:
        # (Without events or dense output, `solve` integrates it as extra state.)
        raise ValueError(f"`integrand` is not supported with {name} together with events "
                         "or `SaveAt(dense=True)` yet: add the integral as an extra state "
                         "component")
    if not _has_dense_output(solver):
        if saveat.dense:
            raise ValueError(f"`SaveAt(dense=True)` is not supported with {name} (no dense "
                             "output): pass the times you need as "
                             "`SaveAt(ts, land_on_ts=True)`")
        if saveat.ts is not None and not saveat.land_on_ts:
            raise ValueError(f"{name} has no dense output, so save times must be step "
                             "nodes: pass `saveat=jaxadjoint.SaveAt(ts=ts, land_on_ts=True)`")


def _check_controller(controller: AbstractController, t0: Array, t1: Array, dtype: Any,
                      throw: bool) -> Any:
    """Concrete inputs raise here; traced ones at run time with ``throw``, else the solve
    reports `RESULTS.invalid_controller` (`AbstractController.inputs_valid`)."""
    if isinstance(controller, ConstantStep):
        dt = check.as_real_array("controller.dt", controller.dt, dtype)
        check.check_scalar("controller.dt", dt)
        return ConstantStep(check.check_step("ConstantStep.dt", dt, throw))
    if isinstance(controller, StepTo):
        ts = controller.ts
        if isinstance(ts, (list, tuple)):
            ts = np.asarray(ts)  # as `saveat` takes lists
        ts = check.as_real_array("controller.ts", ts, dtype)
        check.check_step_grid_shape(ts)
        valid = check.step_grid_valid(ts, t0, t1)
        if all(check.is_concrete(x) for x in (ts, t0, t1)):
            if not bool(valid):
                raise ValueError(check.STEP_GRID_RULE)
        elif throw:
            ts = eqx.error_if(ts, ~valid, check.STEP_GRID_RULE)
        return StepTo(jnp.asarray(ts))
    return controller


def solve(
    rhs: Callable[[Array, Any, Any], Any],
    y0: Any,
    t0: float | Array,
    t1: float | Array,
    args: Any = None,
    *,
    solver: AbstractSolver = Dopri5(),
    rtol: float | Array = 1e-6,
    atol: float | Array = 1e-6,
    dt0: float | Array | None = None,
    controller: AbstractController | None = None,
    saveat: SaveAt | Array | None = None,
    sensitivity: AbstractSensitivity = DiscreteAdjoint(),
    integrand: Callable[[Array, Any, Any], Any] | None = None,
    max_steps: int = 4096,
    throw: bool = True,
    events: Event | list[Event] | None = None,
    max_events: int = 16,
) -> Solution:
    """Solve ``dy/dt = rhs(t, y, args)`` from ``t0`` to ``t1`` with a Runge–Kutta method.

    Differentiable with `jax.grad`, `jax.jacrev`, `jax.vmap`, `jax.jit` in any
    composition, with respect to ``y0``, ``args``, arrays that ``rhs``/``integrand``
    close over (an `equinox.Module` right-hand side included), ``t0``, ``t1`` and
    ``saveat``.  With the default `DiscreteAdjoint`, gradients are the exact
    derivative of the computed discrete solution on its recorded step grid.

    Arguments:
        rhs: ``rhs(t, y, args)``, returning ``dy/dt`` with the structure of ``y``.
        y0: initial state, a pytree of real floating arrays.
        t0, t1: the interval; ``t1 < t0`` integrates backwards in time.
        args: a pytree passed to ``rhs`` and ``integrand``.
        solver: the method: explicit (`Dopri5`, `Tsit5`, `CashKarp`, ...) or, for stiff
            problems, Rosenbrock (`Rodas5`, `Rodas4`, `Rodas3`) or implicit (`Kvaerno5`).
        rtol, atol: local error tolerances of adaptive controllers: the error test weighs
            component ``i`` by ``atol_i + rtol |y_i|``.  ``rtol`` is a scalar; ``atol`` a
            scalar or one per component: an array that broadcasts to ``y0`` (when ``y0``
            is one array) or a pytree of ``y0``'s structure (a scalar or array per leaf).
        dt0: first step; chosen automatically when ``None`` (adaptive controllers), the
            constant step for fixed-step solvers without a ``controller``.  Its sign is
            ignored (as ``ConstantStep``'s): ``t0`` and ``t1`` set the direction.
        controller: `IController` (default for adaptive solvers), `PIController`,
            `PredictiveController`, `OdeintController` (each takes ``dtmax=``, the longest
            step), `ConstantStep` or `StepTo`.
        saveat: 1-D array of times at which to return the state, evaluated on the
            solver's continuous extension (the steps do not depend on them), or a
            `SaveAt` (``land_on_ts=True``: steps end exactly on the save times;
            ``dense=True``: ``sol.evaluate(t)`` at any time); ``None`` returns only
            ``y(t1)``.
        sensitivity: how derivatives are computed (`DiscreteAdjoint` by default).
        integrand: ``R(t, y, args)``; ``sol.integral`` is ``int_{t0}^{t1} R dt`` by the
            solver's own quadrature, differentiable like the states.
        max_steps: the most steps (accepted and rejected) the solve may take; buffers
            of this length are preallocated.
        throw: raise a runtime error when the solve fails; with ``False`` inspect
            ``sol.result`` instead.
        events: an `Event` or a list of them: zero crossings of ``cond(t, y, args)``,
            located on the continuous extension of the step where the sign changes.  The
            earliest crossing wins; a terminal event (no ``jump``) ends the solve there
            (``sol.ts``/``sol.ys`` with ``saveat=None`` are then the event time and state,
            and saves after it are NaN), an event with a ``jump`` restarts the solve from
            ``jump(t*, y(t*), args)``, and one with ``terminal=False`` and no jump is
            recorded and restarts it from ``y(t*)``.  ``sol.events`` says which fired,
            when, and how many times.  Event times and states are differentiated exactly
            (the implicit function theorem on the computed interpolant).
        max_events: with jumps (or recorded events), the most the solve may take
            (`RESULTS.max_events_reached` after that); the solve runs ``max_events + 1``
            segments, each with buffers of ``max_steps``.

    Returns:
        A `Solution`.
    """
    saveat = as_saveat(saveat)
    _check_concrete_save_times(saveat, t0, t1, y0)
    controller = _check_concrete_step_grid(controller, t0, t1)
    check.check_steps_not_differentiated(
        {"rtol": rtol, "atol": atol, "dt0": dt0, "controller": controller})
    max_steps = check.as_python_int("max_steps", max_steps)
    max_events = check.as_python_int("max_events", max_events)
    if events is None:
        _check_steps_fit(solver, controller, dt0, t0, t1, max_steps)
    check.check_python_float_nan("args", args)
    events = as_events(events)
    check.check_not_differentiated_without_jit((y0, t0, t1, args, saveat, rhs, integrand))
    if uses_quadrature_state(solver, integrand, saveat, events):
        # Stiff solvers integrate the integral as extra state (`_stiff_quadrature`).
        return solve_with_quadrature_state(
            solve, rhs, integrand, y0, t0, t1, args, solver, saveat, controller, rtol=rtol,
            atol=atol, dt0=dt0, sensitivity=sensitivity, max_steps=max_steps, throw=throw,
        )
    if isinstance(sensitivity, AbstractSensitivity) and sensitivity.reverse_mode_only:
        # Before `jit`: inside it, an outer `jax.jvp` is invisible (it transforms the jaxpr).
        check.check_reverse_mode_only(
            f"{type(sensitivity).__name__}()", (y0, t0, t1, args, saveat, rhs, integrand)
        )
    # Called on concrete values, the solve hands every output back (`System.every_output_read`).
    # Not under `jit` with them: a closure over a traced value is no leaf of these, but
    # `jit` stages every operation (even on constants) as a tracer.
    outside_jit = not isinstance(jnp.zeros(()), jax.core.Tracer)
    eager = outside_jit and all(
        check.is_concrete(x) for x in jax.tree.leaves(
            (y0, t0, t1, args, saveat, rhs, integrand, rtol, atol, dt0, controller)))
    t0, t1, rtol, atol, dt0, controller = _numbers_as_arrays(y0, t0, t1, rtol, atol, dt0,
                                                             controller)
    if eager and events:
        warn_of_roots_at_start(events, t0, y0, args)
    # Outside `jit`, what the functions read from globals is part of the cache key (traced
    # at `t0` as the solve will have it: a Python int `t0` would give another jaxpr).
    reads = fingerprint(
        (rhs, integrand, *(f for e in events for f in (e.cond, e.jump))), t0, y0, args,
    ) if outside_jit else None
    return _jaxadjoint_solve(
        rhs, y0, t0, t1, args, solver, rtol, atol, dt0, controller, saveat, sensitivity,
        integrand, max_steps, throw, events, max_events, eager, reads,
    )


def _is_number(x: Any) -> bool:
    """A Python int or float (not a bool): a constant of the jitted `_jaxadjoint_solve`."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _numbers_as_arrays(y0: Any, t0: Any, t1: Any, rtol: Any, atol: Any, dt0: Any,
                       controller: Any) -> tuple[Any, Any, Any, Any, Any, Any]:
    """``t0, t1, rtol, atol, dt0, controller`` with Python numbers made NumPy arrays of
    the solve's dtype (a controller's ``dtmax``: float64, cast by the solve), checked as
    `_jaxadjoint_solve` would check them (``dtmax`` when the controller was built).

    `_jaxadjoint_solve` is an `equinox.filter_jit`: a Python number is a constant of the
    program it compiles, so a direct call with a new ``t1`` or ``rtol`` compiled again (~1 s
    for a 3-state decay, 2026-11-29); an array is an argument of it, and a new value reuses
    the program.  Inside `_jaxadjoint_solve` the arrays are traced and checked at run time,
    so what the trace-time checks said about a number (a `ValueError`: ``t1 == t0``,
    non-finite times, bad tolerances, a zero ``dt0``, a value the dtype cannot hold; the
    warning on ``rtol`` below eps) is said before the solve.  A number is left as it is
    where that check cannot be made (``y0`` not floating, whose error `_jaxadjoint_solve`
    gives; the other time or tolerance traced); so is ``dt0`` beside
    `ConstantStep`/`StepTo`, which compare it with their step.
    """
    if _is_number(getattr(controller, "dtmax", None)):
        controller = eqx.tree_at(lambda c: c.dtmax, controller,
                                 np.asarray(controller.dtmax, np.float64))
    leaves = _floating_leaves(y0)
    if leaves is None:
        return t0, t1, rtol, atol, dt0, controller
    dtype = check.solve_dtype(leaves)

    def concrete(*xs: Any) -> bool:
        return all(eqx.is_array_like(x) and check.is_concrete(x) for x in xs)

    if ((_is_number(t0) or _is_number(t1)) and concrete(t0, t1)
            and np.ndim(t0) == 0 and np.ndim(t1) == 0):
        t0_, t1_ = (check.as_real_array(name, np.asarray(x), dtype)
                    for name, x in (("t0", t0), ("t1", t1)))
        check.check_times(t0_, t1_)
        t0 = t0_ if _is_number(t0) else t0
        t1 = t1_ if _is_number(t1) else t1
    # After the times, as `_jaxadjoint_solve` checks them.
    _check_concrete_tolerances(rtol, atol, y0)
    if concrete(rtol, *jax.tree.leaves(atol)):
        if _is_number(rtol):
            rtol = check.as_real_array("rtol", np.asarray(rtol), dtype)
        if _is_number(atol):
            atol = check.as_real_array("atol", np.asarray(atol), dtype)
    if _is_number(dt0) and not isinstance(controller, (ConstantStep, StepTo)):
        dt0_ = check.as_real_array("dt0", np.asarray(dt0), dtype)
        check.check_step("dt0", dt0_)
        dt0 = dt0_
    return t0, t1, rtol, atol, dt0, controller


def _check_steps_fit(solver: Any, controller: Any, dt0: Any, t0: Any, t1: Any,
                     max_steps: Any) -> None:
    """A longest step known before `jit` (`ConstantStep.dt`, a fixed-step solver's ``dt0``,
    an adaptive controller's ``dtmax``) that needs more than ``max_steps`` steps from
    ``t0`` to ``t1`` is a `ValueError` here, not a `max_steps` failure after running them
    all.  (Not with events: a terminal one may stop the solve before, and each segment
    between jumps has ``max_steps`` of its own.)"""
    if isinstance(controller, ConstantStep):
        name, step = "`ConstantStep.dt`", controller.dt
    elif controller is None and not getattr(solver, "adaptive", True):
        name, step = f"`dt0` (the constant step of {type(solver).__name__}())", dt0
    else:
        name, step = f"`{type(controller).__name__}.dtmax`", getattr(controller, "dtmax", None)
    if not (isinstance(max_steps, int) and all(
            eqx.is_array_like(x) and check.is_concrete(x) and np.ndim(x) == 0
            for x in (step, t0, t1))):
        return
    with np.errstate(all="ignore"):
        span, step = abs(float(t1) - float(t0)), abs(float(step))
        if not (np.isfinite(span) and np.isfinite(step) and step > 0):
            return  # the checks of `_jaxadjoint_solve` name these
        needed = int(np.ceil(span / step * (1 - 1e-12)))
    if needed > max_steps:
        raise ValueError(f"{name} = {step:g} needs at least {needed} steps from "
                         f"t0 = {float(t0):g} to t1 = {float(t1):g}, more than "
                         f"`max_steps={max_steps}`: raise `max_steps` or the step")


def _check_concrete_save_times(saveat: SaveAt, t0: Any, t1: Any, y0: Any) -> None:
    """Save times known before `jit` (a list, a NumPy or a concrete JAX array) are checked
    here, with a `ValueError`: the jitted solve sees every array traced, and would only
    fail at run time.  They are checked as the solve will use them, in the dtype of ``y0``
    (integer times included), so that the two checks agree."""
    times = (saveat.ts, t0, t1)
    if saveat.ts is None or not all(check.is_concrete(x) for x in times):
        return
    if not all(eqx.is_array_like(x) for x in times):
        return  # not numbers: the checks inside `_jaxadjoint_solve` name the argument
    leaves = _floating_leaves(y0)
    if leaves is None:
        return  # `_jaxadjoint_solve` names the problem with `y0`
    try:
        ts, t0_, t1_ = (np.asarray(x) for x in times)
    except (TypeError, ValueError):
        return
    if not (ts.ndim == 1 and ts.shape[0] and _real_numbers(ts, t0_, t1_)):
        return  # `_jaxadjoint_solve` names the shape or dtype
    dtype = check.solve_dtype(leaves)
    check.check_save_times(check.as_real_array("saveat", ts, dtype),
                           check.as_real_array("t0", t0_, dtype),
                           check.as_real_array("t1", t1_, dtype), ts.dtype)


def _check_concrete_tolerances(rtol: Any, atol: Any, y0: Any) -> None:
    """Tolerances known before `jit` are checked here, with a `ValueError` that names a bad
    component (and the warning on an rtol below eps): the jitted solve traces them, Python
    numbers included (`_numbers_as_arrays`), and would only fail at run time."""
    tolerances = jax.tree.leaves((rtol, atol))
    leaves = _floating_leaves(y0)
    if leaves is None:
        return  # `_jaxadjoint_solve` names the problem with `y0`
    if not all(eqx.is_array_like(x) and check.is_concrete(x) for x in tolerances):
        return
    dtype = check.solve_dtype(leaves)
    as_numpy = jax.tree.map(np.asarray, (rtol, atol))
    rtol_ = check.as_real_array("rtol", as_numpy[0], dtype)
    if np.ndim(rtol_) != 0:
        return  # `_jaxadjoint_solve` names the shape
    check.check_tolerances(rtol_, check.per_component_atol(as_numpy[1], y0, dtype))


def _floating_leaves(y0: Any) -> list[Any] | None:
    """``y0``'s leaves when they are all floating arrays (the pre-`jit` checks need the
    solve's dtype from them), else ``None``."""
    leaves = jax.tree.leaves(y0)
    if leaves and all(eqx.is_array_like(x) and jnp.issubdtype(jnp.result_type(x), jnp.floating)
                      for x in leaves):
        return leaves
    return None


def _real_numbers(*arrays: np.ndarray) -> bool:
    """Whether every NumPy array holds floats or integers (not booleans or complex)."""
    return all(np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)
               for x in arrays)


def _check_concrete_step_grid(controller: Any, t0: Any, t1: Any) -> Any:
    """A `StepTo` grid known before `jit` (a list, a NumPy or a concrete JAX array) is
    checked here, with a `ValueError`, and a list becomes one array (inside the jitted
    solve every array is traced, and a list of NumPy numbers would be a list of tracers)."""
    if not isinstance(controller, StepTo):
        return controller
    ts = controller.ts
    if isinstance(ts, (list, tuple)):
        try:
            ts = np.asarray(ts)
        except (TypeError, ValueError):
            return controller  # not numbers: `_jaxadjoint_solve`'s checks name the argument
        controller = StepTo(ts)
    times = (ts, t0, t1)
    if not all(check.is_concrete(x) and eqx.is_array_like(x) for x in times):
        return controller
    ts_, t0_, t1_ = (np.asarray(x) for x in times)
    if not _real_numbers(ts_, t0_, t1_):
        return controller  # `_check_controller` names the dtype
    check.check_step_grid_shape(ts_)
    if not bool(check.step_grid_valid(ts_.astype(np.float64), np.float64(t0_),
                                      np.float64(t1_))):
        raise ValueError(
            f"{check.STEP_GRID_RULE}; got ts[0] = {ts_[0]}, ts[-1] = {ts_[-1]} for t0 = {t0_}, "
            f"t1 = {t1_}" + ("" if np.all(np.isfinite(ts_)) else " (and non-finite times)"))
    return controller


@eqx.filter_jit
def _jaxadjoint_solve(  # its name marks a nested solve in a jaxpr (`_time_switches.SOLVE_NAME`)
    rhs: Callable[[Array, Any, Any], Any],
    y0: Any,
    t0: float | Array,
    t1: float | Array,
    args: Any,
    solver: AbstractSolver,
    rtol: float | Array,
    atol: float | Array,
    dt0: float | Array | None,
    controller: AbstractController | None,
    saveat: SaveAt,
    sensitivity: AbstractSensitivity,
    integrand: Callable[[Array, Any, Any], Any] | None,
    max_steps: int,
    throw: bool,
    events: tuple[Event, ...] = (),
    max_events: int = 16,
    every_output_read: bool = False,
    reads: str | None = None,
) -> Solution:
    """`solve`, compiled: checks the inputs, builds the `System` and `Problem`, solves.

    ``reads`` is only a cache key: what the functions read besides their inputs
    (`_fingerprint`), so that a changed global compiles again."""
    del reads
    if not callable(rhs):
        raise TypeError(f"`rhs` must be callable as rhs(t, y, args), got {type(rhs).__name__}")
    if not isinstance(solver, AbstractSolver):
        raise TypeError(f"`solver` must be a jaxadjoint solver such as Dopri5(), got {solver!r}")
    if not isinstance(sensitivity, AbstractSensitivity):
        raise TypeError(
            f"`sensitivity` must be a jaxadjoint sensitivity method, got {sensitivity!r}"
        )
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise ValueError(f"`max_steps` must be a positive integer, got {max_steps!r}")
    if integrand is not None and not callable(integrand):
        raise TypeError("`integrand` must be callable as integrand(t, y, args)")

    check.check_floating_tree("y0", y0, allow_integers=False)
    check.check_floating_tree("args", args, allow_integers=True)
    y0 = jax.tree.map(jnp.asarray, y0)
    if not jax.tree.leaves(y0):
        raise ValueError("`y0` must contain at least one array")
    y0_flat, unravel_y = ravel_pytree(y0)
    if y0_flat.size == 0:
        raise ValueError("`y0` has no elements")
    dtype = y0_flat.dtype
    t0 = check.as_real_array("t0", t0, dtype)
    t1 = check.as_real_array("t1", t1, dtype)
    check.check_scalar("t0", t0)
    check.check_scalar("t1", t1)
    check.check_rhs_output(rhs, t0, y0, args)
    check.check_rhs_differentiable(rhs, t0, y0, args, solver)
    t0 = check.check_times(t0, t1, throw)
    rtol = check.as_real_array("rtol", rtol, dtype)
    atol = check.per_component_atol(atol, y0, dtype)
    check.check_scalar("rtol", rtol, ": one relative tolerance for every component (`atol` "
                       "may be given per component)")
    rtol, atol = check.check_tolerances(rtol, atol, throw)
    if dt0 is not None and isinstance(controller, (ConstantStep, StepTo)):
        # Ignored there: refused unless it is the same constant step (concretely).
        same = (isinstance(controller, ConstantStep) and check.is_concrete(dt0)
                and check.is_concrete(controller.dt)
                and abs(float(dt0)) == abs(float(np.asarray(controller.dt))))
        if not same:
            raise ValueError(f"`dt0` is not used with `controller="
                             f"{type(controller).__name__}(...)`, whose steps are given: "
                             "drop `dt0` (or pass the step as `ConstantStep(dt)`)")
    if dt0 is not None:
        dt0 = check.as_real_array("dt0", dt0, dtype)
        check.check_scalar("dt0", dt0)
        dt0 = check.check_step("dt0", dt0, throw)
    controller = _default_controller(solver, controller, dt0)
    controller = _check_controller(controller, t0, t1, dtype, throw)
    if saveat.ts is None:
        ts = jnp.reshape(t1, (1,))
    else:
        given = jnp.result_type(saveat.ts) if eqx.is_array_like(saveat.ts) else None
        ts = check.as_real_array("saveat", saveat.ts, dtype)
        ts = check.check_save_times(ts, t0, t1, given)
    _check_family(solver, saveat, sensitivity, integrand)
    if saveat.dense and not sensitivity.supports_dense:
        raise ValueError(
            f"`SaveAt(dense=True)` is not supported with `sensitivity="
            f"{type(sensitivity).__name__}()`: use `DiscreteAdjoint` or `DiscreteForward`, "
            "or pass the times you need as `saveat` times"
        )

    # Checked values that were concrete are NumPy arrays (see `as_real_array`): from here on
    # they are ordinary arrays of the computation.
    t0, t1, rtol, atol, ts = (jnp.asarray(x) for x in (t0, t1, rtol, atol, ts))
    dt0 = None if dt0 is None else jnp.asarray(dt0)

    unravel_integral = None
    integrand_cc = None
    if integrand is not None:
        check.check_integrand_output(integrand, t0, y0, args)
        shapes = eqx.filter_eval_shape(integrand, t0, y0, args)
        zeros = jax.tree.map(lambda s: jnp.zeros(np.shape(s), dtype), shapes)
        unravel_integral = ravel_pytree(zeros)[1]
        integrand_cc = _closure_convert(integrand, t0, y0, args)
    rhs_cc = _closure_convert(rhs, t0, y0, args)
    if controller.adaptive:
        warn_if_switching_in_time(solver, rhs, t0, y0, args)
    conditions_cc = ()
    if events:
        check_events(events, saveat, sensitivity, integrand, controller, max_events)
        conditions_cc = tuple(
            _closure_convert(checked_condition(i, e.cond, t0, y0, args), t0, y0, args)
            for i, e in enumerate(events))
    params, aux, static = _split_params((args, rhs_cc, integrand_cc, conditions_cc))

    system = System(
        static_params=static,
        aux_params=aux,
        unravel_y=unravel_y,
        unravel_integral=unravel_integral,
        solver=solver.with_tolerances(rtol, atol),
        controller=controller,
        tol=Tolerances(rtol, atol),
        dt0=dt0,
        max_steps=max_steps,
        throw=throw,
        dense=saveat.dense,
        land_on_ts=saveat.land_on_ts,
        # An event lies inside its step, as interpolated saves do.
        interpolate_saves=(saveat.ts is not None and not saveat.land_on_ts) or bool(events),
        event_directions=tuple(e.direction for e in events),
        every_output_read=every_output_read,
    )
    problem = Problem(y0=y0_flat, params=params, t0=t0, t1=t1, ts=ts)
    if events:
        return solve_events(system, problem, sensitivity, events, saveat, ts, args,
                             unravel_y, y0_flat, max_events)
    out = sensitivity(system, problem)

    ys = jax.vmap(unravel_y)(out.ys)
    integral = unravel_integral(out.integral) if unravel_integral is not None else None
    interpolation = None
    if out.dense is not None:
        interpolation = DenseInterpolation(
            rows=out.dense, direction=problem.direction,
            weights=system.stage_plan.weights, unravel_y=unravel_y,
        )
    return Solution(
        ts=ts, ys=ys, steps=jax.lax.stop_gradient(out.record.steps), integral=integral,
        stats=out.record.stats, result=out.record.result, interpolation=interpolation,
    )

