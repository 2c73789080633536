"""Analyses of results tables: hyper-parameter selection, step-size sensitivity, fixed
accuracy and the step-size range summary. Every function takes and returns tables.

Selection (:func:`select`), rule ``"last_passes"`` -- Prospect App. H.3 and SOREL App. B: for
each seed ``k`` let ``L_k(eta)`` be the mean training objective over the last ten passes of the
run with step size ``eta``; choose the ``eta`` minimising ``(1/K) sum_k L_k(eta)``, discarding
any ``eta`` that diverges for any seed. Here a configuration is every searched hyper-parameter
together (``lr`` and, e.g., SOREL's ``dual_lr``), selected jointly per ``(dataset, objective,
solver)``. "The last ten passes" are the recorded points with ``passes > P - 10`` where ``P``
is the last recorded pass count of the run (all recorded points after the start when a run has
at most ten passes), so solvers whose updates cost two passes (SOREL, LSVRG) average over five
records. A configuration is also discarded when a seed is missing or its score is not finite.
Rule ``"final"`` (the RU-CVaR paper's convergence plots): the smallest median over seeds of the
final suboptimality.

Sensitivity (:func:`sensitivity`): per ``(dataset, objective, solver, lr)`` the final
suboptimality and the budget (passes, or steps for streams) needed to reach ``epsilon``
(:func:`epsilons`), median / min / max over seeds. :func:`summary`: per ``(dataset, objective,
solver)`` the best ``lr`` and the width in decades of the ``lr`` range whose final
suboptimality is within ``tolerance`` x the best.
"""
import numpy as np

PROBLEM = ["dataset", "objective", "solver"]
CONFIG = PROBLEM + ["config"]


def seed_scores(table, last_passes=10):
    """Per-run scores: one row per (dataset, objective, solver, config, seed).

    Columns: ``score`` (mean ``value`` over the last ``last_passes`` passes) and ``diverged``.
    """
    import pandas as pd

    keys = CONFIG + ["seed"]
    rows = []
    for k, g in table.groupby(keys, sort=False, observed=True):
        passes = g["passes"].to_numpy(dtype=float)
        values = g["value"].to_numpy(dtype=float)
        last = passes.max()
        window = passes > max(0.0, last - last_passes)
        if not window.any():  # only the starting point was recorded
            window = passes >= last
        score = float(np.mean(values[window]))
        diverged = bool(g["diverged"].any()) or not np.all(np.isfinite(values))
        rows.append(dict(zip(keys, k), score=score, diverged=diverged))
    return pd.DataFrame(rows, columns=keys + ["score", "diverged"])


def final_scores(table):
    """Per-run final suboptimality (``inf`` where not finite): the ``"final"`` rule's score."""
    import pandas as pd

    keys = CONFIG + ["seed"]
    rows = []
    for k, g in table.groupby(keys, sort=False, observed=True):
        sub = g.sort_values("update")["suboptimality"].to_numpy(dtype=float)
        last = sub[-1] if np.isfinite(sub[-1]) else np.inf
        rows.append(dict(zip(keys, k), score=float(last), diverged=bool(g["diverged"].any())))
    return pd.DataFrame(rows, columns=keys + ["score", "diverged"])


def select(table, last_passes=10, seeds=None, rule="last_passes"):
    """Apply the selection rule to a long-form results table.

    Parameters
    ----------
    table : DataFrame
        Long form, with at least the columns ``dataset, objective, solver, config, seed,
        passes, value, diverged`` (one row per recorded point of a run). ``lr`` and ``params``
        are carried over when present.
    last_passes : int, default 10
    seeds : list of int, optional
        The seeds every configuration must have; by default, all seeds seen in ``table``.

    Returns
    -------
    DataFrame with one row per (dataset, objective, solver, config): ``score`` (mean over
    seeds of the per-seed score), ``n_seeds``, ``n_diverged``, ``eligible`` and ``selected``
    (exactly one ``True`` per (dataset, objective, solver) that has an eligible
    configuration), sorted by problem then score.
    """
    import pandas as pd

    per_seed = (seed_scores(table, last_passes) if rule == "last_passes"
                else final_scores(table))
    want = set(table["seed"].unique()) if seeds is None else set(seeds)
    rows = []
    for k, g in per_seed.groupby(CONFIG, sort=False, observed=True):
        have = set(g["seed"])
        n_div = int(g["diverged"].sum())
        if rule == "last_passes":
            score = float(g["score"].mean()) if n_div == 0 else float("nan")
            eligible = n_div == 0 and want <= have and np.isfinite(score)
        else:
            score = float(np.median(g["score"]))
            eligible = want <= have and np.isfinite(score)
        rows.append(dict(zip(CONFIG, k), score=score, n_seeds=len(have), n_diverged=n_div,
                         eligible=bool(eligible)))
    sel = pd.DataFrame(rows, columns=CONFIG + ["score", "n_seeds", "n_diverged", "eligible"])
    extra = [c for c in ("lr", "params") if c in table.columns]
    if extra:
        first = table.drop_duplicates(CONFIG)[CONFIG + extra]
        sel = sel.merge(first, on=CONFIG, how="left")
    sel["selected"] = False
    for _, g in sel.groupby(PROBLEM, sort=False, observed=True):
        ok = g[g["eligible"]]
        if len(ok):
            sel.loc[ok["score"].idxmin(), "selected"] = True
    order = list(dict.fromkeys(map(tuple, sel[PROBLEM].to_numpy())))
    rank = {k: i for i, k in enumerate(order)}
    sel["_p"] = [rank[tuple(r)] for r in sel[PROBLEM].to_numpy()]
    sel = sel.sort_values(["_p", "eligible", "score"], ascending=[True, False, True],
                          kind="mergesort").drop(columns="_p").reset_index(drop=True)
    cols = CONFIG + extra + ["score", "n_seeds", "n_diverged", "eligible", "selected"]
    return sel[cols]


