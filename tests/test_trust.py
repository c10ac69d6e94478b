"""`check_gradient` and `identifiability`: the verdicts on a healthy and a broken case."""

import dataclasses
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import fast_equilibrium

import jaxadjoint as ja
from jaxadjoint.problems import (
    lotka_volterra_problem,
    robertson_problem,
    van_der_pol_problem,
    van_der_pol_rhs,
)


def test_check_gradient_healthy_lotka_volterra():
    pr = lotka_volterra_problem(t1=3.0)

    def loss(p, **options):
        return jnp.sum(ja.solve(pr.rhs, pr.y0, 0.0, 3.0, p, **options).ys[-1] ** 2)

    check = ja.check_gradient(loss, pr.args, rtol=1e-6)
    assert check.ok, str(check)
    assert [c.verdict for c in check.comparisons] == ["round-off", "truncation", "truncation"]
    assert check.comparisons[0].difference < 1e-13
    assert check.gradient.shape == pr.args.shape
    assert "OK" in str(check)


def test_check_gradient_flags_stiff_van_der_pol():
    # Dopri5 on mu = 1000: steps on the stability boundary.  The discrete derivative is exact
    # (forward mode agrees to round-off) but is not the derivative of the ODE.
    pr = van_der_pol_problem(mu=1000.0, t1=0.5)

    def loss(p, **options):
        sol = ja.solve(pr.rhs, pr.y0, 0.0, 0.5, p, max_steps=8192, **options)
        return jnp.sum(sol.ys[-1])

    check = ja.check_gradient(loss, pr.args, rtol=1e-4)
    same_grid, tighter, fd = check.comparisons
    assert same_grid.verdict == "round-off"
    assert tighter.verdict == "WRONG" and fd.verdict == "WRONG"
    assert not check.ok
    assert "UNRELIABLE" in str(check)


def test_check_gradient_measures_amplified_roundoff_and_global_error():
    # Rodas5 on Van der Pol at mu = 1e3 over [0, 5], a healthy solve that fixed thresholds
    # called UNRELIABLE: forward and reverse mode differ by ~2e-10, far above 1e4 eps, because
    # round-off is amplified (one-ulp parameter changes move the gradients as much); the
    # loss's own global error is ~19x rtol; its central differences curve strongly.
    def loss(p, **options):
        sol = ja.solve(van_der_pol_rhs, p[:2], 0.0, 5.0, p[2], solver=ja.Rodas5(),
                       max_steps=20000, **options)
        return sol.ys[-1, 0]

    check = ja.check_gradient(loss, jnp.array([2.0, 0.0, 1000.0]), rtol=1e-8)
    same_grid, tighter, fd = check.comparisons
    assert check.ok, str(check)
    # Each difference is above its floor: the measured widening is what let it pass.
    assert check.roundoff < same_grid.difference <= 10 * check.roundoff_noise
    assert check.truncation < tighter.difference <= 100 * check.loss_change
    assert check.loss_change > 5 * check.rtol
    assert fd.threshold - check.fd_error < fd.difference
    assert len(check.notes) == 3 and "round-off is amplified" in str(check)


def test_check_gradient_in_float32_keeps_its_reference_above_round_off():
    """At rtol 1e-5 in float32 the reference solves would be at 1e-7, below float32's
    resolution: `solve` warned about an rtol the user never gave (a UAT).  The reference
    stops at 16 eps, and the check still passes."""
    def loss(k, **options):
        sol = ja.solve(lambda t, y, k: -k * y, jnp.ones(1, jnp.float32), 0.0, 1.0, k,
                       **options)
        return jnp.sum(sol.ys[-1] ** 2)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check = ja.check_gradient(loss, jnp.asarray(0.7, jnp.float32), rtol=1e-5)
    assert check.ok, check
    assert "tighter rtol=2e-06" in str(check)


