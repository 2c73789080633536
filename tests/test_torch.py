"""Tests of the optional PyTorch layer ``riskopt.torch``.

* batch weights / values of :class:`SpectralRiskLoss` against the NumPy oracle and its twin for
  every built-in risk x chi2 / KL x shift cost (0 included), float32 and float64;
* gradients through a linear model equal :meth:`riskopt.Objective.grad` (squared, logistic,
  multinomial; with and without intercept);
* :class:`TableSpectralRiskLoss`: the sorted table kept by merging equals a full re-sort, and
  with an exact table the expected batch gradient over all batches equals the full-batch
  gradient (the plain mini-batch loss does not);
* group DRO and KL-DRO against small NumPy / cvxpy references (the NumPy KL-DRO maths
  themselves, :mod:`riskopt.objectives.kl_dro`, are tested in ``test_kl_dro_numpy.py``);
* a 2-process gloo run (unequal and empty per-rank batches, DDP) reproduces the single-process
  full-batch values, weights, gradients and tables;
* bad inputs raise ValueError; ``import riskopt`` does not import torch; the public import
  paths (``riskopt.torch.X``, ``riskopt.torch.losses.X``, one module per loss) hold.
"""
import itertools
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import riskopt as ro  # noqa: E402
from conftest import make_problem  # noqa: E402
from reference_impl import oracles as tw  # noqa: E402
from riskopt.objectives.kl_dro import kl_dro_weights  # noqa: E402
from riskopt.torch import (GroupDROLoss, KLDROLoss, SpectralRiskLoss,  # noqa: E402
                           TableSpectralRiskLoss, kl_dro)

F64 = torch.float64


def _builtin_risks(shift_cost, divergence):
    return [ro.CVaR(0.3, shift_cost=shift_cost, divergence=divergence),
            ro.ESRM(2.0, shift_cost=shift_cost, divergence=divergence),
            ro.Extremile(2.0, shift_cost=shift_cost, divergence=divergence),
            ro.Mean(shift_cost=shift_cost, divergence=divergence),
            ro.MaxLoss(shift_cost=shift_cost, divergence=divergence)]


ALL_RISKS = [r for nu in (0.0, 0.05, 1.0) for div in ("chi2", "kl")
             for r in _builtin_risks(nu, div)]


def _losses_with_ties(rng, b):
    l = rng.normal(size=b)
    l[3] = l[7]  # a tie
    l[10:13] = l[0]  # a triple tie
    return l


# ---------------------------------------------------------------------------- import hygiene
def test_import_riskopt_does_not_import_torch():
    code = "import sys, riskopt; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_import_paths():
    import riskopt.torch as rt
    import riskopt.torch.losses as rl
    from riskopt.torch.losses import group_dro, kl, spectral, table
    from riskopt.torch.optim import IndexedStateOptimizer

    modules = {"SpectralRiskLoss": spectral, "TableSpectralRiskLoss": table,
               "GroupDROLoss": group_dro, "KLDROLoss": kl}
    for name, module in modules.items():
        assert getattr(rt, name) is getattr(rl, name) is getattr(module, name)
        assert getattr(rt, name).__module__ == module.__name__
    # riskopt.torch.kl_dro / riskopt.torch.losses.kl_dro: the NumPy function, now living in
    # riskopt.objectives.kl_dro
    assert rt.kl_dro is rl.kl_dro is kl_dro is kl_dro_weights
    assert rt.optim.IndexedStateOptimizer is IndexedStateOptimizer
    assert set(rt.__all__) >= {"SpectralRiskLoss", "TableSpectralRiskLoss", "GroupDROLoss",
                               "KLDROLoss", "kl_dro", "distributed", "losses", "optim"}


