"""Incremental exact oracle for Prospect: a balanced tree of block hulls.

The exact weights of ``max_{q in P(sigma)} q.l - nu D(q || 1/n)`` (``oracles``, Mehta et al.
2024, Appendix B-C) are the pool-adjacent-violators (PAV) solution on the sorted losses. The PAV
blocks are the maximal segments of the greatest convex minorant (GCM) of a cumulative-sum
diagram, and the weight of rank ``r`` depends only on ``l_(r)`` and on the slope of the GCM
over element ``r`` (the segment from point ``r`` to point ``r + 1``):

* chi-square (``D = n ||q - 1/n||^2``): points ``P_k = (k, sum_{j<k} (l_(j) - L0 - 2 n nu
  sigma_j))``; the slope is ``c_r - L0`` (``c`` the PAV solution of Subroutine 1) and
  ``q_(r) = max(0, (l_(r) - L0 - slope) / (2 n nu))``;
* KL (``D = sum q log(n q)``): Subroutine 2 pools ``log sum exp(l/nu) - log sum sigma``, i.e.
  the weighted isotonic regression of ``exp(l/nu) / sigma`` with weights ``sigma``, whose
  blocks are those of the GCM of ``(sum sigma, sum exp(l/nu))``. Zero ``sigma`` would give
  vertical steps, so the diagram is read with its axes swapped and the second one negated:
  ``P_k = (sum_{j<k} e_j, -sum_{j<k} sigma_j)``, ``e_j = exp((l_(j) - L0) / nu) > 0``
  (strictly increasing abscissae); its convex minorant has the same blocks, slope
  ``-(sum_B sigma) / (sum_B e)`` and ``q_(r) = e_r (sum_B sigma) / (sum_B e)``.

``L0`` is a reference loss fixed when the structure is built (the mid-range of the sorted
losses): it keeps the chi-square ordinates small and the KL abscissae in floating-point
range. KL needs ``|l - L0| <= KL_RANGE nu`` for every loss of the table: a loss outside
triggers a rebuild around the new mid-range, and a table spanning more than ``2 KL_RANGE nu``
is left to the O(n) oracle (``_ipav_build`` / ``_ipav_update`` return ``nan``).

Design (why not local PAV repair)
---------------------------------
A change of one loss that moves it by ``s`` ranks changes the diagram on ``s + 1`` points and
shifts it by a constant after them. Repairing the PAV blocks locally (dissolve the blocks
around the changed ranks, re-pool) costs the size of the blocks it touches, and Prospect's
blocks are huge: for CVaR(0.5) with a chi-square cost 0.5 on Gaussian regression residuals
one block holds ~95% of the ranks at the optimum (every loss below ``c + 2``), so local repair
is O(n) on most steps, and whether a block must split after a change cannot be decided
without the hull of its interior anyway. The structure here keeps those hulls: an
Overmars-van Leeuwen tree with implicit hulls over buckets of points.

* Buckets: ``B`` consecutive points (``BUCKET``; the last bucket may be short) with their
  lower hull stored explicitly (``hv``/``hc``: vertex point indices) and the prefix sums of
  the increments inside the bucket (``px``, ``py``). Refreshing a bucket is a sequential
  O(B) monotone-chain pass. Buckets make the bottom of every descent a binary search in a
  contiguous array and keep the tree small enough for the caches (``n / B`` nodes).
* Tree: a complete binary tree over the buckets, ``NT`` leaf slots. Internal node ``u`` at
  level ``h`` covers buckets ``[f, f + 2^h)`` (``f = (u - NT/2^h) 2^h``); element ``M`` (the
  step from the last point of its left half to the first of its right half) is its *gap*;
  a node whose right half lies past point ``n`` is a pass-through (``I[u, 0] = -1``) and
  stands for its left child. Each node stores, in its own frame (origin at its first point,
  so a change shifts nothing outside the nodes that contain it): extent ``F[u, 0:2]``,
  right-child frame offset ``F[u, 2:4]`` and the *bridge* of its children's lower hulls,
  end points ``a`` (left) and ``b`` (right) as global point indices ``I[u]`` and coordinates
  ``F[u, 4:8]``. The node's hull is the left child's hull up to ``a``, the bridge, then the
  right child's hull from ``b``.
* A bridge is found by a simultaneous descent of the two children (the Overmars-van Leeuwen
  case analysis on the current edges ``ab``/``cd``: a point of one side strictly below the
  other edge's line, collinear edges, or the side of the separating abscissa on which the two
  lines cross); restricting a side to a child that holds the bridge's end point keeps the
  bridge, so the descent is O(height) steps.
* Update of ranks ``[lo, hi]``: refresh the buckets holding them, then the tree nodes that
  contain them, bottom-up: O(s + log n) nodes. Most nodes keep their bridge: it is kept in
  O(1) when the change provably moves every point away from its line (see ``_ipav_nodes``),
  else after an O(height) check along the two fixed paths to its end points
  (``_ipav_keep``), and only then recomputed by the descent.
* Query of rank ``r``: descend from the root to the first node whose bridge spans element
  ``r`` (the root's hull left of ``a`` is the left child's hull, etc.), or to the bucket
  hull's edge over ``r``; the slope is re-summed over the segment's own elements (no
  cancellation of the partial sums before it). O(log n); the n-vector is never formed.

So a Prospect step costs O(s + log^2 n) worst case and typically O(s + log n) for the oracle
(plus the O(s) bubbling that keeps the table sorted), against O(n) for a PAV re-run.
Measured in ``benchmarks/prospect_incremental.py`` (``benchmarks/results/
prospect_incremental``). Weights from the tree agree with the full PAV
(``oracles._weights_sorted``) to rounding: chi-square absolute error ~ eps (|l - L0| / nu +
1) / n on ``q``, KL relative error ~ eps.

State: ``S = (F, I, ex, ey, px, py, hv, hc, G)``, plain arrays from ``_ipav_alloc``; ``ex``,
``ey`` are the increments of element ``j`` (chi2 ``(1, l_(j) - L0 - 2 n nu sigma_j)``, KL
``(e_j, -sigma_j)``). Leaves (ids ``>= NT``) are the buckets ``id - NT``. Every function but
``_ipav_alloc`` is compiled with ``_nrt=False`` (numba's private flag: no reference counting;
none allocates): the atomic incref/decref numba emits per array argument and tuple unpack
took ~2/3 of a step's time (perf, n = 2e4). The hull geometry (a node's gap element, the
bridge descent, the tangent walk) lives in ``ipav_geometry``.
"""
import math

