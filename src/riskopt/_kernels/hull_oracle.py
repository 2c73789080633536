"""Incremental exact oracle for every spectrum with a chi-square or KL shift cost.

The PAV of ``oracles._weights_sorted_ws`` is the slope of the greatest convex minorant (GCM)
of a cumulative-sum diagram over the sorted losses ``l_(1) <= ... <= l_(n)``:

* chi-square: points ``(k, Y(k))``, ``Y(k) = sum_{r <= k} (l_(r) - L0) - A S(k)``, ``A = 2 n
  nu``, ``S(k) = sigma_1 + ... + sigma_k``; the rank-``r`` weight is ``q = max(0, (l_(r) - L0 -
  s) / A)`` with ``s`` the GCM's slope over rank ``r``;
* KL: points ``(S(k), E(k))``, ``E(k) = sum_{r <= k} exp((l_(r) - L0) / nu)`` (a weighted
  isotonic regression of ``exp(l / nu) / sigma`` with weights ``sigma``); ``q = exp((l_(r) -
  L0) / nu) / s``.

(``L0`` is a reference loss: the median of the table at the build for chi-square, its
mid-range for KL.) The structure is the blocked sorted list of ``rank_oracle`` (the loss
multiset in value-ordered chunks), with each value's term ``f(l)`` (``l - L0`` or ``exp((l -
L0) / nu)``) beside it and a segment tree over the chunks holding per node its count ``m``,
the sum ``F`` of its terms and its smallest and largest terms ``f_lo``, ``f_hi``. Nothing in it
depends on ranks, so a loss that moves across many ranks costs one deletion and one
insertion (``O(log n + B)``, plus the splits and merges of ``rank_oracle``).

Query (the weight of one loss ``x``, at rank ``r``: the first of its tie). The GCM segment over
``r`` joins vertices ``p < r <= q`` and is the root of ``h_L(s) = h_R(s)``, ``h_L(s) =
min_{k < r} G_s(k)``, ``h_R(s) = min_{k >= r} G_s(k)``, ``G_s(k) = Y(k) - s W(k)``: a Newton
(Dinkelbach) iteration from ``(p, q) = (r - 1, r)``: ``s`` = the slope of ``(p, q)``, then ``p``
and ``q`` the minimisers of ``G_s`` on either side, until neither moves. Each minimisation is a
branch-and-bound descent of the segment tree: over a node of ``m`` values after ``P`` ranks,
``Y(P + t) = Y(P) + U(t)`` with ``U`` convex (sorted terms), so ``U(t) >= t f_lo`` and ``U(t)
>= F - (m - t) f_hi``, and ``-A S(P + t) - s W(P + t)`` is concave in ``t`` (``sigma``
non-decreasing), so each linear bound plus the concave part is least at ``t = 0`` or ``t =
m``: an O(1) lower bound of ``G_s`` over the node. Nodes whose bound is not below the best
point found are pruned; leaves are scanned (``O(B)``). The final slope is computed from the
range sum of the terms between ``p`` and ``q`` (segment-tree range query: no cancellation of
prefix sums) and the double-double prefix sums of ``sigma``.

Cost per query: O(iterations x (nodes visited x log n + chunks scanned x B)). The iterations
and the chunks scanned depend on the table (how flat ``G_s`` is near its minimisers), not on
the ranks the last update crossed; no bound is proved here beyond O(n) per query (every
chunk scanned), which the benchmarks measure: ``benchmarks/prospect_incremental.py`` (whole
passes) and ``benchmarks/prospect_oracle_steps.py`` (the update and the query of a step apart,
by chunk size: the query, 1.5-3.5 Newton iterations of one tree descent each, is 60-80% of
the oracle's time, the update the rest). The iteration is capped (``MAX_NEWTON``); a query
that does not settle returns ``nan`` and the caller uses the O(n) PAV (``_hull_weight_full``).

KL terms: ``L0`` is the mid-range of the table at the build; a loss more than ``KL_WINDOW nu``
from it triggers a rebuild about the new mid-range (O(n)); a table spanning more than ``2
KL_RANGE nu`` is marked wide and left to the full PAV (as ``incremental_pav`` does).
"""
import numpy as np
from numba import njit

