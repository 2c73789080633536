"""The torch optimizers' one-process step against ``torch.optim.SGD``, two source trees side by
side in ONE process: the ``before`` tree (``--before REV``: ``git archive REV src``, imported
under another package name) and the working tree's ``riskopt``.

The same MLP, batch and loop as ``benchmarks/torch_step_phases.py`` (``d -> hidden -> 1``,
float32, 256 rows, the common table's ``drive_step``). SGD, the floor rows of
``benchmarks/torch_ddp_comm.py`` without the gather (SGD on the loss the group methods are
driven with; the same plus a no-grad forward at a second parameter vector) and each optimizer
of both trees run interleaved blocks of ``--steps`` steps; per row the median CPU time per
step over the blocks, as a ratio to SGD's, the median over blocks of the per-block ratio
after / before (the pair ran seconds apart: the least noisy number on a loaded machine), and
the ATen operations dispatched per step (a ``TorchDispatchMode`` count: independent of the
load).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/torch_optim_before_after.py --before 1177b104
        [--rows sonx sox ooa ...] [--hidden 256] [--blocks 9] [--out DIR]

Output: ``DIR/hidden<h>/results.{json,md}`` (default DIR:
``benchmarks/results/torch_optim_before_after/``).
"""
import argparse
import copy
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from riskopt.bench._io import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "torch_optim_before_after"
ROWS = ["sonx", "sox", "ooa", "sonex", "alexr2"]


class _Count(TorchDispatchMode):
    n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        _Count.n += 1
        return func(*args, **(kwargs or {}))


def _before_tree(rev, tmp):
    """``git archive rev src/riskopt`` unpacked as the package ``riskopt_before`` in ``tmp``
    (the package imports itself relatively, so it loads beside the working tree's)."""
    tar = Path(tmp) / "src.tar"
    with open(tar, "wb") as fh:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src/riskopt"], stdout=fh,
                       check=True)
    with tarfile.open(tar) as t:
        t.extractall(tmp, filter="data")
    shutil.move(str(Path(tmp) / "src" / "riskopt"), str(Path(tmp) / "riskopt_before"))
    sys.path.insert(0, str(tmp))
    return importlib.import_module("riskopt_before.torch.optim._drive")


def measure(args, before):
    torch.set_num_threads(1)
    trees = {"before": before, "after": importlib.import_module("riskopt.torch.optim._drive")}
    D = trees["after"]
    n = args.batch * 16
    X, y, groups, module = D.make_problem(n=n, d=args.d, hidden=args.hidden,
                                          dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    twin = copy.deepcopy(module)
    sgd = torch.optim.SGD(module.parameters(), lr=1e-4)

    def batch():
        return torch.randint(0, n, (args.batch,), generator=gen)

    def sgd_step():
        idx = batch()
        sgd.zero_grad()
        (0.5 * (module(X[idx])[:, 0] - y[idx]) ** 2).mean().backward()
        sgd.step()

    def floor_step(nograd):
        idx = batch()
        x, t = X[idx], y[idx]
        sgd.zero_grad()
        losses = 0.5 * (module(x)[:, 0] - t) ** 2
        loss = D._group_means(losses, groups[idx])[1].mean() + 0.1 * losses.mean()
        if nograd:
            with torch.no_grad():
                twin(x)
        loss.backward()
        sgd.step()

    steppers = {"sgd": sgd_step, "floor/groups": lambda: floor_step(False),
                "floor/nograd": lambda: floor_step(True)}
    for name in args.rows:
        for tree, Dm in trees.items():
            opt = Dm.make_optimizer(name, module.parameters(), n, 4, lr=1e-4,
                                    on_divergence="ignore")
            steppers[f"{name}/{tree}"] = (lambda o, Dm, k: lambda: Dm.drive_step(
                k, o, module, module, X, y, groups, batch()))(opt, Dm, Dm.ROWS[name][2])
    ops, cpu = {}, {k: [] for k in steppers}
    for k, f in steppers.items():
        for _ in range(3):
            f()
        _Count.n = 0
        with _Count():
            for _ in range(args.steps):
                f()
        ops[k] = _Count.n / args.steps
    for _ in range(args.blocks):          # interleaved: the machine's load drifts
        for k, f in steppers.items():
            c0 = time.process_time()
            for _ in range(args.steps):
                f()
            cpu[k].append((time.process_time() - c0) / args.steps)
    return ops, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the git revision of the before tree")
    ap.add_argument("--rows", nargs="+", default=ROWS)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--blocks", type=int, default=9)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ops, cpu = measure(args, _before_tree(args.before, tmp))
    sgd = statistics.median(cpu["sgd"])
    rows = []
    for k in ("sgd", "floor/groups", "floor/nograd"):
        rows.append({"row": k, "ratio": statistics.median(cpu[k]) / sgd, "ops": ops[k]})
    for name in args.rows:
        b, a = cpu[f"{name}/before"], cpu[f"{name}/after"]
        rows.append({"row": name, "before": statistics.median(b) / sgd,
                     "after": statistics.median(a) / sgd,
                     "after_over_before": statistics.median(x / y for x, y in zip(a, b)),
                     "paired_min_max": [min(x / y for x, y in zip(a, b)),
                                        max(x / y for x, y in zip(a, b))],
                     "saved_us": 1e6 * statistics.median(y - x for x, y in zip(a, b)),
                     "ops_before": ops[f"{name}/before"], "ops_after": ops[f"{name}/after"]})
    meta = {"before": args.before, "hidden": args.hidden, "d": args.d, "batch": args.batch,
            "steps": args.steps, "blocks": args.blocks, "sgd_cpu_ms": 1e3 * sgd,
            "torch": torch.__version__, "load": os.getloadavg()}
    out = Path(args.out) / (f"hidden{args.hidden}" + (f"_d{args.d}" if args.d != 64 else ""))
    atomic_write_json(out / "results.json", {"meta": meta, "rows": rows})
    md = [f"# One-process step, before ({args.before}) and after side by side "
          f"(`OMP_NUM_THREADS=1 python benchmarks/torch_optim_before_after.py --before "
          f"{args.before} --hidden {args.hidden} --d {args.d} --steps {args.steps} --blocks "
          f"{args.blocks} --rows {' '.join(args.rows)}`)", "",
          f"MLP {args.d}-{args.hidden}-1 float32, batch {args.batch}, 1 thread, no process "
          f"group; {args.blocks} interleaved blocks of {args.steps} steps; CPU time (median "
          f"over blocks) as a ratio to SGD's ({1e3 * sgd:.2f} ms); load average at the end "
          f"{meta['load'][0]:.1f}. after / before: the median of the per-block ratios (min - "
          "max). Saved: the median over blocks of before - after, CPU us per step. Ops: ATen "
          "operations per step.", "",
          "| row | x SGD before | x SGD after | after / before (min - max) | saved us | "
          "ops before | ops after |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "before" in r:
            lo, hi = r["paired_min_max"]
            md.append(f"| {r['row']} | {r['before']:.2f} | {r['after']:.2f} | "
                      f"{r['after_over_before']:.3f} ({lo:.2f} - {hi:.2f}) | "
                      f"{r['saved_us']:.0f} | {r['ops_before']:.0f} | {r['ops_after']:.0f} |")
        else:
            md.append(f"| {r['row']} | - | {r['ratio']:.2f} | - | - | - | {r['ops']:.0f} |")
    atomic_write_text(out / "results.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
