"""The exact Newton solver and its duality-gap certificate (issue 13, part 1).

* The optimum matches cvxpy's (an independent conic solver) on small random problems, and the
  certified lower bound never exceeds cvxpy's optimum (the certificate is a proof, so a bound
  above F* would be a bug), also at arbitrary non-optimal points.
* The generalised Hessian of the smoothed risk equals finite differences of its gradient (the
  pure-NumPy twin of the Newton model) on pieces where the oracle's pools are fixed.
* The weighted Gram matrix of the operator / CSR designs equals the dense one.
* The estimators fit with it (solver='newton') and say which solver ran and why.
"""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import _certify as certify
import riskopt as ro
from riskopt._design import LinearDesign
from riskopt._kernels import oracles as ko
from riskopt.objectives import _dual as dual
from riskopt.objectives import _newton as nt
from riskopt.objectives import _newton_hessian

from test_degenerate import cvxpy_spectral_minimum, data

RISKS = [ro.CVaR(0.3), ro.CVaR(0.37), ro.ESRM(2.0), ro.Extremile(2.0)]


def _obj(loss, risk, fit_intercept, seed, n=30, d=3, nu=0.0):
    X, y = data(loss, n, d, seed)
    obj = ro.Objective(loss, risk, X, y, l2_reg=1.0 / n, fit_intercept=fit_intercept)
    return obj.with_shift(nu, ko.CHI2) if nu else obj


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("k,risk", list(enumerate(RISKS)), ids=lambda r: str(r))
def test_newton_matches_cvxpy_and_its_bound_is_below_the_optimum(loss, fit_intercept, k, risk):
    obj = _obj(loss, risk, fit_intercept, 40 + k)
    res = nt.newton(obj, obj.zeros(), rtol=1e-10)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    assert res["converged"], res["message"]
    assert res["rel_gap"] <= 1e-10
    tol = 5e-8 if loss == "logistic" else 1e-9  # cvxpy's exponential cone is less accurate
    assert abs(res["value"] - v_cvx) <= tol * abs(v_cvx), (res["value"], v_cvx)
    assert res["bound"] <= v_cvx + tol * abs(v_cvx)
    assert res["value"] == pytest.approx(obj.value(res["coef"]), rel=1e-14)


@pytest.mark.parametrize("k,risk", list(enumerate(RISKS)), ids=lambda r: str(r))
def test_the_ridge_start_reaches_the_certified_optimum(k, risk):
    """``mean_start`` (the Newton solver from ``w = 0`` with the squared loss): the first step
    is the mean problem's minimiser, ridge regression, kept only when it lowers ``F``; the run
    still ends at cvxpy's optimum within its own certificate, ``value0`` is ``F(w0)`` and the
    step is counted."""
    X, y = data("squared", 50, 4, 60 + k)
    obj = ro.Objective("squared", risk, X, y, l2_reg=1.0 / 50, fit_intercept=True)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    res = nt.newton(obj, obj.zeros(), rtol=1e-10, mean_start=True)
    assert res["converged"], res["message"]
    assert res["bound"] <= v_cvx + 1e-9 * abs(v_cvx) <= res["value"] + 2e-9 * abs(v_cvx)
    assert res["value"] - res["bound"] <= 1e-10 * abs(res["value"])
    assert res["value0"] == obj.value(obj.zeros())
    assert res["n_iter"] >= 1
    mean = nt._mean_start(obj, np.zeros(obj.p), np.zeros(obj.n))[0]
    ridge = ro.Objective("squared", ro.Mean(), X, y, l2_reg=1.0 / 50, fit_intercept=True)
    g = ridge.value_grad(ridge.as_coef(mean))[1]  # its gradient on the mean problem: ~0
    # (up to the float32 Gram matrix of the Newton model)
    assert np.linalg.norm(g) <= 1e-4 * np.linalg.norm(ridge.value_grad(ridge.zeros())[1])
    one = nt.newton(obj, obj.zeros(), rtol=1e-10, max_iter=1, mean_start=True)
    assert one["n_iter"] <= 1  # max_iter = 1: no room for the ridge step


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_certificate_is_a_lower_bound_at_any_point(loss):
    obj = _obj(loss, ro.CVaR(0.2), True, 7)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    rng = np.random.default_rng(0)
    for scale in (0.01, 0.1, 1.0):
        W = rng.normal(scale=scale, size=obj.p)
        bound, gap, _ = nt.certify(obj, W)
        assert bound <= v_cvx + 1e-7 * abs(v_cvx)
        assert gap >= obj.value(W) - v_cvx - 1e-7 * abs(v_cvx)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@pytest.mark.parametrize("risk", [ro.CVaR(0.2), ro.ESRM(2.0)], ids=str)
