"""``riskopt evaluate``: a saved model on a labelled table, overall, per group and fairness gaps.

::

    riskopt evaluate MODEL DATA [--group COL ...] [--sensitive COL ...] [--pos-label V]
                     [--format markdown|csv|json] [--out FILE]

``MODEL`` is a file written by ``riskopt fit``; ``DATA`` a CSV/parquet table with the model's
feature columns and its target column. Printed (or written to ``--out``; the format follows
the file's extension ``.md``/``.csv``/``.json`` unless ``--format`` says otherwise):

* overall: rows, the mean training loss of the model's loss on these rows (log-loss for
  classifiers), the model's risk of those losses (e.g. the CVaR of the per-sample losses),
  accuracy (classification) or RMSE, MAE and R^2 (regression);
* per group, for each ``--group`` / ``--sensitive`` column: size, error (classification error,
  or mean loss for regression), mean loss, and the worst group;
* fairness gaps for each ``--sensitive`` column (:mod:`riskopt.metrics`): classification --
  equal opportunity difference, demographic parity difference, absolute mean difference of the
  predicted positive probability, equalized odds difference and ratio, demographic parity
  ratio; regression -- absolute mean difference and statistical
  parity (KS distance) of the predictions. A gap that is undefined on the rows given (e.g. equal
  opportunity where a group has no positive example) is reported as "undefined" with why (and
  one ``riskopt: warning:`` line); the rest of the report is printed as usual.
"""
import json
import sys
from pathlib import Path

from . import _cli_fair
from ._cli_fit import (MODEL_FILES, FitError, _per_sample_losses, add_trust, check_complete,
                       check_label_types, check_output, final_estimator, load_model,
                       model_input, read_table, write_output)

FORMATS = ("markdown", "csv", "json")


def _as_classes(values, classes, what):
    """``values`` in the dtype of the model's ``classes`` (labels read back from a table may
    come as text or floats); labels the model never saw are an error."""
    import numpy as np

    classes = np.asarray(classes)
    lookup = {str(c): c for c in classes}
    if classes.dtype.kind in "iufb":
        lookup.update({str(float(c)): c for c in classes})
    out, unknown = [], set()
    for v in np.asarray(values):
        key = str(v)
        if key not in lookup:
            unknown.add(key)
        else:
            out.append(lookup[key])
    if unknown:
        raise FitError(f"{what} has labels the model was not trained on: "
                       f"{', '.join(sorted(unknown)[:10])} (classes: "
                       f"{', '.join(map(str, classes[:10]))})")
    return np.asarray(out, dtype=classes.dtype)


