"""A results folder whose table is a filtered view of its parent's (``riskopt.bench._view``):
``make_view`` records it only when it equals the folder's table bit for bit; ``report``,
``plot``, the reproduce checks and ``bench run`` / ``status`` read it as the table; a parent
that changed since is a clear error; and the committed views give back, row for row, the
tables they replaced."""
import json
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("joblib")

import riskopt as ro  # noqa: E402
import riskopt.bench as rb  # noqa: E402
from riskopt.bench import _claims, _script_checks, _view, runner  # noqa: E402
from riskopt.bench._io import RecoveryWarning  # noqa: E402
from riskopt.bench.report import build_report  # noqa: E402
from riskopt.bench.spec import spec_from_dict  # noqa: E402

pytestmark = pytest.mark.skipif("sgd" not in ro.solvers.available(), reason="needs sgd")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: the commit whose tree still held the committed views' own tables
BEFORE_VIEWS = "fc0aa21c"


def _spec(name, datasets):
    return spec_from_dict({
        "name": name, "description": "view test", "datasets": list(datasets),
        "seeds": [0, 1], "passes": 2, "lr": [0.01, 1e4], "shift_cost": 1.0,
        "objectives": ["cvar:0.5"], "solvers": ["sgd"], "plot": {"x": ["passes"]}})


