"""Pairwise X-risk losses (one-way / two-way partial AUC) against brute-force formulas with
the reference oracles, and their device (masked, compiled) path against the host path."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import riskopt as ro  # noqa: E402
from riskopt.objectives.kl_dro import log_mean_exp  # noqa: E402
from riskopt.torch.losses import PAUCLoss, TwoWayPAUCLoss  # noqa: E402


def _batch(seed, b=40):
    rng = np.random.default_rng(seed)
    s = np.round(rng.normal(size=b), 1)  # ties in the pairwise losses
    y = (rng.random(b) < 0.35).astype(int)
    y[:2] = [0, 1]
    return s, y


def _pairs(s, y, margin=1.0):
    return np.maximum(margin - (s[y == 1][:, None] - s[y == 0][None, :]), 0.0) ** 2


def _brute(kind, s, y, beta=0.2, lam=0.7, alpha=0.5, lam2=1.5, two_way=False):
    L = _pairs(s, y)
    if kind == "cvar":
        rows = np.array([ro.CVaR(beta).value(r) for r in L])
        return ro.CVaR(alpha).value(rows) if two_way else rows.mean()
    rows = np.array([log_mean_exp(r, lam)[0] for r in L])
    return log_mean_exp(rows, lam2)[0] if two_way else rows.mean()


@pytest.mark.parametrize("kind", ["cvar", "kl"])
@pytest.mark.parametrize("two_way", [False, True])
def test_pauc_losses_equal_brute_force_and_gradient_is_danskin(kind, two_way):
    s_np, y_np = _batch(1)
    s = torch.tensor(s_np, requires_grad=True)
    crit = (TwoWayPAUCLoss(kind, pos_fraction=0.5, tail_fraction=0.2, shift_cost=0.7,
                           pos_shift_cost=1.5) if two_way
            else PAUCLoss(kind, tail_fraction=0.2, shift_cost=0.7))
    v = crit(s, torch.tensor(y_np))
    assert abs(v.item() - _brute(kind, s_np, y_np, two_way=two_way)) < 1e-10
    v.backward()
    # Danskin: the value's derivative along a direction equals the directional derivative
    # (central difference; the risk is piecewise smooth, ties excepted: small step)
    rng = np.random.default_rng(2)
    for _ in range(3):
        d = rng.normal(size=s_np.shape)
        eps = 1e-6
        fd = (_brute(kind, s_np + eps * d, y_np, two_way=two_way)
              - _brute(kind, s_np - eps * d, y_np, two_way=two_way)) / (2 * eps)
        assert abs(fd - float(s.grad.numpy() @ d)) < 1e-4 * max(1.0, abs(fd))


@pytest.mark.parametrize("make", [lambda: PAUCLoss("cvar", 0.1), lambda: PAUCLoss("kl"),
                                  lambda: TwoWayPAUCLoss("cvar", 0.5, 0.2),
                                  lambda: TwoWayPAUCLoss("kl", shift_cost=0.5)])
def test_masked_device_path_compiles_and_equals_host_path(make):
    """Under torch.compile (fullgraph, Dynamo's eager backend) the losses take the masked
    (b, b) path with no data-dependent shape; value and gradient equal the host path."""
    s_np, y_np = _batch(3, b=48)
    y = torch.tensor(y_np)
    s = torch.tensor(s_np, requires_grad=True)
    crit = make()
    v0 = crit(s, y)
    v0.backward()
    g0 = s.grad.clone()
    s.grad = None
    v1 = torch.compile(crit, fullgraph=True, backend="eager")(s, y)
    v1.backward()
    assert abs(float(v1) - float(v0)) < 1e-12 * max(1.0, abs(float(v0)))
    np.testing.assert_allclose(s.grad.numpy(), g0.numpy(), rtol=0, atol=1e-12)


def test_pauc_bad_input():
    crit = PAUCLoss()
    with pytest.raises(ValueError, match="positives and negatives"):
        crit(torch.randn(4), torch.tensor([0, 0, 0, 0]))
    with pytest.raises(ValueError, match="0 or 1"):
        crit(torch.randn(3), torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="shape"):
        crit(torch.randn(3), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="risk"):
        PAUCLoss("cvx")
    with pytest.raises(ValueError, match="tail_fraction"):
        PAUCLoss(tail_fraction=1.5)


def test_roc_fairness_loss_equals_its_formula_and_compiles():
    """Eq. (53) by boolean indexing in NumPy against the masked module; the forward
    compiles with fullgraph (no host read) and gives the same value."""
    from riskopt.torch.losses import ROCFairnessAUCLoss
    rng = np.random.default_rng(5)
    b = 60
    s_np = rng.normal(size=b)
    y = (rng.random(b) < 0.4).astype(int)
    a = (rng.random(b) < 0.5).astype(int)
    y[:4], a[:4] = [0, 0, 1, 1], [0, 1, 0, 1]
    sig = lambda t: 1 / (1 + np.exp(-t))  # noqa: E731
    taus = np.arange(-3.0, 4.0)
    direct = -sig(s_np[y == 1][:, None] - s_np[y == 0][None, :]).mean()

    def m(sel):
        return sig(s_np[sel][:, None] - taus[None, :]).mean(0)
    g = np.concatenate([m((y == 1) & (a == 1)) - m((y == 1) & (a == 0)),
                        m((y == 0) & (a == 1)) - m((y == 0) & (a == 0))])
    for pen, f in (("hinge", lambda h: h), ("squared_hinge", lambda h: h * h)):
        crit = ROCFairnessAUCLoss(kappa=0.01, rho=2.0, penalty=pen)
        s = torch.tensor(s_np, requires_grad=True)
        d_t, g_t = crit.terms(s, torch.tensor(y), torch.tensor(a))
        assert abs(float(d_t) - direct) < 1e-12
        np.testing.assert_allclose(g_t.detach().numpy(), g, rtol=0, atol=1e-12)
        want = direct + 2.0 * f(np.maximum(np.abs(g) - 0.01, 0)).mean()
        v = crit(s, torch.tensor(y), torch.tensor(a))
        assert abs(float(v) - want) < 1e-12
    v2 = torch.compile(crit, fullgraph=True, backend="eager")(s, torch.tensor(y), torch.tensor(a))
    assert abs(float(v2) - want) < 1e-12
