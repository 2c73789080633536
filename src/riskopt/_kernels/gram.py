"""Row sums for the Newton solver's generalised Hessian (numba).

:func:`pool_row_sums` gives ``U[b] = sum_{k: pid[k] = b} vals[k] X[rows[k]]``: the sums of
weighted design rows over the pools of the chi-square oracle (``riskopt.objectives._newton``),
one pass over the rows concerned instead of a sparse ``(n, pools)`` product.
:func:`scaled_rows` fills the float32 block ``sqrt(h_i) z_i`` of the weighted Gram matrix
``Z' diag(h) Z`` of the standardised rows ``z_i`` (and adds ``Z' h`` over the block), one pass
over the rows.
"""
import numpy as np
from numba import njit


@njit(cache=True)
def pool_row_sums(X, rows, vals, pid, out):
    """``out[pid[k]] += vals[k] * X[rows[k]]`` for every ``k`` (``out``: ``(n_pools, p)``
    float64, zeros from the caller: no array is made here, one kernel less to compile in a
    first fit)."""
    p = X.shape[1]
    for k in range(rows.shape[0]):
        i = rows[k]
        b = pid[k]
        v = vals[k]
        for j in range(p):
            out[b, j] += v * X[i, j]
    return out


@njit(cache=True)
def pool_runs(order, ls, q, sigma, scale, thr, starts, ends):
    """Pools of a chi-square oracle solution (``riskopt.objectives._newton_hessian._pools``): maximal
    runs (length >= 2) of consecutive sorted samples off their ``sigma`` rank with equal
    ``q - l scale`` (to 64 ulps). ``ls`` are the sorted losses; writes the runs
    ``[starts[b], ends[b])`` (int64 arrays of length >= n // 2 + 1 from the caller) and
    returns their number."""
    n = order.shape[0]
    eps64 = 64.0 * 2.220446049250313e-16
    m = 0
    run = -1  # start of the current run, -1 if none
    prev_off, prev_noise, prev_offrank = 0.0, 0.0, False
    for i in range(n):
        qi = q[order[i]]
        li = ls[i] * scale
        noise = eps64 * (abs(li) + abs(qi))
        offrank = abs(qi - sigma[i]) > thr + noise
        off = qi - li
        if i > 0 and offrank and prev_offrank and abs(off - prev_off) <= noise + prev_noise:
            if run < 0:
                run = i - 1
        elif run >= 0:
            starts[m] = run
            ends[m] = i
            m += 1
            run = -1
        prev_off, prev_noise, prev_offrank = off, noise, offrank
    if run >= 0:
        starts[m] = run
        ends[m] = n
        m += 1
    return m


@njit(cache=True)
def scaled_rows(X, s, h, rows, a, b, buf, v, shift, inv_scale, r, g):
    """``buf[k - a] = s[i] * z_i`` (float32) for ``i = rows[k]`` (``i = k`` if ``rows`` is
    empty), ``a <= k < b``, with ``z_ij = (X[i, j] - shift[j]) * inv_scale[j]`` formed in
    float64 (standardised before the float32 store: raw columns of scale 1e18 would overflow
    float32 products, and an offset column would lose its centred part), ``v += h[i] * z_i``
    and ``g += r[i] * z_i`` (float64: ``Z' h`` and a gradient ``Z' r`` in the same pass over
    the rows; a caller that wants neither passes scratch). One loop body, no flags: the three
    variants of the flagged kernel it replaces compiled in 0.55 s, this in about 0.3 s of a
    first fit."""
    p = X.shape[1]
    take = rows.shape[0] > 0
    for k in range(a, b):
        i = rows[k] if take else k
        si = s[i]
        hi = h[i]
        ri = r[i]
        t = k - a
        for j in range(p):
            z = (X[i, j] - shift[j]) * inv_scale[j]
            buf[t, j] = z * si
            v[j] += hi * z
            g[j] += ri * z
