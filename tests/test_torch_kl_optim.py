"""riskopt.torch.optim.SCDRO against the NumPy twin of the SCDRO kernel, step by step."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import riskopt as ro  # noqa: E402
from reference_impl import scdro as twin  # noqa: E402
from riskopt.torch.optim import SCDRO, DivergenceError  # noqa: E402


def _data(n=64, d=3, seed=0, signal=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (signal * X[:, 0] + rng.normal(size=n) > 0).astype(float)
    return X, y


@pytest.mark.parametrize("stage_steps", [None, 2])
def test_scdro_matches_the_numpy_twin(stage_steps):
    X, y = _data()
    rho, lam0, C = 0.3, 0.01, 5.0
    obj = ro.objectives.KLDROObjective("logistic", X, y, radius=rho, shift_cost=lam0,
                                       loss_bound=C)
    batches = np.random.default_rng(1).integers(0, 64, size=(6, 8))
    W0 = np.random.default_rng(2).normal(size=(3, 1)) * 0.1
    lo, hi = obj.lam_bounds()
    mode = 0 if stage_steps is None else 1
    want = twin.moving_average(obj, W0, 1.0, batches, 0.3, 0.5, mode=mode,
                               stage_len=stage_steps or 1.0, lo=lo, hi=hi)
    model = torch.nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(W0.T))
    opt = SCDRO(model.parameters(), radius=rho, shift_cost=lam0, lr=0.3, beta=0.5,
                lam_init=1.0, loss_bound=C, stage_steps=stage_steps)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    for idx, (W, lam) in zip(batches, want):
        idx = torch.from_numpy(idx)
        losses = torch.nn.functional.binary_cross_entropy_with_logits(
            model(Xt[idx])[:, 0], yt[idx], reduction="none")
        opt.zero_grad()
        opt.surrogate(losses).backward()
        opt.step()
        np.testing.assert_allclose(model.weight.detach().numpy().T, W, rtol=1e-10, atol=1e-12)
        assert opt.lam == pytest.approx(lam, rel=1e-10)


def test_converges_on_a_convex_problem_and_checkpoints():
    X, y = _data(n=1000, seed=3, signal=3.0)
    obj = ro.Objective("logistic", ro.KLDRO(radius=0.2, shift_cost=1e-3), X, y)
    ref = obj.reference_solution()
    f0 = obj.value(np.zeros(3))
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1, bias=False).double()
    opt = SCDRO(model.parameters(), radius=0.2, lr=0.3, beta=0.5, stage_steps=120)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(0)
    for step in range(1500):                       # about 100 passes
        idx = torch.randint(0, 1000, (64,), generator=gen)
        losses = torch.nn.functional.binary_cross_entropy_with_logits(
            model(Xt[idx])[:, 0], yt[idx], reduction="none")
        opt.zero_grad()
        opt.surrogate(losses).backward()
        opt.step()
        if step == 300:
            saved = (opt.state_dict(), model.state_dict())
    value = obj.value(model.weight.detach().numpy().T)
    assert (value - ref.value) / (f0 - ref.value) < 1e-2       # RSCDRO (stages)
    assert opt.lam == pytest.approx(ref.aux[0], rel=0.1)
    other = torch.nn.Linear(3, 1, bias=False).double()
    other.load_state_dict(saved[1])
    opt2 = SCDRO(other.parameters(), radius=0.2, lr=0.3, beta=0.5, stage_steps=120)
    opt2.load_state_dict(saved[0])
    assert opt2.lam == pytest.approx(float(saved[0]["scdro"]["scalars"]["lam"]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_no_overflow_with_large_losses_and_low_precision(dtype):
    losses = (torch.rand(32) * 1e3 + 1e3).to(dtype).requires_grad_()
    p = torch.nn.Parameter(torch.zeros(2))
    opt = SCDRO([p], radius=0.5, shift_cost=1e-3, lr=0.1)
    out = opt.surrogate(losses)
    out.backward()
    assert torch.isfinite(out) and torch.isfinite(losses.grad).all()


def test_bad_use_is_reported():
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError):
        SCDRO([p], radius=-1.0)
    with pytest.raises(ValueError):
        SCDRO([p], radius=0.5, beta=2.0)
    opt = SCDRO([p], radius=0.5)
    with pytest.raises(RuntimeError, match="surrogate"):
        opt.step()
    with pytest.raises(ValueError, match="1-D"):
        opt.surrogate(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="non-finite"):
        opt.surrogate(torch.tensor([1.0, float("nan")]))


def test_surrogate_gradient_is_the_gradient_of_the_compositional_objective():
    # beta = 1: s is the batch's exact mean of exp(l / lambda), so the surrogate's gradient is
    # the gradient of lambda * log mean exp(l(w) / lambda) at the current lambda (autograd)
    torch.manual_seed(0)
    X, y = torch.randn(50, 4, dtype=torch.float64), torch.randint(0, 3, (50,))
    net = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(),
                              torch.nn.Linear(5, 3)).double()
    opt = SCDRO(net.parameters(), radius=0.5, beta=1.0, lam_init=0.7)
    losses = torch.nn.functional.cross_entropy(net(X), y, reduction="none")
    opt.zero_grad()
    opt.surrogate(losses).backward()
    got = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    lam = 0.7
    closed = lam * (torch.logsumexp(torch.nn.functional.cross_entropy(
        net(X), y, reduction="none") / lam, 0) - np.log(50))
    closed.backward()
    for g, p in zip(got, net.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-10, atol=1e-12)
    # and d/dlambda of the closed form (finite differences) is the u the optimizer prepared
    def F(lam):
        with torch.no_grad():
            l = torch.nn.functional.cross_entropy(net(X), y, reduction="none")
            return float(lam * (torch.logsumexp(l / lam, 0) - np.log(50)) + lam * 0.5)
    fd = (F(0.7 + 1e-6) - F(0.7 - 1e-6)) / 2e-6
    assert float(opt._scalars["g_lam"]) == pytest.approx(fd, rel=1e-6)


@pytest.mark.parametrize("variant", ["ascdro", "rascdro", "recover"])
def test_storm_optimizers_match_the_numpy_twin(variant):
    from riskopt.torch.optim import ASCDRO

    X, y = _data()
    rho = None if variant == "recover" else 0.3
    lam0, C = (1.0 if rho is None else 0.01), 5.0
    obj = ro.objectives.KLDROObjective("logistic", X, y, radius=rho, shift_cost=lam0,
                                       loss_bound=C)
    batches = np.random.default_rng(1).integers(0, 64, size=(6, 8))
    W0 = np.random.default_rng(2).normal(size=(3, 1)) * 0.1
    lo, hi = obj.lam_bounds()
    stage = 2 if variant == "rascdro" else None
    kw = dict(mode=1, eta_pow=0.5, stage_len=2.0) if stage else dict(mode=2, t0=3.0)
    lam_start = lo if rho is None else 1.0
    want = twin.storm(obj, W0, lam_start, batches, 0.3, 0.5, lo=lo, hi=hi, **kw)
    model = torch.nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(W0.T))
    opt = ASCDRO(model.parameters(), radius=rho, shift_cost=lam0, lr=0.3, beta=0.5, t0=3.0,
                 loss_bound=C if rho else None, stage_steps=stage)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    for k, (idx, (W, lam)) in enumerate(zip(batches, want)):
        idx = torch.from_numpy(idx)
        losses = bce(model(Xt[idx])[:, 0], yt[idx], reduction="none")
        prev = None
        if k > 0:
            out = torch.func.functional_call(model, opt.previous_params(model), (Xt[idx],))
            prev = bce(out[:, 0], yt[idx], reduction="none")
        opt.zero_grad()
        opt.surrogate(losses, prev).backward()
        opt.step()
        np.testing.assert_allclose(model.weight.detach().numpy().T, W, rtol=1e-9, atol=1e-11)
        assert opt.lam == pytest.approx(lam, rel=1e-9)


@pytest.mark.parametrize("gamma", [None, 2.0])
def test_pgsmd2_matches_the_numpy_twin(gamma):
    from reference_impl import kl_baselines as twin_klb
    from riskopt.torch.optim import PGSMD2

    X, y = _data()
    obj = ro.objectives.KLDROObjective("logistic", X, y, radius=0.3, shift_cost=0.01,
                                       loss_bound=5.0)
    batches = np.random.default_rng(1).integers(0, 64, size=(5, 8))
    W0 = np.random.default_rng(2).normal(size=(3, 1)) * 0.1
    # the center moves every 8 steps (n / b): within these 5 steps it stays at W0
    want = twin_klb.primal_dual(obj, W0, np.full(64, -np.log(64)), batches, 0.1, 0.01,
                                gamma or 0.0, W0.copy())
    model = torch.nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(W0.T))
    opt = PGSMD2(model.parameters(), n=64, radius=0.3, shift_cost=0.01, lr=0.1, dual_lr=0.01,
                 gamma=gamma)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    for idx, W in zip(batches, want):
        idx = torch.from_numpy(idx)
        losses = torch.nn.functional.binary_cross_entropy_with_logits(
            model(Xt[idx])[:, 0], yt[idx], reduction="none")
        opt.zero_grad()
        (opt.weights(idx) * losses).sum().backward()
        opt.step(indices=idx, losses=losses.detach())
        np.testing.assert_allclose(model.weight.detach().numpy().T, W, rtol=1e-9, atol=1e-11)
    p = torch.exp(opt.indexed_state("log_p"))
    assert float(p.sum()) == pytest.approx(1.0)


def test_scdro_lambda_stays_in_lemma_1s_box_by_default():
    # Lemma 1: lambda* <= lambda_0 + C / rho with C a bound on the losses; by default C is the
    # largest loss met so far, so a start far above the box is pulled into it at the first step
    from riskopt.torch.optim import SCDRO

    X, y = _data()
    model = torch.nn.Linear(3, 1, bias=False).double()
    opt = SCDRO(model.parameters(), radius=0.5, shift_cost=0.01, lr=1e-3, lam_init=1e3)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    seen = 0.0
    for _ in range(3):
        losses = bce(model(Xt)[:, 0], yt, reduction="none")
        seen = max(seen, float(losses.max()))
        opt.zero_grad()
        opt.surrogate(losses).backward()
        opt.step()
        assert 0.01 <= opt.lam <= 0.01 + seen / 0.5 + 1e-12
    unbounded = SCDRO(torch.nn.Linear(3, 1).parameters(), loss_bound=None, lam_init=1e3)
    assert unbounded.lam == 1e3
    with pytest.raises(ValueError, match="loss_bound"):
        SCDRO(torch.nn.Linear(3, 1).parameters(), loss_bound="big")


def _run_with_scheduler(cls, lr, factor, steps=6, **kw):
    """``steps`` steps of ``cls`` on the logistic problem with ``LambdaLR(factor)``."""
    X, y = _data()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1, bias=False).double()
    opt = cls(model.parameters(), radius=0.3, lr=lr, beta=0.5, **kw)
    sched = None if factor is None else torch.optim.lr_scheduler.LambdaLR(opt, factor)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    batches = np.random.default_rng(1).integers(0, 64, size=(steps, 8))
    for k, idx in enumerate(batches):
        idx = torch.from_numpy(idx)
        losses = bce(model(Xt[idx])[:, 0], yt[idx], reduction="none")
        args = (losses,)
        if cls.__name__ == "ASCDRO" and k > 0:
            out = torch.func.functional_call(model, opt.previous_params(model), (Xt[idx],))
            args = (losses, bce(out[:, 0], yt[idx], reduction="none"))
        opt.zero_grad()
        opt.surrogate(*args).backward()
        opt.step()
        if sched is not None:
            sched.step()
    return model.weight.detach().clone(), opt.lam


@pytest.mark.parametrize("name", ["scdro", "rscdro", "ascdro"])
def test_lr_schedulers_act_on_the_kl_dro_optimizers(name):
    """The optimizers read the parameter groups' lr at every step (they used the
    constructor's and ignored a scheduler without a word): a scheduler halving the rate from
    the start is the optimizer built with half the rate, bit for bit; a rate scheduled to 0
    after the first step freezes the parameters and lambda; groups with two rates are
    refused."""
    from riskopt.torch.optim import ASCDRO

    cls = ASCDRO if name == "ascdro" else SCDRO
    kw = dict(stage_steps=2) if name == "rscdro" else {}
    half = _run_with_scheduler(cls, 0.3, lambda t: 0.5, **kw)
    built = _run_with_scheduler(cls, 0.15, None, **kw)
    assert torch.equal(half[0], built[0]) and half[1] == built[1]
    one = _run_with_scheduler(cls, 0.3, None, steps=1, **kw)
    frozen = _run_with_scheduler(cls, 0.3, lambda t: 1.0 if t == 0 else 0.0, **kw)
    assert torch.equal(frozen[0], one[0]) and frozen[1] == one[1]
    full = _run_with_scheduler(cls, 0.3, None, **kw)
    assert not torch.equal(full[0], one[0])
    a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="one learning rate"):
        cls([{"params": a.parameters()}, {"params": b.parameters(), "lr": 0.01}], lr=0.1)


# ---------------------------------------------------------------- the silent stall (i27d, kl)
def _stalling(host=True, steps=6, **kw):
    """The common table's SCDRO row from lambda's floor (lam_init=1e-3): at step 2 lambda
    has jumped to ~0.2 while log s still holds step 1's max l / 1e-3, so every weight
    exp(l / lambda - log s) underflows. Steps 2-5 stall, step 6 does not, and every step from
    7 on stalls (to step 200 at least: benchmarks/scdro_stall_lengths.py). Returns the
    per-step gradient norms, the guard's summary and the optimizer."""
    from riskopt.torch.optim import _drive as D, _updates
    X, y, _, model = D.make_problem()
    opt = D.make_optimizer("scdro", model.parameters(), X.shape[0], 4, lam_init=1e-3,
                           check_every=1, **kw)
    norms, old = [], _updates.HOST
    _updates.HOST = host          # False: the tensor code of the update (the GPU path)
    try:
        for idx in D.batches(X.shape[0], steps):
            opt.zero_grad()
            opt.surrogate(0.5 * (model(X[idx])[:, 0] - y[idx]) ** 2).backward()
            norms.append(float(sum(p.grad.norm() for p in model.parameters())))
            opt.step()
    finally:
        _updates.HOST = old
    return norms, D.guard_summary(opt), opt


