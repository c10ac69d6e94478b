"""The container shared by every reference problem."""

from collections.abc import Callable
from typing import Any

import equinox as eqx


class ODEProblem(eqx.Module):
    """An initial-value problem `dy/dt = rhs(t, y, args)`, `y(t0) = y0`, on `[t0, t1]`.

    A frozen, pure description: it holds no solver and solves nothing. `y0` and `args` are
    arrays or pytrees of arrays (the differentiable data); `name`, `rhs`, `t0` and `t1` are
    static, so a problem can be closed over by `jax.jit` without retracing on its data.

    **Fields:**

    - `name`: a short human-readable label (used by tests and benchmark records).
    - `rhs`: the vector field, `rhs(t, y, args) -> dy/dt` with the pytree structure of `y`.
    - `y0`: the initial state at `t0`.
    - `args`: the parameters passed as the third argument of `rhs`.
    - `t0`, `t1`: the integration interval.
    """

    name: str = eqx.field(static=True)
    rhs: Callable[[Any, Any, Any], Any] = eqx.field(static=True)
    y0: Any
    args: Any
    t0: float = eqx.field(static=True)
    t1: float = eqx.field(static=True)
