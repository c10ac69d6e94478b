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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.extend.core as jex

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


class TimeSwitchWarning(UserWarning):
    """The right-hand side switches in time where the solver's error estimate cannot see it."""


def _reads_a_switch(jaxpr: jex.Jaxpr, tainted: list[bool]) -> bool:
    """Whether a switch (`_switches`) in ``jaxpr`` reads a value that depends on a tainted
    input.

    A nested jaxpr whose inputs are not the equation's own (loops' constants and carries)
    is searched with all of its inputs tainted: a false alarm there is a warning too many,
    never a switch missed.
    """
    taint: dict[Any, bool] = dict(zip(jaxpr.invars, tainted))

    def depends(x: Any) -> bool:
        return isinstance(x, jex.Var) and taint.get(x, False)

    for eqn in jaxpr.eqns:
        inputs = [depends(x) for x in eqn.invars]
        if not any(inputs):
            continue
        if _switches(eqn):
            return True
        for sub in jex.jaxprs_in_params(eqn.params):
            inner = getattr(sub, "jaxpr", sub)
            if len(inner.invars) == len(inputs):
                inner_tainted = inputs
            elif len(inner.invars) == len(inputs) - 1:  # `cond`: the branch index first
                inner_tainted = inputs[1:]
            else:
                inner_tainted = [True] * len(inner.invars)
            if _reads_a_switch(inner, inner_tainted):
                return True
        for out in eqn.outvars:
            taint[out] = True
    return False


def switches_in_time(rhs: Callable, t0: Any, y0: Any, args: Any) -> bool:
    """Whether ``rhs(t, y, args)`` switches on a value computed from ``t`` (one trace)."""
    dynamic, static = eqx.partition(args, eqx.is_array)

    def field(t, y, dynamic):
        return rhs(t, y, eqx.combine(dynamic, static))

    closed = jax.make_jaxpr(field)(t0, y0, dynamic)
    inputs = closed.jaxpr.invars
    return _reads_a_switch(closed.jaxpr, [True] + [False] * (len(inputs) - 1))


def warn_if_switching_in_time(solver: Any, rhs: Callable, t0: Any, y0: Any, args: Any) -> None:
    """Warn when ``rhs`` switches in time and ``solver``'s error estimate cannot see it."""
    if solver.estimate_sees_time_changes:
        return
    if not switches_in_time(rhs, t0, y0, args):
        return
    warn(
        "`rhs` switches on the time `t` (a `jnp.where`, `lax.cond`, table lookup, floor, "
        "sign, max/min or abs of t): if it switches or kinks there, "
        f"{type(solver).__name__}'s error estimate does not see a step across the switch, "
        "and the solution can be wrong by far more than `rtol` with no other sign (a "
        "switched infusion: 3e-4 at rtol=1e-9). Make the switch an `Event` (also the only "
        "way to differentiate in its time), or use Rodas4 or Kvaerno5. README, 'Inputs "
        "that switch in time'. (Silence with "
        "`warnings.simplefilter('ignore', jaxadjoint.TimeSwitchWarning)`.)",
        TimeSwitchWarning)
