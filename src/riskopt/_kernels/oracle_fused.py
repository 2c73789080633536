"""The sorting oracle's PAV fused with its scatter and its value (chi-square and KL in the
linear domain), split from :mod:`riskopt._kernels.oracles`, which re-exports these kernels.

Given the stable sort (``order``, ``ls = losses[order]``), :func:`_chi2_gathered` and
:func:`_kl_gathered` run the pool-adjacent-violators pass over the sorted losses and write
the weights straight to ``q[order]``, with the risk value. The passes after the PAV are laid
out for the vector unit: each rank's block number by a prefix sum over the block starts
(:func:`_block_ids`; no loop per block, whose exit mispredicts on blocks of one or two
ranks), the weights in sorted order by one loop of gathers (vectorised), the scatter to
``q[order]`` alone, and the value's sums with reassociation (vectorised;
:func:`_chi2_sums`); KL takes its exponentials and its logarithms from ``oracle_vmath``.
"""
import math

import numpy as np
from numba import njit

from .oracle_select import _clamp_value
from .oracle_vmath import exp_terms, log_all

#: ``_kl_weights_linear`` declines when ``(max l - min l) / nu`` exceeds this.
KL_LINEAR_RANGE = 600.0
_TINY = 2.2250738585072014e-308


@njit(cache=True)
def _kl_blocks(ls, sigma, nu, e, start, A, S):
    """The KL PAV in the linear domain (see :func:`_kl_weights_linear`): writes the terms
    ``e`` and the blocks (first rank ``start``, ``A = sum e``, ``S = sum sigma``); returns
    their number, or -1 when the table is too wide or a product leaves the normal range."""
    n = ls.shape[0]
    top = ls[n - 1]
    if (top - ls[0]) / nu > KL_LINEAR_RANGE:
        return -1
    exp_terms(ls, top, nu, e)        # vectorised (oracle_vmath): 2-3x a loop of math.exp
    k = -1
    for i in range(n):
        k += 1
        start[k] = i
        A[k] = e[i]
        S[k] = sigma[i]
        while k >= 1:
            if S[k - 1] != 0.0:            # a block without spectrum mass is always pooled
                if S[k] == 0.0:
                    break
                lhs = A[k - 1] * S[k]
                rhs = A[k] * S[k - 1]
                if not (lhs > 1e-290 and rhs > 1e-290):
                    return -1              # too close to underflow: the log form decides
                if lhs < rhs:
                    break
            A[k - 1] += A[k]
            S[k - 1] += S[k]
            k -= 1
    return k + 1


@njit(cache=True)
def _kl_weights_linear(ls, sigma, nu, qs, work, iwork):
    """The KL PAV of ``oracles._weights_sorted_ws`` in the linear domain, for a table no wider
    than ``KL_LINEAR_RANGE nu``: ``e_r = exp((l_(r) - max l) / nu)`` (one exponential per
    loss, in ``qs``; none underflows), a block keeps ``A = sum e`` and ``S = sum sigma``, two
    blocks pool iff ``A_{k-1} / S_{k-1} >= A_k / S_k`` (cross-multiplied; a block without
    spectrum mass always pools), and ``q_r = S_b e_r / A_b``: the same blocks as the log
    form in exact arithmetic, no ``logaddexp`` per pool. Returns False (nothing written
    that matters) when the table is too wide or a product leaves the normal range."""
    n = ls.shape[0]
    if work.shape[0] < 2 * n or iwork.shape[0] < n:
        return False
    start = iwork
    A = work[:n]
    S = work[n:2 * n]
    nb = _kl_blocks(ls, sigma, nu, qs, start, A, S)
    if nb < 0:
        return False
    for b in range(nb):
        end = start[b + 1] if b < nb - 1 else n
        f = S[b] / A[b]
        for r in range(start[b], end):
            qs[r] = f * qs[r]
    return True


