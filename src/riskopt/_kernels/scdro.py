r"""One-pass kernels of SCDRO / RSCDRO (moving averages) and ASCDRO / RASCDRO / RECOVER
(STORM estimators) for KL-constrained DRO of a linear model (SCDRO paper, Algorithms 1-3).

The compositional problem over ``x = (W, lam)``:
``F(x) = lam log g(x) + (lam - lam0) rho + reg/2 |W|^2 (+ mu/2 |x|^2 for the restarts)`` with
``g(x) = mean_i exp(l_i(W) / lam)``, ``grad f_lam(s) = lam / s``,
``d_W g_i = exp(l_i/lam) grad l_i / lam`` and ``d_lam g_i = -exp(l_i/lam) l_i / lam^2``.
Mini-batches ``B`` (rows of ``batches``), size ``b``.

Moving averages (``_pass_ma``; SCDRO, and RSCDRO with the stage schedule): at ``x_t``, with
``a_i = l_i / lam`` for ``i in B``,

* ``log s <- logaddexp(log(1 - beta) + log s, log beta + log mean_B exp(a_i))`` (the first step
  sets ``log s = log mean_B exp(a_i)``): ``s`` tracks ``g`` in the log domain, so no
  exponential of a loss is ever formed (``a_i - log s <= log(b / beta)``);
* with ``w_i = exp(a_i - log s) / b``: ``v <- (1 - beta) v + beta sum_B w_i grad l_i`` and
  ``u <- (1 - beta) u + beta (-sum_B w_i l_i / lam + log s + rho)`` (the first step sets them);
* ``W <- P_R(W - eta (v + reg W + mu W))``, ``lam <- clip(lam - eta (u + mu lam), lo, hi)``
  (``P_R`` the projection on the ball of radius ``R``, none for ``R = 0``; ``lam`` is not
  moved when ``lo = hi``: the penalised problem).

STORM (``_pass_storm``; ASCDRO, RASCDRO, RECOVER): the estimators of ``g``, ``d_W g`` and
``d_lam g`` are kept *scaled* by a common factor ``exp(-m)`` (``m`` a running maximum of the
exponents), which cancels in ``z_W = lam v / s`` and ``z_lam = lam u / s + log s + rho``:
``s <- g_B(x_t) + (1 - beta)(s - g_B(x_{t-1}))`` and the same for ``v``, ``u`` (two gradient
evaluations per step: ``x_t`` and the previous iterate on the same batch), with the safeguard
a restart of the three estimators on the current batch whenever ``s < beta g_B(x_t)`` (``s``
must stay positive for ``log s``; it happens when ``lambda`` moves by orders of magnitude),
and whenever the estimated q-mean of the losses ``-lam^2 u / s`` exceeds the batch's least
loss by more than Lemma 1's bound ``C = (hi - lo) rho`` (:func:`_beyond_bound`).
The scale ``m`` is the largest exponent of the current and previous iterate on the batch.

Schedules (``mode``): 0 constant ``(eta, beta)``; 1 stagewise (Algorithm 3): stage ``k = 0,
1, ...`` of ``stage_len * 2^k`` steps with ``eta_k = eta 2^(-k eta_pow)``, ``beta_k = beta
2^-k``; 2 decreasing (Theorem 2): ``eta_t = eta / (1 + t / t0)^(1/3)``, ``beta_t = beta
(eta_t / eta)^2``. The counters ``t`` (steps), ``k`` (stage), ``pos`` (steps into the stage)
carry over between calls in ``counters``.
"""
import math

import numpy as np
from numba import njit

from .losses import _add_outer, _loss_deriv, _predict_row
from .prefetch import _prefetch


#: A step moves ``lambda`` within ``[LAM_FACTOR lam, lam / LAM_FACTOR]``. ``F``'s curvature
#: in ``lambda`` is ``Var_q(l) / lambda^3``, so the step ``lr`` that suits ``w`` overshoots
#: when ``lambda*`` is small (a large radius): ``lambda`` then oscillates, the moving average
#: of ``g = mean exp(l / lambda)`` falls orders of magnitude behind, and RSCDRO with its
#: default ``lr = 0.1`` ended at ``lambda``'s lower bound on 2 of 8 fresh problems
#: (``n = 5000, d = 10``, radius 0.5). A step bounded in ``log lambda`` (at most ~10 %) keeps
#: the moving averages tracking; near the optimum the steps are far smaller, so the bound
#: does not bind there.
LAM_FACTOR = 0.9


@njit(cache=True)
def _schedule(mode, lr, beta, eta_pow, t0, stage_len, counters):
    """``(eta, beta)`` of the current step; advances ``counters = [t, k, pos]``."""
    t, k, pos = counters[0], counters[1], counters[2]
    if mode == 0:
        eta, bet = lr, beta
    elif mode == 1:
        eta = lr * 2.0 ** (-k * eta_pow)
        bet = beta * 2.0 ** (-k)
    else:
        eta = lr / (1.0 + t / t0) ** (1.0 / 3.0)
        bet = beta * (eta / lr) ** 2
    if bet > 1.0:
        bet = 1.0
    counters[0] = t + 1
    if mode == 1:
        pos += 1
        if pos >= stage_len * 2.0 ** k:
            k += 1
            pos = 0
        counters[1] = k
        counters[2] = pos
    return eta, bet


