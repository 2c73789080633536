"""The numba KL-DRO kernels (``riskopt._kernels.kl_dro``: the CPU path of ``KLDROLoss``)
against the NumPy reference ``riskopt.objectives.kl_dro.kl_dro_weights``, and the one-node
autograd attachment of the host losses (``_host_attach``: a dot for a 1-D batch,
``_HostDanskin`` for rows and half precision)."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import riskopt as ro  # noqa: E402
from riskopt._kernels.kl_dro import kl_dro_weights_fast  # noqa: E402
from riskopt.objectives.kl_dro import kl_dro_weights  # noqa: E402
from riskopt.torch import GroupDROLoss, KLDROLoss, SpectralRiskLoss  # noqa: E402


def _draw(rng, t):
    n = int(rng.integers(1, 200))
    scale = 10 ** rng.uniform(-3, 3)
    l = rng.normal(size=n) * scale + rng.normal() * 10 ** rng.uniform(-3, 3)
    if t % 4 == 0:
        l = np.round(l / scale, 1) * scale  # ties, at the max too
    return l


def test_penalised_kernel_equals_the_reference():
    """lambda from 1e-3 to 1e10 x the range: the log-sum-exp, the log1p(mean(expm1)) and the
    quadratic-expansion branches all agree with NumPy."""
    rng = np.random.default_rng(0)
    for t in range(300):
        l = _draw(rng, t)
        span = float(np.ptp(l)) or 1.0
        lam = span * 10 ** rng.uniform(-3, 10)
        v, q, _ = kl_dro_weights(l, lam)
        v2, q2, lam2, _ = kl_dro_weights_fast(l, lam)
        assert abs(v2 - v) <= 1e-12 * max(1.0, abs(v)), (t, v, v2)
        np.testing.assert_allclose(q2, q, rtol=0, atol=1e-13)
        assert lam2 == lam


@pytest.mark.parametrize("a0", [0.0, 1e-6, 0.7, 50.0, math.inf])
def test_constrained_kernel_equals_the_reference_from_any_start(a0):
    """Any warm start (none, far below, near, far above the root, infinite) gives the
    reference's value, weights and multiplier: the start only moves the first Halley step."""
    rng = np.random.default_rng(1)
    for t in range(200):
        l = _draw(rng, t)
        rho = 10 ** rng.uniform(-4, 1)
        lam0 = (0.0, 0.1 * float(np.std(l)), float(np.ptp(l)) * 10 ** rng.uniform(-3, 3))[t % 3]
        v, q, lam = kl_dro_weights(l, lam0, rho)
        v2, q2, lam2, a = kl_dro_weights_fast(l, lam0, rho, a0=a0)
        assert abs(v2 - v) <= 1e-12 * max(1.0, abs(v)), (t, v, v2)
        np.testing.assert_allclose(q2, q, rtol=0, atol=1e-12)
        assert abs(lam2 - lam) <= 1e-8 * lam, (t, lam, lam2)
        kl = float(np.sum(q2[q2 > 0] * np.log(l.shape[0] * q2[q2 > 0])))
        assert kl <= rho + 1e-12 * max(1.0, rho)


def test_constrained_kernel_any_scale():
    """Losses of size 1e-200 .. 1e200 (the reference rescales; the kernel works on the losses
    divided by their range) and all-equal losses."""
    rng = np.random.default_rng(2)
    base = rng.normal(size=50)
    for s in (1e-200, 1e-50, 1.0, 1e50, 1e200):
        for lam0 in (0.0, 0.3 * s):
            v, q, lam = kl_dro_weights(base * s, lam0, 0.2)
            v2, q2, lam2, _ = kl_dro_weights_fast(base * s, lam0, 0.2)
            assert abs(v2 - v) <= 1e-12 * abs(v)
            np.testing.assert_allclose(q2, q, rtol=0, atol=1e-12)
            assert abs(lam2 - lam) <= 1e-8 * lam
    v, q, _, _ = kl_dro_weights_fast(np.full(7, 2.5), 0.0, 0.3)
    assert v == 2.5 and np.all(q == 1.0 / 7)
    l = np.round(base, 0) * 1e300  # range / lam0 overflows: the argmax (tied) as lam0 = 0
    for rho in (0.2, 10.0):
        for lam0 in (0.0, 1e-300):
            v, q, lam = kl_dro_weights(l, lam0, rho)
            v2, q2, lam2, _ = kl_dro_weights_fast(l, lam0, rho)
            assert abs(v2 - v) <= 1e-12 * abs(v) and abs(lam2 - lam) <= 1e-8 * lam
            np.testing.assert_allclose(q2, q, rtol=0, atol=1e-12)


