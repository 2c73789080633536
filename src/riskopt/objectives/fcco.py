r"""Non-smooth finite-sum coupled compositional problems (FCCO) of a linear model: group DRO as
a spectral risk of the group losses (``"group_risk"``) and constrained learning by a hinge
penalty (``"constrained"``).

Both are instances of (SONEX/ALEXR2 paper, ``../shared/papers/sonex_alexr2_nonsmooth_fcco.txt``,
Eq. (1))

.. math::

    F(w) = \frac1m \sum_{i=1}^m f_i(g_i(w)),\qquad
    g_i(w) = \frac{1}{|S_i|}\sum_{j\in S_i} \ell(x_j^\top w, y_j) - b_i ,

an *outer index* ``i`` (a group, a constraint) owning the rows ``S_i``, ``f_i`` non-smooth.

**Group DRO** (:class:`GroupRiskObjective`, Eq. (10)): ``g_i`` is the mean loss ``L_g`` of group
``g`` and the objective is a spectral risk of the ``m`` group losses,
:math:`R(L_1, \dots, L_m) + \frac{\mu}{2}\|w\|^2`, computed exactly by the oracle of
:mod:`riskopt.risks` on the ``m``-vector (any spectrum and shift cost). For the CVaR at tail
fraction ``r`` (top-``k`` groups, ``r = k/m``) it is

.. math:: \min_s\; s + \frac{1}{m r}\sum_g [L_g(w) - s]_+ ,

the compositional form the stochastic solvers (``sonx``, ``sonex``, ``alexr2``, ``ooa``)
optimise over ``(w, s)``: ``aux_names = ("s",)`` for the CVaR, the mean (``r = 1``) and the
max loss (``r = 1/m``).

**Constrained learning** (:class:`ConstrainedObjective`, Section 5, Eq. (8)): minimise
:math:`g_0(w)` (the mean loss over the *objective rows*) subject to
:math:`g_i(w) = \frac{1}{|S_i|}\sum_{j \in S_i}\ell(x_j^\top w, y_j) - b_i \le 0`, through the
exact penalty

.. math:: \Phi(w) = g_0(w) + \frac{\rho}{m}\sum_i [g_i(w)]_+ + \frac{\mu}{2}\|w\|^2

(``penalty="hinge"``; for ``rho`` above ``m`` times the largest KKT multiplier its minimisers
are those of the constrained problem) or the squared hinge
:math:`\frac{\rho}{2m}\sum_i [g_i(w)]_+^2` (``penalty="squared_hinge"``, the SOX baseline's
objective, biased for any finite ``rho``). SONEX / ALEXR2 minimise the *smoothed* hinge
(Eq. (9), Moreau parameter ``smoothing`` of the solver) and are scored on ``Phi``.
:meth:`ConstrainedObjective.violations` reports ``g_i(w)``.

Reference optima: continuation (``lbfgs``: L-BFGS on the smoothed problem, chi-square shift
cost or Moreau parameter divided by 10 down to ``1e-9``, warm started, keeping the best exact
value) and, for the losses cvxpy expresses (squared, absolute, logistic), the exact convex
program (``cvxpy``); the tests check one against the other.

Examples
--------
>>> import numpy as np, riskopt as ro
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(120, 3)); y = (X[:, 0] + rng.normal(size=120) > 0).astype(float)
>>> g = rng.integers(0, 4, size=120)
>>> obj = ro.Objective("logistic", ro.CVaR(0.5), X, y, groups=g, l2_reg=0.01)
>>> obj.family, obj.n_groups, obj.aux_names
('group_risk', 4, ('s',))
>>> w = np.zeros(3); L = obj.group_losses(w)
>>> bool(np.isclose(obj.value(w), np.log(2)))          # all groups lose log 2 at w = 0
True
"""
import numpy as np
from scipy.optimize import minimize

