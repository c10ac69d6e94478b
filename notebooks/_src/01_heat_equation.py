# %% [markdown]
# # The heat equation: tables 1–3 of the paper
#
# Section 4.1 of the reference paper checks its sensitivity methods on the 2-D heat equation
#
# $$\partial_t u = \alpha\,\Delta u \ \text{ on } [0,1]^2,\qquad u=0 \text{ on the boundary},\qquad
#   u(x,y,0)=\sin(\pi x)\sin(\pi y),$$
#
# whose solution $u = \sin(\pi x)\sin(\pi y)\,e^{-2\pi^2\alpha t}$ and sensitivity
# $\partial u/\partial\alpha = -2\pi^2 t\,u$ are known in closed form. The PDE is discretised with the
# 5-point Laplacian on an $N_p\times N_p$ grid *including* the boundary ($\Delta x = 1/(N_p-1)$),
# $\alpha = 1$, $t_f = 10^{-2}$, and integrated with constant steps: explicit Euler with
# $\Delta t = 5\cdot10^{-5}$ (table 1) and classic RK4 with $\Delta t = 5\cdot10^{-5}$ (table 2) and
# $10^{-5}$ (table 3). The tables list relative errors (in units of $10^{-1}\,\%$) of the forward
# solution and of $\partial u(\mathbf{x}, t_f)/\partial\alpha$ at every grid point, computed with the
# discrete adjoint ("Adjoint"), continuous forward sensitivity ("CFSA"), finite differences with bump
# $\Delta\alpha = 10^{-9}$ ("ND") and the continuous adjoint ("CASA").
#
# This notebook recomputes every column with `jaxadjoint` and prints it beside the paper's.
# The problem and its closed-form references live in `jaxadjoint.problems.heat`. Because the initial
# condition is an eigenvector of the discrete Laplacian (eigenvalue $\lambda_h$), we have three exact
# references at hand:
#
# | reference | formula | what it is the exact answer for |
# | --- | --- | --- |
# | PDE (`heat_exact_*`) | $e^{-2\pi^2\alpha t}u_0$ | what the paper's tables measure against |
# | semi-discrete ODE (`heat_semidiscrete_*`) | $e^{\alpha\lambda_h t}u_0$ | a continuous sensitivity method (CFSA, CASA) with no time error |
# | Runge–Kutta iteration (`heat_rk_*`) | $\prod_n R(h_n\alpha\lambda_h)\,u_0$ | the discrete adjoint / discrete forward: exact to round-off |
#
# Set `JAXADJOINT_NOTEBOOK_MODE=fast` for a quick run (only table 2 at $N_p = 10$, three methods;
# figures are not saved).

# %%
import os
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

import jaxadjoint as ja
from jaxadjoint.problems import (
    HEAT_PAPER_ALPHA,
    HEAT_PAPER_FINAL_TIME,
    heat_exact_sensitivity,
    heat_exact_solution,
    heat_grid,
    heat_problem,
    heat_rk_sensitivity,
    heat_rk_solution,
    heat_semidiscrete_sensitivity,
)

jax.config.update("jax_enable_x64", True)

MODE = os.environ.get("JAXADJOINT_NOTEBOOK_MODE", "full")
FAST = MODE == "fast"
# Full mode saves the figures beside the notebook; fast mode (CI) writes them to a scratch folder.
FIGURES = Path(tempfile.mkdtemp()) if FAST else Path(".")
GRID_SIZES = (10,) if FAST else (10, 30, 50)
print(f"mode: {MODE}; grid sizes {GRID_SIZES} (fast mode: table 2 only); "
      f"jax {jax.__version__}, jaxadjoint {ja.__version__}")

# %% [markdown]
# ## The paper's values
#
# Transcribed from tables 1–3 (relative errors in units of $10^{-1}\,\%$; `None` = "unstable").

