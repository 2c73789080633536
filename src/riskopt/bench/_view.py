"""A results folder whose table is a filtered view of another folder's table.

A reduced spec (``prospect_fig10_no_shift_3sets``: three of the five data sets of
``prospect_fig10_no_shift``) runs the same cells as its parent on its data sets (a cell's id
hashes the run's content, not the spec's name), so its table can be exactly the parent's rows
of those data sets, bit for bit, the ``spec`` column aside. Instead of a second copy of them,
such a folder's ``metadata.json`` names the parent table and the filter in ``files.table``::

    "table": {"view_of": "../prospect_fig10_no_shift/results.parquet",
              "where": {"dataset": ["yacht", "energy", "concrete"]},
              "set": {"spec": "prospect_fig10_no_shift_3sets"},
              "rows": 59138, "digest": "sha256:..."}

:func:`read_table` gives a folder's table back: its own ``results.parquet`` when it has one,
else the view: the parent's rows whose columns hold one of the listed values (parent order),
with the ``set`` columns overwritten. The digest of those rows (:func:`digest`: every
column's name, kind and values, floats bit for bit) must equal the recorded one, taken from
the folder's own table before it was removed; otherwise the parent changed since, and
:class:`ViewError` says so instead of showing other numbers under this folder's metadata.

Who reads through it: ``bench report``, ``bench plot``, the checks of ``bench reproduce``
(:mod:`riskopt.bench._claims`, :mod:`riskopt.bench._script_checks`), and ``bench run`` /
``status``, which restore the folder's finished cells from the parent table
(:func:`table_path`; restoring matches cells by content, so it needs no digest). A ``bench
run`` that finishes in the folder writes its own ``results.parquet`` and a ``metadata.json``
naming it: the view ends there. :func:`make_view` records a view only after checking that it
equals the folder's own table bit for bit (``scripts/make_table_view.py`` then removes the
table).
"""
import hashlib
import json
import os
from pathlib import Path

import numpy as np

TABLE = "results.parquet"


class ViewError(ValueError):
    """A folder's table view does not give back the rows it recorded (or cannot be read)."""


def view_entry(folder):
    """The view ``metadata.json`` records in ``files.table`` (a dict with ``view_of``), or
    ``None`` (a table of its own, no metadata, unreadable metadata)."""
    try:
        meta = json.loads((Path(folder) / "metadata.json").read_text())
    except (OSError, ValueError):
        return None
    entry = (meta.get("files") or {}).get("table") if isinstance(meta, dict) else None
    return entry if isinstance(entry, dict) and "view_of" in entry else None


def table_path(folder):
    """The parquet file that holds ``folder``'s rows: its own ``results.parquet`` if present,
    else the table its view names, else its own (absent) ``results.parquet``."""
    own = Path(folder) / TABLE
    entry = None if own.exists() else view_entry(folder)
    return own if entry is None else (Path(folder) / entry["view_of"])


def _text(v):
    return "\1" if v is None or (isinstance(v, float) and v != v) else str(v)