def mark_selected(table, selection):
    """``table`` with a boolean ``selected`` column (True on rows of selected configs)."""
    chosen = selection.loc[selection["selected"], CONFIG]
    keys = set(map(tuple, chosen.to_numpy()))
    flags = [tuple(r) in keys for r in table[CONFIG].to_numpy()]
    out = table.copy()
    out["selected"] = np.asarray(flags, dtype=bool)
    return out


# ---------------------------------------------------------------------------- sensitivity
_RUN = ["dataset", "objective", "solver"]


def _x_unit(g):
    """The budget unit of a run's records: ``passes`` (data sets) or ``step`` (streams)."""
    return "passes" if np.isfinite(g["passes"].to_numpy(dtype=float)).all() else "step"


def epsilons(table, epsilon=0.01, scale="gap"):
    """``{(dataset, objective): epsilon}``: ``epsilon |f*|`` (``scale="fstar"``), ``epsilon``
    x the median over seeds of the initial gap ``F(x0) - f*`` (``"gap"``), or ``epsilon``."""
    out = {}
    for key, g in table.groupby(["dataset", "objective"], sort=False):
        if scale == "fstar":
            out[key] = epsilon * abs(float(g["f_star"].iloc[0]))
        elif scale == "gap":
            first = g[g["update"] == 0].groupby("seed")["suboptimality"].first()
            out[key] = epsilon * float(np.median(first))
        else:
            out[key] = epsilon
    return out


def sensitivity(table, epsilon=0.01, scale="gap"):
    """Per (dataset, objective, solver, lr): final suboptimality and budget to ``epsilon``.

    ``final_*``: the suboptimality at the last record (``inf`` when the run diverged), median /
    min / max over seeds; ``to_eps_*``: the first recorded passes (or steps, ``unit``) with
    suboptimality ``<= epsilon`` (``inf`` when never), likewise; ``budget``: the last record's
    passes (steps); ``initial_gap``: median over seeds of the first record's suboptimality.
    """
    import pandas as pd

    rows = []
    eps_of = epsilons(table, epsilon, scale)
    for (ds, obj, s, lr), g in table.groupby(_RUN + ["lr"], sort=False):
        finals, hits = [], []
        eps = eps_of[ds, obj]
        unit = _x_unit(g)
        for _, r in g.groupby("seed", sort=True):
            r = r.sort_values("update")
            sub = r["suboptimality"].to_numpy(dtype=float)
            sub = np.where(np.isfinite(sub), sub, np.inf)
            finals.append(sub[-1])
            hit = np.flatnonzero(sub <= eps)
            hits.append(float(r[unit].to_numpy()[hit[0]]) if hit.size else np.inf)
        finals, hits = np.asarray(finals), np.asarray(hits)
        gap0 = g[g["update"] == 0].groupby("seed")["suboptimality"].first().to_numpy()
        label = g["dataset_label"].iloc[0] if "dataset_label" in g.columns else ds
        rows.append({"dataset": ds, "dataset_label": label, "objective": obj, "solver": s,
                     "lr": float(lr), "n_seeds": len(finals),
                     "n_diverged": int(g.groupby("seed")["diverged"].any().sum()),
                     "final_median": float(np.median(finals)), "final_min": float(finals.min()),
                     "final_max": float(finals.max()), "epsilon": eps,
                     "to_eps_median": float(np.median(hits)), "to_eps_min": float(hits.min()),
                     "to_eps_max": float(hits.max()),
                     "unit": "steps" if unit == "step" else "passes",
                     "budget": float(g[unit].max()),
                     "initial_gap": float(np.median(gap0)) if gap0.size else np.nan,
                     "f_star": float(g["f_star"].iloc[0])})
    out = pd.DataFrame(rows)
    if len(out):
        order = {}
        for c in _RUN:
            order[c] = {v: i for i, v in enumerate(dict.fromkeys(table[c]))}
        out = out.sort_values(_RUN + ["lr"], key=lambda col: col.map(order[col.name])
                              if col.name in order else col, kind="mergesort")
    return out.reset_index(drop=True)


