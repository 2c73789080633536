"""Exact oracles for spectral risks with a shift penalty.

Solves ``max_{q in P(sigma)} q.l - nu D(q || 1/n)`` by sorting plus pool-adjacent-violators
(Mehta et al. 2024, "Distributionally robust optimization with bias and variance reduction",
Appendix B-C, Prop. 3 and Subroutines 1-3). All functions take the losses already sorted
(``ls`` non-decreasing) and return quantities in sorted order, so the O(n log n) sort is the
caller's business (a full ``argsort`` or Prospect's incremental bubbling, ``_bubble``).

Divergence codes: 0 = chi-square ``D = n ||q - 1/n||^2``, 1 = KL ``D = sum q_i log(n q_i)``.
``nu == 0`` is the plain spectral risk: ``q`` is ``sigma`` by rank, averaged over ties.

For ``nu == 0`` and a spectrum that is constant below one rank and above another (CVaR,
``MaxLoss``, ``Mean``), ``oracle_select.select_risk_weights`` gets the same weights without
sorting (``np.partition`` and one pass), and for a box spectrum (CVaR, ``MaxLoss``) with a
shift cost ``oracle_select.box_select_weights`` (a few passes, one scalar);
:func:`spectral_risk_weights` picks them (they are re-exported here).
"""
import math
import threading

import numpy as np
from numba import njit

from .oracle_select import (SELECT_MAX_MIDDLE, SelectionPlan,  # noqa: F401 (re-exported)
                            _clamp_value, _risk_weights_nu0, _tie_mean, box_select_weights,
                            select_risk_weights, selection_plan)
from .oracle_ties import TIES_MAX_GROUPS, equal_risk_weights, few_values, tied_risk_weights
from .oracle_fused import (KL_LINEAR_RANGE, RUNS_MIN_N,  # noqa: F401 (re-exported)
                           _chi2_gathered, _chi2_runs_gathered, _kl_blocks, _kl_gathered,
                           _kl_weights_linear)
from .sort_keys import sorted_order  # noqa: F401 (re-exported: the oracles' sort)
from .oracle_batch import TIES_MIN_N, batch_risk_weights  # noqa: F401 (re-exported)

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
def _pav_chi2_blocks(ls, sigma, nu, sums, cnt):
    """PAV for the chi-square divergence (Subroutine 1); returns the number of blocks.

    Blocks are kept as (sum, count) of ``l_(i) - 2 n nu sigma_i``; two blocks are pooled when
    the left mean is >= the right mean, compared by cross-multiplication, so the loop does no
    division. Block ``b``'s value is ``sums[b] / cnt[b]``.
    """
    n = ls.shape[0]
    k = -1
    a = 2.0 * n * nu
    for i in range(n):
        k += 1
        sums[k] = ls[i] - a * sigma[i]
        cnt[k] = 1
        while k >= 1 and sums[k - 1] * cnt[k] >= sums[k] * cnt[k - 1]:
            sums[k - 1] += sums[k]
            cnt[k - 1] += cnt[k]
            k -= 1
    return k + 1


