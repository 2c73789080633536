"""Plug-in mini-batch baselines (SGD, SRDA, SGD with momentum, Adam).

* kernels vs. NumPy twins (tests/reference_impl/sgd.py) step by step on the same batches,
  over losses x divergences x shift costs x intercept, plus a warm-started second pass;
* mini-batch sampling (per-pass permutation cut into n // b batches), validation, warm starts;
* the batch oracle is the exact oracle when the batch is the whole sample;
* the bias: the expected plug-in gradient does not vanish at the minimiser, SGD / SRDA stall at
  a suboptimality floor for every step size, and SGD started at the minimiser leaves it.
"""
import itertools
import warnings

import numpy as np
import pytest

import riskopt as ro
from riskopt.callbacks import DivergenceWarning
from riskopt.solvers import get
from riskopt.solvers.sgd import SGD, SRDA, Adam, SGDMomentum
from reference_impl import sgd as twin

LOSSES = ["squared", "absolute", "logistic", "multinomial"]
SHIFTS = [(0.0, "chi2"), (0.3, "chi2"), (0.3, "kl")]
RISKS = {"squared": ro.CVaR(0.3), "absolute": ro.ESRM(2.0), "logistic": ro.Extremile(2.0),
         "multinomial": ro.CVaR(0.5)}


