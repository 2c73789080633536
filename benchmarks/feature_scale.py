"""Feature-scale sweep: default estimator fits with every feature column x 1e-8 ... 1e30 (issue 16).

    python benchmarks/feature_scale.py [--out benchmarks/results/feature_scale/after]
    python benchmarks/feature_scale.py --combine benchmarks/results/feature_scale

For each scale in 1e-8, 1e-4, 1, 1e4, 1e8, 1e12, 1e15, 1e18, 1e20, 1e25, 1e30 every feature
column (train and test) is multiplied by the scale; one more case, "timestamp", keeps the
features as loaded and appends a column of raw nanosecond timestamps (1.7e18 + a uniform draw
over one year, unrelated to the target). Each case is fitted with default settings:

- concrete (bundled, ``load_regression("concrete", random_state=0)``: a fixed 80/20 split, seed
  0, standardised features and target): ``RiskRegressor()`` (default risk), ``RiskRegressor(
  risk="esrm:1")``, scikit-learn's ``Ridge(alpha=n * l2_reg)`` (the same squared loss and l2
  term as the default ``l2_reg=1e-4``) and ``LinearRegression()`` (no penalty, least squares);
- adult (``riskopt.datasets.load("adult")``, data folder ``$RISKOPT_DATA``; 5,000 training rows
  drawn with seed 0, the whole test split): ``RiskClassifier()`` (default risk) and
  ``LogisticRegression(C=1 / (n * l2_reg), max_iter=1000)`` (the same logistic loss and term);
  ``RiskClassifier()`` once more on the same rows without the columns that are constant on
  them (three one-hot categories absent from the subsample: after the loader's standardisation
  they are constant columns whose computed standard deviation is ~1e-16 .. 1e-15, not 0).

Recorded per fit (``results.csv``): test R^2 (regression) or test accuracy (classification; with
the majority-class accuracy), whether ``coef_`` is all zero and whether the test predictions are
constant, every warning raised (category and the first line of its message), an exception
(``Type: message``) instead of a crash, fit seconds, ``n_iter_`` and ``solver_``. Also writes
``results.md`` (one row per scale, one column per estimator) and ``metadata.json`` (the commit
of the riskopt source actually imported, its path, versions, date, command line).

The script runs against older checkouts too (``PYTHONPATH=<checkout>/src``): it imports
``riskopt.bench._io`` / ``_meta`` when they exist and falls back to its own atomic writer.
``--combine DIR`` reads ``DIR/before`` and ``DIR/after`` and writes ``DIR/README.md`` (the
before/after table per estimator).
"""
import argparse
import csv
import io
import json
import os
import platform
import sys
import tempfile
import time
import warnings

import numpy as np

SCALES = ["1e-8", "1e-4", "1", "1e4", "1e8", "1e12", "1e15", "1e18", "1e20", "1e25", "1e30"]
CASES = SCALES + ["timestamp"]
L2_REG = 1e-4  # the estimators' default l2_reg (both before and after the scale-aware fits)
N_ADULT = 5000
FIELDS = ["case", "scale", "dataset", "estimator", "metric", "score", "majority_accuracy",
          "coef_all_zero", "pred_constant", "warning_code", "warnings", "exception",
          "fit_seconds", "n_iter", "solver"]

# warning codes of the tables
CODES = [("E", "exception (no model)"), ("C", "ConvergenceWarning"),
         ("V", "DivergenceWarning"), ("G", "DegenerateFitWarning"),
         ("R", "RuntimeWarning (numpy overflow / invalid value, ...)"),
         ("L", "LinAlgWarning (ill-conditioned solve)"), ("O", "any other warning")]