from .._kernels import oracles as _ko
from .._validation import check_positive
from ..risks import CVaR, MaxLoss, Mean, _RiskBase, parse_risk
from ._lbfgs import abnormal_extra, stop_report
from .base import LinearModelObjective, Reference, shifted_copy


def _csr(members):
    ptr = np.zeros(len(members) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(m) for m in members])
    rows = np.concatenate(members).astype(np.int64) if members else np.zeros(0, np.int64)
    return ptr, rows


def _lbfgs(fun, W0, tol, max_iter):
    shape = W0.shape

    def f(x):
        v, g = fun(x.reshape(shape))
        return v, np.ravel(g)

    res = minimize(f, np.ravel(W0), jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "maxfun": 2 * max_iter, "ftol": 0.0,
                            "gtol": tol, "maxcor": 30})
    return res.x.reshape(shape), res


def _continuation(objective, smoothed, start, W0, tol, max_iter, floor=1e-9):
    """L-BFGS on ``smoothed(level)`` for ``level = start, start/10, ..., floor``, warm started;
    returns the best point for the exact ``objective.value`` and a Reference."""
    W = objective.as_matrix(W0)
    g0 = np.linalg.norm(smoothed(start)(W)[1])
    gtol = tol * max(1.0, g0)
    best_W, best_f = W, objective.value(W)
    f_start = best_f
    level, n_it, hit, first = start, 0, False, None
    while level >= floor:
        W, res = _lbfgs(smoothed(level), W, gtol, max_iter)
        n_it += int(res.nit)
        hit = hit or res.status == 1
        if first is None:  # the first (smoothest) solve judges the run (see ._lbfgs)
            first = (stop_report(res, max(1.0, g0), gtol, tol), res)
        f = objective.value(W)
        if f < best_f:
            best_W, best_f = W, f
        level /= 10.0
    coef = objective.as_coef(best_W)
    (ab, rel, text), res = first if first is not None else ((False, 0.0, ""), None)
    ab = ab and not best_f < f_start  # reported only when the run never left its start
    return Reference(coef=coef, value=float(objective.value(coef)), method="lbfgs",
                     n_iter=n_it, message=text if ab else
                     "continuation in the smoothing parameter", hit_limit=hit,
                     extra=abnormal_extra(ab, rel, res, tol))


def _smooth_reference(objective, W0, tol, max_iter):
    """One L-BFGS solve of a smooth objective, its stop judged by ``stop_report``."""
    g0 = max(1.0, float(np.linalg.norm(objective.grad(W0))))
    W, res = _lbfgs(objective.value_grad, objective.as_matrix(W0), tol * g0, max_iter)
    ab, rel, text = stop_report(res, g0, tol * g0, tol)
    coef = objective.as_coef(W)
    return Reference(coef=coef, value=float(objective.value(coef)), method="lbfgs",
                     n_iter=int(res.nit), message=text or str(res.message),
                     hit_limit=res.status == 1, extra=abnormal_extra(ab, rel, res, tol))


def _cvx_losses(objective, w, rows):
    import cvxpy as cp

    if objective.K != 1:
        raise ValueError("method='cvxpy' covers the squared, absolute and logistic losses")
    z = objective.X[rows] @ w
    yy = objective.y[rows]
    name = objective.loss.name
    if name == "squared":
        return 0.5 * cp.square(z - yy)
    if name == "absolute":
        return cp.abs(z - yy)
    if name == "logistic":
        return cp.logistic(z) - cp.multiply(yy, z)
    raise ValueError(f"no cvxpy formulation for the {name} loss")


def combine_groups(groups, group_by):
    """Group labels from data set attributes: ``group_by = "race*sex"`` gives one label per
    (race, sex) combination, ``"White|Male"``."""
    if not isinstance(groups, dict) or not groups:
        raise ValueError("this data set has no group attributes")
    names = [a.strip() for a in str(group_by).split("*") if a.strip()]
    missing = [a for a in names if a not in groups]
    if not names or missing:
        raise ValueError(f"group_by={group_by!r}: unknown attribute(s) {missing}; "
                         f"available: {sorted(groups)}")
    cols = [np.asarray(groups[a]).astype(str) for a in names]
    out = cols[0]
    for c in cols[1:]:
        out = np.char.add(np.char.add(out, "|"), c)
    return out


