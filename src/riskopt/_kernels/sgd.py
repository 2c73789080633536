"""One-pass kernels of the biased plug-in mini-batch baselines (SGD, SRDA, momentum, Adam).

A pass is ``nb`` steps; step ``t`` uses the mini-batch ``batches[t]`` (a row of ``b`` sample
indices). On a batch the *plug-in* gradient is the gradient of the batch's own spectral risk:
the ``b`` batch losses are sorted, the exact oracle ``_weights_sorted`` with the spectrum
``sigma_b`` of the same risk for ``b`` samples (passed in from Python) and the same shift
penalty ``(nu, div)`` gives weights ``q`` (sorted order), and

    G = sum_r q_r grad l_{B[(r)]}(W)           (no regulariser)

The regulariser ``reg[:, None] * W`` is added by each method as it needs (SRDA treats it in
closed form). All arrays are updated in place; the kernels allocate only per-pass buffers.
"""
import math

import numpy as np
from numba import njit

from .losses import _add_outer, _loss_deriv, _predict_row
from .oracles import _weights_sorted


@njit(cache=True)
def _batch_grad(code, X, y, W, batch, sigma_b, nu, div, G, z, dz, ls, D, lss, qs):
    """G = plug-in gradient of the batch spectral risk at W (G is overwritten)."""
    b = batch.shape[0]
    K = W.shape[1]
    for j in range(b):
        _predict_row(X, batch[j], W, z)
        ls[j] = _loss_deriv(code, y[batch[j]], z, dz)
        for k in range(K):
            D[j, k] = dz[k]
    order = np.argsort(ls, kind="mergesort")
    for r in range(b):
        lss[r] = ls[order[r]]
    _weights_sorted(lss, sigma_b, nu, div, qs)
    G[:, :] = 0.0
    for r in range(b):
        j = order[r]
        if qs[r] != 0.0:
            _add_outer(X, batch[j], qs[r], D[j], G)


@njit(cache=True)
def _buffers(b, p, K):
    return (np.empty(K), np.empty(K), np.empty(b), np.empty((b, K)), np.empty(b),
            np.empty(b), np.empty((p, K)))


@njit(cache=True)
def _epoch_sgd(code, X, y, reg, sigma_b, nu, div, lr, batches, W):
    """Plain mini-batch SGD: ``W <- W - lr (G + reg * W)``."""
    nb, b = batches.shape
    p, K = W.shape
    z, dz, ls, D, lss, qs, G = _buffers(b, p, K)
    for t in range(nb):
        _batch_grad(code, X, y, W, batches[t], sigma_b, nu, div, G, z, dz, ls, D, lss, qs)
        for j in range(p):
            for k in range(K):
                W[j, k] -= lr * (G[j, k] + reg[j] * W[j, k])


@njit(cache=True)
def _epoch_sgd_momentum(code, X, y, reg, sigma_b, nu, div, lr, momentum, batches, W, V):
    """Heavy-ball SGD (PyTorch convention): ``V <- m V + g``, ``W <- W - lr V``, g = G + reg W."""
    nb, b = batches.shape
    p, K = W.shape
    z, dz, ls, D, lss, qs, G = _buffers(b, p, K)
    for t in range(nb):
        _batch_grad(code, X, y, W, batches[t], sigma_b, nu, div, G, z, dz, ls, D, lss, qs)
        for j in range(p):
            for k in range(K):
                V[j, k] = momentum * V[j, k] + G[j, k] + reg[j] * W[j, k]
                W[j, k] -= lr * V[j, k]


@njit(cache=True)
def _epoch_adam(code, X, y, reg, sigma_b, nu, div, lr, beta1, beta2, eps, batches, W, M, S,
                n_iter):
    """Adam (Kingma & Ba 2015, PyTorch convention) on g = G + reg W; returns the step count."""
    nb, b = batches.shape
    p, K = W.shape
    z, dz, ls, D, lss, qs, G = _buffers(b, p, K)
    for t in range(nb):
        _batch_grad(code, X, y, W, batches[t], sigma_b, nu, div, G, z, dz, ls, D, lss, qs)
        n_iter += 1
        c1 = 1.0 - beta1**n_iter
        c2 = 1.0 - beta2**n_iter
        for j in range(p):
            for k in range(K):
                g = G[j, k] + reg[j] * W[j, k]
                M[j, k] = beta1 * M[j, k] + (1.0 - beta1) * g
                S[j, k] = beta2 * S[j, k] + (1.0 - beta2) * g * g
                W[j, k] -= lr * (M[j, k] / c1) / (math.sqrt(S[j, k] / c2) + eps)
    return n_iter


@njit(cache=True)
def _epoch_srda(code, X, y, reg, sigma_b, nu, div, lr, batches, W, W0, A, n_iter):
    """Stochastic regularised dual averaging (Xiao 2009); returns the step count.

    ``A`` is the running average of the unregularised batch gradients; the iterate is the
    closed-form minimiser of ``<A, w> + reg/2 |w|^2 + beta_t/2 |w - W0|^2`` with
    ``beta_t = (1/lr) / (t + 1)``:  ``W = (beta_t W0 - A) / (reg + beta_t)``.
    """
    nb, b = batches.shape
    p, K = W.shape
    z, dz, ls, D, lss, qs, G = _buffers(b, p, K)
    inv_lr = 1.0 / lr
    for t in range(nb):
        _batch_grad(code, X, y, W, batches[t], sigma_b, nu, div, G, z, dz, ls, D, lss, qs)
        s = float(n_iter)
        beta = inv_lr / (s + 1.0)
        for j in range(p):
            den = reg[j] + beta
            for k in range(K):
                A[j, k] = (s * A[j, k] + G[j, k]) / (s + 1.0)
                W[j, k] = (beta * W0[j, k] - A[j, k]) / den
        n_iter += 1
    return n_iter
