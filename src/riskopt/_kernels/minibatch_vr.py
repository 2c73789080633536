"""Mini-batch kernels of LSVRG and Prospect (``batch_size > 1``).

The SOREL paper (Wang et al., App. B) runs every baseline of its fairness and shift experiments
"with mini-batching" at batch size 64, without spelling out the mini-batch form of LSVRG and
Prospect. Here both take the form SOREL's own mini-batch inner loop has (its App. D,
Algorithm 3): one step draws a batch ``B`` of ``b`` distinct indices and replaces the single
sample term of the method's direction by its mean over ``B``; everything else is the
single-sample method. Both directions stay unbiased for the same quantity as with ``b = 1``.

``_epoch_lsvrg_batch``  (checkpoint as in ``lsvrg``; ``m`` counts *steps* between checkpoints)
    v = (1/b) sum_{i in B} n qc_i (grad l_i(W) - grad l_i(Wc)) + Gc + reg * W,  W <- W - lr v

``_epoch_prospect_batch``  (the tables of ``prospect``; every gradient at the step's iterate)
    v = (1/b) sum_{i in B} (n q_i grad l_i(W) - n rho_i g_i) + gbar,
    W <- (W - lr v) / (1 + lr reg);
    then for every ``i`` in ``B``: gbar += q_i grad l_i(W) - rho_i g_i, g_i <- grad l_i(W),
    rho_i <- q_i, l_i <- l_i(W) (all ``q_i`` from before the step), and once per step the
    loss table is re-sorted and ``q`` re-solved exactly.

The re-sort takes the ``b`` changed entries out of the sorted table, sorts them and merges
them back in one sweep (O(n + b^2) whatever the ranks they move by). With a shift cost the
weights are the full oracle on the sorted table (O(n)); without one (``nu = 0``) only the next
batch's weights are read off it (sigma at the rank, averaged over ties: O(b log n)) and the
full ``q`` is solved at the end of the pass. A pass has ``n // b`` steps: O(n^2 / b).
"""
import numpy as np
from numba import njit

from .losses import _add_outer, _loss_deriv, _predict_row
from .lsvrg import _checkpoint_lsvrg
from .oracles import _risk_weights_gathered


@njit(cache=True)
def _vr_batch_sum(code, X, y, W, batch, weight, D, scale, G, z, dz):
    """``G = sum_{i in batch} scale weight_i (dl_i/dz(W) - D[i]) x_i^T``: the variance-reduced
    mini-batch term of SOREL's inner loop (its App. D, weights lambda) and of mini-batch LSVRG
    (the checkpoint's weights); ``z``, ``dz`` (K) scratch, zero entries of ``x_i`` skipped."""
    p, K = G.shape
    for j in range(p):
        for kk in range(K):
            G[j, kk] = 0.0
    for s in range(batch.shape[0]):
        i = batch[s]
        _predict_row(X, i, W, z)
        _loss_deriv(code, y[i], z, dz)
        c = scale * weight[i]
        for kk in range(K):
            dz[kk] = c * (dz[kk] - D[i, kk])
        for j in range(p):
            xij = X[i, j]
            if xij != 0.0:
                for kk in range(K):
                    G[j, kk] += xij * dz[kk]


@njit(cache=True)
def _epoch_lsvrg_batch(code, X, y, reg, sigma, nu, div, lr, m, batches, W, Wc, qc, Dc, Gc,
                       since):
    """``batches.shape[0]`` mini-batch LSVRG steps in place; returns the updated ``since``."""
    n = X.shape[0]
    p, K = W.shape
    b = batches.shape[1]
    z = np.empty(K)
    dz = np.empty(K)
    V = np.empty((p, K))
    scale = n / b
    for t in range(batches.shape[0]):
        if since >= m:
            _checkpoint_lsvrg(code, X, y, sigma, nu, div, W, Wc, qc, Dc, Gc)
            since = 0
        _vr_batch_sum(code, X, y, W, batches[t], qc, Dc, scale, V, z, dz)
        for j in range(p):
            for k in range(K):
                W[j, k] -= lr * (V[j, k] + Gc[j, k] + reg[j] * W[j, k])
        since += 1
    return since