@njit(cache=True)
def _project(W, R):
    if R > 0.0:
        nrm = math.sqrt(np.sum(W * W))
        if nrm > R:
            W *= R / nrm


@njit(cache=True)
def _step(W, lam, G, zl, reg, mu, eta, lo, hi, R):
    """``W <- P_R(W - eta (G + reg W + mu W))``; returns the new ``lam``."""
    p, K = W.shape
    for j in range(p):
        for k in range(K):
            W[j, k] -= eta * (G[j, k] + (reg[j] + mu) * W[j, k])
    _project(W, R)
    if hi > lo:
        # a step changes lambda by at most the factor LAM_FACTOR (see there)
        lam = min(max(lam - eta * (zl + mu * lam), LAM_FACTOR * lam), lam / LAM_FACTOR)
        if lam < lo:
            lam = lo
        elif lam > hi:
            lam = hi
    return lam


@njit(cache=True)
def _prefetch_rows(X, y, batches, t):
    """Prefetch the rows of ``X`` and ``y`` of batch ``t`` (a cache hint, no value changes):
    at large n every sampled row is a memory miss, and issuing the next batch's misses
    before the current batch's arithmetic overlaps them (``benchmarks/scdro_scaling.py``)."""
    if t >= batches.shape[0]:
        return
    p = X.shape[1]
    for j in range(batches.shape[1]):
        i = batches[t, j]
        for c in range(0, p, 8):
            _prefetch(X, i, c)
        _prefetch(X, i, p - 1)
        _prefetch(y, i, 0)


@njit(cache=True)
def _batch_exponents(code, X, y, W, lam, idx, a, L, D):
    """``L[j] = l_i``, ``D[j] = dl_i/dz``, ``a[j] = l_i / lam`` for ``i = idx[j]``; returns
    ``max_j a[j]``."""
    K = W.shape[1]
    z = np.empty(K)
    dz = np.empty(K)
    amax = -np.inf
    for j in range(idx.shape[0]):
        i = idx[j]
        _predict_row(X, i, W, z)
        L[j] = _loss_deriv(code, y[i], z, dz)
        for k in range(K):
            D[j, k] = dz[k]
        a[j] = L[j] / lam
        if a[j] > amax:
            amax = a[j]
    return amax


@njit(cache=True)
def _pass_ma(code, X, y, reg, rho, lo, hi, R, mu, mode, lr, beta, eta_pow, t0, stage_len,
             batches, W, lamv, logs, V, uv, started, counters, prefetch=True):
    """Moving-average steps over the rows of ``batches`` (module docstring). In place:
    ``W``, ``lamv[0]`` (lam), ``logs[0]`` (log s), ``V``, ``uv[0]``, ``started[0]``,
    ``counters``. ``prefetch``: issue the next batch's row reads one step ahead
    (:func:`_prefetch_rows`)."""
    nb, b = batches.shape
    p, K = W.shape
    a = np.empty(b)
    L = np.empty(b)
    D = np.empty((b, K))
    G = np.empty((p, K))
    dzw = np.empty(K)
    lam = lamv[0]
    for t in range(nb):
        idx = batches[t]
        if prefetch:
            _prefetch_rows(X, y, batches, t + 1)
        eta, bet = _schedule(mode, lr, beta, eta_pow, t0, stage_len, counters)
        amax = _batch_exponents(code, X, y, W, lam, idx, a, L, D)
        acc = 0.0
        for j in range(b):
            acc += math.exp(a[j] - amax)
        log_g = amax + math.log(acc / b)
        if started[0] == 0:
            ls = log_g
        else:
            x1 = math.log1p(-bet) + logs[0] if bet < 1.0 else -np.inf
            x2 = math.log(bet) + log_g
            hi_ = x1 if x1 > x2 else x2
            ls = hi_ + math.log(math.exp(x1 - hi_) + math.exp(x2 - hi_))
        logs[0] = ls
        G[:, :] = 0.0
        gl = 0.0
        for j in range(b):
            wj = math.exp(a[j] - ls) / b
            for k in range(K):
                dzw[k] = D[j, k]
            _add_outer(X, idx[j], wj, dzw, G)
            gl -= wj * L[j] / lam
        gl += ls + rho
        if started[0] == 0:
            V[:, :] = G
            uv[0] = gl
            started[0] = 1
        else:
            for j in range(p):
                for k in range(K):
                    V[j, k] = (1.0 - bet) * V[j, k] + bet * G[j, k]
            uv[0] = (1.0 - bet) * uv[0] + bet * gl
        lam = _step(W, lam, V, uv[0], reg, mu, eta, lo, hi, R)
    lamv[0] = lam


