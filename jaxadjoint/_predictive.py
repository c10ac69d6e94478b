"""`PredictiveController`: Gustafsson's predictive step-size control, for stiff solvers.

After an accepted step ``n`` with scaled error ``err_n`` (the norm of `scaled_error`) the
standard (integral) proposal is ``h_n * safety * err_n^(-1/q)``.  Gustafsson (1994; Hairer &
Wanner, Solving ODEs II, IV.8, eq. 8.21, and their codes RADAU5 and RODAS) also uses the
previous accepted step::

    h_{n+1} = safety * h_n * err_n^(-1/q) * (h_n / h_{n-1}) * (err_{n-1} / err_n)^(1/q)

and takes the smaller of the two.  When the error grows from step to step, as in the rapid
transients of stiff problems (Robertson's kinetics, the jumps of Van der Pol), the second
factor shrinks the step *before* a rejection would; where the integral rule would
oscillate between accepting and rejecting it damps the oscillation.  After a rejection
the integral rule is used, without growth.  ``err_{n-1}`` is floored at ``1e-2`` (RADAU5).
"""

from __future__ import annotations

import jax.numpy as jnp

from ._controllers import _AdaptiveController, _exponent_order, scaled_error


class PredictiveController(_AdaptiveController):
    """Gustafsson's predictive controller (module docstring), the choice of Hairer's stiff
    codes: fewer rejected steps than `IController` on stiff transients.

    Arguments: ``safety`` and the bounds ``factor_min``, ``factor_max`` of ``h_new / h``;
    ``dtmax=`` (keyword), the longest step allowed.
    """

    safety: float = 0.9
    factor_min: float = 0.2
    factor_max: float = 8.0

    def init(self, f, tau0, tau1, y0, k0, dt0, solver, tol, direction):
        del tau1
        h, evals = self._first_step(f, tau0, y0, k0, dt0, solver, tol, direction)
        one = jnp.ones((), tau0.dtype)
        # (previous accepted h, its error, whether there is one, whether the last
        # attempt was rejected)
        return h, (one, one, jnp.array(False), jnp.array(False)), evals

    def adapt(self, y, y_new, y_error, k0, h, state, solver, tol):
        del k0
        h_prev, err_prev, has_prev, rejected_before = state
        err = scaled_error(y, y_new, y_error, tol)
        accept = err <= 1
        q = _exponent_order(solver)
        safe_err = jnp.maximum(err, 1e-10)
        factor = self.safety * safe_err ** (-1.0 / q)
        predictive = factor * (h / h_prev) * (err_prev / safe_err) ** (1.0 / q)
        use = accept & has_prev
        factor = jnp.where(use, jnp.minimum(factor, predictive), factor)
        factor = jnp.clip(factor, self.factor_min, self.factor_max)
        factor = jnp.where(rejected_before | ~accept, jnp.minimum(factor, 1.0), factor)
        new_state = (
            jnp.where(accept, h, h_prev),
            jnp.where(accept, jnp.maximum(err, 1e-2), err_prev),
            has_prev | accept,
            ~accept,
        )
        return accept, self._cap(h * factor), new_state
