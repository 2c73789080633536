"""Prospect and Prospect-Moreau: kernels against their NumPy twins, table invariants, convergence."""
import numpy as np
import pytest

import riskopt as ro
from riskopt.solvers.prospect import Prospect, ProspectMoreau

from reference_impl import prospect as twin

RISKS = {"squared": ro.CVaR, "absolute": ro.ESRM, "logistic": ro.Extremile,
         "multinomial": ro.CVaR}
RISK_ARG = {ro.CVaR: 0.4, ro.ESRM: 1.0, ro.Extremile: 2.0}
SHIFTS = [("chi2", 0.3), ("kl", 0.3), ("chi2", 0.0)]


def _small(loss, divergence, nu, intercept, n=12, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    if loss in ("squared", "absolute"):
        y = X @ w + rng.normal(size=n)
    elif loss == "logistic":
        y = (X @ w + rng.normal(size=n) > 0).astype(float)
    else:
        y = rng.integers(0, 3, size=n).astype(float)
    cls = RISKS[loss]
    risk = cls(RISK_ARG[cls], shift_cost=nu, divergence=divergence)
    obj = ro.Objective(loss, risk, X, y, l2_reg=0.1, fit_intercept=intercept)
    W0 = 0.3 * rng.normal(size=(obj.p, obj.K))
    return obj, W0, rng


def _close(a, b, what, tol=1e-10):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    scale = max(1.0, float(np.max(np.abs(b))))
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * scale, err_msg=what)


def _check_sorting(state):
    order, rank = state.order, state.rank
    n = order.shape[0]
    assert sorted(order.tolist()) == list(range(n))
    np.testing.assert_array_equal(rank[order], np.arange(n))
    assert np.all(np.diff(state.losses[order]) >= 0)


def _compare_prospect(obj, state, ref):
    _close(state.coef, ref["W"], "coef")
    _close(state.losses, ref["losses"], "losses")
    _close(np.einsum("ip,ik->ipk", obj.X, state.derivs), ref["G"], "gradient table")
    _close(state.q, ref["q"], "q")
    _close(state.rho, ref["rho"], "rho")
    _close(state.gbar, ref["gbar"], "gbar")
    _check_sorting(state)


def _compare_moreau(obj, state, ref):
    _close(state.coef, ref["W"], "coef")
    _close(state.losses, ref["losses"], "losses")
    _close(state.grads, ref["G"], "Moreau gradient table")
    _close(state.q, ref["q"], "q")
    _close(state.gbar, ref["gbar"], "gbar")
    _check_sorting(state)


# ------------------------------------------------------------------------------ twins
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("divergence,nu", SHIFTS)
@pytest.mark.parametrize("loss", list(RISKS))
def test_prospect_kernel_matches_twin_step_by_step(loss, divergence, nu, intercept):
    obj, W0, rng = _small(loss, divergence, nu, intercept)
    lr = 0.05
    solver = Prospect(lr=lr)
    state = solver.init_state(obj, coef0=obj.as_coef(W0))
    ref0 = twin.prospect_init(obj, W0)
    _compare_prospect(obj, state, ref0)
    idx = rng.integers(0, obj.n, size=3 * obj.n)
    refs = twin.prospect_steps(obj, ref0, idx, lr)
    s = state
    for t in range(idx.size):           # one kernel call per step: every iterate compared
        s = solver.update(obj, s, indices=idx[t:t + 1])
        _compare_prospect(obj, s, refs[t])
    # one kernel call for the whole sequence (incremental gbar across a long pass)
    whole = solver.update(obj, state, indices=idx)
    _compare_prospect(obj, whole, refs[-1])


@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("divergence,nu", SHIFTS)
@pytest.mark.parametrize("loss", list(RISKS))
def test_prospect_moreau_kernel_matches_twin_step_by_step(loss, divergence, nu, intercept):
    obj, W0, rng = _small(loss, divergence, nu, intercept, seed=1)
    lr = 0.2
    solver = ProspectMoreau(lr=lr)
    state = solver.init_state(obj, coef0=obj.as_coef(W0))
    ref0 = twin.moreau_init(obj, W0)
    _compare_moreau(obj, state, ref0)
    n_steps = 3 * obj.n
    jdx = np.stack([rng.integers(0, obj.n, size=n_steps),
                    rng.integers(0, 2**53, size=n_steps)], axis=1)
    refs = twin.moreau_steps(obj, ref0, jdx, lr)
    drawn = {r["i"].item() for r in refs}
    assert len(drawn) > 1
    s = state
    for t in range(n_steps):
        s = solver.update(obj, s, indices=jdx[t:t + 1])
        _compare_moreau(obj, s, refs[t])
    whole = solver.update(obj, state, indices=jdx)
    _compare_moreau(obj, whole, refs[-1])


