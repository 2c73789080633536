"""Glue between the estimators and :mod:`riskopt.fairness` (``constraint=``,
``fit(..., sensitive_features=...)``): validation before the fit, the constrained solve in
place of the estimator's solver, and the fitted attributes.

Fitted attributes (set when ``constraint`` is not None):

* ``sensitive_groups_``: the group labels (tuples for several sensitive columns);
* ``constraint_values_``: per block (one; two for equalized odds: ``y = 0`` then ``y = 1``) the
  constrained quantity on the training data, ``max_g r_g - min_g r_g``, with the rates the bound
  holds for: the hard rates ``1[z > 0]`` of the deterministic model (the smoothed rate for
  cells of fewer than ``2 / constraint_tol`` rows; :mod:`riskopt.fairness`, "Calibration"),
  the smoothed (expected) rates with ``randomized=True``; for bounded group loss the training
  loss of every group;
* ``hard_constraint_values_``: the same with the hard rates ``1[z > 0]`` of every cell;
* ``constraint_rates_``: the ``(n_blocks, n_groups)`` rates of ``constraint_values_`` (group
  losses);
* ``smoothing_``: the logit scale ``tau`` of the smoothed rates ``sigmoid(z / tau)`` of the
  returned solution (``riskopt.fairness.SMOOTHING``, or a finer one of the calibration);
* ``multipliers_``: the ``(n_blocks, n_groups)`` net Lagrange multiplier of every group's rate
  (``E' lambda``: they sum to zero per block for the rate constraints; non-negative for
  bounded group loss), in the units of the objective.

Without ``sensitive_features`` all rows form one group: a rate constraint is then void (the fit
is the unconstrained one) and bounded group loss bounds the mean loss.
"""
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import _check_sample_weight

from . import fairness
from .fairness import FairnessProblem, parse_constraint, sensitive_codes, solve

_RATES = ("demographic_parity", "equalized_odds", "equal_opportunity")
#: a UserWarning when the hard training rates exceed the smoothed ones by more than this
#: (or than the bound; plus 2 / the smallest cell's size): the smoothing is too coarse for the
#: fitted model
HARD_GAP = 0.05


def setup(est, X, y, sample_weight, sensitive_features, n_classes=None):
    """Validate, expand integer sample weights into rows (with the groups) and store the
    :class:`~riskopt.fairness.FairnessProblem` as ``est._fair_problem`` (None without a
    constraint). Returns ``(X, y, sample_weight)`` for the estimator's fit."""
    est._fair_problem = None
    if est.constraint is None:
        if sensitive_features is not None:
            warnings.warn(f"{type(est).__name__}: sensitive_features is ignored without a "
                          "constraint (set constraint=...)", UserWarning, stacklevel=3)
        return X, y, sample_weight
    constraint = parse_constraint(est.constraint)[0]
    if constraint in _RATES:
        if n_classes is None:
            raise ValueError(f"constraint={constraint!r} is a classification constraint; "
                             "RiskRegressor takes constraint='bounded_group_loss'")
        if n_classes != 2 and sensitive_features is not None:  # (one group: void, any K)
            raise ValueError(f"constraint={constraint!r} is defined for two classes; y has "
                             f"{n_classes} (use constraint='bounded_group_loss')")
    n = X.shape[0]
    if sensitive_features is None:
        codes, labels = np.zeros(n, dtype=np.int64), ["all"]
    else:
        codes, labels = sensitive_codes(sensitive_features, n)
    if sample_weight is not None:
        sw = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        if not sw.sum() > 0:
            raise ValueError("sample_weight sums to zero: no sample to fit")
        if not np.all(sw == sw[0]):
            if not (np.all(np.isfinite(sw)) and np.all(sw >= 0) and np.all(sw == np.round(sw))):
                raise ValueError("with a fairness constraint sample_weight must be integer "
                                 "frequencies (the rows are repeated)")
            reps = sw.astype(np.int64)
            idx = np.repeat(np.arange(n), reps)
            X, y, codes = X[idx], np.asarray(y)[idx], codes[idx]
        sample_weight = None
    est._fair_problem = FairnessProblem(est.constraint, est.constraint_tol, codes, labels,
                                        y if constraint in _RATES else None)
    est._fair_y = np.asarray(y, dtype=np.float64)
    return X, y, sample_weight


