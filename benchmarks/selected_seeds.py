"""Per-seed values of a spec's selected configurations, for committed results that kept only
the selection (``selection.csv``: each configuration's score over the seeds, no per-run table).

    python benchmarks/selected_seeds.py SPEC [--results benchmarks/results] [--jobs 1]

Without per-seed values the reproduction report has no noise estimate for such a spec (its
verdict is "too few seeds"), and rerunning the whole grid (Prospect Fig. 3: 2,250 runs; SOREL
Fig. 2: 4,680) only to recover them costs ten times the runs that matter. This reruns exactly
the configurations the committed ``selection.csv`` selected, for every seed of the spec, with
the runner's own cells (same cell ids, cached in ``RESULTS/SPEC/cells/``, so a later full
``riskopt bench run SPEC`` reuses them and an interrupted rerun resumes), and writes into
``RESULTS/SPEC/``:

* ``per_seed.csv``: one row per (dataset, objective, solver, config, seed): the last recorded
  point (``passes``, ``value``, ``f_star``, ``suboptimality``, ``diverged``), the run's score
  by the spec's selection rule (``seed_score``), and per configuration the score recomputed
  over the seeds (``rerun_score``) next to the committed one (``committed_score``): their
  relative difference shows any change of the code since the committed run;
* ``per_seed.json``: provenance (command, commit, versions, seconds, the largest score
  drift);
* ``fstar.json``: the reference optima (the runner's cache; recomputed here, compared with
  the ``f*`` of the committed ``metadata.json``).

The selection itself is not redone (that needs the whole grid): the configurations are those
the committed run chose, and the file says so.
"""
import argparse
import dataclasses
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from riskopt.bench import _fingerprint, _io, _meta, _state, analysis
from riskopt.bench.runner import _compute, enumerate_cells, cell_labels, merge_cells
from riskopt.bench.spec import load_spec
from riskopt.bench.spec_tools import content_hash

KEY = ["dataset", "objective", "solver", "config"]


def selected_cells(spec, selection):
    """The cells of ``spec`` whose (dataset, objective, solver label, config label) is a
    selected row of ``selection`` (the committed ``selection.csv``); raises if a selected
    configuration has no cell (the spec changed since)."""
    sel = selection[selection["selected"].astype(bool)]
    want = {tuple(r) for r in sel[KEY].astype(str).to_numpy()}
    labels = spec.objective_labels()
    cells, seen = [], set()
    for c in enumerate_cells(spec):
        lab = cell_labels(spec, c, labels)
        k = tuple(str(lab[x]) for x in KEY)
        if k in want:
            cells.append(c)
            seen.add(k)
    missing = want - seen
    if missing:
        raise SystemExit(f"{len(missing)} selected configuration(s) are not in the spec "
                         f"{spec.name} any more, e.g. {sorted(missing)[0]}")
    return cells


def per_seed_table(spec, table, selection):
    """The last recorded point of every run in ``table`` with its selection-rule score, and
    the configuration's rerun / committed scores."""
    scores = (analysis.seed_scores(table, spec.last_passes)
              if spec.selection_rule == "last_passes" else analysis.final_scores(table))
    last = table.sort_values("update").groupby(KEY + ["seed"], sort=False).tail(1)
    cols = KEY + ["lr", "seed", "passes", "value", "f_star", "suboptimality", "diverged"]
    out = last[cols].merge(scores[KEY + ["seed", "score"]].rename(
        columns={"score": "seed_score"}), on=KEY + ["seed"], how="left")
    rerun = analysis.select(table, last_passes=spec.last_passes, seeds=spec.seeds,
                            rule=spec.selection_rule)[KEY + ["score"]]
    committed = selection[selection["selected"].astype(bool)][KEY + ["score"]]
    out = out.merge(rerun.rename(columns={"score": "rerun_score"}), on=KEY, how="left")
    out = out.merge(committed.rename(columns={"score": "committed_score"}), on=KEY, how="left")
    return out.sort_values(KEY + ["seed"], kind="stable").reset_index(drop=True)


