"""No host round trip per step on the optimizers' device path (issues #27 / #28's standard:
"run on the tensors' device with no host round trip").

CPU only: the tensor code of the device path is forced (``_updates.HOST = False``; the guard's
and the indices' host tests answer "not on the host"), and a ``TorchDispatchMode`` records the
ATen ops that read a device tensor on the host (``aten._local_scalar_dense``: ``.item()``,
``int(t)``, ``float(t)``, ``bool(t)``) or whose output size depends on the data
(``nonzero``, ``unique``, boolean-mask indexing ...: on a GPU each waits for the device), and
the calls of ``Tensor.tolist`` (on a CPU tensor no ATen op: counted by a patch, by calling
module), while every row of the common table (``_drive.ROWS``) takes its steps (PG-SMD2's
eager KL-ball projection included: on the device a fixed number of steps, no read). Known
and left: host indices are checked on the host (``base.py``'s ``tolist``: no device
involved). Only the optimizer's methods
that a training loop calls each step are recorded (``surrogate``, ``weights``, ``step``; the
driver's own group means use ``unique``, as a training loop may). The divergence check,
every ``check_every`` steps, may read its flags once (documented in ``_guard``): it is switched
off here (``check_every=0``) and counted on its own below.
"""
import copy
import os
import sys

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from riskopt.torch.optim import _drive as D  # noqa: E402
from riskopt.torch.optim import _comm, _guard, _updates, base  # noqa: E402

#: ATen ops that force a device -> host synchronisation
SYNCING = {"_local_scalar_dense", "nonzero", "nonzero_static", "_unique", "_unique2",
           "unique_dim", "unique_consecutive", "unique_dim_consecutive", "masked_select",
           "item", "equal", "is_nonzero", "_assert_scalar"}



class SyncRecorder(TorchDispatchMode):
    """Records the syncing ATen ops dispatched while active (name -> count) and, with
    ``Tensor.tolist`` patched by :func:`counting_tolist`, its calls by calling module
    (``"tolist@base.py"``): on a CPU tensor ``tolist`` reads the memory without an ATen op,
    on a GPU it is a copy to the host (a sync)."""
    active = None

    def __init__(self):
        super().__init__()
        self.ops, self.asserts = {}, 0

    def __enter__(self):
        self._outer, SyncRecorder.active = SyncRecorder.active, self
        return super().__enter__()

    def __exit__(self, *exc):
        SyncRecorder.active = self._outer
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if name == "_assert_async":     # the device-side checks (no sync): counted apart
            self.asserts += 1
        elif name in SYNCING:
            self.ops[name] = self.ops.get(name, 0) + 1
        elif name == "index" and any(  # boolean-mask indexing: data-dependent size
                isinstance(i, torch.Tensor) and i.dtype == torch.bool
                for i in (args[1] if len(args) > 1 else ())):
            self.ops["index(bool mask)"] = self.ops.get("index(bool mask)", 0) + 1
        return func(*args, **(kwargs or {}))


def counting_tolist(tolist):
    """``Tensor.tolist`` counted by the active :class:`SyncRecorder`."""
    def counted(self):
        rec = SyncRecorder.active
        if rec is not None:
            key = "tolist@" + os.path.basename(sys._getframe(1).f_code.co_filename)
            rec.ops[key] = rec.ops.get(key, 0) + 1
        return tolist(self)
    return counted


@pytest.fixture
def device_path(monkeypatch):
    """The tensor code of the device path, on the CPU."""
    monkeypatch.setattr(_updates, "HOST", False)
    monkeypatch.setattr(_comm, "_on_host", lambda t: False)
    monkeypatch.setattr(_comm, "_on_device", lambda t: True)
    return monkeypatch


def _recorded(rec, method):
    def recorded(*args, **kwargs):
        with rec:
            return method(*args, **kwargs)
    return recorded


def recording(rec, make, setup=None):
    """``make`` (``_drive.make_optimizer``) whose optimizers record into ``rec`` what a
    training loop calls each step; ``setup(opt)`` first."""
    def made(*args, **kw):
        opt = make(*args, **kw)
        if setup is not None:
            setup(opt)
        for name in ("surrogate", "weights", "step"):   # what a training loop calls
            if hasattr(opt, name):
                setattr(opt, name, _recorded(rec, getattr(opt, name)))
        return opt
    return made


def _recorded_run(monkeypatch, name, steps, **extra):
    rec = SyncRecorder()
    monkeypatch.setattr(D, "make_optimizer", recording(rec, D.make_optimizer))
    D.run(name, steps, **extra)
    return rec


@pytest.mark.parametrize("where", ["host indices", "device indices"])
@pytest.mark.parametrize("name", list(D.ROWS))
def test_no_host_round_trip_per_step(name, where, device_path):
    device = where == "device indices"
    if device:                          # the indices' checks of a tensor already on a device
        device_path.setattr(base, "_is_host", lambda t: False)
    device_path.setattr(torch.Tensor, "tolist", counting_tolist(torch.Tensor.tolist))
    rec = _recorded_run(device_path, name, 6, check_every=1000)   # (no check in 6 steps)
    ops = dict(rec.ops)
    if not device:        # indices on the host: checked there before the copy (no device)
        ops.pop("tolist@base.py", None)
    assert ops == {}, f"{name} ({where}): syncing ops in 6 steps: {rec.ops}"
    # indices on a device are checked there (device-side asserts), on the host not at all
    takes_indices = issubclass(D.ROWS[name][0], base.IndexedStateOptimizer)
    assert (rec.asserts >= 6) if device and takes_indices else (rec.asserts == 0)


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("bad", [[0, 48], [-1, 2]])
def test_indices_out_of_range_on_a_device_are_still_caught(mode, bad, device_path):
    device_path.setattr(base, "_is_host", lambda t: False)
    X, y, groups, model = D.make_problem()
    opt = D.make_optimizer("pgsmd2", model.parameters(), X.shape[0], 4)
    opt.index_checks = mode
    if mode == "sync":              # the clear error, with the bad indices
        with pytest.raises(ValueError, match=r"out of range \[0, 48\)"):
            opt.check_indices(torch.tensor(bad))
    else:                           # the device assert (on a GPU: at the next sync)
        with pytest.raises(RuntimeError, match=r"out of range \[0, 48\)"):
            opt.check_indices(torch.tensor(bad))
    assert torch.equal(opt.check_indices(torch.tensor([0, 47])), torch.tensor([0, 47]))


