"""The exact crossover of the Newton solver for box spectra (CVaR at shift cost 0).

* From the first continuation stage's point, the window SQP (``box_newton``) reaches cvxpy's
  optimum on small random CVaR problems (squared and logistic losses, with and without an
  intercept), with a certified lower bound that stays below cvxpy's optimum.
* The window model's active-set solver (``_model_qp``) satisfies the KKT conditions of its
  box-constrained dual, checked against a brute-force cvxpy solve of the same model.
* A wrong guess (a window that misses the tie set, no growth) is not certified, and
  :func:`newton` then goes on with the continuation to the same optimum.
* A crossover whose model gets stuck is not retried; a continuation stage ended early (the
  ``accept`` rule) is solved again when its certificate misses ``accept``.
* The numba kernel of the model QP agrees with its pure-NumPy twin (below).
* On a small design the crossover runs first from the ridge start (no stage), certified at
  cvxpy's optimum; uncertified, it hands its bound and point to the stages.
"""
import numpy as np
import pytest

import riskopt as ro
from riskopt.objectives import _crossover as xc
from riskopt.objectives import _newton as nt

from test_degenerate import cvxpy_spectral_minimum, data

cp = pytest.importorskip("cvxpy")


def _obj(loss, tail, fit_intercept, seed, n=50, d=3):
    X, y = data(loss, n, d, seed)
    return ro.Objective(loss, ro.CVaR(tail), X, y, l2_reg=1.0 / n, fit_intercept=fit_intercept)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("tail,seed", [(0.1, 1), (0.25, 2), (0.37, 3), (0.6, 4)])
def test_crossover_matches_cvxpy_and_its_bound_is_below_the_optimum(loss, fit_intercept,
                                                                    tail, seed):
    obj = _obj(loss, tail, fit_intercept, seed)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    tol = 5e-8 if loss == "logistic" else 1e-9  # cvxpy's exponential cone is less accurate
    stage1 = nt.newton(obj, obj.zeros(), rtol=1e-8, accept=1.0, max_iter=200)
    out = xc.box_newton(obj, stage1["coef"], accept=1e-12)
    assert out is not None
    assert out["value"] - out["bound"] <= 1e-12 * abs(out["value"])  # exact, certified
    assert abs(out["value"] - v_cvx) <= tol * abs(v_cvx), (out["value"], v_cvx)
    assert out["bound"] <= v_cvx + tol * abs(v_cvx)
    assert out["value"] == pytest.approx(obj.value(out["coef"]), rel=1e-14)
    q = out["q"]  # a valid dual point: in the box, total 1
    assert q.min() >= obj.sigma[0] and q.max() <= obj.sigma[-1]
    assert q.sum() == pytest.approx(1.0, abs=1e-14)
    # and newton() ends with it
    res = nt.newton(obj, obj.zeros(), rtol=1e-12)
    assert res["converged"] and abs(res["value"] - v_cvx) <= tol * abs(v_cvx)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_crossover_reaches_the_optimum_on_every_kind_of_design(loss):
    """The window model built in one pass over the rows (``_kernels.crossover.window_rows``:
    a dense design, or the estimators' implicit ``[(X - m) / s, 1]`` over one) and by NumPy
    (a sparse design) lead to the same optimum, cvxpy's, each certified by its own bound."""
    import scipy.sparse as sp

    from riskopt._design import LinearDesign

    X, y = data(loss, 60, 3, 5)
    m, s = np.array([3.0, -1.0, 0.5]), np.array([2.0, 0.5, 4.0])
    designs = {"dense": (X, True), "sparse": (sp.csr_matrix(X), False),
               "standardised": (LinearDesign(X * s + m, True, m, s), True)}
    dense = ro.Objective(loss, ro.CVaR(0.2), X, y, l2_reg=1.0 / 60, fit_intercept=True)
    _, v_cvx = cvxpy_spectral_minimum(dense)
    tol = 5e-8 if loss == "logistic" else 1e-9
    for name, (D, fused) in designs.items():
        obj = ro.Objective(loss, ro.CVaR(0.2), D, y, l2_reg=1.0 / 60, fit_intercept=True)
        assert (xc._dense_rows(obj.X) is not None) == fused, name
        stage1 = nt.newton(obj, obj.zeros(), rtol=1e-8, accept=1.0, max_iter=200)
        out = xc.box_newton(obj, stage1["coef"], accept=1e-12)
        assert out["value"] - out["bound"] <= 1e-12 * abs(out["value"]), name
        assert abs(out["value"] - v_cvx) <= tol * abs(v_cvx), (name, out["value"], v_cvx)
        assert out["bound"] <= v_cvx + tol * abs(v_cvx), name
        # the returned predictions and weights are those of the returned point
        np.testing.assert_array_equal(out["z"], np.asarray(obj.X @ out["coef"]).ravel())
        R, q = obj.risk_weights(obj.losses(out["coef"]))
        assert out["value"] == pytest.approx(R + obj._reg_value(out["coef"].reshape(-1, 1)),
                                             rel=1e-14)
        np.testing.assert_array_equal(out["weights"], q)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_crossover_bound_is_a_lower_bound_from_poor_starts(loss):
    """One SQP step from arbitrary points: whatever the step, the returned bound (that of a
    valid dual point) never exceeds the optimum."""
    obj = _obj(loss, 0.2, True, 7, n=40)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    rng = np.random.default_rng(0)
    for scale in (0.0, 0.1, 1.0, 3.0):
        for _ in range(3):
            W = rng.normal(scale=scale, size=obj.p)
            for half in (2, 5, None):
                out = xc.box_newton(obj, W, accept=1e-12, max_outer=1, half=half)
                if out is None or out["q"] is None:
                    continue
                assert out["bound"] <= v_cvx + 1e-7 * abs(v_cvx)
                assert out["value"] >= v_cvx - 1e-7 * abs(v_cvx)


