"""Input checks for `solve`: structural problems raise at trace time, values at run time.

Every message names the argument and says what was expected.  Values that are only
known at run time (traced times, tolerances, save times) are checked with
`equinox.error_if`, which raises when the compiled program runs.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._results import RESULTS
from ._user_warning import warn


def is_python_number(x: Any) -> bool:
    """Whether ``x`` is a Python int or float (not a bool): a leaf of a user function's
    output that takes the dtype it is combined with, as in arithmetic."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_concrete(x: Any) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _np_or_jnp(*xs: Any) -> Any:
    """NumPy for concrete values (so that checks can raise at trace time), else jax.numpy.

    Inside `jit` (and `solve` is jitted) every `jax.numpy` operation is staged, even on
    constants: ``jnp.isfinite(1.0)`` is a tracer there.  Concrete inputs are therefore
    checked with NumPy.
    """
    return np if all(is_concrete(x) for x in xs) else jnp


def check_floating_tree(name: str, tree: Any, *, allow_integers: bool) -> None:
    """Leaves of ``tree`` must be real floating arrays (or, if allowed, integer/bool)."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if not eqx.is_array_like(leaf):
            continue
        dtype = jnp.result_type(leaf)
        where = f"{name}{jax.tree_util.keystr(path)}"
        if jnp.issubdtype(dtype, jnp.complexfloating):
            raise ValueError(
                f"`{where}` has complex dtype {dtype}; jaxadjoint integrates real systems. "
                "Split complex states into real and imaginary parts."
            )
        if not jnp.issubdtype(dtype, jnp.floating) and not allow_integers:
            raise ValueError(
                f"`{where}` has dtype {dtype}; expected a floating dtype such as float64 "
                "(integer states cannot be integrated or differentiated)."
            )


def as_python_int(name: str, x: Any) -> Any:
    """A NumPy or concrete JAX integer scalar as a Python int (``max_steps=np.int64(10)``).

    Such counts size preallocated buffers, so they are constants of the compiled solve: a
    traced one cannot be used.  Anything else is returned for the caller's own check.
    """
    if isinstance(x, jax.core.Tracer):
        raise ValueError(f"`{name}` must be a Python int: it sets the size of preallocated "
                         "buffers, so it cannot be a traced value (pass it outside `jit`, "
                         "or mark it static)")
    if isinstance(x, (np.integer, np.ndarray, jax.Array)) and np.ndim(x) == 0 and \
            np.issubdtype(np.asarray(x).dtype, np.integer):
        return int(x)
    return x


def check_python_float_nan(name: str, tree: Any) -> None:
    """Python floats in ``tree`` are constants of the compiled solve (equinox's filtered
    `jit` keys on them); a NaN never equals itself, so it cannot be one (equinox then fails
    with a message about closure conversion).  Name it instead."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if isinstance(leaf, float) and leaf != leaf:
            raise ValueError(
                f"`{name}{jax.tree_util.keystr(path)}` is a Python float NaN: Python numbers "
                f"in `{name}` are constants of the compiled solve, and NaN cannot be one "
                "(it never equals itself). Pass an array instead, e.g. `jnp.asarray(nan)`, "
                "if NaN is intended")


def as_real_array(name: str, x: Any, dtype: Any) -> Array:
    """A real array of ``dtype`` from a Python number or array; complex is an error."""
    if eqx.is_array_like(x) and jnp.issubdtype(jnp.result_type(x), jnp.complexfloating):
        raise ValueError(f"`{name}` must be real, got a complex value")
    if eqx.is_array_like(x) and jnp.result_type(x) == jnp.bool_:
        raise ValueError(f"`{name}` must be real numbers, got booleans")
    if not eqx.is_array_like(x):
        raise ValueError(f"`{name}` must be a real number or array, got {type(x).__name__}")
    # A concrete value (a Python number inside `solve`) stays a NumPy array, so that its
    # value can still be checked at trace time; `jnp.asarray` would make it a tracer.
    if not is_concrete(x):
        return jnp.asarray(x, dtype)
    original = np.asarray(x)
    with np.errstate(over="ignore", under="ignore"):
        cast = np.asarray(x, dtype)
    if np.issubdtype(original.dtype, np.floating) or np.issubdtype(original.dtype, np.integer):
        wide = original.astype(np.float64)
        lost = (np.isfinite(wide) & ~np.isfinite(cast)) | ((wide != 0) & (cast == 0))
        if np.any(lost):
            bad, became = wide[lost].ravel()[0], cast[lost].ravel()[0]
            raise ValueError(f"`{name}` = {bad:g} does not fit the solve's dtype "
                             f"{np.dtype(dtype).name} (that of `y0`; it became "
                             f"{became}): give `y0` a wider dtype or rescale")
    return cast