@pytest.mark.parametrize("loss", ["logistic", "multinomial"])
def test_moreau_prox_solves_the_prox_problem_for_large_steps(loss):
    # large step: the prox problem is far from its starting point, Newton must still converge
    obj, W0, rng = _small(loss, "chi2", 0.3, True, seed=2)
    lr = 30.0
    state = ProspectMoreau(lr=lr).init_state(obj, coef0=obj.as_coef(W0))
    ref0 = twin.moreau_init(obj, W0)
    jdx = np.stack([rng.integers(0, obj.n, size=5), rng.integers(0, 2**53, size=5)], axis=1)
    refs = twin.moreau_steps(obj, ref0, jdx, lr)
    s = state
    for t in range(5):
        s = ProspectMoreau(lr=lr).update(obj, s, indices=jdx[t:t + 1])
        _compare_moreau(obj, s, refs[t])


# ------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("divergence,nu", SHIFTS)
def test_loss_table_stays_sorted_and_weights_exact_after_a_pass(divergence, nu):
    rng = np.random.default_rng(3)
    n = 200
    X = rng.normal(size=(n, 4))
    y = X @ rng.normal(size=4) + rng.standard_t(3, size=n)
    obj = ro.Objective("squared", ro.ESRM(2.0, shift_cost=nu, divergence=divergence), X, y,
                       l2_reg=1 / n, fit_intercept=True)
    solver = Prospect(lr=0.02, random_state=0)
    state = solver.init_state(obj)
    for _ in range(3):
        state = solver.update(obj, state)
        _check_sorting(state)
        np.testing.assert_array_equal(state.order, np.argsort(state.losses, kind="mergesort"))
        _close(state.q, obj.risk_weights(state.losses)[1], "q from scratch", tol=1e-13)
        _close(state.gbar, obj.X.T @ (state.rho[:, None] * state.derivs), "gbar", tol=1e-12)
    mstate = ProspectMoreau(lr=0.02, random_state=0).init_state(obj)
    for _ in range(2):
        mstate = ProspectMoreau(lr=0.02, random_state=0).update(obj, mstate)
        _check_sorting(mstate)
        _close(mstate.q, obj.risk_weights(mstate.losses)[1], "moreau q", tol=1e-13)
        _close(mstate.gbar, np.einsum("i,ipk->pk", mstate.q, mstate.grads), "moreau gbar",
               tol=1e-12)


def test_unsupported_loss_is_refused():
    class Hinge(ro.Loss):
        name = "hinge"

    obj = ro.Objective(Hinge(), ro.CVaR(0.5, shift_cost=0.1), np.eye(3), np.ones(3))
    for cls in (Prospect, ProspectMoreau):
        with pytest.raises(ValueError, match="loss"):
            cls().init_state(obj)


def test_registry_and_defaults():
    assert isinstance(ro.solvers.get("prospect"), Prospect)
    assert isinstance(ro.solvers.get("prospect_moreau"), ProspectMoreau)
    assert Prospect().get_params() == {"lr": 0.01, "batch_size": 1, "random_state": None}
    assert ProspectMoreau().get_params() == {"lr": 0.01, "random_state": None}


