"""One call per step for the group-sized part of the torch FCCO optimizers' CPU path (SONX,
SOX, SONEX, ALEXR2; :meth:`riskopt.torch.optim.fcco._FCCOBase._surrogate_host`): the MSVR
update of the tracked inner values of a batch's groups, written into their table, and the
built-in outer function's gradient and value there.

The arithmetic is the NumPy code's (``riskopt.torch.optim._updates_fcco.fcco_track_numpy`` and
the outer functions' ``grad_value_numpy``), operation for operation in the table's dtype:
the scalars arrive already rounded to that dtype (as NumPy rounds a Python float meeting a
float32 array), no literal constant enters a float32 expression (numba would promote it to
float64), and no fastmath (no contraction into fused multiply-adds). So the numbers are the
NumPy code's and the torch code's, bit for bit (signed zeros aside). A handful of groups cost
one dispatch here against some fifteen NumPy calls.

Outer functions (``kind``): 0 hinge ``rho [u - kappa]_+``, 1 ``rho [|u| - kappa]_+``,
2 squared hinge ``half_rho [u - kappa]_+^2``, 3 its absolute form, 4 group CVaR
``s + [u - s]_+ / r`` (``rho = 1 / r``); the gradient is the Moreau envelope's
``clip(t / lam, 0, rho)`` (``lam = 0``: ``rho 1[t > 0]``), times ``sign(u)`` for 1 and 3.
"""
import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _max(x, z):
    """``numpy.maximum(x, z)`` for a non-NaN ``z`` (NaN propagates)."""
    return x if (x >= z or x != x) else z


@njit(cache=True, inline="always")
def _min(x, z):
    """``numpy.minimum(x, z)`` for a non-NaN ``z`` (NaN propagates)."""
    return x if (x <= z or x != x) else z


@njit(cache=True, inline="always")
def _sign(x, zero, one):
    """``torch.sign`` (0 at NaN), in ``x``'s dtype."""
    if x > zero:
        return one
    if x < zero:
        return -one
    return zero


@njit(cache=True, error_model="numpy")      # (x / 0 is IEEE's, as in NumPy: no raise)
def track_outer(ut, st, idx, now, prev, par, kind, y):
    """Rows ``idx`` (distinct) of ``ut`` / ``st``: ``u = a u + b now (+ c (now - prev))``,
    ``u = now`` at a first visit, then ``y[j] = f'(u_j)``; returns the float64 sum of
    ``f(u_j)`` in order (the sum of ``value.tolist()``). ``par`` (``ut``'s dtype) holds
    ``a = 1 - gamma``, ``b = gamma``, ``c = gamma'``, ``lam``, ``rho``, ``kappa``,
    ``half_rho``, ``r``, ``s``; ``kind = 10 * use_prev + 5 * (lam > 0) + outer kind`` (with
    ``lam > 0`` judged in float64: a float32 ``lam`` may round to 0)."""
    a, b, c, lam, rho, kappa, half_rho, r, s = (par[0], par[1], par[2], par[3], par[4],
                                                par[5], par[6], par[7], par[8])
    use_prev = kind >= 10
    kind = kind - 10 if use_prev else kind
    positive = kind >= 5
    kind = kind - 5 if positive else kind
    zero = ut.dtype.type(0)
    one = ut.dtype.type(1)
    total = 0.0
    for j in range(idx.shape[0]):
        i = idx[j]
        x = now[j]
        if st[i]:
            u = a * ut[i] + b * x
            if use_prev:
                u = u + c * (x - prev[j])
        else:
            u = x
        ut[i] = u
        st[i] = True
        if kind == 1 or kind == 3:
            t = abs(u) - kappa
        elif kind == 4:
            t = u - s
        else:
            t = u - kappa
        if kind == 2 or kind == 3:
            t = _max(t, zero)
            g = rho * t
            if kind == 3:
                g = rho * _sign(u, zero, one) * t
            v = half_rho * (t * t)
        else:
            if positive:
                g = _min(_max(t / lam, zero), rho)
            else:
                g = rho if t > zero else zero
            if kind == 1:
                g = _sign(u, zero, one) * g
            if kind == 4:
                v = s + _max(t, zero) / r
            else:
                v = rho * _max(t, zero)
        y[j] = g
        total += np.float64(v)
    return total


# ------------------------------------------------------------------------------------ OOA
@njit(cache=True)
def ooa_terms(L, cap, p, idx, n_over_k, w):
    """OOA's batch (``riskopt.torch.optim._updates_fcco.ooa_batch``'s NumPy code, the same
    operations): returns the terms ``clip(1 - j cap, 0, cap) top_j`` of the group losses
    ``L`` sorted descending (the caller sums them with NumPy's ``sum``: its pairwise order),
    and writes the surrogate's weights ``w[j] = p[idx[j]] * n_over_k``."""
    top = np.sort(L)[::-1]
    out = np.empty_like(top)
    for j in range(top.shape[0]):
        c = 1.0 - np.float64(j) * cap
        c = cap if c > cap else (0.0 if c < 0.0 else c)
        out[j] = c * top[j]
    for j in range(idx.shape[0]):
        w[j] = p[idx[j]] * n_over_k
    return out


@njit(cache=True, inline="always")
def _count_le(a, tau):
    """``numpy.searchsorted(a, tau, side="right")`` on a sorted ``a``."""
    lo, hi = 0, a.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if tau < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True, error_model="numpy")
def ooa_project(table, idx, L, dual_coef, cap):
    """OOA's ascent step in place: ``table <- Proj(table + dual_coef L e_idx)`` onto the
    capped simplex ``{0 <= p <= cap, sum p = 1}`` (``riskopt.torch.optim._updates_fcco.
    _capped_simplex_host``'s operations: the breakpoints ``a``, ``a - cap`` of the sorted
    ``a``, the piecewise-linear mass ``phi`` at each, and ``tau`` interpolated between the
    last breakpoint with mass >= 1 and the next)."""
    x = table.copy()
    for j in range(idx.shape[0]):
        x[idx[j]] = x[idx[j]] + dual_coef * L[j]
    m = x.shape[0]
    a = np.sort(x)
    ac = a - cap
    suffix = np.zeros(m + 1)
    acc = 0.0
    for i in range(m - 1, -1, -1):
        acc = a[i] if i == m - 1 else acc + a[i]
        suffix[i] = acc
    bp = np.sort(np.concatenate((a, ac)))
    phi = np.empty(2 * m)
    count = 0
    for q in range(2 * m):
        tau = bp[q]
        j1 = _count_le(a, tau)
        j2 = _count_le(ac, tau)
        f1 = suffix[j1] - np.float64(m - j1) * tau
        f2 = (suffix[j2] - cap * np.float64(m - j2)) - np.float64(m - j2) * tau
        phi[q] = f1 - f2
        count += phi[q] >= 1.0
    j = max(count - 1, 0)
    k = min(j + 1, 2 * m - 1)
    lo, hi, plo, phi_hi = bp[j], bp[k], phi[j], phi[k]
    denom = plo - phi_hi
    tau = lo + (plo - 1.0) * (hi - lo) / denom if denom > 0 else lo
    for i in range(m):
        t = x[i] - tau
        table[i] = cap if t > cap else (0.0 if t < 0.0 else t)
