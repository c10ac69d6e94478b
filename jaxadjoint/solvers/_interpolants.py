"""Continuous extensions (dense output) of the shipped Runge–Kutta methods, as validated data.

A step of size ``h`` from ``(t_n, y_n)`` computes the stages ``k_1 .. k_s`` of its tableau. An
interpolant may add ``e`` extra stages ``k_{s+1} .. k_{s+e}``, explicit in the same way
(``Y_m = y_n + h sum_{j<m} a[m, j] k_j`` at ``t_n + c_m h``), and then

    y(t_n + theta h) = y_n + h * sum_{m=1}^{s+e} b_m(theta) k_m,
    b_m(theta) = sum_{j=1}^{D} W[m, j-1] theta**j,

with ``b_m(1) = b_m`` for the main stages and ``0`` for the extra ones, so ``theta = 0`` gives
``y_n`` and ``theta = 1`` gives ``y_{n+1}``.  This is a Runge–Kutta step whose weights depend on
``theta``, so the discrete adjoint differentiates it exactly, as it does a step: the cotangent
of ``k_m`` is ``h b_m(theta)`` times that of the interpolated value.

Every solver gets one (``interpolant_for``): Dormand–Prince's and Tsitouras' own; Verner's
published interpolants, with their extra stages (Vern7's, published as of order 7, has order 6);
for Cash–Karp and Fehlberg45, which publish none, a fourth-order quartic derived here with the
one extra stage ``f(t_{n+1}, y_{n+1})``; and cubic Hermite interpolation for the rest.
Coefficients are exact rationals or Verner's 40-digit decimals, rounded to float64 once;
``tests/test_interpolants.py`` checks each against the order conditions of continuous
Runge–Kutta methods, ``sum_m b_m(theta) Phi_m(tau) = theta^|tau| / gamma(tau)``.  Evaluate the
weights with ``weights_at``, which loses far less to round-off than the monomial form.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from .._matmul import matmul
from . import _tableaus as tab
from ._tableaus import ButcherTableau, _sum_tolerance


def _to_bernstein(degree: int) -> list[list[Fraction]]:
    """``T`` with ``W @ T = B``: monomial coefficients of ``theta .. theta^D`` to Bernstein.

    ``theta^j = sum_{i >= j} (C(i, j) / C(D, j)) C(D, i) theta^i (1 - theta)^(D - i)``.
    """
    return [
        [
            Fraction(math.comb(i, j), math.comb(degree, j)) if i >= j else Fraction(0)
            for i in range(degree + 1)
        ]
        for j in range(1, degree + 1)
    ]


def _exact_matmul(
    x: Sequence[Sequence[Fraction]], y: Sequence[Sequence[Fraction]]
) -> list[list[Fraction]]:
    return [[sum((a * b for a, b in zip(row, col)), Fraction(0)) for col in zip(*y)] for row in x]


def _floats_2d(rows: Sequence[Sequence[Fraction]]) -> np.ndarray:
    return np.array([[float(x) for x in row] for row in rows], dtype=np.float64)


@dataclasses.dataclass(frozen=True, eq=False)
class Interpolant:
    """A continuous extension of a Runge–Kutta method, in the form of the module docstring.

    Attributes:
        name: human-readable name, used in error messages.
        tableau: the method it extends (``s`` stages).
        order: ``p`` such that the local error is ``O(h^(p+1))`` uniformly in ``theta``.
        a_extra: ``(e, s + e)`` rows of the extra stages; row ``i`` is stage ``s + i``
            (0-based) and reads only stages ``< s + i``.  Shape ``(0, s)`` when ``e == 0``.
        c_extra: ``(e,)`` nodes of the extra stages, the row sums of ``a_extra``.
        weights: ``(s + e, D)`` matrix ``W``: ``b_m(theta) = sum_j W[m, j-1] theta**j``.
        kind: which construction, e.g. ``"cubic Hermite"``.
        bernstein: ``(s + e, D + 1)`` the same polynomials in the Bernstein basis,
            ``b_m(theta) = sum_i B[m, i] C(D, i) theta^i (1 - theta)^(D - i)``, which
            ``weights_at`` evaluates: the monomial coefficients of Verner's interpolants reach
            ``1.4e6`` while the polynomials stay below ``60`` on ``[0, 1]``, so this basis
            loses far less to round-off.  Computed from the exact coefficients by the builders
            below; from ``weights`` if not given.  Checked against ``weights``.
    """

    name: str
    tableau: ButcherTableau
    order: int
    a_extra: np.ndarray
    c_extra: np.ndarray
    weights: np.ndarray
    kind: str
    bernstein: np.ndarray | None = None

    def __post_init__(self) -> None:
        # Private read-only copies, as for the tableaus: these are shared constants.
        a = np.array(self.a_extra, dtype=np.float64)
        c = np.array(self.c_extra, dtype=np.float64)
        w = np.array(self.weights, dtype=np.float64)
        for array in (a, c, w):
            array.setflags(write=False)
        s = self.tableau.num_stages
        if a.ndim != 2 or a.shape[1] != s + a.shape[0]:
            raise ValueError(f"{self.name}: a_extra must be (e, s + e) with s = {s}")
        e = a.shape[0]
        if c.shape != (e,):
            raise ValueError(f"{self.name}: c_extra must have shape ({e},)")
        if w.ndim != 2 or w.shape[0] != s + e or w.shape[1] < 1:
            raise ValueError(f"{self.name}: weights must be (s + e, D) = ({s + e}, D), D >= 1")
        if not all(np.all(np.isfinite(x)) for x in (a, c, w)):
            raise ValueError(f"{self.name}: coefficients must be finite")
        if np.any(np.triu(a, k=s) != 0):
            raise ValueError(
                f"{self.name}: extra stage s + i may read only stages < s + i (explicit)"
            )
        if np.any(np.abs(a.sum(axis=1) - c) > _sum_tolerance(a, axis=1)):
            raise ValueError(f"{self.name}: c_extra must equal the row sums of a_extra")
        # b_m(1) = sum_j W[m, j]: the tableau's weights, then zeros for the extra stages.
        b_end = np.concatenate([self.tableau.b, np.zeros(e)])
        if np.any(np.abs(w.sum(axis=1) - b_end) > _sum_tolerance(w, axis=1)):
            raise ValueError(f"{self.name}: b(1) must equal the tableau's b (and 0 for extras)")
        # sum_m b_m(theta) = theta: column sums (1, 0, ..., 0).
        unit = np.zeros(w.shape[1])
        unit[0] = 1
        if np.any(np.abs(w.sum(axis=0) - unit) > _sum_tolerance(w, axis=0)):
            raise ValueError(f"{self.name}: the weights must sum to theta")
        if not 1 <= self.order <= self.tableau.order:
            raise ValueError(
                f"{self.name}: order must be between 1 and the tableau's order {self.tableau.order}"
            )
        # The Bernstein form: exact from W's floats when not given, else checked against it.
        to_bernstein = _to_bernstein(w.shape[1])
        if self.bernstein is None:
            bern = _floats_2d(
                _exact_matmul([[Fraction(x) for x in row] for row in w], to_bernstein)
            )
        else:
            bern = np.array(self.bernstein, dtype=np.float64)
            if bern.shape != (s + e, w.shape[1] + 1) or not np.all(np.isfinite(bern)):
                raise ValueError(f"{self.name}: bernstein must be finite, (s + e, D + 1)")
            t = np.array([[float(x) for x in row] for row in to_bernstein])
            if np.any(np.abs(w @ t - bern) > 1e-14 * np.maximum(1.0, np.abs(w) @ np.abs(t))):
                raise ValueError(f"{self.name}: bernstein and weights are different polynomials")
        bern.setflags(write=False)
        object.__setattr__(self, "a_extra", a)
        object.__setattr__(self, "c_extra", c)
        object.__setattr__(self, "weights", w)
        object.__setattr__(self, "bernstein", bern)

    @property
    def num_extra_stages(self) -> int:
        return self.a_extra.shape[0]

    @property
    def num_stages(self) -> int:
        """``s + e``: main and extra stages."""
        return self.weights.shape[0]

    @property
    def degree(self) -> int:
        """``D``, the degree of the weight polynomials."""
        return self.weights.shape[1]

    @property
    def end_stage(self) -> int | None:
        """The (0-based) stage that evaluates ``f(t_{n+1}, y_{n+1})``, if one does.

        That is the FSAL stage of an FSAL tableau, or an extra stage whose row is ``b`` at
        ``c = 1``.  Its value is the next step's first stage, which a solver may reuse.
        """
        s = self.tableau.num_stages
        if self.tableau.fsal:
            return s - 1
        for i in range(self.num_extra_stages):
            row = self.a_extra[i]
            if (
                self.c_extra[i] == 1
                and np.array_equal(row[:s], self.tableau.b)
                and not any(row[s:])
            ):
                return s + i
        return None


def _same_method(t1: ButcherTableau, t2: ButcherTableau) -> bool:
    """The same tableau object, or one with the same coefficients."""
    return t1 is t2 or all(np.array_equal(getattr(t1, x), getattr(t2, x)) for x in "abc")


def extended_a(tableau: ButcherTableau, interp: Interpolant) -> tuple[np.ndarray, np.ndarray]:
    """The ``(s + e, s + e)`` stage matrix and ``(s + e,)`` nodes of main and extra stages.

    Raises:
        ValueError: if ``interp`` does not extend ``tableau``.
    """
    if not _same_method(interp.tableau, tableau):
        raise ValueError(f"{interp.name} extends {interp.tableau.name}, not {tableau.name}")
    s, n = tableau.num_stages, interp.num_stages
    a = np.zeros((n, n))
    a[:s, :s] = tableau.a
    a[s:] = interp.a_extra
    c = np.concatenate([tableau.c, interp.c_extra])
    a.setflags(write=False)
    c.setflags(write=False)
    return a, c


def live_interpolant_stages(interp: Interpolant) -> tuple[int, ...]:
    """Stages (0-based, main or extra) whose value reaches the interpolated solution.

    Stage ``m`` is live if ``b_m(theta)`` is not identically zero or a later live stage reads
    it.  The others (e.g. Verner's error-only stages) need not be computed for interpolation.
    """
    a, _ = extended_a(interp.tableau, interp)
    n = interp.num_stages
    live = [False] * n
    for m in reversed(range(n)):
        live[m] = bool(np.any(interp.weights[m] != 0)) or any(
            live[q] and a[q, m] != 0 for q in range(m + 1, n)
        )
    return tuple(m for m in range(n) if live[m])


def weights_at(
    interp: Interpolant, theta: float | np.ndarray | jax.Array, *, derivative: bool = False
) -> np.ndarray | jax.Array:
    """``b(theta)``, shape ``theta.shape + (s + e,)``, or with ``derivative`` ``b'(theta)``.

    ``y(t_n + theta h) = y_n + h * b(theta) @ k`` and ``dy/dt = b'(theta) @ k`` (the ``h`` of
    ``d theta / dt = 1 / h`` cancels).  NumPy in, float64 NumPy out; a JAX array in (traced or
    not) gives a JAX array, with the coefficients cast to ``theta``'s floating dtype as the
    solver casts its tableau to the state's.  Differentiable in ``theta``.

    Evaluated in the Bernstein basis (``Interpolant.bernstein``), except the first stage's
    weight, taken as ``theta - sum_{m>1} b_m(theta)`` (``1 - ...`` for the derivative): equal
    in exact arithmetic, and then the weights sum to ``theta`` to round-off.  Both matter for
    Verner's interpolants: evaluating Vern8's monomial coefficients (up to ``1.4e6``) leaves
    errors ~``1e-11`` in ``y`` for ``h = 0.1`` on a smooth problem, this ~``1e-15``
    (``test_weights_at_accuracy``).
    """
    if isinstance(theta, jax.Array):
        if not jnp.issubdtype(theta.dtype, jnp.floating):
            raise ValueError(f"theta must be a floating-point array, got {theta.dtype}")
        xp, x = jnp, theta
        bern = jnp.asarray(interp.bernstein[1:], dtype=theta.dtype)
    else:
        xp, x = np, np.asarray(theta, dtype=np.float64)
        bern = interp.bernstein[1:]
    degree = interp.degree
    if derivative:
        # d/dtheta of the degree-D Bernstein form: D * (differences) in degree D - 1.
        bern = degree * (bern[:, 1:] - bern[:, :-1])
        degree -= 1
    basis = xp.stack(
        [math.comb(degree, i) * x**i * (1 - x) ** (degree - i) for i in range(degree + 1)],
        axis=-1,
    )
    rest = matmul(basis, bern.T) if xp is jnp else basis @ bern.T
    first = (xp.ones_like(x) if derivative else x) - rest.sum(axis=-1)
    return xp.concatenate([first[..., None], rest], axis=-1)


# --------------------------------------------------------------------------------------------
# Building interpolants from published coefficients, in exact arithmetic.

_Coefficient = int | str | Fraction
"""A coefficient as published: an integer, a ``Fraction``, or text: an exact rational such as
``"-69713/23220"`` or a decimal such as ``"-.160443457e-1"`` (Verner's 40-digit values)."""

_END = "end"
"""Marks the extra stage ``f(t_{n+1}, y_{n+1})``: row ``b`` (the tableau's floats) at ``c = 1``."""


def _interpolant(
    name: str,
    tableau: ButcherTableau,
    *,
    order: int,
    kind: str,
    weights: Mapping[int, Sequence[_Coefficient]],
    extra: Mapping[int, tuple[_Coefficient, Mapping[int, _Coefficient]] | str] | None = None,
) -> Interpolant:
    """A validated ``Interpolant`` from published coefficients (1-based stage numbers).

    ``weights`` maps a stage to the coefficients of ``theta, theta^2, ..., theta^D`` (all of the
    same length; absent stages have ``b_m = 0``).  ``extra`` maps each extra stage, in order, to
    ``(c, {j: a_mj})``, or to ``_END``.  Every coefficient, and every coefficient of the
    Bernstein form (computed exactly), is rounded to float64 once.
    """
    s = tableau.num_stages
    extra = extra or {}
    e = len(extra)
    if sorted(extra) != list(range(s + 1, s + e + 1)):
        raise ValueError(f"{name}: extra stages must be numbered {s + 1} .. {s + e}")
    a_extra = np.zeros((e, s + e))
    c_extra = np.zeros(e)
    for m, stage in extra.items():
        if stage == _END:
            a_extra[m - s - 1, :s] = tableau.b
            c_extra[m - s - 1] = 1.0
        else:
            c, row = stage
            c_extra[m - s - 1] = float(Fraction(c))
            for j, value in row.items():
                a_extra[m - s - 1, j - 1] = float(Fraction(value))
    degree = len(next(iter(weights.values())))
    exact = [[Fraction(0)] * degree for _ in range(s + e)]
    for m, coefficients in weights.items():
        if len(coefficients) != degree:
            raise ValueError(f"{name}: stage {m} has {len(coefficients)} weights, not {degree}")
        exact[m - 1] = [Fraction(x) for x in coefficients]
    return Interpolant(
        name=name,
        tableau=tableau,
        order=order,
        a_extra=a_extra,
        c_extra=c_extra,
        weights=_floats_2d(exact),
        kind=kind,
        bernstein=_floats_2d(_exact_matmul(exact, _to_bernstein(degree))),
    )


def _hermite_weights(
    b: Sequence[Fraction], end: int, bump: Sequence[Fraction] | None = None
) -> dict[int, list[Fraction]]:
    """Weights of cubic Hermite interpolation plus ``theta^2 (1 - theta)^2 h sum_m d_m k_m``.

    Hermite interpolation of ``y_n``, ``y_{n+1} = y_n + h b @ k``, ``f_n = k_1`` and
    ``f_{n+1} = k_end`` (1-based) is

        y_n + (3 theta^2 - 2 theta^3) h b @ k + (theta - 2 theta^2 + theta^3) h k_1
            + (theta^3 - theta^2) h k_end,

    i.e. ``W = [delta_1, 3 b - 2 delta_1 - delta_end, -2 b + delta_1 + delta_end]``.  The bump
    ``d`` (summing to 0) adds ``[0, d, -2 d, d]`` and degree 4: Dormand–Prince's dense output.
    """
    n = max(len(b), end)
    d = list(bump) if bump is not None else [Fraction(0)] * n
    weights = {}
    for m in range(1, n + 1):
        bm = b[m - 1] if m <= len(b) else Fraction(0)
        first, last = int(m == 1), int(m == end)
        row = [Fraction(first), 3 * bm - 2 * first - last, -2 * bm + first + last]
        if bump is not None:
            row = [row[0], row[1] + d[m - 1], row[2] - 2 * d[m - 1], d[m - 1]]
        if any(row):
            weights[m] = row
    return weights


def hermite_interpolant(tableau: ButcherTableau) -> Interpolant:
    """Cubic Hermite interpolation on ``y_n, y_{n+1}, f(t_n, y_n), f(t_{n+1}, y_{n+1})``.

    An FSAL tableau has ``f(t_{n+1}, y_{n+1})`` as its last stage; any other gets it as one
    extra stage, row ``b`` at ``c = 1`` (which is the next step's first stage).  The order is
    ``min(tableau.order, 3)``: Hermite interpolation is exact for cubics, and its data are as
    accurate as ``y_{n+1}``.
    """
    s = tableau.num_stages
    b = [Fraction(x) for x in tableau.b]  # exact values of the floats
    end = s if tableau.fsal else s + 1
    return _interpolant(
        f"{tableau.name} Hermite",
        tableau,
        order=min(tableau.order, 3),
        kind="cubic Hermite",
        weights=_hermite_weights(b, end),
        extra=None if tableau.fsal else {s + 1: _END},
    )


# --------------------------------------------------------------------------------------------
# The interpolants of the shipped methods.

EULER_HERMITE = hermite_interpolant(tab.EULER)
HEUN_HERMITE = hermite_interpolant(tab.HEUN)
RK4_HERMITE = hermite_interpolant(tab.RK4)
BOGACKI_SHAMPINE_HERMITE = hermite_interpolant(tab.BOGACKI_SHAMPINE)
"""Cubic Hermite interpolants (``hermite_interpolant``) for the methods without their own: order
1 (Euler), 2 (Heun) and 3 (RK4, Bogacki–Shampine).  Bogacki–Shampine is FSAL and needs no extra
stage; the others take one, ``f(t_{n+1}, y_{n+1})``, the next step's first stage."""


def _quartic(
    name: str,
    tableau: ButcherTableau,
    *,
    kind: str,
    b: Sequence[_Coefficient],
    d: Sequence[_Coefficient],
) -> Interpolant:
    """Order 4: cubic Hermite plus ``theta^2 (1 - theta)^2 h sum_m d_m k_m`` (``_hermite_weights``).

    ``b`` is the tableau's ``b`` exactly; ``d`` has one more entry than ``b`` for a tableau that
    is not FSAL, the weight of the extra stage ``f(t_{n+1}, y_{n+1})``.  Every such quartic
    interpolates ``y_n, y_{n+1}, f_n, f_{n+1}``; it has order 4 iff ``sum_m d_m Phi_m(tau)`` is
    0 for the trees with ``|tau| <= 3`` and ``1 / gamma(tau)`` for ``|tau| = 4`` (which cancels
    the Hermite defect ``-theta^2 (1 - theta)^2 / gamma(tau)``).
    """
    s = tableau.num_stages
    return _interpolant(
        name,
        tableau,
        order=4,
        kind=kind,
        weights=_hermite_weights([Fraction(x) for x in b], len(d), bump=[Fraction(x) for x in d]),
        extra=None if tableau.fsal else {s + 1: _END},
    )


DOPRI5_DENSE = _quartic(
    "Dopri5 dense output",
    tab.DOPRI5,
    kind="Dormand-Prince dense output",
    b=("35/384", 0, "500/1113", "125/192", "-2187/6784", "11/84", 0),
    d=(
        "-12715105075/11282082432",
        0,
        "87487479700/32700410799",
        "-10690763975/1880347072",
        "701980252875/199316789632",
        "-1453857185/822651844",
        "69997945/29380423",
    ),
)
"""Dormand–Prince's fourth-order dense output (Shampine, 1986; Hairer, Nørsett & Wanner,
Solving ODEs I, II.6, as in their code DOPRI5): cubic Hermite on ``y_n, y_{n+1}, k_1, k_7``
plus ``theta^2 (1 - theta)^2 h sum_m d_m k_m``.  Degree 4, no extra stage (``k_7`` is the FSAL
stage ``f(t_{n+1}, y_{n+1})``)."""

# Cash–Karp and Fehlberg publish no dense output.  With the one extra stage that cubic Hermite
# interpolation needs, f(t_{n+1}, y_{n+1}), both admit a one-parameter family of fourth-order
# quartics of the Dormand–Prince form (d_2 = 0 in all of it).  These are the members that
# minimise the sum over the nine trees of order 5 of the squared L2(0, 1) norm of the
# order-5 defect, computed here in exact arithmetic: 3.97e-6 (Cash–Karp) and 9.93e-6
# (Fehlberg45), against 2.4e-6 for the best of Dormand–Prince's family.  Same cost as cubic
# Hermite, one order higher.

CASH_KARP_QUARTIC = _quartic(
    "CashKarp quartic",
    tab.CASH_KARP,
    kind="quartic Hermite (order 4, derived here)",
    b=("37/378", 0, "250/621", "125/594", 0, "512/1771"),
    d=(
        "-61435/54558",
        0,
        "253250/89631",
        "-236875/171468",
        "-735/1732",
        "-1835520/766843",
        "5/2",
    ),
)
"""Fourth-order continuous extension of Cash–Karp: cubic Hermite (with the extra stage
``f(t_{n+1}, y_{n+1})``) plus ``theta^2 (1 - theta)^2 h sum_m d_m k_m``, derived here (see the
comment above)."""

FEHLBERG45_QUARTIC = _quartic(
    "Fehlberg45 quartic",
    tab.FEHLBERG45,
    kind="quartic Hermite (order 4, derived here)",
    b=("25/216", 0, "1408/2565", "2197/4104", "-1/5", 0),
    d=(
        "-1510921/1763280",
        0,
        "35571904/10469475",
        "-1845741443/368525520",
        "423789/244900",
        "-237441/134695",
        "5/2",
    ),
)
"""Fourth-order continuous extension of Fehlberg45 (of its propagated fourth-order solution):
cubic Hermite with the extra stage ``f(t_{n+1}, y_{n+1})`` plus a bump, as for Cash–Karp.  It
also reads stage 6 (``c = 1/2``), which the solution itself ignores."""

TSIT5_INTERPOLANT = _interpolant(
    "Tsit5 interpolant",
    tab.TSIT5,
    order=4,
    kind="Tsitouras interpolant",
    weights={
        1: (1, "-2.763706197274826", "2.9132554618219126", "-1.0530884977290216"),
        2: (0, "0.1317", "-0.2234", "0.1017"),
        3: (0, "3.9302962368947516", "-5.941033872131505", "2.490627285651253"),
        4: (0, "-12.411077166933676", "30.33818863028232", "-16.548102889244902"),
        5: (0, "37.50931341651104", "-88.1789048947664", "47.37952196281928"),
        6: (0, "-27.896526289197286", "65.09189467479366", "-34.87065786149661"),
        7: (0, "1.5", "-4", "2.5"),
    },
)
"""Tsitouras' fourth-order interpolant for his 5(4) pair (Tsitouras, 2011, Comput. Math. Appl.
62, the ``b_i(theta)`` published with the pair), expanded in powers of ``theta`` and rounded to
double.  Degree 4, no extra stage.  Like the tableau, it is not rational: its conditions hold
to round-off."""

# Verner's interpolants: extra stages and weights as published with the pairs on Verner's site
# (the same values as the interpolants of OrdinaryDiffEq.jl's Vern6/7/8), 1-based stage numbers.

VERN6_INTERPOLANT = _interpolant(
    "Vern6 interpolant",
    tab.VERN6,
    order=6,
    kind="Verner interpolant",
    extra={
        10: (
            "1/2",
            {
                1: "35289331988986254405692535758830683/2135620454874580332949729350544993288",
                4: (
                    "313937014583068512255490687992212890625"
                    "/1028247080705354654473994781524199691557"
                ),
                5: (
                    "1309307687253621245836726130885318359375"
                    "/6321490412177191231557635904400612215708"
                ),
                6: "-35295844079877524186147726060781875/27279088881521314684841470427640876",
                7: "794353492803973228770716697389421875/13906777037439977359946774228636361",
                8: "-15228408956329265381787438679500067/272520859345009876882656783678732",
                9: "28587810357600962662801/1151340224617184234295192",
            },
        ),
        11: (
            "207/250",
            {
                1: (
                    "2486392061981208591025761263164027224438868971"
                    "/65173964076983042387381877152862343994140625000"
                ),
                4: (
                    "2330654500023704838558579323179918419669"
                    "/9313832252765893609365894760182968220625"
                ),
                5: (
                    "5283259505481013273874688940942473187741"
                    "/16258977397575080328080339260289640472500"
                ),
                6: (
                    "9989685106081485386057729811605187743723"
                    "/5481427003263510055949691042076757812500"
                ),
                7: "-65815640423883764662985178413751186161/971969007022721623945108012714453125",
                8: (
                    "183066350554023250298437927498791289370414247"
                    "/2772225538584491748887703284492309570312500"
                ),
                9: "-426178927623072052719640507155669/11712038417736656029207275390625000",
                10: "3248339841/30517578125",
            },
        ),
        12: (
            "7/25",
            {
                1: (
                    "4676747786898097735038451956075910033997933945857"
                    "/41838231186922043164464169766109251031526972656250"
                ),
                4: (
                    "1320032412954312695441306548681592444623240"
                    "/51248457773784347881352490499724836575577977"
                ),
                5: (
                    "2087002134582726310861746540254017903014374710"
                    "/551367099344274428347227263044005314054687829"
                ),
                6: (
                    "3432932836484348829479408524345545011748570706"
                    "/37176735450871998946806722732624135633015625"
                ),
                7: (
                    "-2316434358511265475362584844804601519943610264"
                    "/606481922490173339581866127622363581143375"
                ),
                8: (
                    "82514605285282414051716141603447021470923168793"
                    "/22107104196177512751528507591142367597656250"
                ),
                9: "-7560161019374651900153317984708038834/7028170531590816328729091157353515625",
                10: "-21655450552377696842870155771710589332/6701278878958685336695179940732421875",
                11: "-3194830887993202085244614477336220/678662636676110315314332975245759",
            },
        ),
    },
    weights={
        1: (
            1,
            "-940811006205413129/120948724610397495",
            "88342864458754360181/3265615564480732365",
            "-99667000922033025307/2177077042987154910",
            "7995049273203130972/217707704298715491",
            "-7303903485456272500/653123112896146473",
        ),
        4: (
            0,
            "2214248281250000/133130993475189",
            "-49918013252500000000/578720428636646583",
            "1440368506953125000/8387252588936907",
            "-28873797587500000000/192906809545548861",
            "27678103515625000000/578720428636646583",
        ),
        5: (
            0,
            "893038428789062500/32943296570459319",
            "-125047567320625000000/889469007402401613",
            "82988785418183593750/296489669134133871",
            "-72330565909375000000/296489669134133871",
            "69335281738281250000/889469007402401613",
        ),
        6: (
            0,
            "40331864555500/142160006043",
            "-5647463071672000/3838320163161",
            "3747982556193250/1279440054387",
            "-3266630520520000/1279440054387",
            "3131355943750000/3838320163161",
        ),
        7: (
            0,
            "-143250206750000/12603936879",
            "461347522996000000/7827044801859",
            "-13312037070125000/113435431911",
            "266854670860000000/2609014933953",
            "-255803940625000000/7827044801859",
        ),
        8: (
            0,
            "3753451420391/338141155",
            "-3679035166143248/63908678295",
            "4883240297928691/42605785530",
            "-425608752364336/4260578553",
            "407983850042500/12781735659",
        ),
        9: (0, "-69713/23220", "4685161/313470", "-135239/4860", "228046/10449", "-186250/31347"),
        10: (
            0,
            "-132664/6765",
            "17011336/182655",
            "-10067296/60885",
            "1579832/12177",
            "-1385000/36531",
        ),
        11: (
            0,
            "-2734375000/149990751",
            "391796875000/4049750277",
            "-6250000000/31393413",
            "244140625000/1349916759",
            "-244140625000/4049750277",
        ),
        12: (
            0,
            "-15453125/1139292",
            "1393796875/15380442",
            "-2092203125/10253628",
            "488281250/2563407",
            "-488281250/7690221",
        ),
    },
)
"""Verner's sixth-order interpolant for his 6(5) pair (RKV65.IIIXb.Efficient): three extra
stages (``c = 1/2, 207/250, 7/25``), degree 6, exact rationals.  Stage 9 is the FSAL stage
``f(t_{n+1}, y_{n+1})``."""

VERN7_INTERPOLANT = _interpolant(
    "Vern7 interpolant",
    tab.VERN7,
    order=6,
    kind="Verner interpolant",
    extra={
        11: _END,
        12: (
            "29/100",
            {
                1: ".5232227691599689815470932256735029887614e-1",
                4: ".2249586182670571550244187743667190903405",
                5: ".1744370924877637539031751304611402542578e-1",
                6: "-.7669379876829393188009028209348812321417e-2",
                7: ".3435896044073284645684381456417912794447e-1",
                8: "-.4102097230093949839125144540100346681769e-1",
                9: ".2565113300520561655297104906598973655221e-1",
                11: "-.160443457e-1",
            },
        ),
        13: (
            "1/8",
            {
                1: ".5305334125785908638834747243817578898946e-1",
                4: ".1219530101140188607092225622195251463666",
                5: ".1774684073760249704011573985936092552347e-1",
                6: "-.5928372667681494328907467430302313286925e-3",
                7: ".8381833970853750873624781948796072714855e-2",
                8: "-.1293369259698611956700998079778496462996e-1",
                9: ".9412056815253860804791356641605087829772e-2",
                11: "-.5353253107275676032399320754008272222345e-2",
                12: "-.6666729992455811078380186481263955324311e-1",
            },
        ),
        14: (
            "1/4",
            {
                1: ".3887903257436303686399931060834951327899e-1",
                4: "-.2440320330830131517910045090190069290791e-2",
                5: "-.1392891721467262281273220992320214734208e-2",
                6: "-.4744629155868013465038358934145339168472e-3",
                7: ".3920793241315951369383517310870803393356e-3",
                8: "-.4055473328512800136385880031750264996936e-3",
                9: ".1989709314771672628794304728258886009267e-3",
                11: "-.1027819879317916884712606136811051029682e-3",
                12: ".3385661513870266715302548402957613704604e-1",
                13: ".1814893063199928004309543737509423302792",
            },
        ),
        15: (
            "53/100",
            {
                1: ".5723681204690012909606837582140921695189e-1",
                4: ".2226594806676118099285816235023183680020",
                5: ".1234486420018689904911221497830317287757",
                6: ".4006332526666490875113688731927762275433e-1",
                7: "-.5269894848581452066926326838943832327366e-1",
                8: ".4765971214244522856887315416093212596338e-1",
                9: "-.2138895885042213036387863538386958914368e-1",
                11: ".1519389106403640165459624646184297766866e-1",
                12: ".1206054671628965554251364472502413614358",
                13: "-.2277942301618737288237298052574548913451e-1",
            },
        ),
        16: (
            "79/100",
            {
                1: ".5137203880275681426595607279552927584506e-1",
                4: ".5414214473439405582401399378307410450482",
                5: ".3503998066921840081154745647747846804810",
                6: ".1419311226969218216861835872156617148040",
                7: ".1052737747842942254816302629823570359198",
                8: "-.3108184780587401700842726199589213259835e-1",
                9: "-.7401883149519145061791854716430279714483e-2",
                11: "-.6377932504865363437569726480040013149706e-2",
                12: "-.1732549590836186403386348310205265959935",
                13: "-.1822815677762202619429607513861847306420",
            },
        ),
    },
    weights={
        1: (
            1,
            "-8.413387198332767469319987751201351965810",
            "33.67550888449089654479469983556967202215",
            "-70.80159089484886164618905961010838757357",
            "80.64695108301297872968868805293298389704",
            "-47.19413969837521580145883430419406103536",
            "11.13381344253924186418881142808952641234",
        ),
        4: (
            0,
            "8.754921980674397160629587282876763437696",
            "-88.45968286997709426134300934922618655402",
            "346.9017638429916309499891288356321692825",
            "-629.2580030059837046812187141184986252218",
            "529.6773755604192983874116479833480529304",
            "-167.3588698651401860365089970240284051167",
        ),
        5: (
            0,
            "8.913387586637921662996190126913331844214",
            "-90.06081846893217794712014609702916991513",
            "353.1807459217057824951538014683541349020",
            "-640.6476819744374433668701027882567716886",
            "539.2646279047155261551781390920363285084",
            "-170.3880944299154827945664954924414008798",
        ),
        6: (
            0,
            "5.173312029847800338889849068990984974299",
            "-52.27111590005538823385270070373176751689",
            "204.9853867374073094711024260808085419491",
            "-371.8306118563602890875634623992262437796",
            "312.9880934374529000210073972654145891826",
            "-98.89290352172494693555119599233959305606",
        ),
        7: (
            0,
            "16.79537744079695986364946329034055578253",
            "-169.7004000005972744435739149730966805754",
            "665.4937727009246303131700313781960584913",
            "-1207.163889233600728395392916633015853882",
            "1016.129151581854603280159105697386989470",
            "-321.0600155723749421933210511704882816019",
        ),
        8: (
            0,
            "-10.00599753609866476866352971232058330270",
            "101.1005433052275068199636113246449312792",
            "-396.4739151237843754958939772727577263768",
            "719.1787707014182914108130834128646525498",
            "-605.3681033918824350795711030652978269725",
            "191.2743989279793520691961908384572824802",
        ),
        9: (
            0,
            "2.764708833638599139713222853969606774131",
            "-27.93460263739046178114640484830267988046",
            "109.5477918613789217803046856340175757800",
            "-198.7128113064482116421691972646370773711",
            "167.2663357164031670694252647113936863857",
            "-52.85010499525706346613022509203974406942",
        ),
        11: (
            0,
            "-2.169632028016350481156919876642428429100",
            "22.01669603756987625585768587320929912766",
            "-86.90152427798948350846176288615482496306",
            "159.2238897386147443720253338471077193471",
            "-135.9618306534587908363115231453760181702",
            "43.79240118328000419804718618785625308759",
        ),
        12: (
            0,
            "-4.890070188793803933769786966428026149549",
            "22.75407737425176120799532459991506803585",
            "-30.78034218537730965082079824005797506535",
            "-2.797194317207249021142015125037024035537",
            "31.36945663750840183161406140272783187147",
            "-15.65592732038180043387678567111987465689",
        ),
        13: (
            0,
            "10.86217092955196715517224349929627754387",
            "-50.54297141782710697188187875653305700081",
            "68.37148040407511827604242008548181691494",
            "6.213326521632409162585500428935637861213",
            "-69.68006323194158104163196358466588618336",
            "34.77605679450919341971367832748521086414",
        ),
        14: (
            0,
            "-11.37286691922922915922346687401389055763",
            "130.7905807824671644130452602841032046030",
            "-488.6511367778560207543260583489312609826",
            "832.2148793276440873476229585070779183432",
            "-664.7743368554426242883314487337054193624",
            "201.7928804424166224412127551654694479565",
        ),
        15: (
            0,
            "-5.919778732715006698693070786679427540601",
            "63.27679965889218829298274978013773800731",
            "-265.4326820887379575820873554556433306580",
            "520.1009254140610824835871087519714692468",
            "-467.4121095339020118993777963241667608460",
            "155.3868452824017054035883640343803117904",
        ),
        16: (
            0,
            "-10.49214619796182281022379415510181241136",
            "105.3553852518801101042787230303396283676",
            "-409.4397501198893846479834816688367917005",
            "732.8314489076540326880337353277812147333",
            "-606.3044574733512377981129469949015057785",
            "188.0495196316683024640077644607192667895",
        ),
    },
)
"""Verner's interpolant for his 7(6) pair (RKV76.IIa.Efficient), published as of order 7: six
extra stages, the first ``f(t_{n+1}, y_{n+1})`` and then ``c = 29/100, 1/8, 1/4, 53/100,
79/100``; degree 7; 40-digit decimals.  Stage 10 (the error estimate's) is not used.

Its order is 6, not 7.  In exact arithmetic it meets every condition of order <= 6 (to the
~1e-37 of the published digits), but the order-7 conditions of 12 of the 20 trees ``[tau]``
with ``|tau| = 6`` fail: the defect polynomials reach 2.8e-7 on ``[0, 1]`` (their coefficients
1.3e-4), where ``1 / gamma`` is at least 2e-4.  Not a transcription slip: two independent
transcriptions of Verner's file agree digit for digit, the row sums and ``b(1) = b`` hold to
1e-37, and no weights at all on these sixteen stages satisfy the order-7 conditions (the linear
system is inconsistent; stages 12 and 13 have stage order 5).  So small a defect makes it
behave as order 7 until ``h^7`` errors are near round-off, and far more accurate than
Verner's 13-stage sixth-order interpolant (order-7 defects up to 1.5e-4), hence its use here.
"""

VERN8_INTERPOLANT = _interpolant(
    "Vern8 interpolant",
    tab.VERN8,
    order=8,
    kind="Verner interpolant",
    extra={
        14: _END,
        15: (
            ".3110177634953863863927417318829099695921",
            {
                1: ".4620700646754963101730413150238116432863e-1",
                6: ".4503904160842480866828520384400679697151e-1",
                7: ".2336816697713424410788701065340221126565",
                8: "37.83901368421067410780338220861855254153",
                9: "-15.94911328945424610266139490307397370835",
                10: "23.02836835181610285142510596329590091940",
                11: "-44.85578507769412524816130998016948002745",
                12: "-.6379858768647444009509067402330140781326e-1",
                14: "-.1259503554386166268241032464519842162533e-1",
            },
        ),
        16: (
            "69/400",
            {
                1: ".5037946855482040993065158747220696112586e-1",
                6: ".4109836131046079339916530614028848248545e-1",
                7: ".1718054153348195783296309209549424619697",
                8: "4.61410531998151886974342237185977124648",
                9: "-1.791667883085396449712744996746836471721",
                10: "2.531658930485041408462243518792913614971",
                11: "-5.32497786020573071925718815977276269909",
                12: "-.3065532595385634734924449496356513113607e-1",
                14: "-.5254479979429613570549519094377878106127e-2",
                15: "-.8399194644224792997538653464258058697156e-1",
            },
        ),
        17: (
            "7846/10000",
            {
                1: ".4082897132997079620207118756242653796386e-1",
                6: ".4244479514247632218892086657732332485609",
                7: ".2326091531275234539465100096964845486081",
                8: "2.677982520711806062780528871014035962908",
                9: ".7420826657338945216477607044022963622057",
                10: ".1460377847941461193920992339731312296021",
                11: "-3.579344509890565218033356743825917680543",
                12: ".1138844389600173704531638716149985665239",
                14: ".1267790651033190047378693537615687232109e-1",
                15: "-.7443436349946674429752785032561552478382e-1",
                16: ".4782748079757851554575511473876987663388e-1",
            },
        ),
        18: (
            "37/100",
            {
                1: ".5212682393668413629928136927994514676607e-1",
                6: ".5392508396744797718209106862347065628649e-1",
                7: ".1660758097434640828541930599928251901718e-1",
                8: "-4.454485757926779655418936993298463071587",
                9: "6.835218278632146381711296817968152631469",
                10: "-8.711334822181993739847172734848837971169",
                11: "6.491635839232917053651267142703105653517",
                12: "-.7072551809844346422069985227700294651922e-1",
                14: "-.1854031491993216429111842937941202966440e-1",
                15: ".2350402105435384645116542087045962190647e-1",
                16: ".2344795103407822090556377813402774776461",
                17: "-.8241072501152898885823089698097768766651e-1",
            },
        ),
        19: (
            "1/2",
            {
                1: ".5020102870355713598699964419977883461362e-1",
                6: ".1552209034795498114932226104700567642339",
                7: ".1264268424089234914713091134864747506300",
                8: "-5.14920630353984701704917414605721854951",
                9: "8.46834099903692926607453176331494311551",
                10: "-10.66213068108149527544209836207095498430",
                11: "7.54183322495972836290996201569018333903",
                12: "-.743696811383214243944066492459357053774e-1",
                14: "-.2055887686618382619339821759221121764364e-1",
                15: ".775379526471029807261782993777862395844e-1",
                16: ".1046259220352544296313761971333987587377",
                17: "-.1179213306451979352145022687063013455111",
            },
        ),
        20: (
            "7/10",
            {
                1: ".3737341446457825692757506548800094134977e-1",
                6: ".3504930705338316406767087468339071089224",
                7: ".4922652819373025433298989824173484805373",
                8: "8.553695439359312242284304421725315855379",
                9: "-10.35317299030591348532574006719207803272",
                10: "13.83320427252914990351082875460544773493",
                11: "-12.28092433078461863729523583784519048012",
                12: ".1719151595656509762746810113378644307112",
                14: ".3641583114314496380113822384214528216140e-1",
                15: ".2961920580288763054890146412520723429115e-1",
                16: "-.2651793938627067002647615623738425030047",
                17: ".942950396173806655317007970358739475630e-1",
            },
        ),
        21: (
            "9/10",
            {
                1: ".3939058345528250943410670634923521987132e-1",
                6: ".3558516141234424183136697322755323715063",
                7: ".4197382225952610029372225526720065366258",
                8: ".872044977807194166293172525204036071060",
                9: ".898952083487659486126627160171417043611",
                10: "-.630580616105988359023456649527853470403",
                11: "-1.121887220595483550736681645425215081433",
                12: ".4298219512400197176967511031829197714867e-1",
                14: ".1332557566873915707013495891889190564164e-1",
                15: ".1876227053964148034446101291928097773800e-1",
                16: "-.1859411132922105570515379368592596513699",
                17: ".1773614271924602745226064729836361000042",
            },
        ),
    },
    weights={
        1: (
            1,
            "-10.03915465055451898280745009553727015838",
            "53.79210495862331394937504547285261606206",
            "-165.0579057235472167092186792753028629327",
            "298.0264565434610102489744601822776142620",
            "-311.9125448707900689751032283191627986699",
            "174.6059852691171542761046061351126284335",
            "-40.37066163211959429657758663355894180800",
        ),
        6: (
            0,
            "158.1976739121776138067531004299642556045",
            "-1543.961417219490013383329186557376850919",
            "6241.398747828780065219699818963300847515",
            "-13136.51615640610824674042591770724411138",
            "15106.94849316959941770760848348143558467",
            "-8996.489626298230413000758717864256649583",
            "2170.776389952444021264933974457050280938",
        ),
        7: (
            0,
            "110.7811520079778201620910891542159716196",
            "-1081.190514535617748557462051373884811281",
            "4370.666940459977376891679103587685016930",
            "-9199.113723922197066947453657458673365167",
            "10578.94920962985483690180716390515207397",
            "-6299.975594978841008450271944308599363057",
            "1520.130500554341433782477059435641543286",
        ),
        8: (
            0,
            "-7011.442038211314089634068023254940106045",
            "68429.55220744077890209519664603903716349",
            "-276623.5714822198169288202316196287008724",
            "582220.4545548494658856503006312634684934",
            "-669551.5244611245601905652331468068626208",
            "398731.3087623332757943809792249308827732",
            "-96210.47174510666745715793578288559674281",
        ),
        9: (
            0,
            "11206.39756984814734031374482605836502113",
            "-109371.0485495066182770525095928736321803",
            "442127.8393698154661543505844693555049508",
            "-930563.7629864562145364082427559715712707",
            "1070145.133585590072636708771436125254933",
            "-637292.8058429046904373075590712408701797",
            "153773.3309185793956820086499888593205888",
        ),
        10: (
            0,
            "-14179.23164045568390825368995504736244876",
            "138385.0093196357218693716546019209270760",
            "-559415.5490240869974273158302752589638112",
            "1177423.794699250413603625249340565972051",
            "-1354033.322790821429356166591306087001182",
            "806353.8938825050195016379699232308969498",
            "-194566.3328138133045593670938904445416121",
        ),
        11: (
            0,
            "10247.76176792174468727263230424253072668",
            "-100015.0532637523107509874155382267979521",
            "404306.6240143429367125014776377339233105",
            "-850959.9711689702682710993795157496434280",
            "978601.0462088684697300958464199995189771",
            "-582776.4729907748855939796622931794117500",
            "140619.0037156383022701488158207833280861",
        ),
        12: (
            0,
            "-105.4930397685096787379931952745881034169",
            "1029.580139580310194120073236423148130618",
            "-4162.034181876452751021493197688100770349",
            "8759.996193602336131526447045580160767641",
            "-10073.96555688604885441046004449728532151",
            "5999.247741473950186438936812025268574829",
            "-1447.567428588892382130036646632729629570",
        ),
        14: (
            0,
            "-14.86361337326743122469601010648237947608",
            "145.7635936489486611601020590400812969906",
            "-587.6557063401913588520708808169444817103",
            "1227.372151254555709980234511427063838550",
            "-1394.493105740553645217117387304216418608",
            "816.8562950730668774494805290335070403105",
            "-192.9796145225588132959328212730088960570",
        ),
        15: (
            0,
            "14.34968575290546223276673100484047073648",
            "-150.2949344481665658851785896351738227010",
            "629.4812425700290706612346725243246098946",
            "-1352.518207309060677914698908083510085133",
            "1575.896933708880305858556996706058962503",
            "-946.7876580472948045886633971120598201035",
            "229.8729377727072096359824945955196848017",
        ),
        16: (
            0,
            "-102.5452470111040085560664290210906322518",
            "1074.032661264680594125263250545103109541",
            "-4498.377917100410634753487685261882069653",
            "9665.320624003280508099125255751992581938",
            "-11261.62224831288113545795903649800929060",
            "6765.902468760784366342575368188597359812",
            "-1642.710341604349689799450723704711058784",
        ),
        17: (
            0,
            "-38.13206313286473398334122725888547021750",
            "399.3854658292328681862496726489289700594",
            "-1672.748720491971752312231602599596419744",
            "3594.107254858566583822606674735752304040",
            "-4187.701556802926199931725021751236897492",
            "2515.941280649063720613355430002270532846",
            "-610.8516609091004863949139257772330194915",
        ),
        18: (
            0,
            "-66.38279583069588062871084016403504860018",
            "595.8297683881103280237377269355990794854",
            "-2188.737060092971609278770563269347103559",
            "4213.839795282852421559730676511794767863",
            "-4484.035731929196864370162258757955490985",
            "2500.648251425346544829791147364129986790",
            "-571.1622272434449401356158886201861909946",
        ),
        19: (
            0,
            "-90.41887573173058787343992868450872085904",
            "931.9503884048153706496188381219698380844",
            "-3962.898377713156165984683269799703910403",
            "8733.317420025551238329244389917866097896",
            "-10445.90818988766053535212385670877957360",
            "6426.218942917598693647793004359979629852",
            "-1592.261308015418013416409177206823360972",
        ),
        20: (
            0,
            "-59.73884363038871206457816967313835076801",
            "544.8870146891724527559861176467523778088",
            "-2090.430374926312850791322527518588562537",
            "4194.418982707226648046953315742901721971",
            "-4603.369436819628073439413527693451638704",
            "2619.201413559297614510795648037620577207",
            "-604.9687555793670790184208565420961249773",
        ),
        21: (
            0,
            "-59.20053764683937384859682230934791521325",
            "571.7660156218088014286377638724659591261",
            "-2308.949564445360683785335401047607870804",
            "4881.234110686139058221334453291392021952",
            "-5660.118807771202003386701685793459298252",
            "3408.706689037421803199133730396931709513",
            "-833.4379054819676018284720384103746063216",
        ),
    },
)
"""Verner's eighth-order interpolant for his 8(7) pair (RKV87.IIa.Efficient): eight extra
stages, the first ``f(t_{n+1}, y_{n+1})``, then ``c = 0.3110177634..., 69/400, 7846/10000,
37/100, 1/2, 7/10, 9/10``; degree 8.  Published as 40-digit decimals.  Stage 13 (the error
estimate's) is not used."""

ALL_INTERPOLANTS: dict[str, Interpolant] = {
    interp.tableau.name: interp
    for interp in (
        EULER_HERMITE,
        HEUN_HERMITE,
        RK4_HERMITE,
        BOGACKI_SHAMPINE_HERMITE,
        FEHLBERG45_QUARTIC,
        CASH_KARP_QUARTIC,
        DOPRI5_DENSE,
        TSIT5_INTERPOLANT,
        VERN6_INTERPOLANT,
        VERN7_INTERPOLANT,
        VERN8_INTERPOLANT,
    )
}
"""The interpolant of every shipped tableau, keyed by the tableau's ``name``."""


def interpolant_for(tableau: ButcherTableau) -> Interpolant:
    """The continuous extension the solvers use for ``tableau``.

    A shipped tableau (or one with the same coefficients) gets its own, from
    ``ALL_INTERPOLANTS``; any other tableau the cubic Hermite interpolant
    (``hermite_interpolant``), of order ``min(tableau.order, 3)``.
    """
    for interp in ALL_INTERPOLANTS.values():
        if _same_method(interp.tableau, tableau):
            return interp
    return hermite_interpolant(tableau)
