"""SOREL and mini-batch SOREL: the exact permutahedron projection (vs cvxpy), kernel vs NumPy
twin step by step and iteration by iteration, validation, pass accounting, convergence."""
import functools
import itertools

import numpy as np
import pytest

import riskopt as ro
from conftest import heavy_tail_data
from reference_impl import sorel as ref
from riskopt._kernels import oracles as _ko
from riskopt._kernels import sorel as _ks

# (dataset, risk) -> (lr, dual_lr, level). (lr, dual_lr) were chosen by the papers' rule (lowest
# objective averaged over the last ten passes and over seeds 1..5; lr on the grid 1e-4 .. 3,
# dual_lr = C on the SOREL grid 0.01 .. 10; squared loss, mu = 1/n, nu = 0). ``level`` is the
# relative suboptimality asserted at the end of the budget (64 passes, 32 for kin8nm and power,
# i.e. 32 / 16 updates at 2 passes each) with random_state=1: 1e-8 where SOREL reaches it, and
# otherwise 3x the value measured for that seed (in the comment). Why those do not reach 1e-8:
# for every CVaR problem even the outer loop with *exactly* solved inner problems is far from 1e-8
# after the same number of outer iterations (2e-7 .. 3e-5), i.e. the dual schedule
# eta_k = C (k+1)/n is the bottleneck at the CVaR kink; for extremile / ESRM on yacht, energy,
# concrete the exact outer loop gets below 1e-9, and n single-sample inner steps per outer
# iteration at a stable lr do not solve the inner problems accurately enough.
SOREL_SETTINGS = {
    ("yacht", "cvar"): (0.01, 0.4, 4e-4),            # measured 1.24e-4
    ("yacht", "extremile"): (0.03, 0.2, 5e-8),       # measured 1.43e-8
    ("yacht", "esrm"): (0.03, 0.04, 1.2e-6),         # measured 4.00e-7
    ("energy", "cvar"): (0.01, 1.0, 1.6e-5),         # measured 5.13e-6
    ("energy", "extremile"): (0.03, 1.0, 1.8e-7),    # measured 5.89e-8
    ("energy", "esrm"): (0.03, 1.0, 1.6e-6),         # measured 5.27e-7
    ("concrete", "cvar"): (0.01, 0.1, 7.5e-5),       # measured 2.45e-5
    ("concrete", "extremile"): (0.01, 0.1, 2.6e-7),  # measured 8.51e-8
    ("concrete", "esrm"): (0.01, 0.2, 1e-8),         # reaches 1e-8 at 34 passes
    ("kin8nm", "cvar"): (1e-4, 10.0, 1e-6),          # measured 3.23e-7
    ("kin8nm", "extremile"): (1e-4, 2.0, 1e-8),      # reaches 1e-8 at 22 passes
    ("kin8nm", "esrm"): (3e-4, 0.4, 1e-8),           # reaches 1e-8 at 20 passes
    ("power", "cvar"): (0.01, 2.0, 5.3e-7),          # measured 1.76e-7
    ("power", "extremile"): (0.01, 1.0, 5.3e-8),     # measured 1.77e-8
    ("power", "esrm"): (3e-3, 1.0, 1e-8),            # reaches 1e-8 at 22 passes
}
RISKS = {"cvar": lambda: ro.CVaR(0.5), "extremile": lambda: ro.Extremile(2.0),
         "esrm": lambda: ro.ESRM(1.0)}


def make_problem(loss="squared", intercept=True, n=14, d=3, seed=0, risk=None, l2_reg=None):
    X, y = heavy_tail_data(loss, n, d, seed)
    risk = ro.ESRM(1.0) if risk is None else risk
    return ro.Objective(loss, risk, X, y, l2_reg=1.0 / n if l2_reg is None else l2_reg,
                        fit_intercept=intercept)


def kernel_projection(u, sigma):
    q = np.empty_like(u)
    _ks._project_permutahedron(np.ascontiguousarray(u, dtype=float), sigma, q)
    return q