def is_scalar_atol(atol: Any) -> bool:
    """Whether ``atol`` is one number (not an array or a pytree of tolerances)."""
    return eqx.is_array_like(atol) and np.ndim(atol) == 0


def per_component_atol(atol: Any, y0: Any, dtype: Any) -> Array:
    """``atol`` as the error test uses it: a scalar, or one tolerance per component of the
    flattened state (the order of `jax.flatten_util.ravel_pytree` on ``y0``).

    Accepted: a scalar; an array that broadcasts to ``y0``'s shape when ``y0`` is one
    array; or a pytree with ``y0``'s structure whose leaves broadcast to ``y0``'s leaves
    (each a scalar or an array).  Concrete values stay NumPy arrays (`as_real_array`), so
    that `check_tolerances` can check them before the solve runs.
    """
    if is_scalar_atol(atol):
        return as_real_array("atol", atol, dtype)
    y_leaves, y_def = jax.tree_util.tree_flatten_with_path(y0)
    if isinstance(atol, (list, tuple)) and y_def == jax.tree.structure(0.0):
        atol = np.asarray(atol) if all(is_concrete(a) for a in atol) else jnp.stack(atol)
    if eqx.is_array_like(atol) and y_def == jax.tree.structure(0.0):
        named = [("", atol, y_leaves[0][1])]
    else:
        if jax.tree.structure(atol) != y_def:
            raise ValueError(
                "`atol` must be a scalar, an array that broadcasts to `y0` (when `y0` is one "
                "array), or a pytree with the structure of `y0` (one tolerance per leaf or "
                f"per component); `y0` has structure {y_def}, `atol` has structure "
                f"{jax.tree.structure(atol)}")
        named = [(jax.tree_util.keystr(path), a, y) for (path, y), a
                 in zip(y_leaves, jax.tree.leaves(atol))]
    parts = []
    for where, a, y in named:
        a = as_real_array(f"atol{where}", a, dtype)
        try:
            fits = np.broadcast_shapes(np.shape(a), np.shape(y)) == np.shape(y)
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"`atol{where}` has shape {np.shape(a)}, which does not "
                             f"broadcast to the shape {np.shape(y)} of `y0{where}`")
        # In a pytree, name the leaf and the index within it (the flat index of
        # `check_tolerances` would not say which leaf).
        bad = ~(np.isfinite(a) & (a >= 0)) if where and is_concrete(a) else None
        if bad is not None and np.any(bad):
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"`atol{where}` must be finite and non-negative; got "
                             f"{float(a[index])}" + (f" at index {index}" if index else ""))
        xp = np if is_concrete(a) else jnp
        parts.append(xp.broadcast_to(a, np.shape(y)).ravel())
    xp = _np_or_jnp(*parts)
    return xp.concatenate(parts)


def solve_dtype(leaves: list[Any]) -> Any:
    """The dtype a solve of ``y0``'s ``leaves`` runs in, as `ravel_pytree` flattens them:
    from the leaves' dtypes, so a weakly typed float64 leaf (``jnp.full(n, 1.0)``) counts
    as float64 beside a float32 one."""
    return jnp.result_type(*(jnp.asarray(leaf).dtype for leaf in leaves))


def check_scalar(name: str, x: Array, hint: str = "") -> None:
    """``x`` must be a scalar; ``hint`` ends the message."""
    if jnp.ndim(x) != 0:
        raise ValueError(f"`{name}` must be a scalar, got shape {jnp.shape(x)}{hint}")


def times_valid(t0: Array, t1: Array) -> Array:
    """Whether ``t0`` and ``t1`` are finite and different (NumPy or JAX booleans)."""
    xp = _np_or_jnp(t0, t1)
    return xp.isfinite(t0) & xp.isfinite(t1) & (t0 != t1)