import numpy as np
from numba import njit

from .ipav_geometry import _ipav_bridge, _ipav_gap, _ipav_walk  # noqa: F401 (re-exported)
from .oracles import CHI2

KL_RANGE = 600.0  #: |l - L0| / nu allowed in the KL structure (exp stays within ~1e+-260)
BUCKET = 32       #: points per bucket (a power of two)


@njit(cache=True)
def _ipav_alloc(n, B):
    """State arrays ``(F, I, ex, ey, px, py, hv, hc, G)`` for ``n`` losses, buckets of ``B``."""
    nb = (n + B) // B  # buckets over the points 0..n
    NT = 1
    while NT < nb:
        NT *= 2
    return (np.zeros((NT, 8)), np.full((NT, 2), -1, dtype=np.int64), np.empty(n),
            np.empty(n), np.zeros(n + 1), np.zeros(n + 1), np.zeros((nb, B), dtype=np.int64),
            np.zeros(nb, dtype=np.int64), np.full((NT, 8), np.nan))


@njit(cache=True, _nrt=False)
def _ipav_incs(ls, sigma, nu, div, L0, ex, ey, lo, hi):
    """Increments of elements ``lo..hi`` from the sorted losses (no range check; chi-square
    abscissa increments are all 1, written once by ``_ipav_build``)."""
    n = ls.shape[0]
    if div == CHI2:
        tnn = 2.0 * n * nu
        for j in range(lo, hi + 1):
            ey[j] = (ls[j] - L0) - tnn * sigma[j]
    else:
        for j in range(lo, hi + 1):
            ex[j] = math.exp((ls[j] - L0) / nu)
            ey[j] = -sigma[j]


