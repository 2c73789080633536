"""``riskopt fit`` / ``riskopt predict``: train and apply a risk-averse linear model on a table.

::

    riskopt fit DATA --target COL [--task auto|regression|classification] [--risk SPEC]
                [--shift-cost NU] [--divergence chi2|kl] [--loss squared|absolute]
                [--solver auto|lbfgs|prospect|...] [--l2-reg MU] [--max-iter N] [--tol T]
                [--no-intercept] [--features COL ...] [--drop COL ...] [--group COL]
                [--group-dro] [--categorical COL ...] [--impute median|mean|none]
                [--no-scale] [--no-preprocess] [--seed S] [--progress | --quiet]
                --out model.skops
    riskopt predict MODEL DATA [--proba] [--id-column COL ...] [--out predictions.csv]

``DATA`` is a CSV file or a parquet file; the saved model a scikit-learn ``Pipeline`` (a
``ColumnTransformer`` for the preprocessing, then the riskopt estimator), so ``predict`` /
``evaluate`` take the raw table. :data:`FIT_DESCRIPTION` (what ``riskopt fit --help``
prints) says what the preprocessing does, how inputs are checked and what the progress
display (:class:`_FitProgress`) shows.

With ``--group COL --group-dro`` the risk is taken over the group-mean losses instead of the
per-sample losses (group DRO; ``--risk cvar:0.15`` is the CVaR over groups of the SONEX /
ALEXR2 paper, Eq. 10): the fit is ``RiskRegressor/RiskClassifier.fit(X, y, groups=...)``.
"""
import math
import sys
import time

from ._cli_progress import GAP_HEADER, _FitProgress, _reporting  # noqa: F401
from . import _cli_fair
from ._cli_table import (  # noqa: F401  (the input-table layer; names re-exported here)
    MAX_AUTO_CLASSES, FitError, _check_numeric_input, _feature_matrix, _numeric_columns, _rows,
    check_complete, check_label_types, check_output, column_label, final_estimator, guess_task,
    id_like, model_input, read_table, unnamed, write_output)


def categories_as_text(X):
    """Categorical columns as text (missing values kept as NaN): one type per column for the
    one-hot encoder, whatever pandas read (numbers, booleans, mixed). Module level, so the
    saved model pickles."""
    import numpy as np

    return X.apply(lambda s: s.map(lambda v: np.nan if v is None or v != v else str(v))
                   ).astype(object)


#: a categorical column with more distinct values than this share of the rows (and at least
#: 50) looks like an identifier: the fit warns that it becomes one indicator per row
_ID_LIKE_SHARE = 0.5


def build_preprocessor(df, features, categorical=(), impute="median", scale=True,
                       where="features"):
    """The ``ColumnTransformer`` saved inside the model: numeric columns imputed (``impute``:
    median / mean, or ``"none"``: missing values are an error) and standardised; text,
    categorical and boolean columns (and those named in ``categorical``) imputed with their
    most frequent value and one-hot encoded (unknown categories at predict time give all-zero
    indicators). Returns ``(transformer, numeric columns, categorical columns)``."""
    import numpy as np
    from pandas.api.types import is_bool_dtype, is_numeric_dtype
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler

    missing = [c for c in features if c not in df.columns]
    if missing:
        raise FitError(f"{where}: column(s) not found: {', '.join(map(str, missing))}")
    unknown = [c for c in categorical if c not in features]
    if unknown:
        raise FitError(f"--categorical: {', '.join(map(str, unknown))} not among the features")
    sub = df[features]
    cat = [c for c in features if c in set(categorical) or is_bool_dtype(sub[c])
           or not is_numeric_dtype(sub[c])]
    num = [c for c in features if c not in cat]
    empty = [column_label(df, c) for c in features if sub[c].isna().all()]
    if empty:
        raise FitError(f"{where}: {', '.join(empty)} has no value at all; leave it out with "
                       "--drop")
    if num:
        vals = sub[num].to_numpy(dtype=np.float64)
        if np.isinf(vals).any():
            bad = [str(c) for c in num if np.isinf(sub[c].to_numpy(float)).any()]
            raise FitError(f"{where}: infinite values in {', '.join(bad)}; replace them first")
    if impute == "none":
        nan = sub.isna().sum()
        nan = nan[nan > 0]
        if len(nan):
            desc = ", ".join(f"{c} ({n} missing)" for c, n in nan.items())
            raise FitError(f"{where}: missing values in {desc}; impute them (drop --impute "
                           "none) or drop those rows first")
    n = len(sub)
    for c in cat:
        k = sub[c].nunique()
        if k >= 50 and k > _ID_LIKE_SHARE * n:
            print(f"riskopt: warning: categorical column {column_label(df, c)} has {k} distinct "
                  f"values in {n} rows (an identifier?): it becomes {k} indicator columns; "
                  f"leave it out with --drop", file=sys.stderr, flush=True)
    num_steps = ([] if impute == "none" else [("impute", SimpleImputer(strategy=impute))])
    num_steps += [("scale", StandardScaler())] if scale else []
    parts = []
    if num:
        parts.append(("numeric", Pipeline(num_steps) if num_steps else "passthrough", num))
    if cat:
        cat_steps = [("text", FunctionTransformer(categories_as_text))]
        if impute != "none":
            cat_steps.append(("impute", SimpleImputer(strategy="most_frequent")))
        cat_steps.append(("onehot", OneHotEncoder(handle_unknown="ignore",
                                                  sparse_output=False)))
        parts.append(("categorical", Pipeline(cat_steps), cat))
    return ColumnTransformer(parts, remainder="drop"), num, cat


