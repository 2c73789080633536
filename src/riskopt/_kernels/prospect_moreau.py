"""Prospect-Moreau (Mehta et al., ICLR 2024, Appendix E): its one-pass kernel, the proximal
oracles of a linear model, and the sorted-table helpers it shares with ``prospect``.

``_epoch_prospect_moreau``  (Appendix E)
Full gradient table ``G`` of shape ``(n, p, K)`` (Moreau gradients of the *regularised*
losses, which are not rank-one in ``X[j]`` once the regulariser is inside the prox).
Per step: ``j = jdx[t, 0]`` uniform; ``i`` drawn from the current ``q`` by inverse CDF
with ``u = jdx[t, 1] * 2**-53``; ``V_i = W + lr (G[i] - gbar)``, ``V_j = W + lr (G[j] -
gbar)``; ``losses[j] <- l_j(W)``; ``W <- prox_{lr r_i}(V_i)``; ``G[j] <- grad
M_lr[r_j](V_j)``; re-solve ``q``; ``gbar = sum_j q_j G[j]`` (sparse update over the
entries of ``q`` that changed).

The re-solve stays the O(n) PAV (allocation-free): a step is Theta(n) whatever the oracle,
because ``i`` is drawn by inverse CDF over ``q`` in sample order (the twin's rule; an
O(log n) draw from the tree would change the index stream) and ``gbar`` needs every
``q_m`` that moved, i.e. every rank of every PAV block whose value moved (one block holds
most ranks for CVaR with a chi-square cost, so that is O(n p K) per step).
"""
import numpy as np
from numba import njit

from .losses import ABSOLUTE, LOGISTIC, SQUARED, _loss_deriv, _predict_row
from .oracles import _bubble, _weights_sorted_ws

_TWO_M53 = 2.0 ** -53


@njit(cache=True)
def _sorted_tables(losses, q, order, ls, qs):
    """ls[r] = losses[order[r]], qs[r] = q[order[r]]."""
    for r in range(order.shape[0]):
        ls[r] = losses[order[r]]
        qs[r] = q[order[r]]


@njit(cache=True)
def _resort(order, rank, losses, ls, i):
    """Bubble ``i`` to its rank and refresh the sorted copy ``ls`` on the moved range."""
    r0 = rank[i]
    _bubble(order, rank, losses, i)
    r1 = rank[i]
    lo = r0 if r0 < r1 else r1
    hi = r1 if r0 < r1 else r0
    for r in range(lo, hi + 1):
        ls[r] = losses[order[r]]
    return lo


@njit(cache=True)
def _psi(code, yi, a, b, s, dz):
    """``0.5 |s - a|^2 + b * loss(s)``; writes dloss/dz at ``s`` to ``dz``."""
    v = b * _loss_deriv(code, yi, s, dz)
    for k in range(s.shape[0]):
        d = s[k] - a[k]
        v += 0.5 * d * d
    return v


@njit(cache=True)
def _prox_newton(code, yi, a, b, s, dz, p, g, h, st):
    """Solve ``s + b * dloss(s) = a`` for logistic (K = 1) / multinomial losses.

    Newton on the strongly convex ``Psi(s) = 0.5 |s - a|^2 + b * loss(s)``, whose Hessian
    ``I + b (diag(p) - p p^T)`` (``p`` the sigmoid / softmax probabilities) is inverted by
    Sherman-Morrison. Armijo backtracking on ``Psi`` while the Newton decrement
    ``lam2 = g.H^-1 g`` is large; full steps once ``lam2 < 1e-8`` (quadratic regime, where
    ``Psi`` differences would drown in round-off), until the step is at round-off level.
    Leaves the solution in ``s`` and ``dloss/dz`` at it in ``dz``.
    """
    K = s.shape[0]
    for k in range(K):
        s[k] = a[k]
    cls = int(yi)
    psi = _psi(code, yi, a, b, s, dz)
    for _ in range(200):
        for k in range(K):
            g[k] = s[k] - a[k] + b * dz[k]
            p[k] = dz[k]
        if code == LOGISTIC:
            p[0] += yi
        else:
            p[cls] += 1.0
        # Newton direction h = H^{-1} g with H = A - b p p^T, A = I + b diag(p)
        pag = 0.0
        pap = 0.0
        for k in range(K):
            ak = 1.0 + b * p[k]
            pag += p[k] * g[k] / ak
            pap += p[k] * p[k] / ak
        coef = b * pag / (1.0 - b * pap)
        lam2 = 0.0
        hmax = 0.0
        smax = 1.0
        for k in range(K):
            h[k] = (g[k] + coef * p[k]) / (1.0 + b * p[k])
            lam2 += g[k] * h[k]
            if abs(h[k]) > hmax:
                hmax = abs(h[k])
            if abs(s[k]) > smax:
                smax = abs(s[k])
        if hmax <= 1e-16 * smax:
            break
        step = 1.0
        if lam2 >= 1e-8:
            for _ls in range(60):
                for k in range(K):
                    st[k] = s[k] - step * h[k]
                psi2 = _psi(code, yi, a, b, st, dz)
                if psi2 <= psi - 1e-4 * step * lam2:
                    break
                step *= 0.5
        for k in range(K):
            s[k] -= step * h[k]
        psi = _psi(code, yi, a, b, s, dz)
        if lam2 < 1e-8 and hmax <= 1e-15 * smax:
            break


