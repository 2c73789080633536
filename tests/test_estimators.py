"""scikit-learn estimators: API conformance, equivalences, automatic step size, inputs.

Measurements behind the estimator's automatic choices (2-core shared machine, one BLAS thread;
scripts kept out of the repository, numbers as observed):

* Step size (``lr="auto"``), Prospect, squared loss, ``l2_reg = 1/n``, ``shift_cost = 0.5``,
  no intercept; ``lr0 = 1 / (n max(sigma) max_i |x_i|^2)``. Passes until the relative
  gradient norm reaches 1e-4 (``None``: not within 40 passes on concrete, 16 on kin8nm):

  ============  =======  ===========  ==========  ===========
  data          risk     lr0          c = 1       1/3    1/10
  ============  =======  ===========  ==========  ===========
  concrete      CVaR     0.0115       23          37     None
  concrete      Extrem.  0.0115       21          37     None
  concrete      ESRM     0.0145       20          32     None
  kin8nm        CVaR     0.0284       None        15     15
  kin8nm        Extrem.  0.0284       None        16     15
  kin8nm        ESRM     0.0359       None        15     13
  ============  =======  ===========  ==========  ===========

  ``3 lr0`` diverged or stalled on all six. The two-pass tuning rule picks ``lr0/3`` on
  concrete and ``lr0/10`` on kin8nm. Where the relative gradient first fell below 1e-4 the
  relative suboptimality was 3e-9 .. 3e-7, so ``tol = 1e-4`` on the gradient gives the
  1e-6 suboptimality tested below.
* SOREL's dual step: the good ``dual_lr`` scales as 1 / (loss scale) (rescaling ``y`` by 0.1 / 1
  / 3 moved the best C from 4 to 0.04 to 0.004 on a CVaR(0.2) problem). With ``dual_lr = c /
  mean loss at the start``, ``c = 0.1`` was the only value without a failure over concrete,
  kin8nm and a synthetic problem (CVaR(0.5), CVaR(0.1), Extremile(2), ESRM(1), 50 updates):
  worst relative suboptimality 2.6e-4 (CVaR(0.1)), against 1.7 for c = 0.2 and 1.9 for c = 0.4.
* ``solver="auto"``: see ``riskopt.estimators.AUTO_LBFGS_MAX_SIZE``.
"""
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import make_classification, make_regression
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

import _certify as certify
import riskopt as ro
from riskopt import estimators as est_mod
from riskopt.estimators import RiskClassifier, RiskRegressor

# --------------------------------------------------------------------------- sklearn checks
_SW_STOCHASTIC = (
    "a stochastic solver stopped by max_iter=30 on the check's ill-conditioned data (15 rows, "
    "30 features, l2_reg=1e-4): the weighted fit (integer weights expanded into rows, in the "
    "check's shuffled order) and the repeated-rows fit draw different index streams, so their "
    "unconverged iterates differ (~2e-2 in the predictions); they agree only at the minimiser"
)


_SW_TOL = (
    "the default tol (1e-4) certifies each fit to 1e-6 relative in the objective, not the "
    "check's rtol 1e-7 on the predictions: with l2_reg = 1e-4 on the check's 15 x 30 data a "
    "relative gap of 1e-6 allows ~1e-4 in the predictions, and the weighted and the "
    "repeated-rows fits stop at different certified points; RiskRegressor(tol=1e-10) (below) "
    "passes the check"
)
_SW_TOL_SPARSE = (
    _SW_TOL + ". The sparse variant passes now (XPASS, stop 43) by agreement, not convergence: "
    "both sparse fits take the same Newton path (25 updates, gap 2.554e-13 each) and stop "
    "1e-12 apart, yet both 2.5e-5 relative from the tol=1e-10 fit in the predictions (OpenBLAS "
    "SkylakeX, Haswell and Prescott alike on main at 16166108, presumably its dual_bound "
    "change; on c1e234b3, before it, Prescott stopped the two at 27 and 26 "
    "updates and Haswell failed the check). Where a certified fit stops is not "
    "controlled, so the check stays a non-strict xfail (72358660 did not change it)"
)


def _expected_failed_checks(estimator):
    """Checks that cannot pass, with the reason (used by parametrize_with_checks)."""
    if estimator.solver in ("prospect", "sorel"):
        return {"check_sample_weight_equivalence_on_dense_data": _SW_STOCHASTIC,
                "check_sample_weight_equivalence_on_sparse_data": _SW_STOCHASTIC}
    if isinstance(estimator, RiskRegressor) and estimator.tol == 1e-4 \
            and str(estimator.risk) == "cvar:0.1":
        # (the sparse variant passed by the luck of identical paths until the ridge start,
        # stop 37, then differed by 6e-6 relative; it passes again the same way: stop 43)
        return {"check_sample_weight_equivalence_on_dense_data": _SW_TOL,
                "check_sample_weight_equivalence_on_sparse_data": _SW_TOL_SPARSE}
    return {}


CHECKED = [
    RiskRegressor(),                                                  # default: cvar:0.1, newton
    RiskRegressor(tol=1e-10),                                         # fitted to 1e-12 relative
    RiskRegressor(risk=ro.CVaR(0.2, shift_cost=0.5)),                 # CVaR with shift cost
    RiskRegressor(risk="esrm:1", loss="absolute"),
    RiskRegressor(risk=ro.CVaR(0.5, shift_cost=0.5), solver="prospect", max_iter=30),
    RiskClassifier(),                                                 # binary + multiclass data
    RiskClassifier(risk=ro.CVaR(0.2, shift_cost=0.5, divergence="kl")),
    RiskClassifier(risk="extremile:2", solver="sorel", max_iter=30),
]


