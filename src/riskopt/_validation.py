"""Input validation shared by the public API. Every failure is a ValueError naming the problem."""
import numbers

import numpy as np


def check_positive(name, value, allow_zero=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def check_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_finite(name, a, verb="contains"):
    """Raise ``ValueError`` naming how many entries of the array ``a`` are NaN or infinite."""
    if not np.all(np.isfinite(a)):
        bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
        raise ValueError(f"{name} {verb} {bad} NaN or infinite value(s)")


def check_array(name, a, ndim=None, dtype=np.float64):
    try:
        arr = np.asarray(a, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric: {exc}") from None
    if ndim is not None and arr.ndim not in np.atleast_1d(ndim):
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape})")
    check_finite(name, arr)
    return arr


def store_params(obj, params):
    """Store a constructor's arguments as attributes, unchanged: ``store_params(self,
    locals())`` (scikit-learn rule: constructors only store; validation comes later)."""
    for key, value in params.items():
        if key not in ("self", "__class__"):
            setattr(obj, key, value)


class SparseDensifyWarning(UserWarning):
    """A sparse input was converted to a dense array (the message gives both sizes).

    Re-exported as ``riskopt.SparseDensifyWarning``."""


def sparse_nbytes(X):
    """Bytes held by a scipy sparse matrix (data and index arrays)."""
    return int(sum(getattr(X, a).nbytes for a in ("data", "indices", "indptr", "row", "col",
                                                  "offsets") if hasattr(X, a)))


def densify(X, who, stacklevel=3):
    """``X.toarray()`` with a :class:`SparseDensifyWarning` naming ``who`` and both sizes."""
    import warnings

    n, d = X.shape
    warnings.warn(
        f"{who} densifies the sparse X ({n} x {d}, {X.nnz / max(n * d, 1):.2%} non-zero): "
        f"{8 * n * d / 2**20:.1f} MiB dense against {sparse_nbytes(X) / 2**20:.1f} MiB sparse "
        "(only the full-batch L-BFGS path of the spectral family keeps X sparse)",
        SparseDensifyWarning, stacklevel=stacklevel)
    return X.toarray()


def is_sparse(X):
    """True for a scipy.sparse matrix or array."""
    return hasattr(X, "tocsr") and not isinstance(X, np.ndarray)


def _sparse_design(X, intercept):
    """A float64 CSR design ``[X, 1]`` (or ``X``), canonical (sorted indices, no duplicates),
    always a copy: O(nnz) memory, never dense."""
    from scipy import sparse

    A = X.tocsr()
    if A.dtype.kind not in "fiub":
        raise ValueError(f"X must be numeric, got a sparse matrix of dtype {A.dtype}")
    if A.ndim != 2 or A.shape[0] == 0 or A.shape[1] == 0:
        raise ValueError(f"X is empty (shape {A.shape})")
    A = sparse.csr_matrix(A, dtype=np.float64, copy=True)
    A.sum_duplicates()
    A.sort_indices()
    check_finite("X", A.data)
    if intercept:
        n = A.shape[0]
        ones = sparse.csr_matrix((np.ones(n), np.zeros(n, dtype=A.indices.dtype),
                                  np.arange(n + 1, dtype=A.indptr.dtype)), shape=(n, 1))
        A = sparse.hstack([A, ones], format="csr", dtype=np.float64)
        A.sort_indices()
    return A


def design_matrix(X, intercept, keep_sparse=False, who="this objective", keep_operator=None):
    """The float64 C-contiguous design ``[X, 1]`` (or ``X``) built in one allocation: any real
    dtype (float32 included) is converted while it is copied, and X is validated (2-D,
    non-empty, finite) without a converted copy first. Without an intercept an X that is
    already float64 and C-contiguous is returned as is (no copy).

    A scipy.sparse ``X`` gives a float64 CSR design (O(nnz) memory) with ``keep_sparse``, else
    it is densified with a :class:`SparseDensifyWarning`. A ``LinearDesign`` (the estimators'
    operator over the caller's X) is kept as is with ``keep_operator`` (default:
    ``keep_sparse``)."""
    if getattr(X, "_is_linear_design", False):  # riskopt.objectives._design: kept as is
        keep_operator = keep_sparse if keep_operator is None else keep_operator
        if not keep_operator or X.intercept != bool(intercept):
            raise ValueError("a LinearDesign needs a family that keeps operator designs and "
                             "the same fit_intercept")
        return X
    if is_sparse(X):
        if keep_sparse:
            return _sparse_design(X, intercept)
        X = densify(X, who, stacklevel=5)
    A = np.asarray(X)
    if A.dtype.kind not in "fiub":
        A = check_array("X", A, ndim=2)  # objects / strings: converted (and checked) here
    if A.ndim != 2:
        raise ValueError(f"X must have 2 dimension(s), got shape {A.shape}")
    if A.size == 0:
        raise ValueError(f"X is empty (shape {A.shape})")
    if A.dtype.kind == "f":
        check_finite("X", A)
    if not intercept:
        return np.ascontiguousarray(A, dtype=np.float64)
    n, d = A.shape
    D = np.empty((n, d + 1))
    D[:, :d] = A
    D[:, d] = 1.0
    return D


