r"""Model metrics recorded along a benchmark run (``record.metrics`` in a spec).

The papers on DRO and fairness plot not only the objective but what the model does: training
and test accuracy vs the number of processed samples (KL-constrained DRO, Fig. 1-4), the
worst-class or worst-group error (group DRO, distribution shift), a loss on held-out data.
A spec asks for them by name::

    record = { value = "iterate", every = 1,
               metrics = ["train_accuracy", "test_accuracy", "test_worst_class_accuracy"] }

Each name is ``<split>_<metric>`` or ``<split>_<metric>:<attribute>``: the split is ``train``
(the data the objective is built on) or ``test`` (the data set's test split,
:func:`riskopt.datasets.load`), the metric one of :data:`METRICS`, or one of
:data:`GROUP_METRICS`, which need a group / sensitive attribute of the data set
(``Dataset.groups_train`` / ``groups_test``, e.g. ``test_eo:race`` or
``test_worst_group_error:sex``; ``worst_group_error:label`` uses the true class as the group;
``worst_group_error:race*sex`` the combinations of two attributes, as group DRO's groups). They are evaluated at the same record points as the objective (``value =
"iterate"``: the point the solver reports) and stored in the results table as the columns
``m_<name>``; the ``"metrics"`` analysis plots them (``metrics.png``) and tabulates their final
values (``metrics_final.csv``).

The model is the objective's linear model: scores ``Z = [X, 1] W`` (the ones column when the
objective fits an intercept). Predictions: the sign of the score (binary logistic, labels in
{0, 1}), the arg-max over classes (multinomial), the score itself (regression).

Examples
--------
>>> import numpy as np, riskopt as ro
>>> from riskopt.bench.record_metrics import compute
>>> X = np.array([[1.0], [-1.0], [2.0], [-2.0]]); y = np.array([1.0, 0.0, 0.0, 0.0])
>>> obj = ro.Objective("logistic", "cvar:0.5", X, y)
>>> out = compute(["train_accuracy", "train_worst_class_accuracy"], obj, (X, y), None,
...               np.array([[1.0], [0.0]]))
>>> out["m_train_accuracy"].tolist(), out["m_train_worst_class_accuracy"].tolist()
([0.75, 0.75], [0.6666666666666666, 0.0])
"""
import numpy as np

__all__ = ["METRICS", "GROUP_METRICS", "SPLITS", "check_names", "compute", "column"]

SPLITS = ("train", "test")


def _accuracy(y, pred, task):
    return float(np.mean(pred == y))


def _error(y, pred, task):
    return 1.0 - _accuracy(y, pred, task)


def _per_class(y, pred):
    classes = np.unique(y)
    return np.array([np.mean(pred[y == c] == c) for c in classes])


def _worst_class_accuracy(y, pred, task):
    return float(np.min(_per_class(y, pred)))


def _balanced_accuracy(y, pred, task):
    return float(np.mean(_per_class(y, pred)))


def _rmse(y, pred, task):
    return float(np.sqrt(np.mean((pred - y) ** 2)))


#: metric name -> (function(y, prediction, task) -> float, tasks it applies to)
METRICS = {
    "accuracy": (_accuracy, ("binary", "multiclass")),
    "error": (_error, ("binary", "multiclass")),
    "worst_class_accuracy": (_worst_class_accuracy, ("binary", "multiclass")),
    "balanced_accuracy": (_balanced_accuracy, ("binary", "multiclass")),
    "rmse": (_rmse, ("regression",)),
    "loss": (None, ("binary", "multiclass", "regression")),  # mean loss of the objective
}


def _eo(y, pred, task, a):
    from ..metrics import equal_opportunity_difference

    return equal_opportunity_difference(y, pred, a)


def _dp(y, pred, task, a):
    from ..metrics import demographic_parity_difference

    return demographic_parity_difference(pred, a)


def _smd(y, pred, task, a):
    from ..metrics import absolute_mean_difference

    return absolute_mean_difference(pred, a)


def _ks(y, pred, task, a):
    from ..metrics import statistical_parity_ks

    return statistical_parity_ks(pred, a)


def _group_error(agg):
    def fn(y, pred, task, a):
        from ..metrics import group_errors

        loss = None if task != "regression" else (lambda t, p: (t - p) ** 2)
        vals = group_errors(y, pred, a, loss=loss).values
        return float(agg(vals))
    return fn


#: metrics of a group / sensitive attribute: name -> (function(y, pred, task, groups), tasks)
GROUP_METRICS = {
    "eo": (_eo, ("binary",)),
    "dp": (_dp, ("binary",)),
    "smd": (_smd, ("binary", "regression")),
    "ks": (_ks, ("binary", "regression")),
    "worst_group_error": (_group_error(np.nanmax), ("binary", "multiclass", "regression")),
    "median_group_error": (_group_error(np.nanmedian), ("binary", "multiclass",
                                                        "regression")),
}


def column(name):
    """The results-table column of a recorded metric."""
    return f"m_{name}"