def test_model_qp_solves_the_window_model():
    """``_model_qp`` against cvxpy on the model's dual ``min 1/2 |c + C q|^2 - l'q`` over the
    box with a fixed total, including duplicated columns (repeated rows of the data)."""
    rng = np.random.default_rng(3)
    for trial in range(6):
        p, N = 4, 30
        C = rng.normal(size=(p, N))
        if trial % 2:
            C[:, 5] = C[:, 6]  # a duplicated sample
        c = rng.normal(size=p)
        l_w = rng.normal(size=N)
        if trial % 2:
            l_w[5] = l_w[6]
        lo, hi = 0.0, 0.1
        m = 1.3
        q0 = np.zeros(N)
        q0[np.argsort(-l_w)[:13]] = hi
        u, q, ok, t = xc._model_qp(C, c, l_w, q0, lo, hi, m)
        assert ok
        qv = cp.Variable(N)
        prob = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(c + C @ qv) - l_w @ qv),
                          [qv >= lo, qv <= hi, cp.sum(qv) == m])
        prob.solve(solver="CLARABEL")
        val = 0.5 * np.sum((c + C @ q) ** 2) - l_w @ q
        assert val <= prob.value + 1e-9
        assert q.min() >= lo and q.max() <= hi and q.sum() == pytest.approx(m, abs=1e-12)
        np.testing.assert_allclose(u, -(c + C @ q), atol=1e-12)


def test_wrong_guess_is_not_certified_and_newton_falls_back(monkeypatch):
    """A window of 2 samples that may not grow misses the tie set: the crossover's point is
    not certified, ``newton`` keeps continuing (more steps, no ``crossover`` bound) and ends
    at the optimum all the same."""
    obj = _obj("squared", 0.3, True, 11, n=80, d=4)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    stage1 = nt.newton(obj, obj.zeros(), rtol=1e-8, accept=1.0, max_iter=200)
    monkeypatch.setattr(xc, "MAX_GROW", 0)
    bad = xc.box_newton(obj, stage1["coef"], accept=1e-10, half=1, max_outer=1)
    assert bad["value"] - bad["bound"] > 1e-10 * abs(bad["value"])
    calls = []
    real = xc.box_newton

    def narrow(*args, **kwargs):
        out = real(*args, **{**kwargs, "half": 1, "max_outer": 1})
        calls.append(out["value"] - out["bound"])
        return out

    monkeypatch.setattr(xc, "box_newton", narrow)
    res = nt.newton(obj, obj.zeros(), rtol=1e-10)
    assert calls and calls[0] > 1e-10 * abs(res["value"])
    assert res["dual_nu"] != "crossover"
    assert abs(res["value"] - v_cvx) <= 1e-8 * abs(v_cvx)
    assert res["bound"] <= v_cvx + 1e-9 * abs(v_cvx)
    monkeypatch.setattr(xc, "box_newton", real)
    good = nt.newton(obj, obj.zeros(), rtol=1e-10)
    assert good["dual_nu"] == "crossover" and good["n_iter"] < res["n_iter"]
    assert abs(good["value"] - v_cvx) <= 1e-9 * abs(v_cvx)


