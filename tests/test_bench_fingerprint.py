"""Data fingerprints of a results folder (:mod:`riskopt.bench._fingerprint`): a data set that
changed under an unchanged spec (new file, loader change) is never restored from the table,
reused from the cells/ cache or given its old f*; a table written before fingerprints existed
still restores its runs, with a warning."""
import dataclasses
import json
import shutil
import warnings

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("joblib")

import riskopt as ro  # noqa: E402
import riskopt.bench as rb  # noqa: E402
from riskopt import datasets  # noqa: E402
from riskopt.bench import _fingerprint, _record, problems, runner  # noqa: E402
from riskopt.bench._io import RecoveryWarning  # noqa: E402
from test_bench_record import _cells, _run, _spec  # noqa: E402

pytestmark = pytest.mark.skipif("sgd" not in ro.solvers.available(), reason="needs sgd")


def _clear_caches():
    for f in (problems._load, problems.load_dataset, problems.load_test_split,
              problems.load_groups, problems._build_cached, _fingerprint.dataset_fingerprint):
        f.cache_clear()


@pytest.fixture
def changed_data(monkeypatch):
    """yacht's training targets scaled by 1 + 1e-6, as a loader change would: same name, same spec."""
    real = datasets.load

    def load(name, *args, **kw):
        d = real(name, *args, **kw)
        if name == "yacht":
            d = dataclasses.replace(d, y_train=np.asarray(d.y_train, float) * (1 + 1e-6))
        return d

    monkeypatch.setattr(datasets, "load", load)
    _clear_caches()
    yield
    monkeypatch.undo()
    _clear_caches()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    _clear_caches()
    spec = _spec("iterate")
    out = tmp_path_factory.mktemp("fp") / "res"
    res = _run(spec, out)
    assert res.complete
    return spec, out


def _table_fp(out):
    return _fingerprint.stored(pq.read_schema(out / "results.parquet").metadata)


def test_every_piece_carries_the_fingerprint_of_its_data(finished):
    spec, out = finished
    fp = _fingerprint.spec_fingerprints(spec)["yacht"]
    assert len(fp) == 16 and _table_fp(out) == {"yacht": fp}
    for p in _cells(out).values():
        assert _fingerprint.stored(pq.read_schema(p).metadata) == fp
    assert all(r["data"] == fp for r in json.loads((out / "fstar.json").read_text()).values())


def test_the_fingerprint_sees_a_small_change_of_the_targets(finished, changed_data):
    spec, out = finished
    new = _fingerprint.spec_fingerprints(spec)["yacht"]
    assert new != _table_fp(out)["yacht"]


def test_changed_data_is_not_restored_from_the_table(finished, changed_data, tmp_path):
    spec, out = finished
    new = tmp_path / "clone"
    shutil.copytree(out, new, ignore=shutil.ignore_patterns("cells"))
    n = len(rb.enumerate_cells(spec))
    assert runner.status(spec, new) == (n, 0)
    with pytest.warns(RecoveryWarning, match="runs on yacht are not restored: its data set "
                                             "changed"):
        res = rb.run(spec, out=new, jobs=1, progress=False, plot=False)
    assert res.complete and res.n_reused == 0 and res.n_run == n
    old_t, new_t = (pd.read_parquet(p / "results.parquet") for p in (out, new))
    assert (old_t["f_star_ref"] != new_t["f_star_ref"]).all()  # f* recomputed as well
    assert _table_fp(new)["yacht"] != _table_fp(out)["yacht"]


def test_changed_data_reruns_the_cached_cells(finished, changed_data, tmp_path):
    spec, out = finished
    new = tmp_path / "copy"
    shutil.copytree(out, new)
    n = len(rb.enumerate_cells(spec))
    assert runner.status(spec, new) == (n, 0)
    with pytest.warns(RecoveryWarning, match="data set changed since it was computed"):
        res = rb.run(spec, out=new, jobs=1, progress=False, plot=False)
    assert res.complete and res.n_reused == 0 and res.n_run == n
    fp = _table_fp(new)["yacht"]
    assert all(_fingerprint.stored(pq.read_schema(p).metadata) == fp
               for p in _cells(new).values())


def test_unchanged_data_restores_everything_with_its_fingerprint(finished, tmp_path):
    spec, out = finished
    new = tmp_path / "clone"
    shutil.copytree(out, new, ignore=shutil.ignore_patterns("cells"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecoveryWarning)  # nothing to repair or to doubt
        res = rb.run(spec, out=new, jobs=1, progress=False, plot=False)
    assert res.complete and res.n_run == 0
    for name, p in _cells(out).items():
        assert pq.read_schema(_cells(new)[name]).metadata == pq.read_schema(p).metadata


def test_a_table_without_fingerprints_restores_with_a_warning(finished, tmp_path):
    """Migration: a table written before fingerprints (every committed one) still restores
    its runs; the warning says the data is unchecked, and the table written next has them."""
    spec, out = finished
    new = tmp_path / "legacy"
    shutil.copytree(out, new, ignore=shutil.ignore_patterns("cells"))
    t = pq.read_table(new / "results.parquet")
    meta = {k: v for k, v in t.schema.metadata.items() if k != _fingerprint.DATA_KEY}
    pq.write_table(t.replace_schema_metadata(meta), new / "results.parquet")
    assert _record.table_data(new / "results.parquet") is None
    n = len(rb.enumerate_cells(spec))
    with pytest.warns(RecoveryWarning, match="records no data fingerprints"):
        res = rb.run(spec, out=new, jobs=1, progress=False, plot=False)
    assert res.complete and res.n_run == 0 and res.n_reused == n
    assert _table_fp(new) == _table_fp(out)