def _split_name(name):
    """``(split, metric, attribute or None)``."""
    head, _, attr = str(name).partition(":")
    split, _, metric = head.partition("_")
    ok = split in SPLITS and ((metric in METRICS and not attr)
                              or (metric in GROUP_METRICS and attr))
    if not ok:
        raise ValueError(
            f"unknown metric {name!r}: use <split>_<metric> with split in {list(SPLITS)} and "
            f"metric in {sorted(METRICS)} (e.g. 'test_accuracy'), or "
            f"<split>_<metric>:<attribute> with metric in {sorted(GROUP_METRICS)} "
            "(e.g. 'test_eo:race')")
    return split, metric, (attr or None)


def check_names(names):
    """Validate a list of metric names; returns it as a list of str."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ValueError(f"metrics must be a list of names, got {names!r}")
    for n in names:
        _split_name(n)
    if len(set(names)) != len(names):
        raise ValueError(f"metrics has duplicate names: {list(names)}")
    return [str(n) for n in names]


def task_of(objective):
    """``"binary"``, ``"multiclass"`` or ``"regression"`` from the objective's loss."""
    name = objective.loss.name
    if name == "logistic":
        return "binary"
    if name == "multinomial":
        return "multiclass"
    return "regression"


def _scores(objective, X, W):
    X = np.asarray(X, dtype=np.float64)
    if objective.fit_intercept:
        return X @ W[:-1] + W[-1]
    return X @ W


def _predict(task, Z):
    if task == "binary":
        return (Z[:, 0] > 0).astype(np.float64)
    if task == "multiclass":
        return np.argmax(Z, axis=1).astype(np.float64)
    return Z[:, 0]


def compute(names, objective, train, test, coefs, groups=None):
    """The metrics ``names`` at every recorded point.

    Parameters
    ----------
    names : list of str
    objective : a linear-model objective (``loss``, ``fit_intercept``, ``as_matrix``)
    train, test : ``(X, y)`` in the data set's raw label encoding, or None (then the metrics
        of that split are NaN)
    coefs : array of shape (n_points, p * K)
        The recorded points (rows of NaN for a diverged run's points: NaN metrics).
    groups : dict, optional
        ``{"train": {attribute: array}, "test": {...}}`` for the group metrics
        (``"label"`` is always available: the true class).

    Returns
    -------
    dict ``column(name) -> array of shape (n_points,)``
    """
    task = task_of(objective)
    coefs = np.asarray(coefs, dtype=float)
    out = {column(n): np.full(len(coefs), np.nan) for n in names}
    data = {"train": train, "test": test}
    prepared = {}
    for split, xy in data.items():
        if xy is not None:
            X, y = xy
            prepared[split] = (X, np.asarray(objective.loss.prepare_targets(y), dtype=float))
    for k, c in enumerate(coefs):
        if not np.all(np.isfinite(c)):
            continue
        W = objective.as_matrix(c)
        for split, (X, y) in prepared.items():
            with np.errstate(over="ignore", invalid="ignore"):
                Z = np.atleast_2d(_scores(objective, X, W).reshape(len(y), -1))
            pred = None
            for n in names:
                s, metric, attr = _split_name(n)
                if s != split:
                    continue
                if attr is not None:
                    fn, tasks = GROUP_METRICS[metric]
                    if task not in tasks:
                        raise ValueError(f"metric {n!r} does not apply to a {task} task")
                    a = _attribute(groups, split, attr, y)
                    if pred is None:
                        pred = _predict(task, Z)
                    out[column(n)][k] = fn(y, pred, task, a)
                    continue
                fn, tasks = METRICS[metric]
                if task not in tasks:
                    raise ValueError(f"metric {n!r} does not apply to a {task} task")
                if fn is None:
                    with np.errstate(over="ignore", invalid="ignore"):
                        val = float(np.mean(objective.loss.value(y, Z if Z.shape[1] > 1
                                                                 else Z[:, 0])))
                else:
                    if pred is None:
                        pred = _predict(task, Z)
                    val = fn(y, pred, task)
                out[column(n)][k] = val
    return out


def _attribute(groups, split, attr, y):
    if attr == "label":
        return y
    table = (groups or {}).get(split) or {}
    if "*" in attr:  # combinations of attributes, e.g. "race*sex" (group DRO's groups)
        from ..objectives.fcco import combine_groups

        try:
            a = combine_groups(table, attr)
        except ValueError as exc:
            raise ValueError(f"{split} split: {exc}") from None
        if a.shape[0] != y.shape[0]:
            raise ValueError(f"attribute {attr!r} has {a.shape[0]} entries for {y.shape[0]} rows")
        return a
    if attr not in table:
        raise ValueError(f"the data set has no attribute {attr!r} for its {split} split "
                         f"(has: {sorted(table) + ['label']})")
    a = np.asarray(table[attr])
    if a.shape[0] != y.shape[0]:
        raise ValueError(f"attribute {attr!r} has {a.shape[0]} entries for {y.shape[0]} rows")
    return a


