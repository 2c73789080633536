"""riskopt.solvers.autotune used directly on an objective, and its ConvergenceMonitor trace."""
import numpy as np
import pytest
from sklearn.datasets import make_regression

import riskopt as ro
from riskopt.callbacks import ConvergenceMonitor, Trace
from riskopt.estimators import RiskRegressor
from riskopt.solvers.autotune import (LR_CANDIDATES, MAX_RESTARTS, autotune,
                                      smoothness_lr)


def _problem(risk=None, n=150, d=5, loss="squared"):
    X, y = make_regression(n_samples=n, n_features=d, noise=10.0, random_state=0)
    risk = ro.CVaR(0.5, shift_cost=0.5) if risk is None else risk
    return X, y / np.std(y), ro.Objective(loss, risk, X, y / np.std(y), l2_reg=1.0 / n,
                                          fit_intercept=True)


class _BlowUp(ro.solvers.Prospect):
    """Prospect that blows up at update ``at`` when its step exceeds ``threshold``."""

    name = "blowup_test"

    def __init__(self, lr=0.01, batch_size=1, random_state=None, threshold=np.inf, at=4):
        self._store(locals())

    def _pass(self, objective, state, indices):
        state = super()._pass(objective, state, indices)
        if state.epoch == self.at and self.lr > self.threshold:
            state = state._replace(coef=state.coef * 1e8)
        return state


@pytest.mark.slow  # 18 s warm, 91 s from a fresh clone (stop 37)
def test_picks_a_finite_step_by_the_papers_rule():
    _, _, obj = _problem()
    res = autotune("prospect", obj, max_epochs=300, random_state=0)
    lr0 = smoothness_lr(obj)
    assert sorted(res.lr_search) == sorted(lr0 * c for c in LR_CANDIDATES)
    assert np.isfinite(res.lr_search[res.lr]) and res.lr_search[res.lr] == \
        min(res.lr_search.values())
    assert res.converged and not res.diverged and res.n_updates < 300
    assert res.values.shape == (res.n_updates + 1,) and res.values[-1] < res.values[0]
    assert obj.value(res.coef) == pytest.approx(res.monitor.best_value, rel=1e-12)
    # the trace is a riskopt.Trace: passes count on across the resumed runs
    assert isinstance(res.monitor, Trace)
    assert res.monitor.passes == list(range(res.n_updates + 1))
    assert res.result.trace is res.monitor
    f_star = ro.solvers.LBFGS(tol=1e-12).run(obj).value
    assert (obj.value(res.coef) - f_star) / (res.values[0] - f_star) < 1e-6


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("solver, risk, loss", [
    ("prospect", ro.CVaR(0.5, shift_cost=0.5), "squared"),
    ("sorel", ro.ESRM(1.0), "squared"),
    ("prospect", ro.CVaR(0.2), "absolute"),   # not smooth: the objective-change test
])
def test_matches_the_estimator_on_the_same_problem(solver, risk, loss):
    X, y, obj = _problem(risk, loss=loss)
    est = RiskRegressor(risk=risk, loss=loss, solver=solver, l2_reg=1.0 / len(y),
                        max_iter=200, random_state=3).fit(X, y)
    res = autotune(solver, obj, max_epochs=200, random_state=3)
    assert est.lr_ == res.lr and est.lr_search_ == res.lr_search
    assert est.n_iter_ == res.n_updates and est.solver_params_ == res.solver_params
    np.testing.assert_array_equal(est.objective_trace_, res.values)
    np.testing.assert_array_equal(np.r_[est.coef_, est.intercept_], res.coef)


def test_restarts_with_a_smaller_step_after_a_divergence():
    _, _, obj = _problem()
    plain = autotune("prospect", obj, max_epochs=60, random_state=0)
    chosen = plain.lr
    # same tuning (the blow-up comes after the two tuning updates), then a divergence
    res = autotune(_BlowUp, obj, params={"threshold": chosen / 2, "at": 4}, max_epochs=60,
                   random_state=0)
    assert res.lr_search == plain.lr_search
    assert res.lr == pytest.approx(chosen / 3)
    assert not res.diverged and res.values[-1] < res.values[0]
    assert np.max(res.values) > 1.5 * res.values[0]  # the divergent update is in the trace
    assert np.all(np.isfinite(res.coef))
    # always blowing up: at most MAX_RESTARTS restarts, then the best iterate is returned
    res = autotune(_BlowUp, obj, params={"threshold": 0.0, "at": 4}, max_epochs=60,
                   random_state=0)
    assert res.diverged and res.lr == pytest.approx(chosen / 3 ** MAX_RESTARTS)
    assert obj.value(res.coef) == pytest.approx(np.nanmin(res.values))


