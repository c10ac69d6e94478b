"""`ForwardSensitivity`: continuous forward sensitivity analysis (the paper's CFSA).

The state is integrated together with its sensitivity matrix ``S = dy/dx`` for the
differentiated inputs ``x`` (``y0``, the parameter leaves, ``t0``), from

    y' = f(t, y, p),        S' = J_y S + J_p,        S(t0) = [I | 0 | -f(t0, y0)],

and, with an integrand, ``q' = R`` and ``S_q' = R_y S + R_p``.  ``J_y S`` is one `jax.jvp` of
``f`` per column (batched over the columns with `jax.vmap`); ``J_p`` (``N x P``, a block of
the result) is ``P`` JVPs or, when ``P > N``, ``N`` VJPs; no ``N x N`` Jacobian is formed.
One adaptive controller steps the whole system (the *simultaneous corrector* approach of
the ODESSA paper):

- ``error_control=True`` (default): each sensitivity column ``S_k`` must pass the local
  error test with its own weights ``sensitivity_atol + sensitivity_rtol |S_k|`` as well
  as the state, i.e. ``err = max(||e_y/w_y||, max_k ||e_k/w_k||)`` (RMS norms), ODESSA's
  *mutually dependent* error control.  The sensitivities are then accurate to about
  the tolerance, at the price of (usually a few) extra steps.
- ``error_control=False``: only the state is tested (*fully dependent* error control),
  so the steps are exactly those of the plain solve; the sensitivities are then the
  Runge–Kutta discretisation of the sensitivity equations on that grid, which for
  explicit Runge–Kutta methods is the exact derivative of the discrete solution: it
  agrees with `DiscreteAdjoint` to round-off.

**Stiff solvers** (Rosenbrock, Kvaerno5) step the augmented system with its exact Jacobian
``[[J, 0], [d(J S + J_p)/dy, I (x) J]]`` through a block-triangular solve (`_block_solve`):
one LU of the user's ``N x N`` matrix ``I - gamma h J`` per step serves the state and every
column, ODESSA's simultaneous corrector; the coupling block is a JVP of the column JVPs,
never formed.  With ``error_control=False``:

- Rosenbrock methods: the Rosenbrock step of the augmented system (with that exact
  Jacobian, ``d(J)/dy`` terms included) is the derivative of the Rosenbrock step, so the
  sensitivities are the exact derivative of the discrete solution, equal to
  `DiscreteAdjoint`'s to round-off (Robertson: 2e-15), on the plain solve's steps;
- Kvaerno5: the stages of state and sensitivities come out of one simplified Newton
  iteration whose convergence test sees both, so they equal the implicit-function
  derivative of `DiscreteForward`/`DiscreteAdjoint` up to the Newton tolerance (Robertson on
  a fixed grid: 7e-8 with ``kappa=1e-2``, 6e-10 with ``1e-4``), and the iteration counts,
  hence the steps, can differ slightly from the plain solve's.  A very tight ``kappa``
  (below about ``1e-5``) can stall the iteration on the sensitivity columns (round-off),
  which rejects steps.

Only the inputs that are actually differentiated get columns (the tangents JAX passes as
symbolic zeros are skipped), so ``jax.grad`` with respect to ``args`` alone solves an
``N (1 + P_args)`` system.  Derivatives are attached with a custom JVP whose tangent is
``S xdot`` — linear, so `jax.grad`/`jax.jacrev` (by transposition) and `jax.jacfwd`
(one augmented solve for all directions) all work.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from ._adjoint import plain_solve, to_solve_output
from ._block_solve import Block, with_blocks
from ._controllers import AbstractController, Tolerances, rms_norm, scaled_error
from ._dense import interpolant_slopes
from ._forward import Recorder, forward_loop
from ._matmul import matmul
from ._sensitivity_base import AbstractSensitivity, SolveOutput
from ._sensitivity_common import (
    DerivedSystem,
    combine,
    derived_kwargs,
    fail_if_differentiated_failure,
    first_order_only,
    integrand_or_empty,
    mask_params,
    ravel,
    tangent_or_zeros,
)
from ._stiffness import flag_stiff_gradient
from ._system import Problem, System
from ._time_switches import warn_if_differentiating_a_switch_time


class _Columns(eqx.Module):
    """Which inputs have sensitivity columns, in order ``[y0 | params | t0]``."""

    n_y0: int = eqx.field(static=True)  # N or 0
    n_params: int = eqx.field(static=True)
    n_t0: int = eqx.field(static=True)  # 1 or 0

    @property
    def total(self) -> int:
        return self.n_y0 + self.n_params + self.n_t0


class _SensitivityController(AbstractController):
    """Applies ``inner`` to the state part, or to ODESSA's combined error norm."""

    inner: AbstractController
    n_state: int = eqx.field(static=True)
    num_cols: int = eqx.field(static=True)
    error_control: bool = eqx.field(static=True)
    sens_tol: Tolerances
    state_tol: Tolerances

    @property
    def adaptive(self) -> bool:
        return self.inner.adaptive

    def inputs_valid(self, tau0, tau1, direction):
        return self.inner.inputs_valid(tau0, tau1, direction)

    def init(self, f, tau0, tau1, y0, k0, dt0, solver, tol, direction):
        n = self.n_state
        rest = y0[n:]

        def f_state(tau, y):
            return f(tau, jnp.concatenate([y, rest]))[:n]

        return self.inner.init(
            f_state, tau0, tau1, y0[:n], k0[:n], dt0, solver, self.state_tol, direction
        )

    def propose(self, tau, h, state):
        return self.inner.propose(tau, h, state)

    def adapt(self, y, y_new, y_error, k0, h, state, solver, tol):
        n = self.n_state
        if y_error is None or not self.error_control:
            err = None if y_error is None else y_error[:n]
            return self.inner.adapt(y[:n], y_new[:n], err, k0[:n], h, state, solver,
                                    self.state_tol)
        err_y = scaled_error(y[:n], y_new[:n], y_error[:n], self.state_tol)
        shape = (n, self.num_cols)
        s_old, s_new = y[n:].reshape(shape), y_new[n:].reshape(shape)
        # A per-component atol weighs row i of S (the derivatives of y_i) as it weighs y_i.
        atol = self.sens_tol.atol
        atol = atol[:, None] if jnp.ndim(atol) else atol
        weights = atol + self.sens_tol.rtol * jnp.maximum(
            jnp.abs(s_old), jnp.abs(s_new))
        ratios = y_error[n:].reshape(shape) / weights
        err_cols = jax.vmap(rms_norm, in_axes=1)(ratios)
        err = jnp.maximum(err_y, jnp.max(err_cols, initial=0.0))
        # Hand the combined norm to the inner controller as a one-component error.
        one = jnp.zeros((1,), y.dtype)
        unit = Tolerances(jnp.zeros((), y.dtype), jnp.ones((), y.dtype))
        return self.inner.adapt(one, one, err[None], one, h, state, solver, unit)


