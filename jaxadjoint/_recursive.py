"""`Recursive`: binomial checkpointing with memory fixed by ``num_checkpoints``.

The reverse pass needs ``y_n`` for every accepted step ``n = T-1, ..., 0`` (the stages
are recomputed from it).  `Recursive` keeps at most ``C = num_checkpoints`` states and
recomputes the others by replaying recorded steps forward from a checkpoint.

**Forward pass (online, T unknown).**  States ``y_0, y_d, y_2d, ...`` are kept in the
first ``C_f = C // 2`` slots of a ``(C, N)`` buffer; when a checkpoint would be the
``(C_f + 1)``-th, every other one is dropped and the interval ``d`` doubles (``d = 1, 2,
4, ...``).  After ``T`` steps the forward pass holds ``k <= C_f`` checkpoints with
``d < max(2, 2 T / C_f)``.

**Reverse pass (T known).**  The checkpoints form a stack.  To reverse the steps
``[a, b)`` above the top checkpoint ``a`` with ``f = C - depth`` free slots:

- if ``b - a <= f + 1`` (a *leaf*): replay ``y_{a+1}, ..., y_{b-1}`` into the free slots
  and reverse the whole segment with `reverse_sweep`; pop ``a``;
- otherwise replay to a split point ``m`` and push ``y_m``.  ``m`` is Griewank's
  binomial split: with ``beta(f, r) = binom(f + r, r)`` (the longest segment that ``f``
  free slots reverse when each step is replayed at most ``r`` times) and
  ``t = min{r : beta(f, r) >= b - a}``, the segment ``[m, b)`` gets
  ``b - m = min(beta(f - 1, t), b - a - 1)`` steps, so it is reversed with ``f - 1``
  slots and ``t`` replays, and ``[a, m)`` afterwards with ``f`` slots and ``t - 1``.

**Cost.**  Memory: ``C`` states, plus the working vectors of one step (state, adjoint,
stages) and the step grid of ``max_steps + 1`` *scalars* that every strategy records —
no buffer of ``max_steps`` states.  The grid is what grows with ``max_steps``, by one
scalar a step; the rest of the compiled gradient's memory does not.

**Recomputation.**  Every step is replayed at most ``t = min{r : binom(C - C_f + r, r) >= d}``
times (each replay costs one forward step,
``s - 1`` rhs evaluations for FSAL tableaus, ``s`` otherwise).  So ``t = 1``, *one
extra forward pass*, while ``T <= C_f (C - C_f + 1)`` (e.g. ``T <= 1056`` for ``C = 64``,
``T <= 16 512`` for ``C = 256``), and ``t`` grows like ``log T / log C`` beyond: for
``C = 64``, ``t <= 2`` up to ``T ~ 2 * 10^4`` and ``t <= 3`` up to ``T ~ 2 * 10^5``.

The replayed steps call the solver's step (`replay_step`) with the recorded grid values
``t_n``, ``t_{n+1}`` and ``k_1 = f(t_n, y_n)`` (carried as the FSAL stage, as in the
forward loop), in a plain loop as the forward loop does, so the replayed states are the
forward ones to round-off, and usually bit for bit (`_reverse` says what XLA may round
differently).
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jax import Array

from ._adjoint_health import healthy
from ._batched_reverse import batch_over_solves
from ._checkpoints import AbstractCheckpoint
from ._forward import write_slot
from ._reverse import add_save_state, initial_block, last_row, reverse_sweep
from .solvers._base import StepOutput


def replay_step(solver, f, tau, y, h, k1, tau_next) -> StepOutput:
    """The solver's step, as the forward loop takes it, to the bit (a seam for counting
    replays).

    The forward loop reads the step's error estimate (its finiteness and its norm); a
    replay that does not let XLA fuse `Vern8`'s stages differently, with other fused
    multiply-adds, and its large, cancelling coefficients made ``y_{n+1}`` differ by
    ~1e-14 relative from the forward's from the fourth step of a Kepler orbit on, 1e-11
    after 176 steps, and `Recursive`'s gradient by 2e-10 to 5e-8 from `StoreStates`' (an
    astrophysicist's acceptance test, 2026-11-29; Dopri5, Tsit5 and Vern7 were bitwise).
    Reading the estimate as the forward loop does (a step with a non-finite one, which
    the forward loop rejects, gives NaN) restores the forward's fusion; an optimisation
    barrier holding it beside ``y_{n+1}`` did not.
    """
    step = solver.step(f, tau, y, h, k1, tau_next)
    if step.y_error is None:
        return step
    finite = jnp.all(jnp.isfinite(step.y_error))
    return step._replace(y_new=jnp.where(finite, step.y_new, jnp.nan))


def _replay(system, params, direction, grid, n0, y0, num, stack, first_slot, consecutive):
    """Replay steps ``n0 .. n0 + num - 1`` from ``y0 = y_{n0}``; write ``y_{n0+i+1}``.

    The state after the ``i``-th replayed step goes to slot ``first_slot + i`` if
    ``consecutive`` else to ``first_slot``.  Same arithmetic as the forward loop: ``k1``
    is ``f(t_n, y_n)``, then the FSAL stage (or ``f(t_{n+1}, y_{n+1})``).
    """
    solver = system.solver

    def f(tau, y):
        return system.field(tau, y, params, direction)

    def cond(carry):
        return carry[0] < num

    def body(carry):
        i, y, k1, stack = carry
        n = n0 + i
        tau, tau_next = grid[n], grid[n + 1]
        step = replay_step(solver, f, tau, y, tau_next - tau, k1, tau_next)
        k_next = step.ks[-1] if solver.fsal else f(tau_next, step.y_new)
        slot = first_slot + jnp.where(consecutive, i, 0)
        return i + 1, step.y_new, k_next, stack.at[slot].set(step.y_new)

    # k1 is evaluated even when there is nothing to replay (a leaf of one step): skipping
    # it in a `jax.lax.cond` branch hid constants the forward loop folds (the time
    # direction) and changed the rounding of the replayed states (see `_reverse`).
    k1 = f(grid[n0], y0)
    return jax.lax.while_loop(cond, body, (jnp.int32(0), y0, k1, stack))[3]


# Where `Recursive.reverse` passes its `SaveCotangents` (`batch_over_solves`).
SAVES_AT = 10


def _split_length(length: Array, free: Array, dtype: Any) -> Array:
    """``min(beta(f - 1, t), length - 1)`` for ``t = min{r : beta(f, r) >= length}``.

    ``beta(f, r) = binom(f + r, r)``, built as ``beta(f, r) = beta(f, r-1) (f + r) / r``
    in floating point (exact for the sizes that occur; rounding could only move the
    split, never break the reversal).  ``beta(f - 1, t) = beta(f, t) f / (f + t)``.
    """
    f = free.astype(dtype)

    def cond(carry):
        _, beta = carry
        return beta < length.astype(dtype)

    def body(carry):
        r, beta = carry
        r = r + 1
        return r, jnp.round(beta * (f + r.astype(dtype)) / r.astype(dtype))

    t, beta = jax.lax.while_loop(cond, body, (jnp.int32(0), jnp.ones((), dtype)))
    below = jnp.round(beta * f / (f + t.astype(dtype))).astype(jnp.int32)
    return jnp.clip(below, 1, length - 1)


def _thin_in_place(stack: Array) -> Array:
    """Keep every other checkpoint: slot ``i`` takes slot ``min(2 i, size - 1)``.

    Slot by slot in increasing ``i``, so each read is of a slot not yet overwritten and
    XLA updates the stack in place (a gather would hold a second stack).
    """
    size = stack.shape[0]

    def move(i, s):
        return s.at[i].set(s[jnp.minimum(2 * i, size - 1)])

    return jax.lax.fori_loop(1, size, move, stack)


class Recursive(AbstractCheckpoint):
    """Binomial checkpointing: memory of ``num_checkpoints`` states, whatever the steps.

    Keeps at most ``num_checkpoints`` states (``>= 2``), independent of ``max_steps``
    and of the number of steps ``T``; what grows with ``max_steps`` is the recorded step
    grid alone, ``max_steps + 1`` scalars (8 bytes a step in float64).  Replays each
    step at most ``t = min{r : binom(C - C // 2 + r, r) >= d}`` times in the reverse
    pass, where ``d <= max(1, 2 T / (C // 2))`` is the checkpoint interval the forward
    pass ends with: one extra forward pass while ``T <= (C // 2) (C - C // 2 + 1)``,
    logarithmic growth beyond.  Gradients agree with `StoreStates`' to round-off.  See
    the module docstring.
    """

    num_checkpoints: int

    def __check_init__(self):
        c = self.num_checkpoints
        if isinstance(c, bool) or not isinstance(c, int) or c < 2:
            raise ValueError(f"`Recursive(num_checkpoints)` must be an integer >= 2, got {c!r}")

    def slots(self, max_steps: int) -> int:
        """Number of state slots: ``num_checkpoints``, capped at ``max_steps + 1``."""
        return max(2, min(self.num_checkpoints, max_steps + 1))

    def init(
        self, max_steps: int, y0: Array, num_live: int, witness: Array
    ) -> tuple[Array, Array]:
        del num_live, witness  # num_checkpoints slots: small, and y0 is written now
        stack = jnp.zeros((self.slots(max_steps),) + y0.shape, y0.dtype).at[0].set(y0)
        return stack, jnp.int32(1)

    writes_slot_n: ClassVar[bool] = False  # it writes a stack of checkpoints

    def record(self, store, n: Array, y: Array, step: StepOutput, live: tuple, active: Array):
        del step, live
        stack, d = store
        size = stack.shape[0]
        forward_slots = size // 2
        # Thin when y_n would be checkpoint number forward_slots + 1 (n = forward_slots d).
        # A rejected attempt repeats n with d already doubled, so it cannot thin twice.
        thin = active & (n % d == 0) & (n // d >= forward_slots)
        stack = jax.lax.cond(thin, _thin_in_place, lambda s: s, stack)
        d = jnp.where(thin, 2 * d, d)
        slot = jnp.minimum(n // d, size - 1)
        stack = write_slot(stack, slot, y, active & (n % d == 0))
        return stack, d

    def reverse(self, system, params, direction, store, grid, num_accepted, lam, pbar, mu,
                saves):
        # Under `vmap` over solves with different step counts the lanes share one loop
        # (`_batched_recursive`; imported here because it builds on this module).
        from ._batched_recursive import reverse_lanes

        args = (self, system, params, direction, store, grid, num_accepted, lam, pbar, mu,
                saves)
        return batch_over_solves(
            lambda checkpoint, *rest: checkpoint._reverse_one(*rest), reverse_lanes, args,
            lambda a: a[6], SAVES_AT,
        )

    def _reverse_one(self, system, params, direction, store, grid, num_accepted, lam, pbar,
                     mu, saves):
        """The reverse pass of one solve."""
        stack, d = store
        size = stack.shape[0]
        count = jnp.where(num_accepted > 0, (num_accepted - 1) // d + 1, 1)
        slots = jnp.arange(size, dtype=jnp.int32)
        positions = jnp.where(slots < count, slots * d, 0)
        j = last_row(saves)
        # Without steps y_0 is the final state: add its saves now.  (With steps the sweeps
        # add them inside their loops, as `StoreStates` does: added out here, after the
        # loop, it would be compiled together with whatever consumes dL/dy0.)
        lam, j = add_save_state(lam, saves, j, jnp.where(num_accepted == 0, 0, -1))

        def cond(carry):
            return carry[0] > 0

        def body(carry):
            end, depth, positions, stack, lam, pbar, j, rows, health = carry
            top = positions[depth - 1]
            length = end - top
            free = size - depth
            leaf = length <= free + 1
            split = end - _split_length(length, jnp.maximum(free, 1), grid.dtype)
            target = jnp.where(leaf, end - 1, split)
            stack = _replay(
                system, params, direction, grid, top, stack[depth - 1], target - top, stack,
                depth, leaf,
            )
            positions = positions.at[jnp.minimum(depth, size - 1)].set(
                jnp.where(leaf, positions[jnp.minimum(depth, size - 1)], split)
            )

            def read(n):
                return stack[depth - 1 + n - top], None

            # A leaf reverses [top, end); a split reverses nothing (n_lo = n_hi).
            lam, pbar, j, rows, health = reverse_sweep(
                system, params, direction, grid, end, jnp.where(leaf, top, end), read, lam,
                pbar, mu, saves, j, num_accepted, rows, health,
            )
            end = jnp.where(leaf, top, end)
            depth = jnp.where(leaf, depth - 1, depth + 1)
            return end, depth, positions, stack, lam, pbar, j, rows, health

        init = (num_accepted, count.astype(jnp.int32), positions.astype(jnp.int32), stack, lam,
                pbar, j, initial_block(system, params, lam, stack[0]), healthy(lam.dtype))
        _, _, _, _, lam, pbar, _, _, health = jax.lax.while_loop(cond, body, init)
        return lam, pbar, health
