# %% [markdown]
# # Events: a bouncing ball and a dosing threshold
#
# Many models do not run to a fixed end time. A ball bounces when its height reaches zero; a
# drug is dosed when its concentration falls below a threshold. `jaxadjoint.Event` describes
# such a zero crossing of a condition `g(t, y, args)`; the solve either stops there or applies
# a jump `y+ = J(t*, y-, args)` and continues. The event time is located on the solver's
# continuous extension and differentiated exactly (implicit function theorem on the computed
# interpolant), so gradients flow through the event time, the jump and the parameters of both.
#
# Two examples:
#
# 1. **Fitting the restitution coefficient** of a bouncing ball (and its initial height) to
#    noisy height observations with `optax`.
# 2. **A threshold-triggered dose** in a one-compartment pharmacokinetic model, and the
#    sensitivity of the concentration to the elimination rate, the threshold and the dose,
#    checked against the closed form.
#
# Set `JAXADJOINT_NOTEBOOK_MODE=fast` for a quick run (a few iterations; figures not saved).

# %%
import os
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

import jaxadjoint as ja

jax.config.update("jax_enable_x64", True)

MODE = os.environ.get("JAXADJOINT_NOTEBOOK_MODE", "full")
FAST = MODE == "fast"
FIGURES = Path(tempfile.mkdtemp()) if FAST else Path(".")
ADAM_STEPS = 5 if FAST else 300
print(f"mode: {MODE}; {ADAM_STEPS} Adam steps")

# %% [markdown]
# ## 1. A bouncing ball
#
# Height $x$ and velocity $v$: $\dot x = v$, $\dot v = -g$. The event is $x = 0$ while falling;
# the jump reverses and damps the velocity, $v^+ = -e\,v^-$, with the restitution coefficient
# $e$. We observe the height at 60 times in $[0, 3]$ s with noise $\sigma = 5$ cm, and fit
# $(e, x_0)$ by least squares, starting from a poor guess. (A guess with too small an $e$ would
# be a Zeno ball: infinitely many bounces before $t = 3$. The solve then fails clearly, with
# `RESULTS.max_events_reached`, rather than returning a wrong gradient.)

# %%
GRAVITY = 9.81
T_END = 3.0
obs_times = jnp.linspace(0.05, T_END, 60)


def ball(t, y, args):
    return jnp.stack([y[1], -GRAVITY * jnp.ones_like(y[0])])


bounce = ja.Event(lambda t, y, args: y[0], direction="falling",
                  jump=lambda t, y, e: jnp.stack([y[0], -e * y[1]]))


def heights(params, times=obs_times):
    e, x0 = params
    sol = ja.solve(ball, jnp.stack([x0, jnp.zeros_like(x0)]), 0.0, T_END, e, events=bounce,
                   saveat=times, rtol=1e-8, atol=1e-8, max_events=24, max_steps=64)
    return sol.ys[:, 0], sol


true_params = jnp.array([0.8, 2.0])
rng = np.random.default_rng(0)
clean, true_sol = jax.jit(heights)(true_params)
observed = clean + 0.05 * jnp.asarray(rng.standard_normal(clean.shape))
print("true bounce times:", np.round(np.asarray(true_sol.events.times[:true_sol.events.count]), 3))

# %% [markdown]
# The gradient of the loss goes through every bounce: the bounce times depend on $e$ and
# $x_0$, and each later height depends on them through the jump and the bounce time.

# %%


def loss(params):
    model, _ = heights(params)
    return jnp.mean((model - observed) ** 2)


value_and_grad = jax.jit(jax.value_and_grad(loss))
params = jnp.array([0.9, 1.5])
optimiser = optax.adam(0.02)
state = optimiser.init(params)
history = []
for i in range(ADAM_STEPS):
    value, grad = value_and_grad(params)
    updates, state = optimiser.update(grad, state)
    params = optax.apply_updates(params, updates)
    history.append(float(value))