@njit(cache=True, _nrt=False)
def _ipav_bucket(b, ex, ey, px, py, hv, hc, unit):
    """Prefix sums and lower hull (strict vertices, monotone chain) of bucket ``b``.

    ``unit``: the abscissa increments are all 1 (chi-square) and ``px`` already holds their
    sums (``k - b B``, exact), so neither is read nor written again (the same numbers, two
    fewer streams over memory: at large n a step refreshes tens of buckets)."""
    B = hv.shape[1]
    n = ex.shape[0]
    P = b * B
    last = min(P + B - 1, n)
    x = 0.0
    y = 0.0
    px[P] = 0.0
    py[P] = 0.0
    hv[b, 0] = P
    m = 1
    # last two stack vertices' coordinates kept in registers: (x0, y0) <- (x1, y1)
    x0 = y0 = 0.0
    x1 = 0.0
    y1 = 0.0
    for k in range(P + 1, last + 1):
        if unit:
            x += 1.0
        else:
            x += ex[k - 1]
            px[k] = x
        y += ey[k - 1]
        py[k] = y
        while m >= 2 and (x1 - x0) * (y - y0) - (y1 - y0) * (x - x0) <= 0.0:
            m -= 1
            x1 = x0
            y1 = y0
            if m >= 2:
                j = hv[b, m - 2]
                x0 = px[j]
                y0 = py[j]
        hv[b, m] = k
        m += 1
        x0 = x1
        y0 = y1
        x1 = x
        y1 = y
    hc[b] = m


@njit(cache=True, _nrt=False, inline="always")
def _ipav_ext(c, F, px, py, hv):
    """Extent (last point in the frame of the first) of tree node or bucket leaf ``c``."""
    NT = F.shape[0]
    if c < NT:
        return F[c, 0] + F[c, 2], F[c, 1] + F[c, 3]
    B = hv.shape[1]
    last = min((c - NT + 1) * B - 1, px.shape[0] - 1)
    return px[last], py[last]


@njit(cache=True, _nrt=False, inline="always", error_model="numpy")
def _ipav_extent(u, h, S):
    """Refresh the right child's extent ``F[u, 0:2]``, the right child's frame offset
    ``F[u, 2:4]`` (left child's extent + gap) and the gap ``G[u, 4:6]`` of node ``u`` (level
    ``h``) from its children (the node's extent is ``F[u, 0:2] + F[u, 2:4]``); returns False
    for a pass-through node (right half past point ``n``), which it turns into a copy of its
    left child."""
    F, I, ex, ey, px, py, hv, hc, G = S
    NT = F.shape[0]
    M, rb = _ipav_gap(u, h, hv.shape[1], NT)
    L = 2 * u
    if rb >= hv.shape[0]:
        if L < NT:
            for c in range(8):
                F[u, c] = F[L, c]
        else:
            F[u, 0] = 0.0
            F[u, 1] = 0.0
            F[u, 2], F[u, 3] = _ipav_ext(L, F, px, py, hv)
        F[u, 5] = np.nan  # pass-through marker read by the hot loops
        I[u, 0] = -1
        I[u, 1] = -1
        return False
    G[u, 4] = ex[M]
    G[u, 5] = ey[M]
    lx, ly = _ipav_ext(L, F, px, py, hv)
    F[u, 0], F[u, 1] = _ipav_ext(L + 1, F, px, py, hv)
    F[u, 2] = lx + ex[M]
    F[u, 3] = ly + ey[M]
    return True


@njit(cache=True, _nrt=False)
def _ipav_intervals(u, h, S):
    """Refresh the cached tangent-slope intervals of node ``u``'s bridge end points."""
    F, I, ex, ey, px, py, hv, hc, G = S
    r = _ipav_walk(2 * u, h - 1, I[u, 0], S)
    G[u, 0] = r[2]
    G[u, 1] = r[3]
    r = _ipav_walk(2 * u + 1, h - 1, I[u, 1], S)
    G[u, 2] = r[2]
    G[u, 3] = r[3]


@njit(cache=True, _nrt=False, inline="always")
def _ipav_levels(F):
    NT = F.shape[0]
    H = 0
    while (NT >> H) > 1:
        H += 1
    return H


