"""Fairness metrics of riskopt.metrics on hand-computed cases and against fairlearn / scipy."""
import numpy as np
import pandas as pd
import pytest
from scipy.stats import ks_2samp

from riskopt.metrics import (absolute_mean_difference, demographic_parity_difference,
                             equal_opportunity_difference, statistical_parity_ks)

fairlearn_metrics = pytest.importorskip("fairlearn.metrics")


def _data(seed, n=200, k=2):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, k, size=n)
    y = rng.integers(0, 2, size=n)
    yhat = (rng.random(n) < 0.3 + 0.2 * a / max(k - 1, 1) + 0.2 * y).astype(int)
    w = rng.uniform(0.1, 2.0, size=n)
    return y, yhat, a, w


def test_hand_computed_cases():
    y = [1, 1, 1, 1, 0, 0]
    yhat = [1, 1, 1, 0, 1, 0]
    a = [0, 0, 1, 1, 0, 1]
    assert equal_opportunity_difference(y, yhat, a) == pytest.approx(0.5)   # 1.0 - 0.5
    assert equal_opportunity_difference(y, yhat, [1, 1, 0, 0, 1, 0]) == pytest.approx(-0.5)
    # positive rates: group 0 -> 3/3, group 1 -> 1/3
    assert demographic_parity_difference(yhat, a) == pytest.approx(2 / 3)
    # SMD: means 2 and 4 around 3
    assert absolute_mean_difference([1.0, 3.0, 2.0, 6.0], [0, 0, 1, 1]) == pytest.approx(2.0)
    # three groups: sum over groups
    assert absolute_mean_difference([0.0, 3.0, 6.0], ["x", "y", "z"]) == pytest.approx(6.0)
    assert statistical_parity_ks([1.0, 2.0, 3.0, 4.0], [0, 1, 0, 1]) == pytest.approx(0.5)
    assert statistical_parity_ks([1.0, 2.0, 1.0, 2.0], [0, 0, 1, 1]) == 0.0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("k", [2, 3])
def test_against_fairlearn(seed, k):
    y, yhat, a, w = _data(seed, k=k)
    ours = equal_opportunity_difference(y, yhat, a)
    theirs = fairlearn_metrics.equal_opportunity_difference(y, yhat, sensitive_features=a)
    assert abs(ours) == pytest.approx(theirs)
    assert demographic_parity_difference(yhat, a) == pytest.approx(
        fairlearn_metrics.demographic_parity_difference(y, yhat, sensitive_features=a))
    # weighted versions
    assert abs(equal_opportunity_difference(y, yhat, a, sample_weight=w)) == pytest.approx(
        fairlearn_metrics.equal_opportunity_difference(y, yhat, sensitive_features=a,
                                                       sample_weight=w))
    assert demographic_parity_difference(yhat, a, sample_weight=w) == pytest.approx(
        fairlearn_metrics.demographic_parity_difference(y, yhat, sensitive_features=a,
                                                        sample_weight=w))


@pytest.mark.parametrize("seed", range(5))
def test_ks_against_scipy_and_weights_as_duplication(seed):
    rng = np.random.default_rng(seed)
    yhat = np.round(rng.normal(size=150), 1)   # ties on purpose
    a = rng.integers(0, 2, size=150)
    assert statistical_parity_ks(yhat, a) == pytest.approx(
        ks_2samp(yhat[a == 0], yhat[a == 1]).statistic)
    # integer weights equal duplicated rows, for every metric
    w = rng.integers(1, 4, size=150)
    rep = np.repeat(np.arange(150), w)
    yb = (yhat > 0).astype(int)
    assert statistical_parity_ks(yhat, a, sample_weight=w) == pytest.approx(
        statistical_parity_ks(yhat[rep], a[rep]))
    assert absolute_mean_difference(yhat, a, sample_weight=w) == pytest.approx(
        absolute_mean_difference(yhat[rep], a[rep]))
    assert demographic_parity_difference(yb, a, sample_weight=w) == pytest.approx(
        demographic_parity_difference(yb[rep], a[rep]))
    # three groups: the largest pairwise KS distance
    a3 = rng.integers(0, 3, size=150)
    pair = max(ks_2samp(yhat[a3 == i], yhat[a3 == j]).statistic
               for i in range(3) for j in range(i + 1, 3))
    assert statistical_parity_ks(yhat, a3) == pytest.approx(pair)


def test_accepts_lists_series_and_string_groups():
    y, yhat, a, _ = _data(0)
    names = np.where(a == 0, "female", "male")
    ref = equal_opportunity_difference(y, yhat, names)
    assert equal_opportunity_difference(list(y), pd.Series(yhat), pd.Series(names)) == ref
    assert demographic_parity_difference(pd.Series(yhat), list(names)) == \
        demographic_parity_difference(yhat, names)


@pytest.mark.parametrize("call, match", [
    (lambda: demographic_parity_difference([1, 0, 1], [0, 0, 0]), "single value"),
    (lambda: demographic_parity_difference([1, 0, 1], [0, 1]), "inconsistent"),
    (lambda: equal_opportunity_difference([0, 0, 1, 1], [1, 0, 1, 0], [0, 0, 1, 1]),
     "no positive examples"),
    (lambda: absolute_mean_difference([1.0, 2.0, 3.0], [0, 1, 1], sample_weight=[0, 1, 1]),
     "zero total weight"),
    (lambda: statistical_parity_ks([1.0, np.nan, 2.0], [0, 1, 1]), "NaN"),
    (lambda: absolute_mean_difference(["a", "b"], [0, 1]), "numeric"),
    (lambda: statistical_parity_ks([1.0], [0]), "single sample"),
    (lambda: demographic_parity_difference([1, 0], [0, 1], sample_weight=[1, -1]),
     "non-negative"),
])
def test_bad_input_gets_a_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
