"""The sorting oracle's PAV fused with its scatter and its value (chi-square and KL in the
linear domain), split from :mod:`riskopt._kernels.oracles`, which re-exports these kernels.

Given the stable sort (``order``, ``ls = losses[order]``), :func:`_chi2_gathered` (or
:func:`_chi2_runs_gathered`) and :func:`_kl_gathered` run the pool-adjacent-violators pass
over the sorted losses and write the weights straight to ``q[order]``, with the risk value.
On a batch of uniform losses the chi-square PAV pools on most pushes (5.4k pools for 8.2k
pushes at n = 8192), on a branch that mispredicts about half the time, so
:func:`_chi2_runs_gathered` first groups the ranks into the maximal runs that the PAV pools
in any case (a value that does not rise: :func:`_chi2_runs`) by a branch-free pass, and runs
the stack PAV on the runs (:func:`_chi2_pav_runs`): the same blocks in exact arithmetic,
weights equal to rounding. The KL PAV pools rarely at the torch losses' shift costs (1.2k
pools for 8.2k pushes at ``nu = 0.1``), so :func:`_kl_pav` runs it over the ranks, with no
test in its loop but the pool's where the spectrum is positive. The passes after the PAV:
each rank's block by a prefix sum of block-start marks (:func:`_block_marks`; no loop per
block, whose exit mispredicts on blocks of one or two ranks), the weights by rank with the
scatter to ``q[order]``, and the value's sums reassociated (vectorised; :func:`_chi2_sums`,
:func:`_offset_sum`); KL takes its exponentials and its logarithms from ``oracle_vmath``.
:func:`_chi2_gathered` (the compact PAV of the default estimator's first fit) is kept below
``RUNS_MIN_N`` losses.
"""
import math

import numpy as np
from numba import njit

from .oracle_select import _clamp_value
from .oracle_vmath import exp_terms, log_all

#: ``_kl_weights_linear`` declines when ``(max l - min l) / nu`` exceeds this.
KL_LINEAR_RANGE = 600.0
# the positive normal float64 numbers: bits in [_NORMAL_BITS, _NORMAL_BITS + _NORMAL_SPAN)
_NORMAL_BITS = np.uint64(0x0010000000000000)
_NORMAL_SPAN = np.uint64(0x7FE0000000000000)
#: ``oracles`` runs :func:`_chi2_runs_gathered` instead of :func:`_chi2_gathered` from this
#: many losses on (and for the torch batches): below it the first fit's compile time counts.
RUNS_MIN_N = 1 << 15
#: :func:`_chi2_runs_gathered` hands a shift cost below this (the smallest normal float64,
#: 2**-1022) to :func:`_chi2_gathered`. The runs fold ``tnn sigma`` (``tnn = 2 n nu``) into
#: the loss sums ``Y``, and a weight is ``((l - R) - Y / C) / tnn``: where ``tnn sigma`` is
#: subnormal its rounding (up to 2**-1075, absolute) becomes ``2**-1075 / tnn`` in a weight,
#: 5 % of the weights' sum at ``nu = 5e-324``, n = 1000 (stop 42). From this ``nu`` on that
#: is at most ``2**-54 / n``. The compact PAV keeps the spectrum sums apart (weights
#: ``mean sigma + (loss part) / tnn``), as the general PAV does (stop 43:
#: ``tests/test_faults_logspace.py::test_chi2_weights_at_subnormal_shift_costs``).
RUNS_MIN_NU = 2.2250738585072014e-308


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
def _chi2_runs(ls, sigma, tnn, R, Y, C, E):
    """The maximal runs of ranks along which ``l_(r) - tnn sigma_r`` does not increase
    (the chi-square PAV's values; rank ``r`` joins the run of ``r - 1`` iff ``l_(r-1) -
    l_(r) >= tnn (sigma_(r-1) - sigma_r)``, the PAV's test of two single ranks): run ``k``
    has its first loss ``R[k]``, ``Y[k] = sum ((l - R[k]) - tnn sigma)`` over its ``C[k]``
    ranks (a float) and ends before rank ``E[k]``; returns their number. The PAV pools
    every such run (each rank's value is at most the mean of the ranks before it in the
    run), so it may start from them. Values relative to the run's first loss, as in
    ``oracles._weights_sorted_ws``: neither a common offset of the losses nor a tiny ``nu``
    costs precision (for tied losses ``Y`` is ``-tnn sum sigma`` to rounding). Branch-free
    (selects by multiplying with 0.0 / 1.0: numba leaves an ``if`` a branch, 57 against 18
    us at n = 8192, on which a PAV over uniform losses mispredicts half the time)."""
    n = ls.shape[0]
    ref = ls[0]
    acc = -tnn * sigma[0]
    c = 1.0
    R[0] = ref
    Y[0] = acc
    C[0] = c
    E[0] = 1
    k = 0
    for i in range(1, n):
        x = ls[i]
        s = sigma[i]
        g = np.float64((ls[i - 1] - x) >= tnn * (sigma[i - 1] - s))   # 1.0: the run goes on
        k += 1 - np.int64(g)
        ref = ref * g + x * (1.0 - g)
        acc = acc * g + ((x - ref) - tnn * s)
        c = c * g + 1.0
        R[k] = ref
        Y[k] = acc
        C[k] = c
        E[k] = i + 1
    return k + 1


