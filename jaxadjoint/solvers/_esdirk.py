"""ESDIRK (Newton-iterated, singly diagonally implicit) solvers: the step and its adjoint.

**Step** (tableau in `_esdirk_tableaus`).  ``J = df/dy(t_n, y_n)`` from `jax.jacfwd` and one
LU factorisation of ``M_0 = I - gamma h J`` per step; then for ``i = 2 .. s``::

    base_i = y_n + h sum_{j<i} a_ij k_j,     k_i = f(t_n + c_i h, base_i + gamma h k_i)

each stage solved by simplified Newton with ``M_0`` (`_newton`), and
``y_{n+1} = y_n + h sum_i b_i k_i`` (``= Z_s`` for a stiffly accurate method).  A stage
that does not converge rejects the step (its error estimate is infinite, so the step
shrinks fivefold and may not grow right after); when shrinking steps cannot make it
converge the solve fails with `RESULTS.newton_failed`.
The error estimate is ``h sum_i (b_i - bhat_i) k_i``; with ``filter_error=True`` it is
filtered as in Hairer & Wanner's stiff codes, ``err <- M_0^{-1} err`` (the step's LU):
that keeps the error of the stiff components of the embedded method (whose stability
function is not small at infinity) from forcing needless step rejections.

**Adjoint of the step** (derived by hand; ``h``, ``t_n`` recorded constants).  Each stage
slope is the root of ``k_i = f(t_i, base_i + gamma h k_i, p)``, differentiated by the
implicit function theorem: with ``M_i = I - gamma h J(Z_i)`` (the exact Jacobian at the
converged stage ``Z_i = base_i + gamma h k_i``), ``dk_i = M_i^{-1} (J(Z_i) dbase_i +
f_p(Z_i) dp)``.  Its transpose gives, given ``lam = dL/dy_{n+1}``, for ``i = s .. 1``::

    kbar_i = h (b_i lam + sum_{q>i} a_qi basebar_q)      (+ the saves' kbar_i)
    u_i = M_i^{-T} kbar_i                       (u_1 = kbar_1: the explicit first stage)
    (basebar_i, pbar_i) = (df/d(y, p))(t_i, Z_i)^T u_i
    lam_n = lam + sum_i basebar_i,     pbar += sum_i pbar_i

one transposed solve per implicit stage.  The stages are read from the record with
`StoreStages` (this family's default, `AbstractSolver.keeps_stages_by_default`), which
spares the reverse pass the Newton iterations (Robertson: about half the gradient's time)
and linearises where the forward pass left them.  With `StoreStates` or `Recursive` they
are recomputed from ``y_n`` by the forward step itself; that Newton iteration, compiled
anew, can stop at another iterate within its tolerance (Robertson to t = 4e10: up to 0.2
of the error tolerance), so the gradient is then exact only up to that difference.
The transposed solves: for small states (``N < ITERATIVE_ADJOINT_MIN_SIZE``) the
Jacobians and LUs of all stages in one batched call each (for ``N <= 8`` each solve a
fused product with ``M_i^{-T}``, all formed in one batched substitution, and one step of
iterative refinement: `_DirectTransposed`); for larger ones
an iteration preconditioned by the step's LU of ``M_0`` (`_newton.solve_transposed_stage`:
``N^2`` per iteration instead of ``N^3`` per stage, to round-off, with an LU of ``M_i`` as
the fallback).  The parameter adjoints of all stages are one batched vector-Jacobian
product.

**How exact:** this is the derivative of the method with its stage equations solved
exactly, evaluated at the computed stages; the computed stages solve them to the Newton
tolerance (``kappa`` times the local error tolerance), so the gradient is exact up to that
tolerance, not to round-off as for explicit and Rosenbrock methods. A tighter ``kappa``
brings it closer (tests/test_esdirk.py).

**Dense output** (`HermiteWeights`): the cubic through ``y_n`` and ``y_{n+1}`` with the end
slope ``k_s`` (``= f(t_{n+1}, y_{n+1})`` at the root, for a stiffly accurate method) and,
for an interior stage ``j``, ``p'(c_j) - r_j p'(0) = k_j - r_j k_1``, written as
``y_n + h sum_i w_i(theta) k_i`` with ``y_{n+1} - y_n = h sum b_i k_i``.  ``k_1 =
f(t_n, y_n)`` amplifies the Newton error of ``y_n`` along a stiff mode by ``|lambda|``, and
stage ``i``'s slope echoes ``r_i`` times it (`first_stage_echo`); ``y_{n+1}``, ``k_s`` and
``k_j - r_j k_1`` carry none of it, so neither do the saves (the classic Hermite cubic on
``(y_n, k_1)``, ``(y_{n+1}, k_s)`` took it with weight ``theta (1 - theta)^2``).  Saves
reach the stage slopes like those of any Runge–Kutta step.  Third order (local error
``O(h^4)``, exact for cubics), like diffrax's Hermite for Kvaerno5; saves do not change
the steps.
"""

