"""The common table (optax style): every registered solver goes through the same checks.

The solver names are ``riskopt.solvers.available()`` at collection time plus the toy third-party
solver ``toy_sgd`` (installed by the ``toy_plugin`` fixture through the ``riskopt.solvers`` entry
point; see ``tests/plugins/riskopt_toy``). Each stochastic solver runs through: the constructor
rule, an explicit picklable state, step-by-step equality with its NumPy twin (the ``TWINS``
table below: **a new solver adds one row there**; a registered solver with no row fails),
determinism, resuming (``state=``) bit for bit, ``coef0`` warm start, every smooth loss, divergence
reporting, step-size validation, ``timeout`` and the incompatible-family error. Deterministic
full-batch solvers (``deterministic = True``: ``lbfgs``) get the rows that apply to them
(determinism, warm start, incompatible family) and a comparison with the objective's
``reference_solution``.
"""
import pickle

import numpy as np
import pytest

import riskopt as ro
from riskopt.callbacks import DivergenceWarning
from riskopt.objectives import Objective

import _certify as certify
from reference_impl import lsvrg as twin_lsvrg
from reference_impl import prospect as twin_prospect
from reference_impl import saddlesaga as twin_saddlesaga
from reference_impl import fcco as twin_fcco
from reference_impl import kl_baselines as twin_klb
from reference_impl import scdro as twin_scdro
from reference_impl import sgd as twin_sgd
from reference_impl import sorel as twin_sorel
from reference_impl import spl as twin_spl
from reference_impl import toy_sgd as twin_toy

PLUGIN_SOLVERS = ["toy_sgd"]  # installed by the ``toy_plugin`` fixture (conftest.py)
ALL = ro.solvers.available() + [s for s in PLUGIN_SOLVERS if s not in ro.solvers.available()]
DETERMINISTIC = [s for s in ro.solvers.available() if ro.solvers.get_class(s).deterministic]
SOLVERS = [s for s in ALL if s not in DETERMINISTIC]

#: constructor parameters for the small problems of this file (mini-batches of 8 of 40)
PARAMS = {"sgd": {"batch_size": 8}, "srda": {"batch_size": 8}, "adam": {"batch_size": 8},
          "sgd_momentum": {"batch_size": 8}, "sorel_minibatch": {"batch_size": 8},
          "scdro": {"batch_size": 8}, "ascdro": {"batch_size": 8, "t0_passes": 0.5},
          "rscdro": {"batch_size": 8, "stage_passes": 0.4, "mu": 0.01},
          "rascdro": {"batch_size": 8, "stage_passes": 0.4}, "recover": {"batch_size": 8},
          "fastdro": {"batch_size": 8}, "dual_sgm": {"batch_size": 8},
          "spd": {"batch_size": 8, "dual_lr": 0.01},
          "pgsmd2": {"batch_size": 8, "dual_lr": 0.01, "gamma": 2.0},
          "sonx": {"groups_per_batch": 2, "per_group": 3, "objective_batch": 4},
          "sonex": {"groups_per_batch": 2, "per_group": 3, "objective_batch": 4},
          "sox": {"groups_per_batch": 2, "per_group": 3, "objective_batch": 4},
          "alexr2": {"groups_per_batch": 2, "per_group": 3, "objective_batch": 4,
                     "inner_steps": 2, "step_rule": "adam"},
          "ooa": {"groups_per_batch": 2, "per_group": 3}}
#: a step size that keeps every solver stable on these problems
LR = {"splplus": 0.3, "toy_sgd": 0.02}


def _use(request, name):
    """Install the plug-in for a plug-in solver's rows."""
    if name in PLUGIN_SOLVERS:
        request.getfixturevalue("toy_plugin")


def _solver(name, **kw):
    params = {**PARAMS.get(name, {}), "lr": LR.get(name, 0.05), "random_state": 0, **kw}
    return ro.solvers.get(name, **params)