# ---------------------------------------------------------------------------- batch weights
@pytest.mark.parametrize("risk", ALL_RISKS, ids=repr)
def test_batch_weights_equal_numpy_oracle(risk):
    rng = np.random.default_rng(0)
    l_np = _losses_with_ties(rng, 37)
    l = torch.tensor(l_np, dtype=F64, requires_grad=True)
    crit = SpectralRiskLoss(risk)
    r = crit(l)
    r.backward()
    q_np = risk.weights(l_np)
    np.testing.assert_allclose(l.grad.numpy(), q_np, rtol=0, atol=1e-12)
    np.testing.assert_allclose(crit.weights(l.detach()).numpy(), q_np, rtol=0, atol=1e-12)
    assert abs(r.item() - risk.value(l_np)) < 1e-12
    # and the pure-NumPy twin written from the paper
    val_tw, q_tw = tw.risk_value(l_np, risk.spectrum(37), risk.shift_cost, risk.divergence)
    np.testing.assert_allclose(l.grad.numpy(), q_tw, rtol=0, atol=1e-10)
    assert abs(r.item() - val_tw) < 1e-10


@pytest.mark.parametrize("risk", [ro.CVaR(0.3, shift_cost=0.05),
                                  ro.ESRM(2.0, shift_cost=1.0, divergence="kl"),
                                  ro.Extremile(2.0)], ids=repr)
def test_float32_keeps_dtype_and_matches_float64(risk):
    rng = np.random.default_rng(1)
    l_np = rng.normal(size=50)
    l32 = torch.tensor(l_np, dtype=torch.float32, requires_grad=True)
    r = SpectralRiskLoss(risk)(l32)
    r.backward()
    assert r.dtype == torch.float32 and l32.grad.dtype == torch.float32
    q64 = risk.weights(l32.detach().double().numpy())
    np.testing.assert_allclose(l32.grad.numpy(), q64, rtol=0, atol=1e-6)
    assert abs(r.item() - risk.value(l32.detach().double().numpy())) < 1e-5


def _torch_losses(loss, Z, y):
    """Per-sample losses of riskopt's loss family in torch (the same formulas)."""
    if loss == "squared":
        return 0.5 * (Z[:, 0] - y) ** 2
    if loss == "logistic":
        return torch.nn.functional.softplus(Z[:, 0]) - y * Z[:, 0]
    if loss == "multinomial":
        return torch.nn.functional.cross_entropy(Z, y.long(), reduction="none")
    raise ValueError(loss)


@pytest.mark.parametrize("loss", ["squared", "logistic", "multinomial"])
@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("risk", [ro.CVaR(0.5, shift_cost=0.5),
                                  ro.ESRM(1.0, shift_cost=0.1, divergence="kl"),
                                  ro.Extremile(2.0)], ids=repr)
def test_gradient_through_linear_model_equals_objective(loss, fit_intercept, risk):
    obj = make_problem(loss, risk, n=30, d=4, fit_intercept=fit_intercept, l2_reg=0.1, seed=3)
    w = 0.5 * np.random.default_rng(4).normal(size=obj.coef_shape)
    W = torch.tensor(obj.as_matrix(w), dtype=F64, requires_grad=True)
    X = torch.from_numpy(obj.X)
    y = torch.from_numpy(obj.y)
    reg = torch.from_numpy(obj.reg)
    l = _torch_losses(loss, X @ W, y)
    total = SpectralRiskLoss(risk)(l) + 0.5 * (reg[:, None] * W * W).sum()
    total.backward()
    np.testing.assert_allclose(W.grad.numpy().reshape(obj.coef_shape), obj.grad(w),
                               rtol=1e-10, atol=1e-12)
    assert abs(total.item() - obj.value(w)) < 1e-10


