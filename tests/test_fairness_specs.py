"""The fairness and shift specs (SOREL Table 2, Prospect Fig. 4, iwildcam shift, OOD on adult)
run end to end on a reduced budget (first dataset, two objectives, one solver and step size, one
seed, two passes) and record their metrics."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from riskopt.bench import load_spec, run
from riskopt.bench import record_metrics as rm
from conftest import require_data

# one default row per spec family (prospect_fig4: the law row, ~2x cheaper than diabetes)
SPECS = ["sorel_table2_law_short", pytest.param("sorel_table2_adult_short", marks=pytest.mark.slow),
         pytest.param("prospect_fig4_diabetes", marks=pytest.mark.slow),
         "prospect_fig4_law", pytest.param("ood_adult", marks=pytest.mark.slow),
         pytest.param("shift_iwildcam", marks=pytest.mark.slow)]


@pytest.mark.parametrize("name", SPECS)
def test_spec_runs_reduced_and_records_metrics(name, tmp_path):
    spec = load_spec(name)
    require_data(spec.datasets[0])
    sol = dataclasses.replace(spec.solvers[0], lr=[spec.solvers[0].configs()[0]["lr"]], grid={})
    small = dataclasses.replace(spec, datasets=spec.datasets[:1], objectives=spec.objectives[:2],
                                solvers=[sol], seeds=spec.seeds[:1], passes=2,
                                passes_by_dataset={}, record=dataclasses.replace(
                                    spec.record, every=1), selection_rule="final", source=None)
    res = run(small, out=tmp_path / name, jobs=1, progress=False)
    assert res.complete, res.errors
    t = pd.read_parquet(res.table)
    for m in spec.record.metrics:
        col = t[rm.column(m)].to_numpy(dtype=float)
        assert np.all(np.isfinite(col)), m
        assert np.all(col >= -1.0), m
    assert (tmp_path / name / "metrics_final.csv").exists()


def test_sorel_table2_script_adds_the_exact_full_batch_rows(tmp_path):
    """``benchmarks/sorel_table2.py`` on a reduced law run: one row per (risk, solver) plus
    the exact full-batch (L-BFGS reference) row of each risk, its test SMD computed as the
    runner records it, its improvement over ERM by the table's formula."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "sorel_table2.py"
    mod_spec = importlib.util.spec_from_file_location("sorel_table2", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    spec = load_spec("sorel_table2_law_short")
    require_data(*spec.datasets)
    sol = dataclasses.replace(spec.solvers[0], lr=[spec.solvers[0].configs()[0]["lr"]], grid={})
    small = dataclasses.replace(spec, objectives=spec.objectives[:2], solvers=[sol],
                                seeds=spec.seeds[:1], passes=2, passes_by_dataset={},
                                selection_rule="final", source=None)
    res = run(small, out=tmp_path / "t2", jobs=1, progress=False)
    assert res.complete, res.errors
    df, erm, metric = mod.table2(tmp_path / "t2")
    assert metric == "test_smd:race"
    ex = df[df["solver"] == "lbfgs"]
    assert list(ex["objective"]) == ["mean", spec.objectives[1].risk]
    assert np.all(np.isfinite(ex["test_metric"])) and np.all(ex["test_metric"] > 0)
    risky = ex.iloc[1]
    assert risky["improvement_vs_erm_%"] == pytest.approx(
        100 * (abs(erm) - abs(risky["test_metric"])) / abs(erm))
    assert "| mean | lbfgs |" in mod.markdown("t2", df, erm, metric)