def test_kl_loss_warm_start_and_float32():
    """A module that keeps its root between calls gives every batch the reference's risk
    (float64: 1e-12); float32 losses get theirs to float32 precision."""
    rng = np.random.default_rng(3)
    crit = KLDROLoss(radius=0.5)
    crit32 = KLDROLoss(radius=0.5, shift_cost=0.05)
    for _ in range(10):
        l_np = rng.random(300) * 3
        v, q, _ = kl_dro_weights(l_np, 0.0, 0.5)
        l = torch.tensor(l_np, requires_grad=True)
        r = crit(l)
        r.backward()
        assert abs(r.item() - v) <= 1e-12 * abs(v)
        np.testing.assert_allclose(l.grad.numpy(), q, rtol=0, atol=1e-13)
        l32 = torch.tensor(l_np, dtype=torch.float32, requires_grad=True)
        v, q, _ = kl_dro_weights(l32.detach().double().numpy(), 0.05, 0.5)
        r = crit32(l32)
        r.backward()
        assert r.dtype == torch.float32 and l32.grad.dtype == torch.float32
        assert abs(r.item() - v) <= 2e-7 * abs(v)
        np.testing.assert_allclose(l32.grad.numpy(), q, rtol=2e-6, atol=0)


def test_host_attachment_rows_reductions_and_half():
    """The host path's one autograd node: (..., b) rows (gradient of each row its own
    weights, through the reductions), float16 losses (value and gradient by the float32 work
    dtype), and a second backward through a retained graph."""
    rng = np.random.default_rng(4)
    rows = rng.random((2, 3, 40))
    for crit in (SpectralRiskLoss(ro.ESRM(1.0, shift_cost=0.5), reduction="sum"),
                 KLDROLoss(radius=0.3, reduction="sum")):
        l = torch.tensor(rows, requires_grad=True)
        crit(l).backward()
        for i in range(2):
            for j in range(3):
                one = torch.tensor(rows[i, j], requires_grad=True)
                crit(one).backward()
                np.testing.assert_allclose(l.grad[i, j].numpy(), one.grad.numpy(),
                                           rtol=0, atol=1e-12)
    crit = SpectralRiskLoss(ro.CVaR(0.25))
    h = torch.tensor(rows[0, 0], dtype=torch.float16, requires_grad=True)
    r = crit(h)
    assert r.dtype == torch.float32
    r.backward(retain_graph=True)
    g1 = h.grad.clone()
    h.grad = None
    r.backward()
    assert h.grad.dtype == torch.float16 and torch.equal(h.grad, g1)
    w = ro.CVaR(0.25).weights(h.detach().double().numpy())
    np.testing.assert_allclose(g1.double().numpy(), w, atol=1e-3)


@pytest.mark.parametrize("mode", ["online", "max", "cvar"])
def test_group_dro_host_path_matches_the_tensor_program(mode, monkeypatch):
    """CPU eager (NumPy / bincount) against the tensor program that the loss runs on a device
    and under compile (reached on CPU tensors by patching ``_host_eager``)."""
    from riskopt.torch.losses import group_dro
    rng = np.random.default_rng(5)
    l_np = rng.random(64) * 3
    g_np = rng.integers(0, 5, 64)
    g_np[g_np == 3] = 4  # an absent group
    host = GroupDROLoss(5, mode=mode, tail_fraction=0.4, adjustment=np.arange(5) * 0.1)
    dev = GroupDROLoss(5, mode=mode, tail_fraction=0.4, adjustment=np.arange(5) * 0.1)
    for _ in range(3):  # the online weights move
        l1 = torch.tensor(l_np, requires_grad=True)
        r1 = host(l1, torch.from_numpy(g_np))
        r1.backward()
        l2 = torch.tensor(l_np, requires_grad=True)
        with monkeypatch.context() as mp:
            mp.setattr(group_dro, "_host_eager", lambda t: False)
            r2 = dev(l2, torch.from_numpy(g_np))
        r2.backward()
        assert abs(r1.item() - r2.item()) <= 1e-12
        np.testing.assert_allclose(l1.grad.numpy(), l2.grad.numpy(), rtol=0, atol=1e-14)
        np.testing.assert_allclose(host.group_weights.numpy(), dev.group_weights.numpy(),
                                   rtol=0, atol=1e-15)


