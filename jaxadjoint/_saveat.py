"""`SaveAt`: what a solve returns besides ``y(t1)``.

Save times do not change the steps: each is evaluated from the continuous extension
(dense output) of the step that contains it, ``y(t_n + theta h) = y_n + h sum_m
b_m(theta) k_m``, and the discrete adjoint differentiates that interpolant exactly.
``land_on_ts=True`` brings back steps that end exactly on every save time (the solver's
own nodes, at the price of shortened steps), and ``dense=True`` keeps the interpolant of
every step so that `Solution.evaluate` can be called at any time after the solve.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax import Array


def _times_as_array(ts: Any) -> Any:
    """A list or tuple of times as an array (NumPy when concrete, so that `solve` can
    still check it before tracing); anything else as given."""
    if isinstance(ts, (list, tuple)):
        concrete = all(isinstance(t, (int, float, np.number, np.ndarray)) for t in ts)
        return np.asarray(ts) if concrete else jnp.stack([jnp.asarray(t) for t in ts])
    return ts


class SaveAt(eqx.Module):
    """Where `jaxadjoint.solve` saves the state.

    Arguments:
        ts: 1-D array of save times from ``t0`` towards ``t1`` (repeats allowed), or
            ``None`` for ``y(t1)`` alone.  A bare array passed as ``saveat=`` means
            ``SaveAt(ts=array)``.
        dense: also return the continuous extension of every accepted step, for
            ``sol.evaluate(t)`` at any ``t`` in ``[t0, t1]`` (differentiable).  It is
            built from the state and stage slopes of each step: ``max_steps`` rows of
            ``(1 + L) N`` numbers for ``L`` interpolation stages, allocated but filled
            only for the steps taken.
        land_on_ts: shorten steps so that they end exactly on the save times (the old
            meaning of ``saveat``).  The saves are then the solver's own nodes, and the
            step sequence depends on the save times.  The natural choice for fixed-step
            solvers' save times that fall on their grid anyway, or when a save must be
            a node of the method.
    """

    ts: Array | None = eqx.field(default=None, converter=_times_as_array)
    dense: bool = eqx.field(default=False, static=True)
    land_on_ts: bool = eqx.field(default=False, static=True)

    def __check_init__(self) -> None:
        if not isinstance(self.dense, bool):
            raise TypeError(f"`SaveAt.dense` must be True or False, got {self.dense!r}")
        if not isinstance(self.land_on_ts, bool):
            raise TypeError(f"`SaveAt.land_on_ts` must be True or False, got {self.land_on_ts!r}")
        if self.land_on_ts and self.ts is None:
            raise ValueError("`SaveAt(land_on_ts=True)` needs save times `ts`")


def as_saveat(saveat: Any) -> SaveAt:
    """``saveat=`` of `solve` as a `SaveAt` (``None`` and bare arrays included)."""
    if saveat is None:
        return SaveAt()
    if isinstance(saveat, SaveAt):
        return saveat
    if isinstance(saveat, (bool, str, dict)) or callable(saveat):
        raise TypeError(
            "`saveat` must be None, a 1-D array of times or `jaxadjoint.SaveAt(...)`, "
            f"got {type(saveat).__name__}"
        )
    return SaveAt(ts=saveat)
