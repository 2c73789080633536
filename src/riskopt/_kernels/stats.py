"""Column statistics of a dense design in two passes over its rows (numba).

:func:`column_stats` gives what the estimators' feature scaling (``riskopt._scaling``) needs:
column means (optional), sums of squared deviations from them, maxima and minima, with float64
accumulators for a float32 or float64 ``X`` and no temporary of ``X``'s size. NumPy's block
version read ``X`` four to five times (sum, max, min, the centred copy, its squares).
"""
import numpy as np
from numba import njit


@njit(cache=True)
def column_stats(X, center):
    """``(m, ss, mx, mn)`` of the columns of a dense 2-D ``X``: ``m`` the means (zeros if not
    ``center``), ``ss = sum_i (X_ij - m_j)^2`` (two passes: no cancellation), ``mx``, ``mn``
    the maxima and minima."""
    n, d = X.shape
    m = np.zeros(d)
    if center and n > 0:
        for i in range(n):
            for j in range(d):
                m[j] += X[i, j]
        for j in range(d):
            m[j] /= n
    ss = np.zeros(d)
    mx = np.full(d, -np.inf)
    mn = np.full(d, np.inf)
    for i in range(n):
        for j in range(d):
            v = float(X[i, j])
            if v > mx[j]:
                mx[j] = v
            if v < mn[j]:
                mn[j] = v
            e = v - m[j]
            ss[j] += e * e
    return m, ss, mx, mn