def tolerances_valid(rtol: Array, atol: Array) -> Array:
    """Whether the tolerances are finite, non-negative and not both zero."""
    xp = _np_or_jnp(rtol, atol)
    return xp.all(xp.isfinite(rtol) & xp.isfinite(atol) & (rtol >= 0) & (atol >= 0)
                  & ((rtol != 0) | (atol != 0)))


def step_valid(dt: Array) -> Array:
    """Whether a step size is finite and non-zero (its sign is ignored)."""
    xp = _np_or_jnp(dt)
    return xp.isfinite(dt) & (dt != 0)


STEP_GRID_RULE = "`StepTo.ts` must start at t0, end at t1 and move strictly from t0 towards t1"


def check_step_grid_shape(ts: Array) -> None:
    """`StepTo`'s times must be a 1-D array of at least two."""
    if jnp.ndim(ts) != 1 or jnp.shape(ts)[0] < 2:
        raise ValueError(f"`StepTo.ts` must be a 1-D array of at least two times, got shape "
                         f"{jnp.shape(ts)}")


def step_grid_valid(ts: Array, t0: Array, t1: Array) -> Array:
    """Whether the times ``ts`` (`StepTo`) start at ``t0``, end at ``t1`` and move strictly
    from ``t0`` towards ``t1`` (NaN times do not)."""
    xp = _np_or_jnp(ts, t0, t1)
    direction = xp.where(t1 >= t0, 1, -1)
    return (ts[0] == t0) & (ts[-1] == t1) & xp.all(direction * xp.diff(ts) > 0)


# Traced values are checked at run time: with ``throw=True`` by `equinox.error_if` (the
# messages below); with ``throw=False`` the forward loop does not start and reports the
# failure in `sol.result` (`input_result`).


def check_times(t0: Array, t1: Array, throw: bool = True) -> Array:
    """``t0`` and ``t1`` finite and different; returns ``t0`` guarded at run time."""
    msg_finite = "`t0` and `t1` must be finite"
    msg_equal = "`t1` must differ from `t0` (an empty interval has no solution to differentiate)"
    if is_concrete(t0) and is_concrete(t1):
        if not (np.isfinite(t0) and np.isfinite(t1)):
            raise ValueError(f"{msg_finite}, got t0={float(t0)}, t1={float(t1)}")
        if float(t0) == float(t1):
            raise ValueError(f"{msg_equal}; got t0 = t1 = {float(t0)}")
        return t0
    if not throw:
        return t0
    t0 = eqx.error_if(t0, ~(jnp.isfinite(t0) & jnp.isfinite(t1)), msg_finite)
    return eqx.error_if(t0, t0 == t1, msg_equal)


def check_step(name: str, dt: Array, throw: bool = True) -> Array:
    """A step size must be finite and non-zero (its sign is ignored)."""
    msg = f"`{name}` must be finite and non-zero"
    if is_concrete(dt):
        if not bool(step_valid(dt)):
            raise ValueError(f"{msg}, got {float(dt)}")
        return jnp.asarray(dt)
    if not throw:
        return dt
    return eqx.error_if(dt, ~step_valid(dt), msg)


def _describe_atol(rtol: Array, atol: Array) -> str:
    """``atol=...``, or for per-component tolerances the first bad component."""
    if np.ndim(atol) == 0:
        return f"atol={float(atol)}"
    ok = np.isfinite(atol) & (atol >= 0) & ((rtol != 0) | (atol != 0))
    if np.all(ok):
        return f"atol of {np.size(atol)} components"
    i = int(np.flatnonzero(~ok)[0])
    return f"atol[{i}]={float(atol[i])} (component {i} of the flattened state)"


def check_tolerances(rtol: Array, atol: Array, throw: bool = True) -> tuple[Array, Array]:
    msg = "`rtol` and `atol` must be finite and non-negative, and not both zero"
    bad = ~tolerances_valid(rtol, atol)
    if is_concrete(rtol) and is_concrete(atol):
        if bool(bad):
            raise ValueError(f"{msg}; got rtol={float(rtol)}, {_describe_atol(rtol, atol)}")
        eps = float(jnp.finfo(jnp.result_type(rtol)).eps)
        if 0 < float(rtol) < eps:
            warn(
                f"rtol={float(rtol):g} is below the resolution of the state's dtype "
                f"({jnp.result_type(rtol)}, eps = {eps:.3g}): the steps shrink until "
                "round-off, not truncation, sets the error, which is then larger than at a "
                "looser rtol. Loosen rtol" + (
                    "." if jnp.result_type(rtol) == jnp.float64 else
                    ", or solve in float64 (jax.config.update(\"jax_enable_x64\", True) at "
                    "the start, and a float64 `y0`)."))
        return rtol, atol
    if not throw:
        return rtol, atol
    return eqx.error_if(rtol, bad, msg), atol


