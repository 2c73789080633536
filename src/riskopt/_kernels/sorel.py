"""SOREL kernels: the exact permutahedron projection and one outer iteration of Algorithm 1.

Wang et al., "SOREL: a stochastic algorithm for spectral risks minimization", Algorithm 1 with
the practical settings of Section 3.2 / Appendix B, and the mini-batch change of Appendix D.
See :mod:`riskopt.solvers.sorel` for the maths and the mapping of the paper's symbols.

Projection onto the permutahedron through the chi-square oracle
---------------------------------------------------------------
For ``nu > 0`` the oracle ``_weights_sorted(ls, sigma, nu, CHI2, q)`` solves

    max_{q in P(sigma)} q.l - nu n ||q - 1/n||^2.

Since ``sum_i q_i = 1`` on ``P(sigma)``, ``n ||q - 1/n||^2 = n ||q||^2 - 1`` and the objective is
``-nu n ||q - l / (2 nu n)||^2`` plus a constant: the maximiser is the Euclidean projection of
``l / (2 nu n)`` onto ``P(sigma)``. With ``nu = 1/(2n)`` the oracle is exactly ``Proj_P(l)``
(its PAV computes ``c = iso(l_sorted - sigma)`` and returns ``q = l_sorted - c``).
"""
import numpy as np
from numba import njit

from .losses import _losses_derivs
from .minibatch_vr import _vr_batch_sum
from .oracles import CHI2, _weights_sorted


@njit(cache=True)
def _project_permutahedron(u, sigma, q):
    """``q = argmin_{q in P(sigma)} ||q - u||^2`` (sort + PAV, O(n log n)); ``sigma`` ascending."""
    n = u.shape[0]
    order = np.argsort(u, kind="mergesort")
    us = np.empty(n)
    for r in range(n):
        us[r] = u[order[r]]
    qs = np.empty(n)
    _weights_sorted(us, sigma, 0.5 / n, CHI2, qs)
    for r in range(n):
        q[order[r]] = qs[r]


@njit(cache=True)
def _epoch_sorel(code, X, y, sigma, reg, W, lam, losses_prev, k, lr, dual_lr, prox_scale,
                 batches, lam_out, losses_out):
    """One outer iteration ``k`` of SOREL (practical form), in place on ``W``.

    Writes ``lam_out`` = lambda_{k+1} and ``losses_out`` = l(w_k). ``batches`` has shape
    ``(m, b)``: ``m`` inner steps, each averaging ``b`` sampled indices (``b = 1``: Algorithm 1).
    """
    n, p = X.shape
    K = W.shape[1]
    m, b = batches.shape
    # losses and loss derivatives at w_k (= reference point w_bar): one pass of oracle calls
    derivs = np.empty((n, K))
    _losses_derivs(code, X, y, W, losses_out, derivs)
    kf = float(k)
    theta = kf / (kf + 1.0)
    eta = dual_lr * (kf + 1.0) / n
    inv_tau = (kf + 1.0) / (prox_scale * n)
    # lambda_{k+1} = Proj_P(lambda_k + eta_k v_k), v_k = l(w_k) + theta_k (l(w_k) - l(w_{k-1}))
    u = np.empty(n)
    for i in range(n):
        u[i] = lam[i] + eta * ((1.0 + theta) * losses_out[i] - theta * losses_prev[i])
    _project_permutahedron(u, sigma, lam_out)
    # g_bar = sum_i lambda_{k+1,i} grad l_i(w_bar)
    gbar = np.zeros((p, K))
    for i in range(n):
        c = lam_out[i]
        if c != 0.0:
            for j in range(p):
                xij = X[i, j] * c
                if xij != 0.0:
                    for kk in range(K):
                        gbar[j, kk] += xij * derivs[i, kk]
    W0 = W.copy()
    G = np.empty((p, K))
    z = np.empty(K)
    dz = np.empty(K)
    scale = n / b
    for t in range(m):
        _vr_batch_sum(code, X, y, W, batches[t], lam_out, derivs, scale, G, z, dz)
        # w <- prox_{lr (g + ||. - w_k||^2 / (2 tau_k))}(w - lr d), in closed form for the l2 g
        for j in range(p):
            denom = 1.0 + lr * (reg[j] + inv_tau)
            for kk in range(K):
                x = W[j, kk] - lr * (G[j, kk] + gbar[j, kk])
                W[j, kk] = (x + lr * inv_tau * W0[j, kk]) / denom
