"""The Objective: value against a NumPy reference, gradient against finite differences,
the unpenalised intercept, the multinomial coefficient shapes.

The reference value is built from ``loss.value`` (NumPy) and the oracle twin
``tests/reference_impl/oracles.py``; it never calls the numba kernels.
"""
import itertools
import zlib

import numpy as np
import pytest

import riskopt as ro
from conftest import LOSSES, make_problem, make_targets, random_coef
from reference_impl import oracles as tw

RISKS = (ro.CVaR(0.5), ro.CVaR(0.27), ro.ESRM(1.0), ro.Extremile(2.0), ro.Mean(), ro.MaxLoss())
DIVS = ("chi2", "kl")


def with_shift(risk, nu, div):
    return type(risk)(*[getattr(risk, f) for f in risk.__dataclass_fields__
                        if f not in ("shift_cost", "divergence")], shift_cost=nu, divergence=div)


def reference_value_grad(obj, W, nu, div):
    """F and grad F from loss.value / loss.deriv and the twin oracle (NumPy only)."""
    W = np.asarray(W, dtype=np.float64).reshape(obj.p, obj.K)
    Z = obj.X @ W
    losses = obj.loss.value(obj.y, Z)
    derivs = np.asarray(obj.loss.deriv(obj.y, Z)).reshape(obj.n, obj.K)
    value, q = tw.risk_value(losses, obj.sigma, nu, div)
    mask = np.ones(obj.p)
    if obj.fit_intercept:
        mask[-1] = 0.0
    value += 0.5 * obj.l2_reg * np.sum(mask[:, None] * W**2)
    grad = obj.X.T @ (q[:, None] * derivs) + obj.l2_reg * mask[:, None] * W
    return value, grad, losses, derivs


