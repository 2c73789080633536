"""Certified accuracy for the tests: compare an approximate solution with the optimum through
its own accuracy, never with another approximate solution at a fixed tolerance.

For the spectral family, ``F(W) = max_q [sum_i q_i l_i(W) - pen(q)] + reg(W)`` over the risk's
feasible set, so every feasible ``q`` gives ``G_q(W) = sum_i q_i l_i(W) - pen(q) + reg(W) <=
F(W)`` everywhere and ``min G_q <= min F`` (weak duality). ``G_q`` is strongly convex with
``diag(reg)`` in the penalised rows once the unpenalised intercept is minimised out, so

    min F >= G_q(W') - sum_j ||dG_q/dW_j||^2 / (2 reg_j)    (W' = W, intercept at argmin)

With ``q`` the risk's weights at ``W`` (exact where ``W`` is optimal and the losses untied),
:func:`gap` is a certified upper bound on ``F(W) - min F``: it does not trust the solver that
produced ``W``, and it holds on any machine (up to the rounding of one evaluation, which
:func:`assert_certified` allows for explicitly). This module is independent of the Newton
solver's own certificate (``riskopt.objectives._newton.certify``), so it checks that too.
"""
import numpy as np

import riskopt as ro

#: the rounding allowance of a value: a few ulps of the terms summed (n losses, p weights)
ROUND = 1e-12


def _design_W(est):
    """``(p, K)`` coefficients of a fitted estimator in the layout of :class:`riskopt.Objective`
    (the intercept as the last row when fitted)."""
    coef = np.atleast_2d(np.asarray(est.coef_, dtype=np.float64))
    if coef.shape[0] == 1 or np.ndim(est.coef_) == 1:
        W = coef.reshape(-1, 1)
    else:
        W = coef.T
    if est.fit_intercept:
        W = np.vstack([W, np.reshape(np.asarray(est.intercept_, dtype=np.float64), (1, -1))])
    return W


def problem_of(est, X, y, sample_weight=None):
    """``(objective, W)``: the problem a fitted ``RiskRegressor`` / ``RiskClassifier`` minimises,
    in the original units of ``X`` (the estimators' feature scaling is a change of coordinates
    of the same problem), and the fitted point."""
    if hasattr(est, "classes_"):
        y_enc = np.searchsorted(est.classes_, np.asarray(y)).astype(np.float64)
        loss = "logistic" if len(est.classes_) == 2 else "multinomial"
    else:
        y_enc, loss = np.asarray(y, dtype=np.float64), est.loss
    obj = ro.Objective(loss, est.risk_, X, y_enc, l2_reg=est.l2_reg,
                       fit_intercept=est.fit_intercept, sample_weight=sample_weight)
    W = _design_W(est)
    if obj.K == 1 and W.shape[1] != 1:
        raise AssertionError(f"coefficients of shape {W.shape} for a one-output problem")
    return obj, W


def _at(obj, W):
    """Per-sample losses and derivatives in the scores at ``W``."""
    return obj.losses_derivs(W)


def _z_derivs(obj, Z):
    losses = np.empty(obj.n)
    derivs = np.empty((obj.n, obj.K))
    obj._kl._losses_derivs_z(obj.loss.code, obj.y, np.ascontiguousarray(Z), losses, derivs)
    return losses, derivs


def _G(obj, W, q, pen):
    """``(G_q(W), grad G_q(W))`` (``(p, K)``)."""
    losses, derivs = _at(obj, W)
    G = np.asarray(obj.X.T @ (q[:, None] * derivs)) + obj.reg[:, None] * W
    return float(q @ losses) - pen + obj._reg_value(W), G


def _hessian(obj, W, q):
    """The Hessian of ``G_q`` at ``W`` (``(pK, pK)``, rows ``(j, k)`` in C order), the
    per-sample Hessians in the scores by central differences of the exact derivatives."""
    X = obj.X.toarray() if hasattr(obj.X, "toarray") else np.asarray(obj.X)
    Z = X @ W
    K = obj.K
    C = np.empty((obj.n, K, K))
    for l in range(K):
        h = 1e-6 * max(1.0, float(np.max(np.abs(Z[:, l]))))
        E = np.zeros_like(Z)
        E[:, l] = h
        C[:, :, l] = (_z_derivs(obj, Z + E)[1] - _z_derivs(obj, Z - E)[1]) / (2 * h)
    C = 0.5 * (C + C.transpose(0, 2, 1))
    H = np.empty((obj.p, K, obj.p, K))
    for k in range(K):
        for l in range(K):
            H[:, k, :, l] = X.T @ (X * (q * C[:, k, l])[:, None])
    H = H.reshape(obj.p * K, obj.p * K)
    H[np.diag_indices_from(H)] += np.repeat(obj.reg, K)
    return H


