"""The host round trips per step of the torch optimizers under DDP (the DDP twin of
``test_torch_optim_nosync.py``): 2 gloo ranks on the CPU, forked from the test, the tensor
code of the device path forced (``ColumnGatherer.host = _updates.HOST = False``, the
guard's host tests answer "not on the host"), and the same ``TorchDispatchMode`` recorder
counting the ATen ops that would wait for a GPU (``_local_scalar_dense``: ``.item()``,
``int(t)``, ``.tolist()``; ``nonzero``, the ``unique`` family, boolean-mask ``index`` ...) in
the methods a training loop calls each step (``surrogate``, ``weights``, ``step``). gloo on
the CPU has no device: "a host round trip" here means the ops that would sync on CUDA.

Two ways to feed the ranks:

* ``opt.ddp_batches = "any"`` (default), unequal per-rank batches (``_drive.split``: 7 + 5
  rows of 12, 9 + 0 of 9 ...) or even ones: each gather of per-sample rows reads the ranks'
  row counts once (``tolist`` of the headers: what it must know to trim the rows);
* ``"equal"`` on even batches (what ``DistributedSampler`` gives, with or without
  ``drop_last``: every rank the same number of rows at each step): the counts are known
  from this rank's own (no read; a device-side assert checks the promise).

The per-index merges (SONEX & co, OOA) pad every rank's rows to ``n_indices + 1`` and read
no count in either mode; their one read a step left is ``unique`` (the number of distinct
indices of the global batch: the size of all that follows). With ``attach`` SCDRO's
range test of the shifts is a device flag read with the next check (since stop 43; an
out-of-range step raises there), PG-SMD2's eager KL-ball projection reads nothing (on the
device a fixed number of steps), nor does ASCDRO's ``step`` (its restart flag decides no
collective on the device path).

The numbers are bit for bit those of "any" on the same batches (tensor code, host code,
``attach``), and equal the one-process run on the concatenated global batch.
"""
import pytest

torch = pytest.importorskip("torch")

from test_torch_optim_common import two_ranks  # noqa: E402
from test_torch_optim_nosync import SyncRecorder, counting_tolist, recording  # noqa: E402

from riskopt.torch.optim import _drive as D  # noqa: E402

NAMES = list(D.ROWS)
STEPS = 6
#: even global batches (halves on 2 ranks); their sizes change 4 times in 6 steps
EVEN = (12, 12, 8, 16, 2)
#: the rows that merge per-index estimates over the ranks (``_gather_by_index``)
BY_INDEX = [n for n in NAMES if D.ROWS[n][2] in ("fcco", "ooa")]
#: rows whose statistics can ride on DDP's all-reduce (``opt.attach(ddp_model)``)
ATTACH = ("scdro", "pgsmd2")
_batches = D.batches


def _even_batches(n, steps, seed=1, sizes=EVEN):
    return _batches(n, steps, seed, sizes)


