"""Tests of :class:`riskopt.torch.optim.IndexedStateOptimizer` through a tiny concrete optimizer.

``MovingAverageSGD`` keeps a moving average ``u_i`` of every sample's (or group's) loss, updated
at the indices of the batch, and takes a plain SGD step weighted by ``softmax(u)`` of the
batch (so that the indexed state feeds back into the parameters). Checked: the tables match a
NumPy re-implementation step by step, with DataLoaders driven by ``riskopt.samplers`` batch
samplers (per-sample state with ``PermutationSampler`` / ``UniformSampler``, per-group state with
``GroupSampler``); repeated indices (last occurrence wins); device placement; a checkpoint
taken mid-training and reloaded continues exactly like the uninterrupted run; bad indices and
mismatched checkpoints raise ValueError.
"""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from riskopt.samplers import GroupSampler, PermutationSampler, UniformSampler  # noqa: E402
from riskopt.torch.optim import IndexedStateOptimizer  # noqa: E402

F64 = torch.float64


class MovingAverageSGD(IndexedStateOptimizer):
    """SGD + a moving average ``u`` (and a "seen" flag and a visit counter) per index."""

    def __init__(self, params, n_indices, lr=0.1, beta=0.5):
        super().__init__(params, dict(lr=lr), n_indices)
        self.beta = beta
        self.add_indexed_state("u")
        self.add_indexed_state("seen", dtype=torch.bool, fill=False)
        self.add_indexed_state("visits", dtype=torch.int64)

    def weights(self, indices):
        """Batch weights from the current estimates (what a DRO method would do)."""
        return torch.softmax(self.gather("u", self.check_indices(indices)), dim=0)

    def _update(self, indices, losses):
        u = self.gather("u", indices)
        seen = self.gather("seen", indices)
        new = torch.where(seen, (1 - self.beta) * u + self.beta * losses, losses)
        self.scatter("u", indices, new)
        self.scatter("seen", indices, True)
        self.indexed_state("visits").index_add_(0, indices, torch.ones_like(indices))
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


def _data(n=24, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=F64)
    y = X @ torch.randn(d, generator=g, dtype=F64) + 0.1 * torch.randn(n, generator=g,
                                                                        dtype=F64)
    return X, y


def _model(d=3):
    m = torch.nn.Linear(d, 1, dtype=F64)
    with torch.no_grad():
        m.weight.fill_(0.1)
        m.bias.zero_()
    return m


def _train(model, opt, loader, ref=None, per_group=None):
    """Run one pass; with ``ref`` (a dict of NumPy tables) mirror the updates in NumPy."""
    for batch in loader:
        x, t, idx = batch[0], batch[1], batch[-1]
        losses = 0.5 * (model(x)[:, 0] - t) ** 2
        if per_group is not None:  # per-group state: the batch's group means
            g = per_group[idx]
            keys, inv = torch.unique(g, return_inverse=True)
            vals = torch.zeros(len(keys), dtype=F64).index_add(0, inv, losses)
            vals = vals / torch.bincount(inv).to(F64)
        else:
            keys, vals = idx, losses
        w = opt.weights(keys).detach()
        opt.zero_grad()
        (w * vals).sum().backward()
        opt.step(indices=keys, losses=vals.detach())
        if ref is not None:
            k, v = keys.numpy(), vals.detach().numpy()
            last = {}
            for i, val in zip(k, v):
                last[i] = val  # last occurrence wins
            for i, val in last.items():
                ref["u"][i] = (1 - opt.beta) * ref["u"][i] + opt.beta * val if ref["seen"][i] \
                    else val
                ref["seen"][i] = True
            np.add.at(ref["visits"], k, 1)
    return model


def _assert_tables(opt, ref):
    np.testing.assert_allclose(opt.indexed_state("u").cpu().numpy(), ref["u"], rtol=1e-14)
    np.testing.assert_array_equal(opt.indexed_state("seen").cpu().numpy(), ref["seen"])
    np.testing.assert_array_equal(opt.indexed_state("visits").cpu().numpy(), ref["visits"])


def _ref(n):
    return {"u": np.zeros(n), "seen": np.zeros(n, bool), "visits": np.zeros(n, np.int64)}


