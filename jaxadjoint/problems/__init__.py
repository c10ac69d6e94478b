"""Reference ODE problems shared by tests, benchmarks and notebooks (no solver inside)."""

from ._problem import ODEProblem as ODEProblem
from .brusselator import (
    brusselator_problem as brusselator_problem,
    brusselator_rhs as brusselator_rhs,
    brusselator_stiff_problem as brusselator_stiff_problem,
)
from .heat import (
    HEAT_PAPER_ALPHA as HEAT_PAPER_ALPHA,
    HEAT_PAPER_FINAL_TIME as HEAT_PAPER_FINAL_TIME,
    HEAT_PAPER_GRID_SIZES as HEAT_PAPER_GRID_SIZES,
    HEAT_PAPER_STEPS as HEAT_PAPER_STEPS,
    heat_exact_sensitivity as heat_exact_sensitivity,
    heat_exact_solution as heat_exact_solution,
    heat_grid as heat_grid,
    heat_problem as heat_problem,
    heat_rhs as heat_rhs,
    heat_rk_sensitivity as heat_rk_sensitivity,
    heat_rk_solution as heat_rk_solution,
    heat_semidiscrete_eigenvalue as heat_semidiscrete_eigenvalue,
    heat_semidiscrete_sensitivity as heat_semidiscrete_sensitivity,
    heat_semidiscrete_solution as heat_semidiscrete_solution,
)
from .linear import (
    exponential_decay_problem as exponential_decay_problem,
    exponential_decay_rhs as exponential_decay_rhs,
    exponential_decay_sensitivity as exponential_decay_sensitivity,
    exponential_decay_solution as exponential_decay_solution,
    linear_system_problem as linear_system_problem,
    linear_system_rhs as linear_system_rhs,
    linear_system_sensitivity as linear_system_sensitivity,
    linear_system_solution as linear_system_solution,
    periodic_growth_problem as periodic_growth_problem,
    periodic_growth_rhs as periodic_growth_rhs,
    periodic_growth_sensitivity as periodic_growth_sensitivity,
    periodic_growth_solution as periodic_growth_solution,
)
from .lotka_volterra import (
    glv_equilibrium as glv_equilibrium,
    glv_paper_problem as glv_paper_problem,
    glv_problem as glv_problem,
    glv_rhs as glv_rhs,
    lotka_volterra_problem as lotka_volterra_problem,
    lotka_volterra_rhs as lotka_volterra_rhs,
)
from .robertson import (
    ROBERTSON_RATES as ROBERTSON_RATES,
    robertson_problem as robertson_problem,
    robertson_rhs as robertson_rhs,
)
from .van_der_pol import (
    van_der_pol_initial_state as van_der_pol_initial_state,
    van_der_pol_paper_problem as van_der_pol_paper_problem,
    van_der_pol_problem as van_der_pol_problem,
    van_der_pol_rhs as van_der_pol_rhs,
    van_der_pol_stiff_problem as van_der_pol_stiff_problem,
)
