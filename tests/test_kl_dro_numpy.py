"""The NumPy KL-DRO maths of :mod:`riskopt.objectives.kl_dro` against brute force.

* the constrained value / multiplier against a bounded scalar minimisation of the 1-D dual
  (scipy) over Lemma 1's interval, and against a direct maximisation over the simplex (SLSQP
  for tiny n; cvxpy's exponential-cone solver when installed);
* the penalised value / weights against scipy's ``logsumexp`` / ``softmax``, in the log
  domain (no overflow for huge losses or tiny multipliers);
* the dual's derivative against finite differences, feasibility and zero duality gap on
  random instances (ties at the max included), the inactive-constraint and max-loss cases.

No torch needed.
"""
import math

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar
from scipy.special import logsumexp, softmax

from riskopt.objectives.kl_dro import (kl_divergence, kl_dro_weights, kl_dual,
                                       kl_multiplier_bounds, log_mean_exp)


def _dual_brute(l, rho, lam0):
    """min over [lam0, lam0 + C/rho] of the dual by a bounded scalar search (Brent)."""
    lo, hi = kl_multiplier_bounds(l, rho, lam0)
    lo = max(lo, 1e-9 * (hi - lo))
    res = minimize_scalar(lambda lam: kl_dual(l, lam, rho, lam0)[0], bounds=(lo, hi),
                          method="bounded", options={"xatol": 1e-12 * hi})
    return res.fun, res.x


def _primal_slsqp(l, rho, lam0):
    """max_q q.l - lam0 KL(q) s.t. KL(q) <= rho over the simplex (SLSQP, from uniform)."""
    n = l.shape[0]

    def kl(q):
        q = np.clip(q, 1e-300, None)
        return float(np.sum(q * np.log(n * q)))

    res = minimize(lambda q: -(q @ l - lam0 * kl(q)), np.full(n, 1.0 / n), method="SLSQP",
                   bounds=[(0.0, 1.0)] * n,
                   constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1.0},
                                {"type": "ineq", "fun": lambda q: rho - kl(q)}],
                   options={"ftol": 1e-14, "maxiter": 500})
    return -res.fun, res.x


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rho,lam0", [(0.02, 0.0), (0.3, 0.0), (0.3, 0.2), (0.1, 3.0),
                                      (1.5, 0.0)])
def test_constrained_value_matches_dual_and_primal_brute_force(seed, rho, lam0):
    rng = np.random.default_rng(seed)
    n = 6
    l = rng.normal(size=n) * 2.0
    value, q, lam = kl_dro_weights(l, shift_cost=lam0, radius=rho)
    lo, hi = kl_multiplier_bounds(l, rho, lam0)
    assert lo <= lam <= hi  # SCDRO Lemma 1
    dual_val, _ = _dual_brute(l, rho, lam0)
    primal_val, q_ref = _primal_slsqp(l, rho, lam0)
    if lam > 0:
        assert abs(value - dual_val) <= 1e-8 * max(1.0, abs(value))
    assert abs(value - primal_val) <= 1e-6 * max(1.0, abs(value))
    np.testing.assert_allclose(q, q_ref, atol=2e-4)
    assert kl_divergence(q) <= rho + 1e-9


@pytest.mark.parametrize("rho,lam0", [(0.05, 0.0), (0.5, 0.3)])
def test_constrained_weights_match_cvxpy(rho, lam0):
    cp = pytest.importorskip("cvxpy")
    rng = np.random.default_rng(3)
    n = 12
    l = rng.normal(size=n)
    value, q, _ = kl_dro_weights(l, shift_cost=lam0, radius=rho)
    qv = cp.Variable(n)
    kl_expr = cp.sum(cp.rel_entr(qv, np.full(n, 1.0 / n)))
    prob = cp.Problem(cp.Maximize(qv @ l - lam0 * kl_expr), [cp.sum(qv) == 1, kl_expr <= rho])
    prob.solve(solver="CLARABEL")
    assert abs(value - prob.value) < 1e-6
    np.testing.assert_allclose(q, qv.value, atol=1e-4)


def test_penalised_is_log_mean_exp_and_softmax():
    rng = np.random.default_rng(4)
    l = 3 * rng.normal(size=29)
    for lam in (0.01, 0.1, 1.0, 10.0):
        value, q, lam_out = kl_dro_weights(l, shift_cost=lam)
        assert lam_out == lam
        assert abs(value - lam * (logsumexp(l / lam) - math.log(29))) < 1e-12
        np.testing.assert_allclose(q, softmax(l / lam), atol=1e-12)
        # the Gibbs variational principle: the value is the primal objective at q
        assert abs(value - (q @ l - lam * kl_divergence(q))) < 1e-10
        assert (value, q.tolist()) == (log_mean_exp(l, lam)[0], log_mean_exp(l, lam)[1].tolist())


