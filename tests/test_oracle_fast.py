"""The oracle's fast parts at batch sizes (issue 28's b = 8192, issue 31 item 2): the
vectorised ``exp`` / ``log`` of ``oracle_vmath``, the radix argsort of ``sort_keys`` (n up
to ``RADIX_MAX``) and the sorting oracle through them.

Each is checked against an independent reference: ``math.exp`` / ``math.log`` to a few ulp;
NumPy's stable argsort exactly; the stable merge-sort oracle ``oracles._risk_weights``
(numba's merge argsort + the log-form PAV with ``math`` exp/log, itself checked against cvxpy
in ``test_oracles``) to 1e-12 in the weights and ``8 n eps`` in the value.
"""
import math

import numpy as np
import pytest

import riskopt as ro
from riskopt._kernels import oracle_vmath as vm
from riskopt._kernels import oracles as ko
from riskopt._kernels import sort_keys as sk

EPS = np.finfo(float).eps


def _ulps(a, ref):
    return np.max(np.abs(a - ref) / np.spacing(np.abs(ref)))


def test_vectorised_exp_and_log_are_within_two_ulp_of_libm():
    rng = np.random.default_rng(0)
    for n in (3, 7, vm.VCHUNK, vm.VCHUNK + 3, 10_000):
        x = -rng.uniform(0.0, 700.0, n)
        x[: min(n, 5)] = [0.0, -1e-300, -0.5 * math.log(2.0), -700.0, -1e-17][: min(n, 5)]
        top, nu = 3.5, 0.25                      # the kernel's argument is (x - top) / nu
        xs = top + nu * x
        out = np.empty(n)
        vm.exp_terms(xs, top, nu, out)
        ref = np.array([math.exp((v - top) / nu) for v in xs])
        assert _ulps(out, ref) <= 2.0
        y = np.concatenate([np.exp(rng.uniform(-700, 700, n)), rng.uniform(0.5, 2.0, n)])
        y[:4] = [1.0, 2.0, 0.5, math.sqrt(2.0)]
        y[4:6] = [np.nextafter(math.sqrt(2.0), 0), np.nextafter(math.sqrt(2.0), 3)]
        lg = np.empty_like(y)
        vm.log_all(y, lg)
        ref = np.array([math.log(v) for v in y])
        # 2 ulp of the result, or of ln 2 for results near 0 (log y - 0 is exact there)
        assert np.all(np.abs(lg - ref) <= 2 * np.spacing(np.maximum(np.abs(ref), 0.69)))
        assert lg[0] == 0.0
        vm.log_all(y, y)                          # in place
        np.testing.assert_array_equal(y, lg)


def _sort_cases(rng, n):
    return [rng.standard_normal(n) ** 2, rng.standard_normal(n), -rng.standard_normal(n) ** 2,
            np.round(rng.standard_normal(n), 2),
            rng.standard_normal(n).astype(np.float32).astype(np.float64),
            0.693 + 1e-3 * rng.standard_normal(n),             # a narrow span: shift 0
            np.exp(30.0 * rng.standard_normal(n)),              # a wide span: equal keys
            1.0 + rng.standard_normal(n) * 1e-9,                # runs fixed by value
            np.where(rng.random(n) < 0.5, -0.0, 0.0),           # both zeros, one key
            np.where(rng.random(n) < 0.5, -1e-310, 1e-310) * rng.random(n),   # subnormals
            np.concatenate([[-0.0, 0.0] * 3, rng.standard_normal(n)])[:n]]


@pytest.mark.parametrize("n", [2, 3, 100, 8192, 8193, sk.RADIX_MAX])
def test_radix_sorted_order_is_the_stable_argsort(n):
    """``sorted_order`` for n <= ``RADIX_MAX`` (float32 keys, two radix passes, runs of equal
    keys fixed by value) is exactly NumPy's stable argsort, also where the fix-up declines
    (a long run of losses with one float32 key) and for NaN / inf / beyond float32."""
    rng = np.random.default_rng(n)
    cases = _sort_cases(rng, n)
    wide = rng.standard_normal(n)
    wide[0] = 1e300                              # beyond float32: the radix path declines
    cases += [wide, 1.0 + 1e-12 * rng.standard_normal(n)]   # all one key: may decline
    nan = rng.standard_normal(n)
    nan[n // 2] = np.nan
    nan[0] = -np.inf
    cases.append(nan)
    for x in cases:
        order, ls = sk.sorted_order(x, radix=True)
        np.testing.assert_array_equal(order, np.argsort(x, kind="stable"))
        np.testing.assert_array_equal(ls, x[order])
    f32, v, cnt, tmp = sk._radix_scratch(n)
    o, ls = np.empty(n, dtype=np.int64), np.empty(n)
    assert not sk._radix_order(wide, f32, v, cnt, tmp, o, ls)
    assert not sk._radix_order(nan, f32, v, cnt, tmp, o, ls)
    x = rng.standard_normal(n) ** 2
    assert sk._radix_order(x, f32, v, cnt, tmp, o, ls)
    np.testing.assert_array_equal(o, np.argsort(x, kind="stable"))


_RISKS = [ro.ESRM(1.0, shift_cost=1.0), ro.Extremile(2.0, shift_cost=0.1, divergence="kl"),
          ro.ESRM(1.0, shift_cost=0.5, divergence="kl"), ro.Extremile(2.0, shift_cost=0.5),
          ro.ESRM(1.0), ro.Extremile(2.0, shift_cost=1e-3, divergence="kl")]


@pytest.mark.parametrize("risk", _RISKS, ids=repr)
def test_the_oracle_at_batch_sizes_equals_the_merge_sort_oracle(risk):
    """``risk_weights`` (the radix sort, the fused PAV with the vectorised exp / log) at
    the torch losses' batch sizes, on float64 losses, float32 ones (as a float32 batch
    gives them) and tied ones, against the merge-sort oracle with libm's exp / log."""
    rng = np.random.default_rng(7)
    nu, div = float(risk.shift_cost), risk.div_code
    for n in (256, 1000, 8192):
        sigma = np.ascontiguousarray(risk.spectrum(n))
        z = rng.standard_normal(n)
        for losses in (z ** 2, (z.astype(np.float32) ** 2).astype(np.float64),
                       np.round(z ** 2, 2), 1e4 + z):
            q, q_ref = np.empty(n), np.empty(n)
            v = ko.risk_weights(losses, sigma, nu, div, q, radix=True)
            v_ref = ko._risk_weights(losses, sigma, nu, div, q_ref)
            np.testing.assert_allclose(q, q_ref, rtol=0, atol=1e-12)
            assert abs(v - v_ref) <= 8 * n * EPS * (abs(v_ref) + np.ptp(losses))
            assert abs(q.sum() - 1.0) <= 1e-12