def input_result(t0: Array, t1: Array, rtol: Array, atol: Array, dt0: Array | None,
                 save_times_ok: Array, controller_ok: Array,
                 check_times: bool = True) -> RESULTS:
    """`RESULTS.successful`, or the first invalid traced input of: the times (if
    ``check_times``), the save times, the tolerances, the first step, the controller's
    inputs -- the result a ``throw=False`` solve starts with (it then does not start)."""
    result = RESULTS.where(controller_ok, RESULTS.successful, RESULTS.invalid_controller)
    if dt0 is not None:
        result = RESULTS.where(step_valid(dt0), result, RESULTS.invalid_first_step)
    result = RESULTS.where(tolerances_valid(rtol, atol), result, RESULTS.invalid_tolerances)
    result = RESULTS.where(save_times_ok, result, RESULTS.invalid_save_times)
    if not check_times:
        return result
    return RESULTS.where(times_valid(t0, t1), result, RESULTS.invalid_times)


def check_save_times(ts: Array, t0: Array, t1: Array, given: Any = None) -> Array:
    """Save times must be finite, ordered from ``t0`` towards ``t1`` and inside it.

    ``ts`` is in the solve's dtype; ``given`` is the dtype the times came in (None: the
    same).  Two kinds of round-off make a time an end (a traced time keeps its derivative):

    - outside the interval by at most ``16 eps max(|t0|, |t1|)``, with the eps of the
      coarser of the two precisions: times computed from the ends
      (``t0 + (t1 - t0) * s``) can land a few ulps past them;
    - an end rounded to the precision the times came in: float32 observation times of a
      float64 solve whose ``t1`` is the last of them in float64 (float32's 4.7 lies below
      4.7, its 4.8 above 4.8).

    No wider margin inside: there, 16 float32 ulps of ``t1 = 1e5`` are 0.19, and a save at
    0.1 would have been read at ``t0``.  These times are accepted inside `jit` too.

    Concrete times are checked here, with a `ValueError` naming the first bad entry;
    traced ones by the forward loop, which then does not start and reports
    `RESULTS.invalid_save_times` (`save_times_valid`).
    """
    if ts.ndim != 1 or ts.shape[0] == 0:
        raise ValueError(f"`saveat` must be a non-empty 1-D array of times, got shape {ts.shape}")
    xp = _np_or_jnp(ts, t0, t1)
    eps = float(np.finfo(ts.dtype).eps)  # a Python float: weakly typed
    # The times came in a coarser floating dtype than the solve's (float32 into float64).
    coarser = (given is not None and np.issubdtype(given, np.floating)
               and np.finfo(given).eps > eps)
    if coarser:
        eps = float(np.finfo(given).eps)
    slack = 16 * eps * xp.maximum(xp.abs(t0), xp.abs(t1))
    clipped = xp.clip(ts, xp.minimum(t0, t1), xp.maximum(t0, t1))
    snapped = xp.where(xp.abs(ts - clipped) <= slack, clipped, ts)
    if coarser:
        for end in (t0, t1):
            rounded = xp.asarray(end).astype(given).astype(ts.dtype)
            snapped = xp.where(ts == rounded, end, snapped)
    # The end's value exactly, the time's own derivative.
    ts = snapped if xp is np else jax.lax.stop_gradient(snapped) + (ts - jax.lax.stop_gradient(ts))
    direction = xp.where(t1 >= t0, 1, -1)
    taus = direction * ts
    bad_order = xp.any(xp.diff(taus) < 0) if ts.shape[0] > 1 else xp.array(False)
    outside = xp.any(taus < direction * t0) | xp.any(taus > direction * t1)
    nonfinite = ~xp.all(xp.isfinite(ts))
    if all(is_concrete(x) for x in (ts, t0, t1)) and bool(bad_order | outside | nonfinite):
        raise ValueError(_bad_save_times_message(np.asarray(ts), float(t0), float(t1)))
    return ts


