"""The fairness part of ``riskopt fit`` / ``riskopt evaluate`` (:mod:`riskopt.fairness`).

``riskopt fit DATA --target Y --constraint demographic_parity --sensitive sex [race]
--constraint-tol 0.02`` fits ``RiskClassifier(constraint=..., constraint_tol=...)`` with
``sensitive_features`` = the ``--sensitive`` columns (their intersections when several; they
stay features unless ``--drop``-ped), prints the constraint's training values (smoothed and
hard rates) and stores the constraint in the model file. ``riskopt evaluate`` prints the
model's constraint metric on the given rows (groups: the fit's sensitive columns) and, for two
classes, fairlearn's equalized odds difference / ratio and demographic parity ratio for each
``--sensitive`` column.
"""
import sys

#: riskopt.fairness.CONSTRAINT_SPECS, spelled out so that building the parser imports no
#: numpy (a test checks they agree)
CONSTRAINTS = ("demographic_parity", "equalized_odds", "equal_opportunity",
               "bounded_group_loss", "demographic_parity:to_overall",
               "equalized_odds:to_overall", "equal_opportunity:to_overall")


def add_fit_arguments(f):
    f.add_argument("--constraint", choices=list(CONSTRAINTS), default=None,
                   help="fairness constraint on the groups of --sensitive (riskopt.fairness)")
    f.add_argument("--sensitive", nargs="+", metavar="COL", default=None,
                   help="sensitive columns of --constraint (their intersections are the "
                        "groups; they stay features unless dropped with --drop)")
    f.add_argument("--constraint-tol", type=float, default=0.02, metavar="TOL",
                   help="bound of --constraint (default 0.02)")


def fit_options(args, df, error):
    """``(estimator keywords, fit keywords)`` of the constraint; ``error(msg)`` raises."""
    if args.constraint is None:
        if args.sensitive:
            error("--sensitive names the groups of --constraint; give --constraint too (or "
                  "use --group to report per-group losses)")
        return {}, {}
    if not args.sensitive and args.constraint != "bounded_group_loss":
        error(f"--constraint {args.constraint} needs --sensitive COL (the groups)")
    if not args.constraint_tol > 0:
        error(f"--constraint-tol must be > 0, got {args.constraint_tol}")
    kw = {"constraint": args.constraint, "constraint_tol": args.constraint_tol}
    if not args.sensitive:
        return kw, {}
    missing = [c for c in args.sensitive if c not in df.columns]
    if missing:
        error(f"--sensitive: no column {missing[0]!r} in the data")
    sf = df[list(args.sensitive)].astype(str).to_numpy()
    if args.group_dro:
        error("--constraint and --group-dro cannot be combined in the CLI")
    _warn_many_groups(df, list(args.sensitive))
    return kw, {"sensitive_features": sf}


#: more groups than this in --sensitive (every distinct value, or combination, is a group)
#: gives one warning line: a numeric column such as an age makes dozens of groups of a few rows
MANY_GROUPS = 20


def _warn_many_groups(df, cols):
    """One ``riskopt: warning:`` line when the sensitive columns make more than
    ``MANY_GROUPS`` groups: each distinct value (of a numeric column too) is a group, and the
    small ones make the constraint slow and its hard rates unresolvable (``age`` of compas:
    63 groups, a 185 s fit whose hard demographic parity gap stayed at 0.17 for a bound 0.02)."""
    sizes = df.groupby([df[c].astype(str) for c in cols], sort=False).size()
    if len(sizes) > MANY_GROUPS:
        print(f"riskopt: warning: --sensitive {' '.join(map(str, cols))}: {len(sizes)} groups "
              f"(every distinct value is one; the smallest has {int(sizes.min())} row(s)): a "
              "numeric attribute needs binning first (e.g. age bands) for a constraint that "
              "can hold", file=sys.stderr, flush=True)


def fit_report(reg, args):
    """Lines printed after a constrained fit."""
    if getattr(reg, "constraint", None) is None or not hasattr(reg, "constraint_values_"):
        return []
    fmt = ", ".join
    on = f" over {'+'.join(args.sensitive)}" if args.sensitive else ""
    lines = [f"constraint: {reg.constraint} <= {reg.constraint_tol:g}{on} "
             f"({len(reg.sensitive_groups_)} groups)"]
    if reg.constraint == "bounded_group_loss":
        lines.append("training group losses: " + fmt(
            f"{g}: {v:.4g}" for g, v in zip(reg.sensitive_groups_, reg.constraint_values_)))
    else:
        lines.append("training values (bounded rates): " + fmt(
            f"{v:.4g}" for v in reg.constraint_values_) + "; hard rates: " + fmt(
            f"{v:.4g}" for v in reg.hard_constraint_values_))
    return lines


def evaluate_rows(model, est, y, pred, losses, column):
    """The model's constraint metric on these rows (``out["fairness"]`` records; ``losses``
    the per-sample losses, ``column(cols)`` the table's sensitive columns)."""
    import numpy as np

    from . import metrics
    from .fairness import sensitive_codes

    cols = model.get("sensitive") or []
    if not model.get("constraint") or not cols:
        return []
    name, method = model["constraint"].partition(":")[::2]
    method = method or "between_groups"
    codes, _ = sensitive_codes(column(cols).to_numpy(), len(y))
    where = "+".join(cols)
    if name == "bounded_group_loss":
        value = float(np.max(np.bincount(codes, losses) / np.bincount(codes)))
        metric = "constraint bounded_group_loss: worst group loss"
    else:
        pos = est.classes_[-1]
        if name == "equal_opportunity":  # the true-positive rates only
            keep = y == pos
            y, pred, codes = y[keep], pred[keep], codes[keep]
            name = "demographic_parity"
        fn = {"demographic_parity": lambda: metrics.demographic_parity_difference(
                  pred, codes, pos_label=pos, method=method),
              "equalized_odds": lambda: metrics.equalized_odds_difference(
                  y, pred, codes, pos_label=pos, method=method)}[name]
        value = float(fn())
        metric = f"constraint {model['constraint']} difference"
    return [{"column": where, "metric": f"{metric} (bound {model.get('constraint_tol')})",
             "value": value}]


def odds_gaps(metrics, y, pred, a, pos):
    """fairlearn's equalized odds difference / ratio and demographic parity ratio (two
    classes)."""
    import numpy as np

    if len(np.unique(y)) != 2:
        return {}
    return {"equalized_odds_difference": metrics.equalized_odds_difference(y, pred, a,
                                                                            pos_label=pos),
            "equalized_odds_ratio": metrics.equalized_odds_ratio(y, pred, a, pos_label=pos),
            "demographic_parity_ratio": metrics.demographic_parity_ratio(pred, a,
                                                                         pos_label=pos)}
