"""Mini-batch LSVRG and Prospect (``batch_size > 1``): kernels against their NumPy twins step
by step on the same batches, ``batch_size = 1`` unchanged, validation, and convergence to
the optimum certified by the L-BFGS point's own gradient."""
import numpy as np
import pytest

import riskopt as ro
from riskopt import samplers
from riskopt.solvers.lsvrg import LSVRG
from riskopt.solvers.prospect import Prospect

from reference_impl import prospect as prospect_twin
from reference_impl.lsvrg import LSVRGTwin
from test_lsvrg import CASES, assert_state_matches, make_problem
from test_prospect import _compare_prospect, _small

PROSPECT_CASES = [("squared", "chi2", 0.3, True), ("absolute", "kl", 0.3, False),
                  ("logistic", "chi2", 0.0, True), ("multinomial", "kl", 0.3, True),
                  ("logistic", "chi2", 0.3, False), ("squared", "chi2", 0.0, False)]


@pytest.mark.parametrize("loss, divergence, nu, intercept", CASES)
def test_lsvrg_batch_kernel_matches_twin_step_by_step(loss, divergence, nu, intercept):
    obj = make_problem(loss, divergence, nu, intercept)
    rng = np.random.default_rng(1)
    W0 = 0.1 * rng.normal(size=obj.coef_shape)
    solver = LSVRG(lr=0.05, epoch_length=3, batch_size=4)
    state = solver.init_state(obj, coef0=W0)
    twin = LSVRGTwin(obj, W0, lr=0.05, epoch_length=3)
    batches = np.concatenate([samplers.permutation_batches(rng, obj.n, 4) for _ in range(2)])
    for batch in batches[:11]:                     # crosses three checkpoint refreshes
        state = solver.update(obj, state, indices=batch[None, :])
        twin.step_batch(batch)
        assert_state_matches(state, twin, obj)


def test_lsvrg_batch_full_pass_matches_twin():
    """Default epoch length n // b steps: two passes, one refresh in between."""
    obj = make_problem("logistic", "chi2", 0.3, True, n=30)
    solver = LSVRG(lr=0.03, batch_size=4, random_state=5)
    state = solver.init_state(obj)
    twin = LSVRGTwin(obj, np.zeros((obj.p, obj.K)), lr=0.03, epoch_length=30 // 4)
    for _ in range(2):
        idx = solver.draw_indices(obj, state)
        assert idx.shape == (7, 4) and len(set(idx.ravel().tolist())) == 28
        state = solver.update(obj, state, indices=idx)
        for batch in idx:
            twin.step_batch(batch)
        assert_state_matches(state, twin, obj)


@pytest.mark.parametrize("loss, divergence, nu, intercept", PROSPECT_CASES)
def test_prospect_batch_kernel_matches_twin_step_by_step(loss, divergence, nu, intercept):
    obj, W0, rng = _small(loss, divergence, nu, intercept, n=15)
    solver = Prospect(lr=0.05, batch_size=4)
    state = solver.init_state(obj, coef0=W0)
    ref = prospect_twin.prospect_init(obj, W0)
    batches = np.concatenate([samplers.permutation_batches(rng, obj.n, 4) for _ in range(4)])
    refs = prospect_twin.prospect_batch_steps(obj, ref, batches, 0.05)
    for batch, r in zip(batches, refs):
        state = solver.update(obj, state, indices=batch[None, :])
        _compare_prospect(obj, state, r)


def test_prospect_batch_keeps_ties_sorted():
    """Losses that tie (duplicated rows) stay sorted and tied weights equal after a pass."""
    obj0, _, _ = _small("squared", "chi2", 0.0, False, n=10)
    X = np.vstack([obj0.X, obj0.X])
    y = np.concatenate([obj0.y, obj0.y])
    obj = ro.Objective("squared", ro.CVaR(0.4), X, y, l2_reg=0.1)
    solver = Prospect(lr=0.05, batch_size=5, random_state=0)
    state = solver.run(obj, max_epochs=3).state
    order = state.order
    assert np.all(np.diff(state.losses[order]) >= 0)
    np.testing.assert_array_equal(state.rank[order], np.arange(obj.n))


@pytest.mark.parametrize("make", [
    lambda **k: LSVRG(lr=0.02, random_state=3, **k),
    lambda **k: Prospect(lr=0.02, random_state=3, **k)])
def test_batch_size_one_is_the_single_sample_method_bit_for_bit(make):
    obj = make_problem("logistic", "chi2", 0.3, True, n=40)
    a = make().run(obj, max_epochs=3).state
    b = make(batch_size=1).run(obj, max_epochs=3).state
    for name in a._fields:
        if name != "rng":
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert make().passes_per_update(obj) == make(batch_size=1).passes_per_update(obj)


def test_passes_per_update_with_batches():
    obj = make_problem(n=40)
    assert Prospect(batch_size=8).passes_per_update(obj) == 1.0
    assert Prospect(batch_size=6).passes_per_update(obj) == 36 / 40
    assert LSVRG(batch_size=8).passes_per_update(obj) == 2.0   # one checkpoint per update
    assert LSVRG(batch_size=8, epoch_length=1).passes_per_update(obj) == 1.0 + 5
    assert Prospect(batch_size=100).draw_indices(obj, Prospect().init_state(obj)).shape == (1, 40)


@pytest.mark.parametrize("cls", [LSVRG, Prospect])
@pytest.mark.parametrize("bad", [0, -2, 2.5, "64", True])
def test_bad_batch_size_raises(cls, bad):
    with pytest.raises(ValueError, match="batch_size"):
        cls(batch_size=bad).init_state(make_problem())


@pytest.mark.parametrize("cls", [LSVRG, Prospect])
def test_bad_batches_raise(cls):
    obj = make_problem(n=20)
    solver = cls(batch_size=4)
    state = solver.init_state(obj)
    with pytest.raises(ValueError, match="distinct"):
        solver.update(obj, state, indices=[[0, 1, 1, 2]])
    with pytest.raises(ValueError, match="shape"):
        solver.update(obj, state, indices=[0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"\[0, 20\)"):
        solver.update(obj, state, indices=[[0, 1, 2, 20]])


def _certified_gap(obj, coef):
    """``F(coef) - F*`` bounded above through the L-BFGS point's own accuracy: F is
    ``mu``-strongly convex (no intercept, ``mu = l2_reg``), so
    ``F* >= F(w_lbfgs) - |grad F(w_lbfgs)|^2 / (2 mu)``; returns the gap to that lower bound
    and the bound's slack."""
    w = ro.solvers.LBFGS(tol=1e-12).run(obj).coef
    slack = float(np.sum(obj.grad(w) ** 2)) / (2 * obj.l2_reg)
    lower = obj.value(w) - slack
    return obj.value(coef) - lower, slack


@pytest.mark.parametrize("cls, lr", [(LSVRG, 0.05), (Prospect, 0.05)])
def test_minibatch_methods_reach_the_certified_optimum(cls, lr):
    """Smoothed ESRM (nu = 0.5 chi2), squared loss, n = 200, b = 8: within 1e-8 of F*."""
    obj = make_problem("squared", "chi2", 0.5, False, n=200, d=5, seed=4)
    res = cls(lr=lr, batch_size=8, random_state=0).run(obj, max_epochs=150)
    gap, slack = _certified_gap(obj, res.coef)
    assert slack < 1e-10
    assert gap <= 1e-8 * abs(obj.value(res.coef)), (gap, res.message)
