"""Sparse X (issue 16, part 2): the spectral family keeps a CSR design (O(nnz) memory) and the
full-batch L-BFGS solves it to the dense optimum; every other path densifies with a
SparseDensifyWarning or refuses with a clear error."""
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import _certify as certify
import riskopt as ro
from riskopt import RiskClassifier, RiskRegressor


def _sparse_regression(n=600, d=40, density=0.1, seed=0, scale=None):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=seed, format="csr")
    if scale is not None:
        X = sp.csr_matrix(X @ sp.diags(scale))
    w = rng.normal(size=d)
    y = X @ w + 0.3 * rng.normal(size=n)
    return X, y


RISKS = ["cvar:0.2", "esrm:1", "extremile:2", ro.CVaR(0.2, shift_cost=0.5),
         ro.ESRM(1.0, shift_cost=0.3, divergence="kl"), "mean"]


@pytest.mark.parametrize("risk", RISKS, ids=str)
@pytest.mark.parametrize("intercept", [True, False])
def test_objective_keeps_csr_and_matches_dense(risk, intercept):
    X, y = _sparse_regression()
    obj = ro.Objective("squared", risk, X, y, l2_reg=1e-2, fit_intercept=intercept)
    dense = ro.Objective("squared", risk, X.toarray(), y, l2_reg=1e-2, fit_intercept=intercept)
    assert obj.sparse and sp.issparse(obj.X) and obj.X.format == "csr"
    assert obj.X.nnz == X.nnz + (X.shape[0] if intercept else 0)
    w = np.random.default_rng(1).normal(size=obj.p)
    v1, g1 = obj.value_grad(w)
    v2, g2 = dense.value_grad(w)
    assert v1 == pytest.approx(v2, rel=1e-13)
    np.testing.assert_allclose(g1, g2, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(obj.smoothness(), dense.smoothness(), rtol=1e-12)
    # both fits certified near the optimum through their own duality gap (tests/_certify.py;
    # measured <= 3.6e-10 relative at tol = 1e-10), not compared with each other
    for r, what in ((ro.solvers.LBFGS(tol=1e-10, polish_ties=False).run(obj), "sparse"),
                    (ro.solvers.LBFGS(tol=1e-10, polish_ties=False).run(dense), "dense")):
        certify.assert_certified(dense, r.coef, rel=3e-9, what=f"the {what} fit")


def test_objective_does_not_copy_or_change_the_callers_matrix():
    X, y = _sparse_regression()
    data = X.data.copy()
    obj = ro.Objective("squared", "cvar:0.3", X, y, fit_intercept=False)
    assert not np.shares_memory(obj.X.data, X.data)
    obj.X.data[:] = 0.0
    np.testing.assert_array_equal(X.data, data)


@pytest.mark.parametrize("fmt", ["csc", "coo", "lil", "dok"])
def test_any_sparse_format_and_float32(fmt):
    X, y = _sparse_regression(n=200, d=10)
    Xf = X.astype(np.float32).asformat(fmt)
    obj = ro.Objective("squared", "esrm:1", Xf, y, fit_intercept=True)
    ref = ro.Objective("squared", "esrm:1", X.astype(np.float32).toarray(), y, fit_intercept=True)
    assert obj.X.format == "csr" and obj.X.dtype == np.float64
    w = np.linspace(-1, 1, obj.p)
    assert obj.value(w) == pytest.approx(ref.value(w), rel=1e-13)


def test_non_finite_sparse_values_are_rejected():
    X, y = _sparse_regression(n=50, d=5, density=0.5)
    X = X.tolil()
    X[3, 2] = np.nan
    with pytest.raises(ValueError, match="1 NaN or infinite"):
        ro.Objective("squared", "cvar:0.5", X.tocsr(), y)


def test_stochastic_solver_on_sparse_objective_is_a_clear_error():
    X, y = _sparse_regression(n=100, d=5)
    obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=1.0), X, y, fit_intercept=True)
    for name in ("prospect", "lsvrg", "sgd", "sorel", "saddlesaga"):
        with pytest.raises(ro.solvers.IncompatibleObjectiveError,
                           match=rf"solver '{name}' needs a dense X .*scipy.sparse.*'lbfgs'"):
            ro.solvers.get(name, lr=0.01).run(obj, 1)
    assert ro.solvers.solvers_for(obj) == ["lbfgs"]


@pytest.mark.parametrize("family_risk", ["kl", "group"])
def test_other_families_densify_with_a_warning(family_risk):
    X, y = _sparse_regression(n=60, d=4)
    with pytest.warns(ro.SparseDensifyWarning, match=r"densifies the sparse X \(60 x 4"):
        if family_risk == "kl":
            obj = ro.Objective("squared", "kl:0.5", X, y)
        else:
            obj = ro.Objective("squared", "cvar:0.5", X, y, groups=np.arange(60) % 3)
    assert isinstance(obj.X, np.ndarray)