def digest(frame):
    """``sha256:<hex>`` of a table's columns in order: each column's name, its kind (float,
    integer, bool or text) and its values, numbers as their little-endian bytes (floats bit
    for bit, so NaN only matches the same NaN), text as strings (missing values as one
    marker). The dtype's name is left out, so pandas versions that spell it differently
    (``object`` / ``str``) agree."""
    h = hashlib.sha256()
    for c in frame.columns:
        col = frame[c]
        kind = col.dtype.kind if col.dtype.kind in "fiub" else "T"
        h.update(f"{c}\0{kind}\0{len(col)}\0".encode())
        if kind == "T":
            h.update("\0".join(_text(v) for v in col.tolist()).encode())
        else:
            a = np.asarray(col.to_numpy())
            h.update(np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"))).tobytes())
    return "sha256:" + h.hexdigest()


def apply(parent_table, entry):
    """The rows of ``parent_table`` that ``entry`` selects (``where``: column -> allowed
    values), index reset, with ``entry["set"]``'s columns overwritten (dtypes kept)."""
    import pandas as pd

    t = parent_table
    keep = np.ones(len(t), dtype=bool)
    for col, values in entry.get("where", {}).items():
        if col not in t.columns:
            raise ViewError(f"the view filters on column {col!r}, which the table lacks")
        keep &= t[col].isin(list(values)).to_numpy()
    t = t[keep].reset_index(drop=True)
    for col, value in entry.get("set", {}).items():
        t[col] = pd.array([value] * len(t), dtype=t[col].dtype) if col in t.columns else value
    return t


def read_view(folder, entry=None):
    """The rows of ``folder``'s view, checked against the recorded row count and digest."""
    import pandas as pd

    entry = entry or view_entry(folder)
    src = Path(folder) / entry["view_of"]
    if not src.exists():
        raise FileNotFoundError(f"{folder}: its table is a view of {entry['view_of']}, which "
                                f"is missing ({src})")
    t = apply(pd.read_parquet(src), entry)
    got = digest(t)
    if len(t) != entry.get("rows") or got != entry.get("digest"):
        raise ViewError(
            f"{folder}: its table is a view of {entry['view_of']}, whose rows changed since "
            f"the view was made ({len(t):,} rows, {got[:19]}... now; {entry.get('rows')} rows, "
            f"{str(entry.get('digest'))[:19]}... recorded); run `riskopt bench run` on the "
            "folder to give it a table of its own")
    return t


def read_table(folder, columns=None):
    """``folder``'s long-form table (its own ``results.parquet`` or its checked view), with
    only ``columns`` when given; ``None`` when it has neither."""
    import pandas as pd

    own = Path(folder) / TABLE
    if own.exists():
        return pd.read_parquet(own, columns=columns)
    entry = view_entry(folder)
    if entry is None:
        return None
    t = read_view(folder, entry)
    return t[list(columns)] if columns is not None else t


def has_table(folder):
    """Whether ``folder`` has a table of its own or a view of one."""
    return (Path(folder) / TABLE).exists() or view_entry(folder) is not None


def make_view(folder, parent, where=("dataset",)):
    """Record in ``folder/metadata.json`` that its table is the view of ``parent``'s table
    (a results folder) on the values the folder's own table holds in the columns ``where``,
    with the columns whose one value differs from the parent's (``spec``) set. Refused
    (:class:`ViewError`, nothing written) unless that view equals the folder's own table
    column by column, bit for bit (dtypes included). Returns the entry; the folder's
    ``results.parquet`` is left for the caller to remove."""
    import pandas as pd

    from . import _io

    folder, parent = Path(folder), Path(parent)
    own = pd.read_parquet(folder / TABLE)
    base = pd.read_parquet(parent / TABLE)
    if list(own.columns) != list(base.columns):
        raise ViewError(f"{folder}: its columns differ from {parent}'s")
    rel = Path(os.path.relpath((parent / TABLE).resolve(), folder.resolve())).as_posix()
    entry = {"view_of": rel,
             "where": {c: list(dict.fromkeys(own[c].tolist())) for c in where}, "set": {}}
    rows = apply(base, entry)  # the filter alone; then the one-valued text columns set
    for c in own.columns:
        mine = set(own[c].tolist())
        if own[c].dtype.kind not in "fiub" and len(mine) == 1 and mine != set(rows[c].tolist()):
            entry["set"][c] = next(iter(mine))
    view = apply(base, entry)
    bad = [c for c in own.columns if str(own[c].dtype) != str(view[c].dtype)
           or digest(own[[c]]) != digest(view[[c]])]
    if len(view) != len(own) or bad:
        raise ViewError(f"{folder}: the rows of {parent} for {entry['where']} are not its "
                        f"table ({len(view):,} rows against {len(own):,}; columns that differ: "
                        f"{bad[:8]})")
    entry.update(rows=len(own), digest=digest(own))
    meta_path = folder / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta.setdefault("files", {})["table"] = entry
    _io.atomic_write_json(meta_path, meta)
    return entry