def test_repeated_group_ids_on_a_device_are_still_caught(device_path):
    device_path.setattr(base, "_is_host", lambda t: False)
    X, y, groups, model = D.make_problem()
    opt = D.make_optimizer("ooa", model.parameters(), X.shape[0], 4)
    with pytest.raises(RuntimeError, match="distinct"):
        opt._distinct_indices(torch.tensor([1, 2, 1]), "indices must be distinct group ids")
    opt.index_checks = "sync"
    with pytest.raises(ValueError, match="distinct"):
        opt._distinct_indices(torch.tensor([1, 2, 1]), "indices must be distinct group ids")


@pytest.mark.parametrize("seed", range(3))
def test_scatter_with_repeats_on_the_device_path_is_the_host_path(seed, monkeypatch):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 6, (20,), generator=g)
    values = torch.randn(20, 3, generator=g, dtype=torch.float64)
    X, y, groups, model = D.make_problem()
    out = []
    for host in (True, False):
        monkeypatch.setattr(_updates, "HOST", host)
        opt = D.make_optimizer("ooa", model.parameters(), X.shape[0], 4)
        opt.n_indices = 6
        opt._indexed["t"] = torch.zeros(6, 3, dtype=torch.float64)
        opt.scatter("t", idx, values)
        out.append(opt.indexed_state("t"))
    assert torch.equal(out[0], out[1])      # the last occurrence of each index, exactly


@pytest.mark.parametrize("check_every", [0, 3])
def test_non_finite_losses_on_the_device_path_raise_at_the_next_check(check_every,
                                                                       device_path):
    # device path: the flag is read with the divergence check (every check_every steps);
    # check_every=0 (no check): at once, as on the host
    X, y, groups, model = D.make_problem()
    opt = D.make_optimizer("pgsmd2", model.parameters(), X.shape[0], 4,
                           check_every=check_every)
    idx = torch.arange(4)
    for k in range(3):
        losses = D._losses(model(X[idx]), y[idx])
        if k == 1:
            losses = losses * torch.tensor([1.0, 1.0, float("nan"), 1.0], dtype=losses.dtype)
        opt.zero_grad()
        (opt.weights(idx, losses=losses.detach()) * losses).sum().backward()
        if k == 1 and check_every == 0:
            with pytest.raises(_guard.DivergenceError, match="non-finite losses at step 2"):
                opt.step(indices=idx, losses=losses.detach())
            return
        if k == 2:
            with pytest.raises(_guard.DivergenceError, match="non-finite losses at step 2"):
                opt.step(indices=idx, losses=losses.detach())
            return
        opt.step(indices=idx, losses=losses.detach())


@pytest.mark.parametrize("name", ["pgsmd2", "scdro"])
def test_a_pending_bad_input_survives_a_checkpoint(name, device_path):
    # device path: a non-finite loss at step 2 is a flag read at the next check (step 3);
    # a checkpoint taken before that check keeps the flag, so the resumed run reports it
    X, y, groups, model = D.make_problem()
    opt = D.make_optimizer(name, model.parameters(), X.shape[0], 4, check_every=3)
    idx = torch.arange(4)

    def one_step(opt, bad):
        losses = D._losses(model(X[idx]), y[idx])
        if bad:
            losses = losses * torch.tensor([1.0, 1.0, float("nan"), 1.0], dtype=losses.dtype)
        opt.zero_grad()
        if hasattr(opt, "weights"):
            (opt.weights(idx, losses=losses.detach()) * losses).sum().backward()
            opt.step(indices=idx, losses=losses.detach())
        else:
            opt.surrogate(losses).backward()
            opt.step()
    one_step(opt, False)
    clean = copy.deepcopy(opt.state_dict())       # (state_dict shares the state tensors)
    one_step(opt, True)                 # flagged, not read yet
    saved = opt.state_dict()
    guard = saved["guard"] if "guard" in saved else saved["scdro"]["guard"]
    assert [(s, bool(f)) for _, s, f in guard["inputs"]] == [(1, True), (2, False)]
    fresh = D.make_optimizer(name, model.parameters(), X.shape[0], 4, check_every=3)
    fresh.load_state_dict(saved)
    with pytest.raises(_guard.DivergenceError, match="non-finite .* at step 2"):
        fresh.check_divergence()
    # a checkpoint from before the flags were saved loads (nothing pending)
    guard = clean["guard"] if "guard" in clean else clean["scdro"]["guard"]
    del guard["inputs"]
    model.load_state_dict(D.make_problem()[3].state_dict())    # (finite parameters)
    old = D.make_optimizer(name, model.parameters(), X.shape[0], 4, check_every=3)
    old.load_state_dict(clean)
    assert old._g_inputs == [] and old.check_divergence() is False