def evaluate(model, df, groups=(), sensitive=(), pos_label=None, where="data"):
    """The evaluation as ``{"overall": {...}, "groups": [...], "fairness": [...]}``."""
    import numpy as np

    from . import metrics
    from .risks import parse_risk

    est, task = model["estimator"], model["task"]
    X = model_input(model, df, where)
    y_raw = check_complete(df, model["target"], "target", where)
    y = y_raw.to_numpy(dtype=np.float64) if task == "regression" else y_raw.to_numpy()
    if task != "regression":
        check_label_types(y_raw, model["target"], "target")
        y = _as_classes(y, est.classes_, f"target column {model['target']!r}")
    pred = est.predict(X)
    losses = _per_sample_losses(est, task, X, y)
    try:
        risk = parse_risk(final_estimator(model).risk)
        over = losses
        gcol = model.get("group") if model.get("group_dro") else None
        if gcol is not None:  # a group-DRO model: the risk of the group-mean losses
            g = check_complete(df, gcol, "group", where).astype(str).to_numpy()
            _, inv = np.unique(g, return_inverse=True)
            over = np.bincount(inv, losses) / np.bincount(inv)
        risk_value = float(risk.value(over))
    except (ValueError, TypeError):
        risk, risk_value, gcol = model.get("risk"), float("nan"), None
    label = f"{risk} over the groups of {gcol!r}" if gcol is not None else str(risk)
    overall = {"rows": int(len(y)), "risk": label, "risk_of_losses": risk_value,
               "mean_loss": float(np.mean(losses)), "max_loss": float(np.max(losses))}
    if task == "regression":
        r = pred - y
        ss_tot = float(np.sum((y - y.mean()) ** 2))
        # R^2 is undefined on a constant target (one row included): "undefined", not the
        # -1e294 of a division by a floor
        overall.update(rmse=float(np.sqrt(np.mean(r ** 2))), mae=float(np.mean(np.abs(r))),
                       r2=float(1 - np.sum(r ** 2) / ss_tot) if ss_tot > 0 else float("nan"))
    else:
        overall.update(accuracy=float(np.mean(pred == y)))
    out = {"overall": overall, "groups": [], "fairness": []}
    if (groups or sensitive) and len(y) < 2:
        raise FitError(f"{where} has {len(y)} row: the per-group table and fairness gaps "
                       "(--group / --sensitive) need at least 2 rows")
    for col in list(dict.fromkeys([*groups, *sensitive])):
        what = "group" if col in groups else "sensitive"
        g = check_complete(df, col, what, where).astype(str).to_numpy()
        by_loss = metrics.group_errors(None, losses, g, loss="precomputed")
        err = by_loss if task == "regression" else metrics.group_errors(y, pred, g)
        mean_loss = by_loss.errors
        for rec in err.records:
            out["groups"].append({"column": col, "group": str(rec["group"]),
                                  "size": rec["size"], "error": rec["error"],
                                  "mean_loss": mean_loss[rec["group"]],
                                  "worst": rec["group"] == err.worst[0]})
    for col in sensitive:
        a = check_complete(df, col, "sensitive", where).astype(str).to_numpy()
        if len(np.unique(a)) < 2:
            raise FitError(f"sensitive column {col!r} has a single value: no fairness gap")
        if task == "regression":
            gaps = {"absolute_mean_difference": lambda: metrics.absolute_mean_difference(pred, a),
                    "statistical_parity_ks": lambda: metrics.statistical_parity_ks(pred, a)}
        else:
            pos = est.classes_[-1] if pos_label is None else _as_classes(
                np.array([pos_label]), est.classes_, "--pos-label")[0]
            proba = est.predict_proba(X)[:, list(est.classes_).index(pos)]
            gaps = {"equal_opportunity_difference": lambda: metrics.equal_opportunity_difference(
                        y, pred, a, pos_label=pos),
                    "demographic_parity_difference":
                        lambda: metrics.demographic_parity_difference(pred, a, pos_label=pos),
                    "absolute_mean_difference": lambda: metrics.absolute_mean_difference(proba, a)}
            try:
                odds = _cli_fair.odds_gaps(metrics, y, pred, a, pos)
                gaps.update({k: (lambda v=v: v) for k, v in odds.items()})
            except ValueError as exc:
                gaps["equalized_odds_difference"] = _raises(exc)
        for k, gap in gaps.items():
            # a gap that is undefined on these rows (e.g. equal opportunity where a group has
            # no positive example) is reported as such, with why; the rest of the report stands
            try:
                v, note = float(gap()), ""
            except ValueError as exc:
                v, note = float("nan"), f"undefined: {' '.join(str(exc).split())}"
            out["fairness"].append({"column": col, "metric": k, "value": v, "note": note})
    try:  # the model's own constraint, on the groups of its sensitive columns
        out["fairness"] += [{**r, "note": r.get("note", "")} for r in _cli_fair.evaluate_rows(
            model, est, y, pred, losses,
            lambda cols: df[[check_complete(df, c, "sensitive", where).name
                             for c in cols]].astype(str))]
    except ValueError as exc:
        raise FitError(f"the model's constraint: {exc}") from None
    return out


def _raises(exc):
    """A gap function that raises ``exc`` (a gap computed eagerly that failed)."""
    def gap():
        raise exc
    return gap


