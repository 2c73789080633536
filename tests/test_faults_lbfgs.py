"""Abnormal L-BFGS stops are surfaced, and only when the final point is not certified.

L-BFGS-B stops without progress in two ways: a failed line search (scipy's status 2,
``"ABNORMAL"``) or a step with no decrease of ``F`` (``"RELATIVE REDUCTION OF F"``, status 0:
the reference runs with ``ftol = 0``). Before, both were ignored: features x 1e20 returned
the starting point (the zero model) with a success message and no warning. Now the
reference (``Reference.extra``), the :class:`riskopt.solvers.LBFGS` result (``extra``,
``message``) and the estimators (``ConvergenceWarning``) report such a stop when the
relative gradient norm ``|grad F| / max(1, |grad F(w0)|)`` exceeds ``max(tol, 1e-5)``;
with ``shift_cost = 0`` the certificate is the smooth sub-problems' (see
:mod:`riskopt.objectives._lbfgs`). Both directions are tested: constructed failures are
reported, and the routine stops at machine precision near the optimum (every
``shift_cost = 0`` continuation on the bundled data, the ``quick`` bench reference, the
estimators' defaults on real sets) are not.
"""
import warnings

import numpy as np
import pytest
from scipy.optimize import OptimizeResult
from sklearn.exceptions import ConvergenceWarning

import riskopt as ro
from riskopt.estimators import RiskClassifier, RiskRegressor
from riskopt.objectives import _lbfgs
from riskopt.objectives._lbfgs import ABNORMAL_RTOL, stop_report


def _scaled_problem(loss, risk, scale=1e20, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(200, 4))
    y = X @ np.array([1.0, -2.0, 0.5, 1.0]) + rng.normal(size=200)
    if loss == "logistic":
        y = (y > 0).astype(float)
    return ro.Objective(loss, risk, X * scale, y, l2_reg=1e-3, fit_intercept=True)


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn()


BAD_CASES = [
    ("squared", ro.Mean()),
    ("squared", ro.CVaR(0.2, shift_cost=0.5)),
    ("squared", ro.CVaR(0.2)),  # nu = 0: the continuation + polish path
    ("logistic", ro.Mean()),
    ("logistic", ro.CVaR(0.2, shift_cost=0.5)),
    ("logistic", ro.ESRM(1.0)),
    ("absolute", ro.CVaR(0.2)),  # a non-smooth loss: judged by progress over the start
]


# ---------------------------------------------------------------------------- the judgement
def _res(status, jac, message):
    return OptimizeResult(status=status, jac=np.asarray(jac, float), message=message, nit=3)


@pytest.mark.parametrize("status,jac,message,abnormal", [
    (2, [1e-9, 0.0], "ABNORMAL: ", False),            # line search failed at the optimum
    (2, [0.5, 0.0], "ABNORMAL: ", True),              # ... far from it
    (0, [0.9, 0.1], "CONVERGENCE: RELATIVE REDUCTION OF F <= FACTR*EPSMCH", True),
    (0, [1e-13, 0.0], "CONVERGENCE: NORM OF PROJECTED GRADIENT <= PGTOL", False),
    (1, [0.5, 0.0], "STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT", False),  # hit_limit's job
    (2, [np.nan, 0.0], "ABNORMAL: ", True),           # a NaN gradient certifies nothing
])
def test_stop_report_certificate(status, jac, message, abnormal):
    got, rel, text = stop_report(_res(status, jac, message), gscale=1.0, gtol=1e-12, tol=1e-12)
    assert got is abnormal
    assert bool(text) is abnormal
    if abnormal:
        assert "no progress" in text and message.strip() in text


def test_stop_report_threshold_is_max_of_tol_and_floor():
    res = _res(2, [3e-5, 0.0], "ABNORMAL: ")
    assert stop_report(res, 1.0, 1e-12, tol=1e-12)[0]           # 3e-5 > 1e-5
    assert not stop_report(res, 1.0, 1e-4, tol=1e-4)[0]         # 3e-5 <= tol
    assert not stop_report(res, 10.0, 1e-11, tol=1e-12)[0]      # relative to |grad F(w0)|
    assert ABNORMAL_RTOL == 1e-5


