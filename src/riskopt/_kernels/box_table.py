"""Risk value of a loss table kept by the incremental box oracle, O(1) after the updates.

``box_oracle`` keeps the weights of a box spectrum (CVaR) with a shift cost ``nu > 0`` under
single-loss changes in O(log n): ``q_i = clip((l_i - tau) / A, 0, c)`` (chi-square) or
``min(c, exp((l_i - m) / nu))`` (KL), read from one scalar. The risk of the table ``R(l) =
q.l - nu D(q || 1/n)`` also needs sums over the sets (with ``s = sum q = k c + r``, ``T =
|top|``, ``M = |mid|``, ``mass = s - T c`` the weight of mid):

* chi-square (``D = n ||q - 1/n||^2``, ``A = 2 n nu``; on mid ``l = tau + A q``)::

      R = c sum_top l + tau mass + sum_mid (l - tau)^2 / (2 A) - n nu T c^2 + nu (2 s - 1)

  from ``sum_top d``, ``sum_mid d`` and ``sum_mid d^2`` with ``d = l - L0`` (``L0`` the
  oracle's reference, fixed between builds);
* KL (``D = sum q log(n q)``; on mid ``q (l - nu log(n q)) = q (m - nu log n)``)::

      R = mass (m - nu log n) + c sum_top l - T nu c log(n c)

  from ``sum_top d`` alone (``d = l - ref``, ``ref`` the oracle's reference at the build).

The sums are Neumaier-compensated in a separate array ``acc`` (the oracle's state is not
touched), with the set each index was last filed in (``where``). An update re-files its own
index; the elements that the oracle's walk moves across a threshold are found afterwards:
the partition is a function of the threshold (``low: l <= tau``, ``top: l >= tau + W``;
KL ``top: l >= m + h``), so every element that changed set has its loss between the old and
the new threshold (widened by a rounding margin). A depth-first search of each heap from its
root visits exactly the entries on the threshold's side of that range (O(elements in it)),
and those whose heap differs from ``where`` move their terms. Every ``n`` updates the
oracle is rebuilt and the sums recomputed exactly (O(n), O(1) amortised), which also moves
``L0`` to the current mid set (the chi-square sum of squares stays well conditioned).

Used by ``riskopt.torch.TableSpectralRiskLoss`` (:class:`BoxTable`).
"""
import math

import numpy as np
from numba import njit

from .box_oracle import (LOW, MIDMAX, MIDMIN, TOP, _box_alloc, _box_build, _box_update,
                         _box_weight, _box_weights, _kl_build, _kl_update, _kl_weight,
                         _nadd, _set_of)

# acc: [ref, top_d, comp, mid_d, comp, mid_d2, comp, updates since the last build]
_REF, _TOP, _MID, _MID2, _COUNT = 0, 1, 3, 5, 7


@njit(cache=True)
def _file(acc, s, l, sign):
    """Add (``sign = 1``) or remove (``-1``) the terms of loss ``l`` in set ``s``."""
    d = l - acc[_REF]
    if s == 2:
        _nadd(acc, _TOP, sign * d)
    elif s == 1:
        _nadd(acc, _MID, sign * d)
        _nadd(acc, _MID2, sign * (d * d))


@njit(cache=True)
def _resum(losses, S, where, acc, kl):
    """Exact sums from scratch (O(n)) about the oracle's current reference."""
    pos = S[2]
    acc[:_COUNT] = 0.0
    acc[_REF] = S[4][3]
    for i in range(losses.shape[0]):
        s = (2 if pos[i, TOP] >= 0 else 1) if kl else _set_of(pos, i)
        where[i] = s
        _file(acc, s, losses[i], 1.0)


@njit(cache=True)
def _tb_build(losses, q, nu, c, k, r, kl, S, where, acc, stats):
    """Build the oracle on ``losses`` (``q`` seeds its start) and the sums."""
    if kl:
        _kl_build(losses, q, nu, c, k, r, S, stats)
    else:
        _box_build(losses, q, nu, c, k, r, S, stats)
    _resum(losses, S, where, acc, kl)
    acc[_COUNT] = 0.0


@njit(cache=True)
def _visit(S, where, acc, h, s, bound, maxheap, stack):
    """Re-file every entry of heap ``h`` (set ``s``) with loss ``>= bound`` (max-heaps
    ``LOW`` / ``MIDMAX``) or ``<= bound`` (min-heaps) whose recorded set differs."""
    hk, hi, pos, size, f = S
    m = size[h]
    key = -bound if maxheap else bound  # every heap is a min-heap of its keys
    if m == 0 or hk[h, 0] > key:
        return
    top = 0
    stack[0] = 0
    while top >= 0:
        p = stack[top]
        top -= 1
        i = hi[h, p]
        if where[i] != s:
            l = -hk[h, p] if maxheap else hk[h, p]
            _file(acc, where[i], l, -1.0)
            _file(acc, s, l, 1.0)
            where[i] = s
        for a in (2 * p + 1, 2 * p + 2):
            if a < m and hk[h, a] <= key:
                top += 1
                stack[top] = a


