"""Figures from results tables (plotting never reruns a solver).

Every figure is a function of the long table (and of the sensitivity table derived from it by
:mod:`riskopt.bench.analysis`); which ones a results folder gets is the spec's ``analyses``.

``convergence`` -- ``figure.png`` (and ``figure_<x>.png`` for the other x axes of
``plot.x``): one panel per (objective, dataset), objectives in rows and data sets in columns
(``plot.columns`` wraps them), as in Prospect Fig. 3. Each panel shows, for every solver, the
runs of its *selected* configuration only: the median suboptimality over seeds (line) and a
band over seeds (``minmax``: the smallest to the largest seed, the default; ``iqr``: 25th-75th
percentiles; ``none``), on a log scale. All seeds share the x values of passes and steps;
against time the x value of a point is the median over seeds. With more than 12 panels also
one figure per objective, ``figure[_<x>]_<objective>.png``.

``sensitivity`` -- ``sensitivity.png``: final suboptimality against ``lr`` (median and
min-max band over seeds; runs that diverged or ended above 10x the initial gap drawn as x at
the top). ``fixed_accuracy`` -- ``fixed_accuracy.png``: passes (steps) needed to reach
``epsilon`` against ``lr`` (x above the dashed budget line: never reached).

Figures are small palette PNGs (:func:`riskopt.bench._io.small_png`: 100 dpi, under 150 KB
where the grid allows), the only figures a results folder gets by default; ``formats`` (``bench
plot --format png pdf``) adds a vector copy on request.

Suboptimality can be <= 0 when a solver ends below the reference (SOREL Fig. 2 shows such
points); values are drawn at ``floor`` (default 1e-12) so the log scale can show them.
"""
import json
import re
import warnings
from pathlib import Path

import numpy as np

from . import _io

MAX_PANELS = 12
_XLABEL = {"passes": "passes", "time": "solver time (s)", "steps": "steps"}
_XCOL = {"passes": "passes", "time": "time", "steps": "step"}
#: Columns of tables written before the one schema (one family's driver), renamed on reading.
_OLD_COLUMNS = {"problem": "dataset", "method": "solver_name", "record": "update"}


def _read_spec(folder):
    p = Path(folder) / "spec.json"
    if p.exists():
        try:
            return json.loads(p.read_text())
        except (OSError, ValueError):
            pass
    return {}


def _slug(text):
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(text)).strip("_") or "x"


def normalise_table(table):
    """A results table in the current column names (older tables are renamed, not rerun)."""
    if "problem" in table.columns and "dataset" in table.columns:
        table = table.drop(columns="dataset")
    t = table.rename(columns=_OLD_COLUMNS)
    if "method_label" in t.columns:
        t = t.rename(columns={"method_label": "solver"})
    if "objective" not in t.columns:
        t["objective"] = "objective"
    if "config" not in t.columns:
        t["config"] = [f"lr={v:g}" for v in t["lr"]]
    if "dataset_label" not in t.columns:
        t["dataset_label"] = t.get("problem_label", t["dataset"])
    return t


def _load(results):
    import pandas as pd

    from ._view import TABLE, read_table

    path = Path(results)
    if path.is_dir():
        folder, table_path = path, path / TABLE
    else:
        folder, table_path = path.parent, path
    if table_path.name == TABLE:  # the folder's own table, or the view it records
        table = read_table(folder)
    else:
        table = pd.read_parquet(table_path) if table_path.exists() else None
    if table is None:
        raise FileNotFoundError(f"no results table at {table_path} (run `riskopt bench run` "
                                "first)")
    return folder, normalise_table(table)


# ---------------------------------------------------------------------------- layout
def _panels(table, columns):
    """``[(objective, dataset)]`` in rows of ``columns`` panels, and the grid shape."""
    objs = list(dict.fromkeys(table["objective"]))
    dss = list(dict.fromkeys(table["dataset"]))
    cols = columns or len(dss)
    grid = []
    for o in objs:
        row = []
        for d in dss:
            row.append((o, d))
            if len(row) == cols:
                grid.append(row)
                row = []
        if row:
            grid.append(row)
    return grid, cols


def _figure(n_rows, n_cols):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.2 * n_cols + 0.4, 2.6 * n_rows + 0.9), layout="constrained")
    return fig, fig.subplots(n_rows, n_cols, squeeze=False, sharex=False)