def test_check_gradient_rejects_bad_tolerances():
    with pytest.raises(ValueError, match="tighter"):
        ja.check_gradient(lambda p, **o: p, jnp.ones(()), tighter=1.0)


def test_check_gradient_measures_roundoff_of_ill_conditioned_stiff_steps():
    # Rodas5 with gamma h kf ~ 1e10: reverse and forward mode on the same steps differ by
    # ~4e-8 (amplified round-off, the same with LU-transposed solves).  One-ulp parameter
    # changes all change the step grid here, so only the cotangent seeds 1 + k eps measure
    # the noise; before them the check called this healthy gradient "WRONG ... a bug".
    def loss(p, **options):
        y0 = jnp.array([1.0, 0.8, 0.0, 0.0])
        sol = ja.solve(fast_equilibrium, y0, 0.0, 450.0, p, solver=ja.Rodas5(),
                       max_steps=4096, **options)
        return sol.ys[-1, 2]

    check = ja.check_gradient(loss, jnp.log(jnp.array([1e9, 1e8, 1e-3])), rtol=1e-6)
    same_grid = check.comparisons[0]
    assert check.ok, str(check)
    assert 1e3 * check.roundoff < same_grid.difference <= 10 * check.roundoff_noise
    assert "cotangent seed" in str(check)


def test_check_gradient_at_a_fitted_minimum():
    # Data from the model itself: the parameters are the minimum, the gradient is
    # truncation-sized, and relative differences of two near-zero gradients said
    # "UNRELIABLE"; and the loss, its truncation squared, changed by 100 % between the
    # tolerances, which made every difference "inconclusive".
    pr = lotka_volterra_problem(t1=6.0)
    ts = jnp.linspace(0.5, 6.0, 12)
    data = ja.solve(pr.rhs, pr.y0, 0.0, 6.0, pr.args, saveat=ja.SaveAt(ts=ts),
                    rtol=1e-12, atol=1e-12).ys

    def loss(p, **options):
        sol = ja.solve(pr.rhs, pr.y0, 0.0, 6.0, p, saveat=ja.SaveAt(ts=ts), **options)
        return jnp.mean((sol.ys - data) ** 2)

    check = ja.check_gradient(loss, pr.args, rtol=1e-6)
    assert check.ok, str(check)
    assert check.stationary_scale > 1e3 * float(jnp.linalg.norm(check.gradient))
    assert "a stationary point" in str(check) and check.loss_change < 1e-6
    # Away from the minimum the differences stay relative to the gradient itself.
    assert ja.check_gradient(loss, pr.args * 1.1, rtol=1e-6).stationary_scale == 0.0


def test_a_wrong_gradient_does_not_make_a_point_stationary():
    from jaxadjoint._check_gradient import stationary_scales

    steps, params = np.full(2, 1e-3), np.array([0.5, -3.0])
    second = np.array([2e-6, 8e-6])  # curvature 2 and 8
    # Central differences of 1e-2: the loss is not flat over the step, whatever g says.
    assert stationary_scales(np.array([1e-2, 0.0]), second, 4 * second, steps,
                             params) == (0.0, 0.0)
    gradient_scale, loss_scale = stationary_scales(np.array([1e-5, 0.0]), second, 4 * second,
                                                   steps, params)
    np.testing.assert_allclose([gradient_scale, loss_scale], [np.hypot(2, 24), np.hypot(2, 72)])
    # A jump of the loss between p and p + h (second differences the same at 2 h) is not a
    # curvature: a dose on t1 made a wrong dL/dT look like round-off at a "stationary point".
    assert stationary_scales(np.array([1e-5, 0.0]), second, second, steps,
                             params) == (0.0, 0.0)


def _lv_product(t, y, p):
    # beta enters only as beta1 * beta2: the pair is structurally unidentifiable.
    del t
    alpha, beta1, beta2, gamma, delta = p
    prey, predator = y
    return jnp.stack(
        [alpha * prey - beta1 * beta2 * prey * predator, delta * prey * predator - gamma * predator]
    )


