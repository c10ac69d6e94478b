"""Butcher tableaus of explicit Runge–Kutta methods, as validated data.

A tableau ``(a, b, c)`` with ``s`` stages defines one step

    Y_m = y_n + h * sum_{j<m} a[m, j] k_j,      k_m = f(t_n + c_m h, Y_m)
    y_{n+1} = y_n + h * sum_m b_m k_m

and, for embedded pairs, the error estimate ``h * sum_m b_error[m] k_m`` where
``b_error = b - b_embedded``.  Coefficients are exact rationals where they exist.

The module-level constants (``EULER`` ... ``VERN8``, collected in ``ALL_TABLEAUS``) are the
methods the solvers ship.  Each is built from the coefficients as published, in exact
arithmetic: ``b_error = b - b_embedded`` is formed exactly and every coefficient is rounded to
float64 once.  ``tests/test_tableaus.py`` checks every one against the Butcher order
conditions, so a mistyped digit cannot pass unnoticed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np


def _sum_tolerance(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Round-off allowed in ``sum(x)``: ``1e-14``, scaled up by ``sum(|x|)`` when that exceeds 1."""
    return 1e-14 * np.maximum(1.0, np.abs(x).sum(axis=axis))


@dataclasses.dataclass(frozen=True, eq=False)
class ButcherTableau:
    """The coefficients of an explicit Runge–Kutta method.

    Attributes:
        name: human-readable name, used in error messages and reports.
        a: ``(s, s)`` strictly lower-triangular stage matrix.
        b: ``(s,)`` weights of the propagated solution (order ``order``).
        c: ``(s,)`` nodes; ``c[m] == sum(a[m])``.
        order: classical order of the propagated solution.
        b_error: ``(s,)`` weights ``b - b_embedded`` of the error estimate, or ``None``
            for a method without an embedded pair (fixed-step only).
        error_order: order of the embedded solution, or ``None``.
    """

    name: str
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    order: int
    b_error: np.ndarray | None = None
    error_order: int | None = None

    def __post_init__(self) -> None:
        # Private read-only copies: the tableaus are shared module-level constants.
        a = np.array(self.a, dtype=np.float64)
        b = np.array(self.b, dtype=np.float64)
        c = np.array(self.c, dtype=np.float64)
        for array in (a, b, c):
            array.setflags(write=False)
        if b.ndim != 1:
            raise ValueError(f"{self.name}: b must be a 1-D array of weights")
        s = b.shape[0]
        if a.shape != (s, s) or c.shape != (s,):
            raise ValueError(f"{self.name}: a must be (s, s) and c (s,) with s = {s}")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(np.isfinite(c))):
            raise ValueError(f"{self.name}: coefficients must be finite")
        if np.any(np.triu(a) != 0):
            raise ValueError(f"{self.name}: a must be strictly lower triangular (explicit)")
        # Sums are checked to round-off relative to the size of their terms: Verner's
        # coefficients reach the hundreds, so their sums carry errors of ~1e-14 absolute.
        if np.any(np.abs(a.sum(axis=1) - c) > _sum_tolerance(a, axis=1)):
            raise ValueError(f"{self.name}: row sums of a must equal c")
        if abs(b.sum() - 1) > _sum_tolerance(b):
            raise ValueError(f"{self.name}: weights b must sum to 1")
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)
        object.__setattr__(self, "c", c)
        if self.b_error is not None:
            e = np.array(self.b_error, dtype=np.float64)
            e.setflags(write=False)
            if e.shape != (s,):
                raise ValueError(f"{self.name}: b_error must have shape ({s},)")
            if not np.all(np.isfinite(e)):
                raise ValueError(f"{self.name}: error weights must be finite")
            if abs(e.sum()) > _sum_tolerance(e):
                raise ValueError(f"{self.name}: error weights must sum to 0")
            if self.error_order is None:
                raise ValueError(f"{self.name}: an embedded pair needs error_order")
            object.__setattr__(self, "b_error", e)
        elif self.error_order is not None:
            raise ValueError(f"{self.name}: error_order given without b_error")

    @property
    def num_stages(self) -> int:
        return self.b.shape[0]

    @property
    def fsal(self) -> bool:
        """First Same As Last: the last stage is ``f(t_{n+1}, y_{n+1})``.

        Then the last stage of an accepted step is reused as the first stage of the
        next, saving one evaluation of the right-hand side per step.
        """
        return bool(self.c[-1] == 1 and np.array_equal(self.a[-1], self.b))

    @functools.cached_property
    def real_stability_boundary(self) -> float:
        """The largest ``x`` with ``|R(-x')| <= 1`` for every ``0 <= x' <= x``.

        ``R(z) = 1 + z b^T (I - z a)^{-1} 1`` is the stability function of the propagated
        solution: on ``y' = lambda y`` a step multiplies ``y`` by ``R(h lambda)``.  A
        controller that meets a large negative eigenvalue settles where ``h |lambda|`` is about
        this boundary (about 3.31 for Dormand–Prince, 2.79 for RK4, 2 for Euler).  Computed
        from the coefficients: ``R`` is the polynomial ``sum_k (b^T a^(k-1) 1) z^k``.
        """
        s = self.num_stages
        coeffs = [1.0]
        power = np.ones(s)
        for _ in range(s):
            coeffs.append(float(self.b @ power))
            power = self.a @ power
        poly = np.polynomial.Polynomial(coeffs)

        def unstable(x: float | np.ndarray) -> bool | np.ndarray:
            return np.abs(poly(-x)) > 1.0 + 1e-12

        xs = np.linspace(1e-3, 64.0, 64_000)
        first = int(np.argmax(unstable(xs)))  # vectorised: once per tableau and process
        lo, hi = float(xs[first - 1]), float(xs[first])
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if unstable(mid) else (mid, hi)
        return lo

    @property
    def stiffness_pair(self) -> tuple[int, int] | None:
        """Two stages evaluated at the same time, for a free estimate of ``rho(J)``, or ``None``.

        For stages ``i != j`` with ``c_i == c_j`` (Hairer's DOPRI5 uses its last two),
        ``||k_i - k_j|| / ||Y_i - Y_j||`` estimates the spectral radius of the Jacobian
        along the direction ``Y_i - Y_j`` (the mean value theorem).  Index ``s`` (one past
        the last stage) stands for ``(y_{n+1}, f(t_{n+1}, y_{n+1}))``, which the solve
        evaluates after every step of a method that is not FSAL.  The pair chosen is the
        last two such indices at the largest repeated node; tableaus with no repeated node
        (Bogacki–Shampine, Euler) have none: their steps are not checked for stiffness.
        """
        nodes = [float(x) for x in self.c] + ([] if self.fsal else [1.0])
        repeated = [x for x in set(nodes) if x != 0 and nodes.count(x) > 1]
        if not repeated:
            return None
        at = [i for i, x in enumerate(nodes) if x == max(repeated)]
        return at[-2], at[-1]

    @property
    def live_stages(self) -> tuple[int, ...]:
        """Stages whose value reaches ``y_{n+1}``, in increasing order.

        Stage ``m`` is live if ``b[m] != 0`` or a later live stage reads it
        (``a[q, m] != 0``).  The others (e.g. the FSAL stage of Dormand–Prince, used only
        for the error estimate) cannot influence the solution, so the reverse pass skips
        them.
        """
        s = self.num_stages
        live = [False] * s
        for m in reversed(range(s)):
            live[m] = self.b[m] != 0 or any(live[q] and self.a[q, m] != 0 for q in range(m + 1, s))
        return tuple(m for m in range(s) if live[m])


