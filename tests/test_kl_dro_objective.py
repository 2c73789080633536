"""The KL-DRO risk and the "kl_dro" family: exact values against cvxpy (exponential cone),
the compositional form, Lemma 1, gradients, overflow, the estimators and the CLI."""
import numpy as np
import pytest

import riskopt as ro
from riskopt.objectives import KLDROObjective
import _certify as certify

cp = pytest.importorskip("cvxpy")


def _logistic(n=60, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + 0.8 * rng.normal(size=n) > 0).astype(float)
    return X, y


def _cvx_inner(losses, radius, lam0):
    n = losses.shape[0]
    q = cp.Variable(n, nonneg=True)
    kl = cp.sum(cp.rel_entr(q, np.full(n, 1.0 / n)))
    cons = [cp.sum(q) == 1]
    if radius is not None:
        cons.append(kl <= radius)
    prob = cp.Problem(cp.Maximize(q @ losses - lam0 * kl), cons)
    prob.solve(solver="CLARABEL")
    return prob.value, q.value


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("radius, lam0", [(0.1, 0.0), (0.5, 1e-3), (0.05, 0.2), (None, 0.5)])
def test_inner_maximisation_matches_cvxpy(seed, radius, lam0):
    rng = np.random.default_rng(seed)
    losses = rng.exponential(size=25) * 2
    risk = ro.KLDRO(radius=radius, shift_cost=lam0 if (lam0 or radius is None) else 0.0)
    value, q, lam = risk.solve(losses)
    ref, q_ref = _cvx_inner(losses, radius, risk.shift_cost)
    assert value == pytest.approx(ref, rel=1e-6, abs=1e-7)
    np.testing.assert_allclose(q, q_ref, atol=1e-4)
    assert np.isclose(q.sum(), 1.0)


def test_full_problem_matches_cvxpy_exponential_cone():
    X, y = _logistic()
    n, d = X.shape
    rho, lam0, mu = 0.2, 0.01, 0.05
    obj = ro.Objective("logistic", ro.KLDRO(radius=rho, shift_cost=lam0), X, y, l2_reg=mu)
    ref = obj.reference_solution()
    # min_{w, lam >= lam0, t} t + (lam - lam0) rho + mu/2 |w|^2 with
    # sum_i lam exp((l_i(w) - t)/lam) <= n lam  (the perspective of log-mean-exp)
    w, lam, t = cp.Variable(d), cp.Variable(), cp.Variable()
    l, u = cp.Variable(n), cp.Variable(n)
    z = X @ w
    cons = [cp.logistic(z) - cp.multiply(y, z) <= l, lam >= lam0,
            cp.sum(u) <= n * lam, cp.constraints.ExpCone(l - t, lam * np.ones(n), u)]
    prob = cp.Problem(cp.Minimize(t + (lam - lam0) * rho + mu / 2 * cp.sum_squares(w)), cons)
    prob.solve(solver="CLARABEL")
    # both points are certified optimal for obj through their own duality gap (the reference
    # to 1e-10, cvxpy's exponential cone to its solver accuracy): the same problem, solved;
    # no comparison of two approximate solutions
    certify.assert_certified(obj, ref.coef, 1e-10, what="the reference solution")
    certify.assert_certified(obj, w.value, 1e-6, what="cvxpy's point")
    # cvxpy's optimal value is that optimum too (its own accuracy) ...
    assert prob.value == pytest.approx(ref.value, rel=1e-6)
    # ... and the reference's multiplier is lambda* of its own losses (the exact 1-D solve)
    assert ref.aux[0] == pytest.approx(obj.solve(ref.coef)[2], rel=1e-12)


def test_compositional_form_at_lam_star_is_the_exact_value_and_lemma_1():
    X, y = _logistic(n=80)
    obj = ro.Objective("logistic", "kl:0.3", X, y, l2_reg=0.01)
    rng = np.random.default_rng(3)
    for _ in range(5):
        w = rng.normal(size=3)
        v, q, lam = obj.solve(w)
        assert obj.value(w, (lam,)) == pytest.approx(obj.value(w), rel=1e-12)
        # any other lam gives a larger value (the dual is minimised at lam*)
        assert obj.value(w, (2 * lam,)) >= obj.value(w) - 1e-12
        losses = obj.losses(w)
        assert lam <= obj.shift_cost + (losses.max() - losses.min()) / obj.radius + 1e-12
    lo, hi = obj.lam_bounds()
    assert lo == obj.shift_cost and obj.reference_solution().aux[0] <= hi


def test_gradients_against_finite_differences():
    X, y = _logistic(n=40)
    obj = ro.Objective("logistic", ro.KLDRO(radius=0.3, shift_cost=0.05), X, y, l2_reg=0.1,
                       fit_intercept=True)
    rng = np.random.default_rng(1)
    w = rng.normal(size=obj.p)
    h = 1e-6
    for aux in (None, (0.7,)):
        _, g = obj.value_grad(w, aux)
        fd = np.array([(obj.value(w + h * e, aux) - obj.value(w - h * e, aux)) / (2 * h)
                       for e in np.eye(obj.p)])
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)
    f, _, dlam = obj.value_grad_lam(w, 0.7)
    fd = (obj.value(w, (0.7 + h,)) - obj.value(w, (0.7 - h,))) / (2 * h)
    assert dlam == pytest.approx(fd, rel=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_no_overflow_with_losses_of_1e3(dtype):
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(50, 2)) * 30).astype(dtype)
    y = rng.normal(size=50).astype(dtype)
    obj = ro.Objective("squared", ro.KLDRO(radius=0.1, shift_cost=1e-3), X, y)
    w = np.array([1.0, -1.0])
    assert obj.losses(w).max() > 1e3
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        v, g = obj.value_grad(w)
        vc = obj.value(w, (1e-3,))
    assert np.isfinite(v) and np.all(np.isfinite(g)) and np.isfinite(vc)
    res = ro.solvers.get("rascdro", lr=1e-4, random_state=0).run(obj, 3)
    assert np.all(np.isfinite(res.coef))