#: the costliest checks (refits on sparse / re-typed / read-only copies of the data) of the
#: absolute-loss ESRM configuration (its non-smooth path: 8.5 s of the grid's 28 s CPU, loaded
#: machine): run by `make test-slow`; every other configuration runs them in the default suite
_SLOW_CHECKS = {"RiskRegressor(loss='absolute',risk='esrm:1')": (
    "check_estimator_sparse_matrix", "check_estimator_sparse_array", "check_estimators_dtypes",
    "check_regressors_int", "check_regressors_train", "check_regressor_data_not_an_array",
    "check_readonly_memmap_input", "check_pipeline_consistency")}


def _with_slow_marks(decorator):
    """``parametrize_with_checks``' cases, the :data:`_SLOW_CHECKS` ones marked slow."""
    mark = decorator.mark
    argvalues = []
    for case in mark.args[1]:
        values, marks = (case.values, list(case.marks)) if hasattr(case, "values") else \
            (case, [])
        estimator, check = values
        name = getattr(check, "func", check).__name__
        if name in _SLOW_CHECKS.get(str(estimator).replace(" ", "").replace("\n", ""), ()):
            marks.append(pytest.mark.slow)
        argvalues.append(pytest.param(*values, marks=marks))
    return pytest.mark.parametrize(mark.args[0], argvalues, **mark.kwargs)


@_with_slow_marks(parametrize_with_checks(CHECKED, expected_failed_checks=_expected_failed_checks))
def test_sklearn_compatible_estimator(estimator, check):
    with warnings.catch_warnings():
        # the stochastic configurations stop at max_iter=30 on some check data
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


# --------------------------------------------------------------------------- helpers
def _regression(n=150, d=5, seed=0):
    X, y = make_regression(n_samples=n, n_features=d, noise=10.0, random_state=seed)
    return X, y / np.std(y)


def _objective(estimator, X, y, **kw):
    """The objective the fitted estimator minimised (regressor, intercept included)."""
    return ro.Objective(kw.get("loss", "squared"), estimator.risk_, X, y,
                        l2_reg=estimator.l2_reg, fit_intercept=estimator.fit_intercept)


def _coef_vector(estimator):
    return np.r_[estimator.coef_, estimator.intercept_] if estimator.fit_intercept \
        else estimator.coef_


# --------------------------------------------------------------------------- equivalences
def test_mean_risk_equals_ridge():
    """Ridge: |y - Xw - b|^2 + alpha |w|^2 = n [mean 0.5 r^2 + (mu/2)|w|^2], mu = alpha / n."""
    X, y = _regression()
    alpha = 3.0
    ridge = Ridge(alpha=alpha).fit(X, y)
    est = RiskRegressor(risk="mean", l2_reg=alpha / len(y), tol=1e-10).fit(X, y)
    # both are the optimum of the same problem, each certified through its own accuracy
    # (tests/_certify.py), not compared with each other at a fixed tolerance
    obj, W = certify.problem_of(est, X, y)
    certify.assert_certified(obj, W, rel=1e-10, what="RiskRegressor")
    certify.assert_certified(obj, certify._design_W(ridge), rel=1e-10, what="Ridge")


def test_mean_risk_equals_ridge_with_sample_weight():
    """Weights s: Ridge's alpha = mu * sum(s) (the risk uses normalised weights)."""
    X, y = _regression()
    sw = np.random.default_rng(0).uniform(0.5, 2.0, size=len(y))
    alpha = 3.0
    ridge = Ridge(alpha=alpha).fit(X, y, sample_weight=sw)
    est = RiskRegressor(risk="mean", l2_reg=alpha / sw.sum(), tol=1e-10).fit(X, y, sample_weight=sw)
    assert est.solver_ == "lbfgs"
    obj, W = certify.problem_of(est, X, y, sample_weight=sw)
    certify.assert_certified(obj, W, rel=1e-10, what="RiskRegressor")
    certify.assert_certified(obj, certify._design_W(ridge), rel=1e-10, what="Ridge")


@pytest.mark.parametrize("n_classes", [2, 3])
def test_mean_risk_equals_logistic_regression(n_classes):
    """LogisticRegression: C sum log-loss + |w|^2/2  ==  n C [mean log-loss + (mu/2)|w|^2],
    mu = 1/(n C); multinomial (all K rows penalised) for K > 2."""
    X, y = make_classification(n_samples=150, n_features=5, n_informative=3,
                               n_classes=n_classes, random_state=0)
    C = 0.5
    ref = LogisticRegression(C=C, tol=1e-12, max_iter=10_000).fit(X, y)
    est = RiskClassifier(risk="mean", l2_reg=1.0 / (len(y) * C), tol=1e-10).fit(X, y)
    assert est.coef_.shape == ref.coef_.shape == ((1, 5) if n_classes == 2 else (3, 5))
    assert est.intercept_.shape == ref.intercept_.shape
    # both are the optimum of the same problem, each certified through its own accuracy
    obj, W = certify.problem_of(est, X, y)
    certify.assert_certified(obj, W, rel=1e-10, what="RiskClassifier")
    certify.assert_certified(obj, certify._design_W(ref), rel=1e-10, what="LogisticRegression")
    # the same encoding of the classes and the same link: est's formulas at ref's coefficients
    # are ref's probabilities (no second solve involved)
    twin = clone(est)
    twin.classes_, twin.coef_, twin.intercept_ = est.classes_, ref.coef_, ref.intercept_
    twin.n_features_in_ = est.n_features_in_
    np.testing.assert_allclose(twin.predict_proba(X), ref.predict_proba(X), rtol=1e-12,
                               atol=1e-15)


