"""Rosenbrock (linearly implicit) solvers for stiff problems: the step and its exact adjoint.

**Step** (tableau in the ``U`` form of `_rosenbrock_tableaus`).  With ``J = df/dy`` and
``f_t = df/dt`` at ``(t_n, y_n)`` (from JAX: `jax.jacfwd` and one JVP) and one LU
factorisation of ``M = I - gamma h J`` (the solver's ``linear_solver``, `_linear_solver`)::

    Y_i = y_n + sum_{j<i} a_ij U_j,          k_i = f(t_n + c_i h, Y_i)      (k_1 = f(t_n, y_n))
    r_i = gamma h k_i + gamma sum_{j<i} C_ij U_j + gamma d_i h^2 f_t,        U_i = M^{-1} r_i
    y_{n+1} = y_n + sum_i m_i U_i,           error estimate  sum_i m_error_i U_i

**Adjoint of the step** (derived by hand; ``h``, ``t_n`` are recorded constants).  Given
``lam = dL/dy_{n+1}``, for ``i = s .. 1``::

    Ubar_i = m_i lam + sum_{q>i} (a_qi Ybar_q + gamma C_qi rbar_q)
    rbar_i = M^{-T} Ubar_i                      (the forward LU, transposed solve)
    (Ybar_i, pbar_i) = (df/d(Y, p))(t_i, Y_i)^T (gamma h rbar_i)

and, because ``U_i = M^{-1} r_i`` with ``M`` and ``f_t`` depending on ``(y_n, p)``
(``Mbar = -sum_i rbar_i U_i^T``, ``dM = -gamma h dJ``), the second-order term::

    (ybar, pbar) += grad_{y_n, p} sum_i rbar_i . [ J(y_n, p) (gamma h U_i)
                                                   + f_t(y_n, p) (gamma d_i h^2) ]

with ``U_i`` and ``rbar_i`` held fixed: one vector-Jacobian product of ``s`` stacked
Jacobian-vector products of ``f`` in ``(t, y)`` (tangent ``(gamma d_i h^2, gamma h U_i)``),
never a second derivative tensor.  Then ``lam_n = lam + sum_i Ybar_i + ybar``.

Cost (what the reverse loop's body runs per step): inside the stage recursion only the
state part of each stage's VJP (``Ybar_i``, ``i > 1``) and the transposed solve; the
parameter parts ``pbar_i`` of all stages (stages held fixed), the state part of the first
stage (at ``y_n``) and the second-order term are ONE vector-Jacobian product after it.
The transposed solves use the forward LU (`_linear_solver`).  For tiny states (``N <= 8``)
no solve calls the linear-algebra library (two triangular-solve calls each): the step's
solves substitute with the LU factors in unrolled JAX arithmetic (`DenseLU.solver`, the
same arithmetic), and the adjoint's transposed ones are products with ``M^{-T}``, formed
once per step by that substitution (`DenseLU.transposed_solver`).  Van der Pol, ``N = 2``:
library calls in the loop bodies 16 -> 0 (forward) and 32 -> 0 (reverse), the LU itself
aside; forward 0.3-0.5x and gradient about 0.3-0.5x their earlier time on Van der Pol and
Robertson (benchmarks/README.md).

The stages, ``J``, ``f_t`` and the LU are recomputed from ``y_n`` by `_stages`, the function
the forward step runs, so the reverse pass linearises at bitwise the forward values.  With
`StoreStages` the forward pass keeps ``y_n`` and the ``U_i`` (`step`'s ``stages``), and the
reverse step recomputes only ``J`` and the LU (`_stored_stages`; ``Y_i`` from the ``U_j`` by
the same arithmetic): no right-hand side evaluation of the stage chain and no forward solve.

**Dense output** (`RosenbrockWeights`, `dense_plan`).  The continuous extension of
`_rosenbrock_tableaus` is linear in the ``U_i``::

    y(t_n + theta h) = y_n + sum_i w_i(theta) U_i = y_n + h sum_i w_i(theta) (U_i / h),

which is the form `_dense` evaluates, with the slopes ``U_i / h`` (the step's ``ks[1:]``;
``ks[0]`` is ``f(t_n, y_n)``, the slope of a save at a node under `node_plan`) and the
weights ``b_i = w_i``.  So a save's cotangent ``ybar`` reaches the step as ``kbar_i =
h w_i(theta) ybar`` (`_save_cotangents`), and the adjoint above starts from
``Ubar_i = m_i lam + kbar_i / h + ...``: nothing else changes.  ``w_1'(0)`` is not 1, so
the final state's row holds ``f(t_T, y_T) / w_1'(0)`` (`_dense.final_row_slopes`) for the
time derivative of a save at ``t_T`` to be ``f(t_T, y_T)``.  Saves do not change the steps.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from . import _rosenbrock_tableaus as rtab, _tableaus as tab
from ._base import AbstractDenseWeights, AbstractStiffFamily, FlatField, StepOutput
from ._interpolants import Interpolant
from ._linear_solver import AbstractFactorisation, AbstractLinearSolver, DenseLinearSolver
from ._rosenbrock_tableaus import RosenbrockTableau


def _combine(y: Array | None, coeffs: Any, vectors: list[Array]) -> Array | None:
    """``y + sum_j coeffs[j] vectors[j]`` skipping zero coefficients (``None``: no ``y``)."""
    acc = y
    for coeff, v in zip(coeffs, vectors):
        if coeff == 0:
            continue
        term = float(coeff) * v
        acc = term if acc is None else acc + term
    return acc


def _stage_time(t: Array, h: Array, t_next: Array, c: float) -> Array:
    """``t + c h``: exactly ``t`` for ``c = 0`` and the grid value ``t_next`` for ``c = 1``."""
    if c == 0:
        return t
    return t_next if c == 1 else t + float(c) * h


def _time_derivative(f: FlatField, t: Array, y: Array) -> Array:
    """``df/dt(t, y)``: one forward-mode JVP in time."""
    return jax.jvp(lambda s: f(s, y), (t,), (jnp.ones_like(t),))[1]


class _Stages(NamedTuple):
    lu: AbstractFactorisation  # of I - gamma h J (`_linear_solver`; dense LU by default)
    stages: list[Array]  # Y_i
    us: list[Array]  # U_i


def linearise(
    tableau: RosenbrockTableau, f: FlatField, t: Array, y: Array,
    linear_solver: AbstractLinearSolver,
) -> tuple[Any, Array | None]:
    """``(J, f_t)`` at ``(t, y)`` (``f_t`` is ``None`` when no ``d_i`` uses it): the part of
    a step that does not depend on ``h``, kept by the forward loop across a rejection."""
    f_t = _time_derivative(f, t, y) if np.any(tableau.d != 0) else None
    return linear_solver.jacobian(f, t, y), f_t


def _stages(
    tableau: RosenbrockTableau, f: FlatField, t: Array, y: Array, h: Array, k1: Array,
    t_next: Array, linear_solver: AbstractLinearSolver, linearisation: Any = None,
) -> _Stages:
    """The stages of one step (module docstring); shared by the step and its adjoint.

    ``linearisation``: `linearise` at ``(t, y)`` if already computed."""
    if linearisation is None:
        linearisation = linearise(tableau, f, t, y, linear_solver)
    jac, f_t = linearisation
    gh = tableau.gamma * h
    lu = linear_solver.factor_jacobian(jac, f, t, y, gh)
    solve = lu.solver()
    stages, us = [], []
    for i in range(tableau.num_stages):
        stage = _combine(y, tableau.a[i, :i], us)
        k = k1 if i == 0 else f(_stage_time(t, h, t_next, tableau.c[i]), stage)
        r = gh * k
        coupling = _combine(None, tableau.gamma * tableau.C[i, :i], us)
        if coupling is not None:
            r = r + coupling
        if tableau.d[i] != 0:
            r = r + (float(tableau.gamma * tableau.d[i]) * (h * h)) * f_t
        stages.append(stage)
        us.append(solve(r))
    return _Stages(lu, stages, us)


def _stored_stages(
    tableau: RosenbrockTableau, f: FlatField, t: Array, y: Array, h: Array,
    us: list[Array], linear_solver: AbstractLinearSolver,
) -> _Stages:
    """`_stages` from the increments ``U_i`` the forward pass kept (`StoreStages`): only
    ``J`` and its LU are computed again, the stage values ``Y_i`` from the ``U_j`` with
    `_stages`'s arithmetic; no right-hand side evaluation and no solve (nor ``f_t``)."""
    lu = linear_solver.factor(f, t, y, tableau.gamma * h)
    stages = [_combine(y, tableau.a[i, :i], us) for i in range(tableau.num_stages)]
    return _Stages(lu, stages, us)