def _run(spec, out, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        return rb.run(spec, out=out, jobs=1, progress=False, plot=False, **kw)


def _bits(frame):
    """Every column's dtype and values (numbers as raw bytes: NaN only equals the same NaN)."""
    return {c: (str(frame[c].dtype), frame[c].to_numpy().tobytes()
                if frame[c].dtype.kind in "fiub" else frame[c].tolist()) for c in frame.columns}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A parent folder on yacht + energy and a reduced one on yacht alone, made as the
    committed ``_3sets`` folders were: from the parent's cells (a cell's id hashes its run,
    not the spec's name, so the reduced spec reuses them and runs nothing)."""
    root = tmp_path_factory.mktemp("views")
    parent, child = root / "par", root / "par_1set"
    assert _run(_spec("par", ["yacht", "energy"]), parent).complete
    shutil.copytree(parent / "cells", child / "cells")
    res = _run(_spec("par_1set", ["yacht"]), child)
    assert res.complete and res.n_run == 0
    return parent, child


@pytest.fixture
def view(pair, tmp_path):
    """Copies of the two folders, the reduced one turned into a view (its table set aside)."""
    parent, child = (Path(shutil.copytree(p, tmp_path / p.name,
                                          ignore=shutil.ignore_patterns("cells")))
                     for p in pair)
    table = pd.read_parquet(child / _view.TABLE)
    entry = _view.make_view(child, parent)
    (child / _view.TABLE).unlink()
    return parent, child, table, entry


def test_the_view_is_the_table_it_replaces(view):
    parent, child, table, entry = view
    assert entry["view_of"] == "../par/results.parquet"
    assert entry["where"] == {"dataset": ["yacht"]} and entry["set"] == {"spec": "par_1set"}
    assert json.loads((child / "metadata.json").read_text())["files"]["table"] == entry
    assert _view.table_path(child) == child / "../par/results.parquet"
    got = _view.read_table(child)
    assert _bits(got) == _bits(table) and entry["rows"] == len(table)
    assert list(_view.read_table(child, columns=["seed", "value"]).columns) == ["seed", "value"]
    assert len(pd.read_parquet(parent / _view.TABLE)) > len(table)  # it did filter


def test_readers_go_through_the_view(view, tmp_path):
    parent, child, table, _ = view
    text, csv = build_report(child, relative_to=child), build_report(child, fmt="csv")
    assert "## Selected configurations" in text and len(csv.splitlines()) > 1
    assert _script_checks.last_selected_points(child) is not None
    assert _claims._passes_to(child, 1e-6) is not None
    # the same report as the folder had with its own table
    own = tmp_path / "own"
    shutil.copytree(child, own)
    table.to_parquet(own / _view.TABLE)
    assert build_report(own, fmt="csv") == csv
    from riskopt.bench.figures import _load

    assert _bits(_load(child)[1]) == _bits(_load(child / _view.TABLE)[1])


def test_bench_run_restores_from_the_parent_and_writes_the_same_table(view, monkeypatch):
    parent, child, table, _ = view
    spec = _spec("par_1set", ["yacht"])
    n = len(rb.enumerate_cells(spec))
    assert runner.status(spec, child) == (n, n)

    def no_run(task):
        raise AssertionError("a cell the parent table holds was rerun")

    monkeypatch.setattr(runner, "_run_cell", no_run)
    said = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        res = rb.run(spec, out=child, jobs=1, progress=False, plot=False, echo=said.append)
    assert res.complete and res.n_run == 0 and res.n_reused == n
    assert any("../par/results.parquet (this folder's table is a view of it)" in s
               for s in said)
    assert _bits(pd.read_parquet(child / _view.TABLE)) == _bits(table)
    # the folder now has a table of its own again, and its metadata says so
    assert json.loads((child / "metadata.json").read_text())["files"]["table"] == \
        "results.parquet"
    assert _view.view_entry(child) is None


def test_a_changed_parent_is_an_error_not_other_numbers(view):
    parent, child, _, _ = view
    t = pd.read_parquet(parent / _view.TABLE)
    i = int(np.flatnonzero(t["dataset"].to_numpy() == "yacht")[-1])
    t.loc[i, "value"] = np.nextafter(t.loc[i, "value"], np.inf)  # one ulp
    t.to_parquet(parent / _view.TABLE)
    with pytest.raises(_view.ViewError, match="changed since the view was made"):
        _view.read_table(child)
    with pytest.raises(_view.ViewError):
        build_report(child)
    (parent / _view.TABLE).unlink()
    with pytest.raises(FileNotFoundError, match="is missing"):
        _view.read_table(child)


def test_make_view_refuses_a_table_that_is_not_the_parents_rows(pair, tmp_path):
    parent, child = (Path(shutil.copytree(p, tmp_path / p.name,
                                          ignore=shutil.ignore_patterns("cells")))
                     for p in pair)
    t = pd.read_parquet(child / _view.TABLE)
    t.loc[3, "time"] = t.loc[3, "time"] * 2
    t.to_parquet(child / _view.TABLE)
    meta = (child / "metadata.json").read_text()
    with pytest.raises(_view.ViewError, match="columns that differ: \\['time'\\]"):
        _view.make_view(child, parent)
    assert (child / "metadata.json").read_text() == meta  # nothing recorded


def test_digest_sees_every_bit_and_ignores_the_dtype_spelling():
    a = pd.DataFrame({"x": [0.0, np.nan, 1.5], "s": ["a", "b", None], "k": [1, 2, 3]})
    b = a.copy()
    b["x"] = [-0.0, np.nan, 1.5]
    assert _view.digest(a) != _view.digest(b)  # the sign bit of a zero
    c = a.copy()
    c["s"] = c["s"].astype(object)
    assert _view.digest(a) == _view.digest(c)
    assert _view.digest(a) != _view.digest(a[["k", "s", "x"]])  # column order counts


def _committed_views():
    return sorted(p.parent.name for p in RESULTS.glob("*/metadata.json")
                  if _view.view_entry(p.parent) is not None)


def test_the_committed_views_exist():
    assert len(_committed_views()) >= 6


@pytest.mark.parametrize("name", _committed_views())
def test_a_committed_view_gives_back_the_table_it_replaced(name):
    """The view's rows have the digest taken from the table it replaced (read_table checks it);
    where the git history is there (not a shallow clone), that table itself, bit for bit."""
    folder = RESULTS / name
    got = _view.read_table(folder)
    entry = _view.view_entry(folder)
    assert len(got) == entry["rows"] and _view.digest(got) == entry["digest"]
    assert set(got["spec"]) == {name} and set(got["dataset"]) == set(entry["where"]["dataset"])
    path = f"benchmarks/results/{name}/results.parquet"
    blob = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE_VIEWS}:{path}"],
                          capture_output=True)
    if blob.returncode != 0:
        pytest.skip(f"{BEFORE_VIEWS}:{path} is not in this clone's history")
    import io

    assert _bits(got) == _bits(pd.read_parquet(io.BytesIO(blob.stdout)))
