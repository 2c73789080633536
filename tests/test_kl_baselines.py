"""The KL-DRO baselines: the numba batch weights and KL-ball projection against NumPy / cvxpy,
FastDRO's bias shrinking with the batch size, SPD and Dual SGM approaching the optimum (the
step-by-step twins are rows of tests/test_solvers_common.py)."""
import numpy as np
import pytest

import riskopt as ro
from riskopt._kernels.kl_baselines import _batch_kl_weights, _kl_ball_project
from riskopt.objectives.kl_dro import kl_divergence, kl_dro_weights

cp = pytest.importorskip("cvxpy")


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("rho, lam0", [(0.1, 0.0), (0.5, 1e-3), (0.05, 0.2), (0.0, 0.5),
                                       (5.0, 0.0)])
def test_numba_batch_weights_match_numpy(seed, rho, lam0):
    rng = np.random.default_rng(seed)
    losses = rng.exponential(size=40) * 3
    if seed == 0:
        losses[:5] = losses.max()          # ties at the top
    if seed == 1:
        losses = losses * 1e3              # large losses, tiny lambda_0 below
    q = np.empty_like(losses)
    v, lam = _batch_kl_weights(losses, rho, lam0, q)
    v2, q2, lam2 = kl_dro_weights(losses, shift_cost=lam0 if (lam0 or rho == 0) else None,
                                  radius=rho if rho > 0 else None)
    assert v == pytest.approx(v2, rel=1e-12) and lam == pytest.approx(lam2, rel=1e-10)
    np.testing.assert_allclose(q, q2, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_kl_ball_projection_matches_cvxpy(seed):
    rng = np.random.default_rng(seed)
    n, rho = 12, 0.1
    p = rng.dirichlet(np.full(n, 0.3))
    out = np.empty(n)
    _kl_ball_project(np.log(p), rho, out)
    q = np.exp(out)
    x = cp.Variable(n, nonneg=True)
    prob = cp.Problem(cp.Minimize(cp.sum(cp.rel_entr(x, p))),
                      [cp.sum(x) == 1, cp.sum(cp.rel_entr(x, np.full(n, 1 / n))) <= rho])
    prob.solve(solver="CLARABEL")
    ours = float(np.sum(q * np.log(q / p)))
    assert ours <= prob.value + 1e-7            # as good as the conic solver (to its accuracy)
    assert kl_divergence(q) <= rho + 1e-9 and q.sum() == pytest.approx(1.0)
    from reference_impl.kl_baselines import kl_ball_projection

    np.testing.assert_allclose(q, kl_ball_projection(p, rho), atol=1e-10)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 5))
    y = (3 * X[:, 0] + rng.normal(size=2000) > 0).astype(float)
    obj = ro.Objective("logistic", ro.KLDRO(radius=0.2), X, y, l2_reg=0.01, fit_intercept=True)
    return obj, obj.reference_solution()


def _gap(obj, ref, value):
    """Suboptimality relative to the initial gap (w = 0)."""
    return (value - ref.value) / (obj.value(np.zeros(obj.coef_shape)) - ref.value)


def test_fastdro_bias_shrinks_with_the_batch_size(problem):
    obj, ref = problem
    gaps = []
    for b in (16, 512):
        res = ro.solvers.get("fastdro", lr=0.3, batch_size=b, random_state=0).run(obj, 40)
        gaps.append(_gap(obj, ref, res.value))
    assert gaps[1] < gaps[0] / 3
    assert not ro.solvers.get_class("fastdro").convergent


@pytest.mark.parametrize("name, params, tol", [
    ("dual_sgm", dict(lr=0.05), 0.03),
    ("spd", dict(lr=0.1, dual_lr=0.003), 0.2),
    ("pgsmd2", dict(lr=0.1, dual_lr=0.003, gamma=10.0), 0.2),
])
def test_baselines_approach_the_optimum(problem, name, params, tol):
    # 30 passes; the primal-dual methods (an n-dimensional dual moving by mirror ascent) are
    # slower than the compositional ones, as in the paper (rscdro / rascdro: < 0.006 here)
    obj, ref = problem
    res = ro.solvers.get(name, random_state=0, **params).run(obj, 30)
    assert _gap(obj, ref, res.value) < tol


def test_primal_dual_keeps_p_in_the_kl_ball(problem):
    obj, _ = problem
    res = ro.solvers.get("spd", lr=0.03, dual_lr=0.01, random_state=0).run(obj, 2)
    p = np.exp(res.state.log_p)
    assert p.sum() == pytest.approx(1.0) and kl_divergence(p) <= obj.radius + 1e-9
    with pytest.raises(ro.solvers.IncompatibleObjectiveError, match="constrained"):
        ro.solvers.get("spd").run(ro.Objective("logistic", ro.KLDRO(shift_cost=1.0),
                                               obj.X[:, :-1], obj.y), 1)
