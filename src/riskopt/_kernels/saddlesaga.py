"""Kernels of SaddleSAGA, the primal-dual SAGA method on the saddle-point form
(Palaniappan & Bach 2016; Mehta et al. 2024, Sec. 4 and Appendix F).

State (all in original sample order): the dual iterate ``q`` (a point of the permutahedron),
the SAGA tables ``L[j]`` (loss of sample j where last visited), ``D[j]`` (its derivative
dl_j/dz, so its gradient is ``outer(x_j, D[j])``), ``rho[j]`` (the dual weight used with it),
and ``G = sum_j rho_j outer(x_j, D[j])``. One step on the uniformly drawn sample ``i``:

1. ``l_i = l_i(W)``, ``d_i = dl_i/dz(W)`` (one oracle call);
2. primal: ``v = n q_i outer(x_i, d_i) - n rho_i outer(x_i, D[i]) + G`` and
   ``W <- (W - lr v) / (1 + lr reg)`` (the prox of the l2 regulariser);
3. dual: ``pi = L`` except ``pi_i = n l_i - (n - 1) L[i]`` (the SAGA estimate of the loss
   vector) and ``q <- prox(q + dlr pi)`` solved exactly by sort + PAV (``_dual_prox``);
4. tables: ``G += q_i^old outer(x_i, d_i) - rho_i outer(x_i, D[i])``, ``L[i] = l_i``,
   ``D[i] = d_i``, ``rho_i = q_i^old`` (the dual weight *before* step 3).

Dual prox, chi-square (Euclidean geometry, Appendix F):
``argmin_{q in P(sigma)} dlr nu n ||q - 1/n||^2 + 1/2 ||q - z||^2`` with ``z = q_t + dlr pi``.
On ``P(sigma)`` (where ``sum q = 1``) this equals
``argmax_q q.z - nu' n ||q - 1/n||^2`` with ``nu' = dlr nu + 1/(2n)``, i.e. the oracle
``_weights_sorted(sort(z), sigma, nu', CHI2)``.

Dual prox, KL (entropic geometry, our choice; the Euclidean prox of the KL penalty has no
closed-form pooling step): ``argmax_q dlr q.pi - dlr nu KL(q||1/n) - (1/n) KL(q||q_t)``.
Multiplying by n, this is ``argmax_q q.z - nu' sum_j q_j log(n q_j)`` with
``z = n dlr pi + log q_t`` and ``nu' = 1 + n dlr nu``: the oracle with ``div = KL``. The factor
``1/n`` makes the Bregman term match ``1/2 ||q - q_t||^2`` to second order at the uniform
distribution, so both geometries use step sizes on the same scale. ``log q_t`` is floored at
``log(1e-300)`` so an underflowed weight stays (numerically) zero instead of producing NaN.
"""
import math

import numpy as np
from numba import njit

from .losses import _loss_deriv, _predict_row
from .oracles import CHI2, KL, _weights_sorted_ws

_LOG_TINY = math.log(1e-300)


@njit(cache=True)
def _sort_by(zs, order):
    """Sort ``zs`` in place, permuting ``order`` alongside (``zs[r]`` belongs to ``order[r]``).

    ``zs`` is gathered through the previous step's ``order``, so it is nearly sorted: insertion
    sort costs O(n + inversions). Past ``8 n`` element moves it falls back to a merge-sort.
    """
    n = zs.shape[0]
    budget = 8 * n
    moves = 0
    for a in range(1, n):
        val = zs[a]
        o = order[a]
        b = a - 1
        while b >= 0 and zs[b] > val:
            zs[b + 1] = zs[b]
            order[b + 1] = order[b]
            b -= 1
            moves += 1
        zs[b + 1] = val
        order[b + 1] = o
        if moves > budget:
            perm = np.argsort(zs, kind="mergesort")
            tmp_z = zs[perm]
            tmp_o = order[perm]
            zs[:] = tmp_z
            order[:] = tmp_o
            return


@njit(cache=True)
def _dual_prox(q, pi, sigma, nu, kl_geom, dlr, order, zs, qs, work, iwork):
    """``q <- prox(q + dlr pi)`` over the permutahedron (in place); see the module docstring.

    ``order`` is the permutation that sorted the previous argument (any permutation works);
    on return it sorts the new argument. ``zs``, ``qs``, ``work``, ``iwork`` are work buffers
    of length n.
    """
    n = q.shape[0]
    if kl_geom:
        c = n * dlr
        for r in range(n):
            j = order[r]
            qj = q[j]
            lq = math.log(qj) if qj > 1e-300 else _LOG_TINY
            zs[r] = c * pi[j] + lq
        nu_eff = 1.0 + c * nu
        dcode = KL
    else:
        for r in range(n):
            j = order[r]
            zs[r] = q[j] + dlr * pi[j]
        nu_eff = dlr * nu + 0.5 / n
        dcode = CHI2
    _sort_by(zs, order)
    _weights_sorted_ws(zs, sigma, nu_eff, dcode, qs, work, iwork)
    for r in range(n):
        q[order[r]] = qs[r]


@njit(cache=True)
def _epoch_saddlesaga(code, X, y, reg, sigma, nu, kl_geom, lr, dlr, indices, W, q, rho, L, D,
                      G, order):
    """``len(indices)`` SaddleSAGA steps, all arrays updated in place."""
    n = X.shape[0]
    p, K = W.shape
    z = np.empty(K)
    dz = np.empty(K)
    zs = np.empty(n)
    qs = np.empty(n)
    work = np.empty(n)
    iwork = np.empty(n, dtype=np.int64)
    for t in range(indices.shape[0]):
        i = indices[t]
        _predict_row(X, i, W, z)
        li = _loss_deriv(code, y[i], z, dz)
        a = n * q[i]
        b = n * rho[i]
        for j in range(p):
            xij = X[i, j]
            den = 1.0 + lr * reg[j]
            for k in range(K):
                v = xij * (a * dz[k] - b * D[i, k]) + G[j, k]
                W[j, k] = (W[j, k] - lr * v) / den
        qi_old = q[i]
        # dual step with pi = L except pi_i = n l_i - (n - 1) L_i (then L_i <- l_i)
        L[i] = n * li - (n - 1) * L[i]
        _dual_prox(q, L, sigma, nu, kl_geom, dlr, order, zs, qs, work, iwork)
        L[i] = li
        ri = rho[i]
        for j in range(p):
            xij = X[i, j]
            if xij != 0.0:
                for k in range(K):
                    G[j, k] += xij * (qi_old * dz[k] - ri * D[i, k])
        for k in range(K):
            D[i, k] = dz[k]
        rho[i] = qi_old
