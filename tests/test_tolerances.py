"""Per-component absolute tolerances: ``atol`` as an array or a pytree like ``y0``.

The error test weighs component ``i`` by ``atol_i + rtol |y_i|``.  Checked here: equal
components give the scalar's bits on every path that builds its own tolerances (forward
sensitivities, stiff solvers' Newton test, the stiff quadrature state); a per-component
``atol`` is the scalar one on the rescaled state ``z_i = y_i a / atol_i`` (the same steps);
gradients are the replay's on the recorded grid; pytrees follow `ravel_pytree`'s order.
Bad inputs: `tests/test_validation.py::test_per_component_tolerances_are_checked`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import accepted_grid, max_rel_diff, replay

import jaxadjoint as ja

# A damped rotation in components of sizes 1, 1e-4 and 50: y = D x, x' = B x.
SIZES = jnp.array([1.0, 1.0e-4, 50.0])
B = jnp.array([[-0.5, 1.0, 0.0], [-1.0, -0.3, 0.5], [0.0, -0.5, -1.0]])
A = SIZES[:, None] * B / SIZES[None, :]
Y0 = SIZES * jnp.array([1.0, 0.5, -0.7])
ATOL = jnp.array([1e-8, 1e-12, 1e-6])
T1 = 3.0
SAVES = jnp.linspace(0.5, T1, 6)


def linear(t, y, args):
    del t
    return args @ y


def integrand(t, y, args):
    del t, args
    return jnp.sum(y[:2] ** 2)


@jax.jit
def dopri5_solve(y0, args, atol):
    return ja.solve(linear, y0, 0.0, T1, args, solver=ja.Dopri5(), rtol=1e-6, atol=atol,
                    saveat=SAVES, max_steps=512)


def test_equal_components_are_bitwise_the_scalar():
    scalar = dopri5_solve(Y0, A, jnp.asarray(1e-8))
    vector = dopri5_solve(Y0, A, jnp.full(3, 1e-8))
    np.testing.assert_array_equal(vector.ys, scalar.ys)
    np.testing.assert_array_equal(vector.steps, scalar.steps)


@pytest.mark.parametrize("sensitivity", [ja.DiscreteAdjoint(), ja.ForwardSensitivity()],
                         ids=["discrete", "forward-sensitivity"])
def test_per_component_atol_is_a_rescaling(sensitivity):
    """``z = y / s`` with ``s_i = atol_i / a`` at scalar ``a`` weighs its error exactly as
    ``y`` at ``atol``: the same steps, and the same solution to round-off.  With forward
    sensitivities (error-controlled) the rows of ``S = dy/dk`` must be weighed like their
    ``y_i`` (``k``, a rate, is not rescaled)."""
    a = 1e-8
    s = ATOL / a

    def rate(t, y, k):
        return k * linear(t, y, A)

    def scaled(t, z, k):
        return rate(t, s * z, k) / s

    jacobian = jax.jacfwd if isinstance(sensitivity, ja.ForwardSensitivity) else jax.jacrev

    def run(rhs, y0, atol):
        def solve(k):
            return ja.solve(rhs, y0, 0.0, T1, k, solver=ja.Dopri5(), rtol=1e-6, atol=atol,
                            saveat=SAVES, sensitivity=sensitivity)
        return solve(1.0), jacobian(lambda k: solve(k).ys)(1.0)

    sol_y, jac_y = run(rate, Y0, ATOL)
    sol_z, jac_z = run(scaled, Y0 / s, a)
    assert sol_y.stats["num_steps"] == sol_z.stats["num_steps"]
    assert sol_y.stats["num_accepted_steps"] == sol_z.stats["num_accepted_steps"]
    np.testing.assert_allclose(sol_y.ys, s * sol_z.ys, rtol=1e-11)
    np.testing.assert_allclose(jac_y, s * jac_z, rtol=1e-10)
    # And it is not the scalar's step sequence.
    assert int(dopri5_solve(Y0, A, jnp.asarray(1e-8)).stats["num_steps"]) != int(
        sol_y.stats["num_steps"])


def test_gradient_matches_replay():
    def loss(y0, args):
        return jnp.sum(jnp.sin(dopri5_solve(y0, args, ATOL).ys))

    grad = jax.grad(loss, argnums=(0, 1))(Y0, A)
    grid = accepted_grid(dopri5_solve(Y0, A, ATOL))

    def replay_loss(y0, args):
        return jnp.sum(jnp.sin(replay(linear, ja.Dopri5(), y0, args, grid, SAVES)[0]))

    expected = jax.grad(replay_loss, argnums=(0, 1))(Y0, A)
    assert max_rel_diff(grad, expected) < 1e-12


def test_pytree_atol_follows_ravel_order():
    def field(t, y, args):
        flat = linear(t, jnp.concatenate([y["a"], y["b"][None]]), args)
        return {"a": flat[:2], "b": flat[2]}

    y0 = {"a": Y0[:2], "b": Y0[2]}
    atol = {"a": ATOL[:2], "b": float(ATOL[2])}
    tree = ja.solve(field, y0, 0.0, T1, A, solver=ja.Dopri5(), rtol=1e-6, atol=atol,
                    saveat=SAVES, max_steps=512)
    flat = dopri5_solve(Y0, A, ATOL)
    np.testing.assert_array_equal(tree.steps, flat.steps)
    np.testing.assert_allclose(tree.ys["b"], flat.ys[:, 2], rtol=1e-14)
    # One tolerance for a whole leaf broadcasts over it.
    broadcast = ja.solve(field, y0, 0.0, T1, A, solver=ja.Dopri5(), rtol=1e-6,
                         atol={"a": 1e-10, "b": 1e-6}, saveat=SAVES, max_steps=512)
    expected = dopri5_solve(Y0, A, jnp.array([1e-10, 1e-10, 1e-6]))
    np.testing.assert_array_equal(broadcast.steps, expected.steps)


def test_stiff_paths_with_equal_components_are_the_scalar():
    """The stiff quadrature state and forward sensitivities build augmented tolerances, and
    Kvaerno5's Newton test uses them: with equal components, the scalar's bits.  (Rodas5
    takes the same quadrature-state path, without a Newton test.)"""
    solver = ja.Kvaerno5()

    @jax.jit
    def run(atol, args):
        def loss(args):
            sol = ja.solve(linear, Y0, 0.0, 1.0, args, solver=solver, rtol=1e-6, atol=atol,
                           integrand=integrand, sensitivity=ja.ForwardSensitivity())
            return sol.ys[-1, 0] + sol.integral
        return jax.value_and_grad(loss)(args)

    scalar = run(jnp.asarray(1e-9), A)
    vector = run(jnp.full(3, 1e-9), A)
    np.testing.assert_array_equal(vector[0], scalar[0])
    np.testing.assert_array_equal(vector[1], scalar[1])
    # Per-component: a different step sequence, the same derivative to the tolerance.
    value, grad = run(ATOL, A)
    np.testing.assert_allclose(value, scalar[0], rtol=1e-5)
    np.testing.assert_allclose(grad, scalar[1], rtol=1e-3, atol=1e-6 * np.abs(scalar[1]).max())


def test_continuous_adjoint_needs_its_own_atol():
    def loss(args, sensitivity):
        return ja.solve(linear, Y0, 0.0, 1.0, args, solver=ja.Dopri5(), rtol=1e-8, atol=ATOL,
                        sensitivity=sensitivity).ys[-1, 0]

    with pytest.raises(ValueError, match=r"per-component `atol`.*ContinuousAdjoint\(atol=\.\.\.\)"):
        jax.grad(loss)(A, ja.ContinuousAdjoint())
    grad = jax.grad(loss)(A, ja.ContinuousAdjoint(atol=1e-12))
    expected = jax.grad(loss)(A, ja.DiscreteAdjoint())
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7 * np.abs(expected).max())


def test_vmap_over_per_component_tolerances():
    atols = jnp.stack([ATOL, ATOL * 100.0])
    batched = jax.vmap(lambda atol: dopri5_solve(Y0, A, atol))(atols)
    for lane, atol in enumerate(atols):
        single = dopri5_solve(Y0, A, atol)
        assert int(batched.stats["num_steps"][lane]) == int(single.stats["num_steps"])
        np.testing.assert_allclose(batched.ys[lane], single.ys, rtol=1e-13)


def test_check_gradient_takes_per_component_atol():
    def field(t, y, p):
        return p[0] * linear(t, y, A) - p[1] * y

    def loss(p, **options):
        return jnp.sum(ja.solve(field, Y0, 0.0, 1.0, p, solver=ja.Dopri5(), **options).ys[-1])

    check = ja.check_gradient(loss, jnp.array([1.0, 0.2]), rtol=1e-7, atol=ATOL)
    assert check.ok, str(check)
    assert "atol per component in [1.0e-12, 1.0e-06]" in str(check)
    np.testing.assert_array_equal(check.atol, ATOL)
    with pytest.raises(ValueError, match="atol >= 0"):
        ja.check_gradient(loss, jnp.array([1.0, 0.2]), atol=jnp.array([1e-8, -1.0, 1e-8]))