def cvxpy_projection(u, sigma):
    """Projection onto conv{permutations of sigma} = {P sigma : P doubly stochastic}."""
    cp = pytest.importorskip("cvxpy")
    n = len(u)
    P = cp.Variable((n, n), nonneg=True)
    q = P @ sigma
    cons = [cp.sum(P, axis=0) == 1, cp.sum(P, axis=1) == 1]
    prob = cp.Problem(cp.Minimize(cp.sum_squares(q - u)), cons)
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    return np.asarray(P.value @ sigma)


SPECTRA = {
    "cvar": lambda n: ro.CVaR(0.4).spectrum(n),
    "extremile": lambda n: ro.Extremile(2.0).spectrum(n),
    "esrm": lambda n: ro.ESRM(2.0).spectrum(n),
    "max": lambda n: ro.MaxLoss().spectrum(n),
    "mean": lambda n: ro.Mean().spectrum(n),
}


# ---------------------------------------------------------------------------- the projection
@pytest.mark.parametrize("spectrum", sorted(SPECTRA))
@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_projection_matches_cvxpy(spectrum, n):
    rng = np.random.default_rng(n)
    sigma = SPECTRA[spectrum](n)
    for trial in range(3):
        u = rng.normal(scale=[0.01, 1.0, 10.0][trial], size=n)
        if n > 2 and trial == 1:
            u[1] = u[2]          # ties
        got = kernel_projection(u, sigma)
        want = cvxpy_projection(u, sigma)
        np.testing.assert_allclose(got, want, atol=1e-6)
        # optimality is exact: the kernel is never worse than the conic solver
        assert np.sum((got - u) ** 2) <= np.sum((want - u) ** 2) + 1e-9


def _in_permutahedron(q, sigma, tol=1e-12):
    """Majorisation: partial sums of q sorted descending <= those of sigma, equal totals."""
    a = np.cumsum(np.sort(q)[::-1])
    b = np.cumsum(np.sort(sigma)[::-1])
    return abs(a[-1] - b[-1]) <= tol and np.all(a <= b + tol)


@pytest.mark.parametrize("spectrum", sorted(SPECTRA))
def test_projection_matches_isotonic_twin_and_is_feasible(spectrum):
    rng = np.random.default_rng(0)
    n = 60
    sigma = SPECTRA[spectrum](n)
    for scale in (1e-3, 1.0, 1e3):
        u = np.round(rng.normal(scale=scale, size=n), 1 if scale > 1 else 6)  # many ties
        got = kernel_projection(u, sigma)
        np.testing.assert_allclose(got, ref.project_permutahedron(u, sigma), rtol=1e-12,
                                   atol=1e-12 * max(1.0, scale))
        assert _in_permutahedron(got, sigma, tol=1e-9)
        # ties in u get equal weights; the order of u is kept
        for i, j in itertools.combinations(range(n), 2):
            if u[i] == u[j]:
                assert abs(got[i] - got[j]) <= 1e-12 * max(1.0, scale)
            elif u[i] < u[j]:
                assert got[i] <= got[j] + 1e-12


def test_projection_fixes_points_of_the_permutahedron():
    rng = np.random.default_rng(3)
    sigma = ro.Extremile(2.0).spectrum(20)
    q = rng.permutation(sigma)
    np.testing.assert_allclose(kernel_projection(q, sigma), q, atol=1e-15)
    mix = 0.3 * q + 0.7 * rng.permutation(sigma)
    np.testing.assert_allclose(kernel_projection(mix, sigma), mix, atol=1e-15)


@pytest.mark.parametrize("nu", [1e-3, 0.5, 20.0])
def test_chi2_oracle_is_a_scaled_projection(nu):
    """max_{q in P} q.l - nu n ||q - 1/n||^2 is Proj_P(l / (2 nu n)): the mapping the kernel uses."""
    rng = np.random.default_rng(1)
    n = 25
    sigma = ro.ESRM(1.0).spectrum(n)
    losses = rng.exponential(size=n)
    q = np.empty(n)
    _ko._risk_weights(losses, sigma, nu, _ko.CHI2, q)
    np.testing.assert_allclose(q, kernel_projection(losses / (2 * nu * n), sigma), atol=1e-14)


# ---------------------------------------------------------------------------- kernel vs twin
CASES = [
    ("squared", True, ro.ESRM(1.0)),
    ("squared", False, ro.CVaR(0.5)),
    ("logistic", True, ro.Extremile(2.0)),
    ("logistic", False, ro.CVaR(0.3)),
    ("multinomial", True, ro.CVaR(0.5)),
    ("multinomial", False, ro.ESRM(2.0)),
]


