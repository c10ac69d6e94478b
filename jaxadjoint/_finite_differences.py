"""`FiniteDifferences`: numerical differentiation by re-solving (the paper's ND baseline).

For every differentiated scalar input ``x_k`` (entries of ``y0``, of the parameters, and
the times) the whole adaptive solve is repeated with ``x_k`` bumped by
``h_k = step * max(1, |x_k|)``, or ``step * max(1, |t1 - t0|)`` for a time
(`_bump_scales`):

    central:  dF/dx_k ~ (F(x + h_k e_k) - F(x - h_k e_k)) / (2 h_k)     2P solves
    forward:  dF/dx_k ~ (F(x + h_k e_k) - F(x)) / h_k                     P solves

where ``P`` counts only the inputs that are being differentiated.  Each perturbed solve
chooses its own steps, so the result carries the solver's error divided by ``h`` as well
as the truncation error of the difference: it stagnates around ``1e-7`` relative at best
(``step ~ 1e-6``).  A bump that would move ``t0`` or ``t1`` past a save time, or a save
time out of ``[t0, t1]``, is taken on the other side only: with the central scheme as
the second-order one-sided difference through ``x``, ``x + h`` and ``x + 2 h`` (one more
solve; ``y(t1)`` without save times is such a save, so every ``t1`` derivative takes it),
falling back to first order if ``x + 2 h`` leaves the interval too.  A save time may pass its
neighbours: the bumped solve saves at the sorted times and its saves are put back in the
caller's order (repeated save times, and saves at ``t0`` or ``t1``, get their derivative).

The Jacobian is attached as a custom JVP with tangent ``J xdot`` — linear, so `jax.jvp`,
`jax.jacfwd`, `jax.grad` and `jax.jacrev` all work, each at the cost above (the
Jacobian is computed once per call whatever the number of tangent directions).
Use it as a sanity check, not for production gradients.
"""

from __future__ import annotations

from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from ._adjoint import plain_solve
from ._forward import Recorder, forward_loop
from ._lanes import any_lane_cond
from ._matmul import matmul
from ._results import RESULTS
from ._sensitivity_base import AbstractSensitivity, SolveOutput
from ._sensitivity_common import (
    combine,
    fail_if_differentiated_failure,
    first_order_only,
    mask_params,
    ravel,
)
from ._stiffness import flag_stiff_gradient
from ._system import Problem, System


def _valid(problem: Problem, reference: Problem) -> Array:
    """Whether ``problem`` runs in the direction of ``reference`` and its save times lie
    in ``[t0, t1]`` (in any order: `_solve_sorted`)."""
    direction = reference.direction
    inside = (jnp.all(direction * (problem.ts - problem.t0) >= 0)
              & jnp.all(direction * (problem.t1 - problem.ts) >= 0))
    return inside & (direction * (problem.t1 - problem.t0) > 0)


def _solve_sorted(system: System, problem: Problem) -> tuple[Array, Array, Array]:
    """``(ys, integral, result)`` of ``problem`` with its save times in any order: solved
    at the sorted times, the saves returned in the order of ``problem.ts``."""
    order = jnp.argsort(problem.direction * problem.ts, stable=True)
    fwd = forward_loop(system, eqx.tree_at(lambda p: p.ts, problem, problem.ts[order]),
                       Recorder())
    return fwd.ys[jnp.argsort(order)], fwd.integral, fwd.result


def _bump_scales(problem: Problem) -> Problem:
    """What each input's bump is relative to: ``max(1, |x|)`` for states and parameters,
    ``max(1, |t1 - t0|)`` for the times.  A time's own size says nothing of the solution's
    time scale: ``max(1, |t|)`` on [100, 103] in float32 bumped ``t1`` by 0.5, and
    ``dy(t1)/dt1`` came out with the wrong sign.  The interval alone is no time scale
    either: on [0, 1e-7] a bump of 1e-13 moves ``y`` by round-off (1.6e-3 off), where the
    floor of 1 keeps such an interval an error (no bump fits)."""
    span = jnp.maximum(1.0, jnp.abs(problem.t1 - problem.t0))
    return Problem(
        y0=jnp.maximum(1.0, jnp.abs(problem.y0)),
        params=jax.tree.map(lambda p: jnp.maximum(1.0, jnp.abs(p)), problem.params),
        t0=span, t1=span, ts=jnp.full_like(problem.ts, span))


