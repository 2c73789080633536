"""Fairness constraints of the estimators (``constraint=``, ``sensitive_features=``;
riskopt.fairness, riskopt._fair): constraint satisfaction on the training data, the convex case
against cvxpy, scikit-learn compatibility and the errors for bad input."""
import os
import warnings

import numpy as np
import pytest
from scipy.special import expit
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import check_estimator

import riskopt as ro
from riskopt.fairness import CALIBRATION_MIN_CELL


def _problem(seed, n=400, m=3):
    """Binary labels whose positive rate depends on the group (the constraints bind)."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, m, size=n)
    X = rng.normal(size=(n, 4))
    X[:, 0] += 0.8 * s
    y = (X @ [1.0, 1.0, -1.0, 0.5] + rng.normal(size=n) > 0.8).astype(int)
    return X, y, s


def _smoothed_rates(est, X, rows_by_group):
    r = expit(est.decision_function(X) / est.smoothing_)
    return np.array([r[rows].mean() for rows in rows_by_group])


def _bounded_rates(est, X, rows_by_group, tol=0.02, tau=None):
    """The rates the bound holds for (riskopt.fairness, "Calibration"): hard ``1[z > 0]`` for
    cells of at least ``CALIBRATION_MIN_CELL / tol`` rows, smoothed (``tau``: the fit's
    ``smoothing_``) for smaller ones."""
    z = est.decision_function(X)
    hard, soft = (z > 0).astype(float), expit(z / (tau or est.smoothing_))
    return np.array([(hard if rows.sum() >= CALIBRATION_MIN_CELL / tol else soft)[rows].mean()
                     for rows in rows_by_group])


def _blocks(constraint, y, s):
    m = s.max() + 1
    labels = {"demographic_parity": [None], "equalized_odds": [0, 1],
              "equal_opportunity": [1]}[constraint]
    return [[(s == g) & (True if lab is None else y == lab) for g in range(m)]
            for lab in labels]


@pytest.mark.parametrize("constraint", ["demographic_parity", "equalized_odds",
                                        "equal_opportunity"])
@pytest.mark.parametrize("risk", ["mean", "esrm:1"])
def test_rate_constraints_hold_on_the_training_data(constraint, risk):
    tol = 0.02
    for seed in (0, 1):
        X, y, s = _problem(seed, n=900)   # cells of ~90-300 rows: hard and smoothed ones
        free = ro.RiskClassifier(risk=risk).fit(X, y)
        est = ro.RiskClassifier(risk=risk, constraint=constraint,
                                constraint_tol=tol).fit(X, y, sensitive_features=s)
        gaps, gaps_free, hard = [], [], []
        for blk in _blocks(constraint, y, s):
            r = _bounded_rates(est, X, blk)
            gaps.append(r.max() - r.min())
            r0 = _bounded_rates(free, X, blk, tau=est.smoothing_)
            gaps_free.append(r0.max() - r0.min())
            z = est.decision_function(X) > 0
            h = np.array([z[rows].mean() for rows in blk])
            hard.append(h.max() - h.min())
        assert max(gaps) <= tol + 1e-9           # recomputed from decision_function
        assert max(gaps_free) > 2 * tol           # the constraint is active here
        # calibrated to the bound, not far inside it (hard rates move by 1 / n_k per row)
        assert max(gaps) >= tol - max(0.1 * tol, 1.0 / min(b.sum() for b in blk))
        np.testing.assert_allclose(est.constraint_values_, gaps, atol=1e-10)
        np.testing.assert_allclose(est.hard_constraint_values_, hard, atol=1e-12)
        np.testing.assert_allclose(est.multipliers_.sum(axis=1), 0.0, atol=1e-8)
        assert np.abs(est.multipliers_).max() > 0
        # the constrained optimum costs more training objective than the free one
        assert est.objective_trace_[-1] >= free.objective_trace_[-1] - 1e-9


def test_several_sensitive_columns_are_intersected():
    X, y, s = _problem(2, m=2)
    t = np.random.default_rng(5).integers(0, 2, size=len(y))
    est = ro.RiskClassifier(risk="mean", constraint="demographic_parity").fit(
        X, y, sensitive_features=np.column_stack([s, t]))
    assert est.sensitive_groups_ == [(0, 0), (0, 1), (1, 0), (1, 1)]
    r = _bounded_rates(est, X, [(s == a) & (t == b) for a in (0, 1) for b in (0, 1)])
    assert r.max() - r.min() <= 0.02 + 1e-9


def test_without_sensitive_features_a_rate_constraint_is_the_plain_fit():
    X, y, _ = _problem(3)
    a = ro.RiskClassifier(risk="mean", tol=1e-8).fit(X, y)
    b = ro.RiskClassifier(risk="mean", tol=1e-8, constraint="equalized_odds").fit(X, y)
    np.testing.assert_allclose(b.decision_function(X), a.decision_function(X), atol=1e-5)
    with pytest.warns(UserWarning, match="ignored without a constraint"):
        ro.RiskClassifier(risk="mean").fit(X, y, sensitive_features=np.zeros(len(y)))


def test_integer_sample_weights_are_repeated_rows_for_the_groups():
    X, y, s = _problem(4, n=200)
    sw = np.random.default_rng(0).integers(0, 3, size=len(y))
    kw = dict(risk="mean", constraint="demographic_parity", tol=1e-8)
    a = ro.RiskClassifier(**kw).fit(X, y, sample_weight=sw, sensitive_features=s)
    idx = np.repeat(np.arange(len(y)), sw)
    b = ro.RiskClassifier(**kw).fit(X[idx], y[idx], sensitive_features=s[idx])
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), atol=1e-6)


def _cvxpy_group_loss(X, y, s, bound, l2_reg, loss):
    """The convex program by cvxpy: mean loss + l2_reg/2 |w|^2 s.t. group mean loss <= bound."""
    cp = pytest.importorskip("cvxpy")
    w, b = cp.Variable(X.shape[1]), cp.Variable()
    z = X @ w + b
    if loss == "logistic":
        per = cp.logistic(z) - cp.multiply(y, z)
    else:
        per = 0.5 * cp.square(z - y)
    cons = [cp.sum(per[np.flatnonzero(s == g)]) / np.sum(s == g) <= bound
            for g in np.unique(s)]
    prob = cp.Problem(cp.Minimize(cp.sum(per) / len(y) + l2_reg / 2 * cp.sum_squares(w)), cons)
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-9, tol_gap_rel=1e-9, tol_feas=1e-9)
    return prob.value


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_bounded_group_loss_matches_cvxpy(loss):
    rng = np.random.default_rng(7)
    n, l2 = 240, 1e-2
    s = rng.integers(0, 3, size=n)
    X = rng.normal(size=(n, 3)) + s[:, None] * [0.5, 0.0, 0.0]
    noise = 0.3 + 0.6 * (s == 2)       # group 2 is harder: its loss bound binds
    if loss == "logistic":
        y = (X @ [1.0, -1.0, 0.5] + noise * 3 * rng.normal(size=n) > 0).astype(float)
        Est = ro.RiskClassifier
    else:
        y = X @ [1.0, -1.0, 0.5] + noise * rng.normal(size=n)
        Est = ro.RiskRegressor
    free = Est(risk="mean", l2_reg=l2).fit(X, y)
    loss_fn = (lambda z: np.logaddexp(0, z) - y * z) if loss == "logistic" else \
        (lambda z: 0.5 * (z - y) ** 2)
    z0 = free.decision_function(X) if loss == "logistic" else free.predict(X)
    g0 = np.array([loss_fn(z0)[s == g].mean() for g in range(3)])
    # halfway between the free fit's worst group loss and that group's own minimum (a feasible
    # bound by convexity, below the free fit's: the constraint binds)
    worst = int(np.argmax(g0))
    alone = Est(risk="mean", l2_reg=l2).fit(X[s == worst], y[s == worst])
    z1 = alone.decision_function(X) if loss == "logistic" else alone.predict(X)
    bound = 0.5 * (g0.max() + loss_fn(z1)[s == worst].mean())
    est = Est(risk="mean", l2_reg=l2, tol=1e-8, constraint="bounded_group_loss",
              constraint_tol=bound).fit(X, y, sensitive_features=s)
    z = est.decision_function(X) if loss == "logistic" else est.predict(X)
    groups = np.array([loss_fn(z)[s == g].mean() for g in range(3)])
    assert groups.max() <= bound + 1e-9 * bound
    np.testing.assert_allclose(est.constraint_values_, groups, rtol=1e-10)
    F = loss_fn(z).mean() + l2 / 2 * np.sum(est.coef_ ** 2)
    F_cvx = _cvxpy_group_loss(X, y, s, bound, l2, loss)
    # both feasible to ~1e-9: the two optima agree to cvxpy's own accuracy (gap 1e-9)
    assert abs(F - F_cvx) <= 1e-7 * abs(F_cvx)
    assert est.multipliers_.max() > 0 and est.multipliers_.min() >= 0


def test_bounded_group_loss_multiclass_uses_slsqp():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 3))
    y = np.argmax(X @ rng.normal(size=(3, 3)) + rng.normal(size=(150, 3)), axis=1)
    s = rng.integers(0, 2, size=150)
    free = ro.RiskClassifier(risk="mean", l2_reg=1e-2).fit(X, y)
    P = free.predict_log_proba(X)[np.arange(150), y]
    bound = 0.99 * max(-P[s == g].mean() for g in (0, 1))   # feasible (min max is ~0.977)
    est = ro.RiskClassifier(risk="mean", l2_reg=1e-2, constraint="bounded_group_loss",
                            constraint_tol=bound).fit(X, y, sensitive_features=s)
    P = est.predict_log_proba(X)[np.arange(150), y]
    assert est.solver_ == "slsqp"
    assert max(-P[s == g].mean() for g in (0, 1)) <= bound * (1 + 1e-6)


@pytest.mark.slow
def test_check_estimator_with_a_constraint():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        # tol=1e-10: the weighted and repeated-rows fits of the sample-weight checks agree
        # to the check's rtol only near the optimum (as in test_estimators.py)
        check_estimator(ro.RiskClassifier(risk="mean", constraint="demographic_parity",
                                          tol=1e-10))
        check_estimator(ro.RiskRegressor(risk="mean", constraint="bounded_group_loss",
                                         constraint_tol=1e6, tol=1e-10))


def test_bad_input_gives_clear_errors():
    X, y, s = _problem(0, n=100)
    with pytest.raises(ValueError, match="constraint"):
        ro.RiskClassifier(constraint="parity").fit(X, y, sensitive_features=s)
    with pytest.raises(ValueError, match="sensitive_features has 99 rows but X has 100"):
        ro.RiskClassifier(constraint="demographic_parity").fit(X, y, sensitive_features=s[:99])
    s2 = s.copy()
    s2[y == 1] = 0          # groups 1 and 2 have no positives
    with pytest.raises(ValueError, match="has no positive samples"):
        ro.RiskClassifier(constraint="equalized_odds").fit(X, y, sensitive_features=s2)
    with pytest.raises(ValueError, match="two classes"):
        ro.RiskClassifier(constraint="demographic_parity").fit(X, s, sensitive_features=y)
    with pytest.raises(ValueError, match="RiskRegressor takes constraint='bounded_group_loss'"):
        ro.RiskRegressor(constraint="equalized_odds").fit(X, X[:, 0], sensitive_features=s)
    with pytest.raises(ValueError, match="missing values"):
        ro.RiskClassifier(constraint="demographic_parity").fit(
            X, y, sensitive_features=np.where(s == 0, None, s))
    with pytest.raises(ValueError, match="integer frequencies"):
        ro.RiskClassifier(constraint="demographic_parity").fit(
            X, y, sensitive_features=s, sample_weight=np.linspace(0.5, 1.5, 100))


def test_fairlearn_form_to_overall_holds_on_the_training_data():
    X, y, s = _problem(5, n=900)
    for constraint in ("demographic_parity", "equalized_odds"):
        for randomized in (False, True):  # hard (calibrated) rates; smoothed (expected) ones
            est = ro.RiskClassifier(risk="mean", constraint=f"{constraint}:to_overall",
                                    randomized=randomized).fit(X, y, sensitive_features=s)
            worst = []
            for blk in _blocks(constraint, y, s):
                r = (_smoothed_rates if randomized else _bounded_rates)(est, X, blk)
                sizes = np.array([b.sum() for b in blk])
                worst.append(np.max(np.abs(r - r @ sizes / sizes.sum())))
            assert max(worst) <= 0.02 + 1e-6
            np.testing.assert_allclose(est.constraint_values_, worst, atol=1e-10)
            # active: the bound is reached (to the hard rates' step of 1 / n_k)
            slack = 1e-6 if randomized else max(0.002, 1.0 / min(b.sum() for b in blk))
            assert max(worst) >= 0.02 - slack


def test_an_infeasible_bound_says_so():
    X, y, s = _problem(6, n=200)
    with pytest.warns(ConvergenceWarning, match="infeasible"):
        ro.RiskRegressor(risk="mean", constraint="bounded_group_loss",
                         constraint_tol=1e-3).fit(X, X[:, 0] + 3 * np.sin(7 * X[:, 1]),
                                                  sensitive_features=s)


def test_randomized_predictions_have_the_smoothed_rates_as_expected_rates():
    X, y, s = _problem(8, n=300)
    est = ro.RiskClassifier(risk="mean", constraint="demographic_parity", randomized=True,
                            random_state=np.random.RandomState(0)).fit(
        X, y, sensitive_features=s)
    draws = np.array([est.predict(X) for _ in range(400)], dtype=float)   # (400, n)
    for g in range(3):
        m = s == g
        mean, target = draws[:, m].mean(), est.constraint_rates_[0, g]
        # the mean of 400 x n_g Bernoulli draws: 5 standard deviations
        assert abs(mean - target) <= 5 * np.sqrt(0.25 / (400 * m.sum()))
    assert not np.array_equal(draws[0], draws[1])      # a RandomState: new draws per call
    est.set_params(random_state=3)                      # an int: the same draws every call
    np.testing.assert_array_equal(est.predict(X), est.predict(X))
    before = est.predict(X)
    import riskopt.fairness as fairness
    default = fairness.SMOOTHING
    try:  # the draws use the fit's smoothing_, not the module's value at predict time
        fairness.SMOOTHING = 0.01
        np.testing.assert_array_equal(est.predict(X), before)
    finally:
        fairness.SMOOTHING = default
    det = ro.RiskClassifier(risk="mean", constraint="demographic_parity").fit(
        X, y, sensitive_features=s)
    np.testing.assert_array_equal(det.predict(X), (det.decision_function(X) > 0).astype(int))


def test_pooled_calibration_bounds_the_shrunk_rates_of_the_small_cells(monkeypatch):
    """``riskopt.fairness.CALIBRATION_POOLED``: a cell under ``CALIBRATION_MIN_CELL / tol`` rows
    is bounded through its smoothed rate plus a shrunk offset (its own hard - smoothed offset
    weighted by ``n_k tol / CALIBRATION_MIN_CELL``, the rest the block's size-weighted offset
    of the large cells); the large cells through their hard rates, as without it."""
    import riskopt.fairness as fairness

    tol = 0.02
    monkeypatch.setattr(fairness, "CALIBRATION_POOLED", True)
    X, y, s = _problem(0, n=900)   # cells of ~90-300 rows: hard and smoothed ones
    est = ro.RiskClassifier(risk="mean", constraint="equalized_odds",
                            constraint_tol=tol).fit(X, y, sensitive_features=s)
    z = est.decision_function(X)
    hard, soft = (z > 0).astype(float), expit(z / est.smoothing_)
    small_seen = False
    for b, blk in enumerate(_blocks("equalized_odds", y, s)):
        n = np.array([rows.sum() for rows in blk], dtype=float)
        big = n >= CALIBRATION_MIN_CELL / tol
        rh = np.array([hard[rows].mean() for rows in blk])
        rs = np.array([soft[rows].mean() for rows in blk])
        pool = np.sum(n[big] * (rh - rs)[big]) / n[big].sum()
        w = np.minimum(n * tol / CALIBRATION_MIN_CELL, 1.0)
        r = np.where(big, rh, rs + w * (rh - rs) + (1 - w) * pool)
        small_seen |= bool(np.any(~big))
        assert r.max() - r.min() <= tol + 1e-9             # the bound holds for these rates
        assert est.constraint_values_[b] == pytest.approx(r.max() - r.min(), abs=1e-10)
    assert small_seen


def test_benchmark_cache_keys_and_round_trip(tmp_path):
    """fairness_vs_fairlearn's resumable cache: one file per (case without ``splits=``, tol,
    split, model, constraint); what is put comes back; no folder, no cache."""
    from conftest import load_benchmark

    Cache = load_benchmark("fairness_vs_fairlearn")._Cache
    a = Cache(str(tmp_path), "compas:race:min=100:splits=30", 0.02, 3)
    b = Cache(str(tmp_path), "compas:race:min=100:splits=5", 0.02, 3)
    assert a.dir == b.dir and a.dir != Cache(str(tmp_path), "compas:race:splits=5", 0.02, 3).dir
    assert a.dir != Cache(str(tmp_path), "compas:race:min=100", 0.01, 3).dir
    assert a.get("m", "c") is None
    a.put("m", "c", {"accuracy": 0.5}, np.array([0, 1, 1]))
    row, pred = b.get("m", "c")
    assert row == {"accuracy": 0.5} and pred.tolist() == [0, 1, 1]
    # no pickle: the file is an .npz that loads with allow_pickle=False
    (f,) = [os.path.join(a.dir, x) for x in os.listdir(a.dir)]
    assert f.endswith(".npz")
    with np.load(f, allow_pickle=False) as z:
        assert sorted(z.files) == ["pred", "row"]
    a.put("m", "nan", {"gap": float("nan"), "train": np.array([0.25, 0.5])}, np.array([1]))
    row, _ = a.get("m", "nan")
    assert row["gap"] != row["gap"] and row["train"] == [0.25, 0.5]
    assert a.get("m", "other") is None and a.get("m2", "c") is None
    off = Cache(None, "compas:race", 0.02, 0)
    off.put("m", "c", {}, np.zeros(2))
    assert off.get("m", "c") is None


def test_calibration_round_cap_keeps_the_bound_and_rejects_bad_values(monkeypatch):
    """``riskopt.fairness.CALIBRATION_ROUND_STEPS``: each calibration round stops after that
    many multiples of the first solve's SQP steps (a round cut off is not kept); the returned
    model still meets the bound on the training data for the rates it is stated for (hard
    for the calibrated cells, smoothed for the small ones, recomputed from
    ``decision_function``) or says with a ConvergenceWarning that only its smoothed rates do;
    a value that is not positive is a clear error."""
    import riskopt.fairness as fairness

    tol = 0.02
    monkeypatch.setattr(fairness, "CALIBRATION_ROUND_STEPS", 1)
    for seed in (0, 1):
        X, y, s = _problem(seed, n=900)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = ro.RiskClassifier(risk="mean", constraint="equalized_odds",
                                    constraint_tol=tol).fit(X, y, sensitive_features=s)
        fell_back = any(issubclass(w.category, ConvergenceWarning) for w in caught)
        gaps = []
        for blk in _blocks("equalized_odds", y, s):
            r = (_smoothed_rates(est, X, blk) if fell_back else _bounded_rates(est, X, blk))
            gaps.append(r.max() - r.min())
        assert max(gaps) <= tol + 1e-9
        np.testing.assert_allclose(est.constraint_values_, gaps, atol=1e-10)
    for bad in (0, -1.0):
        monkeypatch.setattr(fairness, "CALIBRATION_ROUND_STEPS", bad)
        with pytest.raises(ValueError, match="CALIBRATION_ROUND_STEPS"):
            ro.RiskClassifier(risk="mean", constraint="equalized_odds",
                              constraint_tol=tol).fit(X, y, sensitive_features=s)


def test_benchmark_driving_cells_match_fairlearn_and_variant_settings():
    """fairness_eo_causes.driving_cells: the difference is fairlearn's between-groups metric
    and the two cells it names have rates that differ by it (random predictions, three
    groups); fairness_vs_fairlearn._settings maps the variants to riskopt.fairness constants
    and leaves the estimator's parameters."""
    from conftest import load_benchmark

    metrics = pytest.importorskip("fairlearn.metrics")
    causes = load_benchmark("fairness_eo_causes")
    rng = np.random.default_rng(3)
    y, pred = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    s = rng.choice(np.array(["a", "b", "c"], dtype=object), 300)
    for c, fn in (("demographic_parity", metrics.demographic_parity_difference),
                  ("equalized_odds", metrics.equalized_odds_difference)):
        diff, hi, lo = causes.driving_cells(y, pred, s, c)
        assert diff == pytest.approx(fn(y, pred, sensitive_features=s), abs=1e-12)
        for g, lab, n, rate in (hi, lo):
            rows = (s == g) & (True if lab is None else y == lab)
            assert n == rows.sum() and rate == pytest.approx(pred[rows].mean(), abs=1e-12)
        assert hi[3] - lo[3] == pytest.approx(diff, abs=1e-12)
    settings = load_benchmark("fairness_vs_fairlearn")._settings
    extra = {"smoothed": True, "uncapped": True, "randomized": True}
    assert settings(extra) == {"CALIBRATION_MIN_CELL": float("inf"),
                               "CALIBRATION_ROUND_STEPS": None}
    assert extra == {"randomized": True}
