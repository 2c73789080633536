"""riskopt.metrics: per-group errors against brute force, input conventions, errors."""
import numpy as np
import pytest

from riskopt.metrics import GroupTable, group_errors, median_group_error, worst_group_error


def _brute(y_true, y_pred, groups, loss, w):
    """Per-group weighted mean loss by loops over the distinct groups."""
    out = {}
    for g in sorted(set(groups)):
        num = den = 0.0
        for yt, yp, gi, wi in zip(y_true, y_pred, groups, w):
            if gi == g:
                num += wi * loss(yt, yp)
                den += wi
        out[g] = num / den
    return out


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("weighted", [False, True])
def test_zero_one_error_matches_brute_force(seed, weighted):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    y_true = rng.integers(0, 3, n)
    y_pred = rng.integers(0, 3, n)
    groups = rng.choice(["x", "y", "z", "w"], n)
    w = rng.uniform(0.1, 3.0, n) if weighted else np.ones(n)
    table = group_errors(y_true, y_pred, groups, sample_weight=w if weighted else None)
    ref = _brute(y_true, y_pred, groups, lambda a, b: float(a != b), w)
    assert list(table.errors) == list(ref)
    np.testing.assert_allclose(list(table.errors.values()), list(ref.values()), rtol=1e-12)
    for rec in table.records:
        mask = groups == rec["group"]
        assert rec["size"] == mask.sum()
        assert rec["weight"] == pytest.approx(w[mask].sum())
    assert worst_group_error(y_true, y_pred, groups, sample_weight=w) == \
        pytest.approx(max(ref.values()))
    assert median_group_error(y_true, y_pred, groups, sample_weight=w) == \
        pytest.approx(float(np.median(list(ref.values()))))


def test_custom_and_precomputed_losses_match_brute_force():
    rng = np.random.default_rng(1)
    y, z = rng.normal(size=40), rng.normal(size=40)
    groups = rng.integers(0, 4, 40)
    sq = lambda a, b: (a - b) ** 2  # noqa: E731
    ref = _brute(y, z, groups, sq, np.ones(40))
    t1 = group_errors(y, z, groups, loss=sq)
    t2 = group_errors(None, (y - z) ** 2, groups, loss="precomputed")
    for t in (t1, t2):
        assert list(t.errors) == [0, 1, 2, 3]
        np.testing.assert_allclose(t.values, list(ref.values()), rtol=1e-12)
        worst = max(ref, key=ref.get)
        assert t.worst == (worst, pytest.approx(ref[worst]))


def test_lists_and_pandas_series_are_accepted():
    pd = pytest.importorskip("pandas")
    y_true = [0, 1, 1, 0, 1, 0]
    y_pred = [0, 1, 0, 0, 0, 1]
    groups = ["a", "a", "b", "b", "b", "b"]
    t_list = group_errors(y_true, y_pred, groups)
    t_pd = group_errors(pd.Series(y_true), pd.Series(y_pred, index=range(10, 16)),
                        pd.Series(groups, dtype="category"))
    assert t_list.errors == t_pd.errors == {"a": 0.0, "b": 0.75}
    assert isinstance(t_list, GroupTable) and len(t_list) == 2
    frame = t_list.to_frame()
    assert list(frame.columns) == ["group", "size", "weight", "error"]
    assert frame["size"].tolist() == [2, 4]
    # string labels as in classification
    labs = np.array(["no", "yes"])
    assert worst_group_error(labs[y_true], labs[y_pred], groups) == 0.75
    assert median_group_error(y_true, y_pred, groups) == pytest.approx(0.375)


@pytest.mark.parametrize("args, match", [
    (([0, 1, 1], [0, 1], ["a", "a", "b"]), "inconsistent numbers of samples"),
    (([0, 1], [0, 1], ["a", "a", "b"]), "groups has 3"),
    (([], [], []), "empty input"),
    (([1], [1], ["a"]), "single sample"),
    (([[0, 1], [1, 0]], [0, 1], ["a", "b"]), "one-dimensional"),
])
def test_bad_inputs_raise_clear_errors(args, match):
    with pytest.raises(ValueError, match=match):
        group_errors(*args)


def test_bad_weights_and_losses_raise():
    with pytest.raises(ValueError, match="sample_weight has 2"):
        group_errors([0, 1, 1], [0, 1, 0], [0, 0, 1], sample_weight=[1, 2])
    with pytest.raises(ValueError, match="non-negative"):
        group_errors([0, 1, 1], [0, 1, 0], [0, 0, 1], sample_weight=[1, -1, 1])
    with pytest.raises(ValueError, match="loss must be"):
        group_errors([0, 1, 1], [0, 1, 0], [0, 0, 1], loss="hinge")
    with pytest.raises(ValueError, match="one value per sample"):
        group_errors([0, 1, 1], [0, 1, 0], [0, 0, 1], loss=lambda a, b: np.zeros(2))
    with pytest.raises(ValueError, match="y_true is needed"):
        group_errors(None, [0, 1, 0], [0, 0, 1])


def test_zero_weight_group_is_nan_and_ignored_by_worst():
    t = group_errors([0, 1, 1, 0], [1, 1, 0, 0], ["a", "a", "b", "b"],
                     sample_weight=[1, 1, 0, 0])
    assert t.errors["a"] == 0.5 and np.isnan(t.errors["b"])
    assert t.worst == ("a", 0.5)
    assert worst_group_error([0, 1, 1, 0], [1, 1, 0, 0], ["a", "a", "b", "b"],
                             sample_weight=[1, 1, 0, 0]) == 0.5
