"""The tensor-program oracles of ``riskopt.torch._oracles`` against the numba / NumPy
reference oracles (float64 to 1e-10, float32 to its precision, ties, batched rows), the
batched losses, and ``torch.compile(fullgraph=True)`` of a training step through every loss
(a graph break, e.g. a ``.item()`` / ``.cpu()`` host read, fails ``fullgraph``)."""
import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import riskopt as ro  # noqa: E402
from riskopt._kernels import oracles as ko  # noqa: E402
from riskopt.objectives.kl_dro import kl_dro_weights  # noqa: E402
from riskopt.torch import GroupDROLoss, KLDROLoss, SpectralRiskLoss  # noqa: E402
from riskopt.torch import _oracles as to  # noqa: E402

F64 = torch.float64
BASES = [ro.CVaR(0.1), ro.CVaR(0.37), ro.CVaR(1.0), ro.ESRM(1.0), ro.ESRM(8.0),
         ro.Extremile(2.0), ro.Extremile(5.0), ro.Mean(), ro.MaxLoss()]
SHIFTS = [(0.0, "chi2"), (0.01, "chi2"), (0.3, "chi2"), (5.0, "chi2"),
          (0.02, "kl"), (0.3, "kl"), (5.0, "kl")]


def _numba(l_np, risk):
    n = l_np.shape[0]
    q = np.empty(n)
    v = ko._risk_weights(np.ascontiguousarray(l_np), risk.spectrum(n), float(risk.shift_cost),
                         risk.div_code, q)
    return v, q


def _rows(rng, shape, tied, offset=0.0):
    L = rng.normal(size=shape) * 2
    if tied:
        L = np.round(L)
    return L + offset


@pytest.mark.parametrize("base", BASES, ids=repr)
@pytest.mark.parametrize("nu,div", SHIFTS)
def test_tensor_oracle_equals_numba_float64(base, nu, div):
    risk = dataclasses.replace(base, shift_cost=nu, divergence=div)
    rng = np.random.default_rng(7)
    for n in [1, 2, 5, 17, 100, 257]:
        # rows: two continuous, two rounded (ties), one of each offset by 1e3
        L = np.concatenate([_rows(rng, (2, n), False), _rows(rng, (2, n), True)])
        L[1::2] += 1e3
        v, q = to.spectral_risk(torch.tensor(L), risk)
        assert v.shape == (4,) and q.shape == (4, n)
        if True:
            for i in range(4):
                vn, qn = _numba(L[i], risk)
                assert abs(float(v[i]) - vn) <= 1e-10 * max(1.0, abs(vn))
                np.testing.assert_allclose(q[i].numpy(), qn, rtol=0, atol=1e-10)


@pytest.mark.parametrize("risk", [ro.CVaR(0.05), ro.ESRM(2.0, shift_cost=0.001),
                                  ro.Extremile(3.0, shift_cost=0.01, divergence="kl"),
                                  ro.CVaR(0.2, shift_cost=0.05, divergence="kl")], ids=repr)
def test_tensor_oracle_large_batch_with_heavy_ties(risk):
    """b = 4100 (padded to 8192 in the merge tree) with a few distinct values: long tie runs
    crossing every segment boundary of the tree."""
    rng = np.random.default_rng(3)
    L = np.round(rng.exponential(size=(2, 4100)) * 3) / 3
    v, q = to.spectral_risk(torch.tensor(L), risk)
    for i in range(2):
        vn, qn = _numba(L[i], risk)
        assert abs(float(v[i]) - vn) <= 1e-10 * max(1.0, abs(vn))
        np.testing.assert_allclose(q[i].numpy(), qn, rtol=0, atol=1e-10)


def test_isotonic_merge_tree_equals_sequential_pav():
    """The parallel PAV against a plain sequential PAV on random (tied) rows."""
    rng = np.random.default_rng(11)

    def pav(y):
        blocks = []  # [sum, count]
        for v in y:
            blocks.append([v, 1])
            while len(blocks) > 1 and (blocks[-2][0] / blocks[-2][1]
                                       >= blocks[-1][0] / blocks[-1][1]):
                s, c = blocks.pop()
                blocks[-1][0] += s
                blocks[-1][1] += c
        return np.concatenate([np.full(c, s / c) for s, c in blocks])

    for _ in range(60):
        n = int(rng.choice([2, 8, 32, 64]))
        y = np.round(rng.normal(size=n) * 2) - np.linspace(0, rng.uniform(0, 8), n)
        c = to.isotonic(torch.tensor(y)).numpy()
        np.testing.assert_allclose(c, pav(y), rtol=0, atol=1e-12)
        assert np.all(np.diff(c) >= 0)


@pytest.mark.parametrize("risk", [ro.CVaR(0.1), ro.ESRM(1.0, shift_cost=1.0),
                                  ro.Extremile(2.0, shift_cost=0.1, divergence="kl")], ids=repr)
