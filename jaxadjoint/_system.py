"""The ODE as the solver sees it: flat vectors, internal forward time, split parameters.

`solve` ravels the state pytree once, closure-converts `rhs` and `integrand` (so arrays
they close over become leaves that can be differentiated), and splits everything into

- `Problem`: the differentiable data of one solve — ``y0`` (flat), ``params`` (every
  floating array of ``args``, ``rhs`` and ``integrand``), ``t0``, ``t1`` and the save
  times ``ts``;
- `System`: everything else — the static half of the parameters, how to unravel the
  state, the solver, the controller, the tolerances and ``max_steps``.

Internally the solver integrates in ``tau = direction * t`` with
``direction = sign(t1 - t0)``, so that time always increases; the vector field in
``tau`` is ``direction * rhs(direction * tau, y)``.  Multiplying by ``±1`` is exact, so
the step grid and every stage are bitwise those of a solve written in ``t``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array
from jax.flatten_util import ravel_pytree

from ._controllers import AbstractController, Tolerances
from ._dense import StagePlan, saves_stage_plan
from ._validation import is_python_number
from .solvers._base import AbstractSolver


class Problem(eqx.Module):
    """The differentiable inputs of one solve."""

    y0: Array  # flat state, shape (N,)
    params: Any  # floating arrays of (args, rhs, integrand); None elsewhere
    t0: Array
    t1: Array
    ts: Array  # save times, shape (n_save,)

    @property
    def direction(self) -> Array:
        """+1 for a forward solve, -1 for a backward one (``t1 < t0``)."""
        return jnp.where(self.t1 >= self.t0, 1, -1).astype(self.t0.dtype)


def _numbers_as(leaf: Any, dtype: Any) -> Any:
    """A Python number in a user function's output as an array of ``dtype``."""
    return jnp.asarray(leaf, dtype) if is_python_number(leaf) else leaf


class System(eqx.Module):
    """The non-differentiable description of one solve."""

    static_params: Any = eqx.field(static=True)  # non-array parts of (args, rhs, integrand)
    aux_params: Any  # non-floating arrays of (args, rhs, integrand): not differentiated
    unravel_y: Callable[[Array], Any] = eqx.field(static=True)
    unravel_integral: Callable[[Array], Any] | None = eqx.field(static=True)
    solver: AbstractSolver
    controller: AbstractController
    tol: Tolerances
    dt0: Array | None
    max_steps: int = eqx.field(static=True)
    throw: bool = eqx.field(static=True)
    dense: bool = eqx.field(static=True, default=False)  # keep every step's dense output
    land_on_ts: bool = eqx.field(static=True, default=False)  # steps end on the save times
    # Save times may fall inside steps (``saveat`` given, not landing): the reverse pass
    # then also linearises the stages that only the interpolant reads.
    interpolate_saves: bool = eqx.field(static=True, default=False)
    # Event conditions (`_events`): the direction of each (their functions are in the
    # parameters), and which of them start at exactly zero (just fired, see `_segments`).
    event_directions: tuple[int, ...] = eqx.field(static=True, default=())
    # `solve` called on concrete values (not under `jit`, `grad` or `vmap`): every output,
    # the grid and the statistics included, is materialised, so a plain solve writes its
    # grid through the record's windows too (`_forward.advance_window`).
    every_output_read: bool = eqx.field(static=True, default=False)
    event_zero_start: Array | None = None
    # At a restart (`_segments`): (E,) bool, the conditions that fire at the start of the
    # first step (crossing at this instant); (E,) the rate of change of those that just
    # fired and were turned back by their jump, else 0 (watched in the first step).
    event_pending: Array | None = None
    event_watch: Array | None = None
    # A segment of a solve with jumps (`_segments`): whether it starts at an event, so that
    # its start time is differentiated on its grid (`_start_time`); None outside segments.
    event_start: Array | None = None

    @property
    def has_integrand(self) -> bool:
        return self.unravel_integral is not None

    @property
    def stage_plan(self) -> StagePlan:
        """The stages of a step, including those the interpolated saves read."""
        return saves_stage_plan(self)

    def _parts(self, params: Any) -> tuple[Any, Callable, Callable | None, tuple]:
        return eqx.combine(params, self.aux_params, self.static_params)

    def rhs(self, t: Array, y: Array, params: Any) -> Array:
        """The user's ``rhs`` in real time on the flat state."""
        args, rhs, _, _ = self._parts(params)
        state = self.unravel_y(y)
        # A Python number in the output (a clock's rate) takes its state leaf's dtype.
        out = jax.tree.map(lambda o, s: _numbers_as(o, s.dtype), rhs(t, state, args), state)
        return ravel_pytree(out)[0].astype(y.dtype)

    def integrand(self, t: Array, y: Array, params: Any) -> Array:
        """The user's ``integrand`` ``R(t, y, args)`` in real time, flat."""
        args, _, integrand, _ = self._parts(params)
        # A Python number in the output (a constant cost) takes the solve's dtype.
        out = jax.tree.map(lambda o: _numbers_as(o, y.dtype), integrand(t, self.unravel_y(y), args))
        return ravel_pytree(out)[0].astype(y.dtype)

    def condition(self, i: int, tau: Array, y: Array, params: Any, direction: Array) -> Array:
        """Event condition ``i`` at internal time ``tau`` on the flat state: a scalar."""
        args, _, _, conditions = self._parts(params)
        return jnp.asarray(conditions[i](direction * tau, self.unravel_y(y), args), y.dtype)

    def conditions(self, tau: Array, y: Array, params: Any, direction: Array) -> Array:
        """Every event condition at ``(tau, y)``, ``(E,)``."""
        return jnp.stack([self.condition(i, tau, y, params, direction)
                          for i in range(len(self.event_directions))])

    def field(self, tau: Array, y: Array, params: Any, direction: Array) -> Array:
        """The vector field in internal time: ``direction * rhs(direction * tau, y)``."""
        return direction * self.rhs(direction * tau, y, params)

    def field_integrand(self, tau: Array, y: Array, params: Any, direction: Array) -> Array:
        """The integrand in internal time, so that ``integral = int R dtau`` in ``tau``."""
        return direction * self.integrand(direction * tau, y, params)
