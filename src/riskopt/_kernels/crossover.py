"""The window model of the Newton solver's crossover (numba).

:func:`window_rows` builds the model's pieces from a dense design in one pass over the rows;
:func:`model_qp` minimises ``1/2 |c + C q|^2 - l'q`` over ``lo <= q <= hi``, ``sum q = m``
(``riskopt.objectives._crossover._model_qp`` states the method); the slow twin is
``_model_qp_twin`` in ``tests/test_crossover.py``.
"""
import numpy as np
from numba import njit


#: free weights below which the KKT system is solved by :func:`_solve_small` (LAPACK above)
SMALL_KKT = 32


@njit(cache=True)
def _solve_small(K, rhs):
    """``K^-1 rhs`` for the small dense KKT matrix of :func:`_kkt_step` by Gaussian
    elimination with partial pivoting (LAPACK's ``dgesv`` through ``np.linalg.solve`` cost
    more than the elimination at ``p + 2 <= 20`` unknowns: the first model solve of a default
    fit makes 20-90 of them); NaNs when a pivot is exactly zero (singular, as ``dgesv``'s
    ``info > 0``)."""
    n = K.shape[0]
    A = K.copy()
    b = rhs.copy()
    for j in range(n):
        piv, r = abs(A[j, j]), j
        for i in range(j + 1, n):
            if abs(A[i, j]) > piv:
                piv, r = abs(A[i, j]), i
        if piv == 0.0:
            return np.full(n, np.nan)
        if r != j:
            for k in range(n):
                A[j, k], A[r, k] = A[r, k], A[j, k]
            b[j], b[r] = b[r], b[j]
        for i in range(j + 1, n):
            f = A[i, j] / A[j, j]
            if f != 0.0:
                for k in range(j, n):
                    A[i, k] -= f * A[j, k]
                b[i] -= f * b[j]
    x = np.empty(n)
    for j in range(n - 1, -1, -1):
        s = b[j]
        for k in range(j + 1, n):
            s -= A[j, k] * x[k]
        x[j] = s / A[j, j]
    return x


@njit(cache=True)
def _kkt_step(CF, vF, r_sum, scale):
    """``(d, t, bounded)``: the free weights' step of the equality-constrained problem,
    ``[C_F'C_F 1; 1' 0] [d; t] = [v_F; r_sum]`` (least squares when singular), or a ray of
    ``[C_F; 1']``'s null space along which ``v_F'd > 0`` (``bounded`` False)."""
    k = CF.shape[1]
    p = CF.shape[0]
    K = np.empty((k + 1, k + 1))
    for a in range(k):  # CF'CF (symmetric; loops: a BLAS call costs more at these sizes)
        for b in range(a, k):
            s = 0.0
            for i in range(p):
                s += CF[i, a] * CF[i, b]
            K[a, b] = s
            K[b, a] = s
    K[:k, k] = 1.0
    K[k, :k] = 1.0
    K[k, k] = 0.0
    rhs = np.empty(k + 1)
    rhs[:k] = vF
    rhs[k] = r_sum
    rmax = np.max(np.abs(rhs)) + 1e-300
    if k < SMALL_KKT:
        sol = _solve_small(K, rhs)
    else:
        sol = np.full(k + 1, np.nan)
        try:
            sol = np.linalg.solve(K, rhs)
        except Exception:  # noqa: BLE001 (numba: exactly singular)
            pass
    ok = np.all(np.isfinite(sol))
    if ok:
        ok = np.max(np.abs(K @ sol - rhs)) <= 1e-9 * rmax
    if not ok:  # singular (duplicated samples): least squares
        sol = np.linalg.lstsq(K, rhs, 1e-12)[0]
        ok = np.max(np.abs(K @ sol - rhs)) <= 1e-9 * rmax + 1e-14 * scale
    if ok:
        return sol[:k].copy(), sol[k], True
    A = np.empty((CF.shape[0] + 1, k))
    A[:CF.shape[0]] = CF
    A[CF.shape[0]] = 1.0
    _, sv, Vt = np.linalg.svd(A)  # full_matrices: Vt is (k, k)
    r = 0
    for i in range(sv.shape[0]):
        if sv[i] > 1e-12 * sv[0]:
            r += 1
    Vn = np.ascontiguousarray(Vt[r:])
    d = Vn.T @ (Vn @ vF)
    return d, np.nan, False