def _problem(loss="squared", nu=0.5, n=40, d=3, seed=0, intercept=True, ru=False, kl=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    if loss == "squared":
        y = X @ w + 0.3 * rng.standard_t(3, size=n)
    elif loss == "logistic":
        y = (X @ w + rng.normal(size=n) > 0).astype(float)
    else:
        B = rng.normal(size=(d, 3))
        y = np.argmax(X @ B + 0.5 * rng.normal(size=(n, 3)), axis=1).astype(float)
    if ru:
        return ro.RUCVaRObjective(loss, X, y, beta=0.5, l2_reg=1.0 / n, fit_intercept=intercept)
    if kl is not None:  # "constrained" or "penalised" KL-DRO
        risk = ro.KLDRO(radius=0.3, shift_cost=0.01) if kl == "constrained" else \
            ro.KLDRO(shift_cost=1.0)
        return ro.Objective(loss, risk, X, y, l2_reg=1.0 / n, fit_intercept=intercept)
    return ro.Objective(loss, ro.ESRM(1.0, shift_cost=nu), X, y, l2_reg=1.0 / n,
                        fit_intercept=intercept)


def _fcco_problem(loss="squared", kind="group", n=40, d=3, seed=0, intercept=True, nu=None):
    """Group DRO (CVaR over 4 groups) or constrained learning (2 constraints on groups)."""
    base = _problem(loss, n=n, d=d, seed=seed, intercept=False)
    X, y = base.X, np.asarray(base.y, float)
    if loss == "logistic":
        y = (y > 0).astype(float)
    g = np.arange(n) % 4
    if kind == "group":
        return ro.Objective(loss, ro.CVaR(0.5), X, y, groups=g, l2_reg=1.0 / n,
                            fit_intercept=intercept)
    return ro.ConstrainedObjective(loss, X, y, [(g == 0, 0.2), (g == 1, 0.3)],
                                   objective_rows=g >= 2, rho=5.0, penalty=kind,
                                   l2_reg=1.0 / n, fit_intercept=intercept)


def _objective_for(name, loss="squared", **kw):
    """A problem of the solver's first family: the nu > 0 spectral problem (its nu = 0 version
    for the solvers of the plain spectral risk), the Rockafellar-Uryasev CVaR problem."""
    cls = ro.solvers.get_class(name)
    if cls.families[0] == "ru_cvar":
        return _problem(loss, ru=True, **kw)
    if cls.families[0] == "group_risk":
        obj = _fcco_problem(loss, "group", **kw)
        if cls().incompatibility(obj) is not None:
            obj = _fcco_problem(loss, "squared_hinge", **kw)
        return obj
    if cls.families[0] == "kl_dro":
        obj = _problem(loss, kl="constrained", **kw)
        if cls().incompatibility(obj) is not None:
            obj = _problem(loss, kl="penalised", **kw)
        return obj
    obj = _problem(loss, **kw)
    if cls().incompatibility(obj) is not None:
        obj = _problem(loss, **{**kw, "nu": 0.0})
    return obj


def _other_family(name):
    """An objective of a family the solver does not solve, and the solvers that fit it."""
    cls = ro.solvers.get_class(name)
    if "spectral" not in cls.families:
        return _problem()
    if "ru_cvar" not in cls.families:
        return _problem(ru=True)

    class Elsewhere(Objective):  # a family no registered solver solves
        family = "no_such_family"

    X, y = np.random.default_rng(0).normal(size=(10, 2)), np.arange(10.0)
    return Elsewhere("squared", ro.CVaR(0.5), X, y)


# ------------------------------------------------------------------------ the twin table
# name -> runner(solver, objective, state0, updates) -> per update, the list of (p, K)
# iterates after each step (or mini-batch) of its index sequence, from ``state0``.
def _split(steps, updates):
    out, k = [], 0
    for idx in updates:
        out.append(steps[k:k + len(idx)])
        k += len(idx)
    return out


def _prospect(solver, obj, s0, updates):
    ref0 = twin_prospect.prospect_init(obj, s0.coef)
    return _split([r["W"] for r in twin_prospect.prospect_steps(
        obj, ref0, np.concatenate(updates), solver.lr)], updates)


def _prospect_moreau(solver, obj, s0, updates):
    ref0 = twin_prospect.moreau_init(obj, s0.coef)
    return _split([r["W"] for r in twin_prospect.moreau_steps(
        obj, ref0, np.concatenate(updates), solver.lr)], updates)


def _stepper(make):
    def run(solver, obj, s0, updates):
        twin = make(solver, obj, s0)
        steps = []
        for i in np.concatenate(updates):
            twin.step(i)
            steps.append(twin.W.copy())
        return _split(steps, updates)
    return run


def _plugin_minibatch(name):
    def run(solver, obj, s0, updates):
        batches = np.concatenate(updates)
        sigma_b = obj.risk.spectrum(batches.shape[1])
        args = (obj, s0.coef, batches, sigma_b, solver.lr)
        if name == "sgd":
            out = twin_sgd.sgd(*args)
        elif name == "srda":
            out = twin_sgd.srda(*args, s0.coef0, s0.dual_avg, s0.n_iter)
        elif name == "sgd_momentum":
            out = twin_sgd.sgd_momentum(*args, solver.momentum, s0.velocity)
        else:
            out = twin_sgd.adam(*args, solver.beta1, solver.beta2, solver.eps, s0.m, s0.v,
                                s0.n_iter)
        return _split([o["coef"] for o in out], updates)
    return run


def _sorel(solver, obj, s0, updates):
    W, (lam, lprev) = s0.coef, twin_sorel.initial_weights(obj, s0.coef)
    out = []
    for k, idx in enumerate(updates):
        W, lam, lprev, iterates = twin_sorel.sorel_outer_iteration(
            obj, W, lam, lprev, s0.epoch + k, solver.lr, solver.dual_lr, solver.prox_scale, idx)
        out.append(list(iterates))
    return out


def _ru(name):
    def run(solver, obj, s0, updates):
        args = (obj.loss, obj.X, obj.y, obj.reg, obj.beta)
        kw = dict(W0=s0.coef, alpha0=s0.alpha, W_avg0=s0.coef_avg, alpha_avg0=s0.alpha_avg,
                  t0=s0.t)
        idx, lr = np.concatenate(updates), solver.lr
        if name == "sgm":
            ref = twin_spl.sgm(*args, lr, solver.schedule, idx, **kw)
        elif name == "spl":
            ref = twin_spl.spl(*args, lr, lr, solver.schedule, idx, **kw)[0]
        else:
            l0 = s0.loss_scale
            ref = twin_spl.spl(*args, lr / l0, lr * l0, solver.schedule, idx, **kw)[0]
        return _split([r[0] for r in ref], updates)
    return run


def _kl(storm):
    def run(solver, obj, s0, updates):
        mu, stage_len, t0 = solver._sched(obj)
        lo, hi = s0.bounds
        kw = dict(mode=solver._mode, eta_pow=solver._eta_pow, t0=t0, stage_len=stage_len,
                  mu=mu, R=0.0 if solver.radius_w is None else solver.radius_w, lo=lo, hi=hi)
        batches = np.concatenate(updates)
        fn = twin_scdro.storm if storm else twin_scdro.moving_average
        out = fn(obj, s0.coef, s0.lam, batches, solver.lr, solver.beta, **kw)
        return _split([W for W, _ in out], updates)
    return run


def _klb(solver, obj, s0, updates):
    R = 0.0 if solver.radius_w is None else solver.radius_w
    if solver.name == "fastdro":
        return _split(twin_klb.fastdro(obj, s0.coef, np.concatenate(updates), solver.lr, R),
                      updates)
    if solver.name == "dual_sgm":
        lo, hi = s0.bounds
        return _split(twin_klb.dual_sgm(obj, s0.coef, s0.lam, s0.eta, np.concatenate(updates),
                                        solver.lr, lo, hi, R), updates)
    # spd / pgsmd2: the proximal center moves to the iterate after every update
    out, W, logp, center = [], s0.coef, s0.log_p, s0.center
    gamma = solver._g()
    for idx in updates:
        steps = twin_klb.primal_dual(obj, W, logp, idx, solver.lr, solver.dual_lr, gamma,
                                     center, R)
        st = solver.update(obj, s0._replace(coef=W, log_p=logp, center=center), indices=idx)
        W, logp, center = steps[-1], st.log_p, (steps[-1] if gamma > 0 else center)
        out.append(steps)
    return out


def _toy(solver, obj, s0, updates):
    return _split(twin_toy.toy_sgd(obj, s0.coef, np.concatenate(updates), solver.lr), updates)


def _fcco(solver, obj, s0, updates):
    b1, b2, _ = solver._sizes(obj)
    rows = np.concatenate(updates)
    if solver.name == "ooa":
        out = twin_fcco.ooa(solver, obj, s0.coef, rows, b1, b2)
    elif solver.name == "alexr2":
        out = twin_fcco.alexr2(solver, obj, s0.coef, s0.s, rows, b1, b2)
    else:
        out = twin_fcco.single_loop(solver, obj, s0.coef, s0.s, rows, b1, b2)
    return _split(out, updates)


TWINS = {
    "prospect": _prospect,
    "prospect_moreau": _prospect_moreau,
    "lsvrg": _stepper(lambda s, obj, s0: twin_lsvrg.LSVRGTwin(obj, s0.coef, lr=s.lr,
                                                                epoch_length=s.epoch_length)),
    "saddlesaga": _stepper(lambda s, obj, s0: twin_saddlesaga.SaddleSAGATwin(
        obj, s0.coef, lr=s.lr, dual_lr=s.dual_step_size(obj))),
    "sgd": _plugin_minibatch("sgd"),
    "srda": _plugin_minibatch("srda"),
    "sgd_momentum": _plugin_minibatch("sgd_momentum"),
    "adam": _plugin_minibatch("adam"),
    "sorel": _sorel,
    "sorel_minibatch": _sorel,
    "sgm": _ru("sgm"),
    "spl": _ru("spl"),
    "splplus": _ru("splplus"),
    "toy_sgd": _toy,
    "scdro": _kl(False),
    "rscdro": _kl(False),
    "ascdro": _kl(True),
    "rascdro": _kl(True),
    "recover": _kl(True),
    "fastdro": _klb,
    "dual_sgm": _klb,
    "spd": _klb,
    "pgsmd2": _klb,
    "sonx": _fcco,
    "sonex": _fcco,
    "sox": _fcco,
    "alexr2": _fcco,
    "ooa": _fcco,
}


# ------------------------------------------------------------------------------- the rows
@pytest.mark.parametrize("name", SOLVERS)
def test_update_matches_numpy_twin_step_by_step(name, request):
    _use(request, name)
    if name not in TWINS:
        pytest.fail(f"solver {name!r} has no NumPy twin row: add one to TWINS in "
                    "tests/test_solvers_common.py (twin in tests/reference_impl/<acronym>.py)")
    obj = _objective_for(name, n=24)
    solver = _solver(name)
    coef0 = 0.1 * np.random.default_rng(1).normal(size=obj.coef_shape)
    state0 = solver.init_state(obj, coef0=coef0)
    updates, state = [], state0
    for _ in range(2):
        idx = solver.draw_indices(obj, state)
        updates.append(idx)
        state = solver.update(obj, state, indices=idx)
    expected = TWINS[name](solver, obj, state0, updates)
    assert [len(e) for e in expected] == [len(u) for u in updates]

    def close(got, want, what):
        want = np.asarray(want).reshape(obj.p, obj.K)
        np.testing.assert_allclose(np.asarray(got).reshape(obj.p, obj.K), want, rtol=1e-9,
                                   atol=1e-9 * max(1.0, float(np.max(np.abs(want)))),
                                   err_msg=f"{name}: {what}")

    first = updates[0]
    for k in sorted({1, 2, len(first)}):       # step by step inside the first update
        close(solver.update(obj, state0, indices=first[:k]).coef, expected[0][k - 1],
              f"after step {k} of the first update")
    close(state.coef, expected[1][-1], "after the second update")
    assert state.epoch == 2


@pytest.mark.parametrize("name", SOLVERS)
def test_constructor_only_stores_params(name, request):
    _use(request, name)
    solver = ro.solvers.get(name, lr=0.05, random_state=3)
    params = solver.get_params()
    assert params["lr"] == 0.05 and params["random_state"] == 3
    clone = type(solver)(**params)
    assert clone.get_params() == params
    assert name in repr(solver).lower() or type(solver).__name__ in repr(solver)


@pytest.mark.parametrize("name", SOLVERS)
def test_state_is_explicit_and_picklable(name, request):
    _use(request, name)
    obj = _objective_for(name)
    solver = _solver(name, lr=1e-3)
    state = solver.init_state(obj)
    assert hasattr(state, "_fields") and {"coef", "epoch", "rng"} <= set(state._fields)
    state = solver.update(obj, state)
    assert state.epoch == 1 and state.coef.shape == (obj.p, obj.K)
    clone = pickle.loads(pickle.dumps(state))
    a = solver.update(obj, state)
    b = solver.update(obj, clone)
    np.testing.assert_array_equal(a.coef, b.coef)


@pytest.mark.parametrize("name", SOLVERS)
def test_seeded_runs_are_reproducible_and_resume_bit_for_bit(name, request):
    _use(request, name)
    obj = _objective_for(name)
    solver = _solver(name, lr=1e-3, random_state=7)
    full = solver.run(obj, max_epochs=4)
    again = solver.run(obj, max_epochs=4)
    np.testing.assert_array_equal(full.coef, again.coef)
    first = solver.run(obj, max_epochs=2)
    rest = solver.run(obj, max_epochs=2, state=first.state)
    np.testing.assert_array_equal(rest.state.coef, full.state.coef)
    np.testing.assert_array_equal(rest.coef, full.coef)
    assert rest.n_epochs == 4 and rest.value == full.value
    other = _solver(name, lr=1e-3, random_state=8).run(obj, max_epochs=4)
    assert not np.array_equal(other.coef, full.coef)   # the seed matters


@pytest.mark.parametrize("name", SOLVERS)
def test_coef0_warm_start_is_the_starting_point(name, request):
    _use(request, name)
    obj = _objective_for(name)
    solver = _solver(name, lr=1e-3)
    coef0 = 0.2 * np.random.default_rng(2).normal(size=obj.coef_shape)
    res = solver.run(obj, max_epochs=2, coef0=coef0)
    state = solver.init_state(obj, coef0=coef0)
    np.testing.assert_array_equal(state.coef, obj.as_matrix(coef0))
    for _ in range(2):
        state = solver.update(obj, state)
    np.testing.assert_array_equal(res.state.coef, state.coef)
    with pytest.raises(ValueError, match="state"):
        solver.run(obj, max_epochs=1, coef0=coef0, state=res.state)


@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize("loss", ["squared", "logistic", "multinomial"])
def test_runs_on_every_smooth_loss_and_decreases_objective(name, loss, request):
    _use(request, name)
    obj = _objective_for(name, loss=loss)
    solver = _solver(name, lr=LR.get(name, 1e-2))
    try:
        solver.init_state(obj)
    except ValueError as exc:  # a solver may legitimately refuse a loss; it must say so
        assert "loss" in str(exc).lower()
        return
    trace = ro.Trace()
    res = solver.run(obj, max_epochs=5, callback=trace)
    assert res.coef.shape == obj.coef_shape
    assert np.all(np.isfinite(res.coef))
    assert trace.values[-1] < trace.values[0]


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("name", SOLVERS)
def test_divergence_is_detected_and_reported(name, request):
    _use(request, name)
    obj = _objective_for(name)
    solver = _solver(name, lr=1e6)
    with pytest.warns(DivergenceWarning, match="diverged"):
        res = solver.run(obj, max_epochs=20, callback=ro.Trace())
    assert res.diverged
    assert "diverged" in res.message
    assert res.n_epochs < 20


@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), "0.1"])
def test_bad_step_size_raises(name, bad, request):
    _use(request, name)
    obj = _objective_for(name)
    with pytest.raises(ValueError, match="lr"):
        ro.solvers.get(name, lr=bad).init_state(obj)