@pytest.mark.parametrize("make_est", [
    lambda r: RiskRegressor(risk=r, l2_reg=0.01, tol=1e-10),
    lambda r: RiskClassifier(risk=r, l2_reg=0.01, tol=1e-10),
])
def test_cvar_one_equals_mean(make_est):
    X, y = _regression()
    if isinstance(make_est("mean"), RiskClassifier):
        X, y = make_classification(n_samples=120, n_features=4, n_classes=3, n_informative=3,
                                   n_redundant=0, random_state=1)
    a = make_est(ro.CVaR(1.0)).fit(X, y)
    b = make_est("mean").fit(X, y)
    # CVaR(1) is the mean: both fits certified optimal for the mean problem
    obj, W_b = certify.problem_of(b, X, y)
    for est in (a, b):
        certify.assert_certified(obj, certify._design_W(est), rel=1e-9, what=str(est.risk))


def test_integer_weights_equal_repeated_rows_with_shift_cost():
    """Integer weights are frequencies (rows repeated), so they work for shift_cost > 0 too."""
    X, y = _regression(n=60)
    sw = np.random.default_rng(1).integers(0, 4, size=60)
    risk = ro.CVaR(0.3, shift_cost=0.5)
    a = RiskRegressor(risk=risk, tol=1e-10).fit(X, y, sample_weight=sw)
    b = RiskRegressor(risk=risk, tol=1e-10).fit(np.repeat(X, sw, axis=0), np.repeat(y, sw))
    # both certified optimal for the repeated-rows problem
    obj, _ = certify.problem_of(b, np.repeat(X, sw, axis=0), np.repeat(y, sw))
    for est in (a, b):
        certify.assert_certified(obj, certify._design_W(est), rel=1e-9)


def test_fractional_weights_need_zero_shift_cost():
    X, y = _regression(n=60)
    sw = np.linspace(0.5, 1.5, 60)
    with pytest.raises(ValueError, match="shift_cost=0.*Integer sample weights"):
        RiskRegressor(risk=ro.CVaR(0.3, shift_cost=0.5)).fit(X, y, sample_weight=sw)
    with pytest.raises(ValueError, match="does not support non-uniform sample_weight"):
        RiskRegressor(risk="cvar:0.3", solver="sorel").fit(X, y, sample_weight=sw)
    est = RiskRegressor(risk="cvar:0.3").fit(X, y, sample_weight=sw)   # auto -> L-BFGS
    assert est.solver_ == "lbfgs"


# --------------------------------------------------------------------------- meta-estimators
def test_pipeline_and_grid_search_over_risk_and_l2_reg():
    X, y = _regression(n=200, d=4)
    X = X * np.array([1.0, 10.0, 100.0, 0.1]) + 5.0  # badly scaled: the scaler matters
    pipe = make_pipeline(StandardScaler(), RiskRegressor())
    grid = GridSearchCV(pipe, {
        "riskregressor__risk": ["cvar:0.5", ro.CVaR(0.5, shift_cost=1.0), "esrm:1", "mean"],
        "riskregressor__l2_reg": [1e-4, 1e-2],
    }, cv=3).fit(X, y)
    assert len(grid.cv_results_["params"]) == 8
    assert np.all(np.isfinite(grid.cv_results_["mean_test_score"]))
    assert grid.best_score_ > 0.8
    assert grid.predict(X).shape == (200,)


