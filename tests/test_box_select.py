"""The box oracle by selection (CVaR / ``MaxLoss`` with a chi-square or KL shift cost, no sort).

``riskopt._kernels.oracle_select.box_select_weights`` finds the one scalar of the maximiser
(chi2: ``q_i = clip((l_i - t) / A, 0, c)``; KL: ``q_i = min(c, exp((l_i - m) / nu))``) by a few
counting passes. Checked against the sorting oracle (stable argsort + PAV) and its NumPy twin on
continuous, tied, offset and few-valued losses over six decades of ``nu``, and against an
independent convex solver (cvxpy, CLARABEL): its solution may not beat ours beyond the solver's
own tolerance, and ours is feasible to rounding.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import riskopt as ro
from riskopt._kernels import oracle_select as osel
from riskopt._kernels import oracles as ko
from reference_impl import oracles as tw

EPS = np.finfo(float).eps


def losses_of(rng, n, kind):
    l = rng.standard_normal(n) ** 2 * float(rng.choice([1e-3, 1.0, 30.0]))
    if kind == "ties":
        l = np.round(l, 1)
    elif kind == "few":                       # a handful of values: long ties at every cut
        l = rng.integers(0, 4, size=n).astype(float)
    elif kind == "offset":                    # a common offset costs no precision
        l = l + 1e4
    return np.ascontiguousarray(l)


def box_and_sort(l, risk):
    n = len(l)
    sigma = np.ascontiguousarray(risk.spectrum(n))
    nu, div = float(risk.shift_cost), risk.div_code
    plan = ko.selection_plan(sigma)
    q, q_sort = np.empty(n), np.empty(n)
    v = osel.box_select_weights(l, sigma, plan, nu, div, q)
    v_sort = ko._risk_weights_ordered(l, np.argsort(l, kind="mergesort"), sigma, nu, div,
                                      q_sort)
    return v, q, v_sort, q_sort, sigma


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80),
       kind=st.sampled_from(["continuous", "ties", "few", "offset"]),
       alpha=st.sampled_from([0.01, 0.1, 0.25, 0.5, 0.77, 1.0, None]),
       log_nu=st.integers(-3, 3), div=st.sampled_from(["chi2", "kl"]))
def test_box_select_equals_the_sorting_oracle(seed, n, kind, alpha, log_nu, div):
    rng = np.random.default_rng(seed)
    l = losses_of(rng, n, kind)
    nu = 10.0 ** log_nu
    risk = (ro.MaxLoss(shift_cost=nu, divergence=div) if alpha is None
            else ro.CVaR(alpha, shift_cost=nu, divergence=div))
    v, q, v_sort, q_sort, sigma = box_and_sort(l, risk)
    box = osel.box_of(sigma, ko.selection_plan(sigma))
    if n < 2 or box is None or (div == "kl" and np.ptp(l) / nu > osel.KL_MAX_RANGE):
        assert v is None                      # declined: the caller sorts
        return
    if v is None:     # the legitimate declines: the scalar form cannot resolve the weights
        if div == "chi2":
            assert not osel.chi2_resolves(np.ptp(l), 2 * n * nu)
        else:         # the caps take all the mass in rounding (e^(-range / nu) < eps)
            assert np.ptp(l) / nu > 30
        return
    np.testing.assert_allclose(q, q_sort, rtol=0, atol=1e-12)
    if kind != "offset":       # the twin is not translation invariant: l - 1e4 in its sums
        np.testing.assert_allclose(q, tw.weights(l, sigma, nu, div), rtol=0, atol=1e-12)
    for u in np.unique(l):
        assert np.ptp(q[l == u]) <= 1e-15 * max(1.0, q[l == u].max())   # one weight per tie
    # both values carry the rounding of their sums and of nu D(q) (nu log n per term)
    tol = 8 * n * EPS * (abs(v_sort) + np.ptp(l) + 1.0 + nu * (1.0 + np.log(n)))
    assert abs(v - v_sort) <= tol, (v, v_sort)


@pytest.mark.parametrize("div", ["chi2", "kl"])
@pytest.mark.parametrize("kind", ["continuous", "few"])
def test_box_select_is_optimal_against_cvxpy(div, kind):
    cp = pytest.importorskip("cvxpy")
    rng = np.random.default_rng(7 if kind == "few" else 3)
    n, nu, alpha = 300, 0.2, 0.3
    l = (rng.integers(0, 4, size=n).astype(float) if kind == "few"
         else rng.standard_normal(n) ** 2)
    risk = ro.CVaR(alpha, shift_cost=nu, divergence=div)
    sigma = np.ascontiguousarray(risk.spectrum(n))
    c = sigma.max()
    q = np.empty(n)
    assert osel.box_select_weights(l, sigma, ko.selection_plan(sigma), nu, risk.div_code,
                                   q) is not None

    def objective(p):
        p = np.maximum(p, 0.0)
        if div == "chi2":
            return p @ l - nu * n * np.sum((p - 1.0 / n) ** 2)
        return p @ l - nu * np.sum(p[p > 0] * np.log(n * p[p > 0]))

    x = cp.Variable(n)
    pen = (nu * n * cp.sum_squares(x - 1.0 / n) if div == "chi2"
           else nu * cp.sum(-cp.entr(x)) + nu * np.log(n))
    prob = cp.Problem(cp.Maximize(x @ l - pen), [x >= 0, x <= c, cp.sum(x) == 1])
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    assert prob.status == "optimal"
    # ours is feasible to rounding, so its value is at most the optimum; and it is at least
    # the solver's optimum up to the solver's own accuracy (gap and feasibility 1e-10)
    assert q.min() >= 0.0 and q.max() <= c and abs(q.sum() - 1.0) <= 1e-13
    assert objective(q) >= prob.value - 1e-8 * (1.0 + abs(prob.value))


def test_the_risk_and_the_objective_use_it_and_decline_to_the_sort():
    rng = np.random.default_rng(11)
    n = 3001
    l = rng.standard_normal(n) ** 2
    for div in ("chi2", "kl"):
        risk = ro.CVaR(0.2, shift_cost=0.5, divergence=div)
        sigma = np.ascontiguousarray(risk.spectrum(n))
        q = np.empty(n)
        v = osel.box_select_weights(l, sigma, ko.selection_plan(sigma), 0.5, risk.div_code, q)
        np.testing.assert_array_equal(risk.weights(l), q)         # risk.weights routes here
        X = np.zeros((n, 1))
        obj = ro.Objective("squared", risk, X, -np.sqrt(l), fit_intercept=False)
        val, q_obj = obj.risk_weights(l)
        assert val == v
        np.testing.assert_array_equal(q_obj, q)
    # a NaN loss or a KL table too wide for the linear domain: declined, the sort answers
    bad = l.copy()
    bad[5] = np.nan
    kl = ro.CVaR(0.2, shift_cost=1e-3, divergence="kl")
    for risk, x in ((ro.CVaR(0.2, shift_cost=0.5), bad), (kl, l * 10)):
        sigma = np.ascontiguousarray(risk.spectrum(n))
        plan = ko.selection_plan(sigma)
        q, q_ref = np.empty(n), np.empty(n)
        assert osel.box_select_weights(x, sigma, plan, float(risk.shift_cost),
                                       risk.div_code, q) is None
        v = ko.spectral_risk_weights(x, sigma, float(risk.shift_cost), risk.div_code, q, plan)
        v_ref = ko.risk_weights(x, sigma, float(risk.shift_cost), risk.div_code, q_ref)
        np.testing.assert_array_equal(q, q_ref)
        assert v == v_ref or (np.isnan(v) and np.isnan(v_ref))


def test_cvar_and_maxloss_are_box_spectra():
    for n in (2, 3, 10, 999, 1000):
        for risk in (ro.MaxLoss(), ro.CVaR(0.5), ro.CVaR(0.1), ro.CVaR(0.77), ro.CVaR(1e-4)):
            sigma = np.ascontiguousarray(risk.spectrum(n))
            box = osel.box_of(sigma, ko.selection_plan(sigma))
            assert box is not None, (risk, n)
            assert box[0] == sigma.max() and abs(box[1] - 1.0) <= 1e-12


def test_non_box_spectra_are_not_taken():
    n = 100
    for risk in (ro.ESRM(1.0, shift_cost=0.5), ro.Extremile(2.0, shift_cost=0.5),
                 ro.Mean(shift_cost=0.5)):
        sigma = np.ascontiguousarray(risk.spectrum(n))
        assert osel.box_of(sigma, ko.selection_plan(sigma)) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80),
       kind=st.sampled_from(["continuous", "ties", "few", "offset"]),
       spectrum=st.sampled_from(["esrm", "extremile", "cvar", "user"]),
       log_nu=st.integers(-3, 3))
# the float NumPy twin is off by 1.2e-12 here (q = 1 exactly; its exponent (l - c) / nu at
# nu = 1e-3 carries the rounding of c divided by nu): compared with the 60-digit twin since
@example(seed=4376702, n=1, kind="continuous", spectrum="esrm", log_nu=-3)
def test_kl_linear_pav_equals_the_log_form(seed, n, kind, spectrum, log_nu):
    """``oracles._kl_weights_linear`` (the sorting oracle's KL PAV in the linear domain) has
    the weights of the log-domain PAV (``_weights_sorted_ws``) and of the NumPy twin, or
    declines (a table wider than ``KL_LINEAR_RANGE nu``)."""
    rng = np.random.default_rng(seed)
    ls = np.sort(losses_of(rng, n, kind))
    nu = 10.0 ** log_nu
    sigma = {"esrm": lambda: ro.ESRM(float(rng.uniform(0.2, 5.0))).spectrum(n),
             "extremile": lambda: ro.Extremile(float(rng.uniform(1.0, 4.0))).spectrum(n),
             "cvar": lambda: ro.CVaR(float(rng.uniform(0.05, 1.0))).spectrum(n),
             "user": lambda: rng.dirichlet(np.ones(n))[np.argsort(rng.random(n))]}[spectrum]()
    sigma = np.ascontiguousarray(np.sort(sigma))
    q, q_log = np.empty(n), np.empty(n)
    work, iwork = np.empty(2 * n), np.empty(n, dtype=np.int64)
    ok = ko._kl_weights_linear(ls, sigma, nu, q, work, iwork)
    if np.ptp(ls) / nu > ko.KL_LINEAR_RANGE:
        assert not ok
        return
    if not ok:              # a product near underflow: only with a tiny spectrum entry
        assert sigma[sigma > 0].min() < 1e-200 or np.ptp(ls) / nu > 600
        return
    ko._weights_sorted_ws(ls, sigma, nu, ko.KL, q_log, np.empty(2 * n),
                          np.empty(n, dtype=np.int64))
    np.testing.assert_allclose(q, q_log, rtol=0, atol=1e-12)
    if kind != "offset":    # the true maximiser for these float inputs (60-digit decimals)
        np.testing.assert_allclose(q, tw.risk_value_exact(ls, sigma, nu, "kl")[1], rtol=0,
                                   atol=1e-12)
