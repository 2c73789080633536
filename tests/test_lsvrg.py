"""LSVRG: kernel vs NumPy twin step by step, checkpoint semantics, validation, convergence."""
import numpy as np
import pytest

import riskopt as ro
from conftest import heavy_tail_data, passes_match_twin, steps_match_twin
from reference_impl.lsvrg import LSVRGTwin

# Step sizes found by the papers' rule (lowest mean objective over the last ten recorded
# updates, grid 1e-4 ... 3, one seed, diverged runs discarded) on the Prospect Sec. 4 problems:
# squared loss, mu = 1/n, nu = 0.5 chi2, budget 64 passes (32 for kin8nm, power), where an
# LSVRG update (n steps + its checkpoint) counts as 2 passes.
LSVRG_LR = {
    ("yacht", "cvar"): 0.03, ("yacht", "extremile"): 0.03, ("yacht", "esrm"): 0.03,
    ("energy", "cvar"): 0.03, ("energy", "extremile"): 0.03, ("energy", "esrm"): 0.03,
    ("concrete", "cvar"): 0.01, ("concrete", "extremile"): 0.01, ("concrete", "esrm"): 0.03,
    ("kin8nm", "cvar"): 3e-4, ("kin8nm", "extremile"): 3e-4, ("kin8nm", "esrm"): 3e-4,
    ("power", "cvar"): 3e-3, ("power", "extremile"): 3e-3, ("power", "esrm"): 3e-3,
}
# Problems where LSVRG does NOT reach 1e-8 within the budget at any grid step size:
# (suboptimality measured at 64 passes, passes it needs to reach 1e-8 at the same step size).
LSVRG_SLOW = {
    ("yacht", "cvar"): (1.39e-6, 112), ("yacht", "extremile"): (1.39e-6, 112),
    ("yacht", "esrm"): (1.20e-6, 112), ("energy", "cvar"): (1.03e-6, 106),
    ("energy", "extremile"): (1.02e-6, 106), ("energy", "esrm"): (9.83e-7, 106),
}


def make_problem(loss="squared", divergence="chi2", nu=0.5, intercept=True, n=30, d=4,
                 seed=0, risk=ro.ESRM):
    X, y = heavy_tail_data(loss, n, d, seed)
    r = risk(1.0 if risk is ro.ESRM else 2.0, shift_cost=nu, divergence=divergence)
    return ro.Objective(loss, r, X, y, l2_reg=1.0 / n, fit_intercept=intercept)


CASES = [
    ("squared", "chi2", 0.5, True),
    ("squared", "kl", 0.5, False),
    ("squared", "chi2", 0.0, True),
    ("logistic", "chi2", 0.3, False),
    ("logistic", "kl", 1.0, True),
    ("multinomial", "chi2", 0.5, True),
    ("multinomial", "kl", 0.2, False),
    ("multinomial", "chi2", 0.0, False),
    ("absolute", "chi2", 0.5, True),
]


