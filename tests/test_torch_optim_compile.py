"""``torch.compile(fullgraph=True)`` of every optimizer of riskopt.torch.optim (issue 28).

``opt.compile(...)`` compiles the optimizer's tensor updates (riskopt.torch.optim._updates:
the batch statistics of ``surrogate`` and the update of ``step``) with ``fullgraph=True``: a
graph break (a host read, data-dependent Python control flow) raises. Every row of the common
table (every registered optimizer and its variants) is trained for a few steps eagerly and
compiled, from the same start on the same batches (sizes 12, 12, 9, 16: recompiles with
dynamic shapes), and the parameters and the whole optimizer state must agree to 1e-12
(the same ATen ops: only a reordering by the compiler could differ). Dynamo's "eager"
backend (tracing alone, a few seconds) runs by default for one row per optimizer class;
"aot_eager" (AOTAutograd + functionalization of the in-place table / parameter updates) for
every row is slow.
"""
import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import riskopt.torch.optim as topt  # noqa: E402
from riskopt.torch.optim import _drive as D  # noqa: E402
from riskopt.torch.optim import _updates, _updates_fcco, _updates_kl  # noqa: E402

STEPS = 4
#: one row per optimizer class (the default suite); every row runs in the slow test
DEFAULT = ("scdro", "ascdro", "pgsmd2", "sonex", "sonx", "sox", "alexr2", "ooa")


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-300))


def _train(name, steps, compile_kwargs=None):
    X, y, groups, module = D.make_problem()
    kind = D.ROWS[name][2]
    opt = D.make_optimizer(name, module.parameters(), X.shape[0], 4)
    if compile_kwargs is not None:
        assert opt.compile(**compile_kwargs) is opt
    for idx in D.batches(X.shape[0], steps):
        D.drive_step(kind, opt, module, module, X, y, groups, idx)
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    return flat, D.state_tensors(opt), opt


def test_every_optimizer_is_covered():
    covered = {D.ROWS[n][0] for n in DEFAULT}
    assert covered == set(topt.OPTIMIZERS.values())


def _check(name, backend, steps):
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    p0, s0, _ = _train(name, steps)
    with torch._dynamo.config.patch(recompile_limit=16):
        p1, s1, opt = _train(name, steps, dict(backend=count if backend == "eager"
                                               else backend))
    # the compiled updates ran: the surrogate's statistics and the step's update
    assert len(opt._compiled) >= 2
    assert backend != "eager" or graphs
    assert _rel(p1, p0) <= 1e-12
    assert _rel(s1, s0) <= 1e-12


@pytest.mark.parametrize("name", DEFAULT)
def test_compiled_updates_equal_eager(name):
    """Dynamo's eager backend, fullgraph=True, one row per optimizer class."""
    _check(name, "eager", STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(D.ROWS))
def test_compiled_updates_equal_eager_aot(name):
    """AOTAutograd (functionalized in-place updates), fullgraph=True, every row, 6 steps
    (the fifth batch has one row)."""
    _check(name, "aot_eager", 6)


def test_compile_needs_fullgraph():
    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="fullgraph"):
        topt.SCDRO(model.parameters()).compile(fullgraph=False)


@pytest.mark.parametrize("rho", [1e-4, 0.5])
def test_kl_ball_projection_compiles_and_meets_its_stopping_rule(rho):
    """The KL-ball projection of PG-SMD2 (a while_loop under compile, a host loop eagerly):
    the same numbers, and the projection has KL(p || uniform) = rho to the stopping rule's
    1e-13 (p = softmax(a logp), 0 < a < 1) or is the input when inside the ball."""
    g = torch.Generator().manual_seed(3)
    logp = 3.0 * torch.randn(300, generator=g, dtype=torch.float64)
    eager = _updates_kl.kl_ball_log(logp, rho)
    torch._dynamo.reset()
    comp = torch.compile(_updates_kl.kl_ball_log, fullgraph=True, backend="eager")(logp, rho)
    assert _rel(comp, eager) <= 1e-12
    p = torch.exp(eager)
    assert abs(float(p.sum()) - 1.0) <= 1e-13
    kl = float((p * (eager + math.log(300))).sum())
    assert abs(kl - rho) <= 1e-12 * max(1.0, rho)
    d = logp - logp.max()
    a = (eager[1:] - eager[:1]) / (d[1:] - d[:1])     # the common slope a of log p in d
    assert float(a.max() - a.min()) <= 1e-9 and 0.0 < float(a.mean()) < 1.0
    inside = _updates_kl.kl_ball_log(0.01 * logp, 10.0)
    assert _rel(inside, torch.log_softmax(0.01 * logp, 0)) <= 1e-13


