"""A results folder's record and its cache: finished cells restored from ``results.parquet``.

The committed record of an experiment is its long-form table ``results.parquet`` (every
recorded point of every cell), with ``spec.json``, ``fstar.json``, ``metadata.json``, the
selection / sensitivity tables and the figures. The per-cell files ``cells/<id>.parquet`` are
a local cache (not committed): a run in a folder whose cache is missing (a fresh clone) gets
each finished cell back from the table instead of rerunning it.

How a cell is found in the table without any index stored in it: the table's schema metadata
``riskopt.spec`` is the spec that made it; its cells (:func:`~riskopt.bench._cells.
enumerate_cells`) have content-hash ids, so a cell of the current spec with the same id is the
same run (problem, solver, every hyper-parameter, seed, budget, record, initial point), and its
rows are those whose naming columns (:func:`~riskopt.bench._cells.cell_labels`) hold its
values, in table order. The cell's own columns (``TRACE_COLUMNS`` and the recorded metrics) are
copied back unchanged, so the restored file equals the one the run wrote bit for bit, except
``suboptimality`` where the merge recomputes it (``record.value != "profile"``): there the cell
held NaN, and NaN is written back. A cell whose labels are not unique in the table spec, or a
spec with ``lower_to_best`` profile records (the cell's own suboptimality is not in the table),
is not restored: it is rerun. ``scripts/consolidate_results.py`` checks all of this against
the cell files of a folder before they are removed from the repository.

The table also records the fingerprint of each data set's data (schema metadata
``riskopt.data``, :mod:`riskopt.bench._fingerprint`): the cells of a data set whose data
changed under the same name and spec are not restored (a table written before fingerprints
existed restores them with a warning).
"""
import json
import warnings
from pathlib import Path

import numpy as np

from . import _fingerprint, _io

TABLE = "results.parquet"
SPEC_KEY = b"riskopt.spec"


def table_spec(table_path):
    """The spec recorded in ``results.parquet``'s schema metadata, or ``None`` (no table, an
    unreadable one, or one without a spec)."""
    import pyarrow.parquet as pq

    from .spec import SpecError, spec_from_dict

    path = Path(table_path)
    if not path.exists():
        return None
    try:
        meta = pq.read_schema(path).metadata or {}
        text = meta.get(SPEC_KEY)
        return None if text is None else spec_from_dict(json.loads(text),
                                                        check_registry=False)
    except SpecError as exc:
        why = f"the spec it was made with is invalid now ({exc})"
    except Exception as exc:  # OSError, pyarrow's ArrowInvalid, JSON errors: unreadable
        why = f"unreadable ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})"
    warnings.warn(f"{path}: {why}; its cells will be rerun", _io.RecoveryWarning, stacklevel=3)
    return None


def table_data(table_path):
    """The data fingerprints recorded in ``results.parquet`` (``{data set: fingerprint}``),
    or ``None`` (a table written before they existed, or none)."""
    import pyarrow.parquet as pq

    try:
        fps = _fingerprint.stored(pq.read_schema(table_path).metadata)
    except Exception:  # absent or unreadable: table_spec says so
        return None
    return fps if isinstance(fps, dict) else None


def _restorable_cells(cells, table_path, data=None):
    """``({cell id: labels}, table spec)`` for the cells of ``cells`` that the table holds
    and, when both the table and ``data`` (``{data set: fingerprint}`` of the data loaded now)
    have fingerprints, that were computed on the same data."""
    from ._cells import cell_labels, enumerate_cells

    old = table_spec(table_path)
    if old is None or (old.record.value == "profile" and old.reference["lower_to_best"]):
        return {}, old
    then, now = table_data(table_path), data or {}
    if then is not None:
        stale = {d for d in {c.dataset for c in cells}
                 if _fingerprint.changed(then.get(d), now.get(d))}
        for d in sorted(stale):
            warnings.warn(f"{table_path}: the runs on {d} are not restored: "
                          f"{_fingerprint.changed(then[d], now[d])}; they will be rerun",
                          _io.RecoveryWarning, stacklevel=3)
        cells = [c for c in cells if c.dataset not in stale]
    want = {c.id for c in cells}
    labels = old.objective_labels()
    found, seen = {}, {}
    for c in enumerate_cells(old):
        lab = cell_labels(old, c, labels)
        key = tuple(lab.values())
        seen[key] = seen.get(key, 0) + 1
        if c.id in want:
            found[c.id] = lab
    dup = {k for k, n in seen.items() if n > 1}
    return {cid: lab for cid, lab in found.items() if tuple(lab.values()) not in dup}, old