def _bad_save_times_message(ts: np.ndarray, t0: float, t1: float) -> str:
    """The rule for save times and the first entry of ``ts`` that breaks it."""
    forward = t1 >= t0
    rule = ("`saveat` must hold finite times inside [t0, t1], ordered from t0 towards t1 "
            f"({'non-decreasing' if forward else 'non-increasing'}, as t1 "
            f"{'>' if forward else '<'} t0)")
    low, high = min(t0, t1), max(t0, t1)
    times = ts.tolist()
    for j, t in enumerate(times):
        if not np.isfinite(t):
            return f"{rule}; saveat[{j}] is {t}"
        if not low <= t <= high:
            return (f"{rule}; saveat[{j}] = {t!r} is outside [{low!r}, {high!r}] "
                    f"by {max(low - t, t - high):.3g}")
        if j and (t - times[j - 1]) * (1 if forward else -1) < 0:
            return f"{rule}; saveat[{j}] = {t!r} comes after saveat[{j - 1}] = {times[j - 1]!r}"
    return rule


def save_times_valid(taus: Array, tau0: Array, tau1: Array) -> Array:
    """Whether internal save times are finite, non-decreasing and inside ``[tau0, tau1]``."""
    ordered = jnp.all(jnp.diff(taus) >= 0) if taus.shape[0] > 1 else jnp.array(True)
    inside = jnp.all((taus >= tau0) & (taus <= tau1))
    return ordered & inside & jnp.all(jnp.isfinite(taus))


def check_rhs_differentiable(rhs: Any, t0: Array, y0: Any, args: Any, solver: Any) -> None:
    """A stiff solver needs ``J = d rhs / dy`` (and ``d rhs / dt``) from JAX: trace one
    forward-mode derivative now, so that a right-hand side JAX cannot differentiate (a
    `jax.pure_callback`, a non-differentiable primitive) fails with a message naming the
    problem instead of deep inside the first step."""
    if not getattr(solver, "jacobians_per_step", 0):
        return
    try:
        eqx.filter_eval_shape(jax.jacfwd(rhs, argnums=(0, 1)), t0, y0, args)
    except Exception as e:  # noqa: BLE001 - re-raised with context
        cause = str(e).rstrip(".")
        raise ValueError(
            f"`{type(solver).__name__}` needs the Jacobian d rhs / dy (and d rhs / dt) "
            f"from JAX, but `rhs` cannot be differentiated in forward mode: {cause}. Use an "
            "explicit solver, or give the non-differentiable part of `rhs` a "
            "`jax.custom_jvp`."
        ) from e


