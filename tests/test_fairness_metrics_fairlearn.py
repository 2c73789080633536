"""The fairlearn-convention metrics of riskopt.metrics (equalized odds difference / ratio,
demographic parity ratio, ``method=``, ``agg=``, ``signed=False``) against fairlearn on random
cases (weighted and unweighted, two and four groups)."""
import numpy as np
import pytest
from conftest import load_benchmark

from riskopt import metrics as ro_metrics

fl = pytest.importorskip("fairlearn.metrics")


@pytest.mark.parametrize("seed,k", [(0, 2), (1, 4), (2, 3)])
def test_fairlearn_conventions_match_fairlearn(seed, k):
    rng = np.random.default_rng(seed)
    n = 300
    a = rng.integers(0, k, size=n)
    y = rng.integers(0, 2, size=n)
    yhat = (rng.random(n) < 0.2 + 0.3 * a / (k - 1) + 0.3 * y).astype(int)
    for w in (None, rng.uniform(0.1, 2.0, size=n)):
        for method in ("between_groups", "to_overall"):
            kw = dict(sample_weight=w, method=method)
            for agg in ("worst_case", "mean"):
                assert ro_metrics.equalized_odds_difference(y, yhat, a, agg=agg, **kw) == \
                    pytest.approx(fl.equalized_odds_difference(
                        y, yhat, sensitive_features=a, agg=agg, **kw), abs=1e-14)
                assert ro_metrics.equalized_odds_ratio(y, yhat, a, agg=agg, **kw) == \
                    pytest.approx(fl.equalized_odds_ratio(
                        y, yhat, sensitive_features=a, agg=agg, **kw), abs=1e-14)
            assert ro_metrics.demographic_parity_ratio(yhat, a, **kw) == pytest.approx(
                fl.demographic_parity_ratio(y, yhat, sensitive_features=a, **kw), abs=1e-14)
            assert ro_metrics.demographic_parity_difference(yhat, a, **kw) == pytest.approx(
                fl.demographic_parity_difference(y, yhat, sensitive_features=a, **kw),
                abs=1e-14)
        assert ro_metrics.equal_opportunity_difference(y, yhat, a, sample_weight=w,
                                                       signed=False) == pytest.approx(
            fl.equal_opportunity_difference(y, yhat, sensitive_features=a, sample_weight=w),
            abs=1e-14)


def test_bad_arguments_are_clear_errors():
    y, yhat, a = [0, 1, 0, 1], [0, 1, 1, 1], [0, 0, 1, 1]
    with pytest.raises(ValueError, match="method must be"):
        ro_metrics.demographic_parity_ratio(yhat, a, method="overall")
    with pytest.raises(ValueError, match="agg must be"):
        ro_metrics.equalized_odds_difference(y, yhat, a, agg="max")
    with pytest.raises(ValueError, match="binary y_true"):
        ro_metrics.equalized_odds_difference([0, 1, 2, 1], yhat, a)


@pytest.mark.parametrize("seed,k", [(3, 2), (4, 3)])
def test_fairlearn_code_runs_unchanged_with_sensitive_features(seed, k):
    """fairlearn's calls, copied verbatim (``sensitive_features=``; demographic parity with
    its unused ``y_true`` first), give fairlearn's values; riskopt's keyword form with one
    positional array (demographic parity) equals the positional form."""
    rng = np.random.default_rng(seed)
    n = 200
    a = rng.choice(np.array(["f", "m", "x"])[:k], size=n)
    y = rng.integers(0, 2, size=n)
    yhat = (rng.random(n) < 0.3 + 0.2 * (a == "m") + 0.3 * y).astype(int)
    w = rng.uniform(0.5, 2.0, size=n)
    for name in ("demographic_parity_difference", "demographic_parity_ratio",
                 "equalized_odds_difference", "equalized_odds_ratio",
                 "equal_opportunity_difference"):
        for kw in ({}, {"sample_weight": w, "method": "to_overall"}):
            ours = getattr(ro_metrics, name)(y, yhat, sensitive_features=a, **kw)
            theirs = getattr(fl, name)(y, yhat, sensitive_features=a, **kw)
            assert ours == pytest.approx(theirs, abs=1e-14), (name, kw)
    for name in ("demographic_parity_difference", "demographic_parity_ratio",
                 "absolute_mean_difference", "statistical_parity_ks"):
        f = getattr(ro_metrics, name)
        assert f(yhat, sensitive_features=a) == f(yhat, a)
    assert ro_metrics.equal_opportunity_difference(y, yhat, a, signed=False) == \
        ro_metrics.equal_opportunity_difference(y, yhat, sensitive_features=a)


