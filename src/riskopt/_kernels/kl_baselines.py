r"""One-pass kernels of the KL-DRO baselines of the SCDRO paper (Section 6): FastDRO (the
mini-batch plug-in estimator), Dual SGM, and the primal-dual SPD / PG-SMD2 with an
``n``-dimensional dual variable. Linear models, mini-batches ``B`` (rows of ``batches``).

* ``_batch_kl_weights``: the exact KL-DRO weights of a loss vector (the 1-D dual of
  :func:`riskopt.objectives.kl_dro.kl_dro_weights`, ported: Newton on ``a = 1/lambda``
  safeguarded by bisection, log domain);
* ``_pass_fastdro``: ``q = weights(l_B)``, ``W <- P_R(W - eta (sum_B q_i grad l_i + reg W))``;
* ``_pass_dual_sgm``: SGD on ``(W, lam, eta)`` for the dual
  ``lam E exp((l - eta)/lam - 1) + eta + (lam - lam0) rho`` (the f-divergence dual of the
  KL ball, Levy et al. 2020), exponents capped at ``50`` (and the caps counted);
* ``_pass_primal_dual``: SPD / PG-SMD2: ``p`` in the simplex, ``W`` by the importance-weighted
  gradient ``n p_i grad l_i`` of the sampled ``i`` (uniform), ``p`` by a mirror-ascent step
  ``log p_i += dual_lr n l_i / b`` on the sampled coordinates (and ``log p *= 1 - dual_lr lam0``
  for the ``-lam0 KL(p)`` term), then the KL-Bregman projection on
  ``{KL(p || 1/n) <= rho}`` (``p ~ p_tilde^(1/(1+g)) u^(g/(1+g))``, ``g >= 0`` by bisection):
  O(n) per step, the cost Fig. 5 of the paper measures. PG-SMD2 adds the proximal term
  ``(W - W_center) / gamma`` (the center moves to ``W`` at every pass).
"""
import math

import numpy as np
from numba import njit

from .losses import _add_outer, _loss_deriv, _predict_row
from .scdro import _project


@njit(cache=True)
def _kl_root_stats(d, a, logn, q):
    """For ``d <= 0``: writes ``q = softmax(a d)``; returns ``(KL(q||1/n), Var_q(d), lme)``."""
    n = d.shape[0]
    s = 0.0
    for i in range(n):
        q[i] = math.exp(a * d[i])
        s += q[i]
    mu = 0.0
    for i in range(n):
        q[i] /= s
        mu += q[i] * d[i]
    var = 0.0
    for i in range(n):
        var += q[i] * (d[i] - mu) ** 2
    lme = math.log(s) - logn
    return a * mu - lme, var, lme


@njit(cache=True)
def _kl_root(d, rho, hi, logn, q):
    """The root ``a`` in ``(0, hi)`` of ``KL(softmax(a d)) = rho`` (``d <= 0``; Newton on the
    increasing ``KL(a)``, derivative ``a Var``, safeguarded by bisection); writes
    ``q = softmax(a d)``; returns ``(a, log mean exp(a d))``."""
    n = d.shape[0]
    lo = 0.0
    v = 0.0
    for i in range(n):
        v += d[i] * d[i]
    v = v / n - (d.sum() / n) ** 2
    a = math.sqrt(2.0 * rho / v) if v > 0 else 1.0
    if not a < hi:
        a = 0.5 * hi
    lme = 0.0
    for _ in range(200):
        kl, var, lme = _kl_root_stats(d, a, logn, q)
        err = kl - rho
        if abs(err) <= 1e-13 * max(1.0, rho):
            break
        if err > 0:
            hi = a
        else:
            lo = a
        if hi < np.inf and hi - lo <= 4e-16 * hi:
            break
        step = a - err / (a * var) if var > 0 else np.nan
        if lo < step < hi:
            a = step
        elif hi == np.inf:
            a = 2.0 * a
        else:
            a = 0.5 * (lo + hi)
    return a, lme


@njit(cache=True)
def _batch_kl_weights(losses, rho, lam0, q):
    """Writes the KL-DRO weights of ``losses`` into ``q``; returns ``(value, lam)``
    (``rho <= 0``: the penalised problem with ``lam = lam0``)."""
    n = losses.shape[0]
    logn = math.log(n)
    c = losses.max()
    d = losses - c
    if rho <= 0.0:
        kl, var, lme = _kl_root_stats(d, 1.0 / lam0, logn, q)
        return c + lam0 * lme, lam0
    k = 0
    for i in range(n):
        if d[i] == 0.0:
            k += 1
    if lam0 > 0.0:
        kl, var, lme = _kl_root_stats(d, 1.0 / lam0, logn, q)
        if kl <= rho:
            return c + lam0 * lme, lam0
        hi = 1.0 / lam0
    else:
        if rho >= math.log(n / k):
            for i in range(n):
                q[i] = 1.0 / k if d[i] == 0.0 else 0.0
            return c, 0.0
        hi = np.inf
    a, lme = _kl_root(d, rho, hi, logn, q)
    lam = 1.0 / a
    return c + lam * lme + (lam - lam0) * rho, lam


