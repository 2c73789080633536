"""Data set views written in the name (riskopt.datasets.views)."""
import numpy as np
import pytest

import riskopt as ro
from conftest import require_data


def test_folds_partition_the_pooled_data():
    base = ro.datasets.load("yacht")
    pooled = np.concatenate([base.y_train, base.y_test])
    tests = [ro.datasets.load(f"yacht/fold{k}of5").y_test for k in range(1, 6)]
    assert sorted(np.concatenate(tests)) == sorted(pooled)
    d = ro.datasets.load("yacht/fold3of5")
    assert d.n_train + d.n_test == len(pooled) and d.name == "yacht/fold3of5"
    # deterministic
    assert np.array_equal(d.y_test, ro.datasets.load("yacht/fold3of5").y_test)


def test_subpopulations_and_binary_attributes():
    require_data("law_school", "compas")
    d = ro.datasets.load("law_school/train:sex=female")
    assert set(d.groups_train["sex"]) == {"female"} and set(d.groups_test["sex"]) == {"male"}
    d = ro.datasets.load("compas/only:race=Caucasian,African-American/binary:race=Caucasian")
    assert set(d.groups_train["race"]) == {"Caucasian", "non-Caucasian"}
    full = ro.datasets.load("compas")
    keep = np.isin(full.groups_train["race"], ["Caucasian", "African-American"])
    assert d.n_train == int(keep.sum())


@pytest.mark.parametrize("name, match", [
    ("yacht/fold6of5", "1 <= K <= N"),
    ("yacht/only:race=White", "no attribute 'race'"),
    ("law_school/only:race=Martian", "split is empty"),
    ("law_school/shuffle", "unknown step"),
    ("law_school/binary:race", "ATTR=VALUE"),
])
def test_bad_views_are_named(name, match):
    require_data(name)
    with pytest.raises(ValueError, match=match):
        ro.datasets.load(name)
