"""The certificate of the exact spectral solver (:mod:`riskopt.objectives._newton`): lower bounds on
``min F`` from dual points ``q`` in the permutahedron.

:func:`newton_bound` takes one Newton step on ``G_q`` before :func:`~riskopt.objectives._dual.dual_bound`
(the step removes the ``sum g_j^2 / 2 reg_j`` slack); :func:`certify` tries the oracle's weights on a
grid of chi-square smoothings (:data:`CERT_NUS`) and, for a box spectrum (CVaR), the box dual points
of :func:`_box_dual` (the boundary samples' weights re-chosen by bounded least squares), and keeps the
best bound. The weak-duality argument is in :mod:`riskopt.objectives._newton`'s docstring.
"""
import numpy as np
from scipy.linalg import LinAlgError

from .._kernels import oracles as _ko
from ._dual import (_box_spectrum, _losses_derivs_z, chol_solve, curvature, dual_bound,
                    free_gradient, weighted_gram)

#: chi-square shift costs tried for the dual point of a ``nu = 0`` objective (and ``nu = 0``)
CERT_NUS = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)


def newton_bound(objective, W, q, penalty=0.0, z=None, point=False):
    """:func:`dual_bound` for the dual point ``q`` at ``W + d``, ``d = -H^-1 g`` one Newton step
    on ``G_q`` from ``W`` (``H`` its Hessian, ``g`` its gradient): the exact ``min G_q`` for the
    squared loss (``G_q`` quadratic), close to it for the logistic loss. The bound is valid at any
    point; the step removes the ``sum g_j^2 / 2 reg_j`` slack of :func:`dual_bound` at ``W``, which
    dominates when ``reg`` is well below the curvature of ``G_q``. ``-inf`` when the Newton
    system cannot be solved. With ``point``: ``(bound, W1, z1)``, the point ``W + d`` (its
    intercept moved to the minimiser of ``G_q``, as for the bound) and its predictions, or
    ``(-inf, None, None)``: a candidate solution (:func:`newton` keeps it when it lowers
    ``F``)."""
    W = np.asarray(W, dtype=np.float64).reshape(-1)
    X = objective.X
    z = np.asarray(X @ W, dtype=np.float64).ravel() if z is None else z
    fail = (-np.inf, None, None) if point else -np.inf
    _, der = _losses_derivs_z(objective, z)
    H, g = weighted_gram(X, q * curvature(objective.loss, objective.y, z), r=q * der)
    H[np.diag_indices_from(H)] += objective.reg + 1e-12 * max(1.0, float(np.trace(H)) / len(W))
    g += objective.reg * W
    if not (np.all(np.isfinite(H)) and np.all(np.isfinite(g))):
        return fail
    try:
        d = chol_solve(H, -g)
    except (LinAlgError, ValueError):
        return fail
    W1 = W + d
    z1 = np.asarray(X @ W1, dtype=np.float64).ravel()
    lb, c = dual_bound(objective, W1, q, penalty, z1)
    if not point:
        return lb
    if c != 0.0:  # (the intercept is the last coefficient when fitted: dual_bound moved it)
        W1[-1] += c
        z1 += c
    return lb, W1, z1


def certify(objective, W, z=None, value=None):
    """The best certified lower bound on ``min F`` at ``W`` over the dual points tried:
    ``(bound, gap, nu_used)`` with ``gap = F(W) - bound >= 0`` (up to rounding)."""
    W = np.asarray(W, dtype=np.float64).reshape(-1)
    z = objective.X @ W if z is None else z
    ell, _ = _losses_derivs_z(objective, z)
    F = objective.risk_weights(ell)[0] + objective._reg_value(W.reshape(-1, 1)) \
        if value is None else value
    nus = (objective.nu,) if objective.nu > 0 else (0.0,) + CERT_NUS
    best, best_nu = -np.inf, None
    q = np.empty(objective.n)
    q0 = None
    for nu in nus:
        div = objective.div if objective.nu > 0 else _ko.CHI2
        _ko.spectral_risk_weights(ell, objective.sigma, nu, div, q, None)
        if nu == 0.0:
            q0 = q.copy()
        pen = float(_ko._penalty(q, objective.nu, objective.div)) if objective.nu > 0 else 0.0
        lb, _ = dual_bound(objective, W, q, pen, z)
        if lb > best:
            best, best_nu = lb, nu
    if q0 is not None and _box_spectrum(objective.sigma):
        for window in BOX_WINDOWS:
            qb = _box_dual(objective, W, z, ell, q0, window)
            if qb is None:
                continue
            lb, _ = dual_bound(objective, W, qb, 0.0, z)
            if lb > best:
                best, best_nu = lb, f"box({window:g})"
    return best, F - best, best_nu


#: half-widths (relative to ``max(1, |l|)``) of the loss window around the CVaR boundary whose
#: weights the box dual point re-optimises
BOX_WINDOWS = (1e-10, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3)
#: most samples re-optimised in the box dual point (a bounded least-squares problem)
BOX_MAX_FREE = 4000


def _box_dual(objective, W, z, ell, q0, window):
    """A dual point for a box spectrum (CVaR): the weights of the samples whose losses lie
    within ``window`` of the boundary loss are re-chosen in ``[lo, hi]`` (same total) to make
    the gradient of ``G_q`` (penalised coordinates, and the intercept) small, by bounded least
    squares. ``None`` when no boundary or too many samples fall in the window."""
    from scipy.optimize import lsq_linear

    sigma = objective.sigma
    lo, hi = float(sigma[0]), float(sigma[-1])
    top = q0 >= hi
    if not np.any(top) or np.all(top):
        return None
    t = float(np.min(ell[top]))
    free = np.flatnonzero(np.abs(ell - t) <= window * max(1.0, abs(t)))
    if len(free) < 2 or len(free) > BOX_MAX_FREE:
        return None
    _, der = _losses_derivs_z(objective, z)
    A, c = free_gradient(objective, W, der, q0, free)
    reg = objective.reg > 0
    w2 = np.sqrt(2.0 * objective.reg[reg])[:, None]  # the bound's slack: sum g_j^2 / (2 reg_j)
    big = 1e3 / float(w2.min())
    m = float(q0[free].sum())
    M = np.vstack([A[reg] / w2, big * A[~reg], big * np.ones((1, len(free)))])
    b = -np.concatenate([c[reg] / w2[:, 0], big * c[~reg], [big * 0.0]])
    b[-1] = big * m
    res = lsq_linear(M, b, bounds=(lo, hi), method="bvls")
    qf = np.clip(res.x, lo, hi)
    for _ in range(20):  # restore the exact total inside the box
        r = m - qf.sum()
        if abs(r) <= 1e-15 * max(m, 1e-300):
            break
        movable = (qf < hi) if r > 0 else (qf > lo)
        if not np.any(movable):
            return None
        qf[movable] += r / np.count_nonzero(movable)
        np.clip(qf, lo, hi, out=qf)
    q = q0.copy()
    q[free] = qf
    return q