def check_X_y(X, y):
    if is_sparse(X):
        X = densify(X, "this objective")
    X = check_array("X", X, ndim=2)
    y = check_array("y", y, ndim=1)
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y have mismatched numbers of rows: {X.shape[0]} != {y.shape[0]}")
    return np.ascontiguousarray(X), np.ascontiguousarray(y)


def check_numeric_frame(X):
    """A pandas DataFrame with text / categorical / object columns: one ValueError naming
    them and the fix (the estimators take numeric features; scikit-learn's own message,
    "could not convert string to float: 'u'", names neither the column nor the remedy)."""
    dtypes = getattr(X, "dtypes", None)
    if dtypes is None or not hasattr(X, "columns"):
        return
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    bad = []
    for c, t in zip(X.columns, dtypes):
        if is_numeric_dtype(t) or is_bool_dtype(t):
            continue
        if isinstance(t, pd.CategoricalDtype) and is_numeric_dtype(t.categories.dtype):
            continue
        col = X[c]
        vals = col.astype(object) if isinstance(t, pd.CategoricalDtype) else col
        num = pd.to_numeric(vals, errors="coerce")
        wrong = num.isna() & vals.notna()
        if wrong.any():
            bad.append((c, f"{t}, e.g. {vals[wrong].iloc[0]!r}"))
    if bad:
        cols = ", ".join(f"{c!r} ({t})" for c, t in bad[:8]) + (", ..." if len(bad) > 8 else "")
        raise ValueError(
            f"X has non-numeric column(s) {cols}; the estimator takes numeric features: "
            "encode them first (e.g. sklearn.preprocessing.OneHotEncoder in a Pipeline / "
            "ColumnTransformer), drop them, or fit from a table with `riskopt fit`, which "
            "one-hot encodes text and categorical columns")


def validate_data(estimator, X, *args, **kwargs):
    """scikit-learn's ``validate_data`` after :func:`check_numeric_frame` (a DataFrame with
    text columns gets an error naming them)."""
    from sklearn.utils.validation import validate_data as _validate

    check_numeric_frame(X)
    return _validate(estimator, X, *args, **kwargs)


class lazy_module:
    """A stand-in for ``import name as alias`` that imports ``name`` at its first attribute
    access (keeps the numba kernels out of ``import riskopt`` and of parsing a risk)."""

    def __init__(self, name):
        self._name = name
        self._mod = None

    def __getattr__(self, attr):
        mod = self.__dict__["_mod"]
        if mod is None:
            import importlib

            mod = self.__dict__["_mod"] = importlib.import_module(self.__dict__["_name"])
        return getattr(mod, attr)


def plain_arrays(X, y, estimator=None):
    """``(X, y)`` when they need nothing of scikit-learn's ``validate_data``: a finite,
    C-contiguous float64 / float32 ndarray ``X`` with at least one row and column and a 1-D
    finite real (or integer) ndarray ``y`` of the same length; else None (the full validation
    runs, with its conversions and error messages). The dispatch of ``validate_data`` (data
    frame checks, array API) was an eighth of a small default fit (1,000 x 8). With
    ``estimator``, sets its ``n_features_in_`` and drops ``feature_names_in_``, as
    ``validate_data`` does."""
    if not (type(X) is np.ndarray and type(y) is np.ndarray and X.ndim == 2 and y.ndim == 1
            and X.dtype in (np.float64, np.float32) and y.dtype.kind in "fiu"
            and X.shape[0] == y.shape[0] and X.shape[0] >= 1 and X.shape[1] >= 1
            and X.flags.c_contiguous):
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow: the full check decides
        if not (np.isfinite(X.sum()) and (y.dtype.kind != "f" or np.isfinite(y.sum()))):
            return None
    if estimator is not None:  # what validate_data(reset=True) records for such input
        estimator.n_features_in_ = X.shape[1]
        if hasattr(estimator, "feature_names_in_"):
            del estimator.feature_names_in_
    return X, y
