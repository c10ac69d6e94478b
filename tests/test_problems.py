"""Reference problems: right-hand sides, closed-form solutions and sensitivities, GLV recipe."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from scipy.integrate import solve_ivp

import jaxadjoint.problems as jp

jax.config.update("jax_enable_x64", True)


_JITTED = {}


def _jitted(rhs):
    """One compiled right-hand side per function, so repeated SciPy solves do not recompile."""
    if rhs not in _JITTED:
        _JITTED[rhs] = jax.jit(rhs)
    return _JITTED[rhs]


def _solve(problem, t_eval=None, args=None, rtol=1e-12, atol=1e-12, method="DOP853"):
    """Integrate a (flat-array state) problem with SciPy; returns the `solve_ivp` result."""
    args = problem.args if args is None else args
    shape = np.shape(problem.y0)
    rhs = _jitted(problem.rhs)

    def f(t, y):
        return np.asarray(rhs(t, jnp.asarray(y.reshape(shape)), args)).reshape(-1)

    y0 = np.asarray(problem.y0, dtype=np.float64).reshape(-1)
    sol = solve_ivp(
        f, (problem.t0, problem.t1), y0, t_eval=t_eval, rtol=rtol, atol=atol, method=method
    )
    assert sol.success, sol.message
    return sol


def _final(problem, **kwargs):
    return _solve(problem, **kwargs).y[:, -1].reshape(np.shape(problem.y0))


ALL_PROBLEMS = {
    "glv": lambda: jp.glv_problem(5),
    "glv_paper": lambda: jp.glv_paper_problem(5),
    "lotka_volterra": jp.lotka_volterra_problem,
    "van_der_pol": jp.van_der_pol_problem,
    "van_der_pol_paper": jp.van_der_pol_paper_problem,
    "brusselator": lambda: jp.brusselator_problem(8),
    "brusselator_stiff": jp.brusselator_stiff_problem,
    "van_der_pol_stiff": jp.van_der_pol_stiff_problem,
    "heat": lambda: jp.heat_problem(6),
    "exponential_decay": jp.exponential_decay_problem,
    "linear_system": jp.linear_system_problem,
    "periodic_growth": jp.periodic_growth_problem,
}


# ---------------------------------------------------------------------------------------------
# Container and common properties
# ---------------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=0)
def _evaluate(rhs, y0, args):
    """The field and its Jacobians in `args` (forward mode) and in `y` (reverse mode)."""
    t = jnp.asarray(0.3)
    dy = rhs(t, y0, args)
    jac_args = jax.jacfwd(rhs, argnums=2)(t, y0, args)
    jac_y = jax.jacrev(rhs, argnums=1)(t, y0, args)
    return dy, jac_args, jac_y


@pytest.mark.parametrize("make", ALL_PROBLEMS.values(), ids=ALL_PROBLEMS.keys())
def test_shapes_dtypes_and_transforms(make):
    problem = make()
    assert isinstance(problem, jp.ODEProblem)
    assert isinstance(problem.name, str) and problem.name
    assert isinstance(problem.t0, float) and isinstance(problem.t1, float)
    assert problem.t1 > problem.t0
    for leaf in jax.tree_util.tree_leaves((problem.y0, problem.args)):
        assert isinstance(leaf, jax.Array)
        assert leaf.dtype == jnp.float64
    dy, jac_args, jac_y = _evaluate(problem.rhs, problem.y0, problem.args)
    assert dy.shape == problem.y0.shape and dy.dtype == problem.y0.dtype
    for leaf in jax.tree_util.tree_leaves((dy, jac_args, jac_y)):
        assert bool(jnp.all(jnp.isfinite(leaf)))


def test_problem_is_frozen_and_jittable():
    problem = jp.exponential_decay_problem()
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.t1 = 3.0

    @jax.jit
    def euler(problem):
        return problem.y0 + problem.t1 * problem.rhs(problem.t0, problem.y0, problem.args)

    expected = problem.y0 * (1 - problem.t1 * problem.args)
    np.testing.assert_allclose(euler(problem), expected, rtol=1e-15)


@pytest.mark.parametrize(
    "call",
    [
        lambda: jp.glv_problem(0),
        lambda: jp.glv_paper_problem(2.5),
        lambda: jp.brusselator_problem(0),
        lambda: jp.heat_problem(2),
        lambda: jp.van_der_pol_problem(mu=-1.0),
        lambda: jp.van_der_pol_stiff_problem(mu=0.0),
        lambda: jp.van_der_pol_stiff_problem(t1=-1.0),
        lambda: jp.brusselator_stiff_problem(0),
    ],
)
def test_invalid_sizes_raise(call):
    with pytest.raises(ValueError, match="must be"):
        call()


# ---------------------------------------------------------------------------------------------
# Linear problems: exact solution vs SciPy, exact sensitivities vs finite differences
# ---------------------------------------------------------------------------------------------


def test_exponential_decay():
    p = jp.exponential_decay_problem()
    k, y0, t1 = float(p.args), np.asarray(p.y0), p.t1
    solution = jax.jit(jp.exponential_decay_solution)
    exact = solution(t1, y0, k)
    np.testing.assert_allclose(_final(p), exact, rtol=1e-10)
    dy_dy0, dy_dk = jax.jit(jp.exponential_decay_sensitivity)(t1, y0, k)
    eps = 1e-6
    fd_k = (solution(t1, y0, k + eps) - solution(t1, y0, k - eps)) / (2 * eps)
    np.testing.assert_allclose(dy_dk, fd_k, rtol=1e-8)
    eye = np.eye(len(y0))
    fd_y0 = np.stack(
        [(solution(t1, y0 + eps * e, k) - solution(t1, y0 - eps * e, k)) / (2 * eps) for e in eye]
    )
    np.testing.assert_allclose(np.diag(dy_dy0), fd_y0, rtol=1e-8, atol=1e-12)
    # Chain rule through a parameter that sets both y0 = p^2 and k = p, as in the docstring.
    prm = 1.3

    def through_p(prm):
        return jp.exponential_decay_solution(t1, prm**2, prm)

    expected = 2 * prm * np.exp(-prm * t1) - t1 * prm**2 * np.exp(-prm * t1)
    np.testing.assert_allclose(jax.jit(jax.grad(through_p))(prm), expected, rtol=1e-13)


def test_linear_system():
    p = jp.linear_system_problem()
    M, y0, t1 = np.asarray(p.args), np.asarray(p.y0), p.t1
    solution = jax.jit(jp.linear_system_solution)
    np.testing.assert_allclose(solution(t1, y0, M), scipy.linalg.expm(M * t1) @ y0, rtol=1e-12)
    np.testing.assert_allclose(_final(p), solution(t1, y0, M), rtol=1e-10)
    dy_dy0, dy_dM = jax.jit(jp.linear_system_sensitivity)(t1, y0, M)
    assert dy_dy0.shape == (3, 3) and dy_dM.shape == (3, 3, 3)
    np.testing.assert_allclose(dy_dy0, scipy.linalg.expm(M * t1), rtol=1e-12)
    eps = 1e-6
    for j in range(3):
        for k in range(3):
            E = np.zeros((3, 3))
            E[j, k] = 1.0
            fd = (solution(t1, y0, M + eps * E) - solution(t1, y0, M - eps * E)) / (2 * eps)
            np.testing.assert_allclose(dy_dM[:, j, k], fd, rtol=1e-7, atol=1e-9)
            frechet = scipy.linalg.expm_frechet(M * t1, E * t1, compute_expm=False) @ y0
            np.testing.assert_allclose(dy_dM[:, j, k], frechet, rtol=1e-11, atol=1e-13)


def test_periodic_growth():
    p = jp.periodic_growth_problem()
    a, y0, t1 = float(p.args), float(p.y0), p.t1
    ts = np.linspace(p.t0, t1, 9)
    solution = jax.jit(jp.periodic_growth_solution)
    sol = _solve(p, t_eval=ts)
    np.testing.assert_allclose(sol.y[0], solution(ts, y0, a), rtol=1e-10)
    dy_dy0, dy_da = jax.jit(jp.periodic_growth_sensitivity)(ts, y0, a)
    eps = 1e-6
    fd_a = (solution(ts, y0, a + eps) - solution(ts, y0, a - eps)) / (2 * eps)
    fd_y0 = (solution(ts, y0 + eps, a) - solution(ts, y0 - eps, a)) / (2 * eps)
    np.testing.assert_allclose(dy_da, fd_a, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(dy_dy0, fd_y0, rtol=1e-8)
    # ... and against finite differences of SciPy solves (checks the rhs's `a` dependence).
    fd_solve = (
        _final(p, args=jnp.asarray(a + 1e-4)) - _final(p, args=jnp.asarray(a - 1e-4))
    ) / 2e-4
    np.testing.assert_allclose(fd_solve, dy_da[-1], rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Heat equation (paper section 4.1)
# ---------------------------------------------------------------------------------------------


def _paper_heat_matrix(n_points: int, alpha: float) -> np.ndarray:
    """Eq. 58 literally, on the paper's flat index k = i + N_p (j - 1) (0-based here)."""
    dx2 = (1.0 / (n_points - 1)) ** 2
    size = n_points**2
    L = np.zeros((size, size))
    for j in range(n_points):
        for i in range(n_points):
            k = i + n_points * j
            if 0 < i < n_points - 1 and 0 < j < n_points - 1:
                L[k, [k - 1, k + 1, k - n_points, k + n_points]] = alpha / dx2
                L[k, k] = -4 * alpha / dx2
    return L


