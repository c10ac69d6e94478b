"""Coefficients of ESDIRK methods (singly diagonally implicit, explicit first stage), as data.

An ``s``-stage ESDIRK method has a lower-triangular Butcher matrix ``a`` with ``a_11 = 0``
(the first stage is ``y_n`` itself) and the same ``gamma`` on the rest of the diagonal::

    k_1 = f(t_n, y_n)
    k_i = f(t_n + c_i h, Z_i),   Z_i = y_n + h sum_{j<i} a_ij k_j + h gamma k_i   (i >= 2)
    y_{n+1} = y_n + h sum_i b_i k_i,          error estimate  h sum_i (b_i - bhat_i) k_i

Each implicit stage is one nonlinear system in ``k_i`` whose Newton matrix is
``I - gamma h J`` for every stage: one LU factorisation serves the whole step.
*Stiffly accurate* methods (``b`` = the last row of ``a``) have ``y_{n+1} = Z_s``.

`ESDIRKTableau` checks the structure and the simple sums on creation (``c`` = row sums,
``sum b = 1``, ``sum bhat = 1``); ``tests/test_esdirk.py`` checks the full order conditions
(rooted trees, Butcher's conditions with the whole matrix ``a``) and L-stability.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class ESDIRKTableau:
    """The coefficients of an ESDIRK method (module docstring).

    Attributes:
        name: human-readable name.
        gamma: the diagonal of ``a`` after the first stage.
        a: ``(s, s)`` lower-triangular Butcher matrix, ``a_11 = 0``, ``a_ii = gamma``.
        b: ``(s,)`` weights of the propagated solution.
        b_embedded: ``(s,)`` weights of the embedded solution (the error estimate is
            ``h sum_i (b_i - b_embedded_i) k_i``).
        c: ``(s,)`` stage nodes, the row sums of ``a``.
        predictor: ``(s, s)`` strictly lower-triangular weights of the Newton starting
            guess ``k_i ~ sum_{j<i} predictor_ij k_j`` (rows sum to 1; only a guess: the
            converged stage does not depend on it).
        order, error_order: orders of the propagated and the embedded solution.
    """

    name: str
    gamma: float
    a: np.ndarray
    b: np.ndarray
    b_embedded: np.ndarray
    c: np.ndarray
    predictor: np.ndarray
    order: int
    error_order: int

    def __post_init__(self) -> None:
        arrays = {}
        for key in ("a", "b", "b_embedded", "c", "predictor"):
            x = np.array(getattr(self, key), dtype=np.float64)
            x.setflags(write=False)
            arrays[key] = x
            object.__setattr__(self, key, x)
        a, s = arrays["a"], arrays["b"].shape[0]
        if a.shape != (s, s) or arrays["predictor"].shape != (s, s):
            raise ValueError(f"{self.name}: a and predictor must be ({s}, {s})")
        for key in ("b_embedded", "c"):
            if arrays[key].shape != (s,):
                raise ValueError(f"{self.name}: {key} must have shape ({s},)")
        if np.any(np.triu(a, 1) != 0) or np.any(np.triu(arrays["predictor"]) != 0):
            raise ValueError(f"{self.name}: a must be lower and predictor strictly lower "
                             "triangular")
        diagonal = np.diag(a)
        if diagonal[0] != 0 or np.any(diagonal[1:] != self.gamma) or not self.gamma > 0:
            raise ValueError(f"{self.name}: the diagonal of a must be (0, gamma, ..., gamma) "
                             "with gamma > 0 (explicit first stage, singly implicit)")
        if not all(np.all(np.isfinite(x)) for x in arrays.values()):
            raise ValueError(f"{self.name}: coefficients must be finite")
        if np.any(np.abs(a.sum(axis=1) - arrays["c"]) > 1e-14):
            raise ValueError(f"{self.name}: c must be the row sums of a")
        if abs(arrays["b"].sum() - 1) > 1e-14 or abs(arrays["b_embedded"].sum() - 1) > 1e-14:
            raise ValueError(f"{self.name}: b and b_embedded must each sum to 1")
        if np.any(np.abs(arrays["predictor"].sum(axis=1)[1:] - 1) > 1e-13):
            raise ValueError(f"{self.name}: the predictor rows must sum to 1")

    @property
    def num_stages(self) -> int:
        return self.b.shape[0]

    @property
    def b_error(self) -> np.ndarray:
        """``b - b_embedded``: the weights of the error estimate."""
        return self.b - self.b_embedded

    @property
    def stiffly_accurate(self) -> bool:
        """Whether ``b`` is the last row of ``a`` (then ``y_{n+1} = Z_s``)."""
        return bool(np.all(self.b == self.a[-1]))


def _from_rows(rows: list[list[float]], gamma: float) -> np.ndarray:
    """The ``(s, s)`` matrix with rows 2..s given without their diagonal ``gamma``."""
    s = len(rows) + 1
    out = np.zeros((s, s))
    for i, row in enumerate(rows, start=1):
        out[i, : len(row)] = row
        out[i, i] = gamma
    return out


_KV5_GAMMA = 0.26
_KV5_A = _from_rows(
    [
        [0.26],
        [0.13, 0.84033320996790809],
        [0.22371961478320505, 0.47675532319799699, -0.06470895363112615],
        [0.16648564323248321, 0.10450018841591720, 0.03631482272098715,
         -0.13090704451073998],
        [0.13855640231268224, 0.0, -0.04245337201752043, 0.02446657898003141,
         0.61943039072480676],
        [0.13659751177640291, 0.0, -0.05496908796538376, -0.04118626728321046,
         0.62993304899016403, 0.06962479448202728],
    ],
    _KV5_GAMMA,
)

KVAERNO5 = ESDIRKTableau(
    name="Kvaerno5",
    gamma=_KV5_GAMMA,
    a=_KV5_A,
    b=_KV5_A[6],
    # The embedded solution is the sixth stage value (stiffly accurate, order 4).
    b_embedded=np.append(_KV5_A[5, :6], 0.0),
    c=_KV5_A.sum(axis=1),
    # Starting guesses for the stage slopes, as published with OrdinaryDiffEq.jl's
    # Kvaerno5 (and diffrax's, which sets the first one to 1): extrapolations of the
    # earlier slopes; the last stage starts from the sixth stage's weights.
    predictor=np.array([
        [0, 0, 0, 0, 0, 0, 0],
        [1.0, 0, 0, 0, 0, 0, 0],
        [-1.366025403784441, 2.3660254037844357, 0, 0, 0, 0, 0],
        [-0.19650552613122207, 0.8113579546496623, 0.38514757148155954, 0, 0, 0, 0],
        [0.10375304369958693, 0.937994698066431, -0.04174774176601781, 0, 0, 0, 0],
        [-0.17281112873898072, 0.6235784481025847, 0.5492326806363959, 0, 0, 0, 0],
        list(_KV5_A[5, :6]) + [0],
    ]),
    order=5,
    error_order=4,
)
"""Kvaerno5 (A. Kvaernø, BIT 44 (2004) 489-502): ESDIRK 5(4), 7 stages, ``gamma = 0.26``,
stiffly accurate and L-stable; the embedded 4th-order solution is the sixth stage (also
stiffly accurate, not L-stable: ``|R(-inf)| ~ 0.75``).  Coefficients to 17 digits as
published (the same values as in diffrax and OrdinaryDiffEq.jl)."""

ALL_ESDIRK_TABLEAUS = (KVAERNO5,)
