r"""scikit-learn estimators for spectral-risk (and other risk-family) linear models.

:class:`RiskRegressor` and :class:`RiskClassifier` fit a linear model by minimising

.. math::

    F(w) = \max_{q \in \mathcal P(\sigma)} \Big[\sum_i q_i \ell_i(w) - \nu D(q\|\mathbf 1/n)\Big]
           + \frac{\mu}{2}\|w\|^2

(:class:`riskopt.Objective`; ``mu = l2_reg``, the intercept is not penalised) with any solver of
the registry (built-in or plug-in: :func:`riskopt.solvers.available`), and behave like any
scikit-learn estimator (``Pipeline``, ``GridSearchCV``, ``clone``, pickling;
``sklearn.utils.estimator_checks`` pass, see the tests).

Mapping to scikit-learn's linear models (uniform weights, ``n`` rows)
---------------------------------------------------------------------
* ``RiskRegressor(risk="mean", l2_reg=mu)`` minimises ``mean 0.5 (x_i w + b - y_i)^2 +
  mu/2 |w|^2``, i.e. :class:`sklearn.linear_model.Ridge` with ``alpha = n * mu`` (Ridge:
  ``|y - Xw - b|^2 + alpha |w|^2``); with sample weights ``s``, ``alpha = mu * sum(s)``.
* ``RiskClassifier(risk="mean", l2_reg=mu)`` is :class:`sklearn.linear_model.LogisticRegression`
  (l2 penalty, multinomial for ``K > 2``) with ``C = 1 / (n * mu)`` (``1 / (mu sum(s))``).
* ``l2_reg`` is exactly the ``alpha`` of :class:`~sklearn.linear_model.SGDRegressor`
  (mean loss + ``alpha/2 |w|^2``), whose default ``1e-4`` we share.

The ``risk`` parameter
----------------------
* a spectral risk object: ``ro.CVaR(0.1)``, ``ro.ESRM(1.0, shift_cost=0.5, divergence="kl")``,
  ``ro.Extremile(2.0)``, ``ro.Mean()``, ``ro.MaxLoss()``, ``ro.SpectralRisk(sigma)``;
* a string parsed by :func:`riskopt.parse_risk`: ``"cvar:0.1"``, ``"esrm:1"``, ``"extremile:2"``,
  ``"mean"``, ``"maxloss"`` (no shift cost);
* any object with ``make_objective(loss, X, y, *, l2_reg, fit_intercept, sample_weight)`` — how
  other problem families (Rockafellar-Uryasev CVaR, KL-constrained DRO, ...) plug in. The
  returned objective must provide ``n``, ``p``, ``K``, ``zeros()``, ``as_matrix(coef)``,
  ``as_coef(W)`` and ``value(coef)`` (``value_grad(coef)`` when it has a gradient), in the
  layout of :class:`riskopt.Objective` (``W`` of shape ``(p, K)``, the intercept as the last row
  when ``fit_intercept``), and its ``family`` (the solvers that fit are those of
  :func:`riskopt.solvers.solvers_for`). Optional attributes: ``default_solver`` (the registry
  name used by ``solver="auto"``; otherwise ``"lbfgs"``) and ``auto_lr(objective,
  solver_name) -> float`` (otherwise the step-size search below for the spectral family, else
  the solver's own default ``lr``).

Solver choice (``solver="auto"``)
---------------------------------
``solver="newton"`` (one output, squared or logistic loss, ``l2_reg > 0``, uniform weights, at
most 2,000 columns) fits a spectral risk with ``shift_cost = 0`` (the mean included) with the exact Newton
solver (:class:`riskopt.solvers.Newton`) to a certified relative duality gap ``1e-2 tol``
(``dual_gap_``; L-BFGS continues from its point if that gap is not reached, and ``dual_gap_``
is then the gap of its final point to Newton's bound). ``"auto"`` picks it wherever it applies
(``RiskClassifier``'s binary default and ``RiskRegressor``'s squared-loss default): certified
to ``1e-6`` where the L-BFGS continuation at the default ``tol`` ended up to ``4.6e-6`` above
the optimum (law_school, ``benchmarks/default_accuracy.py``), and faster than L-BFGS on adult
and on a dense 200,000 x 50 regression, where it takes 2.4x the time of scikit-learn's
``Ridge`` (``benchmarks/estimator_vs_sklearn.py``). Otherwise the default is full-batch L-BFGS
(:class:`riskopt.solvers.LBFGS`, exact: the project's reference for ``f*``;
the estimators skip its SLSQP tie polish at ``tol >= 1e-8``, see ``riskopt._estimator_solve``) for
every built-in risk: it was faster than SOREL (``shift_cost = 0``) and far faster than Prospect
(``shift_cost > 0``) at every size measured, up to ``n p = 1e7`` (table in the comment of
``AUTO_LBFGS_MAX_SIZE``, which can switch large ``shift_cost = 0`` problems to SOREL). Non-uniform
``sample_weight`` needs L-BFGS anyway (the stochastic solvers sample uniformly). Any registered
solver can be forced by name; plug-in families choose their own (``default_solver``).

Step size (``lr="auto"``) and convergence (stochastic solvers)
--------------------------------------------------------------
:func:`riskopt.solvers.autotune.autotune` (documented there): the smoothness bound ``lr0 = 1 /
(n max(sigma) max_i L_i)``, a two-pass tuning run of ``lr0 * (3, 1, 1/3, 1/10)`` kept by the
papers' rule (lowest mean training objective, divergent runs discarded), the run continued from
the chosen candidate, restarts with a three times smaller step on divergence; a numeric ``lr``
skips the search. The run stops when ``|grad F(w)| <= tol |grad F(0)|`` or, for problems that
are not smooth, when the objective stalls (:class:`riskopt.callbacks.ConvergenceMonitor`). With
L-BFGS, ``tol`` is its gradient tolerance (see :class:`riskopt.solvers.LBFGS`). A run that ends
without meeting the test raises :class:`~sklearn.exceptions.ConvergenceWarning`. The
measurements behind the constants are in ``tests/test_estimators.py`` (module docstring).

Units of the features
---------------------
The fit does not depend on the units of the columns: unless every column is already
standardised (scale in [1/2, 2], ``|mean| <= scale``), the estimators minimise the same
problem in standardised coordinates, ``X' = (X - m) / s`` with the l2 term ``mu/2 sum_j
w'_j^2 / s_j^2`` (``m`` the column means with an intercept, else 0 and ``s`` the root mean
square, raised to ``sqrt(s^2 + l2_reg / c)`` with ``c`` the loss's curvature, 1 squared and
1/4 logistic / multinomial: a diagonal preconditioner, see ``riskopt._scaling``), and map the
solution back (``coef_ = w' / s``, ``intercept_ = b' - m . coef_``). The
minimiser and the objective values (``objective_trace_``) are those of the problem in the
units given; only the conditioning changes, so step sizes, L-BFGS and the stopping test behave
the same for columns in metres or nanoseconds (before, L-BFGS returned the zero model with a
success message for columns scaled by 1e50 or raw timestamps). ``lr_`` is the step in the
standardised coordinates. The copy costs ``8 n d`` bytes during the fit.

Sample weights
--------------
Integer weights are frequencies: when they sum to at most ``10 n`` the rows are repeated
(zero weights drop rows), which is exact for every risk, shift costs included, and every
solver. Other non-uniform weights define a weighted empirical distribution, supported by
:class:`riskopt.Objective` for ``shift_cost = 0`` spectral risks and the mean, and solved by
L-BFGS only (``solver="auto"`` picks it; the stochastic solvers raise ``ValueError``).

Sparse input
------------
``X`` may be any scipy sparse matrix or array (converted to a float64 CSR copy). With a
spectral risk (shift cost or not), no ``groups`` and ``solver="auto"`` / ``"lbfgs"`` it stays
sparse: the objective holds a CSR design ``[X, 1]`` (O(nnz) memory), the full-batch L-BFGS
works with ``X @ W`` and ``X.T @ G``, and the columns are scaled without centring (centring
would fill the matrix in). The stochastic solvers, group DRO and the KL-constrained family
read dense rows: there ``fit`` densifies ``X`` and says so with a
:class:`riskopt.SparseDensifyWarning` giving the dense and sparse sizes. ``predict`` and
``decision_function`` work on the sparse matrix directly.

Examples
--------
>>> import numpy as np, riskopt as ro
>>> from riskopt.estimators import RiskRegressor
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(200, 3)); y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=200)
>>> est = RiskRegressor(risk=ro.CVaR(0.2, shift_cost=0.5)).fit(X, y)
>>> est.coef_.shape, est.solver_
((3,), 'lbfgs')
"""
import time
import warnings
from numbers import Integral, Real