def _per_sample_losses(est, task, X, y):
    import numpy as np

    if task == "regression":
        r = est.predict(X) - y
        last = est.steps[-1][1] if hasattr(est, "steps") else est
        return 0.5 * r**2 if last.loss == "squared" else np.abs(r)
    proba = est.predict_proba(X)
    idx = np.searchsorted(est.classes_, y)
    return -np.log(np.clip(proba[np.arange(len(y)), idx], 1e-300, None))


def cmd_fit(args):
    import numpy as np

    from .risks import parse_risk

    # -- every input and the output path are checked before the fit and before any write
    if args.quiet and args.progress:
        raise FitError("--quiet hides the progress display that --progress forces; give one")
    if args.risk is not None:  # a typo is reported before the table and scikit-learn load
        try:
            parse_risk(args.risk, shift_cost=args.shift_cost, divergence=args.divergence)
        except ValueError as exc:
            raise FitError(f"--risk: {exc}") from None
    from .estimators import RiskClassifier, RiskRegressor

    progress_mode = "off" if args.quiet else "on" if args.progress else "auto"
    df = read_table(args.data)
    y_raw = check_complete(df, args.target, "target", args.data)
    if y_raw.nunique() < 2:  # one row, or a constant column: any model is that constant
        raise FitError(f"target column {args.target!r} has the single value {y_raw.iloc[0]} "
                       f"in its {len(y_raw)} row(s) of {args.data}: there is nothing to learn; "
                       "check the column or the file")
    exclude = {args.target, *(args.drop or [])}
    groups = None
    if args.group_dro and not args.group:
        raise FitError("--group-dro needs --group COL (the column whose values are the groups)")
    if args.group:
        groups = check_complete(df, args.group, "group", args.data).astype(str)
        exclude.add(args.group)
    if args.features:  # the target as a feature, or a feature also dropped: say so
        if args.target in args.features:
            raise FitError(f"--features names the target column {args.target!r} (the model "
                           "would read its own answer); leave it out of --features")
        both = [c for c in args.features if c in set(args.drop or [])]
        if both:
            raise FitError(f"--drop {' '.join(map(str, both))}: also named in --features; "
                           "--features lists the feature columns, give each column once")
    features = list(args.features) if args.features else [c for c in df.columns
                                                          if c not in exclude]
    if not args.features:  # row identifiers are no features: left out, said in one line
        for c in list(features):
            why = id_like(df, c)
            if why:
                features.remove(c)
                print(f"riskopt: note: {'' if unnamed(c) else 'column '}{column_label(df, c)} "
                      f"looks like a row id "
                      f"({why}): left out of the features (--features to keep it)",
                      file=sys.stderr, flush=True)
    if not features:
        raise FitError("no feature columns left")
    if args.no_preprocess:
        if args.categorical or args.impute != "median" or args.no_scale:
            raise FitError("--categorical, --impute and --no-scale configure the preprocessing "
                           "that --no-preprocess turns off")
        X = _feature_matrix(df, features, "features")
        prep = None
    else:
        prep, num_cols, cat_cols = build_preprocessor(
            df, features, categorical=args.categorical or (), impute=args.impute,
            scale=not args.no_scale)
        X = df[features]
    if not args.features:
        for c in features:
            if unnamed(c):
                print(f"riskopt: warning: {column_label(df, c)} of {args.data} is used as a "
                      f"feature (a saved row index?); leave it out with --drop '{c}'",
                      file=sys.stderr, flush=True)
    task = args.task
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    numeric_target = is_numeric_dtype(y_raw) and not is_bool_dtype(y_raw)
    auto_note = ""
    if task == "auto":
        task, auto_note = guess_task(y_raw)
    spec = args.risk
    if spec is None:  # the estimator's own default: esrm:1 (classifier), cvar:0.1 (regressor)
        import inspect

        cls = RiskRegressor if task == "regression" else RiskClassifier
        spec = inspect.signature(cls.__init__).parameters["risk"].default
    try:
        risk = parse_risk(spec, shift_cost=args.shift_cost, divergence=args.divergence)
    except ValueError as exc:
        raise FitError(f"--risk: {exc}") from None
    if args.group_dro and groups.nunique() < 2:
        raise FitError(f"--group-dro: column {args.group!r} has a single value; group DRO needs "
                       "at least two groups")
    fair_kw, fair_fit_kw = _cli_fair.fit_options(args, df, _raise_fit_error)
    common = dict(risk=risk, solver=args.solver, l2_reg=args.l2_reg,
                  fit_intercept=not args.no_intercept, max_iter=args.max_iter,
                  tol=args.tol, random_state=args.seed, **fair_kw)
    if task == "regression":
        if not numeric_target:
            raise FitError(f"target {args.target!r} is not numeric; use --task classification")
        est = RiskRegressor(loss=args.loss, **common)
        y = y_raw.to_numpy(dtype=np.float64)
    else:
        est = RiskClassifier(**common)
        y = check_label_types(y_raw, args.target, "target").to_numpy()
    check_output(args.out, inputs=(("data", args.data),))
    reg = est
    if prep is not None:
        from sklearn.pipeline import Pipeline

        est = Pipeline([("preprocess", prep), ("model", reg)])
    t0 = time.perf_counter()
    fit_kw = {"groups": groups.to_numpy()} if args.group_dro else dict(fair_fit_kw)
    if prep is not None and fit_kw:
        fit_kw = {f"model__{k}": v for k, v in fit_kw.items()}
    progress = _FitProgress(reg, args.max_iter, f"fitting {type(reg).__name__} (risk "
                            f"{str(risk) if args.shift_cost else spec}) on {len(y)} rows x "
                            f"{len(features)} features", mode=progress_mode)
    try:
        with progress, _reporting(progress):
            est.fit(X, y, **fit_kw)
            elapsed = time.perf_counter() - t0
            progress.finish(lambda: _final_point(
                est, reg, task, X, y, groups.to_numpy() if args.group_dro else None))
    except (ValueError, TypeError) as exc:
        raise FitError(f"fit failed: {' '.join(str(exc).split())}") from None
    model = {"estimator": est, "features": features, "target": args.target, "task": task,
             "risk": str(risk), "group": args.group, "group_dro": bool(args.group_dro),
             "preprocess": prep is not None, "constraint": args.constraint,
             "constraint_tol": args.constraint_tol, "sensitive": args.sensitive}
    from . import model_io

    data = model_io.dumps(model)
    write_output(args.out, lambda fh: fh.write(data))
    trace = getattr(reg, "objective_trace_", None)
    objective = float(trace[-1]) if trace is not None and len(trace) else float("nan")
    print(f"model: {args.out}")
    if prep is not None:
        n_in = reg.n_features_in_
        print(f"features: {len(num_cols)} numeric (imputed: {args.impute}, "
              f"{'not ' if args.no_scale else ''}standardised), {len(cat_cols)} categorical "
              f"(one-hot) -> {n_in} model inputs")
    over = f" over the groups of {args.group!r} (group DRO)" if args.group_dro else ""
    print(f"task: {task}{auto_note}; risk: {risk}{over}; solver: {reg.solver_}")
    print(f"objective: {objective:.6g}; updates: {reg.n_iter_}; time: {elapsed:.2f} s")
    for line in _cli_fair.fit_report(reg, args):
        print(line)
    gap = float(getattr(reg, "dual_gap_", float("nan")))
    if math.isfinite(gap):
        print(f"certified: objective - optimum <= {gap:.3g} ({gap / max(abs(objective), 1e-300):.2g}"
              " relative; duality gap of the Newton solver)")
    losses = _per_sample_losses(est, task, X, y)
    print(f"training loss: mean {losses.mean():.6g}, max {losses.max():.6g}")
    if groups is not None:
        from .metrics import group_errors

        table = group_errors(None, losses, groups, loss="precomputed")
        worst, value = table.worst
        print(f"worst-group loss ({args.group}): {value:.6g} (group {worst!r}); "
              + ", ".join(f"{g}: {v:.4g}" for g, v in table.errors.items()))
    return 0