@njit(cache=True)
def _tb_step(losses, idx, vals, S, where, acc, kl, stats, stack):
    """``losses[idx[j]] = vals[j]`` in turn through the oracle, keeping the sums. Returns
    False when a threshold left the finite range (the caller rebuilds)."""
    f = S[4]
    pos = S[2]
    for j in range(idx.shape[0]):
        i = idx[j]
        v = vals[j]
        _file(acc, where[i], losses[i], -1.0)
        losses[i] = v
        t0 = f[3] + f[0]
        if kl:
            moves = _kl_update(S, i, v, stats)
            s = 2 if pos[i, TOP] >= 0 else 1
        else:
            moves = _box_update(S, i, v, stats)
            s = _set_of(pos, i)
        _file(acc, s, v, 1.0)
        where[i] = s
        acc[_COUNT] += 1.0
        if moves == 0:
            continue
        t1 = f[3] + f[0]
        if not (abs(t0) < np.inf and abs(t1) < np.inf):
            return False
        w = f[7]
        mg = 1e-12 * (abs(t0) + abs(t1) + abs(w))
        lo = min(t0, t1) - mg
        hi = max(t0, t1) + mg
        if kl:  # one threshold, m + h
            _visit(S, where, acc, MIDMAX, 1, lo + w, True, stack)
            _visit(S, where, acc, TOP, 2, hi + w, False, stack)
        else:  # tau and tau + W
            _visit(S, where, acc, LOW, 0, lo, True, stack)
            _visit(S, where, acc, MIDMIN, 1, hi, False, stack)
            _visit(S, where, acc, MIDMAX, 1, lo + w, True, stack)
            _visit(S, where, acc, TOP, 2, hi + w, False, stack)
    return True


@njit(cache=True)
def _tb_value(S, acc, n, nu, kl):
    """``R(table)`` from the threshold, the set sizes and the sums (O(1))."""
    size = S[3]
    f = S[4]
    c, r = f[5], f[6]
    k = size[4]
    T = size[TOP]
    mass = (k - T) * c + r
    top = T * acc[_REF] + (acc[_TOP] + acc[_TOP + 1])
    if kl:
        m = f[3] + f[0]
        v = c * top - T * nu * c * math.log(n * c)
        if mass != 0.0:
            v += mass * (m - nu * math.log(n))
        return v
    A = f[4]
    t = f[0] + (f[3] - acc[_REF])
    M = size[MIDMIN]
    sd = acc[_MID] + acc[_MID + 1]
    sd2 = acc[_MID2] + acc[_MID2 + 1]
    sq = max(sd2 - 2.0 * t * sd + M * t * t, 0.0)
    s = k * c + r
    v = c * top + sq / (2.0 * A) - n * nu * T * c * c + nu * (2.0 * s - 1.0)
    if mass != 0.0:
        v += (acc[_REF] + t) * mass
    return v


@njit(cache=True)
def _tb_weights_at(losses, idx, S, kl, out):
    f = S[4]
    for j in range(idx.shape[0]):
        l = losses[idx[j]]
        out[j] = _kl_weight(l, f) if kl else _box_weight(l, f)


class BoxTable:
    """Box-oracle state of a complete loss table of ``n`` entries (CVaR-type spectrum
    ``(c, k, r)`` from ``box_oracle._box_spectrum``, shift cost ``nu > 0``, ``kl`` for the
    KL cost, else chi-square). The table array is the caller's; :meth:`step` writes it."""

    def __init__(self, n, nu, c, k, r, kl):
        self.n, self.nu, self.c, self.k, self.r, self.kl = int(n), float(nu), c, k, r, bool(kl)
        self._S = _box_alloc(self.n)
        self._where = np.empty(self.n, dtype=np.int8)
        self._acc = np.zeros(8)
        self._stack = np.empty(self.n + 2, dtype=np.int64)
        self._stats = np.zeros(10, dtype=np.int64)

    def build(self, losses, q=None):
        """Build from ``losses`` (O(n)); ``q`` (any weights, e.g. the exact ones) seeds the
        threshold's start."""
        if q is None:
            q = np.full(self.n, 1.0 / self.n)
        _tb_build(losses, np.ascontiguousarray(q, dtype=np.float64), self.nu, self.c, self.k,
                  self.r, self.kl, self._S, self._where, self._acc, self._stats)
        return self

    def step(self, losses, idx, vals):
        """``losses[idx] = vals`` (distinct indices, in order) through the oracle; rebuilds
        (exact sums) once ``n`` updates have accumulated or a threshold left the finite
        range. Returns whether it rebuilt (the caller's guards on the table can run
        there)."""
        ok = _tb_step(losses, np.ascontiguousarray(idx, dtype=np.int64),
                      np.ascontiguousarray(vals, dtype=np.float64), self._S, self._where,
                      self._acc, self.kl, self._stats, self._stack)
        if not ok or self._acc[_COUNT] >= self.n:
            self.build(losses, self.weights(losses))
            return True
        return False

    def value(self):
        """``R(table)`` (O(1))."""
        return float(_tb_value(self._S, self._acc, self.n, self.nu, self.kl))

    def weights_at(self, losses, idx):
        """The weights of the entries ``idx`` (O(len(idx)))."""
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        out = np.empty(idx.shape[0])
        _tb_weights_at(losses, idx, self._S, self.kl, out)
        return out

    def weights(self, losses):
        """All ``n`` weights (O(n))."""
        q = np.empty(self.n)
        _box_weights(losses, self._S, q, self.kl)
        return q
