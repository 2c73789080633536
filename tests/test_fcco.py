"""Group DRO (CVaR / spectral risks of group losses) and constrained learning (the FCCO
families): objectives against brute force and cvxpy, outer Moreau envelopes against numerical
minimisation, the solvers against the exact optimum, the estimators' ``groups=``."""
import numpy as np
import pytest
from scipy.optimize import approx_fprime, minimize_scalar

import riskopt as ro
from riskopt._kernels import fcco as kf
from reference_impl import fcco as twin
import _certify as certify

cp = pytest.importorskip("cvxpy")


def _data(n=90, d=3, m=5, seed=0, loss="logistic"):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    g = rng.integers(0, m, size=n)
    g[:m] = np.arange(m)  # every group present
    z = X @ rng.normal(size=d) + 0.5 * g * rng.normal(size=n)
    y = (z > 0).astype(float) if loss == "logistic" else z
    return X, y, g


# ------------------------------------------------------------------------ objectives
@pytest.mark.parametrize("risk", ["cvar:0.4", "mean", "max", "esrm:2", "extremile:2",
                                  ro.CVaR(0.3, shift_cost=0.5)])
@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_group_risk_value_is_the_risk_of_group_mean_losses(risk, loss):
    X, y, g = _data(loss=loss)
    obj = ro.Objective(loss, risk, X, y, groups=g, l2_reg=0.1)
    w = np.random.default_rng(1).normal(size=obj.p)
    losses = ro.get_loss(loss).value(y, X @ w)
    gl = np.array([losses[g == k].mean() for k in range(5)])
    np.testing.assert_allclose(obj.group_losses(w), gl, rtol=1e-13)
    r = ro.parse_risk(risk)
    expected = r.value(gl) if hasattr(r, "value") else None
    if expected is None:  # brute force: sigma on the sorted group losses
        expected = np.sort(gl) @ r.spectrum(5)
    assert obj.value(w) == pytest.approx(expected + 0.05 * w @ w, rel=1e-12)
    if r.shift_cost > 0:  # smooth: gradient by finite differences
        np.testing.assert_allclose(obj.grad(w), approx_fprime(w, obj.value, 1e-7), atol=1e-5)


def test_group_cvar_form_profile_and_subgradient():
    X, y, g = _data()
    obj = ro.Objective("logistic", ro.CVaR(0.4), X, y, groups=g, l2_reg=0.1)
    w = np.random.default_rng(2).normal(size=obj.p)
    s = obj.best_s(w)
    assert obj.value(w, (s,)) == pytest.approx(obj.value(w), rel=1e-12)
    for ds in (-0.3, -1e-3, 1e-3, 0.3):  # s is a minimiser of the CVaR form
        assert obj.value(w, (s + ds,)) >= obj.value(w) - 1e-12
    val, (gw, gs) = obj.value_grad(w, (s + 0.05,))
    fd = approx_fprime(w, lambda v: obj.value(v, (s + 0.05,)), 1e-7)
    np.testing.assert_allclose(gw, fd, atol=1e-5)


@pytest.mark.parametrize("risk", ["cvar:0.4", "mean", "max"])
@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_group_risk_reference_matches_cvxpy(risk, loss):
    X, y, g = _data(loss=loss, seed=3)
    obj = ro.Objective(loss, risk, X, y, groups=g, l2_reg=0.05, fit_intercept=True)
    ref = obj.reference_solution()
    exact = obj.reference_solution("cvxpy")
    # the reference and the lbfgs solver certified optimal through their own duality gap
    # (tests/_certify.py: group weights are per-row weights q_g / n_g), not compared with
    # cvxpy's approximate point; cvxpy's value is that optimum to its own accuracy (its
    # exponential cone is the less accurate side: measured up to 2e-6 above on logistic CVaR)
    certify.assert_certified(obj, ref.coef, 1e-7, what="the reference")
    res = ro.solvers.get("lbfgs").run(obj)
    certify.assert_certified(obj, res.coef, 1e-7, what="the lbfgs solver")
    assert exact.value == pytest.approx(ref.value, rel=1e-5)
    assert ref.value <= exact.value + 1e-7 * abs(exact.value)


