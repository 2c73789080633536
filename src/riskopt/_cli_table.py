"""The input table of ``riskopt fit`` / ``predict`` / ``evaluate``: reading it (CSV, TSV,
parquet), naming its columns, guessing the task (``--task auto``) and the id-like columns,
checking the target / group / feature columns, what a saved model's ``predict`` takes from a
table (:func:`model_input`), and writing an output file. Every problem is one
:class:`FitError` line (exit status 2), never a traceback.

The preprocessing saved inside a model and the commands themselves are in
:mod:`riskopt._cli_fit`, which re-exports these names.
"""
import re
import sys
from pathlib import Path


class FitError(Exception):
    """Bad input to ``riskopt fit`` / ``predict`` (reported in one line, exit status 2)."""


def read_table(path):
    """The table at ``path`` (CSV, TSV, parquet), or a one-line :class:`FitError`."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise FitError(f"data file not found: {path}")
    if path.is_dir():
        raise FitError(f"data file {path} is a folder; give a CSV or parquet file")
    name = path.name.lower()
    try:
        if name.endswith((".parquet", ".pq")):
            df = pd.read_parquet(path)
        else:
            sep = "\t" if name.endswith((".tsv", ".tsv.gz")) else ","
            df = pd.read_csv(path, sep=sep, low_memory=False)  # one dtype per column
    except pd.errors.EmptyDataError:
        raise FitError(f"cannot read {path}: the file is empty; give a table with a header "
                       "line") from None
    except UnicodeDecodeError:
        raise FitError(f"cannot read {path}: not a UTF-8 text table (a binary file?); give "
                       "a CSV, TSV or parquet file") from None
    except OSError as exc:
        from .bench._io import describe_os_error

        exc.filename = str(path)
        raise FitError(describe_os_error(exc, "cannot read")) from None
    except Exception as exc:  # pandas / pyarrow raise many types for unreadable files
        msg = " ".join(str(exc).split())[:300]
        raise FitError(f"cannot read {path}: {msg}; check that it is a valid "
                       f"{'parquet' if name.endswith(('.parquet', '.pq')) else 'CSV'} file") \
            from None
    if len(df) == 0:
        raise FitError(f"{path} has a header but no rows")
    if not name.endswith((".parquet", ".pq")):
        _check_header(path, sep)
    return df


def _check_header(path, sep):
    """A header that names a column twice is one :class:`FitError` line naming it (pandas
    would silently read the second as ``name.1``)."""
    import pandas as pd

    head = pd.read_csv(path, sep=sep, header=None, nrows=1, dtype=str,
                       keep_default_na=False).iloc[0].tolist()
    where = {}
    for k, col in enumerate(head, 1):
        if str(col).strip():
            where.setdefault(col, []).append(k)
    twice = {c: ks for c, ks in where.items() if len(ks) > 1}
    if twice:
        said = "; ".join(f"{c!r} (columns {', '.join(map(str, ks))})"
                         for c, ks in twice.items())
        raise FitError(f"{path}: the header names the same column more than once: {said}; "
                       "give each column its own name")


def unnamed(col):
    """Whether a column has no name in the file (pandas reads it as ``Unnamed: k``)."""
    return col is None or str(col).strip() == "" or str(col).startswith("Unnamed: ")


def column_label(df, col):
    """``'a'``, or ``column 4 (no header name; pandas reads it as 'Unnamed: 3')``."""
    if unnamed(col):
        pos = list(df.columns).index(col) + 1 if col in df.columns else "?"
        return f"column {pos} (no header name; pandas reads it as {str(col)!r})"
    return repr(col) if isinstance(col, str) else str(col)


#: a numeric target with integer values only and at most this many distinct ones is taken as
#: class labels by ``--task auto`` (said on the "task:" line, with the override)
MAX_AUTO_CLASSES = 10
_ID_NAME = re.compile(r"(^|[^a-z0-9])(id|ids|idx|index|row|rowid|row_id|key|uuid)$|^id[^a-z]",
                      re.IGNORECASE)


def guess_task(y_raw):
    """``(task, note)`` of ``--task auto`` for the target column ``y_raw``: classification
    for a non-numeric or boolean target and for a numeric one with integer values only and
    2 .. ``MAX_AUTO_CLASSES`` distinct values; regression otherwise. ``note`` says what was
    guessed and how to override it (empty for a non-numeric target: nothing to guess)."""
    import numpy as np
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    if not is_numeric_dtype(y_raw) or is_bool_dtype(y_raw):
        return "classification", ""
    k = int(y_raw.nunique())
    vals = y_raw.to_numpy(dtype=np.float64)
    if 2 <= k <= MAX_AUTO_CLASSES and np.all(np.isfinite(vals)) \
            and np.all(vals == np.round(vals)):
        what = "two values" if k == 2 else f"{k} integer values"
        return "classification", (f" ({'' if k == 2 else f'{k} classes, '}auto: the numeric "
                                  f"target has {what}; --task regression to override)")
    return "regression", ""


def id_like(df, col):
    """Why column ``col`` looks like a row identifier (``""`` if it does not): every value
    distinct and either integers / text named like an id (``id``, ``row_id``, ``index``,
    ``key``, ...) or integers forming a run (``max - min + 1 == rows``). Such a column
    carries no signal a linear model can use and makes ``predict`` fail on a file without
    it; ``riskopt fit`` leaves it out with one line (``--features`` keeps it)."""
    import numpy as np
    from pandas.api.types import is_bool_dtype, is_float_dtype, is_integer_dtype

    v = df[col]
    n = len(v)
    if n < 3 or v.isna().any() or is_bool_dtype(v) or v.nunique() != n:
        return ""
    named = bool(_ID_NAME.search(str(col)))
    if is_integer_dtype(v) or (is_float_dtype(v) and np.all(v == np.round(v))):
        a = v.to_numpy(dtype=np.float64)
        if named:
            return "distinct integers in every row, named like an id"
        if a.max() - a.min() + 1 == n:
            return "distinct consecutive integers in every row"
        return ""
    if v.dtype == object and named:
        return "a distinct value in every row, named like an id"
    return ""


def _rows(mask, k=5):
    idx = [int(i) for i in mask.to_numpy().nonzero()[0][:k]]
    more = ", ..." if int(mask.sum()) > k else ""
    return ", ".join(map(str, idx)) + more


def check_complete(df, col, what, where):
    """The column ``col`` (its ``what``: target, group, ...) exists and has no missing value."""
    if col not in df.columns:
        raise FitError(f"{what} column {col!r} not in {where} "
                       f"(columns: {', '.join(map(str, df.columns[:20]))})")
    s = df[col]
    miss = s.isna()
    if miss.any():
        raise FitError(f"{what} column {col!r} has {int(miss.sum())} missing value(s) in "
                       f"{where} (0-based row(s) {_rows(miss)}); fill them or drop those rows "
                       "first")
    return s


def check_label_types(s, col, what):
    """Labels of one kind: a column mixing numbers and text (``1`` and ``'x'``) is refused."""
    if s.dtype != object:
        return s
    kinds = {}
    for v in s.to_numpy():
        kinds.setdefault(type(v).__name__, v)
    if len(kinds) > 1:
        ex = ", ".join(f"{k} {v!r}" for k, v in list(kinds.items())[:3])
        raise FitError(f"{what} column {col!r} mixes value types ({ex}); make the labels one "
                       "type (e.g. all text) and save the table again")
    return s


def _feature_matrix(df, features, where):
    import numpy as np

    missing = [c for c in features if c not in df.columns]
    if missing:
        raise FitError(f"{where}: column(s) not found: {', '.join(map(str, missing))}")
    sub = df[features]
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    text = [c for c in features if not (is_numeric_dtype(sub[c]) or is_bool_dtype(sub[c]))]
    if text:
        names = ", ".join(column_label(df, c) for c in text)
        drop = " ".join(repr(str(c)) if unnamed(c) or " " in str(c) else str(c) for c in text)
        raise FitError(f"{where}: non-numeric feature column(s) {names}; encode them (e.g. "
                       f"one-hot) or leave them out with --drop {drop}")
    nan = sub.isna().sum()
    nan = nan[nan > 0]
    if len(nan):
        desc = ", ".join(f"{c} ({n} missing)" for c, n in nan.items())
        raise FitError(f"{where}: missing values in {desc}; impute or drop those rows first")
    X = sub.to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(X)):
        bad = [str(c) for c in features if not np.all(np.isfinite(sub[c].to_numpy(float)))]
        raise FitError(f"{where}: infinite values in {', '.join(bad)}; replace them first")
    return X


def model_input(model, df, where="features"):
    """What the saved model's ``predict`` takes from ``df``: the feature columns as a
    DataFrame (preprocessing inside the model) or the checked numeric matrix."""
    if model.get("preprocess"):
        missing = [c for c in model["features"] if c not in df.columns]
        if missing:
            raise FitError(f"{where}: column(s) not found: {', '.join(map(str, missing))}")
        _check_numeric_input(model, df, where)
        X = _align_number_categories(model, df[model["features"]])
        _warn_unknown_categories(model, X, where)
        return X
    return _feature_matrix(df, model["features"], where)


def _numeric_columns(model):
    """The columns the saved model's preprocessing treats as numbers (its ColumnTransformer's
    ``numeric`` part), or ``[]`` if it has none / cannot be read."""
    est = model.get("estimator")
    try:
        prep = est.named_steps["preprocess"]
        return [c for name, _, cols in prep.transformers_ if name == "numeric" for c in cols]
    except (AttributeError, KeyError, TypeError, ValueError):
        return []


def _check_numeric_input(model, df, where):
    """A numeric feature column of the model holding text in ``df`` (``"abc"``): one line
    naming the column, the rows and the fix, instead of the imputer's traceback."""
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    for c in _numeric_columns(model):
        if c not in df.columns or is_numeric_dtype(df[c]) or is_bool_dtype(df[c]):
            continue
        s = df[c]
        wrong = pd.to_numeric(s, errors="coerce").isna() & s.notna()
        if wrong.any():
            first = s[wrong].iloc[0]
            raise FitError(f"{where}: column {column_label(df, c)} is numeric in the model but "
                           f"holds text ({first!r} in 0-based row(s) {_rows(wrong)}); fix or "
                           "blank those cells (a blank is imputed) and run again")