# --------------------------------------------------------------------------------------------
# Building tableaus from published coefficients.

_Coefficient = int | float | str | Fraction
"""A coefficient as written in the literature: a number, a ``Fraction``, or the text of an
exact rational such as ``"-417627820623/82828840000"`` (Verner's coefficients have numerators
far beyond float precision, so they are kept as text and parsed exactly)."""


def _matrix(
    a: Sequence[Sequence[_Coefficient]] | Mapping[tuple[int, int], _Coefficient], s: int
) -> list[list[Fraction]]:
    """The exact ``(s, s)`` stage matrix.

    ``a`` is either the ragged lower triangle (row ``m`` lists ``a[m, 0..m-1]``) or, for the
    long sparse tableaus, a mapping of the nonzero entries with 1-based ``(i, j)`` keys, the
    ``a_ij`` notation of the papers.  Zero-based, zero-filled either way.
    """
    out = [[Fraction(0)] * s for _ in range(s)]
    if isinstance(a, Mapping):
        for (i, j), value in a.items():
            out[i - 1][j - 1] = Fraction(value)
    else:
        if len(a) != s:
            raise ValueError(f"expected {s} rows, got {len(a)}")
        for m, row in enumerate(a):
            for j, value in enumerate(row):
                out[m][j] = Fraction(value)
    return out