class _FCCOBase(LinearModelObjective):
    """Shared layout: outer indices ``i`` with rows ``outer_rows[outer_ptr[i]:outer_ptr[i+1]]``
    and offsets ``outer_offsets`` (the kernels' view, :mod:`riskopt._kernels.fcco`)."""

    #: full-batch code is ``X @ W``, ``X.T @ G`` and ``X[rows]``: the estimators' operator
    #: design (no copy of X) works as is; the stochastic kernels materialise it once
    _keeps_operator = True

    #: (kind, par) of the outer function for the kernels; ``has_s`` when ``s`` is a variable
    has_s = False
    direct_rows = np.zeros(0, dtype=np.int64)

    def _init_outer(self, members, offsets):
        self.outer_ptr, self.outer_rows = _csr(members)
        self.outer_sizes = np.diff(self.outer_ptr)
        self.m = len(members)
        self.outer_offsets = np.ascontiguousarray(offsets, dtype=np.float64)
        self._owner = np.repeat(np.arange(self.m), self.outer_sizes)

    def inner_values(self, coef):
        """``g_i(w)`` for every outer index (``(m,)``)."""
        losses = self.losses(coef)
        sums = np.bincount(self._owner, losses[self.outer_rows], minlength=self.m)
        return sums / self.outer_sizes - self.outer_offsets

    def _inner_values_derivs(self, W):
        losses, derivs = self.losses_derivs(W)
        sums = np.bincount(self._owner, losses[self.outer_rows], minlength=self.m)
        return losses, derivs, sums / self.outer_sizes - self.outer_offsets

    def _weighted_grad(self, derivs, outer_w, W, direct=True):
        """``X^T (c * derivs) + reg W`` with per-row ``c`` from per-outer-index weights (sum of
        ``outer_w[i] / |S_i|`` over the indices owning the row) plus the direct rows."""
        c = np.bincount(self.outer_rows, np.repeat(outer_w / self.outer_sizes, self.outer_sizes),
                        minlength=self.n)
        if direct and self.direct_rows.size:
            c += np.bincount(self.direct_rows, minlength=self.n) / self.direct_rows.size
        return self.X.T @ (c[:, None] * derivs) + self.reg[:, None] * W


