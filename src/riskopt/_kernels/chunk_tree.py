"""The blocked sorted list (a two-level B-tree) under ``rank_oracle`` and ``hull_oracle``:
a multiset of losses with order statistics, split from :mod:`riskopt._kernels.rank_oracle`
(which re-exports these names; the queries of weights live there and in ``hull_oracle``).

* chunks of capacity ``2 B`` holding sorted runs of values, in value order (``lid[k]`` is the
  physical chunk at logical position ``k``), with their largest values ``top[k]`` for a
  binary search and a Fenwick tree ``fw`` of the chunk counts (``#{l < x}`` in O(log n):
  :func:`_rank_count`, :func:`_rank_locate`);
* an insertion into a full chunk splits it into two halves; a deletion that leaves a chunk
  under ``B / 2`` merges it with a neighbour (or the two share their values evenly).

Cost per update (one deletion and one insertion) and per query: ``O(log n + B)`` plus
``O(n / B)`` for a split or a merge (they shift the logical order and rebuild the Fenwick
tree), which happen at most once per ``B / 2`` updates of a chunk: ``O(log n + B + n / B^2)``
amortised, **whatever the number of ranks the changed loss crosses** (the sorted table of the
bubbling oracle pays one move per rank crossed, O(n) per step from a cold start). Worst case
of one step: ``O(B + n / B)``. ``B ~ n^0.4`` rounded down to a power of two
(:func:`chunk_size`): 32 at 2e4, 128 at 2e5 and 1e6 (``hull_oracle`` caps it at 32:
``hull_chunk``).

With ``hull`` (:func:`_rank_alloc`), the structure also keeps each value's term ``FV``
(:func:`_fterm`) and a segment tree over the logical chunks (count, term sum, smallest and
largest term per node), which every update keeps bit for bit equal to a rebuild
(:func:`_tree_rebuild`); ``hull_oracle`` searches it.

State ``R = (V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar)`` from
:func:`_rank_alloc` / :func:`_rank_build`: ``V[p, :cnt[p]]`` the sorted values of physical
chunk ``p``; ``meta = [number of chunks, B, number of free chunk ids, n, segment tree size,
leading zeros of sigma (hull_oracle)]``; ``free`` the stack of free chunk ids; ``Shi, Slo``
the double-double prefix sums of ``sigma`` (``rank_oracle``'s long ties). Everything after
the allocation runs without reference counting (``_nrt=False``).
"""
import numpy as np
from numba import njit


@njit(cache=True)
def chunk_size(n):
    """``B ~ n^0.4`` rounded down to a power of two, at least 8."""
    t = max(8.0, float(n) ** 0.4)
    b = 8
    while b * 2 <= t:
        b *= 2
    return b