def test_group_risk_validation():
    X, y, g = _data()
    with pytest.raises(ValueError, match="groups must have shape"):
        ro.Objective("logistic", "cvar:0.3", X, y, groups=g[:-1])
    gf = g.astype(float)
    gf[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ro.Objective("logistic", "cvar:0.3", X, y, groups=gf)
    go = g.astype(object)
    go[2] = None
    with pytest.raises(ValueError, match="None"):
        ro.Objective("logistic", "cvar:0.3", X, y, groups=go)
    with pytest.raises(ValueError, match="sample_weight"):
        ro.Objective("logistic", "cvar:0.3", X, y, groups=g, sample_weight=np.ones(len(y)))
    obj = ro.Objective("logistic", "esrm:1", X, y, groups=g)
    assert obj.aux_names == ()
    with pytest.raises(ValueError, match="auxiliary"):
        obj.value(np.zeros(3), (0.0,))
    for name in ("sonex", "sonx", "alexr2", "ooa"):  # they need the CVaR form
        assert "CVaR" in ro.solvers.get(name).incompatibility(obj)
    assert "lbfgs" in ro.solvers.solvers_for(obj)


# ------------------------------------------------------------------------ outer functions
@pytest.mark.parametrize("par", [1.0, 4.0])
@pytest.mark.parametrize("lam", [0.05, 0.5])
def test_moreau_gradient_of_the_hinge_matches_numerical_prox(par, lam):
    """grad f_lam(u) = (u - prox_{lam f}(u)) / lam for f = par [.]_+ (paper Eq. (2))."""
    for u in np.linspace(-2, 3, 23):
        res = minimize_scalar(lambda v: par * max(v, 0.0) + (u - v) ** 2 / (2 * lam),
                              bounds=(u - 10, u + 10), method="bounded",
                              options={"xatol": 1e-12})
        expected = (u - res.x) / lam
        assert kf._outer_grad(0, u, lam, par) == pytest.approx(expected, abs=1e-6)
        assert twin.outer_grad(0, u, lam, par) == pytest.approx(expected, abs=1e-6)
    # lam = 0: a subgradient; squared hinge: its gradient
    assert kf._outer_grad(0, 0.3, 0.0, par) == par and kf._outer_grad(0, -0.3, 0.0, par) == 0
    assert kf._outer_grad(1, 0.3, lam, par) == pytest.approx(0.3 * par)


@pytest.mark.parametrize("lam", [0.01, 0.2])
def test_smoothed_hinge_penalty_is_the_moreau_envelope(lam):
    X, y, g = _data(loss="squared")
    obj = ro.ConstrainedObjective("squared", X, y, [(g == 0, 0.5)], rho=3.0)
    for gv in np.linspace(-1, 2, 17):
        val, d = obj._penalty(np.array([gv]), lam)
        env = minimize_scalar(lambda v: 3.0 * max(v, 0) + (gv - v) ** 2 / (2 * lam),
                              bounds=(gv - 10, gv + 10), method="bounded",
                              options={"xatol": 1e-12}).fun
        assert val[0] == pytest.approx(env, abs=1e-8)
        assert d[0] == pytest.approx(kf._outer_grad(0, gv, lam, 3.0), abs=1e-12)


def test_capped_simplex_projection_matches_exact_breakpoint_search():
    rng = np.random.default_rng(0)
    for _ in range(200):
        m = int(rng.integers(1, 12))
        cap = 1.0 / max(1, int(rng.integers(1, m + 1))) if m > 1 else 1.0
        x = rng.normal(scale=rng.choice([0.01, 1, 100]), size=m)
        out = np.empty(m)
        kf._project_capped_simplex(x, cap, out)
        expect = twin.project_capped_simplex(x, cap)
        np.testing.assert_allclose(out, expect, atol=1e-10)
        assert out.sum() == pytest.approx(1.0, abs=1e-12) and np.all(out <= cap + 1e-15)


# ------------------------------------------------------------------------ constrained learning
def _qp(seed=0):
    """Least squares on groups 2-4 with the mean squared loss of groups 0 and 1 bounded."""
    X, y, g = _data(n=120, loss="squared", seed=seed)
    free = ro.Objective("squared", "mean", X[g >= 2], y[g >= 2], l2_reg=0.0)
    wf = free.reference_solution().coef
    l0 = [float(np.mean(0.5 * (X[g == k] @ wf - y[g == k]) ** 2)) for k in (0, 1)]
    cons = [(g == 0, 0.6 * l0[0]), (g == 1, 0.7 * l0[1])]  # both active at the free fit
    return X, y, g, cons


def _qp_dual_bound(X, y, g, cons, lam, rho=None):
    """A certified lower bound (weak duality; exact up to rounding, ``certify.quadratic_min``)
    from multipliers ``lam >= 0`` (any: e.g. cvxpy's, whatever their accuracy):

    * on the constrained optimum ``min g_0 s.t. g_k <= 0``: ``min_w g_0 + sum_k lam_k g_k``;
      it bounds the hinge-penalised ``min Phi`` too when every ``lam_k <= rho / m``;
    * with ``rho`` (the squared hinge ``rho / (2m) max(g_k, 0)^2 >= lam_k g_k - m lam_k^2 /
      (2 rho)``): on ``min Phi`` of the squared-hinge penalty."""
    lam = np.maximum(np.asarray(lam, dtype=np.float64), 0.0)
    obj_rows = g >= 2
    a = obj_rows / obj_rows.sum()
    for (rows, _), l in zip(cons, lam):
        a = a + l * rows / rows.sum()
    bound = certify.quadratic_min(X, y, a) - sum(l * b for (_, b), l in zip(cons, lam))
    if rho is not None:
        bound -= float(np.sum(len(cons) * lam ** 2 / (2 * rho)))
    return bound


def test_exact_penalty_recovers_the_constrained_solution():
    # the penalised reference is certified optimal for the penalised problem and (feasible to
    # 1e-6) for the constrained one, through the dual bound of cvxpy's multipliers; no
    # comparison of two approximate minimisers
    X, y, g, cons = _qp()
    obj = ro.ConstrainedObjective("squared", X, y, cons, objective_rows=g >= 2, rho=50.0)
    mult = obj._solve_cvxpy(constrained=True).extra["multipliers"]
    assert max(mult) > 0 and obj.rho / obj.m > max(mult)  # the exact-penalty condition
    bound = _qp_dual_bound(X, y, g, cons, mult)  # <= min g_0 s.t. g <= 0, and <= min Phi
    ref = obj.reference_solution()
    assert np.max(obj.violations(ref.coef)) <= 1e-6
    f0 = obj.objective_value(ref.coef)
    assert abs(ref.value - obj.value(ref.coef)) <= 1e-14 * ref.value
    assert -1e-12 * ref.value <= ref.value - bound <= 1e-7 * ref.value  # Phi(ref) certified
    # within 1e-7 of min Phi (a bound above the value would be a wrong bound: rounding only)
    assert f0 - bound <= 1e-7 * f0  # and g_0(ref) within 1e-7 of the constrained optimum


@pytest.mark.parametrize("name, kw, tol", [
    ("sonex", {"lr": 0.02}, 1e-2),
    ("alexr2", {"lr": 0.5, "inner_lr": 0.05, "nu": 0.1}, 3e-2),
    ("sonx", {"lr": 0.02}, 2e-2),
])
def test_smoothed_hinge_solvers_satisfy_the_constraints_of_a_small_qp(name, kw, tol):
    """Stated tolerance ``tol``: every constraint within ``tol`` of feasibility (relative to
    its bound) and the objective within ``tol`` of the constrained optimum after 150 passes
    (rho = 10 > m x the largest multiplier, 1.08)."""
    X, y, g, cons = _qp()
    obj = ro.ConstrainedObjective("squared", X, y, cons, objective_rows=g >= 2, rho=10.0)
    exact = obj._solve_cvxpy(constrained=True)
    solver = ro.solvers.get(name, **kw, groups_per_batch=2, per_group=8, objective_batch=16,
                            random_state=0)
    res = solver.run(obj, 150)
    bounds = np.array([b for _, b in cons])
    assert max(exact.extra["multipliers"]) * obj.m < obj.rho
    assert np.all(obj.violations(res.coef) <= tol * bounds)
    f0 = obj.objective_value(exact.coef)
    assert obj.objective_value(res.coef) == pytest.approx(f0, rel=tol)


def test_squared_hinge_is_biased_and_sox_solves_it():
    X, y, g, cons = _qp()
    obj = ro.ConstrainedObjective("squared", X, y, cons, objective_rows=g >= 2, rho=50.0,
                                  penalty="squared_hinge")
    ref = obj.reference_solution()
    # certified (dual bound from the multipliers the squared hinge implies at ref)
    lam = obj.rho / obj.m * np.maximum(obj.violations(ref.coef), 0.0)
    gap = ref.value - _qp_dual_bound(X, y, g, cons, lam, rho=obj.rho)
    assert -1e-12 * ref.value <= gap <= 1e-6 * ref.value
    assert np.max(obj.violations(ref.coef)) > 1e-4  # finite rho leaves a violation
    res = ro.solvers.get("sox", lr=0.002, groups_per_batch=2, per_group=8,
                         objective_batch=16, random_state=0).run(obj, 100)
    assert (res.value - ref.value) / ref.value < 2e-2
    hinge = ro.ConstrainedObjective("squared", X, y, cons, objective_rows=g >= 2)
    assert "squared_hinge" in ro.solvers.get("sox").incompatibility(hinge)
    assert "group_risk" in ro.solvers.get("ooa").incompatibility(hinge)


def test_constrained_validation():
    X, y, g = _data(loss="squared")
    with pytest.raises(ValueError, match="non-empty list"):
        ro.ConstrainedObjective("squared", X, y, [])
    with pytest.raises(ValueError, match="pair"):
        ro.ConstrainedObjective("squared", X, y, [g == 0])
    with pytest.raises(ValueError, match="finite"):
        ro.ConstrainedObjective("squared", X, y, [(g == 0, np.inf)])
    with pytest.raises(ValueError, match=r"\[0, 90\)"):
        ro.ConstrainedObjective("squared", X, y, [(np.array([0, 90]), 1.0)])
    with pytest.raises(ValueError, match="mask must have length"):
        ro.ConstrainedObjective("squared", X, y, [(g[:10] == 0, 1.0)])
    with pytest.raises(ValueError, match="penalty"):
        ro.ConstrainedObjective("squared", X, y, [(g == 0, 1.0)], penalty="l1")
    with pytest.raises(ValueError, match="rho"):
        ro.ConstrainedObjective("squared", X, y, [(g == 0, 1.0)], rho=0)


# ------------------------------------------------------------------------ group DRO solvers
def _gdro(seed=0, n=3000):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    g = rng.integers(0, 8, size=n)
    y = (X[:, 0] + 0.25 * g * rng.normal(size=n) - 0.1 * g > 0).astype(float)
    return ro.Objective("logistic", ro.CVaR(0.25), X, y, groups=g, l2_reg=0.01,
                        fit_intercept=True)


@pytest.mark.parametrize("name, kw", [
    ("sonex", {"lr": 0.05}),
    ("sonex", {"lr": 0.01, "step_rule": "adam"}),
    ("alexr2", {"lr": 0.5, "inner_lr": 0.1}),
    ("sonx", {"lr": 0.05}),
    ("sonex", {"lr": 0.05, "gamma": 0.8, "gamma_prime": 0.1, "per_group": 64}),
    ("ooa", {"lr": 0.05, "dual_lr": 0.05}),
])
def test_group_dro_solvers_reach_the_exact_optimum_within_1e_2(name, kw):
    obj = _gdro()
    f_star = obj.reference_solution("cvxpy").value
    res = ro.solvers.get(name, **kw, random_state=0).run(obj, 40)
    assert (res.value - f_star) / f_star < 1e-2, res.value


def test_sonex_tracks_s_and_reports_it():
    obj = _gdro()
    res = ro.solvers.get("sonex", lr=0.05, random_state=0).run(obj, 40)
    coef, (a,) = ro.solvers.get("sonex").point(obj, res.state)
    assert np.isnan(a)  # the reported point is w: scored by the profile over s
    s = res.extra["s"]
    assert s == res.state.s and np.isfinite(s)
    # the CVaR form at the solver's s is close to the profile (s near the group quantile)
    assert obj.value(res.coef, (s,)) == pytest.approx(obj.value(res.coef), rel=5e-2)


# ------------------------------------------------------------------------ estimators
def test_estimators_fit_group_dro_and_report_group_losses():
    obj = _gdro(n=1500)
    X, y = obj.X[:, :-1], obj.y
    g = obj.group_labels[obj.group_ids]
    clf = ro.RiskClassifier(risk="cvar:0.25", l2_reg=0.01 / 2).fit(X, y, groups=g)
    assert clf.solver_ == "lbfgs"
    erm = ro.RiskClassifier(risk="mean", l2_reg=0.01 / 2).fit(X, y)
    W = np.append(clf.coef_.ravel(), clf.intercept_)
    ref = ro.Objective("logistic", ro.CVaR(0.25), X, y, groups=g, l2_reg=0.005,
                       fit_intercept=True).reference_solution("cvxpy")
    assert np.allclose(W, ref.coef, atol=1e-3)
    assert clf.group_losses_.shape == (8,)
    We = np.append(erm.coef_.ravel(), erm.intercept_)
    gl_erm = ro.Objective("logistic", "mean", X, y, groups=g,
                          fit_intercept=True).group_losses(We)
    assert clf.group_losses_.max() <= gl_erm.max() + 1e-9  # the worst group does not get worse
    reg = ro.RiskRegressor(risk="cvar:0.5").fit(X, X @ [1, 2, 0, 0] + g, groups=g)
    assert reg.group_losses_.shape == (8,)
    with pytest.raises(ValueError, match="groups must have shape"):
        ro.RiskClassifier().fit(X, y, groups=g[:5])
    with pytest.raises(ValueError, match="spectral risk"):
        ro.RiskClassifier(risk="kl:0.5").fit(X, y, groups=g)


@pytest.mark.parametrize("solver", ["sonex", "sonx", "ooa", "alexr2"])
def test_estimator_stochastic_group_dro_on_unscaled_features(solver):
    """The step search is a grid around the solver's default lr (no smoothness estimate for
    this family) and the fit runs in standardised coordinates: on features of scales 1 and
    30 the default step alone oscillated past the divergence monitor ("diverged for every
    step size tried"), and on the raw features OOA / ALEXR2 ended ~12% above the optimum;
    now every solver ends within 2% (measured 0.1-0.6%)."""
    rng = np.random.default_rng(3)
    n = 1200
    g = rng.choice(np.array(["a", "b", "c", "d"]), n, p=[0.5, 0.3, 0.15, 0.05])
    X = np.column_stack([rng.normal(size=n), 30 * rng.random(n), rng.integers(0, 2, n)])
    y = (X[:, 0] + 0.05 * X[:, 1] + (g == "d") + rng.logistic(size=n) > 1).astype(int)
    ref = ro.RiskClassifier(risk="cvar:0.3", solver="lbfgs").fit(X, y, groups=g)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning: the budget is not to tol
        est = ro.RiskClassifier(risk="cvar:0.3", solver=solver, random_state=0).fit(
            X, y, groups=g)
    f_ref, f = ref.objective_trace_[-1], est.objective_trace_[-1]
    assert np.isfinite(f) and (f - f_ref) / f_ref < 2e-2


# ------------------------------------------------------------------------ step decay
@pytest.mark.parametrize("name", ["sonex", "sonx", "ooa", "alexr2"])
def test_step_decay_is_a_restart_at_the_decayed_step(name):
    # the paper's step decay (App. F.1): lr * decay after every ``decay_every`` passes. Three
    # passes with (0.3, every 2) are bit for bit two passes at lr, then one at 0.3 lr from the
    # same state (same random stream, same tracked values and momentum).
    obj = _gdro(n=1500)
    decayed = ro.solvers.get(name, lr=0.05, lr_decay=0.3, decay_every=2, random_state=3)
    res = decayed.run(obj, 3)
    first = ro.solvers.get(name, lr=0.05, random_state=3).run(obj, 2)
    rest = ro.solvers.get(name, lr=0.05 * 0.3, random_state=3).run(obj, 1, state=first.state)
    np.testing.assert_array_equal(res.coef, rest.coef)
    # the default (lr_decay = 1) is the constant step
    const = ro.solvers.get(name, lr=0.05, random_state=3).run(obj, 3)
    same = ro.solvers.get(name, lr=0.05, lr_decay=1.0, decay_every=2, random_state=3).run(obj, 3)
    np.testing.assert_array_equal(const.coef, same.coef)
    assert not np.array_equal(res.coef, const.coef)


def test_decayed_sonex_reaches_the_exact_optimum_closer_than_its_constant_step():
    # with a constant step SONEX stalls at a noise floor; decaying the step goes below it. Both
    # are measured against the certified (cvxpy) optimum, on the mean of 3 seeds
    obj = _gdro()
    f_star = obj.reference_solution("cvxpy").value

    def gap(**kw):
        return np.mean([(ro.solvers.get("sonex", lr=0.2, random_state=s, **kw).run(obj, 30)
                         .value - f_star) / f_star for s in range(3)])

    const, decay = gap(), gap(lr_decay=0.3, decay_every=9)
    assert 0 <= decay < const, (decay, const)


@pytest.mark.parametrize("kw, match", [
    ({"lr_decay": 0.0}, "lr_decay"), ({"lr_decay": 1.5}, r"lr_decay must be in \(0, 1\]"),
    ({"lr_decay": float("nan")}, "lr_decay"), ({"decay_every": 0}, "decay_every"),
])
@pytest.mark.parametrize("name", ["sonex", "ooa"])
def test_step_decay_validation(name, kw, match):
    with pytest.raises(ValueError, match=match):
        ro.solvers.get(name, **kw).run(_gdro(n=500), 1)
