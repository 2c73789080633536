"""A dual point for box spectra (CVaR) at points where many losses tie, by linear programming.

At the CVaR optimum the samples whose loss equals the boundary loss ``t`` carry weights in
``[lo, hi]`` that make the gradient of the ``q``-weighted problem vanish. When few samples tie,
:func:`riskopt.objectives._newton._box_dual` finds such weights by bounded least squares; when
very many tie -- the degenerate fits where ``w = 0`` is optimal and every loss equals
``loss(0)`` (e.g. the logistic CVaR of the worst 10 % on adult), or heavily discretised data --
that dense solve is too large, the smoothed certificates cannot close the gap, and the fit is
left uncertified. Here the weights of the tied samples are chosen by a sparse linear program
(HiGHS): minimise ``sum_j |g_j| / sqrt(2 reg_j)`` over the penalised coordinates of the
gradient ``g`` of ``G_q`` at ``W``, with the intercept's derivative held at 0 exactly and the
total weight fixed. Any ``q`` of the spectrum's box gives a valid lower bound through
:func:`~riskopt.objectives._newton.dual_bound`; the LP only picks a good one, so the result is
rigorous whatever the LP's accuracy.

Examples
--------
>>> import numpy as np, riskopt as ro
>>> from riskopt.objectives._newton import dual_bound
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(400, 3)); y = np.where(rng.random(400) < 0.5, 1.0, -1.0)
>>> obj = ro.Objective("logistic", "cvar:0.1", X, y, l2_reg=1e-3, fit_intercept=True)
>>> W = np.zeros(obj.p)          # w = 0: every loss is log 2
>>> q = lp_tie_dual(obj, W)
>>> bound, _ = dual_bound(obj, W, q)
>>> bool(abs(bound - np.log(2)) < 1e-12)    # w = 0 is optimal, certified exactly
True
"""
import numpy as np

__all__ = ["lp_tie_dual"]

#: most tied samples the LP takes (its matrix is dense: p x free)
LP_MAX_FREE = 200_000


def lp_tie_dual(objective, W, z=None, window=1e-10):
    """A dual point ``q`` (length ``n``) of a box spectrum at ``W``: the spectrum's weights of
    the sorted losses, with the weights of the samples whose loss lies within ``window``
    (relative to ``max(1, |t|)``) of the boundary loss ``t`` re-chosen by the LP (module
    docstring). ``None`` when the spectrum is not a box, nothing ties at the boundary, too many
    samples tie, or the LP fails."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, hstack, identity, vstack

    from . import _dual as nw

    sigma = objective.sigma
    if objective.nu > 0 or not nw._box_spectrum(sigma):
        return None
    W = np.asarray(W, dtype=np.float64).reshape(-1)
    z = np.asarray(objective.X @ W, dtype=np.float64).ravel() if z is None else z
    ell, der = nw._losses_derivs_z(objective, z)
    lo, hi = float(sigma[0]), float(sigma[-1])
    # the boundary loss: the sorted loss at the first rank whose spectrum weight exceeds lo
    t = float(np.sort(ell)[int(np.argmax(sigma > lo))])
    near = np.abs(ell - t) <= window * max(1.0, abs(t))
    free = np.flatnonzero(near)
    q0 = np.where(ell > t, hi, lo)
    q0[free] = 0.0
    total = 1.0 - float(q0.sum())                   # the weight the tied samples share
    if len(free) < 2 or len(free) > LP_MAX_FREE or not (
            lo * len(free) - 1e-12 <= total <= hi * len(free) + 1e-12):
        return None
    q0[free] = total / len(free)
    A, c = nw.free_gradient(objective, W, der, q0, free)
    pen = objective.reg > 0
    scale = 1.0 / np.sqrt(2.0 * objective.reg[pen])
    Ap, cp = A[pen] * scale[:, None], c[pen] * scale
    k, m = int(pen.sum()), len(free)
    # variables [q_free (m), s (k)]: minimise sum s with -s <= Ap q + cp <= s
    I = identity(k, format="csr")
    A_ub = vstack([hstack([csr_matrix(Ap), -I]), hstack([csr_matrix(-Ap), -I])], format="csr")
    b_ub = np.concatenate([-cp, cp])
    eq = [np.ones((1, m))] + ([A[~pen]] if np.any(~pen) else [])
    A_eq = hstack([csr_matrix(np.vstack(eq)), csr_matrix((len(np.vstack(eq)), k))], format="csr")
    b_eq = np.concatenate([[total], -c[~pen]])
    cost = np.concatenate([np.zeros(m), np.ones(k)])
    bounds = [(lo, hi)] * m + [(0, None)] * k
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds,
                  method="highs")
    if res.status != 0 or res.x is None:
        return None
    q = q0.copy()
    q[free] = np.clip(res.x[:m], lo, hi)
    return q