# %%
PAPER = {
    # table: {N_p: (Forward, Adjoint, CFSA, ND, CASA)}
    "Euler, dt=5e-5": {10: (8.827, 7.260, 7.260, 7.260, 3.366),
                       30: (1.392, 0.104, 0.104, 0.105, None),
                       50: (0.731, 0.615, 0.615, 0.615, None)},
    "RK4, dt=5e-5": {10: (9.271, 7.981, 8.135, 8.137, 3.175),
                     30: (2.807, 0.629, 0.785, 0.789, None),
                     50: (1.658, 0.119, 0.275, 0.275, None)},
    "RK4, dt=1e-5": {10: (9.271, 8.104, 8.135, 8.155, 7.639),
                     30: (2.807, 0.754, 0.785, 0.785, None),
                     50: (2.807, 0.245, 0.275, 0.274, None)},
}
COLUMNS = ("Forward", "Adjoint", "CFSA", "ND", "CASA")
TABLES = {"Euler, dt=5e-5": (ja.Euler(), 5e-5),
          "RK4, dt=5e-5": (ja.RK4(), 5e-5),
          "RK4, dt=1e-5": (ja.RK4(), 1e-5)}
if FAST:
    TABLES = {"RK4, dt=5e-5": TABLES["RK4, dt=5e-5"]}

# %% [markdown]
# ## The sensitivity methods
#
# Each method is one entry of `METHODS`: a name, the paper column it corresponds to, the
# `sensitivity=` strategy passed to `ja.solve`, and how the derivative of the grid field is taken.
#
# * Forward-mode methods use `jax.jacfwd`: one tangent gives $\partial u/\partial\alpha$ at every grid
#   point.
# * Reverse-mode methods use `jax.jacrev`, which costs one (vectorised) reverse sweep *per output
#   point*: $N_p^2 = 2500$ sweeps of 1000 steps at $N_p = 50$, minutes on a laptop — reverse mode is the
#   wrong tool for one parameter and many outputs, and the paper's vectorised adjoint pays the same
#   price. To stay within minutes we evaluate reverse-mode methods on the whole grid for $N_p = 10$
#   and, for $N_p \ge 30$, on the grid row through the centre, $y_j$ nearest $1/2$, where
#   $|\partial u/\partial\alpha|$ peaks (marked † in the tables). Every field here is a multiple of
#   the separable $\sin(\pi x)\sin(\pi y)$ up to round-off, so the relative max-norm error on that row
#   equals the one on the whole grid (checked at $N_p = 10$ below).
# * Finite differences: `FiniteDifferences(step=1e-9, scheme="forward")`, i.e.
#   $(u(\alpha+\Delta\alpha) - u(\alpha))/\Delta\alpha$ with the paper's bump $\Delta\alpha = 10^{-9}$ (a
#   hand-written version from two `ja.solve` calls stands in if the class is missing).
# * The continuous adjoint comes in two flavours: `state="checkpointed"` (the forward trajectory is
#   stored and interpolated on the way back) and `state="backsolve"` (the state is re-integrated
#   backwards alongside the adjoint). The paper's CASA "does not take into account the forward
#   trajectory when performing the reverse pass", i.e. the second.
#
# Methods that this version of `jaxadjoint` does not provide are skipped with a note.

# %%
BUMP = 1e-9
FULL_GRID_REVERSE_UP_TO = 10  # larger grids: reverse mode on the centre row only


def optional(name, *args, **kwargs):
    """`ja.<name>(*args, **kwargs)`, or None (with a note) if this jaxadjoint does not have it."""
    cls = getattr(ja, name, None)
    if cls is None:
        print(f"NOTE: ja.{name} is not available in jaxadjoint {ja.__version__}; "
              "its column is left empty.")
        return None
    return cls(*args, **kwargs)


# (name, paper column, sensitivity strategy passed to solve, "rev" | "fwd" | "fd")
METHODS = [
    ("DiscreteAdjoint", "Adjoint", ja.DiscreteAdjoint(), "rev"),
    ("DiscreteForward", "Adjoint", optional("DiscreteForward"), "fwd"),
    ("ForwardSensitivity", "CFSA", optional("ForwardSensitivity"), "fwd"),
    ("FiniteDifferences", "ND", optional("FiniteDifferences", step=BUMP, scheme="forward"), "fwd"),
    ("ContinuousAdjoint", "CASA", optional("ContinuousAdjoint"), "rev"),
    ("ContinuousAdjoint(backsolve)", "CASA", optional("ContinuousAdjoint", state="backsolve"),
     "rev"),
]
if FAST:  # keep CI short: one method of each kind
    METHODS = [m for m in METHODS
               if m[0] in ("DiscreteAdjoint", "ForwardSensitivity", "FiniteDifferences")]
