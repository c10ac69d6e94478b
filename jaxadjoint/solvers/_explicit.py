"""Explicit Runge–Kutta solvers: each is a tableau; one generic step serves them all.

The state is a flat vector throughout (pytrees are ravelled once by `solve`), so a step
is a handful of fused vector operations and the stage values stack into matrices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jax import Array

from . import _tableaus as tab
from ._base import AbstractSolver, FlatField, StepOutput
from ._tableaus import ButcherTableau


def linear_combination(y: Array, h: Array, coeffs: Sequence[float], ks: Sequence[Array]) -> Array:
    """``y + h * sum_j coeffs[j] * ks[j]``, skipping zero coefficients.

    The forward step, the reverse pass and every checkpoint strategy build stage values
    through this one function, so they perform the same arithmetic in the same order.
    """
    acc = None
    for coeff, k in zip(coeffs, ks):
        if coeff == 0:
            continue
        term = float(coeff) * k
        acc = term if acc is None else acc + term
    return y if acc is None else y + h * acc


def stage_time(t: Array, h: Array, c: float) -> Array:
    """Time of a stage, ``t + c h`` (exactly ``t`` for ``c == 0``)."""
    return t if c == 0 else t + float(c) * h


def erk_step(
    tableau: ButcherTableau, f: FlatField, t: Array, y: Array, h: Array, k1: Array, t_next: Array
) -> StepOutput:
    """One explicit Runge–Kutta step of size ``h = t_next - t`` from ``(t, y)``.

    ``k1 = f(t, y)`` is passed in (it is the FSAL stage of the previous step, or was
    computed once after the last accepted step).  For FSAL tableaus the last stage is
    evaluated at ``(t_next, y_new)``: it is then exactly the ``k1`` of the next step.
    """
    a, b, c = tableau.a, tableau.b, tableau.c
    s = tableau.num_stages
    ks, stages = [k1], [y]
    y_new = None
    for m in range(1, s):
        if tableau.fsal and m == s - 1:
            y_new = linear_combination(y, h, b[:m], ks)
            ks.append(f(t_next, y_new))
            stages.append(y_new)
        else:
            stage = linear_combination(y, h, a[m, :m], ks)
            ks.append(f(stage_time(t, h, c[m]), stage))
            stages.append(stage)
    if y_new is None:
        y_new = linear_combination(y, h, b, ks)
    y_error = None
    if tableau.b_error is not None:
        y_error = linear_combination(jnp.zeros_like(y), h, tableau.b_error, ks)
    return StepOutput(y_new, y_error, stages, ks)


class AbstractERK(AbstractSolver):
    """An explicit Runge–Kutta method, fully described by its Butcher tableau.

    Its step is `erk_step`; its step adjoint is `_reverse`'s (the paper's Algorithm 1),
    whose stage rows the sweep may batch into one parameter VJP (``stage_rows``).
    """

    tableau: ClassVar[ButcherTableau]
    stage_rows: ClassVar[bool] = True

    @property
    def adaptive(self) -> bool:
        """Whether the method has an embedded error estimate (can adapt its step)."""
        return self.tableau.b_error is not None

    @property
    def order(self) -> int:
        return self.tableau.order

    @property
    def error_order(self) -> int | None:
        return self.tableau.error_order

    @property
    def rhs_evals_per_step(self) -> int:
        """Evaluations per step when the first stage is reused (FSAL or carried)."""
        return self.tableau.num_stages - 1

    @property
    def fsal(self) -> bool:
        return self.tableau.fsal

    def step(self, f, t, y, h, k1, t_next) -> StepOutput:
        return erk_step(self.tableau, f, t, y, h, k1, t_next)

    def stiffness(self, step: StepOutput, k_next: Array, h: Array) -> Array | None:
        """``h ||k_i - k_j|| / ||Y_i - Y_j||`` over the real stability boundary.

        Hairer's stiffness test of DOPRI5: two stages at the same time ``t + c h``
        (`ButcherTableau.stiffness_pair`) give ``rho(J)`` along their difference for the
        price of two norms.  ``Y_i - Y_j = h sum_m (a[i, m] - a[j, m]) k_m`` is formed
        from the slopes (``b`` is the row of ``y_{n+1}``), so ``h`` cancels and the stage
        values are not read: reading them would change how XLA fuses (and rounds) the
        stages, which `StoreStates` recomputes bit for bit in the reverse pass.  ``None``
        for tableaus without such a pair.
        """
        del h
        pair = self.tableau.stiffness_pair
        if pair is None:
            return None
        i, j = pair
        rows = [*self.tableau.a, self.tableau.b]
        slopes = jax.lax.optimization_barrier([*step.ks, k_next])
        num = jnp.sum(jnp.square(slopes[i] - slopes[j]))
        diff = linear_combination(jnp.zeros_like(slopes[0]), 1.0, rows[i] - rows[j], slopes)
        den = jnp.sum(jnp.square(diff))
        scale = 1 / self.tableau.real_stability_boundary
        return jnp.where(den > 0, jnp.sqrt(num / jnp.where(den > 0, den, 1)) * scale, 0)

    def reverse_step(self, system, tau, t_next, y, stages, lam, mu, params, direction, pbar,
                     kbar_saves) -> tuple[Array, Any]:
        from .._reverse import erk_reverse_step  # the sweep's module builds on this one

        return erk_reverse_step(
            system, tau, t_next, y, stages, lam, mu, params, direction, pbar, kbar_saves
        )

    def stage_plan(self, interpolating: bool) -> Any:
        from .._dense import stage_plan  # _dense reads the tableaus and interpolants

        return stage_plan(self, interpolating)


class Euler(AbstractERK):
    """Explicit Euler, order 1. Fixed step only."""

    tableau: ClassVar[ButcherTableau] = tab.EULER


class Heun(AbstractERK):
    """Heun's method (explicit trapezoidal rule), order 2. Fixed step only."""

    tableau: ClassVar[ButcherTableau] = tab.HEUN


