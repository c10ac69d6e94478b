"""Robertson's chemical kinetics (Hairer & Wanner, *Solving ODEs II*, IV.1, eq. 1.3).

    y1' = -k1 y1 + k2 y2 y3
    y2' =  k1 y1 - k2 y2 y3 - k3 y2^2
    y3' =                     k3 y2^2

with the rates `k = (0.04, 1e4, 3e7)` and `y(0) = (1, 0, 0)`.  The three time scales
(`1/k1 = 25`, a fast transient of `y2` near `t ~ 1e-4`, and a slow decay to `t ~ 1e10`)
make it the classic stiff test: explicit methods need steps of order `1e-3` forever.
`y1 + y2 + y3 = 1` is conserved exactly.  `args = k` (shape `(3,)`), so `dy/dargs` is the
sensitivity to the three rates.
"""

import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from ._problem import ODEProblem

ROBERTSON_RATES = (0.04, 1e4, 3e7)


def robertson_rhs(t: ArrayLike, y: Array, args: Array) -> Array:
    """The Robertson field, `y = (y1, y2, y3)`, `args = (k1, k2, k3)`."""
    del t
    k1, k2, k3 = args[0], args[1], args[2]
    y1, y2, y3 = y[0], y[1], y[2]
    fast = k2 * y2 * y3
    return jnp.stack([-k1 * y1 + fast, k1 * y1 - fast - k3 * y2**2, k3 * y2**2])


def robertson_problem(t1: float = 40.0) -> ODEProblem:
    """Robertson's problem on `[0, t1]` (`t1 = 40` as in Hairer & Wanner; `4e10` for the
    long-time behaviour), with the standard rates as `args`."""
    if not t1 > 0:
        raise ValueError(f"`t1` must be positive, got {t1!r}.")
    return ODEProblem(
        f"robertson-t{t1:g}", robertson_rhs, jnp.asarray(np.array([1.0, 0.0, 0.0])),
        jnp.asarray(np.array(ROBERTSON_RATES)), 0.0, float(t1),
    )
