"""The checkout's size (issue 29 item 2: at most 2,000 files and 50 MB): tracked files and
bytes at a commit by kind (``git ls-tree -r -l``), and what re-encoding every tracked
``*.parquet`` with zstd would save (written to a temporary folder, nothing in the tree
changes; the tables' rows and schema metadata are kept), and which ``<name>_3sets`` tables
hold exactly the rows of ``<name>``'s table for their data sets (every column but ``spec``, bit
for bit): such a table could be a filtered view of the other instead of a second copy; and the
folders whose table already is such a view (``metadata.json``, :mod:`riskopt.bench._view`).

Usage (from the repository root)::

    python scripts/results_layout_size.py [--rev HEAD] [--zstd-level 9] [--out FILE.md]
"""
import argparse
import io
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tracked(rev):
    """``[(path, bytes)]`` of the files at ``rev``."""
    out = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "-l", rev],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        meta, path = line.split("\t", 1)
        size = meta.split()[3]
        rows.append((path, int(size) if size.isdigit() else 0))
    return rows


def zstd_size(blob, level):
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(blob))
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", compression_level=level)
    return len(buf.getvalue())


def _blob(rev, path):
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                          capture_output=True, check=True).stdout


def _table(rev, path):
    import pandas as pd

    return pd.read_parquet(io.BytesIO(_blob(rev, path)))


def subset_rows(rev, path, parent):
    """``(rows, same)``: whether the table at ``path`` is, column by column and bit for bit
    (``spec`` aside), the rows of ``parent`` for its data sets, in the same order."""
    import numpy as np

    b = _table(rev, path)
    a = _table(rev, parent)
    a = a[a["dataset"].isin(set(b["dataset"]))].reset_index(drop=True)
    if len(a) != len(b) or list(a.columns) != list(b.columns):
        return len(b), False
    for c in b.columns:
        if c == "spec":
            continue
        x, y = a[c].to_numpy(), b[c].to_numpy()
        if x.dtype != y.dtype:
            return len(b), False
        if x.dtype.kind == "f":
            ok = np.array_equal(x.view(np.uint64), y.view(np.uint64))
        else:
            ok = all(u == v or (u != u and v != v) for u, v in zip(x.tolist(), y.tolist()))
        if not ok:
            return len(b), False
    return len(b), True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--zstd-level", type=int, default=9)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rows = tracked(args.rev)
    by_kind = defaultdict(lambda: [0, 0])
    for path, size in rows:
        kind = path.rsplit(".", 1)[-1] if "." in Path(path).name else "(none)"
        by_kind[kind][0] += 1
        by_kind[kind][1] += size
    total = sum(s for _, s in rows)
    lines = [f"# Tracked files at {args.rev}", "",
             f"{len(rows):,} files, {total:,} bytes ({total / 1e6:.1f} MB); goal <= 2,000 "
             "files, <= 50 MB", "", "| kind | files | bytes |", "| --- | ---: | ---: |"]
    for kind, (n, s) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])[:10]:
        lines.append(f"| {kind} | {n:,} | {s:,} |")
    parquet = [(p, s) for p, s in rows if p.endswith(".parquet")]
    new = 0
    for p, _ in parquet:
        new += zstd_size(_blob(args.rev, p), args.zstd_level)
    old = sum(s for _, s in parquet)
    lines += ["", f"Re-encoding the {len(parquet)} parquet files with zstd level "
              f"{args.zstd_level}: {old:,} -> {new:,} bytes ({(old - new) / 1e6:.1f} MB less; "
              f"the tree would be {(total - old + new) / 1e6:.1f} MB)."]
    views = []
    for p, _ in rows:
        if p.startswith("benchmarks/results/") and p.endswith("/metadata.json"):
            entry = (json.loads(_blob(args.rev, p)).get("files") or {}).get("table")
            if isinstance(entry, dict) and "view_of" in entry:
                views.append(f"| {Path(p).parent} | {entry['view_of']} | {entry['rows']:,} | "
                             f"{entry['where']} |")
    if views:
        lines += ["", "Tables that are filtered views of another folder's table "
                  "(`riskopt.bench._view`):", "", "| folder | view of | rows | where |",
                  "| --- | --- | ---: | --- |", *views]
    subsets = []
    sizes = dict(rows)
    for p, _ in parquet:
        folder = Path(p).parent
        if not folder.name.endswith("_3sets") or not p.endswith("/results.parquet"):
            continue
        parent = folder.with_name(folder.name[: -len("_3sets")]) / "results.parquet"
        if str(parent) not in sizes:
            continue
        n, same = subset_rows(args.rev, p, str(parent))
        subsets.append(f"| {p} | {n:,} | {sizes[p]:,} | "
                       f"{str(parent) + ' (bit for bit)' if same else 'no table'} |")
    if subsets:
        lines += ["", "| table | rows | bytes | the same rows as |", "| --- | ---: | ---: | --- |",
                  *subsets]
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
