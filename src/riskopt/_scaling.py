"""Scale-aware fits: the estimators' problem in standardised coordinates (see the
"Units of the features" section of :mod:`riskopt.estimators`)."""
import numpy as np

from ._kernels import stats as _stats

#: Column statistics within these bounds (scale in [1/2, 2], |mean| <= scale) count as already
#: standardised: the fit runs on X as given (see ``_feature_scaling``).
_SCALE_BAND = (0.5, 2.0)
#: designs of at most this many entries get their column statistics from NumPy (no numba
#: kernel to compile on a small first fit); larger ones from ``_kernels.stats.column_stats``
#: (one pass, no temporary of X's size)
NUMPY_STATS_MAX = 2_000_000


#: the curvature ``c`` of each loss (its second derivative's typical size: 1 for the squared
#: loss, at most 1/4 for the logistic and multinomial losses) for the scale floor of
#: ``_feature_scaling``; none for the absolute loss (no curvature)
LOSS_CURVATURE = {"squared": 1.0, "logistic": 0.25, "multinomial": 0.25}


def scale_floor(loss, l2_reg):
    """``l2_reg / c`` for :func:`_feature_scaling` (0 for a loss without curvature)."""
    c = LOSS_CURVATURE.get(getattr(loss, "name", None))
    return float(l2_reg) / c if c else 0.0


def _feature_scaling(X, fit_intercept, floor=0.0):
    """``(shift, scale)`` of the columns of ``X`` for a scale-aware fit, or None.

    The estimators minimise the same problem in standardised coordinates: ``X' = (X - m) / s``
    with the l2 term ``mu/2 sum_j s_j^-2 w'_j^2`` (``w = w' / s``, ``b = b' - m . w``), which
    has the same minimiser and value; only the conditioning changes, so step sizes, L-BFGS and
    the stopping tests no longer depend on the units of the features. ``m`` is the column
    mean with an intercept (the intercept absorbs the shift), else 0 (``s`` is then the root
    mean square); constant (``s = 0``) columns keep ``s = 1``. None (fit on ``X`` as given)
    when every column is already standardised within ``_SCALE_BAND`` (nothing to gain). For a
    scipy.sparse ``X`` the statistics are computed in O(nnz) (the centring is then implicit,
    :func:`_operator_design`).

    ``floor`` (``l2_reg / c``, :func:`scale_floor`) raises the scale to ``s_j = sqrt(sd_j^2 +
    floor)``: a diagonal preconditioner under which every penalised coordinate has a curvature
    of about ``c`` (data ``c sd_j^2 / s_j^2`` plus penalty ``l2_reg / s_j^2``). Without it a
    narrow column (breast_cancer's fractal dimension, ``sd ~ 0.007``) got a penalty ``mu /
    sd^2`` hundreds of times its data curvature, and L-BFGS crawled (1,000 iterations,
    ``RiskClassifier(risk="mean", l2_reg=1e-2)`` on the raw features, against ~10 on
    standardised ones)."""
    if X.shape[0] == 0 or X.shape[1] == 0:
        return None
    if not isinstance(X, np.ndarray):  # scipy.sparse: O(nnz), never centred in place
        n, d = X.shape
        A = X.tocsr()
        m = np.bincount(A.indices, weights=A.data, minlength=d) / n if fit_intercept \
            else np.zeros(d)
        # sum of squared deviations over the stored values plus the implicit zeros (exact 0
        # for a constant column, where E[x^2] - E[x]^2 would leave rounding noise)
        dev = A.data - m[A.indices]
        cnt = np.bincount(A.indices, minlength=d)
        s = np.sqrt((np.bincount(A.indices, weights=dev * dev, minlength=d)
                     + (n - cnt) * m * m) / n)
        mx = A.max(axis=0).toarray().ravel()
        mn = A.min(axis=0).toarray().ravel()
    elif X.size <= NUMPY_STATS_MAX:  # NumPy: a float64 temporary of X's size at most
        n, d = X.shape
        if X.dtype == np.float64:
            s, m = _moments(X, fit_intercept)
        else:
            m = X.mean(axis=0, dtype=np.float64) if fit_intercept else np.zeros(d)
            dev = X - m
            s = np.sqrt(np.einsum("ij,ij->j", dev, dev) / n)
        # max / min decide only whether a column is constant: a column whose spread is not
        # far below its mean (rounding leaves ~1e-16 |m|) is not; the others are checked
        mx, mn = m + s, m - s  # (placeholders: mx != mn, finite)
        maybe = ~(s > 1e-6 * np.abs(m))
        if np.any(maybe):
            mx[maybe] = X[:, maybe].max(axis=0)
            mn[maybe] = X[:, maybe].min(axis=0)
    else:  # float64 accumulators (X may be float32), two passes over the rows (numba)
        n, d = X.shape
        m, ss, mx, mn = _stats.column_stats(X, bool(fit_intercept))
        s = np.sqrt(ss / n)
    # a constant column (max == min) is constant whatever rounding left in s (1e-16 of its
    # value: mu / s^2 ~ 1e28 then pinned every coefficient at 0): with an intercept it is
    # shifted to exactly 0 (its coefficient is 0 at the optimum, the intercept absorbs it)
    const = (mx == mn) & np.isfinite(mx) if fit_intercept else np.zeros(d, dtype=bool)
    ok = np.isfinite(s) & (s > 0) & np.isfinite(m) & ~const
    s = np.where(ok, s, 1.0)
    m = np.where(ok, m, np.where(const, mx, 0.0))
    lo, hi = _SCALE_BAND
    if np.all((s >= lo) & (s <= hi) & (np.abs(m) <= s)):
        return None
    if floor > 0:
        s = np.where(ok, np.sqrt(s * s + floor), s)
    return m, s