def test_custom_spectrum_needs_matching_batch_size():
    sigma = np.array([0.0, 0.1, 0.2, 0.3, 0.4])
    risk = ro.SpectralRisk(sigma, shift_cost=0.2)
    l_np = np.array([3.0, -1.0, 2.0, 0.5, 1.0])
    l = torch.tensor(l_np, dtype=F64, requires_grad=True)
    SpectralRiskLoss(risk)(l).backward()
    np.testing.assert_allclose(l.grad.numpy(), risk.weights(l_np), atol=1e-12)
    with pytest.raises(ValueError, match="spectrum for 5 samples but the batch has 4"):
        SpectralRiskLoss(risk)(torch.zeros(4, dtype=F64))
    table = TableSpectralRiskLoss(risk, 5)
    with pytest.raises(ValueError, match="init_table"):
        table(torch.ones(2, dtype=F64), torch.tensor([0, 1]))
    assert table.n_seen == 0  # nothing written
    table(l, torch.arange(5)).backward()  # a full first batch completes the table
    assert table.complete


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available here")
def test_cuda_tensors_round_trip():
    risk = ro.CVaR(0.2, shift_cost=0.1)
    l = torch.randn(256, device="cuda", dtype=torch.float32, requires_grad=True)
    r = SpectralRiskLoss(risk)(l)
    r.backward()
    assert r.device.type == "cuda" and l.grad.device.type == "cuda"
    q = risk.weights(l.detach().cpu().double().numpy())
    np.testing.assert_allclose(l.grad.cpu().numpy(), q, atol=1e-6)
    table = TableSpectralRiskLoss(risk, 1000)
    table.init_table(torch.rand(1000, device="cuda"))
    idx = torch.arange(256, device="cuda")
    table(l, idx).backward()
    g = GroupDROLoss(4)(l.detach(), torch.arange(256, device="cuda") % 4)
    k = KLDROLoss(radius=0.5)(l.detach())
    assert g.device.type == "cuda" and k.device.type == "cuda"


# ---------------------------------------------------------------------------- loss table
@pytest.mark.parametrize("risk", [ro.CVaR(0.3, shift_cost=0.2),
                                  ro.Extremile(2.0),
                                  ro.ESRM(1.0, shift_cost=0.5, divergence="kl")], ids=repr)
def test_table_weights_follow_the_table(risk):
    """The merge-sorted table gives the oracle's weights on the table at every step."""
    rng = np.random.default_rng(5)
    n, b = 40, 7
    crit = TableSpectralRiskLoss(risk, n)
    # lazy filling: the first call is the plain mini-batch risk
    idx = rng.choice(n, b, replace=False)
    l_np = rng.normal(size=b)
    l = torch.tensor(l_np, requires_grad=True)
    r = crit(l, torch.from_numpy(idx))
    r.backward()
    np.testing.assert_allclose(l.grad.numpy(), risk.weights(l_np), atol=1e-12)
    assert abs(r.item() - risk.value(l_np)) < 1e-12 and crit.n_seen == b
    crit.init_table(np.round(rng.normal(size=n), 1))  # rounded: many ties
    assert crit.complete
    for step in range(25):
        idx = rng.choice(n, b, replace=step % 3 == 0)  # some batches with duplicates
        l_np = np.round(rng.normal(size=b), 1)
        l = torch.tensor(l_np, requires_grad=True)
        r = crit(l, torch.from_numpy(idx))
        r.backward()
        table = crit.table.numpy()
        last = {i: v for i, v in zip(idx, l_np)}  # last write wins
        for i, v in last.items():
            assert table[i] == v
        q = risk.weights(table)
        np.testing.assert_allclose(crit.weights().numpy(), q, atol=1e-12)
        np.testing.assert_allclose(l.grad.numpy(), n / b * q[idx], atol=1e-12)
        assert abs(r.item() - risk.value(table)) < 1e-12
    # state_dict round trip
    other = TableSpectralRiskLoss(risk, n)
    other.load_state_dict(crit.state_dict())
    np.testing.assert_array_equal(other.table.numpy(), crit.table.numpy())
    np.testing.assert_allclose(other.weights().numpy(), crit.weights().numpy(), atol=0)


