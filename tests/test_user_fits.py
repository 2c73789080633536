"""Default fits a user meets (stop 43): a constant target (the Newton crossover's massive tie),
and the advice of the degenerate-model warning when the risk in use is the one it suggested."""
import time
import warnings

import numpy as np
import pytest

import riskopt as ro
from riskopt.objectives import _crossover as xc


def test_vertex_start_keeps_the_box_and_the_total():
    rng = np.random.default_rng(0)
    N, p, lo, hi = 300, 4, 0.0, 10.0 / 300
    q = np.full(N, 1.0 / N)  # the exact weights at a tie of every loss: all inside the box
    l_w = rng.normal(size=N)
    v = xc._vertex_start(q, l_w, lo, hi, p)
    assert np.count_nonzero((v > lo) & (v < hi)) <= 1
    assert v.min() >= lo and v.max() <= hi and v.sum() == pytest.approx(q.sum(), abs=1e-14)
    assert np.all(v[np.argsort(-l_w)[:int(1.0 // hi)]] == hi)  # the largest l_w at hi
    few = np.zeros(N)
    few[:p + 1] = 0.5 * hi
    assert xc._vertex_start(few, l_w, lo, hi, p) is few  # a generic tie set: untouched


@pytest.mark.parametrize("tie", [False, True])
def test_model_qp_from_an_all_free_start(tie):
    """The window model from the oracle's weights at a massive tie (every weight 1/N inside
    the box): the exact minimiser (cvxpy), reached through a free set of at most p + 1."""
    cp = pytest.importorskip("cvxpy")
    rng = np.random.default_rng(1)
    p, N = 4, 200
    C = rng.normal(size=(p, N)) * (1e-3 if tie else 1.0)
    c = rng.normal(size=p)
    l_w = np.zeros(N) if tie else rng.normal(size=N)
    lo, hi, m = 0.0, 10.0 / N, 1.0
    u, q, ok, t = xc._model_qp(C, c, l_w, np.full(N, 1.0 / N), lo, hi, m)
    assert ok
    assert np.count_nonzero((q > lo + 1e-15) & (q < hi - 1e-15)) <= p + 1
    qv = cp.Variable(N)
    prob = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(c + C @ qv) - l_w @ qv),
                      [qv >= lo, qv <= hi, cp.sum(qv) == m])
    prob.solve(solver="CLARABEL")
    assert 0.5 * np.sum((c + C @ q) ** 2) - l_w @ q <= prob.value + 1e-9
    assert q.min() >= lo and q.max() <= hi and q.sum() == pytest.approx(m, abs=1e-12)


def test_constant_target_fits_at_once_and_says_so():
    """A default RiskRegressor (CVaR 0.1, Newton) on a constant target: every loss ties at the
    optimum. It took 162 s at n = 4,000 (each active-set change solved an n x n least-squares
    problem); now the exact constant model, with a warning that names the target."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(4000, 15))
    y = np.full(4000, 5.0)
    t0 = time.perf_counter()
    with pytest.warns(ro.DegenerateFitWarning, match=r"the target is constant \(5\)") as rec:
        est = ro.RiskRegressor().fit(X, y)
    seconds = time.perf_counter() - t0
    assert est.solver_ == "newton"
    assert est.intercept_ == pytest.approx(5.0, rel=1e-12)
    assert np.max(np.abs(est.coef_)) < 1e-12
    assert not any("tail fraction" in str(w.message) for w in rec)
    assert seconds < 60, seconds  # (minutes before; a loaded 2-core machine: a loose bound)


def test_degenerate_advice_does_not_suggest_the_risk_in_use():
    """Imbalanced labels with little signal: the mean loss (logistic regression) is itself
    smallest for a constant model; the warning says why and how to weight the classes instead
    of suggesting risk='mean' to a fit that uses it."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 3))
    y = (rng.random(2000) < 0.1).astype(int)  # 10 % positives, unrelated to X
    for risk, extra in [("mean", "The mean loss itself"), ("esrm:1", "try risk='mean'")]:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            ro.RiskClassifier(risk=risk).fit(X, y)
        msg = next(str(w.message) for w in rec if w.category is ro.DegenerateFitWarning)
        assert "single class 0" in msg and extra in msg
        assert f"largest class holds {np.mean(y == 0):.1%}" in msg and "compute_sample_weight('balanced'" in msg
        assert "risk='esrm:1' or 'mean'" not in msg


def test_an_interpolating_target_is_certified_in_a_few_newton_steps():
    """y = X w + 2 exactly (4,000 x 15), a default RiskRegressor (CVaR 0.1): at the optimum the
    residuals are ~1e-6 against predictions ~2, so dual_bound's intercept test (1e-13 of the
    derivatives' scale) asked for less than one ulp of the predictions and every bound was
    -inf: 56 Newton steps, then a bounded least squares over 4,000 samples. Now a few steps,
    and the offset (2 or 0) moves only the intercept."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 15))
    w = rng.normal(size=15)
    fits = [ro.RiskRegressor(risk="cvar:0.1").fit(X, X @ w + off) for off in (2.0, 0.0)]
    for est in fits:
        assert est.solver_ == "newton" and est.n_iter_ <= 8, est.n_iter_
    assert fits[0].intercept_ - 2.0 == pytest.approx(fits[1].intercept_, abs=1e-12)
    np.testing.assert_allclose(fits[0].coef_, fits[1].coef_, rtol=1e-9)