def test_every_candidate_diverging_shrinks_the_step():
    _, _, obj = _problem()
    lr0 = smoothness_lr(obj)
    res = autotune(_BlowUp, obj, params={"threshold": lr0 / 50, "at": 1}, max_epochs=40,
                   random_state=0)
    assert all(np.isinf(v) for v in res.lr_search.values())
    assert res.lr == pytest.approx(lr0 / 100) and not res.diverged


def test_numeric_step_divergence_is_an_error():
    _, _, obj = _problem()
    res = autotune("prospect", obj, lr=1e-3, max_epochs=5, tol=None, random_state=0)
    assert res.lr == 1e-3 and res.lr_search is None and res.n_updates == 5
    with pytest.raises(ValueError, match="diverged with lr=100"):
        autotune("prospect", obj, lr=100.0, random_state=0)
    with pytest.raises(ValueError, match="'blowup_test' diverged with lr="):  # no restart
        autotune(_BlowUp, obj, params={"threshold": 0.0, "at": 4}, lr=smoothness_lr(obj) / 3,
                 max_epochs=20, random_state=0)


def test_base_lr_and_warm_start_skip_the_search():
    _, _, obj = _problem()
    res = autotune("prospect", obj, base_lr=lambda o, name: 0.01, max_epochs=20,
                   random_state=0)
    assert res.lr == 0.01 and res.lr_search is None
    warm = autotune("prospect", obj, coef0=res.coef, prev_lr=0.02, max_epochs=5,
                    random_state=0)
    assert warm.lr == 0.02 and warm.lr_search is None
    assert warm.values[0] == pytest.approx(obj.value(res.coef), rel=1e-12)


def test_registry_is_untouched_and_incompatible_objectives_are_refused():
    assert "autotune" not in ro.solvers.available()
    X, y, _ = _problem()
    from riskopt.objectives.ru_cvar import RUCVaRObjective

    ru = RUCVaRObjective("squared", X, y, beta=0.9, l2_reg=1e-3)
    with pytest.raises(ro.solvers.IncompatibleObjectiveError, match="solvers for this"):
        autotune("prospect", ru, max_epochs=3, random_state=0)


def test_monitor_continues_across_resumed_runs():
    _, _, obj = _problem()
    solver = ro.solvers.Prospect(lr=smoothness_lr(obj), random_state=0)
    mon = ConvergenceMonitor(None)
    res = solver.run(obj, max_epochs=3, callback=mon)
    solver.run(obj, max_epochs=3, callback=mon, state=res.state)
    whole = ConvergenceMonitor(None)
    solver.run(obj, max_epochs=6, callback=whole)
    assert mon.passes == whole.passes == list(range(7))
    np.testing.assert_array_equal(mon.values, whole.values)
    np.testing.assert_array_equal(mon.grad_norms, whole.grad_norms)
    assert mon.best_value == min(mon.values) and np.all(np.diff(mon.times) >= 0)
    # the reference gradient is that of the zero model
    assert mon.g_zero == pytest.approx(np.linalg.norm(obj.grad(obj.zeros())))
    assert mon.smooth is True


def test_monitor_stops_on_the_relative_gradient_norm():
    _, _, obj = _problem()
    mon = ConvergenceMonitor(1e-3)
    res = ro.solvers.Prospect(lr=smoothness_lr(obj) / 3, random_state=0).run(
        obj, max_epochs=500, callback=mon)
    assert mon.converged and res.n_epochs < 500 and "grad F" in res.message
    assert mon.grad_norms[-1] <= 1e-3 * mon.g_zero < min(mon.grad_norms[:-1])