def assert_state_matches(state, twin, obj):
    np.testing.assert_allclose(state.coef, twin.W, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(state.ckpt_coef, twin.Wc, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(state.ckpt_q, twin.qc, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state.ckpt_grad, twin.Gc, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(state.ckpt_derivs, twin.ckpt_derivs(), rtol=1e-10, atol=1e-10)
    assert state.since == twin.since


@pytest.mark.parametrize("loss, divergence, nu, intercept", CASES)
def test_kernel_matches_twin_step_by_step(loss, divergence, nu, intercept):
    obj = make_problem(loss, divergence, nu, intercept)
    rng = np.random.default_rng(1)
    W0 = 0.1 * rng.normal(size=obj.coef_shape)
    solver = ro.solvers.LSVRG(lr=0.05, epoch_length=7)
    state = solver.init_state(obj, coef0=W0)
    twin = LSVRGTwin(obj, W0, lr=0.05, epoch_length=7)
    idx = rng.integers(0, obj.n, size=23)          # crosses three checkpoint refreshes
    steps_match_twin(solver, obj, state, twin, idx, assert_state_matches)


@pytest.mark.parametrize("loss, divergence, nu, intercept", CASES[:4])
def test_full_passes_match_twin(loss, divergence, nu, intercept):
    """Default epoch length n: two kernel calls of n steps each (one refresh in between)."""
    obj = make_problem(loss, divergence, nu, intercept, seed=3)
    solver = ro.solvers.LSVRG(lr=0.03, random_state=5)
    state = solver.init_state(obj)
    twin = LSVRGTwin(obj, np.zeros((obj.p, obj.K)), lr=0.03)
    state, draws = passes_match_twin(solver, obj, state, twin, assert_state_matches)
    assert [idx.shape for idx in draws] == [(obj.n,)] * 2
    assert state.epoch == 2


def test_checkpoint_is_the_full_gradient_and_weights():
    obj = make_problem("logistic", "kl", 0.4, True)
    W0 = np.linspace(-0.5, 0.5, obj.p)
    state = ro.solvers.LSVRG().init_state(obj, coef0=W0)
    np.testing.assert_allclose(state.ckpt_q, obj.weights(W0), rtol=1e-12, atol=1e-15)
    W = obj.as_matrix(W0)
    full = state.ckpt_grad + obj.reg[:, None] * W
    np.testing.assert_allclose(full.ravel(), obj.grad(W0), rtol=1e-12, atol=1e-14)
    assert state.since == 0


def test_step_at_checkpoint_is_a_full_gradient_step():
    """Right after a checkpoint, v = grad F(w) exactly, whatever index is drawn."""
    obj = make_problem("squared", "chi2", 0.5, True)
    W0 = np.full(obj.p, 0.2)
    solver = ro.solvers.LSVRG(lr=0.1)
    state = solver.init_state(obj, coef0=W0)
    new = solver.update(obj, state, indices=[4])
    np.testing.assert_allclose(new.coef.ravel(), W0 - 0.1 * obj.grad(W0), rtol=1e-12,
                               atol=1e-14)


def test_epoch_length_and_passes_per_update():
    obj = make_problem(n=40)
    assert ro.solvers.LSVRG().passes_per_update(obj) == 2.0
    assert ro.solvers.LSVRG(epoch_length=10).passes_per_update(obj) == 5.0
    solver = ro.solvers.LSVRG(lr=0.01, epoch_length=10, random_state=0)
    state = solver.update(obj, solver.init_state(obj))
    assert state.since == 10  # refreshed at steps 10, 20, 30; the next step refreshes again
    trace = ro.Trace()
    ro.solvers.LSVRG(lr=0.01, random_state=0).run(obj, max_epochs=3, callback=trace)
    assert trace.passes == [0, 2.0, 4.0, 6.0]


@pytest.mark.parametrize("bad", [0, -3, 2.5, "n", True])
def test_bad_epoch_length_raises(bad):
    with pytest.raises(ValueError, match="epoch_length"):
        ro.solvers.LSVRG(epoch_length=bad).init_state(make_problem())


def test_registry_and_params():
    s = ro.solvers.get("lsvrg", lr=0.3, epoch_length=5, random_state=2)
    assert isinstance(s, ro.solvers.LSVRG)
    assert s.get_params() == {"lr": 0.3, "epoch_length": 5, "batch_size": 1, "random_state": 2}


def _subopt_run(solver, obj, passes, f_star):
    trace = ro.Trace(f_star=f_star, tol=1e-8)
    max_updates = int(np.ceil(passes / solver.passes_per_update(obj)))
    solver.run(obj, max_epochs=max_updates, callback=trace)
    return trace


@pytest.mark.parametrize("loss, divergence", [("squared", "chi2"), ("squared", "kl"),
                                              ("multinomial", "chi2")])
def test_default_run_converges_on_synthetic_problem(loss, divergence):
    """Default hyper-parameters (lr=0.01), nu = 0.5, n = 200: relative suboptimality <= 1e-8."""
    obj = make_problem(loss, divergence, 0.5, True, n=200, d=5, seed=4, risk=ro.ESRM)
    f_star = ro.solvers.LBFGS().run(obj).value
    trace = _subopt_run(ro.solvers.LSVRG(random_state=0), obj, 64, f_star)
    assert trace.suboptimality[-1] <= 1e-8, trace.suboptimality[-1]


# ----------------------------------------------------------------- real data (Prospect Sec. 4)
RISKS = {"cvar": lambda: ro.CVaR(0.5, shift_cost=0.5, divergence="chi2"),
         "extremile": lambda: ro.Extremile(2.0, shift_cost=0.5, divergence="chi2"),
         "esrm": lambda: ro.ESRM(1.0, shift_cost=0.5, divergence="chi2")}
BUDGET = {"yacht": 64, "energy": 64, "concrete": 64, "kin8nm": 32, "power": 32}
_F_STAR = {}


def regression_problem(dataset, risk):
    data = ro.datasets.load(dataset)
    n = data.X_train.shape[0]
    obj = ro.Objective("squared", RISKS[risk](), data.X_train, data.y_train, l2_reg=1.0 / n)
    key = (dataset, risk)
    if key not in _F_STAR:
        _F_STAR[key] = ro.solvers.LBFGS().run(obj).value
    return obj, _F_STAR[key]


def _check_real(dataset, risk):
    obj, f_star = regression_problem(dataset, risk)
    solver = ro.solvers.LSVRG(lr=LSVRG_LR[(dataset, risk)], random_state=0)
    if (dataset, risk) not in LSVRG_SLOW:
        trace = _subopt_run(solver, obj, BUDGET[dataset], f_star)
        assert trace.suboptimality[-1] <= 1e-8, (dataset, risk, trace.suboptimality[-1])
        return
    # linear but slow (ill-conditioned design, mu = 1/n): the documented level at the budget,
    # and 1e-8 within the measured number of passes
    level, needed = LSVRG_SLOW[(dataset, risk)]
    trace = ro.Trace(f_star=f_star, tol=1e-8)
    solver.run(obj, max_epochs=needed // 2 + 2, callback=trace)
    sub = np.asarray(trace.suboptimality)
    at_budget = sub[trace.passes.index(BUDGET[dataset])]
    assert 1e-8 < at_budget <= 1.5 * level, (dataset, risk, at_budget)
    assert sub[-1] <= 1e-8 and trace.passes[-1] <= needed + 2, (trace.passes[-1], sub[-1])


@pytest.mark.parametrize("risk", list(RISKS))
@pytest.mark.parametrize("dataset", ["yacht", "energy"])
def test_small_regression_sets_reach_1e8_or_the_documented_level(dataset, risk):
    _check_real(dataset, risk)


@pytest.mark.slow
@pytest.mark.parametrize("risk", list(RISKS))
@pytest.mark.parametrize("dataset", list(BUDGET))
def test_all_regression_sets_reach_1e8_or_the_documented_level(dataset, risk):
    _check_real(dataset, risk)