def test_stuck_crossover_is_not_retried(monkeypatch):
    """A model solve that does not finish (as on adult CVaR 0.1, where w* = 0 ties every loss)
    ends the crossover tries of the run; the continuation still reaches the optimum."""
    obj = _obj("logistic", 0.3, True, 5, n=80, d=4)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    calls = []
    real = xc._model_qp

    def stuck(*args, **kwargs):
        calls.append(1)
        u, q, _, t = real(*args, **kwargs)
        return u, q, False, t

    monkeypatch.setattr(xc, "_model_qp", stuck)
    res = nt.newton(obj, obj.zeros(), rtol=1e-9, accept=1e-6)
    assert res["dual_nu"] != "crossover" and res["rel_gap"] <= 1e-6
    assert len(calls) <= 2  # the early try and one stage-end try
    assert res["bound"] <= v_cvx + 5e-8 * abs(v_cvx)


@pytest.mark.parametrize("risk", [ro.ESRM(1.0), ro.Extremile(2.0), ro.CVaR(0.2)], ids=str)
def test_a_stage_ended_early_is_solved_again_when_not_certified(monkeypatch, risk):
    """``STAGE_DEC_PER_ACCEPT`` ends a stage after any full step when huge: a stage whose
    certificate then misses ``accept`` is solved again to the gradient test, so the run is
    still certified within ``accept`` (compas CVaR 0.1 and extremile 2 stalled at 1.2e-6 /
    5.7e-6 and fell back to L-BFGS before this)."""
    X, y = data("logistic", 40, 3, 9)
    obj = ro.Objective("logistic", risk, X, y, l2_reg=1e-3, fit_intercept=True)
    monkeypatch.setattr(nt, "STAGE_DEC_PER_ACCEPT", 1e12)
    res = nt.newton(obj, obj.zeros(), rtol=1e-10, accept=1e-8)
    assert res["rel_gap"] <= 1e-8, res["message"]
    _, v_cvx = cvxpy_spectral_minimum(obj)
    assert abs(res["value"] - v_cvx) <= 5e-8 * abs(v_cvx)


