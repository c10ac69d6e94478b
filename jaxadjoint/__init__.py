"""jaxadjoint: exact, fast gradients of ODE solutions in JAX.

The discrete adjoint of adaptive explicit Runge–Kutta methods, behind one `solve`.
"""

from . import _jax_workarounds  # noqa: F401  (JAX rules the transformations need)
from ._adjoint import DiscreteAdjoint as DiscreteAdjoint
from ._allocator import retain_freed_memory as retain_freed_memory
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
from ._events import Event as Event
from ._integrate import solve as solve
from ._predictive import PredictiveController as PredictiveController
from ._recursive import Recursive as Recursive
from ._reference import replay_on_grid as replay_on_grid
from ._results import RESULTS as RESULTS
from ._saveat import SaveAt as SaveAt
from ._sensitivity_base import AbstractSensitivity as AbstractSensitivity
from ._small_loops import compile_small_loops as compile_small_loops
from ._solution import EventLog as EventLog, Solution as Solution
from ._time_switches import TimeSwitchWarning as TimeSwitchWarning
from .solvers._base import AbstractSolver as AbstractSolver
from .solvers._esdirk import AbstractESDIRK as AbstractESDIRK, Kvaerno5 as Kvaerno5
from .solvers._esdirk_tableaus import ESDIRKTableau as ESDIRKTableau
from .solvers._explicit import (
    RK4 as RK4,
    AbstractERK as AbstractERK,
    BogackiShampine as BogackiShampine,
    CashKarp as CashKarp,
    Dopri5 as Dopri5,
    Euler as Euler,
    Fehlberg45 as Fehlberg45,
    Heun as Heun,
    Tsit5 as Tsit5,
    Vern6 as Vern6,
    Vern7 as Vern7,
    Vern8 as Vern8,
)
from .solvers._rosenbrock import (
    AbstractRosenbrock as AbstractRosenbrock,
    Rodas3 as Rodas3,
    Rodas4 as Rodas4,
    Rodas5 as Rodas5,
)
from .solvers._rosenbrock_tableaus import RosenbrockTableau as RosenbrockTableau
from .solvers._tableaus import ButcherTableau as ButcherTableau

__version__ = "0.1.0"
from ._check_gradient import (
    GradientCheck as GradientCheck,
    GradientComparison as GradientComparison,
    check_gradient as check_gradient,
)
from ._continuous_adjoint import ContinuousAdjoint as ContinuousAdjoint
from ._discrete_forward import DiscreteForward as DiscreteForward
from ._finite_differences import FiniteDifferences as FiniteDifferences
from ._forward_sensitivity import (
    ForwardSensitivity as ForwardSensitivity,
    SensitivityTrajectory as SensitivityTrajectory,
    normalised_sensitivities as normalised_sensitivities,
    sensitivity_trajectory as sensitivity_trajectory,
)
from ._identifiability import (
    Identifiability as Identifiability,
    identifiability as identifiability,
)