def test_identifiability_detects_product_of_parameters():
    p = jnp.array([1.5, 2.0, 0.5, 3.0, 1.0])
    ts = jnp.linspace(0.5, 3.0, 6)
    traj = ja.sensitivity_trajectory(
        _lv_product, jnp.array([1.0, 1.0]), 0.0, 3.0, p, saveat=ts,
        sensitivity=ja.DiscreteForward(), rtol=1e-8, atol=1e-8,
    )
    names = ["alpha", "beta1", "beta2", "gamma", "delta"]
    report = ja.identifiability(traj, params=p, names=names)
    assert report.rank == 4 and not report.identifiable
    assert report.subsets[0] == (1, 2) and report.collinearity_of(["beta1", "beta2"]) > 1e6
    assert report.condition_number > 1e12
    assert report.ranking[0] == 0  # alpha, the growth rate, dominates
    assert "NOT identifiable" in str(report)

    # Without beta2 the remaining four are identifiable, from the same trajectory.
    keep = np.array([0, 1, 3, 4])
    reduced = ja.identifiability(
        np.asarray(traj.dargs)[..., keep], params=np.asarray(p)[keep], ys=traj.ys,
        names=[names[i] for i in keep],
    )
    assert reduced.rank == 4 and reduced.identifiable
    assert np.all(reduced.collinearity < 15)



def test_identifiability_of_a_pytree_of_args():
    """``args`` as a dict (rates beside an experimental condition), as a chemist passes
    them: the columns of all leaves are analysed together, named by their paths, and the
    report equals that of the same parameters as one array (before, NumPy failed on the
    dict).  ``params`` of another structure is refused with what to pass instead."""
    p = jnp.array([1.5, 2.0, 0.5, 3.0, 1.0])
    ts = jnp.linspace(0.5, 3.0, 6)

    def as_dict(x):
        return {"alpha": x[0], "betas": x[1:3], "rest": x[3:]}

    def rhs(t, y, d):
        return _lv_product(t, y, jnp.concatenate([d["alpha"][None], d["betas"], d["rest"]]))

    options = dict(saveat=ts, sensitivity=ja.DiscreteForward(), rtol=1e-8, atol=1e-8)
    y0 = jnp.array([1.0, 1.0])
    flat = ja.identifiability(ja.sensitivity_trajectory(_lv_product, y0, 0.0, 3.0, p, **options),
                              params=p)
    traj = ja.sensitivity_trajectory(rhs, y0, 0.0, 3.0, as_dict(p), **options)
    report = ja.identifiability(traj, params=as_dict(p))
    assert report.names == ("['alpha']", "['betas'][0]", "['betas'][1]", "['rest'][0]",
                            "['rest'][1]")
    np.testing.assert_allclose(report.singular_values, flat.singular_values, rtol=1e-12)
    assert report.subsets[0] == (1, 2) and report.rank == 4
    with pytest.raises(ValueError, match=r"structure of the trajectory's args.*dargs"):
        ja.identifiability(traj, params=p)
    # A Python number among the args is a constant (None in `dargs`): the same args are
    # accepted as `params`, and it is left out (it was refused: "must have the structure").
    mixed = {"alpha": p[0], "betas": p[1:3], "rest": p[3:], "scale": 1.0}
    traj = ja.sensitivity_trajectory(lambda t, y, d: rhs(t, y, d) * d["scale"], y0, 0.0, 3.0,
                                     mixed, **options)
    assert ja.identifiability(traj, params=mixed).names == report.names