from __future__ import annotations

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from . import _esdirk_tableaus as etab
from ._base import AbstractDenseWeights, AbstractStiffFamily, FlatField, StepOutput
from ._dense_lu import (
    apply_small_transposed_inverse,
    lu_factor,
    lu_solve,
    lu_solve_transposed,
    small_transposed_inverse,
    vector_times_matrix,
)
from ._esdirk_tableaus import ESDIRKTableau
from ._explicit import linear_combination
from ._linear_solver import AbstractFactorisation, DenseLU
from ._newton import implicit_slope, recorded_slope, solve_transposed_stage
from ._rosenbrock import _NODE_VALUES, _stage_time


def _guess(coeffs: np.ndarray, ks: list[Array]) -> Array:
    """``sum_j coeffs[j] ks[j]``, skipping zero coefficients."""
    acc = None
    for coeff, k in zip(coeffs, ks):
        if coeff != 0:
            term = float(coeff) * k
            acc = term if acc is None else acc + term
    return ks[-1] if acc is None else acc


def esdirk_step(
    solver: AbstractESDIRK, f: FlatField, t: Array, y: Array, h: Array, k1: Array,
    t_next: Array, jac: Any = None,
) -> StepOutput:
    """One ESDIRK step of size ``h = t_next - t`` from ``(t, y)``, ``k1 = f(t, y)``
    (``jac``: the linear solver's ``J(t, y)``, if already computed)."""
    return _step_and_factorisation(solver, f, t, y, h, k1, t_next, jac)[0]


def _step_and_factorisation(
    solver: AbstractESDIRK, f: FlatField, t: Array, y: Array, h: Array, k1: Array,
    t_next: Array, jac: Any = None,
) -> tuple[StepOutput, AbstractFactorisation]:
    """`esdirk_step` and the factorisation of ``I - gamma h J(t, y)`` it used."""
    tableau = solver.tableau
    if solver.tolerances is None:
        raise ValueError(f"{type(solver).__name__}: the step needs the solve's tolerances "
                         "(`solve` binds them with `with_tolerances`)")
    rtol, atol = solver.tolerances
    dtype = y.dtype
    hg = tableau.gamma * h
    if jac is None:
        jac = solver.linear_solver.jacobian(f, t, y)
    lu = solver.linear_solver.factor_jacobian(jac, f, t, y, hg)
    scale = atol + rtol * jnp.abs(y)
    eps = jnp.finfo(dtype).eps
    kappa = jnp.maximum(jnp.asarray(solver.kappa, dtype), 10 * eps / rtol)
    tested = solver.linear_solver.newton_tested(y.shape[0])
    ks, stages = [k1], [y]
    converged = jnp.array(True)
    evaluations = jnp.int32(0)
    for i in range(1, tableau.num_stages):
        base = linear_combination(y, h, tableau.a[i, :i], ks)
        t_i = _stage_time(t, h, t_next, tableau.c[i])
        fn = eqx.filter_closure_convert(lambda z, t_i=t_i: f(t_i, z), base)
        # The root depends on (base, gamma h, the parameters and stage time in fn): the
        # guess, the step's LU and the tolerances are constants of its derivative.
        guess, newton = jax.lax.stop_gradient(
            (_guess(tableau.predictor[i, :i], ks), dict(lu=lu, scale=scale, kappa=kappa)))
        k, ok, iterations = implicit_slope(fn, base, hg, guess=guess, **newton,
                                           max_iterations=solver.max_newton_iterations,
                                           tested=tested)
        ks.append(k)
        stages.append(base + hg * k)
        converged = converged & ok
        evaluations = evaluations + iterations
    y_new = linear_combination(y, h, tableau.b, ks)
    y_error = linear_combination(jnp.zeros_like(y), h, tableau.b_error, ks)
    if solver.filter_error:
        y_error = lu.solve(y_error)
    # A step whose stages did not converge has no error estimate: an infinite one makes
    # every controller reject it and remember the rejection (no growth right after).
    y_error = jnp.where(converged, y_error, jnp.inf)
    step = StepOutput(y_new, y_error, stages, ks, converged,
                      num_rhs_evals=jax.lax.stop_gradient(evaluations))
    return step, lu


