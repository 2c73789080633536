"""The sorting oracle on heavily tied losses: sort the values only, solve on the distinct
values, map every loss to its value's weight.

The maximiser of ``q.l - nu D(q || 1/n)`` over ``P(sigma)`` gives tied losses one weight: for
``nu = 0`` the mean of their spectrum entries, for ``nu > 0`` the PAV puts a tie in one block
(along a tie ``l - 2 n nu sigma`` and ``exp(l / nu) / sigma`` do not increase, while the means
of PAV's blocks strictly increase, and a block's last term is at most its mean, its first at
least). So the weight is a function of the loss *value*, and with ``m`` distinct values:

1. ``ls = np.sort(losses)`` (NumPy's SIMD sort of the floats, which profits from duplicates:
   5 ms against 12 ms of continuous losses at n = 1e6, where the argsort of ``oracles``
   sorts distinct packed keys and gets no such speed-up);
2. one pass: the distinct values ``uv``, the first rank of each and the sum of ``sigma``
   over its ranks (in rank order, as ``_tie_mean``);
3. the weights ``uq`` of the ``m`` values: ``nu = 0`` the tie means, bit for bit as
   ``oracles``; chi-square / KL the PAV of ``oracles._weights_sorted_ws`` /
   ``oracles._kl_weights_linear`` with a tie as one starting block (the same blocks in exact
   arithmetic; sums in another order, so the weights agree to rounding);
4. the value from the ``m`` groups (each term times its count);
5. one pass over ``losses``: ``q_i = uq[g]`` where ``uv[g] = l_i``, found through a table of
   ``4 m`` buckets linear in the value (``bucket(x) = int((x - min) * scale)``, monotone, so
   a value's group is at or after its bucket's first group) and a short scan or a binary
   search among the few groups of one bucket; the tables stay in cache for small ``m``.

:func:`tied_risk_weights` is tried by ``oracles.risk_weights`` when a sample of the losses
predicts ``m <= n / TIES_MAX_GROUPS`` (:func:`few_values`); it declines (returns None: the
argsort path then runs) for more values than that, NaN or infinite losses, a span that
overflows, and a KL table too wide for the linear domain.
"""
import math
import threading

import numpy as np
from numba import njit

from .oracle_select import KL_MAX_RANGE, _clamp_value

#: The tied path is taken for at most ``n / TIES_MAX_GROUPS`` distinct values.
TIES_MAX_GROUPS = 4
#: At most this many losses (evenly spaced; ``n / 16`` of fewer) are sampled to predict the
#: number of distinct values.
TIES_SAMPLE = 2048
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def few_values(losses, bits, max_groups):
    """:func:`_few_values` with this thread's hash tables (zeroed there): no array is made
    in the kernel, whose allocations were half of its compile time in a first fit."""
    tables = getattr(_TABLES, "t", None)
    if tables is None:
        tables = _TABLES.t = (np.empty(_TABLE_MAX, dtype=np.uint64),
                              np.empty(_TABLE_MAX, dtype=np.int64))
    return _few_values(losses, bits, max_groups, tables[0], tables[1])


_TABLES = threading.local()
#: the largest hash table of ``_few_values``: ``4 TIES_SAMPLE`` slots, a power of two
_TABLE_MAX = 1 << (4 * TIES_SAMPLE - 1).bit_length()