@njit(cache=True, _nrt=False, error_model="numpy")
def _ipav_nodes(lo, hi, S, sx, sy, unit, stats):
    """Refresh, bottom-up, every bucket and tree node holding one of the elements ``lo..hi``.

    ``(sx, sy)`` is the shift of every point after ``hi + 1`` (new minus old sums of the
    increments over ``lo..hi``). A node keeps its bridge ``(a, b)`` when it still is one,
    decided, cheapest first, by:

    1. a sign argument, O(1): the change moves every point after ``lo`` the same way
       relative to any line the hulls can have (chi2 points move vertically by
       ``l_new - l_(k-1)`` or ``l_(k) - l_old``, all of the sign of ``l_new - l_old``; KL
       abscissae move likewise and every slope is <= 0, which turns a move right into a move
       up relative to the line). So for a node whose first point is not after ``lo`` the
       bridge stays when the changed points all lie right of ``b`` and move up, or all left
       of ``a`` (``a > hi``) and move down (then ``a`` and ``b`` shift by ``(sx, sy)``);
    2. the tangent-slope intervals of ``a`` in the left child's hull and of ``b`` in the
       right child's (cached in ``G``; a child untouched by the change keeps its shape, up to
       the shift ``(sx, sy)`` of the right child): the bridge stays iff the new slope of
       ``ab`` lies in both. A changed child's interval, and the end point's coordinates,
       come from one walk down the fixed path to the end point (``_ipav_walk``);
    3. otherwise the bridge is recomputed by the simultaneous descent (``_ipav_bridge``) and
       both intervals by walks.
    """
    F, I, ex, ey, px, py, hv, hc, G = S
    NT = F.shape[0]
    B = hv.shape[1]
    up = sy > 0.0 if sx == 0.0 else sx > 0.0
    down = sy < 0.0 if sx == 0.0 else sx < 0.0
    n = ex.shape[0]
    nbk = hv.shape[0]
    blo = lo // B
    bhi = hi // B
    for b in range(blo, bhi + 1):
        _ipav_bucket(b, ex, ey, px, py, hv, hc, unit)
    nodes = 0
    steps = 0
    kept = 0
    walks = 0
    h = 1
    while (NT >> h) >= 1:
        base = NT >> h
        for k in range(blo >> h, (bhi >> h) + 1):
            u = base + k
            ia = I[u, 0]
            ib = I[u, 1]
            P = (k << h) * B
            M, rb = _ipav_gap(u, h, B, NT)
            if rb >= nbk:  # pass-through: a copy of the left child
                _ipav_extent(u, h, S)
                continue
            gchg = lo <= M <= hi  # the gap changed
            lchg = lo < M  # an element of the left child changed
            rchg = hi > M and lo < min(P + (B << h) - 1, n)  # ... of the right child
            if not (lchg or rchg or gchg):
                continue
            # extents: read only the changed children (just refreshed, in cache)
            if gchg:
                G[u, 4] = ex[M]
                G[u, 5] = ey[M]
            if lchg or gchg:
                lx, ly = _ipav_ext(2 * u, F, px, py, hv)
                F[u, 2] = lx + G[u, 4]
                F[u, 3] = ly + G[u, 5]
            if rchg:
                F[u, 0], F[u, 1] = _ipav_ext(2 * u + 1, F, px, py, hv)
            nodes += 1
            if P <= lo:
                if up and lo >= ib:
                    kept += 1
                    continue
                if down and ia > hi and -sx <= 0.5 * F[u, 4]:
                    # (KL: no shift cancelling most of a's abscissa, which would keep the
                    # absolute error of the old value)
                    F[u, 4] += sx
                    F[u, 5] += sy
                    F[u, 6] += sx
                    F[u, 7] += sy
                    kept += 1
                    continue
            # (the sign cases leave the cached interval of the changed side conservative:
            # its other points moved up relative to every line through its end point)
            if lchg:
                G[u, 0] = np.nan
            if rchg:
                G[u, 2] = np.nan
            # end points' coordinates and intervals, walking only where needed
            if lchg or P > lo or G[u, 0] != G[u, 0]:
                ax, ay, g0, g1 = _ipav_walk(2 * u, h - 1, ia, S)
                G[u, 0] = g0
                G[u, 1] = g1
                walks += 1
            else:
                ax = F[u, 4]
                ay = F[u, 5]
            if rchg or P > lo or G[u, 2] != G[u, 2] or -sx > 0.5 * F[u, 6]:
                bx, by, g0, g1 = _ipav_walk(2 * u + 1, h - 1, ib, S)
                bx += F[u, 2]
                by += F[u, 3]
                G[u, 2] = g0
                G[u, 3] = g1
                walks += 1
            elif lo <= M:  # the change is left of the right child: b moved with it
                bx = F[u, 6] + sx
                by = F[u, 7] + sy
            else:
                bx = F[u, 6]
                by = F[u, 7]
            m = (by - ay) / (bx - ax)
            if G[u, 0] <= m <= G[u, 1] and G[u, 2] <= m <= G[u, 3]:
                F[u, 4] = ax
                F[u, 5] = ay
                F[u, 6] = bx
                F[u, 7] = by
                kept += 1
                continue
            steps += _ipav_bridge(u, h, S)
            _ipav_intervals(u, h, S)
            walks += 2
        h += 1
    if stats.shape[0] >= 8:
        stats[7] += bhi - blo + 1
    if stats.shape[0] >= 7:
        stats[6] += walks
    if stats.shape[0] >= 6:
        stats[1] += nodes
        stats[2] += steps
        stats[5] += kept


