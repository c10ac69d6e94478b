# %% [markdown]
# # Training a neural ODE with optax
#
# A neural ODE is an ODE whose vector field is a neural network, $\dot y = f_\theta(y)$, fitted to
# observed trajectories by gradient descent on $\theta$. This notebook reruns diffrax's
# neural-ODE example with `jaxadjoint`: the same data (two-dimensional spirals), the same model
# (an `equinox` MLP of width 64 and depth 2 with softplus activations), the same solver (Tsit5,
# $\mathrm{rtol} = 10^{-3}$, $\mathrm{atol} = 10^{-6}$), float32 as users run it, and
# mini-batches of 32 of 256 trajectories, each observed at 100 times in $[0, 10]$. The model is an
# `equinox.Module` passed to `jaxadjoint.solve` as the right-hand side;
# `eqx.filter_value_and_grad` of the loss gives the gradient with respect to every weight, through
# the discrete adjoint.
#
# At the end we time one training step (forward solves, gradient, Adam update) of `jaxadjoint`
# beside diffrax's (`RecursiveCheckpointAdjoint`, its default), same model, data and batch.
#
# Set `JAXADJOINT_NOTEBOOK_MODE=fast` for a quick run (a few training steps; figures not saved).

# %%
import os
import tempfile
import time
from pathlib import Path

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from IPython.display import Markdown, display

import jaxadjoint as ja

MODE = os.environ.get("JAXADJOINT_NOTEBOOK_MODE", "full")
FAST = MODE == "fast"
FIGURES = Path(tempfile.mkdtemp()) if FAST else Path(".")
DATASET_SIZE, BATCH_SIZE, LEARNING_RATE = 256, 32, 3e-3
# (fraction of each trajectory used, number of Adam steps): as diffrax's example, first fit the
# beginning of the trajectories, then all of them, so that training does not get stuck early.
STRATEGY = ((0.1, 3), (1.0, 3)) if FAST else ((0.1, 200), (1.0, 300))
TIMING_REPEATS = 3 if FAST else 30
print(f"mode: {MODE}; {DATASET_SIZE} trajectories, batches of {BATCH_SIZE}, training phases "
      f"{STRATEGY}; jax {jax.__version__}, diffrax {diffrax.__version__}")

# %% [markdown]
# ## Data
#
# As in diffrax's example: 256 initial states drawn from $U(-0.6, 1)^2$, each followed under
# $\dot y = (x_2, -x_1)$ with $x = y / (1 + y)$, a spiral, and observed at 100 equally spaced
# times in $[0, 10]$. The data are solved tightly ($10^{-6}$) with `jaxadjoint`.


# %%
def spiral(t, y, args):
    x = y / (1 + y)
    return jnp.stack([x[1], -x[0]])


data_key, model_key, loader_key = jax.random.split(jax.random.PRNGKey(0), 3)
ts = jnp.linspace(0.0, 10.0, 100)
y0s = jax.random.uniform(data_key, (DATASET_SIZE, 2), minval=-0.6, maxval=1.0)
ys = jax.jit(jax.vmap(lambda y0: ja.solve(spiral, y0, ts[0], ts[-1], saveat=ts,
                                          solver=ja.Tsit5(), rtol=1e-6, atol=1e-6).ys))(y0s)
print(f"data: {ys.shape} ({ys.dtype})")

# %% [markdown]
# ## Model and loss
#
# The vector field is `Func`, an `equinox.Module` holding the MLP; its call signature
# `(t, y, args)` is what both `jaxadjoint.solve` and `diffrax.ODETerm` expect. The loss is the mean
# squared error between the model's trajectories and the data over a mini-batch, with the batch
# `jax.vmap`-ed inside the loss.


# %%
class Func(eqx.Module):
    mlp: eqx.nn.MLP

    def __init__(self, *, key):
        self.mlp = eqx.nn.MLP(in_size=2, out_size=2, width_size=64, depth=2,
                              activation=jax.nn.softplus, key=key)

    def __call__(self, t, y, args):
        return self.mlp(y)


def solve_jaxadjoint(func, ts, y0):
    sol = ja.solve(func, y0, ts[0], ts[-1], solver=ja.Tsit5(), rtol=1e-3, atol=1e-6,
                   dt0=ts[1] - ts[0], saveat=ts)
    return sol.ys, sol.stats["num_accepted_steps"]


def solve_diffrax(func, ts, y0):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(func), diffrax.Tsit5(), ts[0], ts[-1], ts[1] - ts[0], y0,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=1e-3, atol=1e-6),
    )
    return sol.ys, sol.stats["num_accepted_steps"]


SOLVERS = {"jaxadjoint": solve_jaxadjoint, "diffrax": solve_diffrax}
optimiser = optax.adam(LEARNING_RATE)


def make_step(solve):
    """One training step: loss and gradient over the batch, then an Adam update."""

    def loss(func, ts, y0s, ys):
        predicted, _ = jax.vmap(lambda y0: solve(func, ts, y0))(y0s)
        return jnp.mean((predicted - ys) ** 2)

    @eqx.filter_jit
    def step(func, opt_state, ts, y0s, ys):
        value, grads = eqx.filter_value_and_grad(loss)(func, ts, y0s, ys)
        updates, opt_state = optimiser.update(grads, opt_state, eqx.filter(func, eqx.is_array))
        return value, eqx.apply_updates(func, updates), opt_state

    return step


train_steps = {name: make_step(solve) for name, solve in SOLVERS.items()}


def batches(key):
    """Endless mini-batches of trajectory indices, a fresh permutation every epoch."""
    while True:
        key, subkey = jax.random.split(key)
        order = np.asarray(jax.random.permutation(subkey, DATASET_SIZE))
        for start in range(0, DATASET_SIZE - BATCH_SIZE + 1, BATCH_SIZE):
            yield order[start:start + BATCH_SIZE]


