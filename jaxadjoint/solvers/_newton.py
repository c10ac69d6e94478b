"""One implicit stage: ``k = f(base + gamma h k)``, solved by simplified Newton.

**Forward.**  With the step's factorisation of ``M_0 = I - gamma h J(t_n, y_n)`` (one LU per
step, shared by every stage), iterate from a starting guess ``k^0``::

    Delta^m = M_0^{-1} (f(base + gamma h k^m) - k^m),      k^{m+1} = k^m + Delta^m

and measure the change of the stage value ``Z = base + gamma h k`` in the error norm of
the step, ``d_m = ||gamma h Delta^m / (atol + rtol |y_n|)||_rms``.  As in Hairer & Wanner's
codes (Solving ODEs II, IV.8), the contraction rate ``theta_m = d_m / d_{m-1}`` predicts
the distance to the root, ``eta_m d_m`` with ``eta_m = theta_m / (1 - theta_m)``; the
stage has converged when ``eta_m d_m <= kappa`` (``eta_0 = 1``: a first iteration counts
only if its correction is itself that small).  ``kappa = 1e-2`` asks the Newton error to be
a hundredth of the local error tolerance; it is floored at ``10 eps / rtol`` (round-off).
The iteration fails, and the step is rejected, when ``theta >= 1`` (divergence), when a
value is not finite, or after ``max_iterations``.

The stage slope returned is the last iterate ``k``, not ``f(Z)``: for stiff components
``f`` amplifies the Newton error by ``|h lambda|``, the iterate does not.

**Derivative (implicit function theorem).**  At the root ``k = f(t_i, base + gamma h k,
p)`` the stage is a function of ``(base, p)`` alone (not of the guess, the iteration or
``M_0``), with

    dk = (I - gamma h J(Z))^{-1} (J(Z) dbase + f_p(Z) dp),       J(Z) = df/dy at the stage

(the exact Jacobian at the converged stage, not ``J(y_n)``).  That is the tangent rule
attached here (forward mode, `DiscreteForward`); the reverse step of the method uses its
transpose (`_esdirk`).  It is the derivative of the exact root, so it differs from the
derivative of the computed iterate by a relative amount of the order of the Newton error:
exact up to the Newton tolerance.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from .._lanes import any_lane_cond
from ._dense_lu import lu_factor, lu_solve
from ._linear_solver import AbstractFactorisation


def _rms(x: Array, tested: tuple[tuple[int, int], ...] | None = None) -> Array:
    """The root mean square of ``x``, or of its ranges ``tested``."""
    if tested is not None:
        x = jnp.concatenate([x[start:stop] for start, stop in tested])
    return jnp.sqrt(jnp.mean(jnp.square(x)))


def newton_stage(
    fn: Callable[[Array], Array],
    base: Array,
    hg: Array,
    guess: Array,
    lu: AbstractFactorisation,
    scale: Array,
    kappa: Array,
    max_iterations: int,
    tested: tuple[tuple[int, int], ...] | None = None,
) -> tuple[Array, Array, Array]:
    """``(k, converged, iterations)``: simplified Newton for ``k = fn(base + hg k)`` (module
    docstring); each iteration evaluates ``fn`` once.

    ``fn`` is ``Z -> f(t_i, Z)``, ``lu`` the factorisation of ``I - hg J(t_n, y_n)``
    (`_linear_solver`), ``scale`` the error scale ``atol + rtol |y_n|`` and ``kappa`` the
    (floored) tolerance; ``tested``: the ranges of the state the test measures
    (`AbstractLinearSolver.newton_tested`), None for all.
    """

    # For tiny states the LU factors' substitution in fusible arithmetic, formed once for
    # all iterations (`DenseLU.solver`), not two triangular-solve library calls each.
    solve = lu.solver()

    def body(state):
        it, k, _, d_prev, eta, _, _ = state
        delta = solve(fn(base + hg * k) - k)
        k_new = k + delta
        d = _rms(hg * delta / scale, tested)
        first = it == 0
        theta = jnp.where(first, 0.0, d / jnp.where(first, 1.0, d_prev))
        eta = jnp.where(first, eta, theta / (1 - theta))
        left = max_iterations - 1 - it
        finite = jnp.isfinite(d) & jnp.all(jnp.isfinite(k_new))
        converged = finite & (eta * d <= kappa)
        # Divergence.  (Hairer's codes also give up when the rate predicts no
        # convergence within the iterations left; with Kvaerno5's extrapolated starting
        # guesses that rejected most large steps of Robertson's problem, so it is not used.)
        hopeless = (~first & (theta >= 1)) | ~finite
        failed = ~converged & (hopeless | (left == 0))
        return it + 1, k_new, d, d, eta, converged, failed

    def running(state):
        _, _, _, _, _, converged, failed = state
        return ~converged & ~failed

    dtype = base.dtype
    one = jnp.ones((), dtype)
    init = (jnp.int32(0), guess, one, one, one, jnp.array(False), jnp.array(False))
    iterations, k, _, _, _, converged, _ = jax.lax.while_loop(running, body, init)
    return k, converged, iterations


@eqx.filter_custom_jvp
def implicit_slope(
    fn: Callable[[Array], Array], base: Array, hg: Array, *, guess: Array,
    lu: AbstractFactorisation, scale: Array, kappa: Array, max_iterations: int,
    tested: tuple[tuple[int, int], ...] | None = None,
) -> tuple[Array, Array, Array]:
    """`newton_stage` with the implicit-function-theorem tangent (module docstring).

    ``fn`` must be closure-converted (`equinox.filter_closure_convert`) so that the
    arrays it closes over (the parameters, the stage time) are its differentiable leaves.
    The root depends on ``base``, ``hg = gamma h`` (a segment restarted at an event
    differentiates its clipped last step in ``h``, `_start_time`) and ``fn``; the guess,
    ``M_0`` and the tolerances are constants of it (keyword arguments).
    """
    return newton_stage(fn, base, hg, guess, lu, scale, kappa, max_iterations, tested)


def _slope_tangent(fn: Callable, fn_dot: Callable | None, base: Array,
                   base_dot: Array | None, z: Array, hg: Array, hg_dot: Array | None,
                   k: Array) -> Array:
    """``dk = (I - hg J(z))^{-1} (J(z) (dbase + k dhg) + f_p(z) dp)`` at the root
    ``z = base + hg k`` of ``k = f(z)``."""
    if base_dot is None:
        base_dot = jnp.zeros_like(base)
    if hg_dot is not None:
        base_dot = base_dot + hg_dot * k
    if fn_dot is None:
        rhs = jax.jvp(fn, (z,), (base_dot,))[1]
    else:
        rhs = eqx.filter_jvp(lambda g, x: g(x), (fn, z), (fn_dot, base_dot))[1]
    jac = jax.jacfwd(fn)(z)
    matrix = jnp.eye(z.shape[0], dtype=z.dtype) - hg * jac
    return lu_solve(lu_factor(matrix), rhs)


@implicit_slope.def_jvp
def _implicit_slope_jvp(primals, tangents, *, guess, lu, scale, kappa, max_iterations,
                        tested=None):
    fn, base, hg = primals
    fn_dot, base_dot, hg_dot = tangents
    k, converged, iterations = implicit_slope(fn, base, hg, guess=guess, lu=lu,
                                              scale=scale, kappa=kappa,
                                              max_iterations=max_iterations, tested=tested)
    k_dot = _slope_tangent(fn, fn_dot, base, base_dot, base + hg * k, hg, hg_dot, k)
    return (k, converged, iterations), (k_dot, None, None)


def recorded_slope(fn: Callable[[Array], Array], base: Array, hg: Array, *, z: Array
                   ) -> Array:
    """The slope of a stage whose converged value ``z`` a solve kept: ``(z - base) / hg``,
    with the implicit-function-theorem derivatives at ``z`` itself, to second order.

    For a replay of that solve (`DiscreteForward`): solving the stage again, in another
    compiled program, Newton's iteration can stop at another iterate within its
    tolerance, and over many steps the replayed trajectory drifts from the solve's.

    Two Newton steps of ``G(x) = x - base - hg fn(x) = 0`` from the kept ``z``, with
    ``M = I - hg J(z)`` held fixed and each residual's value taken out
    (``r - stop_gradient(r)``): the value stays ``z`` bit for bit, the first step gives the
    stage's first derivatives ``M^{-1} (dbase + f dhg + hg f_p dp)``, and the second, from
    that moving point, its second derivatives too (a Hessian, ``jax.jacfwd`` of
    ``jax.jacfwd``).  A `custom_jvp` at a fixed ``z`` had the first only: its second
    derivative missed how ``J(z)`` moves with the stage (0.56 for 0.99 on y' = -k y).
    Plain JAX, so JAX transposes it for `jax.grad` through the replay.
    """
    z = jax.lax.stop_gradient(z)
    jac = jax.jacfwd(fn)(z)
    lu = jax.lax.stop_gradient(lu_factor(jnp.eye(z.shape[0], dtype=z.dtype) - hg * jac))

    def newton(x: Array) -> Array:
        r = x - base - hg * fn(x)
        return x - lu_solve(lu, r - jax.lax.stop_gradient(r))

    return (newton(newton(z)) - base) / hg


# Iterations of `solve_transposed_stage` before it hands over to the direct solve.  The
# rate is that of the forward Newton iteration (0.1 to 0.3 on Robertson's and the
# Brusselator's steps, ~10 iterations to round-off).
TRANSPOSED_MAX_ITERATIONS = 24


def solve_transposed_stage(
    apply_transpose: Callable[[Array], Array],
    lu: tuple[Array, Array],
    kbar: Array,
    direct: Callable[[Array], Array],
    max_iterations: int = TRANSPOSED_MAX_ITERATIONS,
) -> Array:
    """``u = M_i^{-T} kbar`` to round-off, preconditioned by the step's ``M_0 = LU``.

    ``apply_transpose(u) = M_i^T u = u - gamma h J(Z_i)^T u`` (a vector-Jacobian product at
    the converged stage, no Jacobian formed).  The transposed simplified Newton iteration

        u^0 = 0,     u^{m+1} = u^m + M_0^{-T} (kbar - M_i^T u^m)

    contracts with ``M_0^{-T} (M_0 - M_i)^T = gamma h M_0^{-T} (J(Z_i) - J(y_n))^T``: the
    rate of the forward Newton iteration of the stage.  Each iteration costs ``N^2`` (two
    triangular solves) plus one VJP, against ``N^3`` for factorising ``M_i``.  With
    ``d_m = ||delta^m||_inf`` and the rate ``theta_m = d_m / d_{m-1}``, the iteration stops
    when the remaining error ``theta/(1 - theta) d_m`` (or the correction itself) is at
    round-off relative to ``||u||_inf``; so the result is the solution of the linear system
    to round-off, as a direct solve would give, and the adjoint stays the exact IFT
    derivative.  If it diverges (``theta >= 1`` above round-off) or has not converged
    after ``max_iterations``, ``direct(kbar)`` (an LU of ``M_i``) gives the answer.

    That fallback is an `_lanes.any_lane_cond`, not a `jax.lax.cond`: under `jax.jacrev`
    the reverse pass runs under `jax.vmap` over the cotangent seeds, ``converged`` differs
    between seeds, and a `cond` on it became a select that broadcast ``Z_i`` to every seed
    first, so ``M_i`` was formed and factorised once per seed on every stage of every step
    (a Burgers grid of 64 points, 12 outputs: six ``(12, 64, 64)`` LUs in the program) even
    where all seeds converged.  Those batched LUs also hung jaxlib's CPU LAPACK kernels
    (two at once, each waiting on XLA's thread pool for its share of the batch; seen at
    N = 32, 48, 64 and 256 on 2 cores).  Now ``M_i`` stays unbatched, is factorised once if any
    seed needs it, and each seed that did not converge takes its solve from it.
    """
    eps = jnp.finfo(kbar.dtype).eps

    def body(state):
        it, u, d_prev, _, _ = state
        delta = lu_solve(lu, kbar - apply_transpose(u), trans=1)
        u_new = u + delta
        d = jnp.max(jnp.abs(delta))
        size = jnp.max(jnp.abs(u_new))
        theta = jnp.where(it == 0, 1.0, d / jnp.where(d_prev > 0, d_prev, 1.0))
        remaining = jnp.where(theta < 1, theta / (1 - theta), jnp.inf) * d
        floor = 4 * eps * size
        converged = (d <= floor) | ((it > 0) & (remaining <= floor))
        finite = jnp.isfinite(d)
        failed = ~converged & (~finite | ((it > 0) & (theta >= 1))
                               | (it + 1 >= max_iterations))
        return it + 1, u_new, d, converged, failed

    def running(state):
        _, _, _, converged, failed = state
        return ~converged & ~failed

    zero = jnp.zeros((), kbar.dtype)
    init = (jnp.int32(0), jnp.zeros_like(kbar), zero, jnp.array(False), jnp.array(False))
    _, u, _, converged, _ = jax.lax.while_loop(running, body, init)

    def with_direct(kbar: Array, u: Array, converged: Array) -> Array:
        return jnp.where(converged, u, direct(kbar))

    return any_lane_cond(~converged, with_direct, lambda kbar, u, converged: u,
                         kbar, u, converged)