def _steps_with_compiled_step(fullgraph):
    """SCDRO on the common problem with ``torch.compile(opt.step)`` (what a user may try
    instead of ``opt.compile()``)."""
    X, y, groups, module = D.make_problem()
    kind = D.ROWS["scdro"][2]
    opt = D.make_optimizer("scdro", module.parameters(), X.shape[0], 4)
    eager_step = opt.step
    opt.step = torch.compile(eager_step, backend="eager", fullgraph=fullgraph)
    for idx in D.batches(X.shape[0], STEPS):
        D.drive_step(kind, opt, module, module, X, y, groups, idx)
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]), opt


def test_compiling_step_itself_never_gives_other_numbers():
    """``torch.compile(opt.step)`` froze the optimizer's Python state in the trace (SCDRO's
    parameters 0.77 off after 12 steps, without a word). ``step`` now refuses to be traced:
    with ``fullgraph=True`` the compile raises; without it Dynamo falls back to the eager
    step, whose numbers are the eager run's."""
    torch._dynamo.reset()
    p0, _, _ = _train("scdro", STEPS)
    with pytest.raises(Exception, match="(?s)not supported|exception"):
        _steps_with_compiled_step(fullgraph=True)
    torch._dynamo.reset()
    p1, _ = _steps_with_compiled_step(fullgraph=False)
    assert torch.equal(p1, p0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_host_code_equals_the_tensor_code(dtype, monkeypatch):
    """Eager on the CPU, OOA's group step and capped-simplex projection run in NumPy; the
    tensor code (compile, GPUs) forced instead gives the same iterates and state, bit for
    bit."""
    p0, s0, _ = D.run("ooa", 12, dtype=dtype)
    monkeypatch.setattr(_updates, "HOST", False)
    p1, s1, _ = D.run("ooa", 12, dtype=dtype)
    assert not torch.equal(p1, D.run("ooa", 11, dtype=dtype)[0])     # (the steps moved)
    assert torch.equal(p0, p1) and torch.equal(s0, s1)


@pytest.mark.parametrize("name", ["ascdro", "rascdro", "recover"])
def test_ascdro_host_code_is_the_tensor_code_to_rounding(name, monkeypatch):
    """Eager on the CPU, ASCDRO's batch statistics run in NumPy (the restart's estimators
    only in a step that restarts) and its step's scalars in Python floats; the branch-free
    tensor code (compile, GPUs) forced instead gives the same iterates and state to rounding
    (NumPy's exp / log / sums are not ATen's), over 30 steps with and without restarts."""
    seen, batch = [], _updates_kl.ascdro_batch_host

    def spy(*args):
        out = batch(*args)
        seen.append(out[6])
        return out

    monkeypatch.setattr(_updates_kl, "ascdro_batch_host", spy)
    p0, s0, _ = D.run(name, 30)
    assert len(seen) == 30 and any(seen) and not all(seen)      # both branches ran
    monkeypatch.setattr(_updates, "HOST", False)
    p1, s1, _ = D.run(name, 30)
    assert len(seen) == 30                                      # (the tensor code ran)
    assert not torch.equal(p1, D.run(name, 29)[0])     # (the steps moved)
    assert _rel(p0, p1) <= 1e-12 and _rel(s0, s1) <= 1e-12


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_ascdro_batch_statistics_on_the_host_match_the_tensor_code(scale):
    """ASCDRO's STORM statistics in NumPy against the tensor code: losses of 1e-3 to 1e3, lambda
    down to 1e-3 (exponents up to 1e6), before the start, after it with and without a
    restart, and a running maximum far above and below the batch's: the restart flag the
    same, the rest equal to rounding (relative 1e-13; the coefficients elementwise)."""
    g = torch.Generator().manual_seed(2)
    l = scale * torch.rand(37, dtype=torch.float64, generator=g) ** 3
    lps = (scale * torch.rand(37, dtype=torch.float64, generator=g) ** 3,
           l + 0.5 * scale)           # (the previous iterate's losses higher: restarts)
    f64 = lambda v: torch.tensor(v, dtype=torch.float64)     # noqa: E731
    restarts, cases = 0, 0
    for lam, lp in itertools.product((1e-3, 0.7, 50.0), lps):
        for started, s, m in ((False, 0.0, -math.inf), (True, 0.8, 0.0), (True, 1e-9, 0.0),
                              (True, 0.8, 30.0), (True, 2.0, -40.0)):
            cases += 1
            m = m * scale / lam if math.isfinite(m) else m
            args = (37, math.log(37), 0.3, started, 0.5, 1e-3)
            t = _updates_kl.ascdro_batch(l, lp if started else None, f64(lam), f64(1.1 * lam),
                                      f64(s), f64(-0.2), f64(m), *args)
            h = _updates_kl.ascdro_batch_host(l.numpy(), lp.numpy() if started else None, lam,
                                           1.1 * lam, s, -0.2, m, *args)
            assert bool(t[6]) == h[6]
            restarts += h[6]
            for k in (0, 1, 2, 3, 7):
                assert abs(float(t[k]) - h[k]) <= 1e-13 * max(1.0, abs(h[k])), (k, t[k], h[k])
            for k in (4, 5):
                if started or k == 4:
                    d = (torch.from_numpy(h[k]) - t[k]).abs()
                    assert bool((d <= 1e-13 * t[k].abs().clamp(min=1e-300)).all())
    assert 0 < restarts < cases


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ascdro_step_on_the_host_is_the_tensor_code(dtype):
    """ASCDRO's step with Python-float scalars (NumPy on the tensors' memory in the usual
    STORM step): the tensor code's parameters, previous iterate and estimators to the
    dtype's rounding (the scalars rounded to the parameters' dtype as ``.to`` rounds them;
    ``torch.add(alpha=)`` may fuse a multiply-add that NumPy rounds twice), ``lambda`` to
    rounding (NumPy's log), at the start, in a STORM step with and without the gradients at
    the previous iterate (none: DDP's aliases) and at a restart, with ``mu``."""
    g = torch.Generator().manual_seed(3)
    shapes = [(5, 3), (5,), (1, 5)]
    rnd = lambda: [torch.randn(sh, generator=g, dtype=dtype) for sh in shapes]  # noqa: E731
    f64 = lambda v: torch.tensor(v, dtype=torch.float64)     # noqa: E731
    eps = torch.finfo(dtype).eps
    for started, restart, with_gp in ((False, False, True), (True, False, True),
                                      (True, False, False), (True, True, True)):
        for mu in (0.0, 1e-2):
            P, prev, G, GP, V = rnd(), rnd(), rnd(), rnd(), rnd()
            GP = GP if with_gp else [None] * len(P)
            voss = [v if started else None for v in V]
            sc = (0.9, 1.3, -0.4, 2.0, 0.7)       # s_old, s, u, m, lambda
            args = (0.05, 0.4, mu)
            tail = (0.5, 1e-3, 5.0)
            Pt, prevt = [p.clone() for p in P], [q.clone() for q in prev]
            vt, lt = _updates_kl.ascdro_update(
                Pt, prevt, G, GP, [None if v is None else v.clone() for v in voss],
                *map(f64, sc), *args, torch.tensor(restart), started, *tail)
            versions = [t._version for t in P + prev]
            vh, lh = _updates_kl.ascdro_update_host(
                P, prev, G, GP, [None if v is None else v.clone() for v in voss], *sc,
                *args, restart, started, *tail)
            # (in place, NumPy or torch: autograd sees the writes)
            assert all(t._version > k for t, k in zip(P + prev, versions))
            for a, b in zip(P + prev + vh, Pt + prevt + vt):
                assert a.dtype == b.dtype
                assert bool(((a - b).abs() <= 4 * eps * b.abs().max()).all())
            assert abs(lh - float(lt)) <= 1e-15 * abs(lh) and lh != sc[4]
            assert not torch.equal(P[0], prev[0])        # (the step moved)


@pytest.mark.parametrize("name", ["scdro", "rscdro"])
def test_scdro_host_code_is_the_tensor_code_to_rounding(name, monkeypatch):
    """Eager on the CPU, SCDRO's batch statistics run in NumPy and its lambda step in Python
    floats; the tensor code (compile, GPUs) forced instead gives the same iterates and state
    to rounding (NumPy's exp / log / sums are not ATen's: their last bits may differ), over
    20 steps with restarts of the moving average's stages (RSCDRO)."""
    p0, s0, _ = D.run(name, 20)
    monkeypatch.setattr(_updates, "HOST", False)
    p1, s1, _ = D.run(name, 20)
    assert not torch.equal(p1, D.run(name, 19)[0])     # (the steps moved)
    assert _rel(p0, p1) <= 1e-12 and _rel(s0, s1) <= 1e-12


def test_scdro_lambda_step_on_the_host_is_the_tensor_code_bit_for_bit():
    """The scalar half of SCDRO's step in Python floats: the tensor code's numbers bit for
    bit, at and beyond the box's bounds, with ``mu``, and NaN propagated as torch does."""
    f64 = lambda v: torch.tensor(v, dtype=torch.float64)     # noqa: E731
    cases = 0
    for u, g_lam, lam, loss_max in [(0.3, -0.7, 1.0, 2.5), (0.3, 40.0, 0.01, 2.5),
                                    (-2.0, -9.0, 3.0, 0.5), (0.1, 0.2, 1.0, -1.0),
                                    (0.1, math.nan, 1.0, 2.0), (0.1, 0.2, math.nan, 2.0),
                                    (0.1, 0.2, 1.0, math.nan)]:
        for mu in (0.0, 1e-3):
            for started in (False, True):
                for hi in (None, 1.5):
                    args = (0.1, 0.5, mu, None, started, 1e-3, hi, 0.5)
                    tu, tl = _updates_kl.scdro_update([], [], [], [], f64(u), f64(g_lam),
                                                   f64(lam), f64(loss_max), *args)
                    hu, hl = _updates_kl.scdro_lambda_host(u, g_lam, lam, loss_max, 0.1, 0.5, mu,
                                                        started, 1e-3, hi, 0.5)
                    for t, h in ((tu, hu), (tl, hl)):
                        assert torch.equal(t, f64(h)) or (math.isnan(h) and torch.isnan(t))
                    cases += 1
    assert cases == 56


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_scdro_batch_statistics_on_the_host_match_the_tensor_code(scale):
    """SCDRO's batch statistics in NumPy against the tensor code, losses of 1e-3 to 1e3 with
    lambda down to its floor 1e-3 (exponents up to 1e6: the log domain), before and after the
    start: equal to rounding (relative 1e-13); the range and the running largest loss bit for
    bit."""
    g = torch.Generator().manual_seed(1)
    l = scale * torch.rand(37, dtype=torch.float64, generator=g) ** 3
    for lam in (1e-3, 0.7, 50.0):
        for started in (False, True):
            args = (math.log(37), math.log1p(-0.3), math.log(0.3), started, 0.5, 1e-3)
            t = _updates_kl.scdro_batch(l, torch.tensor(lam, dtype=torch.float64),
                                     torch.tensor(0.2, dtype=torch.float64),
                                     torch.tensor(0.1, dtype=torch.float64), *args)
            h = _updates_kl.scdro_batch_host(l.numpy(), lam, 0.2, 0.1, *args)
            assert [float(t[k]) for k in (0, 1, 2)] == list(h[:3])
            for k in (3, 5, 6):
                assert abs(float(t[k]) - h[k]) <= 1e-13 * max(1.0, abs(h[k]))
            assert _rel(torch.from_numpy(h[4]), t[4]) <= 1e-13


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", ["sonx", "sox", "sonex", "alexr2"])
def test_fcco_tracking_on_the_host_is_the_tensor_code(name, dtype, monkeypatch):
    """Eager on the CPU, the compositional methods' tracked inner values are updated in
    NumPy on the table's memory; the tensor code (compile, GPUs) forced instead gives the
    same iterates and state, bit for bit."""
    p0, s0, _ = D.run(name, 12, dtype=dtype)
    monkeypatch.setattr(_updates, "HOST", False)
    p1, s1, _ = D.run(name, 12, dtype=dtype)
    assert not torch.equal(p1, D.run(name, 11, dtype=dtype)[0])     # (the steps moved)
    assert torch.equal(p0, p1) and torch.equal(s0, s1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_outer_functions_on_the_host_are_the_torch_code(dtype):
    """The outer functions' gradient and value in NumPy (the compositional methods' host
    path): the torch code's numbers bit for bit, for every outer function, smoothing zero or
    not, a threshold ``s`` or none, at the kinks and at NaN."""
    from riskopt.torch.optim import outer as O
    u = torch.tensor([-2.0, -0.3, -0.1, 0.0, 0.1, 0.3, 0.35, 2.0, math.nan], dtype=dtype)
    s = torch.tensor(0.3, dtype=dtype)
    checked = 0
    for f in (O.Hinge(2.0, 0.3), O.AbsHinge(4.0, 0.1), O.SquaredHinge(10.0, 0.3),
              O.SquaredHinge(10.0, 0.1, absolute=True), O.GroupCVaR(0.25)):
        for lam in (0.0, 0.01):
            extra = (s,) if f.has_threshold else ()
            y, v = f.grad_value_numpy(u.numpy(), lam, s.numpy() if extra else None)
            for got, want in ((y, f.grad(u, lam, *extra)), (v, f.value(u, *extra))):
                got = torch.from_numpy(got)
                assert got.dtype == dtype
                assert torch.equal(got.isnan(), want.isnan())
                assert torch.equal(got.nan_to_num(), want.nan_to_num())
                checked += 1
    assert checked == 20


def test_an_outer_function_without_numpy_code_runs_its_torch_code():
    """An outer function that declares no NumPy code (``grad_value_numpy = None``, as any
    user-defined one with only ``grad`` / ``value``) takes its torch code on the host path,
    and gives the numbers of the NumPy code (the same operations)."""
    from riskopt.torch.optim import outer as O
    calls = []

    class TorchOnly(O.Hinge):
        grad_value_numpy = None

        def grad(self, u, lam):
            calls.append(1)
            return super().grad(u, lam)

    p0, s0, _ = D.run("sonx", 12, outer=O.Hinge(2.0, 0.3))
    p1, s1, _ = D.run("sonx", 12, outer=TorchOnly(2.0, 0.3))
    assert len(calls) == 12
    assert torch.equal(p0, p1) and torch.equal(s0, s1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fcco_track_kernel_is_the_numpy_code(dtype):
    """The one numba call of the compositional methods' host path (tracking + a built-in
    outer function, ``_updates_fcco.fcco_track_host``) gives the NumPy code's table, outer
    gradients and value sum bit for bit: every outer function, smoothing zero, positive or
    below float32's range, with and without the previous estimate, first visits and revisits,
    at the kinks, at NaN and infinity. A subclass runs its own ``grad_value_numpy``."""
    from riskopt.torch.optim import outer as O
    rng = np.random.default_rng(0)
    u0 = np.array([-2.0, -0.3, -0.1, 0.0, 0.1, 0.3, 0.35, 2.0, 0.7, -0.7], dtype=dtype)
    now = np.array([0.3, np.nan, np.inf, -0.1, 0.0, 0.35, 1.0, -1.5], dtype=dtype)
    checked = 0
    for f in (O.Hinge(2.0, 0.3), O.AbsHinge(4.0, 0.1), O.SquaredHinge(10.0, 0.3),
              O.SquaredHinge(10.0, 0.1, absolute=True), O.GroupCVaR(0.25)):
        for lam, prev in itertools.product((0.0, 0.01, 1e-50), (None, now[::-1].copy())):
            idx = rng.permutation(u0.size)[:now.size]
            seen = rng.random(u0.size) < 0.5
            s = np.asarray(dtype(0.3)) if f.has_threshold else None
            gp = 0.0 if prev is None else 0.2
            ut, st = u0.copy(), seen.copy()
            _, y, value = _updates_fcco.fcco_track_numpy(ut, st, idx, now, prev, 0.1, gp, f, lam, s)
            ut2, st2 = u0.copy(), seen.copy()
            y2, total = _updates_fcco.fcco_track_host(ut2, st2, idx, now, prev, 0.1, gp, f, lam, s)
            assert y2.dtype == y.dtype == dtype
            for a, b in ((ut, ut2), (y, y2), (st, st2)):
                assert np.array_equal(a, b, equal_nan=True)
            want = sum(value.tolist())
            assert total == want or (math.isnan(total) and math.isnan(want))
            checked += 1
    assert checked == 30
    calls = []

    class Mine(O.Hinge):
        def grad_value_numpy(self, u, lam, s=None):
            calls.append(1)
            return super().grad_value_numpy(u, lam, s)

    assert O.kernel_code(Mine()) is None
    y, _ = _updates_fcco.fcco_track_host(u0.copy(), seen.copy(), idx, now, None, 0.1, 0.0, Mine(),
                                    0.01, None)
    assert calls == [1] and y.dtype == dtype
