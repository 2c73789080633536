"""SCDRO-family solvers on KL-DRO: convergence to the exact optimum and their guards (the
step-by-step comparisons with the NumPy twins are rows of tests/test_solvers_common.py)."""
import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

import riskopt as ro


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 5))
    y = (X[:, 0] + rng.normal(size=2000) > 0).astype(float)
    obj = ro.Objective("logistic", ro.KLDRO(radius=0.2), X, y, l2_reg=0.01, fit_intercept=True)
    return obj, obj.reference_solution()


@pytest.mark.parametrize("name, params, updates", [
    ("rscdro", dict(lr=0.1, beta=0.5, stage_passes=8), 100),   # 100 passes
    ("rascdro", dict(lr=0.1, beta=0.5), 50),                   # 2 passes per update: 100
])
def test_restarted_methods_reach_the_exact_optimum(problem, name, params, updates):
    obj, ref = problem
    solver = ro.solvers.get(name, random_state=0, **params)
    res = solver.run(obj, updates, callback=ro.Trace())
    assert res.trace.passes[-1] <= 100.5
    assert (res.value - ref.value) / ref.value < 1e-3
    assert res.extra["lam"] == pytest.approx(ref.aux[0], rel=0.5)


@pytest.mark.parametrize("name", ["rscdro", "rascdro", "scdro", "ascdro"])
def test_restarted_methods_report_the_stage_average(problem, name):
    """RSCDRO / RASCDRO report the mean of the current stage's end-of-pass iterates (the
    iterates themselves unchanged: the state's ``coef`` is the last one); a new stage starts
    a new mean. SCDRO / ASCDRO (no stages) report the last iterate."""
    obj, _ = problem
    solver = ro.solvers.get(name, random_state=0, stage_passes=1.0) if name[0] == "r" \
        else ro.solvers.get(name, random_state=0)
    st = solver.init_state(obj)
    coefs, stages = [], []
    for _ in range(9):
        st = solver.update(obj, st)
        coefs.append(st.coef.copy())
        stages.append(int(st.counters[1]))
        reported = solver.point(obj, st)[0]
        if name[0] != "r":
            np.testing.assert_array_equal(reported, st.coef)
            continue
        same = [c for c, k in zip(coefs, stages) if k == stages[-1]]
        np.testing.assert_allclose(reported, np.mean(same, axis=0), rtol=1e-12, atol=1e-15)
    if name[0] == "r":
        assert len(set(stages)) >= 3           # stages of 1, 2, 4 passes: three means
        res = solver.run(obj, 9)
        np.testing.assert_allclose(res.coef, obj.as_coef(solver.point(obj, st)[0]),
                                   rtol=1e-12, atol=1e-15)


def test_recover_solves_the_penalised_objective():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(1000, 4))
    y = (X[:, 1] + rng.normal(size=1000) > 0).astype(float)
    obj = ro.Objective("logistic", ro.KLDRO(shift_cost=1.0), X, y, l2_reg=0.01)
    ref = obj.reference_solution()
    res = ro.solvers.get("recover", lr=0.3, random_state=0).run(obj, 30)
    assert (res.value - ref.value) / ref.value < 1e-3
    with pytest.raises(ro.solvers.IncompatibleObjectiveError, match="penalised"):
        ro.solvers.get("recover").run(ro.Objective("logistic", "kl:0.1", X, y), 1)


def test_lambda_on_its_upper_bound_warns():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] > 0).astype(float)
    obj = ro.objectives.KLDROObjective("logistic", X, y, radius=0.2, loss_bound=1e-4)
    with pytest.warns(RuntimeWarning, match="upper bound"):
        ro.solvers.get("scdro", lr=0.1, random_state=0).run(obj, 2)


def test_ball_constraint_is_kept():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 3))
    y = (X @ np.array([3.0, -2.0, 1.0]) > 0).astype(float)
    obj = ro.Objective("logistic", "kl:0.2", X, y)
    # lr=0.5 collapses lambda on this separable set (stop 39: the run now stops there with a
    # DivergenceWarning, after 4 passes); the ball holds either way
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ro.DivergenceWarning)
        res = ro.solvers.get("rscdro", lr=0.5, radius_w=0.5, random_state=0).run(obj, 5)
    assert np.linalg.norm(res.coef) <= 0.5 + 1e-12


@pytest.mark.parametrize("bad", [dict(beta=0.0), dict(beta=1.5), dict(batch_size=0),
                                 dict(radius_w=-1.0)])
def test_bad_parameters(bad):
    obj = ro.Objective("logistic", "kl:0.2", np.eye(4), np.array([0.0, 1.0, 0.0, 1.0]))
    with pytest.raises(ValueError):
        ro.solvers.get("scdro", **bad).run(obj, 1)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_storm_estimators_survive_lambda_jumps():
    # badly scaled features (|x|^2 ~ 100) and a large step: lambda jumps by orders of
    # magnitude; the estimators restart instead of dividing by zero (a run may diverge, and
    # then says so)
    rng = np.random.default_rng(4)
    X = rng.normal(size=(2000, 100))
    y = (X[:, 0] > 0).astype(float)
    obj = ro.Objective("logistic", ro.KLDRO(radius=0.5), X, y, l2_reg=1e-4)
    for lr in (0.05, 0.01):
        res = ro.solvers.get("rascdro", lr=lr, batch_size=128, random_state=2).run(obj, 5)
        assert res.diverged or np.all(np.isfinite(res.coef))