def esdirk_replay_step(
    solver: AbstractESDIRK, f: FlatField, t: Array, y: Array, h: Array, k1: Array,
    t_next: Array, stages: Array,
) -> StepOutput:
    """The step from ``(t, y)`` with the converged stage values ``stages (s, N)`` a solve
    kept, for `DiscreteForward`'s replay: no Newton iteration; each slope is
    ``(Z_i - base_i) / (gamma h)`` with its implicit-function-theorem tangent at ``Z_i``
    (`_newton.recorded_slope`), so the tangent is taken on the solve's own stages."""
    tableau = solver.tableau
    hg = tableau.gamma * h
    stages = jax.lax.stop_gradient(stages)
    ks = [k1]
    for i in range(1, tableau.num_stages):
        base = linear_combination(y, h, tableau.a[i, :i], ks)
        t_i = _stage_time(t, h, t_next, tableau.c[i])
        fn = eqx.filter_closure_convert(lambda z, t_i=t_i: f(t_i, z), base)
        ks.append(recorded_slope(fn, base, hg, z=stages[i]))
    y_new = linear_combination(y, h, tableau.b, ks)
    return StepOutput(y_new, jnp.zeros_like(y), list(stages), ks, jnp.array(True))


# States at least this large solve the transposed stage systems iteratively with the
# step's LU (`_newton.solve_transposed_stage`) instead of factorising each stage's matrix:
# an LU costs N^3, an iteration N^2; below this size the loop's overhead costs more.
ITERATIVE_ADJOINT_MIN_SIZE = 32


def esdirk_reverse_step(
    solver: AbstractESDIRK, system: Any, tau: Array, t_next: Array, y: Array | None,
    stages: Array | None, lam: Array, params: Any, direction: Array, pbar: Any,
    kbar_saves: Array | None,
) -> tuple[Array, Any]:
    """Adjoint of one ESDIRK step (module docstring): ``(lam_n, pbar + dL/dparams)``.

    ``stages`` ``(s, N)``: the converged stage values ``Z_i`` if the forward pass kept
    them (`StoreStages`), else ``None`` and they are recomputed from ``y = y_n`` by the
    forward step (its Newton iterations, its arithmetic).  ``kbar_saves`` ``(..., L, N)``:
    cotangents of the interpolation slopes (the stages of `HermiteWeights.stages`) from
    saves inside the step.
    """
    tableau = solver.tableau
    s, h = tableau.num_stages, t_next - tau
    hg = tableau.gamma * h

    def field(t, x, p):
        return system.field(t, x, p, direction)

    def f(t, x):
        return field(t, x, params)

    size = (y if stages is None else stages).shape[-1]
    iterative = size >= ITERATIVE_ADJOINT_MIN_SIZE
    times = [tau] + [_stage_time(tau, h, t_next, tableau.c[i]) for i in range(1, s)]

    def dense_start(z0: Array) -> tuple[Array, Any]:
        jac = jax.jacfwd(lambda x: f(tau, x))(z0)
        return jac, (lu_factor(jnp.eye(size, dtype=z0.dtype) - hg * jac) if iterative else None)

    if stages is None:
        step, factorisation = _step_and_factorisation(solver, f, tau, y, h, f(tau, y), t_next)
        zs = step.stages
        if isinstance(factorisation, DenseLU):
            jac_start, lu_start = factorisation.jac, factorisation.lu
        else:
            # A system with an integrand or sensitivities factors by blocks (`_block_solve`);
            # the transposed stages need the whole matrix, as with stored stages.
            jac_start, lu_start = dense_start(zs[0])
    else:
        zs = [stages[i] for i in range(s)]
        jac_start, lu_start = dense_start(zs[0])
    if iterative:
        transposed = _IterativeTransposed(f, times, zs, hg, lu_start)
    else:
        transposed = _DirectTransposed(f, times, zs, hg)
    interpolated = HermiteWeights.stages(tableau)
    basebars: list[Array | None] = [None] * s
    us: list[Array | None] = [None] * s
    lam_n = lam
    for i in reversed(range(s)):
        coeffs = [tableau.b[i]] + [tableau.a[q, i] for q in range(i + 1, s)]
        vectors = [lam] + basebars[i + 1:]
        terms = [float(c) * v for c, v in zip(coeffs, vectors) if c != 0 and v is not None]
        kbar = h * sum(terms[1:], terms[0]) if terms else None
        if kbar_saves is not None and i in interpolated:
            save_bar = kbar_saves[..., interpolated.index(i), :]
            kbar = save_bar if kbar is None else kbar + save_bar
        if kbar is None:
            continue
        if i == 0:
            us[i] = kbar  # the explicit first stage: no solve
            basebars[i] = vector_times_matrix(kbar, jac_start)
        else:
            us[i], basebars[i] = transposed(i, kbar)
        lam_n = lam_n + basebars[i]
    used = [i for i in range(s) if us[i] is not None]
    if used:
        p_bar = _parameter_adjoint(
            field, jnp.stack([times[i] for i in used]), jnp.stack([zs[i] for i in used]),
            params, jnp.stack([us[i] for i in used], axis=-2))
        pbar = jax.tree.map(jnp.add, pbar, p_bar)
    return lam_n, pbar