def _categorical_part(model):
    """``(columns, categories, pipeline)`` of the saved model's one-hot part
    (``categories[j]``: the text values the fit saw in ``columns[j]``; ``pipeline``: its
    text step then the one-hot encoder), or ``None``."""
    try:
        prep = model["estimator"].named_steps["preprocess"]
        pipe, cols = next((t, c) for name, t, c in prep.transformers_ if name == "categorical")
        return list(cols), pipe.named_steps["onehot"].categories_, pipe
    except Exception:  # noqa: BLE001 (no categorical part, or a model of another layout)
        return None


def _align_number_categories(model, X):
    """A numeric column one-hot encoded by the model (``--categorical``) read with the other
    number type: pandas reads integers as floats when one cell is blank, so ``3`` arrives as
    ``3.0``, whose text ``'3.0'`` is no category ``'3'`` of the fit (every row's indicators
    were zero: 1,300 of 2,214 compas predictions changed by one blank cell). Integral values
    are given the text form of the fit's categories (``'3'`` or ``'3.0'``); ``X`` itself is not
    changed (a copy when a column is)."""
    import numpy as np
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    part = _categorical_part(model)
    if part is None:
        return X
    out = X
    for c, cats in zip(*part[:2]):
        s = X[c]
        if not is_numeric_dtype(s) or is_bool_dtype(s):
            continue
        vals = s.to_numpy(dtype=np.float64)
        ok = np.isfinite(vals)
        if not np.all(vals[ok] == np.round(vals[ok])):
            continue
        texts = [str(v) for v in cats.tolist()]
        as_float = any(("." in t or "e" in t.lower()) for t in texts)
        want = "f" if as_float else "i"
        if s.dtype.kind == want:
            continue
        if out is X:
            out = X.copy()
        out[c] = pd.Series([float(v) if as_float else int(v) if np.isfinite(v) else np.nan
                            for v in vals], index=s.index, dtype=object)
    return out


