"""The one-call batch oracle (``oracle_batch.batch_risk_weights``, issue 28's b = 8192 host
path): the value and the weights of the multi-call path (``oracles.risk_weights`` with
``radix=True``: tie pre-check, radix sort, fused PAV) bit for bit, its declines where that
path leaves these kernels, and the merge-sort oracle (libm exp / log, log-form PAV; checked
against cvxpy in ``test_oracles``) to 1e-12 through them."""
import numpy as np
import pytest

import riskopt as ro
from riskopt._kernels import oracle_batch as kb
from riskopt._kernels import oracles as ko

EPS = np.finfo(float).eps

_RISKS = [ro.ESRM(1.0, shift_cost=1.0), ro.Extremile(2.0, shift_cost=0.1, divergence="kl"),
          ro.ESRM(1.0), ro.Extremile(2.0, shift_cost=1e-3, divergence="kl"),
          ro.Extremile(2.0, shift_cost=1e-3)]


def _multi_call(monkeypatch, losses, sigma, nu, div, q):
    """``risk_weights(radix=True)`` with the one-call kernel switched off."""
    with monkeypatch.context() as m:
        m.setattr(ko, "batch_risk_weights", lambda *a: None)
        return ko.risk_weights(losses, sigma, nu, div, q, radix=True)


@pytest.mark.parametrize("risk", _RISKS, ids=repr)
def test_one_call_equals_the_multi_call_path_bit_for_bit(risk, monkeypatch):
    rng = np.random.default_rng(3)
    nu, div = float(risk.shift_cost), risk.div_code
    for n in (2, 3, 255, 256, 8192):
        sigma = np.ascontiguousarray(risk.spectrum(n))
        z = rng.standard_normal(n)
        cases = [z ** 2, 3.0 * rng.random(n), z.astype(np.float32).astype(np.float64), 1e4 + z]
        for j, losses in enumerate(cases + [1.0 + 1e-9 * z]):
            q, q_ref, q_ms = np.empty(n), np.empty(n), np.empty(n)
            v = kb.batch_risk_weights(losses, sigma, nu, div, q)
            if v is None:     # only for a KL table too wide for the linear PAV, or where
                #               the radix sort's fix-up of one long run declines
                assert ((div == ko.KL and np.ptp(losses) / nu > ko.KL_LINEAR_RANGE)
                        or (j == len(cases) and n > 3))
                continue
            v_ref = _multi_call(monkeypatch, losses, sigma, nu, div, q_ref)
            assert v == v_ref and np.array_equal(q, q_ref)
            assert ko.risk_weights(losses, sigma, nu, div, q_ms, radix=True) == v
            assert np.array_equal(q_ms, q)
            v_ms = ko._risk_weights(losses, sigma, nu, div, q_ms)   # certified reference
            np.testing.assert_allclose(q, q_ms, rtol=0, atol=1e-12)
            assert abs(v - v_ms) <= 8 * n * EPS * (abs(v_ms) + np.ptp(losses))


def test_declines_where_the_multi_call_path_leaves_its_kernels(monkeypatch):
    """Tied losses (the tied oracle), all sampled losses equal, NaN / inf / beyond float32
    (the radix sort declines), a KL table wider than the linear PAV's range, and input that is
    not a contiguous float64 vector up to ``RADIX_MAX``: None, and ``risk_weights`` (radix)
    still gives the multi-call path's answer."""
    n = 1024
    rng = np.random.default_rng(5)
    chi2, kl = ro.ESRM(1.0, shift_cost=1.0), ro.ESRM(1.0, shift_cost=1e-3, divergence="kl")
    z = rng.standard_normal(n)
    nan, wide = z.copy(), z.copy()
    nan[7] = np.nan
    wide[3] = 1e300
    cases = [(chi2, np.round(z, 1)), (chi2, np.full(n, 2.5)), (chi2, nan), (chi2, wide),
             (kl, 10.0 * z)]
    for risk, losses in cases:
        sigma = np.ascontiguousarray(risk.spectrum(n))
        nu, div = float(risk.shift_cost), risk.div_code
        q, q_ref = np.empty(n), np.empty(n)
        assert kb.batch_risk_weights(losses, sigma, nu, div, q) is None
        v = ko.risk_weights(losses, sigma, nu, div, q, radix=True)
        v_ref = _multi_call(monkeypatch, losses, sigma, nu, div, q_ref)
        assert (v == v_ref or (np.isnan(v) and np.isnan(v_ref)))
        np.testing.assert_array_equal(q, q_ref)
    sigma = np.ascontiguousarray(chi2.spectrum(n))
    q = np.empty(n)
    for losses in (z.astype(np.float32), np.repeat(z, 2)[::2]):
        assert kb.batch_risk_weights(losses, sigma, 1.0, 0, q) is None
    big = kb.sort_keys.RADIX_MAX + 1
    assert kb.batch_risk_weights(np.ones(big), np.full(big, 1.0 / big), 1.0, 0,
                                 np.empty(big)) is None