def test_scaled_exp_and_the_shifted_pass_against_numpy():
    """The call-free exps of the kernels' passes: ``_exp_scaled`` (a polynomial squared s
    times, 1/2 <= a <= 32) within its 2^s-ulp rounding bound of np.exp (itself < 1 ulp),
    and ``_stats_shift`` (e updated by exp(delta dn) from the previous pass) equal to a
    fresh ``_stats`` pass at the new a."""
    from riskopt._kernels import kl_dro as kk
    rng = np.random.default_rng(5)
    dn = -rng.random(4000)
    dn[:3] = (0.0, -1.0, -0.5)
    e = np.empty_like(dn)
    for a in (0.5, 0.5000001, 1.0, 4.1, 16.0, 16.5, 31.9, 32.0):
        kk._exp_scaled(dn, a, e)
        ref = np.exp(a * dn)
        s = math.ceil(math.log2(8 * a))
        assert np.max(np.abs(e / ref - 1.0)) <= 2.0 ** s * 4 * 2.2e-16, a
    logn = math.log(dn.size)
    for a0, delta in ((0.5, 0.125), (4.1, -0.125), (4.1, 1e-9), (20.0, 0.1), (40.0, -0.01)):
        kk._stats(dn, a0, -0.4, logn, e)
        got = kk._stats_shift(dn, a0 + delta, delta, -0.4, logn, e)
        e2 = np.empty_like(dn)
        want = kk._stats(dn, a0 + delta, -0.4, logn, e2)
        np.testing.assert_allclose(e, e2, rtol=1e-13)
        assert abs(got[0] / want[0] - 1.0) <= 1e-13
        for g, w in zip(got[1:], want[1:]):
            assert abs(g - w) <= 1e-13 * max(1.0, abs(w)), (a0, delta, got, want)


def test_float32_losses_are_read_as_their_float64_copy():
    """The KL kernels read float32 losses without a copy (the torch host path passes the
    tensor's own memory): value, weights, multiplier and root bit for bit those of the
    float64 copy, for every branch (penalised small / large a, constrained warm / cold)."""
    from riskopt._kernels import kl_dro as kk
    rng = np.random.default_rng(6)
    for t in range(40):
        l32 = (rng.random(int(rng.integers(2, 3000))) * 10 ** rng.uniform(-2, 2)).astype(
            np.float32)
        l64 = l32.astype(np.float64)
        n = l32.shape[0]
        q32, q64, dn = np.empty(n), np.empty(n), np.empty(n)
        lam = float(np.ptp(l64)) * 10 ** rng.uniform(-1.5, 1.5)
        assert kk.kl_penalised(l32, lam, q32, dn) == kk.kl_penalised(l64, lam, q64, dn)
        assert np.array_equal(q32, q64)
        a0 = (0.0, 2.0)[t % 2]
        got = kk.kl_constrained(l32, 0.3, 0.0, a0, q32, dn, 1e-10)
        assert got == kk.kl_constrained(l64, 0.3, 0.0, a0, q64, dn, 1e-10)
        assert np.array_equal(q32, q64)