def test_classifier_pipeline_grid_search_with_string_labels():
    X, y = make_classification(n_samples=240, n_features=5, n_informative=3, n_classes=3,
                               random_state=0)
    y = np.array(["low", "mid", "high"])[y]
    grid = GridSearchCV(make_pipeline(StandardScaler(), RiskClassifier()), {
        "riskclassifier__risk": ["cvar:0.5", ro.ESRM(1.0, shift_cost=0.5, divergence="kl")],
        "riskclassifier__l2_reg": [1e-3, 1e-1],
    }, cv=3).fit(X, y)
    clf = grid.best_estimator_[-1]
    np.testing.assert_array_equal(clf.classes_, ["high", "low", "mid"])
    proba = grid.predict_proba(X)
    assert proba.shape == (240, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert grid.score(X, y) > 0.6


# --------------------------------------------------------------------------- automatic step
def _auto_prospect_subopt(name, risk, fit_intercept=False):
    data = ro.datasets.load(name)
    X, y = data.X_train, data.y_train
    n = len(y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = RiskRegressor(risk=risk, solver="prospect", l2_reg=1.0 / n,
                            fit_intercept=fit_intercept, random_state=0).fit(X, y)
    obj = _objective(est, X, y)
    f_star = ro.solvers.LBFGS(tol=1e-12).run(obj).value
    f0 = obj.value(obj.zeros())
    return (obj.value(_coef_vector(est)) - f_star) / (f0 - f_star), est


@pytest.mark.parametrize("name, risk, fit_intercept", [
    ("concrete", ro.CVaR(0.5, shift_cost=0.5), False),
    ("concrete", ro.Extremile(2.0, shift_cost=0.5), True),
    ("kin8nm", ro.CVaR(0.5, shift_cost=0.5), False),
])
def test_auto_step_size_converges_with_prospect(name, risk, fit_intercept):
    """No user grid: lr="auto" + the gradient test reach relative suboptimality <= 1e-6."""
    subopt, est = _auto_prospect_subopt(name, risk, fit_intercept)
    assert est.solver_ == "prospect" and len(est.lr_search_) == 4
    assert est.lr_search_[est.lr_] == min(est.lr_search_.values())  # the papers' rule
    assert subopt <= 1e-6, (subopt, est.n_iter_, est.lr_)
    assert est.n_iter_ < est.max_iter


@pytest.mark.slow
@pytest.mark.parametrize("name", ["concrete", "kin8nm"])
@pytest.mark.parametrize("risk", [ro.Extremile(2.0, shift_cost=0.5), ro.ESRM(1.0, shift_cost=0.5)])
def test_auto_step_size_converges_with_prospect_all_risks(name, risk):
    subopt, est = _auto_prospect_subopt(name, risk)
    assert subopt <= 1e-6, (subopt, est.n_iter_, est.lr_)


def test_auto_step_size_sorel_is_scale_invariant():
    """dual_lr follows the loss scale, lr the smoothness: rescaling y rescales nothing else."""
    X, y = _regression(n=200, d=3)
    fits = [RiskRegressor(risk="extremile:2", solver="sorel", random_state=0, l2_reg=1e-2)
            .fit(X, s * y) for s in (0.1, 1.0, 10.0)]
    obj, _ = certify.problem_of(fits[1], X, y)  # the unit-scale problem
    for s, f in zip((0.1, 1.0, 10.0), fits):
        assert f.lr_ == fits[1].lr_
        # the fit of s y, divided by s, is the optimum of the unit-scale problem to SOREL's
        # accuracy at its stopping test (measured: a certified gap of 1.6e-7 at every scale),
        # certified through its own duality gap rather than compared with another fit
        certify.assert_certified(obj, certify._design_W(f) / s, 1e-6,
                                 what=f"SOREL on y x {s:g}, divided by {s:g}")


def test_numeric_lr_is_used_and_divergence_is_reported():
    X, y = _regression()
    est = RiskRegressor(risk=ro.CVaR(0.5, shift_cost=0.5), solver="prospect", lr=1e-3,
                        random_state=0, max_iter=5, tol=None).fit(X, y)
    assert est.lr_ == 1e-3 and est.lr_search_ is None and est.n_iter_ == 5
    with pytest.raises(ValueError, match="diverged with lr=100"):
        RiskRegressor(risk=ro.CVaR(0.5, shift_cost=0.5), solver="prospect", lr=100.0,
                      random_state=0).fit(X, y)


def test_convergence_warning_and_trace():
    X, y = _regression()
    with pytest.warns(ConvergenceWarning, match=r"did not converge.*max_iter=2.*relative "
                      r"\(sub\)gradient norm is [0-9.e-]+ and the objective"):
        est = RiskRegressor(risk=ro.CVaR(0.5, shift_cost=0.5), solver="prospect",
                            max_iter=2, random_state=0).fit(X, y)
    assert est.n_iter_ == 2 and est.objective_trace_.shape == (3,)
    est = RiskRegressor(risk=ro.CVaR(0.5, shift_cost=0.5), solver="lsvrg",
                        random_state=0).fit(X, y)
    trace = est.objective_trace_
    assert trace.shape == (est.n_iter_ + 1,) and trace[-1] < trace[0]
    obj = _objective(est, X, y)
    assert trace[-1] == pytest.approx(obj.value(_coef_vector(est)), rel=1e-12)


def test_solver_params_and_auto_choice(monkeypatch):
    X, y = _regression(n=100)
    est = RiskRegressor(risk="cvar:0.5", solver="sorel", solver_params={"dual_lr": 0.05},
                        random_state=0).fit(X, y)
    assert est.solver_params_ == {"dual_lr": 0.05}
    with pytest.raises(ValueError, match="solver_params must not set 'lr'"):
        RiskRegressor(solver="sorel", solver_params={"lr": 0.1}).fit(X, y)
    assert RiskRegressor().fit(X, y).solver_ == "newton"  # shift_cost = 0: certified Newton
    assert RiskRegressor(loss="absolute").fit(X, y).solver_ == "lbfgs"  # no curvature
    monkeypatch.setattr(est_mod, "AUTO_LBFGS_MAX_SIZE", 0)
    assert RiskRegressor(risk="cvar:0.5", random_state=0).fit(X, y).solver_ == "sorel"
    assert RiskRegressor(risk=ro.CVaR(0.5, shift_cost=0.5)).fit(X, y).solver_ == "lbfgs"
    # the mean (a smooth shift_cost = 0 risk): the certified Newton solver, whatever the size
    # (L-BFGS's iteration count depended on the units of the features: issue 29)
    assert RiskRegressor(risk="mean").fit(X, y).solver_ == "newton"


# --------------------------------------------------------------------------- warm start
@pytest.mark.parametrize("solver", ["lbfgs", "prospect"])
def test_warm_start_reuses_coef(solver):
    X, y = _regression()
    risk = ro.CVaR(0.5, shift_cost=0.5)
    est = RiskRegressor(risk=risk, solver=solver, warm_start=True, random_state=0).fit(X, y)
    coef, lr = _coef_vector(est).copy(), est.lr_
    obj = _objective(est, X, y)
    est.fit(X, y)
    # the second run starts at the first solution (and keeps the tuned step)
    assert est.objective_trace_[0] == pytest.approx(obj.value(coef), rel=1e-12)
    assert est.lr_ == lr
    cold = clone(est).set_params(warm_start=False).fit(X, y)
    assert cold.objective_trace_[0] == pytest.approx(obj.value(obj.zeros()), rel=1e-12)
    if solver == "prospect":
        assert est.lr_search_ is None and est.n_iter_ < cold.n_iter_


def test_warm_start_shape_mismatch_is_an_error():
    X, y = _regression()
    est = RiskRegressor(warm_start=True).fit(X, y)
    with pytest.raises(ValueError, match="warm_start"):
        est.fit(X[:, :3], y)
    Xc, yc = make_classification(n_samples=90, n_features=4, n_classes=3, n_informative=3,
                                 n_redundant=0, random_state=0)
    clf = RiskClassifier(warm_start=True).fit(Xc, yc)
    with pytest.raises(ValueError, match="classes changed"):
        clf.fit(Xc, np.where(yc == 2, 1, yc))


# --------------------------------------------------------------------------- inputs
def test_bad_inputs_raise_clear_errors():
    X, y = _regression(n=40, d=3)
    reg = RiskRegressor()
    Xnan = X.copy()
    Xnan[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        reg.fit(Xnan, y)
    ynan = y.copy()
    ynan[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        reg.fit(X, ynan)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        reg.fit(X, y[:-1])
    with pytest.raises(ValueError, match="Expected 2D array"):
        reg.fit(X[:, 0], y)
    with pytest.raises(ValueError, match="needs numeric targets.*RiskClassifier"):
        reg.fit(X, np.array(["a", "b"] * 20))
    reg.fit(X, y)
    with pytest.raises(ValueError, match="X has 2 features, but RiskRegressor is expecting 3"):
        reg.predict(X[:, :2])
    with pytest.raises(ValueError, match="at least 2 classes.*only one class: 'a'"):
        RiskClassifier().fit(X, np.array(["a"] * 40))
    with pytest.raises(ValueError, match="Unknown label type"):
        RiskClassifier().fit(X, y)


@pytest.mark.parametrize("params, match", [
    ({"lr": -1.0}, "'lr' parameter"),
    ({"solver": "gauss_seidel"}, "'solver' parameter of RiskRegressor must be a str among"),
    ({"l2_reg": -1e-3}, "'l2_reg' parameter"),
    ({"max_iter": 0}, "'max_iter' parameter"),
    ({"max_epochs": 0}, "'max_epochs' parameter"),
    ({"max_epochs": "1000"}, "'max_epochs' parameter"),
    ({"verbose": -1}, "'verbose' parameter"),
    ({"risk": 0.1}, "'risk' parameter"),
    ({"loss": "huber"}, "'loss' parameter"),
])
def test_parameter_validation_is_declarative(params, match):
    X, y = _regression(n=30, d=2)
    with pytest.raises(InvalidParameterError, match=match):
        RiskRegressor(**params).fit(X, y)


def test_bad_risk_string_is_a_value_error():
    X, y = _regression(n=30, d=2)
    with pytest.raises(ValueError, match="unknown risk 'cvr:0.1'"):
        RiskRegressor(risk="cvr:0.1").fit(X, y)


def test_sparse_input_matches_dense():
    # the default path keeps X sparse (tests/test_sparse.py); a stochastic solver densifies it
    # and says so
    X, y = _regression(n=80, d=6)
    X[np.abs(X) < 0.8] = 0.0
    Xs = sp.csr_matrix(X)
    kw = dict(risk="cvar:0.5", solver="lsvrg", random_state=0, max_iter=30, tol=None)
    dense = RiskRegressor(**kw).fit(X, y)
    with pytest.warns(ro.SparseDensifyWarning, match=r"densifies the sparse X \(80 x 6"):
        sparse = RiskRegressor(**kw).fit(Xs, y)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, atol=1e-12)
    np.testing.assert_allclose(sparse.predict(Xs), dense.predict(X), atol=1e-12)
    yc = (y > 0).astype(int)
    with pytest.warns(ro.SparseDensifyWarning, match="MiB dense against"):
        clf = RiskClassifier(risk="cvar:0.5", solver="sgd", random_state=0, max_iter=30,
                             tol=None).fit(Xs, yc)
    np.testing.assert_allclose(clf.predict_proba(Xs), clf.predict_proba(X), atol=1e-12)


def test_classifier_binary_shapes_and_probabilities():
    X, y = make_classification(n_samples=100, n_features=3, n_informative=2, n_redundant=0,
                               random_state=2)
    labels = np.array([-1, 7])[y]
    clf = RiskClassifier(l2_reg=1e-2).fit(X, labels)
    assert clf.coef_.shape == (1, 3) and clf.intercept_.shape == (1,)
    dec = clf.decision_function(X)
    proba = clf.predict_proba(X)
    assert dec.shape == (100,) and proba.shape == (100, 2)
    np.testing.assert_allclose(proba[:, 1], 1.0 / (1.0 + np.exp(-dec)))
    np.testing.assert_allclose(np.exp(clf.predict_log_proba(X)), proba)
    np.testing.assert_array_equal(clf.predict(X), np.where(dec > 0, 7, -1))
    assert clf.score(X, labels) > 0.8
    # why the classifier's default is not a small-tail CVaR: the zero model is optimal here
    zero = RiskClassifier(risk="cvar:0.3", l2_reg=1e-2).fit(X, labels)
    assert np.abs(zero.coef_).max() < 1e-6 and np.abs(zero.decision_function(X)).max() < 1e-5


def test_pickle_and_feature_names():
    pd = pytest.importorskip("pandas")
    X, y = _regression(n=50, d=3)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    est = RiskRegressor(risk="esrm:2").fit(df, y)
    np.testing.assert_array_equal(est.feature_names_in_, ["a", "b", "c"])
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(df), est.predict(df))


# --------------------------------------------------------------------------- plug-in family
class _RUCVaRFamily:
    """A second problem family through the ``make_objective`` protocol: CVaR in the
    Rockafellar-Uryasev form (riskopt.objectives.ru_cvar), solved by SPL+."""

    default_solver = "splplus"

    def __init__(self, beta):
        self.beta = beta

    def make_objective(self, loss, X, y, *, l2_reg, fit_intercept, sample_weight):
        from riskopt.objectives.ru_cvar import RUCVaRObjective

        if sample_weight is not None:
            raise ValueError("this family takes no sample_weight")
        return RUCVaRObjective(loss, X, y, beta=self.beta, l2_reg=l2_reg,
                               fit_intercept=fit_intercept)

    def auto_lr(self, objective, solver):
        return 1.0  # SPL+ is scale-free through its loss_scale l0 (Meng & Gower, eq. (16))


def test_other_problem_families_plug_in():
    import riskopt.solvers.spl  # noqa: F401  (registers sgm / spl / splplus)

    data = ro.datasets.load("concrete")
    X, y = data.X_train, data.y_train
    with pytest.warns(ConvergenceWarning):  # SPL+ converges sublinearly
        est = RiskRegressor(risk=_RUCVaRFamily(0.9), l2_reg=1e-3, max_iter=100,
                            random_state=0).fit(X, y)
    assert est.solver_ == "splplus" and est.lr_ == 1.0
    assert est.objective_trace_[-1] < 0.6 * est.objective_trace_[0]
    # the same problem as the spectral CVaR(1 - beta): the spectral objective agrees closely
    spectral = ro.Objective("squared", ro.CVaR(0.1), X, y, l2_reg=1e-3, fit_intercept=True)
    f_star = ro.solvers.LBFGS().run(spectral).value
    f0 = spectral.value(spectral.zeros())
    assert (spectral.value(_coef_vector(est)) - f_star) / (f0 - f_star) < 0.2


def test_incompatible_solver_gives_the_registry_error():
    X, y = _regression(n=60)
    with pytest.raises(ro.solvers.IncompatibleObjectiveError,
                       match="solvers for this objective: .*prospect"):
        RiskRegressor(risk="cvar:0.5", solver="splplus").fit(X, y)


def test_solvers_registered_later_are_accepted(monkeypatch):
    """The ``solver`` constraint and the solver driver read the live registry (plug-ins)."""
    from riskopt.solvers import _registry

    class ToyPlugin(ro.solvers.SGD):  # a plug-in with only lr / random_state parameters
        name = "toy_plugin_est"

        def __init__(self, lr=0.01, random_state=None):
            self._store(locals())
            self.batch_size = 16

    X, y = _regression(n=80)
    with pytest.raises(InvalidParameterError, match="toy_plugin_est"):
        RiskRegressor(solver="toy_plugin_est").fit(X, y)
    _registry._all()
    monkeypatch.setitem(_registry._REGISTRY, "toy_plugin_est", ToyPlugin)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # biased SGD
        est = RiskRegressor(risk="mean", solver="toy_plugin_est", max_iter=20,
                            random_state=0).fit(X, y)
    assert est.solver_ == "toy_plugin_est" and len(est.lr_search_) == 4
    assert est.objective_trace_[-1] < 0.5 * est.objective_trace_[0]


# ----------------------------------------------------------------- units of the features
def _unit_problem(n=300, seed=0):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 3))
    y = Z @ np.array([1.0, -2.0, 0.5]) + rng.standard_t(4, n)
    return Z, y