def test_newton_bound_is_below_the_optimum_and_exact_for_the_squared_loss(loss, risk):
    """``newton_bound`` (the dual point's ``min G_q`` after one Newton step on ``G_q``, the
    continuation's extra certificate) is below cvxpy's optimum at any point and for any
    ``q`` in the permutahedron; for the squared loss it equals the exact ``min G_q`` (normal
    equations in float64) and is at least the plain ``|g|^2 / 2 mu`` bound."""
    obj = _obj(loss, risk, True, 21, n=40, d=4)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    rng = np.random.default_rng(5)
    X, y = obj.X, obj.y
    for scale in (0.0, 0.1, 1.0):
        W = rng.normal(scale=scale, size=obj.p)
        ell = np.asarray(obj.losses(W)).ravel()
        for nu in (1.0, 1e-2, 0.0):
            q = np.empty(obj.n)
            ko.spectral_risk_weights(ell, obj.sigma, nu, ko.CHI2, q, None)
            b = nt.newton_bound(obj, W, q)
            assert b <= v_cvx + 1e-9 * abs(v_cvx)
            # its Newton step is a candidate point: the same bound, the point's predictions,
            # its intercept at the minimiser of G_q (d G_q / d b = 0), F there >= the optimum
            b1, W1, z1 = nt.newton_bound(obj, W, q, point=True)
            assert b1 == b
            np.testing.assert_allclose(z1, X @ W1, rtol=1e-12, atol=1e-12)
            der = nt._losses_derivs_z(obj, z1)[1]
            der0 = nt._losses_derivs_z(obj, X @ (W + 0.0))[1]  # dual_bound's scale at W
            if np.isfinite(b):  # (-inf: the intercept has no finite minimiser, e.g. q on
                # one class of a logistic loss)
                assert abs(q @ der) <= 1e-10 * max(q @ np.abs(der0), 1e-300)
            assert obj.value(W1) >= v_cvx - 1e-9 * abs(v_cvx)
            assert b >= nt.dual_bound(obj, W, q)[0] - 1e-12 * abs(v_cvx)
            if loss == "squared":  # G_q(w) = sum q (x w - y)^2 / 2 + reg w^2 / 2
                w = np.linalg.solve(X.T @ (q[:, None] * X) + np.diag(obj.reg), X.T @ (q * y))
                exact = 0.5 * q @ (X @ w - y) ** 2 + 0.5 * obj.reg @ w ** 2
                assert b == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_certificate_is_a_lower_bound_with_per_coordinate_penalties(loss):
    """The estimators' standardised design has ``reg_j = mu / s_j^2``: the bound's slack must
    be ``sum g_j^2 / (2 reg_j)`` (``|g|^2 / (2 mu)`` overstated it). Far from the optimum the
    weighted samples of a logistic loss can be of one class (the intercept has no finite
    minimiser): no bound then. At ec5523d4 (undamped intercept solve, ``|g|^2 / 2 mu``) the
    ``certify`` checks below failed on the logistic case: a bound of 3.7e3 against an optimum
    of 0.69."""
    X, y = data(loss, 40, 3, 7)
    obj = ro.Objective(loss, ro.CVaR(0.3), X, y, l2_reg=1 / 40, fit_intercept=True)
    obj.reg[:3] /= np.array([1.0, 1e2, 1e4])  # s = 1, 10, 100
    _, v_cvx = cvxpy_spectral_minimum(obj)
    rng = np.random.default_rng(0)
    for scale in (0.01, 0.1, 1.0, 10.0):
        for _ in range(5):
            W = rng.normal(scale=scale, size=obj.p)
            bound, gap, _ = nt.certify(obj, W)
            assert bound <= v_cvx + 1e-7 * abs(v_cvx)
            ell = np.asarray(obj.losses(W)).ravel()
            for nu in (1.0, 1e-2, 0.0):
                q = np.empty(obj.n)
                ko.spectral_risk_weights(ell, obj.sigma, nu, ko.CHI2, q, None)
                assert nt.newton_bound(obj, W, q) <= v_cvx + 1e-7 * abs(v_cvx)
    res = nt.newton(obj, obj.zeros(), rtol=1e-8)
    # the optimum of the logistic case is w = 0 (F = log 2; the crossover certifies it to
    # 2e-16): cvxpy's value is 8e-10 above it, so the reference is the better of the two
    v_ref = min(v_cvx, float(obj.value(obj.zeros())))
    assert res["bound"] <= v_ref + 1e-9 * abs(v_ref) <= res["value"] + 2e-9 * abs(v_ref)
    assert res["value"] - v_ref <= 1e-7 * abs(v_ref)