class _DirectTransposed:
    """``(u_i, J(Z_i)^T u_i)`` with ``u_i = M_i^{-T} kbar``, ``M_i = I - gamma h J(Z_i)``:
    the Jacobians and LU factorisations of all implicit stages in one batched call each
    (they do not depend on the cotangents), then a transposed solve per stage.  For tiny
    states (``N <= SMALL_SYSTEM_MAX_SIZE``) the ``M_i^{-T}`` of all stages are formed in
    one batched substitution and each solve is a fused product with one of them (as
    `DenseLU.transposed_solver`), then one step of iterative refinement with the residual
    ``kbar - M_i^T u``.  Without it, a stage at ``gamma h |lambda| ~ 1e11`` (A + B <-> C
    with ``kf = 1e9``, a user's acceptance test) gave an ``u`` whose rounding ``J(Z_i)^T``
    amplified: the gradient came out -15.5 for 0.0604.  Refined it agrees with forward mode
    to 2e-6 (3e-7 in that entry), as LU solves do (which made the gradient 1.5x slower on
    Robertson's problem: the refinement is two small products).
    """

    def __init__(self, f: FlatField, times: list[Array], zs: list[Array], hg: Array):
        self.jacs = jax.vmap(lambda t_i, z: jax.jacfwd(lambda x: f(t_i, x))(z))(
            jnp.stack(times[1:]), jnp.stack(zs[1:]))
        eye = jnp.eye(zs[0].shape[0], dtype=zs[0].dtype)
        self.hg = hg
        self.lus = jax.vmap(lu_factor)(eye - hg * self.jacs)
        self.inverses_t = jax.vmap(small_transposed_inverse)(self.lus)

    def __call__(self, i: int, kbar: Array) -> tuple[Array, Array]:
        jac = self.jacs[i - 1]
        if self.inverses_t is None:
            u = lu_solve_transposed(jax.tree.map(lambda x: x[i - 1], self.lus), kbar)
            return u, vector_times_matrix(u, jac)
        inverse_t = self.inverses_t[i - 1]
        u = apply_small_transposed_inverse(inverse_t, kbar)
        residual = kbar - (u - self.hg * vector_times_matrix(u, jac))
        u = u + apply_small_transposed_inverse(inverse_t, residual)
        return u, vector_times_matrix(u, jac)