def central_differences(f, w, h=1e-6):
    w = np.array(w, dtype=np.float64)
    g = np.empty_like(w)
    for idx in np.ndindex(w.shape):
        e = np.zeros_like(w)
        e[idx] = h
        g[idx] = (f(w + e) - f(w - e)) / (2 * h)
    return g


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("loss", LOSSES)
def test_gradient_matches_central_differences(loss, div, fit_intercept):
    rng = np.random.default_rng(zlib.crc32(f"{loss}/{div}/{fit_intercept}".encode()))
    for k, (risk, nu) in enumerate(itertools.product(RISKS[:4], (0.05, 1.0))):
        obj = make_problem(loss, with_shift(risk, nu, div), n=15, d=3,
                           fit_intercept=fit_intercept, l2_reg=0.3, seed=k)
        w = random_coef(obj, rng)
        if loss == "absolute":  # stay away from the kink of |z - y|
            assert np.min(np.abs(obj.X @ obj.as_matrix(w)[:, 0] - obj.y)) > 1e-4
        g = obj.grad(w)
        assert g.shape == w.shape
        fd = central_differences(obj.value, w)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7, err_msg=f"{risk} nu={nu}")


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("loss", LOSSES)
def test_value_and_gradient_match_numpy_reference(loss, div, fit_intercept):
    rng = np.random.default_rng(7)
    for k, (risk, nu) in enumerate(itertools.product(RISKS, (0.0, 0.01, 0.5, 20.0))):
        obj = make_problem(loss, with_shift(risk, nu, div), n=11, d=2,
                           fit_intercept=fit_intercept, l2_reg=0.2, seed=k)
        w = random_coef(obj, rng)
        value_ref, grad_ref, losses_ref, derivs_ref = reference_value_grad(obj, w, nu, div)
        value, grad = obj.value_grad(w)
        assert value == pytest.approx(value_ref, rel=1e-12, abs=1e-12)
        assert obj.value(w) == value
        np.testing.assert_allclose(grad, grad_ref.reshape(w.shape), rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(obj.grad(w), grad)
        losses, derivs = obj.losses_derivs(w)
        np.testing.assert_allclose(losses, losses_ref, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(derivs, derivs_ref, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(obj.weights(w), tw.weights(losses_ref, obj.sigma, nu, div),
                                   rtol=0, atol=1e-12)


def test_tied_losses_get_the_tie_averaged_subgradient():
    """With nu = 0 and tied losses the gradient uses sigma averaged over the tie."""
    X = np.array([[1.0], [1.0], [2.0], [-1.0]])
    y = np.array([0.0, 0.0, 0.0, 0.0])
    obj = ro.Objective("squared", ro.CVaR(0.25), X, y)  # sigma = (0, 0, 0, 1)
    w = np.array([1.0])  # losses 0.5, 0.5, 2, 0.5: the max is unique
    np.testing.assert_allclose(obj.weights(w), [0, 0, 1, 0])
    assert obj.grad(w)[0] == pytest.approx(2.0 * 2.0)
    obj = ro.Objective("squared", ro.CVaR(0.5), X[[0, 1, 3]], y[:3])  # 3 samples
    # losses 0.5, 0.5, 0.5 tie; sigma = (0, 1/3, 2/3) averaged: 1/3 each
    np.testing.assert_allclose(obj.weights(w), np.full(3, 1 / 3), atol=1e-15)
    assert obj.value(w) == pytest.approx(0.5, rel=1e-14)


@pytest.mark.parametrize("loss", LOSSES)
def test_intercept_is_not_penalised(loss):
    mu = 0.7
    obj = make_problem(loss, ro.ESRM(1.0, shift_cost=0.3), n=12, d=3, fit_intercept=True,
                       l2_reg=mu, seed=3)
    assert obj.p == 4 and obj.n_features == 3
    np.testing.assert_array_equal(obj.X[:, -1], np.ones(obj.n))
    np.testing.assert_array_equal(obj.reg, [mu, mu, mu, 0.0])
    rng = np.random.default_rng(0)
    W = obj.as_matrix(random_coef(obj, rng))
    risk_part = obj.risk_weights(obj.losses(W))[0]
    assert obj.value(W) - risk_part == pytest.approx(0.5 * mu * np.sum(W[:-1] ** 2), rel=1e-12)
    # the regulariser's gradient has no intercept row
    losses, derivs = obj.losses_derivs(W)
    q = obj.risk_weights(losses)[1]
    G = obj.grad(W)
    np.testing.assert_allclose(G[-1], (q[:, None] * derivs).sum(axis=0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(G[:-1], obj.X[:, :-1].T @ (q[:, None] * derivs) + mu * W[:-1],
                               rtol=1e-12, atol=1e-14)
    # a huge intercept is not penalised: for the squared loss, shifting y and the intercept
    # together leaves the value unchanged
    if loss == "squared":
        shifted = ro.Objective("squared", obj.risk, obj.X[:, :-1], obj.y + 1e3, l2_reg=mu,
                               fit_intercept=True)
        W2 = W.copy()
        W2[-1] += 1e3
        assert shifted.value(W2) == pytest.approx(obj.value(W), rel=1e-9)


def test_without_intercept_every_coefficient_is_penalised():
    obj = make_problem("squared", ro.CVaR(0.5), n=10, d=3, fit_intercept=False, l2_reg=0.4)
    assert obj.p == 3
    np.testing.assert_array_equal(obj.reg, np.full(3, 0.4))
    w = np.array([1.0, -2.0, 0.5])
    risk_part = obj.risk_weights(obj.losses(w))[0]
    assert obj.value(w) - risk_part == pytest.approx(0.2 * np.sum(w**2), rel=1e-12)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_multinomial_shapes(fit_intercept):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(9, 2))
    y = make_targets("multinomial", X, rng, n_classes=3)
    obj = ro.Objective("multinomial", ro.CVaR(0.5, shift_cost=0.2), X, y, l2_reg=0.1,
                       fit_intercept=fit_intercept)
    p = 3 if fit_intercept else 2
    assert (obj.p, obj.K, obj.coef_shape) == (p, 3, (p, 3))
    assert obj.zeros().shape == (p, 3)
    W = rng.normal(size=(p, 3))
    value, G = obj.value_grad(W)
    assert G.shape == (p, 3)
    # a flat coefficient is accepted and the gradient keeps its shape
    value_flat, G_flat = obj.value_grad(W.ravel())
    assert value_flat == value and G_flat.shape == (3 * p,)
    np.testing.assert_array_equal(G_flat, G.ravel())
    assert obj.as_matrix(W.ravel()).shape == (p, 3)
    np.testing.assert_array_equal(obj.as_coef(obj.as_matrix(W)), W)
    np.testing.assert_allclose(G, central_differences(obj.value, W), rtol=1e-6, atol=1e-7)
    # predictions and losses follow z = x @ W (K columns)
    Z = obj.X @ W
    np.testing.assert_allclose(obj.losses(W), obj.loss.value(obj.y, Z), rtol=1e-13)
    # n_classes larger than the labels seen
    obj4 = ro.Objective(ro.MultinomialLoss(n_classes=4), ro.Mean(), X, y)
    assert obj4.K == 4 and obj4.coef_shape == (2, 4)
    with pytest.raises(ValueError, match="expected shape"):
        obj.value(np.zeros((p, 2)))


def test_scalar_losses_have_flat_coefficients():
    obj = make_problem("logistic", ro.Extremile(2.0), n=10, d=3, fit_intercept=True)
    assert obj.K == 1 and obj.coef_shape == (4,)
    w = np.arange(4.0) / 10
    assert obj.grad(w).shape == (4,)
    assert obj.grad(w.reshape(4, 1)).shape == (4, 1)
    assert obj.value(w.reshape(4, 1)) == obj.value(w)


def test_logistic_labels_pm1_and_01_give_the_same_objective():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(20, 3))
    y01 = make_targets("logistic", X, rng)
    obj01 = ro.Objective("logistic", ro.CVaR(0.3, shift_cost=0.1), X, y01, l2_reg=0.05)
    objpm = ro.Objective("logistic", ro.CVaR(0.3, shift_cost=0.1), X, 2 * y01 - 1, l2_reg=0.05)
    w = rng.normal(size=3)
    assert obj01.value(w) == objpm.value(w)
    np.testing.assert_array_equal(obj01.grad(w), objpm.grad(w))


def test_cvar_one_and_mean_share_the_value_and_gradient_of_the_loss_average():
    obj = make_problem("squared", ro.Mean(), n=25, d=3, l2_reg=0.0)
    w = np.array([0.3, -0.1, 0.2])
    Z = obj.X @ w
    assert obj.value(w) == pytest.approx(np.mean(0.5 * (Z - obj.y) ** 2), rel=1e-13)
    np.testing.assert_allclose(obj.grad(w), obj.X.T @ (Z - obj.y) / obj.n, rtol=1e-12)


def test_with_shift_copies_the_shift_cost_and_leaves_the_original():
    obj = make_problem("squared", ro.CVaR(0.5), n=12, d=2)
    other = obj.with_shift(0.8, ro.risks._DIVERGENCES["kl"])
    assert (other.nu, other.div) == (0.8, 1) and (obj.nu, obj.div) == (0.0, 0)
    w = np.array([0.2, -0.4])
    losses = obj.losses(w)
    assert other.value(w) == pytest.approx(
        tw.risk_value(losses, obj.sigma, 0.8, "kl")[0] + 0.5 * obj.l2_reg * w @ w, rel=1e-12)


@pytest.mark.parametrize("loss", ["squared", "logistic", "multinomial"])
def test_smoothness_bounds_the_curvature_of_each_loss(loss):
    """L_i bounds |grad l_i(w) - grad l_i(w')| / |w - w'| (sampled)."""
    obj = make_problem(loss, ro.Mean(), n=10, d=3, fit_intercept=True)
    L = obj.smoothness()
    assert L.shape == (obj.n,)
    rng = np.random.default_rng(5)
    for _ in range(20):
        W1, W2 = (obj.as_matrix(random_coef(obj, rng, scale=2.0)) for _ in range(2))
        d1 = obj.losses_derivs(W1)[1]
        d2 = obj.losses_derivs(W2)[1]
        for i in range(obj.n):
            g1, g2 = np.outer(obj.X[i], d1[i]), np.outer(obj.X[i], d2[i])
            assert np.linalg.norm(g1 - g2) <= L[i] * np.linalg.norm(W1 - W2) * (1 + 1e-12)


@pytest.mark.parametrize("name", ["squared", "absolute", "logistic"])
def test_the_newton_loss_pass_is_the_objective_loss_pass_bit_for_bit(name):
    """``losses_derivs_1`` (the Newton solver's loss pass: the logistic loss and the squared /
    absolute ones in separate kernels, so that a first fit compiles its own loss only) gives
    the objective's losses and derivatives (``_losses_derivs_z``) bit for bit and the NumPy
    formulas to rounding, both sides of every kink and branch (``z`` = 0, +-700, +-1e-300,
    ``r = 0``) included."""
    from riskopt._kernels import losses as kl

    rng = np.random.default_rng(3)
    z = np.concatenate([rng.normal(scale=5.0, size=500), [0.0, -0.0, 700.0, -700.0,
                                                           1e-300, -1e-300, 40.0, -40.0]])
    y = (rng.random(z.shape[0]) < 0.5).astype(float) if name == "logistic" else \
        np.concatenate([z[:250] + rng.normal(size=250), z[250:]])  # r = 0 for the rest
    code = {"squared": kl.SQUARED, "absolute": kl.ABSOLUTE, "logistic": kl.LOGISTIC}[name]
    ell, der = np.empty_like(z), np.empty_like(z)
    kl.losses_derivs_1(code, y, z, ell, der)
    ell_z, der_z = np.empty_like(z), np.empty((z.shape[0], 1))
    kl._losses_derivs_z(code, y, z[:, None].copy(), ell_z, der_z)
    assert np.array_equal(ell, ell_z) and np.array_equal(der, der_z[:, 0])
    r = z - y
    ref = {"squared": (0.5 * r * r, r), "absolute": (np.abs(r), np.sign(r)),
           "logistic": (np.logaddexp(0.0, z) - y * z, 0.5 * (1.0 + np.tanh(0.5 * z)) - y)}
    np.testing.assert_allclose(ell, ref[name][0], rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(der, ref[name][1], rtol=1e-13, atol=1e-15)


def test_read_only_targets_are_copied_to_one_kernel_type():
    """A read-only ``y`` (pandas 3: ``df["y"].to_numpy()`` of a float64 column is a read-only
    view) is stored writable, so the kernels that take ``y`` see one numba type and are not
    compiled a second time (``riskopt fit`` on a float target after ``riskopt warmup``, stop
    43); a writable ``y`` is not copied, and the numbers are the same bit for bit."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 3))
    y = make_targets("squared", X, rng).astype(np.float64)
    frozen = y.copy()
    frozen.setflags(write=False)
    a = ro.Objective("squared", ro.CVaR(0.3), X, y)
    b = ro.Objective("squared", ro.CVaR(0.3), X, frozen)
    assert a.y is y and b.y.flags.writeable and not frozen.flags.writeable
    W = random_coef(a, rng)
    fa, ga = a.value_grad(W)
    fb, gb = b.value_grad(W)
    assert fa == fb and np.array_equal(ga, gb)
