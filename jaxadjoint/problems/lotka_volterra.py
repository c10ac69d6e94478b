"""Lotka–Volterra systems: the classic predator–prey pair and generalised (GLV) communities.

The generalised Lotka–Volterra equations for `N` species (paper, section 4.3, eq. 62) are

    dx_i/dt = x_i (r_i + sum_j A_ij x_j),        i = 1, ..., N,

with growth/death rates `r` and interaction matrix `A`; together they are the `N + N^2`
parameters the paper differentiates with respect to. Here `args = (r, A)`.
"""

import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from ._problem import ODEProblem

# Strength of the random interactions. Below 1/sqrt(2) the symmetric part of
# A = -I + sigma G / sqrt(N) is negative definite for large N (its spectrum is a semicircle of
# radius sigma * sqrt(2)), which is the Volterra–Lyapunov condition for global stability.
_SIGMA = 0.5


def glv_rhs(t: ArrayLike, x: Array, args: tuple[Array, Array]) -> Array:
    """The GLV vector field `dx_i/dt = x_i (r_i + (A x)_i)`, with `args = (r, A)`."""
    del t
    r, A = args
    return x * (r + A @ x)


def _glv_interactions(n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw `A = -I + sigma G / sqrt(n)`, redrawing `G` until `A + A^T` is negative definite."""
    while True:
        G = rng.standard_normal((n, n))
        A = -np.eye(n) + _SIGMA * G / np.sqrt(n)
        if np.linalg.eigvalsh(0.5 * (A + A.T)).max() < 0:
            return A


def _check_size(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"`n` (the number of species) must be a positive integer, got {n!r}.")


def glv_problem(n: int, seed: int = 0, t1: float = 10.0) -> ODEProblem:
    """A random `n`-species GLV community with a stable interior equilibrium and rich transients.

    May's (1972) random community: self-regulation `-1` on the diagonal plus random
    interactions. The recipe, with `rng = numpy.random.default_rng(seed)` and draws made in
    this order:

    1. `A = -I + sigma G / sqrt(n)` with `sigma = 0.5` and `G = rng.standard_normal((n, n))`
       (i.i.d. standard normal); `G` is redrawn until `(A + A^T) / 2` is negative definite.
    2. The equilibrium is drawn first, `x* = rng.uniform(0.5, 1.5, n)`, and the rates are set
       to make it one: `r = -A x*`. (A few `r_i` may be negative: those species decline on
       their own and persist only through their interactions.)
    3. The initial state is drawn well below it, `x(0) = rng.uniform(0.05, 0.5, n)`.

    Guarantees: `x*` is feasible (positive) by construction, and since `A + A^T` is negative
    definite it is globally asymptotically stable in the open positive orthant (Lyapunov
    function `sum_i x_i - x*_i - x*_i log(x_i / x*_i)`); in particular every eigenvalue of the
    Jacobian `diag(x*) A` has a negative real part. The trajectory is far from `x*` at `t = 1`
    (relative distance about 0.5) and close to it by `t = 10` (about 1e-2); for `n >= 10`
    typically two thirds of the components overshoot or dip before settling (non-monotone),
    with damped oscillations from the complex eigenvalues of `diag(x*) A` (imaginary parts up
    to about 0.4).

    **Arguments:**

    - `n`: the number of species.
    - `seed`: the seed of the NumPy generator; the problem is a deterministic function of
      `(n, seed)`.
    - `t1`: the final time (the interval is `[0, t1]`).

    **Returns:** an `ODEProblem` with `y0` of shape `(n,)` and `args = (r, A)` of shapes `(n,)`
    and `(n, n)`.
    """
    _check_size(n)
    rng = np.random.default_rng(seed)
    A = _glv_interactions(n, rng)
    x_star = rng.uniform(0.5, 1.5, n)
    r = -A @ x_star
    x0 = rng.uniform(0.05, 0.5, n)
    args = (jnp.asarray(r), jnp.asarray(A))
    return ODEProblem(f"glv-{n}", glv_rhs, jnp.asarray(x0), args, 0.0, float(t1))


def glv_paper_problem(n: int, seed: int = 0, t1: float = 10.0) -> ODEProblem:
    """The GLV setting of the paper (section 4.3): `r_i = 0.1`, `x_i(0) = 0.1` on `[0, 10]`.

    The interaction matrix is the same draw as in `glv_problem(n, seed)` (step 1 there); the
    paper does not state its recipe beyond "following May". Since `A_ii = -1`, the initial
    state is the equilibrium of the non-interacting system, and the dynamics are slow: at
    `t = 0`, `|dx_i/dt| <~ 0.015`; over `[0, 10]` the state drifts by 30–50 % (relative
    2-norm, `n = 10, 30`), mostly monotonically, towards `x* = -A^{-1} r`, which is not
    guaranteed to be positive (a few species may slowly die out). Use `glv_problem` for
    transients.

    **Returns:** an `ODEProblem` with `y0` of shape `(n,)` and `args = (r, A)`.
    """
    _check_size(n)
    A = _glv_interactions(n, np.random.default_rng(seed))
    r = np.full(n, 0.1)
    x0 = np.full(n, 0.1)
    args = (jnp.asarray(r), jnp.asarray(A))
    return ODEProblem(f"glv-paper-{n}", glv_rhs, jnp.asarray(x0), args, 0.0, float(t1))


def glv_equilibrium(args: tuple[Array, Array]) -> Array:
    """The interior equilibrium `x* = -A^{-1} r` of the GLV system with `args = (r, A)`."""
    r, A = args
    return -jnp.linalg.solve(A, r)


def lotka_volterra_rhs(t: ArrayLike, y: Array, args: Array) -> Array:
    """Predator–prey: `x' = alpha x - beta x y`, `y' = delta x y - gamma y`.

    `y = (prey, predator)`, `args = (alpha, beta, gamma, delta)` as one array.
    """
    del t
    alpha, beta, gamma, delta = args
    prey, predator = y
    return jnp.stack(
        [alpha * prey - beta * prey * predator, delta * prey * predator - gamma * predator]
    )


def lotka_volterra_problem(t1: float = 10.0) -> ODEProblem:
    """The classic predator–prey problem: `(alpha, beta, gamma, delta) = (1.5, 1, 3, 1)`.

    Initial state `(prey, predator) = (1, 1)` on `[0, t1]`; the orbit is periodic (period
    about 3.32), around the equilibrium `(gamma / delta, alpha / beta) = (3, 1.5)`.
    """
    args = jnp.asarray(np.array([1.5, 1.0, 3.0, 1.0]))
    y0 = jnp.asarray(np.array([1.0, 1.0]))
    return ODEProblem("lotka-volterra", lotka_volterra_rhs, y0, args, 0.0, float(t1))