def load_model(path, trust=False):
    """The dict saved by ``riskopt fit`` (a safe skops file, see :mod:`riskopt.model_io`), or
    a one-line :class:`FitError`: a pickle/joblib file is never unpickled, a file that would
    build untrusted types is refused unless ``trust``."""
    from . import model_io

    try:
        return model_io.load_model(path, trust=trust)
    except model_io.ModelFileError as exc:
        raise FitError(str(exc)) from None


def cmd_predict(args):
    import pandas as pd

    model = load_model(args.model, trust=args.trust)
    est = model["estimator"]
    df = read_table(args.data)
    X = model_input(model, df, str(args.data))
    if args.proba and not hasattr(est, "predict_proba"):
        raise FitError("--proba needs a classification model")
    if args.out:
        check_output(args.out, inputs=(("model", args.model), ("data", args.data)))
    ids = {}
    for col in args.id_column or []:
        if col not in df.columns:
            raise FitError(f"--id-column: no column {col!r} in {args.data} (columns: "
                           f"{', '.join(map(str, df.columns[:12]))}"
                           f"{', ...' if len(df.columns) > 12 else ''})")
        ids[col] = df[col].to_numpy()
    out = pd.DataFrame({**ids, "prediction": est.predict(X)})
    if args.proba:
        proba = est.predict_proba(X)
        for j, c in enumerate(est.classes_):
            out[f"proba_{c}"] = proba[:, j]
    if args.out:
        text = out.to_csv(index=False).encode("utf-8")
        write_output(args.out, lambda fh: fh.write(text))
        print(f"predictions: {args.out} ({len(out)} rows)")
    else:
        out.to_csv(sys.stdout, index=False)
    return 0


