"""``riskopt bench report RESULTS``: one results folder as a readable Markdown report.

Built from the files a run leaves (never reruns a solver): ``metadata.json`` (spec, commit,
machine, wall time, ``f*`` of every problem, the selected configurations), ``results.parquet``
when present (final suboptimality and passes to reach ``1e-4`` / ``1e-8`` per selected
configuration, median over seeds), ``metrics_final.md`` (the ``"metrics"`` analysis) and the
figures of the folder (linked with paths relative to the report). ``--format csv`` writes the
per-configuration table alone.

Examples
--------
>>> from riskopt.bench.report import passes_to_reach
>>> import pandas as pd
>>> t = pd.DataFrame({"seed": [0, 0, 0, 1, 1, 1], "update": [0, 1, 2] * 2,
...                   "passes": [0.0, 1.0, 2.0] * 2,
...                   "suboptimality": [1.0, 1e-3, 1e-9, 1.0, 1e-9, 1e-10]})
>>> passes_to_reach(t, 1e-8)   # the slowest seed decides
2.0
>>> passes_to_reach(t, 1e-12) is None
True
"""
import json
from pathlib import Path

import numpy as np

from . import _partial
from ._view import read_table

__all__ = ["build_report", "configuration_table", "passes_to_reach"]

THRESHOLDS = (1e-4, 1e-8)


def passes_to_reach(runs, eps):
    """Passes at which every seed's suboptimality is ``<= eps`` from then on (the largest
    over seeds of each seed's first such pass); None if some seed never gets there."""
    out = 0.0
    for _, g in runs.groupby("seed", sort=False):
        g = g.sort_values("update")
        sub = g["suboptimality"].to_numpy(dtype=float)
        ok = np.where(np.isfinite(sub), sub, np.inf) <= eps
        if not ok[-1]:
            return None
        # first index from which every later record stays below eps
        bad = np.flatnonzero(~ok)
        k = 0 if bad.size == 0 else int(bad[-1]) + 1
        out = max(out, float(g["passes"].to_numpy(dtype=float)[k]))
    return out


def configuration_table(table):
    """One row per selected (dataset, objective, solver): final suboptimality (median, min,
    max over seeds), passes to reach each threshold, solver time (median), diverged seeds."""
    import pandas as pd

    sel = table[table["selected"].astype(bool)] if "selected" in table.columns else table
    rows = []
    for (ds, obj, solver, config), g in sel.groupby(["dataset", "objective", "solver",
                                                     "config"], sort=False):
        last = g.sort_values("update").groupby("seed").tail(1)
        sub = last["suboptimality"].to_numpy(dtype=float)
        row = {"dataset": ds, "objective": obj, "solver": solver, "config": config,
               "seeds": int(g["seed"].nunique()), "passes": float(g["passes"].max()),
               "final_subopt_median": float(np.median(sub)),
               "final_subopt_min": float(np.min(sub)), "final_subopt_max": float(np.max(sub)),
               "time_s_median": float(np.median(last["time"].to_numpy(dtype=float))),
               "diverged_seeds": int(last["diverged"].astype(bool).sum())}
        for eps in THRESHOLDS:
            row[f"passes_to_{eps:g}"] = passes_to_reach(g, eps)
        rows.append(row)
    return pd.DataFrame(rows)


def _fmt(v):
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "—"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _md(df, columns=None):
    columns = list(columns or df.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def build_report(results, fmt="markdown", relative_to=None):
    """The report of a results folder as text (``fmt`` "markdown" or "csv").

    ``relative_to``: the folder the report will be written to (figure links are made
    relative to it; default the results folder).
    """
    import os

    import pandas as pd

    folder = Path(results)
    if not folder.is_dir():
        raise FileNotFoundError(f"results folder not found: {folder}")
    meta = _read_json(folder / "metadata.json")
    if meta is None and (folder / "metadata.json").exists():
        import warnings

        warnings.warn(f"{folder / 'metadata.json'} is unreadable (not JSON, or truncated): the "
                      "report leaves out the run's commit, machine and f*; rerun `riskopt bench "
                      "run` on the folder (finished cells are reused) to rewrite it",
                      RuntimeWarning, stacklevel=2)
    table_path = folder / "results.parquet"
    partial = None
    if _partial.is_interrupted(folder):  # the complete (seed, problem) groups, labelled
        table, partial = _partial.partial_table(folder)
        meta = {"spec_name": _read_json(folder / "spec.json").get("name", folder.name)}
    elif meta is None and not table_path.exists():
        raise FileNotFoundError(f"{folder} holds no metadata.json or results.parquet: not a "
                                "finished `riskopt bench run` folder")
    else:
        table = read_table(folder)  # its own table or the view metadata.json records
    configs = None
    if table is not None:
        configs = configuration_table(table)
    if fmt == "csv":
        if configs is None:
            raise FileNotFoundError(f"{table_path} is missing: the CSV table needs it")
        text = configs.to_csv(index=False)
        return f"# {partial.line()}\n{text}" if partial else text
    meta = meta or {}
    name = meta.get("spec_name", folder.name)
    out = [f"# {name}" + (" (partial)" if partial else ""), ""]
    if partial:
        out += [f"**{partial.line()}.** The tables below hold the complete groups only; "
                "run the same `riskopt bench run` command again to finish the run.", ""]
    if meta.get("description"):
        out += [meta["description"], ""]
    run = meta.get("run", {})
    cpu = meta.get("cpu", {})
    facts = [("finished", meta.get("finished")), ("commit", meta.get("git_commit")),
             ("machine", f"{cpu.get('model', '?')}, {cpu.get('usable_cpus', '?')} CPUs"
              if cpu else None),
             ("wall time of the last invocation (s)",
              _fmt(run.get("wall_seconds_this_invocation"))),
             ("runs", run.get("cells_total"))]
    out += [f"- {k}: {v}" for k, v in facts if v is not None] + [""]
    fstar = meta.get("f_star") or []
    if fstar:
        out += ["## Reference optima (f*)", "",
                _md(pd.DataFrame(fstar), [c for c in ("dataset", "objective", "f_star",
                                                      "method", "lbfgs_seconds")
                                          if c in pd.DataFrame(fstar).columns])]
    if configs is not None and len(configs):
        cols = ["dataset", "objective", "solver", "config", "final_subopt_median",
                "final_subopt_max"] + [f"passes_to_{e:g}" for e in THRESHOLDS] + [
            "time_s_median", "diverged_seeds"]
        out += ["## Selected configurations", "",
                "Final relative suboptimality over seeds and the passes after which every "
                "seed stays below each threshold (— : not reached in the budget).", "",
                _md(configs, cols)]
    elif meta.get("selected"):
        out += ["## Selected configurations", "", _md(pd.DataFrame(meta["selected"]))]
    metrics_md = folder / "metrics_final.md"
    if metrics_md.exists():
        out += ["## Model metrics at the end of the runs (mean ± std over seeds)", "",
                metrics_md.read_text()]
    base = Path(relative_to) if relative_to is not None else folder
    figs = sorted(p for p in folder.glob("*.png"))
    if figs:
        out += ["## Figures", ""]
        out += [f"![{p.stem}]({os.path.relpath(p, base)})" for p in figs] + [""]
    return "\n".join(out)