def _moments(X, fit_intercept):
    """``(s, m)``: the columns' standard deviations (root mean squares without an intercept)
    and means (zeros without) of a float64 ``X``, as ``s^2 = E[x^2] - m^2`` from two BLAS-speed
    passes (``1' X`` and ``sum_i x_ij^2``: NumPy's column mean and ``X - m`` of a C-ordered
    ``X`` with few columns cost 4-5x as much, a noticeable share of a small fit); the columns
    where that difference cancels (``s <= 1e-3 |m|``: its relative error is about
    ``eps (m / s)^2``; constant columns) get the exact sum of squared deviations."""
    n, d = X.shape
    m = (np.ones(n) @ X) / n if fit_intercept else np.zeros(d)
    var = np.einsum("ij,ij->j", X, X) / n - m * m
    s = np.sqrt(np.maximum(var, 0.0))
    redo = ~(var > 1e-6 * m * m)
    if np.any(redo):
        dev = X[:, redo] - m[redo]
        s[redo] = np.sqrt(np.einsum("ij,ij->j", dev, dev) / n)
    return s, m


def _standardise_design(obj, X, scaling, fit_intercept):
    """Make the objective's design ``[X, 1]`` the standardised ``[X', 1]`` in place, with the
    per-row l2 ``mu / s_j^2`` (the same problem in ``w'``); returns ``scaling``, or None when
    ``obj`` is not laid out so (a plug-in family: then it is fitted on ``X`` as given). The
    caller's array is never changed (copied if the design shares its memory)."""
    if scaling is None:
        return None
    reg, D = getattr(obj, "reg", None), getattr(obj, "X", None)
    d = X.shape[1]
    if not (isinstance(reg, np.ndarray) and reg.shape == (obj.p,)
            and obj.p == d + bool(fit_intercept) and isinstance(D, np.ndarray)
            and D.shape == (X.shape[0], obj.p) and D.dtype == np.float64):
        return None
    m, s = scaling
    if np.shares_memory(D, X):
        D = obj.X = D.copy()
    D[:, :d] -= m  # in place: the objective's design becomes X'
    D[:, :d] /= s
    reg[:d] = reg[:d] / s ** 2
    return scaling


def _operator_design(X, scaling, fit_intercept):
    """``(design, scaling)`` for the full-batch path: a :class:`riskopt._design.LinearDesign`
    ``[(X - m) / s, 1]`` over the caller's ``X`` (no copy), or ``(None, scaling)`` when a dense
    ``X`` has a column offset too large to centre implicitly (``|m| / s > MAX_IMPLICIT_SHIFT``:
    the explicit standardised copy, :func:`_standardise_design`, is exact there). A sparse
    ``X`` with such offsets is only scaled (``m = 0``: centring it would fill it in)."""
    from ._design import MAX_IMPLICIT_SHIFT, LinearDesign

    if scaling is None:
        return LinearDesign(X, fit_intercept), None
    m, s = scaling
    if np.all(np.abs(m) <= MAX_IMPLICIT_SHIFT * s):
        return LinearDesign(X, fit_intercept, m, s), scaling
    if isinstance(X, np.ndarray):
        return None, scaling
    scaling = (np.zeros_like(m), s)
    return LinearDesign(X, fit_intercept, *scaling), scaling


