"""The command line as a user meets it (stop 43): ``python -m riskopt``, an ``--out`` that is one
of the command's inputs, a constant or one-row target, and ``evaluate`` on one row."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskopt.cli import main
from test_cli_fit import _error  # one error line, exit status 2, no traceback

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    n = 120
    df = pd.DataFrame(rng.normal(size=(n, 2)), columns=["a", "b"])
    df["g"] = np.where(rng.random(n) < 0.5, "u", "v")
    df["y"] = df["a"] - 2 * df["b"] + 0.1 * rng.normal(size=n)
    df["label"] = (df["y"] > 0).astype(int)
    path = tmp_path / "train.csv"
    df.to_csv(path, index=False)
    return path, df


def test_python_dash_m_riskopt_runs_the_cli():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SRC), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "riskopt", "--help"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage: " in out.stdout and "fit" in out.stdout and "evaluate" in out.stdout


def test_out_that_is_an_input_is_refused_and_the_input_kept(table, tmp_path, capsys):
    path, _ = table
    before = path.read_bytes()
    err = _error(capsys, ["fit", str(path), "--target", "y", "--drop", "label", "--quiet",
                          "--out", str(path)])
    assert "is the data file" in err
    assert path.read_bytes() == before
    model = tmp_path / "m.skops"
    assert main(["fit", str(path), "--target", "y", "--drop", "label", "--quiet",
                 "--out", str(model)]) == 0
    capsys.readouterr()
    saved = model.read_bytes()
    # the same file through another spelling of its path
    other = str(tmp_path / "." / "m.skops")
    err = _error(capsys, ["predict", str(model), str(path), "--out", other])
    assert "is the model file" in err
    err = _error(capsys, ["evaluate", str(model), str(path), "--out", str(path)])
    assert "is the data file" in err
    assert model.read_bytes() == saved and path.read_bytes() == before
    # a new file still works
    assert main(["predict", str(model), str(path), "--out", str(tmp_path / "p.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "p.csv")) == len(pd.read_csv(path))


@pytest.mark.parametrize("rows", [1, 50])
def test_a_constant_target_is_refused_before_the_fit(table, tmp_path, capsys, rows):
    path, df = table
    one = df.iloc[:rows].assign(y=3.5)
    p = tmp_path / "const.csv"
    one.to_csv(p, index=False)
    out = tmp_path / "m.skops"
    err = _error(capsys, ["fit", str(p), "--target", "y", "--quiet", "--out", str(out)])
    assert "single value 3.5" in err and f"{rows} row(s)" in err
    assert not out.exists()


def test_evaluate_on_one_row(table, tmp_path, capsys):
    path, df = table
    model = tmp_path / "m.skops"
    assert main(["fit", str(path), "--target", "y", "--drop", "label", "--quiet",
                 "--out", str(model)]) == 0
    one = tmp_path / "one.csv"
    df.iloc[:1].to_csv(one, index=False)
    capsys.readouterr()
    err = _error(capsys, ["evaluate", str(model), str(one), "--sensitive", "g"])
    assert "at least 2 rows" in err
    # without groups: the overall table, R^2 undefined (not -1e294), said on stderr
    rep = tmp_path / "r.json"
    assert main(["evaluate", str(model), str(one), "--out", str(rep)]) == 0
    assert "r2 is undefined" in capsys.readouterr().err
    overall = json.loads(rep.read_text())["overall"]
    assert overall["rows"] == 1 and overall["r2"] is None
    assert overall["rmse"] == pytest.approx(overall["mae"])


def test_fit_help_states_the_auto_task_rule(capsys):
    """`riskopt fit --help` said a numeric target with *two* values is a classification task;
    the rule (``guess_task``) takes 2 to ``MAX_AUTO_CLASSES`` integer values."""
    from riskopt._cli_table import MAX_AUTO_CLASSES, guess_task

    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (f"a numeric one with 2 to {MAX_AUTO_CLASSES} distinct values, all integers, is a "
            "classification task") in text
    k = MAX_AUTO_CLASSES
    assert guess_task(pd.Series(np.arange(100) % k))[0] == "classification"
    assert guess_task(pd.Series(np.arange(100) % (k + 1)))[0] == "regression"
    assert guess_task(pd.Series([0.5, 1.5] * 10))[0] == "regression"
    assert guess_task(pd.Series(["a", "b"] * 10))[0] == "classification"


def test_unseen_categories_are_reported_not_silent(table, tmp_path, capsys):
    """A category the fit never saw gets all-zero one-hot indicators: predict and evaluate
    say so (column, values, rows) and still write every row; known values say nothing."""
    path, df = table
    model = tmp_path / "m.skops"
    assert main(["fit", str(path), "--target", "y", "--drop", "label", "--quiet",
                 "--out", str(model)]) == 0
    capsys.readouterr()
    assert main(["predict", str(model), str(path), "--out", str(tmp_path / "p0.csv")]) == 0
    assert "not fitted on" not in capsys.readouterr().err
    new = df.copy()
    new.loc[[3, 7, 9], "g"] = "w"
    new_path = tmp_path / "new.csv"
    new.to_csv(new_path, index=False)
    assert main(["predict", str(model), str(new_path), "--out", str(tmp_path / "p.csv")]) == 0
    err = capsys.readouterr().err
    assert "column 'g' has 1 value(s) the model was not fitted on ('w'; 3 row(s))" in err
    assert len(pd.read_csv(tmp_path / "p.csv")) == len(df)
    assert main(["evaluate", str(model), str(new_path)]) == 0
    assert "('w'; 3 row(s))" in capsys.readouterr().err


def test_a_sensitive_column_with_many_values_is_flagged(capsys):
    """`--constraint ... --sensitive age` makes one group per age (compas: 63 groups, a 185 s
    fit whose hard demographic parity gap stayed at 0.17 for a bound of 0.02): one warning
    line before the fit says so; a two-valued column says nothing."""
    import argparse

    from riskopt import _cli_fair

    rng = np.random.default_rng(4)
    df = pd.DataFrame({"age": rng.integers(18, 70, 300), "sex": rng.choice(["F", "M"], 300)})

    def fail(msg):
        raise AssertionError(msg)

    args = argparse.Namespace(constraint="demographic_parity", constraint_tol=0.02,
                              sensitive=["age"], group_dro=False)
    kw, fit_kw = _cli_fair.fit_options(args, df, fail)
    k = df["age"].nunique()
    assert fit_kw["sensitive_features"].shape == (300, 1)
    err = capsys.readouterr().err
    assert f"--sensitive age: {k} groups" in err and "binning" in err
    assert k > _cli_fair.MANY_GROUPS
    args.sensitive = ["sex"]
    _cli_fair.fit_options(args, df, fail)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("blank_in", ["predict", "fit"])
def test_an_integer_category_read_as_float_keeps_its_indicators(table, tmp_path, capsys,
                                                                 blank_in):
    """`--categorical k` on integers: one blank cell makes pandas read the column as floats,
    and '3.0' was no category '3' of the fit (all-zero indicators on every row: 1,300 of 2,214
    compas predictions changed, silently). Either way round, the rows with a value predict as
    before, and no unseen-category warning."""
    path, df = table
    df = df.assign(k=np.arange(len(df)) % 4)
    clean, blank = tmp_path / "clean.csv", tmp_path / "blank.csv"
    df.to_csv(clean, index=False)
    df.assign(k=df["k"].where(df.index != 0)).to_csv(blank, index=False)
    train, test = (clean, blank) if blank_in == "predict" else (blank, clean)
    model = tmp_path / "m.skops"
    assert main(["fit", str(train), "--target", "y", "--drop", "label", "--categorical", "k",
                 "--quiet", "--out", str(model)]) == 0
    capsys.readouterr()
    got = {}
    for name, p in (("clean", clean), ("blank", blank)):
        assert main(["predict", str(model), str(p), "--out", str(tmp_path / f"{name}.out")]) == 0
        assert "not fitted on" not in capsys.readouterr().err
        got[name] = pd.read_csv(tmp_path / f"{name}.out")["prediction"].to_numpy()
    np.testing.assert_array_equal(got["clean"][1:], got["blank"][1:])


def test_features_that_contradict_target_or_drop_are_refused(table, tmp_path, capsys):
    """`--features a y` fitted the target as its own feature (a training loss of ~0);
    `--features a b --drop b` ignored the --drop. Both are one error line, no model."""
    path, _ = table
    out = tmp_path / "m.skops"
    err = _error(capsys, ["fit", str(path), "--target", "y", "--features", "a", "y",
                          "--quiet", "--out", str(out)])
    assert "names the target column 'y'" in err
    err = _error(capsys, ["fit", str(path), "--target", "y", "--features", "a", "b",
                          "--drop", "b", "--quiet", "--out", str(out)])
    assert "--drop b: also named in --features" in err
    assert not out.exists()
    assert main(["fit", str(path), "--target", "y", "--features", "a", "b", "--quiet",
                 "--out", str(out)]) == 0


def test_model_info_says_which_versions_wrote_it(table, tmp_path, capsys):
    """`python -m riskopt.model_io info MODEL`: the versions stored in the file (there was no
    way to read them but a version mismatch warning), and what the fit stored."""
    import riskopt
    from riskopt import model_io

    path, _ = table
    model = tmp_path / "m.skops"
    assert main(["fit", str(path), "--target", "y", "--drop", "label", "--quiet",
                 "--out", str(model)]) == 0
    capsys.readouterr()
    assert model_io._main(["info", str(model)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"written with riskopt: {riskopt.__version__} (now {riskopt.__version__})" in out
    assert any(ln.startswith("written with scikit-learn: ") for ln in out)
    assert "target: y" in out and "task: regression" in out
    assert "features: 3: a, b, g" in out
    assert model_io._main(["info", str(path)]) == 2
    assert "not a riskopt model file" in capsys.readouterr().err


def test_a_duplicated_header_is_one_error_naming_the_column(table, tmp_path, capsys):
    """A CSV header that names a column twice: pandas read the second as 'a.1' and fit,
    predict and evaluate used it silently. Now one error line naming the column(s)."""
    path, df = table
    model = tmp_path / "m.skops"
    assert main(["fit", str(path), "--target", "y", "--drop", "label", "--quiet",
                 "--out", str(model)]) == 0
    capsys.readouterr()
    lines = path.read_text().splitlines()
    assert lines[0] == "a,b,g,y,label"
    dup = tmp_path / "dup.csv"
    dup.write_text("\n".join(["a,b,a,y,b"] + lines[1:]) + "\n")
    assert "a.1" in pd.read_csv(dup).columns  # what pandas makes of it
    for argv in (["fit", str(dup), "--target", "y", "--quiet", "--out", str(tmp_path / "n")],
                 ["predict", str(model), str(dup), "--out", str(tmp_path / "p.csv")],
                 ["evaluate", str(model), str(dup)]):
        err = _error(capsys, argv)
        assert "'a' (columns 1, 3); 'b' (columns 2, 5)" in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "n").exists() and not (tmp_path / "p.csv").exists()
    # a column whose own name looks like pandas' mangling is no duplicate
    ok = tmp_path / "ok.csv"
    df.rename(columns={"b": "a.1"}).to_csv(ok, index=False)
    assert main(["fit", str(ok), "--target", "y", "--drop", "label", "--quiet",
                 "--out", str(tmp_path / "k")]) == 0