def _vector(v: Sequence[_Coefficient] | Mapping[int, _Coefficient], s: int) -> list[Fraction]:
    """The exact length-``s`` weight vector from a dense sequence or 1-based sparse mapping."""
    if isinstance(v, Mapping):
        out = [Fraction(0)] * s
        for i, value in v.items():
            out[i - 1] = Fraction(value)
        return out
    if len(v) != s:
        raise ValueError(f"expected {s} weights, got {len(v)}")
    return [Fraction(value) for value in v]


def _tableau(
    name: str,
    *,
    a: Sequence[Sequence[_Coefficient]] | Mapping[tuple[int, int], _Coefficient],
    b: Sequence[_Coefficient] | Mapping[int, _Coefficient],
    c: Sequence[_Coefficient],
    order: int,
    b_embedded: Sequence[_Coefficient] | Mapping[int, _Coefficient] | None = None,
    error_order: int | None = None,
) -> ButcherTableau:
    """A validated ``ButcherTableau`` from published coefficients.

    Floats are taken bit for bit (``35 / 384`` is already the nearest double); text and
    ``Fraction`` entries are exact.  ``b_error = b - b_embedded`` is formed in exact
    arithmetic and each coefficient is rounded to float64 once, so the error weights are as
    accurate as the data allow.
    """
    s = len(c)
    b_exact = _vector(b, s)

    def to_float(values: Sequence[Fraction]) -> np.ndarray:
        return np.array([float(x) for x in values], dtype=np.float64)

    b_error = None
    if b_embedded is not None:
        b_error = to_float([x - y for x, y in zip(b_exact, _vector(b_embedded, s), strict=True)])
    return ButcherTableau(
        name=name,
        a=np.array([to_float(row) for row in _matrix(a, s)]),
        b=to_float(b_exact),
        c=to_float([Fraction(x) for x in c]),
        order=order,
        b_error=b_error,
        error_order=error_order,
    )


# --------------------------------------------------------------------------------------------
# Fixed-step methods (no embedded error estimate).

EULER = _tableau("Euler", a=[[]], b=[1], c=[0], order=1)
"""The explicit Euler method, order 1 (Euler, 1768)."""

HEUN = _tableau("Heun", a=[[], [1]], b=[1 / 2, 1 / 2], c=[0, 1], order=2)
"""Heun's method (the explicit trapezoidal rule), order 2 (Heun, 1900).  Fixed step only."""

RK4 = _tableau(
    "RK4",
    a=[
        [],
        [1 / 2],
        [0, 1 / 2],
        [0, 0, 1],
    ],
    b=[1 / 6, 1 / 3, 1 / 3, 1 / 6],
    c=[0, 1 / 2, 1 / 2, 1],
    order=4,
)
"""The classical fourth-order Runge–Kutta method (Kutta, 1901).  Fixed step only."""

# --------------------------------------------------------------------------------------------
# Embedded pairs.  ``order`` is the order of the propagated solution ``b``; ``error_order``
# that of the embedded ``b_embedded``.

BOGACKI_SHAMPINE = _tableau(
    "BogackiShampine",
    a=[
        [],
        [1 / 2],
        [0, 3 / 4],
        [2 / 9, 1 / 3, 4 / 9],
    ],
    b=[2 / 9, 1 / 3, 4 / 9, 0],
    c=[0, 1 / 2, 3 / 4, 1],
    order=3,
    b_embedded=[7 / 24, 1 / 4, 1 / 3, 1 / 8],
    error_order=2,
)
"""Bogacki–Shampine 3(2) pair, 4 stages, FSAL (Bogacki & Shampine, 1989).

Propagates the third-order solution; the last stage is ``f(t_{n+1}, y_{n+1})``, reused as the
first stage of the next step, so an accepted step costs three evaluations.
"""

