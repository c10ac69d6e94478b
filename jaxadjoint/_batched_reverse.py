"""The reverse pass of a batch of solves under `jax.vmap`: one loop, lanes that are done wait.

`jax.vmap` of a loss over many initial states (a neural ODE trained on a batch) batches
the whole backward pass, the recorded step counts included.  Left to `vmap`, the sweep of
`_reverse.reverse_sweep` (one solve) becomes

- a `while_loop` with a batched predicate: after every iteration JAX selects between the
  old and the new carry of every lane, the per-lane parameter cotangent ``pbar`` (lanes x
  parameters) and the block of stage rows included;
- a select in place of the `jax.lax.cond` that adds a block's parameter adjoint (its
  predicate depends on the lane's step count): *every* iteration runs the block's
  parameter VJP for every lane, and before that JAX broadcasts the branch's operands to
  the batch (jax-ml/jax#1052), so the shared parameters of the right-hand side are copied
  once per lane and every product with them becomes a per-lane matrix product;
- the same select-and-broadcast for the isolated stage VJPs of large states
  (`_reverse._apply_vjp`).

**The shared loop.**  `batch_over_solves` gives a reverse pass a `custom_vmap` rule: when
the step counts are batched, the lanes run one `while_loop` (`lanes_sweep`, and
`_batched_recursive` for `Recursive`), as the forward loop does (`_forward.forward_loop`).
Iteration ``i`` reverses step ``n_hi - 1 - i`` of every lane that still has one; a lane
that is done stands still (one select of its carry per iteration, fused with the last
update).  The branches of `_apply_vjp` take one side for all lanes
(`_lanes.any_lane_cond`: the other side is exact where it is not needed).

**The parameter adjoint, stage by stage.**  Each lane takes `reverse_step`: one joint VJP
per stage in the state and the parameters, each stage's parameter part added to ``pbar``
on its own -- the arithmetic of the one-solve sweep for large states with few parameters
(`_reverse.joint_stage_vjps`).  With many parameters these VJPs stay out of the branches
that isolate large states' stage VJPs (`_reverse.isolated_vjps`): XLA then adds a step's
rank-one parameter parts to ``pbar`` in one fused pass, where a branch wrote each stage's
lanes x parameters part out and read it back.  Blocks of stage rows with one parameter
VJP per block, as in the one-solve sweep, are slower here: the batch makes those VJPs
per-lane matrix products that cannot share work, while the joint VJPs' rank-one parameter
parts fuse into one pass over ``pbar`` (figures: benchmarks/README.md, "Design
measurements" and "Time series").

**What is batched, and what stays unbatched.**  Nothing here is batched that `vmap` did
not batch.  The parameters of the right-hand side, when the lanes share them (the network
of a neural ODE), stay one unbatched array: the stage recomputations and the VJPs of all
lanes are products of (lanes x state) matrices with it.  The record (states or stages,
grid, step counts) is batched with the lanes because it differs between them.  The
per-lane parameter cotangent is batched (lanes x parameters) and has to be: the backward
pass cannot tell ``grad(vmap(f))``, after which JAX sums the lanes, from
``vmap(grad(f))``, which wants one gradient per lane, so it returns per-lane values
(summing over the lanes inside it, one product contracting over the batch, would give
the wrong answer to the second).  Under `jax.jacrev` (`vmap` over cotangent seeds) the
record and the step counts are not batched, nothing here applies, and the sweep is
`vmap` of the one-solve sweep: recorded states and recomputed stages stay unbatched,
only the adjoints carry the seeds (`tests/test_jaxpr.py`).  The saves' cotangents then
stay per save, and the sweep sums a row's saves when it reaches it; a solve on its own
and the lanes here sum them into rows once, before their loop (`_save_cotangents`).

**Gradients.**  Every lane reverses exactly its own recorded steps with the functions of
the one-solve sweep, so its gradient is the exact derivative of its computed solution.
Against the unbatched gradient of the same solve it differs only by rounding: the order
in which the parameter adjoint is summed (per stage here, per block of steps in the
one-solve sweep when it uses blocks) and XLA's batched kernels; so do the checkpoint
strategies against each other under `vmap`.  The forward solves of a batch already round
like this (the controller's error norm is a batched reduction).
`tests/test_batched_reverse.py` checks lanes against unbatched solves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from . import _reverse
from ._adjoint_health import Health, healthy, observe_step
from ._lanes import lanes_where, run_single_lane
from ._reverse import (
    SaveCotangents,
    add_save_state,
    last_row,
    save_slopes_cotangent,
    tracing_lanes,
)
from ._save_cotangents import materialise
from ._system import System


def batch_over_solves(
    one: Callable[..., Any],
    lanes: Callable[[Callable, Any, int, Any], Any],
    args: tuple,
    control: Callable[[tuple], Any],
    saves_at: int,
) -> Any:
    """``one(*args)``, with ``lanes`` as its rule under `jax.vmap` when lanes differ.

    ``args`` is a tuple of pytrees (arrays are its dynamic leaves; functions must be
    closure-converted first); ``args[saves_at]`` is the sweep's `SaveCotangents`.  Under
    `jax.vmap`, if the leaf ``control(args)`` (the step count) is batched, the batch runs
    ``lanes(unpack, axes, axis_size, dyn)``: ``dyn`` holds the array leaves (batched ones
    with the lane axis in front, as ``axes`` says) and ``unpack(d)`` rebuilds ``args`` from
    one lane's leaves (inside `jax.vmap` over ``axes``), with the lane's saves summed into
    rows once, before the lanes' loop (`_lanes_with_rows`).  Otherwise every lane takes
    the same steps (`jax.jacrev`: the lanes are cotangent seeds) and the batch runs
    `jax.vmap` of ``one``, whose loops and branches then have unbatched predicates, with
    the saves still pending (`_save_cotangents`: rows for every seed would be quadratic in
    the saves).  A solve on its own runs ``one`` on rows.  Outputs come out batched.  A
    batch of one lane runs ``one`` itself (`_lanes.run_single_lane`).
    """
    dynamic, static = eqx.partition(args, eqx.is_array)

    def unpack(dyn: Any) -> tuple:
        return eqx.combine(dyn, static)

    @jax.custom_batching.custom_vmap
    def run(dyn: Any) -> Any:
        return one(*_with_rows(unpack(dyn), saves_at))

    @run.def_vmap
    def run_batch(axis_size: int, in_batched: list, dyn: Any) -> tuple[Any, Any]:
        (batched,) = in_batched
        if axis_size == 1:
            return run_single_lane(run, dyn, batched)
        axes = jax.tree.map(lambda b: 0 if b else None, batched)
        if control(unpack(batched)) is True:
            lane_unpack, lane_axes, lane_dyn = _lanes_with_rows(unpack, axes, axis_size, dyn,
                                                                saves_at)
            out = lanes(lane_unpack, lane_axes, axis_size, lane_dyn)
        else:
            out = jax.vmap(lambda d: one(*unpack(d)), in_axes=(axes,), axis_size=axis_size)(dyn)
        return out, jax.tree.map(lambda _: True, out)

    return run(dynamic)


def _with_rows(args: tuple, saves_at: int) -> tuple:
    """``args`` with the `SaveCotangents` at ``saves_at`` summed into rows (`materialise`)."""
    args = list(args)
    args[saves_at] = materialise(args[saves_at])
    return tuple(args)


def _lanes_with_rows(unpack: Callable, axes: Any, axis_size: int, dyn: Any,
                    saves_at: int) -> tuple[Callable, Any, Any]:
    """Each lane's saves summed into rows once, before the lanes' loop: ``(unpack, axes,
    dyn)`` to use instead, whose lanes read the rows."""
    rows = jax.vmap(lambda d: materialise(unpack(d)[saves_at]), in_axes=(axes,),
                    axis_size=axis_size)(dyn)

    def unpack_rows(d: Any) -> tuple:
        d, lane_rows = d
        args = list(unpack(d))
        args[saves_at] = lane_rows
        return tuple(args)

    return unpack_rows, (axes, 0), (dyn, rows)


def reverse_all_steps(
    system: System,
    params: Any,
    direction: Array,
    grid: Array,
    num_steps: Array,
    read: Callable[[Array], tuple[Array | None, Array | None]],
    lam: Array,
    pbar: Any,
    mu: Array,
    saves: SaveCotangents,
) -> tuple[Array, Any, Health]:
    """`_reverse.reverse_all_steps`; under `jax.vmap` over solves, one shared loop.

    Returns ``(dL/dy0, dL/dparams, health)``.  ``read(n)`` may close over the record (it is
    closure-converted, so that the record can be batched).
    """
    if not isinstance(read, _reverse.RecordReader):  # (a module already: its record is a leaf)
        read = eqx.filter_closure_convert(read, jnp.int32(0))
    args = (system, params, direction, grid, num_steps, read, lam, pbar, mu, saves)

    def lanes(unpack: Callable, axes: Any, axis_size: int, dyn: Any) -> tuple:
        def lane(d: Any) -> Lane:
            system, params, direction, grid, _, read, _, _, mu, saves = unpack(d)
            return Lane(system, params, direction, grid, read, mu, saves)

        def start(d: Any) -> tuple:
            a = unpack(d)
            num_steps, lam, pbar, saves = a[4], a[6], a[7], a[9]
            return (num_steps, jnp.zeros_like(num_steps), lam, pbar, last_row(saves),
                    healthy(lam.dtype))

        n_hi, n_lo, lam, pbar, j, health = jax.vmap(
            start, in_axes=(axes,), axis_size=axis_size)(dyn)
        lam, pbar, _, health = lanes_sweep(
            lane, axes, axis_size, dyn, n_hi, n_lo, lam, pbar, j, health)
        return lam, pbar, health

    # The step count is args[4], the saves args[9].
    return batch_over_solves(_reverse.reverse_all_steps, lanes, args, lambda a: a[4], 9)


class Lane(NamedTuple):
    """What the reverse sweep of one lane reads (its arguments to `reverse_sweep`)."""

    system: System
    params: Any
    direction: Array
    grid: Array
    read: Callable[[Array], tuple[Array | None, Array | None]]
    mu: Array
    saves: SaveCotangents


def lanes_sweep(
    lane: Callable[[Any], Lane],
    axes: Any,
    axis_size: int,
    dyn: Any,
    n_hi: Array,
    n_lo: Array,
    lam: Array,
    pbar: Any,
    j: Array,
    health: Health,
) -> tuple[Array, Any, Array, Health]:
    """Reverse steps ``n_hi - 1, ..., n_lo`` of every lane in one loop: the batched
    `reverse_sweep`.

    ``lane(d)`` gives a lane's `Lane` from its leaves of ``dyn`` (under `jax.vmap` over
    ``axes``); ``n_hi``, ``n_lo``, ``lam``, ``pbar`` and ``j`` are batched (lane axis in
    front) and mean what they mean for `reverse_sweep`.  Each lane reverses its steps
    with its solver's `reverse_step` (the parameter adjoint stage by stage; see the module
    docstring) and adds its saves with `add_save_state` (and the slope cotangents of saves
    inside a step with `save_slopes_cotangent`); a lane whose steps are done stands still.
    ``health`` (batched) watches each lane's adjoint for blow-up.
    Returns ``(lam, pbar, j, health)``.
    """

    def each(fn: Callable) -> Callable:
        """``fn(lane, lane carry)`` over the lanes (the carry is batched)."""
        return jax.vmap(lambda d, c: fn(lane(d), c), in_axes=(axes, 0), axis_size=axis_size)

    def read_step(ln: Lane, n: Array, n_lo: Array) -> tuple:
        n = jnp.maximum(n, n_lo)  # the read ahead of a lane's last iteration: not used
        return ln.read(n), ln.grid[n], ln.grid[n + 1]

    def start(ln: Lane, c: dict) -> dict:
        lam, j = add_save_state(c["lam"], ln.saves, c["j"], c["n_hi"])
        n = c["n_hi"] - 1
        return dict(n=n, n_lo=c["n_lo"], data=read_step(ln, n, c["n_lo"]), lam=lam, j=j,
                    pbar=c["pbar"], health=c["health"])

    def advance(ln: Lane, c: dict) -> dict:
        n, ((y, stages), tau, t_next) = c["n"], c["data"]
        kbar_saves = save_slopes_cotangent(ln.saves, c["j"], n,
                                           ln.system.stage_plan.carried_end)
        lam, pbar = ln.system.solver.reverse_step(
            ln.system, tau, t_next, y, stages, c["lam"], ln.mu, ln.params,
            ln.direction, c["pbar"], kbar_saves,
        )
        health = observe_step(c["health"], ln.system, ln.params, ln.direction, n, tau, t_next,
                              y, stages, c["lam"], lam, kbar_saves, ln.mu)
        lam, j = add_save_state(lam, ln.saves, c["j"], n)
        return dict(c, n=n - 1, data=read_step(ln, n - 1, c["n_lo"]), lam=lam, j=j, pbar=pbar,
                    health=health)

    def running(c: dict) -> Array:
        return c["n"] >= c["n_lo"]

    def body(c: dict) -> dict:
        return lanes_where(running(c), each(advance)(dyn, c), c)

    carry = each(start)(dyn, dict(n_hi=n_hi, n_lo=n_lo, lam=lam, pbar=pbar, j=j,
                                  health=health))
    with tracing_lanes():  # small states' joint VJPs inline (`_reverse.tracing_lanes`)
        final = jax.lax.while_loop(lambda c: jnp.any(running(c)), body, carry)
    return final["lam"], final["pbar"], final["j"], final["health"]