@pytest.mark.parametrize("name", SOLVERS)
def test_timeout_stops_after_one_update(name, request):
    _use(request, name)
    obj = _objective_for(name)
    res = _solver(name, lr=1e-3).run(obj, max_epochs=50, timeout=1e-9)
    assert res.n_epochs == 1
    assert "timeout" in res.message and not res.diverged
    with pytest.raises(ValueError, match="timeout"):
        _solver(name).run(obj, max_epochs=1, timeout=-1.0)


@pytest.mark.parametrize("name", ALL)
def test_incompatible_family_lists_the_solvers_that_fit(name, request):
    _use(request, name)
    obj = _other_family(name)
    fits = [s for s in ro.solvers.solvers_for(obj) if s != name]
    solver = ro.solvers.get(name)
    assert solver.incompatibility(obj) is not None
    with pytest.raises(ro.solvers.IncompatibleObjectiveError) as err:
        solver.run(obj, max_epochs=1)
    msg = str(err.value)
    assert repr(getattr(obj, "family")) in msg
    assert all(s in msg for s in fits) and (fits or "(none)" in msg), msg


# ------------------------------------------------------------- deterministic (full batch)
def _deterministic_case(name, ru):
    """The problem of the deterministic solvers' tests and the solver (skipped where it does
    not solve that family)."""
    obj = _problem(ru=ru, n=30)
    solver = ro.solvers.get(name)
    if solver.incompatibility(obj) is not None:
        pytest.skip(f"{name} does not solve this family")
    return obj, solver


