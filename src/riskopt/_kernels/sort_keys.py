"""The sort of the batch oracles: ``sorted_order(losses)`` is the stable argsort of the losses
(and the sorted losses), made by one SIMD ``np.sort`` of 64-bit keys that carry the index in
their low bits, or for small n by a radix sort of float32 keys (:func:`sorted_order`). Split from :mod:`riskopt._kernels.oracles`, which
re-exports ``sorted_order``."""
import threading

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _key(b, sign):
    """The order-preserving unsigned key of the float64 with bit pattern ``b``: sign bit set
    for ``x >= 0``, all bits flipped for ``x < 0``; ``-0.0`` gets the key of ``+0.0`` and
    every NaN that of the positive quiet NaN (after ``+inf``), so equal values (and NaNs)
    have equal keys, as a stable sort by value needs."""
    if b == sign:
        return sign
    if (b & ~sign) > np.uint64(0x7FF0000000000000):
        return np.uint64(0xFFF8000000000000)
    return ~b if b & sign else b | sign


@njit(cache=True)
def _packed_keys(bits, shift, out):
    """``out[i]`` = :func:`_key` of ``bits[i]`` with its low ``shift`` bits replaced by
    ``i``."""
    sign = np.uint64(1) << np.uint64(63)
    hi = ~((np.uint64(1) << np.uint64(shift)) - np.uint64(1))
    for i in range(bits.shape[0]):
        out[i] = (_key(bits[i], sign) & hi) | np.uint64(i)


@njit(cache=True)
def _float_keys(bits, shift, out):
    """Sort keys that ``np.sort`` orders as floats (NumPy's SIMD sort of float64, 2.3 of
    14.3 ms faster than of uint64 at n = 1e6, ``benchmarks/oracle_speed.py``): the bits of
    ``x`` (``-0.0`` as ``+0.0``) with their low ``shift`` bits replaced by the index ``i``
    (``x >= 0``) or by ``2^shift - 1 - i`` (``x < 0``, whose bits order the other way), so
    losses sharing their high bits stay in index order and the others in value order; the
    exponent is untouched, so every key is finite. Returns False (nothing of use written)
    for an infinite or NaN loss (:func:`_packed_keys` then)."""
    sign = np.uint64(1) << np.uint64(63)
    lo = (np.uint64(1) << np.uint64(shift)) - np.uint64(1)
    hi = ~lo
    for i in range(bits.shape[0]):
        b = bits[i]
        if b == sign:
            b = np.uint64(0)
        if (b & ~sign) >= np.uint64(0x7FF0000000000000):
            return False
        if b & sign:
            out[i] = (b & hi) | (lo - np.uint64(i))
        else:
            out[i] = (b & hi) | np.uint64(i)
    return True


@njit(cache=True, inline="always")
def _unpack(keys, order, shift, losses, ls, floats):
    """The loop of :func:`_unpack_keys` (``floats=False``) and :func:`_unpack_float_keys`
    (``floats=True``: a key with the sign bit set is a negative float's, its index bits
    complemented); inlined into both, where ``floats`` is a constant."""
    n = keys.shape[0]
    sign = np.uint64(1) << np.uint64(63)
    lo = (np.uint64(1) << np.uint64(shift)) - np.uint64(1)
    disorder = False
    prev = -np.inf
    for r in range(n):
        k = keys[r]
        if floats and (k & sign) != 0:
            i = np.int64(lo - (k & lo))
        else:
            i = np.int64(k & lo)
        order[r] = i
        x = losses[i]
        ls[r] = x
        disorder |= x < prev
        prev = x
    return disorder


@njit(cache=True)
def _unpack_float_keys(keys, order, shift, losses, ls):
    """:func:`_unpack_keys` for the keys of :func:`_float_keys` (sorted as floats)."""
    return _unpack(keys, order, shift, losses, ls, True)


@njit(cache=True)
def _unpack_keys(keys, order, shift, losses, ls):
    """Split the sorted packed keys into ``order`` (``keys``' own memory, as int64: the keys
    are gone after) and ``ls = losses[order]``. Returns True when ``ls`` is out of order
    somewhere: a run of losses sharing their key's high bits (the low ``shift`` bits of the
    values were dropped), which the caller puts in order by value (:func:`sorted_order`;
    a stable sort of the nearly sorted ``ls`` in NumPy, not numba's merge sort, whose
    compilation took a third of a first fit's compile time)."""
    return _unpack(keys, order, shift, losses, ls, False)