FEHLBERG45 = _tableau(
    "Fehlberg45",
    a=[
        [],
        [1 / 4],
        [3 / 32, 9 / 32],
        [1932 / 2197, -7200 / 2197, 7296 / 2197],
        [439 / 216, -8, 3680 / 513, -845 / 4104],
        [-8 / 27, 2, -3544 / 2565, 1859 / 4104, -11 / 40],
    ],
    b=[25 / 216, 0, 1408 / 2565, 2197 / 4104, -1 / 5, 0],
    c=[0, 1 / 4, 3 / 8, 12 / 13, 1, 1 / 2],
    order=4,
    b_embedded=[16 / 135, 0, 6656 / 12825, 28561 / 56430, -9 / 50, 2 / 55],
    error_order=5,
)
"""Runge–Kutta–Fehlberg 4(5), 6 stages (Fehlberg, 1969, NASA TR R-315, Table III).

As in the classical RKF45, the **fourth-order** solution is propagated and the fifth-order
one serves only to estimate the error (no local extrapolation); hence ``order=4`` and
``error_order=5``.  The sixth stage feeds only the error estimate.
"""

CASH_KARP = _tableau(
    "CashKarp",
    a=[
        [],
        [1 / 5],
        [3 / 40, 9 / 40],
        [3 / 10, -9 / 10, 6 / 5],
        [-11 / 54, 5 / 2, -70 / 27, 35 / 27],
        [1631 / 55296, 175 / 512, 575 / 13824, 44275 / 110592, 253 / 4096],
    ],
    b=[37 / 378, 0, 250 / 621, 125 / 594, 0, 512 / 1771],
    c=[0, 1 / 5, 3 / 10, 3 / 5, 1, 7 / 8],
    order=5,
    b_embedded=[2825 / 27648, 0, 18575 / 48384, 13525 / 55296, 277 / 14336, 1 / 4],
    error_order=4,
)
"""Cash–Karp 5(4) pair, 6 stages (Cash & Karp, 1990); propagates the fifth-order solution."""