@njit(cache=True)
def model_qp(C, c, l_w, q0, lo, hi, m, max_iter):
    """``(u, q, ok, t)``: the primal active-set method of
    ``riskopt.objectives._crossover._model_qp`` from the feasible ``q0``."""
    p, N = C.shape
    q = np.minimum(np.maximum(q0.copy(), lo), hi)
    free = (q > lo) & (q < hi)
    scale = max(1.0, np.max(np.abs(l_w)))
    t = np.nan
    u = -(c + C @ q)
    have_v = False
    v = np.empty(N)
    for _ in range(max_iter):
        F = np.flatnonzero(free)
        k = F.shape[0]
        if k == 0:  # a vertex: t between the bottom's largest and the top's smallest
            if not have_v:
                v = l_w + C.T @ u
                have_v = True
            vlo, vhi = -np.inf, np.inf
            ilo, ihi = -1, -1
            for i in range(N):
                if q[i] <= lo and v[i] > vlo:
                    vlo, ilo = v[i], i
                if q[i] >= hi and v[i] < vhi:
                    vhi, ihi = v[i], i
            if vlo <= vhi + 1e-12 * scale:
                if np.isfinite(vlo) and np.isfinite(vhi):
                    t = 0.5 * (vlo + vhi)
                else:
                    t = min(vlo, vhi)
                return u, q, True, t
            free[ilo] = True
            free[ihi] = True
            continue
        CF = np.ascontiguousarray(C[:, F])
        vF = l_w[F] + CF.T @ u
        d, tk, bounded = _kkt_step(CF, vF, m - q.sum(), scale)
        if bounded:
            t = tk
        else:
            dmax = np.max(np.abs(d))
            if dmax == 0.0:
                return u, q, False, t
            d *= 1e6 * (hi - lo) / dmax  # long: the ratio test cuts it
        qF = q[F]
        alpha, j = np.inf, -1
        for i in range(k):
            if d[i] > 0:
                r = (hi - qF[i]) / d[i]
            elif d[i] < 0:
                r = (lo - qF[i]) / d[i]
            else:
                continue
            if r < alpha:
                alpha, j = r, i
        if alpha < 1.0:
            qn = np.minimum(np.maximum(qF + alpha * d, lo), hi)
            qn[j] = hi if d[j] > 0 else lo
            q[F] = qn
            free[F[j]] = False
            u -= CF @ (qn - qF)
            have_v = False
            continue
        q[F] = np.minimum(np.maximum(qF + d, lo), hi)
        # the free set's optimum: the fixed samples' multipliers (sides of t)
        u = -(c + C @ q)
        v = l_w + C.T @ u
        have_v = True
        tol = 1e-12 * max(scale, abs(t))
        worst, iw = tol, -1
        for i in range(N):
            if free[i]:
                continue
            if q[i] <= lo:
                e = v[i] - t
            elif q[i] >= hi:
                e = t - v[i]
            else:
                e = 0.0
            if e > worst:
                worst, iw = e, i
        if iw < 0:
            return u, q, True, t
        free[iw] = True  # one at a time (releasing several at once cycled)
    u = -(c + C @ q)
    return u, q, False, t


@njit(cache=True)
def window_rows(X, shift, inv_scale, intercept, ell, der, curv, q, hi, hi_edge, lo_edge):
    """The window model's pieces for a box spectrum with ``lo = 0`` (CVaR) on the design rows
    ``z_i = [(X[i] - shift) * inv_scale, 1 (intercept)]`` of a dense ``X``, in one pass over
    the rows: the top set ``T`` (``ell_i > hi_edge``, weight ``hi``) and the window ``V``
    (``lo_edge <= ell_i <= hi_edge``, weight ``min(max(q_i, 0), hi)``); the other samples
    (weight 0) are not read. Returns ``(B, A, widx, tidx, g)``: ``B`` the rows ``sqrt(w_i
    c_i) z_i`` of ``T`` and ``V`` (``B'B`` is the model's Hessian ``sum w_i c_i z_i z_i'``;
    ``c = curv``, or 1 when ``curv`` is empty), ``A`` the window's loss gradients ``der_i
    z_i``, ``widx`` / ``tidx`` the indices of ``V`` and ``T`` (ascending) and ``g = hi sum_T
    der_i z_i`` (the frozen part's gradient)."""
    n, d = X.shape
    p = d + (1 if intercept else 0)
    n_top, n_win = 0, 0
    for i in range(n):
        if ell[i] > hi_edge:
            n_top += 1
        elif ell[i] >= lo_edge:
            n_win += 1
    B = np.empty((n_top + n_win, p))
    A = np.empty((n_win, p))
    widx = np.empty(n_win, dtype=np.int64)
    tidx = np.empty(n_top, dtype=np.int64)
    g = np.zeros(p)
    z = np.empty(p)
    if intercept:
        z[d] = 1.0
    unit = curv.shape[0] == 0
    r, kw, kt = 0, 0, 0
    for i in range(n):
        e = ell[i]
        top = e > hi_edge
        if not top and not e >= lo_edge:
            continue
        for j in range(d):
            z[j] = (X[i, j] - shift[j]) * inv_scale[j]
        w = hi if top else min(max(q[i], 0.0), hi)
        s = np.sqrt(w * (1.0 if unit else curv[i]))
        for j in range(p):
            B[r, j] = s * z[j]
        r += 1
        if top:
            f = hi * der[i]
            for j in range(p):
                g[j] += f * z[j]
            tidx[kt] = i
            kt += 1
        else:
            f = der[i]
            for j in range(p):
                A[kw, j] = f * z[j]
            widx[kw] = i
            kw += 1
    return B, A, widx, tidx, g
