"""The LP dual point for CVaR at points where many losses tie (``riskopt.objectives._tie_dual``):
its bound is a valid lower bound (never above cvxpy's optimum), and exact at the degenerate
optimum ``w = 0`` where every loss ties and the smoothed certificates cannot close the gap."""
import numpy as np
import pytest

import riskopt as ro
from riskopt.objectives._newton import dual_bound
from riskopt.objectives._tie_dual import lp_tie_dual

cp = pytest.importorskip("cvxpy")
from test_degenerate import cvxpy_spectral_minimum  # noqa: E402


def symmetric_logistic(n_half, d, seed):
    """Every row twice, with both labels: the logistic losses of w and -w agree, so w = 0
    (every loss log 2) is optimal for any spectral risk."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_half, d))
    return np.vstack([X, X]), np.r_[np.ones(n_half), np.zeros(n_half)]


@pytest.mark.parametrize("alpha", [0.1, 0.37])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_w0_optimum_is_certified_exactly(alpha, fit_intercept):
    X, y = symmetric_logistic(60, 4, seed=1)
    obj = ro.Objective("logistic", ro.CVaR(alpha), X, y, l2_reg=1e-3,
                       fit_intercept=fit_intercept)
    W = np.zeros(obj.p)
    q = lp_tie_dual(obj, W)
    assert q is not None
    lo, hi = obj.sigma[0], obj.sigma[-1]
    assert q.min() >= lo and q.max() <= hi + 1e-15 and q.sum() == pytest.approx(1.0, abs=1e-12)
    bound = dual_bound(obj, W, q)[0]
    assert bound == pytest.approx(np.log(2.0), abs=1e-12)
    assert cvxpy_spectral_minimum(obj)[1] == pytest.approx(np.log(2.0), abs=1e-7)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bound_never_exceeds_the_optimum(loss, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 3))
    y = (rng.random(40) < 0.5).astype(float) if loss == "logistic" else X @ [1.0, -2.0, 0.5] \
        + rng.normal(size=40)
    obj = ro.Objective(loss, ro.CVaR(0.25), X, y, l2_reg=1e-2, fit_intercept=True)
    w, v_cvx = cvxpy_spectral_minimum(obj)
    for W in (w, np.zeros(obj.p), rng.normal(size=obj.p)):
        for window in (1e-10, 1e-6, 1e-2, 1.0):
            q = lp_tie_dual(obj, W, window=window)
            if q is None:
                continue
            assert dual_bound(obj, W, q)[0] <= v_cvx + 1e-8 * max(1.0, abs(v_cvx))
    # at cvxpy's optimum (losses tie to its accuracy), a window that catches the ties
    # gives a bound close to the optimum
    q = lp_tie_dual(obj, w, window=1e-5)
    assert q is not None
    assert dual_bound(obj, w, q)[0] == pytest.approx(v_cvx, rel=1e-5)


def test_not_a_box_spectrum_or_no_ties():
    X, y = symmetric_logistic(20, 3, seed=0)
    obj = ro.Objective("logistic", ro.ESRM(2.0), X, y, l2_reg=1e-3)
    assert lp_tie_dual(obj, np.zeros(obj.p)) is None
    obj = ro.Objective("logistic", ro.CVaR(0.5), X, y, l2_reg=1e-3)
    rng = np.random.default_rng(0)
    assert lp_tie_dual(obj, rng.normal(size=obj.p), window=1e-14) is None  # distinct losses