def test_heat_rhs_matches_paper_system():
    n = 7
    u = np.random.default_rng(0).standard_normal((n, n))
    alpha = 0.8
    dense = _paper_heat_matrix(n, alpha) @ u.ravel(order="F")
    rhs = _jitted(jp.heat_rhs)(0.0, jnp.asarray(u), jnp.asarray(alpha))
    np.testing.assert_allclose(np.asarray(rhs).ravel(order="F"), dense, rtol=1e-12, atol=1e-10)
    assert np.all(np.asarray(rhs)[[0, -1], :] == 0) and np.all(np.asarray(rhs)[:, [0, -1]] == 0)


def test_heat_initial_state_and_grid():
    n = 10
    p = jp.heat_problem(n)
    x, y = jp.heat_grid(n)
    assert p.y0.shape == (n, n) and x.shape == (n, n)
    np.testing.assert_allclose(x[:, 0], np.arange(n) / (n - 1), rtol=1e-15)
    np.testing.assert_allclose(p.y0, np.sin(np.pi * x) * np.sin(np.pi * y), atol=1e-15)
    assert p.t1 == jp.HEAT_PAPER_FINAL_TIME == 1e-2 and float(p.args) == 1.0
    # The grid initial condition is an eigenvector of the semi-discrete operator.
    lam = jp.heat_semidiscrete_eigenvalue(n)
    np.testing.assert_allclose(_jitted(p.rhs)(0.0, p.y0, p.args), lam * p.y0, atol=1e-12)


