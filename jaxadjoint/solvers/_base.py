"""The interface of a solver family: its step, and the hand-derived adjoint of its step.

The forward loop (`_forward`), the checkpoint replays (`_recursive`), the forward-mode
replay (`_discrete_forward`) and the reverse sweeps (`_reverse`, `_batched_reverse`) call a
solver only through this interface, so they do not care which family took a step:

- `step(f, t, y, h, k1, t_next)`: one attempted step of size ``h = t_next - t`` from
  ``(t, y)`` with ``k1 = f(t, y)`` given, returning `StepOutput` (the new state, the
  error estimate, the stage values and slopes the loop records and the dense output reads);
- `fsal`: whether ``step.ks[-1]`` is ``f(t_next, y_new)``, the next step's ``k1``;
- `reverse_step(system, tau, t_next, y, stages, lam, mu, params, direction, pbar,
  kbar_saves)`: given ``lam = dL/dy_{n+1}``, return ``(dL/dy_n, pbar + dL/dparams of the
  step)``, the exact derivative of `step` on the recorded grid (``t_n``, ``h`` constants);
- `stage_plan(interpolating)`: the stages the dense output reads (`_dense.StagePlan`).

Stiff families (`AbstractStiffFamily`) also split off the part of a step that depends only
on its start ``(t, y)``, not on ``h``: `linearise(f, t, y)` (``J = df/dy``, and what else
the family needs there), which `step` accepts as ``linearisation=``.  A rejected step
restarts from the same ``(t, y)``, so the forward loop passes the previous attempt's
linearisation instead of computing it again (bitwise the same values).

Explicit Runge–Kutta methods additionally let the sweep take the parameter adjoint of
several stages (of several steps) as one vector–Jacobian product (`stage_rows`); other
families adjoin a whole step at once.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax.numpy as jnp
from jax import Array

from ._linear_solver import AbstractLinearSolver, DenseLinearSolver

# f(t, y) -> dy/dt on flat vectors, with the parameters already bound.
FlatField = Callable[[Array, Array], Array]


def continuous_extension(y: Array, h: Array, weights: list[Array], k: Array) -> Array:
    """``y + h sum_l weights[l] k_l`` for ``y (M, N)``, ``h (M,)``, ``k (M, L, N)``, the
    weights ``(M,)`` each: the sum in stage order, as unrolled elementwise arithmetic that
    XLA fuses into one loop over the ``M`` times (every family's dense output ends here)."""
    acc = weights[0][:, None] * k[:, 0, :]
    for j, w in enumerate(weights[1:], start=1):
        acc = acc + w[:, None] * k[:, j, :]
    return y + h[:, None] * acc



class AbstractDenseWeights:
    """The weights ``b_l(theta)`` of a family's continuous extension, as `_dense` reads
    them (static data: subclasses are equal and hashed by their tableau's identity).

    A family defines ``weight_list`` (the ``L`` weights, each shaped like ``theta``) and,
    when ``b_1'(0)`` is not 1, ``initial_slope``; evaluation and the ``(M, L)`` matrix
    follow from the list.
    """

    def weight_list(self, theta: Array) -> list[Array]:
        raise NotImplementedError

    def weight_matrix(self, theta: Array) -> Array:
        """``(M, L)`` weights at ``theta (M,)``, each computed once per time."""
        return jnp.stack(self.weight_list(theta), axis=1)

    def combine(self, theta: Array, y: Array, h: Array, k: Array) -> Array:
        """``y + h sum_l b_l(theta) k_l`` for ``theta (M,)``, ``y (M, N)``, ``k (M, L, N)``."""
        return continuous_extension(y, h, self.weight_list(theta), k)

    def initial_slope(self) -> float:
        """``b_1'(0)``, 1 unless the family says otherwise (`_dense.final_row_slopes`)."""
        return 1.0

class StepOutput(NamedTuple):
    y_new: Array
    y_error: Array | None  # the embedded error estimate; None without an embedded pair
    # What the reverse step reads back when the record keeps a step's stages (`StoreStages`,
    # the plan's live ones); stages[0] is y_n.  Runge–Kutta families: the stage inputs Y_m;
    # Rosenbrock: y_n and the increments U_i.
    stages: list[Array]
    # k_m = f(t_m, Y_m) (stage slopes; for a Rosenbrock step, the slopes U_m / h of its
    # dense output after ks[0]); ks[0] is f(t_n, y_n)
    ks: list[Array]
    # Whether the step's nonlinear stage equations were solved (implicit methods; None for
    # explicit and linearly implicit ones): a step that did not converge is rejected.
    converged: Array | None = None
    # Right-hand side evaluations of the step beyond ``k1`` when they vary from step to
    # step (Newton iterations; int32); None: the solver's fixed `rhs_evals_per_step`.
    num_rhs_evals: Array | None = None


class AbstractSolver(eqx.Module):
    """A solver family: one step and its adjoint (module docstring)."""

    # Whether the reverse sweep may collect stage rows (`_reverse.StageCotangents`) and take
    # their parameter adjoint in blocks: true for explicit Runge–Kutta methods only.
    stage_rows: ClassVar[bool] = False
    # Whether `DiscreteAdjoint()` keeps every stage value by default (`StoreStages`): for
    # Newton-iterated stages, which a reverse pass cannot recompute to round-off
    # (`_esdirk`, "How exact").
    keeps_stages_by_default: ClassVar[bool] = False

    @property
    @abc.abstractmethod
    def adaptive(self) -> bool:
        """Whether the method has an embedded error estimate (can adapt its step)."""

    @property
    def estimate_sees_time_changes(self) -> bool:
        """Whether the error estimate sees ``f`` change in ``t`` alone within a step (a
        switch written into the right-hand side; `_time_switches`).  Not so for Rodas5."""
        return True

    @property
    @abc.abstractmethod
    def order(self) -> int:
        """Classical order of the propagated solution."""

    @property
    @abc.abstractmethod
    def error_order(self) -> int | None:
        """Order of the embedded solution, or ``None``."""

    @property
    @abc.abstractmethod
    def fsal(self) -> bool:
        """Whether the last slope of a step is ``f(t_{n+1}, y_{n+1})``."""

    @property
    @abc.abstractmethod
    def rhs_evals_per_step(self) -> int:
        """Right-hand side evaluations of one step beyond ``k1`` (Jacobians not counted)."""

    @property
    def jacobians_per_step(self) -> int:
        """Jacobians ``df/dy`` (``N`` forward-mode products each) one step evaluates."""
        return 0

    def stiffness(self, step: StepOutput, k_next: Array, h: Array) -> Array | None:
        """``h rho(J)`` over the method's stability boundary, estimated from ``step``, or ``None``.

        ``k_next = f(t_next, y_new)``.  A value near 1 on step after step means that
        stability, not accuracy, sets the step size (`_stiffness`).  ``None``: the family
        has no such limit (stiff solvers) or no free estimate.
        """
        del step, k_next, h
        return None

    def with_tolerances(self, rtol: Array, atol: Array) -> AbstractSolver:
        """The solver as a solve with these tolerances uses it (`solve` calls this).

        Families whose step depends on the tolerances (the Newton test of implicit
        methods) keep them; the others return themselves.
        """
        del rtol, atol
        return self

    @abc.abstractmethod
    def step(
        self, f: FlatField, t: Array, y: Array, h: Array, k1: Array, t_next: Array
    ) -> StepOutput:
        """One step of size ``h = t_next - t`` from ``(t, y)``; ``k1 = f(t, y)``."""

    def replay_step(
        self, f: FlatField, t: Array, y: Array, h: Array, k1: Array, t_next: Array,
        stages: Array,
    ) -> StepOutput:
        """The step again, for `DiscreteForward`'s replay, given the ``stages`` the solve
        kept (only where `keeps_stages_by_default`: Newton-iterated stages, which are
        not solved again; `_esdirk`).  Others take the step anew."""
        del stages
        return self.step(f, t, y, h, k1, t_next)

    @abc.abstractmethod
    def reverse_step(
        self,
        system: Any,
        tau: Array,
        t_next: Array,
        y: Array | None,
        stages: Array | None,
        lam: Array,
        mu: Array,
        params: Any,
        direction: Array,
        pbar: Any,
        kbar_saves: Array | None,
    ) -> tuple[Array, Any]:
        """Adjoint of one recorded step: ``(lam_n, pbar + its parameter adjoint)``.

        ``y`` is ``y_n`` or ``None`` when the record holds the live ``stages`` instead
        (`StoreStages`); ``mu`` is the cotangent of the integrand's quadrature and
        ``kbar_saves`` that of the interpolation slopes of saves inside the step.
        """

    @abc.abstractmethod
    def stage_plan(self, interpolating: bool) -> Any:
        """The `_dense.StagePlan` of a step (with ``interpolating``, what saves read)."""


class AbstractStiffFamily(AbstractSolver):
    """What the stiff families (Rosenbrock, ESDIRK) share: a ``tableau`` class variable with
    ``order``, ``error_order`` and ``num_stages``, an embedded error estimate, no FSAL
    stage, one Jacobian per step, and one right-hand side evaluation per stage after the
    first (Newton-iterated methods report their iterations instead, `StepOutput`).

    ``linear_solver`` (keyword only) is how a step solves with ``I - gamma h J``
    (`_linear_solver`): by default a dense Jacobian and LU; the sensitivity methods give
    their block-triangular augmented systems a structured one (`_block_solve`).

    ``reuse_jacobian`` (keyword only): when the forward loop may skip computing ``J``:

    - ``"never"`` (default): every attempted step computes its ``J``, fused with the rest
      of the step.
    - ``"rejections"``: after a rejected step, whose retry starts from the same
      ``(t_n, y_n)`` and so needs bitwise the same ``J``, the loop keeps it (only the LU
      of ``I - gamma h J`` is redone for the new ``h``): one Jacobian per accepted step
      instead of one per attempt, the same steps and the same solution (to round-off:
      bit for bit where XLA rounds ``J`` alike in both programs).  Keeping ``J`` costs a
      carried ``N x N`` array and a branch per step, which on the benchmark problems
      (Robertson, Van der Pol, the Brusselator, a small neural field; 2-12 % rejected
      steps) costs more than the Jacobians it saves: measured 0.98-1.13x the time of
      ``"never"`` (benchmarks/README.md).  For fields whose Jacobian is dear and whose
      steps are often rejected.
    """

    tableau: ClassVar[Any]
    linear_solver: AbstractLinearSolver = eqx.field(default=DenseLinearSolver(), kw_only=True)
    reuse_jacobian: str = eqx.field(static=True, default="never", kw_only=True)
    # The values `reuse_jacobian` may take for this family.
    reuse_choices: ClassVar[tuple[str, ...]] = ("never", "rejections")

    def __check_init__(self) -> None:
        if self.reuse_jacobian not in self.reuse_choices:
            raise ValueError(f"`reuse_jacobian` must be one of {self.reuse_choices}, got "
                             f"{self.reuse_jacobian!r}")

    @property
    def adaptive(self) -> bool:
        return True

    @property
    def order(self) -> int:
        return self.tableau.order

    @property
    def error_order(self) -> int:
        return self.tableau.error_order

    @property
    def fsal(self) -> bool:
        return False

    @property
    def rhs_evals_per_step(self) -> int:
        return self.tableau.num_stages - 1

    @property
    def jacobians_per_step(self) -> int:
        return 1

    def linearise(self, f: FlatField, t: Array, y: Array) -> Any:
        """What a step computes at its start ``(t, y)`` whatever its size: ``J = df/dy``
        in the form of the ``linear_solver`` (module docstring)."""
        return self.linear_solver.jacobian(f, t, y)
