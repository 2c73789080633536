"""Incremental exact oracle for box spectra (CVaR) with a shift cost, O(log n) per update.

For a spectrum whose entries are ``c`` (``k`` of them), ``0`` and at most one other value
``r`` in ``(0, c)`` (CVaR of level ``alpha``: ``c = 1/(alpha n)``, ``r`` the fractional part),
the permutahedron ``P(sigma)`` is the capped simplex ``{0 <= q <= c, sum q = k c + r}``:
majorisation by ``sigma`` asks the top-``j`` sums of ``q`` to stay below ``j c`` for ``j <= k``
(i.e. ``q_i <= c``) and below the total after. With the chi-square cost ``nu n ||q - 1/n||^2``
the maximiser of ``q.l - nu D(q)`` is the Euclidean projection of ``1/n + l / A`` (``A = 2 n
nu``) on that set,

    q_i = clip((l_i - tau) / A, 0, c),    sum_i q_i = k c + r,

with one scalar ``tau`` (the same weights as the PAV of ``oracles._weights_sorted_ws``: the
maximiser is unique). ``g(tau) = sum_i clip(...)`` is continuous, non-increasing and piecewise
linear, with breakpoints ``l_i - W`` (``i`` leaves the cap, ``W = A c``) and ``l_i`` (``i``
reaches 0). The structure keeps the three sets

    low (l <= tau),    mid (tau < l < tau + W),    top (l >= tau + W)

as indexed binary heaps in flat arrays (a max-heap of low, a min- and a max-heap of mid, a
min-heap of top, with each index's position in each heap, so an arbitrary index is removed
or re-keyed in O(log n)), ``|mid| = M``, ``|top| = T`` and ``S = sum_mid (l - L0)``
(Neumaier-compensated, recomputed exactly at every build). On a partition the equation is
linear: ``T c + (S + M (L0 - tau)) / A = k c + r``, so

    tau_P = L0 + (S - A ((k - T) c + r)) / M.

An update of one loss re-files that index by the current thresholds (the partition is then
the one of the new ``g`` at the old ``tau``), and ``tau`` walks to the root of the new ``g``
in the one direction given by the sign of ``tau_P - tau`` (``g`` is monotone): at each
step the candidate ``tau_c`` (``tau_P`` clamped to the walk's side of its position; for
``M = 0``, where ``g`` is flat at ``T c``, the position itself if that flat value is the
target, else past every breakpoint) is accepted when no element of the sets the walk is
approaching violates its threshold; otherwise the nearest breakpoint in the walk's direction
is crossed (one element moves to the neighbouring set: top -> mid -> low walking up, low ->
mid -> top walking down) and the position becomes that breakpoint. Each element crosses at
most two breakpoints per walk, so the walk ends; the elements crossed are those whose loss
lies between the old and the new thresholds, a few per step once Prospect's losses settle.
An index that stays in low or top does not change ``tau`` at all.

Degenerate cases are exact: ``M = 0`` with ``T = k`` and ``r = 0`` (``alpha n`` integer) is a
flat root (any ``tau`` in the gap: the walk keeps its position), ties at a threshold cross
one at a time (the weights are continuous in ``tau``), ``n = 1`` and ``k = n`` (all weights
``c = 1/n``). The weight of any index is read from ``tau`` alone (``_box_weight``), so
rounding in the set bookkeeping costs only rounding in ``tau``: ~eps (|l - L0| / A + 1/M).

State ``S = (hk, hi, pos, size, f)`` from ``_box_alloc``: heap keys ``hk[h]`` (``-l`` for
the max-heaps ``LOW`` and ``MIDMAX``, ``l`` for ``MIDMIN`` and ``TOP``), heap entries' indices
``hi[h]``, ``pos[i, h]`` the position of index ``i`` in heap ``h`` (``-1``: absent),
``size[h]`` (and ``size[4] = k``), ``f = [tau, S, S's compensation, L0, A, c, r, W]``.
Everything but ``_box_alloc`` runs without reference counting (``_nrt=False``, as in
``incremental_pav``): nothing allocates.

The KL cost (``nu sum q log(n q)``) is kept the same way with one threshold (``_kl_*``, see
the section below): ``q_i = min(c, exp((l_i - m) / nu))``.

Prospect uses it for CVaR with either cost (``prospect._epoch_prospect_box``): a step touches
the sampled index's heap entries, and the sorted loss table is not kept during the pass.
"""
import numpy as np
from numba import njit