@njit(cache=True)
def _scaled_terms(X, idx, a, L, D, lam, M, G):
    """``G = sum_j e_j grad l_j / lam`` and returns ``(sum_j e_j, -sum_j e_j l_j / lam^2)``
    with ``e_j = exp(a_j - M) / b``."""
    b = idx.shape[0]
    K = G.shape[1]
    dzw = np.empty(K)
    G[:, :] = 0.0
    sg = 0.0
    sl = 0.0
    for j in range(b):
        e = math.exp(a[j] - M) / b
        sg += e
        sl -= e * L[j] / (lam * lam)
        for k in range(K):
            dzw[k] = D[j, k]
        _add_outer(X, idx[j], e / lam, dzw, G)
    return sg, sl


@njit(cache=True)
def _beyond_bound(L, lam, u, s, lo, hi, rho):
    """Whether the STORM estimators' q-weighted mean loss ``-lam^2 u / s`` (``u``, ``s`` the
    estimates of ``d_lam g`` and ``g``) exceeds the batch's smallest loss by more than
    Lemma 1's loss bound ``C = (hi - lo) rho`` (the box ``hi = lambda_0 + C / rho``): the
    estimators then carry a bias that the ``(1 - beta)`` correction keeps for ~``1 / beta``
    steps while ``lambda`` follows it (RASCDRO's defaults on a fresh problem, seed 13 of
    ``benchmarks/kl_defaults.py``: the estimate reached 6.3 with ``C = 2.5`` and
    ``lambda`` ran from 0.33 to the box's top 5.0 in one pass). False without a box."""
    if not (hi > lo and rho > 0.0 and s > 0.0):
        return False
    lmin = L[0]
    for j in range(1, L.shape[0]):
        if L[j] < lmin:
            lmin = L[j]
    return -lam * lam * u / s > lmin + (hi - lo) * rho


@njit(cache=True)
def _pass_storm(code, X, y, reg, rho, lo, hi, R, mu, mode, lr, beta, eta_pow, t0, stage_len,
                batches, W, lamv, Wp, lampv, sv, V, uv, mv, started, counters, prefetch=True):
    """STORM steps over the rows of ``batches`` (module docstring). In place: ``W``, ``lamv``,
    the previous iterate ``Wp``, ``lampv``, the scaled estimators ``sv[0]``, ``V``, ``uv[0]``,
    their log-scale ``mv[0]``, ``started[0]``, ``counters``; ``prefetch`` as ``_pass_ma``."""
    nb, b = batches.shape
    p, K = W.shape
    a = np.empty(b)
    L = np.empty(b)
    D = np.empty((b, K))
    ap = np.empty(b)
    Lp = np.empty(b)
    Dp = np.empty((b, K))
    G = np.empty((p, K))
    Gp = np.empty((p, K))
    Z = np.empty((p, K))
    lam = lamv[0]
    for t in range(nb):
        idx = batches[t]
        if prefetch:
            _prefetch_rows(X, y, batches, t + 1)
        eta, bet = _schedule(mode, lr, beta, eta_pow, t0, stage_len, counters)
        amax = _batch_exponents(code, X, y, W, lam, idx, a, L, D)
        M = amax
        if started[0] == 1:
            apmax = _batch_exponents(code, X, y, Wp, lampv[0], idx, ap, Lp, Dp)
            if apmax > M:
                M = apmax
            scale = math.exp(min(mv[0] - M, 600.0))
            sv[0] *= scale
            uv[0] *= scale
            for j in range(p):
                for k in range(K):
                    V[j, k] *= scale
        mv[0] = M
        sg, sl = _scaled_terms(X, idx, a, L, D, lam, M, G)
        if started[0] == 0:
            sv[0] = sg
            uv[0] = sl
            V[:, :] = G
            started[0] = 1
        else:
            sgp, slp = _scaled_terms(X, idx, ap, Lp, Dp, lampv[0], M, Gp)
            sv[0] = sg + (1.0 - bet) * (sv[0] - sgp)
            uv[0] = sl + (1.0 - bet) * (uv[0] - slp)
            for j in range(p):
                for k in range(K):
                    V[j, k] = G[j, k] + (1.0 - bet) * (V[j, k] - Gp[j, k])
        if not (sg > 0.0 and sv[0] >= bet * sg) or _beyond_bound(L, lam, uv[0], sv[0], lo,
                                                                 hi, rho):
            # the estimate of g is no longer valid (lambda moved by orders of magnitude, or
            # the STORM correction overshot), or the estimated q-mean of the losses left
            # Lemma 1's bound: restart the estimators on this batch
            M = amax
            mv[0] = M
            sg, sl = _scaled_terms(X, idx, a, L, D, lam, M, G)
            sv[0] = sg
            uv[0] = sl
            V[:, :] = G
        for j in range(p):
            for k in range(K):
                Z[j, k] = lam * V[j, k] / sv[0]
        zl = lam * uv[0] / sv[0] + math.log(sv[0]) + M + rho
        Wp[:, :] = W
        lampv[0] = lam
        lam = _step(W, lam, Z, zl, reg, mu, eta, lo, hi, R)
    lamv[0] = lam