class RK4(AbstractERK):
    """The classical fourth-order Runge–Kutta method. Fixed step only."""

    tableau: ClassVar[ButcherTableau] = tab.RK4


class BogackiShampine(AbstractERK):
    """Bogacki–Shampine 3(2), FSAL; good at loose tolerances."""

    tableau: ClassVar[ButcherTableau] = tab.BOGACKI_SHAMPINE


class Fehlberg45(AbstractERK):
    """Runge–Kutta–Fehlberg 4(5), propagating the fourth-order solution."""

    tableau: ClassVar[ButcherTableau] = tab.FEHLBERG45


class CashKarp(AbstractERK):
    """Cash–Karp 5(4), the method of the paper's experiments (with `OdeintController`)."""

    tableau: ClassVar[ButcherTableau] = tab.CASH_KARP


class Dopri5(AbstractERK):
    """Dormand–Prince 5(4), FSAL. The default."""

    tableau: ClassVar[ButcherTableau] = tab.DOPRI5


class Tsit5(AbstractERK):
    """Tsitouras 5(4), FSAL; often slightly more efficient than Dopri5."""

    tableau: ClassVar[ButcherTableau] = tab.TSIT5


class Vern6(AbstractERK):
    """Verner's "most efficient" 6(5) pair, FSAL; for tight tolerances."""

    tableau: ClassVar[ButcherTableau] = tab.VERN6


class Vern7(AbstractERK):
    """Verner's "most efficient" 7(6) pair; for very tight tolerances."""

    tableau: ClassVar[ButcherTableau] = tab.VERN7


class Vern8(AbstractERK):
    """Verner's "most efficient" 8(7) pair; for very tight tolerances."""

    tableau: ClassVar[ButcherTableau] = tab.VERN8
