"""The result of `solve`."""

from __future__ import annotations

from typing import Any

import equinox as eqx
from jax import Array

from ._dense import DenseInterpolation
from ._results import RESULTS


class EventLog(eqx.Module):
    """The events of a solve (``sol.events``), in the order they fired.

    Attributes:
        times: ``(K,)`` event times, NaN after the last event (``K = 1`` for terminal
            events alone, ``max_events + 1`` with jumps).  Differentiable.
        ys: the state just before each event (before its jump), a pytree like ``y0`` with
            a leading axis of ``K``; NaN after the last event.  Differentiable.
        which: ``(K,)`` the index in ``events`` of the condition that fired, ``-1`` after
            the last event.
        count: the number of events.
    """

    times: Array
    ys: Any
    which: Array
    count: Array


class Solution(eqx.Module):
    """What `jaxadjoint.solve` returns.

    Attributes:
        ts: the save times, shape ``(n_save,)`` (``[t1]`` when ``saveat`` is ``None``).
        ys: the state at ``ts``, a pytree like ``y0`` with a leading time axis.
        steps: the accepted step grid ``t_0, t_1, ..., t_T``, padded with ``inf`` to
            length ``max_steps + 1``.  A constant of the computation: not differentiated.
        integral: ``int_{t0}^{t1} R(t, y, args) dt`` by the Runge–Kutta quadrature of the
            solve, a pytree like ``R``'s output; ``None`` without ``integrand``.
        stats: ``num_steps`` (attempted), ``num_accepted_steps``, ``num_rejected_steps``,
            ``num_rhs_evals`` of the forward solve (Newton iterations included; the
            Jacobians of stiff solvers are counted apart, ``num_jacobians``, each ``N``
            forward-mode products); and for explicit solvers the stiffness
            report (`_stiffness`): ``num_stiff_steps`` (accepted steps at the stability
            boundary), ``longest_stiff_run`` and ``stiff_run_start`` (the time that run
            starts, NaN without one).
        result: `RESULTS.successful` or the reason for failure.
        interpolation: with ``SaveAt(dense=True)``, the continuous extension of every
            step (use `evaluate`); ``None`` otherwise.
        events: with ``events=``, an `EventLog` (which events fired, when, how many);
            ``None`` otherwise.  With jumps, ``steps`` has one row per segment.
    """

    ts: Array
    ys: Any
    steps: Array
    integral: Any
    stats: dict[str, Array]
    result: RESULTS
    interpolation: DenseInterpolation | None = None
    events: EventLog | None = None

    def evaluate(self, t: Any) -> Any:
        """The solution at ``t`` (scalar or 1-D array in ``[t0, t1]``) from the dense output.

        Needs ``saveat=SaveAt(dense=True)``.  Differentiable like ``ys``, and in ``t``
        (the interpolant's own time derivative).  A time outside ``[t0, t1]`` (beyond 16
        ulps of its ends) or NaN raises a `ValueError` when it and the solution are
        concrete; under `jax.jit` it gives NaN with a zero gradient, and no error whatever
        ``throw`` was (a loss may mask such times out).
        """
        if self.interpolation is None:
            raise ValueError(
                "`Solution.evaluate` needs a dense solution: pass "
                "`saveat=jaxadjoint.SaveAt(dense=True)` (with `ts=` too if you want saves)"
            )
        return self.interpolation.evaluate(t)