from .oracles import CHI2, _weights_sorted_ws
from .rank_oracle import (_fterm, _rank_alloc, _rank_build, _rank_count, _rank_locate,
                          _rank_values, _replace_at, chunk_size)

MAX_NEWTON = 64   #: Newton iterations before a query gives up (the caller runs the full PAV)
KL_RANGE = 600.0  #: a KL table spanning more than 2 KL_RANGE nu is left to the full PAV
KL_WINDOW = 650.0  #: |l - L0| / nu beyond which the KL terms are rebuilt about the mid-range
_EPS4 = 4.0 * 2.220446049250313e-16
STACK = 256
#: the warm-start cache of ``_hull_weight`` keeps one segment per ``2**CACHE_SHIFT`` ranks
CACHE_SHIFT = 5
#: a segment found is filed for the slots it covers, up to this many either side of the query's
CACHE_SPAN = 4
#: the hull's chunk size is ``rank_oracle.chunk_size`` capped here: a query scans whole chunks
#: (3-11 per query). At n = 2e5 (``benchmarks/results/prospect_incremental/oracle_steps_*``)
#: B = 128 cost 10-20% more per step than B = 32 or 64 from the perturbed optimum and the same
#: within the noise from the default start; B = 16 pays for the O(n / B) re-layouts.
HULL_B = 32


@njit(cache=True)
def hull_chunk(n):
    """The chunk size of the hull oracle for ``n`` losses: ``min(chunk_size(n), HULL_B)``."""
    b = chunk_size(n)
    return b if b < HULL_B else HULL_B


@njit(cache=True)
def _hull_alloc(n, B):
    return _rank_alloc(n, B, True)


