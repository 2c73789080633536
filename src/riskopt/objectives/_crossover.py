"""Exact finish of the Newton solver for box spectra (CVaR) at ``nu = 0``: a window SQP.

For a box spectrum ``P(sigma) = {q: lo <= q_i <= hi, sum q = 1}`` (CVaR, the mean, the maximum;
:func:`riskopt.objectives._newton._box_spectrum`) the optimum ``w*`` of
``F(w) = max_q sum_i q_i l_i(w) + 1/2 sum_j reg_j w_j^2`` has a threshold ``t``: ``q_i = hi``
on the top set (``l_i > t``), ``lo`` below, ``q_i in [lo, hi]`` on the tie set ``M``
(``l_i = t``; generically ``|M| <= p + 1``: 38 ties on the 200,000 x 50 synthetic CVaR 0.1 of
``benchmarks/estimator_vs_sklearn.py``, 36 on adult CVaR 0.5), ``sum q = 1`` and
``sum_i q_i grad l_i(w) + reg * w = 0`` (``reg_j = 0`` for the intercept). Guessing ``M`` from
the smoothed weights of a continuation stage and solving that square system directly cycled
(the partition has to move by hundreds of samples on the synthetic case), so the tie set is
found inside a model instead:

**Window model.** At ``w``, take the ``2 half`` samples ranked around the threshold's rank (the
window ``V``), freeze the others at ``hi`` / ``lo``, and linearise the window's losses:
``min_d g'd + 1/2 d'Hd + max_{q_V in box, sum q_V = m_V} q_V'(l_V + A_V d)`` with ``g`` the
gradient of the frozen part and the penalty, ``H = X' diag(q l'') X + diag(reg)`` (one weighted
Gram matrix of the top and window rows) and ``A_V`` the window's loss gradients. With
``H = L L'``, ``u = L'd``, ``C = L^-1 A_V'`` and ``c = L^-1 g`` its dual is the box QP
``min_q 1/2 |c + C q|^2 - l_V'q``, solved exactly by a primal active-set method
(:func:`_model_qp`; ``u = -(c + C q)``), in ``O(|V| p)`` per change of the active set.

**Outer step.** ``d = L^-T u``, a backtracking search on ``F`` itself (each trial point's
predictions formed as ``X @ W``, so the certificate holds for them), then the certificate of
the new point with the model's weights (a valid dual point, :func:`riskopt.objectives._newton.
dual_bound`). If the step would carry a frozen sample across ``t`` (to first order) the window
was too narrow: it is doubled and the model solved again. The squared loss is quadratic, so
two outer steps reach the exact tie set (a certified gap of 3e-13 on the synthetic case);
``newton`` keeps the point only when its certificate is within the goal, and continues the
continuation otherwise (a wrong window costs time, never accuracy).
"""
import numpy as np
from scipy.linalg import LinAlgError

from .._kernels import crossover as _kc

#: half-width of the window (samples each side of the threshold's rank) per design column
#: (the synthetic CVaR 0.1 needed a half-width of 816 = 16 x 51 after the first stage)
WINDOW_PER_COLUMN = 16.0
#: most samples in the window
MAX_WINDOW = 4000
#: window doublings of ``box_newton`` (its model step crossed the window's edges)
MAX_GROW = 4
#: model solves (one weighted Gram matrix each, window doublings included) of ``box_newton``
MAX_OUTER = 6
#: widest design (columns) the crossover runs on: each active-set change refactors the
#: ``(|M| + 1)``-square KKT matrix (``|M| <= p + 1``) and a model solve takes ~10 p changes
#: from a vertex (synthetic, p = 51: 542; adult, p = 101: 70-2,020), so the work grows like p^4
MAX_FEATURES = 150
#: active-set changes per model solve: at most this many per column, plus 200
QP_ITER_PER_COLUMN = 30


def _window(ell, k_top, half):
    """``(hi_edge, lo_edge)``: the losses at ranks ``k_top - half`` and ``k_top + half`` (by
    loss, descending; clipped to ``[0, n - 1]``). The window is the samples with losses
    between them (equal losses at its edges join it), the top set those above ``hi_edge``.
    One selection over all the losses (the lower edge), one over the samples above it: a
    two-rank ``np.partition`` of ``n`` losses cost 4x a one-rank one."""
    n = len(ell)
    a, b = max(k_top - half, 0), min(k_top + half, n - 1)
    part = np.partition(-ell, b)
    lo_edge = -part[b]
    hi_edge = lo_edge if a == b else -np.partition(part[:b], a)[a]
    return hi_edge, lo_edge