class _IterativeTransposed:
    """``(u_i, J(Z_i)^T u_i)`` by `_newton.solve_transposed_stage`: products with
    ``J(Z_i)^T`` (vector-Jacobian products) and the step's LU of ``M_0``; no stage
    Jacobian is formed unless the iteration fails (then ``M_i`` is factorised)."""

    def __init__(self, f: FlatField, times: list[Array], zs: list[Array], hg: Array,
                 lu_start: tuple[Array, Array]):
        self.f, self.times, self.zs, self.hg, self.lu_start = f, times, zs, hg, lu_start

    def __call__(self, i: int, kbar: Array) -> tuple[Array, Array]:
        f, t_i, z, hg = self.f, self.times[i], self.zs[i], self.hg
        _, vjp = jax.vjp(lambda x: f(t_i, x), z)

        def direct(kbar):
            jac = jax.jacfwd(lambda x: f(t_i, x))(z)
            lu = lu_factor(jnp.eye(z.shape[0], dtype=z.dtype) - hg * jac)
            return lu_solve(lu, kbar, trans=1)

        u = solve_transposed_stage(lambda u: u - hg * vjp(u)[0], self.lu_start, kbar,
                                   direct)
        return u, vjp(u)[0]


def _parameter_adjoint(field: Any, times: Array, stages: Array, params: Any,
                       us: Array) -> Any:
    """``sum_i (df/dp)(t_i, Z_i)^T u_i``: one vector-Jacobian product of all stages.

    ``times (S,)``, ``stages (S, N)``, ``us (..., S, N)``.
    """

    def fields(p):
        return jax.vmap(lambda t_i, z: field(t_i, z, p))(times, stages)

    _, vjp = jax.vjp(fields, params)
    return vjp(us)[0]


def first_stage_echo(tableau: ESDIRKTableau) -> np.ndarray:
    """``r_i``: how much of an error ``e`` in the explicit first slope ``k_1 = f(t_n, y_n)``
    each stage slope carries when the error lies along a very stiff mode.

    ``k_1`` amplifies the Newton error that ``y_n`` (the previous step's last stage) has
    along a mode ``lambda`` by ``|lambda|``.  Stage ``i``'s base ``y_n + h sum_j a_ij k_j``
    takes ``h sum_j a_ij r_j e``; its root ``Z_i`` damps it away (``|gamma h lambda| >> 1``),
    so its slope ``k_i = (Z_i - base_i) / (gamma h)`` takes ``r_i e`` with ``r_1 = 1``,
    ``r_i = -sum_{j<i} a_ij r_j / gamma``.  ``y_{n+1}`` carries ``h sum_i b_i r_i e = 0``
    (L-stable and stiffly accurate: ``R(inf) = 0``), and so does ``k_s``; other
    combinations of the slopes do not.
    """
    a, s = np.asarray(tableau.a, dtype=float), tableau.num_stages
    r = np.zeros(s)
    r[0] = 1.0
    for i in range(1, s):
        r[i] = -float(a[i, :i] @ r[:i]) / tableau.gamma
    return r


