"""Data-parallel training (DDP, 2 CPU processes, gloo) with a spectral risk and ``gather=True``.

A spectral risk of a batch is not an average of per-sample terms: the weight ``q_i`` of a
sample depends on the losses of the whole batch. Under data parallelism each rank sees only
its share of the global batch, so :class:`riskopt.torch.SpectralRiskLoss` with
``gather=True`` all-gathers the losses, computes the weights on the *global* batch (the same
on every rank) and scales each rank's local part so that
:class:`~torch.nn.parallel.DistributedDataParallel`'s gradient averaging yields exactly the
single-process gradient of the global batch (see :mod:`riskopt.torch.distributed`).

This script starts two processes on the CPU (``gloo`` backend, rendezvous through a file in a
temporary folder: no network), trains the same network with SGD on batches of 128 rows split
64 / 64 between the ranks, and compares the final parameters with

* the same training in a single process on the whole batches (the reference), and
* DDP with ``gather=False`` (each rank weights its own 64 losses): a different, biased
  gradient.

With ``gather=True`` the parameters agree with the single-process run to rounding error.

Run::

    python examples/torch_ddp.py          # about 15 s on 2 CPU cores (process start-up)

Needs PyTorch with ``torch.distributed`` and gloo (the CPU wheels have both); offline.
"""
import argparse
import gc
import os
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

import riskopt as ro
from riskopt.torch import SpectralRiskLoss

WORLD = 2
RISK = ro.CVaR(0.2, shift_cost=0.05)


def make_problem(seed):
    data = ro.datasets.load("group_shift_regression", random_state=seed)
    return torch.from_numpy(data.X_train), torch.from_numpy(data.y_train)


def make_net(d, seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, 1)).double()


def batches(n, batch_size, epochs, seed):
    """The global batches (index arrays), identical in every process."""
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        perm = rng.permutation(n)
        for start in range(0, n - batch_size + 1, batch_size):
            yield perm[start:start + batch_size]


def train(net, crit, X, y, args, rank=0, world=1):
    opt = torch.optim.SGD(net.parameters(), lr=args.lr)
    for idx in batches(X.shape[0], args.batch_size, args.epochs, args.seed):
        local = np.array_split(idx, world)[rank]        # this rank's share of the batch
        losses = 0.5 * (net(X[local])[:, 0] - y[local]) ** 2
        opt.zero_grad()
        crit(losses).backward()
        opt.step()


def flat_params(module):
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]).numpy()


def worker(rank, init_file, out_dir, args):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD)
    try:
        X, y = make_problem(args.seed)
        out = {}
        for gather in (True, False):
            net = make_net(X.shape[1], args.seed)
            model = DDP(net)
            train(model, SpectralRiskLoss(RISK, gather=gather), X, y, args, rank, WORLD)
            out[f"gather={gather}"] = flat_params(net)
            del model                           # release the reducer's gloo work now
        np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **out)
        # Every rank reaches this point before any tears the group down: a rank that
        # destroys (and exits) while its peer's gloo threads still hold work makes the
        # peer abort at exit ("terminate called without an active exception").
        dist.barrier()
    finally:
        gc.collect()
        dist.destroy_process_group()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not (dist.is_available() and dist.is_gloo_available()):
        print("torch.distributed with the gloo backend is not available: nothing to run")
        return 0
    torch.set_num_threads(1)

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        torch.multiprocessing.start_processes(
            worker, args=(os.path.join(tmp, "rendezvous"), tmp, args), nprocs=WORLD,
            join=True, start_method="spawn")
        ranks = [dict(np.load(os.path.join(tmp, f"rank{r}.npz"))) for r in range(WORLD)]
    t_ddp = time.perf_counter() - t0

    # the reference: one process, the whole global batch, no gathering
    X, y = make_problem(args.seed)
    net = make_net(X.shape[1], args.seed)
    train(net, SpectralRiskLoss(RISK), X, y, args)
    ref = flat_params(net)
    losses = (0.5 * (net(X)[:, 0] - y) ** 2).detach().numpy()

    steps = args.epochs * (X.shape[0] // args.batch_size)
    print(f"{WORLD} processes (gloo, CPU), {steps} SGD steps on batches of {args.batch_size} "
          f"({args.batch_size // WORLD} per rank), risk = {RISK}")
    print(f"DDP runs (both settings, incl. process start-up): {t_ddp:.1f} s; reference "
          f"training risk after training: {RISK.value(losses):.6f}\n")
    print(f"  {'setting':<16}{'max |params - single-process params|':>40}")
    for key in ("gather=True", "gather=False"):
        diff = max(float(np.max(np.abs(r[key] - ref))) for r in ranks)
        print(f"  {key:<16}{diff:>40.2e}")
    same = float(np.max(np.abs(ranks[0]["gather=True"] - ranks[1]["gather=True"])))
    print(f"\nthe two ranks' parameters (gather=True) differ by at most {same:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