@njit(cache=True)
def _pav_chi2(ls, sigma, nu, c):
    """Isotonic solution ``c`` of problem (13) for the chi-square divergence (Subroutine 1)."""
    n = ls.shape[0]
    sums = np.empty(n)
    cnt = np.empty(n, dtype=np.int64)
    nb = _pav_chi2_blocks(ls, sigma, nu, sums, cnt)
    pos = 0
    for b in range(nb):
        v = sums[b] / cnt[b]
        for _ in range(cnt[b]):
            c[pos] = v
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
def _weights_sorted_ws(ls, sigma, nu, div, q, work, iwork):
    """Maximising weights ``q`` (sorted order) for sorted losses ``ls``.

    ``work`` (float, length >= 2n) and ``iwork`` (int64, length >= n) are scratch space, so a
    caller in a hot loop (Prospect, SaddleSAGA) allocates nothing per call (shorter scratch
    arrays are replaced by fresh ones).

    Translation-invariant PAV: a block is the run of ranks ``[start, next start)``; it keeps
    its sums relative to a reference loss inside it (chi2: its first, KL: its last = largest
    loss), so nothing of the size of ``|l|`` is subtracted from another such number and then
    divided by ``nu``. ``q`` is exact to a few ulps whatever the offset of the losses and
    however small ``nu`` (same blocks as ``_pav_chi2`` / ``_pav_kl`` in exact arithmetic).
    """
    n = ls.shape[0]
    if nu == 0.0:
        # q = sigma by rank; tied losses share the average of their spectrum entries
        i = np.int64(0)  # (not a literal: one signature of _tie_mean to compile)
        while i < n:
            x = ls[i]
            j = i + 1
            while j < n and ls[j] == x:
                j += 1
            w = sigma[i] if j == i + 1 else _tie_mean(sigma, i, j - i)  # (the same value)
            for r in range(i, j):
                q[r] = w
            i = j
        return
    if work.shape[0] < 2 * n:
        work = np.empty(2 * n)
    if iwork.shape[0] < n:
        iwork = np.empty(n, dtype=np.int64)
    start = iwork        # first rank of block b
    a = work[:n]         # chi2: sum (l_j - l_start); KL: log sum exp((l_j - l_last) / nu)
    t = work[n:2 * n]    # chi2: sum sigma_j;       KL: log sum sigma_j
    k = -1
    if div == CHI2:
        tnn = 2.0 * n * nu
        for i in range(n):
            k += 1
            start[k] = i
            a[k] = 0.0
            t[k] = sigma[i]
            while k >= 1:
                c1 = start[k] - start[k - 1]
                c2 = i + 1 - start[k]
                # pool iff mean(l - tnn sigma) of block k-1 >= that of block k (times c1 c2)
                lhs = (ls[start[k - 1]] - ls[start[k]]) * (c1 * c2) + (a[k - 1] * c2 - a[k] * c1)
                if lhs < tnn * (t[k - 1] * c2 - t[k] * c1):
                    break
                a[k - 1] += a[k] + c2 * (ls[start[k]] - ls[start[k - 1]])
                t[k - 1] += t[k]
                k -= 1
        for b in range(k + 1):
            end = start[b + 1] if b < k else n
            cnt = end - start[b]
            mean_a = a[b] / cnt
            mean_s = t[b] / cnt
            ref = ls[start[b]]
            for r in range(start[b], end):
                v = mean_s + ((ls[r] - ref) - mean_a) / tnn
                q[r] = v if v > 0.0 else 0.0
        return
    for i in range(n):
        k += 1
        start[k] = i
        a[k] = 0.0
        t[k] = math.log(sigma[i]) if sigma[i] > 0.0 else -np.inf
        while k >= 1:
            lo = ls[start[k] - 1]   # last loss of block k-1
            hi = ls[i]              # last loss of block k
            if t[k - 1] != -np.inf:  # a block without spectrum mass is always pooled
                if t[k] == -np.inf:
                    break
                # pool iff l_last + nu (a - t) of block k-1 >= that of block k
                if (lo - hi) + nu * ((a[k - 1] - t[k - 1]) - (a[k] - t[k])) < 0.0:
                    break
            a[k - 1] = _logaddexp(a[k], a[k - 1] + (lo - hi) / nu)
            t[k - 1] = _logaddexp(t[k - 1], t[k])
            k -= 1
    for b in range(k + 1):
        end = start[b + 1] if b < k else n
        ref = ls[end - 1]
        for r in range(start[b], end):
            q[r] = math.exp(t[b] + (ls[r] - ref) / nu - a[b])


@njit(cache=True)
def _weights_sorted(ls, sigma, nu, div, q):
    """Maximising weights ``q`` (sorted order) for sorted losses ``ls``."""
    n = ls.shape[0]
    _weights_sorted_ws(ls, sigma, nu, div, q, np.empty(2 * n), np.empty(n, dtype=np.int64))


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
        # (nu n overflows, nu >= ~1.8e308 / n: nu (n s), 0 for uniform q, not inf * 0 = NaN)
        return nu * n * s if nu * n < np.inf else nu * (n * s)
    for i in range(n):
        if q[i] > 0.0:
            s += q[i] * math.log(n * q[i])
    return nu * s