LOW = 0     #: max-heap of the low set (keys -l)
MIDMIN = 1  #: min-heap of the mid set (keys l)
MIDMAX = 2  #: max-heap of the mid set (keys -l)
TOP = 3     #: min-heap of the top set (keys l)


@njit(cache=True)
def _box_spectrum(sigma):
    """``(c, k, r)`` when ``sigma`` is a box spectrum (entries ``c``, ``0`` and at most one
    value in ``(0, c)``, any order), else ``(0.0, -1, 0.0)``."""
    n = sigma.shape[0]
    c = 0.0
    for j in range(n):
        if sigma[j] > c:
            c = sigma[j]
    if not c > 0.0:
        return 0.0, -1, 0.0
    k = 0
    r = 0.0
    nr = 0
    for j in range(n):
        s = sigma[j]
        if s == c:
            k += 1
        elif s != 0.0:
            if s < 0.0 or nr > 0:
                return 0.0, -1, 0.0
            r = s
            nr = 1
    return c, k, r


@njit(cache=True)
def _box_alloc(n):
    """State arrays ``(hk, hi, pos, size, f)`` for ``n < 2**31`` losses (filled by
    ``_box_build``; int32 indices: fewer pages to fault in per pass)."""
    return (np.empty((4, n)), np.empty((4, n), dtype=np.int32),
            np.empty((n, 4), dtype=np.int32), np.zeros(5, dtype=np.int64), np.zeros(9))


# ----------------------------------------------------------------------- indexed heaps
@njit(cache=True, _nrt=False, inline="always")
def _put(hk, hi, pos, h, p, key, idx):
    """Entry ``p`` of heap ``h`` becomes ``(key, idx)``."""
    hk[h, p] = key
    hi[h, p] = idx
    pos[idx, h] = p


@njit(cache=True, _nrt=False)
def _sift_up(hk, hi, pos, h, p, key, idx):
    """Place ``(key, idx)`` at or above the hole ``p`` of min-heap ``h``; returns the levels
    moved."""
    lv = 0
    while p > 0:
        par = (p - 1) >> 1
        kp = hk[h, par]
        if kp <= key:
            break
        _put(hk, hi, pos, h, p, kp, hi[h, par])
        p = par
        lv += 1
    _put(hk, hi, pos, h, p, key, idx)
    return lv


@njit(cache=True, _nrt=False)
def _sift_down(hk, hi, pos, h, m, p, key, idx):
    """Place ``(key, idx)`` at or below the hole ``p`` of min-heap ``h`` of size ``m``."""
    lv = 0
    while True:
        a = 2 * p + 1
        if a >= m:
            break
        if a + 1 < m and hk[h, a + 1] < hk[h, a]:
            a += 1
        ka = hk[h, a]
        if ka >= key:
            break
        _put(hk, hi, pos, h, p, ka, hi[h, a])
        p = a
        lv += 1
    _put(hk, hi, pos, h, p, key, idx)
    return lv


@njit(cache=True, _nrt=False, inline="always")
def _append(S, h, key, idx):
    """Add ``(key, idx)`` at the end of heap ``h`` without sifting (``_box_build`` and
    ``_kl_build`` heapify after)."""
    hk, hi, pos, size, f = S
    _put(hk, hi, pos, h, size[h], key, idx)
    size[h] += 1