@pytest.mark.parametrize("sampler", ["permutation", "uniform"])
def test_per_sample_state_follows_loader_indices(sampler):
    n = 24
    X, y = _data(n)
    data = TensorDataset(X, y, torch.arange(n))
    bs = (PermutationSampler(n, 5, random_state=0) if sampler == "permutation"
          else UniformSampler(n, 6, n_batches=7, random_state=0))  # uniform: duplicates
    loader = DataLoader(data, batch_sampler=bs)
    model = _model()
    opt = MovingAverageSGD(model.parameters(), n_indices=n)
    assert opt.indexed_state("u").shape == (n,) and opt.indexed_state("u").dtype == F64
    assert opt.indexed_state_names == ("u", "seen", "visits")
    ref = _ref(n)
    for _ in range(3):
        _train(model, opt, loader, ref)
        _assert_tables(opt, ref)
    assert ref["visits"].sum() == 3 * len(bs) * bs.batch_size


def test_per_group_state_with_group_sampler():
    n, m = 30, 4
    X, y = _data(n)
    groups = torch.arange(n) % m
    loader = DataLoader(TensorDataset(X, y, torch.arange(n)),
                        batch_sampler=GroupSampler(groups.numpy(), 2, 3, n_batches=5,
                                                   random_state=1))
    model = _model()
    opt = MovingAverageSGD(model.parameters(), n_indices=m)
    ref = _ref(m)
    _train(model, opt, loader, ref, per_group=groups)
    _assert_tables(opt, ref)
    assert opt.indexed_state("u").shape == (m,) and ref["visits"].sum() == 5 * 2


def test_scatter_last_occurrence_wins_and_broadcasts():
    opt = MovingAverageSGD([torch.zeros(1, requires_grad=True)], n_indices=5)
    idx = torch.tensor([3, 1, 3, 3, 0])
    opt.scatter("u", idx, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert opt.indexed_state("u").tolist() == [5.0, 2.0, 0.0, 4.0, 0.0]
    opt.scatter("u", torch.tensor([2, 4]), 7.0)
    assert opt.indexed_state("u").tolist() == [5.0, 2.0, 7.0, 4.0, 7.0]
    opt.scatter("u", torch.tensor([], dtype=torch.int64), torch.tensor([]))  # no-op
    with pytest.raises(ValueError, match="already exists"):
        opt.add_indexed_state("u")
    vec = opt.add_indexed_state("vec", shape=(2,), fill=1.0)
    assert vec.shape == (5, 2)
    opt.scatter("vec", torch.tensor([1, 1]), torch.tensor([[2.0, 3.0], [4.0, 5.0]]))
    assert opt.gather("vec", torch.tensor([1, 0])).tolist() == [[4.0, 5.0], [1.0, 1.0]]


def _checkpoint_run(device, interrupt):
    n = 20
    X, y = _data(n, seed=3)
    loader = DataLoader(TensorDataset(X, y, torch.arange(n)),
                        batch_sampler=PermutationSampler(n, 4, random_state=2))
    model = _model().to(device)
    opt = MovingAverageSGD(model.parameters(), n_indices=n, lr=0.05)

    def epoch():
        for x, t, idx in loader:
            x, t = x.to(device), t.to(device)
            losses = 0.5 * (model(x)[:, 0] - t) ** 2
            w = opt.weights(idx).detach()
            opt.zero_grad()
            (w * losses).sum().backward()
            opt.step(indices=idx, losses=losses.detach())

    epoch()
    if interrupt:  # save, rebuild everything from scratch, load, go on
        buf = io.BytesIO()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
        buf.seek(0)
        ckpt = torch.load(buf, map_location="cpu")
        model = _model().to(device)
        model.load_state_dict(ckpt["model"])
        opt = MovingAverageSGD(model.parameters(), n_indices=n, lr=0.05)
        opt.load_state_dict(ckpt["opt"])
    epoch()
    return model, opt


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_checkpoint_round_trip_continues_identically(device):
    m1, o1 = _checkpoint_run(device, interrupt=False)
    m2, o2 = _checkpoint_run(device, interrupt=True)
    for name in o1.indexed_state_names:
        t1, t2 = o1.indexed_state(name), o2.indexed_state(name)
        assert t1.device.type == t2.device.type == device
        assert torch.equal(t1, t2), name
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p1, p2)
    sd = o1.state_dict()
    assert sd["n_indices"] == 20 and set(sd["indexed_state"]) == {"u", "seen", "visits"}
    assert sd["indexed_state"]["u"] is not o1.indexed_state("u")  # a copy