def assert_state_matches(state, W, lam, losses_prev):
    np.testing.assert_allclose(state.coef, W, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(state.lam, lam, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state.losses_prev, losses_prev, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss, intercept, risk", CASES)
def test_kernel_matches_twin_step_by_step(loss, intercept, risk):
    """Inner steps one at a time (update on idx[:t]), then iteration by iteration."""
    obj = make_problem(loss, intercept, risk=risk)
    rng = np.random.default_rng(1)
    W0 = 0.3 * rng.normal(size=(obj.p, obj.K))
    lr, C, ps = 0.05, 2.0, 20.0
    solver = ro.solvers.SOREL(lr=lr, dual_lr=C, prox_scale=ps)
    state = solver.init_state(obj, coef0=W0.reshape(obj.coef_shape))
    lam0, l0 = ref.initial_weights(obj, W0)
    assert_state_matches(state, W0, lam0, l0)
    seqs = [rng.integers(0, obj.n, size=obj.n) for _ in range(4)]
    W, lam, lprev = W0, lam0, l0
    for k, idx in enumerate(seqs):
        W1, lam1, l1, iterates = ref.sorel_outer_iteration(obj, W, lam, lprev, k, lr, C, ps, idx)
        # each inner step of outer iteration k: the same dual step, then t stochastic steps
        for t in (1, 2, 5, obj.n):
            partial = solver.update(obj, state, indices=idx[:t])
            assert_state_matches(partial, iterates[t - 1], lam1, l1)
            assert partial.epoch == k + 1
        state = solver.update(obj, state, indices=idx)
        assert_state_matches(state, W1, lam1, l1)
        assert _in_permutahedron(state.lam, obj.sigma, tol=1e-12)
        W, lam, lprev = W1, lam1, l1


@pytest.mark.parametrize("loss, intercept, risk", CASES)
def test_minibatch_kernel_matches_twin(loss, intercept, risk):
    obj = make_problem(loss, intercept, risk=risk, n=17)
    rng = np.random.default_rng(2)
    W0 = 0.3 * rng.normal(size=(obj.p, obj.K))
    lr, C, ps, b = 0.1, 0.5, 5.0, 4
    solver = ro.solvers.SORELMiniBatch(lr=lr, batch_size=b, dual_lr=C, prox_scale=ps,
                                       random_state=0)
    state = solver.init_state(obj, coef0=W0.reshape(obj.coef_shape))
    W, (lam, lprev) = W0, ref.initial_weights(obj, W0)
    for k in range(4):
        batches = solver.draw_indices(obj, state)
        assert batches.shape == (obj.n // b, b)
        W1, lam1, l1, iterates = ref.sorel_outer_iteration(obj, W, lam, lprev, k, lr, C, ps,
                                                           batches)
        for t in (1, 2):
            partial = solver.update(obj, state, indices=batches[:t])
            assert_state_matches(partial, iterates[t - 1], lam1, l1)
        state = solver.update(obj, state, indices=batches)
        assert_state_matches(state, W1, lam1, l1)
        W, lam, lprev = W1, lam1, l1


def test_minibatch_of_size_one_is_sorel():
    obj = make_problem("logistic", True, n=20)
    idx = np.random.default_rng(0).integers(0, obj.n, size=(3, obj.n))
    a = ro.solvers.SOREL(lr=0.1, dual_lr=0.7, random_state=0)
    b = ro.solvers.SORELMiniBatch(lr=0.1, batch_size=1, dual_lr=0.7, random_state=0)
    sa, sb = a.init_state(obj), b.init_state(obj)
    for seq in idx:
        sa = a.update(obj, sa, indices=seq)
        sb = b.update(obj, sb, indices=seq.reshape(-1, 1))
        np.testing.assert_array_equal(sa.coef, sb.coef)
        np.testing.assert_array_equal(sa.lam, sb.lam)


def test_update_does_not_modify_the_input_state():
    obj = make_problem()
    solver = ro.solvers.SOREL(lr=0.05, random_state=0)
    state = solver.init_state(obj)
    before = [np.copy(a) for a in (state.coef, state.lam, state.losses_prev)]
    solver.update(obj, state)
    for a, b in zip(before, (state.coef, state.lam, state.losses_prev)):
        np.testing.assert_array_equal(a, b)


def test_initial_weights_are_the_exact_maximiser_with_ties_averaged():
    # logistic loss at w = 0: all losses tie at log 2, so lambda_0 is uniform
    obj = make_problem("logistic", True, risk=ro.CVaR(0.25), n=12)
    state = ro.solvers.SOREL().init_state(obj)
    np.testing.assert_allclose(state.lam, np.full(12, 1 / 12), atol=1e-15)
    obj = make_problem("squared", True, risk=ro.CVaR(0.25), n=12)
    state = ro.solvers.SOREL().init_state(obj)
    np.testing.assert_allclose(state.lam, obj.weights(np.zeros(obj.coef_shape)))
    np.testing.assert_array_equal(state.losses_prev, obj.losses(np.zeros(obj.coef_shape)))


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize("cls", [ro.solvers.SOREL, ro.solvers.SORELMiniBatch])
def test_requires_zero_shift_cost(cls):
    obj = make_problem(risk=ro.ESRM(1.0, shift_cost=0.5))
    with pytest.raises(ValueError, match="shift_cost = 0"):
        cls().init_state(obj)


@pytest.mark.parametrize("cls", [ro.solvers.SOREL, ro.solvers.SORELMiniBatch])
def test_rejects_nonsmooth_loss(cls):
    with pytest.raises(ValueError, match="smooth loss"):
        cls().init_state(make_problem("absolute"))


@pytest.mark.parametrize("param, bad", [("dual_lr", 0.0), ("dual_lr", -1.0), ("dual_lr", np.nan),
                                        ("prox_scale", 0.0), ("prox_scale", "20"),
                                        ("lr", -0.1)])
def test_bad_hyperparameters_raise(param, bad):
    obj = make_problem()
    with pytest.raises(ValueError, match=param):
        ro.solvers.SOREL(**{param: bad}).init_state(obj)
    with pytest.raises(ValueError, match=param):
        ro.solvers.SORELMiniBatch(**{param: bad}).init_state(obj)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "64"])
def test_bad_batch_size_raises(bad):
    with pytest.raises(ValueError, match="batch_size"):
        ro.solvers.SORELMiniBatch(batch_size=bad).init_state(make_problem())


def test_minibatch_needs_two_dimensional_indices():
    obj = make_problem()
    solver = ro.solvers.SORELMiniBatch(batch_size=4)
    with pytest.raises(ValueError, match="shape"):
        solver.update(obj, solver.init_state(obj), indices=np.arange(8))


def test_registry_names_and_params():
    s = ro.solvers.get("sorel", lr=0.02, dual_lr=0.3, random_state=1)
    assert isinstance(s, ro.solvers.SOREL)
    assert s.get_params() == {"lr": 0.02, "dual_lr": 0.3, "prox_scale": 20.0, "random_state": 1}
    m = ro.solvers.get("sorel_minibatch")
    assert isinstance(m, ro.solvers.SORELMiniBatch) and m.batch_size == 64
    assert ro.solvers.SOREL.convergent and ro.solvers.SORELMiniBatch.convergent


# ---------------------------------------------------------------------------- pass accounting
def test_passes_per_update_and_trace_passes():
    obj = make_problem(n=100)
    solver = ro.solvers.SOREL(lr=0.01, random_state=0)
    assert solver.passes_per_update(obj) == 2.0
    trace = ro.Trace()
    res = solver.run(obj, max_epochs=3, callback=trace)
    assert res.n_epochs == 3
    np.testing.assert_allclose(trace.passes, [0, 2, 4, 6])
    mb = ro.solvers.SORELMiniBatch(batch_size=64)
    assert mb.passes_per_update(obj) == pytest.approx(1.64)       # 1 full pass + 64 of 100
    assert ro.solvers.SORELMiniBatch(batch_size=25).passes_per_update(obj) == 2.0
    assert ro.solvers.SORELMiniBatch(batch_size=500).passes_per_update(obj) == 2.0  # clipped


def test_minibatches_of_one_update_are_disjoint():
    obj = make_problem(n=50)
    solver = ro.solvers.SORELMiniBatch(batch_size=8, random_state=0)
    state = solver.init_state(obj)
    idx = solver.draw_indices(obj, state)
    assert idx.shape == (6, 8)
    assert len(np.unique(idx)) == 48
    assert idx.min() >= 0 and idx.max() < 50


# ---------------------------------------------------------------------------- convergence
def test_reaches_1e_8_on_a_small_synthetic_problem():
    rng = np.random.default_rng(0)
    n, d = 80, 3
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + 0.5 * rng.standard_t(3, size=n)
    obj = ro.Objective("squared", ro.ESRM(1.0), X, y, l2_reg=1 / n, fit_intercept=True)
    f_star = ro.solvers.LBFGS().run(obj).value
    trace = ro.Trace(f_star=f_star, tol=1e-8)
    ro.solvers.SOREL(lr=0.01, dual_lr=4.0, random_state=0).run(obj, max_epochs=30,
                                                               callback=trace)
    assert trace.suboptimality[-1] <= 1e-8
    assert trace.passes[-1] <= 60


def test_appendix_c_example_converges_to_the_tie():
    """sigma = (0, 1), l_1 = (w-1)^2/2, l_2 = (w+1)^2/2: the optimum w* = 0 is a tie. Alternating
    exact weights with a w-solve oscillates between -1 and 1 (Example 1); SOREL's proximal dual
    step stabilises the trajectory."""
    X = np.ones((2, 1))
    y = np.array([1.0, -1.0])
    obj = ro.Objective("squared", ro.MaxLoss(), X, y, l2_reg=1e-3)
    for seed in range(3):
        solver = ro.solvers.SOREL(lr=0.5, dual_lr=0.3, prox_scale=1.0, random_state=seed)
        res = solver.run(obj, max_epochs=100, coef0=np.array([0.7]))
        assert abs(res.coef[0]) < 1e-8
        assert res.value - 0.5 < 1e-12


# ---------------------------------------------------------------------------- real data
@functools.lru_cache(maxsize=None)
def _real_problem(dataset, risk):
    data = ro.datasets.load(dataset)
    n = data.X_train.shape[0]
    obj = ro.Objective(ro.SquaredLoss(), RISKS[risk](), data.X_train, data.y_train, l2_reg=1 / n)
    return obj, ro.solvers.LBFGS().run(obj).value


def _run_real(dataset, risk):
    lr, dual_lr, level = SOREL_SETTINGS[(dataset, risk)]
    obj, f_star = _real_problem(dataset, risk)
    solver = ro.solvers.SOREL(lr=lr, dual_lr=dual_lr, random_state=1)
    budget = 32 if dataset in ("kin8nm", "power") else 64
    trace = ro.Trace(f_star=f_star)
    res = solver.run(obj, max_epochs=int(budget / solver.passes_per_update(obj)), callback=trace)
    assert not res.diverged
    assert trace.passes[-1] == budget
    return trace, level


@pytest.mark.parametrize("dataset, risk", [(d, r) for (d, r) in SOREL_SETTINGS
                                           if d in ("yacht", "energy") and r != "cvar"]
                         + [("yacht", "cvar"), ("kin8nm", "esrm")])
def test_real_data_fast_subset_reaches_documented_level(dataset, risk):
    trace, level = _run_real(dataset, risk)
    assert trace.suboptimality[-1] <= level


def test_minibatch_reaches_1e_8_on_kin8nm_esrm():
    """Appendix D with b = 64 at the setting the papers' rule picks (lr 0.01, C 1)."""
    obj, f_star = _real_problem("kin8nm", "esrm")
    solver = ro.solvers.SORELMiniBatch(lr=0.01, dual_lr=1.0, random_state=1)
    trace = ro.Trace(f_star=f_star)
    solver.run(obj, max_epochs=16, callback=trace)
    assert trace.passes[-1] <= 32
    assert trace.suboptimality[-1] <= 1e-8


@pytest.mark.slow
@pytest.mark.parametrize("dataset, risk", sorted(SOREL_SETTINGS))
def test_real_data_reach_1e_8_or_documented_level_within_budget(dataset, risk):
    trace, level = _run_real(dataset, risk)
    assert trace.suboptimality[-1] <= level
    if level <= 1e-8:
        assert trace.passes_to(1e-8) is not None
