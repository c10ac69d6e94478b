# %% [markdown]
# # Generalised Lotka–Volterra: figures 3–5 of the paper
#
# Section 4.3 of the reference paper times the full sensitivity matrix $\partial x_i(t_f)/\partial\alpha_k$
# of the generalised Lotka–Volterra (GLV) system
#
# $$\dot x_i = x_i\Big(r_i + \sum_j A_{ij}x_j\Big),\qquad i = 1..N,\qquad t\in[0, 10],$$
#
# with respect to all $P = N + N^2$ parameters $\alpha = (r, A)$, for adaptive Runge–Kutta solves at
# $\mathrm{rtol} = \mathrm{atol} = 10^{-4}\dots10^{-14}$, and draws three kinds of figures:
#
# * **figure 3** — work-precision diagrams (time against sensitivity error) of four sensitivity methods
#   of one implementation (discrete adjoint, continuous forward sensitivity, finite differences with bump
#   $10^{-6}$, continuous adjoint), $N = 2, 10, 30, 40$, all with Cash–Karp;
# * **figure 4** — work-precision diagrams of five adjoint *implementations*, $N = 10, 55, 100, 200$;
# * **figure 5** — time against $N + P$ at tolerances $10^{-5}$, $10^{-7}$, $10^{-10}$.
#
# We redo them with `jaxadjoint`'s sensitivity methods (figure 3) and with `jaxadjoint` against
# `diffrax`'s `RecursiveCheckpointAdjoint` (discrete adjoint by checkpointed autodiff) and
# `BacksolveAdjoint` (continuous adjoint) (figure 4), the JAX peers that install here; the paper's
# FATODE, DENSERKS and PETSc are C/Fortran libraries outside this comparison.
#
# **Timing protocol.** Every timed function is `jax.jit`-compiled with the tolerance as a traced
# argument (one compilation per size and method, excluded from the timings); a call is timed with
# `jax.block_until_ready`, and we report the median of up to 15 repeats within about a second (a
# single repeat for calls over a second). This machine is shared and noisy: compare curves within a panel, not absolute times across
# machines. The reference sensitivities are `jaxadjoint`'s discrete adjoint with `Dopri5` at
# $10^{-14}$ (the paper likewise uses a tight solve of the same kind; its figure-3 methods use
# Cash–Karp, so the reference is an independent solver for them).
#
# Set `JAXADJOINT_NOTEBOOK_MODE=fast` for a quick run (one small system, three tolerances, figures not
# saved).

# %%
import logging
import os
import tempfile
import time
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

import jaxadjoint as ja
from jaxadjoint.problems import glv_paper_problem, glv_problem

jax.config.update("jax_enable_x64", True)
# A solve that fails inside jit raises through a host callback, which JAX also logs in full; the
# measurement loop below catches and reports failures itself.
logging.getLogger("jax._src.callback").setLevel(logging.CRITICAL)

MODE = os.environ.get("JAXADJOINT_NOTEBOOK_MODE", "full")
FAST = MODE == "fast"
FIGURES = Path(tempfile.mkdtemp()) if FAST else Path(".")
TOLERANCES = [1e-5, 1e-7, 1e-10] if FAST else [1e-4, 1e-5, 1e-7, 1e-8, 1e-10, 1e-12]
REFERENCE_TOL = 1e-14
FIG3_SIZES = (3,) if FAST else (2, 10, 30, 40)
FIG4_SIZES = (3,) if FAST else (10, 55, 100, 200)
MAX_STEPS = 4096
print(f"mode: {MODE}; tolerances {TOLERANCES}; figure 3 sizes {FIG3_SIZES}, "
      f"figure 4 sizes {FIG4_SIZES}; jax {jax.__version__}, diffrax {diffrax.__version__}")