def test_state_lives_on_the_parameters_device_and_follows_them():
    p = torch.zeros(2, dtype=torch.float32, requires_grad=True)
    opt = MovingAverageSGD([p], n_indices=3)
    assert opt.indexed_state("u").dtype == torch.float32
    assert opt.indexed_state("u").device == p.device == opt.device
    assert opt.check_indices([0, 2]).device == p.device
    # a checkpoint of float64 state loads into float32 tables on this device
    other = MovingAverageSGD([torch.zeros(2, dtype=F64, requires_grad=True)], n_indices=3)
    other.scatter("u", torch.tensor([1]), 2.5)
    opt.load_state_dict(other.state_dict())
    assert opt.indexed_state("u").dtype == torch.float32
    assert opt.indexed_state("u").tolist() == [0.0, 2.5, 0.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available here")
def test_state_moves_with_the_parameters_to_cuda():
    model = _model()
    opt = MovingAverageSGD(model.parameters(), n_indices=4)
    assert opt.indexed_state("u").device.type == "cpu"
    model.cuda()  # parameters moved in place after the optimizer was built
    model.weight.grad = torch.zeros_like(model.weight)
    opt.step(indices=torch.tensor([1, 2]), losses=torch.ones(2, device="cuda", dtype=F64))
    assert opt.indexed_state("u").device.type == "cuda"
    cpu_model = _model()
    cpu_opt = MovingAverageSGD(cpu_model.parameters(), n_indices=4)
    cpu_opt.load_state_dict(opt.state_dict())  # GPU checkpoint onto a CPU optimizer
    assert cpu_opt.indexed_state("u").device.type == "cpu"
    assert cpu_opt.indexed_state("u").tolist() == [0.0, 1.0, 1.0, 0.0]


def test_closure_is_called_and_its_loss_returned():
    model = _model()
    opt = MovingAverageSGD(model.parameters(), n_indices=2)
    x, t = torch.ones(2, 3, dtype=F64), torch.zeros(2, dtype=F64)

    def closure():
        opt.zero_grad()
        loss = (0.5 * (model(x)[:, 0] - t) ** 2).mean()
        loss.backward()
        return loss

    loss = opt.step(closure, indices=[0, 1], losses=torch.ones(2, dtype=F64))
    assert loss.item() > 0 and model.weight.grad is not None


def test_bad_indices_and_checkpoints_raise_value_error():
    model = _model()
    opt = MovingAverageSGD(model.parameters(), n_indices=4)
    ones = torch.ones(2, dtype=F64)
    with pytest.raises(ValueError, match="needs indices"):
        opt.step(losses=ones)
    with pytest.raises(ValueError, match="out of range"):
        opt.step(indices=torch.tensor([0, 4]), losses=ones)
    with pytest.raises(ValueError, match="out of range"):
        opt.step(indices=[-1, 0], losses=ones)
    with pytest.raises(ValueError, match="integers"):
        opt.step(indices=torch.tensor([0.0, 1.0]), losses=ones)
    with pytest.raises(ValueError, match="1-D"):
        opt.step(indices=torch.zeros(1, 2, dtype=torch.int64), losses=ones)
    with pytest.raises(ValueError, match="n_indices"):
        MovingAverageSGD(model.parameters(), n_indices=0)
    with pytest.raises(ValueError, match="n_indices=4"):
        MovingAverageSGD(model.parameters(), n_indices=5).load_state_dict(opt.state_dict())
    with pytest.raises(ValueError, match="indexed_state"):
        opt.load_state_dict(torch.optim.SGD(model.parameters(), lr=0.1).state_dict())
    with pytest.raises(KeyError, match="no indexed state 'v'"):
        opt.indexed_state("v")
    sd = opt.state_dict()
    del sd["indexed_state"]["visits"]
    with pytest.raises(ValueError, match="indexed state"):
        opt.load_state_dict(sd)
    assert opt.indexed_state("u").abs().sum() == 0  # nothing written by the failed calls

    class Bare(IndexedStateOptimizer):
        pass

    with pytest.raises(NotImplementedError, match="_update"):
        Bare(model.parameters(), {}, 3).step(indices=[0])