def test_log_domain_does_not_overflow():
    l = np.array([1e4, 1e4 - 1.0, -1e4])
    value, q = log_mean_exp(l, 1e-3)
    assert np.all(np.isfinite(q)) and abs(value - (1e4 + 1e-3 * math.log(1 / 3))) < 1e-9
    value, q, lam = kl_dro_weights(l * 1e3, radius=0.5)
    assert np.isfinite(value) and np.all(np.isfinite(q)) and lam > 0


def test_dual_derivative_matches_finite_differences():
    rng = np.random.default_rng(5)
    l = rng.normal(size=15)
    for lam in (0.05, 0.5, 5.0):
        f, df = kl_dual(l, lam, radius=0.2, shift_cost=0.1)
        h = 1e-6 * lam
        fd = (kl_dual(l, lam + h, 0.2, 0.1)[0] - kl_dual(l, lam - h, 0.2, 0.1)[0]) / (2 * h)
        assert abs(df - fd) < 1e-6
        assert abs(df - (0.2 - kl_divergence(softmax(l / lam)))) < 1e-12


def test_dual_solve_is_optimal_on_random_instances():
    """Feasible, zero duality gap, and the dual is not lower at nearby multipliers."""
    rng = np.random.default_rng(13)
    for t in range(150):
        n = int(rng.integers(2, 200))
        l = rng.normal(size=n) * 10 ** rng.uniform(-3, 3)
        if t % 5 == 0:
            l = np.round(l, 1)  # ties, including at the max
        rho = 10 ** rng.uniform(-4, 1)
        lam0 = 0.0 if t % 2 else 10 ** rng.uniform(-3, 1) * np.std(l)
        val, q, lam = kl_dro_weights(l, shift_cost=lam0, radius=rho)
        kl = kl_divergence(q)
        assert kl <= rho + 1e-9 and abs(q.sum() - 1) < 1e-12
        assert abs(val - (q @ l - lam0 * kl)) <= 1e-9 * max(1.0, abs(val))
        assert lam >= lam0
        for f in (0.999, 1.001):
            lm = lam * f
            if lm > 0 and lm >= lam0:
                dual = lm * (logsumexp(l / lm) - math.log(n)) + (lm - lam0) * rho
                assert dual >= val - 1e-9 * max(1.0, abs(val))


def test_inactive_constraint_gives_max_loss():
    l = np.array([0.0, 1.0, 3.0, 3.0, 2.0])
    # KL of the uniform distribution on the argmax (2 of 5) is log(5/2)
    val, q, lam = kl_dro_weights(l, radius=math.log(2.5) + 1e-3)
    assert val == 3.0 and lam == 0.0
    np.testing.assert_array_equal(q, [0, 0, 0.5, 0.5, 0])
    val, q, lam = kl_dro_weights(np.full(4, 2.0), radius=0.1)
    assert val == 2.0 and np.allclose(q, 0.25)
    # lam0 > 0 with a radius too large to bind: lam* = lam0 (the penalised solution)
    val, q, lam = kl_dro_weights(l, shift_cost=2.0, radius=10.0)
    assert lam == 2.0
    np.testing.assert_allclose(q, softmax(l / 2.0), atol=1e-15)


def test_kl_divergence_handles_zeros():
    assert kl_divergence(np.full(5, 0.2)) == 0.0
    assert abs(kl_divergence([1.0, 0.0, 0.0]) - math.log(3)) < 1e-15


def test_bad_inputs_raise_value_error():
    with pytest.raises(ValueError, match="shift_cost .* or radius"):
        kl_dro_weights([1.0, 2.0])
    with pytest.raises(ValueError, match="radius"):
        kl_dro_weights([1.0, 2.0], radius=0.0)
    with pytest.raises(ValueError, match="shift_cost"):
        kl_dro_weights([1.0, 2.0], shift_cost=-1.0, radius=0.1)
    with pytest.raises(ValueError, match="lam"):
        log_mean_exp([1.0, 2.0], 0.0)
    with pytest.raises(ValueError, match="1-D"):
        kl_dro_weights(np.ones((2, 2)), radius=0.1)
    with pytest.raises(ValueError, match="1-D"):
        kl_dual([], 1.0, 0.1)


def test_objectives_module_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, riskopt.objectives.kl_dro; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