@njit(cache=True, _nrt=False)
def _hull_build(ls, sigma, nu, div, R):
    """Fill ``R`` with the sorted losses ``ls``; sets ``fpar = [L0, nu, A, kind, wide]`` and
    ``meta[5]`` (the number of leading zeros of ``sigma``, KL). ``wide = 1``: a KL table
    spanning more than ``2 KL_RANGE nu`` (its terms are not all representable: the caller
    uses the full PAV, ``_hull_weight_full``)."""
    fpar = R[14]
    n = ls.shape[0]
    fpar[4] = 0.0
    if div == CHI2:
        fpar[0] = ls[n // 2]
        fpar[2] = 2.0 * n * nu
        fpar[3] = 0.0
    else:
        fpar[0] = 0.5 * (ls[0] + ls[n - 1])
        fpar[2] = 0.0
        fpar[3] = 1.0
        if ls[n - 1] - ls[0] > 2.0 * KL_RANGE * nu:
            fpar[4] = 1.0
    fpar[1] = nu
    _rank_build(ls, sigma, R)
    _set_zeros(R, sigma)


@njit(cache=True, _nrt=False, inline="always")
def _cpart(Shi, fpar, k, s):
    """The concave part ``-A S(k) - s W(k)`` of ``G_s(k)``."""
    if fpar[3] == 0.0:
        return -(fpar[2] * Shi[k] + s * k)
    return -s * Shi[k]


@njit(cache=True, _nrt=False, inline="always")
def _locate(R, e):
    """``(logical chunk, ranks before it, sum of the terms before it)`` of the loss of
    0-based rank ``e``."""
    return _descend(R, 1, 0, 0.0, e)


@njit(cache=True, _nrt=False, inline="always")
def _descend(R, v, P, acc, e):
    """:func:`_locate` from node ``v`` (``P`` ranks and term sum ``acc`` before it)."""
    tc = R[10]
    tF = R[11]
    size = R[5][4]
    kk = e - P
    while v < size:
        a = 2 * v
        if kk < tc[a]:
            v = a
        else:
            P += tc[a]
            acc += tF[a]
            kk -= tc[a]
            v = a + 1
    return v - size, P, acc


@njit(cache=True, _nrt=False, inline="always")
def _locate_pq(R, p, q):
    """:func:`_locate` of the 0-based ranks ``p`` and ``q - 1`` (``p < q``: the first and
    the last loss of the segment ``(p, q)``) in one descent down to where their paths part:
    ``(j0, P0, A0, j1, P1, A1)``."""
    tc = R[10]
    tF = R[11]
    size = R[5][4]
    v = 1
    P = 0
    acc = 0.0
    e1 = q - 1
    while v < size:
        a = 2 * v
        m = P + tc[a]
        if p < m:
            if e1 >= m:
                break
            v = a
        else:
            P = m
            acc += tF[a]
            v = a + 1
    j0, P0, A0 = _descend(R, v, P, acc, p)
    j1, P1, A1 = _descend(R, v, P, acc, e1)
    return j0, P0, A0, j1, P1, A1


@njit(cache=True, _nrt=False, inline="always")
def _chunk_sum(FV, p, a, b):
    """Sum of the terms ``FV[p, a:b]`` in order."""
    acc = 0.0
    for j in range(a, b):
        acc += FV[p, j]
    return acc


@njit(cache=True, _nrt=False, inline="always")
def _range_at(R, k0, k1, j0, P0, j1, P1):
    """Sum of the terms of the losses of ranks ``k0 + 1 .. k1`` (1-based), summed over the
    covering chunks and tree nodes (no difference of prefix sums), from the locations ``(j0,
    P0)``, ``(j1, P1)`` of the 0-based ranks ``k0`` and ``k1 - 1`` (:func:`_locate_pq`)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    size = meta[4]
    p0 = lid[j0]
    if j0 == j1:
        return _chunk_sum(FV, p0, k0 - P0, k1 - P0)
    acc = _chunk_sum(FV, p0, k0 - P0, cnt[p0])
    acc2 = _chunk_sum(FV, lid[j1], 0, k1 - P1)
    # full chunks j0 + 1 .. j1 - 1: bottom-up segment-tree range sum
    mid = 0.0
    lo = j0 + 1 + size
    hi = j1 + size  # exclusive
    while lo < hi:
        if lo & 1:
            mid += tF[lo]
            lo += 1
        if hi & 1:
            hi -= 1
            mid += tF[hi]
        lo >>= 1
        hi >>= 1
    return acc + mid + acc2


@njit(cache=True, _nrt=False, inline="always")
def _node_bound(Shi, fpar, s, P, Fp, m, F, flo, fhi):
    """Lower bound of ``G_s`` over the points ``P .. P + m`` of a node, and its rounding
    allowance."""
    a0 = Fp + _cpart(Shi, fpar, P, s)
    aM = Fp + _cpart(Shi, fpar, P + m, s)
    b1 = aM + m * flo
    b2 = a0 + (F - m * fhi)
    b3 = aM + F
    lb1 = a0 if a0 < b1 else b1
    lb2 = b2 if b2 < b3 else b3
    lb = lb1 if lb1 > lb2 else lb2
    tol = _EPS4 * (abs(a0) + abs(aM) + abs(F) + m * (abs(flo) + abs(fhi)))
    return lb - tol


@njit(cache=True, _nrt=False, inline="always")
def _push(sv, sP, sF, sb, h, v, P, Fp, lb, best):
    """Push node ``v`` (``P`` ranks and term sum ``Fp`` before it, lower bound ``lb``) on the
    search stack of height ``h`` unless its bound cannot beat ``best``; the new height."""
    if lb < best:
        sv[h] = v
        sP[h] = P
        sF[h] = Fp
        sb[h] = lb
        return h + 1
    return h


@njit(cache=True, _nrt=False, inline="always")
def _search(R, s, r, zlo, bl, pl, yl, br, pr, yr, sv, sP, sF, sb):
    """Minimise ``G_s(k) = Y(k) - A S(k) - s W(k)`` on both sides of rank ``r`` in one
    descent of the tree: over ``k`` in ``[0, r - 1]`` (the left side, from the known point
    ``bl = G_s(pl)``, ``yl = Y(pl)``) and over ``k`` in ``[zlo, n]`` (the right side, from
    ``br``, ``pr``, ``yr``); a point replaces a side's best only when strictly lower. A node
    is pruned when its bound beats neither best of the sides it reaches; the path to ``r``
    and ``r``'s chunk, which both sides need, are visited once. Returns ``(bl, pl, yl, br,
    pr, yr, leaves scanned)``."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    size = meta[4]
    scanned = 0
    if 0.0 < bl:  # the origin (the left side always reaches it)
        bl = 0.0
        pl = 0
        yl = 0.0
    khl = r - 1
    sv[0] = 1
    sP[0] = 0
    sF[0] = 0.0
    sb[0] = -np.inf
    h = 1
    while h > 0:
        h -= 1
        v = sv[h]
        P = sP[h]
        Fp = sF[h]
        m = tc[v]
        # the points P + 1 .. P + m: the sides they reach, the best the bound must beat
        thr = -np.inf
        if P + 1 <= khl:
            thr = bl
        if P + m >= zlo and br > thr:
            thr = br
        if sb[h] >= thr:
            continue
        if v >= size:  # a chunk: scan its points on either side
            p = lid[v - size]
            scanned += 1
            acc = Fp
            t1 = m
            for t in range(1, t1 + 1):
                acc += FV[p, t - 1]
                k = P + t
                if k <= khl:
                    g = acc + _cpart(Shi, fpar, k, s)
                    if g < bl:
                        bl = g
                        pl = k
                        yl = acc
                elif k >= zlo:
                    g = acc + _cpart(Shi, fpar, k, s)
                    if g < br:
                        br = g
                        pr = k
                        yr = acc
            continue
        a = 2 * v
        b = a + 1
        ma = tc[a]
        mb = m - ma
        # children: their point ranges [P + 1, P + ma] and [P + ma + 1, P + m], the best of
        # the sides each reaches
        ta = -np.inf
        if ma > 0:
            if P + 1 <= khl:
                ta = bl
            if P + ma >= zlo and br > ta:
                ta = br
        tb = -np.inf
        if mb > 0:
            if P + ma + 1 <= khl:
                tb = bl
            if P + m >= zlo and br > tb:
                tb = br
        la = np.inf
        lb = np.inf
        if ta > -np.inf:
            la = _node_bound(Shi, fpar, s, P, Fp, ma, tF[a], tlo[a], thi[a])
        if tb > -np.inf:
            lb = _node_bound(Shi, fpar, s, P + ma, Fp + tF[a], mb, tF[b], tlo[b], thi[b])
        if h + 2 > sv.shape[0]:
            return np.nan, -1, 0.0, np.nan, -1, 0.0, scanned
        # push the child with the larger bound first (the smaller one is searched first)
        if la <= lb:
            h = _push(sv, sP, sF, sb, h, b, P + ma, Fp + tF[a], lb, tb)
            h = _push(sv, sP, sF, sb, h, a, P, Fp, la, ta)
        else:
            h = _push(sv, sP, sF, sb, h, a, P, Fp, la, ta)
            h = _push(sv, sP, sF, sb, h, b, P + ma, Fp + tF[a], lb, tb)
    return bl, pl, yl, br, pr, yr, scanned


