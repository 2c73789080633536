"""The host side of ``riskopt.torch``'s CPU losses: the float64 copy of a batch of float32
losses that an oracle reads and the count of its NaN / infinite entries in one pass (a
separate ``np.isfinite(...).all()`` pass cost as much as the copy). Loops over 1-D arrays;
``x - x != 0`` flags NaN and +-inf and keeps the loop free of calls, so it vectorises."""
import numpy as np
from numba import njit


@njit(cache=True)
def copy_count_nonfinite(src, dst):
    """``dst[:] = src`` (``dst`` float64); returns the number of NaN / infinite entries."""
    bad = 0
    for i in range(src.shape[0]):
        x = np.float64(src[i])
        dst[i] = x
        bad += (x - x) != 0.0
    return bad


@njit(cache=True)
def count_nonfinite(src):
    """The number of NaN / infinite entries of ``src``."""
    bad = 0
    for i in range(src.shape[0]):
        x = src[i]
        bad += (x - x) != 0.0
    return bad