#: the stalled steps of the first 11 (:func:`_stalling`)
STALLED = [2, 3, 4, 5, 7, 8, 9, 10, 11]


@pytest.mark.parametrize("host", [True, False])
def test_a_stalled_scdro_run_is_reported_once(host):
    # stall_steps=5: the run from step 7 is the first of 5 stalled steps (steps 2-5: 4)
    with pytest.warns(ro.DivergenceWarning) as rec:
        norms, guard, opt = _stalling(host, steps=14, stall_steps=5)
    stalls = [w for w in rec if "stalled" in str(w.message)]
    assert len(stalls) == 1                             # once, not at every check
    assert [k + 1 for k, n in enumerate(norms[:11]) if n == 0.0] == STALLED
    assert guard["stall"] == 7 and guard["stall_run"] == 8      # (and stalling still)
    msg = str(stalls[0].message)
    assert msg.startswith("SCDRO stalled at step 7: lambda = ")
    for part in ("below log s", "underflowed", "at this step and the 4 after it "
                 "(stall_steps=5)", "gradient is exactly zero", "Raise shift_cost",
                 "lower lr relative to beta", "normalise the losses"):
        assert part in msg
    # the host path and the tensor path flag the same step (no host read on the latter)
    with pytest.warns(ro.DivergenceWarning, match="stalled at step 7"):
        other = _stalling(not host, steps=14, stall_steps=5)[1]
    assert (other["stall"], other["stall_run"]) == (7, 8)
    with pytest.raises(DivergenceError, match="SCDRO stalled at step 7"):
        _stalling(host, steps=14, stall_steps=5, on_divergence="raise")
    # stall_steps=1: the first stalled step (stop 42's rule)
    with pytest.warns(ro.DivergenceWarning, match="stalled at step 2: .* at this step "
                      r"\(stall_steps=1\)"):
        assert _stalling(host, steps=3, stall_steps=1)[1]["stall"] == 2


