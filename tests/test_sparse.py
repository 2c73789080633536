"""Sparse X (issue 16, part 2): the spectral family keeps a CSR design (O(nnz) memory) and the
full-batch L-BFGS solves it to the dense optimum; every other path densifies with a
SparseDensifyWarning or refuses with a clear error."""
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

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
    r1 = ro.solvers.LBFGS(tol=1e-10, polish_ties=False).run(obj)
    r2 = ro.solvers.LBFGS(tol=1e-10, polish_ties=False).run(dense)
    assert r1.value == pytest.approx(r2.value, rel=1e-9, abs=1e-12)


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
    assert s.solver_ == "lbfgs"
    obj = ro.Objective("squared", s.risk_, X.toarray(), y, l2_reg=s.l2_reg, fit_intercept=True)
    fs = obj.value(np.append(s.coef_, s.intercept_))
    fd = obj.value(np.append(d.coef_, d.intercept_))
    assert fs == pytest.approx(fd, rel=1e-6)
    np.testing.assert_allclose(s.predict(X), d.predict(X.toarray()), rtol=1e-3, atol=1e-3)


def test_classifier_sparse_binary_and_multiclass():
    X, y = _sparse_regression(n=2000, d=25, density=0.2, seed=4)
    for labels in ((y > np.median(y)).astype(int), np.digitize(y, np.quantile(y, [0.3, 0.7]))):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ro.SparseDensifyWarning)
            s = RiskClassifier(tol=1e-8).fit(X, labels)
        d = RiskClassifier(tol=1e-8).fit(X.toarray(), labels)
        np.testing.assert_allclose(s.predict_proba(X), d.predict_proba(X.toarray()),
                                   atol=1e-5)
        assert s.score(X, labels) > 0.7


def test_sparse_integer_sample_weights_repeat_rows():
    X, y = _sparse_regression(n=300, d=8, density=0.3)
    sw = np.random.default_rng(0).integers(0, 3, size=300)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ro.SparseDensifyWarning)
        s = RiskRegressor(risk="esrm:1", tol=1e-9).fit(X, y, sample_weight=sw)
    d = RiskRegressor(risk="esrm:1", tol=1e-9).fit(X.toarray(), y, sample_weight=sw)
    np.testing.assert_allclose(s.coef_, d.coef_, rtol=1e-4, atol=1e-6)


def test_sparse_paths_that_densify_say_so():
    X, y = _sparse_regression(n=80, d=6)
    with pytest.warns(ro.SparseDensifyWarning, match=r"RiskRegressor.fit \(risk .*solver 'prospect'"):
        RiskRegressor(risk="cvar:0.5,chi2=1", solver="prospect", max_iter=2, tol=None,
                      random_state=0).fit(X, y)
    with pytest.warns(ro.SparseDensifyWarning, match="densifies"):
        RiskRegressor(risk="cvar:0.5").fit(X, y, groups=np.arange(80) % 2)


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
    _, s_dense = _feature_scaling(dense, intercept)
    assert not np.any(m)
    np.testing.assert_allclose(s, s_dense, rtol=1e-12)
    assert s[3] == (1.0 if intercept else s_dense[3]) and s[4] == 1.0