@njit(cache=True)
def _rank_alloc(n, B, hull=False):
    """Empty state for up to ``n`` values in chunks of capacity ``2 B`` (``n >= 1``); with
    ``hull``, also the per-value terms ``FV`` and the segment tree over the chunks that
    ``hull_oracle`` searches (else those arrays are empty)."""
    nmax = 2 * (n // B) + 4
    Shi = np.zeros(n + 1)
    Slo = np.zeros(n + 1)
    size = 1
    while size < nmax:
        size *= 2
    nt = 2 * size if hull else 0
    return (np.empty((nmax, 2 * B)), np.zeros(nmax, dtype=np.int64),
            np.zeros(nmax, dtype=np.int64), np.empty(nmax), np.zeros(nmax + 1, dtype=np.int64),
            np.array([0, B, 0, n, size, 0], dtype=np.int64), np.zeros(nmax, dtype=np.int64), Shi,
            Slo, np.empty((nmax if hull else 0, 2 * B)), np.zeros(nt, dtype=np.int64),
            np.zeros(nt), np.zeros(nt), np.zeros(nt), np.zeros(5))


@njit(cache=True, _nrt=False, inline="always")
def _fterm(fpar, x):
    """The hull's term of a loss ``x``: ``x - L0`` (chi-square), ``exp((x - L0) / nu)`` (KL)."""
    if fpar[3] == 0.0:
        return x - fpar[0]
    return np.exp((x - fpar[0]) / fpar[1])


@njit(cache=True, _nrt=False, inline="always")
def _tree_pull(tc, tF, tlo, thi, v):
    a = 2 * v
    b = a + 1
    tc[v] = tc[a] + tc[b]
    tF[v] = tF[a] + tF[b]
    tlo[v] = tlo[a] if tc[a] > 0 else tlo[b]
    thi[v] = thi[b] if tc[b] > 0 else thi[a]


@njit(cache=True, _nrt=False, inline="always")
def _tree_leaf(R, k):
    """Refresh leaf ``k`` (logical chunk) from its values (its sum recomputed, no drift) and
    the path above it."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    if tc.shape[0] == 0:
        return
    v = meta[4] + k
    _leaf_scan(R, k)
    v >>= 1
    while v >= 1:
        _tree_pull(tc, tF, tlo, thi, v)
        v >>= 1


@njit(cache=True, _nrt=False)
def _tree_relayout(R, k0, k1, d):
    """The tree after a split (``d = 1``) or a removal (``d = -1``) of a logical chunk
    (``meta[0]`` already counts the chunks after it): the leaves at logical positions ``>=
    k1`` are the old ones shifted by ``d`` (no rescan), those in ``[k0, k1)`` are rescanned,
    and only the ancestors of the leaves that changed (``[k0, nc)``, the old last one
    included) are pulled: O(nc - k0 + log n + B)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    if tc.shape[0] == 0:
        return
    size = meta[4]
    nc = meta[0]
    hi = nc
    if d > 0:
        for j in range(nc - 1, k1 - 1, -1):
            _leaf_copy(tc, tF, tlo, thi, size + j, size + j - d)
    elif d < 0:
        for j in range(k1, nc):
            _leaf_copy(tc, tF, tlo, thi, size + j, size + j - d)
        _leaf_clear(tc, tF, tlo, thi, size + nc)
        hi = nc + 1
    for k in range(k0, k1):
        _leaf_scan(R, k)
    _pull_range(tc, tF, tlo, thi, size + k0, size + hi - 1)


@njit(cache=True, _nrt=False, inline="always")
def _pull_range(tc, tF, tlo, thi, a, b):
    """Pull every ancestor of the nodes ``a .. b`` (one level of the tree), level by level."""
    lo = a >> 1
    hi = b >> 1
    while hi >= 1:
        for v in range(lo, hi + 1):
            _tree_pull(tc, tF, tlo, thi, v)
        lo >>= 1
        hi >>= 1


@njit(cache=True, _nrt=False, inline="always")
def _leaf_clear(tc, tF, tlo, thi, a):
    tc[a] = 0
    tF[a] = 0.0
    tlo[a] = 0.0
    thi[a] = 0.0


@njit(cache=True, _nrt=False, inline="always")
def _leaf_scan(R, k):
    """Leaf ``k`` from the values of logical chunk ``k`` (its sum recomputed, no drift)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    v = meta[4] + k
    p = lid[k]
    m = cnt[p]
    acc = 0.0
    for j in range(m):
        acc += FV[p, j]
    tc[v] = m
    tF[v] = acc
    tlo[v] = FV[p, 0] if m > 0 else 0.0
    thi[v] = FV[p, m - 1] if m > 0 else 0.0


@njit(cache=True, _nrt=False, inline="always")
def _leaf_copy(tc, tF, tlo, thi, a, b):
    tc[a] = tc[b]
    tF[a] = tF[b]
    tlo[a] = tlo[b]
    thi[a] = thi[b]


@njit(cache=True, _nrt=False)
def _tree_rebuild(R, k0=0, k1=-1):
    """Rescan the leaves of logical chunks ``[k0, k1)`` (all with ``k1 = -1``; the leaves
    past the last chunk are emptied then) and pull every internal node."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    if tc.shape[0] == 0:
        return
    size = meta[4]
    nc = meta[0]
    kend = size if k1 < 0 else k1
    for k in range(k0, kend):
        if k < nc:
            _leaf_scan(R, k)
        else:
            _leaf_clear(tc, tF, tlo, thi, size + k)
    for v in range(size - 1, 0, -1):
        _tree_pull(tc, tF, tlo, thi, v)


@njit(cache=True, _nrt=False)
def _fw_rebuild(R):
    """The Fenwick tree of the logical chunk counts, in O(number of chunks)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    nc = meta[0]
    for k in range(nc + 1):
        fw[k] = 0
    for k in range(nc):
        fw[k + 1] += cnt[lid[k]]
        j = (k + 1) + ((k + 1) & -(k + 1))
        if j <= nc:
            fw[j] += fw[k + 1]


@njit(cache=True, _nrt=False, inline="always")
def _fw_add(fw, nc, k, d):
    j = k + 1
    while j <= nc:
        fw[j] += d
        j += j & -j


@njit(cache=True, _nrt=False, inline="always")
def _fw_prefix(fw, k):
    """Sum of the counts of logical chunks ``[0, k)``."""
    s = 0
    j = k
    while j > 0:
        s += fw[j]
        j -= j & -j
    return s


@njit(cache=True, _nrt=False)
def _rank_build(ls, sigma, R):
    """Fill ``R`` with the sorted values ``ls`` (length ``n``) and the prefix sums of
    ``sigma`` (same length)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    n = ls.shape[0]
    B = meta[1]
    nmax = cnt.shape[0]
    nc = (n + B - 1) // B
    if nc > 1 and n - (nc - 1) * B < B // 2:
        nc -= 1  # the short tail joins the last chunk (at most 1.5 B values)
    pos = 0
    for k in range(nc):
        m = B if k < nc - 1 else n - pos
        for j in range(m):
            V[k, j] = ls[pos + j]
        if FV.shape[0] > 0:
            for j in range(m):
                FV[k, j] = _fterm(fpar, ls[pos + j])
        cnt[k] = m
        lid[k] = k
        top[k] = ls[pos + m - 1]
        pos += m
    # free ids: nc .. nmax-1 (popped from the end)
    nf = 0
    for p in range(nmax - 1, nc - 1, -1):
        free[nf] = p
        nf += 1
    for p in range(nc, nmax):
        cnt[p] = 0
    meta[0] = nc
    meta[2] = nf
    _fw_rebuild(R)
    _tree_rebuild(R)
    # double-double prefix sums of sigma (TwoSum)
    hi = 0.0
    lo = 0.0
    Shi[0] = 0.0
    Slo[0] = 0.0
    for j in range(n):
        x = sigma[j]
        s = hi + x
        bb = s - hi
        err = (hi - (s - bb)) + (x - bb)
        hi = s
        lo += err
        Shi[j + 1] = hi
        Slo[j + 1] = lo


@njit(cache=True, _nrt=False, inline="always")
def _first_chunk(top, nc, x, strict):
    """The first logical chunk whose largest value is ``>= x`` (``> x`` if ``strict``), or
    ``nc``."""
    lo = 0
    hi = nc
    while lo < hi:
        mid = (lo + hi) >> 1
        t = top[mid]
        if t < x or (strict and t == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, _nrt=False, inline="always")
def _first_chunk_near(top, nc, x, k0):
    """:func:`_first_chunk` with ``strict`` (the first logical chunk whose largest value is
    ``> x``, or ``nc``) by a galloping search from chunk ``k0`` (``0 <= k0 < nc``): O(log d)
    reads for an answer ``d`` chunks away, where the update's new loss mostly lies (stop
    42); the same answer as the binary search over all chunks."""
    if top[k0] > x:  # the answer is k0 or to its left: the last chunk with top <= x, + 1
        hi = k0
        step = 1
        lo = k0 - 1
        while lo >= 0 and top[lo] > x:
            hi = lo
            lo -= step
            step *= 2
        lo = lo + 1 if lo >= 0 else 0  # top[lo - 1] <= x (or lo = 0); top[hi] > x
    else:  # to its right
        lo = k0 + 1
        step = 1
        hi = k0 + 1
        while hi < nc and top[hi] <= x:
            lo = hi + 1
            hi += step
            step *= 2
        if hi > nc:
            hi = nc
    while lo < hi:  # the first in [lo, hi) with top > x (hi if none)
        mid = (lo + hi) >> 1
        if top[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, _nrt=False, inline="always")
def _bound(V, p, m, x, strict):
    """First position in chunk ``p`` (``m`` values) with value ``>= x`` (``> x`` if
    ``strict``)."""
    lo = 0
    hi = m
    while lo < hi:
        mid = (lo + hi) >> 1
        t = V[p, mid]
        if t < x or (strict and t == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, _nrt=False)
def _rank_count(R, x, strict):
    """``#{l < x}`` (``#{l <= x}`` if ``strict``)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    nc = meta[0]
    k = _first_chunk(top, nc, x, strict)
    if k == nc:
        return meta[3]
    p = lid[k]
    return _fw_prefix(fw, k) + _bound(V, p, cnt[p], x, strict)


@njit(cache=True, _nrt=False, inline="always")
def _rank_locate(R, x):
    """Where the first copy of ``x`` is (or would be): ``(logical chunk k, position j in it,
    a = #{l < x})``; ``k = nc`` when every value is below ``x``."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    nc = meta[0]
    k = _first_chunk(top, nc, x, False)
    if k == nc:
        return k, 0, meta[3]
    p = lid[k]
    j = _bound(V, p, cnt[p], x, False)
    return k, j, _fw_prefix(fw, k) + j


@njit(cache=True, _nrt=False)
def _remove_logical(R, k):
    """Drop logical chunk ``k`` (empty or merged away) and free its id."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    nc = meta[0]
    free[meta[2]] = lid[k]
    meta[2] += 1
    cnt[lid[k]] = 0
    for j in range(k, nc - 1):
        lid[j] = lid[j + 1]
        top[j] = top[j + 1]
    meta[0] = nc - 1


@njit(cache=True, _nrt=False)
def _split(R, k):
    """Split the full logical chunk ``k`` into two halves (the upper half at ``k + 1``)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    nc = meta[0]
    p = lid[k]
    meta[2] -= 1
    p2 = free[meta[2]]
    m = cnt[p]
    h = m // 2
    for j in range(h, m):
        V[p2, j - h] = V[p, j]
    if FV.shape[0] > 0:
        for j in range(h, m):
            FV[p2, j - h] = FV[p, j]
    cnt[p2] = m - h
    cnt[p] = h
    for j in range(nc, k + 1, -1):
        lid[j] = lid[j - 1]
        top[j] = top[j - 1]
    lid[k + 1] = p2
    top[k + 1] = top[k]
    top[k] = V[p, h - 1]
    meta[0] = nc + 1
    _fw_rebuild(R)
    _tree_relayout(R, k, k + 2, 1)


@njit(cache=True, _nrt=False)
def _rank_insert(R, x):
    """Add the value ``x`` to the multiset."""
    nc = R[5][0]
    k = _first_chunk(R[3], nc, x, True)
    _rank_insert_at(R, k if k < nc else nc - 1, x)


@njit(cache=True, _nrt=False, inline="always")
def _rank_insert_at(R, k, x):
    """Add the value ``x`` to logical chunk ``k``, the first whose largest value is ``> x``
    (the last if none is). Returns True when the chunk split (the chunks after it moved up
    one logical place)."""
    if _chunk_insert(R, k, x) == R[0].shape[1]:
        _split(R, k)
        return True
    _tree_leaf(R, k)
    return False


@njit(cache=True, _nrt=False, inline="always")
def _chunk_insert(R, k, x):
    """Add ``x`` to the values of logical chunk ``k`` (its count, largest value and the
    Fenwick tree; not the segment tree, no split). Returns the chunk's new count."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    p = lid[k]
    m = cnt[p]
    j = _bound(V, p, m, x, True)
    for a in range(m, j, -1):
        V[p, a] = V[p, a - 1]
    V[p, j] = x
    if FV.shape[0] > 0:
        for a in range(m, j, -1):
            FV[p, a] = FV[p, a - 1]
        FV[p, j] = _fterm(fpar, x)
    cnt[p] = m + 1
    if j == m:
        top[k] = x
    _fw_add(fw, meta[0], k, 1)
    return m + 1


@njit(cache=True, _nrt=False)
def _rank_delete(R, x):
    """Remove one copy of the value ``x`` (which must be in the multiset)."""
    k, j, _ = _rank_locate(R, x)
    _rank_delete_at(R, k, j)


@njit(cache=True, _nrt=False, inline="always")
def _rank_delete_at(R, k, j):
    """Remove the value at position ``j`` of logical chunk ``k``. Returns True when the
    other chunks changed too (a chunk removed, merged or sharing its values: the logical
    positions and largest values found before are stale)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    nc = meta[0]
    m = _chunk_delete(R, k, j)
    hull = FV.shape[0] > 0
    B = meta[1]
    if m >= B // 2 or nc == 1:
        _tree_leaf(R, k)
        return False
    if m == 0:
        _remove_logical(R, k)
        _fw_rebuild(R)
        _tree_relayout(R, k, k, -1)
        return True
    # merge with a neighbour, or share evenly when both would not fit in 1.5 B
    kl = k if k + 1 < nc else k - 1
    pl = lid[kl]
    pr = lid[kl + 1]
    ml = cnt[pl]
    mr = cnt[pr]
    if ml + mr <= (3 * B) // 2:
        for j2 in range(mr):
            V[pl, ml + j2] = V[pr, j2]
        if hull:
            for j2 in range(mr):
                FV[pl, ml + j2] = FV[pr, j2]
        cnt[pl] = ml + mr
        top[kl] = top[kl + 1]
        _remove_logical(R, kl + 1)
        _fw_rebuild(R)
        _tree_relayout(R, kl, kl + 1, -1)
        return True
    else:
        h = (ml + mr) // 2
        _share(V, pl, pr, ml, mr, h)
        if hull:
            _share(FV, pl, pr, ml, mr, h)
        cnt[pl] = h
        cnt[pr] = ml + mr - h
        top[kl] = V[pl, h - 1]
    _fw_rebuild(R)
    _tree_leaf(R, kl)
    _tree_leaf(R, kl + 1)
    return True


@njit(cache=True, _nrt=False, inline="always")
def _chunk_delete(R, k, j):
    """Remove the value at position ``j`` of logical chunk ``k`` (its count, largest value
    and the Fenwick tree; not the segment tree, no merge). Returns the chunk's new count."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    p = lid[k]
    m = cnt[p]
    for a in range(j, m - 1):
        V[p, a] = V[p, a + 1]
    if FV.shape[0] > 0:
        for a in range(j, m - 1):
            FV[p, a] = FV[p, a + 1]
    m -= 1
    cnt[p] = m
    _fw_add(fw, meta[0], k, -1)
    if m > 0:
        top[k] = V[p, m - 1]
    return m


@njit(cache=True, _nrt=False, inline="always")
def _tree_leaves2(R, ka, kb):
    """:func:`_tree_leaf` of two logical chunks ``ka != kb``: both leaves rescanned, their
    two paths pulled up to where they meet, then one path to the root (the same nodes, each
    pulled after its children, as two calls of :func:`_tree_leaf`: the same bits)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    if tc.shape[0] == 0:
        return
    size = meta[4]
    _leaf_scan(R, ka)
    _leaf_scan(R, kb)
    a = (size + ka) >> 1
    b = (size + kb) >> 1
    while a != b:
        _tree_pull(tc, tF, tlo, thi, a)
        _tree_pull(tc, tF, tlo, thi, b)
        a >>= 1
        b >>= 1
    while a >= 1:
        _tree_pull(tc, tF, tlo, thi, a)
        a >>= 1


@njit(cache=True, _nrt=False)
def _share(V, pl, pr, ml, mr, h):
    """Chunks ``pl`` (``ml`` values) and ``pr`` (``mr``) keep ``h`` and ``ml + mr - h``."""
    if ml > h:  # move the top ml - h values of the left chunk to the front of the right
        d = ml - h
        for j2 in range(mr - 1, -1, -1):
            V[pr, j2 + d] = V[pr, j2]
        for j2 in range(d):
            V[pr, j2] = V[pl, h + j2]
    else:  # move the first h - ml values of the right chunk to the end of the left
        d = h - ml
        for j2 in range(d):
            V[pl, ml + j2] = V[pr, j2]
        for j2 in range(d, mr):
            V[pr, j2 - d] = V[pr, j2]


@njit(cache=True, _nrt=False)
def _rank_replace(R, old, new):
    """One loss of the table changes from ``old`` to ``new``."""
    if old == new:
        return
    k, j, _ = _rank_locate(R, old)
    _replace_at(R, k, j, old, new)


@njit(cache=True, _nrt=False)
def _rank_replace_at(R, k0, j0, old, new):
    """:func:`_rank_replace` with ``old`` at position ``j0`` of logical chunk ``k0`` (from
    :func:`_rank_locate` / :func:`_rank_weight_at`, the structure unchanged since)."""
    _replace_at(R, k0, j0, old, new)


@njit(cache=True, _nrt=False, inline="always")
def _replace_at(R, k0, j0, old, new):
    """The body of :func:`_rank_replace_at`, inlined only into callers that run without
    reference counting (see ``rank_oracle``'s module docstring). When ``new`` belongs to
    the same chunk the values between the two positions shift by one (no
    count changes); otherwise ``new`` is inserted and ``old`` deleted there."""
    if old == new:
        return
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    nc = meta[0]
    k1 = _first_chunk_near(top, nc, new, k0)
    if k1 == nc:
        k1 = nc - 1
    if k1 != k0:
        if cnt[lid[k1]] + 1 < V.shape[1] and cnt[lid[k0]] - 1 >= meta[1] // 2:
            # no split and no merge: both chunks change, their two tree paths pulled once
            # where they meet (stop 42: one root path instead of two)
            _chunk_insert(R, k1, new)
            _chunk_delete(R, k0, j0)
            _tree_leaves2(R, k0, k1)
            return
        # insert, then delete (a split of chunk k1 moves k0 up one place)
        if _rank_insert_at(R, k1, new) and k0 > k1:
            k0 += 1
        _rank_delete_at(R, k0, j0)
        return
    p = lid[k0]
    m = cnt[p]
    j1 = _bound(V, p, m, new, True)
    hull = FV.shape[0] > 0
    if j1 > j0:  # new goes up: values j0 + 1 .. j1 - 1 move down one place
        for a in range(j0, j1 - 1):
            V[p, a] = V[p, a + 1]
        if hull:
            for a in range(j0, j1 - 1):
                FV[p, a] = FV[p, a + 1]
        j1 -= 1
    else:  # new goes down: values j1 .. j0 - 1 move up one place
        for a in range(j0, j1, -1):
            V[p, a] = V[p, a - 1]
        if hull:
            for a in range(j0, j1, -1):
                FV[p, a] = FV[p, a - 1]
    V[p, j1] = new
    if hull:
        FV[p, j1] = _fterm(fpar, new)
    top[k0] = V[p, m - 1]
    _tree_leaf(R, k0)


@njit(cache=True)
def _rank_values(R, out):
    """The multiset in sorted order (tests)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    pos = 0
    for k in range(meta[0]):
        p = lid[k]
        for j in range(cnt[p]):
            out[pos] = V[p, j]
            pos += 1
    return pos