# %% [markdown]
# ## The test problem: a documented random community
#
# The paper draws $A$ "following May" and sets $r_i = 0.1$, $x_i(0) = 0.1$; it does not give the
# distribution or the seed. We use `jaxadjoint.problems.glv_problem(n, seed=0)`, whose recipe is
# fixed and documented (with `rng = numpy.random.default_rng(seed)`, drawn in this order):
#
# 1. $A = -I + \sigma G/\sqrt{n}$, $\sigma = 0.5$, $G$ i.i.d. standard normal, redrawn until
#    $(A + A^T)/2$ is negative definite (May's random community with self-regulation; this makes the
#    interior equilibrium globally stable);
# 2. an equilibrium $x^* \sim U(0.5, 1.5)^n$, and $r = -A x^*$ so that it is one;
# 3. $x(0) \sim U(0.05, 0.5)^n$, well below it.
#
# The trajectories have real transients (overshoots, damped oscillations) before settling by
# $t = 10$. The paper's literal setting, `glv_paper_problem(n)` (same $A$, $r_i = 0.1$, $x_i(0) = 0.1$),
# starts at the equilibrium of the non-interacting system and drifts slowly and almost monotonically:
# a much easier problem for a step-size controller, shown on the right for comparison.

# %%
def trajectory(problem, n_points=201):
    sol = ja.solve(problem.rhs, problem.y0, problem.t0, problem.t1, problem.args,
                   saveat=jnp.linspace(problem.t0, problem.t1, n_points), rtol=1e-8, atol=1e-8)
    return np.asarray(sol.ts), np.asarray(sol.ys)


shown = [("glv_problem(10, seed=0): used below", glv_problem(10))]
if not FAST:
    shown.append(("glv_paper_problem(10): the paper's r and x(0)", glv_paper_problem(10)))
fig, axes = plt.subplots(1, len(shown), figsize=(6.5 * len(shown), 3.6), squeeze=False)
for ax, (title, problem) in zip(axes[0], shown):
    ts, ys = trajectory(problem)
    ax.plot(ts, ys, lw=1)
    ax.set(title=title, xlabel="t", ylabel="$x_i(t)$")
fig.tight_layout()
fig.savefig(FIGURES / "glv_trajectories.png", dpi=110, bbox_inches="tight")
plt.show()

# %% [markdown]
# ## Methods
#
# Each method is a function `(problem) -> compiled (args, tol) -> Jacobian`, returning
# $\partial x(t_f)/\partial(r, A)$ as an $N\times P$ matrix. Reverse-mode methods build it with
# `jax.jacrev` ($N$ vectorised reverse sweeps), forward-mode ones with `jax.jacfwd` ($P$ tangents).
# Adding a method is adding an entry to `JAXADJOINT_METHODS`.


# %%
def as_matrix(jac):
    """The Jacobian pytree of x(t_f) (N,) w.r.t. (r (N,), A (N, N)) as an (N, N + N^2) matrix."""
    jr, ja_ = jac
    return jnp.concatenate([jr, ja_.reshape(jr.shape[0], -1)], axis=1)


def jaxadjoint_method(solver, controller, sensitivity, transform):
    def build(problem):
        @jax.jit
        def jacobian(args, tol):
            def final_state(a):
                return ja.solve(problem.rhs, problem.y0, problem.t0, problem.t1, a, solver=solver,
                                controller=controller, rtol=tol, atol=tol,
                                sensitivity=sensitivity, max_steps=MAX_STEPS).ys[0]

            return as_matrix(transform(final_state)(args))

        return jacobian

    return build


def diffrax_method(adjoint, throw=True):
    def build(problem):
        term = diffrax.ODETerm(problem.rhs)

        @jax.jit
        def jacobian(args, tol):
            def final_state(a):
                sol = diffrax.diffeqsolve(
                    term, diffrax.Dopri5(), problem.t0, problem.t1, None, problem.y0, args=a,
                    stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
                    adjoint=adjoint, max_steps=MAX_STEPS, throw=throw)
                return sol.ys[-1]

            return as_matrix(jax.jacrev(final_state)(args))

        return jacobian

    return build