def rosenbrock_step(
    tableau: RosenbrockTableau, f: FlatField, t: Array, y: Array, h: Array, k1: Array,
    t_next: Array, linear_solver: AbstractLinearSolver = DenseLinearSolver(),
    linearisation: Any = None,
) -> StepOutput:
    """One Rosenbrock step of size ``h = t_next - t`` from ``(t, y)``, ``k1 = f(t, y)``
    (``linearisation``: `linearise` at ``(t, y)``, if already computed)."""
    st = _stages(tableau, f, t, y, h, k1, t_next, linear_solver, linearisation)
    y_new = _combine(y, tableau.m, st.us)
    y_error = _combine(jnp.zeros_like(y), tableau.m_error, st.us)
    # The record (`StoreStages`): y_n and the increments U_i.  The slopes: f(t_n, y_n) (a
    # node's time derivative), then the U_i / h that the continuous extension reads
    # (`RosenbrockWeights`).
    return StepOutput(y_new, y_error, [y] + st.us, [k1] + [u / h for u in st.us])


def rosenbrock_reverse_step(
    tableau: RosenbrockTableau, system: Any, tau: Array, t_next: Array, y: Array,
    lam: Array, params: Any, direction: Array, pbar: Any, kbar_saves: Array | None = None,
    linear_solver: AbstractLinearSolver = DenseLinearSolver(), us: Array | None = None,
) -> tuple[Array, Any]:
    """Adjoint of one Rosenbrock step (module docstring): ``(lam_n, pbar + dL/dparams)``.

    ``kbar_saves`` ``(..., s, N)``: cotangents of the dense-output slopes ``U_i / h`` from
    saves inside the step; they add ``kbar_i / h`` to ``Ubar_i``.  ``us`` ``(s, N)``: the
    step's increments ``U_i`` if the forward pass kept them (`StoreStages`); otherwise the
    stages are recomputed from ``y``.
    """
    h = t_next - tau
    s, gamma = tableau.num_stages, tableau.gamma

    def field(t, x, p):
        return system.field(t, x, p, direction)

    def f(t, x):
        return field(t, x, params)

    if us is None:
        st = _stages(tableau, f, tau, y, h, f(tau, y), t_next, linear_solver)
    else:
        st = _stored_stages(tableau, f, tau, y, h, [us[i] for i in range(s)], linear_solver)
    gh = gamma * h
    times = [tau] + [_stage_time(tau, h, t_next, tableau.c[i]) for i in range(1, s)]
    solve_transposed = st.lu.transposed_solver()
    stage_bars: list[Array | None] = [None] * s
    rbars: list[Array | None] = [None] * s
    for i in reversed(range(s)):
        later = range(i + 1, s)
        ubar = _combine(
            None,
            [tableau.m[i]] + [tableau.a[q, i] for q in later]
            + [gamma * tableau.C[q, i] for q in later],
            [lam] + [stage_bars[q] for q in later] + [rbars[q] for q in later],
        )
        if kbar_saves is not None:
            save_bar = kbar_saves[..., i, :] / h
            ubar = save_bar if ubar is None else ubar + save_bar
        if ubar is None:
            ubar = jnp.zeros_like(lam)
        rbars[i] = solve_transposed(ubar)
        if i > 0:  # stage 0 (at y_n) joins the second-order product below
            _, vjp = jax.vjp(lambda x, t_i=times[i]: f(t_i, x), st.stages[i])
            stage_bars[i] = vjp(gh * rbars[i])[0]

    # One vector-Jacobian product in (y_n, p) for the rest: the parameter adjoint of every
    # stage slope (stages held fixed), the state adjoint of k_1 = f(t_n, y_n), and the
    # second-order terms (J and f_t depend on (y_n, p); U_i and rbar_i held fixed).
    us = jnp.stack(st.us)
    dts = jnp.asarray(gamma * tableau.d, y.dtype) * (h * h)
    later_times, later_stages = jnp.stack(times[1:]), jnp.stack(st.stages[1:])

    def linearised(x, p):
        def one(dt, u):
            return jax.jvp(lambda t, z: field(t, z, p), (tau, x), (dt, gh * u))[1]

        slopes = jax.vmap(lambda t_i, z: field(t_i, z, p))(later_times, later_stages)
        return field(tau, x, p), slopes, jax.vmap(one)(dts, us)

    stacked = jnp.stack(rbars, axis=-2)
    _, vjp = jax.vjp(linearised, y, params)
    y_bar, p_bar = vjp((gh * rbars[0], gh * stacked[..., 1:, :], stacked))
    pbar = jax.tree.map(jnp.add, pbar, p_bar)
    lam_n = lam + y_bar
    for stage_bar in stage_bars[1:]:
        lam_n = lam_n + stage_bar
    return lam_n, pbar