@pytest.mark.parametrize("risk", ["cvar:0.1", "esrm:1", "extremile:2", "cvar:0.2,chi2=0.5"])
def test_regressor_sparse_default_path_matches_dense(risk):
    # columns of very different scales: the sparse fit is scaled (not centred) in place
    X, y = _sparse_regression(n=3000, d=30, density=0.2, seed=3,
                              scale=np.logspace(-3, 3, 30))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ro.SparseDensifyWarning)
        s = RiskRegressor(risk=risk, tol=1e-7, max_iter=5000).fit(X, y)
    d = RiskRegressor(risk=risk, tol=1e-7, max_iter=5000).fit(X.toarray(), y)
    # the same full-batch solver on both (Newton where it certifies the gap at shift cost 0,
    # L-BFGS otherwise), the sparse one without densifying (the warning is an error above)
    assert s.solver_ == d.solver_ and s.solver_ in ("newton", "lbfgs")
    assert s.solver_ == "lbfgs" or s.risk_.shift_cost == 0
    # both solve the same (dense) problem to their accuracy, certified by weak duality
    # (tests/_certify.py), not compared with each other at a fixed tolerance
    for est in (s, d):
        obj, W = certify.problem_of(est, X.toarray(), y)
        certify.assert_certified(obj, W, rel=10 * est.tol, what=f"{risk} {est.solver_}")


def test_classifier_sparse_binary_and_multiclass():
    X, y = _sparse_regression(n=2000, d=25, density=0.2, seed=4)
    for labels in ((y > np.median(y)).astype(int), np.digitize(y, np.quantile(y, [0.3, 0.7]))):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ro.SparseDensifyWarning)
            s = RiskClassifier(tol=1e-8).fit(X, labels)
        d = RiskClassifier(tol=1e-8).fit(X.toarray(), labels)
        # each fit is certified near the optimum of the dense problem through its own accuracy
        # (their predict_proba once differed by 1.2e-5 on an AVX-512 machine, within that
        # accuracy: l2_reg = 1e-4 lets a 1e-10 gap move the coefficients by ~1e-3)
        for est in (s, d):
            obj, W = certify.problem_of(est, X.toarray(), labels)
            certify.assert_certified(obj, W, rel=10 * est.tol, what=f"{est.solver_} fit")
        assert s.score(X, labels) > 0.7


def test_sparse_integer_sample_weights_repeat_rows():
    X, y = _sparse_regression(n=300, d=8, density=0.3)
    sw = np.random.default_rng(0).integers(0, 3, size=300)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ro.SparseDensifyWarning)
        s = RiskRegressor(risk="esrm:1", tol=1e-9).fit(X, y, sample_weight=sw)
    d = RiskRegressor(risk="esrm:1", tol=1e-9).fit(X.toarray(), y, sample_weight=sw)
    rows = np.repeat(np.arange(len(y)), sw)  # integer weights = repeated rows
    for est in (s, d):
        obj, W = certify.problem_of(est, X.toarray()[rows], y[rows])
        certify.assert_certified(obj, W, rel=10 * est.tol)


def test_sparse_paths_that_densify_say_so():
    X, y = _sparse_regression(n=80, d=6)
    with pytest.warns(ro.SparseDensifyWarning, match=r"RiskRegressor.fit \(risk .*solver 'prospect'"):
        RiskRegressor(risk="cvar:0.5,chi2=1", solver="prospect", max_iter=2, tol=None,
                      random_state=0).fit(X, y)
    with pytest.warns(ro.SparseDensifyWarning, match="densifies"):
        RiskRegressor(risk="cvar:0.5").fit(X, y, groups=np.arange(80) % 2)