@pytest.mark.parametrize("offset", [2.0, 50.0])
def test_dual_bound_at_an_interpolating_point_is_finite_and_below_the_optimum(offset):
    """y = X w + offset exactly, CVaR 0.1, a small l2_reg: the residuals near the optimum are
    far below one ulp of the predictions times 1e13, where dual_bound's intercept solve cannot
    reach its 1e-13 test (it returned -inf). Within INTERCEPT_ULPS ulps it now gives a finite
    bound (with the intercept's rounding slack), below cvxpy's optimum and the solver's value,
    at the solution, at cvxpy's point and at a perturbed point."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(300, 4))
    y = X @ rng.normal(size=4) + offset
    obj = ro.Objective("squared", ro.CVaR(0.1), X, y, l2_reg=1e-6, fit_intercept=True)
    W_cvx, v_cvx = cvxpy_spectral_minimum(obj)
    res = nt.newton(obj, obj.zeros(), rtol=1e-8)
    v_ref = min(v_cvx, res["value"], obj.value(W_cvx))
    W_opt = np.asarray(res["coef"], dtype=np.float64).reshape(-1)
    W_far = W_opt + 1e-7 * rng.normal(size=len(W_opt))
    for W in (W_opt, np.asarray(W_cvx, dtype=np.float64), W_far):
        ell = dual._losses_derivs_z(obj, obj.X @ W)[0]
        q = obj.risk_weights(ell)[1]
        lb, _ = dual.dual_bound(obj, W, q)
        assert np.isfinite(lb)
        assert lb <= v_ref + 1e-12 * abs(v_ref), (lb, v_ref)


def test_newton_with_a_shift_cost_matches_lbfgs():
    obj = _obj("logistic", ro.ESRM(1.0), True, 3, n=200, d=5, nu=0.1)
    res = nt.newton(obj, obj.zeros(), rtol=1e-11)
    ref = obj.reference_solution(tol=1e-12)
    assert res["converged"]
    assert res["value"] == pytest.approx(ref.value, rel=1e-10)


def test_cvar_with_ties_at_the_optimum_is_certified():
    """CVaR(0.1), n = 30: five losses tie at the tail boundary at the optimum; the box dual
    point (bounded least squares over the tied weights) closes the gap."""
    X, y = data("squared", 30, 3, 101)
    obj = ro.Objective("squared", ro.CVaR(0.1), X, y, l2_reg=1 / 30, fit_intercept=True)
    res = nt.newton(obj, obj.zeros(), rtol=1e-10)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    assert res["converged"], res["message"]
    assert abs(res["value"] - v_cvx) <= 1e-9 * abs(v_cvx)


# ------------------------------------------------------------------ the Newton model (twin)
@pytest.mark.parametrize("risk", [ro.CVaR(0.3), ro.ESRM(2.0)], ids=str)
@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_smoothed_hessian_equals_finite_differences_of_the_gradient(risk, loss):
    nu = 0.05
    obj = _obj(loss, risk, True, 5, n=60, d=4)
    smooth = obj.with_shift(nu, ko.CHI2)
    rng = np.random.default_rng(1)
    W = rng.normal(scale=0.3, size=obj.p)
    z = obj.X @ W
    _, q = smooth.risk_weights(smooth.losses(W))
    der = nt._losses_derivs_z(obj, z)[1]
    H = nt._smoothed_hessian(smooth, z, q, der, nu) + np.diag(obj.reg)
    eps = 1e-6
    H_fd = np.empty_like(H)
    for j in range(obj.p):
        e = np.zeros(obj.p)
        e[j] = eps
        H_fd[:, j] = (smooth.grad(W + e) - smooth.grad(W - e)) / (2 * eps)
    # float32 Gram products: agreement to ~1e-6 of the scale
    np.testing.assert_allclose(H, H_fd, atol=2e-5 * np.abs(H_fd).max())


@pytest.mark.parametrize("intercept", [False, True])
def test_weighted_gram_of_operator_and_sparse_designs(intercept):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(500, 6)) * [1, 2, 3, 4, 5, 6] + 3.0
    X[rng.random(X.shape) < 0.5] = 0.0
    m, s = X.mean(0), X.std(0)
    h = rng.random(500)
    h[:300] = 0.0  # the rows with h = 0 are skipped
    dense = (X - m) / s
    if intercept:
        dense = np.hstack([dense, np.ones((500, 1))])
    want = dense.T @ (h[:, None] * dense)
    for base in (X, sp.csr_matrix(X), X.astype(np.float32)):
        got = nt.weighted_gram(LinearDesign(base, intercept, m, s), h)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    np.testing.assert_allclose(nt.weighted_gram(sp.csr_matrix(dense), h), want, rtol=1e-12,
                               atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("intercept", [False, True])
def test_weighted_gram_with_the_gradient_in_the_same_pass(intercept, monkeypatch):
    """``weighted_gram(X, h, r)`` returns ``(X' diag(h) X, X' r)``: the gradient to float64
    rounding, also over rows where ``h = 0`` but ``r != 0`` (a saturated logistic loss), for
    the operator design over dense / float32 / CSR bases, a dense and a CSR ``X``, and over
    several Gram blocks; the Gram matrix is the one without ``r`` (to float32 rounding: the
    extra rows change the blocks)."""
    monkeypatch.setattr(dual, "GRAM_BLOCK", 128)
    rng = np.random.default_rng(4)
    X = rng.normal(size=(500, 6)) * [1, 2, 3, 4, 5, 6] + 3.0
    m, s = X.mean(0), X.std(0)
    h = rng.random(500)
    r = rng.normal(size=500)
    for hz, rz in ((slice(0, 300), slice(0, 100)), (slice(0, 0), slice(0, 0)),
                   (slice(0, 500), slice(0, 480))):
        hh, rr = h.copy(), r.copy()
        hh[hz] = 0.0
        rr[rz] = 0.0
        dense = (X - m) / s
        if intercept:
            dense = np.hstack([dense, np.ones((500, 1))])
        for base in (X, sp.csr_matrix(X), X.astype(np.float32)):
            des = LinearDesign(base, intercept, m, s)
            H, g = nt.weighted_gram(des, hh, r=rr)
            H0 = nt.weighted_gram(des, hh)  # (other rows per float32 block: rounding differs)
            np.testing.assert_allclose(H, H0, rtol=1e-5, atol=1e-5 * max(np.abs(H0).max(), 1))
            Xb = base.toarray() if sp.issparse(base) else base.astype(np.float64)
            want = ((Xb - m) / s).T @ rr  # (the float32 base's own values)
            if intercept:
                want = np.append(want, rr.sum())
            np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
        for Z in (dense, sp.csr_matrix(dense)):
            H, g = nt.weighted_gram(Z, hh, r=rr)
            H0 = nt.weighted_gram(Z, hh)
            np.testing.assert_allclose(H, H0, rtol=1e-5, atol=1e-5 * max(np.abs(H0).max(), 1))
            np.testing.assert_allclose(g, dense.T @ rr, rtol=1e-12,
                                       atol=1e-12 * np.abs(dense.T @ rr).max())


def test_risk_weights_sorted_reuses_its_sort():
    """``risk_weights_sorted`` gives the oracle's value and weights, and its returned sort,
    passed back for other ``nu`` and to ``_pools``, gives the same results as a fresh sort
    (ties included)."""
    rng = np.random.default_rng(8)
    for trial in range(50):
        n = int(rng.integers(2, 300))
        ell = rng.standard_normal(n) if trial % 2 else rng.integers(0, 5, n).astype(float)
        sigma = np.sort(rng.random(n))
        sigma /= sigma.sum()
        q1, q2 = np.empty(n), np.empty(n)
        v1, srt = ko.risk_weights_sorted(ell, sigma, 0.0, ko.CHI2, q1)
        assert v1 == ko.risk_weights(ell, sigma, 0.0, ko.CHI2, q2)
        np.testing.assert_array_equal(q1, q2)
        np.testing.assert_array_equal(srt[0], np.argsort(ell, kind="stable"))
        for nu in (1e-3, 0.1):
            v3, srt3 = ko.risk_weights_sorted(ell, sigma, nu, ko.CHI2, q1, srt)
            assert srt3 is srt
            assert v3 == ko.risk_weights(ell, sigma, nu, ko.CHI2, q2)
            np.testing.assert_array_equal(q1, q2)
            scale = 1.0 / (2 * nu * n)
            for a, b in zip(nt._pools(ell, q1, sigma, scale, srt),
                            nt._pools(ell, q1, sigma, scale)):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("n", [0, 1, 7, 8192, 8193, 20000])
def test_plain_gram_blocks_match_numpy(n, monkeypatch):
    """The float32 blocks of ``_plain_gram`` (numba-scaled rows, several blocks, a short last
    one; all rows or a subset; C, Fortran and strided float64 / float32 designs) equal the
    float64 product to float32 rounding, and ``X' h`` (``sums``) to float64 rounding."""
    monkeypatch.setattr(dual, "GRAM_BLOCK", 4096)  # _plain_gram lives in _dual
    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, 9)) * np.arange(1, 10) + 2.0
    for h in (rng.random(n), np.where(rng.random(n) < 0.8, 0.0, rng.random(n))):
        rows = np.flatnonzero(h > 0)
        want = X.T @ (h[:, None] * X)
        tol = 1e-5 * max(np.abs(want).max(), 1.0)
        for Z in (X, np.asfortranarray(X), np.hstack([X, X])[:, :9], X.astype(np.float32)):
            G, v = nt._plain_gram(Z, h, rows, sums=True)
            np.testing.assert_allclose(G, want, atol=tol)
            np.testing.assert_allclose(v, Z.astype(np.float64).T @ h,
                                       atol=1e-6 * max(np.abs(X).max(initial=0) * h.sum(), 1.0)
                                       if Z.dtype == np.float32 else 1e-10 * max(n, 1) * 10)
            np.testing.assert_allclose(nt._plain_gram(Z, h, rows), G, rtol=0, atol=0)