def test_tensor_oracle_float32_to_its_precision(risk):
    rng = np.random.default_rng(5)
    L32 = torch.tensor(rng.normal(size=(4, 300)), dtype=torch.float32, requires_grad=True)
    r = SpectralRiskLoss(risk, reduction="none", oracle="torch")(L32)
    r.sum().backward()
    assert r.dtype == torch.float32 and L32.grad.dtype == torch.float32
    for i in range(4):
        vn, qn = _numba(L32[i].detach().double().numpy(), risk)
        assert abs(float(r[i]) - vn) < 1e-5 * max(1.0, abs(vn))
        np.testing.assert_allclose(L32.grad[i].numpy(), qn, rtol=0, atol=1e-7)


@pytest.mark.parametrize("rho", [0.01, 0.1, 0.5, 2.0])
@pytest.mark.parametrize("lam0", [0.0, 0.05, 1.0])
def test_kl_constrained_tensor_dual_equals_numpy(rho, lam0):
    rng = np.random.default_rng(9)
    for n in [1, 2, 7, 64, 300]:
        for tied in (False, True):
            L = _rows(rng, (2, n), tied) * rng.choice([0.01, 1.0, 30.0])
            for early in (True, False):
                v, q, lam = to.kl_constrained(torch.tensor(L), rho, lam0, early_exit=early)
                for i in range(2):
                    vn, qn, ln = kl_dro_weights(L[i], lam0, rho)
                    assert abs(float(v[i]) - vn) <= 1e-10 * max(1.0, abs(vn))
                    np.testing.assert_allclose(q[i].numpy(), qn, rtol=0, atol=1e-10)
                    assert abs(float(lam[i]) - ln) <= 1e-8 * max(1.0, ln)


@pytest.mark.parametrize("alpha", [0.2, 0.5, 1.0])
def test_group_cvar_over_present_groups_equals_numba(alpha):
    rng = np.random.default_rng(2)
    for _ in range(30):
        m = int(rng.integers(1, 9))
        means = np.round(rng.normal(size=m), 1)
        present = rng.random(m) < 0.7
        present[rng.integers(m)] = True
        q = to.cvar_present(torch.tensor(means), torch.tensor(present), alpha).numpy()
        mp = means[present]
        _, qp = _numba(mp, ro.CVaR(alpha))
        np.testing.assert_allclose(q[present], qp, rtol=0, atol=1e-12)
        assert np.all(q[~present] == 0)


@pytest.mark.parametrize("risk", [ro.CVaR(0.2), ro.ESRM(1.0, shift_cost=0.5),
                                  ro.CVaR(0.3, shift_cost=0.1, divergence="kl")], ids=repr)
def test_batched_rows_each_get_their_own_weights(risk):
    """A (2, 3, b) tensor: each row's risk and gradient are those of the row alone; the
    reductions reduce the rows."""
    rng = np.random.default_rng(4)
    L = torch.tensor(rng.normal(size=(2, 3, 40)), requires_grad=True)
    r = SpectralRiskLoss(risk, reduction="none")(L)
    assert r.shape == (2, 3)
    (r * torch.arange(1.0, 7.0, dtype=F64).reshape(2, 3)).sum().backward()
    for i in range(2):
        for j in range(3):
            vn, qn = _numba(L[i, j].detach().numpy(), risk)
            assert abs(float(r[i, j]) - vn) < 1e-10
            np.testing.assert_allclose(L.grad[i, j].numpy(), (3 * i + j + 1) * qn, atol=1e-10)
    L.grad = None
    m = SpectralRiskLoss(risk, reduction="mean")(L)
    s = SpectralRiskLoss(risk, reduction="sum")(L)
    assert abs(float(m) - float(r.mean())) < 1e-12 and abs(float(s) - float(r.sum())) < 1e-12
    kl = KLDROLoss(radius=0.3, reduction="none")(L)
    for i in range(2):
        assert abs(float(kl[i, 0]) - kl_dro_weights(L[i, 0].detach().numpy(), 0.0, 0.3)[0]) \
            < 1e-10