@njit(cache=True, _nrt=False)
def _ipav_build(ls, sigma, nu, div, S):
    """Build the structure for the sorted losses ``ls``; returns the reference loss ``L0``,
    or ``nan`` (nothing built) when the KL range check fails."""
    F, I, ex, ey, px, py, hv, hc, G = S
    n = ls.shape[0]
    L0 = 0.5 * (ls[0] + ls[n - 1])
    if div != CHI2 and ls[n - 1] - ls[0] > 2.0 * KL_RANGE * nu:
        return np.nan
    if div == CHI2:
        ex[:] = 1.0
    _ipav_incs(ls, sigma, nu, div, L0, ex, ey, 0, n - 1)
    nb = hv.shape[0]
    for b in range(nb):
        _ipav_bucket(b, ex, ey, px, py, hv, hc, False)
    NT = F.shape[0]
    h = 1
    while (NT >> h) >= 1:
        base = NT >> h
        for k in range(0, ((nb - 1) >> h) + 1):
            if _ipav_extent(base + k, h, S):
                _ipav_bridge(base + k, h, S)
                _ipav_intervals(base + k, h, S)
        h += 1
    return L0


@njit(cache=True, _nrt=False)
def _ipav_update(ls, sigma, nu, div, L0, S, lo, hi, r1, stats):
    """Refresh the structure after one loss moved to rank ``r1`` and the sorted losses changed
    on ranks ``lo..hi`` only (``r1`` is ``lo`` or ``hi``; the others shifted by one rank).

    Returns the (possibly new) reference ``L0``; ``nan`` when the KL range check fails (the
    caller must then use the O(n) oracle). ``stats`` (int64, length 8, or empty): ``[1]``
    tree nodes refreshed, ``[2]`` bridge-descent steps, ``[4]`` rebuilds, ``[5]`` nodes that
    kept their bridge, ``[6]`` tangent walks, ``[7]`` buckets rebuilt are accumulated.
    """
    ex = S[2]
    ey = S[3]
    if div == CHI2:
        sy = 0.0
        for j in range(lo, hi + 1):
            sy -= ey[j]
        _ipav_incs(ls, sigma, nu, div, L0, ex, ey, lo, hi)
        for j in range(lo, hi + 1):
            sy += ey[j]
        _ipav_nodes(lo, hi, S, 0.0, sy, True, stats)
        return L0
    if abs(ls[r1] - L0) > KL_RANGE * nu:
        if stats.shape[0] >= 5:
            stats[4] += 1
        return _ipav_build(ls, sigma, nu, div, S)
    # KL: the abscissa increments of the shifted ranks move with them (ey = -sigma stays)
    if r1 == hi:
        e_old = ex[lo]
        for j in range(lo, hi):
            ex[j] = ex[j + 1]
    else:
        e_old = ex[hi]
        for j in range(hi, lo, -1):
            ex[j] = ex[j - 1]
    ex[r1] = math.exp((ls[r1] - L0) / nu)
    _ipav_nodes(lo, hi, S, ex[r1] - e_old, 0.0, False, stats)
    return L0


