"""Train an MLP with SCDRO (KL-constrained DRO) or SONEX (group CVaR) on one or several
processes: the same script, the same iterates.

Under ``torchrun`` the script joins the process group (gloo on CPU, NCCL on CUDA) and wraps
the network in :class:`~torch.nn.parallel.DistributedDataParallel`; nothing else changes. The
optimizers of :mod:`riskopt.torch.optim` see the initialised process group, all-gather the
batch's losses (SCDRO) or the per-group estimates with their row counts (SONEX) -- one small
collective per step -- and every rank runs the same update of ``lambda``, ``log s``, the
moving averages and the tables. Each rank takes its contiguous share of every *global* batch,
so one process and ``W`` processes see the same global batches and print the same numbers (to
rounding error). A checkpoint is written by rank 0 and resumes with any number of processes.

Run::

    python examples/torchrun_mlp.py --optimizer scdro                  # one process
    torchrun --standalone --nproc_per_node 2 examples/torchrun_mlp.py --optimizer scdro
    torchrun --standalone --nproc_per_node 2 examples/torchrun_mlp.py --optimizer sonex
    torchrun --standalone --nproc_per_node 2 examples/torchrun_mlp.py --optimizer scdro --attach

(``--attach``: SCDRO's losses ride on DDP's gradient all-reduce, ``opt.attach(model)``: no
collective of its own in a step; the same numbers.)

(``torchrun`` is ``python -m torch.distributed.run``.) Offline, a few seconds plus the
process start-up.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn

from riskopt.torch.optim import SCDRO, SONEX, GroupCVaR

N, D, GROUPS = 2048, 10, 4


def make_data(seed=0):
    """Regression data with 4 groups of growing noise (the same on every rank)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, generator=g, dtype=torch.float64)
    groups = torch.randint(0, GROUPS, (N,), generator=g)
    noise = (0.2 + 0.6 * groups) * torch.randn(N, generator=g, dtype=torch.float64)
    y = torch.sin(X[:, 0]) + X[:, 1] * X[:, 2] + noise
    return X, y, groups


def global_batches(epochs, batch, rank, world, seed=0):
    """This rank's contiguous share of every global batch (a fresh permutation per epoch)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(N, generator=g)
        for k in range(0, N - batch + 1, batch):
            part = perm[k:k + batch].tensor_split(world)[rank]
            yield part


def group_means(losses, gid):
    ids, inv = torch.unique(gid, return_inverse=True)
    counts = torch.zeros(ids.numel(), dtype=losses.dtype).index_add_(
        0, inv, torch.ones_like(losses))
    return ids, torch.zeros_like(counts).index_add_(0, inv, losses) / counts, counts


def main():
    ap = argparse.ArgumentParser(description="SCDRO / SONEX on 1 or more processes")
    ap.add_argument("--optimizer", choices=["scdro", "sonex"], default="scdro")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128, help="global batch size")
    ap.add_argument("--checkpoint", default=None, help="write the final checkpoint here")
    ap.add_argument("--attach", action="store_true",
                    help="SCDRO: carry the losses on DDP's all-reduce (opt.attach)")
    args = ap.parse_args()

    if "RANK" in os.environ:                              # started by torchrun
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    dev = torch.device("cuda", torch.cuda.current_device()) if (
        dist.is_initialized() and dist.get_backend() == "nccl") else torch.device("cpu")

    X, y, groups = (t.to(dev) for t in make_data())
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(D, 32), nn.Tanh(), nn.Linear(32, 1)).double().to(dev)
    model = nn.parallel.DistributedDataParallel(module) if world > 1 else module

    if args.optimizer == "scdro":
        opt = SCDRO(module.parameters(), radius=0.1, lr=0.01, beta=0.5)
        if args.attach and world > 1:
            opt.attach(model)
    else:
        opt = SONEX(module.parameters(), n_outer=GROUPS, outer=GroupCVaR(0.5), lr=0.05)

    def losses_of(f, idx):
        return 0.5 * (f(X[idx])[:, 0] - y[idx]) ** 2

    for idx in global_batches(args.epochs, args.batch, rank, world):
        idx = idx.to(dev)
        if args.optimizer == "scdro":
            opt.zero_grad()
            opt.surrogate(losses_of(model, idx)).backward()
        else:
            ids, g_now, counts = group_means(losses_of(model, idx), groups[idx])
            g_prev = opt.evaluate_previous(
                module, lambda f: group_means(losses_of(f, idx), groups[idx])[1])
            opt.zero_grad()
            opt.surrogate(ids, g_now, g_prev, counts=counts).backward()
        opt.step()

    with torch.no_grad():
        full = losses_of(module, torch.arange(N, device=dev))
        worst = max(float(full[groups == g].mean()) for g in range(GROUPS))
    state = f"lambda = {opt.lam:.12f}" if args.optimizer == "scdro" else f"s = {opt.s:.12f}"
    if rank == 0:
        print(f"{args.optimizer} on {world} process(es): mean loss = {float(full.mean()):.12f}, "
              f"worst group loss = {worst:.12f}, {state}")
        if args.checkpoint:              # every rank holds the same state: rank 0 saves it
            torch.save({"model": module.state_dict(), "optimizer": opt.state_dict()},
                       args.checkpoint)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