def compute_for_problem(names, problem, objective, coefs):
    """:func:`compute` for a benchmark problem description (data sets only: a stream has no
    fixed splits, its metrics stay NaN)."""
    from . import problems

    if problem["source"]["name"] != "dataset":
        return {column(n): np.full(len(coefs), np.nan) for n in names}
    train = problems.load_dataset(problem["dataset"], problem["protocol"])
    test = None
    if any(n.startswith("test_") for n in names):
        test = problems.load_test_split(problem["dataset"], problem["protocol"])
    groups = None
    if any(":" in n for n in names):
        groups = problems.load_groups(problem["dataset"], problem["protocol"])
    return compute(names, objective, train, test, coefs, groups)


def final_table(table, names):
    """Final value of every metric for the selected configurations: mean and standard
    deviation over seeds, one row per (dataset, objective, solver)."""
    import pandas as pd

    sel = table[table["selected"].astype(bool)]
    last = sel.sort_values("update").groupby(
        ["dataset", "objective", "solver", "config", "seed"], sort=False).tail(1)
    rows = []
    for (ds, obj, solver, config), g in last.groupby(["dataset", "objective", "solver",
                                                       "config"], sort=False):
        row = {"dataset": ds, "objective": obj, "solver": solver, "config": config,
               "seeds": int(g["seed"].nunique()), "passes": float(g["passes"].max())}
        for n in names:
            v = g[column(n)].to_numpy(dtype=float)
            row[f"{n}_mean"] = float(np.nanmean(v)) if np.isfinite(v).any() else np.nan
            row[f"{n}_std"] = float(np.nanstd(v)) if np.isfinite(v).any() else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def plot_metrics(table, names, title, stem, formats=("png",)):
    """One panel per (metric, problem): each solver's selected configuration, mean over
    seeds (line) and min-max band, against passes over the training data."""
    from . import figures

    sel = table[table["selected"].astype(bool)]
    problems_ = list(dict.fromkeys(zip(sel["dataset"], sel["objective"])))
    fig, axes = figures._figure(len(names), len(problems_))
    solvers, colors = figures._colors(sel)
    handles = {}
    for c, (ds, obj) in enumerate(problems_):
        panel = sel[(sel["dataset"] == ds) & (sel["objective"] == obj)]
        for r, n in enumerate(names):
            ax = axes[r, c]
            for s in solvers:
                g = panel[panel["solver"] == s]
                if g.empty:
                    continue
                M = g.pivot_table(index="update", columns="seed", values=column(n),
                                  aggfunc="first").to_numpy(dtype=float)
                xv = g.pivot_table(index="update", columns="seed", values="passes",
                                   aggfunc="first").to_numpy(dtype=float)[:, 0]
                with np.errstate(all="ignore"), _quiet():
                    mean, lo, hi = (np.nanmean(M, axis=1), np.nanmin(M, axis=1),
                                    np.nanmax(M, axis=1))
                (line,) = ax.plot(xv, mean, color=colors[s], lw=1.6)
                handles[s] = line
                if M.shape[1] > 1:
                    ax.fill_between(xv, lo, hi, color=colors[s], alpha=0.2, lw=0)
            ax.grid(True, alpha=0.3)
            if r == 0:
                label = panel["dataset_label"].iloc[0] if len(panel) else ds
                ax.set_title(f"{label}\n{obj}", fontsize=9)
            if c == 0:
                ax.set_ylabel(n.replace("_", " "))
            if r == len(names) - 1:
                ax.set_xlabel("passes (1 pass = n processed samples)", fontsize=8)
    import textwrap

    fig.suptitle(textwrap.fill(title, max(40, 38 * len(problems_))), fontsize=9)
    figures._legend(fig, handles)
    return figures._save(fig, stem, formats)


def _quiet():
    import warnings

    class _Quiet(warnings.catch_warnings):
        def __enter__(self):
            super().__enter__()
            warnings.simplefilter("ignore", RuntimeWarning)

    return _Quiet()


def write_analysis(out, table, spec, plot=True):
    """The ``"metrics"`` analysis: ``metrics_final.csv`` / ``.md`` and ``metrics.png``."""
    from pathlib import Path

    from . import _io

    out = Path(out)
    names = list(spec.record.metrics)
    final = final_table(table, names)
    _io.atomic_write_text(out / "metrics_final.csv", final.to_csv(index=False))
    _io.atomic_write_text(out / "metrics_final.md", _markdown(final, names))
    if plot:
        title = (f"{spec.name}: {', '.join(n.replace('_', ' ') for n in names)} vs passes, "
                 "selected step sizes (mean and min-max over seeds)")
        plot_metrics(table, names, title, out / "metrics")
    return final


def _markdown(final, names):
    head = ["dataset", "objective", "solver", "config"] + names
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in final.iterrows():
        vals = [f"{r[f'{n}_mean']:.4f} ± {r[f'{n}_std']:.4f}" for n in names]
        lines.append("| " + " | ".join([str(r["dataset"]), str(r["objective"]),
                                        str(r["solver"]), str(r["config"])] + vals) + " |")
    return "\n".join(lines) + "\n"