def rerun_selected(spec, folder, jobs=1, argv=None, datasets=None):
    """Rerun the selected configurations of ``folder/selection.csv`` for every seed of
    ``spec`` (only on ``datasets`` if given) and write ``per_seed.csv``, ``per_seed.json`` and
    ``fstar.json`` into ``folder``; returns the per-seed table."""
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    spec = load_spec(spec)
    out = Path(folder)
    selection = pd.read_csv(out / "selection.csv")
    if datasets:
        unknown = set(datasets) - set(spec.datasets)
        if unknown:
            raise SystemExit(f"--datasets: {sorted(unknown)} not in the spec {spec.name}")
        spec = dataclasses.replace(spec, datasets=[d for d in spec.datasets if d in datasets])
        selection = selection[selection["dataset"].isin(datasets)]
    cells = selected_cells(spec, selection)
    cells_dir = _io.ensure_folder(out / "cells")
    fps = _fingerprint.spec_fingerprints(spec)
    probs = {content_hash(spec.problem(d, j)): (d, j)
             for d in spec.datasets for j in range(len(spec.objectives))}
    fstar_path = out / "fstar.json"
    fstar = _state.load_fstar(fstar_path, key_hash=content_hash, data=fps)
    done, _ = _state.check_cells(cells, cells_dir, data=fps)
    pending = [c for c in cells if c.id not in done]
    print(f"{spec.name}: {len(cells)} runs of the selected configurations, {len(done)} cached, "
          f"{len(pending)} to run (jobs={jobs})", flush=True)
    errors = []
    n_run = _compute(spec, cells, pending, probs, fstar, fstar_path, cells_dir, jobs, None,
                     False, print, errors, lambda c: 0, fps)
    if errors:
        raise SystemExit(f"{len(errors)} run(s) failed, e.g. {errors[0][0]}: {errors[0][1]}")
    table = merge_cells(spec, cells, cells_dir, fstar)
    df = per_seed_table(spec, table, selection)
    drift = np.abs(df["rerun_score"] - df["committed_score"]) / np.abs(df["committed_score"])
    meta = out / "metadata.json"
    committed_fstar = {(r["dataset"], r["objective"]): r["f_star"] for r in (
        json.loads(meta.read_text()).get("f_star", []) if meta.exists() else [])}
    fdiff = max((abs(f - committed_fstar[k]) / abs(committed_fstar[k]) for f, k in
                 zip(df["f_star"], zip(df["dataset"], df["objective"]))
                 if k in committed_fstar), default=float("nan"))
    _io.atomic_write_text(out / "per_seed.csv", df.to_csv(index=False))
    _io.atomic_write_json(out / "per_seed.json", {
        "script": "benchmarks/selected_seeds.py", "argv": argv, "started": started,
        "git_commit": _meta._git_commit(), "versions": _meta._versions(),
        "seconds": time.perf_counter() - t0, "runs": len(cells), "runs_this_invocation": n_run,
        "seeds": list(spec.seeds), "datasets": list(spec.datasets),
        "selection": "the configurations selected by the committed run (selection.csv); "
                     "not re-selected",
        "max_relative_score_drift": float(np.nanmax(drift)) if len(drift) else None,
        "max_relative_f_star_difference": float(fdiff)})
    print(f"wrote {out}/per_seed.csv ({len(df)} rows); largest relative drift of the "
          f"selection score from the committed one: {np.nanmax(drift):.2e}; of f*: {fdiff:.2e}; "
          f"{time.perf_counter() - t0:.0f} s")
    return df


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", help="bundled spec name or TOML file")
    ap.add_argument("--results", default="benchmarks/results",
                    help="folder holding <spec name>/selection.csv (written back there)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--datasets", default="",
                    help="comma-separated data sets to rerun (default: every one of the spec)")
    argv = list(sys.argv[1:] if argv is None else argv)
    a = ap.parse_args(argv)
    spec = load_spec(a.spec)
    rerun_selected(spec, Path(a.results) / spec.name, a.jobs, argv,
                   [d for d in a.datasets.split(",") if d])


if __name__ == "__main__":
    main()
