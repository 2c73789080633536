r"""One-pass kernels of the non-smooth coupled compositional methods (SONX / SONEX / SOX,
ALEXR2, OOA) for a linear model ``z = x^T W`` (SONEX/ALEXR2 paper,
``../shared/papers/sonex_alexr2_nonsmooth_fcco.txt``, Algorithms 1-2).

The problem (the ``"group_risk"`` and ``"constrained"`` families):

.. math::

    F(W, s) = h_0(W) + \frac1m\sum_{i=1}^m f(g_i(W) - s) + s\,[\text{group CVaR}]
              + \frac12\sum_j reg_j |W_j|^2,
    \qquad g_i(W) = \frac{1}{|S_i|}\sum_{j \in S_i} \ell(x_j^\top W, y_j) - b_i

with ``f`` the hinge ``par [t]_+`` (``kind = 0``; group CVaR: ``par = 1/r`` and the scalar
``s``; constraints: ``par = rho`` and ``s = 0``) or the squared hinge ``par/2 [t]_+^2``
(``kind = 1``), and ``h_0`` the mean loss over the *direct* rows (the objective ``g_0`` of
constrained learning; none for group DRO). One step reads ``B1`` outer indices (row of
``gids``) and ``B2`` samples of each (row of ``rows``: the ``B2`` samples of the first index,
then of the second, ...) and ``B0`` direct rows (row of ``drows``; ``B0 = 0`` for none).

Outer derivative ``_outer_grad``: for the hinge with Moreau parameter ``lam > 0`` the gradient
of the envelope ``clip(t / lam, 0, par)`` (paper Eq. (2)), for ``lam = 0`` the subgradient
``par 1[t > 0]`` (SONX); for the squared hinge ``par [t]_+``.

Tracking (MSVR, Algorithm 1 step 7): ``u_i <- (1 - gamma) u_i + gamma g_i(W_t; B) +
gamma_p (g_i(W_t; B) - g_i(W_{t-1}; B))`` for the sampled ``i``; ``u_i`` is set to the first
estimate on its first visit (``seen``). ``G = 1/B1 sum_i f'(u_i - s) grad g_i(W_t; B) +
grad h_0 + reg W`` and, with ``s``, ``G_s = 1 - 1/B1 sum_i f'(u_i - s)``.

Update (``adam = 0``): ``V <- (1 - beta) V + beta G``, ``W <- W - lr V`` (``V`` starts at 0);
``adam = 1``: ``V`` is the first moment (``beta_1 = 1 - beta``), ``M2 <- b2 M2 + (1 - b2) G^2``,
``W <- W - lr Vhat / (sqrt(M2hat) + eps)`` with the bias corrections of step ``t``.

ALEXR2 (``_pass_alexr2``): the inner iterate ``Z`` (and ``zs``) takes the same gradient
``G`` at ``Z`` (tracking with ``Z_{k-1}``) and the prox-linear step
``Z <- (Z / eta + W / nu - G) / (1 / eta + 1 / nu)``; after ``K`` inner steps ``G_t = (W -
Z) / nu`` drives the momentum / Adam update of the outer iterate ``W``, and ``Z = Z_prev = W``.

OOA (``_pass_ooa``): stochastic primal-dual on ``min_W max_{p in Omega} sum_g p_g L_g(W)``,
``Omega = {p in simplex, p_g <= cap}``: ``W <- W - lr (m/B1 sum_{g in B} p_g grad L_g + reg
W)``, ``p <- Proj_Omega(p + dual_lr m/B1 sum_{g in B} L_g e_g)`` (Euclidean projection by
bisection on the shift).
"""
import math

import numpy as np
from numba import njit

from .losses import _add_outer, _loss_deriv, _predict_row


@njit(cache=True)
def _outer_grad(kind, t, lam, par):
    if kind == 1:
        return par * t if t > 0.0 else 0.0
    if lam > 0.0:
        v = t / lam
        if v < 0.0:
            return 0.0
        return par if v > par else v
    return par if t > 0.0 else 0.0