@pytest.mark.parametrize("n_points", [6, 10])
def test_heat_semidiscrete_exact_vs_scipy(n_points):
    alpha = 0.9
    p = jp.heat_problem(n_points, alpha=alpha)
    t1 = p.t1
    exact = jp.heat_semidiscrete_solution(n_points, t1, alpha)
    np.testing.assert_allclose(_final(p), exact, rtol=1e-10, atol=1e-13)
    sens = jp.heat_semidiscrete_sensitivity(n_points, t1, alpha)
    eps = 1e-6
    fd = (
        jp.heat_semidiscrete_solution(n_points, t1, alpha + eps)
        - jp.heat_semidiscrete_solution(n_points, t1, alpha - eps)
    ) / (2 * eps)
    np.testing.assert_allclose(sens, fd, rtol=1e-8, atol=1e-12)
    # Finite differences of SciPy solves of the ODE itself.
    da = 1e-4
    fd_solve = (
        _final(p, args=jnp.asarray(alpha + da)) - _final(p, args=jnp.asarray(alpha - da))
    ) / (2 * da)
    np.testing.assert_allclose(fd_solve, sens, rtol=1e-6, atol=1e-8)


def test_heat_exact_pde_sensitivity_and_discretisation_error():
    x, y = jp.heat_grid(10)
    t, alpha, eps = 1e-2, 1.0, 1e-6
    solution = jp.heat_exact_solution
    fd = (solution(x, y, t, alpha + eps) - solution(x, y, t, alpha - eps)) / (2 * eps)
    np.testing.assert_allclose(jp.heat_exact_sensitivity(x, y, t, alpha), fd, rtol=1e-8, atol=1e-12)
    # The semi-discrete solution converges to the PDE solution at second order in dx.
    errors = []
    for n in (11, 21):
        xg, yg = jp.heat_grid(n)
        err = np.max(np.abs(jp.heat_semidiscrete_solution(n, t) - solution(xg, yg, t)))
        errors.append(err)
    assert 3.8 < errors[0] / errors[1] < 4.2