@njit(cache=True)
def _risk_sorted(ls, q, nu, div):
    """``q.l - nu D(q||1/n)`` for sorted losses and sorted weights, centred on the largest
    loss (``sum q = 1``), so a common offset of the losses costs no precision.

    For ``nu > 0`` the value lies in ``[mean(l), mean(l) + range(l)^2 / (8 nu)]`` (uniform
    ``q`` is feasible at no cost; the simplex bound: Hoeffding's lemma for KL, ``mean +
    Var / (4 nu)`` for chi2). When ``nu`` dwarfs the range, ``nu D(q)`` is mostly the
    rounding of ``q`` times ``nu`` (chi2, ``nu = 1e305``, losses ~1e5: ``-4.7e273``; KL,
    ``nu = 1e15``, losses in [0.1, 0.7]: 0.511 for 0.4), so a value outside that interval
    by more than ``1e-10 (|mean| + range)`` is clamped into it (rounding never moves it so
    far: ordinary values are untouched).
    """
    n = ls.shape[0]
    top = ls[n - 1]
    s = 0.0
    m = 0.0
    for i in range(n):
        d = ls[i] - top
        s += q[i] * d
        m += d
    v = top + s - _penalty(q, nu, div)
    if nu > 0.0:
        v = _clamp_value(v, top, m, top - ls[0], n, nu)
    return v


@njit(cache=True)
def _risk_weights(losses, sigma, nu, div, q):
    """Full oracle: writes the maximiser ``q`` (original order) and returns the risk value."""
    return _risk_weights_ordered(losses, np.argsort(losses, kind="mergesort"), sigma, nu, div, q)


@njit(cache=True)
def _risk_weights_ordered(losses, order, sigma, nu, div, q):
    """:func:`_risk_weights` given a sorting permutation ``order`` of ``losses``."""
    n = losses.shape[0]
    ls = np.empty(n)
    for r in range(n):
        ls[r] = losses[order[r]]
    qs = np.empty(n)
    _weights_sorted(ls, sigma, nu, div, qs)
    for r in range(n):
        q[order[r]] = qs[r]
    return _risk_sorted(ls, qs, nu, div)


@njit(cache=True)
def _risk_weights_gathered(order, ls, sigma, nu, div, q, qs, work, iwork):
    """:func:`_risk_weights_ordered` given the sorted losses ``ls = losses[order]`` too;
    ``qs`` (length n), ``work`` and ``iwork`` are scratch space (see :func:`_weights_sorted_ws`;
    the fused paths of ``oracle_fused`` need ``3 n`` floats and ``2 n`` int64)."""
    n = ls.shape[0]
    if nu != 0.0:
        if work.shape[0] >= 3 * n and iwork.shape[0] >= 2 * n:
            if div == CHI2:
                return _chi2_runs_gathered(order, ls, sigma, nu, q, work, iwork)  # (stop 42)
            v = _kl_gathered(order, ls, sigma, nu, q, work, iwork)  # (NaN: declined)
            if not math.isnan(v):
                return v
        _weights_sorted_ws(ls, sigma, nu, div, qs, work, iwork)
        for r in range(n):
            q[order[r]] = qs[r]
        return _risk_sorted(ls, qs, nu, div)
    return _risk_weights_nu0(order, ls, sigma, q)


