"""How far runs computed now are from a committed table's runs of the same cells.

    python benchmarks/rerun_drift.py SPEC CELLS_DIR [--results benchmarks/results] [--out FILE]

``SPEC``: a bundled spec whose committed ``RESULTS/SPEC/results.parquet`` holds the former
runs; ``CELLS_DIR``: a runner's ``cells/`` folder (any spec: a cell is named by a hash of its
whole content -- problem, solver, configuration, seed, budget, record -- so a cell of another
spec with the same content is the same run). For each cell of ``SPEC`` found in ``CELLS_DIR``,
prints the last recorded value now and the relative difference from the committed run's, and
the largest; with ``--out`` writes them as JSON. A difference at rounding level (~1e-15) says
that the committed runs still stand for the code of today, so the runner may restore them
(``riskopt bench run`` restores the cells its folder's table holds) instead of recomputing.
"""
import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from riskopt.bench._cells import cell_labels, enumerate_cells
from riskopt.bench.spec import load_spec

KEY = ["dataset", "objective", "solver", "config", "seed"]


def drift(spec_name, cells_dir, results="benchmarks/results"):
    """One row per cell of ``spec_name`` present in ``cells_dir``: its labels, the value now,
    the committed value and their relative difference."""
    spec = load_spec(spec_name)
    labels = {c.id: cell_labels(spec, c) for c in enumerate_cells(spec)}
    old = pd.read_parquet(Path(results) / spec_name / "results.parquet")
    old = old.sort_values("update").groupby(KEY).tail(1).set_index(KEY)
    rows = []
    for f in sorted(Path(cells_dir).glob("*.parquet")):
        lab = labels.get(f.stem)
        if lab is None:
            continue
        now = float(pd.read_parquet(f).sort_values("update")["value"].iloc[-1])
        then = float(old.loc[tuple(lab[k] for k in KEY), "value"])
        rows.append({**{k: lab[k] for k in KEY}, "value_now": now, "value_committed": then,
                     "rel_diff": abs(now - then) / max(abs(then), 1e-300)})
    return pd.DataFrame(rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("cells_dir", type=Path)
    p.add_argument("--results", type=Path, default=Path("benchmarks/results"))
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    if not a.cells_dir.is_dir():
        p.error(f"{a.cells_dir} is not a folder")
    d = drift(a.spec, a.cells_dir, a.results)
    if d.empty:
        print(f"no cell of {a.spec} in {a.cells_dir}")
        return 1
    print(d.to_string(index=False))
    print(f"largest relative difference: {d['rel_diff'].max():.3g} over {len(d)} run(s)")
    if a.out is not None:
        a.out.write_text(json.dumps({"command": "python benchmarks/rerun_drift.py "
                                     + " ".join(sys.argv[1:] if argv is None else argv),
                                     "max_rel_diff": float(d["rel_diff"].max()),
                                     "runs": d.to_dict("records")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
