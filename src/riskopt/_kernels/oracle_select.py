"""Oracles by selection, without a sort: the ``nu = 0`` weights of a spectrum constant below one
rank and above another (CVaR, ``MaxLoss``, ``Mean``), and the weights of a box spectrum
(CVaR, ``MaxLoss``) with a chi-square or KL shift cost from one scalar.

``oracles.spectral_risk_weights`` (the oracle of ``Objective.risk_weights`` and
``risk.weights``) calls them with the spectrum's :func:`selection_plan` and falls back to the
sorting oracle (``oracles.risk_weights``) when they decline (NaN losses, a KL table too wide
for the linear domain, no convergence). ``benchmarks/oracle_speed.py`` times both against
``np.sort``; ``tests/test_oracle_select.py`` checks them against the sorting oracle.

Box spectra with a shift cost (:func:`box_select_weights`): for ``sigma`` with entries ``0``,
``c`` and at most one value in ``(0, c]``, ``P(sigma)`` is the capped simplex ``{0 <= q <= c,
sum q = 1}`` (see ``box_oracle``), so the maximiser of ``q.l - nu D(q || 1/n)`` is

* chi-square: ``q_i = clip((l_i - t) / A, 0, c)``, ``A = 2 n nu``; ``h(t) = sum_i q_i(t)`` is
  continuous, non-increasing and piecewise linear. On the partition of ``t`` (low ``l <= t``,
  mid ``t < l < t + A c``, top ``l >= t + A c``) ``h`` is linear with root ``t + (sum_mid (l -
  t) - A (1 - T c)) / M``: a safeguarded Newton iteration (bisection when the root of the
  piece leaves the bracket) over full passes that only read and count. The sets are monotone
  in ``t``, so equal counts at two points mean equal sets: when the root of the piece at ``t``
  has the same counts, it is the exact root.
* KL: ``q_i = min(c, e_i / z)`` with ``e_i = exp((l_i - max l) / nu)`` (one exponential per
  loss, stored in ``q``) and ``z = sum_{e < c z} e / (1 - T c)``: the water-filling iteration
  from ``T = 0`` decreases ``z`` monotonically to the root (each step solves the current
  partition exactly; the top set only grows) and stops when the top count repeats.
  Declined when ``range(l) / nu > KL_MAX_RANGE`` (``e`` would underflow).

Both take a few passes over the losses; the value comes from the same passes (translation
invariant, clamped like ``oracles._risk_sorted``).
"""
import math
from collections import namedtuple

import numpy as np
from numba import njit

#: The KL box oracle by selection declines when ``(max l - min l) / nu`` exceeds this (the
#: linear-domain terms ``exp((l - max l) / nu)`` must stay far from underflow).
KL_MAX_RANGE = 600.0
#: Passes of the box oracles before they decline (the sort path then runs).
BOX_MAX_ITER = 100
#: The chi-square box oracle declines when ``64 eps range(l) / (2 n nu)`` exceeds this
#: (the weights' rounding, :func:`chi2_resolves`).
CHI2_ABS = 1e-14
EPS = float(np.finfo(np.float64).eps)
#: Losses sampled (evenly spaced) for the box oracles' first iterate.
BOX_SAMPLE = 4096


@njit(cache=True, inline="always")
def _tie_mean(sigma, a, m):
    """``mean(sigma[a:a + m])``, the weight of a tie of ``m`` losses at ranks ``a, ...`` for
    ``nu = 0``; every ``nu = 0`` oracle sums a tie through it (the same bits)."""
    if m == 1:
        return sigma[a]
    s = sigma[a]
    for j in range(a + 1, a + m):
        s += sigma[j]
    return s / m


@njit(cache=True)
def _risk_weights_nu0(order, ls, sigma, q):
    """``oracles._risk_weights_gathered`` for ``nu = 0`` (kept here, with the other ``nu = 0``
    kernels): the weights of ``_weights_sorted_ws`` (sigma by rank, averaged over ties)
    scattered as they are made, and the value of ``_risk_sorted`` in the same pass (a
    singleton, the common case, takes sigma[i] directly and the loss is held: a _tie_mean
    call and a reload of ls[i] per compare took 19 ms instead of 10 ms at n = 1e6,
    benchmarks/oracle_speed.py)."""
    n = ls.shape[0]
    top = ls[n - 1]
    acc = 0.0
    i = np.int64(0)  # (not a literal: one signature of _tie_mean to compile)
    while i < n:
        x = ls[i]
        j = i + 1
        while j < n and ls[j] == x:
            j += 1
        w = sigma[i] if j == i + 1 else _tie_mean(sigma, i, j - i)  # (the same value)
        for r in range(i, j):
            q[order[r]] = w
            acc += w * (ls[r] - top)
        i = j
    return top + acc


