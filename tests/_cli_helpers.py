"""Helpers shared by the CLI tests (test_cli, test_faults_cli, test_faults_round3,
test_faults_runs): run the CLI and expect one error line, a small training table with the
models fitted on it, a folder where nothing can be written, and a stochastic solver for the
yacht runs."""
import os
import re
from pathlib import Path

import numpy as np
import pytest

import riskopt as ro
from riskopt.bench import _io
from riskopt.cli import main


def error_line(capsys, argv, *fragments):
    """Run the CLI on ``argv`` (items made ``str``): exit status 2 and one
    ``riskopt: error:`` line on stderr containing every fragment (text or compiled regex)."""
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1 and lines[0].startswith("riskopt: error: "), err
    for f in fragments:
        if isinstance(f, re.Pattern):
            assert f.search(lines[0]), (f.pattern, lines[0])
        else:
            assert f in lines[0], (f, lines[0])
    return lines[0]


def frame(n=60, seed=0, groups=True):
    """Features ``a, b`` (normal), optional group ``g`` (3 values), text ``s``, regression
    target ``y`` and its sign as text labels ``lab``."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    df = pd.DataFrame(rng.normal(size=(n, 2)), columns=["a", "b"])
    if groups:
        df["g"] = rng.integers(0, 3, n)
    df["s"] = np.where(rng.random(n) < 0.5, "f", "m")
    df["y"] = df["a"] + 2 * df["b"] + rng.normal(size=n)
    df["lab"] = np.where(df["y"] > 0, "p", "n")
    return df


def fitted_files(folder, df, suffix, reg_features=("a", "b")):
    """``df`` saved as ``folder/train.csv`` and the regression (``y``) / classification
    (``lab``) models ``riskopt fit`` makes of it (``reg<suffix>``, ``clf<suffix>``)."""
    data = folder / "train.csv"
    df.to_csv(data, index=False)
    reg, clf = folder / f"reg{suffix}", folder / f"clf{suffix}"
    assert main(["fit", str(data), "--target", "y", "--features", *reg_features, "--quiet",
                 "--out", str(reg)]) == 0
    assert main(["fit", str(data), "--target", "lab", "--features", "a", "b", "--quiet",
                 "--out", str(clf)]) == 0
    return {"data": data, "reg": reg, "clf": clf, "df": df, "dir": folder}


def readonly_dir(tmp_path):
    """A folder where no file can be created (chmod 555, or /sys when root ignores modes)."""
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return d
    try:
        _io.check_output_file("/sys/riskopt-probe")
    except _io.OutputError:
        return Path("/sys")
    pytest.skip("no read-only folder available to root here")


def solver_for_yacht():
    """A registered stochastic solver and a shift cost it accepts (None if there is none)."""
    data = ro.datasets.load("yacht")
    for name in ["prospect", "lsvrg", "sgd"] + ro.solvers.available():
        if name == "lbfgs" or name not in ro.solvers.available():
            continue
        for nu in (0.5, 0.0):
            obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=nu), data.X_train[:30],
                               data.y_train[:30], l2_reg=0.1)
            try:
                ro.solvers.get(name, lr=0.01)._check_objective(obj)
            except ValueError:
                continue
            return name, nu
    return None
