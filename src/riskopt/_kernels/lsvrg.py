"""Kernels of LSVRG (Mehta et al., AISTATS 2023), the epoch-based primal method.

A *checkpoint* at ``Wc`` stores the per-sample loss derivatives ``Dc[i] = dl_i/dz (Wc)``, the
maximising weights ``qc = q^opt(l(Wc))`` (original sample order) and the full risk gradient
without the regulariser ``Gc = sum_i qc_i grad l_i(Wc) = sum_i qc_i outer(x_i, Dc[i])``.
A step on sample ``i`` (drawn uniformly) is

    v = n qc_i (grad l_i(W) - grad l_i(Wc)) + Gc + reg * W,     W <- W - lr v

and for a linear model ``grad l_i(Wc) = outer(x_i, Dc[i])``, so the cached derivatives make a
step cost one oracle call (the papers count an epoch of n steps plus its checkpoint as two
passes). The checkpoint is refreshed *before* a step once ``m`` steps have been taken since the
last one; the count ``since`` carries over between kernel calls.
"""
import numpy as np
from numba import njit

from .losses import _add_outer, _loss_deriv, _losses_derivs, _predict_row
from .oracles import _risk_weights


@njit(cache=True)
def _checkpoint_lsvrg(code, X, y, sigma, nu, div, W, Wc, qc, Dc, Gc):
    """Set the checkpoint at ``W``: ``Wc = W``, ``Dc``, ``qc`` and ``Gc`` as above."""
    n = X.shape[0]
    losses = np.empty(n)
    _losses_derivs(code, X, y, W, losses, Dc)
    _risk_weights(losses, sigma, nu, div, qc)  # (stop 42: no inf * 0 in the chi2 value)
    Wc[:, :] = W
    Gc[:, :] = 0.0
    for i in range(n):
        if qc[i] != 0.0:
            _add_outer(X, i, qc[i], Dc[i], Gc)


@njit(cache=True)
def _epoch_lsvrg(code, X, y, reg, sigma, nu, div, lr, m, indices, W, Wc, qc, Dc, Gc, since):
    """``len(indices)`` LSVRG steps in place; returns the updated step count ``since``."""
    n = X.shape[0]
    p, K = W.shape
    z = np.empty(K)
    dz = np.empty(K)
    diff = np.empty(K)
    for t in range(indices.shape[0]):
        if since >= m:
            _checkpoint_lsvrg(code, X, y, sigma, nu, div, W, Wc, qc, Dc, Gc)
            since = 0
        i = indices[t]
        _predict_row(X, i, W, z)
        _loss_deriv(code, y[i], z, dz)
        c = n * qc[i]
        for k in range(K):
            diff[k] = c * (dz[k] - Dc[i, k])
        for j in range(p):
            xij = X[i, j]
            for k in range(K):
                W[j, k] -= lr * (xij * diff[k] + Gc[j, k] + reg[j] * W[j, k])
        since += 1
    return since
