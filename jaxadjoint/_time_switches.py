"""Right-hand sides that switch in time, and the error estimates that cannot see it.

A switch written into the right-hand side, ``jnp.where(t < T, dose, 0.0)`` (or
``lax.cond`` on ``t``, ``jnp.interp`` of a table in ``t``), makes ``f`` jump or kink in
``t``.  Most embedded error estimates notice a step across it and shrink the step.
Rodas5's does not: its main and embedded solutions differ only in stages evaluated at
``t_n + h``, so a change of ``f`` in ``t`` alone within a step cancels from the estimate
(the solver's ``estimate_sees_time_changes``, from its tableau), and the saves come out
wrong by far more than ``rtol`` with no sign of it (README, "Inputs that switch in time").
`warn_if_switching_in_time` looks for such a switch when the solve is traced: an operation
that jumps or kinks in an operand that depends on ``t`` (a comparison, ``floor``, ``sign``,
``max``/``min`` (``relu``), ``abs``, ``%``, a conversion to an integer (a table index)),
found by following ``t`` through the jaxpr of ``rhs`` (into nested jaxprs too).  Before,
only comparisons: a clamped table lookup (``jnp.take(table, t.astype(int), mode="clip")``),
``(sign(1 - t) + 1) / 2`` and ``relu(1 - t)`` went unwarned (a control user's test).

A switch whose *time* is an argument being differentiated (``jnp.where(t > t_lock, ...)``
with ``t_lock`` a parameter) has a zero derivative in that time whatever the solver: the
comparison is flat in its operands.  `warn_if_differentiating_a_switch_time` warns when a
comparison reads both ``t`` and such an argument, when the derivative is traced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.extend.core as jex
import numpy as np

from ._user_warning import warn

# Operations that jump or kink in their operands.
_SWITCHES = frozenset({"lt", "le", "gt", "ge", "eq", "ne", "floor", "ceil", "round", "sign",
                       "max", "min", "clamp", "abs", "rem"})


def _switches(eqn: Any) -> bool:
    """Whether ``eqn`` jumps or kinks in its operands (a conversion to an integer or a
    boolean is a table index or a test)."""
    if eqn.primitive.name in _SWITCHES:
        return True
    if eqn.primitive.name == "convert_element_type":
        new = eqn.params["new_dtype"]
        return jax.numpy.issubdtype(new, jax.numpy.integer) or new == jax.numpy.bool_
    return False


# Of those, the ones that jump (a kink, ``max``/``min``/``abs``, is continuous): a switch on
# the state (an ideal diode, a clamp) is looked for among these only, as a `jnp.maximum(c, 0)`
# guard is common in models that never reach it.
_JUMPS = frozenset({"lt", "le", "gt", "ge", "eq", "ne", "floor", "ceil", "round", "sign",
                    "rem"})


def _jumps(eqn: Any) -> bool:
    """Whether ``eqn`` jumps in its operands (`_JUMPS`, or a conversion to an integer or a
    boolean), not counting the tests for NaN and infinity that numerical code makes
    (``x != x``, a comparison with an infinite literal: `jnp.logaddexp` in `softplus`)."""
    if eqn.primitive.name in ("ne", "eq") and eqn.invars[0] is eqn.invars[1]:
        return False
    if any(isinstance(x, jex.Literal) and not np.all(np.isfinite(np.asarray(x.val)))
           for x in eqn.invars):
        return False
    return eqn.primitive.name in _JUMPS or (
        eqn.primitive.name == "convert_element_type" and _switches(eqn))


def _is_a_solve_or_has_its_own_derivative(eqn: Any) -> bool:
    """A nested solve (`_is_a_solve`), or a function with its own JVP rule (`softplus`,
    `relu`, a user's `jax.custom_jvp`): whoever wrote that rule decided its derivative, and
    the switches inside are guards of numerical code, not of the model."""
    return _is_a_solve(eqn) or eqn.primitive.name == "custom_jvp_call"


class TimeSwitchWarning(UserWarning):
    """The right-hand side switches in time where the solver's error estimate cannot see it."""


def _warn_switch(message: str) -> None:
    """A `TimeSwitchWarning` at every trace (`_user_warning.warn`), saying how to silence it."""
    warn(message + " (Silence with "
         "`warnings.simplefilter('ignore', jaxadjoint.TimeSwitchWarning)`.)",
         TimeSwitchWarning, every_trace=True)


# The name of the jitted function every `jaxadjoint.solve` runs (`_integrate`).
SOLVE_NAME = "_jaxadjoint_solve"


def _is_a_solve(eqn: Any) -> bool:
    """Whether ``eqn`` is a jaxadjoint solve nested in ``rhs``: its step control compares
    times with ``t1`` at every step, which is no switch of ``rhs`` (a nested solve to
    ``t1 = 1 + 0.1 t`` warned, though its gradient was exact; a control user's test)."""
    return eqn.params.get("name") == SOLVE_NAME


def _nested(eqn: Any) -> list[jex.Jaxpr]:
    """The jaxprs nested in ``eqn`` (a `jit`'s, a `cond`'s branches, a loop's body)."""
    return [getattr(sub, "jaxpr", sub) for sub in jex.jaxprs_in_params(eqn.params)]


def _nested_inputs(inner: jex.Jaxpr, inputs: list[Any], unknown: Any) -> list[Any]:
    """What ``inputs`` (one per operand of the equation) say about ``inner``'s inputs: the
    same, or without the first (`cond`'s branch index); ``unknown`` for each where the
    mapping is not the operands' (loops' constants and carries)."""
    if len(inner.invars) == len(inputs):
        return inputs
    if len(inner.invars) == len(inputs) - 1:
        return inputs[1:]
    return [unknown] * len(inner.invars)


def _finds(jaxpr: jex.Jaxpr, marks: list[int], hit: Callable[[Any, int], bool],
           skip: Callable[[Any], bool] = _is_a_solve) -> bool:
    """Whether an equation of ``jaxpr`` (or of a jaxpr nested in one) is a ``hit``, given
    the union of the marks its operands depend on.

    Marks are bit sets, one per input of ``jaxpr``, carried to every value computed from
    it.  A nested jaxpr whose inputs are not the equation's own (loops' constants and
    carries) gets the union of the operands' marks on every input: a false alarm there is
    a warning too many, never a switch missed.
    """
    mark: dict[Any, int] = dict(zip(jaxpr.invars, marks))

    def of(x: Any) -> int:
        return mark.get(x, 0) if isinstance(x, jex.Var) else 0

    for eqn in jaxpr.eqns:
        inputs = [of(x) for x in eqn.invars]
        union = 0
        for m in inputs:
            union |= m
        if not union or skip(eqn):
            continue
        if hit(eqn, union):
            return True
        for inner in _nested(eqn):
            if _finds(inner, _nested_inputs(inner, inputs, union), hit, skip):
                return True
        for out in eqn.outvars:
            mark[out] = union
    return False


def _reads_a_switch(jaxpr: jex.Jaxpr, tainted: list[bool]) -> bool:
    """Whether a switch (`_switches`) in ``jaxpr`` reads a value that depends on a tainted
    input."""
    return _finds(jaxpr, [int(t) for t in tainted], lambda eqn, union: _switches(eqn))


_COMPARISONS = frozenset({"lt", "le", "gt", "ge"})
_TIME, _DIFFERENTIATED = 1, 2


def _compares_both(jaxpr: jex.Jaxpr, marks: list[int]) -> bool:
    """Whether a comparison in ``jaxpr`` reads values that depend on both an input marked
    `_TIME` and one marked `_DIFFERENTIATED`."""
    return _finds(jaxpr, marks, lambda eqn, union: (
        eqn.primitive.name in _COMPARISONS and union == _TIME | _DIFFERENTIATED))


def warn_if_differentiating_a_switch_time(rhs: Callable, t: Any, y: Any, params: Any,
                                          perturbed: Any) -> None:
    """Warn when ``rhs(t, y, params)`` compares ``t`` with a value computed from a
    differentiated leaf of ``params`` (``perturbed``: a tree like it, a leaf ``None`` or
    ``False`` where it is not differentiated), or jumps on the state (`_jumps_in_state`).
    Called by the derivative rules when they are traced."""
    leaves, treedef = jax.tree.flatten(params)

    def field(t, y, leaves):
        return rhs(t, y, jax.tree.unflatten(treedef, leaves))

    closed = jax.make_jaxpr(field)(t, y, leaves)
    num_y = len(jax.tree.leaves(y))
    if _jumps_in_state(closed.jaxpr, num_y):
        _warn_switch(STATE_SWITCH_DERIVATIVE)
    # One flag per leaf of ``params`` (``perturbed`` has leaves where ``params`` has None).
    flags = jax.tree.leaves(jax.tree.map(
        lambda p, f: None if p is None else (f is not None and f is not False),
        params, perturbed, is_leaf=lambda x: x is None))
    if len(flags) != len(leaves) or not any(flags):
        return
    marks = [_TIME] + [0] * num_y + [_DIFFERENTIATED if flag else 0 for flag in flags]
    if len(marks) != len(closed.jaxpr.invars) or not _compares_both(closed.jaxpr, marks):
        return
    _warn_switch(
        "`rhs` compares the time `t` with a value computed from an argument you are "
        "differentiating (for example `jnp.where(t > t_switch, a, b)` with `t_switch` in "
        "`args`): a comparison has a zero derivative, so the gradient does not see the "
        "switch move. If `rhs` jumps there, the derivative in that time is lost (an "
        "epidemic model's lockdown date: 0 where central differences give 0.105), "
        "whatever the solver. Make the switch an `Event` with the condition "
        "`t - t_switch` (README, 'Inputs that switch in time'), which differentiates it.")


def _field_jaxpr(rhs: Callable, t0: Any, y0: Any, args: Any) -> jex.Jaxpr:
    """The jaxpr of ``rhs(t, y, args)``, its inputs ``t``, the leaves of ``y`` and the array
    leaves of ``args`` (one trace)."""
    dynamic, static = eqx.partition(args, eqx.is_array)

    def field(t, y, dynamic):
        return rhs(t, y, eqx.combine(dynamic, static))

    return jax.make_jaxpr(field)(t0, y0, dynamic).jaxpr


def _switches_in_time(jaxpr: jex.Jaxpr) -> bool:
    """Whether ``jaxpr`` (`_field_jaxpr`) switches on a value computed from ``t``."""
    return _reads_a_switch(jaxpr, [True] + [False] * (len(jaxpr.invars) - 1))


def switches_in_time(rhs: Callable, t0: Any, y0: Any, args: Any) -> bool:
    """Whether ``rhs(t, y, args)`` switches on a value computed from ``t`` (one trace)."""
    return _switches_in_time(_field_jaxpr(rhs, t0, y0, args))


def _jumps_in_state(jaxpr: jex.Jaxpr, num_y: int) -> bool:
    """Whether ``jaxpr`` (inputs ``t``, the ``num_y`` leaves of ``y``, then the rest) jumps
    (`_jumps`) on a value computed from ``y``."""
    marks = [0] + [1] * num_y + [0] * (len(jaxpr.invars) - 1 - num_y)
    return _finds(jaxpr, marks, lambda eqn, union: _jumps(eqn),
                  _is_a_solve_or_has_its_own_derivative)


STATE_SWITCH_DERIVATIVE = (
    "`rhs` switches on the state `y` (a comparison, `jnp.where` or `lax.cond` on `y`, sign, "
    "floor: an ideal diode, a clamp, a saturation): a comparison has a zero derivative, so "
    "if the solution crosses the switch, the gradient misses how the crossing time moves "
    "with what you differentiate, whatever the solver (a buck converter's diode: dvC/dD "
    "came out 2.9 where finite differences give 21.2). Make the switch an `Event` whose "
    "condition is the switched quantity and whose jump sets a mode variable kept in the "
    "state (README, 'Inputs that switch in time'); jaxadjoint.check_gradient tells whether "
    "this gradient is usable."
)


def warn_if_switching_in_time(solver: Any, rhs: Callable, t0: Any, y0: Any, args: Any) -> None:
    """Warn when ``rhs`` switches in time, or jumps on the state, and ``solver``'s error
    estimate cannot see it."""
    if solver.estimate_sees_time_changes:
        return
    jaxpr = _field_jaxpr(rhs, t0, y0, args)
    if _jumps_in_state(jaxpr, len(jax.tree.leaves(y0))):
        _warn_switch(
            "`rhs` jumps on the state `y` (a comparison, `jnp.where` or `lax.cond` on `y`, "
            "sign, floor: an ideal diode, a clamp): where the solution crosses it, "
            f"{type(solver).__name__}'s error estimate does not see a step across the "
            "jump (its main and embedded solutions differ only in stages at the step's end, "
            "on the same side), and the solution can be wrong by far more than `rtol` with "
            "no other sign (an ideal-diode clamp: 0.085 off at rtol=1e-10, where Rodas4 "
            "was 4e-11 off). Make the switch an `Event` with a mode variable in the state "
            "(README, 'Inputs that switch in time'), or use Rodas4.")
    if not _switches_in_time(jaxpr):
        return
    _warn_switch(
        "`rhs` switches on the time `t` (a `jnp.where`, `lax.cond`, table lookup, floor, "
        "sign, max/min or abs of t): if it switches or kinks there, "
        f"{type(solver).__name__}'s error estimate does not see a step across the switch, "
        "and the solution can be wrong by far more than `rtol` with no other sign (a "
        "switched infusion: 3e-4 at rtol=1e-9). Make the switch an `Event` (also the only "
        "way to differentiate in its time), or use Rodas4; for an input interpolated from "
        "many data points, land the steps on them (README, 'Inputs that switch in "
        "time').")