def _model_qp_twin(C, c, l_w, q, lo, hi, m, max_iter=None):
    """Pure-NumPy twin of :func:`riskopt._kernels.crossover.model_qp`."""
    p, N = C.shape
    q = np.clip(np.asarray(q, dtype=np.float64).copy(), lo, hi)
    free = (q > lo) & (q < hi)
    max_iter = 10 * N + 100 if max_iter is None else max_iter
    scale = max(1.0, float(np.max(np.abs(l_w))))
    t = np.nan
    u = -(c + C @ q)
    v = None  # the window's linearised losses l_w + C'u, when up to date
    for _ in range(max_iter):
        F = np.flatnonzero(free)
        k = len(F)
        if k == 0:
            if v is None:
                v = l_w + C.T @ u  # a vertex: the threshold lies between the bottom's top and the top's bottom
            at_lo, at_hi = np.flatnonzero(q <= lo), np.flatnonzero(q >= hi)
            vlo = float(v[at_lo].max()) if len(at_lo) else -np.inf
            vhi = float(v[at_hi].min()) if len(at_hi) else np.inf
            if vlo <= vhi + 1e-12 * scale:
                t = 0.5 * (vlo + vhi) if np.isfinite(vlo + vhi) else min(vlo, vhi)
                return u, q, True, float(t)
            free[at_lo[np.argmax(v[at_lo])]] = True
            free[at_hi[np.argmin(v[at_hi])]] = True
            continue
        CF = C[:, F]
        vF = l_w[F] + CF.T @ u
        Kt = np.empty((k + 1, k + 1))
        Kt[:k, :k] = CF.T @ CF
        Kt[:k, k] = Kt[k, :k] = 1.0
        Kt[k, k] = 0.0
        # the free weights' optimum with the others fixed: [C_F'C_F 1; 1' 0] [q_F; t] =
        # [l_F - C_F'(c + C q - C_F q_F); m_F] (the step is relative to the current q_F)
        rhs = np.concatenate([vF, [m - float(q.sum())]])  # at d = 0: residual of q_F
        try:
            sol = np.linalg.solve(Kt, rhs)
        except np.linalg.LinAlgError:
            sol = np.full(k + 1, np.nan)
        if not np.all(np.isfinite(sol)) or np.max(np.abs(Kt @ sol - rhs)) > 1e-9 * (
                np.max(np.abs(rhs)) + 1e-300):  # singular (duplicated samples): least squares
            sol = np.linalg.lstsq(Kt, rhs, rcond=1e-12)[0]
        resid = Kt @ sol - rhs
        if np.max(np.abs(resid)) <= 1e-9 * (np.max(np.abs(rhs)) + 1e-300) + 1e-14 * scale:
            d, t = sol[:k], sol[k]
        else:  # unbounded along a null direction of [C_F; 1']: l_F projected on it
            A = np.vstack([CF, np.ones((1, k))])
            _, sv, Vt = np.linalg.svd(A, full_matrices=True)
            r = int(np.count_nonzero(sv > 1e-12 * sv[0]))
            Vn = Vt[r:]
            d = Vn.T @ (Vn @ vF)
            if not np.any(d):
                return u, q, False, float(t)
            d *= 1e6 * (hi - lo) / float(np.max(np.abs(d)))  # long: the ratio test cuts it
        qF = q[F]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(d > 0, (hi - qF) / d, np.where(d < 0, (lo - qF) / d, np.inf))
        j = int(np.argmin(ratio))
        alpha = float(ratio[j])
        if alpha < 1.0:
            q[F] = np.clip(qF + alpha * d, lo, hi)
            q[F[j]] = hi if d[j] > 0 else lo
            free[F[j]] = False
            u -= CF @ (q[F] - qF)
            v = None
            continue
        q[F] = np.clip(qF + d, lo, hi)
        # the free set's optimum: the fixed samples' multipliers (sides of t)
        u = -(c + C @ q)
        v = l_w + C.T @ u
        tol = 1e-12 * max(scale, abs(t))
        viol = np.where(~free & (q <= lo), v - t, np.where(~free & (q >= hi), t - v, 0.0))
        i = int(np.argmax(viol))
        if viol[i] <= tol:
            return u, q, True, float(t)
        free[i] = True  # one at a time (releasing several at once cycled on degenerate steps)
    u = -(c + C @ q)
    return u, q, False, float(t)




