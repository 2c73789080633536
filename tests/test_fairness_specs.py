"""The fairness and shift specs (SOREL Table 2, Prospect Fig. 4, iwildcam shift, OOD on adult)
run end to end on a reduced budget (first dataset, two objectives, one solver and step size, one
seed, two passes) and record their metrics."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from riskopt.bench import load_spec, run
from riskopt.bench import record_metrics as rm

SPECS = ["sorel_table2_law_short", pytest.param("sorel_table2_adult_short", marks=pytest.mark.slow),
         "prospect_fig4_diabetes",
         "prospect_fig4_law", pytest.param("ood_adult", marks=pytest.mark.slow),
         pytest.param("shift_iwildcam", marks=pytest.mark.slow)]


@pytest.mark.parametrize("name", SPECS)
def test_spec_runs_reduced_and_records_metrics(name, tmp_path):
    spec = load_spec(name)
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
