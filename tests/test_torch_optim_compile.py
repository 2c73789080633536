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
import math

import pytest

torch = pytest.importorskip("torch")

import riskopt.torch.optim as topt  # noqa: E402
from riskopt.torch.optim import _drive as D  # noqa: E402
from riskopt.torch.optim import _updates  # noqa: E402

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
    eager = _updates.kl_ball_log(logp, rho)
    torch._dynamo.reset()
    comp = torch.compile(_updates.kl_ball_log, fullgraph=True, backend="eager")(logp, rho)
    assert _rel(comp, eager) <= 1e-12
    p = torch.exp(eager)
    assert abs(float(p.sum()) - 1.0) <= 1e-13
    kl = float((p * (eager + math.log(300))).sum())
    assert abs(kl - rho) <= 1e-12 * max(1.0, rho)
    d = logp - logp.max()
    a = (eager[1:] - eager[:1]) / (d[1:] - d[:1])     # the common slope a of log p in d
    assert float(a.max() - a.min()) <= 1e-9 and 0.0 < float(a.mean()) < 1.0
    inside = _updates.kl_ball_log(0.01 * logp, 10.0)
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
def test_ascdro_restart_on_the_host_is_the_tensor_code(name, monkeypatch):
    """Eager on the CPU, ASCDRO's batch statistics compute the restart's estimators only
    in a step that restarts (a host read of the flag); the branch-free tensor code (compile,
    GPUs) forced instead gives the same iterates and state, bit for bit, over steps with
    and without a restart."""
    seen, batch = [], _updates.ascdro_batch

    def spy(*args):
        out = batch(*args)
        seen.append(bool(out[6]))
        return out

    monkeypatch.setattr(_updates, "ascdro_batch", spy)
    p0, s0, _ = D.run(name, 30)
    assert any(seen) and not all(seen)          # both branches ran
    monkeypatch.setattr(_updates, "HOST", False)
    p1, s1, _ = D.run(name, 30)
    assert torch.equal(p0, p1) and torch.equal(s0, s1)
