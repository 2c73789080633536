r"""Fairness constraints for the linear estimators (``constraint=`` of
:class:`~riskopt.RiskClassifier` / :class:`~riskopt.RiskRegressor`).

The estimators solve

.. math::

    \min_w F(w) \quad \text{s.t.} \quad c_j(w) \le 0, \ j = 1..J,

with ``F`` the estimator's objective (any spectral risk of the losses plus the l2 term) and the
constraints built from *cell means* ``r_k(w) = mean_{i in cell k} phi(z_i)`` of the linear
output ``z_i = x_i . w``. The groups are the distinct values of ``sensitive_features`` (the
intersections of its columns when it has several), with fairlearn's keyword and conventions:

========================  ==============================================  ====================
``constraint``            constraint (bound ``tol = constraint_tol``)      cells, ``phi``
========================  ==============================================  ====================
``demographic_parity``    ``max_g r_g - min_g r_g <= tol``                 groups, ``s(z)``
``equalized_odds``        the same for ``y = 0`` and for ``y = 1``         group x label, ``s(z)``
``equal_opportunity``     the same for ``y = 1`` (true-positive rates)     group x {1}, ``s(z)``
``bounded_group_loss``    ``r_g <= tol`` for every group                    groups, the loss
========================  ==============================================  ====================

so the rate constraints bound exactly the quantity of fairlearn's
``demographic_parity_difference`` / ``equalized_odds_difference`` (between groups, worst case),
written as the ``m (m - 1)`` pairwise inequalities ``r_g - r_h <= tol`` per block.
fairlearn's reductions (``DemographicParity(difference_bound=tol)``, ...) bound ``|r_g -
r_overall|`` instead, which allows a between-group difference up to about twice the bound: that
form is ``constraint="demographic_parity:to_overall"`` (``2 m`` inequalities per block, with
``r_overall = sum_g (n_g / n) r_g``; likewise ``equalized_odds:to_overall`` and
``equal_opportunity:to_overall``; the reported values are then ``max_g |r_g - r_overall|``).
Bounded group loss is fairlearn's ``BoundedGroupLoss(upper_bound=tol)``.

**Smoothing.** The rate of positive predictions ``mean 1[z > 0]`` is replaced by the smoothed
rate ``mean s(z)``, ``s(z) = sigmoid(z / SMOOTHING)`` with ``SMOOTHING = 1`` logit: the mean
predicted probability of the group (for the logistic loss), a smooth surrogate that moves
the whole model rather than the few samples next to the boundary (``SMOOTHING = 0.1``, the
earlier default, fitted adult/sex demographic parity at 0.8297 test accuracy where this one
reaches 0.8354 at a lower test gap; ``benchmarks/fairness_vs_fairlearn.py``).

**Calibration.** The deterministic model predicts ``1[z > 0]``, and its *hard* training rates
are what the bound is for: the solver corrects every cell's smoothed rate by its offset to the
hard one, ``delta_k = r_hard_k - r_smooth_k`` at the last solution, bounds ``E (r_smooth +
delta) <= tol - slack / 2`` and re-solves from there (offsets damped by half after the first
round, :data:`CALIBRATION_ROUNDS` rounds per smoothing, then the finer smoothings of
:data:`CALIBRATION_SMOOTHING` whose offsets are smaller), until the hard rates meet ``tol`` and
the active ones are within ``slack = max(0.1 tol, 1 / n_k)`` of it; it keeps the round with the
lowest objective among those that meet the bound (if none does -- cells of a few rows -- the
first, uncalibrated solution, whose smoothed rates meet it, with a ConvergenceWarning; at most
:data:`CALIBRATION_BUDGET` times the first solve's SQP steps, and a round at most
:data:`CALIBRATION_ROUND_STEPS` times them: a round that needs many more is the iteration
chasing a hard rate that jumps with a single score -- compas' tied scores --: it is cut off
and dropped, and the calibration goes on at the next, finer smoothing from the last solved
round). A cell of fewer than
``CALIBRATION_MIN_CELL / tol`` rows (100 at ``tol = 0.02``) keeps its smoothed rate: its hard
rate moves in steps of ``1 / n_k >= tol / 2``, so a hard bound there is decided by a sample or
two (and its test rate is noise). With ``randomized=True`` there is no calibration: the
smoothed rate is then the expected rate of the randomised predictions, and the constraint holds
for it to ``1e-3 tol`` (``tol`` the estimator's, the solver's feasibility tolerance). The
fitted ``smoothing_`` is the smoothing of the returned round.

**Solver.** Sequential quadratic programming with exact second derivatives where they exist
(:func:`solve`): at ``w`` the step minimises the quadratic model ``g.d + d.H d / 2`` of the
Lagrangian under the linearised constraints ``c + A d <= 0``, with ``H = X' diag(h) X +
diag(reg)``, ``h_i = q_i l''_i + mu_{k(i)} phi''(z_i) / n_k`` (``q`` the risk's weights, ``mu =
E' lambda`` the multiplier of row ``i``'s cell; negative ``h_i`` -- the non-convex part of the
smoothed rates -- are dropped so that ``H`` stays positive definite). The quadratic program is
solved through its dual, a ``J x J`` non-negative quadratic program (``J`` the number of
constraints, a few dozen at most), by coordinate descent warm-started from the previous
multipliers; the step is accepted by an Armijo test on the exact l1 penalty ``F + rho sum_j
max(c_j, 0)``. Each step costs one weighted Gram matrix (as the Newton solver of
:mod:`riskopt.objectives._newton`), so a fit costs about as many Gram matrices as the
unconstrained Newton fit plus a few: on adult this is what makes it faster than fairlearn's
``ExponentiatedGradient``, which refits the unconstrained model some 10-50 times
(``benchmarks/fairness_vs_fairlearn.py``). A non-smooth risk (a spectral risk without shift
cost) is smoothed by a chi-square shift cost, driven down by a factor 10 per stage to ``1e-2
tol`` times the mean loss at the start. Where there is no per-sample curvature (several
outputs, other problem families) scipy's SLSQP solves the same program with the same
constraint functions and gradients.

What is certified: at the returned point the constraints hold to the feasibility tolerance,
and the Newton decrement of the Lagrangian (with the computed multipliers ``lambda >= 0``) and
the complementarity ``sum_j lambda_j |c_j|`` are below ``1e-2 tol |F|``: a KKT point.
Bounded group loss with a convex loss and a convex risk is a convex program (so that point is
the optimum: tested against cvxpy); the smoothed rate constraints are not convex (a local
solution, from the start ``w = 0`` or the warm start).

**Endgame.** The exact Hessian of the Lagrangian is indefinite where the multipliers of the
rate constraints are large; the model then adds ``sigma A_a' A_a`` (``A_a`` the gradients of
the constraints active at the last step), which leaves the SQP step unchanged when the active
set is right (only the multipliers shift, and are shifted back) and makes it positive
definite under the second-order conditions, so the last steps converge fast (adult, race,
equalized odds: 59 steps with the negative curvature dropped, 19 with this term).
The model is deterministic (no randomised classifier) unless ``randomized=True``.
"""
import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.special import expit