def test_identifiability_robertson_matches_reference():
    pr = robertson_problem(40.0)
    traj = ja.sensitivity_trajectory(
        pr.rhs, pr.y0, 0.0, 40.0, pr.args, saveat=jnp.array([0.4, 4.0, 40.0]),
        sensitivity=ja.DiscreteForward(), solver=ja.Rodas5(), rtol=1e-8, atol=1e-10,
    )
    # The reference's table at t = 40 (its k2, k3 are our k3, k2).
    final = np.asarray(ja.normalised_sensitivities(traj, pr.args))[-1]
    expected = [[-0.23735, 0.19182, -0.09590], [0.19993, -0.25662, -0.37169],
                [0.59790, -0.48319, 0.24160]]
    np.testing.assert_allclose(final, expected, atol=2e-5)
    report = ja.identifiability(traj, params=pr.args, names=["k1", "k2", "k3"])
    assert report.rank == 3 and report.identifiable
    assert report.ranking[0] == 0
    assert report.state_influence.shape == (3, 3)
    assert np.argmax(report.state_influence[2]) == 0  # y3 is k1-dominated
    assert "identifiable" in str(report)


def test_identifiability_on_many_states_is_consistent_and_short():
    """A PDE's thousands of states printed a line each; and a subset came out singular (inf)
    above its superset (1.9e8), which cannot be: round-off decided both."""
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, 400))
    S = np.stack([a, a * (1 + 1e-15), b, c], axis=-1).reshape(4, 100, 4)
    report = ja.identifiability(S, params=np.ones(4), ys=np.ones((4, 100)),
                                names=["D1", "D2", "k", "s"])
    assert report.collinearity_of(["D1", "D2"]) == np.inf
    assert report.collinearity_of(["D1", "D2", "k"]) == np.inf
    assert report.collinearity_of(["D1", "D2", "k", "s"]) == np.inf
    text = str(report)
    assert text.count("    y[") == 20 and "... and 80 more states" in text


def test_identifiability_input_errors():
    S = np.ones((4, 2, 3))
    with pytest.raises(ValueError, match="needs `params`"):
        ja.identifiability(S)
    with pytest.raises(ValueError, match="needs `ys`"):
        ja.identifiability(S, params=np.ones(3))
    with pytest.raises(ValueError, match="scale"):
        ja.identifiability(S, scale="log")
    with pytest.raises(ValueError, match="shape"):
        ja.identifiability(np.ones(3), scale="none")
    report = ja.identifiability(S[0], scale="none")
    assert report.rank == 1 and report.state_influence is None


def _check(grid, tighter, fd, grid_expected="round-off"):
    def row(diff, expected, threshold):
        verdict = "round-off" if diff <= 1e-12 else "truncation" if diff <= threshold else "WRONG"
        return ja.GradientComparison("x", np.zeros(1), diff, expected, threshold, verdict)

    grid_threshold = 1e-12 if grid_expected == "round-off" else 1e-4
    comparisons = (row(grid, grid_expected, grid_threshold), row(tighter, "truncation", 1e-4),
                   row(fd, "truncation", 1e-3))
    return ja.GradientCheck(jnp.zeros(1), "M", 1e-6, 1e-6, 1e-12, 1e-4, comparisons)


def test_check_gradient_summaries():
    # The diagnosis that each pattern of verdicts leads to (no solves: the rows are given).
    assert _check(1e-15, 1e-5, 1e-4).summary.startswith("OK: the gradient is the exact")
    assert _check(1e-5, 1e-5, 1e-4, "truncation").summary.startswith("OK: the gradient agrees")
    assert "bug" in _check(1e-6, 1e-5, 1e-4).summary
    unreliable = _check(1e-8, 1.0, 1.0).summary
    assert unreliable.startswith("UNRELIABLE") and "agree only to 1e-08" in unreliable
    assert "non-smooth" in _check(1e-15, 1e-5, 1e-1).summary
    assert "not finite" in _check(float("inf"), 1e-5, 1e-4).summary
    assert "truncation" in _check(1e-1, 1e-5, 1e-4, "truncation").summary
    noisy = dataclasses.replace(_check(1e-13, 1.0, 1.0), roundoff_noise=0.5).summary
    assert noisy.startswith("UNRELIABLE") and "move the gradient by 5e-01" in noisy