@njit(cache=True)
def _inner(code, X, y, W, Wprev, use_prev, rows, start, b2, D, z, dz):
    """Mean loss over ``rows[start:start+b2]`` at ``W`` (and ``Wprev`` when ``use_prev``);
    the loss derivatives at ``W`` go to ``D`` (b2, K)."""
    K = W.shape[1]
    val = 0.0
    valp = 0.0
    for c in range(b2):
        j = rows[start + c]
        _predict_row(X, j, W, z)
        val += _loss_deriv(code, y[j], z, dz)
        for k in range(K):
            D[c, k] = dz[k]
        if use_prev:
            _predict_row(X, j, Wprev, z)
            valp += _loss_deriv(code, y[j], z, dz)
    return val / b2, valp / b2


@njit(cache=True)
def _gradient(code, X, y, reg, offsets, kind, par, lam, gamma, gamma_p, has_s, gids, rows,
              drows, t, W, Wprev, s, u, seen, G):
    """Writes ``G`` (the estimate at ``W``) and returns ``G_s`` (0 without ``s``)."""
    p, K = W.shape
    b1 = gids.shape[1]
    b2 = rows.shape[1] // b1
    b0 = drows.shape[1]
    z = np.empty(K)
    dz = np.empty(K)
    D = np.empty((b2, K))
    for j in range(p):
        for k in range(K):
            G[j, k] = reg[j] * W[j, k]
    use_prev = gamma_p != 0.0
    gsum = 0.0
    for a in range(b1):
        i = gids[t, a]
        val, valp = _inner(code, X, y, W, Wprev, use_prev, rows[t], a * b2, b2, D, z, dz)
        val -= offsets[i]
        valp -= offsets[i]
        if seen[i] == 0:
            u[i] = val
            seen[i] = 1
        else:
            # the previous point's value is taken with the previous s (it cancels in t = u - s)
            u[i] = (1.0 - gamma) * u[i] + gamma * val + gamma_p * (val - valp)
        yv = _outer_grad(kind, u[i] - s, lam, par)
        gsum += yv
        coef = yv / (b1 * b2)
        if coef != 0.0:
            for c in range(b2):
                for k in range(K):
                    dz[k] = D[c, k]
                _add_outer(X, rows[t, a * b2 + c], coef, dz, G)
    for c in range(b0):
        j = drows[t, c]
        _predict_row(X, j, W, z)
        _loss_deriv(code, y[j], z, dz)
        _add_outer(X, j, 1.0 / b0, dz, G)
    if has_s:
        return 1.0 - gsum / b1
    return 0.0


@njit(cache=True)
def _apply(W, G, V, M2, s_arr, gs, vs, m2s, lr, beta, adam, b2m, eps, step, has_s):
    """Momentum or Adam step on ``W`` (and ``s``); ``step`` counts from 1."""
    p, K = W.shape
    if adam:
        c1 = 1.0 - (1.0 - beta) ** step
        c2 = 1.0 - b2m ** step
    for j in range(p):
        for k in range(K):
            V[j, k] = (1.0 - beta) * V[j, k] + beta * G[j, k]
            if adam:
                M2[j, k] = b2m * M2[j, k] + (1.0 - b2m) * G[j, k] * G[j, k]
                W[j, k] -= lr * (V[j, k] / c1) / (math.sqrt(M2[j, k] / c2) + eps)
            else:
                W[j, k] -= lr * V[j, k]
    if has_s:
        vs[0] = (1.0 - beta) * vs[0] + beta * gs
        if adam:
            m2s[0] = b2m * m2s[0] + (1.0 - b2m) * gs * gs
            s_arr[0] -= lr * (vs[0] / c1) / (math.sqrt(m2s[0] / c2) + eps)
        else:
            s_arr[0] -= lr * vs[0]


@njit(cache=True)
def _pass_single(code, X, y, reg, offsets, kind, par, lam, gamma, gamma_p, has_s, lr, beta,
                 adam, b2m, eps, gids, rows, drows, W, Wprev, s_arr, sprev, u, seen, V, M2,
                 vs, m2s, counters):
    """SONX / SONEX / SOX: ``gids.shape[0]`` steps (module docstring)."""
    p, K = W.shape
    G = np.empty((p, K))
    for t in range(gids.shape[0]):
        gs = _gradient(code, X, y, reg, offsets, kind, par, lam, gamma, gamma_p, has_s, gids,
                       rows, drows, t, W, Wprev, s_arr[0], u, seen, G)
        Wprev[:, :] = W
        sprev[0] = s_arr[0]
        counters[0] += 1
        _apply(W, G, V, M2, s_arr, gs, vs, m2s, lr, beta, adam, b2m, eps, counters[0], has_s)