EULER = (np.zeros((1, 1)), np.ones(1))
RK4 = (
    np.array([[0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 1, 0]], dtype=float),
    np.array([1, 2, 2, 1]) / 6,
)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _erk_steps(rhs, tableau, y0, args, steps):
    """A plain explicit Runge–Kutta loop over the given steps (autonomous `rhs`)."""
    a, b = (np.asarray(x) for x in tableau)

    def step(y, h):
        ks = []
        for m in range(len(b)):
            stage = y + h * sum(a[m, j] * ks[j] for j in range(m)) if m else y
            ks.append(rhs(0.0, stage, args))
        return y + h * sum(b[m] * ks[m] for m in range(len(b))), None

    return jax.lax.scan(step, y0, steps)[0]


def test_heat_rk_closed_form_matches_the_steps():
    n, alpha = 6, 0.9
    p = jp.heat_problem(n, alpha=alpha)
    steps = jnp.asarray(np.random.default_rng(3).uniform(1e-4, 5e-4, 40))
    for tableau in (EULER, RK4):
        tab = (tuple(map(tuple, tableau[0])), tuple(tableau[1]))
        looped = _erk_steps(jp.heat_rhs, tab, p.y0, p.args, steps)
        closed = jp.heat_rk_solution(n, *tableau, steps, alpha)
        np.testing.assert_allclose(closed, looped, rtol=1e-13, atol=1e-15)
        # Exact derivative of the computation performed (autodiff through the loop).
        _, looped_sens = jax.jvp(
            lambda al: _erk_steps(jp.heat_rhs, tab, p.y0, al, steps),
            (p.args,),
            (jnp.ones_like(p.args),),
        )
        sens = jp.heat_rk_sensitivity(n, *tableau, steps, alpha)
        np.testing.assert_allclose(sens, looped_sens, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="strictly lower triangular"):
        jp.heat_rk_solution(n, np.ones((2, 2)), np.ones(2) / 2, steps)


def _rel_percent(numerical, exact):
    return 100 * np.max(np.abs(numerical - exact)) / np.max(np.abs(exact))


def test_heat_reproduces_paper_tables():
    """Exact derivatives on this discretisation give the paper's tables 1–2 errors (x 1e-1 %)."""
    t_f = jp.HEAT_PAPER_FINAL_TIME
    (dt_euler,) = jp.HEAT_PAPER_STEPS["euler"]
    table1_adjoint = {10: 7.260, 30: 0.104, 50: 0.615}
    table2_cfsa = {10: 8.135, 30: 0.785, 50: 0.275}
    for n in jp.HEAT_PAPER_GRID_SIZES:
        x, y = jp.heat_grid(n)
        exact = np.asarray(jp.heat_exact_sensitivity(x, y, t_f))
        u0 = np.asarray(jp.heat_problem(n).y0)
        lam = jp.heat_semidiscrete_eigenvalue(n)
        steps = round(t_f / dt_euler)
        # d/dalpha of u_N = (1 + dt alpha lam)^N u0 at alpha = 1.
        euler = steps * dt_euler * lam * (1 + dt_euler * lam) ** (steps - 1) * u0
        assert round(10 * _rel_percent(euler, exact), 3) == table1_adjoint[n]
        euler_closed = jp.heat_rk_sensitivity(n, *EULER, np.full(steps, dt_euler))
        np.testing.assert_allclose(euler_closed, euler, rtol=1e-12, atol=1e-15)
        semi = np.asarray(jp.heat_semidiscrete_sensitivity(n, t_f))
        assert round(10 * _rel_percent(semi, exact), 3) == table2_cfsa[n]
        for dt in jp.HEAT_PAPER_STEPS["rk4"]:
            rk4 = jp.heat_rk_sensitivity(n, *RK4, np.full(round(t_f / dt), dt))
            assert round(10 * _rel_percent(rk4, exact), 3) == table2_cfsa[n]