@njit(cache=True, _nrt=False, inline="always")
def _slope(R, p, q, yp, yq):
    """The slope between points ``p < q`` from the quick prefix values (the iteration)."""
    Shi = R[7]
    fpar = R[14]
    if fpar[3] == 0.0:
        return ((yq - yp) - fpar[2] * (Shi[q] - Shi[p])) / (q - p)
    return (yq - yp) / (Shi[q] - Shi[p])


@njit(cache=True, _nrt=False, error_model="numpy")
def _hull_weight(R, x, work, stats):
    """The weight of a loss ``x`` of the multiset, or ``nan`` when the iteration does not
    settle in ``MAX_NEWTON`` steps. ``work``: ``_hull_scratch(n)`` (the search stacks and
    the warm-start cache, which changes where the iteration starts, not the segment it
    certifies); ``stats[0]`` += Newton iterations, ``stats[1]`` += chunks scanned."""
    return _weight_at(R, x, work, stats)[0]


@njit(cache=True, _nrt=False, error_model="numpy")
def _hull_weight_at(R, x, work, stats):
    """:func:`_hull_weight` and where ``x`` is, ``(weight, k, j)`` (``rank_oracle._rank_locate``)
    for :func:`_hull_move_at`, when ``x`` is the loss about to change: the step's query and
    update share one search (stop 42)."""
    return _weight_at(R, x, work, stats)


