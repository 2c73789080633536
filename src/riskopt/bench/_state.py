"""What a results folder holds, checked before it is trusted.

A cell file (``cells/<id>.parquet``) counts as finished only if its parquet footer reads, it
has the trace columns and its ``riskopt.cell`` metadata is this cell's key; an error record
(``cells/<id>.error.json``) only if it parses; ``fstar.json`` only if it parses to a table of
finite ``f_star`` values. Anything else is renamed aside (:func:`riskopt.bench._io.quarantine`,
one :class:`~riskopt.bench._io.RecoveryWarning` line each) and recomputed: a truncated or
garbled file never stops a run.
"""
import json
import math
import warnings

from . import _io

TRACE_COLUMNS = ("update", "step", "passes", "time", "value", "suboptimality", "diverged")


def cell_problem(path, key):
    """Why the cell file at ``path`` cannot be used for the cell ``key`` (``None`` if it can).
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
    return None


def check_cells(cells, cells_dir, repair=True):
    """``(finished ids, error ids)`` of the cells with a usable file; the others' files are
    quarantined when ``repair`` (else just not counted)."""
    done, failed = set(), set()
    for c in cells:
        path = cells_dir / f"{c.id}.parquet"
        if path.exists():
            why = cell_problem(path, c.key)
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


def load_fstar(path, repair=True):
    """The f* cache ``{problem hash: record}``: ``{}`` if absent; an unreadable file is
    quarantined, a record without a finite ``f_star`` dropped (both recomputed)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        if repair:
            _io.quarantine(path, f"invalid JSON: {_short(exc)}")
        return {}
    out = {}
    for k, rec in data.items():
        try:
            ok = isinstance(rec, dict) and math.isfinite(float(rec["f_star"]))
        except (KeyError, TypeError, ValueError):
            ok = False
        if ok:
            out[k] = rec
        elif repair:
            warnings.warn(f"{path}: entry {k} has no finite f_star; it will be recomputed",
                          _io.RecoveryWarning, stacklevel=2)
    return out


def _short(exc):
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