class _SensitivitySystem(DerivedSystem):
    """``z = [y, vec(S)]``; with an integrand, the quadrature ``[q, vec(S_q)]``."""

    columns: _Columns
    params_off: Any  # parameter leaves without columns

    def _split(self, z: Array) -> tuple[Array, Array]:
        n = z.shape[0] // (1 + self.columns.total)
        return z[:n], z[n:].reshape(n, self.columns.total)

    def _directions(self, fn, tau, y, s, params_on, direction):
        """``[J_y S_k + J_p e_k]_k`` for ``fn(tau, y, p)``, one JVP per column."""
        cols = self.columns
        p_flat, unravel = ravel(params_on, y.dtype)

        def g(y, p_flat):
            return fn(tau, y, combine(unravel(p_flat), self.params_off), direction)

        def state_jvp(s_k):
            return jax.jvp(lambda y: g(y, p_flat), (y,), (s_k,))[1]

        def param_jvp(s_k, e_k):
            return jax.jvp(g, (y, p_flat), (s_k, e_k))[1]

        parts = []
        lo = cols.n_y0
        if cols.n_y0:
            parts.append(jax.vmap(state_jvp, in_axes=1, out_axes=1)(s[:, :lo]))
        if cols.n_params:
            s_p = s[:, lo:lo + cols.n_params]
            m = jax.eval_shape(g, y, p_flat).shape[0]  # outputs of fn
            if cols.n_params <= m:
                basis = jnp.eye(cols.n_params, dtype=y.dtype)
                parts.append(jax.vmap(param_jvp, in_axes=(1, 0), out_axes=1)(s_p, basis))
            else:
                # More parameters than outputs: the block J_p (m x P) costs m
                # vector-Jacobian products rather than P Jacobian-vector products.
                _, vjp_p = jax.vjp(lambda p: g(y, p), p_flat)
                j_p = jax.vmap(lambda e: vjp_p(e)[0])(jnp.eye(m, dtype=y.dtype))
                parts.append(jax.vmap(state_jvp, in_axes=1, out_axes=1)(s_p) + j_p)
        if cols.n_t0:
            parts.append(jax.vmap(state_jvp, in_axes=1, out_axes=1)(s[:, cols.total - 1:]))
        if not parts:  # only t1 or save times move: no sensitivity columns
            return jnp.zeros((y.shape[0], 0), y.dtype)
        return jnp.concatenate(parts, axis=1)

    def field(self, tau, z, params_on, direction):
        y, s = self._split(z)
        fy = self.base.field(tau, y, combine(params_on, self.params_off), direction)
        ds = self._directions(self.base.field, tau, y, s, params_on, direction)
        return jnp.concatenate([fy, ds.reshape(-1)])

    @property
    def has_integrand(self) -> bool:
        return self.base.has_integrand

    def field_integrand(self, tau, z, params_on, direction):
        y, s = self._split(z)
        r = self.base.field_integrand(tau, y, combine(params_on, self.params_off), direction)
        dr = self._directions(self.base.field_integrand, tau, y, s, params_on, direction)
        return jnp.concatenate([r, dr.reshape(-1)])