@njit(cache=True, _nrt=False)
def _place(hk, hi, pos, h, m, p, key, idx):
    """Put ``(key, idx)`` in the hole ``p`` of heap ``h`` (size ``m``) and restore order."""
    if p > 0 and hk[h, (p - 1) >> 1] > key:
        return _sift_up(hk, hi, pos, h, p, key, idx)
    return _sift_down(hk, hi, pos, h, m, p, key, idx)


@njit(cache=True, _nrt=False)
def _push(S, h, key, idx):
    hk, hi, pos, size, f = S
    p = size[h]
    size[h] = p + 1
    return _sift_up(hk, hi, pos, h, p, key, idx)


@njit(cache=True, _nrt=False)
def _remove(S, h, idx):
    """Remove index ``idx`` from heap ``h``; returns the levels moved."""
    hk, hi, pos, size, f = S
    p = pos[idx, h]
    pos[idx, h] = -1
    m = size[h] - 1
    size[h] = m
    if p == m:
        return 0
    return _place(hk, hi, pos, h, m, p, hk[h, m], hi[h, m])


@njit(cache=True, _nrt=False)
def _rekey(S, h, idx, key):
    hk, hi, pos, size, f = S
    return _place(hk, hi, pos, h, size[h], pos[idx, h], key, idx)


# ------------------------------------------------------------------------------ sets
@njit(cache=True, _nrt=False, inline="always")
def _nadd(a, j, x):
    """``a[j] + a[j + 1] += x`` (Neumaier's compensated summation; ``box_table`` too)."""
    s = a[j]
    t = s + x
    if abs(s) >= abs(x):
        a[j + 1] += (s - t) + x
    else:
        a[j + 1] += (x - t) + s
    a[j] = t


@njit(cache=True, _nrt=False, inline="always")
def _neumaier(f, x):
    """``f[1] + f[2] += x``."""
    _nadd(f, 1, x)


@njit(cache=True, _nrt=False)
def _set_of(pos, i):
    """0 low, 1 mid, 2 top."""
    if pos[i, LOW] >= 0:
        return 0
    if pos[i, MIDMIN] >= 0:
        return 1
    return 2


@njit(cache=True, _nrt=False)
def _insert(S, s, l, i):
    """Add index ``i`` with loss ``l`` to set ``s`` (0 low, 1 mid, 2 top)."""
    if s == 0:
        return _push(S, LOW, -l, i)
    if s == 2:
        return _push(S, TOP, l, i)
    _neumaier(S[4], l - S[4][3])
    return _push(S, MIDMIN, l, i) + _push(S, MIDMAX, -l, i)


@njit(cache=True, _nrt=False)
def _delete(S, s, i):
    """Remove index ``i`` from set ``s``."""
    if s == 0:
        return _remove(S, LOW, i)
    if s == 2:
        return _remove(S, TOP, i)
    _neumaier(S[4], -(S[0][MIDMIN, S[2][i, MIDMIN]] - S[4][3]))
    return _remove(S, MIDMIN, i) + _remove(S, MIDMAX, i)


@njit(cache=True, _nrt=False)
def _cross(S, src, dst, h):
    """Move the root of heap ``h`` (a set's extreme element) from set ``src`` to ``dst``."""
    hk, hi, pos, size, f = S
    i = hi[h, 0]
    l = hk[h, 0]
    if h == LOW or h == MIDMAX:
        l = -l
    return _delete(S, src, i) + _insert(S, dst, l, i)


@njit(cache=True, _nrt=False)
def _tau_p(S):
    """Root of the linear equation of the current partition (``M > 0``), minus ``L0``."""
    hk, hi, pos, size, f = S
    return ((f[1] + f[2]) - f[4] * ((size[4] - size[TOP]) * f[5] + f[6])) / size[MIDMIN]