def _shared_config(configs):
    """``({solver: its own part of the config label}, the part every solver shares)``: the
    hyper-parameters that are equal for every solver of a panel (fixed in the spec, e.g.
    ``per_group=16``) are named once, not in every legend entry. A label that is not a plain
    ``k=v,k=v`` list is kept whole."""
    pairs = {s: c.split(",") if c else [] for s, c in configs.items()}
    if len(pairs) < 2 or not all("=" in p for ps in pairs.values() for p in ps):
        return dict(configs), ""
    common = [p for p in next(iter(pairs.values())) if all(p in ps for ps in pairs.values())]
    own = {s: ",".join(p for p in ps if p not in common) for s, ps in pairs.items()}
    return own, ", ".join(common)


def _legend(fig, handles, n_cols=None):
    """The figure's legend below the panels: at most 6 entries a row (2 per panel column
    when ``n_cols`` is given, so that a narrow figure does not cut its legend off)."""
    if handles:
        cap = 6 if n_cols is None else min(6, 2 * n_cols)
        fig.legend(list(handles.values()), list(handles), loc="outside lower center",
                   ncol=min(len(handles), cap), frameon=False)


#: What a results folder gets by default: one small PNG per figure (:func:`_io.small_png`);
#: vector formats (``pdf``, ``svg``) only when asked (``bench plot --format png pdf``).
DEFAULT_FORMATS = ("png",)


def _save(fig, stem, formats):
    written = []
    for fmt in formats:
        path = Path(f"{stem}.{fmt}")
        _io.atomic_savefig(fig, path)
        written.append(path)
    return written


def _cells(table, grid, n_cols, axes):
    """``(r, c, ax, objective, dataset, rows of that panel)`` of every used panel; unused
    panels of the last row are hidden."""
    for r, row in enumerate(grid):
        for c in range(n_cols):
            if c >= len(row):
                axes[r, c].set_visible(False)
                continue
            obj, ds = row[c]
            yield r, c, axes[r, c], obj, ds, table[(table["objective"] == obj)
                                                   & (table["dataset"] == ds)]


def _colors(table):
    solvers = list(dict.fromkeys(table["solver"]))
    return solvers, {s: f"C{i % 10}" for i, s in enumerate(solvers)}


def _title(table, obj, ds, n_objectives):
    label = str(table.loc[table["dataset"] == ds, "dataset_label"].iloc[0])
    return label if n_objectives == 1 else f"{label}\n{obj}"


# ---------------------------------------------------------------------------- convergence
def _curves(g, x, band):
    """Median curve and band over seeds of one solver's selected runs."""
    sub = g.pivot_table(index="update", columns="seed", values="suboptimality", aggfunc="first")
    xs = g.pivot_table(index="update", columns="seed", values=x, aggfunc="first")
    S = sub.to_numpy(dtype=float)
    S = np.where(np.isfinite(S), S, np.nan)
    xv = np.nanmedian(xs.to_numpy(dtype=float), axis=1)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanmedian(S, axis=1)
        if band == "minmax":
            lo, hi = np.nanmin(S, axis=1), np.nanmax(S, axis=1)
        elif band == "iqr":
            lo, hi = np.nanpercentile(S, 25, axis=1), np.nanpercentile(S, 75, axis=1)
        else:
            lo = hi = None
    return xv, med, lo, hi


def _ylabel(table):
    """What the y axis shows: relative or absolute suboptimality (from the spec, else the
    first value of the runs: relative gaps start at 1)."""
    spec = table.attrs.get("suboptimality")
    if spec is None and len(table) and "update" in table.columns:
        first = table.loc[table["update"] == 0, "suboptimality"].to_numpy(dtype=float)
        spec = "relative" if first.size and np.allclose(first[np.isfinite(first)], 1.0) \
            else "absolute"
    return ("relative suboptimality\n(F - f*) / (F(w0) - f*)" if spec == "relative"
            else "suboptimality F - f*")


