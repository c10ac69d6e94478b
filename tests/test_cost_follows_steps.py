"""A solve that takes T steps costs time in proportion to T, not to `max_steps`.

The forward loop records into buffers of length ``max_steps`` (the step grid, and the
states or stages a checkpoint strategy keeps).  Four things could make every call pay
for all ``max_steps`` slots, and each is checked here on the compiled program:

1. zero-filling the buffers (`jax.lax.empty` is a zero broadcast on CPU): they come from
   `_uninitialised.uninitialised`, an FFI allocation that writes nothing;
2. under `jax.vmap`, broadcasting an unbatched buffer into a batched loop carry: the
   allocation is batched with the data;
3. under `jax.vmap`, `while_loop`'s batched predicate, which selects between the old and
   new carry — whole buffers included — after every step: the batch shares one loop in
   which finished solves stand still;
4. padding the step grid with inf after the loop: only ``sol.steps`` is padded, and XLA
   drops it when the loss does not use it.

Plus one coarse timing check, and the batched loop's results against one solve at a time.
"""

from __future__ import annotations

import re
import time

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxadjoint as ja
from jaxadjoint import _uninitialised

# A size that appears nowhere else in these programs, and large enough that every record
# buffer (the step grid: 8 (MAX_STEPS + 1) bytes) is above `SMALL_BUFFER_BYTES`.
MAX_STEPS = 33_333
N = 5


def rhs(t, y, args):
    A, b = args
    return jnp.tanh(A @ y) + b * jnp.cos(t)


A = jnp.asarray(np.random.default_rng(0).normal(size=(N, N)) * 0.5)
B = jnp.linspace(-0.2, 0.3, N)
Y0 = jnp.linspace(0.5, 1.0, N)
SAVES = jnp.array([0.3, 1.0])


def _loss(sensitivity, max_steps=MAX_STEPS):
    def loss(y0, args):
        sol = ja.solve(rhs, y0, 0.0, 1.0, args, saveat=SAVES, rtol=1e-6, atol=1e-6,
                       max_steps=max_steps, sensitivity=sensitivity)
        return jnp.sum(sol.ys**2)

    return loss


def _filled_buffers(hlo: str, grid: bool = True) -> list[str]:
    """Instructions that fill, select or copy a record buffer: ``max_steps`` states, or
    (with ``grid``) the ``max_steps + 1``-scalar step grid.

    The grid is padded with inf only for ``sol.steps`` (unused by these losses) and for
    the continuous adjoint's interpolant, which binary-searches it: ``grid=False`` there.
    """
    sizes = f"(?:{MAX_STEPS}|{MAX_STEPS + 1})"
    shape = rf"\w+\[(?:\d+,)*{sizes},\d+(?:,\d+)*\]"
    if grid:
        shape = rf"(?:{shape}|\w+\[(?:\d+,)*{MAX_STEPS + 1}\])"
    pattern = re.compile(rf"= {shape}\S* (broadcast|constant|select|copy|fusion)\(")
    found = [line.strip()[:160] for line in hlo.splitlines() if pattern.search(line)]
    # A fusion that writes one slot in place (dynamic-update-slice, scatter) is fine.
    in_place = ("dynamic-update-slice", "scatter")
    return [line for line in found
            if " fusion(" not in line or not any(op in line.split(" = ")[0] for op in in_place)]


STRATEGIES = {
    "StoreStates": ja.DiscreteAdjoint(checkpoint=ja.StoreStates()),
    "StoreStages": ja.DiscreteAdjoint(checkpoint=ja.StoreStages()),
    "ContinuousAdjoint": ja.ContinuousAdjoint(),
}


def test_handler_is_registered():
    assert _uninitialised.host_allocation_available()
    assert 8 * (MAX_STEPS + 1) >= _uninitialised.SMALL_BUFFER_BYTES


@helpers.requires_cpu
def test_small_buffers_are_zero_filled():
    """Below `SMALL_BUFFER_BYTES` a buffer is a zero fill (a few microseconds), not a call
    of the Python handler, which would wait for the caller's GIL; at and above it, the
    handler allocates."""
    witness = jnp.float64(0.0)
    limit = _uninitialised.SMALL_BUFFER_BYTES // 8
    for length, handler in [(limit - 1, False), (limit, True)]:
        hlo = jax.jit(lambda w, n=length: _uninitialised.uninitialised(
            (n,), jnp.float64, w, "test")).lower(witness).as_text()
        assert ("jaxadjoint_uninitialised" in hlo) == handler, length


@pytest.mark.parametrize(
    "name,batched",
    [("StoreStates", False), ("StoreStates", True), ("StoreStages", True),
     ("ContinuousAdjoint", False)],
)
@helpers.requires_cpu
def test_no_buffer_is_filled(name, batched):
    grad = jax.grad(_loss(STRATEGIES[name]), argnums=(0, 1))
    y0 = Y0
    if batched:
        grad = jax.vmap(grad, in_axes=(0, None))
        y0 = jnp.stack([Y0, 1.5 * Y0, 0.5 * Y0])
    hlo = jax.jit(grad).lower(y0, (A, B)).compile().as_text()
    assert "jaxadjoint_uninitialised" in hlo
    assert _filled_buffers(hlo, grid=name != "ContinuousAdjoint") == []


