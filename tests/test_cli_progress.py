"""The progress display of `riskopt fit`: solver, updates of the cap, objective and relative
(sub)gradient norm on standard error; off unless standard error is a terminal or --progress;
the fitted model is the same with and without it."""
import re
import sys

import numpy as np
import pandas as pd
import pytest

from riskopt._cli_fit import GAP_HEADER
from riskopt.cli import main

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
TIME = re.compile(r"time: [0-9.]+ s")


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    n = 200
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, 2.0, 3.0]) + rng.standard_t(3, n)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    df["colour"] = rng.choice(["red", "blue"], n)
    df["y"] = y
    path = tmp_path / "train.csv"
    df.to_csv(path, index=False)
    return path


def _fit(capsys, path, out, *extra):
    rc = main(["fit", str(path), "--target", "y", "--out", str(out), *extra])
    stdout, stderr = capsys.readouterr()
    assert rc == 0, stderr
    return stdout, ANSI.sub("", stderr)


def _summary(stdout):
    line = next(ln for ln in stdout.splitlines() if ln.startswith("objective:"))
    objective = float(line.split(";")[0].split()[1])
    updates = int(line.split("updates:")[1].split(";")[0])
    return objective, updates


@pytest.mark.parametrize("solver, risk", [("lbfgs", "cvar:0.2"),           # L-BFGS
                                          ("auto", "cvar:0.2"),            # Newton
                                          ("prospect", "cvar:0.5,chi2=1")])  # stochastic
def test_progress_table_and_the_same_model(table, tmp_path, capsys, solver, risk):
    args = ("--risk", risk, "--solver", solver, "--max-iter", "200")
    model = tmp_path / "m.joblib"
    out_off, err_off = _fit(capsys, table, model, *args)
    saved_off = model.read_bytes()
    out_on, err_on = _fit(capsys, table, model, *args, "--progress")
    # off (standard error is not a terminal here): no display, the same lines as before
    assert GAP_HEADER not in err_off and "|grad F|/" not in err_off
    # the fitted model is byte for byte the same, and so is what is printed on stdout
    assert model.read_bytes() == saved_off
    assert TIME.sub("", out_on) == TIME.sub("", out_off)
    # the final frame of the table: its header names the columns (the gap column split over
    # two lines), the row the solver, its updates of the cap and the final objective
    assert "objective" in err_on and "iter" in err_on and "elapsed" in err_on
    assert "|grad F|/" in err_on and "|grad F(0)|" in err_on
    objective, updates = _summary(out_on)
    row = [ln for ln in err_on.splitlines() if f"{updates}/200" in ln][-1]  # the last frame
    assert {"lbfgs": "L-BFGS", "auto": "newton", "prospect": "prospect"}[solver] in row
    from riskopt.model_io import load_model

    trace = load_model(model)["estimator"].steps[-1][1].objective_trace_
    shown = float(row.split(f"{updates}/200")[1].split()[0])
    assert shown == pytest.approx(np.nanmin(trace), rel=1e-5)  # the returned (best) iterate
    assert shown == pytest.approx(objective, rel=1e-3)
    gap = float(row.split(f"{updates}/200")[1].split()[1])
    assert 0 <= gap < 1


def test_stochastic_fit_reports_every_pass_without_rich(table, tmp_path, capsys, monkeypatch):
    """Without rich the display is plain lines (at most one a second, and the final one); the
    convergence monitor that autotune uses is swapped only during the fit."""
    from riskopt.solvers import autotune

    for mod in ("rich", "rich.console", "rich.live"):
        monkeypatch.setitem(sys.modules, mod, None)  # import rich -> ImportError
    before = autotune.ConvergenceMonitor
    seen = []
    import riskopt._cli_fit as cli_fit

    record = cli_fit._FitProgress.record
    labels = []
    monkeypatch.setattr(cli_fit._FitProgress, "record",
                        lambda self, mon: (record(self, mon), seen.append(self.k),
                                           labels.append(self._solver())))
    out, err = _fit(capsys, table, tmp_path / "m.joblib", "--risk", "cvar:0.5,chi2=1",
                    "--solver", "prospect", "--max-iter", "50", "--progress")
    assert autotune.ConvergenceMonitor is before
    objective, updates = _summary(out)
    assert seen[0] == 0 and max(seen) == updates  # one report per recorded update
    # the step-size search (autotune's candidates, about two passes each), then the chosen one
    tries = range(1, len(autotune.LR_CANDIDATES) + 1)
    assert list(dict.fromkeys(labels)) == [f"prospect (step-size try {k})" for k in tries] \
        + ["prospect"]
    lines = [ln for ln in err.splitlines() if ln.startswith("riskopt: fit: ")]
    assert lines and lines[0].startswith("riskopt: fit: prospect")
    assert f"iter {updates}/50" in lines[-1] and GAP_HEADER in lines[-1]
    assert float(lines[-1].split("objective ")[1].split()[0]) == pytest.approx(objective,
                                                                             rel=1e-5)


def test_quiet_and_progress_contradict(table, tmp_path, capsys):
    rc = main(["fit", str(table), "--target", "y", "--quiet", "--progress", "--out",
               str(tmp_path / "m.joblib")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--quiet" in err and "--progress" in err
    assert not (tmp_path / "m.joblib").exists()


def test_progress_is_documented_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--progress" in text and "--quiet" in text
    assert "|grad F|/|grad F(0)|" in text