def check_rhs_output(rhs: Any, t0: Array, y0: Any, args: Any, name: str = "rhs") -> None:
    """``rhs(t0, y0, args)`` must return the structure, shapes and a floating dtype of y0."""
    try:
        out = eqx.filter_eval_shape(rhs, t0, y0, args)
    except Exception as e:  # noqa: BLE001 - re-raised with context
        hint = ""
        untraceable = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError)
        if isinstance(e, untraceable):
            hint = (f" (`{name}` is traced by JAX: it must use jax.numpy on its inputs, not "
                    "NumPy or Python control flow on their values: `jnp.where(y[0] > 0, a, b)` "
                    "for an `if`, `jnp.interp` for `np.interp`)")
        elif isinstance(e, TypeError) and isinstance(args, tuple) and (
                "positional argument" in str(e)):
            # solve_ivp unpacks `args=(a, b)` into `fun(t, y, a, b)`; here it arrives whole.
            hint = (f" (`{name}` is called as {name}(t, y, args) with `args` whole: write "
                    f"`def {name}(t, y, args): a, b = args`, not solve_ivp's unpacked "
                    "`fun(t, y, a, b)`)")
        message = f"calling `{name}(t0, y0, args)` failed{hint}: {e}"
        try:
            error = type(e)(message)
        except Exception:  # noqa: BLE001 - exception types whose constructor is not (msg,)
            error = TypeError(message)
        raise error from e
    expected = jax.tree.structure(y0)
    got = jax.tree.structure(out)
    if got != expected:
        hint = ""
        if isinstance(y0, (list, tuple)) and jax.tree_util.treedef_is_leaf(got):
            # SciPy's habit: y0 = [1.0, 0.0, 0.0], rhs returning one array.
            hint = (f". A {type(y0).__name__} `y0` is a pytree of {len(y0)} entries, not one "
                    "vector: pass `jnp.asarray(y0)` for an array state")
        elif isinstance(out, (list, tuple)) and jax.tree_util.treedef_is_leaf(expected):
            # SciPy's habit the other way: `return [dS, dI, dR]` for an array state.
            hint = (f". `y0` is one array and `{name}` returned a {type(out).__name__} of "
                    f"{len(out)} entries: return one array, `jnp.stack([...])`")
        raise ValueError(
            f"`{name}` must return a pytree with the structure of `y0`; expected {expected}, "
            f"got {got}{hint}"
        )
    for (path, o), y in zip(jax.tree_util.tree_leaves_with_path(out), jax.tree.leaves(y0)):
        where = jax.tree_util.keystr(path) or "the root"
        # A Python number (weakly typed) takes the state's dtype, as in arithmetic.
        number = is_python_number(o) or getattr(o, "weak_type", False)
        o = jax.ShapeDtypeStruct(np.shape(o), jnp.result_type(y if number else o))
        if o.shape != jnp.shape(y):
            raise ValueError(
                f"`{name}` returned shape {o.shape} at {where} but `y0` has shape "
                f"{jnp.shape(y)} there"
            )
        if not jnp.issubdtype(o.dtype, jnp.floating):
            raise ValueError(f"`{name}` must return floating arrays, got dtype {o.dtype}")
        state = jnp.result_type(y)
        if jnp.issubdtype(state, jnp.floating) and jnp.finfo(o.dtype).bits > jnp.finfo(state).bits:
            solved = solve_dtype(jax.tree.leaves(y0))
            runs = (f"the solve runs in {state}, the precision of `y0`, and its results are "
                    f"{state}-accurate" if solved == state else
                    f"the solve runs in {solved} (the widest dtype of `y0`'s leaves) but `{name}` "
                    f"sees this leaf rounded to {state} at every evaluation, and it is returned "
                    f"in {state}")
            warn(
                f"`{name}` returned {o.dtype} at {where} but `y0` is {state} there: {runs}. "
                f"Pass `y0` as {o.dtype} for a {o.dtype} solve, or compute `{name}` in "
                f"{state} (e.g. cast its parameters).")
        if jnp.issubdtype(state, jnp.floating) and jnp.finfo(o.dtype).bits < jnp.finfo(state).bits:
            # Cast up silently, the solve would run in the state's precision with slopes of
            # the lower one: errors far above a float64 tolerance, and gradients of them.
            raise ValueError(
                f"`{name}` returned {o.dtype} at {where} but `y0` is {state} there: the solve "
                f"would compute in {o.dtype} precision while controlling a {state} error. "
                f"Compute `{name}` in {state} (e.g. cast its parameters), or pass `y0` as "
                f"{o.dtype}"
            )


def check_integrand_output(integrand: Any, t0: Array, y0: Any, args: Any) -> None:
    try:
        out = eqx.filter_eval_shape(integrand, t0, y0, args)
    except Exception as e:  # noqa: BLE001 - re-raised with context
        raise type(e)(f"calling `integrand(t0, y0, args)` failed: {e}") from e
    for leaf in jax.tree.leaves(out):
        if is_python_number(leaf):
            continue  # it takes the solve's dtype (`System.integrand`)
        if not jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
            raise ValueError("`integrand` must return floating arrays, got dtype "
                             f"{jnp.result_type(leaf)}")
    if not jax.tree.leaves(out):
        raise ValueError("`integrand` returned no arrays; it must return a pytree of floats")


try:  # private: forward-mode detection is skipped on a JAX without it (JAX's error stays)
    from jax._src.interpreters.ad import (
        JVPTracer as _JVPTracer,
        LinearizeTracer as _LinearizeTracer,
    )
except ImportError:
    _JVPTracer = _LinearizeTracer = None


def _autodiff_levels(x: Any) -> tuple[bool, int]:
    """``(forward mode, reverse-mode levels)``: whether ``x`` is traced by forward-mode
    autodiff (`jax.jvp`) at any nesting level, and by how many nested linearisations
    (`jax.grad`, `jax.vjp`: two for `jax.jacrev` of `jax.grad`)."""
    forward, levels = False, 0
    while isinstance(x, jax.core.Tracer):
        forward |= isinstance(x, _JVPTracer)
        levels += isinstance(x, _LinearizeTracer)
        x = getattr(x, "primal", getattr(x, "val", None))  # linearize / vmap tracers
    return forward, levels