@njit(cache=True)
def _pass_fastdro(code, X, y, reg, rho, lam0, R, lr, batches, W):
    nb, b = batches.shape
    p, K = W.shape
    z = np.empty(K)
    D = np.empty((b, K))
    L = np.empty(b)
    q = np.empty(b)
    G = np.empty((p, K))
    for t in range(nb):
        idx = batches[t]
        for j in range(b):
            _predict_row(X, idx[j], W, z)
            L[j] = _loss_deriv(code, y[idx[j]], z, D[j])
        _batch_kl_weights(L, rho, lam0, q)
        G[:, :] = 0.0
        for j in range(b):
            _add_outer(X, idx[j], q[j], D[j], G)
        for j in range(p):
            for k in range(K):
                W[j, k] -= lr * (G[j, k] + reg[j] * W[j, k])
        _project(W, R)


@njit(cache=True)
def _pass_dual_sgm(code, X, y, reg, rho, lo, hi, R, lr, batches, W, state):
    """``state = [lam, eta]`` in place; a third entry, where given, counts the exponents
    capped at 50 (the solver's divergence test)."""
    nb, b = batches.shape
    p, K = W.shape
    z = np.empty(K)
    dz = np.empty(K)
    G = np.empty((p, K))
    lam, eta = state[0], state[1]
    capped = 0
    for t in range(nb):
        idx = batches[t]
        G[:, :] = 0.0
        g_eta = 1.0
        g_lam = rho
        for j in range(b):
            i = idx[j]
            _predict_row(X, i, W, z)
            li = _loss_deriv(code, y[i], z, dz)
            e = (li - eta) / lam - 1.0
            if e > 50.0:
                e = 50.0
                capped += 1
            w = math.exp(e) / b
            _add_outer(X, i, w, dz, G)
            g_eta -= w
            g_lam += w * (1.0 - (li - eta) / lam)
        for j in range(p):
            for k in range(K):
                W[j, k] -= lr * (G[j, k] + reg[j] * W[j, k])
        _project(W, R)
        eta -= lr * g_eta
        if hi > lo:
            lam -= lr * g_lam
            lam = min(max(lam, lo), hi)
    state[0] = lam
    state[1] = eta
    if state.shape[0] > 2:
        state[2] += capped


@njit(cache=True)
def _kl_ball_project(logp, rho, out):
    """KL-Bregman projection of ``p = softmax(logp)`` on ``{KL(p||1/n) <= rho}``: writes
    ``log`` of the projection into ``out`` (``log p / (1+g) + const``, ``g >= 0``)."""
    n = logp.shape[0]
    logn = math.log(n)
    m = logp.max()
    d = logp - m
    q = np.empty(n)
    kl, _, _ = _kl_root_stats(d, 1.0, logn, q)
    if kl <= rho:
        for i in range(n):
            out[i] = math.log(q[i]) if q[i] > 0 else -np.inf
        return
    a, lme = _kl_root(d, rho, 1.0, logn, q)  # a = 1/(1+g) in (0, 1): KL increasing in a
    for i in range(n):
        out[i] = a * d[i] - (lme + logn)


@njit(cache=True)
def _pass_primal_dual(code, X, y, reg, rho, lam0, R, lr, dual_lr, gamma, batches, W, logp,
                     Wc):
    """SPD (``gamma = 0``) / PG-SMD2 (``gamma > 0``: proximal term toward ``Wc``); the
    ``-lam0 KL(p)`` term of the dual enters the mirror step as ``log p *= 1 - dual_lr lam0``."""
    nb, b = batches.shape
    n = X.shape[0]
    p, K = W.shape
    z = np.empty(K)
    dz = np.empty(K)
    G = np.empty((p, K))
    tmp = np.empty(n)
    L = np.empty(b)
    for t in range(nb):
        idx = batches[t]
        G[:, :] = 0.0
        for j in range(b):  # the primal gradient at the current (W, p)
            i = idx[j]
            _predict_row(X, i, W, z)
            L[j] = _loss_deriv(code, y[i], z, dz)
            _add_outer(X, i, n * math.exp(logp[i]) / b, dz, G)
        for j in range(b):  # then the dual step
            logp[idx[j]] += dual_lr * n * L[j] / b
        for j in range(p):
            for k in range(K):
                prox = (W[j, k] - Wc[j, k]) / gamma if gamma > 0 else 0.0
                W[j, k] -= lr * (G[j, k] + reg[j] * W[j, k] + prox)
        _project(W, R)
        if lam0 > 0.0:
            for i in range(n):
                logp[i] *= 1.0 - dual_lr * lam0
        _kl_ball_project(logp, rho, tmp)
        logp[:] = tmp
