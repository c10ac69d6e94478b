"""The one-dimensional Brusselator with diffusion (Hairer & Wanner, *Solving ODEs II*, IV.1).

On `x in [0, 1]` with `N` interior grid points `x_i = i / (N + 1)`, the method of lines gives

    u_i' = A + u_i^2 v_i - (B + 1) u_i + alpha (N + 1)^2 (u_{i-1} - 2 u_i + u_{i+1}),
    v_i' = B u_i - u_i^2 v_i           + alpha (N + 1)^2 (v_{i-1} - 2 v_i + v_{i+1}),

for `i = 1, ..., N`, with the Dirichlet boundary values `u_0 = u_{N+1} = 1`,
`v_0 = v_{N+1} = 3` and the initial state `u_i(0) = 1 + sin(2 pi x_i)`, `v_i(0) = 3`. The
standard problem has `A = 1`, `B = 3`, `alpha = 1/50`. The diffusion eigenvalues reach
`-4 alpha (N + 1)^2` (about -23 for `N = 16`, -87 for `N = 32`), so the problem stays
non-stiff enough for explicit Runge–Kutta methods at these sizes; at `N = 64` (about -340,
`brusselator_stiff_problem`) it is stiff.
"""

import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from ._problem import ODEProblem

# The boundary values are fixed constants of the standard problem (equal to the homogeneous
# steady state (A, B / A) only for the default parameters); they do not depend on `args`.
_U_BOUNDARY = 1.0
_V_BOUNDARY = 3.0


def brusselator_rhs(t: ArrayLike, y: Array, args: Array) -> Array:
    """The Brusselator field; `y = stack([u, v])` of shape `(2, N)`, `args = (A, B, alpha)`."""
    del t
    a, b, alpha = args
    u, v = y
    n = u.shape[0]
    boundary = jnp.array([_U_BOUNDARY, _V_BOUNDARY], dtype=y.dtype)[:, None]
    padded = jnp.concatenate([boundary, y, boundary], axis=1)
    laplacian = (padded[:, :-2] - 2 * y + padded[:, 2:]) * (n + 1) ** 2
    reaction = u**2 * v
    du = a + reaction - (b + 1) * u
    dv = b * u - reaction
    return jnp.stack([du, dv]) + alpha * laplacian


def brusselator_problem(n_grid: int = 16, t1: float = 20.0) -> ODEProblem:
    """The standard Brusselator (`A = 1`, `B = 3`, `alpha = 1/50`) on `N = n_grid` points.

    **Returns:** an `ODEProblem` with `y0` of shape `(2, n_grid)` (`u` then `v`) and `args =
    array([A, B, alpha])`. The solution settles onto a spatially modulated limit cycle
    (period about 7 in time), so `[0, 20]` covers about three oscillations. SciPy's RK45 at
    `rtol = atol = 1e-6` takes about 150 steps for `n_grid = 16` and about 530 for `n_grid = 32`
    (stability-bound there).
    """
    if isinstance(n_grid, bool) or not isinstance(n_grid, int | np.integer) or n_grid < 1:
        raise ValueError(f"`n_grid` must be a positive integer, got {n_grid!r}.")
    x = np.arange(1, n_grid + 1) / (n_grid + 1)
    y0 = np.stack([1.0 + np.sin(2 * np.pi * x), np.full(n_grid, 3.0)])
    args = np.array([1.0, 3.0, 1.0 / 50.0])
    return ODEProblem(
        f"brusselator-{n_grid}", brusselator_rhs, jnp.asarray(y0), jnp.asarray(args), 0.0, float(t1)
    )


def brusselator_stiff_problem(n_grid: int = 64, t1: float = 10.0) -> ODEProblem:
    """The standard Brusselator on a fine grid, stiff through diffusion: `2 x 64` unknowns.

    The same problem as `brusselator_problem`; with `N = 64` the diffusion eigenvalues reach
    `-4 alpha (N + 1)^2 ~ -340` while the reaction evolves on time scales of order one, so an
    explicit method's step is bounded by stability. On `[0, 10]` at `rtol = atol = 1e-6`
    Dopri5 takes about 1000 accepted steps and Rodas5 about 60 (each with a `128 x 128` LU).
    """
    problem = brusselator_problem(n_grid, t1)
    return ODEProblem(f"brusselator-stiff-{n_grid}", problem.rhs, problem.y0, problem.args,
                      problem.t0, problem.t1)