if not hasattr(ja, "FiniteDifferences"):
    METHODS.append(("finite differences (by hand)", "ND", ja.DiscreteAdjoint(), "fd"))
METHODS = [m for m in METHODS if m[2] is not None]
print("methods:", ", ".join(m[0] for m in METHODS))

# %% [markdown]
# ## Run every table
#
# Constant steps: `dt0=dt` with a fixed-step solver (`ConstantStep(dt)`). For every table,
# grid size and method we record the relative error of eq. 59,
# $\epsilon_r = \|\bar\alpha_i - \bar\alpha(\mathbf{x}_i)\|_\infty / \|\bar\alpha(\mathbf{x}_i)\|_\infty$,
# against the PDE, and — for the discrete methods — the deviation from the exact derivative of the
# Runge–Kutta iteration (`heat_rk_sensitivity`), which measures the method itself rather than the
# discretisation.


# %%
def rel_inf(approx, exact):
    """Eq. 59: relative error in the maximum norm over the grid points."""
    return float(jnp.max(jnp.abs(approx - exact)) / jnp.max(jnp.abs(exact)))


def rel_2_inf(approx, exact):
    """2-norm of the error over the grid divided by the max norm of the exact field."""
    return float(jnp.linalg.norm(approx - exact) / jnp.max(jnp.abs(exact)))


def solution_function(problem, solver, dt, sensitivity, points):
    """`alpha -> u(x_k, t_f)` at the chosen grid points (`points`: an index into the 2-D grid)."""
    n = int(round(HEAT_PAPER_FINAL_TIME / dt))

    def solution(alpha):
        return ja.solve(problem.rhs, problem.y0, 0.0, HEAT_PAPER_FINAL_TIME, alpha, solver=solver,
                        dt0=dt, sensitivity=sensitivity, max_steps=n + 2)

    def u_final(alpha):
        return solution(alpha).ys[0][points]

    return u_final, solution


def derivative(kind, u_final):
    """A compiled `alpha -> du/dalpha` for the method kind ("rev", "fwd" or "fd")."""
    if kind == "rev":
        return jax.jit(jax.jacrev(u_final))
    if kind == "fwd":
        return jax.jit(jax.jacfwd(u_final))
    forward = jax.jit(u_final)
    return lambda alpha: (forward(alpha + BUMP) - forward(alpha)) / BUMP


