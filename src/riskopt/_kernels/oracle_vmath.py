"""Vectorisable ``exp`` and ``log`` for the KL oracles (numba has no SVML here, and a loop of
``math.exp`` / ``math.log`` is a libm call per element: 43 of 73 us of the KL PAV at n = 8192,
``benchmarks/oracle_speed.py``).

Both are branch-free loops of multiplies and adds that LLVM turns into AVX2 / FMA code
(``fastmath={"contract"}``: fused multiply-adds only, no reassociation), with the exponent
moved in and out of the float by integer operations on an array view (no int64 <-> float
conversion, which AVX2 lacks): ``exp`` by Cody-Waite reduction ``x = k ln2 + r``, ``|r| <=
ln2 / 2``, and Taylor's polynomial of degree 13 (truncation 4e-18 relative); ``log`` by ``y =
2^k m``, ``m`` in ``[sqrt(1/2), sqrt(2))`` and ``log m = 2 atanh((m - 1) / (m + 1))`` to 12
terms. Both within 1-2 ulp of libm (``tests/test_oracle_small.py``). They work in chunks of
``VCHUNK`` elements through two small scratch arrays, so the scratch stays in L1 whatever n.
"""
import numpy as np
from numba import njit

VCHUNK = 2048
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01   # ln 2 to 32 bits: k * _LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.90821492927058770002e-10
_MAGIC = 6755399441055744.0            # 1.5 * 2^52: x + _MAGIC rounds x to an integer
_MAGIC_BITS = np.int64(0x4338000000000000)
_MANT = np.int64(0x000FFFFFFFFFFFFF)
_ONE_BITS = np.int64(0x3FF0000000000000)
_SQRT2_MANT = np.int64(0x0006A09E667F3BCD)  # the mantissa bits of sqrt(2)


@njit(cache=True, fastmath={"contract"}, error_model="numpy")
def _exp_chunk(x, top, nu, out, tb, ib):
    """``out[j] = exp((x[j] - top) / nu)`` for ``j < len(x)`` (at most ``len(tb)``); the
    arguments must lie in ``[-700, 0]`` (the callers' tables are at most 600 ``nu`` wide)."""
    m = x.shape[0]
    for j in range(m):
        xi = (x[j] - top) / nu
        t = xi * _LOG2E + _MAGIC
        k = t - _MAGIC
        r = (xi - k * _LN2_HI) - k * _LN2_LO
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        out[j] = p
        tb[j] = t
    tbi = tb.view(np.int64)
    for j in range(m):
        ib[j] = (tbi[j] - _MAGIC_BITS + 1023) << 52   # the bits of 2^k
    sc = ib.view(np.float64)
    for j in range(m):
        out[j] *= sc[j]


@njit(cache=True)
def exp_terms(x, top, nu, out):
    """``out[r] = exp((x[r] - top) / nu)`` for every r, every argument in ``[-700, 0]``
    (vectorised; within 2 ulp of ``math.exp`` of the same argument)."""
    n = x.shape[0]
    tb = np.empty(VCHUNK)
    ib = np.empty(VCHUNK, dtype=np.int64)
    for off in range(0, n, VCHUNK):
        end = min(n, off + VCHUNK)
        _exp_chunk(x[off:end], top, nu, out[off:end], tb, ib)


@njit(cache=True, fastmath={"contract"}, error_model="numpy")
def _log_chunk(y, out, ib, kb):
    """``out[j] = log(y[j])`` for ``j < len(y)`` (at most ``len(ib)``) and positive normal
    ``y``."""
    m = y.shape[0]
    yi = y.view(np.int64)
    for j in range(m):
        b = yi[j]
        hi = (b & _MANT) >= _SQRT2_MANT        # m >= sqrt 2: take m / 2 and k + 1
        k = (b >> 52) - 1023 + (1 if hi else 0)
        ib[j] = (b & _MANT) | (_ONE_BITS - (np.int64(1) << 52 if hi else 0))
        kb[j] = _MAGIC_BITS + k                # the bits of _MAGIC + k
    mf = ib.view(np.float64)
    kf = kb.view(np.float64)
    for j in range(m):
        mm = mf[j]
        k = kf[j] - _MAGIC
        s = (mm - 1.0) / (mm + 1.0)
        s2 = s * s
        p = 1.0 / 25.0
        p = p * s2 + 1.0 / 23.0
        p = p * s2 + 1.0 / 21.0
        p = p * s2 + 1.0 / 19.0
        p = p * s2 + 1.0 / 17.0
        p = p * s2 + 1.0 / 15.0
        p = p * s2 + 1.0 / 13.0
        p = p * s2 + 1.0 / 11.0
        p = p * s2 + 1.0 / 9.0
        p = p * s2 + 1.0 / 7.0
        p = p * s2 + 1.0 / 5.0
        p = p * s2 + 1.0 / 3.0
        lm = 2.0 * s + (2.0 * s) * (s2 * p)
        mf[j] = k * _LN2_HI + (lm + k * _LN2_LO)
    for j in range(m):
        out[j] = mf[j]


@njit(cache=True)
def log_all(y, out):
    """``out[r] = log(y[r])`` for positive normal ``y`` (vectorised; within 2 ulp of
    ``math.log``). ``out`` may be ``y``."""
    n = y.shape[0]
    ib = np.empty(VCHUNK, dtype=np.int64)
    kb = np.empty(VCHUNK, dtype=np.int64)
    for off in range(0, n, VCHUNK):
        end = min(n, off + VCHUNK)
        _log_chunk(y[off:end], out[off:end], ib, kb)