__all__ = ["CONSTRAINTS", "SMOOTHING", "FairnessProblem", "solve", "sensitive_codes",
           "parse_constraint"]

#: the constraints of ``constraint=``
CONSTRAINTS = ("demographic_parity", "equalized_odds", "equal_opportunity",
               "bounded_group_loss")
#: ``constraint=`` strings: the constraints, and the rate constraints with fairlearn's
#: reductions' form (``":to_overall"``: every group's rate within ``tol`` of the overall rate)
CONSTRAINT_SPECS = CONSTRAINTS + tuple(f"{c}:to_overall" for c in CONSTRAINTS[:3])
#: the logit scale ``tau`` of the smoothed rate ``mean sigmoid(z / tau)``
SMOOTHING = 1.0
#: rounds of the calibration of the smoothed bounds to the hard training rates at most
CALIBRATION_ROUNDS = 6
#: the finer smoothings the calibration moves to when it has not settled at ``SMOOTHING``
CALIBRATION_SMOOTHING = (0.3, 0.1, 0.03)
#: the share of the change of the offsets ``r_hard - r_smooth`` taken per calibration round
CALIBRATION_DAMPING = 0.5
#: the calibration's SQP steps at most, in multiples of the first solve's (at least 20)
CALIBRATION_BUDGET = 15
#: SQP steps at most per calibration round, in multiples of the first solve's (at least 20);
#: a round cut off there is dropped and the calibration moves on to the next, finer
#: smoothing from the last solved round (a round that needs many more steps than the first
#: solve is the iteration chasing a hard rate that jumps -- tied scores -- not converging to
#: it); None: no cap but the budget (the default up to stop 39; 3 since stop 40: compas'
#: equalized-odds fits whose calibration spiked to 0.6-1.0 x fairlearn's fit time, with the
#: same fallbacks and bounds; benchmarks/results/fairness_vs_fairlearn/stop40)
CALIBRATION_ROUND_STEPS = 3
#: cells with fewer than ``CALIBRATION_MIN_CELL / tol`` rows keep the smoothed rate (their hard
#: rate moves in steps of ``1 / n_k >= tol / 2``: a hard bound at ``tol`` is not resolvable)
CALIBRATION_MIN_CELL = 2.0
#: small cells (under ``CALIBRATION_MIN_CELL / tol`` rows) get a *shrunk* offset instead of none:
#: ``w_k (r_hard_k - r_smooth_k) + (1 - w_k) delta_block``, ``w_k = n_k tol /
#: CALIBRATION_MIN_CELL`` (their own offset, weighted by their size) and ``delta_block`` the
#: size-weighted mean offset of the block's large cells (:func:`rate_estimate`)
CALIBRATION_POOLED = False
#: SQP steps at most per intermediate stage of the shift-cost continuation (non-smooth risks)
STAGE_MAX_ITER = 50
#: largest multiplier before the constraints are declared infeasible
_LAMBDA_MAX = 1e8