@pytest.mark.parametrize("risk", _RISKS, ids=repr)
def test_float32_entry_equals_the_float64_copy_bit_for_bit(risk):
    """``batch_risk_weights_f32`` (the torch loss reads its float32 batch in place) gives the
    value and weights of ``batch_risk_weights`` on the float64 copy bit for bit, and declines
    exactly where that call does (tied, equal, NaN / inf / beyond float32's range)."""
    rng = np.random.default_rng(11)
    nu, div = float(risk.shift_cost), risk.div_code
    for n in (2, 3, 255, 256, 1000, 8192):
        sigma = np.ascontiguousarray(risk.spectrum(n))
        z = rng.standard_normal(n)
        cases = [z ** 2, 3.0 * rng.random(n), 1e4 + z, np.round(z, 1), np.full(n, 2.5),
                 1.0 + 1e-6 * z, -z, np.where(z > 0, 0.0, -0.0) + z * (z > 1)]
        if n > 8:
            bad = z.copy()
            bad[n // 3] = [np.nan, np.inf, -np.inf][n % 3]
            cases.append(bad)
        for losses in cases:
            x32 = losses.astype(np.float32)
            x64 = x32.astype(np.float64)
            q32, q64 = np.full(n, -1.0), np.full(n, -1.0)
            v32 = kb.batch_risk_weights_f32(x32, sigma, nu, div, q32)
            v64 = kb.batch_risk_weights(x64, sigma, nu, div, q64)
            assert (v32 is None) == (v64 is None)
            if v64 is not None:
                assert v32 == v64 and np.array_equal(q32, q64)
    sigma = np.ascontiguousarray(_RISKS[0].spectrum(64))
    q = np.empty(64)
    for x in (np.ones(64), np.ones(128, dtype=np.float32)[::2], np.ones((8, 8), np.float32)):
        assert kb.batch_risk_weights_f32(x, sigma, 1.0, 0, q) is None


@pytest.mark.parametrize("risk", _RISKS + [ro.CVaR(0.1, shift_cost=0.5), ro.CVaR(0.1)],
                         ids=repr)
def test_torch_loss_float32_fast_path_equals_the_general_host_path(risk, monkeypatch):
    """``SpectralRiskLoss`` on a 1-D float32 CPU batch (the one-call kernel reading the
    batch in place) gives the value and the gradient of its general host path (float64
    copy, NaN check, ``spectral_risk_weights``) bit for bit, and still raises on NaN."""
    torch = pytest.importorskip("torch")
    from riskopt.torch import SpectralRiskLoss
    from riskopt.torch.losses import spectral
    calls = []
    real = kb._batch_weights
    monkeypatch.setattr(spectral._kb, "_batch_weights",
                        lambda *a: calls.append(a[0].dtype) or real(*a))
    rng = np.random.default_rng(12)
    for n in (2, 100, 8192):
        z = rng.standard_normal(n)
        for losses in (z ** 2, np.round(z, 1), 1e4 + z):
            out = []
            for fast in (True, False):
                crit = SpectralRiskLoss(risk)
                if not fast:
                    monkeypatch.setattr(crit, "_host_fast", lambda losses: None)
                x = torch.tensor(losses, dtype=torch.float32, requires_grad=True)
                v = crit(x)
                v.backward()
                out.append((v.detach().clone(), x.grad.clone()))
            assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    # the fast path ran (on the float32 batch) wherever the general one sorts (CVaR: the
    # selection / box oracles)
    assert (np.float32 in calls) == (not isinstance(risk, ro.CVaR))
    x = torch.rand(8192)
    x[5] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        SpectralRiskLoss(_RISKS[0])(x)