#: A spectrum is left to the sorting oracle when its ranks ``[k_lo, k_hi]`` (where it is not
#: constant, see :func:`selection_plan`) exceed this fraction of the losses.
SELECT_MAX_MIDDLE = 0.5

SelectionPlan = namedtuple("SelectionPlan", "n k_lo k_hi lo_w hi_w")
SelectionPlan.__doc__ = """What the selection oracle needs of a spectrum (computed once per
spectrum): ``sigma`` equals ``lo_w`` on the ranks ``[0, k_lo)`` and ``hi_w`` on
``(k_hi, n)``."""


def selection_plan(sigma):
    """The :class:`SelectionPlan` of a spectrum, or None when it does not pay.

    ``k_lo`` is the first rank where ``sigma`` changes, ``k_hi`` the rank before the last
    change (at least ``k_lo``): a CVaR spectrum ``0, ..., 0, b, c, ..., c`` (``b`` the
    fractional boundary entry, or ``b = c``; ``CVaR.spectrum`` makes the tail bins exactly
    equal) has ``k_lo = k_hi = k0``, ``MaxLoss`` and a constant spectrum (``Mean``) ``n - 1``.
    A spectrum with a few levels in a narrow band of ranks (a user ``SpectralRisk``) gets
    ``k_lo < k_hi``: the oracle sorts only those ranks and stays exact. None when
    ``[k_lo, k_hi]`` holds more than ``SELECT_MAX_MIDDLE`` of the ranks (ESRM, extremile:
    sorting all losses is the sorting oracle).
    """
    sigma = np.asarray(sigma, dtype=np.float64)
    n = sigma.shape[0]
    if sigma.ndim != 1 or n == 0:
        return None
    change = np.flatnonzero(sigma[1:] != sigma[:-1]) + 1
    if change.shape[0] == 0:
        k_lo = k_hi = n - 1
    else:
        k_lo = int(change[0])
        k_hi = max(k_lo, int(change[-1]) - 1)
    if k_hi > k_lo and k_hi - k_lo + 1 > SELECT_MAX_MIDDLE * n:
        return None
    return SelectionPlan(n, k_lo, k_hi, float(sigma[0]), float(sigma[n - 1]))


def _thresholds(losses, k_lo, k_hi):
    """The order statistics ``sorted(losses)[k_lo]`` and ``[k_hi]`` by selection (NumPy's
    introselect; ``max`` / ``min`` for the end ranks): no sort."""
    n = losses.shape[0]
    if k_lo == k_hi:
        if k_lo == n - 1:
            t = losses.max()
        elif k_lo == 0:
            t = losses.min()
        else:
            t = np.partition(losses, k_lo)[k_lo]
        return t, t
    buf = np.partition(losses, k_hi)
    below = buf[:k_hi]           # a view: partitioned in place
    below.partition(k_lo)
    return below[k_lo], buf[k_hi]


@njit(cache=True)
def _select_pass(losses, u_lo, u_hi, lo_w, hi_w, mid_w, q):
    """One branch-free pass: ``q_i = lo_w`` below ``u_lo``, ``hi_w`` above ``u_hi``,
    ``mid_w`` in the middle ``[u_lo, u_hi]`` (and for NaN); the counts and the sums of
    ``l_i - u_lo`` below and above, the count of ``l_i == u_lo`` and the first and last index
    of the middle.
    The sums run in index order (no ``fastmath`` reassociation: a SIMD reduction would make
    the last bits depend on the array's alignment, so two calls on copies of the same losses
    could differ)."""
    n = losses.shape[0]
    nlt = 0
    ngt = 0
    neq = 0
    slt = 0.0
    sgt = 0.0
    first = n
    last = -1
    for i in range(n):
        x = losses[i]
        lt = x < u_lo
        gt = x > u_hi
        q[i] = hi_w if gt else (lo_w if lt else mid_w)
        d = x - u_lo
        slt += d if lt else 0.0
        sgt += d if gt else 0.0
        nlt += lt
        ngt += gt
        neq += x == u_lo
        mid = not (lt or gt)
        first = min(first, i if mid else n)
        last = max(last, i if mid else -1)
    return nlt, ngt, neq, slt, sgt, first, last


