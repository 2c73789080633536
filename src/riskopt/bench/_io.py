"""Atomic file writes: write to a temporary file in the same folder, then ``os.replace``.

A reader (or a resumed run) therefore sees either the old file or the complete new one, never
a half-written file, even if the process is killed mid-write.
"""
import json
import os
import tempfile
from pathlib import Path


def _tmp_path(path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def atomic_write_bytes(path, data):
    tmp = _tmp_path(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path, text):
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, obj):
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def atomic_write_parquet(path, frame, metadata=None):
    """Write a DataFrame to parquet atomically (pyarrow); ``metadata`` goes in the schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if metadata:
        meta = dict(table.schema.metadata or {})
        meta.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(meta)
    tmp = _tmp_path(path)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_savefig(fig, path, **kwargs):
    """``fig.savefig`` to a temporary file, then move it in place."""
    path = Path(path)
    tmp = _tmp_path(path)
    try:
        fig.savefig(tmp, format=path.suffix.lstrip("."), **kwargs)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
