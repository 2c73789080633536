"""The Rockafellar-Uryasev CVaR objective: values, profile = spectral CVaR, exact solutions,
special cases (max loss, ERM), samplers and validation."""
import numpy as np
import pytest

import riskopt as ro
import _certify as certify
from riskopt.objectives.ru_cvar import (ArraySampler, RUCVaRObjective, StreamingRUCVaRObjective,
                             SyntheticSampler, erm_objective, max_loss_objective)

LOSSES = ["squared", "absolute", "logistic", "multinomial"]


def _data(loss, n=30, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    s = X @ w + 0.5 * rng.standard_t(3, size=n)
    if loss in ("squared", "absolute"):
        return X, s
    if loss == "logistic":
        return X, np.where(s > 0, 1.0, -1.0)
    return X, rng.integers(0, 3, size=n).astype(float)


def _objective(loss, beta=0.8, n=30, seed=0, l2_reg=0.1, fit_intercept=True):
    X, y = _data(loss, n=n, seed=seed)
    return RUCVaRObjective(loss, X, y, beta, l2_reg=l2_reg, fit_intercept=fit_intercept)


def _naive_value(obj, w, alpha):
    W = obj.as_matrix(w)
    Z = obj.X @ W
    loss = obj.loss
    ls = loss.value(obj.y, Z if obj.K > 1 else Z[:, 0])
    reg = 0.5 * np.sum(obj.reg[:, None] * W**2)
    return alpha + np.mean(np.maximum(ls - alpha, 0.0)) / (1 - obj.beta) + reg, ls


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_value_matches_the_formula_and_layout_matches_objective(loss, fit_intercept):
    obj = _objective(loss, fit_intercept=fit_intercept)
    ref = ro.Objective(loss, ro.CVaR(0.2), *_data(loss), l2_reg=0.1, fit_intercept=fit_intercept)
    for attr in ("n", "p", "K", "coef_shape"):
        assert getattr(obj, attr) == getattr(ref, attr)
    np.testing.assert_array_equal(obj.X, ref.X)
    np.testing.assert_array_equal(obj.y, ref.y)
    np.testing.assert_array_equal(obj.reg, ref.reg)
    rng = np.random.default_rng(1)
    for _ in range(5):
        w = rng.normal(size=obj.coef_shape)
        alpha = rng.normal() * 2
        expected, _ = _naive_value(obj, w, alpha)
        assert obj.value(w, alpha) == pytest.approx(expected, rel=1e-13, abs=1e-13)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 0.77, 0.9, 0.97])