def _setup(sens: ForwardSensitivity, system: System, problem: Problem, problem_dot: Problem):
    """The augmented system and initial state for the inputs with non-zero tangents."""
    y0, dtype = problem.y0, problem.y0.dtype
    n = y0.shape[0]
    params_on, params_off = mask_params(problem.params, problem_dot.params)
    n_params = ravel(params_on, dtype)[0].shape[0]
    cols = _Columns(
        n_y0=n if problem_dot.y0 is not None else 0,
        n_params=n_params,
        n_t0=1 if problem_dot.t0 is not None else 0,
    )
    blocks = []
    if cols.n_y0:
        blocks.append(jnp.eye(n, dtype=dtype))
    if cols.n_params:
        blocks.append(jnp.zeros((n, n_params), dtype))
    if cols.n_t0:
        blocks.append(-system.rhs(problem.t0, y0, problem.params)[:, None])
    s0 = jnp.concatenate(blocks, axis=1) if blocks else jnp.zeros((n, 0), dtype)

    rtol = system.tol.rtol if sens.sensitivity_rtol is None else jnp.asarray(
        sens.sensitivity_rtol, dtype)
    atol = system.tol.atol if sens.sensitivity_atol is None else jnp.asarray(
        sens.sensitivity_atol, dtype)
    controller = _SensitivityController(
        inner=system.controller, n_state=n, num_cols=cols.total,
        error_control=sens.error_control, sens_tol=Tolerances(rtol, atol),
        state_tol=system.tol,
    )
    # Stiff solvers solve with the augmented Jacobian block by block: one LU of the
    # user's N x N matrix serves the state and every column (`_block_solve`).
    solver = with_blocks(system.solver, [
        Block(start=0, size=n, diagonal="jacobian"),
        Block(start=n, size=n * cols.total, diagonal="columns", columns=max(cols.total, 1),
              of=0),
    ])
    aug_tol = system.tol
    if jnp.ndim(system.tol.atol):
        # Per-component atol: S's row i (vec(S) is row-major) has the weight of y_i, in the
        # first step's choice and in the Newton test of implicit solvers.
        aug_atol = jnp.concatenate([system.tol.atol, jnp.repeat(system.tol.atol, cols.total)])
        aug_tol = Tolerances(system.tol.rtol, aug_atol)
        solver = solver.with_tolerances(aug_tol.rtol, aug_tol.atol)
    aug = _SensitivitySystem(
        **derived_kwargs(system, controller=controller, solver=solver, tol=aug_tol),
        columns=cols, params_off=params_off,
    )
    aug_problem = Problem(
        y0=jnp.concatenate([y0, s0.reshape(-1)]), params=params_on, t0=problem.t0,
        t1=problem.t1, ts=problem.ts,
    )
    return aug, aug_problem, cols, params_on