@njit(cache=True, _nrt=False, error_model="numpy", inline="always")
def _weight_at(R, x, work, stats):
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    sv, sP, sF, sb, cp, cq = work
    kx, jx, a = _rank_locate(R, x)
    r = a + 1
    fx = _fterm(fpar, x)
    zlo = r
    if fpar[3] != 0.0:
        z = meta[5]  # leading zeros of sigma: the block of r <= z reaches past them
        if zlo < z + 1:
            zlo = z + 1
    # the warm start: the segment last found for a rank of r's slot, if it still covers r
    slot = r >> CACHE_SHIFT
    p = -1
    q = -1
    if slot < cp.shape[0]:
        p = cp[slot]
        q = cq[slot]
    if not (0 <= p < r <= q <= meta[3] and q >= zlo):
        p = a
        q = r if r >= zlo else zlo
    # the two ends located in one descent; their locations also serve the final range sum
    # when the iteration ends where it started (a warm start that holds)
    p0 = p
    q0 = q
    j0, P0, A0, j1, P1, A1 = _locate_pq(R, p, q)
    yp = A0 + _chunk_sum(FV, lid[j0], 0, p - P0)
    yq = A1 + _chunk_sum(FV, lid[j1], 0, q - P1)
    it = 0
    ok = False
    while it < MAX_NEWTON:
        it += 1
        s = _slope(R, p, q, yp, yq)
        gp = yp + _cpart(Shi, fpar, p, s)
        gq = yq + _cpart(Shi, fpar, q, s)
        # a point replaces p (q) only when lower by more than the rounding of G there
        # (KL terms are positive: the rounding of a prefix sum is relative to it)
        fm = abs(tlo[1]) if abs(tlo[1]) > abs(thi[1]) else abs(thi[1])
        if fpar[3] != 0.0:
            fm = 0.0
        tp = _EPS4 * 4.0 * (abs(yp) + abs(gp - yp) + p * fm)
        tq = _EPS4 * 4.0 * (abs(yq) + abs(gq - yq) + q * fm)
        g2, p2, yp2, g3, q2, yq2, sc = _search(R, s, r, zlo, gp - tp, p, yp, gq - tq, q, yq,
                                               sv, sP, sF, sb)
        if stats.shape[0] >= 2:
            stats[1] += sc
        if p2 < 0 or q2 < 0 or g2 != g2 or g3 != g3:
            break
        if p2 == p and q2 == q:
            ok = True
            break
        p = p2
        q = q2
        yp = yp2
        yq = yq2
    if stats.shape[0] >= 2:
        stats[0] += it
    if not ok:
        return np.nan, kx, jx
    # the segment covers ranks p + 1 .. q: file it for their slots (at most CACHE_SPAN)
    s0 = (p + 1) >> CACHE_SHIFT
    s1 = q >> CACHE_SHIFT
    slot = r >> CACHE_SHIFT
    if s0 < slot - CACHE_SPAN:
        s0 = slot - CACHE_SPAN
    if s1 > slot + CACHE_SPAN:
        s1 = slot + CACHE_SPAN
    if s1 >= cp.shape[0]:
        s1 = cp.shape[0] - 1
    for k in range(s0, s1 + 1):
        cp[k] = p
        cq[k] = q
    if p != p0 or q != q0:
        j0, P0, A0, j1, P1, A1 = _locate_pq(R, p, q)
    dy = _range_at(R, p, q, j0, P0, j1, P1)
    if fpar[3] == 0.0:
        ds = (Shi[q] - Shi[p]) + (Slo[q] - Slo[p])
        c = (dy - fpar[2] * ds) / (q - p)
        v = ((x - fpar[0]) - c) / fpar[2]
        return (v if v > 0.0 else 0.0), kx, jx
    dw = (Shi[q] - Shi[p]) + (Slo[q] - Slo[p])
    return fx * (dw / dy), kx, jx