@pytest.mark.parametrize("solver", ["lbfgs", "prospect", "lsvrg"])
def test_fit_does_not_depend_on_the_units_of_the_features(solver):
    """Columns in wildly different units (1e-6, raw nanosecond timestamps ~1.7e18, 1e50 x)
    give the same model as the standardised columns: the fit is scale-aware
    (``estimators._feature_scaling``), so the step sizes, L-BFGS and the stopping test see
    the same problem. Before, L-BFGS returned the zero model for such data with a success
    message. The l2 term is mu/2 |w|^2 in the units given, so the comparison is with
    ``l2_reg`` scaled per column: fitting on ``Z`` with l2 ``mu`` is the same problem as on
    ``X = Z * s + c`` with l2 ``mu / s^2``; we check the unregularised fits (``l2_reg=0``):
    the fit on ``X``, mapped into the units of ``Z``, and the fit on ``Z`` are both certified
    near the optimum of the unit problem (``tests/_certify.py``; for the squared loss without
    l2 its dual bound is exact), and the predictions on ``X`` are those of the mapped model
    (to the rounding of ``c . coef``, about ``eps |c . coef|``)."""
    Z, y = _unit_problem()
    s = np.array([1e-6, 1e9, 1e50])
    c = np.array([0.0, 1.7e18, 0.0])
    X = Z * s + c
    kw = dict(risk="cvar:0.3", l2_reg=0.0, solver=solver, random_state=0, tol=1e-8,
              max_iter=400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = RiskRegressor(**kw).fit(Z, y)
        est = RiskRegressor(**kw).fit(X, y)
    assert np.all(np.isfinite(est.coef_)) and np.all(est.coef_ != 0)
    obj, W_ref = certify.problem_of(ref, Z, y)
    W_est = np.r_[est.coef_ * s, est.intercept_ + c @ est.coef_][:, None]  # in Z's units
    shift = np.abs(c) @ np.abs(est.coef_) + abs(est.intercept_)
    eps = np.finfo(np.float64).eps
    assert np.max(np.abs(est.predict(X) - (Z @ W_est[:3, 0] + W_est[3, 0]))) <= 8 * eps * shift
    rel = 1e-6 if solver == "lbfgs" else 2e-3  # tol = 1e-8; the stochastic solvers' budget
    for W, what in ((W_est, "the fit on X"), (W_ref, "the fit on Z")):
        certify.assert_certified(obj, W, rel=rel, what=f"{solver}: {what}")


def test_scale_aware_fit_is_the_same_problem():
    """The standardised fit minimises the objective in the units given (to L-BFGS accuracy):
    with an l2 term the solution equals a fit on the raw columns with scaling switched off."""
    Z, y = _unit_problem(seed=1)
    X = Z * np.array([0.01, 1.0, 300.0]) + np.array([5.0, 0.0, -1e3])

    class Raw(RiskRegressor):
        _scale_features = False

    kw = dict(risk="esrm:1", l2_reg=1e-3, tol=1e-12, max_iter=5000)
    a = RiskRegressor(**kw).fit(X, y)
    b = Raw(**kw).fit(X, y)
    # the same problem in the units of X: both certified optimal for it (tests/_certify.py)
    obj, _ = certify.problem_of(a, X, y)
    for est in (a, b):
        certify.assert_certified(obj, certify._design_W(est), rel=1e-8,
                                 what=type(est).__name__)
    # warm start in the units of X: the previous coef maps into the standardised coordinates
    c = RiskRegressor(**kw, warm_start=True).fit(X, y)
    f0 = c.objective_trace_[-1]
    c.fit(X, y)
    assert c.objective_trace_[0] == pytest.approx(f0, rel=1e-10)


@pytest.mark.parametrize("risk", ["cvar:0.1", "esrm:1", "extremile:2"])
@pytest.mark.parametrize("solver,max_iter", [("lbfgs", 5), ("auto", 2)])
def test_max_iter_is_a_hard_cap_for_lbfgs(risk, solver, max_iter):
    """shift_cost = 0 runs L-BFGS over a continuation in nu (several solves): max_iter caps
    their total (before: n_iter_ 45 for max_iter=5 on CVaR), with a ConvergenceWarning; the
    default solver too (Newton, which certifies ESRM 1 here in 5 steps, then L-BFGS)."""
    X, y = _unit_problem(n=200, seed=2)
    with pytest.warns(ConvergenceWarning, match=f"max_iter={max_iter}"):
        est = RiskRegressor(risk=risk, solver=solver, max_iter=max_iter).fit(X, y)
    assert 1 <= est.n_iter_ <= max_iter


@pytest.mark.parametrize("make", [
    lambda **kw: RiskRegressor(risk="cvar:0.2", **kw),                        # L-BFGS
    lambda **kw: RiskRegressor(risk=ro.CVaR(0.5, shift_cost=0.5), solver="prospect",
                               random_state=0, **kw),                           # autotune
    lambda **kw: RiskClassifier(risk="esrm:1", **kw),
])
def test_max_epochs_is_a_deprecated_alias_of_max_iter(make):
    """``max_epochs=5`` (the old name) still works: a FutureWarning pointing at the caller, and
    the same fit as ``max_iter=5`` (it overrides ``max_iter``); the default warns nothing."""
    X, y = _regression(n=120, d=4)
    if "Classifier" in type(make()).__name__:
        y = (y > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        new = make(max_iter=5, tol=None).fit(X, y)
    assert new.get_params()["max_epochs"] == "deprecated"
    with pytest.warns(FutureWarning, match="max_epochs is deprecated, use max_iter; it will "
                                           "be removed in riskopt 0.3") as record:
        old = make(max_epochs=5, max_iter=1000, tol=None).fit(X, y)
    assert [w.filename for w in record if w.category is FutureWarning] == [__file__]
    assert old.n_iter_ == new.n_iter_ <= 5
    np.testing.assert_array_equal(old.coef_, new.coef_)
    np.testing.assert_array_equal(old.intercept_, new.intercept_)
    np.testing.assert_array_equal(old.objective_trace_, new.objective_trace_)
    assert clone(old).max_epochs == 5


def test_convergence_warning_names_max_iter_for_the_deprecated_alias():
    X, y = _regression()
    with pytest.warns(FutureWarning, match="max_epochs is deprecated"), \
            pytest.warns(ConvergenceWarning, match="did not converge.*max_iter=2"):
        RiskRegressor(risk=ro.CVaR(0.5, shift_cost=0.5), solver="prospect", max_epochs=2,
                      random_state=0).fit(X, y)


def test_verbose_prints_a_start_and_an_end_line(capsys):
    X, y = _regression(n=150, d=5)
    RiskRegressor(risk="cvar:0.5").fit(X, y)
    assert capsys.readouterr().out == ""
    est = RiskRegressor(risk="cvar:0.5", verbose=1).fit(X, y)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0] == (f"[RiskRegressor] fit: risk={est.risk_}, solver 'newton', "
                        f"n x p = 150 x 5")
    assert lines[1].startswith(f"[RiskRegressor] done: solver 'newton', n_iter_={est.n_iter_}, "
                               f"objective {est.objective_trace_[-1]:.6g}, ")
    assert lines[1].endswith(" s, converged")
    with pytest.warns(ConvergenceWarning):
        RiskClassifier(solver="prospect", risk=ro.ESRM(1.0, shift_cost=0.5), max_iter=2,
                       random_state=0, verbose=2).fit(X, y > 0)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "[RiskClassifier] fit:" in lines[0] and "150 x 5" in lines[0]
    assert "solver 'prospect', n_iter_=2," in lines[1]
    assert lines[1].endswith(" s, did not converge")


# ------------------------------------------------------------------ degenerate fits
def _noise_classification(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)), rng.integers(0, 2, n)