@pytest.mark.slow
def test_nan_on_host_raises_and_on_device_path_propagates():
    crit = SpectralRiskLoss(ro.CVaR(0.5))
    bad = torch.tensor([1.0, math.nan, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        crit(bad)
    compiled = torch.compile(crit, fullgraph=True, backend="eager")  # no host read: NaN out
    assert math.isnan(float(compiled(bad)))


# ------------------------------------------------------------------- torch.compile
def _step_losses():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    X = torch.randn(64, 6)
    y = torch.randn(64)
    g = torch.arange(64) % 4
    return model, X, y, g


CRITERIA = {
    "cvar": lambda: SpectralRiskLoss(ro.CVaR(0.1)),
    "esrm_chi2": lambda: SpectralRiskLoss(ro.ESRM(1.0, shift_cost=1.0), oracle="torch"),
    "extremile_kl": lambda: SpectralRiskLoss(ro.Extremile(2.0, shift_cost=0.1,
                                                          divergence="kl"), oracle="torch"),
    "kl_pen": lambda: KLDROLoss(shift_cost=0.5),
    "kl_con": lambda: KLDROLoss(radius=0.5),
    "group_online": lambda: GroupDROLoss(4),
    "group_max": lambda: GroupDROLoss(4, mode="max"),
    "group_cvar": lambda: GroupDROLoss(4, mode="cvar", tail_fraction=0.5),
}


_SLOW_TRACE = ("kl_con", "esrm_chi2", "extremile_kl")  # Dynamo traces 40 Newton steps / the
# merge tree: 7-18 s even with backend="eager"


@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_TRACE
                                  else n for n in sorted(CRITERIA)])
def test_training_step_compiles_fullgraph_and_gives_eager_numbers(name, backend):
    """The forward (model + risk loss) compiles with ``fullgraph=True`` and gives the eager
    value and gradients. ``backend="eager"`` runs Dynamo's tracing alone: a graph break
    (a ``.item()`` / ``.cpu()`` host read, data-dependent Python control flow) fails it in
    a second or so; Inductor (AOTAutograd compiles the backward; ~30-70 s each on the
    loaded 2-core machine) is a slow test."""
    model, X, y, g = _step_losses()

    def fwd(crit):
        losses = (model(X).squeeze(-1) - y) ** 2
        return crit(losses, g) if isinstance(crit, GroupDROLoss) else crit(losses)

    def step(f):
        model.zero_grad()
        out = f()
        out.backward()
        return out.detach(), [p.grad.clone() for p in model.parameters()]

    eager_crit, comp_crit = CRITERIA[name](), CRITERIA[name]()
    # every case compiles the same lambda's code object: without a reset the eighth one in
    # a process (the default cases plus the slow ones) hits Dynamo's recompile limit
    torch._dynamo.reset()
    v0, g0 = step(lambda: fwd(eager_crit))
    fn = torch.compile(lambda: fwd(comp_crit), fullgraph=True, backend=backend)
    for _ in range(2):  # a second call reuses the graph (online group weights move alike)
        v1, g1 = step(fn)
        assert abs(float(v1) - float(v0)) <= 1e-5 * max(1.0, abs(float(v0)))
        for a, b in zip(g0, g1):
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-6)
        v0, g0 = step(lambda: fwd(eager_crit))


@pytest.mark.parametrize("lam", [0.3, 3.0, 1e4, 1e9, 1e13])
def test_masked_kl_penalised_equals_high_precision(lam):
    """The masked KL value (the X-risks' device path) against mpmath at 50 digits on the
    flagged entries, for lambda from below the range to far above it (where lse - log k
    cancels), and q is the softmax over the flagged entries only."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    rng = np.random.default_rng(7)
    L = rng.normal(size=(4, 9)) * 2.0 + 5.0
    mask = rng.random((4, 9)) < 0.6
    mask[:, 0] = True
    v, q = to.kl_penalised(torch.from_numpy(L), lam, torch.from_numpy(mask))
    for r in range(L.shape[0]):
        x = [mpmath.mpf(float(t)) for t in L[r][mask[r]]]
        ref = lam * mpmath.log(mpmath.fsum(mpmath.exp(t / lam) for t in x) / len(x))
        span = float(max(x) - min(x))
        assert abs(float(v[r]) - float(ref)) <= 1e-13 * (abs(float(ref)) + span)
        assert float(q[r][~torch.from_numpy(mask[r])].abs().sum()) == 0.0
        assert abs(float(q[r].sum()) - 1.0) <= 1e-13


@pytest.mark.parametrize("div", [0, 1])
def test_tensor_oracle_block_sums_read_nothing_on_the_host(div):
    """The shift path (stop 43: block sums by ``scatter_add``, the KL exponents' narrowed
    gaps) dispatches no syncing ATen op (``.item()``, ``nonzero``, boolean-mask indexing):
    on a GPU it runs without a device -> host read, at a tiny ``nu`` and an ordinary one."""
    from test_torch_optim_nosync import SyncRecorder

    l = torch.tensor(np.round(np.random.default_rng(0).exponential(size=300), 1))
    sigma = torch.tensor(np.ascontiguousarray(ro.ESRM(1.0).spectrum(300)))
    for nu in (1e-20, 0.3):
        with SyncRecorder() as rec:
            _, q = to.spectral_weights(l, sigma, nu, div, 0)
        assert rec.ops == {} and torch.isfinite(q).all()
