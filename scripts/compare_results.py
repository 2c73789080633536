"""Compare two benchmark results folders (or trees of them) run with the same specs and seeds.

    python scripts/compare_results.py OLD NEW

OLD and NEW are results folders (each with a results.parquet, or a view of another folder's:
riskopt.bench._view) or folders holding several of them
(compared by name). The long tables are joined on (data set / problem, objective, solver,
config, seed, recorded point); columns renamed since are mapped (the older per-family tables
used problem / method / lr / record). Prints, per spec, the number of rows, the rows matched,
and the max absolute and relative differences of ``value``, ``suboptimality``, ``passes`` and
``f_star``. Exit status 1 when some rows do not match or a difference exceeds --tol.
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from riskopt.bench._view import has_table, read_table

#: old column -> new column
RENAME = {"problem": "dataset", "method": "solver_name", "record": "update"}
COLUMNS = ["value", "suboptimality", "passes", "f_star"]


def _normalise(t):
    if "problem" in t.columns:  # the older RU-CVaR tables: one objective per problem
        t = t.drop(columns=[c for c in ("dataset",) if c in t.columns]).rename(columns=RENAME)
        t["config_key"] = t["lr"].map(lambda v: f"{v:.12g}")
        t["objective"] = "-"
    else:
        if "solver_name" not in t.columns:
            t["solver_name"] = t["solver"]
        t["config_key"] = t["config"]
    if "family" in t.columns and (t["family"] != "spectral").any():
        t["config_key"] = t["lr"].map(lambda v: f"{v:.12g}")
        t["objective"] = "-"
    return t


KEYS = ["dataset", "objective", "solver_name", "config_key", "seed", "update"]


def _diff(a, b):
    a, b = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
    both_nan = np.isnan(a) & np.isnan(b)
    same_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    ok = ~(both_nan | same_inf)
    with np.errstate(all="ignore"):
        d = np.abs(a - b)
        r = d / np.maximum(np.abs(a), np.abs(b))
    d = np.where(ok, d, 0.0)
    r = np.where(ok & (d > 0), r, 0.0)
    mismatch_kind = int(np.sum((np.isnan(a) != np.isnan(b)) | (np.isinf(a) != np.isinf(b))))
    return float(np.nanmax(d)) if d.size else 0.0, float(np.nanmax(r)) if r.size else 0.0, \
        mismatch_kind


def compare(old_dir, new_dir):
    old = _normalise(read_table(old_dir))  # a folder's own table, or the view it records
    new = _normalise(read_table(new_dir))
    m = old.merge(new, on=KEYS, how="inner", suffixes=("_old", "_new"))
    row = {"spec": Path(new_dir).name, "rows_old": len(old), "rows_new": len(new),
           "matched": len(m)}
    for c in COLUMNS:
        if f"{c}_old" in m.columns and f"{c}_new" in m.columns:
            d, r, k = _diff(m[f"{c}_old"], m[f"{c}_new"])
            row[f"{c}_abs"], row[f"{c}_rel"] = d, r
            if k:
                row[f"{c}_nonfinite_mismatch"] = k
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--tol", type=float, default=1e-12, help="relative tolerance (exit 1 above)")
    args = ap.parse_args(argv)
    old, new = Path(args.old), Path(args.new)
    if has_table(old):
        pairs = [(old, new)]
    else:
        pairs = [(p, new / p.name) for p in sorted(old.iterdir())
                 if p.is_dir() and has_table(p) and has_table(new / p.name)]
    rows = [compare(a, b) for a, b in pairs]
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    bad = any(r["matched"] != r["rows_old"] or r["matched"] != r["rows_new"] for r in rows)
    bad |= any(r.get(f"{c}_rel", 0.0) > args.tol for r in rows for c in COLUMNS)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
