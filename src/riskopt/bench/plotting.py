"""Figures from results tables (plotting never reruns a solver).

One panel per (dataset, objective): rows are objectives, columns data sets, as in Prospect
Fig. 3. Each panel shows, for every solver, the run of its *selected* configuration only:
the median suboptimality over seeds (line) and a band over seeds (``minmax``: the smallest to
the largest seed, the default; ``iqr``: 25th-75th percentiles; ``none``), on a log scale.
Against passes all seeds share the x values; against time the x value of a point is the median
over seeds of the solver-only seconds elapsed at that point.

Suboptimality can be <= 0 when a solver ends below the L-BFGS reference (SOREL Fig. 2 shows
such points); values are drawn at ``floor`` (default 1e-12) so the log scale can show them.

Files: ``figure.png/.pdf`` against the first x axis of the spec's ``plot.x`` (passes by
default) and ``figure_<x>.png/.pdf`` for the others (``figure_time``); with more than 12
panels also one figure per objective, ``figure[_<x>]_<objective>.png/.pdf``.
"""
import json
import re
from pathlib import Path

import numpy as np

from . import _io

MAX_PANELS = 12
_XLABEL = {"passes": "passes", "time": "solver time (s)"}


def _read_settings(folder):
    p = Path(folder) / "spec.json"
    if p.exists():
        try:
            return json.loads(p.read_text()).get("plot", {})
        except (OSError, ValueError):
            pass
    return {}


def _slug(text):
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(text)).strip("_") or "x"


def _load(results):
    import pandas as pd

    path = Path(results)
    if path.is_dir():
        folder, table_path = path, path / "results.parquet"
    else:
        folder, table_path = path.parent, path
    if not table_path.exists():
        raise FileNotFoundError(f"no results table at {table_path} (run `riskopt bench run` "
                                "first)")
    return folder, pd.read_parquet(table_path)


def _curves(g, x, band):
    """Median curve and band over seeds of one solver's selected runs."""
    sub = g.pivot_table(index="update", columns="seed", values="suboptimality", aggfunc="first")
    xs = g.pivot_table(index="update", columns="seed", values=x, aggfunc="first")
    S = sub.to_numpy(dtype=float)
    xv = np.nanmedian(xs.to_numpy(dtype=float), axis=1)
    with np.errstate(all="ignore"):
        med = np.nanmedian(S, axis=1)
        if band == "minmax":
            lo, hi = np.nanmin(S, axis=1), np.nanmax(S, axis=1)
        elif band == "iqr":
            lo, hi = np.nanpercentile(S, 25, axis=1), np.nanpercentile(S, 75, axis=1)
        else:
            lo = hi = None
    return xv, med, lo, hi


def _draw(table, rows, cols, x, band, floor, title=None, unselected=None):
    from matplotlib.figure import Figure

    solvers = list(dict.fromkeys(table["solver"]))
    colors = {s: f"C{i % 10}" for i, s in enumerate(solvers)}
    fig = Figure(figsize=(3.2 * len(cols) + 0.4, 2.6 * len(rows) + 0.9), layout="constrained")
    axes = fig.subplots(len(rows), len(cols), squeeze=False, sharex=False)
    handles = {}
    for r, obj in enumerate(rows):
        for c, ds in enumerate(cols):
            ax = axes[r, c]
            panel = table[(table["objective"] == obj) & (table["dataset"] == ds)]
            for s in solvers:
                g = panel[panel["solver"] == s]
                if g.empty:
                    continue
                xv, med, lo, hi = _curves(g, x, band)
                (line,) = ax.plot(xv, np.maximum(med, floor), color=colors[s], lw=1.6, label=s)
                handles[s] = line
                if lo is not None and g["seed"].nunique() > 1:
                    ax.fill_between(xv, np.maximum(lo, floor), np.maximum(hi, floor),
                                    color=colors[s], alpha=0.2, lw=0)
            ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.3)
            if r == 0:
                ax.set_title(ds)
            if c == 0:
                ax.set_ylabel(f"{obj}\nsuboptimality")
            if r == len(rows) - 1:
                ax.set_xlabel(_XLABEL[x])
            missing = (unselected or {}).get((ds, obj), [])
            if missing:
                ax.text(0.98, 0.98, "no stable lr: " + ", ".join(missing), ha="right",
                        va="top", fontsize=7, transform=ax.transAxes, color="0.35")
    if title:
        fig.suptitle(title)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center",
                   ncol=min(len(handles), 6), frameon=False)
    return fig


def plot_results(results, out_dir=None, table=None, x=None, formats=("png", "pdf"),
                 band=None, floor=None):
    """Draw the figures of a results folder (or ``results.parquet``); return the file paths.

    Parameters
    ----------
    results : path
        The output folder of :func:`riskopt.bench.run` (or its ``results.parquet``).
    out_dir : path, optional
        Where to write (default: the results folder).
    table : DataFrame, optional
        The table already in memory (skips reading it).
    x : sequence of {"passes", "time"}, optional
        x axes (default: the spec's ``plot.x``, else both).
    formats : sequence of str, default ("png", "pdf")
    band : {"minmax", "iqr", "none"}, optional
    floor : float, optional
        Smallest suboptimality drawn (default 1e-12).
    """
    from . import splplus

    if splplus.is_results_folder(results):  # the SPL+ driver's own figures
        return splplus.plot_results(results, out_dir=out_dir, table=table, formats=formats)
    if table is None:
        folder, table = _load(results)
    else:
        folder = Path(results)
    settings = _read_settings(folder)
    xs = list(x or settings.get("x") or ("passes", "time"))
    for v in xs:
        if v not in _XLABEL:
            raise ValueError(f"x must be 'passes' or 'time', got {v!r}")
    band = band or settings.get("band", "minmax")
    if band not in ("minmax", "iqr", "none"):
        raise ValueError(f"band must be 'minmax', 'iqr' or 'none', got {band!r}")
    floor = float(floor if floor is not None else settings.get("floor", 1e-12))
    out_dir = Path(out_dir) if out_dir is not None else folder
    out_dir.mkdir(parents=True, exist_ok=True)

    if "selected" not in table.columns:
        raise ValueError("the table has no 'selected' column; it is not a riskopt results table")
    sel = table[table["selected"].astype(bool)]
    if sel.empty:
        raise ValueError("no selected configuration to plot (every configuration diverged?)")
    rows = list(dict.fromkeys(table["objective"]))
    cols = list(dict.fromkeys(table["dataset"]))
    unselected = {}
    for (ds, obj, s), g in table.groupby(["dataset", "objective", "solver"], sort=False):
        if not g["selected"].any():
            unselected.setdefault((ds, obj), []).append(s)

    spec_name = str(table["spec"].iloc[0]) if "spec" in table.columns and len(table) else ""
    written = []
    for k, xv in enumerate(xs):
        stem = "figure" if k == 0 else f"figure_{xv}"
        groups = [(stem, rows, spec_name)]
        if len(rows) * len(cols) > MAX_PANELS:
            groups += [(f"{stem}_{_slug(r)}", [r], f"{spec_name}: {r}") for r in rows]
        for name, rws, title in groups:
            fig = _draw(sel, rws, cols, xv, band, floor, title=title, unselected=unselected)
            for fmt in formats:
                path = out_dir / f"{name}.{fmt}"
                _io.atomic_savefig(fig, path, dpi=150 if fmt == "png" else None)
                written.append(path)
    return written