def optional(name, *args, **kwargs):
    cls = getattr(ja, name, None)
    if cls is None:
        print(f"NOTE: ja.{name} is not available in jaxadjoint {ja.__version__}; skipped.")
        return None
    return cls(*args, **kwargs)


CK = (ja.CashKarp(), ja.OdeintController())  # the paper's solver: boost::odeint's Cash-Karp
JAXADJOINT_METHODS = {  # figure 3: name -> (sensitivity, transform), all with Cash-Karp
    "DiscreteAdjoint": (ja.DiscreteAdjoint(), jax.jacrev),
    "ForwardSensitivity (CFSA)": (optional("ForwardSensitivity"), jax.jacfwd),
    "FiniteDifferences, bump 1e-6 (ND)": (
        optional("FiniteDifferences", step=1e-6, scheme="forward"), jax.jacfwd),
    "ContinuousAdjoint, backsolve (CASA)": (optional("ContinuousAdjoint", state="backsolve"),
                                            jax.jacrev),
    "ContinuousAdjoint, checkpointed": (optional("ContinuousAdjoint"), jax.jacrev),
}
if FAST:  # keep CI short
    JAXADJOINT_METHODS = {"DiscreteAdjoint": JAXADJOINT_METHODS["DiscreteAdjoint"]}
BUILDERS = {name: jaxadjoint_method(*CK, *spec) for name, spec in JAXADJOINT_METHODS.items()
            if spec[0] is not None}
BUILDERS["jaxadjoint Dopri5, DiscreteAdjoint"] = jaxadjoint_method(
    ja.Dopri5(), None, ja.DiscreteAdjoint(), jax.jacrev)
BUILDERS["diffrax Dopri5, RecursiveCheckpointAdjoint"] = diffrax_method(
    diffrax.RecursiveCheckpointAdjoint())
# BacksolveAdjoint integrates the state backwards; on this contracting system that is unstable and a
# failing solve runs to max_steps (seconds to minutes), so it is only tried at N = 10.
BUILDERS["diffrax Dopri5, BacksolveAdjoint"] = diffrax_method(
    diffrax.BacksolveAdjoint(), throw=False)
BUILDERS = {name: build for name, build in BUILDERS.items()}
FIG3_METHODS = [name for name in BUILDERS if name in JAXADJOINT_METHODS]
FIG4_METHODS = ["jaxadjoint Dopri5, DiscreteAdjoint", "DiscreteAdjoint",
                "diffrax Dopri5, RecursiveCheckpointAdjoint", "diffrax Dopri5, BacksolveAdjoint"]
LABEL = {"DiscreteAdjoint": "jaxadjoint CashKarp, DiscreteAdjoint"}
print("figure 3:", FIG3_METHODS)
print("figure 4:", [LABEL.get(m, m) for m in FIG4_METHODS])

# %% [markdown]
# ## Measurements
#
# One table of records, `(N, method, tol) -> (median time, sensitivity error)`; the figures are views
# of it. A method whose solve fails (raises), or whose error exceeds 1 (a diverged backward solve), is
# recorded as failed and not timed.


# %%
def median_time(fn, *args, budget=1.0, repeats=15):
    times = []
    while not times or (len(times) < repeats and sum(times) < budget):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


compiled = {}  # (N, method) -> compiled Jacobian function
references = {}
records = {}  # (N, method, tol) -> (seconds or nan, error)
compile_times = {}


def get(n, method):
    if (n, method) not in compiled:
        compiled[n, method] = BUILDERS[method](glv_problem(n))
    return compiled[n, method]


def reference(n):
    if n not in references:
        problem, start = glv_problem(n), time.perf_counter()
        references[n] = jax.block_until_ready(
            get(n, "jaxadjoint Dopri5, DiscreteAdjoint")(problem.args, REFERENCE_TOL))
        compile_times[n, "jaxadjoint Dopri5, DiscreteAdjoint"] = time.perf_counter() - start
    return references[n]