def _coarsest_dtype(system: System, problem: Problem, on: Any) -> Any:
    """The floating dtype of least precision among the state's leaves as the user gave
    them and the differentiated inputs: the solve runs in the widest, but the right-hand
    side sees a float32 leaf of ``y0`` (or a float32 parameter) rounded to float32, and a
    bump chosen for float64 drowns in that rounding (1e-3 off on a float32 leaf)."""
    leaves = jax.tree.leaves(jax.eval_shape(system.unravel_y, problem.y0)) + jax.tree.leaves(on)
    dtypes = [jnp.result_type(leaf) for leaf in leaves
              if jnp.issubdtype(jnp.result_type(leaf), jnp.floating)]
    return max(dtypes, key=lambda d: float(jnp.finfo(d).eps), default=problem.y0.dtype)


@eqx.filter_custom_jvp
def _solve(problem: Problem, system: System, fd: FiniteDifferences) -> SolveOutput:
    del fd
    return plain_solve(system, problem)


@_solve.def_jvp
def _solve_jvp(primals, tangents):
    problem, system, fd = primals
    problem_dot = tangents[0]
    primal_problem = problem
    problem = jax.lax.stop_gradient(problem)
    dtype = problem.y0.dtype
    out = _solve(problem, system, fd)
    on, off = mask_params(problem, problem_dot)
    x, unravel = ravel(on, dtype)
    v = ravel(mask_params(problem_dot, problem_dot)[0], dtype)[0]

    def evaluate(xk: Array) -> tuple[Array, Array]:
        p = combine(unravel(xk), off)
        ys, integral, result = _solve_sorted(system, p)
        ok = (result == RESULTS.successful) & _valid(p, problem)
        return jnp.concatenate([ys.reshape(-1), integral]), ok

    relative_step = fd.bump(_coarsest_dtype(system, problem, on))
    scales = ravel(mask_params(_bump_scales(problem), problem_dot)[0], dtype)[0]

    def bumped(k: Array, sign: float) -> tuple[Array, Array, Array]:
        h = relative_step * scales[k]
        xk = x.at[k].add(sign * h)
        return xk, xk[k] - x[k], _valid(combine(unravel(xk), off), problem)

    def column(k: Array) -> tuple[Array, Array]:
        if fd.scheme == "central":
            xp, hp, okp = bumped(k, 1.0)
            xm, hm, okm = bumped(k, -1.0)
            # Where a bump leaves the interval, a one-sided difference of the same order
            # on the other side (module docstring), reusing x itself as its middle point.
            xp = jnp.where(okp, xp, x)
            xm = jnp.where(okm, xm, x)
            hp = jnp.where(okp, hp, 0)
            hm = jnp.where(okm, hm, 0)
            fp, ok1 = evaluate(xp)
            fm, ok2 = evaluate(xm)
            central = (fp - fm) / (hp - hm)
            side = jnp.where(okp, 1.0, -1.0).astype(dtype)
            x_far, h_far, ok_far = bumped(k, 2.0 * side)
            x_far = jnp.where(ok_far, x_far, x)  # never solve out of the interval
            h_far = jnp.where(ok_far, h_far, 1)

            def one_sided(_):
                f_far, ok3 = evaluate(x_far)
                f_near = jnp.where(okp, fp, fm)
                h_near = jnp.where(okp, hp, hm)
                # Through (0, f0), (h, f_near), (H, f_far): the derivative at 0 of the
                # parabola, exact for quadratics whatever the realised bumps h and H.
                slope = ((f_near - base) * h_far ** 2 - (f_far - base) * h_near ** 2) / (
                    h_near * h_far * (h_far - h_near))
                return jnp.where(ok_far & ok3, slope, central)

            # Under `jax.vmap` the sides differ between lanes: `any_lane_cond` runs the
            # far solve once for all lanes if any needs it.  (A `jax.lax.cond` there is a
            # select that broadcasts its operands to the batch, the solves' constants
            # included, which `jax.custom_batching` refuses: a bare AssertionError from
            # `vmap` over `t1` or the save times, a user's acceptance test.)
            need = ~(okp & okm)
            value = any_lane_cond(
                need, lambda: jnp.where(need, one_sided(None), central), lambda: central)
            return value, ok1 & ok2 & (okp | okm)
        xp, hp, okp = bumped(k, 1.0)
        xm, hm, _ = bumped(k, -1.0)
        xk, hk = jnp.where(okp, xp, xm), jnp.where(okp, hp, hm)
        fk, ok = evaluate(xk)
        return (fk - base) / hk, ok

    base = jnp.concatenate([out.ys.reshape(-1), out.integral])
    cols, oks = jax.lax.map(column, jnp.arange(x.shape[0]))
    jac = cols.T  # (outputs, P)
    # Differences with a failed solve are meaningless: the unperturbed solve's failure
    # (throw=False; with throw=True it raised already), then any perturbed one's.
    jac = fail_if_differentiated_failure(system, jac, out.record.result)
    jac = eqx.error_if(
        jac, ~jnp.all(oks),
        "A perturbed solve of `FiniteDifferences` failed, or an input could not be "
        "bumped to either side (a time out of [t0, t1]); use a smaller `step` or "
        "increase `max_steps`",
    )
    # Differences of solves whose steps ride the stability boundary are as untrustworthy
    # as the exact derivative of those steps (`_stiffness`).
    jac = flag_stiff_gradient(jac, system, out.record.stats, fd.accept_stiff_steps)
    flat_dot = first_order_only("FiniteDifferences", matmul(jac, v), primal_problem)
    n_ys = out.ys.size
    tangent = SolveOutput(
        flat_dot[:n_ys].reshape(out.ys.shape), flat_dot[n_ys:],
        jax.tree.map(lambda _: None, out.record),
    )
    return out, tangent