@njit(cache=True)
def _count_tie(buf, t):
    """``#{x < t}`` and ``#{x == t}`` (one SIMD pass)."""
    a = 0
    m = 0
    for i in range(buf.shape[0]):
        x = buf[i]
        a += x < t
        m += x == t
    return a, m


@njit(cache=True)
def _fill_tie(losses, t, w, first, last, q):
    """``q_i = w`` where ``losses[i] == t``, within ``[first, last]``."""
    for i in range(first, last + 1):
        q[i] = w if losses[i] == t else q[i]


@njit(cache=True)
def _select_middle(losses, u_lo, u_hi, first, last, idx, vals):
    """Indices and values of the losses in ``[u_lo, u_hi]`` (branch-free compaction of
    ``losses[first:last + 1]``; ``idx`` and ``vals`` one longer than their count); returns
    the count (short of the pass's when a loss is NaN)."""
    k = 0
    cap = idx.shape[0] - 1
    for i in range(first, last + 1):
        x = losses[i]
        idx[k] = i
        vals[k] = x
        if k < cap:
            k += (x >= u_lo) and (x <= u_hi)
    return k


@njit(cache=True)
def _select_finish(sigma, a, idx, vals, order, u_lo, q):
    """Weights of the middle, sorted by ``order``, at ranks ``a, a + 1, ...``: ``sigma`` by
    rank averaged over ties, as ``_weights_sorted_ws`` (the same sums, so the same bits);
    returns their ``sum q_i (l_i - u_lo)``."""
    m = order.shape[0]
    s_mid = 0.0
    i = 0
    while i < m:
        x = vals[order[i]]
        j = i + 1
        while j < m and vals[order[j]] == x:
            j += 1
        w = _tie_mean(sigma, a + i, j - i)
        for r in range(i, j):
            q[idx[order[r]]] = w
        s_mid += (j - i) * (w * (x - u_lo))
        i = j
    return s_mid


def select_risk_weights(losses, sigma, plan, q):
    """The ``nu = 0`` oracle by selection: writes ``q`` (original order) and returns the risk
    value, or None (``q`` then garbage) when a loss is NaN or the value is not finite.

    For a spectrum with a :class:`SelectionPlan`: ``u_lo, u_hi`` = the order statistics of
    ranks ``k_lo, k_hi`` (``np.partition``, O(n)); losses below ``u_lo`` have ranks below
    ``k_lo`` and get ``lo_w``, losses above ``u_hi`` ranks above ``k_hi`` and get ``hi_w``;
    the losses in ``[u_lo, u_hi]`` (whole ties included: ranks ``[A, A + m)``,
    ``A = #{l < u_lo}``) are sorted and get ``sigma`` by rank averaged over ties. For a CVaR
    that middle is the tie at the quantile (one loss for distinct losses). Same weights as
    :func:`risk_weights` (a tie below ``u_lo`` or above ``u_hi`` gets the exact common value,
    where the sorting oracle's running-sum average can be off in the last bit); the value is
    ``u_lo + sum_i q_i (l_i - u_lo)``, translation invariant like ``_risk_sorted`` and, each
    side's weight multiplying its sum, a few ulps closer to the exact sum.
    ``benchmarks/oracle_speed.py`` times it against ``np.sort``.
    """
    n = losses.shape[0]
    k, lo_w, hi_w = plan.k_lo, plan.lo_w, plan.hi_w
    if k == plan.k_hi and 0 < k < n - 1:
        # one threshold t inside: the tie {l == t} counted on the partitioned copy, so the
        # pass writes its weight (no second pass over a tie spread over the array)
        buf = np.partition(losses, k)
        t = buf[k]
        a, m = _count_tie(buf, t)
        if m == 0:
            return None          # t is NaN
        w = _tie_mean(sigma, a, m)
        nlt, ngt, neq, slt, sgt, _, _ = _select_pass(losses, t, t, lo_w, hi_w, w, q)
        if nlt + ngt + neq != n:
            return None          # NaN losses
        v = t + (lo_w * slt + hi_w * sgt)   # the tie adds exactly 0
        return float(v) if np.isfinite(v) else None
    u_lo, u_hi = _thresholds(losses, k, plan.k_hi)
    if not (u_lo <= u_hi):       # NaN
        return None
    nlt, ngt, neq, slt, sgt, first, last = _select_pass(losses, u_lo, u_hi, lo_w, hi_w, lo_w, q)
    m = n - nlt - ngt
    if u_lo == u_hi:             # one tie (the max or min, or a tie over [k_lo, k_hi])
        if neq != m:
            return None          # NaN losses
        _fill_tie(losses, u_lo, _tie_mean(sigma, nlt, m), first, last, q)
        v = u_lo + (lo_w * slt + hi_w * sgt)
        return float(v) if np.isfinite(v) else None
    idx = np.empty(m + 1, dtype=np.int64)
    vals = np.empty(m + 1)
    if m == 0 or _select_middle(losses, u_lo, u_hi, first, last, idx, vals) != m:
        return None              # NaN losses
    order = np.argsort(vals[:m]) if m > 1 else np.zeros(1, dtype=np.int64)
    s_mid = _select_finish(sigma, nlt, idx, vals, order, u_lo, q)
    v = u_lo + ((lo_w * slt + hi_w * sgt) + s_mid)
    return float(v) if np.isfinite(v) else None


