"""``riskopt fit`` / ``riskopt predict``: train and apply a risk-averse linear model on a table.

::

    riskopt fit DATA --target COL [--task auto|regression|classification] [--risk SPEC]
                [--shift-cost NU] [--divergence chi2|kl] [--loss squared|absolute]
                [--solver auto|lbfgs|prospect|...] [--l2-reg MU] [--max-epochs N] [--tol T]
                [--no-intercept] [--features COL ...] [--drop COL ...] [--group COL]
                [--seed S] --out model.joblib
    riskopt predict MODEL DATA [--proba] [--out predictions.csv]

``DATA`` is a CSV file (``.csv``, ``.csv.gz``, ``.tsv``) or a parquet file. Feature columns
must be numeric and complete: missing values and text columns are reported by name (encode
them first). The model file holds the fitted scikit-learn estimator and the column names;
it is written atomically.
"""
import os
import sys
import time
from pathlib import Path


class FitError(Exception):
    """Bad input to ``riskopt fit`` / ``predict`` (reported in one line, exit status 2)."""


def read_table(path):
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise FitError(f"data file not found: {path}")
    name = path.name.lower()
    try:
        if name.endswith((".parquet", ".pq")):
            return pd.read_parquet(path)
        sep = "\t" if name.endswith((".tsv", ".tsv.gz")) else ","
        return pd.read_csv(path, sep=sep)
    except Exception as exc:  # pandas raises many types for unreadable files
        raise FitError(f"cannot read {path}: {exc}") from None


def _feature_matrix(df, features, where):
    import numpy as np

    missing = [c for c in features if c not in df.columns]
    if missing:
        raise FitError(f"{where}: column(s) not found: {', '.join(map(str, missing))}")
    sub = df[features]
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    text = [c for c in features if not (is_numeric_dtype(sub[c]) or is_bool_dtype(sub[c]))]
    if text:
        raise FitError(f"{where}: non-numeric feature column(s) {', '.join(map(str, text))}; "
                       "encode them (e.g. one-hot) or leave them out with --drop")
    nan = sub.isna().sum()
    nan = nan[nan > 0]
    if len(nan):
        desc = ", ".join(f"{c} ({n} missing)" for c, n in nan.items())
        raise FitError(f"{where}: missing values in {desc}; impute or drop those rows first")
    X = sub.to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(X)):
        raise FitError(f"{where}: infinite values in the features")
    return X


def _atomic_dump(obj, out):
    import joblib

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    joblib.dump(obj, tmp)
    os.replace(tmp, out)


def _per_sample_losses(est, task, X, y):
    import numpy as np

    if task == "regression":
        r = est.predict(X) - y
        return 0.5 * r**2 if est.loss == "squared" else np.abs(r)
    proba = est.predict_proba(X)
    idx = np.searchsorted(est.classes_, y)
    return -np.log(np.clip(proba[np.arange(len(y)), idx], 1e-300, None))


def cmd_fit(args):
    import numpy as np

    from .estimators import RiskClassifier, RiskRegressor
    from .risks import parse_risk

    df = read_table(args.data)
    if args.target not in df.columns:
        raise FitError(f"target column {args.target!r} not in {args.data} "
                       f"(columns: {', '.join(map(str, df.columns[:20]))})")
    y_raw = df[args.target]
    if y_raw.isna().any():
        raise FitError(f"target column {args.target!r} has {int(y_raw.isna().sum())} missing "
                       "value(s)")
    exclude = {args.target, *(args.drop or [])}
    if args.group:
        if args.group not in df.columns:
            raise FitError(f"group column {args.group!r} not in {args.data}")
        exclude.add(args.group)
    features = list(args.features) if args.features else [c for c in df.columns
                                                          if c not in exclude]
    if not features:
        raise FitError("no feature columns left")
    X = _feature_matrix(df, features, "features")
    task = args.task
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    numeric_target = is_numeric_dtype(y_raw) and not is_bool_dtype(y_raw)
    if task == "auto":
        task = "regression" if numeric_target else "classification"
    spec = args.risk
    if spec is None:  # the estimator's own default: esrm:1 (classifier), cvar:0.1 (regressor)
        import inspect

        cls = RiskRegressor if task == "regression" else RiskClassifier
        spec = inspect.signature(cls.__init__).parameters["risk"].default
    try:
        risk = parse_risk(spec, shift_cost=args.shift_cost, divergence=args.divergence)
    except ValueError as exc:
        raise FitError(f"--risk: {exc}") from None
    common = dict(risk=risk, solver=args.solver, l2_reg=args.l2_reg,
                  fit_intercept=not args.no_intercept, max_epochs=args.max_epochs,
                  tol=args.tol, random_state=args.seed)
    if task == "regression":
        if not numeric_target:
            raise FitError(f"target {args.target!r} is not numeric; use --task classification")
        est = RiskRegressor(loss=args.loss, **common)
        y = y_raw.to_numpy(dtype=np.float64)
    else:
        est = RiskClassifier(**common)
        y = y_raw.to_numpy()
    t0 = time.perf_counter()
    try:
        with _spinner(f"fitting {type(est).__name__} ({risk}) on {len(y)} rows x "
                      f"{len(features)} features", quiet=args.quiet):
            est.fit(X, y)
    except ValueError as exc:
        raise FitError(f"fit failed: {exc}") from None
    elapsed = time.perf_counter() - t0
    model = {"estimator": est, "features": features, "target": args.target, "task": task,
             "risk": str(risk), "group": args.group}
    _atomic_dump(model, args.out)
    trace = getattr(est, "objective_trace_", None)
    objective = float(trace[-1]) if trace is not None and len(trace) else float("nan")
    print(f"model: {args.out}")
    print(f"task: {task}; risk: {risk}; solver: {est.solver_}")
    print(f"objective: {objective:.6g}; updates: {est.n_iter_}; time: {elapsed:.2f} s")
    losses = _per_sample_losses(est, task, X, y)
    print(f"training loss: mean {losses.mean():.6g}, max {losses.max():.6g}")
    if args.group:
        from .metrics import group_errors

        table = group_errors(None, losses, df[args.group].astype(str), loss="precomputed")
        worst, value = table.worst
        print(f"worst-group loss ({args.group}): {value:.6g} (group {worst!r}); "
              + ", ".join(f"{g}: {v:.4g}" for g, v in table.errors.items()))
    return 0