# %% [markdown]
# ## Train

# %%
func = Func(key=model_key)
initial_func = func
opt_state = optimiser.init(eqx.filter(func, eqx.is_array))
loader = batches(loader_key)
history = []
start = time.perf_counter()
for fraction, num_steps in STRATEGY:
    length = int(fraction * len(ts))
    for _ in range(num_steps):
        index = next(loader)
        value, func, opt_state = train_steps["jaxadjoint"](func, opt_state, ts[:length],
                                                           y0s[index], ys[index, :length])
        history.append(float(value))
    print(f"first {length:3d} of {len(ts)} times: {num_steps} steps, loss {history[-1]:.2e}")
print(f"training took {time.perf_counter() - start:.1f} s (compilation included)")

# %% [markdown]
# ## Time per training step: jaxadjoint beside diffrax
#
# The same step function, built around each library's solve, is called on the trained model, the
# whole trajectories and one mini-batch, with the same optimiser state. The calls alternate between
# the two libraries (which goes first alternates too), so that load from other processes hits both
# alike; each is waited for with `jax.block_until_ready` and we compare medians. The first call of
# each (tracing and compilation, from cleared caches) is reported apart. We also print the solver
# steps each library takes on this batch and both losses, which must agree to about the tolerance.

# %%
index = next(loader)
batch = (ts, y0s[index], ys[index])
train_steps = {name: make_step(solve) for name, solve in SOLVERS.items()}  # not compiled yet
jax.clear_caches()
compile_s, samples = {}, {name: [] for name in train_steps}
for name, step in train_steps.items():
    begin = time.perf_counter()
    jax.block_until_ready(step(func, opt_state, *batch))
    compile_s[name] = time.perf_counter() - begin
for repeat in range(TIMING_REPEATS):
    for name in list(train_steps)[:: 1 if repeat % 2 == 0 else -1]:
        begin = time.perf_counter()
        jax.block_until_ready(train_steps[name](func, opt_state, *batch))
        samples[name].append(time.perf_counter() - begin)

losses = {}
rows = ["| library | time per step, median (min–max) | first call (compile) | solver steps "
        "(mean over the batch) | loss |", "|---|---|---|---|---|"]
for name, solve in SOLVERS.items():
    _, accepted = jax.jit(jax.vmap(lambda y0: solve(func, ts, y0)))(batch[1])
    value = losses[name] = float(train_steps[name](func, opt_state, *batch)[0])
    t = np.array(samples[name]) * 1e3
    rows.append(f"| {name} | {np.median(t):.1f} ms ({t.min():.1f}–{t.max():.1f}) | "
                f"{compile_s[name]:.1f} s | {float(jnp.mean(accepted)):.1f} | {value:.6g} |")
display(Markdown("\n".join(rows)))
ratio = np.median(samples["jaxadjoint"]) / np.median(samples["diffrax"])
print(f"jaxadjoint / diffrax, median time per training step: {ratio:.2f}; relative difference "
      f"of the losses {abs(losses['jaxadjoint'] / losses['diffrax'] - 1):.1e}")

# %% [markdown]
# ## Figures

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
ax = axes[0]
ax.semilogy(history)
boundary = STRATEGY[0][1]
ax.axvline(boundary, color="0.6", ls="--", lw=1)
ax.text(boundary, ax.get_ylim()[1], " whole trajectories", va="top", fontsize=8)
ax.set(xlabel="training step", ylabel="mini-batch loss (MSE)",
       title=f"training: Adam, batches of {BATCH_SIZE}")
ax = axes[1]
fitted, _ = jax.jit(jax.vmap(lambda y0: solve_jaxadjoint(func, ts, y0)))(y0s[:6])
for k in range(6):
    ax.plot(ys[k, :, 0], ys[k, :, 1], ".", ms=3, color=f"C{k}")
    ax.plot(fitted[k, :, 0], fitted[k, :, 1], "-", lw=1.2, color=f"C{k}")
ax.set(xlabel="$y_1$", ylabel="$y_2$", title="data (dots) and trained model (lines)")
ax = axes[2]
for j, name in enumerate(train_steps):
    t = np.array(samples[name]) * 1e3
    ax.plot(np.full(t.size, j) + np.linspace(-0.15, 0.15, t.size), t, ".", color=f"C{j}")
    ax.hlines(np.median(t), j - 0.3, j + 0.3, color="k", lw=1.5)
ax.set_xticks(range(len(train_steps)), list(train_steps))
ax.set_yscale("log")
ax.set(ylabel="time per training step [ms]",
       title=f"one step, batch of {BATCH_SIZE} (median: line)")
fig.tight_layout()
fig.savefig(FIGURES / "neural_ode.png", dpi=100, bbox_inches="tight")
plt.show()

# %% [markdown]
# ## Notes
#
# * **What a step costs.** A training step is a batched forward solve and its reverse pass, so
#   its time follows the number of solver steps (printed above) times the cost of one step of the
#   MLP. Both libraries evaluate the 100 observation times from the solver's dense output, so
#   the step count is set by the dynamics and the tolerance, not by how often the data are
#   sampled; it grows as training turns the initially almost flat vector field into spirals.
# * **`vmap` inside the loss** runs the batch in one loop: every trajectory takes its own steps,
#   but the loop runs until the slowest one is done. For batches of very different stiffness,
#   `jax.lax.map` over the batch avoids that; `benchmarks/bench_timeseries.py` times both.
# * **The gradient is exact for the computed solution** (the discrete adjoint), so Adam sees a
#   loss and a gradient that are consistent to round-off, whatever the tolerance.