def _final_point(est, reg, task, X, y, groups):
    """``(F, |grad F| / |grad F(0)|)`` of the fitted model on its training problem (in the
    model's input coordinates), or None when it cannot be rebuilt or does not reproduce the
    fit's own objective value."""
    import numpy as np

    try:
        from .estimators import _build_objective
        from .losses import MultinomialLoss

        Xt = est[:-1].transform(X) if hasattr(est, "steps") else X
        if task == "regression":
            loss, yv = reg.loss, np.asarray(y, dtype=np.float64)
        else:
            K = len(reg.classes_)
            loss = "logistic" if K == 2 else MultinomialLoss(n_classes=K)
            yv = np.searchsorted(reg.classes_, y).astype(np.float64)
        # the estimators' own objective (a plug-in risk builds its own)
        obj = _build_objective(reg.risk_, loss, np.asarray(Xt, dtype=np.float64), yv,
                               float(reg.l2_reg), bool(reg.fit_intercept), None, groups)
        coef = np.asarray(reg.coef_, dtype=np.float64)
        W = coef.reshape(-1, obj.K) if coef.ndim == 1 else coef.T
        if reg.fit_intercept:
            W = np.vstack([W, np.reshape(reg.intercept_, (1, -1))])
        with np.errstate(all="ignore"):
            _, g0 = obj.value_grad(obj.zeros())
            f, g = obj.value_grad(obj.as_coef(W))
        f, g0, g = float(f), float(np.linalg.norm(g0)), float(np.linalg.norm(g))
        best = float(np.nanmin(reg.objective_trace_))
        if not abs(f - best) <= 1e-6 * max(1.0, abs(best)):
            return None
        return f, (g / g0 if g0 > 0 else None)
    except Exception:  # a risk family without value_grad, an estimator that changed: no gap
        return None