def fit(est, obj, coef0):
    """The constrained solve for ``est._fit_objective``: ``(W, converged)``."""
    prob = est._fair_problem
    if prob.kind == "loss" and obj.K == 1 and getattr(obj, "y", None) is not None \
            and type(est).__name__ == "RiskRegressor":
        # the estimator's target scaling fits y / s: losses (and the bound) scale by 1 / s^2
        y0, y1 = est._fair_y, np.asarray(obj.y, dtype=np.float64).reshape(-1)
        j = int(np.argmax(np.abs(y1)))
        if y1.shape == y0.shape and y1[j] != 0 and y0[j] != y1[j]:
            s = y0[j] / y1[j]
            c = s * s if obj.loss.name == "squared" else abs(s)
            prob.b = prob.b / c
    W0 = obj.zeros() if coef0 is None else coef0
    f0 = float(obj.value(W0))
    res = solve(obj, prob, W0, tol=est.tol, max_iter=est._max_iter(),
                calibrate=not getattr(est, "randomized", False))
    est.solver_ = res.method
    est.solver_reason_ = f"constraint={est.constraint!r}: {res.message}"
    est.solver_params_, est.lr_, est.lr_search_ = {}, None, None
    est.dual_gap_ = float("nan")
    est.n_iter_ = max(int(res.n_iter), 1)
    est.objective_trace_ = np.array([f0, float(obj.value(res.coef))])
    _attributes(est, obj, prob, res)
    if not res.converged:  # the solver's reason (e.g. an infeasible bound), not the generic one
        warnings.warn(
            f"{type(est).__name__} with constraint={est.constraint!r}: {res.message} after "
            f"{est.n_iter_} steps (constraint_values_ = {np.round(est.constraint_values_, 6)}"
            f", bound {est.constraint_tol:g}). A bound below what any model reaches makes "
            "the constraints infeasible: loosen constraint_tol; otherwise increase max_iter.",
            ConvergenceWarning, stacklevel=6)
    return obj.as_matrix(res.coef), True


def _attributes(est, obj, prob, res):
    W = obj.as_matrix(res.coef)
    Z = np.asarray(obj.X @ W, dtype=np.float64)
    if prob.kind == "loss":
        losses = obj.losses(res.coef)
        vals, rates = prob.report(prob.cell_means(losses) * (prob.tol / prob.b[0]
                                                             if prob.b[0] else 1.0))
        hard = vals
    else:
        z = Z[:, 0]
        smooth, rh = (prob.cell_means(prob.terms(obj, z, second=False)[0]),
                      prob.cell_means((z > 0).astype(np.float64)))
        vals, rates = prob.report(fairness.rate_estimate(prob, smooth, rh))
        hard = prob.report(rh)[0]
    est.sensitive_groups_ = list(prob.labels)
    est.smoothing_ = getattr(prob, "tau", None)
    est.constraint_values_ = np.asarray(vals)
    est.hard_constraint_values_ = np.asarray(hard)
    est.constraint_rates_ = np.asarray(rates)
    est.multipliers_ = prob.multipliers(res.lam)
    gap = float(np.max(est.hard_constraint_values_ - est.constraint_values_, initial=0.0))
    # (plus two samples of the smallest cell: the hard rates move by 1 / n_k per sample)
    if prob.kind == "rate" and getattr(prob, "calibrated", None) is not None and \
            gap > max(prob.tol, HARD_GAP) + 2.0 / prob.sizes.min():
        warnings.warn(
            f"{type(est).__name__}: the constraint holds ({np.max(est.constraint_values_):.3g})"
            f" but the hard rates differ by up to {np.max(est.hard_constraint_values_):.3g} on "
            f"the training data: cells of fewer than {fairness.CALIBRATION_MIN_CELL:g} / "
            "constraint_tol rows are bounded through their smoothed rate (smoothing_ = "
            f"{est.smoothing_:g} logits), whose hard rate is not resolvable to the bound; merge "
            "the small groups or lower riskopt.fairness.SMOOTHING", UserWarning, stacklevel=5)


def draw(est, scores):
    """Binary class indices for ``predict``: ``1[z > 0]``, or with ``randomized=True`` a draw
    of class 1 with probability ``sigmoid(z / tau)``, ``tau`` the fit's ``smoothing_`` (else
    ``riskopt.fairness.SMOOTHING``; seeded by the estimator's ``random_state``; an int gives
    the same draws at every call). The smoothed rate a constraint bounds is then exactly the
    expected rate of these predictions, so on the training data the constraint holds in
    expectation for the randomised classifier, with no smoothing gap
    (``hard_constraint_values_`` is the deterministic rule's). The draws cost accuracy where
    the logits are small: with ``tau = 1`` and the logistic loss they follow the predicted
    probabilities (``benchmarks/fairness_vs_fairlearn.py``, variant "randomized")."""
    if not getattr(est, "randomized", False):
        return (scores > 0).astype(int)
    from scipy.special import expit
    from sklearn.utils import check_random_state

    rng = check_random_state(est.random_state)
    tau = getattr(est, "smoothing_", None) or fairness.SMOOTHING
    return (rng.random_sample(scores.shape[0]) < expit(scores / tau)).astype(int)