@njit(cache=True)
def _fix_runs(order, ls, limit):
    """Put the out-of-order runs left by :func:`_unpack_keys` in order by value, in place,
    by a stable insertion sort (pairs ``(ls[r], order[r])`` move together): linear plus the
    number of moves, which is small for the short near-equal runs of continuous losses (a
    stable ``np.argsort`` of all of ``ls`` took 12 of 30 ms at n = 1e6). Equal losses keep
    their index order, so the result is the stable argsort. Returns False once the moves
    exceed ``limit`` (a long near-equal run: the caller then sorts ``ls`` stably; what was
    moved so far is still a permutation with ``ls = losses[order]``)."""
    n = ls.shape[0]
    moves = 0
    for r in range(1, n):
        x = ls[r]
        if x < ls[r - 1]:
            o = order[r]
            j = r
            while j > 0 and ls[j - 1] > x:
                ls[j] = ls[j - 1]
                order[j] = order[j - 1]
                j -= 1
            ls[j] = x
            order[j] = o
            moves += r - j
            if moves > limit:
                return False
    return True


#: :func:`sorted_order` sorts up to this many losses by :func:`_radix_order`.
RADIX_MAX = 1 << 15
#: the digits of :func:`_radix_order`: two passes of ``RADIX_BITS`` bits each
RADIX_BITS = 11


@njit(cache=True)
def _radix_order(x, f32, pk, cnt, tmp, order, ls):
    """The stable argsort of finite ``x`` (``order``, and ``ls = x[order]``) for small n, in
    one kernel: no ``np.sort`` call, two scatter passes. The key of ``x_i`` is its float32
    rounding (monotone, ``-0.0`` as ``+0.0``) as an order-preserving uint32, less the least
    key and shifted right until the span fits ``2 RADIX_BITS`` bits, so the key of a loss
    never exceeds that of a larger one; an LSD radix sort of the keys (stable, from index
    order; key and index packed in one uint64 that the passes move) puts equal keys in
    index order, and :func:`_fix_runs` puts the runs of equal keys in order by value (exact
    losses; float32 keeps 24 bits, so such runs are rare but for a span over ``2^22``
    float32 steps). Returns False (the caller sorts otherwise) for a NaN / inf loss, one
    beyond float32's range, or too many moves in :func:`_fix_runs`. ``f32`` (float32: the
    roundings, then their keys in place, so that the histogram pass reads them), ``pk``,
    ``tmp`` (uint64), ``order`` (int64) and ``ls`` have length n, ``cnt`` (int64)
    ``2^(RADIX_BITS + 1)``. The least and largest key come from integer reductions over the
    keys (vectorised), which with the keys kept took the sort from 52 to 44 us at n = 8192
    (probe, min of 41 blocks, one process; the same order bit for bit)."""
    n = x.shape[0]
    ok = True
    for i in range(n):
        xi = x[i]
        f32[i] = xi + 0.0            # (-0.0 + 0.0 = +0.0)
        ok &= abs(xi) <= 3.4e38      # (False for NaN, inf and beyond float32)
    if not ok:
        return False
    u = f32.view(np.uint32)
    sgn = np.uint32(0x80000000)
    # the keys of the least and the largest loss: the float32 rounding and the key are
    # monotone, so these are the least and the largest key (integer reductions: vectorised,
    # where a float min / max chain is not)
    kmin = np.uint32(0xFFFFFFFF)
    kmax = np.uint32(0)
    for i in range(n):
        b = u[i]
        k = b ^ (np.uint32(np.int32(b) >> np.int32(31)) | sgn)
        u[i] = k                     # (the key in place of the float32)
        kmin = min(kmin, k)
        kmax = max(kmax, k)
    nb = 1 << RADIX_BITS
    mask = np.uint64(nb - 1)
    span = np.uint32(kmax - kmin)
    s = np.uint32(0)
    while (span >> s) >= np.uint32(1 << (2 * RADIX_BITS)):
        s += np.uint32(1)
    for d in range(2 * nb):
        cnt[d] = 0
    for i in range(n):
        k = np.uint64((u[i] - kmin) >> s)
        pk[i] = (k << np.uint64(32)) | np.uint64(i)
        cnt[k & mask] += 1
        cnt[nb + (k >> np.uint64(RADIX_BITS))] += 1
    a = 0
    c = 0
    for d in range(nb):
        t = cnt[d]
        cnt[d] = a
        a += t
        t = cnt[nb + d]
        cnt[nb + d] = c
        c += t
    sh1 = np.uint64(32)
    sh2 = np.uint64(32 + RADIX_BITS)
    for i in range(n):
        w = pk[i]
        d = (w >> sh1) & mask
        p = cnt[d]
        tmp[p] = w
        cnt[d] = p + 1
    src = tmp
    if cnt[nb + 1] != n:             # some key at or above 2^RADIX_BITS: the second pass
        for j in range(n):
            w = tmp[j]
            d = nb + (w >> sh2)
            p = cnt[d]
            pk[p] = w
            cnt[d] = p + 1
        src = pk
    disorder = _unpack_keys(src, order, 32, x, ls)   # (the index in the low 32 bits)
    if disorder:
        return _fix_runs(order, ls, 4 * n)
    return True