FIT_DESCRIPTION = """\
Fit a risk-averse linear model (RiskRegressor or RiskClassifier) on a table and
save it.

DATA is a CSV file (.csv, .csv.gz, .tsv) or a parquet file. The saved model is a
scikit-learn Pipeline: a ColumnTransformer (numeric columns imputed with the median and
standardised; text, categorical and boolean columns, and those named by --categorical,
imputed with the most frequent value and one-hot encoded) and the riskopt estimator, so
'riskopt predict' and 'riskopt evaluate' take the raw table. --impute, --no-scale and
--no-preprocess change the preprocessing. A text or boolean target, and a numeric one
with 2 to 10 distinct values, all integers, is a classification task unless --task
regression; a target with a single value is an error (nothing to learn).

Every input (data, target, group column, output path) is checked before the fit and
before anything is written; a problem is one line naming the file or column and the fix
(exit status 2). The model file is written atomically into a folder that must exist.

On a terminal a progress display on standard error shows the solver, its updates out of
--max-iter, the objective F and the relative (sub)gradient norm |grad F|/|grad F(0)|
(a stochastic solver stops when it is at most --tol) while the fit runs; --progress
shows it anywhere, --quiet never. It does not change the fitted model."""

MODEL_FILES = """\
Model files are not code: 'riskopt fit' writes the skops format (a zip of a JSON
description and numpy arrays), which is rebuilt from a list of trusted types
(numpy, scipy, scikit-learn, riskopt's estimators, risks and losses) and never
unpickled. A file that would build any other type is refused (exit status 2) with
the list of those types; pass --trust only after reading them. A pickle/joblib file
(older riskopt versions) is never opened: unpickling runs any code it contains;
refit the model, or convert a file you wrote yourself with
'python -m riskopt.model_io convert OLD NEW'. The model records the riskopt,
scikit-learn and numpy versions that wrote it; another version gives a warning."""


def add_trust(parser):
    """The ``--trust`` flag of ``predict`` / ``evaluate``."""
    parser.add_argument("--trust", action="store_true",
                        help="load a model file that builds types outside the trusted list "
                             "(they are listed when it is refused; a trusted type cannot "
                             "run code on load, these may)")


FIT_EPILOG = """\
examples:
  riskopt fit train.csv --target y --risk cvar:0.1 --out model.skops
  riskopt fit train.csv --target label --group race --out model.skops
  riskopt fit train.csv --target y --group g --group-dro --risk cvar:0.15 --out dro.skops
  riskopt fit train.csv --target y --risk cvar:0.1,chi2=0.5 --solver prospect --out m.skops"""