# ------------------------------------------------------------------ solver and estimators
def test_newton_solver_refuses_what_it_cannot_certify():
    X, y = data("squared", 30, 3, 0)
    obj = ro.Objective("squared", ro.CVaR(0.3), X, y, l2_reg=0.0)
    with pytest.raises(ro.solvers.IncompatibleObjectiveError, match="l2_reg = 0"):
        ro.solvers.get("newton").run(obj)
    res = ro.solvers.get("newton").run(_obj("squared", ro.CVaR(0.3), True, 1))
    assert res.extra["certified"] and res.extra["rel_gap"] <= 1e-10


def test_estimators_fit_certified_newton_for_shift_cost_zero(monkeypatch):
    X, y = data("logistic", 400, 5, 9)
    X[:, 0] += 2.0 * (y - 0.5)  # a separable direction: the CVaR optimum is not w = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = ro.RiskClassifier(risk="cvar:0.5", solver="newton").fit(X, y)
    assert clf.solver_ == "newton" and clf.solver_reason_ == "passed as solver"
    auto = ro.RiskClassifier(risk="cvar:0.5").fit(X, y)
    assert auto.solver_ == "newton" and "duality-gap certificate" in auto.solver_reason_
    np.testing.assert_allclose(auto.coef_, clf.coef_, rtol=1e-6, atol=1e-9)
    # the squared loss too: certified to the default gap (1e-6 relative at tol = 1e-4)
    reg = ro.RiskRegressor(risk="cvar:0.5").fit(X, y.astype(float))
    assert reg.solver_ == "newton" and 0 <= reg.dual_gap_ <= 1e-6 * reg.objective_trace_[-1]
    # where Newton does not apply (l2_reg = 0: no certificate), L-BFGS and the reason
    reg0 = ro.RiskRegressor(risk="cvar:0.5", l2_reg=0.0).fit(X, y.astype(float))
    assert reg0.solver_ == "lbfgs" and "Newton: l2_reg = 0" in reg0.solver_reason_
    assert 0 <= clf.dual_gap_ <= 1e-6 * abs(clf.objective_trace_[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # L-BFGS's ConvergenceWarning at tol 1e-12, if any
        ref = ro.RiskClassifier(risk="cvar:0.5", solver="lbfgs", tol=1e-12).fit(X, y)
    assert clf.objective_trace_[-1] <= ref.objective_trace_[-1] * (1 + 1e-6)
    assert np.isnan(ref.dual_gap_)
    # Newton stopped short (2 steps): L-BFGS continues from its point, which keeps a valid
    # gap to Newton's bound (the bound lies below the certified optimum above)
    real = nt.newton
    with monkeypatch.context() as m, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.setattr(nt, "newton", lambda obj, W0, **kw: real(obj, W0, **{**kw, "max_iter": 2}))
        short = ro.RiskClassifier(risk="cvar:0.5", solver="newton").fit(X, y)
    assert short.solver_ == "lbfgs" and "L-BFGS from its point" in short.solver_reason_
    assert np.isfinite(short.dual_gap_) and short.dual_gap_ >= 0
    assert short.objective_trace_[-1] - short.dual_gap_ <= clf.objective_trace_[-1] + 1e-12
    assert np.ptp(clf.decision_function(X)) > 1e-3  # a real model, not w = 0
    # sparse input: the same certified fit without densifying
    with warnings.catch_warnings():  # (solver="newton" by name keeps X sparse too)
        warnings.simplefilter("error", ro.SparseDensifyWarning)
        sclf = ro.RiskClassifier(risk="cvar:0.5", solver="newton").fit(sp.csr_matrix(X), y)
    assert sclf.solver_ == "newton"
    # certified within its own accuracy (relative gap 1e-2 tol) of the dense problem's optimum,
    # by tests/_certify.py (independent of Newton's certificate), not compared with clf
    obj, W = certify.problem_of(sclf, X, y)
    certify.assert_certified(obj, W, rel=1e-2 * sclf.tol, what="sparse Newton fit")
    # three classes (K > 1): L-BFGS, and the reason says why
    y3 = np.digitize(X[:, 1], [-0.5, 0.5])
    mc = ro.RiskClassifier(risk="cvar:0.5").fit(X, y3)
    assert mc.solver_ == "lbfgs" and "K > 1" in mc.solver_reason_
    with pytest.raises(ro.solvers.IncompatibleObjectiveError, match="K > 1"):
        ro.RiskClassifier(risk="cvar:0.5", solver="newton").fit(X, y3)


def _pools_numpy(ell, q, sigma, scale):
    """The pools of ``nt._pools`` in plain NumPy (the twin of the numba pass)."""
    order = np.argsort(ell, kind="stable")
    qs, ls = q[order], ell[order] * scale
    noise = 64 * np.finfo(np.float64).eps * (np.abs(ls) + np.abs(qs))
    off_rank = np.abs(qs - sigma) > 1e-9 * float(sigma[-1] - sigma[0]) + noise
    off = qs - ls
    same = (np.abs(np.diff(off)) <= noise[1:] + noise[:-1]) & off_rank[1:] & off_rank[:-1]
    d = np.diff(np.concatenate([[0], same.astype(np.int8), [0]]))
    return order, np.flatnonzero(d == 1), np.flatnonzero(d == -1) + 1


def test_pools_and_pool_sums_match_numpy():
    from riskopt._kernels import oracles as ko

    rng = np.random.default_rng(3)
    for trial in range(600):
        n = int(rng.integers(1, 50))
        ell = rng.standard_normal(n) if trial % 3 else rng.integers(0, 4, n).astype(float)
        sigma = np.sort(rng.random(n))
        if trial % 5 == 0:  # a CVaR-like box spectrum
            sigma = (np.arange(n) >= n // 2).astype(float)
        sigma /= max(sigma.sum(), 1.0)
        nu = 10 ** rng.uniform(-3, 1)
        q = np.empty(n)
        ko.spectral_risk_weights(ell, sigma, nu, ko.CHI2, q, None)
        scale = 1.0 / (2 * nu * n)
        want = _pools_numpy(ell, q, sigma, scale)
        got = nt._pools(ell, q, sigma, scale)
        for a, b in zip(want, got):
            np.testing.assert_array_equal(a, b)
        if len(got[1]):
            member, pid = nt._pool_members(*got)
            X = rng.standard_normal((n, 3))
            vals = rng.standard_normal(len(member))
            M = np.zeros((n, len(got[1])))
            M[member, pid] = vals
            np.testing.assert_allclose(nt._pool_sums(X, member, vals, pid, len(got[1])),
                                       X.T @ M, rtol=1e-12, atol=1e-12)


def test_smoothed_hessian_pool_blocks_do_not_change_it(monkeypatch):
    obj = _obj("squared", ro.ESRM(2.0), True, 7, n=300)
    W = np.random.default_rng(0).standard_normal(obj.p)
    z = obj.X @ W
    ell, der = nt._losses_derivs_z(obj, z)
    nu = 0.01 * float(np.ptp(ell))  # ~40 pools of 2 to 32 samples
    q = np.empty(obj.n)
    from riskopt._kernels import oracles as ko

    ko.spectral_risk_weights(ell, obj.sigma, nu, ko.CHI2, q, None)
    stage = obj.with_shift(nu, ko.CHI2)
    H = nt._smoothed_hessian(stage, z, q, der, nu, ell)
    assert len(nt._pools(ell, q, obj.sigma, 1 / (2 * nu * obj.n))[1]) > 2
    monkeypatch.setattr(_newton_hessian, "POOL_BLOCK", 2)
    np.testing.assert_allclose(nt._smoothed_hessian(stage, z, q, der, nu, ell), H,
                               rtol=1e-10, atol=1e-12)
    assert np.all(np.linalg.eigvalsh(H) > -1e-8 * np.abs(H).max())


def test_accept_ends_the_continuation_at_diminishing_returns():
    # a non-box spectrum: a CVaR is now certified exactly by the crossover (test_crossover.py;
    # this case, CVaR 0.3, to a gap of 0 in 11 steps at rtol 1e-15)
    obj = _obj("logistic", ro.Extremile(2.0), True, 14, n=60)
    full = nt.newton(obj, obj.zeros(), rtol=1e-15)
    res = nt.newton(obj, obj.zeros(), rtol=1e-15, accept=1e-6)
    assert not res["converged"] and res["rel_gap"] <= 1e-6
    assert res["message"].startswith("certified to a relative gap")
    assert "within accept" in res["message"]
    assert res["n_iter"] < full["n_iter"]
    _, v_cvx = cvxpy_spectral_minimum(obj)
    assert res["bound"] <= v_cvx + 1e-9 * abs(v_cvx) and res["value"] >= v_cvx - 1e-9
    with pytest.raises(ValueError, match="accept"):
        ro.solvers.Newton(tol=1e-6, accept=1e-8).run(obj)


def test_lbfgs_after_an_uncertified_newton_run_shares_max_iter(monkeypatch):
    """When Newton stops short of the accepted gap, L-BFGS continues from its point with what
    is left of ``max_iter``: ``n_iter_`` counts both, never more than ``max_iter``; when
    Newton spends the whole budget its point is returned, with a ConvergenceWarning."""
    from sklearn.exceptions import ConvergenceWarning

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = X @ rng.normal(size=4) + rng.standard_t(3, size=300)
    real = nt.newton
    monkeypatch.setattr(nt, "newton", lambda obj, W0, **kw: real(obj, W0, **{**kw,
                                                                          "max_iter": 2}))
    est = ro.RiskRegressor(risk="esrm:1", max_iter=40).fit(X, y)
    assert est.solver_ == "lbfgs" and est.solver_reason_.startswith("Newton stopped")
    assert 2 < est.n_iter_ <= 40
    with pytest.warns(ConvergenceWarning, match="max_iter=6"):
        capped = ro.RiskRegressor(risk="esrm:1", max_iter=6).fit(X, y)
    assert capped.n_iter_ <= 6
    monkeypatch.setattr(nt, "newton", real)
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        one = ro.RiskRegressor(risk="esrm:1", max_iter=1).fit(X, y)
    assert one.solver_ == "newton" and one.n_iter_ == 1
    assert "max_iter = 1 reached at a relative gap" in one.solver_reason_
    assert one.objective_trace_[-1] < one.objective_trace_[0]


@pytest.mark.parametrize("c", [2.01, 2.5, 3.0, 4.0, 10.0, 1e6])
def test_backtracking_lands_on_the_minimum_along_the_line_within_its_safeguards(c):
    # F(s) = F(0) + slope s + c (-slope) s^2 / 2: c times the curvature the Newton model
    # predicts (-slope along its step); its minimiser along the line is 1 / c, and the search
    # backtracks from s = t only when Armijo fails there
    slope = -3.0
    for t in (1.0, 0.5, 0.25):
        rise = slope * t - 0.5 * c * slope * t * t
        if not rise > 1e-4 * t * slope:
            continue  # (Armijo holds at t: no backtracking)
        s = nt._backtrack(t, slope, rise)
        assert nt.BACKTRACK_MIN * t <= s <= 0.5 * t
        if nt.BACKTRACK_MIN * t <= 1.0 / c <= 0.5 * t:
            np.testing.assert_allclose(s, 1.0 / c, rtol=1e-12)
        for bad in (np.inf, np.nan):  # an overflow along the step: halved
            assert nt._backtrack(t, slope, bad) == 0.5 * t


@pytest.mark.parametrize("hess_nu", [1.0, 10.0])
@pytest.mark.parametrize("risk", [ro.ESRM(1.0), ro.Extremile(2.0)])
def test_tie_heavy_logistic_fit_is_certified_within_accept(risk, hess_nu, monkeypatch):
    # compas-like: few distinct rows (categorical features), each repeated with random labels:
    # ties everywhere, the smoothed objective's curvature far above its local Hessian along
    # the Newton steps (the backtracking interpolates, the stage ends on the Newton decrement);
    # certified by tests/_certify.py, independent of Newton's own certificate
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 3, size=(40, 4)).astype(float)
    X = rows[rng.integers(0, 40, size=400)]
    y = (rng.uniform(size=400) < 1.0 / (1.0 + np.exp(-X @ [2.0, -1.0, 0.6, 0.4] + 1.0)))
    obj = ro.Objective("logistic", risk, X, y.astype(float), l2_reg=1e-3, fit_intercept=True)
    monkeypatch.setattr(nt, "HESSIAN_NU_FIRST", hess_nu)  # (the first stage's Newton model)
    res = nt.newton(obj, obj.zeros(), rtol=1e-8, accept=1e-6)
    assert res["rel_gap"] <= 1e-6 and res["bound"] <= res["value"]
    certify.assert_certified(obj, res["coef"], rel=1e-6, what=f"Newton on {risk!r}")


@pytest.mark.parametrize("intercept", [False, True])
def test_smoothed_hessian_of_one_smoothing_with_the_gradient_of_another(intercept):
    # the first stage's Newton model: the Hessian of F_(10 nu), the gradient of F_nu, in one
    # pass over the rows
    obj = _obj("logistic", ro.ESRM(1.0), intercept, 5, n=80, d=4)
    W = np.random.default_rng(5).normal(size=obj.p)
    z = obj.X @ W
    ell, der = dual._losses_derivs_z(obj, z)
    nu = 1e-3
    q, qh = np.empty(obj.n), np.empty(obj.n)
    ko.spectral_risk_weights(ell, obj.sigma, nu, ko.CHI2, q, None)
    ko.spectral_risk_weights(ell, obj.sigma, 10 * nu, ko.CHI2, qh, None)
    H, g = nt._smoothed_hessian(obj, z, qh, der, 10 * nu, ell, grad=True, qg=q)
    np.testing.assert_allclose(H, nt._smoothed_hessian(obj, z, qh, der, 10 * nu, ell),
                               rtol=1e-12, atol=1e-14)
    dense = np.asarray(obj.X @ np.eye(obj.p))
    np.testing.assert_allclose(g, dense.T @ (q * der), rtol=1e-5, atol=1e-7 * np.abs(der).max())


def test_box_pool_is_the_sorted_pool_of_a_box_spectrum():
    """A box spectrum's (CVaR's) chi-square weights strictly inside the box are one pool:
    ``_box_pool`` (a mask, no sort) has the members of ``_pools`` (the runs of the sorted
    losses), and the Hessian of a box stage is the same from either (``srt`` given or not)."""
    from riskopt._kernels import oracle_select

    rng = np.random.default_rng(11)
    pooled = 0
    for trial in range(300):
        n = int(rng.integers(3, 400))
        ell = rng.standard_normal(n) * 10 ** rng.uniform(-2, 2)
        a = rng.uniform(0.5, n - 0.5)  # the tail's size: a fractional boundary entry
        sigma = np.zeros(n)
        m = int(np.floor(a))
        sigma[n - m:] = 1.0 / a
        sigma[n - m - 1] = 1.0 - m / a
        assert nt._box_spectrum(sigma)
        nu = 10 ** rng.uniform(-4, 1) * float(np.ptp(ell)) / n
        q = np.empty(n)
        ko.spectral_risk_weights(ell, sigma, nu, ko.CHI2, q, None)
        scale = 1.0 / (2 * nu * n)
        order, starts, ends = nt._pools(ell, q, sigma, scale)
        inside, b0, b1 = _newton_hessian._box_pool(q, sigma)
        assert len(starts) <= 1 and len(b0) == len(starts)
        if len(starts):
            pooled += 1
            assert b0[0] == 0 and b1[0] == len(inside)
            np.testing.assert_array_equal(np.sort(order[starts[0]:ends[0]]), inside)
        qb = np.empty(n)  # the Newton solver's box oracle: the same weights to rounding
        v = oracle_select.box_select_weights(ell, sigma, oracle_select.selection_plan(sigma),
                                             nu, ko.CHI2, qb)
        if v is not None:
            np.testing.assert_allclose(qb, q, rtol=0, atol=1e-12 * float(sigma[-1]))
    assert pooled > 100
    obj = _obj("squared", ro.CVaR(0.2), True, 5, n=300)
    W = np.random.default_rng(0).standard_normal(obj.p)
    z = obj.X @ W
    ell, der = nt._losses_derivs_z(obj, z)
    nu = 3e-2 * float(np.ptp(ell))
    q = np.empty(obj.n)
    _, srt = ko.risk_weights_sorted(ell, obj.sigma, nu, ko.CHI2, q)
    stage = obj.with_shift(nu, ko.CHI2)
    assert len(_newton_hessian._box_pool(q, obj.sigma)[0]) > 10
    H1, g1 = nt._smoothed_hessian(stage, z, q, der, nu, ell, srt, grad=True)
    H2, g2 = nt._smoothed_hessian(stage, z, q, der, nu, ell, None, grad=True)
    np.testing.assert_allclose(H2, H1, rtol=1e-10, atol=1e-12 * np.abs(H1).max())
    np.testing.assert_allclose(g2, g1, rtol=1e-12, atol=1e-14)