@njit(cache=True)
def _prox_linear(code, X, y, i, reg, lr, V, Wout, Gout, a, s, dz, p, g, h, st):
    """Prox and Moreau gradient of ``r_i(W) = l(X[i] @ W; y_i) + 0.5 sum_j reg_j |W_j|^2``.

    With ``Dg_j = 1 / (1 + lr reg_j)`` the first-order condition gives
    ``prox(V) = Dg (V - lr outer(x, delta))`` where ``delta = dloss/dz`` at ``s = x @ prox(V)``
    and ``s`` solves ``s + b delta(s) = a`` with ``a = sum_j x_j Dg_j V_j``,
    ``b = lr sum_j x_j^2 Dg_j``. The Moreau gradient is ``(V - prox(V)) / lr =
    reg/(1 + lr reg) V + Dg outer(x, delta)``. Writes ``Wout`` (if given, i.e. ``Wout.shape[0]
    > 0``) and ``Gout`` (if ``Gout.shape[0] > 0``).
    """
    P, K = V.shape
    for k in range(K):
        a[k] = 0.0
    b = 0.0
    for j in range(P):
        xj = X[i, j]
        if xj != 0.0:
            dg = 1.0 / (1.0 + lr * reg[j])
            b += xj * xj * dg
            for k in range(K):
                a[k] += xj * dg * V[j, k]
    b *= lr
    yi = y[i]
    if code == SQUARED:
        dz[0] = (a[0] - yi) / (1.0 + b)
    elif code == ABSOLUTE:
        r = a[0] - yi
        if r > b:
            dz[0] = 1.0
        elif r < -b:
            dz[0] = -1.0
        elif b > 0.0:
            dz[0] = r / b
        else:
            dz[0] = 0.0
    else:
        _prox_newton(code, yi, a, b, s, dz, p, g, h, st)
    for j in range(P):
        dg = 1.0 / (1.0 + lr * reg[j])
        xj = X[i, j]
        cj = reg[j] * dg
        for k in range(K):
            if Wout.shape[0] > 0:
                Wout[j, k] = dg * (V[j, k] - lr * xj * dz[k])
            if Gout.shape[0] > 0:
                Gout[j, k] = cj * V[j, k] + dg * xj * dz[k]


@njit(cache=True)
def _epoch_prospect_moreau(code, X, y, reg, sigma, nu, div, lr, jdx, W, losses, q, G, gbar,
                           order, rank):
    """One pass of Prospect-Moreau over ``jdx`` (rows ``(j, u53)``), in place."""
    n, P = X.shape
    K = W.shape[1]
    z = np.empty(K)
    dz = np.empty(K)
    a = np.empty(K)
    s = np.empty(K)
    pp = np.empty(K)
    g = np.empty(K)
    h = np.empty(K)
    st = np.empty(K)
    Vi = np.empty((P, K))
    Vj = np.empty((P, K))
    Gj = np.empty((P, K))
    nothing = np.empty((0, K))
    ls = np.empty(n)
    qs = np.empty(n)
    work = np.empty(2 * n)
    iwork = np.empty(n, dtype=np.int64)
    _sorted_tables(losses, q, order, ls, qs)
    gbar[:, :] = 0.0
    for m in range(n):
        if q[m] != 0.0:
            for jj in range(P):
                for k in range(K):
                    gbar[jj, k] += q[m] * G[m, jj, k]
    for t in range(jdx.shape[0]):
        j = jdx[t, 0]
        # i ~ q (inverse CDF in index order)
        tot = 0.0
        for m in range(n):
            tot += q[m]
        target = (jdx[t, 1] * _TWO_M53) * tot
        i = -1
        cum = 0.0
        last = 0
        for m in range(n):
            if q[m] > 0.0:
                last = m
            cum += q[m]
            if cum > target:
                i = m
                break
        if i < 0:
            i = last
        # points at which the prox oracles are called (old W, old table, old gbar)
        for jj in range(P):
            for k in range(K):
                Vi[jj, k] = W[jj, k] + lr * (G[i, jj, k] - gbar[jj, k])
                Vj[jj, k] = W[jj, k] + lr * (G[j, jj, k] - gbar[jj, k])
        _predict_row(X, j, W, z)
        lj = _loss_deriv(code, y[j], z, dz)
        _prox_linear(code, X, y, i, reg, lr, Vi, W, nothing, a, s, dz, pp, g, h, st)
        _prox_linear(code, X, y, j, reg, lr, Vj, nothing, Gj, a, s, dz, pp, g, h, st)
        # loss table and exact weights
        losses[j] = lj
        _resort(order, rank, losses, ls, j)
        _weights_sorted_ws(ls, sigma, nu, div, qs, work, iwork)
        # gbar = sum_m q_m G[m]: sparse update over the changed weights and the new G[j]
        qj_old = q[j]
        for r in range(n):
            m = order[r]
            if m == j:
                continue
            dq = qs[r] - q[m]
            if dq != 0.0:
                for jj in range(P):
                    for k in range(K):
                        gbar[jj, k] += dq * G[m, jj, k]
                q[m] = qs[r]
        qj = qs[rank[j]]
        for jj in range(P):
            for k in range(K):
                gbar[jj, k] += qj * Gj[jj, k] - qj_old * G[j, jj, k]
                G[j, jj, k] = Gj[jj, k]
        q[j] = qj