@pytest.mark.parametrize("host", [True, False])
def test_a_stall_shorter_than_stall_steps_is_not_reported(host):
    # steps 2-5 and 7-10 stall, 4 steps each: below stall_steps=5, nothing is reported (a
    # DivergenceWarning is an error here) and the count stands at the current run's 4
    norms, guard, _ = _stalling(host, steps=10, stall_steps=5)
    assert [k + 1 for k, n in enumerate(norms) if n == 0.0] == STALLED[:-1]
    assert guard["stall"] == -1 and guard["stall_run"] == 4 and not guard["stall_reported"]
    # step 11 makes the second run 5 long: reported, naming its first step
    with pytest.warns(ro.DivergenceWarning, match="SCDRO stalled at step 7"):
        assert _stalling(host, steps=11, stall_steps=5)[1]["stall"] == 7
    # the default (20 steps) is quiet over 14 steps
    assert _stalling(host, steps=14)[1]["stall"] == -1


def test_stall_steps_is_checked():
    p = [torch.nn.Parameter(torch.zeros(2))]
    for bad in (0, -1, 2.5, True, "20"):
        with pytest.raises(ValueError, match="stall_steps must be an int >= 1"):
            SCDRO(p, stall_steps=bad)
    assert SCDRO(p).stall_steps == 20