def test_degenerate_constant_classifier_warns():
    """Labels independent of the features: the logistic CVaR of the worst 10 % is smallest at
    w = 0 (every other direction misclassifies half the rows), the constant model; the fit
    says so (issue 13: riskopt fit on adult with cvar:0.1 returned it silently)."""
    X, y = _noise_classification()
    with pytest.warns(ro.DegenerateFitWarning, match="degenerate model"):
        est = RiskClassifier(risk="cvar:0.1").fit(X, y)
    assert np.max(np.abs(est.coef_)) < 1e-3


def test_degenerate_regressor_and_concentrated_weights_warn():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 2))
    y = X @ [1.0, -1.0] + rng.normal(size=500)
    with pytest.warns(ro.DegenerateFitWarning, match="puts its weight on about 1.0 of 500"):
        RiskRegressor(risk="cvar:0.001").fit(X, y)
    # an l2 penalty that crushes every coefficient: constant predictions
    with pytest.warns(ro.DegenerateFitWarning, match="predictions are constant"):
        RiskRegressor(risk="mean", l2_reg=1e6).fit(X, y)


@pytest.mark.parametrize("make", [
    lambda: RiskClassifier(),  # esrm:1, the default
    lambda: RiskClassifier(risk="cvar:0.5"),
    lambda: RiskRegressor(),  # cvar:0.1
    lambda: RiskRegressor(risk="extremile:2"),
])
def test_healthy_fits_do_not_warn(make):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(600, 4))
    z = X @ [1.0, -2.0, 0.5, 0.0]
    y = (z + rng.logistic(size=600) > 0).astype(int) if isinstance(make(), RiskClassifier) \
        else z + rng.standard_t(4, 600)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ro.DegenerateFitWarning)
        make().fit(X, y)