def _halves(idx, rank, world):
    b = idx.numel()
    return idx[rank * b // world:(rank + 1) * b // world]


def _counted_run(name, rank, equal, pad=True, info=None, **kw):
    """Row ``name`` on this rank, recorded; ``equal``: ``ddp_batches="equal"``, ``pad``
    False: ``ddp_pad_indices=0`` (the per-index rows padded to the largest count seen);
    ``info``: :func:`_drive.run`'s."""
    rec = SyncRecorder()
    make = D.make_optimizer

    def setup(opt):
        opt.ddp_batches = "equal" if equal else "any"
        opt.attach_checks = "async"          # (SCDRO attach: the device range test)
        if not pad:
            opt.ddp_pad_indices = 0
    D.make_optimizer = recording(rec, make, setup=setup)
    info = {} if info is None else info
    try:
        p, s, _ = D.run(name, STEPS, rank, 2, check_every=1000, info=info,
                        wrap=lambda m: torch.nn.parallel.DistributedDataParallel(m), **kw)
    finally:
        D.make_optimizer = make
    return p, s, dict(rec.ops), rec.asserts, info["comm_calls"]


def _broken_promise(host):
    """``equal=True`` gathers where the second call's batches differ (6 and 4 rows, within
    the capacity of 6): the error's type and text, on this rank."""
    import torch.distributed as dist

    from riskopt.torch.distributed import ColumnGatherer
    g = ColumnGatherer(dist.group.WORLD, equal=True)
    g.host = host
    g([torch.arange(6.0)], torch.device("cpu"))
    rows = 6 if dist.get_rank() == 0 else 4
    try:
        g([torch.arange(float(rows))], torch.device("cpu"))
    except (ValueError, RuntimeError) as e:
        return type(e).__name__, str(e)
    return None


def _floor_run(rank, check_every, checks="async"):
    """SCDRO attached, from lambda's floor (a rank's shift beyond ``e^600`` from ``log s``
    from step 2 on), ``attach_checks=checks``: ``(parameters, corrections)``, or the
    error's type and text."""
    from riskopt.torch.optim import SCDRO
    info = {}
    SCDRO.attach_checks = checks
    try:
        p, _, _ = D.run("scdro", 12, rank, 2, info=info, attach=True, lam_init=1e-3,
                        on_divergence="ignore", check_every=check_every,
                        wrap=lambda m: torch.nn.parallel.DistributedDataParallel(m))
    except Exception as exc:      # noqa: BLE001  (the test looks at it)
        return type(exc).__name__, str(exc)
    finally:
        del SCDRO.attach_checks
    return p, info["fixes"]


def _worker(rank, path):
    import torch.distributed as dist

    from riskopt.torch.distributed import ColumnGatherer
    from riskopt.torch.optim import _comm, _updates, base
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}/rendezvous", rank=rank,
                            world_size=2)
    out = {"host/broken": _broken_promise(True), "tensor/broken": _broken_promise(False)}
    batches, split = D.batches, D.split
    D.batches, D.split = _even_batches, _halves
    for name in NAMES:      # eager on gloo: the host code (NumPy packing and merges)
        for equal in (False, True):
            out[f"{name}/host/{equal}"] = _counted_run(name, rank, equal)[:2]
    D.batches, D.split = batches, split
    ColumnGatherer.host = _updates.HOST = False        # the device path's tensor code
    _comm._on_host = lambda t: False
    _comm._on_device = lambda t: True
    base._is_host = lambda t: False                    # indices on the device
    torch.Tensor.tolist = counting_tolist(torch.Tensor.tolist)
    for name in NAMES:
        out[f"{name}/unequal"] = _counted_run(name, rank, False)
    for name in BY_INDEX:
        out[f"{name}/unequal/nopad"] = _counted_run(name, rank, False, pad=False)
    D.batches, D.split = _even_batches, _halves
    for name in NAMES:
        out[f"{name}/any"] = _counted_run(name, rank, False)
        out[f"{name}/equal"] = _counted_run(name, rank, True)
    for name in ATTACH:     # the statistics on DDP's all-reduce (Piggyback.decode)
        out[f"{name}/attach/any"] = _counted_run(name, rank, False, attach=True)
        out[f"{name}/attach/equal"] = _counted_run(name, rank, True, attach=True)
    outer = SyncRecorder.active = SyncRecorder()   # tolist outside the methods: the hook's
    try:
        _counted_run("scdro", rank, True, attach=True)
    finally:
        SyncRecorder.active = None
    out["scdro/attach/hook"] = dict(outer.ops)
    for check_every in (0, 3):   # SCDRO from lambda's floor: shifts out of range
        out[f"scdro/attach/floor/{check_every}"] = _floor_run(rank, check_every)
    out["scdro/attach/floor/sync"] = _floor_run(rank, 3, "sync")     # the default
    info = {}       # ASCDRO's own all-reduce of the gradients at the previous iterate
    out["ascdro/float16"] = (*_counted_run("ascdro", rank, True, info=info,
                                           dtype=torch.float16)[:3], info["grad_reduces"])
    torch.save(out, f"{path}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    """Every row on 2 gloo ranks, recorded (one launch for the whole table)."""
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    return two_ranks(_worker, tmp_path_factory.mktemp("ddp_nosync"))


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-300))


def _ops(run):
    """The recorded syncing ops of a run."""
    return dict(run[2])


def _left(name):
    """The syncing ops that stay in 6 steps with equal batches (see the module docstring)."""
    left = {}
    if name in BY_INDEX:
        left["_unique2"] = STEPS
    return left


@pytest.mark.parametrize("name", NAMES)
def test_equal_batches_read_no_row_counts(name, ddp):
    for r in range(2):
        ops = _ops(ddp[r][f"{name}/equal"])
        assert ops == _left(name), f"{name} rank {r}: syncing ops in {STEPS} steps: {ops}"
        # (the promise and the counts are checked on the device: device-side asserts)
        assert ddp[r][f"{name}/equal"][3] > 0


@pytest.mark.parametrize("name", NAMES)
def test_any_batches_read_the_row_counts_once_per_gather(name, ddp):
    for r in range(2):
        for mode in ("unequal", "any"):
            ops, calls = _ops(ddp[r][f"{name}/{mode}"]), ddp[r][f"{name}/{mode}"][4]
            # the gatherer's header: one read per collective (the second gather of a
            # growing batch reads it again); the per-index merges pad to n_indices + 1
            # and read none
            reads = ops.pop("tolist@distributed.py", 0)
            assert reads == (0 if name in BY_INDEX else calls), (name, mode, r)
            assert ops == _left(name), (name, mode, r, ops)


@pytest.mark.parametrize("name", NAMES)
def test_equal_batches_give_the_same_numbers(name, ddp, monkeypatch):
    (p0, s0, *_), (p1, s1, *_) = ddp[0][f"{name}/equal"], ddp[1][f"{name}/equal"]
    (pa, sa, *_), (pu, su, *_) = ddp[0][f"{name}/any"], ddp[0][f"{name}/unequal"]
    assert torch.equal(p0, p1) and torch.equal(s0, s1)       # identical on every rank
    assert torch.equal(p0, pa) and torch.equal(s0, sa)       # = "any", bit for bit
    monkeypatch.setattr(D, "batches", _even_batches)
    p, s, _ = D.run(name, STEPS)                             # = the one-process run
    assert _rel(p0, p) <= 1e-10 and _rel(s0, s) <= 1e-10
    assert not torch.equal(pu, pa)                           # (other batches: not vacuous)


def test_one_gather_per_call_without_reading_the_counts(ddp):
    for name in NAMES:
        calls = ddp[0][f"{name}/equal"][4]
        if name in BY_INDEX:       # padded to n_indices + 1: one gather a step, any batches
            assert calls == ddp[0][f"{name}/any"][4] == ddp[0][f"{name}/unequal"][4] == STEPS
        else:     # a batch that outgrows every earlier one: 2 gathers with "any", 1 here
            assert calls == STEPS < ddp[0][f"{name}/any"][4], (name, calls)


@pytest.mark.parametrize("path", ["host", "tensor"])
def test_a_broken_equal_batches_promise_is_reported(path, ddp):
    for r in range(2):
        kind, text = ddp[r][f"{path}/broken"]
        assert kind == ("ValueError" if path == "host" else "RuntimeError")
        assert "ranks' batches differ in size" in text


@pytest.mark.parametrize("name", ATTACH)
def test_equal_batches_on_the_all_reduce(name, ddp):
    """With the statistics on DDP's all-reduce (``attach``) the rows' counts are not read
    either (the hook's decode), with the same numbers as "any"."""
    for r in range(2):
        (p, s, ops, _, calls), (pa, sa, opsa, _, _) = (ddp[r][f"{name}/attach/equal"],
                                                       ddp[r][f"{name}/attach/any"])
        assert torch.equal(p, pa) and torch.equal(s, sa)
        assert "tolist@distributed.py" not in ops and opsa["tolist@distributed.py"] > 0
    assert torch.equal(ddp[0][f"{name}/attach/equal"][0], ddp[1][f"{name}/attach/equal"][0])


@pytest.mark.parametrize("name", ATTACH)
def test_attach_reads_nothing_but_the_row_counts(name, ddp):
    """With ``attach`` the device path reads nothing with "equal" batches, and only the
    row counts with "any" (before stop 43 SCDRO read its shift and the ranks' shifts every
    step: ``tolist@kl_dro.py``)."""
    for r in range(2):
        assert _ops(ddp[r][f"{name}/attach/equal"]) == {}, r
        ops = _ops(ddp[r][f"{name}/attach/any"])
        assert ops.pop("tolist@distributed.py") > 0 and ops == {}, (r, ops)
        if name == "scdro":   # nor its part in the hook (the gathered shifts' range test)
            assert ddp[r]["scdro/attach/hook"] == {}, r


def test_scdro_attach_out_of_range_shifts(ddp):
    """A shift out of range on the device path: with ``check_every`` a device flag (the
    gathered shifts, the same on every rank) raises at the next check, naming the step;
    ``check_every=0`` or the default ``attach_checks="sync"``: the exact correction (a
    second all-reduce), as on the host."""
    for r in range(2):
        kind, text = ddp[r]["scdro/attach/floor/3"]
        assert kind == "DivergenceError"
        assert "SCDRO (attach): at step 2 a rank's largest loss / lambda was out of range" in text
        p, fixes = ddp[r]["scdro/attach/floor/0"]
        assert fixes > 0 and torch.isfinite(p).all()
        p, fixes = ddp[r]["scdro/attach/floor/sync"]   # default attach_checks="sync":
        assert fixes > 0 and torch.equal(p, ddp[r]["scdro/attach/floor/0"][0])  # corrected
    assert torch.equal(ddp[0]["scdro/attach/floor/0"][0], ddp[1]["scdro/attach/floor/0"][0])


@pytest.mark.parametrize("name", NAMES)
def test_equal_batches_on_the_host_code(name, ddp):
    """Eager on gloo (the gathers pack and merge in NumPy): "equal" gives "any"'s numbers."""
    for r in range(2):
        (p, s), (pa, sa) = ddp[r][f"{name}/host/True"], ddp[r][f"{name}/host/False"]
        assert torch.equal(p, pa) and torch.equal(s, sa)


@pytest.mark.parametrize("name", BY_INDEX)
def test_per_index_merges_without_the_padding(name, ddp):
    """``ddp_pad_indices = 0`` (what ``n_indices >= ddp_pad_indices`` takes): the rows padded
    to the largest count seen, read once per gather (a second gather when they outgrow
    it); the padded merge's numbers, bit for bit."""
    for r in range(2):
        p, s, ops, _, calls = ddp[r][f"{name}/unequal/nopad"]
        pp, sp, _, _, calls_pad = ddp[r][f"{name}/unequal"]
        assert torch.equal(p, pp) and torch.equal(s, sp)
        ops = dict(ops)
        assert ops.pop("tolist@distributed.py") == calls > calls_pad == STEPS
        assert ops == {"_unique2": STEPS}


def test_ascdro_all_reduces_without_reading_its_restart_flag(ddp):
    """float16 parameters (no aliasing of the previous iterate: ASCDRO all-reduces the
    gradients there itself): one all-reduce every step after the first, a restart's too
    (whose step takes the gradient alone; before stop 43 it was skipped after a host read
    of the flag), and no read."""
    for r in range(2):
        p, s, ops, reduces = ddp[r]["ascdro/float16"]
        assert ops == {} and reduces == STEPS - 1, (r, ops, reduces)
        assert p.dtype == torch.float16 and torch.isfinite(p).all()
    assert torch.equal(ddp[0]["ascdro/float16"][0], ddp[1]["ascdro/float16"][0])