def draw_convergence(table, grid, n_cols, x, band, floor, xscale="linear", title=None,
                     unselected=None):
    """The convergence figure of the selected rows of ``table`` (see the module docstring).

    Each panel's legend names the selected configuration of every solver (``lr=...``)."""
    solvers, colors = _colors(table)
    fig, axes = _figure(len(grid), n_cols)
    n_obj = table["objective"].nunique()
    ylabel = _ylabel(table)
    handles = {}
    for r, c, ax, obj, ds, panel in _cells(table, grid, n_cols, axes):
        own, shared = _shared_config(
            {s: str(panel.loc[panel["solver"] == s, "config"].iloc[0])
             for s in solvers if "config" in panel.columns and (panel["solver"] == s).any()})
        if shared:
            import textwrap

            ax.text(0.02, 0.02, textwrap.fill("all: " + shared, 60), ha="left", va="bottom",
                    fontsize=5, transform=ax.transAxes, color="0.35")
        for s in solvers:
            g = panel[panel["solver"] == s]
            if g.empty:
                continue
            xv, med, lo, hi = _curves(g, _XCOL[x], band)
            keep = xv > 0 if xscale == "log" else np.isfinite(xv)
            config = own.get(s, "")
            (line,) = ax.plot(xv[keep], np.maximum(med[keep], floor), color=colors[s],
                              lw=1.6, label=f"{s} ({config})" if config else s)
            handles[s] = line
            if lo is not None and g["seed"].nunique() > 1:
                ax.fill_between(xv[keep], np.maximum(lo[keep], floor),
                                np.maximum(hi[keep], floor), color=colors[s], alpha=0.2,
                                lw=0)
        ax.set_yscale("log")
        ax.set_xscale(xscale)
        ax.grid(True, which="major", alpha=0.3)
        if len(panel):
            ax.legend(fontsize=6, loc="upper right", frameon=False, handlelength=1.2)
        if n_cols == table["dataset"].nunique() and n_obj > 1:
            if r == 0:
                ax.set_title(str(panel["dataset_label"].iloc[0]) if len(panel) else ds)
            if c == 0:
                ax.set_ylabel(f"{obj}\n{ylabel}", fontsize=8)
        else:
            ax.set_title(_title(table, obj, ds, n_obj) if len(panel) else ds, fontsize=9)
            if c == 0:
                ax.set_ylabel(ylabel if n_obj > 1 else f"{obj}\n{ylabel}", fontsize=8)
        if r == len(grid) - 1:
            ax.set_xlabel(_XLABEL[x])
        missing = (unselected or {}).get((ds, obj), [])
        if missing:
            ax.text(0.98, 0.98, "no stable lr: " + ", ".join(missing), ha="right",
                    va="top", fontsize=7, transform=ax.transAxes, color="0.35")
    if title:
        import textwrap

        fig.suptitle(textwrap.fill(title, max(40, 38 * n_cols)), fontsize=9)
    _legend(fig, handles, n_cols)
    return fig


def plot_convergence(table, out_dir, xs, band="minmax", floor=1e-12, columns=None,
                     xscale="linear", formats=DEFAULT_FORMATS):
    """``figure[_<x>].png`` (+ ``.pdf`` on request): the selected configurations' curves (``selected`` column)."""
    sel = table[table["selected"].astype(bool)]
    if sel.empty:
        raise ValueError("no selected configuration to plot (every configuration diverged?)")
    rows = list(dict.fromkeys(table["objective"]))
    grid, n_cols = _panels(table, columns)
    unselected = {}
    for (ds, obj, s), g in table.groupby(["dataset", "objective", "solver"], sort=False):
        if not g["selected"].any():
            unselected.setdefault((ds, obj), []).append(s)
    spec_name = str(table["spec"].iloc[0]) if "spec" in table.columns and len(table) else ""
    desc = table.attrs.get("description")
    if desc:
        spec_name = f"{spec_name}: {desc}"
    written = []
    for k, xv in enumerate(xs):
        stem = "figure" if k == 0 else f"figure_{xv}"
        groups = [(stem, grid, spec_name)]
        if sum(len(r) for r in grid) > MAX_PANELS:
            for r in rows:
                sub_grid, _ = _panels(table[table["objective"] == r], columns)
                groups.append((f"{stem}_{_slug(r)}", sub_grid, f"{spec_name}: {r}"))
        for name, g, title in groups:
            fig = draw_convergence(sel, g, n_cols, xv, band, floor, xscale=xscale, title=title,
                                   unselected=unselected)
            written += _save(fig, out_dir / name, formats)
    return written