# ----------------------------------------------------------- box spectra with a shift cost
def box_of(sigma, plan):
    """``(c, tot)`` when ``sigma`` (with its :func:`selection_plan` ``plan``) is a box
    spectrum, ``0, ..., 0, b, c, ..., c`` or ``b, c, ..., c`` with ``0 < b <= c`` (CVaR,
    ``MaxLoss``; ``P(sigma)`` is then the capped simplex, ``q >= b`` in the second form being
    implied by ``q <= c`` and the total): ``c`` the cap and ``tot = sum sigma``; else
    None."""
    if plan is None or plan.k_lo != plan.k_hi or not plan.hi_w > 0.0:
        return None
    k, c, n = plan.k_lo, plan.hi_w, plan.n
    b = float(sigma[k])
    if plan.lo_w == 0.0 and 0.0 < b <= c:
        return c, c * (n - 1 - k) + b
    if k == 1 and 0.0 < plan.lo_w <= c and b == c:
        return c, c * (n - 1) + plan.lo_w
    return None


@njit(cache=True)
def _range(losses):
    """``(min, max, any NaN)`` in one pass."""
    lo = np.inf
    hi = -np.inf
    bad = False
    for i in range(losses.shape[0]):
        x = losses[i]
        lo = x if x < lo else lo
        hi = x if x > hi else hi
        bad |= x != x
    return lo, hi, bad


@njit(cache=True)
def _chi2_counts(losses, ref, t, W):
    """On the partition of ``t`` (relative to ``ref``: ``d = l - ref``): ``T = #{d >= t +
    W}``, ``M = #{t < d < t + W}`` and ``sum_mid (d - t)`` (branch-free; four partial sums
    as in :func:`_kl_counts`)."""
    n = losses.shape[0]
    T = 0
    M = 0
    S0 = 0.0
    S1 = 0.0
    S2 = 0.0
    S3 = 0.0
    u = t + W
    n4 = n - n % 4
    for i in range(0, n4, 4):
        x0 = losses[i] - ref
        x1 = losses[i + 1] - ref
        x2 = losses[i + 2] - ref
        x3 = losses[i + 3] - ref
        T += (x0 >= u) + (x1 >= u) + (x2 >= u) + (x3 >= u)
        M += (((x0 > t) & (x0 < u)) + ((x1 > t) & (x1 < u)) + ((x2 > t) & (x2 < u))
              + ((x3 > t) & (x3 < u)))
        S0 += (x0 - t) if (x0 > t) & (x0 < u) else 0.0
        S1 += (x1 - t) if (x1 > t) & (x1 < u) else 0.0
        S2 += (x2 - t) if (x2 > t) & (x2 < u) else 0.0
        S3 += (x3 - t) if (x3 > t) & (x3 < u) else 0.0
    for i in range(n4, n):
        x = losses[i] - ref
        T += x >= u
        M += (x > t) & (x < u)
        S0 += (x - t) if (x > t) & (x < u) else 0.0
    return T, M, (S0 + S1) + (S2 + S3)