print(f"fitted e = {float(params[0]):.4f} (true 0.8), x0 = {float(params[1]):.4f} (true 2.0), "
      f"loss {history[-1]:.2e} (noise variance {0.05 ** 2:.2e})")

# %%
fine = jnp.linspace(0.0, T_END, 400)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
fitted_path, _ = jax.jit(lambda p: heights(p, fine))(params)
true_path, _ = jax.jit(lambda p: heights(p, fine))(true_params)
axes[0].plot(fine, true_path, "k-", lw=1, label="truth")
axes[0].plot(fine, fitted_path, "C1--", label="fitted")
axes[0].plot(obs_times, observed, "C0.", label="observations")
axes[0].set(xlabel="t [s]", ylabel="height [m]", title="Bouncing ball")
axes[0].legend()
axes[1].semilogy(history)
axes[1].set(xlabel="Adam step", ylabel="mean squared error", title="Fit")
fig.tight_layout()
fig.savefig(FIGURES / "events_ball.png", dpi=110)
plt.show()

# %% [markdown]
# ## 2. Dosing at a threshold
#
# A one-compartment model eliminates the drug at rate $k$: $\dot C = -kC$. Whenever $C$ falls
# below the threshold $c$, a dose raises it by $D$. In closed form the first dose is at
# $t_1 = \ln(C_0/c)/k$ and the doses then come every $\ln((c + D)/c)/k$, so
# $C(T) = (c + D)\,e^{-k(T - t_{last})}$. We compute $\partial C(t)/\partial(k, c, D)$ over
# time with `jax.jacfwd` (`DiscreteForward`) and compare with the closed form at $t = 10$.

# %%
theta = {"k": jnp.array(0.9), "threshold": jnp.array(1.0), "dose": jnp.array(1.5)}
dose = ja.Event(lambda t, y, a: y[0] - a["threshold"], direction="falling",
                jump=lambda t, y, a: y + a["dose"])
times = jnp.linspace(0.0, 10.0, 300)


def concentration(theta, sensitivity=ja.DiscreteForward()):
    sol = ja.solve(lambda t, y, a: -a["k"] * y, jnp.array([4.0]), 0.0, 10.0, theta,
                   events=dose, saveat=times, rtol=1e-10, atol=1e-10, max_events=16,
                   sensitivity=sensitivity)
    return sol.ys[:, 0], sol


conc, sol = jax.jit(concentration)(theta)
jac = jax.jit(jax.jacfwd(lambda th: concentration(th)[0]))(theta)
print("doses at:", np.round(np.asarray(sol.events.times[:sol.events.count]), 3))


def closed_form(theta, t_end=10.0):
    k, c, d = theta["k"], theta["threshold"], theta["dose"]
    first = jnp.log(4.0 / c) / k
    period = jnp.log((c + d) / c) / k
    last = first + jnp.floor((t_end - first) / jax.lax.stop_gradient(period)) * period
    return (c + d) * jnp.exp(-k * (t_end - last))


exact = jax.grad(closed_form)(theta)
for key in theta:
    print(f"dC(10)/d{key}: solve {float(jac[key][-1]): .10f}   closed form "
          f"{float(exact[key]): .10f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
axes[0].plot(times, conc, "k-")
axes[0].axhline(float(theta["threshold"]), color="C3", ls=":", label="threshold")
axes[0].set(xlabel="t", ylabel="C", title="Concentration, dosed at the threshold")
axes[0].legend()
for key, colour in zip(theta, ("C0", "C1", "C2")):
    axes[1].plot(times, jac[key], colour, label=f"dC/d{key}")
axes[1].set(xlabel="t", title="Sensitivities through the dosing events")
axes[1].legend()
fig.tight_layout()
fig.savefig(FIGURES / "events_dosing.png", dpi=110)
plt.show()

# %% [markdown]
# The sensitivities jump at every dose: a later dose (larger $k$ makes it earlier) shifts the
# whole sawtooth, which is the saltation that the discrete adjoint and `DiscreteForward`
# carry through each event.