def sensitive_codes(sensitive_features, n):
    """``(codes, labels)``: each row's group index and the sorted group labels (tuples for
    several columns: their intersections); clear errors for bad input."""
    sf = sensitive_features
    if hasattr(sf, "to_numpy"):  # pandas Series / DataFrame
        sf = sf.to_numpy()
    arr = np.asarray(sf, dtype=object)
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"sensitive_features must be 1-D or 2-D (one column per sensitive "
                         f"feature), got shape {np.shape(sf)}")
    if arr.shape[0] != n:
        raise ValueError(f"sensitive_features has {arr.shape[0]} rows but X has {n}: one "
                         "value per sample is needed")
    cols = []
    for j in range(arr.shape[1]):
        col = arr[:, j]
        if any(v is None or (isinstance(v, float) and v != v) for v in col):
            raise ValueError(f"sensitive_features column {j} has missing values (None/NaN)")
        try:
            lab, inv = np.unique(col.astype(str) if _mixed(col) else col, return_inverse=True)
        except TypeError:
            lab, inv = np.unique(col.astype(str), return_inverse=True)
        cols.append((lab, inv.reshape(-1)))
    if len(cols) == 1:
        lab, inv = cols[0]
        return inv.astype(np.int64), [_plain(v) for v in lab]
    key = np.zeros(n, dtype=np.int64)
    for lab, inv in cols:
        key = key * len(lab) + inv
    uniq, codes = np.unique(key, return_inverse=True)
    labels = []
    for u in uniq:
        parts = []
        for lab, _ in reversed(cols):
            u, r = divmod(int(u), len(lab))
            parts.append(_plain(lab[r]))
        labels.append(tuple(reversed(parts)))
    return codes.reshape(-1).astype(np.int64), labels


def parse_constraint(spec):
    """``(constraint, method)`` of a ``constraint=`` string: ``"demographic_parity"`` ->
    ``("demographic_parity", "between_groups")``, ``"equalized_odds:to_overall"`` ->
    ``("equalized_odds", "to_overall")``; a clear error otherwise."""
    if not isinstance(spec, str) or spec not in CONSTRAINT_SPECS:
        raise ValueError(f"unknown constraint {spec!r}; expected one of "
                         f"{list(CONSTRAINT_SPECS)}")
    name, _, method = spec.partition(":")
    return name, method or "between_groups"


def _mixed(col):
    return len({type(v) for v in col[:1000]}) > 1


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


