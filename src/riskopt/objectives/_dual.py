"""The pieces of the Newton solver's certificate that other modules share (the crossover, the
LP dual point of ties): the loss curvature, weighted Gram matrices, ``X.T @ v`` over the rows
that matter, and the weak-duality bound :func:`dual_bound` of a dual point ``q``.

For any ``q`` of the spectrum's permutahedron (``nu = 0``; with a shift cost minus its
penalty), ``min_w G_q(w) = sum_i q_i l_i(w) + reg(w) <= min_w F(w)``; ``G_q`` is strongly convex
with ``diag(reg)``, so ``G_q(w) - sum_j g_j^2 / (2 reg_j) <= min G_q`` at any ``w`` (``g`` its
gradient), after the unpenalised intercept is minimised out. See
:mod:`riskopt.objectives._newton`, which re-exports these names.
"""
import numpy as np
from scipy.linalg import LinAlgError
from scipy.linalg.lapack import dpotrf, dpotrs, dtrtrs

from .._kernels import gram as _kg


def chol_solve(H, b):
    """``H^-1 b`` for a symmetric positive definite ``H`` (``p x p``, finite: the callers
    check) by LAPACK's ``dpotrf`` / ``dpotrs`` directly: ``scipy.linalg.cho_factor`` /
    ``cho_solve`` add a finiteness check and an array-API dispatch that cost more than the
    factorisation of a small Newton system. Raises ``LinAlgError`` if ``H`` is not positive
    definite."""
    c, info = dpotrf(H, lower=0, clean=0)
    if info != 0:
        raise LinAlgError(f"dpotrf: the matrix is not positive definite (info {info})")
    x, info = dpotrs(c, b, lower=0)
    if info != 0:
        raise LinAlgError(f"dpotrs failed (info {info})")
    return x


def chol_lower(H):
    """The lower Cholesky factor ``L`` (``H = L L'``, upper triangle zero) of a symmetric
    positive definite ``H`` (finite) by LAPACK's ``dpotrf`` directly (``np.linalg.cholesky``
    without its error-state and wrapping overhead, a noticeable share of a small crossover
    step). Raises ``LinAlgError`` if ``H`` is not positive definite."""
    L, info = dpotrf(H, lower=1, clean=1)
    if info != 0:
        raise LinAlgError(f"dpotrf: the matrix is not positive definite (info {info})")
    return L


def tri_solve(L, B, trans=False):
    """``L^-1 B`` (or ``L^-T B`` with ``trans``) for a lower-triangular ``L`` (finite), by
    LAPACK's ``dtrtrs`` directly (``scipy.linalg.solve_triangular`` without its checks)."""
    x, info = dtrtrs(L, B, lower=1, trans=1 if trans else 0)
    if info != 0:
        raise LinAlgError(f"dtrtrs: singular triangular matrix (info {info})")
    return x

def curvature(loss, y, z):
    """Second derivative of the loss in the prediction, per sample (``None`` if unknown)."""
    name = getattr(loss, "name", "")
    if name == "squared":
        return np.ones_like(z)
    if name == "logistic":
        from scipy.special import expit

        s = expit(z)
        return s * (1.0 - s)
    return None

def _curvature_at(loss, y, z, c, der):
    """:func:`curvature` at the predictions ``z + c``, where the loss derivatives are ``der``:
    for the logistic loss from them (``s = der + y`` is the sigmoid: no second pass of
    exponentials)."""
    name = getattr(loss, "name", "")
    if name == "logistic":
        s = der + y
        return s * (1.0 - s)
    return np.ones_like(z) if name == "squared" else curvature(loss, y, z + c)

