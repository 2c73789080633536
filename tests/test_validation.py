"""Bad input raises ValueError whose message names the problem.

Covers data (NaN/inf, shapes, empty, labels outside the loss's domain), spectra and risk
parameters, the l2 strength, solver hyper-parameters for every registered solver (whatever the
other helpers have registered by now), ``max_epochs`` and coefficient shapes.
"""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import riskopt as ro
from conftest import make_problem
from riskopt.risks import check_spectrum

RISK_CLASSES = (ro.CVaR, ro.ESRM, ro.Extremile, ro.Mean, ro.MaxLoss)
SOLVERS = [name for name in ro.solvers.available() if name not in ("lbfgs", "newton")]


def data(n=6, d=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=n)


# --------------------------------------------------------------------------- data
@pytest.mark.parametrize("where", ["X", "y"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_data(where, bad):
    X, y = data()
    if where == "X":
        X[1, 0] = bad
    else:
        y[1] = bad
    with pytest.raises(ValueError, match=f"{where} contains 1 NaN or infinite"):
        ro.Objective("squared", ro.CVaR(0.5), X, y)


def test_mismatched_rows():
    X, y = data()
    with pytest.raises(ValueError, match="mismatched numbers of rows: 6 != 5"):
        ro.Objective("squared", ro.CVaR(0.5), X, y[:5])


@pytest.mark.parametrize("X,msg", [
    (np.ones(6), "X must have 2 dimension"),
    (np.ones((6, 2, 1)), "X must have 2 dimension"),
    (np.ones((0, 2)), r"X is empty \(shape \(0, 2\)\)"),
    (np.ones((6, 0)), r"X is empty \(shape \(6, 0\)\)"),
    ([["a", "b"]] * 6, "X must be numeric"),
])
def test_bad_design(X, msg):
    y = np.zeros(len(X)) if len(X) else np.zeros(0)
    with pytest.raises(ValueError, match=msg):
        ro.Objective("squared", ro.Mean(), X, y)


@pytest.mark.parametrize("y,msg", [
    (np.ones((6, 1)), "y must have 1 dimension"),
    (np.zeros(0), "y is empty"),
])
def test_bad_targets(y, msg):
    X = np.ones((len(y), 2)) if len(y) else np.ones((1, 2))
    with pytest.raises(ValueError, match=msg):
        ro.Objective("squared", ro.Mean(), X, y)


@pytest.mark.parametrize("y", [[0, 2, 0, 2, 0, 2], [0, 1, 2, 0, 1, 2], [0.5, 1, 0, 1, 0, 1],
                               [-1, 0, 1, -1, 0, 1]])
def test_logistic_labels_outside_the_domain(y):
    X, _ = data()
    with pytest.raises(ValueError, match=r"LogisticLoss needs binary labels in \{0, 1\} or"):
        ro.Objective("logistic", ro.Mean(), X, np.array(y, dtype=float))


@pytest.mark.parametrize("y", [[0, 1, -1, 2, 0, 1], [0, 1, 2.5, 2, 0, 1]])
def test_multinomial_labels_outside_the_domain(y):
    X, _ = data()
    with pytest.raises(ValueError, match="MultinomialLoss needs integer class labels 0..K-1"):
        ro.Objective("multinomial", ro.Mean(), X, np.array(y, dtype=float))


def test_multinomial_class_count():
    X, _ = data()
    y = np.array([0, 1, 2, 3, 0, 1], dtype=float)
    with pytest.raises(ValueError, match="label 3 out of range for n_classes=3"):
        ro.Objective(ro.MultinomialLoss(n_classes=3), ro.Mean(), X, y)
    with pytest.raises(ValueError, match="needs at least 2 classes"):
        ro.Objective("multinomial", ro.Mean(), X, np.zeros(6))


def test_unknown_loss_and_risk_names():
    X, y = data()
    with pytest.raises(ValueError, match="unknown loss 'hinge2'"):
        ro.Objective("hinge2", ro.Mean(), X, y)
    with pytest.raises(ValueError, match="unknown risk 'cvx:0.1'"):
        ro.Objective("squared", "cvx:0.1", X, y)
    with pytest.raises(ValueError, match="risk 'cvar' needs a parameter"):
        ro.parse_risk("cvar")
    with pytest.raises(ValueError, match="risk 'mean' takes no parameter"):
        ro.parse_risk("mean:1")
    with pytest.raises(ValueError, match="bad risk parameter 'abc'"):
        ro.parse_risk("esrm:abc")
    with pytest.raises(ValueError, match="unknown risk 3.0"):
        ro.Objective("squared", 3.0, X, y)


@pytest.mark.parametrize("mu,msg", [(-0.1, "l2_reg must be >= 0, got -0.1"),
                                    (np.nan, "l2_reg must be finite"),
                                    ("0.1", "l2_reg must be a real number")])
def test_bad_l2_reg(mu, msg):
    X, y = data()
    with pytest.raises(ValueError, match=msg):
        ro.Objective("squared", ro.Mean(), X, y, l2_reg=mu)


def test_bad_sample_weight():
    X, y = data()
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(6,\)"):
        ro.Objective("squared", ro.Mean(), X, y, sample_weight=np.ones(5))
    with pytest.raises(ValueError, match="sample_weight must be finite, non-negative"):
        ro.Objective("squared", ro.Mean(), X, y, sample_weight=-np.ones(6))


# --------------------------------------------------------------------------- spectra and risks
@pytest.mark.parametrize("sigma,msg", [
    ([0.5, 0.3, 0.2], r"non-decreasing \(sigma_1 <= ... <= sigma_n\)"),
    ([-0.1, 0.5, 0.6], "spectrum must be non-negative"),
    ([0.2, 0.3, 0.4], "spectrum must sum to 1, sums to 0.9"),
    ([0.2, np.nan, 0.8], "spectrum contains 1 NaN"),
    ([[0.5, 0.5]], "spectrum must have 1 dimension"),
    ([], "spectrum is empty"),
])
def test_invalid_spectra(sigma, msg):
    with pytest.raises(ValueError, match=msg):
        ro.SpectralRisk(np.array(sigma, dtype=float))


def test_spectrum_of_the_wrong_length():
    risk = ro.SpectralRisk(np.array([0.2, 0.3, 0.5]))
    X, y = data(n=5)
    with pytest.raises(ValueError, match="this spectrum is for n=3 samples, not 5"):
        ro.Objective("squared", risk, X, y)
    with pytest.raises(ValueError, match="this spectrum is for n=3 samples, not 4"):
        risk.value(np.zeros(4))
    with pytest.raises(ValueError, match="spectrum has length 3 but there are 4 losses"):
        check_spectrum([0.2, 0.3, 0.5], n=4)
    with pytest.raises(ValueError, match="SpectralRisk needs a spectrum sigma"):
        ro.SpectralRisk()


@pytest.mark.parametrize("make,msg", [
    (lambda: ro.CVaR(0.0), "tail_fraction must be > 0, got 0.0"),
    (lambda: ro.CVaR(-0.2), "tail_fraction must be > 0"),
    (lambda: ro.CVaR(1.5), r"tail_fraction must be in \(0, 1\], got 1.5"),
    (lambda: ro.CVaR(np.nan), "tail_fraction must be finite"),
    (lambda: ro.CVaR("0.5"), "tail_fraction must be a real number"),
    (lambda: ro.ESRM(0.0), "rho must be > 0, got 0.0"),
    (lambda: ro.ESRM(-1.0), "rho must be > 0"),
    (lambda: ro.Extremile(0.5), "extremile r must be >= 1"),
    (lambda: ro.Extremile(0.0), "r must be > 0"),
])
def test_invalid_risk_parameters(make, msg):
    with pytest.raises(ValueError, match=msg):
        make()


@pytest.mark.parametrize("cls", RISK_CLASSES + (ro.SpectralRisk,))
def test_negative_shift_cost_and_unknown_divergence(cls):
    args = (np.array([0.5, 0.5]),) if cls is ro.SpectralRisk else ()
    with pytest.raises(ValueError, match="shift_cost must be >= 0, got -0.5"):
        cls(*args, shift_cost=-0.5)
    with pytest.raises(ValueError, match="shift_cost must be finite"):
        cls(*args, shift_cost=np.inf)
    with pytest.raises(ValueError, match=r"divergence must be one of \['chi2', 'kl'\], got 'tv'"):
        cls(*args, divergence="tv")


@pytest.mark.parametrize("losses,msg", [
    (np.array([1.0, np.nan]), "losses contains 1 NaN"),
    (np.ones((2, 2)), "losses must have 1 dimension"),
    (np.zeros(0), "losses is empty"),
])
def test_bad_losses_for_the_oracle(losses, msg):
    with pytest.raises(ValueError, match=msg):
        ro.CVaR(0.5).value(losses)
    with pytest.raises(ValueError, match=msg):
        ro.ESRM(1.0, shift_cost=0.3).weights(losses)


@pytest.mark.parametrize("length", [3, 7])
def test_risk_weights_rejects_losses_of_the_wrong_length(length):
    # in a subprocess: the unchecked kernel call can corrupt the heap and abort the interpreter
    code = textwrap.dedent(f"""
        import numpy as np, riskopt as ro
        rng = np.random.default_rng(0)
        obj = ro.Objective("squared", ro.CVaR(0.5), rng.normal(size=(5, 2)), rng.normal(size=5))
        try:
            obj.risk_weights(np.arange({length}.0))
        except ValueError as exc:
            assert "losses" in str(exc), exc
            print("raised ValueError")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "raised ValueError" in out.stdout, (out.returncode, out.stderr)


# --------------------------------------------------------------------------- coefficients
@pytest.mark.parametrize("loss,fit_intercept", [("squared", False), ("logistic", True),
                                                ("multinomial", True)])
def test_wrong_coefficient_shape(loss, fit_intercept):
    obj = make_problem(loss, ro.CVaR(0.5), n=10, d=3, fit_intercept=fit_intercept)
    shape = obj.coef_shape
    wrong = np.zeros(int(np.prod(shape)) + 1)
    for method in (obj.value, obj.grad, obj.value_grad, obj.losses, obj.weights, obj.as_matrix):
        with pytest.raises(ValueError, match=rf"coefficient has {wrong.size} entries, "
                                             rf"expected shape \({shape[0]},"):
            method(wrong)
    with pytest.raises(ValueError, match="coefficient has"):
        ro.solvers.LBFGS().run(obj, coef0=wrong)


# --------------------------------------------------------------------------- solvers
def test_unknown_solver():
    with pytest.raises(ValueError, match="unknown solver 'nope'; available:"):
        ro.solvers.get("nope")


def supported_objective(solver):
    """A small problem the solver accepts: a spectral risk with nu > 0 or nu = 0, or CVaR in
    the Rockafellar-Uryasev form (``riskopt.objectives.ru_cvar``) for the SPL family."""
    candidates = [make_problem("squared", ro.CVaR(0.5, shift_cost=nu), n=10, d=2)
                  for nu in (0.5, 0.0)]
    try:
        from riskopt.objectives.ru_cvar import RUCVaRObjective
        X, y = data(n=10, d=2)
        candidates.append(RUCVaRObjective("squared", X, y, beta=0.5))
    except ImportError:
        pass
    X, y = data(n=10, d=2)   # KL-DRO (constrained, then penalised) for the SCDRO family
    candidates += [ro.Objective("squared", ro.KLDRO(radius=0.3), X, y),
                   ro.Objective("squared", ro.KLDRO(shift_cost=1.0), X, y)]
    g = np.arange(10) % 2   # group DRO and constrained learning for the FCCO family
    candidates += [ro.Objective("squared", ro.CVaR(0.5), X, y, groups=g),
                   ro.ConstrainedObjective("squared", X, y, [(g == 0, 1.0)],
                                           penalty="squared_hinge")]
    for obj in candidates:
        try:
            solver.init_state(obj)
        except ValueError:
            continue
        return obj
    pytest.fail(f"{solver!r} accepts none of the small squared-loss CVaR problems")


@pytest.mark.skipif(not SOLVERS, reason="no stochastic solver registered yet")
@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize("lr,msg", [(0, "lr must be > 0, got 0"), (-0.1, "lr must be > 0"),
                                    (np.nan, "lr must be finite"),
                                    ("fast", "lr must be a real number")])
def test_non_positive_step_size(name, lr, msg):
    solver = ro.solvers.get(name, lr=lr)  # constructors only store
    for nu in (0.0, 0.5):  # whichever objective the solver supports, lr is checked first
        obj = make_problem("squared", ro.CVaR(0.5, shift_cost=nu), n=10, d=2)
        with pytest.raises(ValueError, match=msg):
            solver.init_state(obj)
        with pytest.raises(ValueError, match=msg):
            solver.run(obj, max_epochs=1)


@pytest.mark.skipif(not SOLVERS, reason="no stochastic solver registered yet")
@pytest.mark.parametrize("name", SOLVERS)
def test_bad_max_epochs_and_coef0(name):
    solver = ro.solvers.get(name)
    obj = supported_objective(solver)
    p = obj.coef_shape[0]
    for bad, msg in ((-1, "max_epochs must be >= 0, got -1"),
                     (2.5, "max_epochs must be an integer, got 2.5"),
                     ("3", "max_epochs must be an integer"),
                     (True, "max_epochs must be an integer, got True")):
        with pytest.raises(ValueError, match=msg):
            solver.run(obj, max_epochs=bad)
    with pytest.raises(ValueError, match=rf"coefficient has {p + 1} entries, expected shape "
                                         rf"\({p},\)"):
        solver.init_state(obj, coef0=np.zeros(p + 1))
    with pytest.raises(ValueError, match="coef0 contains NaN or infinite values"):
        solver.init_state(obj, coef0=np.r_[np.nan, np.zeros(p - 1)])


@pytest.mark.parametrize("params,msg", [({"tol": 0.0}, "tol must be > 0"),
                                        ({"tol": -1e-8}, "tol must be > 0"),
                                        ({"max_iter": 0}, "max_iter must be >= 1"),
                                        ({"max_iter": 10.5}, "max_iter must be an integer")])
@pytest.mark.parametrize("cls", [ro.solvers.LBFGS, ro.solvers.Newton])
def test_bad_lbfgs_parameters(params, msg, cls):
    obj = make_problem("squared", ro.CVaR(0.5, shift_cost=0.5), n=10, d=2)
    obj.l2_reg = 0.1  # Newton needs l2_reg > 0
    obj.reg[:] = 0.1
    with pytest.raises(ValueError, match=msg):
        cls(**params).run(obj)


# --------------------------------------------------------------------------- datasets
def test_bad_dataset_requests():
    with pytest.raises(ValueError, match="unknown dataset 'yachts'"):
        ro.datasets.load("yachts")
    with pytest.raises(ValueError, match="protocol must be 'paper' or 'clean', got 'raw'"):
        ro.datasets.load("yacht", protocol="raw")