def test_table_lazy_filling_uses_the_seen_samples():
    risk = ro.ESRM(1.0, shift_cost=0.3)
    n = 12
    crit = TableSpectralRiskLoss(risk, n)
    crit.init_table(np.array([0.5, 2.0, -1.0]), indices=np.array([4, 7, 9]))
    assert crit.n_seen == 3 and not crit.complete
    l_np = np.array([1.5, 0.2])
    idx = np.array([7, 0])  # 7 overwritten, 0 new: 4 samples seen
    l = torch.tensor(l_np, requires_grad=True)
    r = crit(l, idx)
    r.backward()
    seen = np.array([0, 4, 7, 9])
    vals = np.array([0.2, 0.5, 1.5, -1.0])
    q = risk.weights(vals)
    assert abs(r.item() - risk.value(vals)) < 1e-12
    np.testing.assert_allclose(l.grad.numpy(), 4 / 2 * q[[2, 0]], atol=1e-12)  # scale m/b
    np.testing.assert_allclose(crit.weights().numpy()[seen], q, atol=1e-12)
    assert crit.weights().numpy()[np.setdiff1d(np.arange(n), seen)].sum() == 0
    crit.init_table(np.arange(n, dtype=float))
    assert crit.complete and abs(crit.value() - risk.value(np.arange(n, dtype=float))) < 1e-12


@pytest.mark.parametrize("risk", [ro.CVaR(0.3, shift_cost=0.05),
                                  ro.ESRM(2.0, shift_cost=0.1, divergence="kl"),
                                  ro.Extremile(2.0)], ids=repr)
def test_exact_table_gives_unbiased_batch_gradients(risk):
    """E_B[grad of the table loss] = full-batch gradient; the plain mini-batch loss is biased."""
    n, b = 10, 3
    obj = make_problem("squared", risk, n=n, d=3, l2_reg=0.0, seed=7)
    w = np.random.default_rng(8).normal(size=obj.coef_shape)
    X = torch.from_numpy(obj.X)
    y = torch.from_numpy(obj.y)
    table = TableSpectralRiskLoss(risk, n)
    table.init_table(obj.losses(w))  # exact table at w
    plain = SpectralRiskLoss(risk)
    g_table, g_plain = [], []
    batches = list(itertools.combinations(range(n), b))  # all 120 batches, uniform
    for batch in batches:
        idx = np.array(batch)
        for crit, store in ((table, g_table), (plain, g_plain)):
            W = torch.tensor(obj.as_matrix(w), requires_grad=True)
            l = 0.5 * ((X[idx] @ W)[:, 0] - y[idx]) ** 2
            out = crit(l, torch.from_numpy(idx)) if crit is table else crit(l)
            out.backward()
            store.append(W.grad.numpy().ravel().copy())
    full = obj.grad(w)
    np.testing.assert_allclose(np.mean(g_table, axis=0), full, rtol=1e-12, atol=1e-12)
    bias = np.linalg.norm(np.mean(g_plain, axis=0) - full) / np.linalg.norm(full)
    print(f"relative bias of the plain mini-batch gradient: {bias:.3g}")
    assert bias > 0.05, bias


# ---------------------------------------------------------------------------- group DRO
def _ref_group_stats(l, g, m):
    counts = np.bincount(g, minlength=m).astype(float)
    sums = np.bincount(g, weights=l, minlength=m)
    return sums / np.maximum(counts, 1.0), counts


def test_group_dro_online_matches_sagawa_updates():
    rng = np.random.default_rng(9)
    m, eta = 4, 0.7
    adj = np.array([0.0, 0.3, 0.1, 0.0])
    crit = GroupDROLoss(m, step_size=eta, adjustment=adj)
    q_ref = np.full(m, 1.0 / m)
    for step in range(6):
        b = 11
        g = rng.integers(0, m - (step % 2), size=b)  # group 3 absent on odd steps
        l_np = rng.exponential(size=b) * (1 + g)
        l = torch.tensor(l_np, requires_grad=True)
        r = crit(l, torch.from_numpy(g))
        r.backward()
        means, counts = _ref_group_stats(l_np, g, m)
        q_ref = q_ref * np.exp(eta * (means + adj))
        q_ref /= q_ref.sum()
        np.testing.assert_allclose(crit.group_weights.numpy(), q_ref, rtol=1e-12)
        assert abs(r.item() - q_ref @ means) < 1e-12
        np.testing.assert_allclose(l.grad.numpy(), q_ref[g] / counts[g], rtol=1e-12)
    crit.eval()
    before = crit.group_weights.clone()
    crit(torch.ones(3, dtype=F64), torch.tensor([0, 1, 2]))
    assert torch.equal(before, crit.group_weights)