def test_validation_and_parsing():
    assert ro.parse_risk("kl:0.25") == ro.KLDRO(radius=0.25)
    assert ro.parse_risk("kl:0.25", shift_cost=0.1).shift_cost == 0.1
    for bad in (dict(), dict(radius=-1.0), dict(radius=0.1, shift_cost=-1.0),
                dict(shift_cost=0.0)):
        with pytest.raises(ValueError):
            ro.KLDRO(**bad)
    with pytest.raises(ValueError, match="radius"):
        ro.parse_risk("kl:abc")
    X, y = _logistic(n=10)
    with pytest.raises(ValueError, match="sample_weight"):
        ro.Objective("logistic", "kl:0.1", X, y, sample_weight=np.ones(10))
    obj = ro.Objective("logistic", "kl:0.1", X, y)
    assert isinstance(obj, KLDROObjective)
    with pytest.raises(ValueError, match="lam"):
        obj.value(np.zeros(3), (-1.0,))
    with pytest.raises(ValueError, match="loss_bound"):
        KLDROObjective("logistic", X, y, radius=0.1, loss_bound=-1.0)


def test_estimators_and_lbfgs_reach_the_reference():
    X, y = _logistic(n=200)
    est = ro.RiskClassifier(risk="kl:0.2", l2_reg=0.01).fit(X, y)
    obj = ro.Objective("logistic", "kl:0.2", X, y, l2_reg=0.01, fit_intercept=True)
    coef = np.concatenate([est.coef_.ravel(), np.atleast_1d(est.intercept_)])
    # the estimator's point certified through its own duality gap (not against the reference's
    # approximate value); the reference is certified the same way, more tightly
    certify.assert_certified(obj, coef, 1e-6, what="RiskClassifier(risk='kl:0.2')")
    certify.assert_certified(obj, obj.reference_solution().coef, 1e-9, what="the reference")
    assert est.score(X, y) > 0.7


def test_benchmark_spec_builds_the_family(tmp_path):
    from riskopt.bench import ObjectiveSpec, SolverSpec, Spec, run

    spec = Spec(name="kl_small", datasets=["yacht"],
                objectives=[ObjectiveSpec(family="kl_dro", params={"radius": 0.5,
                                                                            "lam0": 0.01})],
                solvers=[SolverSpec("rascdro", lr=[1e-3], params={"batch_size": 32})],
                seeds=[0], passes=4, selection_rule="final")
    res = run(spec, out=tmp_path / "kl", jobs=1, progress=False, plot=False)
    assert res.complete


def test_benchmark_values_solvers_without_lambda_by_the_profile(tmp_path):
    import pandas as pd

    from riskopt.bench import ObjectiveSpec, SolverSpec, Spec, run
    from riskopt.bench.spec import RecordSpec

    spec = Spec(name="kl_nolam", datasets=["yacht"],
                objectives=[ObjectiveSpec(family="kl_dro", params={"radius": 0.5,
                                                                     "lam0": 0.01})],
                solvers=[SolverSpec("fastdro", lr=[1e-3], params={"batch_size": 32}),
                         SolverSpec("spd", lr=[1e-3], params={"batch_size": 32,
                                                               "dual_lr": 1e-3})],
                seeds=[0], passes=3, record=RecordSpec(value="iterate"),
                selection_rule="final")
    res = run(spec, out=tmp_path / "r", jobs=1, progress=False, plot=False)
    t = pd.read_parquet(res.table)
    assert np.all(np.isfinite(t["value"])) and not t["diverged"].any()


@pytest.mark.parametrize("text,want", [
    ("cvar:0.1,chi2=0.5", ro.CVaR(0.1, shift_cost=0.5)),
    ("esrm:1, kl=0.2", ro.ESRM(1.0, shift_cost=0.2, divergence="kl")),
    ("mean,chi2=1", ro.Mean(shift_cost=1.0)),
    ("extremile:2", ro.Extremile(2.0)),
    ("kl:0.25,lam0=0.01", ro.KLDRO(radius=0.25, shift_cost=0.01)),
])
def test_risk_strings_carry_the_shift_cost(text, want):
    assert ro.parse_risk(text) == want
    # the string's option overrides the keyword default
    assert ro.parse_risk("cvar:0.1,kl=0.3", shift_cost=0.5) == ro.CVaR(0.1, 0.3, "kl")


@pytest.mark.parametrize("text,match", [
    ("cvar:0.1,chi2", "KEY=NUMBER"), ("cvar:0.1,chi2=x", "KEY=NUMBER"),
    ("cvar:0.1,tau=1", "unknown option"), ("cvar:0.1,chi2=1,kl=1", "twice"),
    ("kl:0.1,chi2=1", "lam0"), ("cvar:0.1,chi2=-1", "shift_cost"),
])
def test_bad_risk_string_options(text, match):
    with pytest.raises(ValueError, match=match):
        ro.parse_risk(text)