def test_simd_sums_do_not_depend_on_the_alignment():
    """The kernels' reassociated (SIMD) sums add in an order fixed by the code, not by where
    the arrays start: a copy at another address (8 bytes off) gives the same bits."""
    from riskopt._kernels import kl_dro as kk
    rng = np.random.default_rng(7)
    l = rng.random(1001) * 5
    buf = np.empty(l.size + 1)
    off = buf[1:]
    off[:] = l
    for src in (l, off):
        q, dn = np.empty(l.size), np.empty(l.size)
        res = kk.kl_constrained(src, 0.4, 0.0, 0.0, q, dn, 1e-13)
        if src is l:
            want, qw = res, q.copy()
        else:
            assert res == want and np.array_equal(q, qw)
    e = np.exp(3.0 * (dn - 1.0))
    e_off = np.empty(e.size + 1)[1:]
    e_off[:] = e
    dn_off = np.empty(dn.size + 1)[1:]
    dn_off[:] = dn
    assert kk._moments(dn, e, -0.3, 2.0) == kk._moments(dn_off, e_off, -0.3, 2.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_host_path_value_gradient_and_kept_buffers(dtype):
    """The CPU eager path of a 1-D batch: the value is the oracle's (float64: exactly), the
    gradient its weights (one C++ autograd node, no Python ``Function``), and the buffers the
    losses keep between calls do not leak into an earlier graph: two forwards, then the two
    backwards in reverse order, each batch gets its own weights; a retained graph gives the
    same gradient twice."""
    from riskopt._kernels import oracles as ko
    rng = np.random.default_rng(8)
    esrm = ro.ESRM(1.0, shift_cost=0.5)
    for crit in (SpectralRiskLoss(esrm), SpectralRiskLoss(ro.CVaR(0.2)),
                 KLDROLoss(radius=0.5), KLDROLoss(shift_cost=0.7)):
        ls = [torch.tensor(rng.random(500) * 3, dtype=dtype, requires_grad=True)
              for _ in range(2)]
        rs = [crit(l) for l in ls]
        assert rs[0].grad_fn.name() == "DotBackward0"
        for l, r in reversed(list(zip(ls, rs))):
            r.backward(retain_graph=True)
            g = l.grad.clone()
            l.grad = None
            r.backward()
            assert torch.equal(l.grad, g) and g.dtype == dtype
            l64 = l.detach().double().numpy()
            if isinstance(crit, KLDROLoss):
                w = kl_dro_weights(l64, crit.shift_cost, crit.radius)[1]
            else:
                w = crit.risk.weights(l64)
            if dtype == torch.float64:
                np.testing.assert_allclose(g.numpy(), w, rtol=0, atol=1e-12)
            else:
                np.testing.assert_allclose(g.numpy(), w, rtol=1e-6, atol=0)
        big = torch.tensor(rng.random(1000) * 3, dtype=dtype, requires_grad=True)
        crit(big[::2]).backward()  # a strided batch: the copy path, the same node
        l64 = big.detach()[::2].double().numpy()
        w = (kl_dro_weights(l64, crit.shift_cost, crit.radius)[1]
             if isinstance(crit, KLDROLoss) else crit.risk.weights(l64))
        assert not big.grad[1::2].any()
        np.testing.assert_allclose(big.grad[::2].numpy(), w, rtol=1e-6, atol=1e-12)
        if dtype == torch.float64 and isinstance(crit, SpectralRiskLoss):
            l64 = ls[0].detach().numpy().copy()
            q = np.empty(500)
            b = crit.risk
            v = ko.spectral_risk_weights(l64, np.ascontiguousarray(b.spectrum(500)),
                                         float(b.shift_cost), b.div_code, q)
            # the torch batches take the runs PAV (oracle_fused._chi2_runs_gathered), the
            # objective path the compact one below 2^15 losses: equal to rounding
            assert rs[0].item() == pytest.approx(v, rel=1e-14, abs=0.0)



@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_host_copy_counts_nan_and_inf(dtype):
    """The spectral host path copies float32 losses to float64 and counts their NaN / inf
    in one pass (``_kernels.host_copy``): the copy is exact, the count right, and the loss
    names it; a finite batch whose sum overflows is not flagged."""
    from riskopt._kernels import host_copy as kh
    rng = np.random.default_rng(9)
    npdt = {torch.float32: np.float32, torch.float64: np.float64}[dtype]
    src = (rng.normal(size=1000) * 1e30).astype(npdt)
    src[[3, 500, 999]] = (np.nan, np.inf, -np.inf)
    dst = np.empty(1000)
    assert kh.copy_count_nonfinite(src, dst) == 3 and kh.count_nonfinite(src) == 3
    assert np.array_equal(dst, src.astype(np.float64), equal_nan=True)
    with pytest.raises(ValueError, match="losses contain 3 NaN or infinite"):
        SpectralRiskLoss(ro.CVaR(0.2))(torch.from_numpy(src))
    big = np.full(16, np.finfo(src.dtype).max, dtype=src.dtype)
    assert kh.count_nonfinite(big) == 0 and kh.copy_count_nonfinite(big, np.empty(16)) == 0
    assert SpectralRiskLoss(ro.CVaR(0.5))(torch.from_numpy(big)).item() == float(big[0])
