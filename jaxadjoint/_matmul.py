"""Matrix products the library itself computes, always at full precision.

On a GPU, JAX's default float32 matrix product rounds its inputs to TF32 (10 bits of
mantissa, about 1e-3).  That is as coarse as a typical ``rtol``, and the large, cancelling
Bernstein coefficients of the high-order interpolants turn it into errors of order one in
the weights (Vern8 on an H200: 0.24 off, out of about 50).  The field's own products are the
user's to choose; every product the library adds goes through `matmul`, which asks for
``Precision.HIGHEST`` (a no-op on CPU).  `tests/test_jaxpr.py` checks the traced programs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array


def matmul(a: Array, b: Array) -> Array:
    """``a @ b`` at full precision on every platform."""
    return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)