@njit(cache=True)
def _box_chi2_root(losses, c, tot, A, lo, hi, t, maxit):
    """The root ``t`` of ``h(t) = sum clip((l - hi - t) / A, 0, c) = tot`` (module docstring;
    ``t`` relative to the largest loss ``hi``, so a common offset of the losses costs no
    precision) and the passes it took; nan when ``maxit`` passes did not settle it."""
    W = A * c
    a = (lo - hi) - W  # every loss is top: h = n c >= tot
    b = 0.0            # every loss is low: h = 0 < tot
    t = min(max(t, a), b)
    pT = -1
    pM = -1
    newton = False
    for it in range(maxit):
        T, M, S = _chi2_counts(losses, hi, t, W)
        if newton and T == pT and M == pM:
            return t, it + 1          # the root of this partition lies on it: exact
        h = T * c + S / A
        if h > tot:
            a = t
        elif h < tot:
            b = t
        else:
            return t, it + 1
        newton = False
        tn = 0.0
        if M > 0:
            tn = t + (S - A * (tot - T * c)) / M
            newton = a < tn < b
        if not newton:
            tn = 0.5 * (a + b)
            if not (a < tn < b):
                return t, it + 1      # the bracket is one ulp wide (weights continuous)
        pT = T
        pM = M
        t = tn
    return np.nan, maxit


@njit(cache=True, inline="always")
def _clamp_value(v, top, m, span, n, nu):
    """The clamp of a ``nu > 0`` risk value into ``[mean, mean + span^2 / (8 nu)]`` (``m = sum
    (l - top)``; why: ``oracles._risk_sorted``, which clamps through it too)."""
    lo = top + m / n
    hi = lo + (span / nu) * span * 0.125
    tol = 1e-10 * (abs(lo) + span)
    if v < lo - tol:
        return lo
    if v > hi + tol:
        return hi
    return v


@njit(cache=True)
def _box_chi2_fill(losses, t, A, c, nu, top, span, q):
    """``q_i = clip((l_i - top - t) / A, 0, c)`` and the value ``top + sum q (l - top) - nu
    n sum (q - 1/n)^2`` in one pass."""
    n = losses.shape[0]
    inv_n = 1.0 / n
    s1 = 0.0
    s2 = 0.0
    m = 0.0
    for i in range(n):
        d = losses[i] - top
        v = (d - t) / A
        v = 0.0 if v < 0.0 else v
        v = c if v > c else v
        q[i] = v
        s1 += v * d
        w = v - inv_n
        s2 += w * w
        m += d
    s2 = nu * n * s2 if nu * n < np.inf else nu * (n * s2)  # (as oracle_fused: no inf * 0)
    return _clamp_value(top + s1 - s2, top, m, span, n, nu)


@njit(cache=True)
def _kl_exp(losses, top, nu, e):
    """``e_i = exp((l_i - top) / nu)``, their sum and ``sum (l - top)``."""
    E = 0.0
    m = 0.0
    for i in range(losses.shape[0]):
        d = losses[i] - top
        v = math.exp(d / nu)
        e[i] = v
        E += v
        m += d
    return E, m


@njit(cache=True)
def _kl_counts(e, thr):
    """``T = #{e >= thr}`` and ``sum_{e < thr} e`` (four partial sums, ``i mod 4``: the
    additions overlap; the order is fixed, so the bits do not depend on the alignment)."""
    n = e.shape[0]
    T = 0
    E0 = 0.0
    E1 = 0.0
    E2 = 0.0
    E3 = 0.0
    n4 = n - n % 4
    for i in range(0, n4, 4):
        v0 = e[i]
        v1 = e[i + 1]
        v2 = e[i + 2]
        v3 = e[i + 3]
        T += (v0 >= thr) + (v1 >= thr) + (v2 >= thr) + (v3 >= thr)
        E0 += v0 if v0 < thr else 0.0
        E1 += v1 if v1 < thr else 0.0
        E2 += v2 if v2 < thr else 0.0
        E3 += v3 if v3 < thr else 0.0
    for i in range(n4, n):
        v = e[i]
        T += v >= thr
        E0 += v if v < thr else 0.0
    return T, (E0 + E1) + (E2 + E3)