@njit(cache=True)
def _merge_changed(order, ls, losses, changed, mark, order2, ls2, new):
    """The sorted table (``order``, ``ls = losses[order]``) after the entries ``changed``
    (distinct) took their new values ``losses[changed]``, written to ``order2`` / ``ls2`` in
    one sweep: the other entries keep their relative order, the changed ones are sorted (by
    loss, then index) and merged in after the unchanged ones they tie with. ``mark`` (bool,
    n, all False on entry and exit) and ``new`` (int64, b) are scratch."""
    n = order.shape[0]
    b = changed.shape[0]
    for s in range(b):
        mark[changed[s]] = True
        new[s] = changed[s]
    for s in range(1, b):   # insertion sort by (loss, index): b is small (64)
        v = new[s]
        a = s - 1
        while a >= 0 and (losses[new[a]] > losses[v]
                          or (losses[new[a]] == losses[v] and new[a] > v)):
            new[a + 1] = new[a]
            a -= 1
        new[a + 1] = v
    w = 0
    ib = 0
    nv = losses[new[0]]
    for r in range(n):
        o = order[r]
        if mark[o]:
            continue
        x = ls[r]
        while nv < x:     # (False once the changed entries are all in: nv = inf)
            order2[w] = new[ib]
            ls2[w] = nv
            w += 1
            ib += 1
            nv = losses[new[ib]] if ib < b else np.inf
        order2[w] = o
        ls2[w] = x
        w += 1
    while ib < b:
        order2[w] = new[ib]
        ls2[w] = losses[new[ib]]
        w += 1
        ib += 1
    for s in range(b):
        mark[changed[s]] = False


@njit(cache=True)
def _nu0_weight_of(ls, sigma, S, v):
    """``nu = 0`` weight of a loss ``v`` of the sorted table ``ls``: ``sigma`` at its rank,
    averaged over its block of ties (``S`` the prefix sums of ``sigma``, ``S[0] = 0``)."""
    lo = np.searchsorted(ls, v, side="left")
    hi = np.searchsorted(ls, v, side="right")
    if hi == lo + 1:
        return sigma[lo]
    return (S[hi] - S[lo]) / (hi - lo)


@njit(cache=True)
def _epoch_prospect_batch(code, X, y, reg, sigma, nu, div, lr, batches, W, losses, derivs, q,
                          rho, gbar, order, rank):
    """``batches.shape[0]`` mini-batch Prospect steps in place (module docstring).

    ``gbar`` is recomputed from its definition at the start (as in ``_epoch_prospect``), and
    ``order`` must sort ``losses`` on entry; on exit ``order`` sorts the table, ``rank`` is its
    inverse and ``q`` the exact weights of the table. With ``nu = 0`` the weights during the
    pass are read off the sorted table only at the next batch's indices (O(b log n))."""
    n = X.shape[0]
    p, K = W.shape
    nb, b = batches.shape
    gbar[:, :] = 0.0
    for j in range(n):
        if rho[j] != 0.0:
            _add_outer(X, j, rho[j], derivs[j], gbar)
    z = np.empty(K)
    diff = np.empty(K)
    lnew = np.empty(b)
    Dnew = np.empty((b, K))
    V = np.empty((p, K))
    mark = np.zeros(n, dtype=np.bool_)
    new = np.empty(b, dtype=np.int64)
    ls = np.empty(n)
    for r in range(n):
        ls[r] = losses[order[r]]
    order2 = np.empty(n, dtype=np.int64)
    ls2 = np.empty(n)
    qs = np.empty(n)
    work = np.empty(3 * n)
    iwork = np.empty(2 * n, dtype=np.int64)   # (2 n: the fused PAV's block marks)
    S = np.zeros(n + 1)
    for r in range(n):
        S[r + 1] = S[r] + sigma[r]
    scale = n / b
    for t in range(nb):
        V[:, :] = gbar
        for s in range(b):
            i = batches[t, s]
            _predict_row(X, i, W, z)
            lnew[s] = _loss_deriv(code, y[i], z, Dnew[s])
            for k in range(K):
                diff[k] = scale * (q[i] * Dnew[s, k] - rho[i] * derivs[i, k])
            _add_outer(X, i, 1.0, diff, V)
        for j in range(p):
            for k in range(K):
                W[j, k] = (W[j, k] - lr * V[j, k]) / (1.0 + lr * reg[j])
        for s in range(b):
            i = batches[t, s]
            for k in range(K):
                diff[k] = q[i] * Dnew[s, k] - rho[i] * derivs[i, k]
            _add_outer(X, i, 1.0, diff, gbar)
            derivs[i, :] = Dnew[s]
            rho[i] = q[i]
            losses[i] = lnew[s]
        _merge_changed(order, ls, losses, batches[t], mark, order2, ls2, new)
        order, order2 = order2, order
        ls, ls2 = ls2, ls
        if nu != 0.0:   # (oracle_fused kernels: in this file's numba cache; bump on change, stop 43)
            _risk_weights_gathered(order, ls, sigma, nu, div, q, qs, work, iwork)
        elif t + 1 < nb:
            for s in range(b):
                j = batches[t + 1, s]
                q[j] = _nu0_weight_of(ls, sigma, S, losses[j])
    if nb % 2 == 1:   # the sorted table lives in the scratch buffer: copy it back
        order2[:] = order
        order = order2
    for r in range(n):
        rank[order[r]] = r
    if nu == 0.0:
        _risk_weights_gathered(order, ls, sigma, nu, div, q, qs, work, iwork)