# ----------------------------------------------------------------------------- file writing
def _fallback_atomic_write_text(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


try:  # the checkout being measured may predate these helpers
    from riskopt.bench._io import atomic_write_text
except ImportError:  # pragma: no cover - older checkouts
    atomic_write_text = _fallback_atomic_write_text


def write_json(path, obj):
    atomic_write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def source_commit(module_file):
    """Commit of the checkout a module was imported from: ``riskopt.bench._meta._git_commit``
    when present, else read from the checkout's ``.git`` (a folder, or a worktree's file)."""
    try:
        from riskopt.bench._meta import _git_commit
        commit = _git_commit()
        if commit:
            return commit
    except ImportError:  # pragma: no cover
        pass
    d = os.path.dirname(os.path.abspath(module_file))
    while d != os.path.dirname(d):
        g = os.path.join(d, ".git")
        if os.path.exists(g):
            try:
                if os.path.isfile(g):
                    with open(g) as fh:
                        g = os.path.join(d, fh.read().split("gitdir:", 1)[1].strip())
                with open(os.path.join(g, "HEAD")) as fh:
                    head = fh.read().strip()
                if head.startswith("ref:"):
                    ref = head.split(None, 1)[1]
                    for base in (g, os.path.join(g, "..", "..")):  # worktree refs are shared
                        p = os.path.join(base, ref)
                        if os.path.exists(p):
                            with open(p) as fh:
                                return fh.read().strip()
                    return None
                return head
            except (OSError, IndexError):
                return None
        d = os.path.dirname(d)
    return None


def versions():
    try:
        from riskopt.bench._meta import _versions
        return _versions()
    except ImportError:  # pragma: no cover
        from importlib import metadata
        out = {"python": sys.version.split()[0]}
        for dist in ("numpy", "scipy", "numba", "scikit-learn"):
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                out[dist] = None
        return out


# ----------------------------------------------------------------------------- the sweep
def scaled(X, case, rng_seed, train):
    if case != "timestamp":
        return X * float(case)
    rng = np.random.default_rng(rng_seed + (0 if train else 1))
    ts = 1.7e18 + rng.uniform(0.0, 365 * 86400e9, X.shape[0])
    return np.hstack([X, ts[:, None]])


def warning_code(records, exception):
    codes = []
    if exception:
        codes.append("E")
    for cat in records:
        name = cat.__name__
        if name == "ConvergenceWarning":
            c = "C"
        elif name == "DivergenceWarning":
            c = "V"
        elif name == "DegenerateFitWarning":
            c = "G"
        elif name == "LinAlgWarning":
            c = "L"
        elif issubclass(cat, RuntimeWarning):
            c = "R"
        else:
            c = "O"
        if c not in codes:
            codes.append(c)
    return "".join(codes)


def fit_one(make, X_tr, y_tr, X_te, y_te, task):
    row = {"score": float("nan"), "coef_all_zero": "", "pred_constant": "", "warnings": "",
           "exception": "", "fit_seconds": float("nan"), "n_iter": "", "solver": ""}
    with warnings.catch_warnings(record=True) as rec:  # numpy errstate as a user has it
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        try:
            est = make().fit(X_tr, y_tr)
            row["fit_seconds"] = time.perf_counter() - t0
            pred = est.predict(X_te)
        except Exception as exc:  # record, never crash
            row["fit_seconds"] = time.perf_counter() - t0
            row["exception"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            est = pred = None
    msgs, cats = [], []
    for w in rec:
        key = f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}"
        if key not in msgs:
            msgs.append(key)
            cats.append(w.category)
    row["warnings"] = " | ".join(msgs)
    row["warning_code"] = warning_code(cats, row["exception"])
    if est is None:
        return row
    coef = np.asarray(est.coef_, dtype=np.float64)
    row["coef_all_zero"] = bool(np.all(coef == 0))
    if task == "regression":
        pred = np.asarray(pred, dtype=np.float64)
        row["pred_constant"] = bool(np.all(np.isfinite(pred)) and np.ptp(pred) == 0.0)
        if np.all(np.isfinite(pred)):
            ss_res = float(np.sum((y_te - pred) ** 2))
            ss_tot = float(np.sum((y_te - y_te.mean()) ** 2))
            row["score"] = 1.0 - ss_res / ss_tot
    else:
        row["pred_constant"] = bool(np.unique(pred).size == 1)
        row["score"] = float(np.mean(pred == y_te))
    n_iter = getattr(est, "n_iter_", None)
    if n_iter is not None:
        row["n_iter"] = int(np.max(np.asarray(n_iter)))
    row["solver"] = getattr(est, "solver_", getattr(est, "solver", ""))
    return row


def run_sweep(args):
    import riskopt as ro
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge

    reg = ro.datasets.load_regression("concrete", test_size=0.2, random_state=0)
    adult = ro.datasets.load("adult")
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(adult.X_train.shape[0], N_ADULT, replace=False))
    clf = (adult.X_train[idx], adult.y_train[idx], adult.X_test, adult.y_test)
    # the same rows without the columns that are constant on them (a one-hot category absent
    # from the subsample; after the loader's standardisation its std is ~1e-16, not 0)
    keep = np.ptp(clf[0], axis=0) > 0
    clf_kept = (clf[0][:, keep], clf[1], clf[2][:, keep], clf[3])
    dropped = [str(adult.feature_names[j]) if adult.feature_names is not None else str(j)
               for j in np.flatnonzero(~keep)]
    majority = float(max(np.mean(clf[3] == c) for c in np.unique(clf[1])))
    n_reg, n_clf = reg.X_train.shape[0], N_ADULT
    default_reg_risk = ro.RiskRegressor().get_params()["risk"]
    default_clf_risk = ro.RiskClassifier().get_params()["risk"]
    regs = [(f"RiskRegressor() [{default_reg_risk}]", lambda: ro.RiskRegressor()),
            ("RiskRegressor(risk='esrm:1')", lambda: ro.RiskRegressor(risk="esrm:1")),
            ("Ridge(alpha=n*1e-4)", lambda: Ridge(alpha=n_reg * L2_REG)),
            ("LinearRegression()", lambda: LinearRegression())]
    clfs = [(f"RiskClassifier() [{default_clf_risk}]", lambda: ro.RiskClassifier()),
            ("LogisticRegression(C=1/(n*1e-4))",
             lambda: LogisticRegression(C=1.0 / (n_clf * L2_REG), max_iter=1000))]
    clfs_kept = [(f"RiskClassifier() [{default_clf_risk}], constant columns dropped",
                  lambda: ro.RiskClassifier())]
    # compile the numba kernels outside the timed fits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, make in regs[:2]:
            make().fit(reg.X_train[:200], reg.y_train[:200])
        clfs[0][1]().fit(clf[0][:500], clf[1][:500])
    rows = []
    for case in CASES:
        Xr_tr, Xr_te = scaled(reg.X_train, case, 10, True), scaled(reg.X_test, case, 10, False)
        Xc_tr, Xc_te = scaled(clf[0], case, 20, True), scaled(clf[2], case, 20, False)
        Xk_tr, Xk_te = (scaled(clf_kept[0], case, 20, True),
                        scaled(clf_kept[2], case, 20, False))
        for dataset, task, Xtr, ytr, Xte, yte, ests in (
                ("concrete", "regression", Xr_tr, reg.y_train, Xr_te, reg.y_test, regs),
                ("adult (5000 train rows)", "classification", Xc_tr, clf[1], Xc_te, clf[3],
                 clfs),
                (f"adult (5000 train rows, {len(dropped)} constant column(s) dropped)",
                 "classification", Xk_tr, clf_kept[1], Xk_te, clf_kept[3], clfs_kept)):
            for name, make in ests:
                r = fit_one(make, Xtr, ytr, Xte, yte, task)
                r.update(case=case, scale=case if case != "timestamp" else "1 + ns column",
                         dataset=dataset, estimator=name,
                         metric="R2" if task == "regression" else "accuracy",
                         majority_accuracy=majority if task == "classification" else "")
                rows.append(r)
                print(f"{case:>9} {name:34} {r['metric']} {r['score']:.4f} "
                      f"zero={r['coef_all_zero']} const={r['pred_constant']} "
                      f"[{r['warning_code']}] {r['fit_seconds']:.2f}s it={r['n_iter']} "
                      f"{r['exception']}", flush=True)
    return ro, rows, majority, [n for n, _ in regs + clfs + clfs_kept], dropped