def test_the_check_sees_a_filled_buffer():
    """`_filled_buffers` does flag a zero-filled ``max_steps`` buffer (it can fail)."""

    def fill(y):
        def body(carry):
            n, y, buf = carry
            return n + 1, 0.5 * y, buf.at[n].set(y)

        _, _, buf = jax.lax.while_loop(lambda c: c[0] < y[0], body,
                                       (0, y, jnp.zeros((MAX_STEPS, N))))
        return buf

    assert _filled_buffers(jax.jit(fill).lower(Y0).compile().as_text())


def test_the_check_sees_the_padded_grid():
    """``sol.steps`` is the grid padded with inf: a pass over all ``max_steps + 1`` slots,
    done only when it is used, and flagged by the check (so the gradients above do not
    pad it)."""

    def steps(y0):
        return ja.solve(rhs, y0, 0.0, 1.0, (A, B), max_steps=MAX_STEPS).steps

    hlo = jax.jit(steps).lower(Y0).compile().as_text()
    assert _filled_buffers(hlo)
    assert not _filled_buffers(hlo, grid=False)


def _median_seconds(fn, *args, reps=9):
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def test_time_does_not_follow_max_steps():
    """A 60 MB record for a solve of a few steps: zero-filling it alone would take longer
    than the whole gradient with a small ``max_steps``, several times over."""
    n = 256
    a = jnp.asarray(np.random.default_rng(1).normal(size=(n, n)) / np.sqrt(n) * 0.5)
    b, y0 = jnp.zeros(n), jnp.ones(n)
    small, big = (jax.jit(jax.grad(_loss(STRATEGIES["StoreStates"], m), argnums=(0, 1)))
                  for m in (64, 30_000))
    # Up to three tries: on the CI machine the suite's background jobs (notebooks, the
    # tour) compete for the two cores, and one median there once read 7.3 ms against
    # 0.48.  Zero-filling 60 MB would fail every try.
    for _ in range(3):
        t_small = _median_seconds(small, y0, (a, b))
        t_big = _median_seconds(big, y0, (a, b))
        if t_big < 3 * t_small + 2e-3:
            break
    assert t_big < 3 * t_small + 2e-3, (t_small, t_big)


# Three solves of one batch: an easy one, a harder one, and one that runs out of steps.
RATES = jnp.array([0.5, 3.0, 400.0])
FEW_STEPS = 40


def decay_rhs(t, y, rate):
    return -rate * y + jnp.sin(t)


def _decay(rate):
    return ja.solve(decay_rhs, jnp.array([1.0, -0.5]), 0.0, 2.0, rate,
                    saveat=jnp.array([0.5, 2.0]),
                    rtol=1e-8, atol=1e-8, max_steps=FEW_STEPS, throw=False)


def _decay_outputs(rate):
    sol = _decay(rate)
    return sol.ys, sol.steps, sol.result._value, sol.stats["num_steps"]


_decay_batched = jax.jit(jax.vmap(_decay_outputs))
_decay_single = jax.jit(_decay_outputs)


def test_batched_solves_equal_single_solves():
    """Each solve of a `vmap` batch stops on its own: same grid, saves, counts, result."""
    batched = _decay_batched(RATES)
    results = set()
    for i, rate in enumerate(RATES):
        single = _decay_single(rate)
        for got, want in zip(batched, single):
            np.testing.assert_allclose(np.asarray(got[i]), np.asarray(want), rtol=1e-14)
        results.add(int(single[2]))
    assert len(results) == 2  # the stiff one failed, the others did not


def _decay_gradient(rate, y0):
    def loss(rate, y0):
        sol = ja.solve(decay_rhs, y0, 0.0, 2.0, rate, rtol=1e-8, atol=1e-8, max_steps=200)
        return jnp.sum(sol.ys**2)

    return jax.grad(loss, argnums=(0, 1))(rate, y0)


def test_batched_gradients_equal_single_gradients():
    rates = jnp.array([0.5, 3.0, 1.2])
    y0s = jnp.array([[1.0, -0.5], [0.2, 0.3], [2.0, 1.0]])
    batched = jax.jit(jax.vmap(_decay_gradient))(rates, y0s)
    single = jax.jit(_decay_gradient)
    for i in range(3):
        for got, want in zip(batched, single(rates[i], y0s[i])):
            np.testing.assert_allclose(np.asarray(got[i]), np.asarray(want), rtol=1e-12)


def _decay_to(t1, rate):
    sol = ja.solve(decay_rhs, jnp.array([1.0, -0.5]), 0.0, t1, rate,
                   rtol=1e-8, atol=1e-8, max_steps=FEW_STEPS, throw=False)
    return sol.ys[-1], sol.result._value, sol.stats["num_steps"]


def test_nested_vmap_over_end_times_and_rates():
    """Batches inside batches (the outer `vmap` sees the shared loop as a plain loop), with
    solves of different lengths (``t1``) and one that runs out of steps."""
    t1s = jnp.array([0.5, 2.0])
    rates = jnp.array([1.0, 400.0])
    batched = jax.jit(jax.vmap(jax.vmap(_decay_to, in_axes=(None, 0)), in_axes=(0, None)))(
        t1s, rates)
    single = jax.jit(_decay_to)
    for i, t1 in enumerate(t1s):
        for j, rate in enumerate(rates):
            for got, want in zip(batched, single(t1, rate)):
                np.testing.assert_allclose(np.asarray(got[i, j]), np.asarray(want), rtol=1e-14)
