"""The interface every sensitivity method (`sensitivity=` of `solve`) implements."""

from __future__ import annotations

import abc
from typing import ClassVar, NamedTuple

import equinox as eqx
from jax import Array

from ._dense import DenseRows
from ._results import RESULTS
from ._system import Problem, System


class Record(NamedTuple):
    """Non-differentiable facts about the forward solve."""

    steps: Array  # (max_steps + 1,) accepted grid in real time, inf-padded
    stats: dict[str, Array]
    result: RESULTS


class EventOutput(NamedTuple):
    """Where a solve with event conditions ended (`_events`)."""

    t: Array  # the event time, or t1 if none fired (real time; differentiable)
    y: Array  # (N,) the state there (differentiable)
    fired: Array  # bool
    which: Array  # int32 index of the condition that fired, -1 if none
    scale: Array  # max |g| at the ends of the event step (not differentiated)
    # (E,) conditions crossing at the same instant, not fired (`EventRecord`; not
    # differentiated)
    pending: Array | None = None


class SolveOutput(NamedTuple):
    ys: Array  # (n_save, N)
    integral: Array  # (Q,)
    record: Record
    dense: DenseRows | None = None  # every step's dense output (``SaveAt(dense=True)``)
    event: EventOutput | None = None  # with event conditions


class AbstractSensitivity(eqx.Module):
    """How derivatives of `solve`'s outputs with respect to its inputs are computed.

    `__call__` must return the forward solution and make it differentiable (by a custom
    VJP or JVP rule) with respect to every leaf of ``problem``.
    """

    # True for methods built on `jax.custom_vjp`, which JAX cannot differentiate in forward
    # mode: `solve` then rejects forward-mode tracers with a clear error.
    reverse_mode_only: ClassVar[bool] = False
    # Whether `SaveAt(dense=True)` (a differentiable `Solution.evaluate`) is supported.
    supports_dense: ClassVar[bool] = False

    @abc.abstractmethod
    def __call__(self, system: System, problem: Problem) -> SolveOutput:
        """Solve, returning outputs differentiable with respect to ``problem``."""
