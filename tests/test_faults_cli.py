"""CLI failures: every file-system or input problem is one ``riskopt: error:`` line on stderr
naming the file or column and the fix, exit status 2, and nothing half-written is left
(no ``*.tmp``, no model file, the previous output intact). Repairs are one
``riskopt: warning:`` line.
"""
import json
import os
import re
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("joblib")

import riskopt as ro  # noqa: E402
from riskopt.bench._lock import LOCK_NAME  # noqa: E402
from riskopt.cli import main  # noqa: E402
from _cli_helpers import error_line, fitted_files, frame, readonly_dir  # noqa: E402


def _frame(n=60, seed=0):
    return frame(n, seed)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A training CSV and the regression / classification models fitted on it."""
    return fitted_files(tmp_path_factory.mktemp("cli_faults"), _frame(), ".joblib")


def _listing(*folders):
    out = set()
    for f in folders:
        if Path(f).is_dir():
            try:
                out |= {str(p) for p in Path(f).rglob("*")}
            except OSError:
                pass
    return out


_error = error_line  # run the CLI: exit status 2 and one error line
_readonly_dir = readonly_dir


def _dest(kind, tmp_path, name):
    if kind == "read-only":
        path = _readonly_dir(tmp_path) / name
        return path, [str(path), re.compile(r"permission denied|not permitted|read-only")]
    if kind == "a folder":
        path = tmp_path / "adir"
        path.mkdir()
        return path, [f"--out {path} is a folder; give a file name"]
    if kind == "under a file":
        (tmp_path / "afile").write_text("x")
        path = tmp_path / "afile" / name
        return path, [str(path), f"{tmp_path / 'afile'} is a file, not a folder"]
    path = tmp_path / "nope" / name
    return path, [str(path), f"folder {tmp_path / 'nope'} does not exist; create it first "
                             f"(mkdir -p {tmp_path / 'nope'})"]


COMMANDS = {
    "fit": lambda f, out: ["fit", str(f["data"]), "--target", "y", "--features", "a", "b",
                           "--quiet", "--out", str(out)],
    "predict": lambda f, out: ["predict", str(f["reg"]), str(f["data"]), "--out", str(out)],
    "evaluate": lambda f, out: ["evaluate", str(f["clf"]), str(f["data"]), "--group", "g",
                                "--out", str(out)],
    "bench report": lambda f, out: ["bench", "report", str(f["data"].parent), "--out",
                                    str(out)],
}


@pytest.mark.parametrize("kind", ["read-only", "a folder", "under a file", "missing parent"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_bad_out_is_one_line_and_writes_nothing(command, kind, files, tmp_path, capsys):
    dest, fragments = _dest(kind, tmp_path, "result.out")
    before = _listing(tmp_path, files["data"].parent)
    _error(capsys, COMMANDS[command](files, dest), *fragments)
    assert _listing(tmp_path, files["data"].parent) == before
    if kind == "read-only":
        assert not dest.exists()


@pytest.mark.parametrize("kind", ["read-only", "a file", "under a file"])
def test_bench_run_bad_out_folder(kind, tmp_path, capsys, bench_spec):
    (tmp_path / "afile").write_text("x")
    out, fragment = {
        "read-only": (None, re.compile(r"cannot create output folder \S+: (permission denied|"
                                       r"operation not permitted|read-only)")),
        "a file": (tmp_path / "afile", f"output folder {tmp_path / 'afile'} is a file, not "
                                       "a folder; choose another output folder (--out)"),
        "under a file": (tmp_path / "afile" / "res", f"{tmp_path / 'afile'} is a file, not a "
                                                     "folder"),
    }[kind]
    if out is None:
        out = _readonly_dir(tmp_path) / "riskopt-ro-test"
    before = _listing(tmp_path)
    _error(capsys, ["bench", "run", str(bench_spec), "--out", str(out), "--jobs", "1", "-q"],
           fragment)
    assert _listing(tmp_path) == before


def test_bench_plot_out_under_a_file(bench_results, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    before = _listing(tmp_path, bench_results)
    _error(capsys, ["bench", "plot", str(bench_results), "--out", str(tmp_path / "afile" / "f"),
                    "--format", "png"], "is a file, not a folder")
    assert _listing(tmp_path, bench_results) == before


# ---------------------------------------------------------------------------- group values
def _with_missing(df, col, value, tmp_path, fmt):
    df = df.copy()
    df[col] = df[col].astype(object)
    df.loc[4, col] = value
    path = tmp_path / f"data.{fmt}"
    df.to_parquet(path) if fmt == "parquet" else df.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("value, fmt", [(np.nan, "csv"), ("", "csv"), (None, "parquet")])
def test_fit_missing_group_values_fail_before_the_model_is_written(value, fmt, tmp_path,
                                                                    capsys):
    path = _with_missing(_frame(), "g", value, tmp_path, fmt)
    model = tmp_path / "m.joblib"
    _error(capsys, ["fit", str(path), "--target", "y", "--drop", "lab", "s", "--group", "g",
                    "--quiet", "--out", str(model)],
           f"group column 'g' has 1 missing value(s) in {path} (0-based row(s) 4); fill them "
           "or drop those rows first")
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_fit_keeps_an_existing_model_when_the_input_is_bad(tmp_path, capsys, files):
    model = tmp_path / "m.joblib"
    model.write_bytes(files["reg"].read_bytes())
    path = _with_missing(_frame(), "g", None, tmp_path, "parquet")
    _error(capsys, ["fit", str(path), "--target", "y", "--drop", "lab", "s", "--group", "g",
                    "--quiet", "--out", str(model)], "group column 'g'")
    assert model.read_bytes() == files["reg"].read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, "m.joblib"]


@pytest.mark.parametrize("flag, col, value", [("--group", "g", np.nan),
                                              ("--sensitive", "s", None)])
def test_evaluate_missing_group_values(flag, col, value, files, tmp_path, capsys):
    path = _with_missing(files["df"], col, value, tmp_path, "parquet")
    what = "group" if flag == "--group" else "sensitive"
    _error(capsys, ["evaluate", str(files["clf"]), str(path), flag, col,
                    "--out", str(tmp_path / "e.md")],
           f"{what} column '{col}' has 1 missing value(s)", "fill them or drop those rows")
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


# ---------------------------------------------------------------------------- labels
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_fit_none_labels(fmt, tmp_path, capsys):
    path = _with_missing(_frame(), "lab", None, tmp_path, fmt)
    _error(capsys, ["fit", str(path), "--target", "lab", "--features", "a", "b", "--quiet",
                    "--out", str(tmp_path / "m.joblib")],
           "target column 'lab' has 1 missing value(s)", "(0-based row(s) 4)")
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_evaluate_none_labels(files, tmp_path, capsys):
    path = _with_missing(files["df"], "lab", None, tmp_path, "parquet")
    _error(capsys, ["evaluate", str(files["clf"]), str(path)],
           "target column 'lab' has 1 missing value(s)")


def test_evaluate_labels_of_another_type(files, tmp_path, capsys):
    df = files["df"].copy()
    df["lab"] = (df["lab"] == "p").astype(int)  # 0/1 where the model learnt 'n'/'p'
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    _error(capsys, ["evaluate", str(files["clf"]), str(path)],
           "target column 'lab' has labels the model was not trained on: 0, 1 (classes: n, p)")


def test_mixed_label_types_are_named():
    from riskopt._cli_fit import FitError, check_label_types

    with pytest.raises(FitError, match=r"^target column 'lab' mixes value types \(int 1, str "
                                       r"'x', float 2.5\); make the labels one type"):
        check_label_types(pd.Series([1, "x", 2.5, 1], dtype=object), "lab", "target")


def test_csv_labels_mixing_numbers_and_text_are_read_as_text(tmp_path, capsys):
    """Without ``low_memory=False`` a large CSV could give a column of ints *and* strings."""
    from riskopt.model_io import load_model

    df = _frame()
    df["lab"] = np.where(df["y"] > 0, "1", "x")
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    model = tmp_path / "m.joblib"
    assert main(["fit", str(path), "--target", "lab", "--features", "a", "b", "--quiet",
                 "--out", str(model)]) == 0
    assert [type(c).__name__ for c in load_model(model)["estimator"].classes_] == ["str"] * 2


# ---------------------------------------------------------------------------- unnamed columns
def test_unnamed_text_column_is_named_by_position(tmp_path, capsys):
    df = _frame().drop(columns="s")
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    path.write_text(path.read_text().replace(",lab\n", ",\n", 1))  # blank header name
    _error(capsys, ["fit", str(path), "--target", "y", "--quiet", "--no-preprocess",
                    "--out", str(tmp_path / "m.joblib")],
           "non-numeric feature column(s) column 5 (no header name; pandas reads it as "
           "'Unnamed: 4'); encode them (e.g. one-hot) or leave them out with --drop "
           "'Unnamed: 4'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv"]


def test_unnamed_categorical_parquet_column(tmp_path, capsys):
    df = _frame().drop(columns="lab")
    df["s"] = df["s"].astype("category")
    df = df.rename(columns={"s": ""})
    path = tmp_path / "d.parquet"
    df.to_parquet(path)
    _error(capsys, ["fit", str(path), "--target", "y", "--quiet", "--no-preprocess",
                    "--out", str(tmp_path / "m.joblib")],
           "non-numeric feature column(s) column 4 (no header name; pandas reads it as '')",
           "--drop ''")


def test_saved_row_index_is_left_out_with_a_note(tmp_path, capsys):
    df = _frame().drop(columns=["lab", "s"])
    path = tmp_path / "d.csv"
    df.to_csv(path)  # index written as a first column without a name
    model = tmp_path / "m.joblib"
    rc = main(["fit", str(path), "--target", "y", "--quiet", "--out", str(model)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 0 and model.exists()
    # a row id (distinct consecutive integers): not a feature (issue 29)
    assert err == ["riskopt: note: column 1 (no header name; pandas reads it as 'Unnamed: 0') "
                   "looks like a row id (distinct consecutive integers in every row): left out "
                   "of the features (--features to keep it)"]
    from riskopt.model_io import load_model

    assert "Unnamed: 0" not in load_model(model)["features"]


def test_unnamed_column_that_is_no_row_id_is_warned(tmp_path, capsys):
    df = _frame().drop(columns=["lab", "s"])
    df.index = np.arange(len(df)) * 7 % 11 + 0.5  # a saved column without a name, not an id
    path = tmp_path / "d.csv"
    df.to_csv(path)
    model = tmp_path / "m.joblib"
    rc = main(["fit", str(path), "--target", "y", "--quiet", "--out", str(model)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 0 and model.exists()
    assert err == [f"riskopt: warning: column 1 (no header name; pandas reads it as "
                   f"'Unnamed: 0') of {path} is used as a feature (a saved row index?); "
                   "leave it out with --drop 'Unnamed: 0'"]


# ---------------------------------------------------------------------------- missing files
MISSING = {
    "fit: data": (lambda f, t: ["fit", str(t / "none.csv"), "--target", "y", "--out",
                                str(t / "m")], "data file not found: {t}/none.csv"),
    "fit: data is a folder": (lambda f, t: ["fit", str(t), "--target", "y", "--out",
                                            str(t / "m")],
                              "data file {t} is a folder; give a CSV or parquet file"),
    "predict: model": (lambda f, t: ["predict", str(t / "none.joblib"), str(f["data"])],
                       "model file not found: {t}/none.joblib"),
    "predict: model is a folder": (lambda f, t: ["predict", str(t), str(f["data"])],
                                   "model file {t} is a folder"),
    "predict: model is a table": (lambda f, t: ["predict", str(f["data"]), str(f["data"])],
                                  "is not a riskopt model file"),
    "predict: data": (lambda f, t: ["predict", str(f["reg"]), str(t / "none.csv")],
                      "data file not found: {t}/none.csv"),
    "evaluate: data": (lambda f, t: ["evaluate", str(f["clf"]), str(t / "none.parquet")],
                       "data file not found: {t}/none.parquet"),
    "bench run: spec": (lambda f, t: ["bench", "run", str(t / "none.toml")],
                        "spec file not found: {t}/none.toml"),
    "bench plot: results": (lambda f, t: ["bench", "plot", str(t)],
                            "no results table at {t}/results.parquet"),
}


@pytest.mark.parametrize("case", list(MISSING))
def test_missing_files(case, files, tmp_path, capsys):
    argv, fragment = MISSING[case]
    before = _listing(tmp_path)
    _error(capsys, argv(files, tmp_path), fragment.format(t=tmp_path))
    assert _listing(tmp_path) == before


# ---------------------------------------------------------------------------- bad tables
BAD = {
    "unterminated quote": ("d.csv", b'a,b,y\n1,2,3\n"x,1\n', "cannot read {p}: Error "
                           "tokenizing data. C error: EOF inside string"),
    "empty file": ("d.csv", b"", "cannot read {p}: the file is empty; give a table with a "
                   "header line"),
    "binary": ("d.csv", bytes(range(128, 256)) * 4, "cannot read {p}: not a UTF-8 text table"),
    "header only": ("d.csv", b"a,b,y\n", "{p} has a header but no rows"),
    "truncated parquet": ("d.parquet", None, "cannot read {p}: "),
    "csv named parquet": ("d.parquet", b"a,b,y\n1,2,3\n", "check that it is a valid parquet "
                          "file"),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("command", ["fit", "predict"])
def test_bad_tables(case, command, files, tmp_path, capsys):
    name, content, fragment = BAD[case]
    path = tmp_path / name
    if content is None:
        _frame().to_parquet(path)
        content = path.read_bytes()[:200]
    path.write_bytes(content)
    argv = (["fit", str(path), "--target", "y", "--out", str(tmp_path / "m.joblib")]
            if command == "fit" else ["predict", str(files["reg"]), str(path),
                                      "--out", str(tmp_path / "p.csv")])
    _error(capsys, argv, fragment.format(p=path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


# ---------------------------------------------------------------------------- bench run
@pytest.fixture(scope="module")
def bench_spec(tmp_path_factory):
    """A 2-run spec on yacht (one solver that accepts it)."""
    data = ro.datasets.load("yacht")
    for name in ["prospect", "lsvrg", "sgd"] + ro.solvers.available():
        if name == "lbfgs" or name not in ro.solvers.available():
            continue
        obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=0.5), data.X_train[:30],
                           data.y_train[:30], l2_reg=0.1)
        try:
            ro.solvers.get(name, lr=0.01)._check_objective(obj)
        except ValueError:
            continue
        break
    else:
        pytest.skip("no stochastic solver is registered")
    path = tmp_path_factory.mktemp("spec") / "tiny.toml"
    path.write_text(f'name = "tiny_cli_faults"\ndatasets = ["yacht"]\nseeds = [0, 1]\n'
                    f'passes = 2\nlr = [0.01]\nshift_cost = 0.5\nobjectives = ["cvar:0.5"]\n'
                    f'solvers = ["{name}"]\n[plot]\nx = ["passes"]\n')
    return path


@pytest.fixture(scope="module")
def bench_results(bench_spec, tmp_path_factory):
    out = tmp_path_factory.mktemp("results") / "res"
    assert main(["bench", "run", str(bench_spec), "--out", str(out), "--jobs", "1", "-q",
                 "--no-plot"]) == 0
    return out


@pytest.fixture
def results_copy(bench_results, tmp_path):
    import shutil

    out = tmp_path / "res"
    shutil.copytree(bench_results, out)
    return out


def _bench(spec, out, *extra):
    return ["bench", "run", str(spec), "--out", str(out), "--jobs", "1", "-q", "--no-plot",
            *extra]


def test_bench_run_refused_while_another_run_holds_the_folder(bench_spec, results_copy,
                                                              capsys):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        started = "2030-01-02T03:04:05+0000"
        (results_copy / LOCK_NAME).write_text(json.dumps(
            {"pid": sleeper.pid, "host": socket.gethostname(), "started": started}))
        before = {p: p.stat().st_mtime_ns for p in results_copy.rglob("*")}
        _error(capsys, _bench(bench_spec, results_copy),
               f"riskopt: error: {results_copy} is in use by another run (pid {sleeper.pid} "
               f"on host {socket.gethostname()}, started {started}); wait for it to finish, "
               f"or delete {results_copy / LOCK_NAME} if that run is gone")
        assert {p: p.stat().st_mtime_ns for p in results_copy.rglob("*")} == before
        assert main(_bench(bench_spec, results_copy, "--dry-run")) == 0
        assert f"in use by another run: pid {sleeper.pid} on host" in capsys.readouterr().out
    finally:
        sleeper.kill()
        sleeper.wait()


def test_bench_run_takes_over_a_dead_runs_lock_with_one_warning(bench_spec, results_copy,
                                                                capsys):
    dead = subprocess.Popen(["true"])
    dead.wait()
    (results_copy / LOCK_NAME).write_text(json.dumps(
        {"pid": dead.pid, "host": socket.gethostname(), "started": "2030-01-01T00:00:00+0000"}))
    assert main(_bench(bench_spec, results_copy)) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"riskopt: warning: taking over the lock of {results_copy} from a run that "
                   f"is gone (pid {dead.pid} on host {socket.gethostname()}, started "
                   f"2030-01-01T00:00:00+0000: process {dead.pid} is gone)"]
    assert not (results_copy / LOCK_NAME).exists()


def test_bench_run_reports_a_corrupt_cell_in_one_line_and_goes_on(bench_spec, results_copy,
                                                                  capsys):
    victim = sorted((results_copy / "cells").glob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:50])
    assert main(_bench(bench_spec, results_copy)) == 0
    out, err = capsys.readouterr()
    (line,) = err.strip().splitlines()
    assert re.fullmatch(rf"riskopt: warning: {re.escape(str(victim))} is corrupt \(unreadable "
                        rf"parquet: .*\); moved aside to {re.escape(victim.name)}\.corrupt-\S+,"
                        r" it will be recomputed", line), line
    assert "1 reused, 1 run now, 0 failed" in out
    assert not list(results_copy.rglob("*.tmp"))


def test_bench_run_rejects_the_multiprocessing_backend(bench_spec, tmp_path, capsys):
    _error(capsys, _bench(bench_spec, tmp_path / "r", "--backend", "multiprocessing"),
           "--backend multiprocessing cannot hand back each run as it ends", "use loky")
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------------------- umask, failures
@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600)])
@pytest.mark.parametrize("command", ["fit", "predict", "evaluate"])
def test_outputs_honour_the_umask(command, mask, mode, files, tmp_path, capsys):
    dest = tmp_path / "result.out"
    old = os.umask(mask)
    try:
        assert main(COMMANDS[command](files, dest)) == 0
    finally:
        os.umask(old)
    assert oct(dest.stat().st_mode & 0o777) == oct(mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.out"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(files, tmp_path, capsys,
                                                            monkeypatch):
    import errno
    import os

    model = tmp_path / "m.joblib"
    model.write_bytes(b"old model")

    def full(fd):  # the disk fills while the model is flushed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    _error(capsys, COMMANDS["fit"](files, model),
           f"--out: cannot write {model}: no space left on the device; free some space or "
           "write elsewhere")
    assert model.read_bytes() == b"old model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.joblib"]