@pytest.mark.parametrize("name", DETERMINISTIC)
@pytest.mark.parametrize("ru", [False, True], ids=["spectral", "ru_cvar"])
def test_deterministic_solver_is_deterministic_and_warm_starts(name, ru):
    obj, solver = _deterministic_case(name, ru)
    a, b = solver.run(obj), solver.run(obj)
    np.testing.assert_array_equal(a.coef, b.coef)
    assert a.value == b.value and not a.diverged
    warm = solver.run(obj, coef0=a.coef)
    assert warm.value <= a.value + 1e-12 * max(1.0, abs(a.value))
    # the warm start's point is judged through its own certified accuracy, not by its distance
    # to the cold run's (another approximate point)
    _assert_near_optimum(obj, warm, f"{name} from a warm start")


def _assert_near_optimum(obj, res, what, rel=1e-8):
    """``res`` within ``rel`` of the optimum, certified by a duality gap (tests/_certify.py).
    For the RU-CVaR form ``min_{w, alpha} G(w, alpha) = min_w CVaR-objective(w)`` and
    ``G(w, alpha) >= F(w)``: the excess of ``res.value`` over ``F(w)`` plus ``F``'s certified gap
    at ``w`` bounds ``res.value - min``."""
    if isinstance(obj, ro.RUCVaRObjective):
        cv = obj.cvar_objective()
        F, g = certify.gap(cv, cv.as_matrix(res.coef))
        scale = max(1.0, abs(F))
        slack = certify.ROUND * (1 + np.log2(obj.n)) * scale
        assert res.value >= F - slack, (what, res.value, F)
        assert res.value - F + g <= rel * scale + slack, (what, res.value, F, g)
    else:
        certify.assert_certified(obj, obj.as_matrix(res.coef), rel, what=what)