def cmd_predict(args):
    import joblib
    import pandas as pd

    path = Path(args.model)
    if not path.exists():
        raise FitError(f"model file not found: {path}")
    try:
        model = joblib.load(path)
        est, features = model["estimator"], model["features"]
    except Exception as exc:
        raise FitError(f"{path} is not a riskopt model file: {exc}") from None
    df = read_table(args.data)
    X = _feature_matrix(df, features, "features")
    out = pd.DataFrame({"prediction": est.predict(X)})
    if args.proba:
        if not hasattr(est, "predict_proba"):
            raise FitError("--proba needs a classification model")
        proba = est.predict_proba(X)
        for j, c in enumerate(est.classes_):
            out[f"proba_{c}"] = proba[:, j]
    if args.out:
        dest = Path(args.out)
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        out.to_csv(tmp, index=False)
        os.replace(tmp, dest)
        print(f"predictions: {dest} ({len(out)} rows)")
    else:
        out.to_csv(sys.stdout, index=False)
    return 0


class _spinner:
    """A rich progress line with elapsed time while the fit runs (silent when quiet/not a tty)."""

    def __init__(self, text, quiet=False):
        self.text, self.quiet, self.progress = text, quiet, None

    def __enter__(self):
        if not self.quiet:
            try:
                from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

                self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                         TimeElapsedColumn(), transient=True)
                self.progress.start()
                self.progress.add_task(self.text, total=None)
            except ImportError:
                self.progress = None
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()


def add_parsers(sub):
    f = sub.add_parser("fit", help="fit a risk-averse linear model on a CSV/parquet table",
                       description=__doc__.split("::")[0].strip())
    f.add_argument("data", help="CSV (.csv, .csv.gz, .tsv) or parquet file")
    f.add_argument("--target", required=True, metavar="COL", help="target column")
    f.add_argument("--task", choices=["auto", "regression", "classification"], default="auto",
                   help="default: classification for a non-numeric target, else regression")
    f.add_argument("--risk", default=None, metavar="SPEC",
                   help="cvar:A, esrm:RHO, extremile:R, mean, maxloss, kl:RHO (default: the "
                        "estimator's, cvar:0.1 for regression, esrm:1 for classification)")
    f.add_argument("--shift-cost", type=float, default=0.0, metavar="NU",
                   help="distribution-shift penalty nu >= 0 (default 0)")
    f.add_argument("--divergence", choices=["chi2", "kl"], default="chi2")
    f.add_argument("--loss", choices=["squared", "absolute"], default="squared",
                   help="regression loss (classification uses the logistic/multinomial loss)")
    f.add_argument("--solver", default="auto", help="auto (default) or a solver name")
    f.add_argument("--l2-reg", type=float, default=1e-4, metavar="MU")
    f.add_argument("--max-epochs", type=int, default=1000, metavar="N")
    f.add_argument("--tol", type=float, default=1e-4)
    f.add_argument("--no-intercept", action="store_true")
    f.add_argument("--features", nargs="+", metavar="COL", help="feature columns (default: all "
                   "others)")
    f.add_argument("--drop", nargs="+", metavar="COL", help="columns to leave out")
    f.add_argument("--group", metavar="COL", help="group column (not a feature): report the "
                   "per-group and worst-group training loss")
    f.add_argument("--seed", type=int, default=0, help="random seed of stochastic solvers")
    f.add_argument("--out", required=True, metavar="FILE", help="model file (joblib)")
    f.add_argument("--quiet", "-q", action="store_true", help="no progress line")
    f.set_defaults(func=cmd_fit)

    p = sub.add_parser("predict", help="predict with a model saved by `riskopt fit`",
                       description="Predict with a model saved by `riskopt fit`.")
    p.add_argument("model", help="model file written by `riskopt fit`")
    p.add_argument("data", help="CSV or parquet file with the model's feature columns")
    p.add_argument("--proba", action="store_true", help="also class probabilities")
    p.add_argument("--out", metavar="FILE", help="CSV to write (default: standard output)")
    p.set_defaults(func=cmd_predict)