@njit(cache=True)
def _hull_weight_full(R, sigma, x):
    """The weight of ``x`` by the O(n) PAV over the multiset (the fallback)."""
    fpar = R[14]
    n = R[5][3]
    ls = np.empty(n)
    _rank_values(R, ls)
    qs = np.empty(n)
    div = CHI2 if fpar[3] == 0.0 else 1
    _weights_sorted_ws(ls, sigma, fpar[1], div, qs, np.empty(2 * n), np.empty(n, dtype=np.int64))
    a = _rank_count(R, x, False)
    return qs[a]


@njit(cache=True)
def _hull_scratch(n=0):
    """``_hull_weight``'s scratch: the search stacks and, for a table of ``n`` losses, the
    warm-start cache (the segment ``(p, q)`` last found per slot of ``2**CACHE_SHIFT`` ranks;
    ``n = 0``: none, every query starts from ``(r - 1, r)``)."""
    m = (n >> CACHE_SHIFT) + 2 if n > 0 else 0
    return (np.empty(STACK, dtype=np.int64), np.empty(STACK, dtype=np.int64),
            np.empty(STACK), np.empty(STACK), np.full(m, -1, dtype=np.int64),
            np.full(m, -1, dtype=np.int64))


@njit(cache=True, _nrt=False)
def _hull_move(R, old, new):
    """:func:`_hull_replace` when it needs no KL rebuild (the step's update): compiled
    without reference counting, so that a reference-counted caller (the pass) passes ``R``
    without counting the references of its 15 arrays at each call (through ``_hull_replace``,
    an allocating and so reference-counted function, the update cost 1.5-1.7x as much at n =
    2e4: ``benchmarks/prospect_oracle_steps.py``, stop 40). Returns False, changing nothing,
    when a KL table needs the rebuild of :func:`_hull_replace` (or is wide)."""
    return _hull_move_at(R, -1, 0, old, new)


@njit(cache=True, _nrt=False)
def _hull_move_at(R, k, j, old, new):
    """:func:`_hull_move` with ``old`` at position ``j`` of logical chunk ``k`` (from
    :func:`_hull_weight_at`, the table unchanged since; ``k < 0``: located here)."""
    fpar = R[14]
    if fpar[3] != 0.0 and (fpar[4] != 0.0 or abs(new - fpar[0]) > KL_WINDOW * fpar[1]):
        return False
    if old != new:
        if k < 0:
            k, j, _ = _rank_locate(R, old)
        _replace_at(R, k, j, old, new)
    return True


@njit(cache=True)
def _hull_replace(R, sigma, old, new):
    """One loss changes from ``old`` to ``new``. KL: a loss more than ``KL_WINDOW nu`` from
    ``L0`` rebuilds the terms about the new table's mid-range (O(n)), or marks the table wide
    (``fpar[4] = 1``, see ``_hull_build``); a wide table is rebuilt at every update until it
    fits again. Returns False when the table is wide. (A caller that runs with reference
    counting calls :func:`_hull_move` first, this only when that returns False.)"""
    if _hull_move(R, old, new):
        return True
    fpar = R[14]
    n = R[5][3]
    ls = np.empty(n)
    _rank_values(R, ls)
    _rank_replace_sorted(ls, old, new)
    _hull_build(ls, sigma, fpar[1], 1, R)
    return fpar[4] == 0.0


@njit(cache=True)
def _rank_replace_sorted(ls, old, new):
    """Replace one copy of ``old`` by ``new`` in the sorted array ``ls`` (kept sorted)."""
    n = ls.shape[0]
    i = np.searchsorted(ls, old)
    for j in range(i, n - 1):
        ls[j] = ls[j + 1]
    ls[n - 1] = new
    j = n - 1
    while j > 0 and ls[j - 1] > new:
        ls[j] = ls[j - 1]
        j -= 1
    ls[j] = new


@njit(cache=True, _nrt=False)
def _set_zeros(R, sigma):
    meta = R[5]
    z = 0
    while z < sigma.shape[0] and sigma[z] == 0.0:
        z += 1
    meta[5] = z
