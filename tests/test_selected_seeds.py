"""benchmarks/selected_seeds.py: the per-seed values of the selected configurations of a
results folder that kept only its selection, and the report reading them."""
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from riskopt.bench import ObjectiveSpec, SolverSpec, Spec, run
from riskopt.bench._claims import check_best, finals

REPO = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location(
        "selected_seeds", REPO / "benchmarks" / "selected_seeds.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """A complete small run (two solvers, two step sizes, three seeds) and its spec."""
    spec = Spec(name="seeds_demo", datasets=["yacht"], objectives=[ObjectiveSpec("esrm:2")],
                solvers=[SolverSpec("sgd", lr=[0.01, 0.1], params={"batch_size": 64}),
                         SolverSpec("prospect", lr=[0.01, 0.1])],
                seeds=[0, 1, 2], passes=4, last_passes=2)
    out = tmp_path_factory.mktemp("full") / "seeds_demo"
    assert run(spec, out=out, jobs=1, progress=False, plot=False).complete
    return spec, out


def _selection_only(full_out, tmp_path):
    """The folder as older commits kept it: selection.csv and metadata.json, no table."""
    folder = tmp_path / "seeds_demo"
    folder.mkdir()
    for name in ("selection.csv", "metadata.json"):
        shutil.copy(full_out / name, folder / name)
    return folder


def test_the_rerun_gives_the_full_runs_per_seed_values(full, tmp_path):
    spec, out = full
    folder = _selection_only(out, tmp_path)
    before = finals(folder)
    assert set(before["seed"]) == {-1}  # one value per method: no noise estimate
    df = _script().rerun_selected(spec, folder)
    t = pd.read_parquet(out / "results.parquet")
    t = t[t["selected"].astype(bool)].sort_values("update")
    last = t.groupby(["solver", "seed"]).tail(1).set_index(["solver", "seed"])
    assert len(df) == 2 * 3 and set(df["seed"]) == {0, 1, 2}
    assert (df.groupby("solver")["config"].nunique() == 1).all()  # the selected one only
    for _, r in df.iterrows():
        ref = last.loc[(r["solver"], r["seed"])]
        assert r["config"] == ref["config"]
        np.testing.assert_allclose(r["suboptimality"], ref["suboptimality"], rtol=1e-12)
    # the selection rule's score recomputed from the rerun is the committed one
    np.testing.assert_allclose(df["rerun_score"], df["committed_score"], rtol=1e-12)
    meta = json.loads((folder / "per_seed.json").read_text())
    assert meta["runs"] == 6 and meta["max_relative_score_drift"] < 1e-12
    after = finals(folder)
    assert sorted(set(after["seed"])) == [0, 1, 2]
    np.testing.assert_allclose(after.sort_values(["solver", "seed"])["value"],
                               df.sort_values(["solver", "seed"])["suboptimality"])
    _, verdict = check_best("prospect")(folder)
    assert verdict != "too few seeds"


def test_a_selected_configuration_missing_from_the_spec_is_an_error(full, tmp_path):
    spec, out = full
    folder = _selection_only(out, tmp_path)
    sel = pd.read_csv(folder / "selection.csv")
    sel.loc[sel["selected"].astype(bool).idxmax(), "config"] = "lr=7"
    sel.to_csv(folder / "selection.csv", index=False)
    with pytest.raises(SystemExit, match="not in the spec"):
        _script().rerun_selected(spec, folder)


def test_datasets_restrict_the_rerun_and_unknown_ones_are_refused(full, tmp_path):
    spec, out = full
    folder = _selection_only(out, tmp_path)
    with pytest.raises(SystemExit, match="not in the spec"):
        _script().rerun_selected(spec, folder, datasets=["energy"])
    df = _script().rerun_selected(spec, folder, datasets=["yacht"])
    assert set(df["dataset"]) == {"yacht"} and len(df) == 6
    assert json.loads((folder / "per_seed.json").read_text())["datasets"] == ["yacht"]
