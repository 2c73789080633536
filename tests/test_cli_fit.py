"""`riskopt fit` / `riskopt predict` end to end on CSV and parquet files, and their errors."""
import numpy as np
import pandas as pd
import pytest

from riskopt.cli import main


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    n = 200
    X = rng.normal(size=(n, 3))
    g = rng.integers(0, 3, n)
    y = X @ np.array([1.0, 2.0, 3.0]) + 1.5 * g + rng.standard_t(3, n)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    df["grp"] = g
    df["y"] = y
    df["label"] = np.where(y > 0, "pos", "neg")
    path = tmp_path / "train.csv"
    df.to_csv(path, index=False)
    return path, df


def test_fit_predict_regression_with_group_summary(table, tmp_path, capsys):
    path, df = table
    model = tmp_path / "m.joblib"
    rc = main(["fit", str(path), "--target", "y", "--drop", "label", "--group", "grp",
               "--risk", "cvar:0.2", "--quiet", "--out", str(model)])
    out = capsys.readouterr().out
    assert rc == 0 and model.exists()
    assert "worst-group loss (grp)" in out and "objective:" in out and "updates:" in out
    preds = tmp_path / "p.csv"
    assert main(["predict", str(model), str(path), "--out", str(preds)]) == 0
    p = pd.read_csv(preds)
    assert len(p) == len(df) and np.all(np.isfinite(p["prediction"]))
    # the saved model is the fitted estimator: predictions equal a direct fit (the CLI's
    # pipeline standardises first: both are tol = 1e-4 fits of the same problem)
    from riskopt.estimators import RiskRegressor

    est = RiskRegressor(risk="cvar:0.2", l2_reg=1e-4, max_iter=1000, tol=1e-4,
                        random_state=0).fit(df[["a", "b", "c"]].to_numpy(), df["y"].to_numpy())
    np.testing.assert_allclose(p["prediction"], est.predict(df[["a", "b", "c"]].to_numpy()),
                               rtol=1e-6, atol=1e-6)
    # the worst-group line is riskopt.metrics on the per-sample training losses
    from riskopt.metrics import group_errors

    losses = 0.5 * (est.predict(df[["a", "b", "c"]].to_numpy()) - df["y"].to_numpy()) ** 2
    table = group_errors(None, losses, df["grp"].astype(str), loss="precomputed")
    worst, value = table.worst
    brute = {g: losses[df["grp"].astype(str) == g].mean() for g in ("0", "1", "2")}
    assert worst == max(brute, key=brute.get) and value == pytest.approx(max(brute.values()))
    line = next(ln for ln in out.splitlines() if ln.startswith("worst-group loss (grp)"))
    assert f"{value:.6g} (group {worst!r})" in line
    assert all(f"{g}: {v:.4g}" in line for g, v in table.errors.items())


def test_fit_group_dro_minimises_the_worst_group_loss(table, tmp_path, capsys):
    """--group-dro fits the risk of the group-mean losses: the same model as
    RiskRegressor.fit(groups=), whose worst-group training loss is at most ERM's."""
    path, df = table
    X, y, g = df[["a", "b", "c"]].to_numpy(), df["y"].to_numpy(), df["grp"].astype(str)
    worst = {}
    for flag in ([], ["--group-dro"]):
        model = tmp_path / f"m{len(flag)}.joblib"
        rc = main(["fit", str(path), "--target", "y", "--drop", "label", "--group", "grp",
                   "--risk", "cvar:0.4", "--quiet", "--out", str(model), *flag])
        out = capsys.readouterr().out
        assert rc == 0
        line = next(ln for ln in out.splitlines() if ln.startswith("worst-group loss (grp)"))
        worst[bool(flag)] = float(line.split(":")[1].split()[0])
    assert "over the groups of 'grp' (group DRO)" in out
    from riskopt.model_io import load_model

    from riskopt.estimators import RiskRegressor

    saved = load_model(tmp_path / "m1.joblib")
    assert saved["group_dro"] is True
    # the saved pipeline standardises the columns first: the same fit on standardised X
    Xs = (X - X.mean(0)) / X.std(0)
    est = RiskRegressor(risk="cvar:0.4", l2_reg=1e-4, random_state=0).fit(Xs, y, groups=g)
    np.testing.assert_allclose(saved["estimator"].predict(df[["a", "b", "c"]]), est.predict(Xs),
                               rtol=1e-6, atol=1e-6)
    assert worst[True] < worst[False]


def test_fit_group_dro_needs_a_group_column(table, tmp_path, capsys):
    path, _ = table
    model = tmp_path / "m.joblib"
    rc = main(["fit", str(path), "--target", "y", "--group-dro", "--out", str(model)])
    assert rc == 2 and not model.exists()
    assert "--group-dro needs --group" in capsys.readouterr().err


