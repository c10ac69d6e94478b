"""Stiff linear solves of block-triangular augmented systems with the user's ``N x N`` LU.

The sensitivity methods integrate augmented systems ``z' = F(t, z)`` whose Jacobian
``A = dF/dz`` is block lower triangular, with small diagonal blocks:

- forward sensitivities, ``z = (y, vec S)``, ``F = (f, J S + J_p)``::

      A = [[J,                 0    ],
           [d(J S + J_p)/dy,   I (x) J]]       (every column of S sees J)

- the continuous adjoint, ``a = (lam, pbar)`` (``+ y`` when backsolving), where ``pbar``
  is a quadrature: its diagonal block is zero, and ``lam``'s is ``-J^T`` (times the
  direction of the backward solve).

A stiff step solves ``(I - gamma h A) x = b``.  Block forward substitution solves it
exactly, factorising only the diagonal blocks::

    x_1 = (I - gamma h A_11)^{-1} b_1
    x_k = (I - gamma h A_kk)^{-1} (b_k + gamma h sum_{j<k} A_kj x_j)

where ``sum_{j<k} A_kj x_j`` is block ``k`` of one JVP of ``F`` with the tangent
``(x_1, .., x_{k-1}, 0, ..)`` (for forward sensitivities: a JVP of the JVPs that make up
``J S``, batched over the columns); no ``A_kj`` is formed.  For forward sensitivities this is
ONE LU of the user's ``I - gamma h J`` per step, serving the state and every sensitivity
column (the simultaneous-corrector idea of ODESSA), where a dense solve would take
``(N (1 + P))^3 / 3`` operations and ``N (1 + P)`` JVPs of ``F``.  The solve is exact (the
same matrix, to round-off), so a Rosenbrock step of the augmented system is the
Rosenbrock step with the exact augmented Jacobian, and a simplified Newton iteration
with it is that of the augmented system.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .solvers._base import AbstractSolver, AbstractStiffFamily
from .solvers._dense_lu import lu_factor, lu_solve, lu_solve_columns, small_lu_solver
from .solvers._linear_solver import AbstractFactorisation, AbstractLinearSolver, FlatField


class Block(eqx.Module):
    """A slice ``z[start:start + size]`` of the augmented state and its diagonal block.

    ``diagonal``:

    - ``"jacobian"``: its own Jacobian ``dF_k/dz_k``, formed by `jax.jacfwd` and factorised;
    - ``"columns"``: ``size = rows * columns`` values laid out as a ``(rows, columns)``
      matrix (row major), each column seeing the Jacobian of block ``of`` (an earlier
      ``"jacobian"`` block, by its index in the solver's ``blocks``): its LU is reused;
    - ``"zero"``: ``F_k`` does not depend on ``z_k`` (a quadrature): nothing to solve.
    """

    start: int = eqx.field(static=True)
    size: int = eqx.field(static=True)
    diagonal: Literal["jacobian", "columns", "zero"] = eqx.field(static=True)
    columns: int = eqx.field(static=True, default=1)
    of: int = eqx.field(static=True, default=0)

    def __check_init__(self) -> None:
        if self.diagonal not in ("jacobian", "columns", "zero"):
            raise ValueError(f"unknown diagonal block kind {self.diagonal!r}")
        if self.size % self.columns:
            raise ValueError("a block of columns must hold rows * columns values")

    @property
    def slice(self) -> slice:
        return slice(self.start, self.start + self.size)


class BlockFactorisation(AbstractFactorisation):
    """``I - gamma h A`` at ``(t, z)``: the LUs of its diagonal blocks (module docstring)."""

    # z -> F(t, z), closure-converted and split: its arrays are leaves, the rest (its
    # jaxpr) static, so that the factorisation is a pytree of arrays (`stop_gradient`).
    field_arrays: Any
    field_static: Any = eqx.field(static=True)
    z: Array
    gamma_h: Array
    lus: tuple[tuple[Array, Array] | None, ...]
    blocks: tuple[Block, ...] = eqx.field(static=True)

    def field(self, z: Array) -> Array:
        return eqx.combine(self.field_arrays, self.field_static)(z)

    def _diagonal_solve(self, k: int, rhs: Array, trans: int, small: bool = False) -> Array:
        """Solve with diagonal block ``k``; ``small``: tiny blocks by `small_lu_solver`
        (the arithmetic `DenseLU.solver` uses, so that a step of an augmented system
        solves its state block exactly as the plain step does)."""
        block = self.blocks[k]
        if block.diagonal == "zero":
            return rhs
        lu = self.lus[k] if block.diagonal == "jacobian" else self.lus[block.of]
        unrolled = small_lu_solver(lu) if small and not trans else None
        if block.diagonal == "jacobian":
            return lu_solve(lu, rhs, trans=trans) if unrolled is None else unrolled(rhs)
        matrix = rhs.reshape(block.size // block.columns, block.columns)
        if unrolled is None:
            return lu_solve_columns(lu, matrix, trans=trans).reshape(-1)
        return unrolled(matrix.T).T.reshape(-1)

    def solver(self) -> Callable[[Array], Array]:
        """`solve` with tiny diagonal blocks substituted in JAX arithmetic (as
        `DenseLU.solver`)."""
        return lambda b: self.solve(b, small=True)

    def solve(self, b: Array, small: bool = False) -> Array:
        x = jnp.zeros_like(b)
        for k, block in enumerate(self.blocks):
            rhs = b[block.slice]
            if k > 0:
                # gamma h sum_{j<k} A_kj x_j: x holds zeros beyond the solved blocks.
                coupling = jax.jvp(self.field, (self.z,), (x,))[1][block.slice]
                rhs = rhs + self.gamma_h * coupling
            x = x.at[block.slice].set(self._diagonal_solve(k, rhs, trans=0, small=small))
        return x

    def solve_transposed(self, b: Array) -> Array:
        # (I - gamma h A)^T is block upper triangular: back substitution, the coupling of
        # block k being block k of the VJP of F with the blocks solved so far.
        def one(b: Array) -> Array:
            x = jnp.zeros_like(b)
            _, vjp = jax.vjp(self.field, self.z)
            for k in reversed(range(len(self.blocks))):
                block = self.blocks[k]
                rhs = b[block.slice]
                if k < len(self.blocks) - 1:
                    rhs = rhs + self.gamma_h * vjp(x)[0][block.slice]
                x = x.at[block.slice].set(self._diagonal_solve(k, rhs, trans=1))
            return x

        return jnp.vectorize(one, signature="(n)->(n)")(b)


class BlockTriangularSolver(AbstractLinearSolver):
    """Solves with ``I - gamma h A`` for a block lower-triangular ``A`` (module docstring).

    ``blocks`` in the order of substitution: each block's field may depend only on the
    blocks before it and on itself (through its diagonal block), and together they
    cover the state.
    """

    blocks: tuple[Block, ...] = eqx.field(static=True)

    def jacobian(self, f: FlatField, t: Array, y: Array) -> tuple[Array | None, ...]:
        """The Jacobians of the ``"jacobian"`` diagonal blocks (``None`` for the others)."""
        field = eqx.filter_closure_convert(lambda z: f(t, z), y)
        jacs = []
        for block in self.blocks:
            if block.diagonal != "jacobian":
                jacs.append(None)
                continue
            part = block.slice

            def block_field(x: Array, part: slice = part) -> Array:
                return field(y.at[part].set(x))[part]

            jacs.append(jax.jacfwd(block_field)(y[part]))
        return tuple(jacs)

    def newton_tested(self, size: int) -> tuple[tuple[int, int], ...] | None:
        """All but the quadratures that nothing else reads: the ``"zero"`` blocks last in
        the order of substitution (`_stiff_quadrature`'s integral, the continuous adjoint's
        parameter cotangent).  No block depends on them, so once the rest has converged
        their next iterate is exact (their diagonal block is zero): testing them too only
        made Kvaerno5 iterate longer, or reject a step, where the state had converged."""
        untested = []
        for block in reversed(self.blocks):
            if block.diagonal != "zero":
                break
            untested.append(block.slice)
        if not untested:
            return None
        mask = np.ones(size, bool)
        for part in untested:
            mask[part] = False
        edges = np.flatnonzero(np.diff(np.concatenate([[False], mask, [False]])))
        return tuple((int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]))

    def factor_jacobian(self, jac: tuple[Array | None, ...], f: FlatField, t: Array,
                        y: Array, gamma_h: Array) -> BlockFactorisation:
        field = eqx.filter_closure_convert(lambda z: f(t, z), y)
        lus = []
        for block, block_jac in zip(self.blocks, jac):
            if block_jac is None:
                lus.append(None)
                continue
            eye = jnp.eye(block.size, dtype=y.dtype)
            lus.append(lu_factor(eye - gamma_h * block_jac))
        arrays, static = eqx.partition(field, eqx.is_array)
        return BlockFactorisation(field_arrays=arrays, field_static=static, z=y,
                                  gamma_h=gamma_h, lus=tuple(lus), blocks=self.blocks)


def with_blocks(solver: AbstractSolver, blocks: list[Block]) -> AbstractSolver:
    """``solver`` solving its stiff linear systems block by block (explicit ones unchanged).

    Blocks of size zero (no parameters differentiated, say) are dropped.
    """
    if not isinstance(solver, AbstractStiffFamily):
        return solver
    kept, index = [], {}
    for k, block in enumerate(blocks):
        if block.size:
            index[k] = len(kept)
            kept.append(block)
    kept = [dataclasses.replace(b, of=index[b.of]) if b.diagonal == "columns" else b
            for b in kept]
    return dataclasses.replace(solver, linear_solver=BlockTriangularSolver(tuple(kept)))
