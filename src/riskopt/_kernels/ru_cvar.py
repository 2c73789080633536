"""Kernel of :meth:`riskopt.objectives.ru_cvar.RUCVaRObjective.value_many`: the RU hinge sums of
many points in one fused pass over the rows (no ``n x m`` temporaries)."""
import math

from numba import njit

_LN2 = math.log(2.0)

#: Loss codes of :func:`_ru_hinge_sums`.
CODES = {"squared": 0, "absolute": 1, "logistic": 2}


@njit(cache=True)
def _ru_hinge_sums(code, X, y, W, a, acc):
    """``acc[k] += sum_i max(l_i(W[:, k]) - a[k], 0)`` (codes: 0 squared, 1 absolute, 2 logistic).

    Logistic: ``log(1 + e^z) - y z`` with ``y`` in {0, 1}, computed stably.
    """
    n, p = X.shape
    m = W.shape[1]
    for i in range(n):
        yi = y[i]
        for k in range(m):
            z = 0.0
            for j in range(p):
                z += X[i, j] * W[j, k]
            if code == 0:
                r = z - yi
                ell = 0.5 * r * r
            elif code == 1:
                ell = abs(z - yi)
            else:
                # max(z, 0) - y z <= ell <= that + log 2: skip the logarithm when the hinge
                # is 0 anyway (most rows lie below alpha ~ VaR)
                lb = (z if z > 0.0 else 0.0) - yi * z
                if lb + _LN2 <= a[k]:
                    continue
                ell = lb + math.log1p(math.exp(-abs(z)))
            h = ell - a[k]
            if h > 0.0:
                acc[k] += h