@njit(cache=True, _nrt=False, error_model="numpy")
def _box_settle(S, stats):
    """Walk ``t = tau - L0`` (``f[0]``, a position at which the partition is consistent) to
    the root of ``g``; returns the number of elements that crossed a threshold."""
    hk, hi, pos, size, f = S
    k = size[4]
    r = f[6]
    W = f[7]
    L0 = f[3]
    t0 = f[0]
    M = size[MIDMIN]
    T = size[TOP]
    if M > 0:
        up = _tau_p(S) >= t0
    elif T > k:
        up = True
    elif T < k or r > 0.0:
        up = False
    else:  # flat at the target: t0 is a root
        return 0
    moves = 0
    lv = 0
    while True:
        M = size[MIDMIN]
        T = size[TOP]
        if M > 0:
            tp = _tau_p(S)
            if up:
                tc = tp if tp > t0 else t0
            else:
                tc = tp if tp < t0 else t0
        elif up:
            tc = np.inf if T > k else t0
        else:
            tc = -np.inf if (T < k or (T == k and r > 0.0)) else t0
        if up:  # crossing top -> mid -> low
            bm = hk[MIDMIN, 0] - L0 if M > 0 else np.inf
            bt = (hk[TOP, 0] - L0) - W if T > 0 else np.inf
            vm = M > 0 and bm <= tc
            vt = T > 0 and bt < tc
            if not (vm or vt):
                break
            if vm and (not vt or bm <= bt):
                t0 = bm
                lv += _cross(S, 1, 0, MIDMIN)
            else:
                t0 = bt
                lv += _cross(S, 2, 1, TOP)
        else:  # crossing low -> mid -> top
            bl = -hk[LOW, 0] - L0 if size[LOW] > 0 else -np.inf
            bm = (-hk[MIDMAX, 0] - L0) - W if M > 0 else -np.inf
            vl = size[LOW] > 0 and bl > tc
            vm = M > 0 and bm >= tc
            if not (vl or vm):
                break
            if vl and (not vm or bl >= bm):
                t0 = bl
                lv += _cross(S, 0, 1, LOW)
            else:
                t0 = bm
                lv += _cross(S, 1, 2, MIDMAX)
        moves += 1
    f[0] = tc
    if stats.shape[0] >= 10:
        stats[8] += moves
        stats[9] += lv
    return moves


