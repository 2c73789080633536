"""Step-size (hyper-parameter) selection by the papers' rule.

Prospect App. H.3 and SOREL App. B: for each seed ``k`` let ``L_k(eta)`` be the mean training
objective over the last ten passes of the run with step size ``eta``; choose the ``eta``
minimising ``(1/K) sum_k L_k(eta)``, discarding any ``eta`` that diverges for any seed.

Here a configuration is every searched hyper-parameter together (``lr`` and, e.g., SOREL's
``dual_lr``), selected jointly per ``(dataset, objective, solver)``. "The last ten passes" are
the recorded points with ``passes > P - 10`` where ``P`` is the last recorded pass count of the
run (all recorded points after the start when a run has at most ten passes), so solvers whose
updates cost two passes (SOREL, LSVRG) average over five records. A configuration is also
discarded when a seed is missing or its score is not finite.
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


def select(table, last_passes=10, seeds=None):
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

    per_seed = seed_scores(table, last_passes)
    want = set(table["seed"].unique()) if seeds is None else set(seeds)
    rows = []
    for k, g in per_seed.groupby(CONFIG, sort=False, observed=True):
        have = set(g["seed"])
        n_div = int(g["diverged"].sum())
        score = float(g["score"].mean()) if n_div == 0 else float("nan")
        eligible = n_div == 0 and want <= have and np.isfinite(score)
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