def test_check_gradient_is_inconclusive_when_its_thresholds_accept_anything():
    """Chaotic Lorenz over [0, 40] at rtol 1e-8: the loss moved by 0.25 between the
    tolerances, so truncation allowed 25, and gradients of opposite signs passed as OK."""
    from jaxadjoint._check_gradient import _classify

    assert _classify(1.0, 1e-12, 25.0) == "inconclusive"
    assert _classify(1e-13, 1e-12, 25.0) == "round-off"
    assert _classify(3.0, 1e-12, 2.5) == "WRONG"
    assert _classify(1e-3, 1e-12, 0.4) == "truncation"
    # Central differences too wide to decide cannot condemn either (Lorenz at t = 20: 0.88
    # against a threshold of 0.64, the gradient 1.5 % from the truth).
    from jaxadjoint._check_gradient import _classify_fd

    assert _classify_fd(0.88, 1e-12, 0.64) == "inconclusive"
    assert _classify_fd(0.3, 1e-12, 0.2) == "WRONG"
    assert _classify_fd(0.1, 1e-12, 0.2) == "truncation"

    def check(tighter_verdict, fd_verdict, loss_change=0.25, fd_error=0.0):
        rows = (ja.GradientComparison("x", np.zeros(1), 1e-15, "round-off", 1e-12, "round-off"),
                ja.GradientComparison("x", np.zeros(1), 1.0, "truncation", 25.0,
                                      tighter_verdict),
                ja.GradientComparison("x", np.zeros(1), 1.0, "truncation", 25.0, fd_verdict))
        return ja.GradientCheck(jnp.zeros(1), "M", 1e-8, 1e-8, 1e-12, 1e-6, rows,
                                loss_change=loss_change, fd_error=fd_error)

    chaotic = check("inconclusive", "inconclusive")
    assert not chaotic.ok
    assert chaotic.summary.startswith("INCONCLUSIVE: the loss itself changes by 2.5e-01")
    # Central differences alone too wide (a strongly curved loss): not held against it.
    curved = check("truncation", "inconclusive", loss_change=1e-8, fd_error=3.0)
    assert curved.ok and curved.summary.startswith("OK")
    assert any("central differences decide nothing" in note for note in curved.notes)