@pytest.mark.parametrize("f", [1e200, 1e-200, 1e100, 1e-100])
@pytest.mark.parametrize("risk", ["cvar:0.3", "esrm:1", "cvar:0.3,chi2=0.5", "esrm:1,kl=0.2"])
def test_target_far_from_unit_scale(f, risk):
    """y x 1e200 overflowed the squared loss (F = NaN, coef = 0). The fit runs on y / s
    (``riskopt._scaling._target_scaling``): with the squared loss F(w; f y, nu f^2) =
    f^2 F(w / f; y, nu), so the coefficients scale by f (the shift cost by f^2, when it fits
    a double) and nothing warns."""
    import dataclasses

    Z, y = _unit_problem(seed=5)
    base = ro.parse_risk(risk)
    nu = base.shift_cost * f * f
    if not np.isfinite(nu) or (base.shift_cost and nu == 0.0):
        pytest.skip("the scaled shift cost does not fit a double")
    ref = RiskRegressor(risk=base, tol=1e-10).fit(Z, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = RiskRegressor(risk=dataclasses.replace(base, shift_cost=nu), tol=1e-10).fit(
            Z, y * f)
    # est / f solves the unit-scale problem: certified there (tests/_certify.py) like ref,
    # each through its own accuracy rather than compared with ref at a fixed tolerance
    obj, W_ref = certify.problem_of(ref, Z, y)
    W_est = certify._design_W(est) / f
    assert np.all(np.isfinite(W_est))
    for what, W in (("est / f", W_est), ("ref", W_ref)):
        certify.assert_certified(obj, W, rel=10 * ref.tol, what=what)


def test_float32_input_and_in_place_scaling_leave_the_caller_s_array_alone():
    """float32 X is converted once, inside the objective's design (no float64 copy before);
    the standardisation runs in place on that design, never on the caller's array; the fit
    equals the float64 fit of the same (rounded) values."""
    rng = np.random.default_rng(9)
    X64 = rng.normal(size=(400, 3)) * [1.0, 50.0, 0.01] + [0.0, 100.0, 0.0]
    y = X64 @ [1.0, 0.02, 30.0] + rng.normal(size=400)
    X32 = X64.astype(np.float32)
    before32, before64 = X32.copy(), np.asarray(X32, dtype=np.float64)
    a = RiskRegressor(risk="cvar:0.3", tol=1e-10).fit(X32, y)
    b = RiskRegressor(risk="cvar:0.3", tol=1e-10).fit(before64, y)
    np.testing.assert_array_equal(X32, before32)
    np.testing.assert_array_equal(before64, X32.astype(np.float64))
    obj, _ = certify.problem_of(b, before64, y)  # both optimal for the rounded values
    for est in (a, b):
        certify.assert_certified(obj, certify._design_W(est), rel=1e-9)
    # without an intercept the design may be the caller's float64 array itself: copied
    # before the in-place scaling
    X = np.ascontiguousarray(X64)
    keep = X.copy()
    RiskRegressor(risk="cvar:0.3", fit_intercept=False).fit(X, y)
    np.testing.assert_array_equal(X, keep)