def test_fit_predict_classification_parquet_with_proba(table, tmp_path):
    _, df = table
    pq = tmp_path / "train.parquet"
    df.to_parquet(pq)
    model = tmp_path / "c.joblib"
    assert main(["fit", str(pq), "--target", "label", "--drop", "y", "--risk", "esrm:1",
                 "--shift-cost", "0.5", "--quiet", "--out", str(model)]) == 0
    preds = tmp_path / "p.csv"
    assert main(["predict", str(model), str(pq), "--proba", "--out", str(preds)]) == 0
    p = pd.read_csv(preds)
    assert set(p["prediction"]) <= {"pos", "neg"}
    np.testing.assert_allclose(p["proba_neg"] + p["proba_pos"], 1.0, atol=1e-12)
    assert (p["prediction"] == df["label"]).mean() > 0.8


def _error(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    return err


def test_missing_target_column(table, tmp_path, capsys):
    path, _ = table
    err = _error(capsys, ["fit", str(path), "--target", "nope", "--out", str(tmp_path / "m")])
    assert "target column 'nope'" in err


def test_non_numeric_feature_is_named(table, tmp_path, capsys):
    path, _ = table
    err = _error(capsys, ["fit", str(path), "--target", "y", "--no-preprocess",
                          "--out", str(tmp_path / "m")])
    assert "non-numeric" in err and "label" in err


def test_missing_values_are_reported_by_column(table, tmp_path, capsys):
    path, df = table
    df = df.copy()
    df.loc[[3, 7], "b"] = np.nan
    bad = tmp_path / "nan.csv"
    df.to_csv(bad, index=False)
    err = _error(capsys, ["fit", str(bad), "--target", "y", "--drop", "label", "--impute", "none",
                          "--out", str(tmp_path / "m")])
    assert "b (2 missing)" in err
    err = _error(capsys, ["fit", str(bad), "--target", "y", "--drop", "label", "--no-preprocess",
                          "--out", str(tmp_path / "m")])
    assert "b (2 missing)" in err
    df2 = df.copy()
    df2.loc[0, "y"] = np.nan
    df2.loc[[3, 7], "b"] = 0.0
    df2.to_csv(bad, index=False)
    err = _error(capsys, ["fit", str(bad), "--target", "y", "--drop", "label",
                          "--out", str(tmp_path / "m")])
    assert "missing" in err and "'y'" in err


def test_bad_risk_and_missing_files(table, tmp_path, capsys):
    path, _ = table
    err = _error(capsys, ["fit", str(path), "--target", "y", "--drop", "label",
                          "--risk", "cvar:2", "--out", str(tmp_path / "m")])
    assert "tail_fraction" in err
    err = _error(capsys, ["fit", str(tmp_path / "none.csv"), "--target", "y",
                          "--out", str(tmp_path / "m")])
    assert "not found" in err
    err = _error(capsys, ["predict", str(tmp_path / "none.joblib"), str(path)])
    assert "model file not found" in err


def test_predict_needs_the_model_features(table, tmp_path, capsys):
    path, df = table
    model = tmp_path / "m.joblib"
    assert main(["fit", str(path), "--target", "y", "--drop", "label", "grp", "--quiet",
                 "--out", str(model)]) == 0
    capsys.readouterr()
    other = tmp_path / "other.csv"
    df.drop(columns=["c"]).to_csv(other, index=False)
    err = _error(capsys, ["predict", str(model), str(other)])
    assert "not found" in err and "c" in err


def test_default_risk_is_the_estimators(table, tmp_path, capsys):
    from riskopt.model_io import load_model

    path, _ = table
    for target, drop, want in (("label", "y", "esrm:1"), ("y", "label", "cvar:0.1")):
        model = tmp_path / f"{target}.joblib"
        assert main(["fit", str(path), "--target", target, "--drop", drop, "--quiet",
                     "--out", str(model)]) == 0
        est = load_model(model)["estimator"][-1]  # the pipeline's last step
        import riskopt as ro

        assert est.risk == ro.parse_risk(want)
        out = capsys.readouterr().out
        # the default fit (classifier and regressor) is the certified Newton solver, and the
        # summary says so
        assert est.solver_ == "newton" and "certified: objective - optimum <=" in out
        assert 0 <= est.dual_gap_ <= 1e-6 * abs(est.objective_trace_[-1])


def test_fit_reports_a_degenerate_model_in_one_line(tmp_path, capsys):
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(300, 2)), columns=["a", "b"])
    df["label"] = np.where(rng.random(300) < 0.5, "yes", "no")  # unrelated to the features
    path = tmp_path / "noise.csv"
    df.to_csv(path, index=False)
    rc = main(["fit", str(path), "--target", "label", "--risk", "cvar:0.1", "--quiet",
               "--out", str(tmp_path / "m.joblib")])
    err = capsys.readouterr().err
    assert rc == 0
    line = next(ln for ln in err.splitlines() if "degenerate model" in ln)
    assert line.startswith("riskopt: warning: RiskClassifier") and "try a larger tail" in line