@njit(cache=True, _nrt=False, error_model="numpy")
def _ipav_slope(r, S):
    """``(a, b, slope)``: the GCM segment ``[a, b)`` over element ``r`` and its slope.

    Descends to the node whose bridge spans ``r`` (or to the bucket hull's edge over it) and
    sums the increments of the segment from node extents, gaps and bucket entries that cover
    exactly ``[a, b)``, so the slope carries no cancellation of partial sums before ``a``.
    """
    F, I, ex, ey, px, py, hv, hc, G = S
    NT = F.shape[0]
    B = hv.shape[1]
    u = 1
    h = _ipav_levels(F)
    while u < NT:
        a = I[u, 0]
        if a < 0 or r < a:
            u = 2 * u
        elif r >= I[u, 1]:
            u = 2 * u + 1
        else:
            break
        h -= 1
    if u >= NT:  # an edge of a bucket hull
        bk = u - NT
        lo = 0
        hi = hc[bk] - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if hv[bk, mid] <= r:
                lo = mid
            else:
                hi = mid - 1
        a = hv[bk, lo]
        b = hv[bk, lo + 1]
        sx = 0.0
        sy = 0.0
        for k in range(a, b):
            sx += ex[k]
            sy += ey[k]
        return a, b, sy / sx
    a = I[u, 0]
    b = I[u, 1]
    M = _ipav_gap(u, h, B, NT)[0]
    sx = ex[M]
    sy = ey[M]
    # elements [a, M) in the left child
    z = 2 * u
    hz = h - 1
    while z < NT:
        Mz = _ipav_gap(z, hz, B, NT)[0]
        if a <= Mz:
            gx, gy = _ipav_ext(2 * z + 1, F, px, py, hv)
            sx += ex[Mz] + gx
            sy += ey[Mz] + gy
            z = 2 * z
        else:
            z = 2 * z + 1
        hz -= 1
    last = min((z - NT + 1) * B - 1, ex.shape[0])
    for k in range(a, last):
        sx += ex[k]
        sy += ey[k]
    # elements [M + 1, b) in the right child
    z = 2 * u + 1
    hz = h - 1
    while z < NT:
        if I[z, 0] >= 0:
            Mz = _ipav_gap(z, hz, B, NT)[0]
            if b > Mz:
                gx, gy = _ipav_ext(2 * z, F, px, py, hv)
                sx += gx + ex[Mz]
                sy += gy + ey[Mz]
                z = 2 * z + 1
                hz -= 1
                continue
        z = 2 * z
        hz -= 1
    sx += px[b]
    sy += py[b]
    return a, b, sy / sx


@njit(cache=True, _nrt=False)
def _ipav_weight_slope(r, slope, ls, nu, div, L0, ex):
    """Weight of rank ``r`` from the GCM slope over it."""
    if div == CHI2:
        v = ((ls[r] - L0) - slope) / (2.0 * ls.shape[0] * nu)
    else:
        v = -ex[r] * slope
    return v if v > 0.0 else 0.0


@njit(cache=True, _nrt=False)
def _ipav_weight(r, ls, nu, div, L0, S):
    """Exact weight ``q_(r)`` of rank ``r`` (sorted order), O(log n)."""
    return _ipav_weight_slope(r, _ipav_slope(r, S)[2], ls, nu, div, L0, S[2])


@njit(cache=True, _nrt=False)
def _ipav_weights_all(ls, nu, div, L0, S, qs):
    """All weights (sorted order) from the structure, one query per GCM segment; returns the
    number of segments (the PAV blocks, up to adjacent segments of equal slope)."""
    n = ls.shape[0]
    r = 0
    nseg = 0
    while r < n:
        a, b, slope = _ipav_slope(r, S)
        nseg += 1
        for k in range(r, b):
            qs[k] = _ipav_weight_slope(k, slope, ls, nu, div, L0, S[2])
        r = b
    return nseg