@njit(cache=True, _nrt=False)
def _heapify(S, h):
    hk, hi, pos, size, f = S
    m = size[h]
    for p in range(m // 2 - 1, -1, -1):
        _sift_down(hk, hi, pos, h, m, p, hk[h, p], hi[h, p])


@njit(cache=True, _nrt=False)
def _reset(S, t, ref, a, c, r, w, k):
    """``f = [t, 0, 0, ref, a, c, r, w, 0]``, every heap empty and every index in none,
    ``size[4] = k``."""
    hk, hi, pos, size, f = S
    for j, v in enumerate((t, 0.0, 0.0, ref, a, c, r, w, 0.0)):
        f[j] = v
    size[:4] = 0
    size[4] = k
    pos[:, :] = -1


@njit(cache=True, _nrt=False, error_model="numpy")
def _box_build(losses, q, nu, c, k, r, S, stats):
    """Fill the structure for the loss table ``losses``; ``q`` (the weights of the table, if
    known) only seeds the starting position of ``tau`` (any ``q`` gives the exact result; a
    good one a short walk)."""
    hk, hi, pos, size, f = S
    n = losses.shape[0]
    A = 2.0 * n * nu
    W = A * c
    # start: tau = the mean of l - A q over the weights strictly inside (0, c); L0 = the
    # mean of those losses (of all losses if none)
    acc = 0.0
    lac = 0.0
    cnt = 0
    lsum = 0.0
    zmax = -np.inf
    lmin = np.inf
    for i in range(n):
        qi = q[i]
        li = losses[i]
        lsum += li
        if li < lmin:
            lmin = li
        if qi > 0.0 and qi < c:
            acc += li - A * qi
            lac += li
            cnt += 1
        elif qi <= 0.0 and li > zmax:
            zmax = li
    if cnt > 0:
        L0 = lac / cnt
        tau = acc / cnt
    else:
        L0 = lsum / n
        tau = zmax if zmax > -np.inf else lmin - W
    if not (abs(L0) < np.inf and abs(tau) < np.inf):  # no finite start: the walk finds it
        L0 = 0.0
        tau = 0.0
    t = tau - L0
    _reset(S, t, L0, A, c, r, W, k)
    for i in range(n):
        li = losses[i]
        d = li - L0
        if d <= t:
            _append(S, LOW, -li, i)
        elif d >= t + W:
            _append(S, TOP, li, i)
        else:
            _append(S, MIDMIN, li, i)
            _append(S, MIDMAX, -li, i)
            _neumaier(f, d)
    for h in range(4):
        _heapify(S, h)
    return _box_settle(S, stats)


@njit(cache=True, _nrt=False, error_model="numpy")
def _box_update(S, i, l, stats):
    """Index ``i``'s loss becomes ``l``: re-file it, then walk ``tau`` to the new root.
    ``stats`` (int64, length >= 10 to collect): ``[8]`` += elements that changed set (``i``
    if re-filed, and every crossing of the walk), ``[9]`` += heap levels sifted."""
    hk, hi, pos, size, f = S
    d = l - f[3]
    s1 = 0 if d <= f[0] else (2 if d >= f[0] + f[7] else 1)
    s0 = _set_of(pos, i)
    lv = 0
    if s0 != s1:
        lv = _delete(S, s0, i) + _insert(S, s1, l, i)
        if stats.shape[0] >= 10:
            stats[8] += 1
    elif s0 == 0:  # stays low / top: tau does not move
        lv = _rekey(S, LOW, i, -l)
    elif s0 == 2:
        lv = _rekey(S, TOP, i, l)
    else:
        _neumaier(f, -(hk[MIDMIN, pos[i, MIDMIN]] - f[3]))
        _neumaier(f, l - f[3])
        lv = _rekey(S, MIDMIN, i, l) + _rekey(S, MIDMAX, i, -l)
    if stats.shape[0] >= 10:
        stats[9] += lv
    if s0 == s1 and s0 != 1:
        return 0
    return _box_settle(S, stats)


@njit(cache=True, _nrt=False, inline="always")
def _box_weight(l, f):
    """Weight of a loss ``l`` at the current ``tau``: ``clip(((l - L0) - (tau - L0)) / A, 0,
    c)``."""
    v = ((l - f[3]) - f[0]) / f[4]
    if v <= 0.0:
        return 0.0
    return v if v < f[5] else f[5]


# ------------------------------------------------------------------------ KL penalty
# With the KL cost ``nu sum q log(n q)`` the maximiser over the capped simplex is
# ``q_i = min(c, exp((l_i - m) / nu))`` (stationarity; no weight reaches 0), one scalar ``m``
# with ``sum_i q_i = k c + r``. Two sets: mid (``l - m < h``, ``h = nu log c``) and top
# (``l - m >= h``), the heaps ``MIDMAX`` and ``TOP``; ``E = sum_mid exp((l - R) / nu)``
# (Neumaier) about a reference ``R``, and the partition's root ``m_P = R + nu (log E - log((k
# - T) c + r))``. The walk is the chi-square one with a single breakpoint per element: ``m``
# up moves top -> mid, ``m`` down mid -> top. ``E`` is recomputed about ``R = m`` from the
# mid heap (O(M)) when ``|m - R|`` passes ``KL_SHIFT nu`` (exp stays in range), and about
# the largest mid loss when ``E`` is out of range or small against the terms summed since its
# last exact recomputation (``f[8]``, their absolute sum: a walk that removes the largest
# terms leaves a sum that can be ~eps^2 of them, all rounding). State: the same arrays, ``f =
# [m - R, E, E's compensation, R, nu, c, r, h, sum of |terms| since the last exact E]``.
KL_SHIFT = 30.0  #: |m - R| / nu that triggers a recomputation of E about R = m


@njit(cache=True, _nrt=False)
def _kl_insert(S, s, l, i):
    """Add index ``i`` with loss ``l`` to set ``s`` (1 mid, 2 top)."""
    if s == 2:
        return _push(S, TOP, l, i)
    f = S[4]
    x = np.exp((l - f[3]) / f[4])
    f[8] += x
    _neumaier(f, x)
    return _push(S, MIDMAX, -l, i)


@njit(cache=True, _nrt=False)
def _kl_delete(S, s, i):
    if s == 2:
        return _remove(S, TOP, i)
    f = S[4]
    x = np.exp((-S[0][MIDMAX, S[2][i, MIDMAX]] - f[3]) / f[4])
    f[8] += x
    _neumaier(f, -x)
    return _remove(S, MIDMAX, i)


@njit(cache=True, _nrt=False)
def _kl_recentre(S, R):
    """The reference becomes ``R`` (``t = m - R`` follows) and ``E`` is recomputed exactly
    from the mid heap's keys."""
    hk, hi, pos, size, f = S
    f[0] += f[3] - R
    f[3] = R
    f[1] = 0.0
    f[2] = 0.0
    for p in range(size[MIDMAX]):
        _neumaier(f, np.exp((-hk[MIDMAX, p] - R) / f[4]))
    f[8] = f[1] + f[2]


@njit(cache=True, _nrt=False)
def _kl_sum(S):
    """``E``, recomputed first (about the largest mid loss, so ``1 <= E <= M``) when out of
    range or below 1e-6 of the terms summed since the last recomputation."""
    hk, hi, pos, size, f = S
    E = f[1] + f[2]
    if size[MIDMAX] > 0 and not (1e-200 < E < 1e200 and f[8] < 1e6 * E):
        _kl_recentre(S, -hk[MIDMAX, 0])
        E = f[1] + f[2]
    return E


@njit(cache=True, _nrt=False, error_model="numpy")
def _kl_settle(S, stats):
    """Walk ``t = m - R`` (``f[0]``, a consistent position) to the root; returns the number of
    elements that crossed the threshold."""
    hk, hi, pos, size, f = S
    E = _kl_sum(S)  # (may re-centre: f read after)
    t0, R, nu, c, r, h = f[0], f[3], f[4], f[5], f[6], f[7]
    k = size[4]
    M = size[MIDMAX]
    T = size[TOP]
    up = True
    mass = (k - T) * c + r
    if M > 0 and mass > 0.0:
        up = nu * (np.log(E) - np.log(mass)) >= t0
    elif M == 0 and T <= k:
        return 0  # every weight c (n = k): flat at the target
    moves = 0
    lv = 0
    while True:
        M = size[MIDMAX]
        T = size[TOP]
        mass = (k - T) * c + r
        f[0] = t0
        E = _kl_sum(S)
        t0 = f[0]
        R = f[3]
        if M > 0 and mass > 0.0 and E > 0.0:
            tp = nu * (np.log(E) - np.log(mass))
            if up:
                tc = tp if tp > t0 else t0
            else:
                tc = tp if tp < t0 else t0
        elif up and (mass <= 0.0 or T > k):
            tc = np.inf
        else:
            tc = t0
        if up:  # m up: top -> mid
            bt = (hk[TOP, 0] - R) - h if T > 0 else np.inf
            if not (T > 0 and bt < tc):
                break
            t0 = bt
            i = hi[TOP, 0]
            l = hk[TOP, 0]
            lv += _remove(S, TOP, i) + _kl_insert(S, 1, l, i)
        else:  # m down: mid -> top
            bm = (-hk[MIDMAX, 0] - R) - h if M > 0 else -np.inf
            if not (M > 0 and bm >= tc):
                break
            t0 = bm
            i = hi[MIDMAX, 0]
            l = -hk[MIDMAX, 0]
            lv += _kl_delete(S, 1, i) + _push(S, TOP, l, i)
        moves += 1
    f[0] = tc
    if abs(tc) > KL_SHIFT * nu and abs(tc) < np.inf:
        _kl_recentre(S, R + tc)
    if stats.shape[0] >= 10:
        stats[8] += moves
        stats[9] += lv
    return moves


@njit(cache=True, _nrt=False, error_model="numpy")
def _kl_build(losses, q, nu, c, k, r, S, stats):
    """``_box_build`` for the KL cost (``q`` seeds ``m``: the mean of ``l - nu log q`` over
    the weights below ``c``)."""
    hk, hi, pos, size, f = S
    n = losses.shape[0]
    h = nu * np.log(c)
    acc = 0.0
    lac = 0.0
    cnt = 0
    lmin = np.inf
    for i in range(n):
        qi = q[i]
        li = losses[i]
        if li < lmin:
            lmin = li
        if qi > 0.0 and qi < c:
            acc += li - nu * np.log(qi)
            lac += li
            cnt += 1
    if cnt > 0:
        R = lac / cnt
        m = acc / cnt
    else:  # every loss on top: the walk moves them down
        R = lmin
        m = lmin - h
    if not (abs(R) < np.inf and abs(m) < np.inf):
        R = 0.0
        m = 0.0
    t = m - R
    if abs(t) > KL_SHIFT * nu:
        R = m
        t = 0.0
    _reset(S, t, R, nu, c, r, h, k)
    for i in range(n):
        li = losses[i]
        if (li - R) - t >= h:
            _append(S, TOP, li, i)
        else:
            _append(S, MIDMAX, -li, i)
            _neumaier(f, np.exp((li - R) / nu))
    f[8] = f[1] + f[2]
    _heapify(S, TOP)
    _heapify(S, MIDMAX)
    return _kl_settle(S, stats)


@njit(cache=True, _nrt=False, error_model="numpy")
def _kl_update(S, i, l, stats):
    """``_box_update`` for the KL cost."""
    hk, hi, pos, size, f = S
    s1 = 2 if (l - f[3]) - f[0] >= f[7] else 1
    s0 = 2 if pos[i, TOP] >= 0 else 1
    if s0 != s1:
        lv = _kl_delete(S, s0, i) + _kl_insert(S, s1, l, i)
        if stats.shape[0] >= 10:
            stats[8] += 1
    elif s0 == 2:  # stays on top: m does not move
        lv = _rekey(S, TOP, i, l)
    else:
        x0 = np.exp((-hk[MIDMAX, pos[i, MIDMAX]] - f[3]) / f[4])
        x1 = np.exp((l - f[3]) / f[4])
        f[8] += x0 + x1
        _neumaier(f, -x0)
        _neumaier(f, x1)
        lv = _rekey(S, MIDMAX, i, -l)
    if stats.shape[0] >= 10:
        stats[9] += lv
    if s0 == 2 and s1 == 2:
        return 0
    return _kl_settle(S, stats)


@njit(cache=True, _nrt=False, inline="always", error_model="numpy")
def _kl_weight(l, f):
    """``min(c, exp(((l - R) - (m - R)) / nu))``."""
    v = np.exp(((l - f[3]) - f[0]) / f[4])
    return v if v < f[5] else f[5]


@njit(cache=True, _nrt=False)
def _box_weights(losses, S, q, kl):
    """All weights (sample order), of the KL cost if ``kl`` else of the chi-square one."""
    f = S[4]
    for i in range(losses.shape[0]):
        q[i] = _kl_weight(losses[i], f) if kl else _box_weight(losses[i], f)