@njit(cache=True)
def _pass_alexr2(code, X, y, reg, offsets, kind, par, lam, gamma, gamma_p, has_s, lr, beta,
                 adam, b2m, eps, inner_lr, nu, n_inner, gids, rows, drows, W, s_arr, Z, Zprev,
                 zs, zsprev, u, seen, V, M2, vs, m2s, counters):
    """ALEXR2: ``gids.shape[0]`` inner steps; ``counters = [outer steps, inner position]``."""
    p, K = W.shape
    G = np.empty((p, K))
    Gt = np.empty((p, K))
    a = 1.0 / inner_lr + 1.0 / nu
    for t in range(gids.shape[0]):
        gs = _gradient(code, X, y, reg, offsets, kind, par, lam, gamma, gamma_p, has_s, gids,
                       rows, drows, t, Z, Zprev, zs[0], u, seen, G)
        Zprev[:, :] = Z
        zsprev[0] = zs[0]
        for j in range(p):
            for k in range(K):
                Z[j, k] = (Z[j, k] / inner_lr + W[j, k] / nu - G[j, k]) / a
        if has_s:
            zs[0] = (zs[0] / inner_lr + s_arr[0] / nu - gs) / a
        counters[1] += 1
        if counters[1] >= n_inner:
            counters[1] = 0
            counters[0] += 1
            for j in range(p):
                for k in range(K):
                    Gt[j, k] = (W[j, k] - Z[j, k]) / nu
            gts = (s_arr[0] - zs[0]) / nu
            _apply(W, Gt, V, M2, s_arr, gts, vs, m2s, lr, beta, adam, b2m, eps, counters[0],
                   has_s)
            Z[:, :] = W
            Zprev[:, :] = W
            zs[0] = s_arr[0]
            zsprev[0] = s_arr[0]


@njit(cache=True)
def _project_capped_simplex(x, cap, out):
    """Euclidean projection of ``x`` on ``{p : sum p = 1, 0 <= p <= cap}`` (``m cap >= 1``)."""
    m = x.shape[0]
    lo = np.min(x) - cap
    hi = np.max(x)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        tot = 0.0
        for g in range(m):
            v = x[g] - mid
            tot += cap if v > cap else (v if v > 0.0 else 0.0)
        if tot > 1.0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * max(1.0, abs(mid)):
            break
    tau = 0.5 * (lo + hi)
    tot = 0.0
    for g in range(m):
        v = x[g] - tau
        out[g] = cap if v > cap else (v if v > 0.0 else 0.0)
        tot += out[g]
    # exact renormalisation of the free coordinates (rounding of the bisection)
    free = 0.0
    for g in range(m):
        if 0.0 < out[g] < cap:
            free += out[g]
    if free > 0.0:
        scale = (1.0 - (tot - free)) / free
        for g in range(m):
            if 0.0 < out[g] < cap:
                out[g] *= scale


@njit(cache=True)
def _pass_ooa(code, X, y, reg, cap, lr, dual_lr, gids, rows, W, q):
    """OOA: ``gids.shape[0]`` primal-dual steps (module docstring); ``q`` the group weights."""
    p, K = W.shape
    m = q.shape[0]
    b1 = gids.shape[1]
    b2 = rows.shape[1] // b1
    z = np.empty(K)
    dz = np.empty(K)
    D = np.empty((b2, K))
    G = np.empty((p, K))
    x = np.empty(m)
    for t in range(gids.shape[0]):
        for j in range(p):
            for k in range(K):
                G[j, k] = reg[j] * W[j, k]
        x[:] = q
        for a in range(b1):
            g = gids[t, a]
            val, _ = _inner(code, X, y, W, W, False, rows[t], a * b2, b2, D, z, dz)
            coef = m * q[g] / (b1 * b2)
            for c in range(b2):
                for k in range(K):
                    dz[k] = D[c, k]
                _add_outer(X, rows[t, a * b2 + c], coef, dz, G)
            x[g] += dual_lr * m * val / b1
        for j in range(p):
            for k in range(K):
                W[j, k] -= lr * G[j, k]
        _project_capped_simplex(x, cap, q)
