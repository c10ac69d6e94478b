"""Jacobian reuse in the stiff solvers (``reuse_jacobian``).

* ``"rejections"`` keeps ``J(t_n, y_n)`` for the retry of a rejected step: on Van der
  Pol (mu = 1e3, a problem with many rejections) the solution, the step grid and the
  counts are bit for bit those of ``"never"`` (the default), with one Jacobian per
  accepted step instead of one per attempt; for Rosenbrock (Rodas5) and ESDIRK
  (Kvaerno5) methods.  (Bit for bit holds here; in general the two programs may round
  differently where XLA contracts ``I - gamma h J`` into multiply-adds, which it can do
  only when ``J`` is computed inside the step: measured on Robertson, 2e-16.)
* Under `jax.vmap` every lane reports its own count and its own solution.
* A value the family does not know is a `ValueError` naming the argument.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxadjoint as ja
from jaxadjoint.problems import van_der_pol_initial_state, van_der_pol_rhs

MU = 1e3
T1 = 1.0  # holds the relaxation jump, where steps are rejected


@eqx.filter_jit
def _forward(solver, mu):
    y0 = jnp.asarray(van_der_pol_initial_state(MU))
    sol = ja.solve(van_der_pol_rhs, y0, 0.0, T1, mu, solver=solver, rtol=1e-5, atol=1e-5,
                   saveat=jnp.linspace(0.1, T1, 4), max_steps=1024)
    return sol.ys, sol.steps, sol.stats


@pytest.mark.parametrize("family", [ja.Rodas5, ja.Kvaerno5])
def test_reuse_after_rejection_is_bitwise(family) -> None:
    mu = jnp.asarray(MU)
    ys_never, steps_never, stats_never = _forward(family(reuse_jacobian="never"), mu)
    ys, steps, stats = _forward(family(reuse_jacobian="rejections"), mu)
    assert int(stats["num_rejected_steps"]) >= 5, stats  # the test needs rejections
    assert np.array_equal(np.asarray(ys), np.asarray(ys_never))
    assert np.array_equal(np.asarray(steps), np.asarray(steps_never))
    for key in ("num_steps", "num_accepted_steps", "num_rhs_evals"):
        assert int(stats[key]) == int(stats_never[key]), key
    assert int(stats_never["num_jacobians"]) == int(stats_never["num_steps"])
    # One Jacobian per distinct start point: per accepted step.
    assert int(stats["num_jacobians"]) == int(stats["num_accepted_steps"])


def test_reuse_under_vmap_counts_per_lane() -> None:
    mus = jnp.asarray([MU, 0.5 * MU])
    solver = ja.Rodas5(reuse_jacobian="rejections")
    ys, _, stats = jax.vmap(_forward, in_axes=(None, 0))(solver, mus)
    for lane, mu in enumerate(mus):
        ys_one, _, stats_one = _forward(solver, mu)
        assert int(stats["num_jacobians"][lane]) == int(stats_one["num_jacobians"])
        assert int(stats["num_jacobians"][lane]) == int(stats["num_accepted_steps"][lane])
        np.testing.assert_allclose(ys[lane], ys_one, rtol=1e-12, atol=1e-12)


def test_reuse_option_is_validated() -> None:
    with pytest.raises(ValueError, match="reuse_jacobian"):
        ja.Rodas5(reuse_jacobian="always")
    with pytest.raises(ValueError, match="reuse_jacobian"):
        ja.Kvaerno5(reuse_jacobian=True)


@eqx.filter_jit
def _forward_sensitivity_grad(solver, mu):
    def loss(mu):
        y0 = jnp.asarray(van_der_pol_initial_state(MU))
        sol = ja.solve(van_der_pol_rhs, y0, 0.0, 0.9, mu, solver=solver, rtol=1e-5,
                       atol=1e-5, sensitivity=ja.ForwardSensitivity(), max_steps=1024)
        return sol.ys[-1, 0]

    return jax.grad(loss)(mu)


def test_reuse_with_block_factorisation() -> None:
    """`ForwardSensitivity` solves its augmented system with the block-triangular solver
    (`_block_solve`), whose kept Jacobian is the user's block: the same gradient."""
    mu = jnp.asarray(MU)
    never = _forward_sensitivity_grad(ja.Rodas5(), mu)
    kept = _forward_sensitivity_grad(ja.Rodas5(reuse_jacobian="rejections"), mu)
    assert np.isfinite(never) and never != 0
    np.testing.assert_allclose(kept, never, rtol=1e-12)