def _minimise_G(obj, W, q, pen, iters=30):
    """A point where ``G_q`` is (nearly) minimal: damped Newton from ``W``. Nothing here needs
    to be exact: the bound is certified at whatever point this returns."""
    W = np.array(W, dtype=np.float64)
    val, G = _G(obj, W, q, pen)
    for _ in range(iters):
        H = _hessian(obj, W, q)
        step = -np.linalg.lstsq(H, G.ravel(), rcond=1e-14)[0].reshape(W.shape)
        t = 1.0
        while t > 1e-10:
            v_new, G_new = _G(obj, W + t * step, q, pen)
            if v_new <= val:
                break
            t *= 0.5
        else:
            break
        done = val - v_new <= 1e-16 * max(1.0, abs(val))
        W, val, G = W + t * step, v_new, G_new
        if done:
            break
    return W


def _minimise_intercept(obj, W, q, iters=60):
    """``W`` with its intercept row moved to the minimiser of ``b -> sum_i q_i l_i(W_b)``
    (Newton, Hessian by central differences of the exact gradient); returns ``(W', slack)``,
    ``slack >= 0`` an estimate of how far the value at ``W'`` still is above that minimum."""
    W = np.array(W, dtype=np.float64)
    if not obj.fit_intercept:
        return W, 0.0
    K = W.shape[1]

    def grad(b):
        Wb = W.copy()
        Wb[-1] = b
        return q @ _at(obj, Wb)[1]

    def hess(b):
        h = 1e-5 * max(1.0, float(np.max(np.abs(b))))
        H = np.empty((K, K))
        for k in range(K):
            e = np.zeros(K)
            e[k] = h
            H[:, k] = (grad(b + e) - grad(b - e)) / (2 * h)
        return 0.5 * (H + H.T)

    b = W[-1].copy()
    g = grad(b)
    scale = max(1.0, float(np.abs(q @ np.abs(_at(obj, W)[1])).sum()))
    for _ in range(iters):
        if np.linalg.norm(g) <= 1e-15 * scale:
            break
        step = -np.linalg.lstsq(hess(b), g, rcond=1e-12)[0]
        t = 1.0
        while t > 1e-12:  # a step that does not shrink the gradient is halved
            g_new = grad(b + t * step)
            if np.linalg.norm(g_new) < np.linalg.norm(g):
                break
            t *= 0.5
        else:
            break
        b, g = b + t * step, g_new
    W[-1] = b
    slack = 0.5 * float(g @ np.linalg.lstsq(hess(b), g, rcond=1e-12)[0])
    return W, max(slack, 0.0)


#: shift costs of the smoothed dual points tried at ``nu = 0`` (weights of the same feasible
#: set, so valid dual points; near a tie of the non-smooth risk, e.g. the CVaR boundary, one of
#: them is much closer to the optimal dual point than the weights at ``W`` themselves)
SMOOTHING = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)


def _quadratic(obj):
    """Whether ``G_q`` is a quadratic in ``W`` whose minimum :func:`_quadratic_bound` gives
    exactly: the squared loss with one output, and a coefficient row without an l2 term (the
    strong-convexity bound of the module docstring needs ``reg > 0`` on every row but the
    intercept)."""
    rows = obj.reg[:-1] if obj.fit_intercept else obj.reg
    return obj.loss.name == "squared" and obj.K == 1 and bool(np.any(rows == 0))


def quadratic_min(X, y, a, reg=0.0):
    """``min_w sum_i a_i (x_i w - y_i)^2 / 2 + sum_j reg_j w_j^2 / 2`` (``a >= 0``), exactly up
    to rounding: the function is ``f(w*) + (w - w*)' H (w - w*) / 2`` with ``H = X' diag(a) X +
    diag(reg)``, so at any point ``w``, ``f(w) - g' H^+ g / 2`` (``g`` the gradient, in the range
    of ``H`` as ``f >= 0``) is its minimum; ``w`` is the solution of the normal equations,
    refined once."""
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    H = X.T @ (X * a[:, None])
    H[np.diag_indices_from(H)] += reg
    w = np.zeros(X.shape[1])

    def value_grad(w):
        r = X @ w - y
        return (0.5 * float(a @ (r * r)) + 0.5 * float(np.sum(reg * w * w)),
                X.T @ (a * r) + reg * w)

    for _ in range(2):  # one Newton step is exact; the second removes its rounding
        w = w - np.linalg.lstsq(H, value_grad(w)[1], rcond=1e-14)[0]
    val, g = value_grad(w)
    return val - 0.5 * float(g @ np.linalg.lstsq(H, g, rcond=1e-14)[0])