def measure(n, method):
    problem, ref = glv_problem(n), reference(n)
    fn = get(n, method)
    start = time.perf_counter()
    for i, tol in enumerate(TOLERANCES):
        if (n, method, tol) in records:
            continue
        try:  # compiles on the first tolerance
            jac = jax.block_until_ready(fn(problem.args, tol))
            error = float(jnp.max(jnp.abs(jac - ref)))
        except Exception as failure:  # a solve that fails raises (throw=True): record, go on
            reason = next((line for line in str(failure).splitlines()
                           if "EquinoxRuntimeError:" in line), type(failure).__name__)
            print(f"  N={n} {method} at tol {tol:.0e} failed: {reason.split(': ', 1)[-1][:90]}")
            error = float("nan")
        if i == 0 and (n, method) not in compile_times:
            compile_times[n, method] = time.perf_counter() - start
        if not np.isfinite(error) or error > 1:
            records[n, method, tol] = (float("nan"), float("nan"))
            continue
        records[n, method, tol] = (median_time(fn, problem.args, tol), error)
    print(f"N={n:3d} {method:45s} {time.perf_counter() - start:6.1f} s "
          f"(compile + first run {compile_times.get((n, method), 0):.1f} s)")


start_all = time.perf_counter()
for n in FIG3_SIZES:
    for method in FIG3_METHODS:
        measure(n, method)
for n in FIG4_SIZES:
    for method in FIG4_METHODS:
        if method == "diffrax Dopri5, BacksolveAdjoint" and (n > 10 or FAST):
            continue
        measure(n, method)
print(f"all measurements: {time.perf_counter() - start_all:.0f} s")

# %% [markdown]
# ## Figure 3: the sensitivity methods of one library
#
# Time against sensitivity error, one line per method, one point per tolerance; the legend gives the
# exponent $m$ of a least-squares fit $t \sim \epsilon^m$ ignoring the two largest errors (the paper
# ignores three), where the errors span at least a decade.


# %%
def slope(errors, times, skip=0):
    """Exponent m of t ~ eps^m (least squares in log-log), ignoring the `skip` largest errors."""
    e, t = np.asarray(errors), np.asarray(times)
    ok = np.isfinite(e) & np.isfinite(t) & (e > 0)
    e, t = e[ok], t[ok]
    order = np.argsort(e)[::-1][skip:]
    if len(order) < 2 or np.log10(e[order].max() / e[order].min()) < 1:
        return float("nan")  # no meaningful slope (e.g. stagnating finite differences)
    return float(np.polyfit(np.log(e[order]), np.log(t[order]), 1)[0])


def work_precision(ax, n, methods, title):
    for i, method in enumerate(methods):
        if (n, method, TOLERANCES[0]) not in records:
            continue
        times, errors = zip(*[records[n, method, tol] for tol in TOLERANCES])
        m = slope(errors, times, skip=0 if FAST else 2)
        ax.loglog(errors, 1e3 * np.array(times), "o-", ms=4, color=f"C{i}",
                  label=LABEL.get(method, method) + (f" (m={m:.2f})" if np.isfinite(m) else ""))
    ax.set(xlabel="sensitivity error $\\|J - J_{ref}\\|_\\infty$", ylabel="time (ms)", title=title)
    ax.legend(fontsize=6)


fig, axes = plt.subplots(1, len(FIG3_SIZES), figsize=(5.2 * len(FIG3_SIZES), 4.2), squeeze=False)
for ax, n in zip(axes[0], FIG3_SIZES):
    work_precision(ax, n, FIG3_METHODS, f"N = {n} (P = {n + n * n}), Cash–Karp")
fig.tight_layout()
fig.savefig(FIGURES / "glv_fig3_methods.png", dpi=110, bbox_inches="tight")
plt.show()