def cell(r):
    if r["exception"]:
        return "error [E]"
    s = "nan" if not np.isfinite(float(r["score"])) else f"{float(r['score']):.3f}"
    if str(r["pred_constant"]) == "True":
        s += " const"
    if str(r["coef_all_zero"]) == "True":
        s += " w=0"
    if r["warning_code"]:
        s += f" [{r['warning_code']}]"
    return s


LEGEND = ("Cell: test R^2 (concrete) or test accuracy (adult); `const` = constant test "
          "predictions (a single class for a classifier), `w=0` = `coef_` all zero; "
          "[codes] = warnings raised during the fit: "
          + ", ".join(f"{c} {d}" for c, d in CODES) + ". "
          "Scale: every feature column x scale; `timestamp`: the features as loaded plus a "
          "column of raw ns timestamps (1.7e18 + uniform over one year).")


def to_csv(rows):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{r[k]:.6g}" if isinstance(r[k], float) else r[k]) for k in FIELDS})
    return buf.getvalue()


def results_md(rows, names, meta, majority):
    by = {(r["case"], r["estimator"]): r for r in rows}
    lines = ["# Feature-scale sweep: default fits with every feature column x scale", "",
             f"riskopt commit `{meta['riskopt_commit']}` (imported from "
             f"`{meta['riskopt_path']}`), {meta['date']}. Adult majority-class test accuracy: "
             f"{majority:.3f}.", "", LEGEND, "",
             "| scale | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for case in CASES:
        lines.append(f"| {case} | " + " | ".join(cell(by[(case, n)]) for n in names) + " |")
    lines += ["", "## Warnings and exceptions (first line of each)", ""]
    for r in rows:
        if r["warnings"] or r["exception"]:
            lines.append(f"- {r['case']}, {r['estimator']}: "
                         + "; ".join(x for x in (r["exception"], r["warnings"]) if x))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- before/after
def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def combine(folder):
    parts = {}
    for side in ("before", "after"):
        with open(os.path.join(folder, side, "metadata.json")) as fh:
            meta = json.load(fh)
        parts[side] = (meta, read_csv(os.path.join(folder, side, "results.csv")))
    names = parts["after"][0]["estimators"]
    lines = ["# Feature-scale sweep before / after the scale-aware fits (issue 16)", "",
             "Default fits with every feature column multiplied by the scale (script "
             "`benchmarks/feature_scale.py`; its docstring has the details).", ""]
    for side in ("before", "after"):
        m = parts[side][0]
        lines.append(f"- **{side}**: riskopt commit `{m['riskopt_commit']}`, run {m['date']}, "
                     f"{m['wall_seconds']} s; python {m['versions'].get('python')}, numpy "
                     f"{m['versions'].get('numpy')}, scipy {m['versions'].get('scipy')}, "
                     f"scikit-learn {m['versions'].get('scikit-learn')}.")
    maj = parts["after"][0].get("adult_majority_accuracy")
    lines += ["", LEGEND + (f" Adult majority-class test accuracy: {maj:.3f}." if maj else ""),
              ""]
    for name in names:
        b = {r["case"]: r for r in parts["before"][1] if r["estimator"] == name}
        a = {r["case"]: r for r in parts["after"][1] if r["estimator"] == name}
        metric = next(iter(a.values()))["metric"]
        dataset = next(iter(a.values()))["dataset"]
        lines += [f"## {name} on {dataset} (test {metric})", "",
                  "| scale | before | after | before n_iter | after n_iter |",
                  "|---|---|---|---:|---:|"]
        for case in CASES:
            rb, ra = b.get(case), a.get(case)
            lines.append(f"| {case} | {cell(rb) if rb else '-'} | {cell(ra) if ra else '-'} | "
                         f"{rb['n_iter'] if rb else ''} | {ra['n_iter'] if ra else ''} |")
        lines.append("")
    lines += ["## Warnings after (first line of each message)", ""]
    for r in parts["after"][1]:
        if r["warnings"] or r["exception"]:
            lines.append(f"- {r['case']}, {r['estimator']}: "
                         + "; ".join(x for x in (r["exception"], r["warnings"]) if x))
    lines += ["", "## Warnings before (first line of each message)", ""]
    for r in parts["before"][1]:
        if r["warnings"] or r["exception"]:
            lines.append(f"- {r['case']}, {r['estimator']}: "
                         + "; ".join(x for x in (r["exception"], r["warnings"]) if x))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "feature_scale", "after"))
    ap.add_argument("--combine", metavar="DIR", default=None,
                    help="write DIR/README.md from DIR/before and DIR/after instead of running")
    ap.add_argument("--notes", metavar="FILE", default=None,
                    help="with --combine: append this Markdown file (reproduction, findings)")
    args = ap.parse_args()
    if args.combine:
        text = combine(args.combine)
        if args.notes:
            with open(args.notes) as fh:
                text += "\n" + fh.read()
        atomic_write_text(os.path.join(args.combine, "README.md"), text)
        print(f"wrote {args.combine}/README.md")
        return
    t_start = time.time()
    ro, rows, majority, names, dropped = run_sweep(args)
    meta = {"script": "benchmarks/feature_scale.py",
            "command": [sys.executable] + sys.argv,
            "env": {k: os.environ.get(k) for k in ("PYTHONPATH", "RISKOPT_DATA")},
            "riskopt_path": ro.__file__, "riskopt_commit": source_commit(ro.__file__),
            "versions": versions(), "machine": platform.platform(), "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "cases": CASES,
            "estimators": names, "l2_reg_reference": L2_REG,
            "adult_train_rows": N_ADULT, "adult_majority_accuracy": majority,
            "adult_constant_columns_dropped": dropped,
            "wall_seconds": round(time.time() - t_start, 1)}
    atomic_write_text(os.path.join(args.out, "results.csv"), to_csv(rows))
    atomic_write_text(os.path.join(args.out, "results.md"), results_md(rows, names, meta,
                                                                       majority))
    write_json(os.path.join(args.out, "metadata.json"), meta)
    print(f"wrote {args.out}/results.csv, results.md, metadata.json")


if __name__ == "__main__":
    main()
