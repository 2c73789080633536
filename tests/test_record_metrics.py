"""Model metrics recorded along benchmark runs (``record.metrics``) and the -ST data sets."""
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, balanced_accuracy_score, recall_score

import riskopt as ro
from riskopt.bench import ObjectiveSpec, SolverSpec, Spec, SpecError, run
from riskopt.bench import record_metrics as rm
from riskopt.bench.spec import RecordSpec
from conftest import require_data


def test_metrics_match_scikit_learn_binary_and_multiclass():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    yb = (X[:, 0] + 0.5 * rng.normal(size=60) > 0).astype(float)
    obj = ro.Objective("logistic", "cvar:0.5", X, yb, fit_intercept=True)
    coefs = rng.normal(size=(3, obj.p))
    names = ["train_accuracy", "train_worst_class_accuracy", "train_balanced_accuracy",
             "train_error", "train_loss"]
    out = rm.compute(names, obj, (X, yb), None, coefs)
    for k, c in enumerate(coefs):
        pred = (X @ c[:-1] + c[-1] > 0).astype(float)
        assert out["m_train_accuracy"][k] == pytest.approx(accuracy_score(yb, pred))
        assert out["m_train_error"][k] == pytest.approx(1 - accuracy_score(yb, pred))
        assert out["m_train_balanced_accuracy"][k] == pytest.approx(
            balanced_accuracy_score(yb, pred))
        assert out["m_train_worst_class_accuracy"][k] == pytest.approx(
            min(recall_score(yb, pred, average=None)))
        assert out["m_train_loss"][k] == pytest.approx(obj.losses(c).mean())

    ym = rng.integers(0, 3, size=60).astype(float)
    objm = ro.Objective("multinomial", "mean", X, ym)
    W = rng.normal(size=(2, 3 * 3))
    out = rm.compute(["test_accuracy", "test_worst_class_accuracy"], objm, None, (X, ym), W)
    for k, c in enumerate(W):
        pred = np.argmax(X @ c.reshape(3, 3), axis=1)
        assert out["m_test_accuracy"][k] == pytest.approx(accuracy_score(ym, pred))
        assert out["m_test_worst_class_accuracy"][k] == pytest.approx(
            min(recall_score(ym, pred, average=None)))


def test_non_finite_points_give_nan_and_bad_names_are_refused():
    X, y = np.eye(4), np.array([0.0, 1.0, 0.0, 1.0])
    obj = ro.Objective("logistic", "mean", X, y)
    out = rm.compute(["train_accuracy"], obj, (X, y), None, np.full((1, 4), np.nan))
    assert np.isnan(out["m_train_accuracy"][0])
    for bad in (["accuracy"], ["valid_accuracy"], ["train_auc"], "train_accuracy",
                ["train_accuracy", "train_accuracy"]):
        with pytest.raises(ValueError):
            rm.check_names(bad)
    with pytest.raises(ValueError, match="does not apply"):
        rm.compute(["train_rmse"], obj, (X, y), None, np.zeros((1, 4)))
    with pytest.raises(SpecError, match="record.metrics"):
        RecordSpec(value="profile", metrics=["train_accuracy"]).validate()
    with pytest.raises(SpecError, match="record.metrics"):
        RecordSpec(value="iterate", metrics=["train_auc"]).validate()


def test_st_construction_keeps_the_last_examples_of_the_first_half_of_the_classes():
    y = np.array([0, 1, 0, 1, 0, 1, 2, 2, 0, 1], dtype=float)
    X = np.arange(10.0)[:, None]
    Xs, ys, kept = ro.datasets.make_st(X, y, [0, 1], 0.5)
    # class 0 at rows 0, 2, 4, 8 -> keeps 4, 8; class 1 at rows 1, 3, 5, 9 -> keeps 5, 9
    assert kept.tolist() == [4, 5, 6, 7, 8, 9]
    assert Xs[:, 0].tolist() == kept.tolist() and ys.tolist() == y[kept].tolist()
    with pytest.raises(ValueError):
        ro.datasets.make_st(X, y, [0], 0.0)
    with pytest.raises(ValueError):
        ro.datasets.make_st(X, y, [7], 0.5)
    d = ro.datasets.load("digits_st")
    counts = np.bincount(d.y_train.astype(int), minlength=10)
    assert counts[:5].max() < 0.2 * counts[5:].min()
    assert np.bincount(d.y_test.astype(int)).min() > 50  # the test set is not thinned
    assert "digits_st" in ro.datasets.names("derived")