import numpy as np
from scipy.special import expit, log_expit, log_softmax, softmax
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import LabelEncoder
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.extmath import safe_sparse_dot
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from ._runtime import verbose_notice
from ._validation import densify, is_sparse, plain_arrays, store_params, validate_data
from .losses import LogisticLoss, MultinomialLoss, get_loss
from .objectives.spectral import Objective
from ._scaling import (_feature_scaling, _from_scaled, _operator_design, _standardise_design,
                       _target_scaling, _to_scaled, scale_floor)
from ._degenerate import progress_reached as _progress_reached, warn_if_degenerate
from .objectives._newton import applicable as _newton_applicable
from ._estimator_solve import _SolverRuns
from .risks import KLDRO, MaxLoss, _RiskBase, parse_risk
from . import _fair
from ._estimator_params import FAIRNESS_CONSTRAINTS, _RegisteredSolver, validate_once

__all__ = ["RiskRegressor", "RiskClassifier", "AUTO_LBFGS_MAX_SIZE"]

#: ``solver="auto"``: a ``shift_cost = 0`` problem with a smooth loss and a non-uniform spectrum
#: with more than this many design entries ``n * p * K`` goes to SOREL; ``None`` (the default):
#: always L-BFGS. Measured (synthetic standardised regression, ``l2_reg = 1/n``, one BLAS thread,
#: wall time of ``fit`` to the default ``tol``, ``lr="auto"``), L-BFGS was faster at every size:
#:
#: ================  ================  ===============  ==================  ================
#: n x d             CVaR(.5) L-BFGS   CVaR(.5) SOREL   ESRM(1) L-BFGS      ESRM(1) SOREL
#: ================  ================  ===============  ==================  ================
#: 2000 x 10         0.044 s           0.13 s           0.011 s             0.020 s
#: 8000 x 10         0.14 s            0.24 s           0.044 s             0.088 s
#: 8000 x 50         0.14 s            1.0 s            0.046 s             0.19 s
#: 32000 x 50        0.34 s            5.0 s            0.29 s              1.2 s
#: 200000 x 50       2.7 s             25.4 s           2.9 s               9.5 s
#: ================  ================  ===============  ==================  ================
#:
#: (relative suboptimality reached: L-BFGS 2e-10 .. 6e-8, SOREL 5e-9 .. 8e-7). Both cost O(n p)
#: per pass and L-BFGS needs fewer passes, so no crossover is expected at larger sizes either.
#: With ``shift_cost = 0.5`` (CVaR(0.5)) Prospect is slower still, a pass costing O(n^2 + n p)
#: (an O(n) PAV re-solve per step): 0.40 s vs 0.010 s for L-BFGS (2000 x 10), 7.2 s vs 0.017 s
#: (8000 x 10), 7.1 s vs 0.025 s (8000 x 50), 9.2 s vs 0.47 s (500 x 20000, where L-BFGS stopped
#: at suboptimality 5e-6 and Prospect at 3e-8); the machine was loaded (2 shared cores), an
#: earlier run gave the same ratios within a factor 3. So Prospect is never chosen
#: automatically. Set a number here to switch large ``shift_cost = 0`` problems to SOREL.
AUTO_LBFGS_MAX_SIZE = None