def _tangent_vector(cols: _Columns, problem: Problem, problem_dot: Problem, params_on) -> Array:
    dtype = problem.y0.dtype
    parts = []
    if cols.n_y0:
        parts.append(problem_dot.y0)
    if cols.n_params:
        on_dot = mask_params(problem_dot.params, problem_dot.params)[0]
        parts.append(ravel(on_dot, dtype)[0])
    if cols.n_t0:
        parts.append(jnp.reshape(problem_dot.t0, (1,)))
    return jnp.concatenate(parts) if parts else jnp.zeros((0,), dtype)


def solve_with_sensitivities(
    sens: ForwardSensitivity, system: System, problem: Problem, problem_dot: Problem
) -> tuple[SolveOutput, Array, Array, Array, _Columns, Any]:
    """Augmented solve: ``(out, S at saves (n_save, N, C), S_q (Q, C), y(t1), cols, on)``."""
    aug, aug_problem, cols, params_on = _setup(sens, system, problem, problem_dot)
    fwd = forward_loop(aug, aug_problem, Recorder())
    n = problem.y0.shape[0]
    out = to_solve_output(aug, aug_problem, fwd)
    ys = out.ys[:, :n]
    s_saves = out.ys[:, n:].reshape(ys.shape[0], n, cols.total)
    num_q = integrand_or_empty(system, problem.t0, problem.y0, problem.params).shape[0]
    q = out.integral[:num_q]
    s_q = out.integral[num_q:].reshape(num_q, cols.total)
    # Every derivative reads a sensitivity matrix: the stiffness check rides on them.
    s_saves, s_q = flag_stiff_gradient((s_saves, s_q), system, fwd.stats,
                                       sens.accept_stiff_steps)
    y_final = fwd.y_final[:n]
    # The saves' time derivative is that of the interpolant they are evaluated on.
    direction = aug_problem.direction
    weights = aug.stage_plan.weights
    slopes = direction * interpolant_slopes(weights, fwd.rows, direction * aug_problem.ts)[:, :n]
    return SolveOutput(ys, q, out.record), s_saves, s_q, y_final, cols, params_on, slopes


@eqx.filter_custom_jvp
def _solve(problem: Problem, system: System, sens: ForwardSensitivity) -> SolveOutput:
    del sens
    return plain_solve(system, problem)


@_solve.def_jvp
def _solve_jvp(primals, tangents):
    problem, system, sens = primals
    problem_dot = tangents[0]
    warn_if_differentiating_a_switch_time(system.rhs, problem.t0, problem.y0, problem.params,
                                          problem_dot.params)
    fixed = jax.lax.stop_gradient(problem)
    out, s_saves, s_q, y_final, cols, params_on, slopes = solve_with_sensitivities(
        sens, system, fixed, problem_dot
    )
    s_saves = fail_if_differentiated_failure(system, s_saves, out.record.result)
    v = _tangent_vector(cols, fixed, problem_dot, params_on)
    ys_dot = matmul(s_saves, v)  # (saves, N, columns) @ (columns,)
    q_dot = matmul(s_q, v)
    params = fixed.params
    if problem_dot.ts is not None:
        ys_dot = ys_dot + problem_dot.ts[:, None] * slopes
    if system.has_integrand:
        if problem_dot.t0 is not None:
            q_dot = q_dot - problem_dot.t0 * system.integrand(fixed.t0, fixed.y0, params)
        if problem_dot.t1 is not None:
            q_dot = q_dot + tangent_or_zeros(problem_dot.t1, fixed.t1) * system.integrand(
                fixed.t1, y_final, params)
    ys_dot, q_dot = first_order_only("ForwardSensitivity", (ys_dot, q_dot), problem)
    tangent = SolveOutput(ys_dot, q_dot, jax.tree.map(lambda _: None, out.record))
    return out, tangent