class HermiteWeights(AbstractDenseWeights):
    """Cubic dense output of an ESDIRK step in stage form (module docstring), blind to the
    first slope's stiff error (`first_stage_echo`).

    With ``D = (y_{n+1} - y_n) / h = sum_i b_i k_i``, ``H = theta^2 (3 - 2 theta)``,
    ``phi = theta (1 - theta)^2``, ``psi = -theta^2 (1 - theta)``::

        y(t_n + theta h) = y_n + h (D H + u phi + k_s psi),

    the cubic with ``y_n``, ``y_{n+1}`` and the end slope ``k_s``, whose last coefficient
    ``u`` matches ``p'(c_j) - r_j p'(0) = k_j - r_j k_1`` for the interior stage
    `interior_stage`: every datum (``D``, ``k_s``, ``k_j - r_j k_1``) is free of the first
    slope's stiff error, and the cubic is exact for cubic solutions.  The classic Hermite
    cubic on ``(y_n, k_1)``, ``(y_{n+1}, k_s)`` took that error with weight ``phi``: on a
    fast equilibrium (kf = 1e7, rtol 1e-8, steps of ~44) ``ForwardSensitivity``'s saves were
    1 % off between nodes while its nodes agreed with ``DiscreteForward`` to 2e-9.

    Static data, equal (and hashed) by the identity of the tableau, a module constant.
    The rows hold the slopes of `stages` (those with a nonzero weight).
    """

    def __init__(self, tableau: ESDIRKTableau):
        self.tableau = tableau

    @staticmethod
    def _denominator(tableau: ESDIRKTableau, j: int) -> float:
        """``phi'(c_j) - r_j phi'(0)``, the coefficient of ``u`` in the interior datum."""
        c, r = float(tableau.c[j]), float(first_stage_echo(tableau)[j])
        return (1 - c) * (1 - 3 * c) - r

    @staticmethod
    def interior_stage(tableau: ESDIRKTableau) -> int:
        """The interior stage: ``0 < c_j < 1`` and ``b_j != 0`` (its slope is in the rows
        anyway), the best conditioned (largest ``|phi'(c_j) - r_j|``)."""
        s = tableau.num_stages
        inside = [i for i in range(1, s - 1) if 0 < tableau.c[i] < 1 and tableau.b[i] != 0]
        j = max(inside, key=lambda i: abs(HermiteWeights._denominator(tableau, i)))
        if abs(HermiteWeights._denominator(tableau, j)) < 0.1:
            raise ValueError(f"{tableau.name}: no well-conditioned interior stage")
        return j

    @staticmethod
    def stages(tableau: ESDIRKTableau) -> tuple[int, ...]:
        """The stages with a nonzero weight: ``b_i != 0``, the first, the interior one and
        the last."""
        s = tableau.num_stages
        j = HermiteWeights.interior_stage(tableau)
        return tuple(i for i in range(s) if tableau.b[i] != 0 or i in (0, j, s - 1))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HermiteWeights) and other.tableau is self.tableau

    def __hash__(self) -> int:
        return hash(id(self.tableau))

    def _coefficients(self) -> tuple[float, float, float, float]:
        """``u = (k_j - r_j k_1 - H'(c) D - psi'(c) k_s) / den``: ``(1/den, r_j/den,
        H'(c)/den, psi'(c)/den)``."""
        tableau = self.tableau
        j = self.interior_stage(tableau)
        c, r = float(tableau.c[j]), float(first_stage_echo(tableau)[j])
        den = self._denominator(tableau, j)
        return 1 / den, r / den, 6 * c * (1 - c) / den, (3 * c * c - 2 * c) / den

    def weight_list(self, theta: Array) -> list[Array]:
        tableau, s = self.tableau, self.tableau.num_stages
        j = self.interior_stage(tableau)
        to_interior, to_first, to_mean, to_end = self._coefficients()
        one_minus = 1 - theta
        phi = theta * one_minus * one_minus
        # Each weight is exactly its value at theta = 1 there (b_i): phi(1) = psi(1) = 0.
        mean = theta * theta * (3 - 2 * theta) - to_mean * phi
        end = -theta * theta * one_minus - to_end * phi
        out = []
        for i in self.stages(tableau):
            w = float(tableau.b[i]) * mean
            if i == 0:
                w = w - to_first * phi
            if i == j:
                w = w + to_interior * phi
            if i == s - 1:
                w = w + end
            out.append(w)
        return out

    def initial_slope(self) -> float:
        """``w_1'(0) = -b_1 H'(c)/den - r_j/den`` (``phi'(0) = 1``)."""
        _, to_first, to_mean, _ = self._coefficients()
        return -float(self.tableau.b[0]) * to_mean - to_first


def dense_plan(tableau: ESDIRKTableau) -> Any:
    """The `_dense.StagePlan` of interpolated saves: the slopes of `HermiteWeights.stages`
    (all computed by the step); every stage value live (`StoreStages` keeps them all, so
    the reverse step need not solve the stage equations again)."""
    from .._dense import StagePlan  # _dense builds on the explicit family

    s = tableau.num_stages
    return StagePlan(
        a=np.zeros((s, s)), b=np.zeros(s), c=np.zeros(s), num_main=s, live=tuple(range(s)),
        interpolation_stages=HermiteWeights.stages(tableau),
        weights=HermiteWeights(tableau), end_stages=(),
    )