# ------------------------------------------------------------------------ convergence
def _synthetic(nu=0.5, divergence="chi2", loss="squared", n=100, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    w = rng.normal(size=5)
    if loss == "squared":
        y = X @ w + rng.normal(size=n)
    else:
        y = (X @ w + rng.normal(size=n) > 0).astype(float)
    return ro.Objective(loss, ro.Extremile(2.0, shift_cost=nu, divergence=divergence), X, y,
                        l2_reg=1 / n, fit_intercept=True)


@pytest.mark.parametrize("divergence", ["chi2", "kl"])
def test_prospect_converges_linearly_on_synthetic_data(divergence):
    obj = _synthetic(divergence=divergence)
    f_star = ro.solvers.LBFGS().run(obj).value
    trace = ro.Trace(f_star=f_star, tol=1e-8)
    res = Prospect(lr=0.03, random_state=0).run(obj, max_epochs=100, callback=trace)
    assert trace.suboptimality[-1] <= 1e-8, res.message
    assert trace.passes_to(1e-8) <= 100


def test_prospect_moreau_converges_on_synthetic_data():
    obj = _synthetic()
    f_star = ro.solvers.LBFGS().run(obj).value
    trace = ro.Trace(f_star=f_star, tol=1e-8)
    ProspectMoreau(lr=0.03, random_state=0).run(obj, max_epochs=100, callback=trace)
    assert trace.suboptimality[-1] <= 1e-8


def test_prospect_moreau_converges_with_logistic_prox():
    obj = _synthetic(loss="logistic")
    f_star = ro.solvers.LBFGS().run(obj).value
    trace = ro.Trace(f_star=f_star, tol=1e-8)
    ProspectMoreau(lr=0.3, random_state=0).run(obj, max_epochs=150, callback=trace)
    assert trace.suboptimality[-1] <= 1e-8


def test_prospect_with_zero_shift_cost_reaches_the_spectral_risk_minimiser():
    # distinct optimal losses: the nu = 0 problem has hidden smoothness (Prop. 2)
    obj = _synthetic(nu=0.0)
    f_star = ro.solvers.LBFGS().run(obj).value
    trace = ro.Trace(f_star=f_star, tol=1e-8)
    Prospect(lr=0.03, random_state=0).run(obj, max_epochs=150, callback=trace)
    assert trace.suboptimality[-1] <= 1e-8


# ---------------------------------------------------------------- real regression data
# Best step size from the papers' grid {1e-4, 3e-4, ..., 1, 3} by the papers' rule (lowest mean
# objective over the last ten passes, divergent settings discarded; seed 0), for the squared
# loss, l2_reg = 1/n, shift_cost 0.5 (chi2), CVaR(0.5) / Extremile(2) / ESRM(1), measured with
# random_state=0 and budgets of 64 passes (32 for kin8nm and power). On kin8nm and power several
# step sizes reach round-off level, so the rule's pick among them is decided by ~1e-16 noise.
BEST_LR = {
    ("yacht", "cvar"): 0.1, ("yacht", "extremile"): 0.1, ("yacht", "esrm"): 0.1,
    ("energy", "cvar"): 0.03, ("energy", "extremile"): 0.03, ("energy", "esrm"): 0.03,
    ("concrete", "cvar"): 0.01, ("concrete", "extremile"): 0.01, ("concrete", "esrm"): 0.01,
    ("kin8nm", "cvar"): 1e-4, ("kin8nm", "extremile"): 1e-4, ("kin8nm", "esrm"): 3e-4,
    ("power", "cvar"): 1e-3, ("power", "extremile"): 1e-3, ("power", "esrm"): 1e-3,
}
BUDGET = {"yacht": 64, "energy": 64, "concrete": 64, "kin8nm": 32, "power": 32}
_RISK_OF = {"cvar": lambda: ro.CVaR(0.5, shift_cost=0.5),
            "extremile": lambda: ro.Extremile(2.0, shift_cost=0.5),
            "esrm": lambda: ro.ESRM(1.0, shift_cost=0.5)}


def _regression(dataset, risk):
    data = ro.datasets.load(dataset)
    n = data.X_train.shape[0]
    return ro.Objective("squared", _RISK_OF[risk](), data.X_train, data.y_train, l2_reg=1 / n)


def _reaches(dataset, risk):
    obj = _regression(dataset, risk)
    f_star = ro.solvers.LBFGS().run(obj).value
    trace = ro.Trace(f_star=f_star, tol=1e-8)
    res = Prospect(lr=BEST_LR[dataset, risk], random_state=0).run(
        obj, max_epochs=BUDGET[dataset], callback=trace)
    assert not res.diverged
    assert trace.suboptimality[-1] <= 1e-8, (dataset, risk, trace.suboptimality[-1])


@pytest.mark.parametrize("risk", ["cvar", "extremile", "esrm"])
@pytest.mark.parametrize("dataset", ["yacht", "energy"])
def test_prospect_reaches_1e8_on_small_regression_data(dataset, risk):
    _reaches(dataset, risk)


@pytest.mark.slow
@pytest.mark.parametrize("risk", ["cvar", "extremile", "esrm"])
@pytest.mark.parametrize("dataset", ["yacht", "energy", "concrete", "kin8nm", "power"])
def test_prospect_reaches_1e8_on_all_regression_benchmarks(dataset, risk):
    _reaches(dataset, risk)