@njit(cache=True)
def _kl_root(e, c, tot, z, maxit):
    """The water-filling root ``z`` of ``sum min(c, e_i / z) = tot`` from ``z`` (module
    docstring) and the top count, or ``(nan, -1)``. From any start the first step lands at or
    above the root (the piece of a point below it lies above ``h``); from there ``z``
    decreases and the top set grows; the root of a partition is exact once the count
    repeats (the sets are monotone in ``z``)."""
    pT = -1
    for _ in range(maxit):
        T, E = _kl_counts(e, c * z)
        if T == pT:
            return z, T
        rest = tot - T * c
        if not (rest > 0.0 and E > 0.0):
            return np.nan, -1
        z = E / rest
        pT = T
    return np.nan, -1


@njit(cache=True)
def _box_kl(losses, c, tot, nu, lo, top, maxit, sample, q):
    """The KL box oracle (module docstring): writes ``q`` and returns the value, or nan when
    it declines (``q`` then garbage). The first ``z`` is the root for about ``sample`` evenly
    spaced losses (their cap ``c n / s``), scaled by ``n / s``."""
    n = losses.shape[0]
    E, m = _kl_exp(losses, top, nu, q)
    z0 = E / tot
    step = n // sample
    if step > 1:
        es = q[::step].copy()
        zs, _ = _kl_root(es, c * n / es.shape[0], tot, es.sum() / tot, maxit)
        if zs > 0.0:
            z0 = zs * n / es.shape[0]
    z, T = _kl_root(q, c, tot, z0, maxit)
    if not z > 0.0:
        return np.nan
    inv = 1.0 / z
    thr = c * z
    st = 0.0
    E = 0.0
    for i in range(n):
        v = q[i]
        tp = v >= thr
        st += (losses[i] - top) if tp else 0.0
        E += 0.0 if tp else v
        q[i] = c if tp else v * inv
    mass = E * inv
    val = top + mass * nu * (math.log(z) - math.log(n)) + c * st - T * c * nu * math.log(n * c)
    return _clamp_value(val, top, m, top - lo, n, nu)


def chi2_resolves(span, A):
    """Whether the chi-square form resolves the weights to ``CHI2_ABS``: a mid weight ``(l -
    t) / A`` (``A = 2 n nu``) carries the rounding of ``l - t``, up to ``eps`` of the spread
    ``span`` of the losses; the PAV of the sorting oracle rounds only within a block, so a
    small ``n nu`` is left to it."""
    return 64.0 * EPS * span <= CHI2_ABS * A


def box_select_weights(losses, sigma, plan, nu, div, q):
    """The oracle of a box spectrum (:func:`box_of`) with a shift cost ``nu > 0`` by
    selection (module docstring): writes ``q`` (original order) and returns the risk value,
    or None (``q`` then garbage) when it declines: not a box spectrum, NaN or infinite
    losses, a KL table wider than ``KL_MAX_RANGE nu`` or whose caps take all the mass in
    rounding, a chi-square ``nu`` too small for the one-scalar form (:func:`chi2_resolves`),
    no convergence in ``BOX_MAX_ITER`` passes. The same weights as the sorting oracle up to
    rounding (the maximiser is unique)."""
    box = box_of(sigma, plan)
    n = losses.shape[0]
    if box is None or not nu > 0.0 or n < 2:
        return None
    c, tot = box
    lo, hi, bad = _range(losses)
    if bad or not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    if div == 0:
        A = 2.0 * n * nu
        if not (np.isfinite(A * c) and chi2_resolves(hi - lo, A)):
            return None
        # start at the root for about BOX_SAMPLE evenly spaced losses (A s / n, cap c n / s)
        t0 = (float(np.mean(losses)) - hi) - A * tot / n
        step = n // BOX_SAMPLE
        if step > 1:
            ls = np.ascontiguousarray(losses[::step])
            r = ls.shape[0] / n
            ts, _ = _box_chi2_root(ls, c / r, tot, A * r, float(ls.min()), hi, t0, BOX_MAX_ITER)
            t0 = ts if np.isfinite(ts) else t0
        t, _ = _box_chi2_root(losses, c, tot, A, lo, hi, t0, BOX_MAX_ITER)
        if not np.isfinite(t):
            return None
        v = _box_chi2_fill(losses, t, A, c, nu, hi, hi - lo, q)
    else:
        if (hi - lo) / nu > KL_MAX_RANGE:
            return None
        v = _box_kl(losses, c, tot, nu, lo, hi, BOX_MAX_ITER, BOX_SAMPLE, q)
    return float(v) if np.isfinite(v) else None
