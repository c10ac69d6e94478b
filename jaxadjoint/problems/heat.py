"""The two-dimensional heat equation of the paper (section 4.1), its semi-discretisation and
closed-form references.

The PDE on `Omega = [0, 1] x [0, 1]`, `t in (0, t_f)`, with homogeneous Dirichlet boundary
conditions (eq. 54; the paper prints `alpha grad u`, the Laplacian is meant):

    du/dt = alpha (d^2u/dx^2 + d^2u/dy^2),    u = 0 on dOmega,    u(x, y, 0) = sin(pi x) sin(pi y).

Its solution is a single Fourier mode (eqs. 55–57 with `gamma_11 = 1`, all other `gamma_mn = 0`):

    u(x, y, t)        = sin(pi x) sin(pi y) exp(-2 pi^2 alpha t),
    du(x, y, t)/dalpha = -2 pi^2 t u(x, y, t).

Semi-discretisation (eq. 58): `N_p x N_p` grid points *including the boundary*,
`x_i = (i - 1) dx`, `y_j = (j - 1) dy`, `i, j = 1..N_p`, `dx = dy = 1 / (N_p - 1)`; the
5-point Laplacian at interior points and `du/dt = 0` at boundary points. The state here is the
2-D array `u[i, j] ~ u(x_i, y_j)` (the paper's flat index `k = i + N_p (j - 1)` is
`u.ravel(order="F")`). The grid initial condition is an eigenvector of the discrete Dirichlet
Laplacian with eigenvalue `lambda_h = -(8 / dx^2) sin^2(pi dx / 2)`, so the semi-discrete ODE
also has a closed-form solution,

    u_h(t) = exp(alpha lambda_h t) u_h(0),      du_h(t)/dalpha = lambda_h t u_h(t),

the exact reference for the *ODE* sensitivities (its difference from the PDE values is the
spatial discretisation error, `O(dx^2)`). Going one level further, an explicit Runge–Kutta
step of size `h` maps the eigenvector to `R(h alpha lambda_h)` times itself, where
`R(z) = 1 + z b^T (I - z a)^{-1} 1` is the method's stability polynomial; so the numerical
solution on any step grid, and its exact derivative with respect to `alpha`, are also
closed-form (`heat_rk_solution`, `heat_rk_sensitivity`): the reference a *discrete* adjoint
must match to round-off.

The paper's experiments (tables 1–3): `alpha = 1`, `t_f = 1e-2`, `N_p in {10, 30, 50}`,
constant steps with explicit Euler `dt = 5e-5` (table 1) and classic RK4 `dt = 5e-5`
(table 2) and `dt = 1e-5` (table 3), chosen from the stability condition
`dt < dx^2 / (4 alpha)` at the largest grid; the finite-difference bump is `d alpha = 1e-9`;
errors are relative infinity norms over the grid points against the PDE values (eq. 59).
With this discretisation the exact derivative of the Euler iteration, `N dt lambda_h
(1 + dt alpha lambda_h)^(N-1) y0`, reproduces the paper's table-1 sensitivity errors
(0.7260, 0.0104, 0.0615 % for `N_p = 10, 30, 50`) and `heat_semidiscrete_sensitivity`
reproduces its RK4 CFSA/ND columns (0.8135, 0.0785, 0.0275 %), as does the exact RK4
derivative `heat_rk_sensitivity` for both step sizes; the paper's RK4 "Adjoint" column
(0.7981, 0.0629, 0.0119 %) differs from it. The "Forward" columns (e.g. 0.8827 % for Euler at
`N_p = 10`, where the semi-discrete and Euler solutions are 0.20 % and 0.19 % off the PDE)
are not reproduced by any reading we tried.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from ._problem import ODEProblem

#: Grid sizes `N_p`, final time, diffusivity and time steps used in the paper's tables 1–3.
HEAT_PAPER_GRID_SIZES: tuple[int, ...] = (10, 30, 50)
HEAT_PAPER_FINAL_TIME: float = 1e-2
HEAT_PAPER_ALPHA: float = 1.0
HEAT_PAPER_STEPS: dict[str, tuple[float, ...]] = {"euler": (5e-5,), "rk4": (5e-5, 1e-5)}


def heat_rhs(t: ArrayLike, u: Array, args: Array) -> Array:
    """`alpha` times the 5-point Laplacian at interior points, zero on the boundary (eq. 58)."""
    del t
    alpha = args
    n = u.shape[0]
    inv_dx2 = (n - 1) ** 2
    interior = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    return jnp.pad(alpha * inv_dx2 * interior, 1)


def _check_points(n_points: int) -> None:
    if isinstance(n_points, bool) or not isinstance(n_points, int | np.integer) or n_points < 3:
        raise ValueError(f"`n_points` must be an integer >= 3, got {n_points!r}.")


def heat_grid(n_points: int) -> tuple[np.ndarray, np.ndarray]:
    """The grid coordinates `(x, y)`, each of shape `(n_points, n_points)`, `x[i, j] = x_i`."""
    _check_points(n_points)
    s = np.linspace(0.0, 1.0, n_points)
    x, y = np.meshgrid(s, s, indexing="ij")
    return x, y


def heat_problem(
    n_points: int = 10, alpha: float = HEAT_PAPER_ALPHA, t1: float = HEAT_PAPER_FINAL_TIME
) -> ODEProblem:
    """The semi-discrete heat equation on an `n_points x n_points` grid (paper eq. 58).

    `y0[i, j] = sin(pi x_i) sin(pi y_j)` with the boundary rows and columns set to exactly 0
    (the paper evaluates `u^0` there, which is 0 up to round-off, ~1e-16). `args = alpha`.

    **Returns:** an `ODEProblem` on `[0, t1]` with `y0` of shape `(n_points, n_points)`.
    """
    x, y = heat_grid(n_points)
    u0 = np.sin(np.pi * x) * np.sin(np.pi * y)
    u0[[0, -1], :] = 0.0
    u0[:, [0, -1]] = 0.0
    return ODEProblem(
        f"heat-{n_points}", heat_rhs, jnp.asarray(u0), jnp.asarray(float(alpha)), 0.0, float(t1)
    )


@jax.jit
def heat_exact_solution(
    x: ArrayLike, y: ArrayLike, t: ArrayLike, alpha: ArrayLike = HEAT_PAPER_ALPHA
) -> Array:
    """The PDE solution `u(x, y, t) = sin(pi x) sin(pi y) exp(-2 pi^2 alpha t)`."""
    return jnp.sin(jnp.pi * x) * jnp.sin(jnp.pi * y) * jnp.exp(-2 * jnp.pi**2 * alpha * t)


@jax.jit
def heat_exact_sensitivity(
    x: ArrayLike, y: ArrayLike, t: ArrayLike, alpha: ArrayLike = HEAT_PAPER_ALPHA
) -> Array:
    """The PDE sensitivity `du(x, y, t)/dalpha = -2 pi^2 t u(x, y, t)` (paper eq. 57)."""
    return -2 * jnp.pi**2 * t * heat_exact_solution(x, y, t, alpha)


def heat_semidiscrete_eigenvalue(n_points: int) -> float:
    """`lambda_h = -(8 / dx^2) sin^2(pi dx / 2)`, the discrete-Laplacian eigenvalue of `y0`."""
    _check_points(n_points)
    dx = 1.0 / (n_points - 1)
    return -8.0 / dx**2 * np.sin(np.pi * dx / 2) ** 2


def heat_semidiscrete_solution(
    n_points: int, t: ArrayLike, alpha: ArrayLike = HEAT_PAPER_ALPHA
) -> Array:
    """The exact solution of the semi-discrete ODE, `exp(alpha lambda_h t) y0`, on the grid."""
    u0 = heat_problem(n_points).y0
    return jnp.exp(alpha * heat_semidiscrete_eigenvalue(n_points) * t) * u0


def heat_semidiscrete_sensitivity(
    n_points: int, t: ArrayLike, alpha: ArrayLike = HEAT_PAPER_ALPHA
) -> Array:
    """`d u_h(t)/dalpha = lambda_h t u_h(t)`, the exact parameter sensitivity of the ODE."""
    lam = heat_semidiscrete_eigenvalue(n_points)
    return lam * t * heat_semidiscrete_solution(n_points, t, alpha)


def _stability_coefficients(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Coefficients of `R(z) = 1 + sum_k (b^T a^k 1) z^(k+1)`, highest power first."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or b.shape != (a.shape[0],):
        raise ValueError("`a` must be an (s, s) Butcher matrix and `b` its (s,) weights.")
    if np.any(np.triu(a) != 0):
        raise ValueError("`a` must be strictly lower triangular (an explicit method).")
    coefficients = [1.0]
    power = np.ones(a.shape[0])
    for _ in range(a.shape[0]):
        coefficients.append(b @ power)
        power = a @ power
    return np.array(coefficients[::-1])


@jax.jit
def _amplification(coefficients: Array, z: Array, dz: Array) -> tuple[Array, Array]:
    """`prod_n R(z_n)` and its derivative along `dz`, by the product rule step by step."""
    derivative_coefficients = coefficients[:-1] * jnp.arange(
        coefficients.shape[0] - 1, 0, -1, dtype=coefficients.dtype
    )
    r = jnp.polyval(coefficients, z)
    dr = jnp.polyval(derivative_coefficients, z) * dz

    def multiply(carry, factor):
        (p, dp), (r_n, dr_n) = carry, factor
        return (p * r_n, dp * r_n + p * dr_n), None

    one = jnp.ones((), dtype=r.dtype)
    (p, dp), _ = jax.lax.scan(multiply, (one, jnp.zeros_like(one)), (r, dr))
    return p, dp


def heat_rk_solution(
    n_points: int, a: ArrayLike, b: ArrayLike, steps: ArrayLike, alpha: ArrayLike = HEAT_PAPER_ALPHA
) -> Array:
    """The explicit Runge–Kutta solution of the semi-discrete system, in closed form.

    `u_N = prod_n R(h_n alpha lambda_h) y0`, with `R` the stability polynomial of the tableau
    `(a, b)` and `h_n` the step sizes actually taken (`steps`, a 1-D array; constant steps
    `dt` to `t_f` are `jnp.full(round(t_f / dt), dt)`; for a recorded grid padded with `inf`,
    pass only the finite entries). Exact because `y0` is an eigenvector.
    """
    coefficients = jnp.asarray(_stability_coefficients(a, b))
    dz = jnp.asarray(steps) * heat_semidiscrete_eigenvalue(n_points)
    amplification, _ = _amplification(coefficients, alpha * dz, dz)
    return amplification * heat_problem(n_points).y0


def heat_rk_sensitivity(
    n_points: int, a: ArrayLike, b: ArrayLike, steps: ArrayLike, alpha: ArrayLike = HEAT_PAPER_ALPHA
) -> Array:
    """The exact `d u_N / d alpha` of `heat_rk_solution` on the given (fixed) step grid.

    `d u_N / d alpha = sum_n h_n lambda_h R'(z_n) / R(z_n) * u_N`, `z_n = h_n alpha lambda_h`
    (evaluated with the product rule one step at a time, which avoids the division).
    """
    coefficients = jnp.asarray(_stability_coefficients(a, b))
    dz = jnp.asarray(steps) * heat_semidiscrete_eigenvalue(n_points)
    _, derivative = _amplification(coefficients, alpha * dz, dz)
    return derivative * heat_problem(n_points).y0