# ---------------------------------------------------------------------------- sensitivity
def _sens_panel(ax, g, solvers, colors, cols, handles, floor, cap, band_top=None):
    """Median line + min-max band vs lr; non-finite points (and points above ``cap``) drawn as
    x at the top."""
    col_med, col_lo, col_hi = cols
    top = max(cap, floor * 10)
    for k, s in enumerate(solvers):
        h = g[g["solver"] == s].sort_values("lr")
        if h.empty:
            continue
        lr = h["lr"].to_numpy(dtype=float)
        med = np.maximum(h[col_med].to_numpy(dtype=float), floor)
        lo = np.maximum(h[col_lo].to_numpy(dtype=float), floor)
        hi = np.maximum(h[col_hi].to_numpy(dtype=float), floor)
        ok = np.isfinite(med) & (med <= top)
        (line,) = ax.plot(lr, np.where(ok, med, np.nan), color=colors[s], lw=1.6, marker="o",
                          ms=2.5, label=s)
        handles[s] = line
        if (~ok).any():  # staggered so that the solvers' markers do not hide each other
            ax.plot(lr[~ok], np.full((~ok).sum(), top * 1.6 ** k), ls="none", marker="x",
                    ms=5, color=colors[s])
        if h["n_seeds"].max() > 1:
            bt = top if band_top is None else band_top
            ax.fill_between(lr, np.minimum(np.where(np.isfinite(lo), lo, bt), bt),
                            np.minimum(np.where(np.isfinite(hi), hi, bt), bt),
                            color=colors[s], alpha=0.18, lw=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axvline(1.0, color="0.6", ls=":", lw=1)
    ax.grid(True, which="major", alpha=0.3)


def _sens_figure(sens, stem, columns, floor, formats, panel, suptitle):
    grid, n_cols = _panels(sens, columns)
    solvers, colors = _colors(sens)
    fig, axes = _figure(len(grid), n_cols)
    handles = {}
    n_obj = sens["objective"].nunique()
    for r, c, ax, obj, ds, g in _cells(sens, grid, n_cols, axes):
        panel(ax, g, solvers, colors, handles)
        ax.set_title(_title(sens, obj, ds, n_obj), fontsize=9)
        if r == len(grid) - 1:
            ax.set_xlabel("lr")
    fig.suptitle(suptitle, fontsize=10)
    _legend(fig, handles)
    return _save(fig, stem, formats)


def plot_sensitivity(sens, out_dir, columns=None, floor=1e-12, title="",
                     formats=DEFAULT_FORMATS):
    """``sensitivity.png``: final suboptimality vs lr (median, min-max over seeds)."""
    def panel(ax, g, solvers, colors, handles):
        gap = g["initial_gap"].to_numpy(dtype=float)
        gap = gap[np.isfinite(gap)]
        # blown-up runs would flatten the panel: anything above 10x the initial gap is drawn
        # as an x at the top, like a divergence
        finite = g[["final_median", "final_min", "final_max"]].to_numpy(dtype=float)
        finite = finite[np.isfinite(finite)]
        cap = 10.0 * float(gap.max()) if gap.size else (
            finite.max() * 10 if finite.size else 1.0)
        _sens_panel(ax, g, solvers, colors, ("final_median", "final_min", "final_max"),
                    handles, floor, cap)
        ax.set_ylabel("final suboptimality")

    budget = sens["budget"].max() if len(sens) else 0
    unit = sens["unit"].iloc[0] if len(sens) else "passes"
    return _sens_figure(sens, out_dir / "sensitivity", columns, floor, formats, panel,
                        f"{title}: final suboptimality after {budget:g} {unit}\nmedian and "
                        "min-max over seeds; x at the top: diverged or above 10x the initial "
                        "gap")


def plot_fixed_accuracy(sens, out_dir, columns=None, floor=1e-12, title="",
                        formats=DEFAULT_FORMATS):
    """``fixed_accuracy.png``: passes (steps) to reach epsilon vs lr."""
    def panel(ax, g, solvers, colors, handles):
        budget = float(g["budget"].max()) if len(g) else 1.0
        _sens_panel(ax, g, solvers, colors, ("to_eps_median", "to_eps_min", "to_eps_max"),
                    handles, floor, 2.0 * budget, band_top=budget)
        ax.axhline(budget, color="0.5", ls="--", lw=1)
        eps = float(g["epsilon"].iloc[0]) if len(g) else float("nan")
        ax.text(0.02, 0.02, f"$\\epsilon$ = {eps:.3g}", transform=ax.transAxes, fontsize=7)
        ax.set_ylabel(f"{g['unit'].iloc[0] if len(g) else 'passes'} to reach eps")

    return _sens_figure(sens, out_dir / "fixed_accuracy", columns, floor, formats, panel,
                        f"{title}: budget to reach suboptimality <= eps\nmedian and min-max "
                        "over seeds; x above the dashed budget line: not reached")


# ---------------------------------------------------------------------------- entry point
def plot_results(results, out_dir=None, table=None, x=None, formats=DEFAULT_FORMATS,
                 band=None, floor=None):
    """Draw the figures of a results folder (or ``results.parquet``); return the file paths.

    Parameters
    ----------
    results : path
        The output folder of :func:`riskopt.bench.run` (or its ``results.parquet``).
    out_dir : path, optional
        Where to write (default: the results folder).
    table : DataFrame, optional
        The table already in memory (skips reading it). ``table.attrs["partial"]``, when
        set, heads the titles (an interrupted run's complete groups:
        :func:`riskopt.bench._partial.partial_table`, as ``riskopt bench plot`` does).
    x : sequence of {"passes", "steps", "time"}, optional
        x axes of the convergence figure (default: the spec's ``plot.x``, else both).
    formats : sequence of str, default ("png",)
        File formats. A PNG is a palette PNG at 100 dpi (under 150 KB where the grid of
        panels allows); ask for ``"pdf"`` (or ``"svg"``) to get a vector copy too.
    band : {"minmax", "iqr", "none"}, optional
    floor : float, optional
        Smallest suboptimality drawn (default 1e-12).
    """
    from . import analysis

    partial = table.attrs.get("partial") if table is not None else None
    if table is None:
        folder, table = _load(results)
    else:
        folder, table = Path(results), normalise_table(table)
    spec = _read_spec(folder)
    table.attrs["suboptimality"] = spec.get("record", {}).get("suboptimality")
    table.attrs["description"] = ". ".join(t for t in (partial, spec.get("description"))
                                           if t)
    settings = spec.get("plot", {})
    xs = list(x or settings.get("x") or ("passes", "time"))
    for v in xs:
        if v not in _XLABEL:
            raise ValueError(f"x must be 'passes', 'steps' or 'time', got {v!r}")
    band = band or settings.get("band", "minmax")
    if band not in ("minmax", "iqr", "none"):
        raise ValueError(f"band must be 'minmax', 'iqr' or 'none', got {band!r}")
    floor = float(floor if floor is not None else settings.get("floor", 1e-12))
    columns, xscale = settings.get("columns"), settings.get("xscale", "linear")
    out_dir = Path(out_dir) if out_dir is not None else folder
    out_dir.mkdir(parents=True, exist_ok=True)
    analyses = spec.get("analyses", ["convergence"])
    a = spec.get("analysis", {})
    if "analyses" not in spec and "epsilon" in spec:  # a spec.json older than the one schema
        analyses = ["convergence", "sensitivity", "fixed_accuracy"]
        a = {k: spec[k] for k in ("epsilon", "epsilon_scale") if k in spec}
    if "selected" not in table.columns:
        if "update" not in table.columns:
            raise ValueError("the table has no 'selected' column; it is not a riskopt "
                             "results table")
        rule = spec.get("selection", {}).get("rule", "final")
        table = analysis.mark_selected(table, analysis.select(table, rule=rule))
    written = []
    if "convergence" in analyses:
        written += plot_convergence(table, out_dir, xs, band, floor, columns, xscale, formats)
    if "sensitivity" in analyses or "fixed_accuracy" in analyses:
        sens = analysis.sensitivity(table, a.get("epsilon", 0.01), a.get("epsilon_scale", "gap"))
        name = str(table["spec"].iloc[0]) if "spec" in table.columns and len(table) else ""
        name += f" ({partial})" if partial else ""
        written += plot_sensitivity(sens, out_dir, columns, floor, name, formats)
        if "fixed_accuracy" in analyses:
            written += plot_fixed_accuracy(sens, out_dir, columns, floor, name, formats)
    return written