# ---------------------------------------------------------------------------- failures reported
@pytest.mark.parametrize("loss,risk", BAD_CASES, ids=lambda v: str(v))
def test_badly_scaled_features_are_reported(loss, risk):
    """Features x 1e20: L-BFGS returns (about) the starting point; before, with a
    "CONVERGENCE" message and nothing else."""
    obj = _scaled_problem(loss, risk)
    ref = _quiet(lambda: obj.reference_solution("lbfgs"))
    if not ref.extra["abnormal"]:
        # rounding-dependent: under OPENBLAS_CORETYPE=Prescott (1 thread) L-BFGS-B makes progress
        # on the squared CVaR(0.2, chi2 0.5) case (8.53 -> 0.573) and its relative-gradient
        # certificate (scaled by |grad F(w0)| ~ 1e20) passes, though the point is ~2.4 % above
        # the optimum (0.5595): that certificate is not scale-free on raw features (known,
        # open; the estimators standardise). It must at least have made progress.
        assert ref.value < obj.value(obj.zeros())
        pytest.xfail("L-BFGS-B made progress on this CPU's rounding path (not reported)")
    assert ref.extra["abnormal"] is True
    assert ref.extra["rel_grad_norm"] > ref.extra["certificate_tol"]
    assert ref.extra["certificate_tol"] == max(1e-12, ABNORMAL_RTOL)
    assert "made no progress" in ref.message and ref.extra["abnormal_message"]
    res = _quiet(lambda: ro.solvers.LBFGS(tol=1e-4).run(obj))
    assert res.extra["abnormal"] is True and res.extra["certificate_tol"] == 1e-4
    assert "made no progress" in res.message
    text = ro.solvers.LBFGS.abnormal_text(res)
    assert "line search" in text and "Rescale the features" in text and "tol" in text
    assert "solver=" in text


def test_reported_gradient_norm_is_that_of_the_returned_point():
    obj = _scaled_problem("logistic", ro.Mean())
    ref = _quiet(lambda: obj.reference_solution("lbfgs"))
    g = np.linalg.norm(obj.grad(ref.coef)) / max(1.0, np.linalg.norm(obj.grad(obj.zeros())))
    assert ref.extra["rel_grad_norm"] == pytest.approx(g, rel=1e-6)


def test_kl_dro_and_ru_cvar_references_report_too():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 3)) * 1e20
    y = (X[:, 0] > 0).astype(float)
    kl = ro.Objective("logistic", ro.KLDRO(radius=0.5), X, y, l2_reg=1e-3)
    ref = _quiet(lambda: kl.reference_solution())
    assert ref.extra["abnormal"] is True and "made no progress" in ref.message
    assert _quiet(lambda: ro.solvers.LBFGS().run(kl)).extra["abnormal"] is True
    ru = ro.objectives.ru_cvar.RUCVaRObjective("squared", X, X[:, 0] / 1e20, beta=0.8,
                                               l2_reg=1e-3)
    assert _quiet(lambda: ru.reference_solution("lbfgs")).extra["abnormal"] is True
    ok = ro.Objective("logistic", ro.KLDRO(radius=0.5), X / 1e20, y, l2_reg=1e-3)
    assert ok.reference_solution().extra["abnormal"] is False


def test_group_and_constrained_references_report_too():
    # (with a chi-square shift cost the group problem is smooth and its L-BFGS solve passes
    # its gradient test: the huge column dominates the gradient scale, see the module notes)
    risk = "cvar:0.5"
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 4))
    y = X @ rng.normal(size=4) + rng.normal(size=300)
    g = np.arange(300) % 3
    bad = X * np.array([1e20, 1.0, 1.0, 1.0])
    ref = ro.Objective("squared", risk, bad, y, groups=g, l2_reg=1e-3).reference_solution()
    assert ref.extra["abnormal"] is True and "made no progress" in ref.message
    ok = ro.Objective("squared", risk, X, y, groups=g, l2_reg=1e-3).reference_solution()
    assert ok.extra["abnormal"] is False
    for penalty in ("hinge", "squared_hinge"):
        bad_c = ro.ConstrainedObjective("squared", bad, y, [(g == 0, 0.5)], rho=3.0,
                                        penalty=penalty)
        assert bad_c.reference_solution().extra["abnormal"] is True
        ok_c = ro.ConstrainedObjective("squared", X, y, [(g == 0, 0.5)], rho=3.0,
                                       penalty=penalty)
        assert ok_c.reference_solution().extra["abnormal"] is False


class _UnscaledRegressor(RiskRegressor):
    _scale_features = False  # the estimators' standardisation would rescue the fit


class _UnscaledClassifier(RiskClassifier):
    _scale_features = False


@pytest.mark.skipif(not hasattr(RiskRegressor, "_scale_features"),
                    reason="the estimators no longer have the _scale_features switch")
@pytest.mark.parametrize("est", [_UnscaledRegressor(), _UnscaledRegressor(risk="cvar:0.2"),
                                 _UnscaledClassifier(), _UnscaledClassifier(risk="esrm:1")],
                         ids=lambda e: f"{type(e).__name__}-{e.risk}")
def test_estimator_warns_with_cause_and_fix(est):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(150, 3))
    y = X @ np.array([1.0, -1.0, 2.0]) + 0.1 * rng.normal(size=150)
    if isinstance(est, RiskClassifier):
        y = (y > 0).astype(int)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est.fit(X * 1e20, y)
    conv = [w for w in rec if issubclass(w.category, ConvergenceWarning)]
    assert len(conv) == 1, [str(w.message) for w in rec]
    msg = str(conv[0].message)
    assert msg.startswith(type(est).__name__ + ": L-BFGS stopped without progress")
    for part in ("line search", "relative gradient norm ", "certificate 0.0001",
                 "Rescale the features", "raise tol", "another solver"):
        assert part in msg, part
    import re

    rel = float(re.search(r"relative gradient norm ([0-9.e+-]+)", msg).group(1))
    assert rel > 1e-4  # above the certificate it names
    assert conv[0].filename == __file__  # points at the caller of fit


