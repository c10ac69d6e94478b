"""Tests of the Butcher tableaus: order conditions, embedded orders, FSAL, validation, convergence.

Plain NumPy, no JAX: the tableaus are data, and these tests check the data against the theory.

* Order conditions come from rooted trees (Butcher): a method has order ``p`` iff, for every
  rooted tree ``tau`` with at most ``p`` vertices, the elementary weight ``Phi(tau)`` equals
  ``1 / gamma(tau)``.  Trees up to order 9 are generated here (486 of them), enough to show that
  every solution has exactly its advertised order: all conditions up to ``order`` hold and some
  condition of ``order + 1`` fails.
* Convergence is checked end to end with a fixed-step integrator written out below.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from numpy.polynomial import Polynomial

from jaxadjoint.solvers import _tableaus
from jaxadjoint.solvers._tableaus import ALL_TABLEAUS, ButcherTableau

EPS = np.finfo(np.float64).eps
MAX_TREE_ORDER = 9

# --------------------------------------------------------------------------------------------
# Rooted trees and elementary weights.


@dataclasses.dataclass(frozen=True)
class Tree:
    """A rooted tree, stored as the indices (into the list of all trees) of the root's subtrees.

    Attributes:
        order: number of vertices ``|tau|``.
        children: indices of the subtrees hanging from the root, non-increasing.
        gamma: the density ``gamma(tau) = |tau| * prod gamma(child)``.
    """

    order: int
    children: tuple[int, ...]
    gamma: int


def rooted_trees(max_order: int) -> list[Tree]:
    """All rooted trees with at most ``max_order`` vertices, by increasing order.

    A tree of order ``n`` is a root with a multiset of subtrees of total order ``n - 1``; each
    multiset is generated once, as a non-increasing sequence of indices of smaller trees.
    """
    trees = [Tree(order=1, children=(), gamma=1)]

    def forests(total: int, max_index: int) -> Iterator[tuple[int, ...]]:
        if total == 0:
            yield ()
            return
        for i in range(max_index, -1, -1):
            if trees[i].order <= total:
                for rest in forests(total - trees[i].order, i):
                    yield (i, *rest)

    for n in range(2, max_order + 1):
        new = [
            Tree(n, children, n * math.prod(trees[i].gamma for i in children))
            for children in forests(n - 1, len(trees) - 1)
        ]
        trees.extend(new)
    return trees


TREES = rooted_trees(MAX_TREE_ORDER)


def test_tree_counts() -> None:
    # Number of rooted trees with n vertices: OEIS A000081.
    counts = [sum(tree.order == n for tree in TREES) for n in range(1, MAX_TREE_ORDER + 1)]
    assert counts == [1, 1, 2, 4, 9, 20, 48, 115, 286]
    # The densities of the four trees of order 4 (bushy, mixed, mixed, tall).
    assert sorted(tree.gamma for tree in TREES if tree.order == 4) == [4, 8, 12, 24]
    # The tall tree of order n has gamma = n!.
    for n in range(1, MAX_TREE_ORDER + 1):
        assert max(tree.gamma for tree in TREES if tree.order == n) == math.factorial(n)


def order_defects(a: np.ndarray, b: np.ndarray, max_order: int) -> tuple[np.ndarray, ...]:
    """Per tree up to ``max_order``: its order, ``Phi - 1/gamma``, and the round-off scale.

    The nodes enter as ``c = a @ 1`` (``g`` of the one-vertex subtree), the row-sum condition
    that ``ButcherTableau`` enforces and ``test_shapes_and_sums`` checks again.
    ``Phi(tau) = b . g(tau)`` with ``g(leaf) = 1`` and ``g(tau) = prod_children (a @ g(child))``
    (elementwise).  The same recursion on ``|a|`` and ``|b|`` gives ``Phi_abs(tau)``, the size of
    the terms summed: evaluating ``Phi`` in floating point is accurate to a small multiple of
    ``eps * Phi_abs``, so that is the scale against which a defect is judged.  (Verner's weights
    reach ~170 with heavy cancellation, so an absolute tolerance would be meaningless.)
    """
    trees = [tree for tree in TREES if tree.order <= max_order]
    abs_a, abs_b = np.abs(a), np.abs(b)
    g: list[np.ndarray] = []
    g_abs: list[np.ndarray] = []
    orders, defects, scales = [], [], []
    for tree in trees:
        v = np.ones(len(b))
        v_abs = np.ones(len(b))
        for i in tree.children:
            v = v * (a @ g[i])
            v_abs = v_abs * (abs_a @ g_abs[i])
        g.append(v)
        g_abs.append(v_abs)
        orders.append(tree.order)
        defects.append(b @ v - 1 / tree.gamma)
        scales.append(abs_b @ v_abs)
    return np.array(orders), np.array(defects), np.array(scales)


def satisfied(a: np.ndarray, b: np.ndarray, max_order: int) -> np.ndarray:
    """For n = 1..max_order: whether every order-``n`` condition holds to round-off."""
    orders, defects, scales = order_defects(a, b, max_order)
    # The shipped tableaus meet every condition to within 1 * EPS * scale (Verner's included,
    # where that is up to ~3e-11 absolute); 16 leaves headroom and still catches a relative
    # change of 1e-9 in any coefficient (see test_order_conditions_catch_a_typo).
    ok = np.abs(defects) <= 16 * EPS * scales
    return np.array([bool(np.all(ok[orders == n])) for n in range(1, max_order + 1)])


def attained_order(a: np.ndarray, b: np.ndarray) -> int:
    """The largest ``p <= MAX_TREE_ORDER`` with every condition of order ``<= p`` satisfied."""
    ok = satisfied(a, b, MAX_TREE_ORDER)
    return int(np.argmin(ok)) if not np.all(ok) else MAX_TREE_ORDER


def embedded_weights(tableau: ButcherTableau) -> np.ndarray:
    assert tableau.b_error is not None
    return tableau.b - tableau.b_error


TABLEAUS = list(ALL_TABLEAUS.values())
PAIRS = [t for t in TABLEAUS if t.b_error is not None]
ids = [t.name for t in TABLEAUS]
pair_ids = [t.name for t in PAIRS]


# --------------------------------------------------------------------------------------------
# The catalogue.

# name: (constant, stages, order, error_order, fsal, live stages).  Derived by hand from the
# published tableaus: a stage is dead when neither b nor any later live stage uses it (only
# the error estimate does).
EXPECTED = {
    "Euler": ("EULER", 1, 1, None, False, (0,)),
    "Heun": ("HEUN", 2, 2, None, False, (0, 1)),
    "RK4": ("RK4", 4, 4, None, False, (0, 1, 2, 3)),
    # Stage 3 is f(t_{n+1}, y_{n+1}): FSAL, used only by the error estimate.
    "BogackiShampine": ("BOGACKI_SHAMPINE", 4, 3, 2, True, (0, 1, 2)),
    # The 4th-order solution ignores stage 5 (c = 1/2), which only the 5th-order one uses.
    "Fehlberg45": ("FEHLBERG45", 6, 4, 5, False, (0, 1, 2, 3, 4)),
    # b[1] = b[4] = 0, but stages 1 and 4 feed later live stages.
    "CashKarp": ("CASH_KARP", 6, 5, 4, False, (0, 1, 2, 3, 4, 5)),
    "Dopri5": ("DOPRI5", 7, 5, 4, True, (0, 1, 2, 3, 4, 5)),
    "Tsit5": ("TSIT5", 7, 5, 4, True, (0, 1, 2, 3, 4, 5)),
    # Verner's 9-stage 6(5) pair *is* FSAL: a[8] == b and c[8] == 1.
    "Vern6": ("VERN6", 9, 6, 5, True, tuple(range(8))),
    # Stage 9 (c = 1) is not at y_{n+1} (a[9] != b): not FSAL, but dead for the solution.
    "Vern7": ("VERN7", 10, 7, 6, False, tuple(range(9))),
    "Vern8": ("VERN8", 13, 8, 7, False, tuple(range(12))),
}


def test_catalogue() -> None:
    assert set(ALL_TABLEAUS) == set(EXPECTED)
    for name, tableau in ALL_TABLEAUS.items():
        assert tableau.name == name
        assert getattr(_tableaus, EXPECTED[name][0]) is tableau


@pytest.mark.parametrize("tableau", TABLEAUS, ids=ids)
def test_shapes_and_sums(tableau: ButcherTableau) -> None:
    _, stages, order, error_order, _, _ = EXPECTED[tableau.name]
    s = tableau.num_stages
    assert s == stages
    assert (tableau.order, tableau.error_order) == (order, error_order)
    assert tableau.a.shape == (s, s) and tableau.b.shape == (s,) and tableau.c.shape == (s,)
    assert tableau.a.dtype == tableau.b.dtype == tableau.c.dtype == np.float64
    assert np.all(np.tril(tableau.a, -1) == tableau.a)
    np.testing.assert_allclose(tableau.a.sum(axis=1), tableau.c, rtol=0, atol=1e-13)
    assert tableau.c[0] == 0
    assert abs(tableau.b.sum() - 1) < 1e-13
    if tableau.b_error is not None:
        assert abs(tableau.b_error.sum()) < 1e-13
        assert np.any(tableau.b_error != 0)


@pytest.mark.parametrize("tableau", TABLEAUS, ids=ids)
def test_read_only(tableau: ButcherTableau) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        tableau.order = 99  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        tableau.a[1:, 0] = 0.0


@pytest.mark.parametrize("tableau", TABLEAUS, ids=ids)
def test_fsal_and_live_stages(tableau: ButcherTableau) -> None:
    *_, fsal, live = EXPECTED[tableau.name]
    assert tableau.fsal is fsal
    assert tableau.live_stages == live
    if fsal:
        # The last stage evaluates f(t_{n+1}, y_{n+1}) and does not enter y_{n+1} itself.
        assert tableau.c[-1] == 1 and tableau.b[-1] == 0
        assert tableau.live_stages == tuple(range(tableau.num_stages - 1))


# --------------------------------------------------------------------------------------------
# Order conditions.


@pytest.mark.parametrize("tableau", TABLEAUS, ids=ids)
def test_order_conditions(tableau: ButcherTableau) -> None:
    """``b`` satisfies every condition up to ``order`` to round-off, and not all of ``order+1``."""
    assert attained_order(tableau.a, tableau.b) == tableau.order


@pytest.mark.parametrize("tableau", PAIRS, ids=pair_ids)
def test_embedded_order_conditions(tableau: ButcherTableau) -> None:
    """The embedded weights ``b - b_error`` have exactly order ``error_order``.

    None of the shipped pairs' embedded methods happens to satisfy more conditions than its
    nominal order (this test would say so).  For Fehlberg45 the embedded solution is the
    fifth-order one, higher than the propagated fourth-order solution.
    """
    assert attained_order(tableau.a, embedded_weights(tableau)) == tableau.error_order


def test_embedded_order_relation() -> None:
    # Every pair propagates its higher-order solution (local extrapolation) except Fehlberg45,
    # which, as the classical RKF45, propagates the fourth-order one.
    for tableau in PAIRS:
        assert tableau.error_order is not None
        expected_gap = 1 if tableau.name != "Fehlberg45" else -1
        assert tableau.order - tableau.error_order == expected_gap


def test_order_violations_are_not_round_off() -> None:
    # The failing conditions of order + 1 fail by far more than round-off, so the exact order
    # is not a matter of tolerance.
    for tableau in TABLEAUS:
        weights = [(tableau.b, tableau.order)]
        if tableau.b_error is not None:
            weights.append((embedded_weights(tableau), tableau.error_order))
        for b, order in weights:
            orders, defects, scales = order_defects(tableau.a, b, order + 1)
            last = orders == order + 1
            assert np.any(np.abs(defects[last]) > 1e6 * EPS * scales[last]), tableau.name


@pytest.mark.parametrize("tableau", TABLEAUS, ids=ids)
def test_order_conditions_catch_a_typo(tableau: ButcherTableau) -> None:
    """A coefficient off in its 8th significant digit breaks an order condition.

    This is the point of the checks above: a mistyped digit cannot pass.  A few entries of
    ``a``, ``b`` and ``b_embedded`` per tableau, chosen at random, are perturbed by a relative
    ``1e-8``.  (Tried on every entry, the order conditions alone notice perturbations of
    ``1e-13`` for the median coefficient and ``1e-9`` for the least sensitive one, Vern8's
    ``a[2, 0]``.)  The last row of an FSAL tableau reaches only the error estimate, with a small
    weight; it is guarded instead by ``fsal``, which needs ``a[-1] == b`` exactly.
    """
    rng = np.random.default_rng(0)
    b_embedded = None if tableau.b_error is None else embedded_weights(tableau)

    def all_hold(a: np.ndarray, b: np.ndarray, b_embedded: np.ndarray | None) -> bool:
        ok = bool(np.all(satisfied(a, b, tableau.order)))
        if b_embedded is not None:
            assert tableau.error_order is not None
            ok = ok and bool(np.all(satisfied(a, b_embedded, tableau.error_order)))
        return ok

    def perturbed(x: np.ndarray, index: tuple[int, ...]) -> np.ndarray:
        x = x.copy()
        x[index] *= 1 + 1e-8
        return x

    assert all_hold(tableau.a, tableau.b, b_embedded)
    rows = tableau.num_stages - 1 if tableau.fsal else tableau.num_stages
    a_entries = [tuple(ix) for ix in np.argwhere(tableau.a[:rows] != 0)]
    for k in rng.permutation(len(a_entries))[:6]:
        a = perturbed(tableau.a, a_entries[k])
        assert not all_hold(a, tableau.b, b_embedded), (tableau.name, "a", a_entries[k])
    for k in rng.permutation(np.flatnonzero(tableau.b))[:2]:
        b = perturbed(tableau.b, (k,))
        assert not all_hold(tableau.a, b, b_embedded), (tableau.name, "b", k)
    if b_embedded is not None:
        for k in rng.permutation(np.flatnonzero(b_embedded))[:2]:
            e = perturbed(b_embedded, (k,))
            assert not all_hold(tableau.a, tableau.b, e), (tableau.name, "b_embedded", k)


# --------------------------------------------------------------------------------------------
# Validation.


def _heun(**overrides: object) -> ButcherTableau:
    fields: dict[str, object] = dict(
        name="bad",
        a=[[0.0, 0.0], [1.0, 0.0]],
        b=[0.5, 0.5],
        c=[0.0, 1.0],
        order=2,
        b_error=[0.5, -0.5],
        error_order=1,
    )
    fields.update(overrides)
    return ButcherTableau(**fields)  # type: ignore[arg-type]


def test_validation_accepts_good_tableau() -> None:
    tableau = _heun()
    assert tableau.num_stages == 2 and not tableau.fsal


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(c=[0.0, 0.9]), "bad: row sums of a must equal c"),
        (dict(a=[[0.0, 1.0], [0.0, 0.0]], c=[1.0, 0.0]), "strictly lower triangular"),
        (dict(a=[[0.5, 0.0], [0.5, 0.0]], c=[0.5, 0.5]), "strictly lower triangular"),
        (dict(b=[0.5, 0.6]), "weights b must sum to 1"),
        (dict(b_error=[0.5, -0.4]), "error weights must sum to 0"),
        (dict(a=[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), r"a must be \(s, s\)"),
        (dict(c=[0.0, 1.0, 1.0]), r"c \(s,\)"),
        (dict(b=1.0), "b must be a 1-D array"),
        (dict(a=[[0.0, 0.0], [np.nan, 0.0]]), "coefficients must be finite"),
        (dict(b_error=[np.inf, -np.inf]), "error weights must be finite"),
        (dict(b_error=[0.5, -0.5, 0.0]), r"b_error must have shape \(2,\)"),
        (dict(error_order=None), "an embedded pair needs error_order"),
        (dict(b_error=None), "error_order given without b_error"),
    ],
)
def test_validation_rejects(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _heun(**overrides)


def test_validation_tolerance_scales_with_coefficients() -> None:
    # Sums of large coefficients carry round-off of ~1e-14 absolute (Verner's weights reach
    # ~170): that is accepted, a real error of 1e-9 is not.
    a = [[0.0, 0.0, 0.0], [0.5, 0.0, 0.0], [-150.0, 151.0, 0.0]]
    c = [0.0, 0.5, 1.0]
    b_ok = [0.1 + 170.1, 0.2 - 2 * 170.1, 0.7 + 170.1]
    assert abs(np.sum(b_ok) - 1) > 1e-14  # 1 up to round-off, not exactly
    ButcherTableau(name="big", a=a, b=b_ok, c=c, order=1)
    with pytest.raises(ValueError, match="weights b must sum to 1"):
        ButcherTableau(name="big", a=a, b=[b_ok[0] + 1e-9, b_ok[1], b_ok[2]], c=c, order=1)
    with pytest.raises(ValueError, match="row sums of a must equal c"):
        ButcherTableau(name="big", a=a, b=b_ok, c=[0.0, 0.5, 1.0 + 1e-9], order=1)


def test_validation_does_not_alias_inputs() -> None:
    a = np.array([[0.0, 0.0], [1.0, 0.0]])
    tableau = _heun(a=a)
    a[1, 0] = 5.0  # the caller's array stays writeable and the tableau keeps its own copy
    assert tableau.a[1, 0] == 1.0


# --------------------------------------------------------------------------------------------
# Convergence of fixed-step integration.


def integrate(
    tableau: ButcherTableau,
    weights: np.ndarray,
    f: Callable[[float, np.ndarray], np.ndarray],
    y0: np.ndarray,
    t1: float,
    num_steps: int,
) -> np.ndarray:
    """``num_steps`` equal explicit Runge–Kutta steps from ``(0, y0)`` to ``t1``."""
    h = t1 / num_steps
    y = np.asarray(y0, dtype=np.float64)
    k = np.zeros((tableau.num_stages, *y.shape))
    for n in range(num_steps):
        t = n * h
        for m in range(tableau.num_stages):
            k[m] = f(t + tableau.c[m] * h, y + h * (tableau.a[m, :m] @ k[:m]))
        y = y + h * (weights @ k)
    return y


def fitted_order(errors: np.ndarray, num_steps: np.ndarray) -> float:
    """Least-squares slope of ``log(error)`` against ``log(h)``."""
    return float(np.polyfit(-np.log(num_steps), np.log(errors), 1)[0])


def solutions(tableau: ButcherTableau) -> list[tuple[str, np.ndarray, int]]:
    out = [("propagated", tableau.b, tableau.order)]
    if tableau.b_error is not None:
        assert tableau.error_order is not None
        out.append(("embedded", embedded_weights(tableau), tableau.error_order))
    return out


SOLUTIONS = [(t, label, w, p) for t in TABLEAUS for label, w, p in solutions(t)]
solution_ids = [f"{t.name}-{label}" for t, label, _, _ in SOLUTIONS]


@pytest.mark.parametrize(
    "tableau, label, weights, order",
    [case for case in SOLUTIONS if case[3] <= 4],
    ids=[i for i, case in zip(solution_ids, SOLUTIONS, strict=True) if case[3] <= 4],
)
def test_convergence_smooth_problem(
    tableau: ButcherTableau, label: str, weights: np.ndarray, order: int
) -> None:
    """``y' = -y + sin(t)``, ``y(0) = 0`` on ``[0, 1]`` with ``N = 16 ... 128`` equal steps.

    Only solutions of order <= 4.  The optimised pairs of order >= 5 have principal error
    coefficients so small that, on smooth problems, the next terms dominate down to errors of
    ~1e-12 and below, where round-off (and, for Verner's pairs, the ~1e-11 defects left by
    rounding their large coefficients) takes over: fitted slopes of 5.2 to 7.4 for nominal
    orders 5 to 8 in trials, which would test the tolerance rather than the tableau.  The
    graded problem below covers every order exactly.
    """
    del label

    def f(t: float, y: np.ndarray) -> np.ndarray:
        return -y + np.sin(t)

    exact = 0.5 * (np.sin(1.0) - np.cos(1.0) + np.exp(-1.0))
    num_steps = np.array([16, 32, 64, 128])
    errors = np.array(
        [abs(integrate(tableau, weights, f, np.zeros(()), 1.0, n) - exact) for n in num_steps]
    )
    assert abs(fitted_order(errors, num_steps) - order) < 0.3


def graded_problem(dim: int) -> tuple[Callable[[float, np.ndarray], np.ndarray], np.ndarray]:
    """A polynomial ODE on which a method of order ``dim - 1`` has error exactly ``C h^(dim-1)``.

    Component ``u_k`` (``k = 1..dim``, ``u(0) = 0``) has "weight" ``k``, time has weight 1, and
    ``u_1' = 1``, ``u_k' = u_{k-1} + t u_{k-2} + sum_{i+j=k-1} u_i u_j`` (random positive
    coefficients) has weight ``k - 1``. Then every elementary differential of order ``r`` has
    weight ``k - r`` in component ``k``: those of order ``> dim`` vanish, and those of order
    ``dim`` are constants that only enter the last component. A method of order ``p = dim - 1``
    therefore makes the same local error ``K h^(p+1)`` in every step, with ``K`` a positive
    combination of its order-``(p+1)`` defects, and nothing else: the global error is exactly
    ``K T h^p`` for every step size, with no asymptotic regime to wait for. Exercises the nodes
    ``c`` through ``t``.

    Returns the vector field and the exact solution at ``t = 1`` (by Picard iteration on
    polynomials, which terminates because the system is triangular).
    """
    rng = np.random.default_rng(dim)
    linear = rng.uniform(0.5, 1.5, size=(dim, 2))
    quadratic = rng.uniform(0.5, 1.5, size=(dim, dim))
    # 0-based: u[k] has weight k + 1, so u[i] u[j] has weight k when i + j == k - 2.
    products = [[(i, k - 2 - i) for i in range(k - 1) if i >= k - 2 - i] for k in range(dim)]

    def f(t: float, u: np.ndarray) -> np.ndarray:
        du = np.empty(dim)
        du[0] = 1.0
        for k in range(1, dim):
            v = linear[k, 0] * u[k - 1] + (linear[k, 1] * t * u[k - 2] if k >= 2 else 0.0)
            du[k] = v + sum(quadratic[k, i] * u[i] * u[j] for i, j in products[k])
        return du

    t = Polynomial([0.0, 1.0])
    u = [t]
    for k in range(1, dim):
        du = linear[k, 0] * u[k - 1] + (linear[k, 1] * t * u[k - 2] if k >= 2 else 0.0)
        for i, j in products[k]:
            du = du + quadratic[k, i] * u[i] * u[j]
        u.append(du.integ())
    return f, np.array([p(1.0) for p in u])


@pytest.mark.parametrize("tableau, label, weights, order", SOLUTIONS, ids=solution_ids)
def test_convergence_graded_problem(
    tableau: ButcherTableau, label: str, weights: np.ndarray, order: int
) -> None:
    """Every propagated and embedded solution converges at exactly its order.

    On ``graded_problem`` the error is ``C h^p`` for all ``h``, so the coarsest grids can be
    used: ``N = 1 ... 4`` keeps even Vern6's and Vern8's tiny error constants (relative error
    ~1e-6 at ``N = 1``) orders of magnitude above round-off and above the ~1e-11 defects left
    by rounding Verner's large coefficients to double.
    """
    del label
    f, exact = graded_problem(order + 1)
    num_steps = np.array([1, 2, 3, 4])
    errors = np.array(
        [
            abs(integrate(tableau, weights, f, np.zeros(order + 1), 1.0, n)[-1] - exact[-1])
            for n in num_steps
        ]
    )
    assert np.all(errors > 1e3 * EPS * abs(exact[-1]))  # far from round-off
    assert abs(fitted_order(errors, num_steps) - order) < 0.3