def _quadratic_bound(obj, W, q, pen):
    """``min G_q`` for the squared loss (:func:`quadratic_min` with the weights ``q``)."""
    return quadratic_min(obj.X, obj.y, q, obj.reg) - pen


def _bound_for(obj, W, q, pen):
    if _quadratic(obj):
        return _quadratic_bound(obj, W, q, pen)
    W1 = _minimise_G(obj, W, q, pen)
    W1, slack = _minimise_intercept(obj, W1, q)
    Gq, G = _G(obj, W1, q, pen)
    pen_rows = obj.reg > 0
    return Gq - slack - 0.5 * float(np.sum(G[pen_rows] ** 2 / obj.reg[pen_rows, None]))


def _per_row(obj, qg):
    """Group weights as per-row weights: ``sum_g q_g L_g = sum_i (q_g(i) / n_g(i)) l_i``."""
    return qg[obj.group_ids] / obj.group_sizes[obj.group_ids]


def _group_box_dual(obj, W, qg):
    """For a box spectrum of the groups (CVaR, max, mean; ``K = 1``): group weights in
    ``[lo, hi]`` summing to 1 (the feasible set) that make the gradient of ``G_q`` at ``W``
    small in the metric of the bound (bounded least squares over all groups). ``None`` if
    not applicable."""
    from scipy.optimize import lsq_linear

    sigma = obj.sigma
    lo, hi = float(sigma[0]), float(sigma[-1])
    if obj.K != 1 or not hi > lo or np.count_nonzero((sigma > lo) & (sigma < hi)) > 1 \
            or obj.m > 2000:
        return None
    X = obj.X.toarray() if hasattr(obj.X, "toarray") else np.asarray(obj.X)
    d = _at(obj, W)[1][:, 0]
    weight = np.where(obj.reg > 0, 1.0 / np.sqrt(np.where(obj.reg > 0, obj.reg, 1.0)), 1e3)
    A = np.zeros((obj.p, obj.m))
    np.add.at(A.T, obj.group_ids, X * (d / obj.group_sizes[obj.group_ids])[:, None])
    A *= weight[:, None]
    c = obj.reg * W[:, 0] * weight
    big = 1e3 * max(1.0, float(np.abs(A).max()))
    A = np.vstack([A, np.full((1, obj.m), big)])
    sol = lsq_linear(A, np.append(-c, big), bounds=(lo, hi), method="bvls", tol=1e-14)
    q = np.clip(sol.x, lo, hi)
    q += (1.0 - q.sum()) / obj.m  # the exact total (a rounding-size shift)
    if np.any(q < lo - 1e-15) or np.any(q > hi + 1e-15):
        return None
    return np.clip(q, lo, hi)


def _group_lower_bound(obj, W, enough):
    """:func:`lower_bound` for group DRO (``GroupRiskObjective``: a spectral risk of the
    group-mean losses): any feasible group weights ``q`` are per-row weights ``q_g / n_g``."""
    gl = obj.group_losses(W)
    val, qg = obj.risk_weights(gl)
    best = _bound_for(obj, W, _per_row(obj, qg), float(qg @ gl) - float(val))
    if obj.nu != 0 or best >= enough:
        return best
    qb = _group_box_dual(obj, W, qg)
    if qb is not None:
        best = max(best, _bound_for(obj, W, _per_row(obj, qb), 0.0))
    for nu in SMOOTHING:
        if best >= enough:
            break
        q_nu = obj.with_shift(nu).risk_weights(gl)[1]
        best = max(best, _bound_for(obj, W, _per_row(obj, q_nu), 0.0))
    return best


def lower_bound(obj, W, enough=-np.inf):
    """A certified lower bound on ``min F``: the best over the dual points ``q`` = the risk's
    weights at ``W`` (and, without a shift cost, the weights of its smoothed versions
    ``SMOOTHING`` and the CVaR box duals) of the bound of the module docstring, evaluated near
    ``argmin G_q``. Stops trying dual points once the bound reaches ``enough``.

    The KL-DRO family (``obj.family == "kl_dro"``) too: its ``risk_weights`` maximiser ``q``
    satisfies the KL constraint, and ``G_q = q.l - lam0 KL(q) + reg <= F`` everywhere (the
    same weak duality, ``pen = q.l - R(l)``); at a smooth optimum ``q`` is the optimal dual
    point, so the bound is tight there."""
    W = obj.as_matrix(W)
    if hasattr(obj, "group_sizes"):
        return _group_lower_bound(obj, W, enough)
    losses, _ = _at(obj, W)
    val, q = obj.risk_weights(losses)
    best = _bound_for(obj, W, q, float(q @ losses) - float(val))  # pen(q): 0 at nu = 0
    if getattr(obj, "family", "spectral") != "spectral" or obj.nu != 0 \
            or obj.sample_weight is not None or best >= enough:
        return best
    for window in WINDOWS:  # (None unless CVaR-like: cheap to try first)
        q_box = _box_dual(obj, W, losses, q, window)
        if q_box is not None:
            best = max(best, _bound_for(obj, W, q_box, 0.0))
            if best >= enough:
                return best
    for nu in SMOOTHING:
        q_nu = obj.with_shift(nu).risk_weights(losses)[1]
        best = max(best, _bound_for(obj, W, q_nu, 0.0))
        if best >= enough:
            return best
    return best