def test_min_over_alpha_equals_spectral_cvar_for_any_w(loss, beta):
    obj = _objective(loss, beta=beta, n=31)  # beta n is not an integer for most betas
    spectral = ro.Objective(loss, ro.CVaR(1 - beta), *_data(loss, n=31), l2_reg=0.1,
                            fit_intercept=True)
    assert repr(obj.cvar_objective().risk) == repr(spectral.risk)
    rng = np.random.default_rng(2)
    for _ in range(5):
        w = rng.normal(size=obj.coef_shape)
        _, ls = _naive_value(obj, w, 0.0)
        # F(w, .) is piecewise linear with kinks at the losses: its minimum is at one of them
        brute = min(_naive_value(obj, w, a)[0] for a in ls)
        profile = obj.value(w)
        assert profile == pytest.approx(brute, rel=1e-12, abs=1e-12)
        assert profile == pytest.approx(spectral.value(w), rel=1e-12, abs=1e-12)
        assert obj.value(w, obj.value_at_risk(w)) == profile
        # alpha* is the lower beta-quantile of the losses
        k = max(1, int(np.ceil(beta * obj.n - 1e-9)))
        assert obj.value_at_risk(w) == pytest.approx(np.sort(ls)[k - 1], rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("loss", ["squared", "absolute", "logistic", "multinomial"])
def test_subgradient_inequality_and_finite_differences(loss):
    obj = _objective(loss, beta=0.7, l2_reg=0.05)
    rng = np.random.default_rng(3)
    for _ in range(10):
        w = rng.normal(size=obj.coef_shape)
        alpha = float(np.quantile(obj.losses(w), rng.uniform(0.2, 0.9))) + 1e-3
        g_w, g_a = obj.subgradient(w, alpha)
        assert g_w.shape == np.shape(w)
        f0 = obj.value(w, alpha)
        for _ in range(5):  # convexity: F(x') >= F(x) + <g, x' - x>
            dw, da = rng.normal(size=np.shape(w)), rng.normal()
            assert obj.value(w + dw, alpha + da) >= f0 + np.sum(g_w * dw) + g_a * da - 1e-10
        if loss != "absolute":  # differentiable here (no loss equals alpha): central differences
            h = 1e-6
            e = np.zeros(np.shape(w))
            e.flat[0] = h
            fd_w = (obj.value(w + e, alpha) - obj.value(w - e, alpha)) / (2 * h)
            fd_a = (obj.value(w, alpha + h) - obj.value(w, alpha - h)) / (2 * h)
            assert g_w.flat[0] == pytest.approx(fd_w, rel=1e-5, abs=1e-6)
            assert g_a == pytest.approx(fd_a, rel=1e-5, abs=1e-6)


def _exact_problem(loss, beta, l2_reg, n=60, seed=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    s = X @ np.array([1.0, -2.0, 0.5])
    noise = rng.standard_t(3, size=n)
    # logistic: nearly separable labels, else the CVaR minimiser is w = 0 (a degenerate check)
    y = np.where(3 * s + 0.5 * noise > 0, 1.0, 0.0) if loss == "logistic" else s + noise
    return RUCVaRObjective(loss, X, y, beta, l2_reg=l2_reg, fit_intercept=True)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
@pytest.mark.parametrize("loss,beta,l2_reg", [
    ("squared", 0.9, 0.0), ("squared", 0.5, 0.05), ("logistic", 0.8, 0.01),
    ("absolute", 0.9, 0.0), ("absolute", 0.75, 0.02)])
def test_spectral_lbfgs_and_cvxpy_minimisers_agree(loss, beta, l2_reg, seed):
    obj = _exact_problem(loss, beta, l2_reg, seed=seed)
    a = obj.exact_solution("lbfgs")
    b = obj.exact_solution("cvxpy")
    if l2_reg > 0:
        # both minimisers certified through their own duality gap on the spectral form
        # (min_alpha F(w, alpha) = CVaR(1 - beta) + reg: the same problem), not compared
        cvar = obj.cvar_objective()
        certify.assert_certified(cvar, a.coef, 1e-9, what="the spectral route (L-BFGS)")
        certify.assert_certified(cvar, b.coef, 1e-7, what="cvxpy's point")
    else:
        # no l2 term, no strong convexity: no certificate of tests/_certify.py; L-BFGS at
        # least as good as cvxpy up to cvxpy's accuracy, and the LP optimum (certified by
        # HiGHS's dual) below for the absolute loss
        assert a.value <= b.value + 1e-7 * abs(b.value)
    assert obj.value(obj.zeros()) - a.value > 0.05 * a.value  # w* = 0 would be a weak check
    # alpha* from the spectral route is the VaR at w*, and it is optimal in alpha
    assert a.alpha == obj.value_at_risk(a.coef)
    assert a.value == pytest.approx(obj.value(a.coef), rel=1e-14)
    # the cvxpy alpha is optimal for its w up to solver accuracy
    assert b.value == pytest.approx(obj.value(b.coef), rel=1e-7)
    if loss == "absolute" and l2_reg == 0:
        c = obj.exact_solution("linprog")
        assert c.value - 1e-9 * abs(c.value) <= a.value <= c.value + 1e-7 * abs(c.value)
        assert c.value - 1e-9 * abs(c.value) <= b.value <= c.value + 1e-7 * abs(c.value)


def test_spectral_lbfgs_reference_handles_a_tie_at_the_quantile():
    # At this problem's optimum the 30th and 31st losses tie at the CVaR boundary (beta n = 30):
    # the frozen-order polish alone stopped 4.4e-7 above the cvxpy value; the tie-aware polish
    # (exact epigraph solve of the tied block) must match or beat cvxpy.
    obj = _exact_problem("squared", 0.5, 0.05, seed=4)
    a = obj.exact_solution("lbfgs")
    b = obj.exact_solution("cvxpy")
    ls = np.sort(obj.losses(b.coef))
    assert ls[30] - ls[29] < 1e-6  # the tie at the boundary
    assert a.value <= b.value + 1e-9 * abs(b.value)


def test_max_loss_case():
    X, y = _data("absolute", n=25, seed=5)
    obj = max_loss_objective("absolute", X, y, fit_intercept=True)
    assert obj.beta == 1 - 1 / 25
    rng = np.random.default_rng(5)
    for _ in range(5):
        w = rng.normal(size=obj.p)
        ls = np.sort(obj.losses(w))
        assert obj.value(w) == pytest.approx(ls[-1], rel=1e-12)  # min over alpha = max loss
        assert obj.value(w, ls[-1]) == pytest.approx(ls[-1], rel=1e-12)  # at alpha = max loss
        assert obj.value(w, ls[-2]) == pytest.approx(ls[-1], rel=1e-12)  # whole [l_(n-1), l_(n)]
        assert obj.value(w, ls[-1] + 0.1) > ls[-1]
        assert obj.value(w, ls[-2] - 0.1) > ls[-1]
    # its minimiser is the Chebyshev (minimax) regression: min s s.t. |x_i w - y_i| <= s
    from scipy.optimize import linprog
    n, p = obj.n, obj.p
    A = np.block([[obj.X, -np.ones((n, 1))], [-obj.X, -np.ones((n, 1))]])
    res = linprog(np.r_[np.zeros(p), 1.0], A_ub=A, b_ub=np.r_[obj.y, -obj.y],
                  bounds=[(None, None)] * p + [(0, None)], method="highs")
    sol = obj.exact_solution("linprog")
    assert sol.value == pytest.approx(res.fun, rel=1e-8)
    assert np.max(obj.losses(sol.coef)) == pytest.approx(res.fun, rel=1e-8)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_erm_case_beta_one_over_n_and_beta_zero(loss):
    X, y = _data(loss, n=20, seed=6)
    n = 20
    obj = erm_objective(loss, X, y)
    exact = RUCVaRObjective(loss, X, y, beta=0.0)
    assert obj.beta == 1 / n
    rng = np.random.default_rng(6)
    for _ in range(5):
        w = rng.normal(size=obj.p)
        ls = obj.losses(w)
        # paper's beta = 1/n: the mean of the n - 1 largest losses = mean + (mean - min)/(n-1)
        expected = (n * ls.mean() - ls.min()) / (n - 1)
        assert obj.value(w) == pytest.approx(expected, rel=1e-12)
        assert obj.value(w) - ls.mean() == pytest.approx((ls.mean() - ls.min()) / (n - 1),
                                                         rel=1e-9)
        # beta = 0: exactly the mean, for every alpha <= min loss
        assert exact.value(w) == pytest.approx(ls.mean(), rel=1e-12)
        for a in (ls.min(), ls.min() - 3.0):
            assert exact.value(w, a) == pytest.approx(ls.mean(), rel=1e-12)
        assert exact.value(w, ls.min() + 0.5) > ls.mean()


def test_samplers_and_streaming_objective():
    for task, noise in [("regression", "normal"), ("regression", "gumbel"),
                        ("regression", "lognormal"), ("classification", "normal")]:
        s = SyntheticSampler(task, d=10, noise=noise, random_state=1)
        assert s.theta_gen.shape == (10,)
        hi = 1.0 if task == "regression" else 10.0
        assert np.all((0 <= s.theta_gen) & (s.theta_gen <= hi))
        X, y = s.draw(np.random.default_rng(0), 2000)
        assert X.shape == (2000, 10) and y.shape == (2000,)
        np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0)
        if task == "classification":
            assert set(np.unique(y)) == {-1.0, 1.0}
    # noise distributions: Normal(0, 2), Gumbel(0, 4), LogNormal(2, 1)
    rng = np.random.default_rng(0)
    z = SyntheticSampler("regression", noise="lognormal")._noise(rng, 200_000)
    assert np.median(np.log(z)) == pytest.approx(2.0, abs=0.02)
    z = SyntheticSampler("regression", noise="gumbel")._noise(rng, 200_000)
    assert np.mean(z) == pytest.approx(4 * 0.5772156649, abs=0.05)
    sampler = SyntheticSampler("classification", d=4, random_state=2)
    a = StreamingRUCVaRObjective("logistic", sampler, beta=0.9, n_eval=500, random_state=3)
    b = StreamingRUCVaRObjective("logistic", sampler, beta=0.9, n_eval=500, random_state=3)
    np.testing.assert_array_equal(a.X, b.X)
    assert a.n == 500 and set(np.unique(a.y)) == {0.0, 1.0}  # labels encoded like the loss
    X, y = ArraySampler(a.X, a.y).draw(np.random.default_rng(0), 7)
    assert X.shape == (7, 4)
    Xp, yp = a.prepare(*sampler.draw(np.random.default_rng(0), 5))
    assert Xp.shape == (5, 4) and set(np.unique(yp)) <= {0.0, 1.0}
    with pytest.raises(ValueError, match="features"):
        a.prepare(np.ones((3, 5)), np.ones(3))
    with pytest.raises(ValueError, match="sampler"):
        StreamingRUCVaRObjective("logistic", object(), beta=0.9)


@pytest.mark.parametrize("beta", [1.0, 1.5, -0.1, float("nan"), float("inf"), "0.5", None, True])
def test_bad_beta_raises(beta):
    X, y = _data("squared")
    with pytest.raises(ValueError, match="beta"):
        RUCVaRObjective("squared", X, y, beta)


def test_validation_errors():
    X, y = _data("squared")
    with pytest.raises(ValueError, match="LogisticLoss needs binary labels"):
        RUCVaRObjective("logistic", X, np.arange(len(y)) % 3, 0.5)
    with pytest.raises(ValueError, match="integer class labels"):
        RUCVaRObjective("multinomial", X, y, 0.5)
    with pytest.raises(ValueError, match="mismatched"):
        RUCVaRObjective("squared", X, y[:-1], 0.5)
    with pytest.raises(ValueError, match="l2_reg"):
        RUCVaRObjective("squared", X, y, 0.5, l2_reg=-1.0)
    with pytest.raises(ValueError, match="unknown loss"):
        RUCVaRObjective("hinge", X, y, 0.5)
    obj = RUCVaRObjective("squared", X, y, 0.5)
    with pytest.raises(ValueError, match="alpha"):
        obj.value(np.zeros(3), float("nan"))
    with pytest.raises(ValueError, match="alpha"):
        obj.value(np.zeros(3), "0.5")
    with pytest.raises(ValueError, match="coefficient"):
        obj.value(np.zeros(4), 0.0)
    with pytest.raises(ValueError, match="method"):
        obj.exact_solution("newton")
    with pytest.raises(ValueError, match="absolute"):
        obj.exact_solution("linprog")
    Xm, ym = _data("multinomial")
    with pytest.raises(ValueError, match="cvxpy"):
        RUCVaRObjective("multinomial", Xm, ym, 0.5).exact_solution("cvxpy")
    with pytest.raises(ValueError, match="out of range"):
        RUCVaRObjective("multinomial", Xm, ym, 0.5).prepare(Xm[:2], [0.0, 5.0])
    with pytest.raises(ValueError, match="at least 2"):
        max_loss_objective("squared", X[:1], y[:1])