def make_objective(loss, nu, divergence, fit_intercept, n=45, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if loss in ("squared", "absolute"):
        y = X @ rng.normal(size=d) + rng.normal(size=n)
        loss_obj = ro.get_loss(loss)
    elif loss == "logistic":
        y = (rng.random(n) < 0.5).astype(float)
        loss_obj = ro.LogisticLoss()
    else:
        y = rng.integers(0, 3, size=n).astype(float)
        loss_obj = ro.MultinomialLoss(n_classes=3)
    base = RISKS[loss]
    risk = type(base)(*[getattr(base, f) for f in base.__dataclass_fields__
                        if f not in ("shift_cost", "divergence")],
                      shift_cost=nu, divergence=divergence)
    return ro.Objective(loss_obj, risk, X, y, l2_reg=0.05, fit_intercept=fit_intercept)


SOLVERS = {
    "sgd": lambda: SGD(lr=0.1, batch_size=8, random_state=1),
    "srda": lambda: SRDA(lr=0.1, batch_size=8, random_state=1),
    "sgd_momentum": lambda: SGDMomentum(lr=0.05, momentum=0.9, batch_size=8, random_state=1),
    "adam": lambda: Adam(lr=0.05, beta1=0.9, beta2=0.999, eps=1e-8, batch_size=8,
                         random_state=1),
}


def twin_steps(name, solver, obj, state, batches):
    sigma_b = obj.risk.spectrum(batches.shape[1])
    if name == "sgd":
        return twin.sgd(obj, state.coef, batches, sigma_b, solver.lr)
    if name == "srda":
        return twin.srda(obj, state.coef, batches, sigma_b, solver.lr, state.coef0,
                         state.dual_avg, state.n_iter)
    if name == "sgd_momentum":
        return twin.sgd_momentum(obj, state.coef, batches, sigma_b, solver.lr,
                                 solver.momentum, state.velocity)
    return twin.adam(obj, state.coef, batches, sigma_b, solver.lr, solver.beta1,
                     solver.beta2, solver.eps, state.m, state.v, state.n_iter)


def assert_state_matches(state, expected, tol=1e-10):
    for key, val in expected.items():
        got = getattr(state, key)
        if isinstance(val, int):
            assert got == val, key
        else:
            np.testing.assert_allclose(got, val, rtol=tol, atol=tol, err_msg=key)


# ---------------------------------------------------------------------------------- twins
@pytest.mark.parametrize("name", list(SOLVERS))
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("nu,divergence", SHIFTS)
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_kernel_matches_twin_step_by_step(name, loss, nu, divergence, fit_intercept):
    obj = make_objective(loss, nu, divergence, fit_intercept)
    solver = SOLVERS[name]()
    state0 = solver.init_state(obj)
    batches = solver.draw_indices(obj, state0)
    assert batches.shape == (45 // 8, 8)
    expected = twin_steps(name, solver, obj, state0, batches)
    for k in range(1, len(batches) + 1):
        state = solver.update(obj, state0, indices=batches[:k])
        assert state.epoch == 1
        assert_state_matches(state, expected[k - 1])
    # a second pass from the full first-pass state (warm start) on fresh batches
    state1 = solver.update(obj, state0, indices=batches)
    batches2 = solver.draw_indices(obj, state1)
    expected2 = twin_steps(name, solver, obj, state1, batches2)
    state2 = solver.update(obj, state1, indices=batches2)
    assert state2.epoch == 2
    assert_state_matches(state2, expected2[-1])
    # the update did not modify its input state
    assert_state_matches(state1, expected[-1])


@pytest.mark.parametrize("name", list(SOLVERS))
def test_kernel_matches_twin_from_nonzero_start(name):
    obj = make_objective("squared", 0.3, "chi2", True)
    solver = SOLVERS[name]()
    coef0 = np.random.default_rng(3).normal(size=obj.coef_shape)
    state0 = solver.init_state(obj, coef0=coef0)
    batches = solver.draw_indices(obj, state0)
    expected = twin_steps(name, solver, obj, state0, batches)
    assert_state_matches(solver.update(obj, state0, indices=batches), expected[-1])


def test_twin_plugin_gradient_is_full_gradient_on_whole_sample():
    # guards the twin itself: with B = all samples, the batch risk is the full risk
    for loss, (nu, div) in itertools.product(LOSSES, SHIFTS):
        obj = make_objective(loss, nu, div, True)
        W = obj.as_matrix(np.random.default_rng(0).normal(size=obj.coef_shape) * 0.3)
        g = twin.plugin_grad(obj, W, np.arange(obj.n), obj.sigma) + obj.reg[:, None] * W
        np.testing.assert_allclose(g, obj.as_matrix(obj.grad(obj.as_coef(W))), atol=1e-12)


# ------------------------------------------------------------------------ sampling & API
def test_draw_indices_is_a_permutation_cut_into_batches():
    obj = make_objective("squared", 0.3, "chi2", False, n=203)
    solver = SGD(batch_size=64, random_state=0)
    state = solver.init_state(obj)
    idx = solver.draw_indices(obj, state)
    assert idx.shape == (3, 64) and idx.dtype == np.int64
    assert len(np.unique(idx)) == 192          # without replacement
    assert idx.min() >= 0 and idx.max() < 203
    idx2 = solver.draw_indices(obj, state)     # a fresh permutation next pass
    assert not np.array_equal(idx, idx2)
    again = SGD(batch_size=64, random_state=0)
    np.testing.assert_array_equal(again.draw_indices(obj, again.init_state(obj)), idx)
    assert solver.passes_per_update(obj) == pytest.approx(192 / 203)


def test_batch_larger_than_n_is_full_gradient_descent():
    obj = make_objective("logistic", 0.3, "kl", True, n=30)
    solver = SGD(lr=0.2, batch_size=64, random_state=0)
    state = solver.init_state(obj)
    assert solver.draw_indices(obj, state).shape == (1, 30)
    W = np.random.default_rng(1).normal(size=obj.coef_shape)
    state = solver.init_state(obj, coef0=W)
    new = solver.update(obj, state)
    np.testing.assert_allclose(obj.as_coef(new.coef), W - 0.2 * obj.grad(W), atol=1e-12)


def test_one_dimensional_indices_are_cut_into_batches():
    obj = make_objective("squared", 0.3, "chi2", False)
    solver = SRDA(lr=0.1, batch_size=8, random_state=0)
    state = solver.init_state(obj)
    idx = solver.draw_indices(obj, state)
    a = solver.update(obj, state, indices=idx)
    b = solver.update(obj, state, indices=idx.ravel())
    np.testing.assert_array_equal(a.coef, b.coef)
    assert a.n_iter == b.n_iter == len(idx)


@pytest.mark.parametrize("name", list(SOLVERS))
def test_warm_start_equals_one_long_run(name):
    obj = make_objective("multinomial", 0.3, "chi2", True, n=60)
    long = SOLVERS[name]().run(obj, max_epochs=4)
    first = SOLVERS[name]().run(obj, max_epochs=2)
    second = SOLVERS[name]().run(obj, max_epochs=2, state=first.state)
    np.testing.assert_array_equal(long.coef, second.coef)
    assert second.n_epochs == 4
    for key in long.state._fields:
        if key != "rng":
            np.testing.assert_array_equal(getattr(long.state, key), getattr(second.state, key))


def test_registry_and_flags():
    for name, cls in [("sgd", SGD), ("srda", SRDA), ("sgd_momentum", SGDMomentum),
                      ("adam", Adam)]:
        solver = get(name, lr=0.01)
        assert isinstance(solver, cls) and solver.name == name
        assert cls.convergent is False
        assert "biased" in cls.__doc__.lower()
        assert solver.batch_size == 64
    assert get("sgd_momentum").momentum == 0.9
    adam = get("adam")
    assert (adam.beta1, adam.beta2, adam.eps) == (0.9, 0.999, 1e-8)


@pytest.mark.parametrize("solver, match", [
    (SGD(lr=0.0), "lr"), (SGD(lr=-1.0), "lr"), (SRDA(batch_size=0), "batch_size"),
    (SGD(batch_size=2.5), "batch_size"), (SGDMomentum(momentum=1.0), "momentum"),
    (SGDMomentum(momentum=-0.1), "momentum"), (Adam(beta1=1.0), "beta1"),
    (Adam(beta2=1.5), "beta2"), (Adam(eps=0.0), "eps"),
])
def test_invalid_hyperparameters_raise(solver, match):
    obj = make_objective("squared", 0.3, "chi2", False)
    with pytest.raises(ValueError, match=match):
        solver.run(obj, max_epochs=1)


def test_bad_indices_and_fixed_spectrum_raise():
    obj = make_objective("squared", 0.3, "chi2", False)
    solver = SGD(batch_size=8)
    state = solver.init_state(obj)
    with pytest.raises(ValueError, match="batches of 8"):
        solver.update(obj, state, indices=np.arange(10))
    with pytest.raises(ValueError, match="shape"):
        solver.update(obj, state, indices=np.arange(20).reshape(4, 5))
    with pytest.raises(ValueError, match="lie in"):
        solver.update(obj, state, indices=np.full((1, 8), 45))
    n = obj.n
    fixed = ro.Objective(ro.SquaredLoss(), ro.SpectralRisk(np.full(n, 1.0 / n)), obj.X, obj.y)
    with pytest.raises(ValueError, match="mini-batch"):
        SGD(batch_size=8).run(fixed, max_epochs=1)


# ------------------------------------------------------------------------------- the bias
def skewed_problem(n=256, d=5, nu=0.01, seed=0):
    """Heavy-tailed regression under CVaR 0.1 with a small shift cost."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.standard_t(3, size=n)
    return ro.Objective(ro.SquaredLoss(), ro.CVaR(0.1, shift_cost=nu), X, y, l2_reg=1 / n,
                        fit_intercept=True)


def test_biased_expected_plugin_gradient_is_not_zero_at_the_minimiser():
    # exact expectation over all C(12, 6) = 924 batches: E_B[g_B(w*)] + mu w* != 0 = grad F(w*)
    obj = skewed_problem(n=12, d=2)
    ref = ro.solvers.LBFGS().run(obj)
    W = obj.as_matrix(ref.coef)
    assert np.linalg.norm(obj.grad(ref.coef)) < 1e-7
    sigma_b = obj.risk.spectrum(6)
    grads = np.array([twin.plugin_grad(obj, W, np.array(B), sigma_b) + obj.reg[:, None] * W
                      for B in itertools.combinations(range(12), 6)])
    mean = grads.mean(axis=0)
    assert np.linalg.norm(mean) > 1e-2 * np.mean(np.linalg.norm(grads, axis=(1, 2)))


@pytest.mark.parametrize("cls", [SGD, SRDA])
def test_biased_does_not_reach_the_minimiser_for_any_step_size(cls):
    obj = skewed_problem()
    f_star = ro.solvers.LBFGS().run(obj).value
    g0 = np.linalg.norm(obj.grad(obj.zeros()))
    for lr, passes in [(3e-4, 1500), (1e-3, 600), (3e-3, 400), (1e-2, 400)]:
        trace = ro.Trace(f_star=f_star, every=5)
        res = cls(lr=lr, random_state=0).run(obj, max_epochs=passes, callback=trace)
        sub = trace.suboptimality
        # stalls: even the best recorded point of the second half stays above the floor
        assert sub[len(sub) // 2:].min() > 1e-4, (lr, sub[len(sub) // 2:].min())
        # and the full-batch gradient at the final iterate is not small
        assert np.linalg.norm(obj.grad(res.coef)) > 1e-3 * g0, lr


def test_biased_sgd_started_at_the_minimiser_leaves_it():
    obj = skewed_problem()
    ref = ro.solvers.LBFGS().run(obj)
    f0 = obj.value(obj.zeros())
    res = SGD(lr=3e-4, random_state=0).run(obj, max_epochs=800, coef0=ref.coef)
    assert (res.value - ref.value) / (f0 - ref.value) > 1e-4


@pytest.mark.parametrize("cls", [SGD, SRDA, SGDMomentum, Adam])
def test_biased_on_yacht_no_step_size_of_the_paper_grid_converges(cls):
    # Prospect paper Sec. 4 / Fig. 15: the direct stochastic methods "fail to converge for any
    # learning rate" (yacht, CVaR 0.5, nu = 0.5 chi2, mu = 1/n, 64 passes, batch 64)
    data = ro.datasets.load("yacht")
    n = data.X_train.shape[0]
    obj = ro.Objective(ro.SquaredLoss(), ro.CVaR(0.5, shift_cost=0.5), data.X_train,
                       data.y_train, l2_reg=1 / n)
    f_star = ro.solvers.LBFGS().run(obj).value
    converged_somewhere = []
    stable = 0
    for lr in [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3]:
        trace = ro.Trace(f_star=f_star)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DivergenceWarning)
            res = cls(lr=lr, random_state=0).run(obj, max_epochs=64, callback=trace)
        if res.diverged:
            continue
        stable += 1
        sub = trace.suboptimality
        if sub[len(sub) // 2:].min() <= 1e-4:
            converged_somewhere.append(lr)
    assert stable >= 5
    assert converged_somewhere == []