#: Sparse formats taken as they are; others (dok, lil, dia, bsr) are converted to CSR first.
_SPARSE = ["csr", "csc", "coo"]
#: Integer sample weights summing to at most this many times ``n`` are expanded into rows.
_MAX_EXPANSION = 10


# ---------------------------------------------------------------------------- constraints
def _as_risk(risk):
    """The risk object of the ``risk`` parameter (strings parsed by :func:`parse_risk`)."""
    if isinstance(risk, str):
        return parse_risk(risk)
    return risk


def _build_objective(risk, loss, X, y, l2_reg, fit_intercept, sample_weight, groups=None):
    if groups is not None:
        if not isinstance(risk, _RiskBase):
            raise ValueError("groups= needs a spectral risk (e.g. 'cvar:0.15'): the risk of "
                             f"the group-mean losses; got {type(risk).__name__}")
        if sample_weight is not None:
            raise ValueError("groups= and non-uniform sample_weight cannot be combined")
        return Objective(loss, risk, X, y, l2_reg=l2_reg, fit_intercept=fit_intercept,
                         groups=groups)
    if isinstance(risk, (_RiskBase, KLDRO)):  # Objective builds the KL-DRO family for KLDRO
        return Objective(loss, risk, X, y, l2_reg=l2_reg, fit_intercept=fit_intercept,
                         sample_weight=sample_weight)
    return risk.make_objective(loss, X, y, l2_reg=l2_reg, fit_intercept=fit_intercept,
                               sample_weight=sample_weight)


def _expand_frequency_weights(X, y, sw):
    """Integer weights are frequencies: repeat the rows (exact for every risk and solver).

    Used when the weights are integers summing to at most ``_MAX_EXPANSION * n`` (memory: the
    repeated design); zero weights drop rows. Other weights go to the objective as a weighted
    empirical distribution (``shift_cost = 0`` or the mean risk, L-BFGS only).
    """
    if np.all(sw == sw[0]):
        return X, y, None  # uniform: the unweighted problem
    if np.all(sw == np.round(sw)) and sw.sum() <= _MAX_EXPANSION * sw.shape[0]:
        reps = sw.astype(np.int64)
        if is_sparse(X):
            return X[np.repeat(np.arange(X.shape[0]), reps)], np.repeat(y, reps), None
        return np.ascontiguousarray(np.repeat(X, reps, axis=0)), np.repeat(y, reps), None
    return X, y, sw