# %% [markdown]
# ## Figure 4: jaxadjoint against diffrax

# %%
fig, axes = plt.subplots(1, len(FIG4_SIZES), figsize=(5.2 * len(FIG4_SIZES), 4.2), squeeze=False)
for ax, n in zip(axes[0], FIG4_SIZES):
    work_precision(ax, n, FIG4_METHODS, f"N = {n} (P = {n + n * n})")
fig.tight_layout()
fig.savefig(FIGURES / "glv_fig4_implementations.png", dpi=110, bbox_inches="tight")
plt.show()

# %% [markdown]
# The same data as ratios: time of each method divided by the time of `jaxadjoint`'s Dopri5 discrete
# adjoint at the same $N$ and tolerance (same run, same data; errors in the table above the figure
# differ a little because the step grids differ).

# %%
base = "jaxadjoint Dopri5, DiscreteAdjoint"
header = ["N", "tol", "jaxadjoint Dopri5 (ms)"] + [LABEL.get(m, m) for m in FIG4_METHODS[1:]]
lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
for n in FIG4_SIZES:
    for tol in TOLERANCES:
        t0 = records[n, base, tol][0]
        cells = [str(n), f"{tol:.0e}", f"{1e3 * t0:.2f}"]
        for method in FIG4_METHODS[1:]:
            rec = records.get((n, method, tol))
            cells.append("—" if rec is None else "failed" if not np.isfinite(rec[0])
                         else f"{rec[0] / t0:.2f}×")
        lines.append("| " + " | ".join(cells) + " |")
display(Markdown("\n".join(lines)))

# %% [markdown]
# ## Figure 5: time against the number of parameters

# %%
FIG5_TOLERANCES = [tol for tol in (1e-5, 1e-7, 1e-10) if tol in TOLERANCES]
fig, axes = plt.subplots(1, len(FIG5_TOLERANCES), figsize=(5.2 * len(FIG5_TOLERANCES), 4.2),
                         squeeze=False)
fig5_methods = ["DiscreteAdjoint", base, "diffrax Dopri5, RecursiveCheckpointAdjoint"]
for ax, tol in zip(axes[0], FIG5_TOLERANCES):
    for i, method in enumerate(fig5_methods):
        sizes = sorted({n for (n, m, t) in records if m == method and t == tol
                        and np.isfinite(records[n, m, t][0])})
        if not sizes:
            continue
        x = np.array([n + n + n * n for n in sizes])  # N + P, P = N + N^2
        y = np.array([1e3 * records[n, method, tol][0] for n in sizes])
        m = np.polyfit(np.log(x), np.log(y), 1)[0] if len(x) > 1 else float("nan")
        ax.loglog(x, y, "o-", ms=4, color=f"C{i}", label=f"{LABEL.get(method, method)} (m={m:.2f})")
    ax.set(xlabel="N + P", ylabel="time (ms)", title=f"tolerance {tol:.0e}")
    ax.legend(fontsize=6)
fig.tight_layout()
fig.savefig(FIGURES / "glv_fig5_scaling.png", dpi=110, bbox_inches="tight")
plt.show()

