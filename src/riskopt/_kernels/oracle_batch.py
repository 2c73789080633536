"""The sorting oracle of a small batch in one kernel call (the torch losses' host path).

``oracles.risk_weights(..., radix=True)`` on at most ``sort_keys.RADIX_MAX`` float64 losses
runs, one kernel call after another from Python: the tie pre-check
(``oracle_ties.few_values``), the radix argsort (``sort_keys._radix_order``), and the fused
PAV / scatter / value (``oracle_fused._chi2_runs_gathered`` / ``_kl_gathered``, or
``oracle_select._risk_weights_nu0`` for ``nu = 0``), each with its own scratch lookup.
:func:`batch_risk_weights` makes the same calls inside one ``njit`` function, on one tuple
of scratch arrays kept per thread and size: the same decisions and the same arithmetic, so
the value and the weights are those of that path bit for bit; it declines (returns None,
nothing of use written) wherever that path would leave these kernels (tied losses
predicted, all three sampled losses equal, a loss the radix sort declines, a KL table too
wide for the linear PAV), and the caller then runs that path. At n = 8192 it saves the
Python between the kernels (about 10-17 us of 190-260, ``benchmarks/oracle_speed.py``'s
torch rows). :func:`batch_risk_weights_f32` runs it on a float32 batch in place (the torch
losses' float32 batches: no float64 copy and no separate NaN pass; stop 42).
"""
import math
import threading

import numpy as np
from numba import njit

from .oracle_fused import _chi2_runs_gathered, _kl_gathered
from .oracle_select import _risk_weights_nu0
from .oracle_ties import TIES_MAX_GROUPS, _TABLE_MAX, _few_values
from . import sort_keys
from .sort_keys import RADIX_BITS, _radix_order

#: ``oracles.risk_weights`` (and :func:`_batch_weights`) try the tied oracle
#: (``oracle_ties``) from this many losses on (re-exported by ``oracles``).
TIES_MIN_N = 256


@njit(cache=True)
def _batch_weights(x, bits, sigma, nu, div, q, f32, pk, cnt, tmp, order, ls, work, iwork,
                   hkeys, hcnt):
    """``(value, True)`` with ``q`` written, or ``(nan, False)`` where the kernel declines
    (see the module docstring). ``x`` contiguous float64, or float32 (read as its float64
    values: :func:`batch_risk_weights_f32`), ``bits`` its view as unsigned integers of its
    width; scratch of :func:`_scratch`."""
    n = x.shape[0]
    if n >= TIES_MIN_N:
        if x[0] == x[n - 1] and x[0] == x[n // 2]:
            return np.nan, False      # (oracles: equal_risk_weights first)
        if _few_values(x, bits, TIES_MAX_GROUPS, hkeys, hcnt):
            return np.nan, False      # (oracles: the tied oracle first)
    if not _radix_order(x, f32, pk, cnt, tmp, order, ls):
        return np.nan, False
    if nu == 0.0:
        return _risk_weights_nu0(order, ls, sigma, q), True
    if div == 0:
        return _chi2_runs_gathered(order, ls, sigma, nu, q, work, iwork), True  # (stop 43)
    v = _kl_gathered(order, ls, sigma, nu, q, work, iwork)   # (KL PAV: _kl_pav)
    return v, not math.isnan(v)


_SCRATCH = threading.local()


def _scratch(n):
    """This thread's scratch arrays of :func:`_batch_weights` for ``n`` losses (kept for the
    last ``n``): the radix sort's (float32 keys, packed keys twice, the digit counts), the
    order and sorted losses, the PAV's (``3 n`` floats, ``2 n`` int64), the tie tables.
    Nothing is read from the scratch before it is written in the same call."""
    ws = getattr(_SCRATCH, "ws", None)
    if ws is None or ws[0] != n:
        # the sort's two packed-key arrays are dead once ``order`` and ``ls`` are out: they
        # are the first 2 n of the PAV's 3 n floats (a smaller working set: L2 is 512 KiB)
        buf = np.empty(3 * n, dtype=np.uint64)
        ws = (n, np.empty(n, dtype=np.float32), buf[:n],
              np.empty(2 << RADIX_BITS, dtype=np.int64), buf[n:2 * n],
              np.empty(n, dtype=np.int64), np.empty(n), buf.view(np.float64),
              np.empty(2 * n, dtype=np.int64), np.empty(_TABLE_MAX, dtype=np.uint64),
              np.empty(_TABLE_MAX, dtype=np.int64))
        _SCRATCH.ws = ws
    return ws[1:]


def _checked_call(losses, dtype, bits, sigma, nu, div, q):
    """:func:`_batch_weights` on ``losses`` read as ``bits`` where they are a contiguous
    vector of ``2 <= n <= sort_keys.RADIX_MAX`` entries of ``dtype``: the value, or None
    (declined, or not such a vector)."""
    n = losses.shape[0]
    if not (2 <= n <= sort_keys.RADIX_MAX and losses.dtype == dtype and losses.ndim == 1
            and losses.flags.c_contiguous):
        return None
    v, ok = _batch_weights(losses, losses.view(bits), sigma, float(nu), int(div), q,
                           *_scratch(n))
    return float(v) if ok else None


def batch_risk_weights(losses, sigma, nu, div, q):
    """The value of ``oracles.risk_weights(losses, sigma, nu, div, q, radix=True)`` with
    ``q`` written, for ``2 <= n <= sort_keys.RADIX_MAX`` contiguous float64 ``losses`` (bit for bit),
    or None where :func:`_batch_weights` declines or the input is not such a vector (the
    caller then runs its usual path)."""
    return _checked_call(losses, np.float64, np.uint64, sigma, nu, div, q)


def batch_risk_weights_f32(losses, sigma, nu, div, q):
    """:func:`batch_risk_weights` of the float64 copy of ``2 <= n <= sort_keys.RADIX_MAX``
    contiguous float32 ``losses`` (a torch loss's batch), read in place: the value and ``q``
    (float64) bit for bit those of the copy, or None where that call would decline or
    return None, and for a NaN / infinite loss (the caller then copies and checks).

    The kernel reads each loss as its float64 value (exact), so it makes the decisions
    and the arithmetic of the copy's call: the tie sample compares the float32 bits, equal
    exactly where the float64 bits are (NaN declines either way), the radix keys are the
    float32 roundings (the losses themselves), and the sorted losses are the float64 values.
    No copy pass, and 64 KiB less memory in the step at n = 8192."""
    return _checked_call(losses, np.float32, np.uint32, sigma, nu, div, q)
