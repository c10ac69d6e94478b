"""`identifiability`: which parameters can be estimated from the observed states?

From a sensitivity trajectory ``S[k, j, i] = d y_j(t_k) / d p_i`` the rows of all times and
states are stacked into one ``(K N) x P`` matrix ``S``, scaled, and analysed (Brun, Reichert &
Künsch, *Water Resources Research* 37, 2001, "Practical identifiability analysis of large
environmental simulation models"):

- **scaling** (``scale=``): ``"normalised"`` (default) uses ``(p_i / y_j) dy_j/dp_i``, the
  relative change of an output per relative change of a parameter, dimensionless;
  ``"parameter"`` uses ``p_i dy_j/dp_i`` (no division by the state, for states that pass
  through zero); ``"none"`` uses ``S`` as it is.
- **singular values** of the scaled matrix, its **rank** (singular values above
  ``rank_rtol`` times the largest) and its **condition number**.  A rank below ``P`` means
  that some direction in parameter space does not change the observations at all (to the
  accuracy of the sensitivities): those parameters cannot be estimated jointly, whatever the
  data.
- the **collinearity index** of every parameter subset ``K`` of size 2 to
  ``max_subset_size``: ``gamma_K = 1 / sqrt(lambda_min(S_K^T S_K))`` with the columns of
  ``S_K`` scaled to unit length.  ``gamma_K`` is the factor by which a change in the
  parameters of ``K`` can be compensated by the others in ``K``: a change of the
  observations of relative size ``1/gamma_K`` is enough to hide a unit change of the
  parameters.  Brun et al. call subsets with ``gamma`` above 10–15 poorly identifiable;
  exactly collinear columns give ``inf`` (or ``~1/sqrt(eps)``).
- **influence** of each parameter: ``delta_msqr_i = ||S[:, i]||_2 / sqrt(K N)``, the
  root-mean-square scaled sensitivity; parameters are ranked by it.  For a 3-D ``S`` the
  ranking per state (root mean square over time) is kept too: the influential parameters
  usually differ between states.

Everything is computed with NumPy, on the host: this is a diagnostic of a finished
sensitivity computation, not something to differentiate.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any, Literal

import jax
import numpy as np

from ._check_gradient import _component_names
from ._forward_sensitivity import SensitivityTrajectory

# Above this collinearity index a subset is reported as poorly identifiable (Brun et al.).
COLLINEARITY_THRESHOLD = 15.0
# The printed report ranks the parameters for this many states at most (a discretised PDE
# has thousands); `Identifiability.state_influence` holds every row.
MAX_STATES_PRINTED = 20


@dataclasses.dataclass(frozen=True)
class Identifiability:
    """The result of `identifiability`; ``print`` it for a report.

    Attributes:
        names: the parameter names.
        scale: the scaling used.
        singular_values: of the scaled, stacked sensitivity matrix, descending.
        rank: the number of singular values above ``rank_rtol`` times the largest.
        rank_rtol: that relative tolerance.
        condition_number: largest over smallest singular value (``inf`` when singular).
        influence: ``delta_msqr`` of each parameter (order of ``names``).
        ranking: parameter indices by decreasing influence.
        state_influence: ``(N, P)`` root-mean-square scaled sensitivity per state, or
            ``None`` when ``S`` was given as a 2-D matrix.
        subsets: parameter index tuples, by decreasing collinearity index.
        collinearity: the collinearity index of each of ``subsets``.
    """

    names: tuple[str, ...]
    scale: str
    singular_values: np.ndarray
    rank: int
    rank_rtol: float
    condition_number: float
    influence: np.ndarray
    ranking: tuple[int, ...]
    state_influence: np.ndarray | None
    subsets: tuple[tuple[int, ...], ...]
    collinearity: np.ndarray

    @property
    def identifiable(self) -> bool:
        """Full rank and no subset above the collinearity threshold (15)."""
        return self.rank == len(self.names) and not np.any(
            self.collinearity > COLLINEARITY_THRESHOLD
        )

    def collinearity_of(self, subset: Sequence[int | str]) -> float:
        """The collinearity index of a subset given by indices or names."""
        idx = tuple(sorted(self.names.index(i) if isinstance(i, str) else i for i in subset))
        return float(self.collinearity[self.subsets.index(idx)])

    def __str__(self) -> str:
        p = len(self.names)
        sv = ", ".join(f"{s:.3e}" for s in self.singular_values)
        lines = [
            f"Identifiability of {p} parameters ({self.scale} sensitivities)",
            f"  singular values: {sv}",
            f"  rank {self.rank} of {p} (rtol {self.rank_rtol:.1e}), "
            f"condition number {self.condition_number:.3e}",
            "  influence (root-mean-square scaled sensitivity):",
        ]
        for i in self.ranking:
            lines.append(f"    {self.names[i]:<12} {self.influence[i]:.3e}")
        if self.state_influence is not None:
            lines.append("  ranking per state:")
            for j, row in enumerate(self.state_influence[:MAX_STATES_PRINTED]):
                order = np.argsort(-row, kind="stable")
                ranked = " > ".join(f"{self.names[i]} ({row[i]:.2e})" for i in order)
                lines.append(f"    y[{j}]: {ranked}")
            hidden = len(self.state_influence) - MAX_STATES_PRINTED
            if hidden > 0:
                lines.append(f"    ... and {hidden} more states (`.state_influence` holds "
                             "every row)")
        lines.append(
            f"  most collinear subsets (index > {COLLINEARITY_THRESHOLD:g}: poorly identifiable):"
        )
        for subset, gamma in list(zip(self.subsets, self.collinearity))[:5]:
            label = "{" + ", ".join(self.names[i] for i in subset) + "}"
            flag = "  <- not identifiable" if gamma > COLLINEARITY_THRESHOLD else ""
            lines.append(f"    {label:<30} {gamma:.3e}{flag}")
        verdict = "identifiable" if self.identifiable else "NOT identifiable"
        lines.append(f"  verdict: the parameters are jointly {verdict}.")
        return "\n".join(lines)


def _collinearity_index(columns: np.ndarray) -> float:
    """``1 / sqrt(lambda_min)`` of the unit columns' Gram matrix; ``inf`` where
    ``lambda_min`` is within round-off of zero (``k eps lambda_max``).  Below that it is
    noise, and a subset came out singular (inf) while its superset, whose smallest
    eigenvalue can only be smaller, came out at 1.9e8 (a user-acceptance find)."""
    gram = columns.T @ columns
    eigenvalues = np.linalg.eigvalsh(gram)
    floor = gram.shape[0] * float(np.finfo(gram.dtype).eps) * float(eigenvalues[-1])
    lam_min = float(eigenvalues[0])
    return float("inf") if lam_min <= floor else 1.0 / np.sqrt(lam_min)


def _stacked_parameters(dargs: Any, ys: Any, params: Any, names: Any
                        ) -> tuple[Any, Any, Any]:
    """A trajectory's ``dargs`` as one ``(K, N, P)`` array, ``params`` as ``(P,)`` and
    names from the paths (unless given), when ``args`` was a pytree; else unchanged.

    A chemist's ``args={"theta": theta, "Tc": 340.0}`` failed inside NumPy before
    ("float() argument must be a string or a real number, not 'dict'")."""
    leaves = jax.tree_util.tree_flatten_with_path(dargs)[0]
    if len(leaves) == 1 and not leaves[0][0]:
        return dargs, params, names  # ``args`` was one array
    if not isinstance(ys, jax.Array | np.ndarray):
        raise ValueError(
            "identifiability: a SensitivityTrajectory whose state and args are both pytrees "
            "is not supported; pass `S` as an array (K, N, P) and `ys` as (K, N).")
    state_dims = np.ndim(ys)
    if params is not None:
        try:  # the args themselves, Python numbers among them (None in ``dargs``) left out
            params = jax.tree.map(lambda d, p: None if d is None else p, dargs, params,
                                  is_leaf=lambda x: x is None)
        except ValueError:
            pass  # another structure: refused below
        if jax.tree.structure(params) != jax.tree.structure(dargs):
            raise ValueError(
                "identifiability: `params` must have the structure of the trajectory's "
                f"args, {jax.tree.structure(dargs)}, got {jax.tree.structure(params)}: pass "
                "the args the trajectory was computed at (to analyse only some of them, "
                "pass `S=traj.dargs['theta']`, `ys=traj.ys` and `params=theta`).")
        params = np.concatenate([np.ravel(np.asarray(p, dtype=float))
                                 for p in jax.tree.leaves(params)])
    if names is None:  # each leaf's own shape, behind the state's axes
        names = _component_names(
            jax.tree.map(lambda leaf: np.empty(np.shape(leaf)[state_dims:]), dargs))
    stacked = np.concatenate(
        [np.reshape(np.asarray(leaf, dtype=float), (*np.shape(ys), -1)) for _, leaf in leaves],
        axis=-1)
    return stacked, params, names


def identifiability(
    S: Any,
    *,
    params: Any = None,
    ys: Any = None,
    scale: Literal["normalised", "parameter", "none"] = "normalised",
    names: Sequence[str] | None = None,
    rank_rtol: float | None = None,
    max_subset_size: int = 4,
) -> Identifiability:
    """Identifiability and influence of parameters from their sensitivity trajectory.

    Arguments:
        S: ``dy/dp`` at the observation times, shape ``(K, N, P)`` (times, states,
            parameters; e.g. ``jax.jacfwd`` of a solve with ``saveat`` and
            ``sensitivity=ja.DiscreteForward()``), or ``(M, P)`` already stacked, or a
            `SensitivityTrajectory` (its ``dargs``; its ``ys`` are then used for ``ys``).
            Its ``args`` may be a pytree (``{"theta": theta, "Tc": 340.0}``): every
            element of every leaf is a parameter, in the order of ``jax.tree.leaves``,
            named by its path (``['theta'][2]``) unless ``names`` are given.
        params: the parameter values, shape ``(P,)``, or with a `SensitivityTrajectory`
            the ``args`` it was computed at; needed unless ``scale="none"``.
        ys: the states at the observation times, ``S.shape[:-1]``; needed for
            ``scale="normalised"``.
        scale: ``"normalised"`` (default), ``"parameter"`` or ``"none"``; see the module
            docstring.
        names: parameter names for the report (default ``p0``, ``p1``, ...).
        rank_rtol: relative tolerance of the rank (default ``sqrt(eps)``; sensitivities from
            a solve are only accurate to about its ``rtol``, so pass that when it is larger).
        max_subset_size: largest subset whose collinearity index is computed (all subsets
            of sizes 2 to this: ``sum_k C(P, k)`` of them, so keep ``P`` modest).

    Returns:
        An `Identifiability`; ``print`` it for a readable report.

    Rows with a non-finite entry after scaling (a normalised sensitivity where ``y_j = 0``,
    e.g. at ``t0`` for a species that starts at zero) are left out.
    """
    if isinstance(S, SensitivityTrajectory):
        if ys is None:
            ys = S.ys
        S, params, names = _stacked_parameters(S.dargs, ys, params, names)
    S = np.asarray(S, dtype=float)
    if S.ndim not in (2, 3):
        raise ValueError(f"`S` must have shape (K, N, P) or (M, P), got {S.shape}.")
    p = S.shape[-1]
    if scale not in ("normalised", "parameter", "none"):
        raise ValueError(f"`scale` must be 'normalised', 'parameter' or 'none', got {scale!r}.")
    if scale != "none":
        if params is None:
            raise ValueError(f"`scale={scale!r}` needs `params`.")
        params = np.asarray(params, dtype=float)
        if params.shape != (p,):
            raise ValueError(f"`params` must have shape ({p},), got {params.shape}.")
        S = S * params
        if scale == "normalised":
            if ys is None:
                raise ValueError(
                    "`scale='normalised'` needs `ys` (or pass a SensitivityTrajectory)."
                )
            ys = np.asarray(ys, dtype=float)
            if ys.shape != S.shape[:-1]:
                raise ValueError(f"`ys` must have shape {S.shape[:-1]}, got {ys.shape}.")
            with np.errstate(divide="ignore", invalid="ignore"):
                S = S / ys[..., None]
    names = tuple(names) if names is not None else tuple(f"p{i}" for i in range(p))
    if len(names) != p:
        raise ValueError(f"`names` must have {p} entries, got {len(names)}.")
    if not 2 <= max_subset_size:
        raise ValueError(f"`max_subset_size` must be at least 2, got {max_subset_size}.")

    state_influence = None
    if S.ndim == 3:
        masked = np.where(np.isfinite(S), S, np.nan)
        state_influence = np.sqrt(np.nanmean(masked**2, axis=0))
    M = S.reshape(-1, p)
    M = M[np.all(np.isfinite(M), axis=1)]
    if M.shape[0] == 0:
        raise ValueError("no finite rows in the scaled sensitivity matrix.")

    eps = float(np.finfo(M.dtype).eps)
    rank_rtol = float(np.sqrt(eps)) if rank_rtol is None else float(rank_rtol)
    sv = np.linalg.svd(M, compute_uv=False)
    rank = int(np.sum(sv > rank_rtol * sv[0])) if sv[0] > 0 else 0
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf")

    norms = np.linalg.norm(M, axis=0)
    influence = norms / np.sqrt(M.shape[0])
    ranking = tuple(int(i) for i in np.argsort(-influence, kind="stable"))
    with np.errstate(divide="ignore", invalid="ignore"):
        unit = np.where(norms > 0, M / norms, 0.0)

    subsets, gammas = [], []
    for size in range(2, min(max_subset_size, p) + 1):
        for subset in itertools.combinations(range(p), size):
            subsets.append(subset)
            gammas.append(_collinearity_index(unit[:, subset]))
    order = np.argsort(-np.asarray(gammas), kind="stable")
    return Identifiability(
        names=names, scale=scale, singular_values=sv, rank=rank, rank_rtol=rank_rtol,
        condition_number=cond, influence=influence, ranking=ranking,
        state_influence=state_influence, subsets=tuple(subsets[i] for i in order),
        collinearity=np.asarray(gammas)[order],
    )
