"""PG-SMD2's KL-ball projection (``_updates_kl.kl_ball_log``) eagerly on a device: a fixed
number of steps (``_kl_ball_log_device``, no host read), against the host loop
(``_kl_ball_log_host``, eager on the CPU) and the NumPy-side twin
(``_kernels.kl_baselines._kl_ball_project``) on a grid of ``n``, inputs, ``rho`` and
dtypes, with the boundary cases: already inside the ball, ``rho`` tiny, ``rho`` near its
largest value ``log n`` and beyond it, one huge ``log p``. The device code runs here on CPU
tensors (``_updates.HOST = False``).
"""
import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_torch_optim_nosync import SyncRecorder, counting_tolist  # noqa: E402

from riskopt._kernels.kl_baselines import _kl_ball_project  # noqa: E402
from riskopt.torch.optim import _updates, _updates_kl  # noqa: E402

NS = (1, 2, 7, 300, 5000)
#: the default suite's part of the grid (the whole grid: ``-m slow``)
FAST_NS = (1, 7, 300)
KINDS = ("normal", "wide", "one huge", "heavy", "flat")
#: "edge": just below ``log n`` (the largest KL from the uniform); 50: beyond it (inside)
RHOS = (1e-300, 1e-12, 1e-4, 0.5, 2.0, "edge", 50.0)


def _logp(kind, n, dtype, g):
    x = torch.randn(n, generator=g, dtype=torch.float64)
    if kind == "wide":
        x = 1e4 * x
    elif kind == "one huge":
        x[n // 2] = 1e6
    elif kind == "heavy":
        x = 1e3 * torch.empty(n, dtype=torch.float64).cauchy_(generator=g)
    elif kind == "flat":
        x = 1e-9 * x
    return x.to(dtype)


def _kl(logq, logn):
    return float((torch.exp(logq) * (logq + logn)).sum())


def _cases(ns=NS):
    g = torch.Generator().manual_seed(43)
    for n, kind, rho, dtype in itertools.product(ns, KINDS, RHOS,
                                                 (torch.float32, torch.float64)):
        logp = _logp(kind, n, dtype, g)
        rho = max(math.log(n) * (1 - 1e-9), 1e-6) if rho == "edge" else rho
        yield n, kind, rho, dtype, logp


@pytest.mark.parametrize("ns", [FAST_NS, pytest.param(NS, marks=pytest.mark.slow)],
                         ids=["fast", "whole"])
def test_device_projection_meets_the_host_loops_stopping_rule(ns, monkeypatch):
    """Every case: no host read; inside the ball the input's ``log softmax`` (the host
    loop's to 1e-15); outside ``KL(p || 1/n) = rho`` to the host loop's stopping rule
    ``1e-13 max(1, rho)`` (host, twin and device alike), ``log p = a d - c`` with one slope
    ``0 < a < 1``, and ``p`` within 1e-6 in l1 of the host loop's and the twin's (both stop
    anywhere within the rule: at ``rho = 1e-300`` that is ``KL <= 1e-13``, an l1 distance
    of up to ``2 sqrt(5e-14)`` = 4.5e-7 from the uniform, Pinsker)."""
    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist(torch.Tensor.tolist))
    counted = outside = 0
    for n, kind, rho, dtype, logp in _cases(ns):
        case = (n, kind, rho, dtype)
        d = (logp - logp.max()).double()
        logn = math.log(n)
        host = _updates_kl._kl_ball_log_host(d, logn, rho, 1e-13 * max(1.0, rho))
        assert torch.equal(_updates_kl.kl_ball_log(logp, rho), host), case   # CPU: the host
        rec = SyncRecorder()
        monkeypatch.setattr(_updates, "HOST", False)
        with rec:
            dev = _updates_kl.kl_ball_log(logp, rho)
        monkeypatch.setattr(_updates, "HOST", True)
        assert rec.ops == {}, (case, rec.ops)
        counted += 1
        assert dev.dtype == torch.float64 and dev.shape == (n,)
        kl1, near = _kl(d - torch.logsumexp(d, 0), logn), 1e-12 * max(1.0, rho)
        if kl1 <= rho - near:          # inside: the input's log softmax
            assert float((dev - host).abs().max()) <= 1e-15 * max(1.0, float(host.abs().max()))
            continue
        if kl1 <= rho + near:          # on the sphere to rounding: either answer
            assert abs(_kl(dev, logn) - rho) <= near, case
            continue
        outside += 1
        twin = np.empty(n)
        _kl_ball_project(logp.double().numpy(), rho, twin)
        twin = torch.from_numpy(twin)
        tol = 1e-13 * max(1.0, rho)
        # (the twin stops on a bracket of relative width 4e-16 too: within 2 tol here)
        for name, q, rule in (("device", dev, tol), ("host", host, tol), ("twin", twin, 2 * tol)):
            assert abs(_kl(q, logn) - rho) <= rule, (case, name, _kl(q, logn) - rho)
            assert abs(float(torch.exp(q).sum()) - 1.0) <= 10 * rule, (case, name)
        top, bottom = d.argmax(), d.argmin()
        if float(dev[top] - dev[bottom]) <= 1e-6:      # a R below the rounding of log p
            assert float((dev + logn).abs().max()) <= 1e-6, case    # (the uniform)
        else:
            a = float((dev[bottom] - dev[top]) / d[bottom])
            assert 0.0 < a < 1.0, case
            line = dev[top] + a * d
            assert float((dev - line).abs().max()) <= 1e-12 * max(1.0, float(dev.abs().max())), case
        for name, q in (("host", host), ("twin", twin)):
            assert float((torch.exp(dev) - torch.exp(q)).abs().sum()) <= 1e-6, (case, name)
    assert counted == len(ns) * len(KINDS) * len(RHOS) * 2 and outside >= counted // 3


def test_projection_of_a_diverging_table():
    """A table of one point far above the others (``log p`` 1e300 apart, ``d^2``
    overflows): the device projection's bracket starts near its floor ``a = exp(-745)``,
    its Newton steps use the variance of ``a d``; the host loop (``kl_ball_log`` eagerly on
    the CPU) takes the variance of ``d / R`` there (before stop 43 it was ``inf`` and the
    loop returned the point mass, ``KL = log 4``). Both results are on the ball."""
    logp = torch.tensor([0.0, -1e300, -2e300, -3e300], dtype=torch.float64)
    dev = _updates_kl._kl_ball_log_device(logp, math.log(4), 0.5)
    host = _updates_kl.kl_ball_log(logp, 0.5)
    for out in (dev, host):
        assert torch.isfinite(out).all()
        assert abs(_kl(out, math.log(4)) - 0.5) <= 1e-13
    # one point 1e156 above the others, rho small and near log n: on the ball too
    x = torch.randn(300, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x[7] = 1e156
    for rho in (1e-12, 0.5, math.log(300) * (1 - 1e-9)):
        host = _updates_kl.kl_ball_log(x, rho)
        assert abs(_kl(host, math.log(300)) - rho) <= 1e-13 * max(1.0, rho)