ALL = (slice(None), slice(None))
results = {}  # (table, N_p) -> dict of measurements
fields = {}  # (table, N_p, method) -> the computed du/dalpha
timings = {}
for table, (solver, dt) in TABLES.items():
    for n_points in GRID_SIZES:
        problem = heat_problem(n_points)
        x, y = heat_grid(n_points)
        alpha = jnp.asarray(HEAT_PAPER_ALPHA)
        u_pde = heat_exact_solution(x, y, HEAT_PAPER_FINAL_TIME)
        s_pde = heat_exact_sensitivity(x, y, HEAT_PAPER_FINAL_TIME)
        a, b = solver.tableau.a, solver.tableau.b
        _, solution = solution_function(problem, solver, dt, ja.DiscreteAdjoint(), ALL)
        sol = jax.jit(solution)(alpha)
        u = sol.ys[0]
        steps = np.diff(np.asarray(sol.steps)[np.isfinite(sol.steps)])  # the recorded grid
        s_rk = heat_rk_sensitivity(n_points, a, b, steps)
        row = {
            "Forward": rel_inf(u, u_pde),
            "Forward (2/inf)": rel_2_inf(u, u_pde),
            "Forward vs exact RK": rel_inf(u, heat_rk_solution(n_points, a, b, steps)),
            "exact RK derivative": rel_inf(s_rk, s_pde),
            "semi-discrete": rel_inf(
                heat_semidiscrete_sensitivity(n_points, HEAT_PAPER_FINAL_TIME), s_pde),
        }
        centre_row = (slice(None), (n_points - 1) // 2)
        for name, column, sensitivity, kind in METHODS:
            points = ALL if kind != "rev" or n_points <= FULL_GRID_REVERSE_UP_TO else centre_row
            u_final, _ = solution_function(problem, solver, dt, sensitivity, points)
            start = time.perf_counter()
            s = jax.block_until_ready(derivative(kind, u_final)(alpha))
            timings[table, n_points, name] = time.perf_counter() - start
            row[name + " points"] = "grid" if points is ALL else "row"
            fields[table, n_points, name] = s
            if not bool(jnp.all(jnp.isfinite(s))):
                row[name], row[name + " vs exact RK"] = float("nan"), float("nan")
                continue
            row[name] = rel_inf(s, s_pde[points])
            row[name + " vs exact RK"] = rel_inf(s, s_rk[points])
            if points is ALL:  # the row shortcut, checked where we have the whole grid
                row[name + " on centre row"] = rel_inf(s[centre_row], s_pde[centre_row])
        results[table, n_points] = row
        print(f"{table:15s} N_p={n_points:2d}: " + ", ".join(
            f"{name} {timings[table, n_points, name]:.1f} s" for name, *_ in METHODS)
            + " (compile included)")

# %%
print("whole grid vs centre row, relative max-norm error of du/dalpha at N_p = 10:")
for table in TABLES:
    row = results[table, GRID_SIZES[0]]
    for name, *_ in METHODS:
        if name + " on centre row" in row:
            print(f"  {table:15s} {name:20s} grid {row[name]:.6e}   "
                  f"row {row[name + ' on centre row']:.6e}")

# %% [markdown]
# ## Our tables beside the paper's
#
# Every cell reads `ours / paper`, in units of $10^{-1}\,\%$ as in the paper; "—" marks a method this
# version does not provide. The *Forward* column uses eq. 59 (max norm); the extra column
# *Forward, 2-norm* is $\|u_h - u\|_2/\|u\|_\infty$ over all grid points (see the discussion below).


# %%
def fmt(value):
    if value is None:
        return "unstable"
    if isinstance(value, float) and not np.isfinite(value):
        return "diverged"
    if value > 1:  # more than 100 % off
        return f"diverged ({value:.0e})"
    return f"{1e3 * value:.3f}"  # fraction -> units of 1e-1 %


def paper_fmt(value):
    return "unstable" if value is None else f"{value:.3f}"


for table in TABLES:
    header = ["N_p", "Forward (eq. 59)", "Forward, 2-norm"] + [
        f"{name} ({column})" for name, column, *_ in METHODS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for n_points in GRID_SIZES:
        row, paper = results[table, n_points], dict(zip(COLUMNS, PAPER[table][n_points]))
        cells = [str(n_points), f"{fmt(row['Forward'])} / {paper_fmt(paper['Forward'])}",
                 f"{fmt(row['Forward (2/inf)'])} / {paper_fmt(paper['Forward'])}"]
        cells += [f"{fmt(row[name])}{'†' if row[name + ' points'] == 'row' else ''}"
                  f" / {paper_fmt(paper[column])}" for name, column, *_ in METHODS]
        lines.append("| " + " | ".join(cells) + " |")
    display(Markdown(f"**{table}** (ours / paper, units of $10^{{-1}}$ %)\n\n" + "\n".join(lines)))

# %% [markdown]
# ### Is the discrete adjoint exact?
#
# The relative deviation of each discrete method from the closed-form derivative of the Runge–Kutta
# iteration on the same grid (`heat_rk_sensitivity`), and of the forward solution from
# `heat_rk_solution`: these should be round-off (~1e-13), independent of $N_p$ and $\Delta t$.

# %%
discrete = [name for name, column, *_ in METHODS if column == "Adjoint"]
header = ["table", "N_p", "forward"] + discrete
lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
for (table, n_points), row in results.items():
    lines.append("| " + " | ".join(
        [table, str(n_points), f"{row['Forward vs exact RK']:.1e}"]
        + [f"{row[name + ' vs exact RK']:.1e}" for name in discrete]) + " |")
display(Markdown("\n".join(lines)))

# %% [markdown]
# ## A figure
#
# The paper has no figure for this experiment; here are the sensitivity errors against $N_p$ for each
# table, ours as lines and the paper's as open grey markers (diverged results are not drawn), next to
# the error field of
# $\partial u/\partial\alpha$ computed by the discrete adjoint at $N_p = 10$ (RK4, $\Delta t = 5\cdot10^{-5}$):
# a multiple of $\sin(\pi x)\sin(\pi y)$, the spatial discretisation error.

# %%
fig, axes = plt.subplots(1, len(TABLES) + 1, figsize=(4.3 * (len(TABLES) + 1), 3.8))
markers = {"Adjoint": "o", "CFSA": "s", "ND": "^", "CASA": "D"}
for ax, table in zip(axes, TABLES):
    sizes = list(GRID_SIZES)
    for column, marker in markers.items():
        paper_values = [PAPER[table][n][COLUMNS.index(column)] for n in sizes]
        ax.plot(sizes, [np.nan if v is None else v for v in paper_values], marker, mfc="none",
                ms=11, color="0.4", label=f"paper: {column}")
    for i, (name, column, *_) in enumerate(METHODS):
        values = [results[table, n][name] for n in sizes]  # diverged (> 100 %) not drawn
        ax.plot(sizes, [1e3 * v if v <= 1 else np.nan for v in values], "-",
                marker=markers[column], ms=4, color=f"C{i}", label=f"ours: {name}")
    ax.plot(sizes, [1e3 * results[table, n]["semi-discrete"] for n in sizes], "k:",
            label="exact semi-discrete")
    ax.set(xscale="log", yscale="log", xlabel="$N_p$", title=table)
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
axes[0].set_ylabel(r"relative error of $\partial u/\partial\alpha$ ($10^{-1}$ %)")
axes[len(TABLES) - 1].legend(fontsize=6, loc="lower left")
n_show = GRID_SIZES[0]
error = fields["RK4, dt=5e-5", n_show, "DiscreteAdjoint"] - heat_exact_sensitivity(
    *heat_grid(n_show), HEAT_PAPER_FINAL_TIME)
im = axes[-1].imshow(np.asarray(error).T, origin="lower", extent=(0, 1, 0, 1), cmap="viridis")
axes[-1].set(title=rf"error of $\partial u/\partial\alpha$, discrete adjoint, RK4, $N_p={n_show}$",
            xlabel="x", ylabel="y")
fig.colorbar(im, ax=axes[-1])
fig.tight_layout()
fig.savefig(FIGURES / "heat_errors.png", dpi=110, bbox_inches="tight")
plt.show()

# %% [markdown]
# ## Where we agree with the paper, where we differ, and why
#
# **Adjoint, Euler (table 1): agree to every printed digit** (7.260, 0.104, 0.615). With explicit
# Euler the discrete adjoint and the continuous forward sensitivity coincide: both give
# $N\Delta t\,\lambda_h(1+\Delta t\,\alpha\lambda_h)^{N-1}u_0$. The error is the sum of the spatial
# error (which makes $|\partial u_h/\partial\alpha|$ too large) and Euler's time error (which makes it
# too small); they nearly cancel at $N_p = 30$, hence the tiny 0.104.
#
# **Adjoint, RK4 (tables 2 and 3): we differ, and we are confident the paper's values are off.**
# Our discrete adjoint reproduces the closed-form derivative of the RK4 iteration to round-off (table
# above, below 1e-13), and so does `DiscreteForward`; their error against the PDE (8.135, 0.785, 0.275)
# equals the CFSA column to every digit, as it must: RK4's time error at these steps
# ($|h\lambda_h| \le 10^{-3}$) is far below the printed precision, so every consistent method sees only
# the spatial error. The paper's RK4 Adjoint values are lower by an offset that is the same for all
# $N_p$ and proportional to $\Delta t$: 0.154–0.156 at $\Delta t = 5\cdot10^{-5}$ and 0.030–0.031 at
# $10^{-5}$ (units of $10^{-1}\,\%$), i.e. their $\partial u/\partial\alpha$ is smaller in magnitude by a
# relative $\approx 0.157\,|h\lambda_h|$. An error of first order in $\Delta t$ cannot come from an exact
# discrete adjoint of a 4th-order method (and their Euler adjoint, where no stage bookkeeping is
# involved, is exact). It looks like an $O(h)$ inconsistency in their RK4 reverse step — for instance
# one stage paired with a state from the neighbouring step would give $b_1|h\lambda| \approx
# 0.167|h\lambda|$, close to but not exactly the observed factor. We cannot check their code, so the
# cause is a hypothesis; the fact is that a correct discrete adjoint gives the CFSA column here.
#
# **CFSA: agree** (8.135, 0.785, 0.275 in tables 2 and 3; 7.260, 0.104, 0.615 with Euler). Where
# `ForwardSensitivity` is available its column above shows it; the exact semi-discrete sensitivity
# (dotted line in the figure) has the same error to the printed digits for RK4.
#
# **ND: agree within round-off noise** (ours via `FiniteDifferences(step=1e-9, scheme="forward")`). A one-sided difference with bump $10^{-9}$ has a truncation
# error $\sim 10^{-9}$ (relative) and a cancellation error $\sim \epsilon_{mach}/10^{-9} \approx
# 2\cdot10^{-7}$ relative to $u$, i.e. up to $\sim 10^{-6}$ relative to $\partial u/\partial\alpha
# \approx -0.2$: that is $10^{-3}$ in the table's units, the size of the paper's deviations (8.137 vs
# 8.135, 8.155 vs 8.135, 0.789 vs 0.785). Ours scatter the same way; the exact last digit depends on
# the rounding of each implementation.
#
# **CASA (continuous adjoint): the instability is reproduced, the $N_p = 10$ values are not.**
# The paper's CASA does not use the forward trajectory on the way back, i.e. it re-integrates the state
# backwards, our `ContinuousAdjoint(state="backsolve")`. Integrating the heat equation backwards is
# anti-diffusive: the highest grid mode, $\lambda_{max} \approx -8/\Delta x^2$, grows by about
# $e^{|\lambda_{max}| t_f}$ = $e^{6.5}$, $e^{67}$, $e^{192}$ at $N_p$ = 10, 30, 50, seeded by round-off.
# Ours is fine at $N_p = 10$, degraded at $N_p = 30$ with Euler (0.979 against 0.104 for the exact
# methods), and diverges at $N_p = 50$ (relative errors of $10^{24}$ and more; the size varies from
# run to run since it grows from round-off) — the paper reports "unstable" at both 30 and 50; how soon
# round-off reaches the top modes depends on the implementation.
# With the forward trajectory stored and interpolated (`ContinuousAdjoint()`, the default) the method is
# stable everywhere and, with RK4, equals the exact semi-discrete sensitivity (8.135, 0.785, 0.275); with
# Euler it is a *different* first-order approximation of the continuous derivative than the discrete
# derivative (8.230 vs 7.260 at $N_p = 10$). The paper's stable CASA values at $N_p = 10$ (3.366,
# 3.175, 7.639) are *smaller* than the spatial discretisation error of the semi-discrete system
# (8.135), which no method that integrates that system accurately can achieve; the paper attributes
# its CASA errors to the inaccurate reconstruction of the forward trajectory, and those errors happen to
# land closer to the PDE. We do not reproduce them, and would not want to.
#
# **Forward: the paper's column is not eq. 59.** Under eq. 59 (max norm) the forward errors are
# 0.190, 0.0096, 0.0030 (Euler) and 0.200, 0.0193, 0.0068 (RK4), far below the paper's 8.827 … 1.658.
# The paper's values are reproduced *to all four digits in eight of the nine cells* by the 2-norm of
# the error over the grid divided by the max norm of the exact solution, $\|u_h - u\|_2 /
# \|u\|_\infty$ (column "Forward, 2-norm"): a mixed norm, about $(N_p - 1)/2$ times the pointwise error
# for this field (since $\|u_0\|_2 \approx (N_p-1)/2$). So the paper's forward column measures a different quantity from its
# sensitivity columns, which do follow eq. 59.
#
# **Table 3, $N_p = 50$, Forward: a copy error in the paper.** The paper prints 2.807 (the $N_p = 30$
# value); the forward solution at $\Delta t = 10^{-5}$ differs from that at $5\cdot10^{-5}$ only by
# RK4's time error, invisible at this precision, so the entry should read 1.658 as in table 2 — which
# is what we get.
#
# **The paper's remarks.** "Decreasing the time step does not improve the results for the RK4
# method" — confirmed and explained: the error is all spatial. "Increasing the spatial resolution too
# much degrades the accuracy of the Euler method" — at $N_p = 50$ the spatial error (0.027 %) no
# longer cancels Euler's time error, which dominates; Euler's error does not grow beyond its own time
# error, and the exact discrete derivative shows the same.