def _gathered(order, ls, sigma, nu, div, q, qs, work, iwork, radix=False):
    """:func:`_risk_weights_gathered` from Python (scratch of :func:`_scratch`): the kernel
    of the case called directly, so that a first fit compiles only the cases its oracle calls
    use (``nu = 0`` and chi-square: not the KL PAV and the general path, seconds of
    compilation). Chi-square: the compact ``_chi2_gathered`` below ``RUNS_MIN_N`` losses,
    else and for the torch batches (``radix``) the faster ``_chi2_runs_gathered``, whose
    compilation a first fit would pay."""
    if nu == 0.0:
        # (radix: the torch batches, whose kernel call ``oracle_batch`` sums as the kernel)
        if not radix and ls.shape[0] and n_ties(ls) == 0:
            return _distinct_nu0(order, ls, sigma, q)
        return _risk_weights_nu0(order, ls, sigma, q)
    if div == CHI2:
        if radix or ls.shape[0] >= RUNS_MIN_N:
            return _chi2_runs_gathered(order, ls, sigma, nu, q, work, iwork)
        return _chi2_gathered(order, ls, sigma, nu, q, work, iwork)
    return _risk_weights_gathered(order, ls, sigma, nu, div, q, qs, work, iwork)


def n_ties(ls):
    """How many neighbours of the sorted ``ls`` are equal (0: every loss is distinct; NaNs
    compare unequal)."""
    return int(np.count_nonzero(ls[1:] == ls[:-1]))


def _distinct_nu0(order, ls, sigma, q):
    """:func:`_risk_weights_nu0` of distinct losses in NumPy: every loss is a singleton,
    ``q[order[r]] = sigma[r]`` (the kernel's weights bit for bit), and the value ``top +
    sum_r sigma[r] (ls[r] - top)``, the sum by NumPy's pairwise ``np.add.reduce`` (the kernel
    adds in rank order: the values agree to rounding, within ``n eps sum_r |sigma[r] (ls[r] -
    top)|``; the same terms, so the same inf / NaN). ``np.cumsum`` (the kernel's order, bit
    for bit) took 35 of this function's 60 us at n = 8192, and the rows ``nu = 0`` of
    ``benchmarks/oracle_speed.py`` over 3x ``np.sort``. A fit's ``nu = 0`` evaluations (its
    certificate, O(1) per fit) then need no kernel: a first fit on continuous losses
    compiles one less (about 0.35 s)."""
    n = ls.shape[0]
    top = ls[n - 1]
    q[order] = sigma
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, as the kernel's
        t = ls - top
        t *= sigma
        return float(top + np.add.reduce(t))


_SCRATCH = threading.local()


def _scratch(n):
    """This thread's scratch arrays for an oracle call on ``n`` losses (kept for the last
    ``n`` only): reusing them saves the page faults of fresh allocations, which cost about
    as much as the PAV at n = 2e5. Never returned to a caller."""
    ws = getattr(_SCRATCH, "ws", None)
    if ws is None or ws[0] != n:
        ws = (n, np.empty(n, dtype=np.uint64), np.empty(n), np.empty(n), np.empty(3 * n),
              np.empty(2 * n, dtype=np.int64))
        _SCRATCH.ws = ws
    return ws[1:]


def risk_weights_sorted(losses, sigma, nu, div, q, srt=None):
    """:func:`risk_weights` that also returns its sort: ``(value, srt)`` with ``srt = (order,
    losses[order])`` in fresh arrays, or ``srt`` reused when given (it must be the sort of
    these ``losses``): the Newton solver evaluates the oracle at several ``nu`` and the pools
    of its Hessian on one vector of losses, one sort instead of three. The value and weights
    are those of :func:`risk_weights` bit for bit (the same choice of the tied oracle)."""
    if srt is None:
        srt = sorted_order(losses)
    v = _tied_or_none(losses, sigma, nu, div, q, srt[1])
    if v is not None:
        return v, srt
    _, _, qs, work, iwork = _scratch(losses.shape[0])
    return _gathered(srt[0], srt[1], sigma, nu, div, q, qs, work, iwork), srt