@njit(cache=True)
def _few_values(losses, bits, max_groups, keys, cnt):
    """Whether ``losses`` likely hold at most ``n / max_groups`` distinct values, from
    ``s = min(TIES_SAMPLE, max(256, n / 16))`` evenly spaced losses counted in a hash table
    of ``4 s`` to ``8 s`` slots: Chao's estimate ``d + f1^2 / (2 f2)`` (``d`` distinct values
    in the sample, ``f1`` seen once, ``f2`` twice; ``d + f1 (f1 - 1) / 2`` for ``f2 = 0``)
    of the number of values, against ``n / max_groups``; False when no value repeats. ``bits`` is ``losses.view(np.uint64)``
    (``-0.0`` and ``0.0`` count as two values here). Only a guess (the tied path checks the
    true count); False for a NaN in the sample."""
    n = losses.shape[0]
    s = min(n, TIES_SAMPLE, max(256, n // 16))
    bits_h = 2
    while (1 << bits_h) < 4 * s:
        bits_h += 1
    size = 1 << bits_h
    mask = np.uint64(size - 1)
    for h in range(size):  # (keys, cnt: tables of at least size slots, from few_values)
        keys[h] = 0
        cnt[h] = 0
    step = n // s
    for j in range(s):
        x = losses[j * step]
        if x != x:
            return False
        b = bits[j * step]
        h = (b * _GOLDEN) >> np.uint64(64 - bits_h)
        while cnt[h] != 0 and keys[h] != b:
            h = (h + np.uint64(1)) & mask
        keys[h] = b
        cnt[h] += 1
    d = 0
    f1 = 0
    f2 = 0
    for h in range(size):
        c = cnt[h]
        if c != 0:
            d += 1
            if c == 1:
                f1 += 1
            elif c == 2:
                f2 += 1
    if f1 == d:
        return False
    est = d + (f1 * f1 / (2.0 * f2) if f2 > 0 else f1 * (f1 - 1) / 2.0)
    return est * max_groups <= n


@njit(cache=True)
def _groups(ls, sigma, max_m, uv, first, ssum):
    """Distinct values of the sorted ``ls`` (``uv``), the first rank of each (``first``,
    with ``first[m] = n``) and ``sigma`` summed over its ranks; returns ``m``, or -1 once
    there are more than ``max_m``."""
    n = ls.shape[0]
    m = 0
    i = 0
    while i < n:
        if m >= max_m:
            return -1
        x = ls[i]
        s = sigma[i]
        j = i + 1
        while j < n and ls[j] == x:
            s += sigma[j]
            j += 1
        uv[m] = x
        first[m] = i
        ssum[m] = s
        m += 1
        i = j
    first[m] = n
    return m


@njit(cache=True)
def _chi2_groups(uv, first, ssum, m, n, nu, uq, start, a, t):
    """Chi-square PAV of ``oracles._chi2_gathered`` over the groups (a tie of ``c`` losses
    enters as one block: ``a = 0``, ``t`` = its ``sigma`` sum); ``uq[g]`` the weight of
    value ``uv[g]``. ``start`` holds group indices; counts come from ``first``."""
    tnn = 2.0 * n * nu
    k = -1
    for g in range(m):
        k += 1
        start[k] = g
        a[k] = 0.0
        t[k] = ssum[g]
        while k >= 1:
            c1 = first[start[k]] - first[start[k - 1]]
            c2 = first[g + 1] - first[start[k]]
            r0 = uv[start[k - 1]]
            r1 = uv[start[k]]
            lhs = (r0 - r1) * (c1 * c2) + (a[k - 1] * c2 - a[k] * c1)
            if lhs < tnn * (t[k - 1] * c2 - t[k] * c1):
                break
            a[k - 1] += a[k] + c2 * (r1 - r0)
            t[k - 1] += t[k]
            k -= 1
    for b in range(k + 1):
        g_end = start[b + 1] if b < k else m
        cnt = first[g_end] - first[start[b]]
        mean_a = a[b] / cnt
        mean_s = t[b] / cnt
        rf = uv[start[b]]
        for g in range(start[b], g_end):
            v = mean_s + ((uv[g] - rf) - mean_a) / tnn
            uq[g] = v if v > 0.0 else 0.0


@njit(cache=True)
def _kl_groups(uv, first, ssum, m, nu, uq, start, A, S):
    """KL PAV of ``oracles._kl_weights_linear`` over the groups (a tie of ``c`` losses
    enters with ``A = c exp((l - max l) / nu)``); False when it declines (too wide, a
    product near underflow)."""
    top = uv[m - 1]
    if (top - uv[0]) / nu > KL_MAX_RANGE:
        return False
    for g in range(m):
        uq[g] = math.exp((uv[g] - top) / nu)
    k = -1
    for g in range(m):
        k += 1
        start[k] = g
        A[k] = (first[g + 1] - first[g]) * uq[g]
        S[k] = ssum[g]
        while k >= 1:
            if S[k - 1] != 0.0:            # a block without spectrum mass always pools
                if S[k] == 0.0:
                    break
                lhs = A[k - 1] * S[k]
                rhs = A[k] * S[k - 1]
                if not (lhs > 1e-290 and rhs > 1e-290):
                    return False
                if lhs < rhs:
                    break
            A[k - 1] += A[k]
            S[k - 1] += S[k]
            k -= 1
    for b in range(k + 1):
        g_end = start[b + 1] if b < k else m
        f = S[b] / A[b]
        for g in range(start[b], g_end):
            uq[g] = f * uq[g]
    return True


@njit(cache=True)
def _group_value(uv, first, uq, m, n, nu, div):
    """``q.l - nu D(q || 1/n)`` from the groups, centred on the largest loss and clamped as
    ``oracles._risk_sorted``."""
    top = uv[m - 1]
    s = 0.0
    msum = 0.0
    pen = 0.0
    for g in range(m):
        c = first[g + 1] - first[g]
        d = uv[g] - top
        v = uq[g]
        s += c * (v * d)
        msum += c * d
        if nu > 0.0:
            if div == 0:
                e = v - 1.0 / n
                pen += c * (e * e)
            elif v > 0.0:
                pen += c * (v * math.log(n * v))
    if nu == 0.0:
        return top + s
    if div == 0:  # (nu n overflows: nu (n pen), 0 for uniform weights, not inf * 0 = NaN)
        pen = nu * n * pen if nu * n < np.inf else nu * (n * pen)
    else:
        pen = nu * pen
    return _clamp_value(top + s - pen, top, msum, top - uv[0], n, nu)


@njit(cache=True)
def _map_back(losses, uv, uq, m, q, table):
    """``q_i = uq[g]`` with ``uv[g] = losses[i]`` through the bucket table (see the module
    docstring); ``table`` (int64) has at least ``4 m + 2`` entries."""
    n = losses.shape[0]
    if m == 1:
        for i in range(n):
            q[i] = uq[0]
        return
    nb = table.shape[0] - 1
    lo = uv[0]
    scale = (nb - 1) / (uv[m - 1] - lo)
    cur = 0
    for g in range(m):
        b = int((uv[g] - lo) * scale)
        while cur <= b:
            table[cur] = g
            cur += 1
    while cur <= nb:
        table[cur] = m
        cur += 1
    for i in range(n):
        x = losses[i]
        b = int((x - lo) * scale)
        g = table[b]
        e = table[b + 1]
        while e - g > 8:                   # a crowded bucket: binary search
            h = (g + e) >> 1
            if uv[h] < x:
                g = h + 1
            else:
                e = h
        while uv[g] < x:
            g += 1
        q[i] = uq[g]


@njit(cache=True)
def _tied(losses, ls, sigma, nu, div, q, max_m):
    """The tied oracle on sorted ``ls``; NaN when it declines (see the module docstring)."""
    n = ls.shape[0]
    lo = ls[0]
    hi = ls[n - 1]
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(hi - lo)):
        return np.nan
    uv = np.empty(max_m)
    first = np.empty(max_m + 1, dtype=np.int64)
    ssum = np.empty(max_m)
    m = _groups(ls, sigma, max_m, uv, first, ssum)
    if m < 0:
        return np.nan
    uq = np.empty(m)
    if nu == 0.0:
        for g in range(m):
            c = first[g + 1] - first[g]
            uq[g] = ssum[g] / c        # (= _tie_mean: the same sum, in the same order)
    else:
        start = np.empty(m, dtype=np.int64)
        w1 = np.empty(m)
        w2 = np.empty(m)
        if div == 0:
            _chi2_groups(uv, first, ssum, m, n, nu, uq, start, w1, w2)
        elif not _kl_groups(uv, first, ssum, m, nu, uq, start, w1, w2):
            return np.nan
    _map_back(losses, uv, uq, m, q, np.empty(4 * m + 2, dtype=np.int64))
    return _group_value(uv, first, uq, m, n, nu, div)


def equal_risk_weights(losses, sigma, nu, div, q):
    """:func:`tied_risk_weights` for losses that are all equal (and finite), in NumPy: its
    one group (``m = 1``) by the same operations (``sigma`` summed in rank order, the weight
    ``sum / n`` for every divergence, the value ``top - nu D``, clamped as
    ``_group_value``), so a fit from ``w = 0`` compiles no tied-oracle kernel. None when the
    losses are not all equal or not finite."""
    n = losses.shape[0]
    top = float(losses[0])
    if not (math.isfinite(top) and np.all(losses == top)):
        return None
    v = float(np.cumsum(sigma)[-1]) / n
    q[:] = v
    if nu == 0.0:
        return top
    if div == 0:
        e = v - 1.0 / n
        pen = nu * n * (n * (e * e)) if nu * n < math.inf else nu * (n * (n * (e * e)))
    else:
        pen = nu * (n * (v * math.log(n * v))) if v > 0.0 else 0.0
    val = top - pen  # (_clamp_value into [top, top], to 1e-10 |top|)
    return top if abs(val - top) > 1e-10 * abs(top) else val


def tied_risk_weights(losses, sigma, nu, div, q):
    """The oracle of ``oracles.risk_weights`` for losses with at most ``n /
    TIES_MAX_GROUPS`` distinct values (see the module docstring): writes ``q`` and returns
    the value, or None (``q`` then holds nothing of use) when it declines."""
    n = losses.shape[0]
    ls = np.sort(losses)
    v = _tied(losses, ls, sigma, float(nu), int(div), q, max(1, n // TIES_MAX_GROUPS))
    return None if math.isnan(v) else float(v)