@pytest.mark.slow  # 31 s warm (stop 37)
def test_sparse_fit_memory_is_order_nnz():
    # 20,000 x 20,000 at 1e-4 density: 40,000 stored values (under 1 MiB); a dense design
    # would take 3.2 GB, so any densification (or an n x d temporary) fails this bound
    n = d = 20_000
    X = sp.random(n, d, density=1e-4, random_state=0, format="csr")
    y = np.asarray(X.sum(axis=1)).ravel() + np.random.default_rng(0).normal(size=n)
    with warnings.catch_warnings():  # compile / load the kernels outside the traced part
        warnings.simplefilter("ignore")
        RiskRegressor(risk="esrm:1", max_iter=5).fit(X[:200, :50], y[:200])
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a ConvergenceWarning would not matter here
            est = RiskRegressor(risk="esrm:1", max_iter=50).fit(X, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert est.coef_.shape == (d,)
    assert peak < 40 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def _data_available():
    import riskopt.datasets as ds

    try:
        ds.load("mushrooms", test_size=0)
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _data_available(), reason="RISKOPT_DATA has no LIBSVM files")
def test_libsvm_loaders_give_csr_and_the_sparse_fit_matches_dense():
    import riskopt.datasets as ds

    sparse = ds.load("mushrooms", sparse=True)
    dense = ds.load("mushrooms")
    assert sp.issparse(sparse.X_train) and sparse.X_train.format == "csr"
    np.testing.assert_array_equal(sparse.X_train.toarray(), dense.X_train)
    np.testing.assert_array_equal(sparse.X_test.toarray(), dense.X_test)
    with pytest.raises(ValueError, match="standardize=True would make them dense"):
        ds.load("a9a", sparse=True, standardize=True)
    a9a = ds.load("a9a", sparse=True)
    assert a9a.X_train.shape == (32561, 123) and 0.1 < a9a.X_train.nnz / (32561 * 123) < 0.12
    with warnings.catch_warnings():
        warnings.simplefilter("error", ro.SparseDensifyWarning)
        s = RiskClassifier(risk="esrm:1").fit(sparse.X_train, sparse.y_train)
    d = RiskClassifier(risk="esrm:1").fit(dense.X_train, dense.y_train)
    assert s.score(sparse.X_test, sparse.y_test) == pytest.approx(
        d.score(dense.X_test, dense.y_test), abs=0.01)


@pytest.mark.parametrize("intercept", [True, False])
def test_sparse_column_scales_equal_the_dense_ones(intercept):
    # constant columns (all ones, all zeros) must get exactly s = 0 -> 1, not rounding noise
    from riskopt._scaling import _feature_scaling

    X, _ = _sparse_regression(n=500, d=6, density=0.3, scale=np.array([1, 1e-4, 1e4, 1, 1, 1]))
    X = X.tolil()
    X[:, 3] = 1.0
    X[:, 4] = 0.0
    X[:, 5] = 0.0
    X[7, 5] = 3.0
    X = X.tocsr()
    dense = X.toarray()
    m, s = _feature_scaling(X, intercept)
    m_dense, s_dense = _feature_scaling(dense, intercept)
    np.testing.assert_allclose(m, m_dense, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(s, s_dense, rtol=1e-12)
    assert s[3] == (1.0 if intercept else s_dense[3]) and s[4] == 1.0
    if intercept:  # the constant column is shifted to exactly 0
        assert m[3] == 1.0 and m[4] == 0.0


@pytest.mark.parametrize("n", [1, 2, 1000])
def test_column_stats_kernel_matches_numpy(n):
    """The numba column statistics behind the dense feature scaling (one kernel, two passes
    over the rows) equal NumPy's on float64 / float32, C / Fortran / strided designs."""
    from riskopt._kernels.stats import column_stats

    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, 5)) * np.logspace(-3, 3, 5) + np.linspace(-1e3, 1e3, 5)
    X[:, 2] = 7.0  # a constant column: exactly zero deviation
    for k, Z in enumerate((X, np.asfortranarray(X), np.hstack([X, X])[:, 3:8],
                           X.astype(np.float32))):
        Z64 = Z.astype(np.float64)
        for center in (True, False):
            m, ss, mx, mn = column_stats(Z, center)
            want_m = Z64.mean(axis=0) if center else np.zeros(5)
            np.testing.assert_allclose(m, want_m, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(ss, ((Z64 - want_m) ** 2).sum(axis=0), rtol=1e-9,
                                       atol=1e-9 * np.abs(Z64).max() ** 2 * n)
            np.testing.assert_array_equal(mx, Z64.max(axis=0))
            np.testing.assert_array_equal(mn, Z64.min(axis=0))
            if center and k < 2:
                assert ss[2] == 0.0  # the constant column (X and its Fortran copy)


# ------------------------------------------------------------------ operator designs
def _designs(seed=0):
    from riskopt._design import LinearDesign

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(300, 7)) * np.logspace(-2, 2, 7) + np.linspace(-5, 5, 7)
    m, s = X.mean(axis=0), X.std(axis=0)
    Xs = sp.random(300, 7, density=0.3, random_state=seed, format="csr")
    out = []
    for intercept in (True, False):
        out.append((LinearDesign(X, intercept, m, s), (X - m) / s, intercept))
        out.append((LinearDesign(X.astype(np.float32), intercept, m, s),
                    (X.astype(np.float32).astype(np.float64) - m) / s, intercept))
        out.append((LinearDesign(Xs, intercept, np.full(7, 0.1), np.full(7, 2.0)),
                    (Xs.toarray() - 0.1) / 2.0, intercept))
        out.append((LinearDesign(X, intercept), X, intercept))
    return [(D, np.hstack([A, np.ones((300, 1))]) if b else A) for D, A, b in out]