def weighted_gram(X, h, r=None):
    """``X.T @ diag(h) @ X`` (dense ``(p, p)``) for a dense, CSR or ``LinearDesign`` ``X``;
    ``h >= 0``; only the rows with ``h > 0`` are read. With ``r`` (length n) also ``X.T @ r``,
    as ``(H, g)``: in the same pass over the rows of a dense design (the Newton step's
    gradient with its Hessian), the rows with ``r != 0`` read too."""
    rows = np.flatnonzero(h > 0 if r is None else (h > 0) | (r != 0))
    if getattr(X, "_is_linear_design", False):
        B = X.base
        m, s = X.shift, X.scale
        t = float(h.sum())
        gd = None
        if hasattr(B, "tocsr"):  # sparse base (float64 products): centre the Gram afterwards
            A, v = _plain_gram(B, h, rows, sums=True)
            Ad = (A - np.outer(v, m) - np.outer(m, v) + t * np.outer(m, m)) / np.outer(s, s)
            vd = (v - t * m) / s
        elif r is None:  # dense base: the rows are standardised before their float32 products
            Ad, vd = _plain_gram(B, h, rows, sums=True, shift=m, scale=s)
        else:
            Ad, vd, gd = _plain_gram(B, h, rows, sums=True, shift=m, scale=s, r=r)
            if X.intercept:
                gd = np.append(gd, r.sum())
        if not X.intercept:
            H = Ad
        else:
            d = Ad.shape[0]
            H = np.empty((d + 1, d + 1))
            H[:d, :d] = Ad
            H[:d, d] = H[d, :d] = vd
            H[d, d] = t
        if r is None:
            return H
        return H, (_xt_vec(X, r) if gd is None else gd)
    if r is None:
        return _plain_gram(X, h, rows)
    if hasattr(X, "tocsr"):
        return _plain_gram(X, h, rows), _xt_vec(X, r)
    return _plain_gram(X, h, rows, r=r)

def _plain_gram(X, h, rows, sums=False, shift=None, scale=None, r=None):
    """``Z.T @ diag(h) @ Z`` over ``rows`` (those with ``h > 0``), ``Z = (X - shift) / scale``
    (``X`` itself by default; dense ``X`` only); with ``sums`` also ``Z.T @ h`` (float64), as
    ``(G, v)``; with ``r`` (dense ``X``; ``rows`` must hold every ``r != 0``) also ``Z.T @ r``
    (float64) last in the tuple: ``(G, g)`` or ``(G, v, g)``."""
    n = X.shape[0]
    sub = len(rows) < 0.7 * n
    if hasattr(X, "tocsr"):  # scipy.sparse
        A = X.tocsr()[rows] if sub else X.tocsr()
        hh = h[rows] if sub else h
        G = (A.multiply(hh[:, None])).T @ A
        G = np.asarray(G.toarray() if hasattr(G, "toarray") else G, dtype=np.float64)
        return (G, np.asarray(A.T @ hh, dtype=np.float64).ravel()) if sums else G
    # float32 products, float64 sums of blocks: the Hessian only steers the Newton step (the
    # line search and the certificate use float64 values), and this halves its cost; blocks of
    # GRAM_BLOCK rows scaled by sqrt(h) into one float32 buffer (no copy of X, float32 or
    # float64; X' h and X' r summed in the same pass)
    p = X.shape[1]
    G = np.zeros((p, p))
    v = np.zeros(p)
    g = np.zeros(p)
    m = len(rows) if sub else n
    out = ((G, v) if sums else (G,)) + ((g,) if r is not None else ())
    if m == 0:
        return out if len(out) > 1 else G
    s = np.sqrt(h).astype(np.float32)
    shift = np.zeros(p) if shift is None else np.asarray(shift, dtype=np.float64)
    inv = np.ones(p) if scale is None else 1.0 / np.asarray(scale, dtype=np.float64)
    idx = rows.astype(np.int64, copy=False) if sub else np.empty(0, dtype=np.int64)
    rr = h if r is None else np.ascontiguousarray(r, dtype=np.float64)
    buf = np.empty((min(GRAM_BLOCK, m), p), dtype=np.float32)
    Gb = np.empty((p, p), dtype=np.float32)
    for a in range(0, m, GRAM_BLOCK):
        b = min(a + GRAM_BLOCK, m)
        B = buf[:b - a]
        _kg.scaled_rows(X, s, h, idx, a, b, B, v, shift, inv, rr, g)
        np.matmul(B.T, B, out=Gb)
        G += Gb
    return out if len(out) > 1 else G

#: rows per float32 block of the weighted Gram matrix (``_plain_gram``)
GRAM_BLOCK = 8192

def _intercept_index(objective):
    return objective.p - 1 if objective.fit_intercept else None

def _losses_derivs_z(objective, z, y=None):
    """Losses and derivatives at the predictions ``z`` (of the targets ``y``: a subset of
    the objective's, matching ``z``; all of them by default)."""
    z = np.ascontiguousarray(z, dtype=np.float64).reshape(-1)
    ell = np.empty(z.shape[0])
    der = np.empty(z.shape[0])
    objective._kl.losses_derivs_1(objective.loss.code, objective.y if y is None else y, z,
                                   ell, der)
    return ell, der