@pytest.mark.parametrize("name", DETERMINISTIC)
@pytest.mark.parametrize("ru", [False, True], ids=["spectral", "ru_cvar"])
def test_deterministic_solver_matches_reference_solution(name, ru):
    obj, solver = _deterministic_case(name, ru)
    res = solver.run(obj)
    assert obj.value(res.coef) == pytest.approx(res.value, rel=1e-12, abs=1e-14)
    _assert_near_optimum(obj, res, name)


def test_every_registered_solver_is_in_the_table():
    assert set(SOLVERS) | set(DETERMINISTIC) == set(ALL)
    assert "toy_sgd" in SOLVERS


def test_unknown_solver_name():
    with pytest.raises(ValueError, match="unknown solver"):
        ro.solvers.get("nope")


def test_divergence_is_judged_against_the_starting_value():
    """Prospect (the hull-tree oracle) with lr = 3 on concrete keeps finite but astronomically
    large iterates for 20 passes (the objective overflows): the run loop reports it as diverged
    (message, flag and DivergenceWarning), not as "max_epochs reached"; so does the default
    (box-oracle) path, whose iterates overflow to inf; a sane step is not flagged."""
    import warnings

    from riskopt._kernels import prospect as _kp
    from riskopt.callbacks import DivergenceWarning

    d = ro.datasets.load("concrete")
    obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=1.0), d.X_train, d.y_train,
                       l2_reg=1 / len(d.y_train))
    tree = ro.solvers.get("prospect", lr=3.0)
    tree._oracle = _kp.ORACLE_TREE
    with pytest.warns(DivergenceWarning, match=r"objective ended at .*above its start"):
        res = tree.run(obj, 20)
    assert res.diverged and "use a smaller step size" in res.message
    with pytest.warns(DivergenceWarning):
        res = ro.solvers.get("prospect", lr=3.0).run(obj, 20)
    assert res.diverged and "lr=0.3 (lr/10)" in res.message
    with warnings.catch_warnings():
        warnings.simplefilter("error", DivergenceWarning)
        res = ro.solvers.get("prospect", lr=0.03).run(obj, 5)
    assert not res.diverged and res.message == "max_epochs reached"