def _top_rank(n, lo, hi):
    """The rank (0-based, by loss descending) of the threshold of a box spectrum ``[lo, hi]``
    over ``n`` samples: ``hi`` fits ``k_top`` times above ``lo`` in the total 1."""
    k_top = int(np.floor((1.0 - n * lo) / (hi - lo) * (1 + 1e-12)))
    return min(max(k_top, 0), n - 1)


def _half_width(p):
    """The window's default half-width for ``p`` design columns."""
    return int(min(max(WINDOW_PER_COLUMN * p, 50), MAX_WINDOW // 2))


def window_share(objective):
    """The share of the samples in the default window of :func:`box_newton` (``2 half / n``,
    at most 1): the share of the losses its model linearises, the others frozen."""
    return min(2.0 * _half_width(objective.p) / max(objective.n, 1), 1.0)


def _dense_rows(X):
    """``(base, shift, inv_scale, intercept)`` of a design whose rows
    :func:`riskopt._kernels.crossover.window_rows` reads (a C-ordered float64 array, or a
    ``LinearDesign`` over one), else ``None``."""
    if getattr(X, "_is_linear_design", False):
        B = X.base
        parts = (B, X.shift, 1.0 / X.scale, X.intercept)
    else:
        B = X
        p = getattr(X, "shape", (0, 0))[1]
        parts = (B, np.zeros(p), np.ones(p), False)
    if isinstance(B, np.ndarray) and B.dtype == np.float64 and B.flags.c_contiguous:
        return parts
    return None


def _model_qp(C, c, l_w, q, lo, hi, m, max_iter=None):
    """Exact minimiser of the window model's dual ``min_q 1/2 |c + C q|^2 - l_w'q`` over
    ``lo <= q <= hi, sum q = m`` by a primal active-set method from the feasible ``q``: the
    equality-constrained problem on the free set (least squares; a ray in the null space of
    ``[C_F; 1']`` when it is unbounded), a ratio test that fixes the first blocking weight at
    its bound, and the release of the worst-signed multiplier (a fixed sample on the wrong side
    of the threshold ``t``) at a free-set optimum. Returns ``(u, q, ok, t)``, ``u = -(c + C q)``
    the model's step (``ok``: the KKT conditions hold); numba,
    :func:`riskopt._kernels.crossover.model_qp`."""
    p, N = C.shape
    max_iter = 10 * N + 100 if max_iter is None else int(max_iter)
    f = np.ascontiguousarray
    q = _vertex_start(f(q, dtype=np.float64), f(l_w, dtype=np.float64), float(lo), float(hi), p)
    return _kc.model_qp(f(C, dtype=np.float64), f(c, dtype=np.float64),
                        f(l_w, dtype=np.float64), q, float(lo), float(hi),
                        float(m), max_iter)


def _vertex_start(q, l_w, lo, hi, p):
    """``q`` itself when at most ``p + 1`` of its weights are strictly inside the box (the
    generic size of a tie set); otherwise a start with at most one free weight and the same
    total: the free weights' mass is put back on them at ``hi``, in decreasing order of
    ``l_w`` (ties by index), the remainder on the next one, the others at ``lo``.

    The active-set method's step on ``k`` free weights solves a ``(k + 1)``-square KKT system
    of rank at most ``p + 1``: from the oracle's weights at a massive tie (every loss equal,
    e.g. a constant target, whose exact weights are all ``1/n``, inside the CVaR box) it fell
    to least squares on ``n x n`` matrices at every change of the active set: a default
    ``RiskRegressor`` on 4,000 rows with a constant target took minutes in this function. Any
    feasible start reaches the same minimiser."""
    free = (q > lo) & (q < hi)
    k = int(np.count_nonzero(free))
    if k <= p + 1:
        return q
    F = np.flatnonzero(free)
    order = F[np.argsort(-l_w[F], kind="stable")]
    width = hi - lo
    rest = max(float(np.sum(q[F] - lo)), 0.0)
    n_hi = min(int(rest // width), k)
    out = q.copy()
    out[F] = lo
    out[order[:n_hi]] = hi
    if n_hi < k:
        out[order[n_hi]] = min(max(lo + (rest - n_hi * width), lo), hi)
    return out


def box_newton(objective, W, z=None, accept=1e-6, max_outer=MAX_OUTER, half=None, log=None,
               max_grow=None, qp_iter=None, start=None, certify_last=False, certify_from=1):
    """Window SQP to the exact optimum of a box-spectrum risk at ``nu = 0`` from ``W`` (module
    docstring), at most ``max_outer`` model solves and ``max_grow`` window doublings (default
    ``MAX_GROW``); ``qp_iter``: a cap on the active-set changes of each model solve (default
    ``QP_ITER_PER_COLUMN p + 200``), the run ending when one does not finish. ``z``: the
    predictions ``X @ W`` and ``start``: ``(ell, der, F, q0)`` at them (losses, derivatives
    or ``None``, ``F`` and the exact oracle's weights, or ``None, None``: computed here from
    ``ell``), when the caller has them. ``certify_last``: only the point of the last model
    solve allowed (``max_outer``) is certified (one :func:`dual_bound` less per earlier solve:
    the early crossover's first point, whose model took the window's curvature at the start's
    vertex weights, was within its goal in none of the default regression fits of
    ``benchmarks/first_minutes.py``: relative gaps 2.7e-6 to 6e-2 against 1e-6);
    ``certify_from``: only the points of this model solve on (and of the last allowed) are
    certified. Returns
    ``dict(coef, z, q, bound, value, weights, steps, stuck)``: the point with the smallest certified gap
    (``z`` its predictions ``X @ coef``, ``weights`` the exact oracle's at it; ``q``: its dual
    point, ``None`` with ``bound = -inf`` if no step was taken), ``steps`` the model solves
    done and ``stuck`` whether a model solve ran out of ``qp_iter`` (e.g. a massive tie);
    ``None`` if the spectrum is not a box, ``nu > 0``, ``p > MAX_FEATURES`` or ``H`` is not
    positive definite."""
    from ._dual import _box_spectrum, _losses_derivs_z, _rows, _xt_vec, chol_lower, curvature, \
        dual_bound, tri_solve, weighted_gram

    sigma = objective.sigma
    if not _box_spectrum(sigma) or objective.nu != 0 or objective.p > MAX_FEATURES:
        return None
    lo, hi = float(sigma[0]), float(sigma[-1])
    X, n, reg, y = objective.X, objective.n, objective.reg, objective.y
    if qp_iter is None:
        qp_iter = QP_ITER_PER_COLUMN * objective.p + 200
    W = np.asarray(W, dtype=np.float64).reshape(-1).copy()
    z = np.asarray(X @ W, dtype=np.float64).ravel() if z is None else z
    if start is None:
        ell, der = _losses_derivs_z(objective, z)
        F = q0 = None
    else:
        ell, der, F, q0 = start
        if der is None:
            ell, der = _losses_derivs_z(objective, z)
    if q0 is None:
        # q0: the exact weights at W (the oracle that gives F), a feasible vertex of the model
        R, q0 = objective.risk_weights(ell)
        F = R + objective._reg_value(W.reshape(-1, 1))
    k_top = _top_rank(n, lo, hi)
    if half is None:
        half = _half_width(objective.p)
    fused = _dense_rows(X) if lo == 0.0 else None
    square = getattr(objective.loss, "name", "") == "squared"  # (curvature 1)
    q = None
    best = {"coef": W.copy(), "z": z, "q": None, "bound": -np.inf, "value": F, "weights": q0}
    stuck = False
    grown, step, grow_from = 0, 0, None
    max_grow = MAX_GROW if max_grow is None else max_grow
    while step < max_outer:
        step += 1  # one weighted Gram matrix and one X @ d per pass
        hi_edge, lo_edge = _window(ell, k_top, half)
        if q is None:
            q = q0
        if fused is not None:  # (CVaR, a dense design) one pass over the rows
            curv = np.empty(0) if square else curvature(objective.loss, y, z)
            B, Aw, widx, tidx, g = _kc.window_rows(*fused, ell, der, curv, q, hi, hi_edge,
                                                  lo_edge)
            g += reg * W
            H = B.T @ B
        else:
            tidx = np.flatnonzero(ell > hi_edge)
            widx = np.flatnonzero(ell >= lo_edge)
            widx = widx[ell[widx] <= hi_edge]
            qfix = np.full(n, lo)
            qfix[tidx] = hi
            qfix[widx] = 0.0
            g = _xt_vec(X, qfix * der) + reg * W
            qh = np.full(n, lo)
            qh[tidx] = hi
            qh[widx] = np.clip(q[widx], lo, hi)
            H = weighted_gram(X, qh * curvature(objective.loss, y, z))
            Aw = _rows(X, widx) * der[widx][:, None]
        n_top = len(tidx)
        H = np.ascontiguousarray(H)
        diag = H.reshape(-1)[::len(W) + 1]  # a view of the diagonal
        diag += reg + 1e-13 * max(1.0, float(diag.sum()) / len(W))
        # one finiteness test (a sum is inf or nan when an entry is)
        if not np.isfinite(float(H.sum()) + float(g.sum()) + float(Aw.sum())):
            return best if best["q"] is not None else None  # overflow (e.g. unscaled data)
        try:
            L = chol_lower(H)
        except LinAlgError:
            return best if best["q"] is not None else None
        C = tri_solve(L, Aw.T)
        c_fix = tri_solve(L, g)
        l_w = ell[widx]
        m_w = 1.0 - hi * n_top - lo * (n - n_top - len(widx))
        qi = q0[widx]
        if grow_from is not None:  # the narrower window's solution (same total) as the start
            pos = np.searchsorted(widx, grow_from[0])
            qi[pos] = grow_from[1]
        elif step > 1:
            bottom = np.ones(n, dtype=bool)
            bottom[tidx] = False
            bottom[widx] = False
            if np.all(q[tidx] >= hi) and np.all(q[bottom] <= lo):
                qi = q[widx].copy()  # the last model's weights: its active set is nearly right
        u, qw, ok, t = _model_qp(C, c_fix, l_w, qi, lo, hi, m_w, qp_iter)
        grow_from = None
        if not ok:  # the model's optimum was not reached: no step
            stuck = True
            break
        d = tri_solve(L, u, trans=True)
        # the full step's exact predictions (as X @ W is formed everywhere: the certificate
        # holds for them), and X d from them
        W1 = W + d
        z1 = np.asarray(X @ W1, dtype=np.float64).ravel()
        if 2 * half < min(n, MAX_WINDOW) and grown < max_grow:
            # the model froze the samples outside the window: if its step moves one of them
            # across its threshold (to first order) the window is too narrow
            v = ell + der * (z1 - z)
            tol = 1e-9 * max(1.0, abs(t))
            cross = v > t + tol
            cross[tidx] = v[tidx] < t - tol
            cross[widx] = False
            if np.any(cross):
                half, grown = 2 * half, grown + 1
                grow_from = (widx, qw)
                continue
        s = 1.0  # backtracking on F itself
        for _ in range(30):
            ell1, der1 = _losses_derivs_z(objective, z1)
            R1, q1 = objective.risk_weights(ell1)
            F1 = R1 + objective._reg_value(W1.reshape(-1, 1))
            if F1 <= F:
                break
            s *= 0.5
            W1 = W + s * d
            z1 = np.asarray(X @ W1, dtype=np.float64).ravel()
        else:
            break
        W, z, ell, der, F, q0 = W1, z1, ell1, der1, F1, q1
        q = np.full(n, lo)
        q[tidx] = hi
        q[widx] = np.clip(qw, lo, hi)
        q = _restore_total(q, widx[(qw > lo) & (qw < hi)] if np.any((qw > lo) & (qw < hi))
                           else widx, lo, hi)
        if q is None:
            break
        if step < max_outer and (certify_last or step < certify_from):
            continue
        bound, _ = dual_bound(objective, W, q, 0.0, z)
        if log is not None:
            log.append((step, len(widx), int(np.count_nonzero((qw > lo) & (qw < hi))), ok, s,
                        (F - bound) / max(abs(F), 1e-12)))
        if F - bound < best["value"] - best["bound"] or best["q"] is None:
            best = {"coef": W.copy(), "z": z, "q": q, "bound": float(bound), "value": float(F),
                    "weights": q0}
        if F - bound <= accept * max(abs(F), 1e-12):
            break
    best["steps"], best["stuck"] = step, stuck
    return best


def _restore_total(q, M, lo, hi):
    """``q`` with ``sum q = 1`` restored by moving the tie weights ``q[M]`` inside
    ``[lo, hi]`` (``None`` if they cannot absorb the difference)."""
    for _ in range(50):
        r = 1.0 - q.sum()
        if abs(r) <= 1e-15:
            return q
        if len(M) == 0:
            return None
        qm = q[M]
        movable = (qm < hi) if r > 0 else (qm > lo)
        if not np.any(movable):
            return None
        qm[movable] += r / np.count_nonzero(movable)
        q[M] = np.clip(qm, lo, hi)
    return q if abs(1.0 - q.sum()) <= 1e-12 else None