def test_model_qp_kernel_matches_its_twin():
    rng = np.random.default_rng(8)
    for trial in range(8):
        p, N = 5, 40
        C = rng.normal(size=(p, N))
        if trial % 2:
            C[:, 3] = C[:, 4]
        c = rng.normal(size=p)
        l_w = rng.normal(size=N)
        if trial % 2:
            l_w[3] = l_w[4]
        lo, hi = (0.0, 0.07) if trial % 3 else (0.01, 0.05)
        k = int((1.1 - N * lo) // (hi - lo))
        q0 = np.full(N, lo)
        q0[np.argsort(-l_w)[:k]] = hi
        m = q0.sum()
        u1, q1, ok1, t1 = xc._model_qp(C, c, l_w, q0, lo, hi, m)
        u2, q2, ok2, t2 = _model_qp_twin(C, c, l_w, q0, lo, hi, m)
        assert ok1 and ok2
        # u (the strongly convex primal's minimiser) and the dual value are unique; q need
        # not be (C'C has rank p), and ties in the ratio test may be broken differently
        np.testing.assert_allclose(u1, u2, rtol=1e-9, atol=1e-12)
        dual = [0.5 * np.sum((c + C @ qq) ** 2) - l_w @ qq for qq in (q1, q2)]
        assert dual[0] == pytest.approx(dual[1], rel=1e-10, abs=1e-12)
        # the kernel's KKT conditions: free samples at t, the others on their side of it
        v = l_w + C.T @ u1
        free = (q1 > lo) & (q1 < hi)
        assert np.all(np.abs(v[free] - t1) <= 1e-10)
        assert np.all(v[q1 <= lo] <= t1 + 1e-10) and np.all(v[q1 >= hi] >= t1 - 1e-10)
        assert q1.sum() == pytest.approx(m, abs=1e-12)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_certify_last_certifies_only_the_last_model_solve(loss, monkeypatch):
    """``certify_last`` (the Newton solver's early crossover): one ``dual_bound`` for two
    model solves, and the second point is certified at cvxpy's optimum through its own
    bound."""
    from riskopt.objectives import _dual

    obj = _obj(loss, 0.25, True, 2, n=200)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    tol = 5e-8 if loss == "logistic" else 1e-9
    stage1 = nt.newton(obj, obj.zeros(), rtol=1e-8, accept=1.0, max_iter=200)
    calls = []
    real = _dual.dual_bound
    monkeypatch.setattr(_dual, "dual_bound", lambda *a: calls.append(1) or real(*a))
    outs = []
    for last in (False, True):
        calls.clear()
        outs.append(xc.box_newton(obj, stage1["coef"], accept=0.0, max_outer=2, max_grow=0,
                                  certify_last=last))
        assert outs[-1]["steps"] == 2 and len(calls) == (1 if last else 2)
    a, b = outs  # the second point is the same: b is it, a the better certified of two
    assert b["value"] == pytest.approx(obj.value(b["coef"]), rel=1e-14)
    assert a["value"] - a["bound"] <= b["value"] - b["bound"]
    assert b["value"] - b["bound"] <= tol * abs(v_cvx)
    assert b["bound"] <= v_cvx + tol * abs(v_cvx) and abs(b["value"] - v_cvx) <= tol * abs(v_cvx)


def test_small_kkt_solve_matches_lapack_and_flags_singular_systems():
    """``_solve_small`` (the model QP's KKT systems below ``SMALL_KKT`` unknowns): the
    solution of LAPACK to rounding on KKT-shaped systems (a zero diagonal entry: pivoting),
    NaNs for an exactly singular one (duplicated columns)."""
    from riskopt._kernels import crossover as kc

    rng = np.random.default_rng(4)
    for k in range(1, kc.SMALL_KKT):
        CF = rng.standard_normal((k + 3, k))
        K = np.zeros((k + 1, k + 1))
        K[:k, :k] = CF.T @ CF
        K[:k, k] = K[k, :k] = 1.0
        rhs = rng.standard_normal(k + 1)
        x = kc._solve_small(K, rhs)
        np.testing.assert_allclose(K @ x, rhs, rtol=0, atol=1e-9 * np.abs(rhs).max())
        np.testing.assert_allclose(x, np.linalg.solve(K, rhs), rtol=1e-6, atol=1e-9)
    K = np.ones((3, 3))
    assert np.all(np.isnan(kc._solve_small(K, np.ones(3))))


def _spy(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


@pytest.mark.parametrize("tail", [0.05, 0.2, 0.6])
def test_a_small_design_takes_the_crossover_first_from_the_ridge_start(tail, monkeypatch):
    """``XO_FIRST_WINDOW_SHARE``: the squared loss from ``w = 0`` with the ridge start on a
    design whose window holds most samples runs the crossover before any smoothed stage (no
    stage Hessian formed), and its point is certified at cvxpy's optimum through its own
    bound; with the rule off, the stages reach the same optimum in more steps."""
    obj = _obj("squared", tail, True, 21, n=300, d=4)
    assert xc.window_share(obj) >= nt.XO_FIRST_WINDOW_SHARE
    _, v_cvx = cvxpy_spectral_minimum(obj)
    tol = 1e-9
    hess = _spy(monkeypatch, nt, "_smoothed_hessian")
    res = nt.newton(obj, obj.zeros(), rtol=1e-10, mean_start=True)
    assert res["converged"] and res["dual_nu"] == "crossover" and not hess
    assert res["n_iter"] <= 1 + xc.MAX_OUTER
    assert res["bound"] <= v_cvx + tol * abs(v_cvx)
    assert res["value"] - res["bound"] <= 1e-10 * abs(res["value"])
    assert abs(res["value"] - v_cvx) <= tol * abs(v_cvx)
    monkeypatch.setattr(nt, "XO_FIRST_WINDOW_SHARE", 2.0)  # (a share is at most 1: off)
    off = nt.newton(obj, obj.zeros(), rtol=1e-10, mean_start=True)
    assert off["converged"] and hess and off["n_iter"] >= res["n_iter"]
    assert abs(off["value"] - v_cvx) <= tol * abs(v_cvx)


@pytest.mark.parametrize("n,d", [(3000, 3), (400, 60)])
def test_a_large_design_keeps_the_stages_first(n, d, monkeypatch):
    """The window of a design with many samples per column is a small share of them, and a
    wide design's model solves cost more than its Newton steps: the stages run first (the
    crossover-first rule does not apply)."""
    obj = _obj("squared", 0.1, True, 22, n=n, d=d)
    assert (xc.window_share(obj) < nt.XO_FIRST_WINDOW_SHARE
            or obj.p > nt.XO_FIRST_MAX_COLUMNS)
    hess = _spy(monkeypatch, nt, "_smoothed_hessian")
    res = nt.newton(obj, obj.zeros(), rtol=1e-10, mean_start=True)
    assert res["converged"] and hess


def test_an_uncertified_crossover_first_hands_its_point_to_the_stages(monkeypatch):
    """A crossover-first that misses the goal (one model solve allowed) keeps its valid bound
    and its point (lower ``F`` than the ridge start) for the stages, which end at cvxpy's
    optimum, certified."""
    obj = _obj("squared", 0.2, True, 23, n=300, d=4)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    real = xc.box_newton
    seen = []

    def one_solve(*args, **kwargs):
        out = real(*args, **{**kwargs, "max_outer": 1})
        seen.append(out)
        return out

    monkeypatch.setattr(xc, "box_newton", one_solve)
    starts = []
    real_hessian = nt._smoothed_hessian

    def hessian(stage, z, *args, **kwargs):
        starts.append(z.copy())
        return real_hessian(stage, z, *args, **kwargs)

    monkeypatch.setattr(nt, "_smoothed_hessian", hessian)
    res = nt.newton(obj, obj.zeros(), rtol=1e-10, mean_start=True)
    first = seen[0]
    assert first["steps"] == 1
    assert first["value"] - first["bound"] > 1e-10 * abs(first["value"])  # not certified
    assert first["bound"] <= v_cvx + 1e-9 * abs(v_cvx)
    ridge = nt._mean_start(obj, obj.zeros(), np.zeros(obj.n))[0]
    assert first["value"] < obj.value(ridge)  # it lowered F: the stages start at its point
    np.testing.assert_allclose(starts[0], first["z"], rtol=1e-12, atol=1e-12)
    assert res["converged"] and abs(res["value"] - v_cvx) <= 1e-9 * abs(v_cvx)
    assert res["bound"] <= v_cvx + 1e-9 * abs(v_cvx)


def test_certify_from_skips_the_certificates_of_the_first_points(monkeypatch):
    """``certify_from`` (the crossover-first of a small design): the same model solves and
    points, one ``dual_bound`` less for ``certify_from=2``; the last point is certified at
    cvxpy's optimum through its own bound."""
    from riskopt.objectives import _dual

    obj = _obj("squared", 0.25, True, 2, n=200)
    _, v_cvx = cvxpy_spectral_minimum(obj)
    W, z = nt._mean_start(obj, obj.zeros(), np.zeros(obj.n))
    calls = []
    real = _dual.dual_bound
    monkeypatch.setattr(_dual, "dual_bound", lambda *a: calls.append(1) or real(*a))
    outs = []
    for first in (1, 2):
        calls.clear()
        outs.append(xc.box_newton(obj, W, z, accept=0.0, max_outer=3, max_grow=0,
                                  certify_from=first))
        assert outs[-1]["steps"] == 3 and len(calls) == (3 if first == 1 else 2)
    a, b = outs
    assert b["value"] == pytest.approx(obj.value(b["coef"]), rel=1e-14)
    assert a["value"] - a["bound"] <= b["value"] - b["bound"]
    assert b["value"] - b["bound"] <= 1e-9 * abs(v_cvx)
    assert b["bound"] <= v_cvx + 1e-9 * abs(v_cvx)