def dual_bound(objective, W, q, penalty=0.0, z=None):
    """Lower bound on ``min F`` from the dual point ``q`` (module docstring), evaluated at
    ``W`` after the intercept is minimised out: ``(bound, intercept_shift)``. Only the
    samples with ``q_i != 0`` are read when they are fewer than ``SPARSE_ROWS`` of all (the
    tail of a CVaR, whose other weights are 0)."""
    W = np.asarray(W, dtype=np.float64).reshape(-1)
    z = objective.X @ W if z is None else z
    rows = np.flatnonzero(q != 0)  # (a bool mask: 6x faster than on the floats)
    if len(rows) < SPARSE_ROWS * len(q):  # the support of q only
        q, z, y = q[rows], z[rows], objective.y[rows]
    else:
        rows, y = None, objective.y
    c = 0.0
    if objective.fit_intercept:
        # damped 1-D Newton on the convex G_q(w, b): a step that does not reduce |dG/db| is
        # halved; no bound (-inf) when the intercept has no finite minimiser (e.g. the weighted
        # samples of a logistic loss are of one class) or the solve does not converge, since
        # the bound needs the intercept at its minimiser
        ell, der = _losses_derivs_z(objective, z, y)
        scale = float(q @ np.abs(der)) + 1e-300
        g1 = float(q @ der)
        solved = abs(g1) <= 1e-13 * scale
        for _ in range(100):
            if solved:
                break
            h1 = float(q @ _curvature_at(objective.loss, y, z, c, der))
            if not h1 > 0:
                break
            step = -g1 / h1
            for _ in range(60):
                ell_new, der_new = _losses_derivs_z(objective, z + (c + step), y)
                g_new = float(q @ der_new)
                if abs(g_new) < abs(g1):
                    break
                step *= 0.5
            else:
                break
            c, g1, ell, der = c + step, g_new, ell_new, der_new
            solved = abs(g1) <= 1e-13 * scale
        slack = None if solved else _rounding_slack(objective, rows, q, y, z, c, der, g1)
        if slack is False:
            return -np.inf, c
    else:
        ell, der = _losses_derivs_z(objective, z, y)
        slack = None
    # (ell, der: the losses at z + c, the intercept's minimiser; z + (c + step) above)
    Wc = W.copy()
    if objective.fit_intercept:
        Wc[-1] += c
    qd = q * der
    g = (_xt_vec(objective.X, qd) if rows is None else _xt_rows(objective.X, rows, qd)) \
        + objective.reg * Wc
    val = float(q @ ell) + objective._reg_value(Wc.reshape(-1, 1)) - penalty
    if slack is None:
        return val - 0.5 * _scaled_sq(g, objective.reg), c
    shift, v, drop = slack
    return val - drop - 0.5 * _scaled_sq(np.abs(g) + shift * np.abs(v), objective.reg), c


#: :func:`dual_bound`'s intercept solve also ends where ``|dG_q/db|`` is at most this many
#: ulps of the predictions (``eps q' (l'' (|z| + |y|))``): on an interpolating fit (``y = X w +
#: 2``, CVaR 0.1: residuals ~1e-6 against predictions ~2) ``1e-13`` of the derivatives' scale
#: is below one ulp of ``z``, no step lowers ``|dG_q/db|`` and the bound was ``-inf`` at every
#: point (56 Newton steps, and a bounded least squares over 4,000 samples at the end)
INTERCEPT_ULPS = 16.0


def _rounding_slack(objective, rows, q, y, z, c, der, g1):
    """For :func:`dual_bound` when its intercept solve stopped with ``|dG_q/db| = |g1|``
    above ``1e-13`` of the derivatives' scale: ``False`` unless ``|g1|`` is at most
    :data:`INTERCEPT_ULPS` ulps of the predictions (then no bound); else ``(shift, v, drop)``
    with ``shift = |g1| / h`` (``h = q' l''``, the curvature in the intercept) the distance to
    the intercept's minimiser, ``v = X' (q l'')`` the change of the gradient per unit of
    intercept and ``drop = g1^2 / 2h`` the decrease of ``G_q`` there (exact for the squared
    loss): the bound then uses ``|g| + shift |v|`` for the gradient at the minimiser."""
    h = _curvature_at(objective.loss, y, z, c, der)
    h1 = float(q @ h)
    floor = INTERCEPT_ULPS * np.finfo(np.float64).eps * float(q @ (h * (np.abs(z + c) + np.abs(y))))
    if not (h1 > 0 and abs(g1) <= floor):
        return False
    qh = q * h
    v = _xt_vec(objective.X, qh) if rows is None else _xt_rows(objective.X, rows, qh)
    return abs(g1) / h1, v, g1 * g1 / (2.0 * h1)

