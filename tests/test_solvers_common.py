"""The common table: every registered stochastic solver goes through the same checks."""
import pickle

import numpy as np
import pytest

import riskopt as ro
from riskopt.callbacks import DivergenceWarning

SOLVERS = [s for s in ro.solvers.available() if s != "lbfgs"]


def _problem(loss="squared", nu=0.5, n=40, d=3, seed=0, intercept=True, ru=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    if loss == "squared":
        y = X @ w + 0.3 * rng.standard_t(3, size=n)
    elif loss == "logistic":
        y = (X @ w + rng.normal(size=n) > 0).astype(float)
    else:
        B = rng.normal(size=(d, 3))
        y = np.argmax(X @ B + 0.5 * rng.normal(size=(n, 3)), axis=1).astype(float)
    if ru:
        return ro.RUCVaRObjective(loss, X, y, beta=0.5, l2_reg=1.0 / n, fit_intercept=intercept)
    return ro.Objective(loss, ro.ESRM(1.0, shift_cost=nu), X, y, l2_reg=1.0 / n,
                        fit_intercept=intercept)


RU_SOLVERS = {"sgm", "spl", "splplus"}


def _objective_for(name, loss="squared", **kw):
    """The nu > 0 problem, or its nu = 0 version for solvers of the plain spectral risk;
    the Rockafellar-Uryasev CVaR problem for the SPL family."""
    solver = ro.solvers.get(name, random_state=0)
    if name in RU_SOLVERS:
        return _problem(loss, ru=True, **kw)
    obj = _problem(loss, **kw)
    try:
        solver.init_state(obj)
    except ValueError:
        kw["nu"] = 0.0
        obj = _problem(loss, **kw)
    return obj


@pytest.mark.parametrize("name", SOLVERS)
def test_constructor_only_stores_params(name):
    solver = ro.solvers.get(name, lr=0.05, random_state=3)
    params = solver.get_params()
    assert params["lr"] == 0.05 and params["random_state"] == 3
    clone = type(solver)(**params)
    assert clone.get_params() == params
    assert name in repr(solver).lower() or type(solver).__name__ in repr(solver)


@pytest.mark.parametrize("name", SOLVERS)
def test_state_is_explicit_and_picklable(name):
    obj = _objective_for(name)
    solver = ro.solvers.get(name, lr=1e-3, random_state=0)
    state = solver.init_state(obj)
    assert hasattr(state, "_fields") and {"coef", "epoch", "rng"} <= set(state._fields)
    state = solver.update(obj, state)
    assert state.epoch == 1 and state.coef.shape == (obj.p, obj.K)
    clone = pickle.loads(pickle.dumps(state))
    a = solver.update(obj, state)
    b = solver.update(obj, clone)
    np.testing.assert_array_equal(a.coef, b.coef)


@pytest.mark.parametrize("name", SOLVERS)
def test_seeded_runs_are_reproducible_and_warm_start_continues(name):
    obj = _objective_for(name)
    solver = ro.solvers.get(name, lr=1e-3, random_state=7)
    full = solver.run(obj, max_epochs=4)
    first = solver.run(obj, max_epochs=2)
    rest = solver.run(obj, max_epochs=2, state=first.state)
    again = solver.run(obj, max_epochs=4)
    np.testing.assert_array_equal(full.coef, again.coef)
    np.testing.assert_allclose(rest.coef, full.coef, rtol=0, atol=1e-12)
    assert rest.n_epochs == 4


@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize("loss", ["squared", "logistic", "multinomial"])
def test_runs_on_every_smooth_loss_and_decreases_objective(name, loss):
    obj = _objective_for(name, loss=loss)
    solver = ro.solvers.get(name, lr=1e-2, random_state=0)
    try:
        solver.init_state(obj)
    except ValueError as exc:  # a solver may legitimately refuse a loss; it must say so
        assert "loss" in str(exc).lower()
        return
    trace = ro.Trace()
    res = solver.run(obj, max_epochs=5, callback=trace)
    assert res.coef.shape == obj.coef_shape
    assert np.all(np.isfinite(res.coef))
    assert trace.values[-1] < trace.values[0]


@pytest.mark.parametrize("name", SOLVERS)
def test_divergence_is_detected_and_reported(name):
    obj = _objective_for(name)
    solver = ro.solvers.get(name, lr=1e6, random_state=0)
    with pytest.warns(DivergenceWarning, match="diverged"):
        res = solver.run(obj, max_epochs=20, callback=ro.Trace())
    assert res.diverged
    assert "diverged" in res.message
    assert res.n_epochs < 20


@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), "0.1"])
def test_bad_step_size_raises(name, bad):
    obj = _objective_for(name)
    with pytest.raises(ValueError, match="lr"):
        ro.solvers.get(name, lr=bad).init_state(obj)


def test_unknown_solver_name():
    with pytest.raises(ValueError, match="unknown solver"):
        ro.solvers.get("nope")
