"""Coefficients of Rosenbrock (linearly implicit) methods, as validated data.

A Rosenbrock method with ``s`` stages is written, as in Hairer & Wanner (Solving ODEs II,
IV.7, eq. 7.25) and in their code RODAS, in the variables ``U_i`` that need no products
with the Jacobian ``J = df/dy(t_n, y_n)``:

    (I - gamma h J) U_i = gamma h f(t_n + c_i h, Y_i) + gamma sum_{j<i} C_ij U_j
                          + gamma d_i h^2 df/dt(t_n, y_n),
    Y_i = y_n + sum_{j<i} a_ij U_j,      y_{n+1} = y_n + sum_i m_i U_i,

with the error estimate ``sum_i m_error_i U_i`` (``m_error = m - m_embedded``).  (RODAS
divides by ``gamma h`` instead: ``(1/(gamma h) - J) U_i = f + sum C_ij/h U_j + d_i h f_t``.)
One LU factorisation of ``I - gamma h J`` serves every stage.

The classical form of the same method, ``(alpha, Gamma, b)`` with ``Gamma`` lower triangular
and ``diag(Gamma) = gamma``, follows from ``Gamma^{-1} = diag(1/gamma) - C``,
``alpha = a Gamma``, ``b = m Gamma``; the nodes are ``c = alpha 1`` and ``d = Gamma 1``.
**Dense output** (Hairer & Wanner's RODAS form): ``y(t_n + theta h) = y_n + sum_i w_i(theta)
U_i`` with ``w_i(theta) = theta (m_i + (1 - theta) sum_r theta^r H_ri)``, so ``w(0) = 0`` and
``w(1) = m``.  In the classical form its weights are ``b(theta) = w(theta) Gamma``; order
``q`` needs the continuous order conditions, e.g. ``sum_j b_j(theta) = theta`` and
``sum_j b_j(theta) beta_j = theta^2 / 2 - gamma theta`` (``beta = c + d - gamma``).  Rodas4
and Rodas5 use the published ``H`` (orders 3 and 4); for Rodas3, which has none, the row
``H = (3, -1, 0, 0)`` is the one on ``U_1, U_2`` that solves ``H Gamma 1 = 0`` and ``H Gamma
beta = -1/2`` (order 2).  ``tests/test_rosenbrock.py`` checks the orders by convergence.

`RosenbrockTableau` checks those sums on creation, and ``tests/test_rosenbrock_tableaus.py``
checks the classical form against the order conditions of Rosenbrock methods (rooted trees,
Hairer & Wanner II, Theorem IV.7.?: Butcher's with ``alpha + Gamma`` on the edge below a
vertex with one child), so a mistyped digit cannot pass unnoticed.  Coefficients are as
published (16 significant digits, except Rodas3's exact rationals).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class RosenbrockTableau:
    """The coefficients of a Rosenbrock method in the ``U`` form (module docstring).

    Attributes:
        name: human-readable name.
        gamma: the diagonal ``gamma`` of ``Gamma``.
        a: ``(s, s)`` strictly lower-triangular stage matrix (``Y_i`` from ``U_j``).
        C: ``(s, s)`` strictly lower-triangular coupling of earlier ``U_j`` into stage ``i``.
        c: ``(s,)`` stage nodes (times ``t_n + c_i h``).
        d: ``(s,)`` weights of ``h^2 df/dt`` (the row sums of ``Gamma``).
        m: ``(s,)`` weights of the propagated solution.
        m_error: ``(s,)`` weights of the error estimate, ``m - m_embedded``.
        order, error_order: orders of the propagated and the embedded solution.
        dense: ``(r, s)`` coefficients ``H`` of the continuous extension (module docstring),
            or ``None`` if the method has none.
        dense_order: the order of the continuous extension (uniformly in ``theta``).
    """

    name: str
    gamma: float
    a: np.ndarray
    C: np.ndarray
    c: np.ndarray
    d: np.ndarray
    m: np.ndarray
    m_error: np.ndarray
    order: int
    error_order: int
    dense: np.ndarray | None = None
    dense_order: int = 0

    def __post_init__(self) -> None:
        arrays = {}
        keys = ("a", "C", "c", "d", "m", "m_error") + (() if self.dense is None else ("dense",))
        for key in keys:
            x = np.array(getattr(self, key), dtype=np.float64)
            x.setflags(write=False)
            arrays[key] = x
        s = arrays["m"].shape[0]
        for key in ("a", "C"):
            if arrays[key].shape != (s, s):
                raise ValueError(f"{self.name}: {key} must be ({s}, {s})")
            if np.any(np.triu(arrays[key]) != 0):
                raise ValueError(f"{self.name}: {key} must be strictly lower triangular")
        for key in ("c", "d", "m_error"):
            if arrays[key].shape != (s,):
                raise ValueError(f"{self.name}: {key} must have shape ({s},)")
        if "dense" in arrays and (arrays["dense"].ndim != 2 or arrays["dense"].shape[1] != s):
            raise ValueError(f"{self.name}: dense must be (r, {s})")
        if ("dense" in arrays) != (1 <= self.dense_order <= self.order):
            raise ValueError(f"{self.name}: a continuous extension needs 1 <= dense_order "
                             "<= order (and dense_order = 0 without one)")
        if not all(np.all(np.isfinite(x)) for x in arrays.values()) or not self.gamma > 0:
            raise ValueError(f"{self.name}: coefficients must be finite and gamma > 0")
        for key, x in arrays.items():
            object.__setattr__(self, key, x)
        alpha, big_gamma, b = self.alpha, self.big_gamma, self.b
        # Published to 16 digits: the sums hold to round-off of the largest terms.
        scale = 1e-13 * max(1.0, np.abs(self.a).max(), np.abs(self.C).max())
        if np.any(np.abs(alpha.sum(axis=1) - self.c) > scale):
            raise ValueError(f"{self.name}: c must be the row sums of alpha = a Gamma")
        if np.any(np.abs(big_gamma.sum(axis=1) - self.d) > scale):
            raise ValueError(f"{self.name}: d must be the row sums of Gamma")
        if abs(b.sum() - 1) > scale or abs(self.m_error @ big_gamma @ np.ones(s)) > scale:
            raise ValueError(f"{self.name}: b = m Gamma must sum to 1, the error weights to 0")

    @property
    def num_stages(self) -> int:
        return self.m.shape[0]

    def dense_weights(self, theta: float) -> np.ndarray:
        """``w(theta)`` ``(s,)``: the continuous extension is ``y_n + sum_i w_i(theta) U_i``."""
        if self.dense is None:
            raise ValueError(f"{self.name} has no continuous extension")
        inner = np.zeros(self.num_stages)
        for row in self.dense[::-1]:
            inner = row + theta * inner
        return theta * (self.m + (1 - theta) * inner)

    @property
    def big_gamma(self) -> np.ndarray:
        """``Gamma``: lower triangular, ``gamma`` on the diagonal."""
        s = self.num_stages
        return np.linalg.inv(np.eye(s) / self.gamma - self.C)

    @property
    def alpha(self) -> np.ndarray:
        """``alpha = a Gamma`` (strictly lower triangular): the classical stage matrix."""
        return self.a @ self.big_gamma

    @property
    def b(self) -> np.ndarray:
        """``b = m Gamma``: the classical weights of the propagated solution."""
        return self.m @ self.big_gamma

    @property
    def b_embedded(self) -> np.ndarray:
        """The classical weights of the embedded solution."""
        return (self.m - self.m_error) @ self.big_gamma

    @property
    def estimate_sees_time_changes(self) -> bool:
        """Whether ``b - b_embedded`` weights stages at more than one time ``c``.

        If it weights only stages at one time (Rodas5: stages 6-8, all at ``t_n + h``), a
        change of ``f`` in ``t`` alone between the stage times (a switch) enters both
        solutions alike, to first order, and the error estimate does not see it.
        """
        difference = np.abs(self.b - self.b_embedded)
        times = self.c[difference > 1e-12 * difference.max()]
        return bool(times.size and np.ptp(times) > 1e-12)


def _lower(rows: Sequence[Sequence[float]]) -> np.ndarray:
    """The ``(s, s)`` strictly lower-triangular matrix from its ragged rows 2..s."""
    s = len(rows) + 1
    out = np.zeros((s, s))
    for i, row in enumerate(rows, start=1):
        out[i, : len(row)] = row
    return out


def _stiffly_accurate(
    name: str, gamma: float, a: list[list[float]], C: list[list[float]], c: list[float],
    d: list[float], order: int, error_order: int, dense: list[list[float]] | None = None,
    dense_order: int = 0,
) -> RosenbrockTableau:
    """A RODAS-type method, stiffly accurate: the stages after the first at ``c = 1`` add
    one ``U`` each.

    ``a`` lists the rows of stages 2 .. ``k``, the first with ``c = 1``; each later stage
    ``i`` starts from ``Y_{i-1} + U_{i-1}``, the last one (``Y_s``, without ``U_s``) is the
    embedded solution and ``y_{n+1} = Y_s + U_s``, so the error estimate is ``U_s`` itself.
    ``dense`` lists the rows of ``H``, each padded with zeros to ``s`` entries.
    """
    rows = [list(r) for r in a]
    s = len(c)
    while len(rows) < s - 1:
        rows.append(rows[-1] + [1.0])
    m = np.array(rows[-1] + [1.0])
    m_error = np.zeros(s)
    m_error[-1] = 1.0
    return RosenbrockTableau(
        name=name, gamma=gamma, a=_lower(rows), C=_lower(C), c=np.array(c), d=np.array(d),
        m=m, m_error=m_error, order=order, error_order=error_order,
        dense=None if dense is None else np.array([list(r) + [0.0] * (s - len(r)) for r in dense]),
        dense_order=dense_order,
    )


RODAS3 = _stiffly_accurate(
    "Rodas3",
    gamma=0.5,
    a=[[0.0], [2.0, 0.0]],
    C=[[4.0], [1.0, -1.0], [1.0, -1.0, -8.0 / 3.0]],
    c=[0.0, 0.0, 1.0, 1.0],
    d=[0.5, 1.5, 0.0, 0.0],
    order=3,
    error_order=2,
    # No continuous extension is published: derived here, the one row H supported on
    # U_1, U_2 that meets the continuous conditions of order 2 (module docstring).
    dense=[[3.0, -1.0]],
    dense_order=2,
)
"""Rodas3 (Sandu, Verwer, Blom, Spee, Carmichael, Potra 1997): order 3(2), 4 stages,
stiffly accurate and L-stable; the cheap pair for loose tolerances."""

RODAS4 = _stiffly_accurate(
    "Rodas4",
    gamma=0.25,
    a=[
        [1.544],
        [0.9466785280815826, 0.2557011698983284],
        [3.314825187068521, 2.896124015972201, 0.9986419139977817],
        [1.221224509226641, 6.019134481288629, 12.53708332932087, -0.6878860361058950],
    ],
    C=[
        [-5.6688],
        [-2.430093356833875, -0.2063599157091915],
        [-0.1073529058151375, -9.594562251023355, -20.47028614809616],
        [7.496443313967647, -10.24680431464352, -33.99990352819905, 11.70890893206160],
        [8.083246795921522, -7.981132988064893, -31.52159432874371, 16.31930543123136,
         -6.058818238834054],
    ],
    c=[0.0, 0.386, 0.21, 0.63, 1.0, 1.0],
    d=[0.25, -0.1043, 0.1035, -0.0362, 0.0, 0.0],
    order=4,
    error_order=3,
    # Hairer & Wanner's RODAS (METH = 1): their D2j, D3j.
    dense=[
        [10.12623508344586, -7.487995877610167, -34.80091861555747, -7.992771707568823,
         1.025137723295662],
        [-0.6762803392801253, 6.087714651680015, 16.43084320892478, 24.76722511418386,
         -6.594389125716872],
    ],
    dense_order=3,
)
"""Rodas4 (Hairer & Wanner, Solving ODEs II, IV.7, Table 7.?; their code RODAS): order
4(3), 6 stages, stiffly accurate and L-stable."""

RODAS5 = _stiffly_accurate(
    "Rodas5",
    gamma=0.19,
    a=[
        [2.0],
        [3.040894194418781, 1.041747909077569],
        [2.576417536461461, 1.622083060776640, -0.9089668560264532],
        [2.760842080225597, 1.446624659844071, -0.3036980084553738, 0.2877498600325443],
        [-14.09640773051259, 6.925207756232704, -41.47510893210728, 2.343771018586405,
         24.13215229196062],
    ],
    C=[
        [-10.31323885133993],
        [-21.04823117650003, -7.234992135176716],
        [32.22751541853323, -4.943732386540191, 19.44922031041879],
        [-20.69865579590063, -8.816374604402768, 1.260436877740897, -0.7495647613787146],
        [-46.22004352711257, -17.49534862857472, -289.6389582892057, 93.60855400400906,
         318.3822534212147],
        [34.20013733472935, -14.15535402717690, 57.82335640988400, 25.83362985412365,
         1.408950972071624, -6.551835421242162],
        [42.57076742291101, -13.80770672017997, 93.98938432427124, 18.77919633714503,
         -31.58359187223370, -6.685968952921985, -5.810979938412932],
    ],
    c=[0.0, 0.38, 0.3878509998321533, 0.4839718937873840, 0.4570477008819580, 1.0, 1.0, 1.0],
    d=[0.19, -0.1823079225333714636, -0.319231832186874912, 0.3449828624725343,
       -0.377417564392089818, 0.0, 0.0, 0.0],
    order=5,
    error_order=4,
    # As published with OrdinaryDiffEq.jl's Rodas5 (its H matrix; entries of size 1e-13
    # there, zeros in exact arithmetic, are kept as published).
    dense=[
        [27.354592673333357, -6.925207756232857, 26.40037733258859, 0.5635230501052979,
         -4.699151156849391, -1.6008677469422725, -1.5306074446748028, -1.3929872940716344],
        [44.19024239501722, 1.3677947663381929e-13, 202.93261852171622, -35.5669339789154,
         -181.91095152160645, 3.4116351403665033, 2.5793540257308067, 2.2435122582734066],
        [-44.0988150021747, -5.755396159656812e-13, -181.26175034586677, 56.99302194811676,
         183.21182741427398, -7.480257918273637, -5.792426076169686, -5.32503859794143],
    ],
    dense_order=4,
)
"""Rodas5 (Di Marzo 1993; Hairer & Wanner's RODAS5): order 5(4), 8 stages, stiffly
accurate and L-stable; the default stiff solver for tight tolerances."""

ALL_ROSENBROCK_TABLEAUS = (RODAS3, RODAS4, RODAS5)
