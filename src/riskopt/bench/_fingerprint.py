"""Data fingerprints: which data a finished run, an f* or a results table was computed on.

A cell's id hashes its spec content (problem, solver, hyper-parameters, seed, budget, ...),
and the problem names its data set (``"adult"``, ``"law_school/fold1of5"``) but not the data:
a new file under the same name, or a loader change (law_school's default target became
``ugpa``), leaves every id as it was. So each piece of a results folder also carries the
fingerprint of the data it was computed on -- a SHA-256 of the arrays the benchmark loads
(train and test ``X`` / ``y``, float64, and the group labels), which covers the file, the
loader and the protocol's split at once:

* a cell file (``cells/<id>.parquet``): schema metadata ``riskopt.data`` (its data set's);
* ``results.parquet``: schema metadata ``riskopt.data``, ``{data set: fingerprint}``;
* an ``fstar.json`` record: its field ``data`` (sealed by the record's checksum).

A piece whose fingerprint differs from the data loaded now is not used: the cell is rerun
(its file renamed aside), the table's cells of that data set are not restored, the f* is
recomputed, each with a :class:`~riskopt.bench.RecoveryWarning`. The cell ids are unchanged,
so nothing computed before is invalidated by this check itself. Pieces written before
fingerprints existed carry none; they are trusted (there is nothing to compare), a table of
that kind restores its cells with a warning that says so, and the next merge writes the table
again with the fingerprints of the data loaded now. Data streams (synthetic sources) have no
fingerprint: their spec entry fixes their content.
"""
import hashlib
import json
from functools import lru_cache

import numpy as np

DATA_KEY = b"riskopt.data"


@lru_cache(maxsize=32)
def dataset_fingerprint(name, protocol):
    """The fingerprint (16 hex digits of a SHA-256) of a data set as the benchmark loads it:
    ``X`` / ``y`` of the train and test splits (float64, C order, with their shapes) and the
    group labels of both splits (sorted by attribute)."""
    from . import problems

    h = hashlib.sha256()
    for X, y in (problems.load_dataset(name, protocol), problems.load_test_split(name, protocol)):
        for a in (X, y):
            a = np.ascontiguousarray(a, dtype=np.float64)
            h.update(repr(a.shape).encode())
            h.update(a.tobytes())
    groups = problems.load_groups(name, protocol)
    for split in ("train", "test"):
        for attr in sorted(groups[split]):
            g = np.asarray(groups[split][attr])
            h.update(f"{split}:{attr}:{g.dtype.str}:{g.shape}".encode())
            h.update(g.astype(str).tobytes() if g.dtype == object else g.tobytes())
    return h.hexdigest()[:16]


def spec_fingerprints(spec):
    """``{data set: fingerprint}`` of a spec's data sets (``None`` for a data stream)."""
    out = {}
    for d in spec.datasets:
        desc = spec.problem_description(d, 0)
        out[d] = (dataset_fingerprint(desc["dataset"], desc["protocol"])
                  if desc["source"]["name"] == "dataset" else None)
    return out


def stored(metadata):
    """The ``riskopt.data`` entry of a parquet schema's metadata, decoded (``None`` if absent):
    a string for a cell file, a dict for a table."""
    raw = (metadata or {}).get(DATA_KEY)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def cell_metadata(fingerprint):
    """The schema metadata entry a cell file carries (``{}`` for a data stream)."""
    return {} if fingerprint is None else {DATA_KEY.decode(): json.dumps(fingerprint)}


def table_metadata(fingerprints):
    """The schema metadata entry ``results.parquet`` carries."""
    fps = {d: f for d, f in fingerprints.items() if f is not None}
    return {DATA_KEY.decode(): json.dumps(fps, sort_keys=True)}


def changed(old, new):
    """Why a piece computed on data ``old`` cannot stand for data ``new`` (``None`` if it
    can: same fingerprint, or either unknown)."""
    if old is None or new is None or old == new:
        return None
    return f"its data set changed since it was computed (data fingerprint {old}, now {new})"