def _kl_defaults():
    """``benchmarks/kl_defaults.py``: its fresh problems, ``problem(seed, *shape)``."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "kl_defaults.py"
    spec = importlib.util.spec_from_file_location("kl_defaults", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.parametrize("name, updates", [("rscdro", 100), ("rascdro", 50)])
def test_defaults_on_fresh_problems(name, updates):
    """Default parameters, 100 passes, six fresh problems (a large radius, i.e. a small
    ``lambda*``, among them): no run diverges (before ``scdro.LAM_FACTOR`` RSCDRO ended at
    ``lambda``'s lower bound on that shape, relative gap up to 1.0). With the stage average
    reported (``_KLBase._average``) every RSCDRO run is within 1e-3 of the exact optimum
    (measured: at most 3.4e-4; the last iterate: 1.3e-3) and RASCDRO's typical run too
    (measured: at most 8.4e-4). Seed 13 is the problem on which RASCDRO's STORM estimators
    ran away (``lambda`` 0.33 -> 5.0 in one pass, gap 1e-2) before the restart on
    ``scdro._beyond_bound`` (now 4.1e-4)."""
    bench = _kl_defaults()
    gaps = []
    for seed in (11, 12, 13):
        for shape in bench.SHAPES:
            obj = bench.problem(seed, *shape)
            ref = obj.reference_solution()
            res = ro.solvers.get(name, random_state=seed).run(obj, updates)
            gaps.append((res.value - ref.value) / ref.value)
    if name == "rscdro":
        assert max(gaps) < 1e-3, gaps
    else:
        assert max(gaps) < 2e-3, gaps
        assert np.median(gaps) < 5e-4, gaps


def _wide_losses(seed):
    """Logistic KL-DRO with lambda_0 = 1e-3 and features of scale 3: the losses span tens of
    units, so exp(loss / lambda) is heavy-tailed once lambda is small."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(2000, 5)) * 3.0
    y = (X @ rng.normal(size=5) + rng.normal(size=2000) > 0).astype(float)
    return ro.Objective("logistic", ro.KLDRO(radius=0.5, shift_cost=1e-3), X, y, l2_reg=1e-4,
                        fit_intercept=True, loss_bound=10.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_collapsed_multiplier_stops_the_run_and_says_so(seed):
    # RSCDRO's lambda estimate is biased upwards at small lambda (the moving average of
    # exp(l / lambda) follows the largest recent batch): lambda runs to lambda_0 and stays;
    # the run must stop there as diverged, naming the step size, not go on silently
    obj = _wide_losses(seed)
    solver = ro.solvers.get("rscdro", lr=0.5, beta=0.5, batch_size=32, random_state=0)
    with pytest.warns(ro.DivergenceWarning, match=r"lambda collapsed .* lr=0\.05 \(lr/10\)"):
        res = solver.run(obj, 20)
    assert res.diverged and "lambda collapsed" in res.message and res.n_epochs < 20
    lo, _ = obj.lam_bounds()
    assert res.state.lam == lo
    # lambda_0 is not optimal for the solver's w: the exact dF/dlambda = rho - KL(q || 1/n)
    # is negative there (F falls as lambda grows), so the bound was not reached by descent
    assert obj.value_grad_lam(res.state.coef, lo)[2] < 0


def test_no_collapse_alarm_where_lambda_star_is_lambda_0():
    # a large radius and lambda_0 = 1: the constraint is inactive, lambda* = lambda_0, and
    # the solver sits on the bound legitimately
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 5))
    y = (X[:, 0] + rng.normal(size=2000) > 0).astype(float)
    obj = ro.Objective("logistic", ro.KLDRO(radius=5.0, shift_cost=1.0), X, y, l2_reg=0.01,
                       fit_intercept=True)
    lo, _ = obj.lam_bounds()
    assert obj.reference_solution().aux[0] == pytest.approx(lo)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ro.DivergenceWarning)
        res = ro.solvers.get("rscdro", random_state=0).run(obj, 10)
    assert not res.diverged and res.n_epochs == 10 and res.state.lam == lo


@pytest.mark.parametrize("params, match", [
    # the exponent reaches its cap 50 (weights e^50 / b): the pass that caps one ends the run
    (dict(lr=0.5, lam0=0.1, eta0=1.0), r"cap 50 .* lr=0\.05 \(lr/10\)"),
    # iterates that leave without capping: judged after every pass (rise_every_pass)
    (dict(lr=1.0, lam0=0.1, eta0=0.1), r"objective reached .* lr=0\.1 \(lr/10\)"),
])
def test_dual_sgm_stops_where_it_left_and_says_so(params, match):
    # Dual SGM's dual gradient grows like exp(loss / lambda): with a large step the iterates
    # leave; the run stops at that pass, naming the step size, not 20 passes later
    obj = _wide_losses(0)
    solver = ro.solvers.get("dual_sgm", batch_size=32, random_state=0, **params)
    with pytest.warns(ro.DivergenceWarning, match=match):
        res = solver.run(obj, 20)
    assert res.diverged and res.n_epochs < 20
    assert not res.value <= 1.5 * obj.value(obj.zeros())   # above the start's limit (or inf)


def test_dual_sgm_stable_step_caps_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ro.DivergenceWarning)
        ok = ro.solvers.get("dual_sgm", lr=0.01, lam0=1.0, eta0=1.0, batch_size=32,
                            random_state=0).run(_wide_losses(0), 5)
    assert ok.state.capped == 0 and ok.n_epochs == 5 and not ok.diverged