def _good_range(lrs, vals, threshold, i_best):
    """Contiguous run of grid points around ``i_best`` with ``vals <= threshold``."""
    lo = hi = i_best
    while lo > 0 and vals[lo - 1] <= threshold:
        lo -= 1
    while hi < len(vals) - 1 and vals[hi + 1] <= threshold:
        hi += 1
    return lo, hi


def _width(lrs, lo, hi):
    return float(np.log10(lrs[hi] / lrs[lo]))


def summary(sens, tolerance=10.0, floor=1e-12):
    """Per (dataset, objective, solver): the best ``lr`` and how wide the good ``lr`` range is.

    ``best_lr``/``best_final``: the ``lr`` with the smallest median final suboptimality;
    ``width_decades``: ``log10(lr_hi / lr_lo)`` of the contiguous grid range around it where
    the median final suboptimality is ``<= tolerance x best_final`` (``n_good``: grid points in
    the range; ``n_good_all``: anywhere in the grid); ``*_vs_all``: the same with the threshold
    ``tolerance x`` the best of all solvers on the problem; ``*_eps``: the same with the
    threshold ``epsilon`` (``NaN`` width when no ``lr`` reaches it); ``lr1_ratio``: median final
    at ``lr = 1`` over ``best_final``, ``lr1_good``: ``lr1_ratio <= tolerance``.
    Suboptimalities are floored at ``floor`` so the ratios are defined.
    """
    import pandas as pd

    rows = []
    for (ds, obj), gp in sens.groupby(["dataset", "objective"], sort=False):
        overall = max(float(np.min(gp["final_median"])), floor)
        for s, g in gp.groupby("solver", sort=False):
            g = g.sort_values("lr")
            lrs = g["lr"].to_numpy()
            vals = np.maximum(g["final_median"].to_numpy(), floor)
            eps = float(g["epsilon"].iloc[0]) if "epsilon" in g.columns else np.nan
            i = int(np.argmin(vals))
            best = float(vals[i])
            row = {"dataset": ds, "objective": obj, "solver": s, "best_lr": float(lrs[i]),
                   "best_final": best}
            if not np.isfinite(best):
                row.update(lr_lo=np.nan, lr_hi=np.nan, width_decades=0.0, n_good=0,
                           n_good_all=0, width_decades_vs_all=0.0, n_good_vs_all=0)
            else:
                lo, hi = _good_range(lrs, vals, tolerance * best, i)
                row.update(lr_lo=float(lrs[lo]), lr_hi=float(lrs[hi]),
                           width_decades=_width(lrs, lo, hi), n_good=hi - lo + 1,
                           n_good_all=int(np.sum(vals <= tolerance * best)))
                thr = tolerance * overall
                if vals[i] <= thr:
                    lo2, hi2 = _good_range(lrs, vals, thr, i)
                    row.update(width_decades_vs_all=_width(lrs, lo2, hi2),
                               n_good_vs_all=hi2 - lo2 + 1)
                else:
                    row.update(width_decades_vs_all=np.nan, n_good_vs_all=0)
            if np.isfinite(best) and vals[i] <= eps:
                lo3, hi3 = _good_range(lrs, vals, eps, i)
                row.update(width_decades_eps=_width(lrs, lo3, hi3),
                           n_reach_eps=int(np.sum(vals <= eps)))
            else:
                row.update(width_decades_eps=np.nan, n_reach_eps=0)
            one = np.flatnonzero(np.isclose(lrs, 1.0))
            if one.size:
                r1 = float(vals[one[0]] / best) if np.isfinite(best) else np.nan
                row.update(lr1_final=float(vals[one[0]]), lr1_ratio=r1,
                           lr1_good=bool(np.isfinite(r1) and r1 <= tolerance))
            else:
                row.update(lr1_final=np.nan, lr1_ratio=np.nan, lr1_good=False)
            rows.append(row)
    return pd.DataFrame(rows)