def test_the_stall_survives_a_checkpoint():
    """The flag, the count of the current run and the report are state: a run saved in the
    middle of a stalled run and resumed reports the same step at the same step, once; a run
    resumed after the report reports nothing new and carries the same step."""
    from riskopt.torch.optim import _drive as D
    kw = dict(lam_init=1e-3, stall_steps=5, check_every=1)
    info, resumed = {}, {}
    with pytest.warns(ro.DivergenceWarning) as rec:
        _, _, saved = D.run("scdro", 12, info=info, save_at=9, **kw)
    assert saved[1]["scdro"]["guard"]["stall_run"] == 3       # (steps 7-9)
    with pytest.warns(ro.DivergenceWarning) as again:
        D.resume("scdro", 12, saved, info=resumed, **kw)
    assert [str(w.message) for w in again] == [str(w.message) for w in rec]
    assert len(rec) == 1 and "stalled at step 7" in str(rec[0].message)
    assert resumed["guard"] == info["guard"] and info["guard"]["stall_run"] == 6
    with pytest.warns(ro.DivergenceWarning, match="stalled"):
        _, guard, opt = _stalling(steps=11, stall_steps=5)
    fresh = _stalling(steps=1, stall_steps=5)[2]
    fresh.load_state_dict(opt.state_dict())
    assert D.guard_summary(fresh) == guard and guard["stall_reported"]
    assert fresh.check_divergence()          # (stalled: True; already reported: no warning)


