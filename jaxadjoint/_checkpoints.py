"""What the forward pass keeps for the discrete adjoint, and how the reverse pass reads it.

Every strategy runs the same reverse step, with the same operations in the same order, on
the same recorded grid, so all give the same gradients to round-off: each is the exact
derivative of the computed solution.  Bit for bit is usual but not guaranteed: XLA compiles
the forward loop, `Recursive`'s replay and the reverse step separately and may round the
same operations differently in each (`_reverse` says how).  They trade memory against
recomputation:

- `StoreStates` (the default but for Newton-iterated solvers): keep ``y_n``; recompute the
  stages in the reverse pass.
  Memory ``O(max_steps * N)``; ``s`` extra rhs evaluations per step, which the
  vector–Jacobian products need anyway for their linearisation point.
- `StoreStages`: keep every live stage value ``Y_m`` (a Rosenbrock step: ``y_n`` and its
  increments ``U_i``, `StepOutput.stages`); no stage recomputation, and the stage
  linearisations of a step are independent of each other.  Memory
  ``O(max_steps * s * N)``; it pays only when the stage chain itself is expensive
  (Newton-iterated and Rosenbrock stages).  The default of Newton-iterated solvers
  (`DiscreteAdjoint.checkpoint_for`): their stages, solved again, need not be the same
  iterate.

Their records are allocated, not filled (`_uninitialised`): memory (address space) is
``O(max_steps)``, time and resident memory follow the steps taken.
"""

from __future__ import annotations

import abc
from typing import Any

import jax.numpy as jnp
from jax import Array

from ._batched_reverse import reverse_all_steps
from ._forward import Recorder, write_slot
from ._reverse import RecordReader, SaveCotangents
from ._system import System
from ._uninitialised import uninitialised
from .solvers._base import StepOutput


class AbstractCheckpoint(Recorder):
    """A recorder for the forward loop plus the matching reverse sweep."""

    @abc.abstractmethod
    def reverse(
        self,
        system: System,
        params: Any,
        direction: Array,
        store: Any,
        grid: Array,
        num_accepted: Array,
        lam: Array,
        pbar: Any,
        mu: Array,
        saves: SaveCotangents,
    ) -> tuple[Array, Any, Any]:
        """Reverse through all accepted steps: ``(dL/dy0, dL/dparams, health)``.

        ``health`` is the sweep's `_adjoint_health.Health` (where, if anywhere, the
        adjoint blew up)."""


class _EveryStep(AbstractCheckpoint):
    """A strategy that records every accepted step and reverses them in one sweep."""

    @abc.abstractmethod
    def read(self, store: Any, n: Array) -> tuple[Array | None, Array | None]:
        """``(y_n or None, live stages of step n or None)`` from the record."""

    def reverse(self, system, params, direction, store, grid, num_accepted, lam, pbar, mu,
                saves):
        return reverse_all_steps(
            system, params, direction, grid, num_accepted, RecordReader(store, self.read),
            lam, pbar, mu, saves,
        )


class StoreStates(_EveryStep):
    """Keep every accepted state ``y_n``; recompute the stages on the way back."""

    def init(self, max_steps: int, y0: Array, num_live: int, witness: Array) -> Array:
        del num_live
        return uninitialised((max_steps,) + y0.shape, y0.dtype, witness, "states")

    def record(
        self, store: Array, n: Array, y: Array, step: StepOutput, live: tuple, active: Array
    ) -> Array:
        del step, live
        return write_slot(store, n, y, active)

    def read(self, store: Array, n: Array) -> tuple[Array, None]:
        return store[n], None


class StoreStages(_EveryStep):
    """Keep the live stage values of every accepted step; no recomputation."""

    def init(self, max_steps: int, y0: Array, num_live: int, witness: Array) -> Array:
        return uninitialised((max_steps, num_live) + y0.shape, y0.dtype, witness, "stages")

    def record(
        self, store: Array, n: Array, y: Array, step: StepOutput, live: tuple, active: Array
    ) -> Array:
        del y
        stages = jnp.stack([step.stages[m] for m in live])
        return write_slot(store, n, stages, active)

    def read(self, store: Array, n: Array) -> tuple[None, Array]:
        return None, store[n]
