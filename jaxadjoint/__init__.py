"""jaxadjoint: exact, fast gradients of ODE solutions in JAX.

The discrete adjoint of adaptive explicit Runge–Kutta methods, behind one `solve`.
"""

from ._adjoint import DiscreteAdjoint as DiscreteAdjoint
from ._checkpoints import (
    AbstractCheckpoint as AbstractCheckpoint,
    StoreStages as StoreStages,
    StoreStates as StoreStates,
)
from ._controllers import (
    AbstractController as AbstractController,
    ConstantStep as ConstantStep,
    IController as IController,
    OdeintController as OdeintController,
    PIController as PIController,
    StepTo as StepTo,
)
from ._integrate import solve as solve
from ._results import RESULTS as RESULTS
from ._sensitivity_base import AbstractSensitivity as AbstractSensitivity
from ._solution import Solution as Solution
from ._solvers import (
    AbstractERK as AbstractERK,
    BogackiShampine as BogackiShampine,
    CashKarp as CashKarp,
    Dopri5 as Dopri5,
    Euler as Euler,
    Fehlberg45 as Fehlberg45,
    Heun as Heun,
    RK4 as RK4,
    Tsit5 as Tsit5,
    Vern6 as Vern6,
    Vern7 as Vern7,
    Vern8 as Vern8,
)
from ._tableaus import ButcherTableau as ButcherTableau

__version__ = "0.1.0"