# %% [markdown]
# ## What agrees with the paper, what differs, and why
#
# The paper's figures compare C++/Fortran libraries on one machine; ours compare JAX implementations on
# another (a shared 2-core CPU), on a different random system (a documented recipe and seed). So only
# shapes, slopes and orderings are comparable, not milliseconds.
#
# **Figure 3 (methods) — agrees with the paper.**
#
# * *The discrete adjoint wins as soon as there are many parameters.* At $N = 2$ ($P = 6$) the
#   methods are within a few times of each other: forward sensitivity is about as fast as the discrete
#   adjoint, as expected for few parameters, and the backward-state continuous adjoint, whose steps
#   are the cheapest at this size, is the fastest; at $N = 10$ the discrete adjoint is already several
#   times faster, and at $N = 30, 40$ one to two orders of magnitude faster
#   than every other method at equal error. The paper puts the cross-over "at around $N = 10$" and
#   reports "almost one order of magnitude" over CFSA at $N = 40$; our cross-over is a little earlier
#   and the gap larger, plausibly because `ForwardSensitivity` also puts the $N\cdot P$ sensitivities
#   under error control (more steps at equal tolerance).
# * *Finite differences stagnate* near $10^{-6}$ whatever the tolerance (the vertical green lines; no
#   slope is fitted). The paper sees the same at "around $10^{-7}$". With a forward difference of bump
#   $h = 10^{-6}$ the truncation error is $\tfrac{h}{2}|\partial^2 x/\partial\alpha^2| \sim 10^{-6}$ here,
#   and each perturbed solve picks its own steps, adding the solver error divided by $h$; the exact
#   stagnation level depends on the problem's second derivatives. They are also the slowest method at
#   large $P$ ($P + 1$ solves per Jacobian).
# * *The continuous adjoint with a backward-integrated state (CASA) is the least accurate and the least
#   robust*, as in the paper, for the reason the paper gives: the GLV system is contracting forwards, so
#   re-integrating the state backwards amplifies its errors. At the loosest tolerances the backward
#   solve fails outright for $N \ge 10$ (step size underflow at $10^{-4}$, and at $10^{-5}$ too for
#   $N = 40$; reported above). The paper's CASA "never
#   falls below $10^{-4}$"; ours improves with the tolerance but stays orders of magnitude behind.
#   With the forward trajectory stored and interpolated (`ContinuousAdjoint()`, checkpointed), the
#   continuous adjoint converges like the others — confirming the paper's explanation — but remains
#   slower than the discrete adjoint (its backward solve takes at least as many steps as the forward
#   one and solves $N + P$ equations).
#
# **Figure 4 (implementations).** The paper's peers are not in JAX, so our comparison is with diffrax,
# on the same data, in the same run. The discrete adjoint is faster than reverse-mode autodiff through
# diffrax's solver loop (`RecursiveCheckpointAdjoint`) at every size and tolerance here, by 1.5× to
# 5× (2–4× typically, see the table), at the same accuracy for the same tolerance (both use Dopri5
# with an I controller; their step grids differ slightly). `BacksolveAdjoint` fails at the loosest
# tolerances (its backward state solve hits `max_steps`, the same instability as CASA) and is 11–24×
# slower where it succeeds, which is why it is only tried at $N = 10$. Cash–Karp with the odeint
# controller takes about as long as Dopri5 with the I controller at equal tolerance, for similar
# errors (0.8–1.35× in 19 of the 24 cases; up to 2× at $N = 10$, where a call takes about a
# millisecond and timing noise is largest); the paper's finding that the Dopri5-based FATODE and PETSc
# are much faster than its Cash–Karp code at $N = 10$ is therefore about implementations, not
# tableaus. (This run shared the machine's two cores with other jobs: absolute times are several
# times those of a quiet machine, and single ratios vary by tens of percent between runs. The
# benchmark in `benchmarks/`, on a quiet machine with interleaved calls, finds diffrax's full
# Jacobian 1.9–5× slower on this problem.)
#
# **Figure 5 (scaling) — agrees.** The paper finds its adjoint's time growing about linearly in
# $N + P$. Our fitted exponents are 0.78–1.03 for `jaxadjoint` (0.97–1.12 for diffrax): near
# linear over $N + P$ from 10 to 40 000. Counting arithmetic, the full Jacobian costs $N$ reverse sweeps
# of $O(N^2)$ vector–Jacobian products per stage, $O(N^3) = O((N+P)^{3/2})$ per step; batching the $N$
# sweeps into matrix–matrix products (the SIMD idea of the paper, here done by XLA) keeps the observed
# growth close to linear in this range. Part of the slope also comes from the number of steps, which
# changes with $N$ for a random system.