class RosenbrockWeights(AbstractDenseWeights):
    """The continuous extension of a Rosenbrock method as `_dense` evaluates it (static data).

    ``y(t_n + theta h) = y_n + sum_i w_i(theta) U_i`` with (Hairer & Wanner's RODAS form)
    ``w_i(theta) = theta (m_i + (1 - theta) sum_r theta^r H_ri)``: the rows hold the slopes
    ``k_i = U_i / h`` and the weights are ``b_i(theta) = w_i(theta)``.  Evaluated in that
    nested form, so ``theta = 0`` gives ``y_n`` bitwise and ``theta = 1`` the weights ``m``
    exactly.  Equal (and hashed) by the identity of the tableau, a module constant.
    """

    def __init__(self, tableau: RosenbrockTableau):
        if tableau.dense is None:
            raise ValueError(f"{tableau.name} has no continuous extension")
        self.tableau = tableau

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RosenbrockWeights) and other.tableau is self.tableau

    def __hash__(self) -> int:
        return hash(id(self.tableau))

    def weight_list(self, theta: Array) -> list[Array]:
        tableau, one_minus = self.tableau, 1 - theta
        out = []
        for i in range(tableau.num_stages):
            inner = None
            for row in tableau.dense[::-1]:
                term = jnp.full_like(theta, float(row[i]))
                inner = term if inner is None else term + theta * inner
            out.append(theta * (float(tableau.m[i]) + one_minus * inner))
        return out

    def initial_slope(self) -> float:
        """``b_1'(0) = m_1 + H_11``: the final state's row holds ``f(t_T, y_T) / b_1'(0)``."""
        return float(self.tableau.m[0] + self.tableau.dense[0, 0])


