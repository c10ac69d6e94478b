"""One small test problem and the compiled functions the solve/gradient tests share.

JAX compile time dominates the test suite, so every test of `solve` and its gradient
that can use the same problem does, through the module-level `eqx.filter_jit`
functions below: a new *value* (initial state, matrix, times, tolerances, step size,
save times, loss weights) reuses the compiled code; only a new solver, controller type,
state structure or number of save times compiles again.

The problem, on a state ``u`` in R^3 (stored as a pytree, see `LAYOUTS`)::

    u' = M u + cos(t) b + eps sin(u)              (rhs: `Forced`, ``b`` closed over)
    R(t, u) = {"lin": w . u, "sq": |u|^2 / 2}      (integrand)

``M``, ``eps`` and ``w`` travel in ``args``; ``b`` is an array field of the `Forced`
module, so it is differentiated as an array closed over by ``rhs``.  With ``eps = 0``
the problem is linear and has an exact solution by one matrix exponential
(`exact_loss`): with ``v = (u, cos t, sin t)``, ``v' = A v`` for the constant 5x5
matrix ``A = [[M, b, 0], [0, 0, -1], [0, 1, 0]]``, and Van Loan's block matrix
``[[A, 0], [w^T, 0]]`` also gives ``int w . u dt``.

The loss of every test is linear in the outputs with fixed weights,
``L = sum_i <W_i, ys_i> + <W_q, integral>``, so its gradient is exactly the
cotangent-weighted derivative the adjoint has to produce.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import helpers
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import Array
from jax.flatten_util import ravel_pytree

import jaxadjoint as ja
from jaxadjoint.solvers._interpolants import interpolant_for, weights_at

N = 3
MAX_STEPS = 256  # every compiled solve below uses this, so convergence runs fit too

# Rounding of the stage sums differs between jaxadjoint and the replay reference (which
# sums the stages in a different order); Verner's coefficients reach the hundreds and
# amplify it.
GRAD_RTOL = {"Vern6": 2e-11, "Vern7": 2e-11, "Vern8": 2e-11}
DEFAULT_GRAD_RTOL = 1e-12


def grad_rtol(solver: ja.AbstractERK) -> float:
    return GRAD_RTOL.get(type(solver).__name__, DEFAULT_GRAD_RTOL)


# ------------------------------------------------------------------------------------------
# The problem.


class Forced(eqx.Module):
    """``u' = M u + cos(t) b + eps sin(u)`` on any pytree layout of ``u`` in R^3."""

    b: Array

    def __call__(self, t, y, args):
        u, unravel = ravel_pytree(y)
        f = args["M"] @ u + jnp.cos(t) * self.b + args["eps"] * jnp.sin(u)
        if "P" in args:  # optional: many parameters, (3, 3k) entries, all of them used
            P = args["P"]
            f = f + 1e-3 * (P @ jnp.tile(jnp.tanh(u), P.shape[1] // 3))
        return unravel(f)


def integrand(t, y, args):
    """``{"lin": w . u, "sq": |u|^2 / 2}``: a pytree-valued running cost."""
    del t
    u = ravel_pytree(y)[0]
    return {"lin": jnp.dot(args["w"], u), "sq": 0.5 * jnp.sum(u * u)}


LAYOUTS = ("dict", "flat", "tuple")


def to_layout(layout: str, u: Array) -> Any:
    """The state ``u`` (shape (3,)) as the pytree ``layout``."""
    u = jnp.asarray(u)
    if layout == "dict":
        return {"x": u[:2], "z": u[2]}
    if layout == "flat":
        return u
    if layout == "tuple":
        return (u[:1], u[1:].reshape(1, 2))
    raise ValueError(layout)


DEFAULT_M = np.array([[-0.5, 1.2, 0.0], [-1.0, -0.3, 0.4], [0.3, 0.0, -0.8]])


def make_inputs(
    layout: str = "dict",
    *,
    M: np.ndarray = DEFAULT_M,
    b: tuple[float, ...] = (0.3, -0.2, 0.5),
    eps: float = 0.3,
    w: tuple[float, ...] = (1.0, -0.5, 0.25),
    u0: tuple[float, ...] = (1.0, 0.5, -0.7),
    dtype: Any = jnp.float64,
) -> tuple[Any, dict, Forced]:
    """``(y0, args, rhs)``: the differentiable inputs, as one pytree ``diff``."""
    args = {
        "M": jnp.asarray(M, dtype),
        "eps": jnp.asarray(eps, dtype),
        "w": jnp.asarray(w, dtype),
    }
    return to_layout(layout, jnp.asarray(u0, dtype)), args, Forced(jnp.asarray(b, dtype))


def make_weights(ys_like: Any, with_integral: bool, sq: float = -0.3) -> tuple[Any, Any]:
    """Fixed, non-trivial loss weights with the structure of ``ys`` and the integral."""

    def w(x, shift):
        return jnp.cos(shift + 1.3 * jnp.arange(x.size, dtype=x.dtype)).reshape(x.shape)

    w_ys = jax.tree.map(lambda x: w(x, 0.4), ys_like)
    w_q = {"lin": jnp.asarray(0.7, jnp.float64), "sq": jnp.asarray(sq, jnp.float64)}
    return w_ys, (w_q if with_integral else None)


def weighted_loss(ys: Any, integral: Any, weights: tuple[Any, Any]) -> Array:
    w_ys, w_q = weights
    total = sum(jnp.vdot(w, y) for w, y in zip(jax.tree.leaves(w_ys), jax.tree.leaves(ys)))
    if w_q is not None:
        total = total + sum(
            jnp.vdot(w.astype(q.dtype), q) for w, q in zip(jax.tree.leaves(w_q),
                                                           jax.tree.leaves(integral))
        )
    return total


# ------------------------------------------------------------------------------------------
# Compiled solve + gradient, and the replay reference.


def solve_kwargs(solver, controller=None, dt0=None, checkpoint=None, with_integral=True,
                 rtol=1e-7, atol=1e-7, max_steps=MAX_STEPS, throw=True):
    """Keyword arguments of `ja.solve` (tolerances as arrays so that they are traced)."""
    sensitivity = ja.DiscreteAdjoint() if checkpoint is None else ja.DiscreteAdjoint(checkpoint)
    return dict(
        solver=solver, controller=controller, dt0=dt0, sensitivity=sensitivity,
        integrand=integrand if with_integral else None,
        rtol=f64(rtol), atol=f64(atol),
        max_steps=max_steps, throw=throw,
    )


TRACES: dict[str, int] = {}  # traces of `solve_value_and_grad` (a Python side effect)


def trace_key(*args) -> str:
    """What selects a compiled `solve_value_and_grad`: its arguments with every array
    replaced by its type (shape, dtype, weak type), everything else as it is."""
    types = jax.tree.map(lambda x: str(jax.typeof(x)) if eqx.is_array(x) else x, args)
    return str(types)


@eqx.filter_jit
def solve_value_and_grad(diff, times, weights, kwargs):
    """``(L, (dL/ddiff, dL/d(t0, t1, saveat)), sol)`` for ``diff = (y0, args, rhs)``."""
    key = trace_key(diff, times, weights, kwargs)
    TRACES[key] = TRACES.get(key, 0) + 1

    def loss(diff, times):
        y0, args, rhs = diff
        t0, t1, saveat = times
        sol = ja.solve(rhs, y0, t0, t1, args, saveat=saveat, **kwargs)
        return weighted_loss(sol.ys, sol.integral, weights), sol

    (value, sol), grads = eqx.filter_value_and_grad(
        lambda both: loss(*both), has_aux=True
    )((diff, times))
    return value, grads, sol


def replay_traced(rhs, tableau, y0, args, grid, integrand=None):
    """Textbook Runge–Kutta on a *traced* grid: ``(states, slopes, integral)``.

    ``states`` holds the state at every grid point, ``slopes`` the ``s + e`` stage slopes
    of every step: the tableau's, then the extra stages of its interpolant
    (`_interpolants`, data only), for the continuous extension `interpolate_saves`.
    The formulas of `helpers.replay` (which needs a concrete grid, so it would compile once
    per grid), with the stages in a rolled loop (``Y_m = y + h a[m] @ K``) so that it
    compiles quickly for many-stage tableaus; `test_replay_traced_is_helpers_replay`
    checks that the two agree.  Nothing here comes from jaxadjoint's step or reverse pass.
    """
    interp = interpolant_for(tableau)
    s = tableau.num_stages
    e = interp.c_extra.shape[0]
    a_np = np.zeros((s + e, s + e))
    a_np[:s, :s] = tableau.a
    a_np[s:] = interp.a_extra
    a = jnp.asarray(a_np)
    b = jnp.asarray(tableau.b)
    c = jnp.asarray(np.concatenate([tableau.c, interp.c_extra]))
    y0_flat, unravel = ravel_pytree(y0)

    def f(t, y):
        return ravel_pytree(rhs(t, unravel(y), args))[0]

    def r(t, y):
        return ravel_pytree(integrand(t, unravel(y), args))[0]

    def step(carry, t_and_h):
        y, q = carry
        t, h = t_and_h

        def stage(m, ks_rs):
            ks, rs = ks_rs
            Y = y + h * (a[m] @ ks)
            ks = ks.at[m].set(f(t + c[m] * h, Y))
            if integrand is not None:
                rs = rs.at[m].set(jnp.where(m < s, r(t + c[m] * h, Y), 0))
            return ks, rs

        ks = jnp.zeros((s + e,) + y.shape, y.dtype)
        rs = None if integrand is None else jnp.zeros((s + e,) + q.shape, q.dtype)
        ks, rs = jax.lax.fori_loop(0, s + e, stage, (ks, rs))
        y_new = y + h * (b @ ks[:s])
        if integrand is not None:
            q = q + h * (b @ rs[:s])
        return (y_new, q), (y_new, ks)

    q0 = None
    if integrand is not None:
        q0 = jnp.zeros_like(r(grid[0], y0_flat))
    (_, q), (states, slopes) = jax.lax.scan(
        step, (y0_flat, q0), (grid[:-1], grid[1:] - grid[:-1])
    )
    states = jnp.concatenate([y0_flat[None], states])
    q = None if integrand is None else ravel_pytree(integrand(grid[0], y0, args))[1](q)
    return jax.vmap(unravel)(states), slopes, q


def save_points(grid: np.ndarray, saveat: np.ndarray | None, length: int = MAX_STEPS):
    """``(grid padded to length + 1 with t1, step index and theta of every save)``.

    The padding steps have ``h = 0``, exactly the identity in value and derivative, so
    the replay of the padded grid is the replay of the grid; a fixed length lets one
    compiled reference serve every grid.  A save at ``t`` is on the step with
    ``t_n <= t < t_{n+1}`` at ``theta = (t - t_n) / h_n``; a save at ``t_T`` is the state
    ``y_T`` (index ``T``, ``theta = 0``).
    """
    assert len(grid) <= length + 1
    padded = np.concatenate([grid, np.full(length + 1 - len(grid), grid[-1])])
    times = np.array([grid[-1]]) if saveat is None else np.asarray(saveat)
    sign = np.sign(grid[-1] - grid[0])
    index = np.searchsorted(sign * grid, sign * times, side="right") - 1
    index = np.minimum(index, len(grid) - 1)
    last = index == len(grid) - 1
    h = np.where(last, 1.0, grid[np.minimum(index + 1, len(grid) - 1)] - grid[index])
    theta = np.where(last, 0.0, (times - grid[index]) / h)
    return padded, index, theta


def interpolate_saves(tableau, grid, states, slopes, index, theta):
    """The saves ``y_n + h_n sum_m b_m(theta) k_m`` on flat states, by the interpolant of
    ``tableau`` (data of `_interpolants`); a save at ``t_T`` (index ``T``) is ``y_T``."""
    weights = weights_at(interpolant_for(tableau), jnp.asarray(theta))  # (n_save, s + e)
    padded = jnp.concatenate([slopes, jnp.zeros_like(slopes[:1])])  # row T: theta = 0 only
    h = (grid[jnp.minimum(index + 1, grid.shape[0] - 1)] - grid[index])[:, None]
    return states[index] + h * jnp.einsum("im,imn->in", weights, padded[index])


@eqx.filter_jit
def replay_value_and_grad(diff, grid, save_index, theta, weights, solver, with_integral):
    """The reference: `replay_traced` on the padded grid, saves interpolated, and its gradient."""

    def loss(diff):
        y0, args, rhs = diff
        integ = integrand if with_integral else None
        states, slopes, q = replay_traced(rhs, solver.tableau, y0, args, grid, integ)
        flat_states = jax.vmap(lambda x: ravel_pytree(x)[0])(states)
        flat = interpolate_saves(solver.tableau, grid, flat_states, slopes, save_index, theta)
        ys = jax.vmap(ravel_pytree(y0)[1])(flat)
        return weighted_loss(ys, q, weights), (ys, q)

    (value, outputs), grads = eqx.filter_value_and_grad(loss, has_aux=True)(diff)
    return value, grads, outputs


def check_against_replay(diff, t0, t1, saveat, kwargs, rtol=None):
    """Solve, differentiate, and compare everything with the replay on the same grid.

    Returns ``(sol, grads, time_grads)`` for further checks.
    """
    solver = kwargs["solver"]
    with_integral = kwargs["integrand"] is not None
    arguments = run_arguments(diff, t0, t1, saveat, kwargs)
    weights = arguments[2]
    value, (grads, time_grads), sol = solve_value_and_grad(*arguments)
    assert sol.result == ja.RESULTS.successful
    grid = helpers.accepted_grid(sol)
    padded, save_index, theta = save_points(grid, None if saveat is None else np.asarray(saveat))
    ref_value, ref_grads, (ref_ys, ref_q) = replay_value_and_grad(
        diff, padded, save_index, theta, weights, solver, with_integral
    )
    tol = grad_rtol(solver) if rtol is None else rtol
    assert helpers.max_rel_diff(sol.ys, ref_ys) < tol
    if with_integral:
        assert helpers.max_rel_diff(sol.integral, ref_q) < tol
    assert abs(float(value) - float(ref_value)) <= tol * max(1.0, abs(float(ref_value)))
    assert helpers.max_rel_diff(grads, ref_grads) < tol, helpers.max_rel_diff(grads, ref_grads)
    # Leaf by leaf too, so that a small wrong leaf cannot hide behind a large one.
    scale = tree_scale(ref_grads)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
        leaf_scale = max(float(np.max(np.abs(r))), 1e-3 * scale)
        assert float(np.max(np.abs(np.asarray(g) - np.asarray(r)))) <= 10 * tol * leaf_scale
    return sol, grads, time_grads


def tree_scale(tree: Any) -> float:
    return max(float(np.max(np.abs(np.asarray(x)))) for x in jax.tree.leaves(tree))


# ------------------------------------------------------------------------------------------
# The exact solution for eps = 0.


def _augmented(args: dict, rhs: Forced) -> Array:
    M, b, w = args["M"], rhs.b, args["w"]
    A = jnp.zeros((6, 6), M.dtype)
    A = A.at[:3, :3].set(M).at[:3, 3].set(b).at[3, 4].set(-1.0).at[4, 3].set(1.0)
    return A.at[5, :3].set(w)


def exact_outputs(diff, t0, t1, saveat):
    """``(ys, int_{t0}^{t1} w . u dt)`` of the linear problem (``eps`` ignored: set it to 0)."""
    y0, args, rhs = diff
    u0 = ravel_pytree(y0)[0]
    B = _augmented(args, rhs)
    v0 = jnp.concatenate([u0, jnp.stack([jnp.cos(t0), jnp.sin(t0)]), jnp.zeros((1,), u0.dtype)])

    def at(t):
        return jsl.expm(B * (t - t0)) @ v0

    ts = jnp.reshape(t1, (1,)) if saveat is None else saveat
    vs = jax.vmap(at)(ts)
    unravel = ravel_pytree(y0)[1]
    ys = jax.vmap(unravel)(vs[:, :3])
    return ys, at(t1)[5]


def exact_loss(diff, times, weights):
    """The loss of `solve_value_and_grad` on the exact solution (``W_q["sq"]`` must be 0)."""
    t0, t1, saveat = times
    ys, lin = exact_outputs(diff, t0, t1, saveat)
    w_ys, w_q = weights
    total = sum(jnp.vdot(w, y) for w, y in zip(jax.tree.leaves(w_ys), jax.tree.leaves(ys)))
    if w_q is not None:
        total = total + w_q["lin"] * lin
    return total


# ------------------------------------------------------------------------------------------
# The standard cases of the solver sweep (shared by several test files, so compiled once).

FORWARD = (0.1, 2.1, (0.1, 0.7, 2.1))  # saves at t0 and at t1 included
BACKWARD = (2.1, -0.3, (1.5, 0.0, 0.0))  # backwards in time, a repeated save time
# Save times strictly inside, so that t0, t1 and each save can be moved a little.
INTERIOR_FORWARD = (0.1, 2.1, (0.4, 0.7, 1.9))
INTERIOR_BACKWARD = (2.1, -0.3, (1.5, 0.2, 0.0))
SOLVER_NAMES = [type(s).__name__ for s in helpers.ALL_SOLVERS]


def layout_for(solver: ja.AbstractERK) -> str:
    """Each solver runs on one of the pytree layouts, so that all of them are covered."""
    return LAYOUTS[SOLVER_NAMES.index(type(solver).__name__) % len(LAYOUTS)]


def f64(x) -> Array:
    """A (not weakly typed) float64 array: every traced number goes through this, so that
    a Python float here and a NumPy float there do not select different compilations."""
    return jnp.asarray(x, jnp.float64)


def sweep_kwargs(solver, controller=None, dt=0.1, dt0=0.05, **kw):
    """`solve` keywords of the sweep: `ConstantStep` for fixed-step solvers, else the default
    controller with a given (traced) first step; everything numerical is traced."""
    if controller is None and not solver.adaptive:
        controller = ja.ConstantStep(dt)
    if isinstance(controller, ja.ConstantStep):
        controller = ja.ConstantStep(f64(controller.dt))
    if isinstance(controller, ja.StepTo):
        controller = ja.StepTo(f64(controller.ts))
    adaptive = controller is None or controller.adaptive
    return solve_kwargs(solver, controller, dt0=f64(dt0) if adaptive else None, **kw)


def run_arguments(diff, t0, t1, saveat, kwargs, weights=None):
    """The arguments of `solve_value_and_grad`: array times and the default weights."""
    times = (f64(t0), f64(t1), None if saveat is None else f64(saveat))
    if weights is None:
        n = 1 if saveat is None else len(saveat)
        ys_like = jax.tree.map(lambda x: jnp.zeros((n,) + jnp.shape(x), x.dtype), diff[0])
        weights = make_weights(ys_like, kwargs["integrand"] is not None)
    return diff, times, weights, kwargs


def run(diff, t0, t1, saveat, kwargs, weights=None):
    """`solve_value_and_grad` with array times and (by default) the default weights."""
    return solve_value_and_grad(*run_arguments(diff, t0, t1, saveat, kwargs, weights))


def traces_of_run(diff, t0, t1, saveat, kwargs) -> int:
    """How often the compiled function that `run` would call has been traced."""
    return TRACES.get(trace_key(*run_arguments(diff, t0, t1, saveat, kwargs)), 0)


exact_value_and_grad = jax.jit(jax.value_and_grad(exact_loss, argnums=(0, 1)))


def exact_weights(diff, n_save):
    """Loss weights for which `exact_loss` is exact (no weight on the ``|u|^2`` integral)."""
    ys_like = jax.tree.map(lambda x: jnp.zeros((n_save,) + jnp.shape(x)), diff[0])
    return make_weights(ys_like, True, sq=0.0)


def compare_with_exact(diff, t0, t1, saveat, kwargs):
    """Relative errors of (outputs, gradients, time gradients) against the exact solution.

    ``diff`` must have ``eps = 0``; the gradient with respect to ``eps`` is left out (the
    exact solution is only that of the linear problem).
    """
    times = (f64(t0), f64(t1), f64(saveat))
    weights = exact_weights(diff, len(saveat))
    _, (grads, time_grads), sol = solve_value_and_grad(diff, times, weights, kwargs)
    _, (exact_grads, exact_time_grads) = exact_value_and_grad(diff, times, weights)
    exact_ys, exact_lin = exact_outputs(diff, *times)
    output_error = max(
        helpers.max_rel_diff(sol.ys, exact_ys),
        abs(float(sol.integral["lin"] - exact_lin)) / abs(float(exact_lin)),
    )
    grads, exact_grads = _without_eps(grads), _without_eps(exact_grads)
    return (
        output_error,
        helpers.max_rel_diff(grads, exact_grads),
        helpers.max_rel_diff(time_grads, exact_time_grads),
    )


def _without_eps(grads):
    d_y0, d_args, d_rhs = grads
    return d_y0, {k: v for k, v in d_args.items() if k != "eps"}, d_rhs