def test_sensitive_features_missing_or_twice_is_a_type_error():
    y, yhat, a = [0, 1, 0, 1], [0, 1, 1, 1], [0, 0, 1, 1]
    with pytest.raises(TypeError, match="missing"):
        ro_metrics.equalized_odds_difference(y, yhat)
    with pytest.raises(TypeError, match="missing"):
        ro_metrics.demographic_parity_difference(yhat)
    with pytest.raises(TypeError, match="twice"):
        ro_metrics.equalized_odds_ratio(y, yhat, a, sensitive_features=a)
    with pytest.raises(TypeError, match="twice"):
        ro_metrics.statistical_parity_ks(yhat, a, sensitive_features=a)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):  # fairlearn's form
        ro_metrics.demographic_parity_difference(y[:3], yhat, sensitive_features=a)
    with pytest.raises(ValueError, match="needs signed=False"):
        ro_metrics.equal_opportunity_difference(y, yhat, a, method="to_overall")


def test_benchmark_verdict_rule():
    """The benchmark's verdict (met / within noise / not met) from the 95 % interval of the
    mean paired difference: Student's t over splits; one split: 1.96 bootstrap sd."""
    from scipy.stats import t as student

    verdict = load_benchmark("fairness_vs_fairlearn").verdict
    n = dict(n_test=100, n_train=400)
    acc_ok = np.array([0.01, 0.012, 0.011])
    # violation: far below the goal / straddling it / far above it
    assert verdict(np.array([-0.05, -0.04, -0.06]), acc_ok, 0, 0, **n)["verdict"] == "met"
    assert verdict(np.array([-0.05, 0.0, 0.06]), acc_ok, 0, 0, **n)["verdict"] == \
        "within noise"
    assert verdict(np.array([0.05, 0.04, 0.06]), acc_ok, 0, 0, **n)["verdict"] == "not met"
    # accuracy far below the goal: not met whatever the violation
    assert verdict(np.array([-0.05, -0.04, -0.06]), -acc_ok, 0, 0, **n)["verdict"] == "not met"
    d = np.array([-0.05, 0.0, 0.06])
    lo, hi = verdict(d, acc_ok, 0, 0, **n)["violation_interval"]
    half = student.ppf(0.975, 2) * np.std(d, ddof=1) / np.sqrt(3)
    assert lo == pytest.approx(d.mean() - half) and hi == pytest.approx(d.mean() + half)
    # the corrected interval is wider by sqrt(1 + K n_test / n_train)
    lo_c, hi_c = verdict(d, acc_ok, 0, 0, **n)["violation_interval_corrected"]
    assert hi_c - lo_c == pytest.approx((hi - lo) * np.sqrt(1 + 3 * 100 / 400))
    # one split: the bootstrap sd sets the width
    one = verdict(np.array([0.0]), np.array([0.0]), 0.01, 0.001, **n)
    assert one["violation_interval"] == pytest.approx([-0.0196, 0.0196])
    assert one["verdict"] == "within noise" and one["mean_meets"]


def test_benchmark_aa_violations_match_fairlearn_and_goal_rows_first():
    """fairness_aa.violations equals fairlearn.metrics' DP / EO differences, between groups
    and to the overall rate, on random predictions (three groups), and on expected
    predictions (probabilities) the same max - min / distance to overall of the group means;
    fairness_vs_fairlearn's summary puts per constraint the like-for-like row (``:to_overall``,
    fairlearn's constraint form) first as the goal row, then the default, then variants."""
    metrics = pytest.importorskip("fairlearn.metrics")
    aa = load_benchmark("fairness_aa")
    rng = np.random.default_rng(5)
    y, pred, p = rng.integers(0, 2, 400), rng.integers(0, 2, 400), rng.random(400)
    s = rng.choice(np.array(["a", "b", "c"], dtype=object), 400)
    for c, fn in (("demographic_parity", metrics.demographic_parity_difference),
                  ("equalized_odds", metrics.equalized_odds_difference)):
        got = aa.violations(y, pred, s, c)
        for value, method in zip(got, ("between_groups", "to_overall")):
            assert value == pytest.approx(fn(y, pred, sensitive_features=s, method=method),
                                          abs=1e-12)
        blocks = [np.ones(400, bool)] if c == "demographic_parity" else [y == 0, y == 1]
        r = [np.array([p[b & (s == g)].mean() for g in "abc"]) for b in blocks]
        over = [p[b].mean() for b in blocks]
        want = (max(x.max() - x.min() for x in r),
                max(np.abs(x - o).max() for x, o in zip(r, over)))
        assert aa.violations(y, p, s, c) == pytest.approx(want, abs=1e-12)
    assert aa.smallest_cell(y, s, "equalized_odds") == min(
        np.sum((s == g) & (y == v)) for g in "abc" for v in (0, 1))
    fvf = load_benchmark("fairness_vs_fairlearn")
    labels = ["equalized_odds uncapped", "equalized_odds", "equalized_odds:to_overall",
              "demographic_parity", "demographic_parity:to_overall matched",
              "demographic_parity:to_overall"]
    assert sorted(labels, key=fvf._summary_order) == [
        "demographic_parity:to_overall", "demographic_parity",
        "demographic_parity:to_overall matched", "equalized_odds:to_overall",
        "equalized_odds", "equalized_odds uncapped"]
    assert [fvf._role(x) for x in ("equalized_odds:to_overall", "equalized_odds",
                                   "equalized_odds smoothed")] == [
        "**goal**", "*default*", "variant"]