def restorable(cells, table_path, data=None):
    """The ids of the cells of ``cells`` that ``table_path`` can give back (the table itself
    is not read, only its schema); ``data`` as in :func:`restore_cells`."""
    return set(_restorable_cells(cells, table_path, data)[0])


def cell_frames(cells, table_path, data=None):
    """``{cell id: DataFrame}``: the cells of ``cells`` rebuilt from the table, each as the
    run wrote it (columns ``TRACE_COLUMNS`` + recorded metrics, in that order); ``data`` as
    in :func:`restore_cells`."""
    import pandas as pd

    from . import record_metrics
    from ._state import TRACE_COLUMNS

    found, old = _restorable_cells(cells, table_path, data)
    if not found:
        return {}
    try:
        table = pd.read_parquet(table_path)
    except Exception as exc:  # a footer that reads, a body that does not
        warnings.warn(f"{table_path}: unreadable ({str(exc).splitlines()[0][:200]}); its "
                      "cells will be rerun", _io.RecoveryWarning, stacklevel=2)
        return {}
    names = list(next(iter(found.values())).keys())
    own = list(TRACE_COLUMNS) + [record_metrics.column(m) for m in old.record.metrics]
    if any(c not in table.columns for c in names + own):
        return {}
    keep_sub = old.record.value == "profile"  # else the merge recomputed it: the cell had NaN
    groups = table.groupby(names, sort=False, dropna=False).indices
    out = {}
    for cid, lab in found.items():
        rows = groups.get(tuple(lab.values()))
        if rows is None or len(rows) == 0:
            continue
        part = table.iloc[np.sort(rows)]
        frame = pd.DataFrame({c: part[c].to_numpy() for c in own})
        if not keep_sub:
            frame["suboptimality"] = np.full(len(frame), np.nan)
        if not np.array_equal(frame["update"].to_numpy(), np.arange(len(frame))):
            continue  # not one whole run: rerun it
        out[cid] = frame
    return out


def restore_cells(cells, cells_dir, table_path, data=None):
    """Write ``cells/<id>.parquet`` for every cell of ``cells`` that ``table_path`` holds;
    returns the ids written. Each file carries its cell's key, and the data fingerprint the
    table records for its data set, as a file written by the run does. ``data``: ``{data set:
    fingerprint}`` of the data loaded now; the cells of a data set whose fingerprint in the
    table differs are not restored (:mod:`riskopt.bench._fingerprint`). A table without
    fingerprints (written before they existed) restores its cells with a warning."""
    if not cells:
        return set()
    frames = cell_frames(cells, table_path, data)
    then = table_data(table_path)
    if frames and then is None and data and any(v is not None for v in data.values()):
        warnings.warn(f"{table_path} records no data fingerprints (written by an older "
                      f"riskopt): {len(frames)} finished run(s) restored without checking "
                      "that the data is unchanged (--fresh reruns them)",
                      _io.RecoveryWarning, stacklevel=2)
    by_id = {c.id: c for c in cells}
    for cid, frame in frames.items():
        c = by_id[cid]
        meta = {"riskopt.cell": json.dumps(c.key)}
        meta.update(_fingerprint.cell_metadata((then or {}).get(c.dataset)))
        _io.atomic_write_parquet(Path(cells_dir) / f"{cid}.parquet", frame, meta)
    return set(frames)