@pytest.mark.parametrize("k", range(8))
def test_linear_design_equals_its_materialised_twin(k, monkeypatch):
    import riskopt._design as _d

    monkeypatch.setattr(_d, "BLOCK_ROWS", 64)  # several blocks for the float32 path
    D, A = _designs()[k]
    rng = np.random.default_rng(k)
    W = rng.normal(size=(A.shape[1], 3))
    G = rng.normal(size=(300, 3))
    assert D.shape == A.shape
    np.testing.assert_allclose(D @ W, A @ W, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(D @ W[:, 0], A @ W[:, 0], rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(D.T @ G, A.T @ G, rtol=1e-11, atol=1e-10)
    np.testing.assert_allclose(D.T @ G[:, 0], A.T @ G[:, 0], rtol=1e-11, atol=1e-10)
    np.testing.assert_allclose(D[[3, 17, 250]], A[[3, 17, 250]], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(D[5], A[5], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(D.row_sq_norms(), np.einsum("ij,ij->i", A, A), rtol=1e-10)
    np.testing.assert_allclose(D.materialize(), A, rtol=1e-13, atol=1e-13)


# one fit of 100,000 x 40 per case (~3-4 s each); the default path (Newton, float64) stays in
# the default suite, the other three cases are run by `make test-slow`
@pytest.mark.parametrize("solver,dtype", [
    ("auto", np.float64),
    pytest.param("auto", np.float32, marks=pytest.mark.slow),
    pytest.param("lbfgs", np.float64, marks=pytest.mark.slow),
    pytest.param("lbfgs", np.float32, marks=pytest.mark.slow)])
def test_estimator_full_batch_fit_does_not_copy_x(solver, dtype):
    # the default full-batch path takes X through a LinearDesign: no float64 design is built
    rng = np.random.default_rng(0)
    n, d = 100_000, 40
    X = rng.normal(size=(n, d)) * np.logspace(-3, 3, d) + 0.1  # not standardised: scaled
    y = X @ (rng.normal(size=d) / np.logspace(-3, 3, d)) + rng.normal(size=n)
    RiskRegressor(risk="esrm:1", max_iter=3, tol=None).fit(X[:500], y[:500])  # warm-up
    # L-BFGS: a few n-vectors; Newton (the default): its ~20 working n-vectors (losses,
    # derivatives, weights, trial point, sort scratch) and p x p blocks, still no copy of X
    limit = {"lbfgs": 0.5 * X.nbytes, "auto": 0.5 * X.nbytes + 20 * 8 * n}[solver]
    data = X if dtype == np.float64 else X.astype(dtype)
    tracemalloc.start()
    try:
        est = RiskRegressor(risk="esrm:1", max_iter=30, tol=None, solver=solver).fit(data, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit, f"{solver} {data.dtype}: peak {peak / X.nbytes:.2f} x X"
    assert est.score(data, y) > 0.8


def test_operator_design_falls_back_to_the_exact_copy_for_large_offsets():
    from riskopt._scaling import _feature_scaling, _operator_design

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    X[:, 1] = 1.7e18 + 1e9 * X[:, 1]  # nanosecond timestamps: |m| / s ~ 1e9
    design, scaling = _operator_design(X, _feature_scaling(X, True), True)
    assert design is None and scaling is not None
    design, scaling = _operator_design(sp.csr_matrix(X), _feature_scaling(X, True), True)
    assert design is not None and not np.any(scaling[0])  # sparse: scaled only


def test_stochastic_solver_materialises_an_operator_design(monkeypatch):
    # solver="auto" may switch to SOREL (AUTO_LBFGS_MAX_SIZE): the rows are built once then
    import riskopt.estimators as est_mod

    monkeypatch.setattr(est_mod, "AUTO_LBFGS_MAX_SIZE", 10)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 5)) * 10 + 3
    y = X @ rng.normal(size=5) + rng.normal(size=400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = RiskRegressor(risk="esrm:1", random_state=0, max_iter=50).fit(X, y)
    assert est.solver_ == "sorel" and est.score(X, y) > 0.9


def test_constant_columns_with_rounding_noise_do_not_pin_the_fit():
    # a column made constant by a loader's standardisation holds values like 1.7e-15 whose
    # computed std is 1e-16 (not 0): it used to get l2 ~ 1e28 and the classifier the zero model
    from riskopt._scaling import _feature_scaling

    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 4)) * np.array([100.0, 1.0, 1.0, 1.0])
    X[:, 1] = -1.7320508075688772e-15  # constant, with a mean that does not round back
    X[:, 2] = 0.1
    y = (X[:, 0] + 0.3 * X[:, 3] > 0).astype(int)
    m, s = _feature_scaling(X, True)
    assert s[1] == 1.0 and s[2] == 1.0 and m[1] == X[0, 1] and m[2] == 0.1
    for data in (X, sp.csr_matrix(X)):
        clf = RiskClassifier().fit(data, y)
        assert clf.score(data, y) > 0.95