_RADIX = threading.local()


def _radix_scratch(n):
    """This thread's scratch of :func:`_radix_order` for ``n`` losses (kept for the last
    ``n``)."""
    ws = getattr(_RADIX, "ws", None)
    if ws is None or ws[0] != n:
        ws = (n, np.empty(n, dtype=np.float32), np.empty(n, dtype=np.uint64),
              np.empty(2 << RADIX_BITS, dtype=np.int64), np.empty(n, dtype=np.uint64))
        _RADIX.ws = ws
    return ws[1:]


def sorted_order(losses, keys=None, ls=None, radix=False):
    """``(order, losses[order])``: ``order`` is ``np.argsort(losses, kind="stable")``.

    With ``radix`` (the batch oracles of the torch losses), up to ``RADIX_MAX`` finite
    losses: :func:`_radix_order`, one
    kernel, no ``np.sort`` call (1.0-1.05x ``np.sort`` at n = 8192 against 1.3x for the keys
    below, both 1.4x at 2^16; loaded machine, one process). Off by default: compiling
    :func:`_radix_order` costs about 1.2 s, more than the default estimator's whole first
    fit can spare (``benchmarks/first_minutes.py``, goal <= 3 s), for a gain of microseconds
    per sort of its training losses. Else one SIMD sort of 64-bit keys (finite losses: ``np.sort`` of float64 keys,
    :func:`_float_keys`; else of uint64 keys, :func:`_packed_keys`) instead of an argsort,
    3x (unstable) to 8x (stable) slower at n = 1e6: a key is the float's bit pattern (the
    order-preserving :func:`_key` for uint64) with its low ``ceil(log2 n)`` bits replaced by
    the index, so equal losses stay in index order. The
    dropped bits are at most 2^-32 relative for n <= 2^20; runs of losses that close are put
    in order by value afterwards with a stable sort of the nearly sorted values (NumPy's
    timsort), so the result is exactly the stable argsort (NaNs last, ``-0.0`` equal to
    ``+0.0``). Falls back to ``np.argsort`` for n > 2^40.
    ``keys`` (uint64) and ``ls`` (float64), of length n, are used in place of fresh arrays
    when given: ``order`` is then ``keys``' memory.
    """
    x = np.ascontiguousarray(losses, dtype=np.float64)
    n = x.shape[0]
    shift = max(1, (n - 1).bit_length())
    if n > 1 and shift <= 40:
        keys = np.empty(n, dtype=np.uint64) if keys is None else keys
        order = keys.view(np.int64)
        ls = np.empty(n) if ls is None else ls
        if radix and n <= RADIX_MAX and _radix_order(x, *_radix_scratch(n), order, ls):
            return order, ls
        if _float_keys(x.view(np.uint64), shift, keys):
            keys.view(np.float64).sort()
            disorder = _unpack_float_keys(keys, order, shift, x, ls)
        else:
            _packed_keys(x.view(np.uint64), shift, keys)
            keys.sort()
            disorder = _unpack_keys(keys, order, shift, x, ls)
        if disorder and not _fix_runs(order, ls, 4 * n):
            # equal losses are in index order, so a stable sort by value of this nearly
            # sorted sequence is the stable argsort of ``losses`` (timsort: linear on runs)
            sub = np.argsort(ls, kind="stable")
            order[:] = order[sub]
            ls[:] = ls[sub]
        return order, ls
    order = np.argsort(x, kind="stable")
    return order, x[order]