def _tied_or_none(losses, sigma, nu, div, q, ls=None):
    """:func:`oracle_ties.tied_risk_weights` where the sample predicts few values (and it
    does not decline), else None. ``ls``: the sorted losses, when the caller has them: if no
    two neighbours are equal, every loss is distinct (NaNs compare unequal), so
    :func:`few_values` would see no repeat in its sample and say False; it is then not
    called (one comparison pass instead of its kernel, which a first fit on continuous
    losses then does not compile: about 0.5 s)."""
    x = np.ascontiguousarray(losses, dtype=np.float64)
    if x.shape[0] < TIES_MIN_N:
        return None
    if x[0] == x[-1] == x[x.shape[0] // 2]:  # all equal? (w = 0): no kernel to compile
        v = equal_risk_weights(x, sigma, nu, div, q)
        if v is not None:
            return v
    if ls is not None and n_ties(ls) == 0:
        return None
    if few_values(x, x.view(np.uint64), TIES_MAX_GROUPS):
        return tied_risk_weights(x, sigma, nu, div, q)
    return None


def risk_weights(losses, sigma, nu, div, q, radix=False):
    """:func:`_risk_weights` from Python, sorted by :func:`sorted_order` (the same stable
    order): 10x faster than the stable merge sort compiled by numba at n = 1e6, 2-3x faster
    than NumPy's unstable ``np.argsort``. The result does not depend on the order of
    tied losses: tied losses get equal weights (averaged over the tie for ``nu = 0``; pooled
    by the PAV for ``nu > 0``, since ``l - 2 n nu sigma`` and ``exp(l / nu) / sigma``
    decrease along a tie), so the weights and the value are those of the stable sort up to
    rounding (a tie's weights can differ in the last bits by rank, so a tied sample may get
    its tie-mate's weight: 1e-13 at most in the tests). Losses with at most ``n / 4``
    distinct values (predicted from a sample) go to the tied oracle (``oracle_ties``: a sort
    of the values only, the PAV on the distinct values; weights and value equal to
    rounding). ``radix``: :func:`sorted_order`'s radix sort for batches up to
    ``RADIX_MAX`` (the torch losses). ``benchmarks/oracle_speed.py`` measures it against
    ``np.sort``; with ``radix``, a contiguous float64 batch up to ``RADIX_MAX`` runs all of
    this in one kernel call (``oracle_batch.batch_risk_weights``, bit for bit the same)."""
    if radix:
        v = batch_risk_weights(losses, sigma, nu, div, q)
        if v is not None:
            return v
    v = _tied_or_none(losses, sigma, nu, div, q)
    if v is not None:
        return v
    keys, ls, qs, work, iwork = _scratch(losses.shape[0])
    order, ls = sorted_order(losses, keys, ls, radix)
    return _gathered(order, ls, sigma, nu, div, q, qs, work, iwork, radix)


def spectral_risk_weights(losses, sigma, nu, div, q, plan=None, radix=False):
    """The oracle of ``Objective.risk_weights`` and ``risk.weights``. With ``plan`` (the
    spectrum's ``selection_plan``) given: the selection oracle (``select_risk_weights``) for
    ``nu = 0``, the box oracle (``box_select_weights``: CVaR, ``MaxLoss``) for ``nu > 0``;
    else, or when they decline, :func:`risk_weights` (the sort; ``radix`` as there)."""
    if plan is not None and losses.shape[0] == plan.n:
        if nu == 0.0:
            v = select_risk_weights(losses, sigma, plan, q)
        else:
            v = box_select_weights(losses, sigma, plan, nu, div, q)
        if v is not None:
            return v
    return risk_weights(losses, sigma, nu, div, q, radix)


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


# ------------------------------------------------------------------ incremental (Prospect)
@njit(cache=True, inline="always")
def _resume_scale(n, nu):
    """``(a, h)`` of :func:`_pav_chi2_resume`'s values ``h l - a sigma``: ``(2 n nu, 1)``
    (``l * 1.0`` is ``l``: the same bits as ``l - 2 n nu sigma``), or ``(nu, 1 / (2 n))``
    where ``2 n nu`` overflows (``nu >= ~1.8e308 / n``). A weight is ``(h l - block mean)
    / a``. (The other end, ``nu`` tiny next to ``|l|``, is a limit of this form: the values
    keep no reference loss, so ``a sigma`` is lost in ``l``; strict xfail in
    ``tests/test_faults_logspace.py``.)"""
    a = 2.0 * n * nu
    if a < np.inf:
        return a, 1.0
    return nu, 1.0 / (2.0 * n)


@njit(cache=True)
def _pav_chi2_resume(ls, sigma, nu, r0, sums, cnt, ends, snap_sum, snap_cnt):
    """Chi-square PAV on sorted ``ls`` reusing the blocks of an unchanged prefix ``ls[:r0]``.

    PAV is a left-to-right stack algorithm, so its stack after rank ``r`` depends on
    ``ls[:r + 1]`` only. ``snap_sum[r], snap_cnt[r]`` record the top block right after rank
    ``r`` was processed; the blocks below the top are untouched until they are pooled, so the
    stack after rank ``r0 - 1`` is rebuilt by walking these snapshots backwards (O(number of
    blocks)), and PAV resumes at ``r0``. Identical, operation for operation, to a full run.
    Returns the number of blocks; block ``b`` covers ranks ``[ends[b] - cnt[b], ends[b])`` and
    has value ``sums[b] / cnt[b]``. Call with ``r0 = 0`` first.

    The values pooled are ``l - 2 n nu sigma``, or ``l / (2 n) - nu sigma`` (the same blocks)
    where ``2 n nu`` overflows (:func:`_resume_scale`; before stop 43 that gave NaN weights).
    """
    n = ls.shape[0]
    a, h = _resume_scale(n, nu)
    nb = 0
    r = r0 - 1
    while r >= 0:
        nb += 1
        r -= snap_cnt[r]
    k = nb
    r = r0 - 1
    while r >= 0:
        k -= 1
        sums[k] = snap_sum[r]
        cnt[k] = snap_cnt[r]
        ends[k] = r + 1
        r -= snap_cnt[r]
    k = nb - 1
    for i in range(r0, n):
        k += 1
        sums[k] = ls[i] * h - a * sigma[i]
        cnt[k] = 1
        ends[k] = i + 1
        while k >= 1 and sums[k - 1] * cnt[k] >= sums[k] * cnt[k - 1]:
            sums[k - 1] += sums[k]
            cnt[k - 1] += cnt[k]
            ends[k - 1] = ends[k]
            k -= 1
        snap_sum[i] = sums[k]
        snap_cnt[i] = cnt[k]
    return k + 1


@njit(cache=True)
def _chi2_weight_at(ls, nu, r, sums, cnt, ends, nb):
    """Weight of rank ``r`` from the blocks of ``_pav_chi2_resume`` (binary search)."""
    lo = 0
    hi = nb - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ends[mid] > r:
            hi = mid
        else:
            lo = mid + 1
    a, h = _resume_scale(ls.shape[0], nu)
    v = (ls[r] * h - sums[lo] / cnt[lo]) / a
    return v if v > 0.0 else 0.0


@njit(cache=True)
def _chi2_weights_from_blocks(ls, nu, sums, cnt, nb, qs):
    """All weights (sorted order) from the blocks of ``_pav_chi2_resume``."""
    a, h = _resume_scale(ls.shape[0], nu)
    inv = 1.0 / a
    pos = 0
    for b in range(nb):
        c = sums[b] / cnt[b]
        for _ in range(cnt[b]):
            v = (ls[pos] * h - c) * inv
            qs[pos] = v if v > 0.0 else 0.0
            pos += 1


@njit(cache=True)
def _nu0_weight_at(ls, sigma, r):
    """``nu = 0`` weight of rank ``r``: ``sigma[r]``, averaged over a block of tied losses."""
    lo = r
    hi = r
    while lo > 0 and ls[lo - 1] == ls[r]:
        lo -= 1
    while hi < ls.shape[0] - 1 and ls[hi + 1] == ls[r]:
        hi += 1
    return _tie_mean(sigma, lo, hi - lo + 1)