class FairnessProblem:
    """The constraint functions ``c(w) = E r(w) - b`` of one fit (module docstring).

    Parameters
    ----------
    constraint : str
        One of :data:`CONSTRAINTS`.
    tol : float
        The bound ``constraint_tol``.
    codes, labels : the groups (:func:`sensitive_codes`).
    y : ndarray or None
        Class labels encoded ``{0, 1}`` (rate constraints).
    """

    def __init__(self, constraint, tol, codes, labels, y=None):
        constraint, self.method = parse_constraint(constraint)
        self.constraint, self.tol, self.labels = constraint, float(tol), list(labels)
        m = len(labels)
        self.kind = "loss" if constraint == "bounded_group_loss" else "rate"
        self.tau = float(SMOOTHING)  # the smoothing of the rates (calibration may refine it)
        n = codes.shape[0]
        if self.kind == "loss" or constraint == "demographic_parity":
            self.block_labels = [None]
            cell = codes.copy()
        else:
            self.block_labels = [0, 1] if constraint == "equalized_odds" else [1]
            yb = np.asarray(y).astype(np.int64)
            cell = np.full(n, -1, dtype=np.int64)
            for b, lab in enumerate(self.block_labels):
                rows = yb == lab
                cell[rows] = b * m + codes[rows]
        C = m * len(self.block_labels)
        self.cell, self.n_cells = cell, C
        self.sizes = np.bincount(cell[cell >= 0], minlength=C).astype(np.float64)
        empty = [(self.labels[k % m], self.block_labels[k // m]) for k in range(C)
                 if self.sizes[k] == 0]
        if empty:
            what = {None: "samples", 0: "negative samples (y = 0)",
                    1: "positive samples (y = 1)"}
            raise ValueError(
                f"{constraint}: group {empty[0][0]!r} has no {what[empty[0][1]]}, so its rate "
                f"is undefined; merge or drop that group (sensitive_features)")
        self.rows = np.flatnonzero(cell >= 0)
        rows_E, b = [], []
        if self.kind == "loss":
            rows_E = list(np.eye(C))
            b = [self.tol] * C
        elif m >= 2 and self.method == "to_overall":  # |r_g - sum_h pi_h r_h| <= tol
            for blk in range(len(self.block_labels)):
                pi = np.zeros(C)
                sl = slice(blk * m, (blk + 1) * m)
                pi[sl] = self.sizes[sl] / self.sizes[sl].sum()
                for g in range(m):
                    e = -pi.copy()
                    e[blk * m + g] += 1.0
                    rows_E += [e, -e]
                    b += [self.tol, self.tol]
        elif m >= 2:
            for blk in range(len(self.block_labels)):
                for g in range(m):
                    for h in range(m):
                        if g != h:
                            e = np.zeros(C)
                            e[blk * m + g], e[blk * m + h] = 1.0, -1.0
                            rows_E.append(e)
                            b.append(self.tol)
        self.E = np.array(rows_E).reshape(-1, C)
        self.b = np.asarray(b, dtype=np.float64)

    @property
    def n_blocks(self):
        return len(self.block_labels)

    # -------------------------------------------------------------- per-row terms
    def terms(self, obj, z, losses=None, derivs=None, second=True):
        """``(phi, dphi, ddphi)`` per row: the smoothed indicator and its derivatives in ``z``
        (rates), or the loss and its derivatives (group loss; ``derivs`` of shape (n, K))."""
        if self.kind == "rate":
            t = self.tau
            s = expit(z / t)
            ds = s * (1.0 - s)
            return s, ds / t, (ds * (1.0 - 2.0 * s) / t ** 2 if second else None)
        dd = None
        if second:
            from .objectives._dual import curvature
            dd = curvature(obj.loss, obj.y, z)
        return losses, derivs, dd

    def cell_means(self, phi):
        r = self.rows
        return np.bincount(self.cell[r], weights=phi[r], minlength=self.n_cells) / self.sizes

    def values(self, phi):
        """The constraint functions ``c = E r - b`` and the cell means ``r``."""
        r = self.cell_means(phi)
        return self.E @ r - self.b, r

    def report(self, r):
        """``(values, rates)``: per block the constrained quantity (max - min of the rates;
        the group losses for bounded group loss) and the ``(n_blocks, m)`` cell means."""
        R = r.reshape(self.n_blocks, -1)
        if self.kind == "loss":
            return R[0].copy(), R
        if self.method == "to_overall":
            S = self.sizes.reshape(self.n_blocks, -1)
            overall = (R * S).sum(axis=1) / S.sum(axis=1)
            return np.abs(R - overall[:, None]).max(axis=1), R
        return R.max(axis=1) - R.min(axis=1), R

    def multipliers(self, lam):
        """The net multiplier of every cell, ``E' lambda``, shape ``(n_blocks, m)``."""
        return (self.E.T @ lam).reshape(self.n_blocks, -1) if lam.size else \
            np.zeros((self.n_blocks, len(self.labels)))

    def jacobian(self, X, dphi):
        """``(C, p)`` gradients of the cell means for one output (``dphi`` of shape (n,))."""
        r = self.rows
        V = np.zeros((X.shape[0], self.n_cells))
        V[r, self.cell[r]] = dphi[r] / self.sizes[self.cell[r]]
        return np.asarray(X.T @ V, dtype=np.float64).T


# ------------------------------------------------------------------------------- solver
def _box_qp(M, q):
    """``argmin_{lam >= 0} lam.M lam / 2 + q.lam`` (``M`` positive semi-definite, ``J x J``
    small) as the non-negative least-squares problem ``|R' lam + R^-1 q|`` with ``M + eps I =
    R R'`` (Lawson-Hanson, exact active set; ``eps = 1e-12 max diag M``, so that the pairs of
    opposite rate constraints, whose rows of ``M`` cancel, keep one multiplier). Multipliers
    above ``_LAMBDA_MAX`` (an infeasible linearisation) are clipped there."""
    from scipy.optimize import nnls

    J = q.shape[0]
    eps = 1e-12 * max(float(np.max(np.diag(M))), 1e-300)
    try:
        R = np.linalg.cholesky(M + eps * np.eye(J))
    except np.linalg.LinAlgError:
        R = np.linalg.cholesky(M + (1e-8 * max(float(np.max(np.diag(M))), 1e-300)) * np.eye(J))
    lam = nnls(R.T, -np.linalg.solve(R, q), maxiter=50 * J)[0]
    return np.minimum(lam, _LAMBDA_MAX)


class _Result:
    def __init__(self, coef, lam, n_iter, converged, message, method="sqp"):
        self.coef, self.lam, self.n_iter = coef, lam, n_iter
        self.converged, self.message, self.method = converged, message, method


def _risk_curvature(obj, w, z):
    """``q_i l''(z_i)`` (the risk's weights times the loss curvature), or None."""
    from .objectives._dual import curvature

    cur = curvature(obj.loss, obj.y, z)
    if cur is None:
        return None
    if getattr(obj, "family", None) == "spectral" and np.ptp(obj.sigma) == 0 and \
            obj.sample_weight is None:
        return cur / obj.n
    q = obj.weights(w)
    return q * cur


#: the shares of the negative curvature (the smoothed rates' non-convex part) tried in the
#: Hessian model after the exact one, largest first, while it stays positive definite
NEGATIVE_CURVATURE = (0.5, 0.0)
#: the weights ``sigma`` (per unit of the curvature scale) of the term ``sigma A_a' A_a`` tried
#: to make the exact Hessian positive definite (``A_a`` the gradients of the active constraints)
AUGMENT = (1.0, 10.0, 100.0, 1000.0)


def _hessian_factor(X, h, reg, Aa=None):
    """``(cho_factor, sigma)`` of a positive definite model of the Lagrangian's Hessian
    ``X' diag(h) X + diag(reg)``: the exact one; else the exact one plus ``sigma A_a' A_a``
    (the rows of ``A_a``: the gradients of the constraints active at the last step; on their
    null space the model is exact, and the QP's step is the exact Newton-SQP step with the
    multipliers shifted by ``sigma A_a d``); else with a share of :data:`NEGATIVE_CURVATURE`
    of the negative curvature. ``(None, 0)`` if none is positive definite."""
    from .objectives._dual import weighted_gram

    hp, hn = np.maximum(h, 0.0), np.maximum(-h, 0.0)
    H = weighted_gram(X, hp) + np.diag(reg)
    H[np.diag_indices_from(H)] += 1e-12 * max(float(np.trace(H)) / H.shape[0], 1e-300)
    if not np.any(hn > 0):
        try:
            return cho_factor(H), 0.0
        except LinAlgError:
            return None, 0.0
    Hn = weighted_gram(X, hn)
    tries = [(1.0, 0.0)]
    if Aa is not None and Aa.shape[0]:
        scale = float(np.trace(Hn)) / max(float(np.sum(Aa * Aa)) / Aa.shape[0], 1e-300)
        tries += [(1.0, a * scale) for a in AUGMENT]
    tries += [(theta, 0.0) for theta in NEGATIVE_CURVATURE]
    for theta, sig in tries:
        M = H - theta * Hn if theta else H
        if sig:
            M = M + sig * (Aa.T @ Aa)
        try:
            return cho_factor(M), sig
        except LinAlgError:
            continue
    return None, 0.0


def _newton_ok(obj):
    from .objectives._dual import curvature

    return (getattr(obj, "family", None) == "spectral" and obj.K == 1
            and curvature(obj.loss, np.zeros(1), np.zeros(1)) is not None
            and getattr(obj, "sample_weight", None) is None)


def _sqp(obj, prob, w, lam, feas, rtol, max_iter):
    """The SQP iteration (module docstring) from ``w``; returns a :class:`_Result`."""
    from .objectives._dual import weighted_gram

    X = obj.X
    J = prob.E.shape[0]
    rho = 1.0
    reg = np.asarray(obj.reg, dtype=np.float64)
    n_iter = 0

    def evaluate(w):
        z = np.asarray(X @ w, dtype=np.float64).reshape(-1)
        if prob.kind == "loss":
            losses, derivs = obj.losses_derivs(w)
            phi = losses
        else:
            phi = prob.terms(obj, z, second=False)[0]
        c, r = prob.values(phi)
        return float(obj.value(w)), c, z

    f, c, z = evaluate(w)
    msg = "maximum number of iterations reached"
    converged = False
    for n_iter in range(1, max_iter + 1):
        _, g = obj.value_grad(w)
        g = np.asarray(g, dtype=np.float64).reshape(-1)
        if prob.kind == "loss":
            losses, derivs = obj.losses_derivs(w)
            phi, dphi, ddphi = prob.terms(obj, z, losses, derivs[:, 0])
        else:
            phi, dphi, ddphi = prob.terms(obj, z)
        A = prob.E @ prob.jacobian(X, dphi) if J else np.zeros((0, w.size))
        mu = prob.E.T @ lam if J else np.zeros(prob.n_cells)
        h = _risk_curvature(obj, w, z)
        r = prob.rows
        h[r] += mu[prob.cell[r]] * ddphi[r] / prob.sizes[prob.cell[r]]
        act = np.flatnonzero(lam > 0) if J else np.zeros(0, dtype=np.int64)
        L, sig = _hessian_factor(X, h, reg, A[act] if act.size else None)
        if L is None:
            msg = "the Hessian model is not positive definite"
            break
        Hg = cho_solve(L, g)
        if J:
            HA = cho_solve(L, A.T)
            lam = _box_qp(A @ HA, A @ Hg - c)
            d = -(Hg + HA @ lam)
            if sig:  # the multipliers of the model without the sigma A_a' A_a term
                lam[act] = np.maximum(lam[act] + sig * (A[act] @ d), 0.0)
        else:
            d = -Hg
        gl = g + (A.T @ lam if J else 0.0)
        dec = float(-gl @ d)
        viol = float(np.max(c, initial=0.0))
        if np.max(lam, initial=0.0) >= _LAMBDA_MAX:
            msg = "the constraints look infeasible (multipliers diverge)"
            break
        comp = float(lam @ np.maximum(-c, 0.0)) if J else 0.0  # complementarity
        if viol <= feas and max(dec, comp) <= rtol * max(abs(f), 1e-12):
            converged, msg = True, "KKT point"
            break
        rho = max(rho, 1.5 * float(np.max(lam, initial=0.0)))
        pen = float(np.sum(np.maximum(c, 0.0)))
        merit0 = f + rho * pen
        slope = float(g @ d) - rho * pen
        t = 1.0
        for _ in range(40):
            w_t = w + t * d
            f_t, c_t, z_t = evaluate(w_t)
            merit = f_t + rho * float(np.sum(np.maximum(c_t, 0.0)))
            if merit <= merit0 + 1e-4 * t * min(slope, 0.0) or \
                    (t == 1.0 and np.max(c_t, initial=0.0) <= viol and f_t <= f):
                break
            t *= 0.5
        else:
            msg = "the line search found no decrease"
            break
        w, f, c, z = w_t, f_t, c_t, z_t
    return _Result(w, lam, n_iter, converged, msg)


def _slsqp(obj, prob, w, feas, rtol, max_iter):
    """scipy's SLSQP on the same program (no per-sample curvature: several outputs, other
    problem families); multipliers by non-negative least squares on the KKT conditions."""
    from scipy.optimize import minimize, nnls

    X = obj.X
    shape = np.shape(w)

    def cons_jac(x):
        losses, derivs = obj.losses_derivs(x.reshape(shape)) if prob.kind == "loss" else \
            (None, None)
        z = None if prob.kind == "loss" else np.asarray(X @ x.reshape(shape)).reshape(-1)
        phi, dphi, _ = prob.terms(obj, z, losses, derivs, second=False)
        c, _ = prob.values(phi)
        if dphi.ndim == 1:
            R = prob.jacobian(X, dphi)
        else:  # several outputs: one product per cell
            R = np.empty((prob.n_cells, x.size))
            for k in range(prob.n_cells):
                v = np.where(prob.cell == k, 1.0 / prob.sizes[k], 0.0)[:, None] * dphi
                R[k] = np.asarray(X.T @ v).reshape(-1)
        return c, prob.E @ R

    def fun(x):
        v, g = obj.value_grad(x.reshape(shape))
        return float(v), np.asarray(g, dtype=np.float64).reshape(-1)

    # the constraints tightened by half the feasibility tolerance: SLSQP meets them to ~1e-8
    cons = [{"type": "ineq", "fun": lambda x: -cons_jac(x)[0] - 0.5 * feas,
             "jac": lambda x: -cons_jac(x)[1]}] if prob.E.shape[0] else []
    f0 = abs(fun(np.asarray(w).reshape(-1))[0])
    res = minimize(fun, np.asarray(w, dtype=np.float64).reshape(-1), jac=True,
                   method="SLSQP", constraints=cons,
                   options={"maxiter": max_iter, "ftol": rtol * max(f0, 1e-12)})
    x = res.x
    c, A = cons_jac(x)
    # SLSQP meets the constraints to its own accuracy (~ftol): a few minimal-norm Gauss-Newton
    # corrections onto them
    for _ in range(5 if res.success else 0):
        act = np.flatnonzero(c > -0.5 * feas)
        if not act.size or float(np.max(c)) <= 0.5 * feas:
            break
        x = x + np.linalg.lstsq(A[act], -(c[act] + 0.5 * feas), rcond=None)[0]
        c, A = cons_jac(x)
    g = fun(x)[1]
    act = np.flatnonzero(c >= -1e-6 * max(prob.tol, 1e-12))
    lam = np.zeros(c.shape[0])
    if act.size:
        lam[act] = nnls(A[act].T, -g)[0]
    ok = bool(res.success) and float(np.max(c, initial=0.0)) <= max(feas, 1e-9)
    return _Result(x.reshape(shape), lam, int(res.nit), ok, str(res.message), "slsqp")


def solve(obj, prob, coef0=None, tol=1e-4, max_iter=1000, calibrate=True):
    """Minimise ``obj`` under the constraints of ``prob``; a result with ``coef``, ``lam``
    (one multiplier per constraint), ``n_iter``, ``converged``, ``message``.

    ``tol`` (the estimator's): feasibility to ``1e-3 tol`` (rates in [0, 1]; the group losses
    relative to the bound) and a Newton decrement of the Lagrangian at most ``1e-2 tol |F|``.
    """
    tol = 1e-4 if tol is None or tol <= 0 else float(tol)
    feas = 1e-3 * tol * (1.0 if prob.kind == "rate" else max(prob.tol, 1e-12))
    rtol = 1e-2 * tol
    w = obj.zeros() if coef0 is None else np.array(coef0, dtype=np.float64)
    lam = np.zeros(prob.E.shape[0])
    if not _newton_ok(obj):
        return _slsqp(obj, prob, w, feas, rtol, max_iter)
    w = w.reshape(-1)
    nonsmooth = obj.nu == 0 and np.ptp(obj.sigma) > 0
    stages = [obj]
    if nonsmooth:  # continuation in a chi-square shift cost (module docstring)
        loss0 = float(np.mean(obj.losses(w)))
        nu, nu_end = 1e-2 * loss0, max(1e-2 * tol * loss0, 1e-12)
        stages = []
        while nu > nu_end:
            stages.append(obj.with_shift(nu, 0))
            nu /= 10.0
        stages.append(obj.with_shift(nu_end, 0))
    total = 0
    for k, stage in enumerate(stages):
        last = k == len(stages) - 1  # earlier stages: warm starts, solved 100x more loosely
        cap = max(max_iter - total, 1) if last else min(STAGE_MAX_ITER, max(max_iter - total, 1))
        res = _sqp(stage, prob, w, lam, feas if last else 100 * feas,
                   rtol if last else 100 * rtol, cap)
        total += res.n_iter
        w, lam = res.coef, res.lam
    prob.calibrated = None
    if calibrate and prob.kind == "rate" and prob.E.shape[0]:
        res, total = _calibrate(stages[-1], prob, res, feas, rtol, max_iter, total)
    res.n_iter = total
    return res


def rate_estimate(prob, rs, rh):
    """The rates the calibrated bound holds for, from the smoothed ``rs`` and hard ``rh`` cell
    means: ``rh`` for the calibrated cells (``prob.calibrated``), for the others ``rs`` -- or,
    with :data:`CALIBRATION_POOLED` at the fit, ``rs`` plus their shrunk offset (the cell's own
    offset ``rh - rs`` weighted by ``n_k tol / CALIBRATION_MIN_CELL``, the rest the block's
    size-weighted mean offset over its calibrated cells): a small cell's hard rate is noise
    (it moves by ``1 / n_k >= tol / 2`` per row), the offset of the smoothing is not."""
    big = getattr(prob, "calibrated", None)
    if big is None:
        return rs
    if not getattr(prob, "pooled", False):
        return np.where(big, rh, rs)
    B = prob.n_blocks
    d, n, bigb = (rh - rs).reshape(B, -1), prob.sizes.reshape(B, -1), big.reshape(B, -1)
    wb = np.where(bigb, n, 0.0)
    pool = (wb * d).sum(axis=1) / np.maximum(wb.sum(axis=1), 1e-300)
    w = np.minimum(n * prob.tol / CALIBRATION_MIN_CELL, 1.0)
    return np.where(big, rh, rs + (w * d + (1.0 - w) * pool[:, None]).reshape(-1))


def _rates(prob, X, w):
    """``(smoothed, hard)`` cell means of ``w``."""
    z = np.asarray(X @ np.reshape(w, (-1,)), dtype=np.float64).reshape(-1)
    return (prob.cell_means(prob.terms(None, z, second=False)[0]),
            prob.cell_means((z > 0).astype(np.float64)))


def _calibrate(obj, prob, res, feas, rtol, max_iter, total):
    """Correct every cell's smoothed rate by its offset to the hard rate, ``delta = r_hard -
    r_smooth`` at the last solution, i.e. bound ``E (r_smooth + delta) <= tol - slack / 2``,
    and re-solve warm-started (offsets damped by :data:`CALIBRATION_DAMPING`), until the hard
    training rates meet ``tol`` and the active ones are within ``slack = max(0.1 tol, 1 /
    smallest cell)`` of it; at most :data:`CALIBRATION_ROUNDS` rounds per smoothing, then the
    next, finer one of :data:`CALIBRATION_SMOOTHING` (smaller offsets: a steadier iteration).
    Keeps the round with the lowest objective among those whose hard rates hold; if none
    does, the first (smoothed) solution, with a ConvergenceWarning. At most
    :data:`CALIBRATION_BUDGET` x the first solve's SQP steps. Module docstring, "Calibration"."""
    big = prob.sizes >= CALIBRATION_MIN_CELL / max(prob.tol, 1e-12)
    if not np.any(big):
        return res, total
    prob.calibrated, prob.pooled = big, bool(CALIBRATION_POOLED)
    slack = max(0.1 * prob.tol, 1.0 / float(prob.sizes[big].min()))
    b0 = prob.b.copy()

    def score(r):
        rs, rh = _rates(prob, obj.X, r.coef)
        rh = rate_estimate(prob, rs, rh)  # small cells: the smoothed (expected) rate
        ch = prob.E @ rh - b0
        viol = float(np.max(ch))
        return ch, viol, (viol > 0, viol if viol > 0 else float(obj.value(r.coef))), rh - rs

    ch, viol, key, delta = score(res)
    first = (res, prob.b.copy(), prob.tau)
    best = (key, res, prob.b.copy(), prob.tau)
    cap = min(max_iter, total + CALIBRATION_BUDGET * max(res.n_iter, 20))  # SQP steps
    per_round = cap
    if CALIBRATION_ROUND_STEPS is not None:
        if not CALIBRATION_ROUND_STEPS > 0:
            raise ValueError(f"riskopt.fairness.CALIBRATION_ROUND_STEPS must be None or "
                             f"positive, got {CALIBRATION_ROUND_STEPS!r}")
        per_round = max(int(CALIBRATION_ROUND_STEPS * max(res.n_iter, 20)), 1)
    for tau in (prob.tau,) + tuple(t for t in CALIBRATION_SMOOTHING if t < prob.tau):
        if tau != prob.tau:  # a finer smoothing: the offsets at the current point
            prob.tau = tau
            ch, viol, key, delta = score(res)
        stop = False
        for k in range(CALIBRATION_ROUNDS):
            act = res.lam > 0
            if viol <= 0 and (not np.any(act) or float(np.max(ch[act])) >= -slack):
                stop = True
                break
            if total >= cap:
                stop = True
                break
            prob.b = b0 - 0.5 * slack - prob.E @ delta  # aim inside: the hard rates jump
            prev = res
            res = _sqp(obj, prob, res.coef, res.lam, feas, rtol,
                       max(min(cap - total, per_round), 1))
            total += res.n_iter
            if not res.converged and res.n_iter >= per_round:
                # cut off (CALIBRATION_ROUND_STEPS): this smoothing does not settle; the
                # next, finer one from the last solved round
                res = prev
                break
            ch, viol, key, new = score(res)
            delta = delta + (CALIBRATION_DAMPING if k else 1.0) * (new - delta)
            if res.converged and key < best[0]:  # (not a solve cut off by the budget)
                best = (key, res, prob.b.copy(), prob.tau)
        if stop:
            break
    prob.tau = best[3]
    prob.b = best[2]
    res = best[1]
    if best[0][0]:  # missed: back to the smoothed solution, whose smoothed rates hold
        res, prob.b, prob.tau = first
        prob.calibrated = None
        res.converged = False
        res.message = (f"the calibration to the hard rates missed the bound by "
                       f"{best[0][1]:.3g} (the constraint holds for the smoothed rates only)")
    return res, total
