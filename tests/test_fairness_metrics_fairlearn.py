"""The fairlearn-convention metrics of riskopt.metrics (equalized odds difference / ratio,
demographic parity ratio, ``method=``, ``agg=``, ``signed=False``) against fairlearn on random
cases (weighted and unweighted, two and four groups)."""
import numpy as np
import pytest

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