@njit(cache=True)
def _chi2_gathered(order, ls, sigma, nu, q, work, iwork):
    """The chi-square branch of ``oracles._weights_sorted_ws`` (the same blocks and weights,
    bit for bit, with each block's reference loss kept in ``ref`` instead of re-read
    through ``start``), its weights scattered to ``q[order]``, and the value of
    ``oracles._risk_sorted`` (the same sums in the same order) in the fill pass. ``work`` (float)
    holds at least ``3 n``, ``iwork`` (int64) ``n``. (The pooling step is written out
    here, in ``_weights_sorted_ws`` and in ``oracle_ties._chi2_groups``: a shared ``njit``
    helper, even ``inline="always"``, made this loop 1.5x slower at n = 1e6. The stack's
    top block kept in registers and the blocks' means in a loop of their own were 4-8 %
    slower at n = 8192, same process; in the KL PAV the former made no difference.)"""
    n = ls.shape[0]
    start = iwork
    a = work[:n]
    t = work[n:2 * n]
    ref = work[2 * n:3 * n]
    tnn = 2.0 * n * nu
    k = -1
    for i in range(n):
        k += 1
        start[k] = i
        ref[k] = ls[i]
        a[k] = 0.0
        t[k] = sigma[i]
        while k >= 1:
            c1 = start[k] - start[k - 1]
            c2 = i + 1 - start[k]
            # pool iff mean(l - tnn sigma) of block k-1 >= that of block k (times c1 c2)
            lhs = (ref[k - 1] - ref[k]) * (c1 * c2) + (a[k - 1] * c2 - a[k] * c1)
            if lhs < tnn * (t[k - 1] * c2 - t[k] * c1):
                break
            a[k - 1] += a[k] + c2 * (ref[k] - ref[k - 1])
            t[k - 1] += t[k]
            k -= 1
    top = ls[n - 1]
    s = 0.0
    m = 0.0
    pen = 0.0
    for b in range(k + 1):
        end = start[b + 1] if b < k else n
        cnt = end - start[b]
        mean_a = a[b] / cnt
        mean_s = t[b] / cnt
        rf = ref[b]
        for r in range(start[b], end):
            x = ls[r]
            v = mean_s + ((x - rf) - mean_a) / tnn
            v = v if v > 0.0 else 0.0
            q[order[r]] = v
            d = x - top
            s += v * d
            m += d
            e = v - 1.0 / n
            pen += e * e
    return _clamp_value(top + s - nu * n * pen, top, m, top - ls[0], n, nu)


@njit(cache=True, error_model="numpy")
def _kl_gathered(order, ls, sigma, nu, q, work, iwork):
    """The PAV of :func:`_kl_weights_linear` (the same blocks and weights, bit for bit),
    its weights ``S_b e_r / A_b`` scattered to ``q[order]``, and the value from the blocks:
    with ``q_r = S_b e_r / A_b``, ``log(n q_r) = log(n S_b / A_b) + (l_r - max l) / nu`` and
    ``sum_b q_r = S_b``, so ``q.l - nu KL(q)`` is ``max l - nu sum_b S_b log(n S_b / A_b)``
    (one logarithm per block instead of one per loss; clamped as ``oracles._risk_sorted``).
    ``work`` (float) holds at least ``3 n``, ``iwork`` (int64) ``n``. Returns NaN when
    the linear PAV declines (nothing scattered then)."""
    n = ls.shape[0]
    start = iwork
    e = work[:n]
    A = work[n:2 * n]
    S = work[2 * n:3 * n]
    nb = _kl_blocks(ls, sigma, nu, e, start, A, S)
    if nb < 0:
        return np.nan
    for b in range(nb):            # the blocks' factors, in one vectorised loop
        A[b] = S[b] / A[b]
    top = ls[n - 1]
    m = 0.0
    for b in range(nb):
        end = start[b + 1] if b < nb - 1 else n
        f = A[b]
        for r in range(start[b], end):
            q[order[r]] = f * e[r]
            m += ls[r] - top
    y = A[:nb]
    for b in range(nb):
        y[b] = n * y[b] if S[b] > 0.0 else 1.0
    if y.min() >= _TINY and y.max() < np.inf:
        log_all(y, y)              # vectorised (oracle_vmath)
    else:
        for b in range(nb):
            y[b] = math.log(y[b])
    pen = 0.0
    for b in range(nb):
        pen += S[b] * y[b]
    return _clamp_value(top - nu * pen, top, m, top - ls[0], n, nu)