def _warn_unknown_categories(model, df, where):
    """One ``riskopt: warning:`` line per categorical feature of the saved model whose values
    in ``df`` include categories the fit never saw: the one-hot encoder gives them all-zero
    indicators (the model predicts for them as for no category), which was silent."""
    import pandas as pd

    part = _categorical_part(model)
    if part is None:
        return
    cols, cats, pipe = part
    try:
        text = pipe.named_steps["text"].transform(df[cols])
    except Exception:  # noqa: BLE001 (a model of another layout)
        return
    text = pd.DataFrame(text, columns=cols)
    for j, c in enumerate(cols):
        s = text[c]
        new = s.notna() & ~s.isin(set(cats[j].tolist()))
        if new.any():
            vals = list(dict.fromkeys(s[new]))
            shown = ", ".join(repr(v) for v in vals[:5]) + (", ..." if len(vals) > 5 else "")
            print(f"riskopt: warning: {where}: column {column_label(df, c)} has "
                  f"{len(vals)} value(s) the model was not fitted on ({shown}; "
                  f"{int(new.sum())} row(s)): their one-hot indicators are all zero",
                  file=sys.stderr, flush=True)


def final_estimator(model):
    """The riskopt estimator of a saved model (the last step of its pipeline)."""
    est = model["estimator"]
    return est.steps[-1][1] if hasattr(est, "steps") else est


def write_output(path, write, flag="--out"):
    """Write ``path`` through ``write(binary file)`` atomically (temporary file in its folder,
    fsync, rename); any OSError becomes one line naming ``path`` and the fix."""
    from .bench import _io

    try:
        _io.atomic_write(path, write, make_parents=False)
    except OSError as exc:
        exc.filename = str(path)
        raise FitError(f"{flag}: {_io.describe_os_error(exc)}") from None


def check_output(path, flag="--out", inputs=()):
    """Refuse a bad output file before any work (one line naming it and the fix), and one
    that is one of the command's ``inputs`` (``(what, path)`` pairs: the model or the data
    it reads), which the write would destroy."""
    import os

    from .bench import _io

    for what, src in inputs:
        try:
            same = os.path.exists(path) and os.path.samefile(path, src)
        except OSError:  # the input is missing: reported by its own check
            same = False
        if same:
            raise FitError(f"{flag} {path} is the {what} file the command reads; writing "
                           "there would destroy it: choose another path")
    try:
        _io.check_output_file(path, flag)
    except _io.OutputError as exc:
        raise FitError(str(exc)) from None
