"""The record and the cache of a results folder: ``riskopt bench run`` restores the finished
cells of a folder whose ``cells/`` cache is missing from ``results.parquet`` (bit for bit),
reruns only what an edited spec changed, and recomputes everything with ``fresh``."""
import json
import shutil
import warnings

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("joblib")

import riskopt as ro  # noqa: E402
import riskopt.bench as rb  # noqa: E402
from riskopt.bench import _record, runner  # noqa: E402
from riskopt.bench._io import RecoveryWarning  # noqa: E402
from riskopt.bench.spec import spec_from_dict  # noqa: E402

pytestmark = pytest.mark.skipif("sgd" not in ro.solvers.available(), reason="needs sgd")


def _spec(record="profile", seeds=(0, 1), lrs=(0.01, 1e4), passes=2):
    d = {"name": "rec", "description": "record / cache test", "datasets": ["yacht"],
         "seeds": list(seeds), "passes": passes, "lr": list(lrs), "shift_cost": 1.0,
         "objectives": ["cvar:0.5"], "solvers": ["sgd"], "plot": {"x": ["passes"]}}
    if record != "profile":
        d["record"] = {"value": record}
    return spec_from_dict(d)


def _run(spec, out, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        return rb.run(spec, out=out, jobs=1, progress=False, plot=False, **kw)


def _cells(out):
    return {p.name: p for p in sorted((out / "cells").glob("*.parquet"))}


def _bits(frame):
    """A frame's columns as raw bytes (floats bit for bit, NaN only equal to the same NaN)."""
    return {c: (str(frame[c].dtype), frame[c].to_numpy().tobytes()
                if frame[c].dtype.kind in "fiub" else frame[c].tolist()) for c in frame.columns}


@pytest.fixture(scope="module", params=["profile", "iterate"])
def finished(request, tmp_path_factory):
    """A finished folder (one diverging lr per seed, so NaN / inf values are in the table)."""
    spec = _spec(request.param)
    out = tmp_path_factory.mktemp(f"finished_{request.param}") / "res"
    res = _run(spec, out)
    assert res.complete and res.n_run == len(rb.enumerate_cells(spec))
    return spec, out


@pytest.fixture
def clone(finished, tmp_path):
    """The folder as a fresh clone has it: the record without the cells/ cache."""
    spec, out = finished
    new = tmp_path / "clone"
    shutil.copytree(out, new, ignore=shutil.ignore_patterns("cells"))
    assert not (new / "cells").exists()
    return spec, out, new


def test_missing_cache_is_restored_bit_for_bit_without_running(clone, monkeypatch):
    spec, out, new = clone
    n = len(rb.enumerate_cells(spec))
    assert runner.status(spec, new) == (n, n)  # restorable runs count as finished

    def no_run(task):
        raise AssertionError("a restorable cell was rerun")

    monkeypatch.setattr(runner, "_run_cell", no_run)
    said = []
    res = rb.run(spec, out=new, jobs=1, progress=False, plot=False, echo=said.append)
    assert res.complete and res.n_run == 0 and res.n_reused == n
    assert any(f"restored {n} finished run(s) from results.parquet" in s for s in said)
    orig, back = _cells(out), _cells(new)
    assert sorted(back) == sorted(orig)
    for name, path in orig.items():
        a, b = pd.read_parquet(path), pd.read_parquet(back[name])
        assert _bits(a) == _bits(b), name
        key = lambda p: json.loads(pq.read_schema(p).metadata[b"riskopt.cell"])  # noqa: E731
        assert key(path) == key(back[name])
    # the table written from the restored cells is the record, bit for bit (times included)
    assert _bits(pd.read_parquet(out / "results.parquet")) == \
        _bits(pd.read_parquet(new / "results.parquet"))
    diverged = pd.read_parquet(new / "results.parquet")["diverged"]
    assert diverged.any() and not diverged.all()  # both kinds of run went through


def test_edited_spec_reruns_only_the_changed_cells(clone):
    spec, _, new = clone
    edited = _spec(spec.record.value, seeds=(0, 1, 2))  # one more seed
    old_ids = {c.id for c in rb.enumerate_cells(spec)}
    new_cells = rb.enumerate_cells(edited)
    fresh_ids = [c.id for c in new_cells if c.id not in old_ids]
    assert len(fresh_ids) == 2 and len(new_cells) == 6
    assert runner.status(edited, new) == (6, 4)
    res = _run(edited, new)
    assert res.complete and res.n_run == 2 and res.n_reused == 4
    assert set(pd.read_parquet(new / "results.parquet")["seed"]) == {0, 1, 2}


def test_changed_budget_restores_nothing(clone):
    spec, _, new = clone
    edited = _spec(spec.record.value, passes=3)  # every cell's content changes
    res = _run(edited, new)
    assert res.complete and res.n_run == 4 and res.n_reused == 0


def test_fresh_recomputes_everything(clone):
    spec, _, new = clone
    res = _run(spec, new, fresh=True)
    assert res.complete and res.n_run == 4 and res.n_reused == 0


def test_unreadable_table_means_a_rerun_with_a_warning(clone):
    spec, _, new = clone
    (new / "results.parquet").write_bytes(b"not parquet")
    with pytest.warns(RecoveryWarning, match="results.parquet: unreadable"):
        assert _record.restorable(rb.enumerate_cells(spec), new / "results.parquet") == set()
    res = _run(spec, new)
    assert res.complete and res.n_run == 4


def test_corrupt_cell_and_error_record_are_not_overridden_by_the_table(finished, tmp_path):
    """Only a cell absent from the cache is restored: a corrupt file is recomputed and a
    recorded error retried, as before."""
    spec, out = finished
    new = tmp_path / "res"
    shutil.copytree(out, new)
    a, b = list(_cells(new).values())[:2]
    a.write_bytes(b"garbage")
    b.unlink()
    b.with_name(b.name.replace(".parquet", ".error.json")).write_text('{"error": "x"}')
    assert runner.status(spec, new) == (4, 2)
    res = _run(spec, new)
    assert res.complete and res.n_run == 2 and res.n_reused == 2


def test_consolidation_check_passes_and_catches_a_changed_value(finished, tmp_path):
    """scripts/consolidate_results.py: the rebuilt cells equal the files and merge back to the
    table; one flipped bit in a cell file is reported."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "consolidate_results.py"
    spec_ = importlib.util.spec_from_file_location("consolidate_results", path)
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    spec, out = finished
    new = tmp_path / "res"
    shutil.copytree(out, new)
    mod.report_text = lambda folder: [(0, "same", "")]  # no CLI subprocess here
    assert mod.check(new, say=lambda s: None) == []
    victim = next(p for p in _cells(new).values()
                  if np.isfinite(pd.read_parquet(p)["value"].iloc[1]))
    f = pd.read_parquet(victim)
    f.loc[1, "value"] = np.nextafter(f.loc[1, "value"], np.inf)
    f.to_parquet(victim)
    fails = mod.check(new, say=lambda s: None)
    assert any("column(s) ['value'] differ" in m for m in fails)


def test_consolidation_seals_only_f_star_records_the_table_confirms(finished, tmp_path):
    """An unsealed f* record (written before records had a checksum) fails the check, since
    `bench run` would drop and recompute it; --seal checksums it when its f_star is the table's
    f_star_ref bit for bit, and refuses a record one ulp off."""
    import importlib.util
    from pathlib import Path

    from riskopt.bench import _state

    path = Path(__file__).resolve().parent.parent / "scripts" / "consolidate_results.py"
    spec_ = importlib.util.spec_from_file_location("consolidate_results", path)
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    mod.report_text = lambda folder: [(0, "same", "")]
    spec, out = finished
    for ulp in (False, True):
        new = tmp_path / f"res{int(ulp)}"
        shutil.copytree(out, new)
        fpath = new / "fstar.json"
        data = json.loads(fpath.read_text())
        sealed = dict(data)
        for k in data:  # as an older riskopt wrote it
            data[k] = {key: v for key, v in data[k].items() if key != "checksum"}
            if ulp:
                data[k]["f_star"] = float(np.nextafter(data[k]["f_star"], np.inf))
        fpath.write_text(json.dumps(data))
        assert any("unsealed" in m for m in mod.check(new, say=lambda s: None))
        fails = mod.check(new, say=lambda s: None, seal=True)
        got = json.loads(fpath.read_text())
        if ulp:
            assert any("not the table's f_star_ref" in m for m in fails)
            assert all("checksum" not in r for r in got.values())
        else:
            assert fails == []
            assert got == sealed  # the same record and checksum `bench run` writes
            assert set(_state.load_fstar(fpath, repair=False)) == set(sealed)
            shutil.rmtree(new / "cells")  # a folder already untracked: checks 3 and 4 only
            assert mod.check(new, say=lambda s: None, seal=True) == []