def test_predict_carries_id_columns(table, tmp_path, capsys):
    path, df = table
    df = df.assign(row_id=[f"r{i}" for i in range(len(df))])
    csv = tmp_path / "with_ids.csv"
    df.to_csv(csv, index=False)
    model = tmp_path / "m.joblib"
    assert main(["fit", str(path), "--target", "y", "--drop", "label", "grp", "--quiet",
                 "--out", str(model)]) == 0
    out = tmp_path / "p.csv"
    assert main(["predict", str(model), str(csv), "--id-column", "row_id", "grp",
                 "--out", str(out)]) == 0
    p = pd.read_csv(out)
    assert list(p.columns) == ["row_id", "grp", "prediction"]
    assert p["row_id"].tolist() == df["row_id"].tolist()
    assert main(["predict", str(model), str(csv), "--id-column", "nope",
                 "--out", str(tmp_path / "q.csv")]) == 2
    assert "--id-column: no column 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "q.csv").exists()


def test_preprocessing_inside_the_model(tmp_path, capsys):
    """Text / categorical columns are one-hot encoded, missing values imputed, numeric columns
    standardised, all inside the saved Pipeline: predict and evaluate take the raw table
    (with categories unseen in training and missing values)."""
    rng = np.random.default_rng(3)
    n = 600
    df = pd.DataFrame({"age": rng.integers(18, 80, n).astype(float),
                       "income": rng.lognormal(10, 1, n),
                       "city": rng.choice(["north", "south", "east"], n),
                       "member": rng.random(n) < 0.3})
    logit = (0.04 * (df.age - 50) + 0.8 * (df.city == "south") - 0.8 * df.member
             + rng.logistic(size=n))
    df["bought"] = np.where(logit > 0, "yes", "no")
    df.loc[rng.choice(n, 30, replace=False), "income"] = np.nan
    df.loc[rng.choice(n, 20, replace=False), "city"] = None
    train = tmp_path / "train.csv"
    df.to_csv(train, index=False)
    model = tmp_path / "m.joblib"
    assert main(["fit", str(train), "--target", "bought", "--quiet", "--out", str(model)]) == 0
    out = capsys.readouterr().out
    assert "features: 2 numeric (imputed: median, standardised), 2 categorical (one-hot) -> " \
           "7 model inputs" in out  # 2 + city (3 + missing imputed away: 3) + member (2)
    from riskopt.model_io import load_model

    saved = load_model(model)
    pipe = saved["estimator"]
    assert saved["preprocess"] and [name for name, _ in pipe.steps] == ["preprocess", "model"]
    acc = np.mean(pipe.predict(df.drop(columns="bought")) == df["bought"])
    assert acc > 0.6
    new = df.drop(columns="bought").head(5).assign(city=["west", None, "north", "south", "x"])
    pred_csv = tmp_path / "new.csv"
    new.to_csv(pred_csv, index=False)
    assert main(["predict", str(model), str(pred_csv), "--out", str(tmp_path / "p.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "p.csv")) == 5
    assert main(["evaluate", str(model), str(train), "--group", "member",
                 "--out", str(tmp_path / "r.json")]) == 0
    # a numeric code column forced categorical, and the id-like warning
    df["customer"] = [f"c{i}" for i in range(n)]
    df["zone"] = rng.integers(1, 4, n)
    df.to_csv(train, index=False)
    assert main(["fit", str(train), "--target", "bought", "--categorical", "zone", "--quiet",
                 "--out", str(model)]) == 0
    cap = capsys.readouterr()
    assert "categorical column 'customer' has 600 distinct values" in cap.err
    assert "2 numeric" in cap.out and "4 categorical" in cap.out
    assert main(["fit", str(train), "--target", "bought", "--no-preprocess", "--categorical",
                 "zone", "--out", str(model)]) == 2


def test_two_valued_numeric_target_is_classification(tmp_path, capsys):
    rng = np.random.default_rng(4)
    df = pd.DataFrame(rng.normal(size=(300, 2)), columns=["a", "b"])
    df["y"] = (df.a + rng.logistic(size=300) > 0).astype(int)
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    assert main(["fit", str(path), "--target", "y", "--quiet",
                 "--out", str(tmp_path / "m.joblib")]) == 0
    out = capsys.readouterr().out
    assert "task: classification (auto: the numeric target has two values" in out