@pytest.mark.parametrize("mode,tail_fraction", [("max", 0.5), ("cvar", 0.5), ("cvar", 0.3),
                                                ("cvar", 1.0)])
def test_group_dro_max_and_cvar_match_numpy(mode, tail_fraction):
    rng = np.random.default_rng(10)
    m, b = 5, 23
    g = rng.integers(0, m - 1, size=b)  # group 4 absent
    l_np = rng.exponential(size=b) * (1 + g % 3)
    l = torch.tensor(l_np, requires_grad=True)
    r = GroupDROLoss(m, mode=mode, tail_fraction=tail_fraction)(l, torch.from_numpy(g))
    r.backward()
    means, counts = _ref_group_stats(l_np, g, m)
    present = np.flatnonzero(counts > 0)
    q = np.zeros(m)
    if mode == "max":
        q[present[np.argmax(means[present])]] = 1.0
    else:  # CVaR over the k present groups: sigma_i = |[(i-1)/k, i/k] & [1-a, 1]| / a by rank
        k = present.size
        lo = np.arange(k) / k
        sigma = np.clip(np.minimum(lo + 1 / k, 1) - np.maximum(lo, 1 - tail_fraction), 0,
                        None) / tail_fraction
        q[present[np.argsort(means[present])]] = sigma
    assert abs(r.item() - q @ means) < 1e-12
    np.testing.assert_allclose(l.grad.numpy(), q[g] / counts[g], atol=1e-12)


# ---------------------------------------------------------------------------- KL DRO
def test_kl_penalised_matches_logsumexp_and_maxloss_spectral_risk():
    from scipy.special import logsumexp, softmax

    rng = np.random.default_rng(11)
    l_np = 3 * rng.normal(size=29)
    for lam in (0.1, 1.0, 10.0):
        l = torch.tensor(l_np, requires_grad=True)
        r = KLDROLoss(shift_cost=lam)(l)
        r.backward()
        assert abs(r.item() - lam * (logsumexp(l_np / lam) - math.log(29))) < 1e-12
        np.testing.assert_allclose(l.grad.numpy(), softmax(l_np / lam), atol=1e-12)
        risk = ro.MaxLoss(shift_cost=lam, divergence="kl")
        assert abs(r.item() - risk.value(l_np)) < 1e-10
        np.testing.assert_allclose(l.grad.numpy(), risk.weights(l_np), atol=1e-10)


@pytest.mark.parametrize("radius,lam0", [(0.05, 0.0), (0.5, 0.0), (0.5, 0.3), (0.2, 5.0)])
def test_kl_constrained_matches_cvxpy(radius, lam0):
    cp = pytest.importorskip("cvxpy")
    rng = np.random.default_rng(12)
    n = 9
    l_np = rng.normal(size=n)
    l = torch.tensor(l_np, requires_grad=True)
    crit = KLDROLoss(radius=radius, shift_cost=lam0)
    r = crit(l)
    r.backward()
    q = l.grad.numpy()
    kl = float(np.sum(q * np.log(n * q)))
    # primal feasibility, and value = primal objective at q (zero duality gap)
    assert kl <= radius + 1e-9
    assert abs(r.item() - (q @ l_np - lam0 * kl)) < 1e-10
    if crit.last_lam > lam0:
        assert abs(kl - radius) < 1e-9  # active constraint
    qv = cp.Variable(n)
    kl_expr = cp.sum(cp.rel_entr(qv, np.full(n, 1.0 / n)))
    prob = cp.Problem(cp.Maximize(qv @ l_np - lam0 * kl_expr),
                      [cp.sum(qv) == 1, kl_expr <= radius])
    prob.solve(solver="CLARABEL")
    assert abs(r.item() - prob.value) < 1e-6
    np.testing.assert_allclose(q, qv.value, atol=1e-4)