DOPRI5 = _tableau(
    "Dopri5",
    a=[
        [],
        [1 / 5],
        [3 / 40, 9 / 40],
        [44 / 45, -56 / 15, 32 / 9],
        [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
        [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
        [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
    ],
    b=[35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0],
    c=[0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1, 1],
    order=5,
    b_embedded=[5179 / 57600, 0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40],
    error_order=4,
)
"""Dormand–Prince 5(4) pair, 7 stages, FSAL (Dormand & Prince, 1980).

Propagates the fifth-order solution.  The seventh stage is ``f(t_{n+1}, y_{n+1})``: it enters
only the error estimate and is reused as the next step's first stage.
"""

TSIT5 = _tableau(
    "Tsit5",
    a=[
        [],
        [0.161],
        [-0.008480655492356989, 0.335480655492357],
        [2.8971530571054935, -6.359448489975075, 4.3622954328695815],
        [5.325864828439257, -11.748883564062828, 7.4955393428898365, -0.09249506636175525],
        [
            5.86145544294642,
            -12.92096931784711,
            8.159367898576159,
            -0.071584973281401,
            -0.028269050394068383,
        ],
        [
            0.09646076681806523,
            0.01,
            0.4798896504144996,
            1.379008574103742,
            -3.290069515436081,
            2.324710524099774,
        ],
    ],
    b=[
        0.09646076681806523,
        0.01,
        0.4798896504144996,
        1.379008574103742,
        -3.290069515436081,
        2.324710524099774,
        0,
    ],
    c=[0, 0.161, 0.327, 0.9, 0.9800255409045097, 1, 1],
    order=5,
    b_embedded=[
        0.09468075576583945,
        0.009183565540343254,
        0.4877705284247616,
        1.234297566930479,
        -2.7077123499835256,
        1.866628418170587,
        1 / 66,
    ],
    error_order=4,
)
"""Tsitouras 5(4) pair, 7 stages, FSAL (Tsitouras, 2011, Comput. Math. Appl. 62).

Propagates the fifth-order solution.  The coefficients are not rational: they solve the
order conditions (with only the first-column simplifying assumption) for the nodes
``c = (0, 0.161, 0.327, 0.9, 0.98002554..., 1, 1)`` of the paper, and are given here rounded
to the nearest double from their high-precision values.  So rounded, they satisfy every
condition of order <= 5 to ~1e-14 (a few units of round-off).
"""

# --------------------------------------------------------------------------------------------
# Verner's pairs.  Their coefficients are exact rationals with very long numerators, written
# as text with the papers' 1-based ``(i, j)`` indices and parsed exactly.

VERN6 = _tableau(
    "Vern6",
    a={
        (2, 1): "3/50",
        (3, 1): "519479/27000000",
        (3, 2): "2070721/27000000",
        (4, 1): "1439/40000",
        (4, 3): "4317/40000",
        (5, 1): "109225017611/82828840000",
        (5, 3): "-417627820623/82828840000",
        (5, 4): "43699198143/10353605000",
        (6, 1): "-8036815292643907349452552172369/191934985946683241245914401600",
        (6, 3): "246134619571490020064824665/1543816496655405117602368",
        (6, 4): "-13880495956885686234074067279/113663489566254201783474344",
        (6, 5): "755005057777788994734129/136485922925633667082436",
        (7, 1): (
            "-1663299841566102097180506666498880934230261/30558424506156170307020957791311384232000"
        ),
        (7, 3): "130838124195285491799043628811093033/631862949514135618861563657970240",
        (7, 4): "-3287100453856023634160618787153901962873/20724314915376755629135711026851409200",
        (7, 5): "2771826790140332140865242520369241/396438716042723436917079980147600",
        (7, 6): "-1799166916139193/96743806114007800",
        (8, 1): (
            "-832144750039369683895428386437986853923637763"
            "/15222974550069600748763651844667619945204887"
        ),
        (8, 3): "818622075710363565982285196611368750/3936576237903728151856072395343129",
        (8, 4): (
            "-9818985165491658464841194581385463434793741875"
            "/61642597962658994069869370923196463581866011"
        ),
        (8, 5): (
            "31796692141848558720425711042548134769375/4530254033500045975557858016006308628092"
        ),
        (8, 6): "-14064542118843830075/766928748264306853644",
        (8, 7): "-1424670304836288125/2782839104764768088217",
        (9, 1): "382735282417/11129397249634",
        (9, 4): "5535620703125000/21434089949505429",
        (9, 5): "13867056347656250/32943296570459319",
        (9, 6): "626271188750/142160006043",
        (9, 7): "-51160788125000/289890548217",
        (9, 8): "163193540017/946795234",
    },
    b={
        1: "382735282417/11129397249634",
        4: "5535620703125000/21434089949505429",
        5: "13867056347656250/32943296570459319",
        6: "626271188750/142160006043",
        7: "-51160788125000/289890548217",
        8: "163193540017/946795234",
    },
    c=[0, "3/50", "1439/15000", "1439/10000", "4973/10000", "389/400", "1999/2000", 1, 1],
    order=6,
    b_embedded={
        1: "124310637869885675646798613/2890072468789466426596827670",
        4: "265863151737164990361330921875/1113197271463372303940319369579",
        5: "3075493557174030806536302953125/6843749922042323876546949699876",
        6: "67798000008733879813263055/29532792147666737550036372",
        7: "-1099436585155390846238326375/15055706496446408859196167",
        8: "26171252653086373181571802/368794478890732346033505",
        9: "1/30",
    },
    error_order=5,
)

"""Verner's "most efficient" 6(5) pair, 9 stages, FSAL (Verner, 2010, Numer. Algorithms 53;
coefficients as published on Verner's site, RKV65.IIIXb.Efficient).

Propagates the sixth-order solution.  The ninth stage is ``f(t_{n+1}, y_{n+1})``: it enters
only the fifth-order error estimate and is reused as the next step's first stage.
"""

VERN7 = _tableau(
    "Vern7",
    a={
        (2, 1): "1/200",
        (3, 1): "-4361/4050",
        (3, 2): "2401/2025",
        (4, 1): "49/1200",
        (4, 3): "49/400",
        (5, 1): "2454451729/3841600000",
        (5, 3): "-9433712007/3841600000",
        (5, 4): "4364554539/1920800000",
        (6, 1): (
            "-6187101755456742839167388910402379177523537620"
            "/2324599620333464857202963610201679332423082271"
        ),
        (6, 3): (
            "27569888999279458303270493567994248533230000"
            "/2551701010245296220859455115479340650299761"
        ),
        (6, 4): (
            "-37368161901278864592027018689858091583238040000"
            "/4473131870960004275166624817435284159975481033"
        ),
        (6, 5): (
            "1392547243220807196190880383038194667840000000"
            "/1697219131380493083996999253929006193143549863"
        ),
        (7, 1): "11272026205260557297236918526339/1857697188743815510261537500000",
        (7, 3): "-48265918242888069/1953194276993750",
        (7, 4): "26726983360888651136155661781228/1308381343805114800955157615625",
        (7, 5): "-2090453318815827627666994432/1096684189897834170412307919",
        (7, 6): (
            "1148577938985388929671582486744843844943428041509"
            "/1141532118233823914568777901158338927629837500000"
        ),
        (8, 1): "1304457204588839386329181466225966641/108211771565488329642169667802016000",
        (8, 3): "-1990261989751005/40001418792832",
        (8, 4): "2392691599894847687194643439066780106875/58155654089143548047476915856270826016",
        (8, 5): "-1870932273351008733802814881998561250/419326053051486744762255151208232123",
        (8, 6): (
            "1043329047173803328972823866240311074041739158858792987034783181"
            "/510851127745017966999893975119259285040213723744255237522144000"
        ),
        (8, 7): "-311918858557595100410788125/3171569057622789618800376448",
        (9, 1): "17579784273699839132265404100877911157/1734023495717116205617154737841023480",
        (9, 3): "-18539365951217471064750/434776548575709731377",
        (9, 4): (
            "447448655912568142291911830292656995992000/12511202807447096607487664209063950964109"
        ),
        (9, 5): (
            "-65907597316483030274308429593905808000000/15158061430635748897861852383197382130691"
        ),
        (9, 6): (
            "273847823027445129865693702689010278588244606493753883568739168819449761"
            "/136252034448398939768371761610231099586032870552034688235302796640584360"
        ),
        (9, 7): "694664732797172504668206847646718750/1991875650119463976442052358853258111",
        (9, 8): "-19705319055289176355560129234220800/72595753317320295604316217197876507",
        (10, 1): "-511858190895337044664743508805671/11367030248263048398341724647960",
        (10, 3): "2822037469238841750/15064746656776439",
        (10, 4): "-23523744880286194122061074624512868000/152723005449262599342117017051789699",
        (10, 5): "10685036369693854448650967542704000000/575558095977344459903303055137999707",
        (10, 6): (
            "-6259648732772142303029374363607629515525848829303541906422993"
            "/876479353814142962817551241844706205620792843316435566420120"
        ),
        (10, 7): "17380896627486168667542032602031250/13279937889697320236613879977356033",
    },
    b={
        1: "96762636172307789/2051985304794103980",
        4: "312188947591288252500000/1212357694274963646019729",
        5: "13550580884964304000000000000/51686919683339547115937980629",
        6: (
            "72367769693133178898676076432831566019684378142853445230956642801"
            "/475600216991873963561768100160364792981629064220601844848928537580"
        ),
        7: "1619421054120605468750/3278200730370057108183",
        8: "-66898316144057728000/227310933007074849597",
        9: "181081444637946577/2226845467039736466",
    },
    c=[
        0,
        "1/200",
        "49/450",
        "49/300",
        "911/2000",
        "3480084980/5709648941",
        "221/250",
        "37/40",
        1,
        1,
    ],
    order=7,
    b_embedded={
        1: "117807213929927/2640907728177740",
        4: "4758744518816629500000/17812069906509312711137",
        5: "1730775233574080000000000/7863520414322158392809673",
        6: (
            "2682653613028767167314032381891560552585218935572349997"
            "/12258338284789875762081637252125169126464880985167722660"
        ),
        7: "40977117022675781250/178949401077111131341",
        10: "2152106665253777/106040260335225546",
    },
    error_order=6,
)

"""Verner's "most efficient" 7(6) pair, 10 stages (Verner, 2010, Numer. Algorithms 53;
coefficients as published on Verner's site, RKV76.IIa.Efficient).

Propagates the seventh-order solution.  Not FSAL: the tenth stage (at ``t_{n+1}``, but not at
``y_{n+1}``) enters only the sixth-order error estimate.
"""

VERN8 = _tableau(
    "Vern8",
    a={
        (2, 1): "1/20",
        (3, 1): "-7161/1024000",
        (3, 2): "116281/1024000",
        (4, 1): "1023/25600",
        (4, 3): "3069/25600",
        (5, 1): "4202367/11628100",
        (5, 3): "-3899844/2907025",
        (5, 4): "3982992/2907025",
        (6, 1): "5611/114400",
        (6, 4): "31744/135025",
        (6, 5): "923521/5106400",
        (7, 1): "21173/343200",
        (7, 4): "8602624/76559175",
        (7, 5): "-26782109/689364000",
        (7, 6): "5611/283500",
        (8, 1): "-1221101821869329/690812928000000",
        (8, 4): "-125/2",
        (8, 5): "-1024030607959889/168929280000000",
        (8, 6): "1501408353528689/265697280000000",
        (8, 7): "6070139212132283/92502016000000",
        (9, 1): (
            "-1472514264486215803881384708877264246346044433307094207829051978044531801133057155"
            "/1246894801620032001157059621643986024803301558393487900440453636168046069686436608"
        ),
        (9, 4): (
            "-5172294311085668458375175655246981230039025336933699114138315270772319372469280000"
            "/124619381004809145897278630571215298365257079410236252921850936749076487132995191"
        ),
        (9, 5): (
            "-12070679258469254807978936441733187949484571516120469966534514296406891652614970375"
            "/2722031154761657221710478184531100699497284085048389015085076961673446140398628096"
        ),
        (9, 6): (
            "780125155843893641323090552530431036567795592568497182701460674803126770111481625"
            "/183110425412731972197889874507158786859226102980861859505241443073629143100805376"
        ),
        (9, 7): (
            "664113122959911642134782135839106469928140328160577035357155340392950009492511875"
            "/15178465598586248136333023107295349175279765150089078301139943253016877823170816"
        ),
        (9, 8): (
            "10332848184452015604056836767286656859124007796970668046446015775000000"
            "/1312703550036033648073834248740727914537972028638950165249582733679393783"
        ),
        (10, 1): (
            "-29055573360337415088538618442231036441314060511"
            "/22674759891089577691327962602370597632000000000"
        ),
        (10, 4): "-20462749524591049105403365239069/454251913499893469596231268750",
        (10, 5): "-180269259803172281163724663224981097/38100922558256871086579832832000000",
        (10, 6): (
            "21127670214172802870128286992003940810655221489"
            "/4679473877997892906145822697976708633673728000"
        ),
        (10, 7): (
            "318607235173649312405151265849660869927653414425413"
            "/6714716715558965303132938072935465423910912000000"
        ),
        (10, 8): "212083202434519082281842245535894/20022426044775672563822865371173879",
        (10, 9): (
            "-2698404929400842518721166485087129798562269848229517793703413951226714583"
            "/469545674913934315077000442080871141884676035902717550325616728175875000000"
        ),
        (11, 1): (
            "-2342659845814086836951207140065609179073838476242943917"
            "/1358480961351056777022231400139158760857532162795520000"
        ),
        (11, 4): "-996286030132538159613930889652/16353068885996164905464325675",
        (11, 5): "-26053085959256534152588089363841/4377552804565683061011299942400",
        (11, 6): (
            "20980822345096760292224086794978105312644533925634933539"
            "/3775889992007550803878727839115494641972212962174156800"
        ),
        (11, 7): (
            "890722993756379186418929622095833835264322635782294899"
            "/13921242001395112657501941955594013822830119803764736"
        ),
        (11, 8): (
            "161021426143124178389075121929246710833125"
            "/10997207722131034650667041364346422894371443"
        ),
        (11, 9): (
            "30076066976810251783423249756545243494667226619587649637187426239268485224392535986488"
            "4962513"
            "/4655443337501346455585065336604505603760824779615521285751892810315680492364106674524"
            "398280000"
        ),
        (11, 10): "-31155237437111730665923206875/392862141594230515010338956291",
        (12, 1): (
            "-2866556991825663971778295329101033887534912787724034363"
            "/868226711619262703011213925016143612030669233795338240"
        ),
        (12, 4): "-16957088714171468676387054358954754000/143690415119654683326368228101570221",
        (12, 5): (
            "-4583493974484572912949314673356033540575/451957703655250747157313034270335135744"
        ),
        (12, 6): (
            "2346305388553404258656258473446184419154740172519949575"
            "/256726716407895402892744978301151486254183185289662464"
        ),
        (12, 7): (
            "1657121559319846802171283690913610698586256573484808662625"
            "/13431480411255146477259155104956093505361644432088109056"
        ),
        (12, 8): (
            "345685379554677052215495825476969226377187500"
            "/74771167436930077221667203179551347546362089"
        ),
        (12, 9): (
            "-3205890962717072542791434312152727534008102774023210240571361570757249056167015230160"
            "352087048674542196011"
            "/9475695496839658147830151244512736049846577471272576153724492059731926573060172391034"
            "91074738324033259120"
        ),
        (12, 10): (
            "40279545832706233433100438588458933210937500"
            "/8896460842799482846916972126377338947215101"
        ),
        (12, 11): (
            "-6122933601070769591613093993993358877250/1050517001510235513198246721302027675953"
        ),
        (13, 1): (
            "-618675905535482500672800859344538410358660153899637"
            "/203544282118214047100119475340667684874292102389760"
        ),
        (13, 4): "-4411194916804718600478400319122931000/40373053902469967450761491269633019",
        (13, 5): "-16734711409449292534539422531728520225/1801243715290088669307203927210237952",
        (13, 6): (
            "135137519757054679098042184152749677761254751865630525"
            "/16029587794486289597771326361911895112703716593983488"
        ),
        (13, 7): (
            "38937568367409876012548551903492196137929710431584875"
            "/340956454090191606099548798001469306974758443147264"
        ),
        (13, 8): (
            "-6748865855011993037732355335815350667265625"
            "/7002880395717424621213565406715087764770357"
        ),
        (13, 9): (
            "-1756005520307450928195422767042525091954178296002788308926563193523662404739779789732"
            "685671"
            "/3487678145784699836056880980461864809046072780210305407353338620870615749341549428300"
            "62320"
        ),
        (13, 10): (
            "53381024589235611084013897674181629296875/8959357584795694524874969598508592944141"
        ),
    },
    b={
        1: "44901867737754616851973/1014046409980231013380680",
        6: "791638675191615279648100000/2235604725089973126411512319",
        7: "3847749490868980348119500000/15517045062138271618141237517",
        8: "-13734512432397741476562500000/875132892924995907746928783",
        9: (
            "12274765470313196878428812037740635050319234276006986398294443554969616342274215316330"
            "684448207141"
            "/4893451474937155176503858341435109348888292806866096544828965267965233530521667572994"
            "52852166040"
        ),
        10: "-9798363684577739445312500000/308722986341456031822630699",
        11: "282035543183190840068750/12295407629873040425991",
        12: "-306814272936976936753/1299331183183744997286",
    },
    c=[
        0,
        "1/20",
        "341/3200",
        "1023/6400",
        "39/100",
        "93/200",
        "31/200",
        "943/1000",
        "7067558016280/7837150160667",
        "909/1000",
        "47/50",
        1,
        1,
    ],
    order=8,
    b_embedded={
        1: "10835401739407019406577/244521829356935137978320",
        6: "13908189778321895491375000/39221135527894265375640567",
        7: "73487947527027243487625000/296504045773342769773399443",
        8: "68293140641257649609375000/15353208647806945749946119",
        9: (
            "22060647948996678611017711379974578860522018208949721559448560203338437626022142776381"
            "/1111542009262325874512959185795727215759010577565736079641376621381577236680929558640"
        ),
        10: "-547971229495642458203125000/23237214025700991642563601",
        13: "-28735456870978964189/79783493704265043693",
    },
    error_order=7,
)

"""Verner's "most efficient" 8(7) pair, 13 stages (Verner, 2010, Numer. Algorithms 53;
coefficients as published on Verner's site, RKV87.IIa.Efficient).

Propagates the eighth-order solution.  Not FSAL: the thirteenth stage enters only the
seventh-order error estimate.
"""

ALL_TABLEAUS: dict[str, ButcherTableau] = {
    t.name: t
    for t in (
        EULER,
        HEUN,
        RK4,
        BOGACKI_SHAMPINE,
        FEHLBERG45,
        CASH_KARP,
        DOPRI5,
        TSIT5,
        VERN6,
        VERN7,
        VERN8,
    )
}
"""Every tableau shipped, keyed by its ``name``."""
