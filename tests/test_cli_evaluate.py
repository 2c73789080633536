"""`riskopt evaluate`: overall, per-group and fairness metrics of a saved model on a table."""
import json

import numpy as np
import pandas as pd
import pytest

import riskopt as ro
from riskopt import metrics
from riskopt.cli import main


@pytest.fixture
def tables(tmp_path):
    rng = np.random.default_rng(0)
    n = 300
    X = rng.normal(size=(n, 3))
    sex = np.where(rng.random(n) < 0.4, "F", "M")
    y = X @ np.array([1.0, 2.0, -1.0]) + 1.0 * (sex == "M") + rng.standard_t(3, n)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    df["sex"] = sex
    df["y"] = y
    df["label"] = (y > 0.5).astype(int)
    train, test = df.iloc[:200], df.iloc[200:]
    paths = tmp_path / "train.csv", tmp_path / "test.csv"
    train.to_csv(paths[0], index=False)
    test.to_csv(paths[1], index=False)
    return paths, test


def _fit(tmp_path, train, target, drop, extra=()):
    model = tmp_path / f"{target}.joblib"
    assert main(["fit", str(train), "--target", target, "--drop", *drop, "--quiet",
                 "--out", str(model), *extra]) == 0
    return model


def test_classification_report_matches_the_metrics(tables, tmp_path, capsys):
    (train, test_path), test = tables
    model = _fit(tmp_path, train, "label", ["y", "sex"], ["--task", "classification"])
    capsys.readouterr()
    out = tmp_path / "r.json"
    assert main(["evaluate", str(model), str(test_path), "--sensitive", "sex",
                 "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    from riskopt.model_io import load_model

    est = load_model(model)["estimator"]  # a Pipeline: preprocessing + RiskClassifier
    pred = est.predict(test[["a", "b", "c"]])
    y = test["label"].to_numpy()
    assert r["overall"]["rows"] == 100
    assert r["overall"]["accuracy"] == pytest.approx(np.mean(pred == y))
    gaps = {g["metric"]: g["value"] for g in r["fairness"]}
    assert gaps["equal_opportunity_difference"] == pytest.approx(
        metrics.equal_opportunity_difference(y, pred, test["sex"]))
    assert gaps["demographic_parity_difference"] == pytest.approx(
        metrics.demographic_parity_difference(pred, test["sex"]))
    rows = {g["group"]: g for g in r["groups"]}
    assert set(rows) == {"F", "M"}
    assert rows["F"]["error"] == pytest.approx(np.mean(pred[test["sex"] == "F"]
                                                       != y[test["sex"] == "F"]))
    assert sum(g["worst"] for g in r["groups"]) == 1
    assert np.isfinite(r["overall"]["risk_of_losses"])
    assert not list(tmp_path.glob("*.tmp*"))


def test_regression_markdown_and_csv(tables, tmp_path, capsys):
    (train, test_path), test = tables
    model = _fit(tmp_path, train, "y", ["label", "sex"], ["--risk", "cvar:0.2"])
    capsys.readouterr()
    assert main(["evaluate", str(model), str(test_path), "--group", "sex",
                 "--sensitive", "sex"]) == 0
    text = capsys.readouterr().out
    assert "## Overall" in text and "rmse" in text and "statistical_parity_ks" in text
    assert "## Per group" in text
    out = tmp_path / "r.csv"
    assert main(["evaluate", str(model), str(test_path), "--sensitive", "sex",
                 "--out", str(out)]) == 0
    t = pd.read_csv(out)
    assert set(t["section"]) == {"overall", "group", "fairness"}
    r2 = float(t[(t.section == "overall") & (t.metric == "r2")]["value"].iloc[0])
    assert 0.3 < r2 <= 1.0


@pytest.mark.parametrize("args, match", [
    (["--sensitive", "nope"], "sensitive column 'nope' not in"),
    (["--group", "a"], None),  # a numeric column works as a group (one group per value)
    (["--out", "/nonexistent_dir/x.md"], "does not exist"),
])
def test_errors_are_one_line_with_exit_2(tables, tmp_path, capsys, args, match):
    (train, test_path), _ = tables
    model = _fit(tmp_path, train, "label", ["y", "sex"], ["--task", "classification"])
    capsys.readouterr()
    rc = main(["evaluate", str(model), str(test_path), *args])
    err = capsys.readouterr().err
    if match is None:
        assert rc == 0
    else:
        assert rc == 2 and match in err and "Traceback" not in err


def test_unknown_labels_and_missing_target(tables, tmp_path, capsys):
    (train, test_path), test = tables
    model = _fit(tmp_path, train, "label", ["y", "sex"], ["--task", "classification"])
    bad = test.copy()
    bad.loc[bad.index[0], "label"] = 7
    p = tmp_path / "bad.csv"
    bad.to_csv(p, index=False)
    capsys.readouterr()
    assert main(["evaluate", str(model), str(p)]) == 2
    assert "not trained on: 7" in capsys.readouterr().err
    bad.drop(columns="label").to_csv(p, index=False)
    assert main(["evaluate", str(model), str(p)]) == 2
    assert "target column 'label' not in" in capsys.readouterr().err


def test_group_dro_model_is_evaluated_by_the_risk_of_its_group_losses(tmp_path, capsys):
    rng = np.random.default_rng(7)
    n = 400
    df = pd.DataFrame(rng.normal(size=(n, 2)), columns=["a", "b"])
    df["g"] = rng.choice(["u", "v", "w"], n, p=[0.6, 0.3, 0.1])
    df["y"] = df.a - df.b + (df.g == "w") * 2 + rng.normal(size=n)
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    model = tmp_path / "m.joblib"
    assert main(["fit", str(path), "--target", "y", "--group", "g", "--group-dro", "--risk",
                 "cvar:0.5", "--quiet", "--out", str(model)]) == 0
    out = tmp_path / "r.json"
    assert main(["evaluate", str(model), str(path), "--out", str(out)]) == 0
    r = json.loads(out.read_text())["overall"]
    assert r["risk"].endswith("over the groups of 'g'")
    from riskopt.model_io import load_model

    est = load_model(model)["estimator"]
    loss = 0.5 * (est.predict(df[["a", "b"]]) - df.y.to_numpy()) ** 2
    gl = pd.Series(loss).groupby(df.g).mean().to_numpy()
    assert r["risk_of_losses"] == pytest.approx(ro.CVaR(0.5).value(gl), rel=1e-12)