def test_kl_constrained_loss_matches_the_numpy_dual_solve():
    """KLDROLoss's value, gradient and multiplier are kl_dro_weights' (ported from the dual-solve
    tests, which now live in test_kl_dro_numpy.py), ties at the max included. The loss runs
    the numba kernels of riskopt._kernels.kl_dro (Halley steps, warm-started: one module
    over the 20 draws), which stop at the reference's |KL - rho| <= 1e-13; the values agree
    to 1e-12 relative, the weights to 1e-12 absolute, the multipliers to 1e-9 relative
    (|KL - rho| / (a Var) over a flat dual)."""
    crit = None
    rng = np.random.default_rng(13)
    for t in range(20):
        n = int(rng.integers(2, 60))
        l_np = rng.normal(size=n) * 10 ** rng.uniform(-2, 2)
        if t % 5 == 0:
            l_np = np.round(l_np, 1)
        rho = 10 ** rng.uniform(-3, 0.5)
        lam0 = 0.0 if t % 2 else 0.1 * float(np.std(l_np))
        val, q, lam = kl_dro(l_np, shift_cost=lam0, radius=rho)
        l = torch.tensor(l_np, requires_grad=True)
        if crit is None or t % 3 == 0:  # warm-started across draws, and cold
            crit = KLDROLoss(radius=rho, shift_cost=lam0)
        crit.radius, crit.shift_cost = rho, lam0
        r = crit(l)
        r.backward()
        assert abs(r.item() - val) <= 1e-12 * max(1.0, abs(val))
        assert abs(crit.last_lam - lam) <= 1e-9 * lam
        np.testing.assert_allclose(l.grad.numpy(), q, rtol=0, atol=1e-12)


def test_kl_constrained_inactive_constraint_gives_max_loss():
    l = torch.tensor([0.0, 1.0, 3.0, 3.0, 2.0], dtype=F64, requires_grad=True)
    crit = KLDROLoss(radius=math.log(2.5) + 1e-3)
    r = crit(l)
    r.backward()
    assert r.item() == 3.0 and crit.last_lam == 0.0
    np.testing.assert_array_equal(l.grad.numpy(), [0, 0, 0.5, 0.5, 0])


