"""Linear and separable problems with closed-form solutions and sensitivities, for tests.

- Exponential decay `y' = -k y` (vector `y`, scalar rate `k`).
- A constant-coefficient linear system `y' = M y` (the matrix `M` is the parameter).
- A time-dependent scalar problem `y' = a cos(t) y`.

Each comes as an `ODEProblem` plus `*_solution` and `*_sensitivity` functions written with
`jax.numpy`, so they can also be differentiated or vmapped.
"""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from ._problem import ODEProblem


def exponential_decay_rhs(t: ArrayLike, y: Array, args: Array) -> Array:
    """`y' = -k y` with `args = k`."""
    del t
    return -args * y


def exponential_decay_problem(
    k: float = 0.7, y0: ArrayLike = (1.0, 2.0, -0.5), t1: float = 2.0
) -> ODEProblem:
    """Exponential decay `y' = -k y` on `[0, t1]`; `args = k` (scalar), `y0` of shape `(n,)`."""
    y0 = jnp.asarray(np.asarray(y0, dtype=np.float64))
    return ODEProblem(
        "exponential-decay", exponential_decay_rhs, y0, jnp.asarray(float(k)), 0.0, float(t1)
    )


def exponential_decay_solution(t: ArrayLike, y0: ArrayLike, k: ArrayLike) -> Array:
    """`y(t) = y0 exp(-k t)`."""
    return jnp.asarray(y0) * jnp.exp(-k * t)


def exponential_decay_sensitivity(t: ArrayLike, y0: ArrayLike, k: ArrayLike) -> tuple[Array, Array]:
    """`(dy(t)/dy0, dy(t)/dk) = (exp(-k t) I, -t y0 exp(-k t))`.

    The first is returned as the diagonal `exp(-k t) * ones_like(y0)` (the Jacobian is
    diagonal). When both depend on one parameter `p`, e.g. `y0 = p^2`, `k = p`, the chain rule
    gives `dy/dp = 2 p exp(-p t) - t p^2 exp(-p t)`.
    """
    y0 = jnp.asarray(y0)
    decay = jnp.exp(-k * t)
    return decay * jnp.ones_like(y0), -t * y0 * decay


def linear_system_rhs(t: ArrayLike, y: Array, args: Array) -> Array:
    """`y' = M y` with `args = M`."""
    del t
    return args @ y


def linear_system_problem(t1: float = 1.5) -> ODEProblem:
    """`y' = M y` with a fixed non-normal 3x3 `M` and `y0 = (1, 0, -1)` on `[0, t1]`.

    `M = [[-0.5, 2.0, 0.0], [-1.0, -0.3, 0.5], [0.2, 0.0, -1.0]]`: a damped rotation coupled to
    a decaying third component (eigenvalues `-0.91` and `-0.44 +- 1.39 i`). `args = M`.
    """
    M = np.array([[-0.5, 2.0, 0.0], [-1.0, -0.3, 0.5], [0.2, 0.0, -1.0]])
    y0 = np.array([1.0, 0.0, -1.0])
    return ODEProblem(
        "linear-system", linear_system_rhs, jnp.asarray(y0), jnp.asarray(M), 0.0, float(t1)
    )


def linear_system_solution(t: ArrayLike, y0: ArrayLike, M: ArrayLike) -> Array:
    """`y(t) = expm(M t) y0`."""
    return jsl.expm(jnp.asarray(M) * t) @ jnp.asarray(y0)


def linear_system_sensitivity(t: ArrayLike, y0: ArrayLike, M: ArrayLike) -> tuple[Array, Array]:
    """`(dy(t)/dy0, dy(t)/dM)`, of shapes `(n, n)` and `(n, n, n)`.

    `dy/dy0 = expm(M t)`; `dy_i/dM_jk = [L(M t, t E_jk) y0]_i`, where `L(X, E)` is the Fréchet
    derivative of the matrix exponential (computed exactly, by forward-mode differentiation
    of `jax.scipy.linalg.expm`).
    """
    M = jnp.asarray(M)
    y0 = jnp.asarray(y0)
    dy_dM = jax.jacfwd(linear_system_solution, argnums=2)(t, y0, M)
    return jsl.expm(M * t), dy_dM


def periodic_growth_rhs(t: ArrayLike, y: Array, args: Array) -> Array:
    """`y' = a cos(t) y` with `args = a`."""
    return args * jnp.cos(t) * y


def periodic_growth_problem(a: float = 0.8, y0: float = 1.5, t1: float = 4.0) -> ODEProblem:
    """The time-dependent scalar problem `y' = a cos(t) y` on `[0, t1]`; `args = a`.

    `y0` is a scalar (shape `()`) array. The field depends on `t`, so the problem catches a
    solver that evaluates its stages at the wrong times.
    """
    return ODEProblem(
        "periodic-growth",
        periodic_growth_rhs,
        jnp.asarray(float(y0)),
        jnp.asarray(float(a)),
        0.0,
        float(t1),
    )


def periodic_growth_solution(t: ArrayLike, y0: ArrayLike, a: ArrayLike) -> Array:
    """`y(t) = y0 exp(a sin t)`."""
    return y0 * jnp.exp(a * jnp.sin(t))


def periodic_growth_sensitivity(t: ArrayLike, y0: ArrayLike, a: ArrayLike) -> tuple[Array, Array]:
    """`(dy(t)/dy0, dy(t)/da) = (exp(a sin t), y(t) sin t)`."""
    growth = jnp.exp(a * jnp.sin(t))
    return growth, y0 * growth * jnp.sin(t)