# ---------------------------------------------------------------------------- no false alarms
def _count_raw_stops(monkeypatch):
    """Record, for every inner L-BFGS-B solve of the reference, whether it stopped without
    progress (a failed line search or no decrease) short of its gradient test."""
    seen = []
    real = _lbfgs.stop_report

    def spy(res, gscale, gtol, tol):
        stalled = res.status == 2 or "REDUCTION" in str(res.message)
        seen.append(bool(stalled and np.max(np.abs(res.jac)) > gtol))
        return real(res, gscale, gtol, tol)

    monkeypatch.setattr(_lbfgs, "stop_report", spy)
    return seen


@pytest.mark.parametrize("name", ["yacht", "energy", "concrete"])
@pytest.mark.parametrize("risk", ["cvar:0.1", "extremile:2", "esrm:1"])
def test_nonsmooth_continuation_ends_abnormal_at_the_kink_without_report(name, risk,
                                                                        monkeypatch):
    """shift_cost = 0: the smoothed solves routinely stop without progress near the optimum
    (failed line searches at relative gradient norms down to 1e-12, and on the smoothed
    problems of small nu far above tol); nothing is reported."""
    seen = _count_raw_stops(monkeypatch)
    d = ro.datasets.load(name)
    n = d.X_train.shape[0]
    obj = ro.Objective("squared", ro.risks.parse_risk(risk), d.X_train, d.y_train,
                       l2_reg=1.0 / n, fit_intercept=True)
    ref = obj.reference_solution("lbfgs")
    assert any(seen)  # the case this test is about did occur
    assert ref.extra["abnormal"] is False
    assert ref.message == "continuation in nu + frozen-order polish"


@pytest.mark.parametrize("risk", ["extremile:2", "cvar:0.1"])
@pytest.mark.parametrize("name", ["yacht", "energy"])
def test_quick_bench_references_are_not_reported(name, risk):
    """The ``quick`` spec's problems (squared loss, shift_cost 0.5, l2 = 1/n)."""
    d = ro.datasets.load(name)
    n = d.X_train.shape[0]
    obj = ro.Objective("squared", ro.risks.parse_risk(risk, shift_cost=0.5), d.X_train,
                       d.y_train, l2_reg=1.0 / n, fit_intercept=True)
    ref = obj.reference_solution("lbfgs")
    assert ref.extra["abnormal"] is False and "made no progress" not in ref.message
    res = ro.solvers.LBFGS().run(obj)
    assert res.extra["abnormal"] is False and ro.solvers.LBFGS.abnormal_text(res) is None


def test_absolute_loss_kink_is_not_reported():
    """nu > 0 with the absolute loss: the line search fails at a kink of the loss with a
    large gradient (3e-3 relative on yacht), but the fit made progress."""
    d = ro.datasets.load("yacht")
    obj = ro.Objective("absolute", ro.CVaR(0.1, shift_cost=0.5), d.X_train, d.y_train,
                       l2_reg=1.0 / d.X_train.shape[0], fit_intercept=True)
    ref = obj.reference_solution("lbfgs")
    assert ref.extra["abnormal"] is False


def _real_sets():
    out = [("yacht", "r"), ("energy", "r"), ("concrete", "r"), ("kin8nm", "r"), ("power", "r")]
    return out + [("compas", "c"), ("diabetes", "c"), ("mushrooms", "c"), ("law_school", "r")]


@pytest.mark.parametrize("name,kind", _real_sets())
def test_estimator_defaults_on_real_data_do_not_warn(name, kind):
    try:
        d = ro.datasets.load(name)
    except ro.datasets.MissingDataError as exc:  # pragma: no cover - data folder sets
        pytest.skip(str(exc))
    Est = RiskRegressor if kind == "r" else RiskClassifier
    for risk in (None, "esrm:1", "extremile:2", ro.CVaR(0.1, shift_cost=0.5),
                 ro.KLDRO(radius=0.5)):
        est = Est() if risk is None else Est(risk=risk)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            est.fit(d.X_train, d.y_train)
        # the CVaR / ESRM / extremile at shift_cost = 0 go to Newton (certified), the rest
        # L-BFGS
        assert est.solver_ == ("newton" if risk in (None, "esrm:1", "extremile:2")
                               else "lbfgs"), (risk, est.solver_reason_)
        if est.solver_ == "newton":
            assert 0 <= est.dual_gap_ <= 1e-6 * abs(est.objective_trace_[-1]), (name, risk)
        bad = [str(w.message) for w in rec if issubclass(w.category, ConvergenceWarning)]
        assert not bad, (name, risk, bad)