def dense_plan(tableau: RosenbrockTableau) -> Any:
    """The `_dense.StagePlan` of interpolated saves: the slopes ``U_i / h`` (`step`'s
    ``ks[1:]``; ``ks[0]`` is ``f(t_n, y_n)``); live, what `StoreStages` keeps: ``y_n`` and
    the ``U_i`` (`step`'s ``stages``)."""
    from .._dense import StagePlan  # _dense builds on the explicit family

    if tableau.dense is None:
        raise NotImplementedError(f"{tableau.name} has no continuous extension")
    s = tableau.num_stages
    return StagePlan(
        a=np.zeros((s + 1, s + 1)), b=np.zeros(s + 1), c=np.zeros(s + 1), num_main=s + 1,
        live=tuple(range(s + 1)), interpolation_stages=tuple(range(1, s + 1)),
        weights=RosenbrockWeights(tableau), end_stages=(),
    )


# A save must be a node: the value y_n (weight 0 at theta = 0) and, for its time
# derivative, the slope f(t_n, y_n) (weight theta: b'(0) = 1).
_NODE_VALUES = Interpolant(
    name="node values", tableau=tab.EULER, order=1, a_extra=np.zeros((0, 1)),
    c_extra=np.zeros((0,)), weights=np.ones((1, 1)), kind="node values only",
)


