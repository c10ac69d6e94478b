"""Small pieces shared by the non-default sensitivity methods.

- `DerivedSystem`: a `System`-like object with a different vector field (an augmented
  sensitivity system, or an adjoint system integrated backwards), which `forward_loop`
  integrates exactly like the user's system: the loop only reads ``field``,
  ``field_integrand``, ``has_integrand``, the solver, the controller, the tolerances,
  ``dt0``, ``max_steps`` and ``throw``.
- Selection of the differentiated ("perturbed") parameter leaves, so that methods whose
  cost grows with the number of parameters pay only for the ones being differentiated.
- The continuous time-derivative formulas, shared by every method:
  ``dy(t_i)/dt_i = f(t_i, y(t_i))``, ``dy/dt0 = -Phi f(t0, y0)``,
  ``dq/dt0 = -R(t0, y0)`` (plus the state term), ``dq/dt1 = R(t1, y(t1))``.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array
from jax.flatten_util import ravel_pytree

from ._controllers import AbstractController, Tolerances
from ._dense import StagePlan, saves_stage_plan
from ._results import RESULTS
from ._runtime_error import raise_if
from ._system import System
from .solvers._base import AbstractSolver


class DerivedSystem(eqx.Module):
    """A vector field built from a `System`, integrable by `forward_loop`.

    Subclasses define `field` (and `field_integrand` when ``has_integrand``); the solver,
    controller, tolerances, ``dt0``, ``max_steps`` and ``throw`` are fields so that a
    derived system may change them (an adjoint system starts with ``dt0=None``; a
    sensitivity system wraps the controller).
    """

    base: System
    solver: AbstractSolver
    controller: AbstractController
    tol: Tolerances
    dt0: Array | None
    max_steps: int = eqx.field(static=True)
    throw: bool = eqx.field(static=True)
    land_on_ts: bool = eqx.field(static=True)
    interpolate_saves: bool = eqx.field(static=True)
    dense = False  # derived systems keep no dense output
    every_output_read = False  # their grids and statistics are read where they are needed

    @property
    def has_integrand(self) -> bool:
        return False

    @property
    def stage_plan(self) -> StagePlan:
        return saves_stage_plan(self)

    @abc.abstractmethod
    def field(self, tau: Array, z: Array, params: Any, direction: Array) -> Array:
        """The derived vector field in internal time ``tau``."""

    def field_integrand(self, tau: Array, z: Array, params: Any, direction: Array) -> Array:
        raise NotImplementedError


def fail_if_differentiated_failure(system: Any, value: Any, result: Array) -> Any:
    """``value``, with a run-time error where the solve failed.

    Attach it to a quantity that every derivative reads (a recorded grid, a sensitivity
    matrix, the cotangent of the saves): the check then runs exactly when the solve is
    differentiated.  With ``throw=False`` the error is `RESULTS.failed_solve_differentiated`.
    With ``throw=True`` it is the failure's own message: the forward pass raises it too,
    but under `jax.jit` a loss linear in the outputs never reads their values, and XLA
    drops that check with them (a zero gradient was returned).
    """
    return _refuse_failure(value, result, system.throw)


def _refuse_failure(value: Any, result: Any, throw: bool) -> Any:
    failed = result != RESULTS.successful
    if throw:
        # The same error as the forward pass's (`to_solve_output`), of the same type.
        return result.error_if(value, failed)

    # `raise_if`, not `equinox.error_if`: under `jax.vmap` the message names the first
    # failed solve of the batch and how many failed, and it says what the failure was.
    def message(code: Any) -> str:
        failure = RESULTS._index_to_message[int(code)]
        return f"{RESULTS[RESULTS.failed_solve_differentiated]} The failure: {failure}"

    return raise_if(value, failed, message, result._value)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _fails_when_differentiated(value: Array, result: Any, throw: bool) -> Array:
    del result, throw
    return value


@_fails_when_differentiated.defjvp
def _fails_when_differentiated_jvp(throw, primals, tangents):
    value, result = primals
    value_dot, _ = tangents
    # The check is on a primal quantity the tangent is scaled by: under `jax.grad` it runs
    # in the forward pass (a residual), where a check on the tangent itself would be
    # dropped with the unused forward-mode half of the linearised program.
    one = _refuse_failure(jnp.ones((), value.dtype), result, throw)
    return value, value_dot * one


def fail_when_differentiated(system: Any, outputs: Any, result: Array) -> Any:
    """``outputs`` (floating arrays), raising at run time in any derivative of them where
    the solve failed (`fail_if_differentiated_failure`'s messages); undifferentiated,
    they are returned as they are.

    For failures decided outside every sensitivity method's own pass, such as an events
    solve that reached ``max_events`` or chattered while each of its segments succeeded.
    """
    return jax.tree.map(lambda x: _fails_when_differentiated(x, result, system.throw),
                        outputs)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _first_order_marker(name: str, one: Array) -> Array:
    del name
    return one


@_first_order_marker.defjvp
def _first_order_marker_jvp(name, primals, tangents):
    del primals, tangents
    raise TypeError(
        f"`sensitivity={name}()` gives first derivatives only: its derivative rule cannot "
        "be differentiated again (jax.hessian, jax.jacfwd of jax.grad, ...; it returned "
        "zeros before). Use `sensitivity=jaxadjoint.DiscreteForward()` for second "
        "derivatives (exact on the same step grid).")


def first_order_only(name: str, tangent: Any, primals: Any) -> Any:
    """``tangent`` (a derivative rule's output), unchanged, but raising at trace time when
    the rule itself is differentiated with respect to ``primals`` (second derivatives).

    For methods whose rule computes the derivative from constants (the sensitivity
    matrix of `ForwardSensitivity`, the differences of `FiniteDifferences`): JAX would
    differentiate it to zero.  The tangent is scaled by a one that depends on every
    primal input (by a `jnp.where`, so that no NaN or Inf input leaks into it) and whose
    own derivative raises.

    Inside `jax.lax.scan` (`fori_loop`, ...) under reverse mode JAX evaluates the marker by
    its primal alone and never calls its rule (a Hessian through a multiple-shooting scan
    came out zero).  So the one is also ``1 + sqrt(0 * x)``, whose derivative is NaN: the
    second derivative there is NaN, never a silent zero.
    """
    leaves = [x for x in jax.tree.leaves(primals) if eqx.is_inexact_array(x)]
    if not leaves:
        return tangent
    dtype = leaves[0].dtype
    total = sum(jnp.sum(x).astype(dtype) for x in leaves)
    # Zero in value (also for a NaN or Inf input), NaN in derivative (sqrt at 0).
    zero = jnp.where(jnp.isfinite(total), 0 * total, 0)
    one = _first_order_marker(name, 1 + jnp.sqrt(zero))
    return jax.tree.map(lambda t: t * one.astype(t.dtype), tangent)


def derived_kwargs(system: System, **overrides: Any) -> dict[str, Any]:
    """Constructor arguments of a `DerivedSystem` copying ``system``'s settings."""
    kwargs = dict(
        base=system, solver=system.solver, controller=system.controller, tol=system.tol,
        dt0=system.dt0, max_steps=system.max_steps, throw=system.throw,
        land_on_ts=system.land_on_ts, interpolate_saves=system.interpolate_saves,
    )
    kwargs.update(overrides)
    return kwargs


def mask_params(params: Any, perturbed: Any) -> tuple[Any, Any]:
    """Split ``params`` into (differentiated leaves, the rest), ``None`` in the holes.

    ``perturbed`` is a tree like ``params`` whose leaves say whether that leaf is being
    differentiated (a bool, or a tangent that is ``None`` when it is not).
    """
    def is_none(x: Any) -> bool:
        return x is None

    def on(p: Any, flag: Any) -> Any:
        return p if p is not None and flag is not None and flag is not False else None

    def off(p: Any, flag: Any) -> Any:
        return None if on(p, flag) is not None else p

    ons = jax.tree.map(on, params, perturbed, is_leaf=is_none)
    offs = jax.tree.map(off, params, perturbed, is_leaf=is_none)
    return ons, offs


def combine(on: Any, off: Any) -> Any:
    """Inverse of `mask_params`."""
    return eqx.combine(on, off)


def ravel(tree: Any, dtype: Any) -> tuple[Array, Callable[[Array], Any]]:
    """`ravel_pytree` that always returns an array of ``dtype`` (empty trees included)."""
    flat, unravel = ravel_pytree(tree)
    return flat.astype(dtype), unravel


def tangent_or_zeros(tangent: Any, like: Array) -> Array:
    """A symbolic-zero tangent (``None``) as explicit zeros."""
    return jnp.zeros_like(like) if tangent is None else tangent


def save_slopes(system: System, params: Any, ts: Array, ys: Array) -> Array:
    """``f(t_i, y(t_i))`` at every save: the derivative of a save with respect to its time."""
    return jax.vmap(lambda t, y: system.rhs(t, y, params))(ts, ys)


def integrand_or_empty(system: System, t: Array, y: Array, params: Any) -> Array:
    """``R(t, y)`` (flat), or an empty vector without an integrand."""
    if not system.has_integrand:
        return jnp.zeros((0,), y.dtype)
    return system.integrand(t, y, params)


def materialise_tangent(primal: Any, tangent: Any) -> Any:
    """Replace symbolic-zero (``None``) tangents of array leaves of ``primal`` by zeros."""
    def fill(p: Any, t: Any) -> Any:
        if p is None:
            return None
        return jnp.zeros_like(p) if t is None else t

    return jax.tree.map(fill, primal, tangent, is_leaf=lambda x: x is None)
