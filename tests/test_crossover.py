"""The exact crossover of the Newton solver for box spectra (CVaR at shift cost 0).

* From the first continuation stage's point, the window SQP (``box_newton``) reaches cvxpy's
  optimum on small random CVaR problems (squared and logistic losses, with and without an
  intercept), with a certified lower bound that stays below cvxpy's optimum.
* The window model's active-set solver (``_model_qp``) satisfies the KKT conditions of its
  box-constrained dual, checked against a brute-force cvxpy solve of the same model.
* A wrong guess (a window that misses the tie set, no growth) is not certified, and
  :func:`newton` then goes on with the continuation to the same optimum.
"""
import numpy as np
import pytest

import riskopt as ro
from riskopt.objectives import _crossover as xc
from riskopt.objectives import _newton as nt

from test_degenerate import cvxpy_spectral_minimum, data

cp = pytest.importorskip("cvxpy")


def _obj(loss, tail, fit_intercept, seed, n=50, d=3):
    X, y = data(loss, n, d, seed)
    return ro.Objective(loss, ro.CVaR(tail), X, y, l2_reg=1.0 / n, fit_intercept=fit_intercept)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("tail,seed", [(0.1, 1), (0.25, 2), (0.37, 3), (0.6, 4)])
def test_crossover_matches_cvxpy_and_its_bound_is_below_the_optimum(loss, fit_intercept,
                                                                    tail, seed):
    obj = _obj(loss, tail, fit_intercept, seed)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    tol = 5e-8 if loss == "logistic" else 1e-9  # cvxpy's exponential cone is less accurate
    stage1 = nt.newton(obj, obj.zeros(), rtol=1e-8, accept=1.0, max_iter=200)
    out = xc.box_newton(obj, stage1["coef"], accept=1e-12)
    assert out is not None
    assert out["value"] - out["bound"] <= 1e-12 * abs(out["value"])  # exact, certified
    assert abs(out["value"] - v_cvx) <= tol * abs(v_cvx), (out["value"], v_cvx)
    assert out["bound"] <= v_cvx + tol * abs(v_cvx)
    assert out["value"] == pytest.approx(obj.value(out["coef"]), rel=1e-14)
    q = out["q"]  # a valid dual point: in the box, total 1
    assert q.min() >= obj.sigma[0] and q.max() <= obj.sigma[-1]
    assert q.sum() == pytest.approx(1.0, abs=1e-14)
    # and newton() ends with it
    res = nt.newton(obj, obj.zeros(), rtol=1e-12)
    assert res["converged"] and abs(res["value"] - v_cvx) <= tol * abs(v_cvx)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_crossover_bound_is_a_lower_bound_from_poor_starts(loss):
    """One SQP step from arbitrary points: whatever the step, the returned bound (that of a
    valid dual point) never exceeds the optimum."""
    obj = _obj(loss, 0.2, True, 7, n=40)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    rng = np.random.default_rng(0)
    for scale in (0.0, 0.1, 1.0, 3.0):
        for _ in range(3):
            W = rng.normal(scale=scale, size=obj.p)
            for half in (2, 5, None):
                out = xc.box_newton(obj, W, accept=1e-12, max_outer=1, half=half)
                if out is None or out["q"] is None:
                    continue
                assert out["bound"] <= v_cvx + 1e-7 * abs(v_cvx)
                assert out["value"] >= v_cvx - 1e-7 * abs(v_cvx)


def test_model_qp_solves_the_window_model():
    """``_model_qp`` against cvxpy on the model's dual ``min 1/2 |c + C q|^2 - l'q`` over the
    box with a fixed total, including duplicated columns (repeated rows of the data)."""
    rng = np.random.default_rng(3)
    for trial in range(6):
        p, N = 4, 30
        C = rng.normal(size=(p, N))
        if trial % 2:
            C[:, 5] = C[:, 6]  # a duplicated sample
        c = rng.normal(size=p)
        l_w = rng.normal(size=N)
        if trial % 2:
            l_w[5] = l_w[6]
        lo, hi = 0.0, 0.1
        m = 1.3
        q0 = np.zeros(N)
        q0[np.argsort(-l_w)[:13]] = hi
        u, q, ok, t = xc._model_qp(C, c, l_w, q0, lo, hi, m)
        assert ok
        qv = cp.Variable(N)
        prob = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(c + C @ qv) - l_w @ qv),
                          [qv >= lo, qv <= hi, cp.sum(qv) == m])
        prob.solve(solver="CLARABEL")
        val = 0.5 * np.sum((c + C @ q) ** 2) - l_w @ q
        assert val <= prob.value + 1e-9
        assert q.min() >= lo and q.max() <= hi and q.sum() == pytest.approx(m, abs=1e-12)
        np.testing.assert_allclose(u, -(c + C @ q), atol=1e-12)


def test_wrong_guess_is_not_certified_and_newton_falls_back(monkeypatch):
    """A window of 2 samples that may not grow misses the tie set: the crossover's point is
    not certified, ``newton`` keeps continuing (more steps, no ``crossover`` bound) and ends
    at the optimum all the same."""
    obj = _obj("squared", 0.3, True, 11, n=80, d=4)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    stage1 = nt.newton(obj, obj.zeros(), rtol=1e-8, accept=1.0, max_iter=200)
    monkeypatch.setattr(xc, "MAX_GROW", 0)
    bad = xc.box_newton(obj, stage1["coef"], accept=1e-10, half=1, max_outer=1)
    assert bad["value"] - bad["bound"] > 1e-10 * abs(bad["value"])
    calls = []
    real = xc.box_newton

    def narrow(*args, **kwargs):
        out = real(*args, **{**kwargs, "half": 1, "max_outer": 1})
        calls.append(out["value"] - out["bound"])
        return out

    monkeypatch.setattr(xc, "box_newton", narrow)
    res = nt.newton(obj, obj.zeros(), rtol=1e-10)
    assert calls and calls[0] > 1e-10 * abs(res["value"])
    assert res["dual_nu"] != "crossover"
    assert abs(res["value"] - v_cvx) <= 1e-8 * abs(v_cvx)
    assert res["bound"] <= v_cvx + 1e-9 * abs(v_cvx)
    monkeypatch.setattr(xc, "box_newton", real)
    good = nt.newton(obj, obj.zeros(), rtol=1e-10)
    assert good["dual_nu"] == "crossover" and good["n_iter"] < res["n_iter"]
    assert abs(good["value"] - v_cvx) <= 1e-9 * abs(v_cvx)