def test_an_ordinary_scdro_run_does_not_stall():
    # the row from lambda = 1 (its default): 40 steps, no flag (the filter turns a warning
    # into an error)
    from riskopt.torch.optim import _drive as D
    info = {}
    D.run("scdro", 40, info=info, check_every=1, stall_steps=1)
    assert info["guard"]["stall"] == -1 and not info["guard"]["stall_reported"]


# ------------------------------------------ ASCDRO / RASCDRO / RECOVER: no silent stall (kl)
@pytest.mark.parametrize("gap", [10.0, 700.0, 760.0, 1e4])
def test_ascdros_weights_never_all_underflow(gap):
    """Why ASCDRO has no stall report. SCDRO shifts the batch's exponentials by ``log s``, a
    moving average of earlier batches: when that sits more than ~708 above the batch's
    log-mean-exp of ``l / lambda``, every weight underflows (a stall). ASCDRO shifts them by
    the batch's own largest ``l / lambda`` at the two iterates, ``M``, and restarts its
    estimators on the batch alone (shifted by its own maximum) when the weights at the
    current iterate sum to 0: its largest coefficient is then exactly ``1 / (b lambda)``.
    Here the previous iterate's losses sit ``gap`` above the current ones in ``l / lambda``
    (and the old estimators' shift too)."""
    import math
    from riskopt.torch.optim import _updates_kl as U
    f64 = lambda v: torch.tensor(v, dtype=torch.float64)         # noqa: E731
    l = torch.rand(16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    lam, b = 1e-3, 16
    lp = l + gap * lam
    m = float(lp.max()) / lam
    args = (b, math.log(b), 0.5, True, 0.1, 1e-3)
    h = U.ascdro_batch_host(l.numpy(), lp.numpy(), lam, lam, 1.0, -1.0, m, *args)
    t = U.ascdro_batch(l, lp, f64(lam), f64(lam), f64(1.0), f64(-1.0), f64(m), *args)
    for coef, restart in ((h[4], h[6]), (t[4].numpy(), bool(t[6]))):
        assert coef.max() > 0                              # never every weight
        assert restart == (gap > 745)                      # (exp(-745) rounds to 0)
        if restart:
            assert coef.max() == pytest.approx(1.0 / (b * lam), rel=1e-15)
    # SCDRO in the same place (log s from the earlier batch, gap above): its weights vanish
    w = U.scdro_batch_host(l.numpy(), lam, m, 1.0, math.log(b), math.log(0.5),
                           math.log(0.5), True, 0.1, 1e-3)[4]
    assert (w.sum() < torch.finfo(torch.float64).tiny) == (gap > 708)


@pytest.mark.parametrize("host", [True, False])
def test_recover_at_lambdas_floor_does_not_freeze(host):
    """SCDRO's stalling case (the table's problem with lambda at its floor 1e-3: every step
    from 7 on stalls, see _stalling) run by RECOVER, whose lambda is fixed at 1e-3: the
    parameters move at every step and the gradient at the current iterate is never zero
    (benchmarks/ascdro_stall_probe.py: 2,036 steps at lambda's floor in 96 runs of ASCDRO /
    RASCDRO / RECOVER, none frozen; 38 runs end in non-finite losses, a loud error)."""
    from riskopt.torch.optim import _drive as D, _updates
    X, y, groups, model = D.make_problem()
    opt = D.make_optimizer("recover", model.parameters(), X.shape[0], 4, shift_cost=1e-3,
                           check_every=1, on_divergence="ignore")
    old, _updates.HOST = _updates.HOST, host
    grads = []
    try:
        for idx in D.batches(X.shape[0], 12):
            before = [p.detach().clone() for p in model.parameters()]
            D.drive_step("ascdro", opt, model, model, X, y, groups, idx)
            assert not all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
            grads.append(any(bool(p.grad.any()) for p in model.parameters()
                             if p.grad is not None))
            assert opt.lam == 1e-3
    finally:
        _updates.HOST = old
    assert all(grads) and len(grads) == 12


# ------------------------------------ ASCDRO from lambda's floor: stale estimators (kl3)
@pytest.mark.parametrize("stale", [600.0, 60.0])
def test_stale_ascdro_estimators_restart(stale):
    """ASCDRO's estimators, kept in the scale ``exp(-m)`` of an earlier batch, are rescaled
    to this batch's ``M`` by ``exp(m - M)``: where the rescaled ``s`` exceeds
    ``exp(stale)`` (an earlier batch outweighs this one by that much) they restart on the
    batch (before: the rescale clamped at ``exp(600)``, ``s`` near 1e259, then ``inf`` and
    NaN parameters). Below the threshold nothing changes (the same numbers as a run that
    never meets it)."""
    import math
    from riskopt.torch.optim import _updates_kl as U
    f64 = lambda v: torch.tensor(v, dtype=torch.float64)         # noqa: E731
    l = torch.rand(16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    lam, b = 1e-3, 16
    M = float(l.max()) / lam
    for gap, want in ((stale - 1.0, False), (stale + 1.0, True), (800.0, True)):
        m = M + gap                     # s = 1 in the old scale: log s + m - M = gap
        args = (b, math.log(b), 0.5, True, 0.1, 1e-3, stale)
        h = U.ascdro_batch_host(l.numpy(), l.numpy(), lam, lam, 1.0, -1.0, m, *args)
        t = U.ascdro_batch(l, l, f64(lam), f64(lam), f64(1.0), f64(-1.0), f64(m), *args)
        for s, u, m_new, coef, restart in ((h[1], h[2], h[3], h[4], h[6]),
                                           (float(t[1]), float(t[2]), float(t[3]),
                                            t[4].numpy(), bool(t[6]))):
            assert restart == want
            assert math.isfinite(s) and math.isfinite(u)
            if want:        # the batch alone, in its own scale
                assert m_new == M and 0 < s <= 1
                assert coef.max() == pytest.approx(1.0 / (b * lam), rel=1e-15)
            else:
                assert s > math.exp(stale - 2)


def _floor_run(dtype, lr, host, steps, stale=None):
    from riskopt.torch.optim import _drive as D, _updates
    X, y, groups, model = D.make_problem(dtype=dtype)
    opt = D.make_optimizer("ascdro", model.parameters(), X.shape[0], 4, lam_init=1e-3,
                           lr=lr, on_divergence="raise")
    if stale is not None:
        opt._stale = stale
    old, _updates.HOST = _updates.HOST, host
    restarts = []
    try:
        for idx in D.batches(X.shape[0], steps):
            m_before = float(opt._scalars["m"])
            D.drive_step("ascdro", opt, model, model, X, y, groups, idx)
            restarts.append(float(opt._scalars["m"]) < m_before - 60)
    finally:
        _updates.HOST = old
    return opt, model, restarts


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("host", [True, False], ids=["host", "tensor"])
def test_ascdro_from_lambdas_floor_stays_finite(dtype, host):
    """The table problem from lambda's floor (lam_init = shift_cost = 1e-3) at lr 0.001:
    without the stale restart (``stale=inf``), non-finite losses at step 5 (float64) / 4
    (float32), raised as DivergenceError; with it 30 steps with finite parameters and lambda, no divergence reported
    (on_divergence="raise"), and the estimators' scale dropped by more than 60 at some step
    (a restart on a batch far below the old scale)."""
    import math
    opt, model, restarts = _floor_run(dtype, 0.001, host, 30)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert math.isfinite(opt.lam) and opt.lam >= 1e-3
    assert any(restarts)
    with pytest.raises(DivergenceError, match="non-finite losses at step [45]"), \
            np.errstate(all="ignore"):      # (the old overflow: NumPy's warnings)
        _floor_run(dtype, 0.001, host, 30, stale=math.inf)      # without the restart


def test_ascdros_divergence_from_lambdas_floor_says_what_to_change():
    """Where ASCDRO still diverges from lambda's floor (lr 0.1: lambda runs away; the
    method, see its docstring), the message names lambda's start, its floor and the
    change (lam_init=1, a smaller lr); a start away from the floor keeps the plain advice."""
    from riskopt.torch.optim import ASCDRO, DivergenceError
    with pytest.raises(DivergenceError) as err:
        _floor_run(torch.float64, 0.1, True, 40)
    msg = str(err.value)
    assert "ASCDRO diverged" in msg and "lower lr (now 0.1; try lr=0.01" in msg
    assert "lambda started at 0.001, near its floor shift_cost=0.001" in msg
    assert "lam_init=1, the default" in msg and "keep lr far below lambda" in msg
    p = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    for kw, near in ((dict(lam_init=1.0), False), (dict(lam_init=0.005), True),
                     (dict(radius=None, shift_cost=1e-3), False)):
        advice = ASCDRO([p], **{"radius": 0.5, **kw})._advice()
        assert advice.startswith("lower lr (now 0.1; try lr=0.01")
        assert ("near its floor" in advice) == near
