r"""One-pass kernels of SGM, SPL and SPL+ for CVaR in the Rockafellar-Uryasev form.

Meng & Gower, "A model-based method for minimizing CVaR and beyond": Algorithm 1 (SGM),
Lemma 1 / Algorithm 2 (SPL+; SPL is the same update with one step size).

The problem is ``min_{W, alpha} alpha + B mean_i max(l_i(W) - alpha, 0) + 1/2 sum_j reg_j |W_j|^2``
with ``B = 1 / (1 - beta)`` (``inv_tail``). One step on the sample ``i`` uses

* ``ell = l_i(W_t)`` and the subgradient ``V = outer(X[i], dloss/dz)`` (shape ``(p, K)``);
* a step-size scale ``c_t = 1/sqrt(t+1)`` (``decreasing``) or ``1`` (constant), where ``t`` is the
  global step counter (it persists across passes, so warm starts continue the schedule).

The l2 term is kept *exactly* in the model (it is not truncated by the max and not linearised):
with ``s_j = 1 / (1 + lr_theta reg_j)`` the subproblem (13) + l2 term is again a truncated model
of the form of Lemma 2 of the paper, with centre ``s * W_t``, per-row step ``lr_theta s_j`` and the
linearisation re-centred there. With ``reg = 0`` the update is literally Lemma 1 (17)-(19).
Averages are uniform running means of the iterates ``x_1 .. x_t`` produced by the steps (the
``x_bar`` returned by Algorithms 1-2), continued across calls through ``t``.

Kernels update ``W`` and ``W_avg`` in place and return ``(alpha, alpha_avg, t)``.
"""
import math

import numpy as np
from numba import njit

from .losses import _loss_deriv, _predict_row


@njit(cache=True)
def _sample_subgradient(code, X, y, i, W, z, dz, V):
    """``V = outer(X[i], dl/dz)`` (the subgradient of ``l_i`` at ``W``); returns ``l_i(W)``."""
    p, K = W.shape
    _predict_row(X, i, W, z)
    ell = _loss_deriv(code, y[i], z, dz)
    for j in range(p):
        xij = X[i, j]
        for k in range(K):
            V[j, k] = xij * dz[k]
    return ell


@njit(cache=True)
def _sgm_step(W, alpha, ell, V, reg, inv_tail, lr):
    """One stochastic subgradient step (Algorithm 1, eqs. (8)-(9), plus ``lr reg W``).

    ``u = 1`` if ``ell > alpha`` else ``0`` (the paper's branch ``alpha_t >= l`` takes ``u = 0``).
    Updates ``W`` in place and returns ``alpha_{t+1}``.
    """
    p, K = W.shape
    if alpha >= ell:
        for j in range(p):
            d = lr * reg[j]
            if d != 0.0:
                for k in range(K):
                    W[j, k] -= d * W[j, k]
        return alpha - lr
    c = lr * inv_tail
    for j in range(p):
        d = lr * reg[j]
        for k in range(K):
            W[j, k] -= c * V[j, k] + d * W[j, k]
    return alpha - lr + lr * inv_tail


@njit(cache=True)
def _prox_linear_step(W, alpha, ell, V, reg, inv_tail, lr_theta, lr_alpha):
    r"""Exact minimiser of the SPL+ subproblem (13) with the l2 term kept exactly.

    Solves, for the current ``(W, alpha)`` and a sample with loss ``ell`` and subgradient ``V``,

    .. math::

        \min_{W', a} a + B \max(\ell + \langle V, W' - W\rangle - a, 0)
            + \sum_j \tfrac{reg_j}{2}|W'_j|^2 + \tfrac{1}{2\lambda_\theta}\|W' - W\|^2
            + \tfrac{1}{2\lambda_\alpha}(a - \alpha)^2

    in closed form (Lemma 1 generalised): with ``s_j = 1/(1 + lr_theta reg_j)``,
    ``c = ell + <V, s W - W>``, ``G = lr_theta sum_j s_j |V_j|^2``,
    ``eta = min(B, max(c - alpha + lr_alpha, 0) / (G + lr_alpha))`` and

        W' = s (W - eta lr_theta V),   a = alpha - lr_alpha + lr_alpha eta.

    ``eta`` is Lemma 1's ``min(1/(1-beta), gamma_t)``. Updates ``W`` in place, returns ``(a, eta)``.
    """
    p, K = W.shape
    c = ell
    G = 0.0
    for j in range(p):
        s = 1.0 / (1.0 + lr_theta * reg[j])
        vv = 0.0
        vw = 0.0
        for k in range(K):
            vv += V[j, k] * V[j, k]
            vw += V[j, k] * W[j, k]
        c += (s - 1.0) * vw
        G += s * vv
    G *= lr_theta
    num = c - alpha + lr_alpha
    eta = 0.0
    if num > 0.0:
        eta = num / (G + lr_alpha)
        if eta > inv_tail:
            eta = inv_tail
    step = eta * lr_theta
    for j in range(p):
        s = 1.0 / (1.0 + lr_theta * reg[j])
        for k in range(K):
            W[j, k] = s * (W[j, k] - step * V[j, k])
    return alpha - lr_alpha + lr_alpha * eta, eta


@njit(cache=True)
def _accumulate(W, W_avg, alpha, alpha_avg, t):
    """Running uniform mean after step number ``t`` (1-based): ``avg += (x_t - avg) / t``."""
    p, K = W.shape
    w = 1.0 / t
    for j in range(p):
        for k in range(K):
            W_avg[j, k] += (W[j, k] - W_avg[j, k]) * w
    return alpha_avg + (alpha - alpha_avg) * w


@njit(cache=True)
def _epoch(code, X, y, reg, inv_tail, lr_theta, lr_alpha, decreasing, prox, idx, W, W_avg, alpha,
           alpha_avg, t):
    """SGM (Algorithm 1, ``prox=False``: step ``lr_theta c_t``) or SPL / SPL+ (Lemma 1,
    Algorithm 2, ``prox=True``: steps ``lr_theta c_t``, ``lr_alpha c_t``) over the sample
    sequence ``idx``; ``c_t = 1 / sqrt(t + 1)`` when ``decreasing``, else 1.

    SPL: ``lr_theta = lr_alpha = lr``; SPL+: ``lr_theta = lr / l0``, ``lr_alpha = lr l0``.
    """
    p, K = W.shape
    z = np.empty(K)
    dz = np.empty(K)
    V = np.empty((p, K))
    for s in range(idx.shape[0]):
        ell = _sample_subgradient(code, X, y, idx[s], W, z, dz, V)
        scale = 1.0 / math.sqrt(t + 1.0) if decreasing else 1.0
        if prox:
            alpha, _ = _prox_linear_step(W, alpha, ell, V, reg, inv_tail, lr_theta * scale,
                                         lr_alpha * scale)
        else:
            alpha = _sgm_step(W, alpha, ell, V, reg, inv_tail, lr_theta * scale)
        t += 1
        alpha_avg = _accumulate(W, W_avg, alpha, alpha_avg, t)
    return alpha, alpha_avg, t