def test_check_gradient_names_one_wrong_component_hidden_in_the_norms():
    """A switch time behind ``jnp.where(t > T, ...)`` has a zero derivative (its central
    difference is -0.058 and consistent at twice the step); beside a large component the
    three norm comparisons all pass.  The check is not OK and names the component (an
    epidemiologist's lockdown date said OK, 2026-11-28)."""
    import warnings

    def rhs(t, y, p):
        return -p["k"] * jnp.where(t > p["T"], 0.5, 1.0) * y

    def loss(p, **options):
        y = ja.solve(rhs, jnp.array([1.0]), 0.0, 3.0, p, **options).ys[-1, 0]
        return 1e3 * p["a"] ** 2 + y

    params = {"a": jnp.asarray(1.0), "k": jnp.asarray(1.0), "T": jnp.asarray(1.3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ja.TimeSwitchWarning)
        check = ja.check_gradient(loss, params, rtol=1e-6)
    assert all(c.ok for c in check.comparisons), str(check)  # the norms see nothing
    assert not check.ok
    ((name, value, reference),) = check.mismatched
    assert name == "['T']" and value == 0.0
    np.testing.assert_allclose(reference, -0.5 * np.exp(-1.3 - 0.5 * 1.7), rtol=1e-2)
    assert check.summary.startswith("UNRELIABLE: the component ['T'] is 0 by this method")


def test_a_zero_gradient_is_not_flagged_against_round_off_of_its_differences():
    """A loss that does not depend on the parameters (a conserved total of a reaction
    network: 42 moles) has the gradient 0 exactly; its central differences are round-off,
    9e-13 over a step of 2e-3, and by chance one agreed with its value at twice the step.
    The component check called it UNRELIABLE (a chemist's check, 2026-11-29); a component
    is now compared only above the differences' round-off, `eps |L| / h` (times 10)."""
    from jaxadjoint._check_gradient import component_mismatches

    g = np.zeros(2)
    g_fd = np.array([9.1e-13, -3e-13])
    g_fd_double = np.array([9.5e-13, 5e-13])
    steps = np.full(2, 2e-3)
    noise = 10 * np.finfo(np.float64).eps * 42.0 / steps
    assert component_mismatches({"k": g}, g, g, g_fd, g_fd_double, 2.2e-12, noise) == ()
    # The same mismatch above that floor is still named.
    assert component_mismatches({"k": g}, g, g, 1e6 * g_fd, 1e6 * g_fd_double, 2.2e-12,
                                noise) == (("['k'][0]", 0.0, 9.1e-07),)


def test_check_gradient_takes_a_module_and_explains_failed_differences():
    """An `equinox.Module` with its activation functions is checked as `eqx.filter_grad`
    differentiates it (a porting user's `TypeError: Cannot determine dtype of
    <PjitFunction tanh>`); a solve that fails at the moved parameters of the central
    differences is named as such (a Kepler orbit at e = 0.99: a bare max_steps error from
    inside the check)."""
    import equinox as eqx
    import jax

    mlp = eqx.nn.MLP(2, 2, 4, 1, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    mlp = jax.tree.map(lambda x: x.astype(jnp.float64) if eqx.is_inexact_array(x) else x, mlp)

    def loss(m, **options):
        sol = ja.solve(lambda t, y, m: 0.1 * m(y), jnp.array([1.0, -0.5]), 0.0, 1.0, m,
                       **options)
        return jnp.sum(sol.ys ** 2)

    check = ja.check_gradient(loss, mlp, rtol=1e-6)
    assert check.ok, str(check)
    expected = eqx.filter_grad(lambda m: loss(m, rtol=1e-6, atol=1e-6))(mlp)
    for got, want in zip(jax.tree.leaves(check.gradient), jax.tree.leaves(expected)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(TypeError, match="`params` holds no floating-point arrays"):
        ja.check_gradient(loss, {"activation": jnp.tanh})

    def blows_up(p, **options):
        # y' = p y^2 from 1 blows up at t = 1/p: just after t1 = 1 at p = 0.999, before it
        # at the moved p + 2e-3.
        return ja.solve(lambda t, y, p: p * y ** 2, jnp.ones(1), 0.0, 1.0, p,
                        **options).ys[-1, 0]

    with pytest.raises(RuntimeError, match="moved for the central differences .* failed"):
        ja.check_gradient(blows_up, jnp.asarray(0.999), rtol=1e-6)


def test_check_gradient_refuses_a_loss_that_drops_its_options():
    """A newcomer's ``def loss(theta)``: Python's bare TypeError before; and a loss that
    takes ``**options`` but never hands them to `solve` compared every solve with itself,
    and the check said OK with differences of exactly 0.  Both are refused, saying how to
    write the loss; so is an rtol at the dtype's resolution (float32 at 1e-6 compared a
    "tighter" solve at the same rtol)."""

    def rhs(t, y, k):
        return -k * y

    def no_options(k):
        return ja.solve(rhs, jnp.ones(2), 0.0, 1.0, k).ys[-1].sum()

    def dropped(k, **options):
        return no_options(k)

    with pytest.raises(TypeError, match=r"must pass them on to every ja.solve.*\*\*options"):
        ja.check_gradient(no_options, jnp.asarray(0.5))
    with pytest.raises(ValueError, match=r"must pass them on to every ja.solve.*rtol=-1"):
        ja.check_gradient(dropped, jnp.asarray(0.5))
    with pytest.raises(ValueError, match=r"rtol=1e-06 is at the resolution of float32"):
        ja.check_gradient(dropped, jnp.asarray(0.5, jnp.float32), rtol=1e-6)