class GroupRiskObjective(_FCCOBase):
    """A spectral risk of the group-mean losses (group DRO), family ``"group_risk"``.

    Parameters
    ----------
    loss : Loss or str
    risk : spectral risk or string (``CVaR(r)`` is the CVaR over groups of Eq. (10))
    X, y : arrays
    groups : array of shape (n,)
        Group label of every row (any hashable values; at least one row per group).
    l2_reg : float, default 0
    fit_intercept : bool, default False

    Attributes
    ----------
    group_labels : the sorted distinct labels; ``n_groups`` (``m``); ``group_sizes``;
    sigma : the spectrum over the ``m`` groups; ``nu`` the shift cost.
    """

    family = "group_risk"
    reference_methods = ("lbfgs", "cvxpy")
    #: benchmark specs: ``group_risk`` (a risk string) and ``group_by`` (data set group
    #: attributes joined by ``*``, e.g. ``"race*sex"``: one group per combination)
    spec_params = {"group_risk": "cvar:0.15", "group_by": "race*sex"}
    spec_needs_groups = True

    def __init__(self, loss, risk, X, y, groups, l2_reg=0.0, fit_intercept=False):
        from ..samplers import group_index

        risk_obj = parse_risk(risk)
        if not isinstance(risk_obj, _RiskBase):
            raise ValueError(f"risk must be a spectral risk, got {type(risk).__name__}")
        self._init_data(loss, X, y, l2_reg, fit_intercept)
        groups = np.asarray(groups)
        if groups.shape != (self.n,):
            raise ValueError(f"groups must have shape ({self.n},), got {groups.shape}")
        if groups.dtype.kind == "f" and not np.all(np.isfinite(groups)):
            raise ValueError("groups contains NaN: every row needs a group")
        if groups.dtype == object and any(g is None for g in groups):
            raise ValueError("groups contains None: every row needs a group")
        self.group_labels, members = group_index(groups)
        self.group_ids = np.searchsorted(self.group_labels, groups).astype(np.int64)
        self._init_outer(members, np.zeros(len(members)))
        self.group_sizes = self.outer_sizes
        self.risk = risk_obj
        self.sigma = np.ascontiguousarray(risk_obj.spectrum(self.m), dtype=np.float64)
        self.nu = float(risk_obj.shift_cost)
        self.div = risk_obj.div_code
        self.sample_weight = None
        r = None
        if self.nu == 0:
            if isinstance(risk_obj, CVaR):
                r = float(risk_obj.tail_fraction)
            elif isinstance(risk_obj, Mean):
                r = 1.0
            elif isinstance(risk_obj, MaxLoss):
                r = 1.0 / self.m
        self.tail_fraction = r
        self.aux_names = ("s",) if r is not None else ()
        self.has_s = r is not None

    @classmethod
    def from_params(cls, loss, X, y, *, l2_reg=0.0, fit_intercept=False,
                    group_risk="cvar:0.15", group_by="race*sex", groups=None):
        """Benchmark constructor: ``groups`` is the data set's ``{attribute: labels}``;
        ``group_by`` names the attributes whose combinations are the groups."""
        return cls(loss, group_risk, X, y, combine_groups(groups, group_by), l2_reg=l2_reg,
                   fit_intercept=fit_intercept)

    @property
    def n_groups(self):
        return self.m

    @property
    def smooth(self):
        return bool(self.loss.smooth and (self.nu > 0 or np.ptp(self.sigma) == 0))

    def group_losses(self, coef):
        """The mean loss of every group, ``(m,)`` (order of ``group_labels``)."""
        return self.inner_values(coef)

    def risk_weights(self, group_losses):
        """``(R(L), q)``: the risk of the group losses and the maximising group weights."""
        gl = np.ascontiguousarray(group_losses, dtype=np.float64)
        if gl.shape != (self.m,):
            raise ValueError(f"group_losses must have shape ({self.m},), got {gl.shape}")
        q = np.empty(self.m)
        val = _ko.risk_weights(gl, self.sigma, self.nu, self.div, q)
        return float(val), q

    def weights(self, coef):
        """The maximising group weights ``q`` at ``coef``."""
        return self.risk_weights(self.group_losses(coef))[1]

    def _check_aux(self, aux):
        if aux is None:
            return None
        a = np.atleast_1d(np.asarray(aux, dtype=np.float64))
        if not self.has_s or a.size != 1:
            raise ValueError(f"this objective has auxiliary variables {list(self.aux_names)}; "
                             f"got {a.size} value(s)")
        return float(a[0])

    def value(self, coef, aux=None):
        """The risk of the group losses plus the l2 term (``aux=None``), or the CVaR form
        ``s + 1/(m r) sum_g [L_g - s]_+`` at ``aux = (s,)``."""
        s = self._check_aux(aux)
        W = self.as_matrix(coef)
        gl = self.group_losses(W)
        if s is None:
            return self.risk_weights(gl)[0] + self._reg_value(W)
        r = self.tail_fraction
        return s + float(np.sum(np.maximum(gl - s, 0.0))) / (self.m * r) + self._reg_value(W)

    def value_grad(self, coef, aux=None):
        """Value and (sub)gradient; with ``aux`` the pair ``(g_coef, g_s)``."""
        s = self._check_aux(aux)
        W = self.as_matrix(coef)
        _, derivs, gl = self._inner_values_derivs(W)
        if s is None:
            val, q = self.risk_weights(gl)
            G = self._weighted_grad(derivs, q, W)
            return val + self._reg_value(W), G.reshape(np.shape(coef))
        r = self.tail_fraction
        act = (gl > s).astype(np.float64)
        G = self._weighted_grad(derivs, act / (self.m * r), W)
        val = s + float(np.sum(np.maximum(gl - s, 0.0))) / (self.m * r) + self._reg_value(W)
        return val, (G.reshape(np.shape(coef)), 1.0 - act.sum() / (self.m * r))

    def best_s(self, coef):
        """The minimising ``s`` of the CVaR form at ``coef`` (a quantile of the group losses)."""
        if not self.has_s:
            raise ValueError("only CVaR-type group risks have the auxiliary variable s")
        gl = np.sort(self.group_losses(coef))
        k = int(np.ceil(self.m * (1.0 - self.tail_fraction) - 1e-12))
        return float(gl[min(max(k, 0), self.m - 1)]) if k < self.m else float(gl[-1])

    def with_shift(self, shift_cost, divergence_code=None):
        """A shallow copy of this objective with another shift cost (same data, no copy)."""
        return shifted_copy(self, shift_cost, divergence_code)

    def reference_solution(self, method="auto", coef0=None, tol=1e-12, max_iter=20000,
                           **options):
        """``"lbfgs"``: continuation in a chi-square shift cost (``1 .. 1e-9``) when the risk
        is not smooth; ``"cvxpy"``: the epigraph program of the CVaR form (CVaR / mean / max
        over groups, convex losses)."""
        method = self._check_method(method)
        W0 = self.zeros() if coef0 is None else coef0
        if method == "cvxpy":
            options.pop("nu_min", None)
            options.pop("polish_ties", None)
            return self._solve_cvxpy(**options)
        if self.smooth:
            return _smooth_reference(self, W0, tol, max_iter)
        ref = _continuation(self, lambda nu: self.with_shift(nu, _ko.CHI2).value_grad, 1.0,
                            W0, tol, max_iter, floor=float(options.get("nu_min", 1e-9)))
        if self.has_s:
            ref.aux = (self.best_s(ref.coef),)
        return ref

    def _solve_cvxpy(self, solver="CLARABEL", **kw):
        import cvxpy as cp

        if not self.has_s:
            raise ValueError("method='cvxpy' needs a CVaR / mean / max-loss risk with "
                             "shift_cost = 0")
        w = cp.Variable(self.p)
        s = cp.Variable()
        ell = _cvx_losses(self, w, np.arange(self.n))
        from scipy import sparse

        A = sparse.csr_matrix((1.0 / self.group_sizes[self.group_ids],
                               (self.group_ids, np.arange(self.n))), shape=(self.m, self.n))
        obj = s + cp.sum(cp.pos(A @ ell - s)) / (self.m * self.tail_fraction)
        if self.l2_reg > 0:
            obj = obj + 0.5 * cp.sum(cp.multiply(self.reg, cp.square(w)))
        prob = cp.Problem(cp.Minimize(obj))
        prob.solve(solver=solver, **kw)
        if w.value is None:
            raise RuntimeError(f"cvxpy did not solve the problem: {prob.status}")
        coef = self.as_coef(np.asarray(w.value, dtype=np.float64))
        return Reference(coef=coef, value=float(self.value(coef)), method="cvxpy",
                         aux=(float(s.value),), message=str(prob.status))

    def __repr__(self):
        return (f"GroupRiskObjective(loss={self.loss.name}, risk={self.risk!r}, n={self.n}, "
                f"groups={self.m}, p={self.p}, l2_reg={self.l2_reg:g})")


