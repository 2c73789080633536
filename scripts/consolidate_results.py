"""Check that a results folder's ``results.parquet`` gives back every cell file bit for bit,
then (``--untrack``) take its ``cells/`` out of git, keeping the files as a local cache.

The record of an experiment is ``results.parquet`` (+ figures, metadata, report tables); the
cell files ``cells/<id>.parquet`` are a cache that ``riskopt bench run`` restores from the
table (:mod:`riskopt.bench._record`). Before a folder's cells leave the repository this script
checks, for every folder named (default: every folder under benchmarks/results with cells):

1. the spec recorded in ``results.parquet`` enumerates exactly the cell files present (ids are
   content hashes), and each file's ``riskopt.cell`` key is its cell's key;
2. every cell rebuilt from the table (``_record.cell_frames``) equals its file: same columns,
   dtypes and rows, every value bit for bit (float columns compared as raw 64-bit patterns;
   NaN counts as equal to NaN only when the bits are the same NaN);
3. merging the rebuilt cells (``runner.merge_cells``, what ``bench run`` does) gives back the
   table, bit for bit, column by column (``selected`` aside: the selection adds it);
4. ``riskopt status``-like count: every cell counts as finished with ``cells/`` moved aside;
5. ``riskopt bench report FOLDER`` (Markdown and CSV) prints the same text with ``cells/``
   present and moved aside.

A folder without a ``cells/`` cache (already untracked, a fresh clone) gets checks 3 and 4
only (with ``--seal``, its f* records are sealed first).

Nothing else is rewritten: ``results.parquet`` and the figures stay byte for byte as they are.
The one exception is ``fstar.json`` (``--seal``): records written before f* records were sealed
by a checksum (:func:`riskopt.bench._state.seal_fstar`) would be dropped and recomputed by the
first ``bench run`` of a fresh clone, whose table could then differ in ``f_star``. A record is
sealed only if it is filed under its own problem's hash and its ``f_star`` equals, bit for bit,
the ``f_star_ref`` of every table row of that problem; check 3 then uses the sealed records as
``bench run`` loads them.

Usage (from the repository root)::

    python scripts/consolidate_results.py [FOLDER ...] [--seal] [--untrack]

``--untrack`` runs ``git rm -r --cached FOLDER/cells`` for each folder that passed (commit
the result; ``benchmarks/results/*/cells/`` is in .gitignore). Exit status 1 if any folder
failed a check.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from riskopt.bench import _io, _record, _state, runner, spec_tools

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def same_column(a, b):
    """Bit-for-bit equality of two pandas columns (dtype, length, every value)."""
    if a.dtype != b.dtype or len(a) != len(b):
        return False
    x, y = a.to_numpy(), b.to_numpy()
    if x.dtype.kind == "f":
        return np.array_equal(x.view(np.uint64 if x.itemsize == 8 else np.uint32),
                              y.view(np.uint64 if y.itemsize == 8 else np.uint32))
    if x.dtype.kind in "iub":
        return np.array_equal(x, y)
    return all(u == v or (u != u and v != v) for u, v in zip(x.tolist(), y.tolist()))


def same_frame(a, b):
    """``None`` when equal bit for bit, else what differs."""
    if list(a.columns) != list(b.columns):
        return f"columns {list(a.columns)} != {list(b.columns)}"
    bad = [c for c in a.columns if not same_column(a[c], b[c])]
    return None if not bad else f"column(s) {bad} differ"


def report_text(folder):
    """``riskopt bench report FOLDER`` in Markdown and CSV, as printed."""
    out = []
    for fmt in ("markdown", "csv"):
        r = subprocess.run([sys.executable, "-m", "riskopt.cli", "bench", "report", str(folder),
                            "--format", fmt], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": "0"})
        out.append((r.returncode, r.stdout, r.stderr))
    return out


def seal_fstar_records(folder, spec, table, say=print):
    """Seal (checksum) the unsealed f* records of ``folder/fstar.json`` that the table confirms;
    returns a list of failures (a record of the spec that cannot be sealed)."""
    path = folder / "fstar.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    used = {}
    for d in spec.datasets:
        for j in range(len(spec.objectives)):
            used[spec_tools.content_hash(spec.problem(d, j))] = (d, j)
    labels = spec.objective_labels()
    fails, n_sealed = [], 0
    for k, (d, j) in used.items():
        rec = data.get(k)
        if not isinstance(rec, dict) or _state.fstar_problem(k, rec) is None:
            continue  # absent (then recomputed anyway) or already sealed
        if "key" in rec and spec_tools.content_hash(rec["key"]) != k:
            fails.append(f"fstar.json entry {k} is filed under another problem's key")
            continue
        rows = table[(table["dataset"] == d) & (table["objective"] == labels[j])]
        ref = rows["f_star_ref"].to_numpy(dtype=np.float64)
        mine = np.float64(rec.get("f_star", np.nan))
        if len(ref) == 0 or not np.all(ref.view(np.uint64) == mine.view(np.uint64)):
            fails.append(f"fstar.json entry {k} ({d} / {labels[j]}): f_star is not the "
                         "table's f_star_ref bit for bit; not sealed")
            continue
        data[k] = _state.seal_fstar(k, rec)
        n_sealed += 1
    if n_sealed:
        _io.atomic_write_json(path, data)
        say(f"  sealed {n_sealed} f* record(s) of {path} (f_star = the table's f_star_ref)")
    return fails


def check(folder, say=print, seal=False):
    """Run checks 1-5 on one folder; returns a list of failures (empty: passed)."""
    folder = Path(folder)
    cells_dir = folder / "cells"
    table_path = folder / _record.TABLE
    spec = _record.table_spec(table_path)
    if spec is None:
        return ["results.parquet has no readable spec"]
    cells = runner.enumerate_cells(spec)
    ids = {c.id for c in cells}
    has_cache = cells_dir.is_dir()  # a folder already untracked: checks 3 and 4 only
    files = {p.name[: -len(".parquet")] for p in cells_dir.glob("*.parquet")}
    fails = []
    if has_cache and files != ids:
        fails.append(f"cell files != spec cells: {len(files - ids)} extra, "
                     f"{len(ids - files)} missing")
    # 1 + 2: each rebuilt cell against its file
    frames = _record.cell_frames(cells, table_path)
    if set(frames) != ids:
        fails.append(f"{len(ids - set(frames))} cell(s) cannot be rebuilt from the table")
    n_rows = 0
    for c in cells:
        path = cells_dir / f"{c.id}.parquet"
        if c.id not in frames or not path.exists():
            continue
        key = (pq.read_schema(path).metadata or {}).get(b"riskopt.cell")
        if key is None or json.loads(key) != json.loads(json.dumps(c.key, default=str)):
            fails.append(f"{path.name}: stored key is not the cell's key")
        why = same_frame(frames[c.id], pd.read_parquet(path))
        if why:
            fails.append(f"{path.name}: {why}")
        n_rows += len(frames[c.id])
    # 3: merging the rebuilt cells gives the table back, with the f* records `bench run` uses
    table = pd.read_parquet(table_path)
    if seal:
        fails += seal_fstar_records(folder, spec, table, say)
    fstar = _state.load_fstar(folder / "fstar.json", repair=False,
                              key_hash=spec_tools.content_hash)
    unusable = sorted({spec_tools.content_hash(spec.problem(c.dataset, c.objective_index))
                       for c in cells} - set(fstar))
    if unusable:
        fails.append(f"{len(unusable)} f* record(s) of the spec are missing or unsealed in "
                     "fstar.json (`bench run` would recompute them; try --seal)")
        return fails
    with tempfile.TemporaryDirectory() as tmp:
        for cid, f in frames.items():
            f.to_parquet(Path(tmp) / f"{cid}.parquet")
        merged = runner.merge_cells(spec, cells, Path(tmp), fstar)
    cols = [c for c in table.columns if c != "selected"]
    if list(merged.columns) != cols:
        fails.append(f"merged columns {list(merged.columns)} != table's {cols}")
    else:
        bad = [c for c in cols if not same_column(merged[c].reset_index(drop=True),
                                                  table[c].reset_index(drop=True))]
        if bad:
            fails.append(f"merge of the rebuilt cells differs from the table in {bad}")
    if not has_cache:
        n, done = runner.status(spec, folder)
        if done != n:
            fails.append(f"without cells/, {done} of {n} cells count as finished")
        say(f"{folder.name}: {len(cells)} cells, no cells/ cache (checks 1, 2, 5 skipped): "
            + ("table and f* records consistent" if not fails else f"{len(fails)} FAILED"))
        return fails
    # 4 + 5: with cells/ moved aside, every cell counts as finished and the report is the same
    before = report_text(folder)
    aside = folder / ".cells-check-aside"
    cells_dir.rename(aside)
    try:
        n, done = runner.status(spec, folder)
        after = report_text(folder)
    finally:
        if cells_dir.exists():  # status() never writes, but be safe
            fails.append("cells/ reappeared during the check")
        else:
            aside.rename(cells_dir)
    if done != n:
        fails.append(f"without cells/, {done} of {n} cells count as finished")
    if before != after:
        fails.append("`riskopt bench report` output differs without cells/")
    if any(rc != 0 for rc, _, _ in before):
        say(f"  note: `bench report` exits non-zero on {folder.name} (before and after alike)")
    say(f"{folder.name}: {len(cells)} cells, {n_rows} rows, {len(table.columns)} table columns: "
        + ("all equal bit for bit; report identical" if not fails else f"{len(fails)} FAILED"))
    return fails


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", help="results folders (default: every folder under "
                                               "benchmarks/results with a cells/ folder)")
    ap.add_argument("--seal", action="store_true",
                    help="checksum the unsealed f* records that the table confirms bit for bit")
    ap.add_argument("--untrack", action="store_true",
                    help="git rm -r --cached FOLDER/cells for each folder that passed")
    args = ap.parse_args(argv)
    folders = [Path(f) for f in args.folders] or sorted(
        p.parent for p in RESULTS.glob("*/cells") if p.is_dir())
    failed = 0
    for f in folders:
        fails = check(f, seal=args.seal)
        for msg in fails[:20]:
            print(f"  {msg}")
        if fails:
            failed += 1
        elif args.untrack and (f / "cells").is_dir():
            subprocess.run(["git", "rm", "-r", "-q", "--cached", str(f / "cells")], check=True)
            print(f"  untracked {f / 'cells'} (files kept as the local cache)")
    print(f"{len(folders)} folder(s) checked, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