@njit(cache=True)
def _chi2_pav_runs(R, Y, C, E, m):
    """The chi-square PAV of ``oracles._weights_sorted_ws`` (its pooling test, with the
    loss and spectrum sums of a block folded into ``Y``) over the ``m`` runs of
    :func:`_chi2_runs`, in place (the stack below the run read, its top in registers).
    Returns the number of blocks."""
    k = -1
    for j in range(m):
        rf = R[j]
        y = Y[j]
        c = C[j]
        e = E[j]
        while k >= 0:
            c1 = C[k]
            # pool iff mean(l - tnn sigma) of block k >= that of the top (times c1 c)
            if (R[k] - rf) * (c1 * c) + (Y[k] * c - y * c1) < 0.0:
                break
            y = Y[k] + (y + c * (rf - R[k]))
            rf = R[k]
            c += c1
            k -= 1
        k += 1
        R[k] = rf
        Y[k] = y
        C[k] = c
        E[k] = e
    return k + 1


@njit(cache=True)
def _block_marks(E, nb, n, mark):
    """``mark[r]`` = 1 where a block starts (but the first), else 0: the block of rank ``r``
    is the prefix sum of ``mark`` (no loop per block, whose exit mispredicts on short
    blocks)."""
    for r in range(n):
        mark[r] = 0
    for b in range(nb - 1):
        mark[E[b]] = 1


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
    slower at n = 8192, same process; in the KL PAV the former made no difference.) The
    new loss is first compared as a singleton held in registers (``c2 = 1``, ``a = 0``:
    the same products and sums as the general test, so the same bits), and stored only
    when it stays a block of its own: 0.75-0.8x the time of the general test on every push
    at n = 8192 (median, same process, both column orders; stop 41).

    The default estimator's first fit compiles this compact kernel (0.7-0.8 s cold, one
    function); :func:`_chi2_runs_gathered` (the same weights to rounding, 0.4-0.5x the time
    on a batch of 8192 uniform losses) costs 1-1.5 s more to compile (load ~10), so
    ``oracles`` calls it for the torch batches (``radix``) and from ``RUNS_MIN_N`` losses
    on."""
    n = ls.shape[0]
    start = iwork
    a = work[:n]
    t = work[n:2 * n]
    ref = work[2 * n:3 * n]
    tnn = 2.0 * n * nu
    k = -1
    for i in range(n):
        x = ls[i]
        sg = sigma[i]
        if k < 0:
            k = 0
            start[0] = i
            ref[0] = x
            a[0] = 0.0
            t[0] = sg
            continue
        # the test below with block k + 1 = the singleton {i} (c2 = 1, a = 0, ref = x)
        c1 = i - start[k]
        if (ref[k] - x) * c1 + a[k] < tnn * (t[k] - sg * c1):
            k += 1
            start[k] = i
            ref[k] = x
            a[k] = 0.0
            t[k] = sg
            continue
        a[k] += 0.0 + (x - ref[k])
        t[k] += sg
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
    # (nu n overflows, nu >= ~1.8e308 / n: nu (n pen), 0 for uniform weights, not inf * 0 = NaN)
    pen = nu * n * pen if nu * n < np.inf else nu * (n * pen)
    return _clamp_value(top + s - pen, top, m, top - ls[0], n, nu)


@njit(cache=True)
def _chi2_runs_gathered(order, ls, sigma, nu, q, work, iwork):
    """The chi-square weights of ``oracles._weights_sorted_ws`` (the same blocks in exact
    arithmetic), scattered to ``q[order]``, and the value of ``oracles._risk_sorted``.
    ``work`` (float) holds at least ``3 n``, ``iwork`` (int64) ``2 n`` (``n``: two arrays
    are allocated).

    The PAV of ``_weights_sorted_ws`` branches on every push (5.4k pools for 8.2k pushes on
    uniform losses at n = 8192), and its mispredictions cost most of its time. Here the
    runs that it pools in any case are found by a branch-free pass (:func:`_chi2_runs`:
    about half the ranks on such losses), the stack PAV runs on the runs
    (:func:`_chi2_pav_runs`), and the weights ``q_r = max(0, ((l_r - R_b) - Y_b / C_b) /
    (2 n nu))`` are filled by rank, each rank's block ``b`` from a prefix sum of marks
    (:func:`_block_marks`); the value's sums after (:func:`_chi2_sums`). The weights agree
    with ``_weights_sorted_ws`` to rounding (``tests/test_oracle_ties.py``)."""
    n = ls.shape[0]
    R = work[:n]
    Y = work[n:2 * n]
    C = work[2 * n:3 * n]
    E = iwork[:n]
    big = iwork.shape[0] >= 2 * n
    mark = iwork[n:2 * n] if big else np.empty(n, dtype=np.int64)
    tnn = 2.0 * n * nu
    if not (tnn < np.inf and nu >= RUNS_MIN_NU):
        # 2 n nu overflows (NaN weights here), or nu is subnormal (the products tnn sigma
        # folded into Y lose their bits): the compact PAV handles both
        return _chi2_gathered(order, ls, sigma, nu, q, work, iwork)
    nb = _chi2_pav_runs(R, Y, C, E, _chi2_runs(ls, sigma, tnn, R, Y, C, E))
    _block_marks(E, nb, n, mark)
    for b in range(nb):
        Y[b] = Y[b] / C[b]
    # (a product by 1 / tnn where that is finite: a division per rank took 12 of 50 us)
    inv = 1.0 / tnn
    fast = inv < np.inf
    vs = iwork.view(np.float64)[n:2 * n] if big else np.empty(n)
    bi = 0
    for r in range(n):
        bi += mark[r]                  # (read before the same slot is written: vs)
        d = (ls[r] - R[bi]) - Y[bi]
        v = d * inv if fast else d / tnn
        v = max(v, 0.0)
        q[order[r]] = v
        vs[r] = v
    top = ls[n - 1]
    s, m, pen = _chi2_sums(ls, vs, top, 1.0 / n)
    # (nu n overflows, nu >= ~1.8e308 / n: nu (n pen), 0 for uniform weights, not inf * 0 = NaN)
    pen = nu * n * pen if nu * n < np.inf else nu * (n * pen)
    return _clamp_value(top + s - pen, top, m, top - ls[0], n, nu)


@njit(cache=True, fastmath={"reassoc", "contract"})
def _chi2_sums(ls, v, top, inv_n):
    """``sum v (l - top)``, ``sum (l - top)`` and ``sum (v - 1/n)^2`` (the chi-square
    value's sums; reassociated: vectorised)."""
    s = 0.0
    m = 0.0
    pen = 0.0
    for r in range(ls.shape[0]):
        d = ls[r] - top
        s += v[r] * d
        m += d
        e = v[r] - inv_n
        pen += e * e
    return s, m, pen


@njit(cache=True, fastmath={"reassoc", "contract"})
def _offset_sum(ls, top):
    """``sum (l - top)`` (reassociated: vectorised)."""
    m = 0.0
    for r in range(ls.shape[0]):
        m += ls[r] - top
    return m


@njit(cache=True, inline="always")
def _push(A, S, E, k, a, s, end):
    """Push the block ``(a, s)`` ending before rank ``end`` above block ``k`` of the KL PAV's
    stack; returns its index ``k + 1``."""
    k += 1
    A[k] = a
    S[k] = s
    E[k] = end
    return k


@njit(cache=True)
def _kl_pav(e, sigma, A, S, E):
    """The KL PAV of :func:`_kl_blocks` over the ranks (terms ``e``, ascending losses,
    spectrum ``sigma``) in one pass, the stack's top block in registers: block ``k`` has
    ``A[k] = sum e``, ``S[k] = sum sigma`` and ends before rank ``E[k]``. Returns the number
    of blocks, or -1 as :func:`_kl_blocks` (a product that decides a pool <= 1e-290).

    Where every ``sigma`` is positive and ``e_0 min sigma > 1e-280`` (no block sum is less
    than its least term, so no product the PAV compares can come near 1e-290) the loop has
    no test but the pool's (the push of a rank that does not pool, the likely branch: 1.2k
    pools for 8.2k pushes on 8192 uniform losses in [0, 3] at ``nu = 0.1``): 14 us there,
    against 27 us with the tests of :func:`_kl_pav_checked` and 39 us for the branch-free
    runs pass plus the PAV over the runs that it replaces (probe, min of blocks, one
    process). Otherwise (a zero of the spectrum, a tiny product) :func:`_kl_pav_checked`
    redoes the pass."""
    n = e.shape[0]
    a = e[0]
    s = sigma[0]
    mn = s
    k = -1
    for i in range(1, n):
        ei = e[i]
        si = sigma[i]
        mn = min(mn, si)
        if a * si < ei * s:            # no pool: push the top, the new rank is the top
            k = _push(A, S, E, k, a, s, i)
            a = ei
            s = si
        else:
            a += ei
            s += si
            while k >= 0 and A[k] * s >= a * S[k]:
                a += A[k]
                s += S[k]
                k -= 1
    if not (mn > 0.0 and e[0] * mn > 1e-280):
        return _kl_pav_checked(e, sigma, A, S, E)
    return _push(A, S, E, k, a, s, n) + 1


@njit(cache=True)
def _kl_pav_checked(e, sigma, A, S, E):
    """:func:`_kl_pav` with the tests of :func:`_kl_blocks`: a block without spectrum mass is
    pooled with the next, and -1 is returned where a product that decides a pool is <= 1e-290
    between two blocks with spectrum mass (too close to underflow: the log form decides)."""
    n = e.shape[0]
    a = e[0]
    s = sigma[0]
    k = -1
    bad = False
    for i in range(1, n):
        ei = e[i]
        si = sigma[i]
        lhs = a * si
        rhs = ei * s
        # pool iff the top has no spectrum mass, or the new rank has and lhs >= rhs
        if s != 0.0 and (si == 0.0 or lhs < rhs):
            bad |= min(lhs, rhs) <= 1e-290 and si != 0.0
            k = _push(A, S, E, k, a, s, i)
            a = ei
            s = si
            continue
        bad |= s != 0.0 and min(lhs, rhs) <= 1e-290
        a += ei
        s += si
        while k >= 0:
            sk = S[k]
            if sk != 0.0:              # a block without spectrum mass is always pooled
                if s == 0.0:
                    break
                lhs = A[k] * s
                rhs = a * sk
                if not (lhs > 1e-290 and rhs > 1e-290):
                    return -1
                if lhs < rhs:
                    break
            a += A[k]
            s += sk
            k -= 1
    nb = _push(A, S, E, k, a, s, n) + 1
    return -1 if bad else nb


@njit(cache=True, error_model="numpy")
def _kl_factors(A, S, y, nb, n):
    """The blocks' factors ``A[b] = S_b / A_b`` (``q_r = A[b] e_r``) and the arguments of
    their logarithms ``y[b] = n S_b / A_b`` (1 for a block without spectrum mass) in one
    vectorised loop; returns how many ``y`` are not positive normal numbers (counted on
    their bits: vectorised, NaN counted), for which :func:`log_all` does not hold."""
    for b in range(nb):
        f = S[b] / A[b]
        A[b] = f
        y[b] = n * f if S[b] > 0.0 else 1.0
    yb = y.view(np.uint64)
    bad = 0
    for b in range(nb):
        bad += np.int64(yb[b] - _NORMAL_BITS >= _NORMAL_SPAN)
    return bad


@njit(cache=True, fastmath={"reassoc", "contract"})
def _dot(x, y):
    """``sum x y`` (reassociated: vectorised)."""
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@njit(cache=True, error_model="numpy")
def _kl_gathered(order, ls, sigma, nu, q, work, iwork):
    """The KL weights of :func:`_kl_weights_linear` (the same blocks in exact arithmetic:
    :func:`_kl_pav`), scattered to ``q[order]``, and the value from the blocks:
    with ``q_r = S_b e_r / A_b``, ``log(n q_r) = log(n S_b / A_b) + (l_r - max l) / nu`` and
    ``sum_b q_r = S_b``, so ``q.l - nu KL(q)`` is ``max l - nu sum_b S_b log(n S_b / A_b)``
    (one logarithm per block instead of one per loss; clamped as ``oracles._risk_sorted``).
    ``work`` (float) holds at least ``3 n``, ``iwork`` (int64) ``2 n`` (``n``: a mark array
    is allocated). Returns NaN when the linear PAV declines (nothing scattered then)."""
    n = ls.shape[0]
    e = work[:n]
    A = work[n:2 * n]
    S = work[2 * n:3 * n]
    E = iwork[:n]
    top = ls[n - 1]
    if (top - ls[0]) / nu > KL_LINEAR_RANGE:
        return np.nan
    exp_terms(ls, top, nu, e)        # vectorised (oracle_vmath): 2-3x a loop of math.exp
    nb = _kl_pav(e, sigma, A, S, E)
    if nb < 0:
        return np.nan
    # (one byte per rank: 8 KiB at n = 8192 instead of 64, a smaller working set)
    mark = iwork[n:2 * n].view(np.int8)[:n] if iwork.shape[0] >= 2 * n else \
        np.empty(n, dtype=np.int8)
    _block_marks(E, nb, n, mark)
    y = iwork[:nb].view(np.float64)  # (E is dead once the marks are out)
    bad = _kl_factors(A, S, y, nb, n)
    bi = 0
    for r in range(n):
        bi += mark[r]
        q[order[r]] = A[bi] * e[r]
    mm = _offset_sum(ls, top)
    if bad == 0:
        log_all(y, y)              # vectorised (oracle_vmath)
    else:
        for b in range(nb):
            y[b] = math.log(y[b])
    pen = _dot(S[:nb], y)
    return _clamp_value(top - nu * pen, top, mm, top - ls[0], n, nu)