class ForwardSensitivity(AbstractSensitivity):
    """Continuous forward sensitivities: integrate ``S' = J_y S + J_p`` with the state.

    Arguments:
        error_control: include the sensitivities in the local error test (ODESSA's
            mutually dependent error control; default).  ``False`` steps on the state's
            error alone: same grid as the plain solve, and derivatives equal to the
            discrete derivative (`DiscreteAdjoint`) to round-off (Kvaerno5: up to the
            Newton tolerance; module docstring).
        sensitivity_rtol, sensitivity_atol: tolerances of the sensitivity error test
            (default: those of the state; a per-component ``atol_i`` weighs the
            sensitivities of ``y_i``).
        accept_stiff_steps: return the sensitivities even when the solve rode the
            stability boundary of an explicit method (default: an error).

    Cost: one solve of ``N (1 + C)`` equations, ``C`` = the number of differentiated
    scalar inputs, each column one JVP of ``f`` per stage; with a stiff solver one LU of
    ``N x N`` per step for all of them.  Best with few parameters
    and many outputs; `jaxadjoint.sensitivity_trajectory` returns ``S`` at the save
    times and `jaxadjoint.normalised_sensitivities` ranks parameters.
    """

    error_control: bool = eqx.field(static=True, default=True)
    sensitivity_rtol: float | None = eqx.field(static=True, default=None)
    sensitivity_atol: float | None = eqx.field(static=True, default=None)
    accept_stiff_steps: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if not isinstance(self.error_control, bool):
            raise TypeError(f"`error_control` must be a bool, got {self.error_control!r}")
        for name in ("sensitivity_rtol", "sensitivity_atol"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and value >= 0):
                raise ValueError(f"`{name}` must be a non-negative number or None, got {value!r}")

    def __call__(self, system: System, problem: Problem) -> SolveOutput:
        return _solve(problem, system, self)


class SensitivityTrajectory(eqx.Module):
    """The solution and its sensitivities at the save times.

    Attributes:
        ts: the save times, shape ``(n_save,)``.
        ys: the states, like ``sol.ys`` (a pytree like ``y0`` with a leading time axis).
        dy0: ``d ys / d y0``: for every leaf of ``ys`` (shape ``(n_save, *y_shape)``) a
            pytree like ``y0`` whose leaves have shape ``(n_save, *y_shape, *y0_leaf_shape)``.
        dargs: ``d ys / d args``, laid out the same way with the leaves of ``args``.
    """

    ts: Array
    ys: Any
    dy0: Any
    dargs: Any


@eqx.filter_jit
def sensitivity_trajectory(
    rhs: Any, y0: Any, t0: float | Array, t1: float | Array, args: Any = None, *,
    saveat: Array | None = None, sensitivity: AbstractSensitivity | None = None, **solve_kwargs
) -> SensitivityTrajectory:
    """``S(t) = dy(t)/d(y0, args)`` at the save times, from one forward-sensitivity solve.

    Takes the arguments of `jaxadjoint.solve` (``sensitivity`` defaults to
    `ForwardSensitivity()`; `DiscreteForward()` also works) and returns a
    `SensitivityTrajectory`.  Computed with `jax.jacfwd`: the augmented system is solved
    once for all columns.  Arrays that ``rhs`` closes over are not included; pass them
    in ``args``.
    """
    from ._integrate import solve

    method = ForwardSensitivity() if sensitivity is None else sensitivity

    def run(inputs):
        y0_, args_ = inputs
        sol = solve(rhs, y0_, t0, t1, args_, saveat=saveat, sensitivity=method, **solve_kwargs)
        return sol.ys, sol

    jac, sol = eqx.filter_jacfwd(run, has_aux=True)((y0, args))
    treedef = jax.tree.structure(sol.ys)
    per_leaf = treedef.flatten_up_to(jac)
    dy0 = treedef.unflatten([j[0] for j in per_leaf])
    dargs = treedef.unflatten([j[1] for j in per_leaf])
    return SensitivityTrajectory(ts=sol.ts, ys=sol.ys, dy0=dy0, dargs=dargs)


def normalised_sensitivities(trajectory: SensitivityTrajectory, args: Any) -> Any:
    """``(p_k / y_j) dy_j/dp_k`` for every parameter leaf of ``args``: dimensionless.

    Laid out like ``trajectory.dargs``.  Normalised (logarithmic) sensitivities compare
    parameters of different magnitudes: ``|value|`` is the relative change of ``y_j`` per
    relative change of ``p_k``, so sorting by it ranks the parameters' influence.
    Entries where ``y_j = 0`` are ``inf``/``nan``.
    """
    treedef = jax.tree.structure(trajectory.ys)
    ys = treedef.flatten_up_to(trajectory.ys)
    dargs = treedef.flatten_up_to(trajectory.dargs)
    out = []
    for y, d in zip(ys, dargs):
        def scale(dp, p, y=y):
            p = jnp.asarray(p)
            y_b = jnp.reshape(y, y.shape + (1,) * p.ndim)
            return dp * p.astype(dp.dtype) / y_b

        out.append(jax.tree.map(scale, d, args))
    return treedef.unflatten(out)