def add_parsers(sub):
    import argparse

    f = sub.add_parser("fit", help="fit a risk-averse linear model on a CSV/parquet table",
                       description=FIT_DESCRIPTION, epilog=FIT_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("data", help="CSV (.csv, .csv.gz, .tsv) or parquet file")
    f.add_argument("--target", required=True, metavar="COL", help="target column")
    f.add_argument("--task", choices=["auto", "regression", "classification"], default="auto",
                   help="default (auto): classification for a non-numeric target and for integer "
                        f"targets with at most {MAX_AUTO_CLASSES} distinct values (said on the "
                        "'task:' line), else regression")
    f.add_argument("--risk", default=None, metavar="SPEC",
                   help="cvar:A, esrm:RHO, extremile:R, mean, maxloss, optionally with a shift "
                        "cost ',chi2=NU' or ',kl=NU' (e.g. cvar:0.1,chi2=0.5); or kl:RHO[,lam0=L]: "
                        "KL-constrained DRO of radius RHO with a KL penalty lam0 (default "
                        "1e-3, the SCDRO paper's; kl:RHO,lam0=0 is the purely constrained "
                        "problem other packages solve) (default: the estimator's, cvar:0.1 for "
                        "regression, esrm:1 for classification)")
    f.add_argument("--shift-cost", type=float, default=0.0, metavar="NU",
                   help="distribution-shift penalty nu >= 0 (default 0; a ',chi2=NU' or "
                        "',kl=NU' in --risk overrides it)")
    f.add_argument("--divergence", choices=["chi2", "kl"], default="chi2",
                   help="the divergence that --shift-cost penalises (default chi2)")
    f.add_argument("--loss", choices=["squared", "absolute"], default="squared",
                   help="regression loss (classification uses the logistic/multinomial loss)")
    f.add_argument("--solver", default="auto",
                   help="auto (default: the estimator's choice, printed after the fit) or a "
                        "registered solver name, e.g. lbfgs, prospect, sorel, lsvrg, sgd")
    f.add_argument("--l2-reg", type=float, default=1e-4, metavar="MU",
                   help="l2 penalty mu/2 |w|^2 on the coefficients, not the intercept "
                        "(default 1e-4)")
    f.add_argument("--max-iter", "--max-epochs", dest="max_iter", type=int, default=1000,
                   metavar="N", help="maximum solver updates (L-BFGS iterations, Newton steps, passes "
                   "of a stochastic solver; default 1000; --max-epochs is the former name)")
    f.add_argument("--tol", type=float, default=1e-4,
                   help="stop when |grad F(w)| <= tol |grad F(0)| (stochastic solvers; plus an "
                        "objective-change test for non-smooth problems), or L-BFGS's gradient "
                        "tolerance (default 1e-4)")
    f.add_argument("--no-intercept", action="store_true", help="fit no intercept")
    f.add_argument("--features", nargs="+", metavar="COL", help="feature columns (default: all "
                   "others)")
    f.add_argument("--drop", nargs="+", metavar="COL", help="columns to leave out")
    f.add_argument("--categorical", nargs="+", metavar="COL", help="numeric columns to one-hot "
                   "encode as categories (text, categorical and boolean columns always are)")
    f.add_argument("--impute", choices=["median", "mean", "none"], default="median",
                   help="missing numeric values: the column's median (default) or mean, "
                        "categorical ones: the most frequent value; none: missing values are "
                        "an error")
    f.add_argument("--no-scale", action="store_true", help="do not standardise the numeric "
                   "columns")
    f.add_argument("--no-preprocess", action="store_true", help="no preprocessing in the model: "
                   "the features must be numeric and complete")
    f.add_argument("--group", metavar="COL", help="group column (not a feature): report the "
                   "per-group and worst-group training loss")
    f.add_argument("--group-dro", action="store_true", help="apply the risk to the group-mean "
                   "losses of --group (group DRO; e.g. --risk cvar:0.15) instead of the "
                   "per-sample losses")
    _cli_fair.add_fit_arguments(f)
    f.add_argument("--seed", type=int, default=0, help="random seed of stochastic solvers")
    f.add_argument("--out", required=True, metavar="FILE", help="model file (skops format, "
                   "e.g. model.skops; it holds no code, see 'riskopt predict --help')")
    f.add_argument("--progress", action="store_true",
                   help="show the progress display on standard error even when it is not a "
                        "terminal (default: only on a terminal)")
    f.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    f.set_defaults(func=cmd_fit)

    p = sub.add_parser("predict", help="predict with a model saved by 'riskopt fit'",
                       description="Predict with a model saved by 'riskopt fit': one row per "
                                   "row of DATA, as CSV (the preprocessing is inside the "
                                   "model, so DATA is the raw table).\n\n" + MODEL_FILES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="model file written by 'riskopt fit'")
    add_trust(p)
    p.add_argument("data", help="CSV or parquet file with the model's feature columns")
    p.add_argument("--proba", action="store_true", help="also class probabilities")
    p.add_argument("--id-column", nargs="+", metavar="COL", help="columns copied to the output "
                   "before the predictions (row ids)")
    p.add_argument("--out", metavar="FILE", help="CSV to write (default: standard output)")
    p.set_defaults(func=cmd_predict)


def _raise_fit_error(msg):
    raise FitError(msg)