def _two_integral_labels(y):
    """``(classes, y_enc)`` for a 1-D numeric ndarray ``y`` of exactly two integral values
    (what ``check_classification_targets`` calls "binary" and ``LabelEncoder`` encodes as 0 /
    1: the labels of a default binary fit, at a tenth of their cost on compas), else None
    (the general path decides, with its errors)."""
    if not (isinstance(y, np.ndarray) and y.ndim == 1 and y.dtype.kind in "iuf" and y.size):
        return None
    lo, hi = y.min(), y.max()
    if not (lo < hi and float(lo).is_integer() and float(hi).is_integer()):
        return None  # (nan, inf, one class or non-integral values)
    top = y == hi
    if np.count_nonzero(top) + np.count_nonzero(y == lo) != y.size:
        return None
    return np.array([lo, hi], dtype=y.dtype), top.astype(np.float64)


def _is_spectral(obj):
    return getattr(obj, "family", None) == "spectral"


# ---------------------------------------------------------------------------- base class
class _RiskEstimatorBase(_SolverRuns, BaseEstimator):
    """Shared parameters, validation, the solver choice and the problem construction (the
    solver runs: :class:`riskopt._estimator_solve._SolverRuns`)."""

    #: fit in standardised coordinates when the columns are not (``_feature_scaling``);
    #: a class switch for tests that compare a fit with a solver run on the raw ``X``
    _scale_features = True

    _parameter_constraints = {
        "risk": [str, _RiskBase, KLDRO, HasMethods(["make_objective"])],
        "solver": [_RegisteredSolver()],
        "solver_params": [dict, None],
        "lr": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "l2_reg": [Interval(Real, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left"), None],
        "random_state": ["random_state"],
        "warm_start": ["boolean"],
        "verbose": [Interval(Integral, 0, None, closed="left")],
        # deprecated alias of max_iter, to be removed in riskopt 0.3
        "max_epochs": [Interval(Integral, 1, None, closed="left"), StrOptions({"deprecated"})],
        **FAIRNESS_CONSTRAINTS,
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _validate_params(self):  # skipped for values validated before: _estimator_params
        validate_once(self, super()._validate_params)

    def _validate_X_y(self, X, y, y_numeric):
        # float32 stays float32 here: the objective converts it once, while building its
        # float64 design (riskopt.objectives.base; no float64 copy of X before that)
        if plain_arrays(X, y, self) is not None:  # validate_data's work, without its dispatch
            return X, y
        X, y = validate_data(self, X, y, accept_sparse=_SPARSE, dtype=[np.float64, np.float32],
                             y_numeric=y_numeric, multi_output=False)
        return (X.tocsr() if is_sparse(X) else np.ascontiguousarray(X)), y

    def _linear_output(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse=_SPARSE, dtype=np.float64, reset=False)
        return safe_sparse_dot(X, self.coef_.T, dense_output=True) + self.intercept_

    # -- parameters ----------------------------------------------------------------------
    def _max_iter(self, warn=False):
        """The iteration cap: ``max_iter``, or the deprecated alias ``max_epochs`` when it is
        set (an int; with ``warn``, a ``FutureWarning``: ``fit`` calls this once so)."""
        if isinstance(self.max_epochs, str):  # "deprecated": not set
            return self.max_iter
        if warn:
            # stack: _max_iter, _fit_common, fit, sklearn's _fit_context wrapper, the caller
            warnings.warn(
                "max_epochs is deprecated, use max_iter; it will be removed in riskopt 0.3",
                FutureWarning, stacklevel=5)
        return self.max_epochs

    # -- solver driver -------------------------------------------------------------------
    def _solver_name(self, risk, obj, weighted):
        """``(name, why)``: the solver ``solver="auto"`` picks (or the one passed) and why."""
        if self.solver != "auto":
            return self.solver.lower(), "passed as solver"
        if not _is_spectral(obj):
            return str(getattr(risk, "default_solver", "lbfgs")), f"the default of {risk}"
        if weighted:
            return "lbfgs", "non-uniform sample weights"
        if (AUTO_LBFGS_MAX_SIZE is not None and obj.n * obj.p * obj.K > AUTO_LBFGS_MAX_SIZE
                and obj.nu == 0 and obj.loss.smooth and np.ptp(obj.sigma) > 0
                and not getattr(obj, "sparse", False)):
            return "sorel", f"n p K > AUTO_LBFGS_MAX_SIZE = {AUTO_LBFGS_MAX_SIZE}"
        if obj.nu == 0:  # the mean too (L-BFGS's iterations depended on the units)
            why = _newton_applicable(obj)
            if not why:
                # measured (benchmarks/estimator_vs_sklearn.py, default_accuracy.py): certified
                # to the default gap where the L-BFGS continuation at the default tol ended up
                # to 4.6e-6 from the optimum (law_school); faster on adult
                return "newton", ("shift_cost = 0: Newton with a duality-gap certificate")
            if np.ptp(obj.sigma) == 0:
                return "lbfgs", f"the mean: a smooth objective (Newton: {why})"
            return "lbfgs", f"shift_cost = 0: continuation in the shift cost (Newton: {why})"
        return "lbfgs", "a smooth objective"

    def _fit_common(self, X, y_enc, loss, sample_weight, coef_shape_msg, groups=None):
        """Build the objective, warm start, solve; returns the ``(p, K)`` solution."""
        self._max_iter(warn=True)
        shape = X.shape
        risk = _as_risk(self.risk)
        self.risk_ = risk
        sw = None
        if groups is not None:
            groups = np.asarray(groups)
            if groups.ndim != 1 or groups.shape[0] != X.shape[0]:
                raise ValueError(f"groups must have shape ({X.shape[0]},) like y, got "
                                 f"{groups.shape}")
        # full batch: X as an operator design (no copy; CSR kept for the spectral family only)
        lazy = self.solver in ("auto", "lbfgs", "newton") and isinstance(risk, (_RiskBase, KLDRO))
        if is_sparse(X) and not (lazy and isinstance(risk, _RiskBase) and groups is None):
            X = densify(X, f"{type(self).__name__}.fit (risk {risk}, solver {self.solver!r})", 4)
        if sample_weight is not None:
            sw = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
            X, y_enc, sw = _expand_frequency_weights(X, y_enc, sw)
        scaling = _feature_scaling(X, bool(self.fit_intercept), scale_floor(loss, self.l2_reg)) \
            if self._scale_features else None
        # a target far from unit scale (y x 1e200 overflows the squared loss): the same
        # problem for y / s (_target_scaling); values are mapped back by the factor c
        y_fit, risk_fit, l2_fit, s_y, c_y = y_enc, risk, float(self.l2_reg), 1.0, 1.0
        ts = _target_scaling(y_enc, loss, risk, bool(self.fit_intercept), self.l2_reg) \
            if self._scale_features and not isinstance(self, ClassifierMixin) else None
        if ts is not None:
            s_y, c_y, risk_fit, l2_fit = ts
            y_fit = y_enc / s_y
        design, scaling = _operator_design(X, scaling, bool(self.fit_intercept)) if lazy \
            else (None, scaling)
        try:
            obj = _build_objective(risk_fit, loss, X if design is None else design, y_fit, l2_fit,
                                   bool(self.fit_intercept), sw, groups)
        except ValueError as exc:
            if sw is None or "sample_weight" not in str(exc):
                raise
            raise ValueError(
                f"{exc}. Integer sample weights summing to at most {_MAX_EXPANSION} n are "
                f"accepted for every risk (the rows are repeated).") from None
        if design is None:
            scaling = _standardise_design(obj, X, scaling, bool(self.fit_intercept))
        elif scaling is not None:
            obj.reg[:X.shape[1]] /= scaling[1] ** 2  # mu / s_j^2: the same problem in w'
        weighted = getattr(obj, "sample_weight", None) is not None
        coef0 = None
        if self.warm_start and hasattr(self, "coef_"):
            W_prev = np.asarray(self.coef_, dtype=np.float64).reshape(-1, obj.K) if \
                np.ndim(self.coef_) == 1 else np.asarray(self.coef_, dtype=np.float64).T
            if self.fit_intercept:
                W_prev = np.vstack([W_prev, np.reshape(self.intercept_, (1, -1))])
            if W_prev.shape != (obj.p, obj.K):
                raise ValueError(
                    f"warm_start: the previous fit has coefficients of shape {W_prev.shape} "
                    f"(incl. intercept row) but this data needs {(obj.p, obj.K)}"
                    f"{coef_shape_msg}; set warm_start=False")
            coef0 = obj.as_coef(_to_scaled(W_prev, scaling, bool(self.fit_intercept)) / s_y)
        start = time.perf_counter()
        W, converged = self._fit_objective(obj, risk_fit, weighted, coef0, shape)
        if ts is not None:  # back to the units of y: coefficients x s, objective values x c
            W = W * s_y
            with np.errstate(over="ignore", under="ignore"):  # F itself may not fit a double
                self.objective_trace_ = np.asarray(self.objective_trace_) * c_y
        if self.verbose:
            status = "converged" if converged else "did not converge"
            print(f"[{type(self).__name__}] done: solver {self.solver_!r}, n_iter_="
                  f"{self.n_iter_}, objective {float(self.objective_trace_[-1]):.6g}, "
                  f"{time.perf_counter() - start:.3f} s, {status}", flush=True)
        if not converged and self.tol is not None:
            warnings.warn(
                f"{type(self).__name__} did not converge: solver {self.solver_!r} stopped after "
                f"{self.n_iter_} updates (max_iter={self._max_iter()}, tol={self.tol})"
                f"{_progress_reached(obj, W / s_y, c_y)}. Increase max_iter, loosen tol, or "
                f"scale the data.", ConvergenceWarning, stacklevel=3)
        if groups is not None:
            self.group_labels_ = obj.group_labels
            with np.errstate(over="ignore", under="ignore"):
                self.group_losses_ = obj.group_losses(obj.as_coef(W / s_y)) * c_y
        W_out = _from_scaled(W, scaling, bool(self.fit_intercept))
        z = getattr(obj, "_solution_z", None)  # (the Newton solver's predictions: y / s_y)
        warn_if_degenerate(self, X, y_enc, W_out, obj, W / s_y,
                           None if z is None else z[:, None] * s_y)
        return W_out

# ---------------------------------------------------------------------------- regressor
class RiskRegressor(RegressorMixin, _RiskEstimatorBase):
    r"""Linear regression minimising a (spectral) risk of the per-sample losses.

    ``F(w, b) = R(loss(X w + b, y)) + l2_reg/2 |w|^2`` with ``R`` the ``risk`` (see the module
    docstring for all accepted forms and the mapping to Ridge).

    Parameters
    ----------
    risk : str, risk object or problem family, default="cvar:0.1"
        ``ro.CVaR(0.1, shift_cost=..., divergence=...)``, ``"esrm:1"``, ``ro.Mean()``, ... or
        any object with ``make_objective`` (module docstring).
    loss : {"squared", "absolute"}, default="squared"
        ``0.5 (z - y)^2`` or ``|z - y|``.
    solver : str, default="auto"
        ``"auto"`` or a name of :func:`riskopt.solvers.available` (``"lbfgs"``, ``"prospect"``,
        ``"sorel"``, ``"lsvrg"``, ``"saddlesaga"``, ``"newton"``, ...). ``"auto"``: for the
        built-in risks Newton with a duality-gap certificate at ``shift_cost = 0`` (where it
        applies: ``loss="squared"``, ``l2_reg > 0``, uniform weights), else L-BFGS (module
        docstring); the family's ``default_solver`` otherwise. ``solver_reason_`` says which
        ran and why.
    lr : "auto" or float > 0, default="auto"
        Step size of a stochastic solver (ignored by L-BFGS). ``"auto"``: smoothness bound and a
        short tuning pass (module docstring); the value used is ``lr_``.
    l2_reg : float >= 0, default=1e-4
        ``mu`` in ``mu/2 |w|^2`` (the intercept is not penalised); ``Ridge(alpha)`` is
        ``l2_reg = alpha / n`` with ``risk="mean"``.
    fit_intercept : bool, default=True
    max_iter : int >= 1, default=1000
        Maximum number of solver updates (one pass over the data for Prospect, one outer
        iteration = two passes for SOREL), or of L-BFGS iterations and Newton steps (a hard
        cap: the total over L-BFGS's continuation solves, and over Newton and the L-BFGS
        run that continues an uncertified Newton fit).
    tol : float >= 0 or None, default=1e-4
        Stop when ``|grad F(w)| <= tol |grad F(0)|`` (stochastic solvers; plus an
        objective-change test for non-smooth problems), or L-BFGS's gradient tolerance.
        ``None``: run ``max_iter`` updates, no ConvergenceWarning for the cap (an L-BFGS
        stop without progress far from the optimum still warns).
    random_state : int, RandomState instance or None, default=None
        Seeds the stochastic solvers' index stream.
    warm_start : bool, default=False
        Start from the previous ``coef_`` / ``intercept_`` (and reuse ``lr_``).
    solver_params : dict or None, default=None
        Extra hyper-parameters of the solver (e.g. ``{"dual_lr": 0.4}`` for SOREL); not
        ``lr`` / ``random_state`` / ``tol`` / ``max_iter``.
    verbose : int >= 0, default=0
        ``> 0``: print one line to stdout when the fit starts (estimator, risk, solver,
        ``n x p``) and one when it ends (solver, ``n_iter_``, final objective, seconds,
        converged or not).
    max_epochs : int >= 1 or "deprecated", default="deprecated"
        Deprecated alias of ``max_iter``, to be removed in riskopt 0.3: an int set here is
        used instead of ``max_iter``, with a ``FutureWarning`` at ``fit``.
    constraint : {"bounded_group_loss"} or None, default=None
        Fairness constraint on the groups of ``fit``'s ``sensitive_features``: every group's
        mean training loss at most ``constraint_tol`` (:mod:`riskopt.fairness`; the fitted
        ``constraint_values_``, ``multipliers_``, ... are listed in :mod:`riskopt._fair`).
    constraint_tol : float > 0, default=0.02

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    n_iter_ : int
        Solver updates (or L-BFGS iterations) of the returned run, including the chosen step
        size's tuning updates (not those of the other candidates).
    objective_trace_ : ndarray
        ``F`` after each update of the returned run (``[F(start), F(end)]`` for L-BFGS).
    risk_ : the risk object used (strings parsed).
    solver_ : str, the registry name of the solver used.
    lr_ : float or None, the step size used (None for L-BFGS).
    solver_params_ : dict, the solver hyper-parameters used besides ``lr`` and ``random_state``
        (with ``lr="auto"``, SOREL's ``dual_lr`` is set to ``0.1 / mean loss at the start``).
    lr_search_ : dict or None, tuning scores (mean objective over the tuning passes, ``inf`` for
        divergent candidates) by candidate step size, when a search ran.
    n_features_in_ : int
    feature_names_in_ : ndarray of str, when ``X`` had string column names.

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> from riskopt.estimators import RiskRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 2)); y = X @ np.array([1.0, 2.0]) + rng.normal(size=100)
    >>> est = RiskRegressor(risk="cvar:0.5").fit(X, y)
    >>> bool(est.score(X, y) > 0.7)
    True
    """

    _parameter_constraints = {
        **_RiskEstimatorBase._parameter_constraints,
        "loss": [StrOptions({"squared", "absolute"})],
    }

    def __init__(self, risk="cvar:0.1", *, loss="squared", solver="auto", lr="auto",
                 l2_reg=1e-4, fit_intercept=True, max_iter=1000, tol=1e-4,
                 random_state=None, warm_start=False, solver_params=None, verbose=0,
                 max_epochs="deprecated", constraint=None, constraint_tol=0.02):
        store_params(self, locals())

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None, groups=None, sensitive_features=None):
        """Fit the model to real targets ``y``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Sparse input: see "Sparse input" in the module docstring.
        y : array-like of shape (n_samples,)
            Real targets.
        sample_weight : array-like of shape (n_samples,), optional
            Integer weights (summing to at most ``10 n``) repeat rows, for any risk and
            solver; other non-uniform weights need ``shift_cost = 0`` (or the mean risk) and
            L-BFGS (module docstring).
        groups : array-like of shape (n_samples,), optional
            Group labels: the risk then applies to the group-mean losses (group DRO, e.g.
            ``risk="cvar:0.15"`` is the CVaR over groups of the SONEX/ALEXR2 paper, Eq. (10);
            :class:`riskopt.objectives.fcco.GroupRiskObjective`). Sets ``group_labels_`` and
            ``group_losses_`` (the training loss of every group).
        sensitive_features : array-like of shape (n_samples,) or (n_samples, k), optional
            The groups of ``constraint`` (the intersections of ``k`` columns).

        Returns
        -------
        self
        """
        y_arr = np.asarray(y) if not hasattr(y, "dtype") else y
        if y is not None and getattr(y_arr, "dtype", None) is not None and \
                y_arr.dtype.kind in "USO":
            try:
                np.asarray(y_arr, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(
                    f"{type(self).__name__} needs numeric targets; y has non-numeric values "
                    f"(dtype {y_arr.dtype}). For class labels use RiskClassifier.") from None
        X, y = self._validate_X_y(X, y, y_numeric=True)
        y = np.asarray(y, dtype=np.float64)
        X, y, sample_weight = _fair.setup(self, X, y, sample_weight, sensitive_features)
        with verbose_notice(self):  # a first compilation announced (verbose)
            W = self._fit_common(X, y, get_loss(self.loss), sample_weight, "", groups)
        d = X.shape[1]
        self.coef_ = np.ascontiguousarray(W[:d, 0])
        self.intercept_ = float(W[d, 0]) if self.fit_intercept else 0.0
        return self

    def predict(self, X):
        """Predictions ``X @ coef_ + intercept_`` of shape (n_samples,)."""
        return np.asarray(self._linear_output(X), dtype=np.float64).reshape(-1)


# ---------------------------------------------------------------------------- classifier
class RiskClassifier(ClassifierMixin, _RiskEstimatorBase):
    r"""Linear classifier minimising a (spectral) risk of the logistic / multinomial losses.

    Two classes: the logistic loss on labels encoded {0, 1} (``classes_[1]`` is the positive
    class), ``coef_`` of shape (1, n_features); ``K > 2`` classes: the multinomial (softmax)
    loss, ``coef_`` of shape (K, n_features), all K rows penalised (as scikit-learn's
    multinomial :class:`~sklearn.linear_model.LogisticRegression`, which it equals for
    ``risk="mean"`` and ``C = 1 / (n l2_reg)``).

    Parameters
    ----------
    risk : str, risk object or problem family, default="esrm:1"
        As for :class:`RiskRegressor`. The default is a full-support spectrum: with CVaR at a
        small tail fraction ``a``, ``w = 0`` is optimal for the logistic loss as soon as the
        worst ``a`` fraction of the signed margins ``(2 y - 1) x.w`` averages below zero near
        ``w = 0`` (overlapping classes); e.g. ``cvar:0.3`` returns the zero model on a problem
        where the mean risk reaches 88% accuracy (tested).
    solver, lr, l2_reg, fit_intercept, max_iter, tol, random_state, warm_start, solver_params
        As for :class:`RiskRegressor`.
    verbose, max_epochs
        As for :class:`RiskRegressor` (``max_epochs``: deprecated alias of ``max_iter``).
    constraint : {"demographic_parity", "equalized_odds", "equal_opportunity", \
            "bounded_group_loss"} or None, default=None
        Fairness constraint on the groups of ``fit``'s ``sensitive_features`` (two classes for
        the rates; ``"...:to_overall"``: fairlearn's form), held on the training data for the
        hard rates to ``constraint_tol`` (:mod:`riskopt.fairness`, "Calibration"; _fair).
    constraint_tol : float > 0, default=0.02
    randomized : bool, default=False
        Binary ``predict``: class 1 w.p. ``sigmoid(z / SMOOTHING)`` (:func:`riskopt._fair.draw`).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    n_iter_, objective_trace_, risk_, solver_, lr_, lr_search_, n_features_in_,
    feature_names_in_
        As for :class:`RiskRegressor`.

    Examples
    --------
    >>> import numpy as np
    >>> from riskopt.estimators import RiskClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(150, 2))
    >>> y = np.array(["a", "b", "c"])[np.argmax(X @ [[1, -1, 0], [0, 1, -1]], axis=1)]
    >>> clf = RiskClassifier(risk="cvar:0.5", l2_reg=1e-3).fit(X, y)
    >>> clf.coef_.shape, clf.predict_proba(X[:2]).shape
    ((3, 2), (2, 3))
    """

    def __init__(self, risk="esrm:1", *, solver="auto", lr="auto", l2_reg=1e-4,
                 fit_intercept=True, max_iter=1000, tol=1e-4, random_state=None,
                 warm_start=False, solver_params=None, verbose=0, max_epochs="deprecated",
                 constraint=None, constraint_tol=0.02, randomized=False):
        store_params(self, locals())

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None, groups=None, sensitive_features=None):
        """Fit the model to class labels ``y``.

        Two classes: the logistic loss; more: the multinomial loss (labels encoded in the
        order of ``classes_``).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels (any hashable, sortable values).
        sample_weight : array-like of shape (n_samples,), optional
            As for :meth:`RiskRegressor.fit`.
        groups : array-like of shape (n_samples,), optional
            As for :meth:`RiskRegressor.fit` (group DRO).
        sensitive_features : array-like, optional
            As for :meth:`RiskRegressor.fit` (the groups of ``constraint``).

        Returns
        -------
        self
        """
        X, y = self._validate_X_y(X, y, y_numeric=False)
        two = _two_integral_labels(y)
        if two is not None:  # scikit-learn's target checks and LabelEncoder, in a few passes
            classes, y_enc = two
        else:
            check_classification_targets(y)
            enc = LabelEncoder()
            y_enc = enc.fit_transform(y).astype(np.float64)
            classes = enc.classes_
        if classes.shape[0] < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, but "
                f"the data contains only one class: {classes.tolist()[0]!r}")
        previous = getattr(self, "classes_", None)
        if self.warm_start and previous is not None and not np.array_equal(previous, classes):
            raise ValueError(
                f"warm_start: the classes changed from {previous.tolist()} to "
                f"{classes.tolist()}; set warm_start=False")
        K = classes.shape[0]
        loss = LogisticLoss() if K == 2 else MultinomialLoss(n_classes=K)
        self.classes_ = classes
        X, y_enc, sample_weight = _fair.setup(self, X, y_enc, sample_weight, sensitive_features, K)
        with verbose_notice(self):  # a first compilation announced (verbose)
            W = self._fit_common(X, y_enc, loss, sample_weight, f" for {K} classes", groups)
        d = X.shape[1]
        self.coef_ = np.ascontiguousarray(W[:d].T)
        self.intercept_ = (np.ascontiguousarray(W[d]) if self.fit_intercept
                           else np.zeros(W.shape[1]))
        return self

    def decision_function(self, X):
        """Scores: shape (n_samples,) for two classes (positive class ``classes_[1]``), else
        (n_samples, n_classes)."""
        scores = np.asarray(self._linear_output(X), dtype=np.float64)
        return scores.reshape(-1) if scores.shape[1] == 1 else scores

    def predict(self, X):
        """Predicted class labels."""
        scores = self.decision_function(X)
        idx = _fair.draw(self, scores) if scores.ndim == 1 else np.argmax(scores, axis=1)
        return self.classes_[idx]

    def predict_proba(self, X):
        """Class probabilities (sigmoid for two classes, softmax otherwise), columns in the
        order of ``classes_``."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1.0 - p, p])
        return softmax(scores, axis=1)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`, computed stably."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return np.column_stack([log_expit(-scores), log_expit(scores)])
        return log_softmax(scores, axis=1)