# ---------------------------------------------------------------------------- bad input
def test_bad_inputs_raise_value_error():
    crit = SpectralRiskLoss(ro.CVaR(0.5))
    with pytest.raises(ValueError, match="1-D"):  # (..., b) rows are accepted, 0-d not
        crit(torch.tensor(1.0))
    with pytest.raises(ValueError, match="reduction"):
        SpectralRiskLoss(ro.CVaR(0.5), reduction="avg")
    with pytest.raises(ValueError, match="oracle"):
        KLDROLoss(radius=1.0, oracle="cuda")
    with pytest.raises(ValueError, match="floating"):
        crit(torch.ones(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="empty"):
        crit(torch.ones(0))
    with pytest.raises(ValueError, match="NaN"):
        crit(torch.tensor([1.0, float("nan"), 2.0]))
    with pytest.raises(ValueError, match="torch.Tensor"):
        crit(np.ones(3))
    table = TableSpectralRiskLoss(ro.CVaR(0.5), 6)
    with pytest.raises(ValueError, match="out of range"):
        table(torch.ones(2), torch.tensor([0, 6]))
    with pytest.raises(ValueError, match="out of range"):
        table(torch.ones(2), torch.tensor([-1, 2]))
    with pytest.raises(ValueError, match="shape"):
        table(torch.ones(2), torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="integers"):
        table(torch.ones(2), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="NaN"):
        table(torch.tensor([1.0, float("inf")]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="all n=6"):
        table.init_table(torch.ones(5))
    with pytest.raises(ValueError, match="NaN"):
        table.init_table(np.full(6, np.nan))
    assert table.n_seen == 0  # nothing written by the failed calls
    with pytest.raises(ValueError, match="n must be"):
        TableSpectralRiskLoss(ro.CVaR(0.5), 0)
    gdro = GroupDROLoss(3)
    with pytest.raises(ValueError, match="out of range"):
        gdro(torch.ones(2), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="shape"):
        gdro(torch.ones(2), torch.tensor([0]))
    with pytest.raises(ValueError, match="NaN"):
        gdro(torch.tensor([1.0, float("nan")]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="mode"):
        GroupDROLoss(3, mode="soft")
    with pytest.raises(ValueError, match="adjustment"):
        GroupDROLoss(3, adjustment=[1.0, 2.0])
    with pytest.raises(ValueError, match="shift_cost .* or radius"):
        KLDROLoss()
    with pytest.raises(ValueError, match="radius"):
        KLDROLoss(radius=-1.0)
    with pytest.raises(ValueError, match="NaN"):
        KLDROLoss(shift_cost=1.0)(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="NaN"):
        KLDROLoss(radius=1.0)(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="risk"):
        SpectralRiskLoss("nonsense:1")


# ---------------------------------------------------------------------------- distributed
RANK_SIZES_FULL = (5, 9)                      # unequal shares of the full batch (n = 14)
TABLE_STEPS = ((2, 5), (0, 4), (3, 3), (6, 1))  # per-rank sizes; rank 0 empty at step 2


def _scenario(rank, world):
    """The same training computations, per rank (world=2, DDP) or on the global batch (1).

    Returns a dict of arrays: values, averaged parameter gradients, gradients w.r.t. the
    per-sample losses, loss tables and group weights.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    rng = np.random.default_rng(7)
    n, d, m = 14, 3, 3
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + 0.3 * rng.normal(size=n)
    groups = rng.integers(0, m, size=n)
    w0, b0 = 0.3 * rng.normal(size=d), 0.1
    perm = rng.permutation(n)
    cut = np.cumsum(RANK_SIZES_FULL)[:-1]

    def local(parts):
        return parts[rank] if world > 1 else np.concatenate(parts)

    model = torch.nn.Linear(d, 1, dtype=F64)
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w0[None, :]))
        model.bias.fill_(b0)
    net = DDP(model) if world > 1 else model
    rec = {}

    def step(key, crit, idx, with_idx=False, with_groups=False):
        model.zero_grad()
        xb, yb = torch.from_numpy(X[idx]), torch.from_numpy(y[idx])
        l = 0.5 * (net(xb)[:, 0] - yb) ** 2
        l.retain_grad()
        if with_idx:
            out = crit(l, torch.from_numpy(idx))
        elif with_groups:
            out = crit(l, torch.from_numpy(groups[idx]))
        else:
            out = crit(l)
        out.backward()
        rec[key + "/value"] = np.array(out.item())
        rec[key + "/grad_w"] = model.weight.grad.numpy().copy()
        rec[key + "/grad_b"] = model.bias.grad.numpy().copy()
        rec[key + "/dl_scaled"] = l.grad.numpy().copy() / world  # q_i (local part)

    full_idx = local(np.split(perm, cut))
    risks = {"cvar": ro.CVaR(0.3, shift_cost=0.1), "esrm_kl": ro.ESRM(1.0, 0.2, "kl"),
             "extremile": ro.Extremile(2.0)}
    for name, risk in risks.items():
        step("spectral/" + name, SpectralRiskLoss(risk, gather=True), full_idx)
    step("kl_constrained", KLDROLoss(radius=0.3, gather=True), full_idx)
    step("kl_penalised", KLDROLoss(shift_cost=0.5, gather=True), full_idx)
    gdro = GroupDROLoss(m, step_size=0.5, gather=True)
    for k in range(2):
        step(f"group_online/{k}", gdro, full_idx, with_groups=True)
        rec[f"group_online/{k}/q"] = gdro.group_weights.numpy().copy()
    step("group_cvar", GroupDROLoss(m, mode="cvar", tail_fraction=0.4, gather=True), full_idx,
         with_groups=True)

    # table version: exact table at the start, then SGD steps make it stale
    risk = ro.CVaR(0.3, shift_cost=0.1)
    table = TableSpectralRiskLoss(risk, n, gather=True)
    with torch.no_grad():
        table.init_table(0.5 * (model(torch.from_numpy(X))[:, 0] - torch.from_numpy(y)) ** 2)
    for k, sizes in enumerate(TABLE_STEPS):
        g = rng.choice(n, sum(sizes), replace=False)
        idx = local(np.split(g, [sizes[0]]))
        step(f"table/{k}", table, idx, with_idx=True)
        rec[f"table/{k}/table"] = table.table.numpy()
        rec[f"table/{k}/q"] = table.weights().numpy()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    rec["meta/full_idx"] = full_idx
    return rec


def _dist_worker(rank, init_file, out_dir):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=2)
    try:
        rec = _scenario(rank, 2)
        np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **rec)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path_factory.mktemp("gloo")
    # fork (as torch's own MultiProcessTestCase does on Linux): the children inherit the
    # imported modules instead of re-importing torch and riskopt (seconds each); the workers
    # use one intra-op thread. Spawn elsewhere.
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    if method == "fork":
        import torch._dynamo  # noqa: F401 - imported lazily by DDP; once here, not per child
    ctx = torch.multiprocessing.start_processes(
        _dist_worker, args=(str(out / "store"), str(out)), nprocs=2, join=False,
        start_method=method)
    deadline = time.monotonic() + 300
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            pytest.fail("the 2-process gloo run did not finish within 300 s")
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(2)]


def test_two_process_gloo_equals_single_process(two_process_results):
    ref = _scenario(0, 1)
    for r, got in enumerate(two_process_results):
        for key, val in ref.items():
            if key.endswith("dl_scaled") or key.startswith("meta"):
                continue
            np.testing.assert_allclose(got[key], val, rtol=1e-12, atol=1e-13,
                                       err_msg=f"rank {r}: {key}")
    # per-sample gradients: the ranks' local q's are the global q's in the global order
    for key in ref:
        if key.endswith("dl_scaled"):
            both = np.concatenate([two_process_results[0][key], two_process_results[1][key]])
            np.testing.assert_allclose(both, ref[key], rtol=1e-12, atol=1e-13, err_msg=key)


def test_gathered_spectral_gradient_equals_objective(two_process_results):
    rng = np.random.default_rng(7)  # rebuild the data of _scenario
    n, d = 14, 3
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + 0.3 * rng.normal(size=n)
    rng.integers(0, 3, size=n)
    w = np.append(0.3 * rng.normal(size=d), 0.1)
    for name, risk in {"cvar": ro.CVaR(0.3, shift_cost=0.1),
                       "esrm_kl": ro.ESRM(1.0, 0.2, "kl"),
                       "extremile": ro.Extremile(2.0)}.items():
        obj = ro.Objective("squared", risk, X, y, fit_intercept=True)
        g = obj.grad(w)
        for got in two_process_results:
            np.testing.assert_allclose(got[f"spectral/{name}/grad_w"][0], g[:d], rtol=1e-11)
            np.testing.assert_allclose(got[f"spectral/{name}/grad_b"], g[d:], rtol=1e-11)
            assert abs(float(got[f"spectral/{name}/value"]) - obj.value(w)) < 1e-12


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("make", [
    lambda: KLDROLoss(shift_cost=0.01),          # l / 0.01 overflows float16 (65504)
    lambda: KLDROLoss(radius=0.5),
    lambda: SpectralRiskLoss(ro.CVaR(0.1, shift_cost=0.5)),
])
def test_half_precision_losses_are_weighted_in_float32(dtype, make):
    """Half-precision losses (autocast): the weights and the value are computed in float32,
    the gradient reaches the losses by the cast; before, KLDROLoss(shift_cost=0.01) on
    float16 returned inf and a NaN gradient."""
    g = torch.Generator().manual_seed(0)
    base = torch.rand(2000, generator=g, dtype=torch.float64) * 5
    half = base.to(dtype).requires_grad_()
    v = make()(half)
    v.backward()
    assert v.dtype == torch.float32 and torch.isfinite(v)
    assert half.grad.dtype == dtype and bool(torch.isfinite(half.grad).all())
    ref = base.to(dtype).to(torch.float64).requires_grad_()  # the same rounded losses
    r = make()(ref)
    r.backward()
    assert float(v) == pytest.approx(float(r), rel=1e-5)
    np.testing.assert_allclose(half.grad.double().numpy(), ref.grad.numpy(), rtol=1e-2,
                               atol=1e-3 / 2000)