def _fmt(v):
    if isinstance(v, float) and v != v:
        return "undefined"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _md_table(rows):
    if not rows:
        return ""
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_fmt(r.get(k, "")) for k in head) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def render(result, fmt):
    if fmt == "json":  # NaN is not JSON: null
        clean = json.loads(json.dumps(result), parse_constant=lambda c: None)
        return json.dumps(clean, indent=2, allow_nan=False) + "\n"
    if fmt == "csv":
        import pandas as pd

        rows = ([{"section": "overall", "column": "", "group": "", "metric": k, "value": v}
                 for k, v in result["overall"].items()]
                + [{"section": "group", "column": r["column"], "group": r["group"],
                    "metric": m, "value": r[m]} for r in result["groups"]
                   for m in ("size", "error", "mean_loss")]
                + [{"section": "fairness", "column": r["column"], "group": "",
                    "metric": r["metric"], "value": r["value"]} for r in result["fairness"]])
        return pd.DataFrame(rows).to_csv(index=False)
    text = "## Overall\n\n" + _md_table([{"metric": k, "value": v}
                                         for k, v in result["overall"].items()])
    if result["groups"]:
        text += "\n## Per group\n\n" + _md_table(result["groups"])
    if result["fairness"]:
        text += "\n## Fairness gaps\n\n" + _md_table(result["fairness"])
    return text


def write_text(text, out):
    """Write ``text`` to ``out`` atomically (temporary file in the same folder, fsync, rename);
    a bad destination is one line naming it and the fix."""
    check_output(out)
    data = text.encode("utf-8")
    write_output(out, lambda fh: fh.write(data))


def cmd_evaluate(args):
    model = load_model(args.model, trust=args.trust)
    df = read_table(args.data)
    if args.out:
        check_output(args.out, inputs=(("model", args.model), ("data", args.data)))
    result = evaluate(model, df, groups=args.group or (), sensitive=args.sensitive or (),
                      pos_label=args.pos_label, where=str(args.data))
    if result["overall"].get("r2", 0.0) != result["overall"].get("r2", 0.0):
        print("riskopt: warning: r2 is undefined: the target is constant on these rows",
              file=sys.stderr, flush=True)
    for r in result["fairness"]:
        if r.get("note"):
            print(f"riskopt: warning: {r['metric']} for {r['column']!r} is {r['note']}",
                  file=sys.stderr, flush=True)
    fmt = args.format
    if fmt is None:
        ext = Path(args.out).suffix.lower() if args.out else ""
        fmt = {".csv": "csv", ".json": "json"}.get(ext, "markdown")
    text = render(result, fmt)
    if args.out:
        write_text(text, args.out)
        print(f"evaluation: {args.out}")
    else:
        sys.stdout.write(text)
    return 0


EVALUATE_DESCRIPTION = """\
Evaluate a model saved by 'riskopt fit' on a labelled table: overall, per group and
fairness gaps.

MODEL is a file written by 'riskopt fit'; DATA a CSV/parquet table with the model's
feature columns and its target column. Printed (or written to --out; the format follows
the file's extension .md/.csv/.json unless --format says otherwise):

  overall    rows, the mean of the model's loss on these rows (log-loss for
             classifiers), the model's risk of those losses (e.g. the CVaR of the
             per-sample losses), accuracy (classification) or RMSE, MAE and R^2
             (regression);
  per group  for each --group / --sensitive column: size, error (classification
             error, or mean loss for regression), mean loss, and the worst group;
  fairness   for each --sensitive column: equal opportunity difference, demographic
             parity difference, the absolute mean difference of the predicted
             positive probability, equalized odds difference and ratio and the
             demographic parity ratio (classification); the absolute mean difference
             and the statistical parity (KS distance) of the predictions
             (regression). A gap undefined on these rows is "undefined", with why.

""" + MODEL_FILES


def add_parser(sub):
    import argparse

    e = sub.add_parser("evaluate", help="evaluate a saved model on a labelled table: "
                       "accuracy/loss/risk, per-group table, fairness gaps",
                       description=EVALUATE_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("model", help="model file written by 'riskopt fit'")
    add_trust(e)
    e.add_argument("data", help="CSV or parquet file with the features and the target column")
    e.add_argument("--group", nargs="+", metavar="COL",
                   help="group column(s): per-group error and loss, worst group")
    e.add_argument("--sensitive", nargs="+", metavar="COL",
                   help="sensitive attribute column(s): per-group table and fairness gaps")
    e.add_argument("--pos-label", default=None, metavar="V",
                   help="positive class for the fairness gaps (default: the largest label)")
    e.add_argument("--format", choices=FORMATS, default=None,
                   help="output format (default: from --out's extension, else markdown)")
    e.add_argument("--out", metavar="FILE", help="write there (default: standard output)")
    e.set_defaults(func=cmd_evaluate)
