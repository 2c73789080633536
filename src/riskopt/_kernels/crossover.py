"""The window model's active-set QP of the Newton solver's crossover (numba).

:func:`model_qp` minimises ``1/2 |c + C q|^2 - l'q`` over ``lo <= q <= hi``, ``sum q = m``
(``riskopt.objectives._crossover._model_qp`` states the method); the slow twin is
``_model_qp_twin`` in ``tests/test_crossover.py``.
"""
import numpy as np
from numba import njit


@njit(cache=True)
def _kkt_step(CF, vF, r_sum, scale):
    """``(d, t, bounded)``: the free weights' step of the equality-constrained problem,
    ``[C_F'C_F 1; 1' 0] [d; t] = [v_F; r_sum]`` (least squares when singular), or a ray of
    ``[C_F; 1']``'s null space along which ``v_F'd > 0`` (``bounded`` False)."""
    k = CF.shape[1]
    K = np.empty((k + 1, k + 1))
    K[:k, :k] = CF.T @ CF
    K[:k, k] = 1.0
    K[k, :k] = 1.0
    K[k, k] = 0.0
    rhs = np.empty(k + 1)
    rhs[:k] = vF
    rhs[k] = r_sum
    rmax = np.max(np.abs(rhs)) + 1e-300
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