def node_plan(tableau: RosenbrockTableau) -> Any:
    """The `_dense.StagePlan` of saves at nodes (``land_on_ts``, or ``y(t1)`` only): the
    slope ``f(t_n, y_n)`` for a save's time derivative; live as in `dense_plan`."""
    from .._dense import StagePlan, StageWeights  # _dense builds on the explicit family

    s = tableau.num_stages
    return StagePlan(
        a=np.zeros((s + 1, s + 1)), b=np.zeros(s + 1), c=np.zeros(s + 1), num_main=s + 1,
        live=tuple(range(s + 1)), interpolation_stages=(0,),
        weights=StageWeights(_NODE_VALUES, (0,)), end_stages=(),
    )


class AbstractRosenbrock(AbstractStiffFamily):
    """A Rosenbrock method: linearly implicit, one LU of ``I - gamma h J`` per step.

    For stiff problems (Van der Pol with large ``mu``, chemical kinetics such as
    Robertson's, discretised diffusion): the step size is bounded by accuracy, not by
    stability.  ``J = df/dy`` is computed by `jax.jacfwd` (``N`` forward-mode products per
    step), so the cost per step grows like ``N^3`` (the LU) for large states.  Gradients
    are the exact discrete adjoint (module docstring).  Saves and ``SaveAt(dense=True)``
    are evaluated on the method's continuous extension, without changing the steps.
    `StoreStages` keeps ``y_n`` and the increments ``U_i`` (``s + 1`` vectors a step): the
    reverse step then computes only ``J`` and its LU again, not the stage chain.
    """

    tableau: ClassVar[RosenbrockTableau]

    @property
    def estimate_sees_time_changes(self) -> bool:
        return self.tableau.estimate_sees_time_changes

    def linearise(self, f, t, y) -> tuple[Any, Array | None]:
        return linearise(self.tableau, f, t, y, self.linear_solver)

    def step(self, f, t, y, h, k1, t_next, linearisation=None) -> StepOutput:
        return rosenbrock_step(self.tableau, f, t, y, h, k1, t_next, self.linear_solver,
                               linearisation)

    def reverse_step(self, system, tau, t_next, y, stages, lam, mu, params, direction, pbar,
                     kbar_saves) -> tuple[Array, Any]:
        del mu  # no integrand with Rosenbrock methods (`solve` rejects it)
        # The record: y_n, or (`StoreStages`) y_n and the increments U_i (`step`).
        if y is None:
            y, us = stages[0], stages[1:]
        else:
            us = None
        return rosenbrock_reverse_step(
            self.tableau, system, tau, t_next, y, lam, params, direction, pbar, kbar_saves,
            self.linear_solver, us,
        )

    def stage_plan(self, interpolating: bool) -> Any:
        return dense_plan(self.tableau) if interpolating else node_plan(self.tableau)


class Rodas3(AbstractRosenbrock):
    """Rodas3: Rosenbrock 3(2), 4 stages, L-stable, stiffly accurate. Loose tolerances."""

    tableau: ClassVar[RosenbrockTableau] = rtab.RODAS3


class Rodas4(AbstractRosenbrock):
    """Rodas4 (Hairer & Wanner): Rosenbrock 4(3), 6 stages, L-stable, stiffly accurate."""

    tableau: ClassVar[RosenbrockTableau] = rtab.RODAS4


class Rodas5(AbstractRosenbrock):
    """Rodas5 (Di Marzo): Rosenbrock 5(4), 8 stages, L-stable, stiffly accurate.

    The stiff solver for tight tolerances (``rtol <= 1e-6``), for right-hand sides that are
    smooth in ``t``.  Its main and embedded solutions weight the stages alike except three,
    all at ``t_n + h``, so the error estimate does not see ``f`` change in ``t`` alone within
    a step: a switch written as ``jnp.where`` on ``t`` is stepped over unresolved (saves off
    by 3e-4 at ``rtol=1e-9`` on a switched infusion; README, "Inputs that switch in time").
    Make such a switch an `Event`.
    """

    tableau: ClassVar[RosenbrockTableau] = rtab.RODAS5