# ---------------------------------------------------------------------------------------------
# Generalised Lotka–Volterra
# ---------------------------------------------------------------------------------------------


def test_glv_is_deterministic():
    a, b, c = jp.glv_problem(6, seed=3), jp.glv_problem(6, seed=3), jp.glv_problem(6, seed=4)
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(u, v)
    assert not np.allclose(a.args[1], c.args[1])
    r, A = a.args
    assert r.shape == (6,) and A.shape == (6, 6) and a.y0.shape == (6,)
    assert (a.t0, a.t1) == (0.0, 10.0)


@pytest.mark.parametrize("n, seed", [(1, 0), (2, 1), (10, 1), (40, 0)])
def test_glv_equilibrium_feasible_and_stable(n, seed):
    p = jp.glv_problem(n, seed=seed)
    r, A = (np.asarray(a) for a in p.args)
    x_star = np.asarray(jp.glv_equilibrium(p.args))
    np.testing.assert_allclose(x_star, -np.linalg.solve(A, r), rtol=1e-12)
    assert np.all((x_star >= 0.5) & (x_star <= 1.5))
    np.testing.assert_allclose(x_star * (r + A @ x_star), 0.0, atol=1e-12)
    assert np.linalg.eigvalsh(A + A.T).max() < 0
    # The Jacobian at the equilibrium is diag(x*) A (checked against autodiff in
    # test_glv_rhs_formula); all its eigenvalues are in the open left half plane.
    assert np.linalg.eigvals(np.diag(x_star) @ A).real.max() < 0
    assert np.all((np.asarray(p.y0) >= 0.05) & (np.asarray(p.y0) <= 0.5))


@pytest.mark.parametrize("n", [2, 10, 30])
def test_glv_has_transients(n):
    p = jp.glv_problem(n)
    x_star = np.asarray(jp.glv_equilibrium(p.args))
    ts = np.linspace(p.t0, p.t1, 501)
    xs = _solve(p, t_eval=ts, rtol=1e-10, atol=1e-12).y
    assert np.all(xs > 0)
    dist = np.linalg.norm(xs - x_star[:, None], axis=0) / np.linalg.norm(x_star)
    assert dist[np.searchsorted(ts, 1.0)] > 0.3  # far from x* at t = 1 ...
    assert dist[-1] < 0.05  # ... and settled by t = 10
    d = np.diff(xs, axis=1)
    non_monotone = np.sum((d.max(axis=1) > 1e-8) & (d.min(axis=1) < -1e-8))
    if n >= 10:
        assert non_monotone >= n // 3


def test_glv_paper_problem():
    n = 10
    p, q = jp.glv_paper_problem(n, seed=2), jp.glv_problem(n, seed=2)
    np.testing.assert_array_equal(p.args[1], q.args[1])
    np.testing.assert_array_equal(p.args[0], 0.1)
    np.testing.assert_array_equal(p.y0, 0.1)
    assert (p.t0, p.t1) == (0.0, 10.0)
    # The paper's setting moves slowly: nothing changes by more than a few times x(0) over [0, 10].
    final = _final(p, rtol=1e-10, atol=1e-12)
    assert np.max(np.abs(final - 0.1)) < 0.3


def test_glv_rhs_formula():
    p = jp.glv_problem(4, seed=5)
    x = np.random.default_rng(1).uniform(0.1, 1.0, 4)
    r, A = (np.asarray(a) for a in p.args)
    expected = [x[i] * (r[i] + sum(A[i, j] * x[j] for j in range(4))) for i in range(4)]
    np.testing.assert_allclose(_jitted(p.rhs)(0.0, jnp.asarray(x), p.args), expected, rtol=1e-13)
    x_star = jp.glv_equilibrium(p.args)
    jac = jax.jit(jax.jacfwd(jp.glv_rhs, argnums=1))(0.0, x_star, p.args)
    np.testing.assert_allclose(jac, np.diag(x_star) @ A, rtol=1e-12, atol=1e-14)