class FiniteDifferences(AbstractSensitivity):
    """Derivatives by re-solving with perturbed inputs (central or forward differences).

    Arguments:
        step: relative bump, ``h_k = step * max(1, |x_k|)`` (times: ``step * max(1,
            |t1 - t0|)``).  By default ``1e-6`` in float64 and, in lower precision,
            ``eps^(1/3)`` (central) or ``eps^(1/2)`` (forward) of the least precise dtype
            among ``y0``'s leaves and the differentiated inputs: float32 ``4.9e-3`` /
            ``3.5e-4`` (``1e-6`` was 45 % off on Lotka–Volterra in float32, round-off
            divided by the bump; 1e-3 off on a float32 leaf of a mixed float32/float64
            ``y0``).
        scheme: ``"central"`` (2 solves per differentiated scalar, error ``O(h^2)``) or
            ``"forward"`` (1 solve each, error ``O(h)``).
        accept_stiff_steps: return the derivative even when the unperturbed solve rode
            the stability boundary of an explicit method (by default that raises, as for
            every sensitivity method: see `_stiffness`).

    Works with `jax.jvp`, `jax.jacfwd`, `jax.grad` and `jax.jacrev`; every call costs
    ``P`` or ``2P`` extra solves, ``P`` the number of differentiated scalar inputs.
    """

    step: float | None = eqx.field(static=True, default=None)
    scheme: Literal["central", "forward"] = eqx.field(static=True, default="central")
    accept_stiff_steps: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if self.step is not None and (
            not isinstance(self.step, int | float) or isinstance(self.step, bool)
            or not 0 < self.step < 1
        ):
            raise ValueError(f"`step` must be a number in (0, 1), got {self.step!r}")
        if self.scheme not in ("central", "forward"):
            raise ValueError(f"`scheme` must be 'central' or 'forward', got {self.scheme!r}")

    def bump(self, dtype: Any) -> float:
        """The relative bump for a state of ``dtype`` (``step``, or its default)."""
        if self.step is not None:
            return self.step
        if jnp.dtype(dtype) == jnp.float64:
            return 1e-6
        eps = float(jnp.finfo(dtype).eps)
        return eps ** (1 / 3) if self.scheme == "central" else eps ** 0.5

    def __call__(self, system: System, problem: Problem) -> SolveOutput:
        return _solve(problem, system, self)