def node_plan(tableau: ESDIRKTableau) -> Any:
    """The `_dense.StagePlan` of saves at nodes (``land_on_ts``, or ``y(t1)`` only): the
    slope ``f(t_n, y_n)`` for a save's time derivative; every stage value live."""
    from .._dense import StagePlan, StageWeights  # _dense builds on the explicit family

    s = tableau.num_stages
    return StagePlan(
        a=np.zeros((s, s)), b=np.zeros(s), c=np.zeros(s), num_main=s, live=tuple(range(s)),
        interpolation_stages=(0,), weights=StageWeights(_NODE_VALUES, (0,)), end_stages=(),
    )


class AbstractESDIRK(AbstractStiffFamily):
    """An ESDIRK method: singly diagonally implicit Runge–Kutta, explicit first stage.

    For stiff problems.  Each implicit stage is solved by simplified Newton with one LU of
    ``I - gamma h J`` per step (``J`` from `jax.jacfwd` at the step start); a stage that
    does not converge rejects the step.  Gradients differentiate the converged stage
    equations (implicit function theorem; exact up to the Newton tolerance, module
    docstring).  Saves are evaluated on a cubic Hermite interpolant without changing the
    steps.  `DiscreteAdjoint()` keeps every stage value (`StoreStages`) for this family,
    so that the reverse pass skips the Newton iterations (about half the gradient's time
    on small states) and linearises at the forward pass's own stages.

    Arguments:
        kappa: Newton tolerance as a fraction of the local error tolerance (default
            ``1e-2``, Hairer's choice); smaller makes gradients closer to exact, at the
            price of more iterations.
        max_newton_iterations: iterations per stage before the step is rejected.
        filter_error: filter the error estimate with the step's LU (Hairer & Wanner's
            ``(I - gamma h J)^{-1} err``).
    """

    tableau: ClassVar[ESDIRKTableau]
    keeps_stages_by_default: ClassVar[bool] = True
    kappa: float = 1e-2
    max_newton_iterations: int = eqx.field(static=True, default=10)
    filter_error: bool = eqx.field(static=True, default=False)
    # (rtol, atol) of the solve, for the Newton test; set by `solve` (`with_tolerances`).
    tolerances: tuple[Array, Array] | None = None

    def __check_init__(self) -> None:
        if not (isinstance(self.max_newton_iterations, int)
                and self.max_newton_iterations >= 1):
            raise ValueError("`max_newton_iterations` must be a positive integer, got "
                             f"{self.max_newton_iterations!r}")
        if isinstance(self.kappa, (int, float)) and not 0 < self.kappa < 1:
            raise ValueError(f"`kappa` must be in (0, 1), got {self.kappa!r}")

    def with_tolerances(self, rtol: Array, atol: Array) -> AbstractESDIRK:
        return eqx.tree_at(lambda s: s.tolerances, self, (rtol, atol),
                           is_leaf=lambda x: x is None)

    def step(self, f, t, y, h, k1, t_next, linearisation=None) -> StepOutput:
        return esdirk_step(self, f, t, y, h, k1, t_next, linearisation)

    def replay_step(self, f, t, y, h, k1, t_next, stages) -> StepOutput:
        return esdirk_replay_step(self, f, t, y, h, k1, t_next, stages)

    def reverse_step(self, system, tau, t_next, y, stages, lam, mu, params, direction, pbar,
                     kbar_saves) -> tuple[Array, Any]:
        del mu  # no integrand with implicit methods (`solve` rejects it)
        return esdirk_reverse_step(
            self, system, tau, t_next, y, stages, lam, params, direction, pbar, kbar_saves
        )

    def stage_plan(self, interpolating: bool) -> Any:
        return dense_plan(self.tableau) if interpolating else node_plan(self.tableau)


class Kvaerno5(AbstractESDIRK):
    """Kvaerno5 (Kvaernø 2004): ESDIRK 5(4), 7 stages, L-stable, stiffly accurate.

    A Newton-iterated alternative to `Rodas5` for stiff problems at tight tolerances;
    the same method as diffrax's ``Kvaerno5``.
    """

    tableau: ClassVar[ESDIRKTableau] = etab.KVAERNO5