def test_lotka_volterra_conserves_first_integral():
    p = jp.lotka_volterra_problem()
    alpha, beta, gamma, delta = np.asarray(p.args)

    def invariant(prey, predator):
        return delta * prey - gamma * np.log(prey) + beta * predator - alpha * np.log(predator)

    sol = _solve(p, t_eval=np.linspace(p.t0, p.t1, 50), rtol=1e-11, atol=1e-12)
    values = invariant(*sol.y)
    np.testing.assert_allclose(values, values[0], rtol=1e-9)
    assert sol.y[0].max() > 2 * sol.y[0].min()  # a genuine oscillation
    dy = _jitted(p.rhs)(0.0, jnp.array([2.0, 0.5]), p.args)
    np.testing.assert_allclose(dy, [alpha * 2 - beta * 1.0, delta * 1.0 - gamma * 0.5])


# ---------------------------------------------------------------------------------------------
# Van der Pol and Brusselator
# ---------------------------------------------------------------------------------------------


def test_van_der_pol():
    p = jp.van_der_pol_paper_problem()
    mu = 1e3
    assert float(p.args) == mu and (p.t0, p.t1) == (0.0, 0.5)
    v0 = -2 / 3 + 10 / (81 * mu) - 292 / (2187 * mu**2)
    np.testing.assert_allclose(p.y0, [2.0, v0], rtol=1e-15)
    # On the slow manifold: v' is O(1), not O(mu).
    dy = _jitted(p.rhs)(0.0, p.y0, p.args)
    np.testing.assert_allclose(dy[0], v0)
    assert abs(float(dy[1])) < 1.0
    np.testing.assert_allclose(
        _jitted(jp.van_der_pol_rhs)(0.0, jnp.array([0.5, 1.0]), jnp.asarray(10.0)), [1.0, 2.5]
    )
    q = jp.van_der_pol_problem()
    assert float(q.args) == 10.0 and (q.t0, q.t1) == (0.0, 5.0)
    sol = _solve(q, rtol=1e-6, atol=1e-6, method="RK45")
    assert sol.nfev < 2000  # comfortably explicit
    x = _solve(q, t_eval=np.linspace(0, 5, 201), rtol=1e-9, atol=1e-9).y[0]
    assert np.sum(np.diff(np.sign(x)) != 0) >= 2  # relaxation oscillation, not decay


def _brusselator_loops(y, a, b, alpha):
    u, v = y
    n = len(u)
    c = alpha * (n + 1) ** 2
    ue, ve = np.concatenate([[1.0], u, [1.0]]), np.concatenate([[3.0], v, [3.0]])
    du = [
        a + u[i] ** 2 * v[i] - (b + 1) * u[i] + c * (ue[i] - 2 * u[i] + ue[i + 2]) for i in range(n)
    ]
    dv = [b * u[i] - u[i] ** 2 * v[i] + c * (ve[i] - 2 * v[i] + ve[i + 2]) for i in range(n)]
    return np.array([du, dv])


def test_brusselator():
    n = 16
    p = jp.brusselator_problem(n)
    assert p.y0.shape == (2, n) and p.args.shape == (3,) and (p.t0, p.t1) == (0.0, 20.0)
    np.testing.assert_allclose(p.args, [1.0, 3.0, 1 / 50])
    x = np.arange(1, n + 1) / (n + 1)
    np.testing.assert_allclose(p.y0[0], 1 + np.sin(2 * np.pi * x), rtol=1e-15)
    np.testing.assert_allclose(p.y0[1], 3.0)
    y = np.random.default_rng(2).uniform(0.5, 3.0, (2, n))
    args = np.array([1.2, 2.5, 0.03])
    np.testing.assert_allclose(
        _jitted(p.rhs)(0.0, jnp.asarray(y), jnp.asarray(args)),
        _brusselator_loops(y, *args),
        rtol=1e-12,
    )
    # The homogeneous state (1, 3) is a steady state of the standard problem.
    steady = jnp.stack([jnp.ones(n), 3 * jnp.ones(n)])
    np.testing.assert_allclose(_jitted(p.rhs)(0.0, steady, p.args), 0.0, atol=1e-12)
    sol = _solve(p, rtol=1e-6, atol=1e-6, method="RK45")
    assert sol.nfev < 2000  # non-stiff enough for explicit RK