def _to_scaled(W, scaling, fit_intercept):
    """``(p, K)`` coefficients in the units of X -> the standardised coordinates."""
    if scaling is None:
        return W
    m, s = scaling
    d = s.shape[0]
    Ws = np.array(W, dtype=np.float64)
    Ws[:d] = W[:d] * s[:, None]
    if fit_intercept:
        Ws[d] = W[d] + m @ W[:d]
    return Ws


def _from_scaled(Ws, scaling, fit_intercept):
    """Inverse of :func:`_to_scaled`."""
    if scaling is None:
        return Ws
    m, s = scaling
    d = s.shape[0]
    W = np.array(Ws, dtype=np.float64)
    W[:d] = Ws[:d] / s[:, None]
    if fit_intercept:
        W[d] = Ws[d] - m @ W[:d]
    return W


#: a regression target whose scale (std with an intercept, else root mean square) lies
#: outside this band is fitted as y / s (``_target_scaling``)
_TARGET_BAND = (1e-3, 1e3)


def _spread(y, centred, top):
    """The standard deviation of ``y`` (root mean square unless ``centred``) from ``y /
    top`` (``top = max |y|``: no overflow or underflow of the squares for ``|y| ~ 1e+-200``),
    by one dot product (``np.std``'s own dispatch cost more)."""
    u = y / top
    r = u - float(np.mean(u)) if centred else u
    return top * float(np.sqrt((r @ r) / len(r)))


def _target_scaling(y, loss, risk, fit_intercept, l2_reg):
    """``(s, c, risk', l2')`` to fit a regression target far from unit scale as ``y / s``, or
    None.

    For the squared loss (``c = s^2``) and the absolute loss (``c = s``) the losses scale by
    ``c`` when ``y`` and the coefficients scale by ``s``, and a spectral risk with shift cost
    ``nu`` satisfies ``R_nu(c l) = c R_{nu / c}(l)`` (chi-square and KL), so
    ``F(w) = c F'(w / s)`` with ``F'`` the problem on ``y / s`` with shift cost ``nu / c``
    and l2 ``mu s^2 / c`` (``mu`` for the squared loss, ``mu s`` for the absolute loss: the
    absolute loss is not scale-free against an l2 term). The KL-DRO risk scales the same way
    (``max_{KL(q) <= rho} sum q c l - lambda0 KL(q) = c (... - (lambda0 / c) KL(q))``: its
    ``shift_cost`` lambda0 becomes ``lambda0 / c``; without it a target like ``y x 1e150``
    overflowed the losses and the fit returned the zero model). Only for the built-in
    spectral and KL-DRO risks and targets whose scale is outside ``_TARGET_BAND``."""
    import dataclasses

    from .risks import KLDRO, _RiskBase

    name = getattr(loss, "name", None)
    if name not in ("squared", "absolute") or not isinstance(risk, (_RiskBase, KLDRO)) \
            or not dataclasses.is_dataclass(risk) or y.size == 0:
        return None
    top = float(np.max(np.abs(y)))
    if not np.isfinite(top) or top == 0.0:
        return None
    s = _spread(y, fit_intercept, top)
    lo, hi = _TARGET_BAND
    if not np.isfinite(s) or s <= 0 or lo <= s <= hi:
        return None
    with np.errstate(over="ignore", under="ignore"):
        c = s * s if name == "squared" else s  # may overflow: only the reported values use it
    nu = float(risk.shift_cost)
    nu2 = (nu / s) / s if name == "squared" else nu / s
    if isinstance(risk, KLDRO) and risk.radius is None and not nu2 > 0:
        return None  # the penalised form needs lambda0 / c > 0 (it underflowed)
    risk2 = dataclasses.replace(risk, shift_cost=nu2)
    return s, c, risk2, float(l2_reg) * (1.0 if name == "squared" else s)
