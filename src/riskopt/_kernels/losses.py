"""Per-sample losses of linear models, as numba functions.

A linear model has a coefficient matrix ``W`` of shape ``(p, K)`` (``K = 1`` for scalar
outputs). Rows of the design matrix are already augmented with a trailing 1 when the
model has an intercept, so ``z = x @ W`` is the prediction (length ``K``).

Loss codes (kept in sync with ``riskopt.losses``):

* 0 squared   ``0.5 (z - y)^2``
* 1 absolute  ``|z - y|`` (derivative: sign, 0 at the kink)
* 2 logistic  ``log(1 + exp(z)) - y z`` with ``y in {0, 1}``
* 3 multinomial ``logsumexp(z) - z[y]`` with integer ``y`` stored as float
"""
import math

import numpy as np
from numba import njit

SQUARED = 0
ABSOLUTE = 1
LOGISTIC = 2
MULTINOMIAL = 3


@njit(cache=True, inline="always")
def _log1pexp(z):
    if z > 0.0:
        return z + math.log1p(math.exp(-z))
    return math.log1p(math.exp(z))


@njit(cache=True, inline="always")
def _sigmoid(z):
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


# the per-step helpers of the stochastic kernels run without numba's reference counting
# (``_nrt=False``, a private flag; they allocate nothing): its atomic incref/decref of every
# array argument cost more than their arithmetic (incremental_pav's module docstring)
@njit(cache=True, _nrt=False)
def _predict_row(X, i, W, z):
    """z[:] = X[i] @ W."""
    p, K = W.shape
    for k in range(K):
        z[k] = 0.0
    for j in range(p):
        xij = X[i, j]
        if xij != 0.0:
            for k in range(K):
                z[k] += xij * W[j, k]


@njit(cache=True, inline="always")
def _exp_normalise(x, top, out):
    """``out = exp(x - top) / sum exp(x - top)`` (``out`` may be ``x``); returns the sum
    (the softmax of the multinomial loss and of group DRO's weights)."""
    s = 0.0
    for k in range(x.shape[0]):
        out[k] = math.exp(x[k] - top)
        s += out[k]
    for k in range(x.shape[0]):
        out[k] /= s
    return s


@njit(cache=True, _nrt=False)
def _loss_deriv(code, y, z, dz):
    """Loss value at prediction ``z`` (length K) for target ``y``; writes dloss/dz to ``dz``."""
    if code == SQUARED:
        r = z[0] - y
        dz[0] = r
        return 0.5 * r * r
    elif code == ABSOLUTE:
        r = z[0] - y
        if r > 0.0:
            dz[0] = 1.0
        elif r < 0.0:
            dz[0] = -1.0
        else:
            dz[0] = 0.0
        return abs(r)
    elif code == LOGISTIC:
        s = _sigmoid(z[0])
        dz[0] = s - y
        return _log1pexp(z[0]) - y * z[0]
    else:
        K = z.shape[0]
        c = int(y)
        m = z[0]
        for k in range(1, K):
            if z[k] > m:
                m = z[k]
        s = _exp_normalise(z, m, dz)
        dz[c] -= 1.0
        return m + math.log(s) - z[c]


@njit(cache=True)
def _loss_value(code, y, z):
    dz = np.empty(z.shape[0])
    return _loss_deriv(code, y, z, dz)


@njit(cache=True)
def _losses_derivs(code, X, y, W, losses, derivs):
    """All per-sample losses and derivatives: ``losses[i]``, ``derivs[i, :]``."""
    n = X.shape[0]
    K = W.shape[1]
    z = np.empty(K)
    dz = np.empty(K)
    for i in range(n):
        _predict_row(X, i, W, z)
        losses[i] = _loss_deriv(code, y[i], z, dz)
        for k in range(K):
            derivs[i, k] = dz[k]


@njit(cache=True, _nrt=False)
def _add_outer(X, i, coef, d, G):
    """G += coef * outer(X[i], d)."""
    p, K = G.shape
    for j in range(p):
        xij = X[i, j] * coef
        if xij != 0.0:
            for k in range(K):
                G[j, k] += xij * d[k]


def losses_derivs_1(code, y, z, losses, derivs):
    """Per-sample losses and derivatives for one output (``code`` not multinomial) from
    predictions ``z``, into ``losses`` and ``derivs`` (shape (n,)): the Newton solver's loss
    pass. The logistic loss and the squared / absolute ones are separate kernels, so that a
    first fit compiles the loop of its own loss only (the three branches in one kernel took
    about 0.35 s to compile, the logistic loop alone about 0.22 s)."""
    if code == SQUARED or code == ABSOLUTE:
        _losses_derivs_1(code, y, z, losses, derivs)
    else:
        _logistic_derivs_1(y, z, losses, derivs)


@njit(cache=True)
def _losses_derivs_1(code, y, z, losses, derivs):
    """:func:`losses_derivs_1` of the squared (``code == SQUARED``) or else the absolute
    loss."""
    for i in range(z.shape[0]):
        r = z[i] - y[i]
        if code == SQUARED:
            derivs[i] = r
            losses[i] = 0.5 * r * r
        else:
            derivs[i] = 1.0 if r > 0.0 else (-1.0 if r < 0.0 else 0.0)
            losses[i] = abs(r)


@njit(cache=True)
def _logistic_derivs_1(y, z, losses, derivs):
    """:func:`losses_derivs_1` of the logistic loss: :func:`_sigmoid` and :func:`_log1pexp`
    sharing one ``exp`` (the same roundings)."""
    for i in range(z.shape[0]):
        zi = z[i]
        if zi > 0.0:
            e = math.exp(-zi)
            derivs[i] = 1.0 / (1.0 + e) - y[i]
            losses[i] = zi + math.log1p(e) - y[i] * zi
        else:
            e = math.exp(zi)
            derivs[i] = (e / (1.0 + e) if zi < 0.0 else 0.5) - y[i]
            losses[i] = math.log1p(e) - y[i] * zi


@njit(cache=True)
def _losses_derivs_z(code, y, Z, losses, derivs):
    """Per-sample losses and derivatives from predictions ``Z`` (n, K)."""
    n, K = Z.shape
    if K == 1 and code != MULTINOMIAL:  # scalar fast path (no row views): same formulas
        if code == SQUARED or code == ABSOLUTE:
            _losses_derivs_1(code, y, Z[:, 0], losses, derivs[:, 0])
        else:
            _logistic_derivs_1(y, Z[:, 0], losses, derivs[:, 0])
        return
    dz = np.empty(K)
    for i in range(n):
        losses[i] = _loss_deriv(code, y[i], Z[i], dz)
        for k in range(K):
            derivs[i, k] = dz[k]