#: half-widths (relative to ``max(1, |t|)``, ``t`` the boundary loss) of the loss windows whose
#: weights :func:`_box_dual` re-chooses
WINDOWS = (1e-10, 1e-8, 1e-6, 1e-4, 1e-3)


def _box_dual(obj, W, losses, q0, window):
    """For a box spectrum (CVaR, ``K = 1``): the weights of the samples whose losses lie within
    ``window`` of the boundary re-chosen in ``[lo, hi]`` (same total) to make the gradient of
    ``G_q`` at ``W`` small in the metric of the bound (bounded least squares). At an optimum
    with tied boundary losses the optimal dual point is of this form. ``None`` if not
    applicable."""
    from scipy.optimize import lsq_linear

    sigma = obj.sigma
    lo, hi = float(sigma[0]), float(sigma[-1])
    if obj.K != 1 or not hi > lo or np.count_nonzero((sigma > lo) & (sigma < hi)) > 1:
        return None
    top = q0 >= hi
    if not np.any(q0 > lo) or np.all(top):
        return None
    # the boundary loss: that of a tie straddling the boundary (its weights are the tie's mean
    # of the spectrum, strictly between lo and hi), else the smallest loss of the tail
    part = (q0 > lo) & ~top
    t = float(np.min(losses[part] if np.any(part) else losses[top]))
    free = np.abs(losses - t) <= window * max(1.0, abs(t))
    if free.sum() < 2 or free.sum() > 2000:
        return None
    X = obj.X.toarray() if hasattr(obj.X, "toarray") else np.asarray(obj.X)
    d = _at(obj, W)[1][:, 0]
    weight = np.where(obj.reg > 0, 1.0 / np.sqrt(np.where(obj.reg > 0, obj.reg, 1.0)), 1e3)
    A = (X[free] * d[free, None]).T * weight[:, None]
    c = (X[~free].T @ (q0[~free] * d[~free]) + obj.reg * W[:, 0]) * weight
    total = 1.0 - float(q0[~free].sum())
    big = 1e3 * max(1.0, float(np.abs(A).max()))
    A = np.vstack([A, np.full((1, A.shape[1]), big)])
    b = np.append(-c, big * total)
    sol = lsq_linear(A, b, bounds=(lo, hi), method="bvls", tol=1e-14)
    q = q0.copy()
    q[free] = np.clip(sol.x, lo, hi)
    q[free] += (total - q[free].sum()) / free.sum()  # the exact total (a rounding-size shift)
    if np.any(q[free] < lo - 1e-15) or np.any(q[free] > hi + 1e-15):
        return None  # the shift left the box: no dual point from this window
    return np.clip(q, lo, hi)


def gap(obj, W, W_ref=None, enough=-np.inf):
    """``(F(W), certified upper bound on F(W) - min F)``; with ``W_ref`` (another point, e.g.
    a more accurate solution) the better of the two lower bounds is used. The search for a
    better dual point stops once the gap is at most ``enough`` (default: the best bound)."""
    F = float(obj.value(obj.as_coef(obj.as_matrix(W))))
    lb = lower_bound(obj, W, F - enough)
    if W_ref is not None and F - lb > enough:
        lb = max(lb, lower_bound(obj, W_ref, F - enough))
    return F, F - lb


def assert_certified(obj, W, rel, W_ref=None, what="the fit"):
    """``F(W) - min F <= rel * max(1, |F(W)|)`` (+ rounding), certified by :func:`gap`."""
    F = float(obj.value(obj.as_coef(obj.as_matrix(W))))
    allowed = (rel + ROUND * (1 + np.log2(obj.n))) * max(1.0, abs(F))
    F, g = gap(obj, W, W_ref, enough=allowed)
    assert g <= allowed, (f"{what}: F = {F!r} is not certified within {allowed:.3g} of the "
                          f"optimum (certified gap {g:.3g})")
    return g