class ConstrainedObjective(_FCCOBase):
    """Constrained learning by an exact (hinge) or squared-hinge penalty, family
    ``"constrained"`` (module docstring).

    Parameters
    ----------
    loss : Loss or str
        The loss of the objective and of every constraint.
    X, y : arrays
    constraints : list of (rows, bound)
        Constraint ``i``: the mean loss over ``rows`` (an index array or a boolean mask of
        length ``n``) must not exceed ``bound``.
    objective_rows : index array or boolean mask, optional
        Rows of the objective ``g_0`` (default: all rows).
    rho : float > 0, default 10
        Penalty parameter.
    penalty : {"hinge", "squared_hinge"}, default "hinge"
    l2_reg : float, default 0
    fit_intercept : bool, default False
    """

    family = "constrained"
    reference_methods = ("lbfgs", "cvxpy")
    spec_params = {"constraints": None, "objective_rows": None, "rho": 10.0,
                   "penalty": "hinge"}

    def __init__(self, loss, X, y, constraints, objective_rows=None, rho=10.0,
                 penalty="hinge", l2_reg=0.0, fit_intercept=False):
        self._init_data(loss, X, y, l2_reg, fit_intercept)
        self.rho = check_positive("rho", rho)
        if penalty not in ("hinge", "squared_hinge"):
            raise ValueError(f"penalty must be 'hinge' or 'squared_hinge', got {penalty!r}")
        self.penalty = penalty
        if not constraints:
            raise ValueError("constraints must be a non-empty list of (rows, bound) pairs")
        members, bounds = [], []
        for k, con in enumerate(constraints):
            try:
                rows, bound = con
            except (TypeError, ValueError):
                raise ValueError(f"constraint {k} must be a (rows, bound) pair") from None
            members.append(self._rows(rows, f"constraint {k}"))
            b = float(bound)
            if not np.isfinite(b):
                raise ValueError(f"constraint {k}: the bound must be finite, got {bound!r}")
            bounds.append(b)
        self._init_outer(members, np.array(bounds))
        self.direct_rows = (np.arange(self.n, dtype=np.int64) if objective_rows is None
                            else self._rows(objective_rows, "objective_rows"))

    @classmethod
    def from_params(cls, loss, X, y, *, l2_reg=0.0, fit_intercept=False, **params):
        return cls(loss, X, y, l2_reg=l2_reg, fit_intercept=fit_intercept, **params)

    def _rows(self, rows, what):
        r = np.asarray(rows)
        if r.dtype == bool:
            if r.shape != (self.n,):
                raise ValueError(f"{what}: a boolean mask must have length {self.n}")
            r = np.flatnonzero(r)
        r = r.astype(np.int64, casting="same_kind") if r.dtype.kind in "iu" else None
        if r is None or r.ndim != 1 or r.size == 0:
            raise ValueError(f"{what}: rows must be a non-empty integer index array or mask")
        if r.min() < 0 or r.max() >= self.n:
            raise ValueError(f"{what}: row indices must lie in [0, {self.n})")
        return r

    @property
    def kind(self):
        return 1 if self.penalty == "squared_hinge" else 0

    @property
    def n_constraints(self):
        return self.m

    def violations(self, coef):
        """``g_i(w)`` (the constraint values; ``<= 0`` is satisfied), shape ``(m,)``."""
        return self.inner_values(coef)

    def objective_value(self, coef):
        """``g_0(w)``, the mean loss over the objective rows (no penalty, no l2 term)."""
        return float(np.mean(self.losses(coef)[self.direct_rows]))

    def _penalty(self, g, lam=0.0):
        """Penalty value and derivative per constraint (Moreau-smoothed hinge for lam > 0)."""
        rho = self.rho
        if self.penalty == "squared_hinge":
            gp = np.maximum(g, 0.0)
            return 0.5 * rho * gp * gp, rho * gp
        if lam > 0:
            d = np.clip(g / lam, 0.0, rho)
            val = np.where(g <= 0, 0.0, np.where(g >= rho * lam, rho * g - 0.5 * rho * rho * lam,
                                                 g * g / (2 * lam)))
            return val, d
        return rho * np.maximum(g, 0.0), rho * (g > 0)

    def value(self, coef, aux=None):
        """``Phi(w)``: ``g_0`` + penalty + l2 term."""
        return self._value_grad(coef, aux, 0.0, grad=False)

    def value_grad(self, coef, aux=None):
        return self._value_grad(coef, aux, 0.0)

    def smoothed_value_grad(self, coef, smoothing):
        """Value and gradient of the smoothed-hinge objective ``Phi_lambda`` (Eq. (9))."""
        return self._value_grad(coef, None, float(smoothing))

    def _value_grad(self, coef, aux, lam, grad=True):
        if aux is not None and np.size(aux) != 0:
            raise ValueError("the constrained family has no auxiliary variables; pass aux=None")
        W = self.as_matrix(coef)
        losses, derivs, g = self._inner_values_derivs(W)
        pen, d = self._penalty(g, lam)
        val = float(np.mean(losses[self.direct_rows])) + pen.sum() / self.m + self._reg_value(W)
        if not grad:
            return val
        G = self._weighted_grad(derivs, d / self.m, W)
        return val, G.reshape(np.shape(coef))

    def reference_solution(self, method="auto", coef0=None, tol=1e-12, max_iter=20000,
                           **options):
        """``"lbfgs"``: continuation in the Moreau parameter of the hinge (squared hinge: one
        L-BFGS run); ``"cvxpy"``: the convex program (convex losses)."""
        method = self._check_method(method)
        W0 = self.zeros() if coef0 is None else coef0
        if method == "cvxpy":
            return self._solve_cvxpy(**options)
        options.pop("polish_ties", None)
        floor = float(options.pop("nu_min", 1e-10)) / self.rho
        if self.penalty == "squared_hinge" and self.loss.smooth:
            return _smooth_reference(self, W0, tol, max_iter)
        return _continuation(self, lambda lam: (lambda W: self.smoothed_value_grad(W, lam)),
                             1.0 / self.rho, W0, tol, max_iter, floor=floor)

    def _solve_cvxpy(self, solver="CLARABEL", constrained=False, **kw):
        """The penalised program, or with ``constrained=True`` the constrained problem itself
        (``min g_0 s.t. g_i <= 0``), whose solution the penalty should recover."""
        import cvxpy as cp

        w = cp.Variable(self.p)
        g0 = cp.sum(_cvx_losses(self, w, self.direct_rows)) / self.direct_rows.size
        gs = [cp.sum(_cvx_losses(self, w, self.outer_rows[self.outer_ptr[i]:
                                                          self.outer_ptr[i + 1]]))
              / self.outer_sizes[i] - self.outer_offsets[i] for i in range(self.m)]
        obj = g0
        if self.l2_reg > 0:
            obj = obj + 0.5 * cp.sum(cp.multiply(self.reg, cp.square(w)))
        cons = []
        if constrained:
            cons = [g <= 0 for g in gs]
        elif self.penalty == "hinge":
            obj = obj + self.rho / self.m * sum(cp.pos(g) for g in gs)
        else:
            obj = obj + 0.5 * self.rho / self.m * sum(cp.square(cp.pos(g)) for g in gs)
        prob = cp.Problem(cp.Minimize(obj), cons)
        prob.solve(solver=solver, **kw)
        if w.value is None:
            raise RuntimeError(f"cvxpy did not solve the problem: {prob.status}")
        coef = self.as_coef(np.asarray(w.value, dtype=np.float64))
        extra = {"multipliers": [float(c.dual_value) for c in cons]} if constrained else {}
        return Reference(coef=coef, value=float(self.value(coef)), method="cvxpy",
                         message=str(prob.status), extra=extra)

    def __repr__(self):
        return (f"ConstrainedObjective(loss={self.loss.name}, n={self.n}, "
                f"constraints={self.m}, rho={self.rho:g}, penalty={self.penalty!r})")
