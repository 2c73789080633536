"""What a results folder holds, checked before it is trusted.

A cell file (``cells/<id>.parquet``) counts as finished only if its parquet footer reads, it
has the trace columns and its ``riskopt.cell`` metadata is this cell's key; an error record
(``cells/<id>.error.json``) only if it parses; ``fstar.json`` only if it parses to a table of
finite ``f_star`` values, each sealed by a SHA-256 checksum of its record (problem key, f*,
reference details; :func:`seal_fstar`) and filed under the hash of its own problem: an edited
entry, one without a checksum or one under another problem's key is dropped with a warning and
recomputed, so the table's f* and its suboptimality column always agree. Anything else is
renamed aside (:func:`riskopt.bench._io.quarantine`, one
:class:`~riskopt.bench._io.RecoveryWarning` line each) and recomputed: a truncated or garbled
file never stops a run.
"""
import hashlib
import json
import math
import warnings

from . import _fingerprint, _io

TRACE_COLUMNS = ("update", "step", "passes", "time", "value", "suboptimality", "diverged")


def cell_problem(path, key, data=None):
    """Why the cell file at ``path`` cannot be used for the cell ``key`` (``None`` if it can):
    also when it was computed on other data than the fingerprint ``data`` (a file without a
    fingerprint, written before they existed, is trusted; :mod:`riskopt.bench._fingerprint`).
    Reads the footer only (cheap); a full read happens when the table is merged."""
    import pyarrow.parquet as pq

    try:
        schema = pq.ParquetFile(path).schema_arrow
    except Exception as exc:  # ArrowInvalid, OSError, ...: unreadable
        return f"unreadable parquet: {_short(exc)}"
    missing = [c for c in TRACE_COLUMNS if c not in schema.names]
    if missing:
        return f"no column(s) {', '.join(missing)}"
    stored = (schema.metadata or {}).get(b"riskopt.cell")
    if stored is not None:
        try:
            same = (json.dumps(json.loads(stored), sort_keys=True)
                    == json.dumps(key, sort_keys=True, default=str))
        except ValueError:
            return "unreadable run description"
        if not same:
            return "it holds another run"
    return _fingerprint.changed(_fingerprint.stored(schema.metadata), data)


def check_cells(cells, cells_dir, repair=True, data=None):
    """``(finished ids, error ids)`` of the cells with a usable file; the others' files are
    quarantined when ``repair`` (else just not counted). ``data``: ``{data set: fingerprint}``
    of the data loaded now (a cell computed on other data is not usable)."""
    done, failed = set(), set()
    for c in cells:
        path = cells_dir / f"{c.id}.parquet"
        if path.exists():
            why = cell_problem(path, c.key, (data or {}).get(c.dataset))
            if why is None:
                done.add(c.id)
            elif repair:
                _io.quarantine(path, why)
        err = cells_dir / f"{c.id}.error.json"
        if err.exists():
            try:
                json.loads(err.read_text())
                failed.add(c.id)
            except (ValueError, UnicodeDecodeError) as exc:
                if repair:
                    _io.quarantine(err, f"invalid JSON: {_short(exc)}")
    return done, failed


def _fstar_checksum(k, rec):
    body = {key: v for key, v in rec.items() if key != "checksum"}
    text = json.dumps([k, body], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def seal_fstar(k, rec):
    """``rec`` (the f* record of the problem hashed ``k``) with its ``checksum``."""
    rec = {key: v for key, v in rec.items() if key != "checksum"}
    rec["checksum"] = _fstar_checksum(k, rec)
    return rec


def fstar_problem(k, rec, key_hash=None):
    """Why the f* record ``rec`` filed under ``k`` cannot be used (``None`` if it can)."""
    try:
        if not (isinstance(rec, dict) and math.isfinite(float(rec["f_star"]))):
            return "it has no finite f_star"
    except (KeyError, TypeError, ValueError):
        return "it has no finite f_star"
    if "checksum" not in rec:
        return "it has no checksum (written by hand or by an older riskopt)"
    if rec["checksum"] != _fstar_checksum(k, rec):
        return "its checksum does not match its content (edited by hand?)"
    if key_hash is not None and "key" in rec and key_hash(rec["key"]) != k:
        return "it is filed under another problem's key"
    return None


def load_fstar(path, repair=True, key_hash=None, data=None):
    """The f* cache ``{problem hash: record}``: ``{}`` if absent; an unreadable file is
    quarantined, a record that fails :func:`fstar_problem` dropped (both recomputed);
    ``key_hash(problem key)`` must give the hash a record is filed under; ``data``
    (``{data set: fingerprint}``): a record whose ``data`` fingerprint differs is dropped."""
    if not path.exists():
        return {}
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(records, dict):
            raise ValueError(f"a JSON {type(records).__name__}, not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        if repair:
            _io.quarantine(path, f"invalid JSON: {_short(exc)}")
        return {}
    out = {}
    for k, rec in records.items():
        why = fstar_problem(k, rec, key_hash)
        if why is None and isinstance(data, dict):
            why = _fingerprint.changed(rec.get("data"), data.get(rec.get("dataset")))
        if why is None:
            out[k] = rec
        elif repair:
            warnings.warn(f"{path}: entry {k} is not used ({why}); its f* will be recomputed",
                          _io.RecoveryWarning, stacklevel=2)
    return out


def _short(exc):
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