@pytest.mark.parametrize("risk", [ro.ESRM(1.0, shift_cost=1.0),
                                  ro.Extremile(2.0, shift_cost=1.0, divergence="kl")])
def test_prospect_hull_tree_stops_before_an_overflowing_loss(risk):
    """A loss that overflows (inf) never enters the sorted table of the hull-tree oracle (it
    corrupted memory: LOSS_LIMIT): the pass ends there, the run is reported as diverged, and
    the state's weights stay finite."""
    import warnings

    from riskopt._kernels.prospect import LOSS_LIMIT

    d = ro.datasets.load("concrete")
    obj = ro.Objective("squared", risk, d.X_train, d.y_train, l2_reg=1 / len(d.y_train))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ro.solvers.get("prospect", lr=1e3, random_state=0).run(obj, 10)
    assert res.diverged
    assert np.all(np.isfinite(res.state.q)) and np.all(res.state.losses <= LOSS_LIMIT)


@pytest.mark.parametrize("name", ["saddlesaga", "prospect_moreau"])
def test_quadratic_solvers_warn_before_an_hours_long_run(name, monkeypatch):
    """An O(n)-per-step solver estimates its run (c n^2 per pass) and warns before starting
    when it would take hours; the check costs nothing (no pass is run here: timeout)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3))
    obj = Objective("squared", ro.CVaR(0.5, shift_cost=0.5), X, X @ [1.0, 2.0, 3.0],
                    l2_reg=1e-2)
    solver = ro.solvers.get(name, lr=1e-3, random_state=0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        solver.run(obj, 2)  # 300^2 * 2e-8 s: no warning
    monkeypatch.setattr(type(solver), "LONG_RUN_SECONDS", 1e-4)
    with pytest.warns(RuntimeWarning, match=r"O\(n\^2\) per pass: about .* h for \d+ passes"):
        solver.run(obj, 2)
    assert ro.solvers.get("prospect").quadratic_pass_cost is None
