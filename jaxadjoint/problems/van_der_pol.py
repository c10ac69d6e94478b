"""The Van der Pol oscillator in the scaling of the paper (section 4.2, eqs. 60–61).

    x'' = mu (1 - x^2) x' - mu x,      i.e.      x' = v,   v' = mu ((1 - x^2) v - x).

This is the form of PETSc's `ex20adj.c`: time is *not* rescaled, so `mu` multiplies the whole
second equation and the slow motion along the limit cycle happens on an `O(1)` time scale
while the fast relaxation rate is `mu (x^2 - 1)`. The initial state

    x(0) = 2,      v(0) = -2/3 + 10 / (81 mu) - 292 / (2187 mu^2)

is the asymptotic expansion of the slow manifold through `x = 2`, so the solution starts
without a fast initial layer. `args = mu` (a scalar array), so `dy/dargs` is the parameter
sensitivity `dy/dmu` the paper computes.
"""

import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from ._problem import ODEProblem


def van_der_pol_rhs(t: ArrayLike, y: Array, args: Array) -> Array:
    """`(x, v)' = (v, mu ((1 - x^2) v - x))` with `y = (x, v)` and `args = mu`."""
    del t
    mu = args
    x, v = y
    return jnp.stack([v, mu * ((1 - x**2) * v - x)])


def van_der_pol_initial_state(mu: float) -> np.ndarray:
    """The paper's initial state `(2, -2/3 + 10/(81 mu) - 292/(2187 mu^2))` (slow manifold)."""
    return np.array([2.0, -2.0 / 3.0 + 10.0 / (81.0 * mu) - 292.0 / (2187.0 * mu**2)])


def van_der_pol_problem(mu: float = 10.0, t1: float = 5.0) -> ODEProblem:
    """The benchmark Van der Pol problem: by default `mu = 10` on `[0, 5]`.

    Same equations and the same (slow-manifold) initial state formula as the paper, at a
    stiffness an explicit solver handles comfortably (about 180 steps of SciPy's RK45 at
    `rtol = atol = 1e-6`); the interval covers almost two relaxation cycles (period about 2.8).
    """
    if not mu > 0:
        raise ValueError(f"`mu` must be positive, got {mu!r}.")
    y0 = jnp.asarray(van_der_pol_initial_state(mu))
    return ODEProblem(
        f"van-der-pol-mu{mu:g}", van_der_pol_rhs, y0, jnp.asarray(float(mu)), 0.0, float(t1)
    )


def van_der_pol_paper_problem() -> ODEProblem:
    """The paper's Van der Pol problem (section 4.2): `mu = 1e3` on `[0, 0.5]`.

    Stiff for an explicit method (the relaxation rate at `x = 2` is `3 mu = 3000`), so step
    sizes are bounded by stability; the paper solves it with Cash–Karp at
    `rtol = atol = 1e-3 ... 1e-15` and differentiates `x(0.5)`, `v(0.5)` with respect to `mu`.
    """
    mu = 1e3
    y0 = jnp.asarray(van_der_pol_initial_state(mu))
    return ODEProblem("van-der-pol-paper", van_der_pol_rhs, y0, jnp.asarray(mu), 0.0, 0.5)


def van_der_pol_stiff_problem(mu: float = 1e6, t1: float = 2.0) -> ODEProblem:
    """Very stiff Van der Pol: by default `mu = 1e6` on `[0, 2]`, for stiff solvers.

    The same equations and slow-manifold initial state. The solution creeps along the slow
    manifold from `x = 2` to `x = 1` (time `3/2 - ln 2 ~ 0.81`), jumps to `x ~ -2` on a time
    scale `1/mu`, and creeps back: `[0, 2]` holds one jump, `[0, 0.5]` none. The relaxation
    rate `mu (x^2 - 1)` reaches `3e6`; an explicit method's step is bounded by about `1/mu`
    for ever (Dopri5 at `rtol = atol = 1e-6` does not reach `t = 0.5` in 20000 steps), while
    Rodas5 needs about 420 accepted steps on `[0, 2]` and 8 on `[0, 0.5]`.
    """
    if not mu > 0:
        raise ValueError(f"`mu` must be positive, got {mu!r}.")
    if not t1 > 0:
        raise ValueError(f"`t1` must be positive, got {t1!r}.")
    y0 = jnp.asarray(van_der_pol_initial_state(mu))
    return ODEProblem(
        f"van-der-pol-stiff-mu{mu:g}-t{t1:g}", van_der_pol_rhs, y0, jnp.asarray(float(mu)), 0.0,
        float(t1),
    )