def check_not_differentiated_without_jit(inputs: Any) -> None:
    """Raise a clear error when a solve is differentiated under `jax.disable_jit()`.

    Every sensitivity method's derivative rule (equinox's filtered custom derivatives)
    then meets its closure-converted right-hand side with other arguments than it was
    converted with, and failed with equinox's "Closure-converted function called with
    different dynamic arguments" (a JAX user's acceptance test: debugging under
    `disable_jit`).  The solve itself works there."""
    if _JVPTracer is None or not jax.config.jax_disable_jit:
        return
    if any(any(_autodiff_levels(leaf)) for leaf in jax.tree.leaves(inputs)):
        raise TypeError(
            "A solve cannot be differentiated under `jax.disable_jit()` (its derivative "
            "rules work on traced programs only). Take the derivative with jit enabled; "
            "under `disable_jit` the solve itself runs, for debugging.")


def check_steps_not_differentiated(named: dict[str, Any]) -> None:
    """Raise a clear error when a tolerance or a step size or grid (``dt0``, a controller's
    ``dt`` or ``ts``) is differentiated.  Every sensitivity method takes the steps as
    constants: the discrete ones differentiate on the recorded grid, so ``d/drtol`` would
    be 0 (and ``d/ddt`` of a fixed-step solve, which its result does depend on, too), and
    the reverse-mode ones failed with equinox's "Unexpected tangent".  Checked at trace
    time, on the inputs (a value traced only by the caller's own `jit` around `solve` is
    not seen here)."""
    if _JVPTracer is None:
        return
    for name, value in named.items():
        for path, leaf in jax.tree_util.tree_leaves_with_path(value):
            forward, reverse = _autodiff_levels(leaf)
            if forward or reverse:
                raise TypeError(
                    f"`{name}{jax.tree_util.keystr(path)}` depends on what is being "
                    "differentiated, but tolerances and step sizes are constants of "
                    "jaxadjoint's derivatives (the derivative of the computed solution on "
                    "the steps it took). Wrap it in `jax.lax.stop_gradient` to differentiate "
                    "the rest; to differentiate with respect to a step grid, use "
                    "`jaxadjoint.replay_on_grid`, whose grid may be traced.")


def check_reverse_mode_only(sensitivity: str, inputs: Any) -> None:
    """Raise a clear error when a reverse-mode-only sensitivity is differentiated forwards.

    JAX cannot push tangents through a `jax.custom_vjp` function: `jax.jvp` and
    `jax.jacfwd` fail with a generic message, `jax.hessian` (forward over reverse) with a
    bare ``AssertionError`` from inside JAX.  Checked at trace time, on the inputs.
    Reverse mode (`jax.grad`, `jax.vjp`) traces with linearize tracers when
    ``jax_use_direct_linearize`` is on (the default); only then does a JVP tracer mean
    forward mode, so otherwise nothing is checked.  `jax.linearize` traces with the same
    tracers as `jax.grad`, so it passes here; applying its linear function (forward mode)
    then fails with JAX's own message (README, "Choosing a sensitivity method").
    """
    if _JVPTracer is None or not getattr(jax.config, "jax_use_direct_linearize", False):
        return
    levels = [_autodiff_levels(leaf) for leaf in jax.tree.leaves(inputs)]
    advice = (" Use `sensitivity=jaxadjoint.DiscreteForward()` for forward mode and second "
              "derivatives (it is exact on the same step grid).")
    if any(forward for forward, _ in levels):
        raise TypeError(
            f"`sensitivity={sensitivity}` differentiates in reverse mode only (jax.grad, "
            "jax.jacrev, jax.vjp); JAX cannot apply forward mode (jax.jvp, jax.jacfwd, "
            "jax.hessian) to it." + advice
        )
    if any(reverse >= 2 for _, reverse in levels):
        # Reverse over reverse differentiates the hand-written reverse pass itself, which
        # JAX cannot do (its error: "Linearization failed to produce known values").
        raise TypeError(
            f"`sensitivity={sensitivity}` gives first derivatives only: its reverse pass "
            "cannot be differentiated again (jax.jacrev or jax.grad of jax.grad)." + advice
        )