def test_spec_records_train_and_test_metrics_end_to_end(tmp_path):
    names = ["train_accuracy", "test_accuracy", "test_worst_class_accuracy"]
    spec = Spec(name="metrics_demo", datasets=["digits_st"],
                objectives=[ObjectiveSpec("cvar:0.5", loss="multinomial", l2_reg="1/n",
                                          shift_cost=0.5)],
                solvers=[SolverSpec("sgd", lr=[0.3], params={"batch_size": 32})],
                seeds=[0, 1], passes=3, record=RecordSpec(value="iterate", metrics=names),
                analyses=("convergence", "metrics"))
    res = run(spec, out=tmp_path / "r", jobs=1, progress=False)
    assert res.complete
    t = pd.read_parquet(res.table)
    for n in names:
        col = t[rm.column(n)].to_numpy()
        assert np.all((col >= 0) & (col <= 1))
    # the first record is the zero model: every class scores 0, arg-max picks class 0
    first = t[t["update"] == 0]
    d = ro.datasets.load("digits_st")
    assert first["m_test_accuracy"].iloc[0] == pytest.approx(np.mean(d.y_test == 0))
    assert t.groupby("seed")["m_train_accuracy"].last().min() > 0.5  # it learns
    final = pd.read_csv(tmp_path / "r" / "metrics_final.csv")
    assert final.shape[0] == 1 and final["seeds"].iloc[0] == 2
    assert (tmp_path / "r" / "metrics.png").exists()
    assert "test_accuracy" in (tmp_path / "r" / "metrics_final.md").read_text()


def test_group_and_fairness_metrics_use_the_data_sets_attributes():
    from riskopt import metrics

    rng = np.random.default_rng(1)
    X = rng.normal(size=(80, 2))
    y = (X[:, 0] > 0).astype(float)
    a = np.where(rng.random(80) < 0.5, "u", "v")
    obj = ro.Objective("logistic", "mean", X, y)
    c = np.array([[1.0, 0.3]])
    names = ["train_eo:sex", "train_dp:sex", "train_worst_group_error:sex",
             "train_worst_group_error:label"]
    out = rm.compute(names, obj, (X, y), None, c, groups={"train": {"sex": a}})
    pred = (X @ c[0] > 0).astype(float)
    assert out["m_train_eo:sex"][0] == pytest.approx(
        metrics.equal_opportunity_difference(y, pred, a))
    assert out["m_train_dp:sex"][0] == pytest.approx(
        metrics.demographic_parity_difference(pred, a))
    assert out["m_train_worst_group_error:sex"][0] == pytest.approx(
        metrics.worst_group_error(y, pred, a))
    assert out["m_train_worst_group_error:label"][0] == pytest.approx(
        metrics.worst_group_error(y, pred, y))
    with pytest.raises(ValueError, match="no attribute 'race'"):
        rm.compute(["train_eo:race"], obj, (X, y), None, c, groups={"train": {"sex": a}})
    for bad in (["train_eo"], ["train_accuracy:sex"], ["test_eo:"]):
        with pytest.raises(ValueError):
            rm.check_names(bad)


def test_iterate_records_of_a_solver_whose_update_is_two_passes(tmp_path):
    # LSVRG's update is 2 passes (n steps + the full gradient): every record point it passes
    # gets the state after that update (before: the skipped points were NaN and the run
    # was reported as diverged)
    spec = Spec(name="ppu2", datasets=["yacht"], objectives=[ObjectiveSpec("cvar:0.5",
                                                                          shift_cost=0.5)],
                solvers=[SolverSpec("lsvrg", lr=[0.01])], seeds=[0], passes=4,
                record=RecordSpec(value="iterate", every=1), selection_rule="final")
    res = run(spec, out=tmp_path / "r", jobs=1, progress=False, plot=False)
    t = pd.read_parquet(res.table)
    assert t["passes"].tolist() == [0.0, 2.0, 2.0, 4.0, 4.0]
    assert np.all(np.isfinite(t["value"])) and not t["diverged"].any()
    assert t["value"].iloc[1] == t["value"].iloc[2]


@pytest.mark.parametrize("name", ["digits_st", "adult_st", "a9a_st"])
def test_derived_catalogue_shapes_match_the_loads(name):
    require_data(name)
    d = ro.datasets.load(name)
    i = ro.datasets.info(name)
    assert (i["n_train"], i["n_test"], i["d"]) == (d.n_train, d.n_test, d.X_train.shape[1])
