"""`riskopt fit --constraint ... --sensitive ...` and `riskopt evaluate` on its model
(riskopt._cli_fair): the constraint holds on the training rows, evaluate prints it, errors."""
import numpy as np
import pandas as pd
import pytest

from riskopt import fairness
from riskopt._cli_fair import CONSTRAINTS
from riskopt.cli import main


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    n = 400
    s = rng.choice(["a", "b", "c"], n)
    x1 = rng.normal(size=n) + (s == "a")
    x2 = rng.normal(size=n)
    y = ((x1 + x2 + rng.normal(size=n)) > 0.5).astype(int)
    path = tmp_path / "train.csv"
    pd.DataFrame({"x1": x1, "x2": x2, "sex": s, "y": y}).to_csv(path, index=False)
    return path


def test_fit_with_a_constraint_and_evaluate_it(table, tmp_path, capsys):
    model = tmp_path / "m.joblib"
    rc = main(["fit", str(table), "--target", "y", "--risk", "mean", "--constraint",
               "demographic_parity", "--sensitive", "sex", "--constraint-tol", "0.03",
               "--quiet", "--out", str(model)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "constraint: demographic_parity <= 0.03 over sex (3 groups)" in out
    hard = float(out.split("hard rates: ")[1].split()[0])
    assert main(["evaluate", str(model), str(table), "--format", "json"]) == 0
    import json

    res = json.loads(capsys.readouterr().out)
    row = [r for r in res["fairness"] if r["metric"].startswith("constraint")]
    # the hard-rate difference on the training rows, as fit printed it (4 digits)
    assert len(row) == 1 and row[0]["value"] == pytest.approx(hard, abs=1e-4)


def test_constraint_errors(table, tmp_path, capsys):
    model = tmp_path / "m.joblib"
    assert main(["fit", str(table), "--target", "y", "--constraint", "equalized_odds",
                 "--out", str(model)]) != 0
    assert "needs --sensitive" in capsys.readouterr().err
    assert main(["fit", str(table), "--target", "y", "--sensitive", "sex",
                 "--out", str(model)]) != 0
    assert "give --constraint" in capsys.readouterr().err
    assert main(["fit", str(table), "--target", "y", "--constraint", "equalized_odds",
                 "--sensitive", "nope", "--out", str(model)]) != 0
    assert "no column 'nope'" in capsys.readouterr().err


def test_the_cli_lists_the_library_constraints():
    assert CONSTRAINTS == fairness.CONSTRAINT_SPECS
