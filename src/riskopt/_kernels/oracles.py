"""Exact oracles for spectral risks with a shift penalty.

Solves ``max_{q in P(sigma)} q.l - nu D(q || 1/n)`` by sorting plus pool-adjacent-violators
(Mehta et al. 2024, "Distributionally robust optimization with bias and variance reduction",
Appendix B-C, Prop. 3 and Subroutines 1-3). All functions take the losses already sorted
(``ls`` non-decreasing) and return quantities in sorted order, so the O(n log n) sort is the
caller's business (a full ``argsort`` or Prospect's incremental bubbling, ``_bubble``).

Divergence codes: 0 = chi-square ``D = n ||q - 1/n||^2``, 1 = KL ``D = sum q_i log(n q_i)``.
``nu == 0`` is the plain spectral risk: ``q`` is ``sigma`` by rank, averaged over ties.
"""
import math

import numpy as np
from numba import njit

CHI2 = 0
KL = 1


@njit(cache=True)
def _logaddexp(a, b):
    if a == -np.inf:
        return b
    if b == -np.inf:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@njit(cache=True)
def _pav_chi2(ls, sigma, nu, c):
    """Isotonic solution ``c`` of problem (13) for the chi-square divergence (Subroutine 1)."""
    n = ls.shape[0]
    vals = np.empty(n)
    cnt = np.empty(n, dtype=np.int64)
    k = -1
    two_n_nu = 2.0 * n * nu
    for i in range(n):
        k += 1
        vals[k] = ls[i] - two_n_nu * sigma[i]
        cnt[k] = 1
        while k >= 1 and vals[k - 1] >= vals[k]:
            tot = cnt[k - 1] + cnt[k]
            vals[k - 1] = (cnt[k - 1] * vals[k - 1] + cnt[k] * vals[k]) / tot
            cnt[k - 1] = tot
            k -= 1
    pos = 0
    for b in range(k + 1):
        for _ in range(cnt[b]):
            c[pos] = vals[b]
            pos += 1


@njit(cache=True)
def _pav_kl(ls, sigma, nu, c):
    """Isotonic solution ``c`` of problem (13) for the KL divergence (Subroutine 2).

    Blocks carry ``log sum exp(l/nu)`` and ``log sum sigma``; a block whose spectrum mass is
    zero has value ``+inf`` and is always pooled with its right neighbour.
    """
    n = ls.shape[0]
    vals = np.empty(n)
    m = np.empty(n)
    t = np.empty(n)
    cnt = np.empty(n, dtype=np.int64)
    k = -1
    logn1 = math.log(n) + 1.0
    for i in range(n):
        k += 1
        m[k] = ls[i] / nu
        t[k] = math.log(sigma[i]) if sigma[i] > 0.0 else -np.inf
        vals[k] = nu * (m[k] - t[k] - logn1)
        cnt[k] = 1
        while k >= 1 and vals[k - 1] >= vals[k]:
            m[k - 1] = _logaddexp(m[k - 1], m[k])
            t[k - 1] = _logaddexp(t[k - 1], t[k])
            vals[k - 1] = nu * (m[k - 1] - t[k - 1] - logn1)
            cnt[k - 1] += cnt[k]
            k -= 1
    pos = 0
    for b in range(k + 1):
        for _ in range(cnt[b]):
            c[pos] = vals[b]
            pos += 1


@njit(cache=True)
def _weights_sorted(ls, sigma, nu, div, q):
    """Maximising weights ``q`` (sorted order) for sorted losses ``ls``."""
    n = ls.shape[0]
    if nu == 0.0:
        # q = sigma by rank; tied losses share the average of their spectrum entries
        i = 0
        while i < n:
            j = i + 1
            s = sigma[i]
            while j < n and ls[j] == ls[i]:
                s += sigma[j]
                j += 1
            if j - i == 1:
                q[i] = sigma[i]
            else:
                avg = s / (j - i)
                for r in range(i, j):
                    q[r] = avg
            i = j
        return
    c = np.empty(n)
    if div == CHI2:
        _pav_chi2(ls, sigma, nu, c)
        inv = 1.0 / (2.0 * n * nu)
        for i in range(n):
            v = (ls[i] - c[i]) * inv
            q[i] = v if v > 0.0 else 0.0
    else:
        _pav_kl(ls, sigma, nu, c)
        for i in range(n):
            q[i] = math.exp((ls[i] - c[i]) / nu - 1.0) / n


@njit(cache=True)
def _penalty(q, nu, div):
    """``nu * D(q || 1/n)``."""
    if nu == 0.0:
        return 0.0
    n = q.shape[0]
    s = 0.0
    if div == CHI2:
        for i in range(n):
            d = q[i] - 1.0 / n
            s += d * d
        return nu * n * s
    for i in range(n):
        if q[i] > 0.0:
            s += q[i] * math.log(n * q[i])
    return nu * s


@njit(cache=True)
def _risk_sorted(ls, q, nu, div):
    """``q.l - nu D(q||1/n)`` for sorted losses and sorted weights."""
    s = 0.0
    for i in range(ls.shape[0]):
        s += q[i] * ls[i]
    return s - _penalty(q, nu, div)


@njit(cache=True)
def _risk_weights(losses, sigma, nu, div, q):
    """Full oracle: writes the maximiser ``q`` (original order) and returns the risk value."""
    n = losses.shape[0]
    order = np.argsort(losses, kind="mergesort")
    ls = np.empty(n)
    for r in range(n):
        ls[r] = losses[order[r]]
    qs = np.empty(n)
    _weights_sorted(ls, sigma, nu, div, qs)
    for r in range(n):
        q[order[r]] = qs[r]
    return _risk_sorted(ls, qs, nu, div)


@njit(cache=True)
def _bubble(order, rank, losses, i):
    """Restore ``losses[order]`` sorted after ``losses[i]`` changed; keeps ``rank`` = inverse.

    Costs O(number of swaps) (Subroutine 4 of the Prospect paper).
    """
    n = order.shape[0]
    r = rank[i]
    v = losses[i]
    while r > 0 and losses[order[r - 1]] > v:
        o = order[r - 1]
        order[r] = o
        rank[o] = r
        r -= 1
    while r < n - 1 and losses[order[r + 1]] < v:
        o = order[r + 1]
        order[r] = o
        rank[o] = r
        r += 1
    order[r] = i
    rank[i] = r