def _scaled_sq(g, reg):
    """``sum_j g_j^2 / reg_j`` over the penalised coordinates: ``G_q`` is strongly convex with
    the diagonal ``diag(reg)`` (``reg_j = mu / s_j^2`` on a standardised design, not ``mu``), so
    ``min G_q >= G_q(w) - sum_j g_j^2 / (2 reg_j)``."""
    return float(np.divide(g * g, reg, out=np.zeros(len(reg)), where=reg > 0).sum())

def _box_spectrum(sigma):
    """True when ``P(sigma) = {q: lo <= q_i <= hi, sum q = 1}`` (at most one entry of ``sigma``
    strictly between its extremes: CVaR, the mean, the maximum)."""
    lo, hi = sigma[0], sigma[-1]
    return hi > lo and int(np.count_nonzero((sigma > lo) & (sigma < hi))) <= 1

def _xt_sparse(X, M):
    """``X.T @ M`` (dense ``(p, k)``) for a scipy.sparse ``M`` ``(n, k)`` and a dense, CSR or
    ``LinearDesign`` ``X``."""
    if getattr(X, "_is_linear_design", False):
        R = M.T @ X.base
        B = np.asarray(R.toarray() if hasattr(R, "toarray") else R).T
        return _from_base(X, B, np.asarray(M.sum(axis=0)).ravel())
    R = M.T @ X
    return np.asarray(R.toarray() if hasattr(R, "toarray") else R).T

def _from_base(X, B, colsum):
    """``X'.T @ M`` for a ``LinearDesign`` ``X' = [(X - m) / s, 1]`` from ``B = X.T @ M`` and
    the column sums of ``M``."""
    out = (B - np.outer(X.shift, colsum)) / X.scale[:, None]
    return np.vstack([out, colsum[None, :]]) if X.intercept else out

def _xt_vec(X, v):
    """``X.T @ v`` (float64 ``(p,)``) for the weighted loss derivatives ``v``: when fewer than
    ``SPARSE_ROWS`` of the entries are non-zero (the tail of a CVaR, the weights of the other
    samples are 0) one numba pass over those rows of a dense (or ``LinearDesign`` over dense)
    ``X``; the product otherwise."""
    rows = np.flatnonzero(v != 0)  # (a bool mask: 6x faster than on the floats)
    if len(rows) < SPARSE_ROWS * len(v):
        return _xt_rows(X, rows, v[rows])
    return np.asarray(X.T @ v, dtype=np.float64).ravel()

def _xt_rows(X, rows, vals):
    """``X[rows].T @ vals`` (float64 ``(p,)``): one numba pass over those rows of a dense (or
    ``LinearDesign`` over dense) ``X``; a product with the scattered ``vals`` otherwise."""
    lin = getattr(X, "_is_linear_design", False)
    base = X.base if lin else X
    if isinstance(base, np.ndarray):
        b = _kg.pool_row_sums(base, rows, vals, np.zeros(len(rows), dtype=np.int64),
                              np.zeros((1, base.shape[1])))[0]
        if not lin:
            return b
        out = np.empty(X.shape[1])  # _from_base for one column
        t = float(vals.sum())
        out[:len(b)] = (b - X.shift * t) / X.scale
        if X.intercept:
            out[-1] = t
        return out
    v = np.zeros(X.shape[0])
    v[rows] = vals
    return np.asarray(X.T @ v, dtype=np.float64).ravel()

#: largest share of non-zero entries for which ``_xt_vec`` reads only those rows
SPARSE_ROWS = 0.5


def _rows(X, idx):
    """Dense float64 rows ``X[idx]`` (``(len(idx), p)``) of a dense, CSR or ``LinearDesign``."""
    R = X[idx]
    R = R.toarray() if hasattr(R, "toarray") else R
    return np.atleast_2d(np.asarray(R, dtype=np.float64))


def free_gradient(objective, W, der, q, free):
    """``(A, c)``: the gradient of ``G_q`` at ``W`` as an affine function of the weights of
    the samples ``free`` (the others held at ``q``), ``g = A @ q[free] + c``; ``der`` the loss
    derivatives at ``W``'s predictions. The box dual points (:func:`_newton._box_dual`,
    :func:`_tie_dual.lp_tie_dual`) re-choose ``q[free]`` to make ``g`` small."""
    A = _rows(objective.X, free).T * der[free]  # (p, |free|): d g / d q_free
    c = _xt_vec(objective.X, q * der) + objective.reg * W - A @ q[free]
    return A, c

