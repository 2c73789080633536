"""The torch optimizers' own cost per step in one process, against ``torch.optim.SGD``.

Same MLP and batch as ``benchmarks/torch_ddp_comm.py`` (64-256-1, float32, 256 rows; one
thread), no process group, so no communication: what remains is each optimizer's own work.
That work is its tensor ops on the batch statistics, its moments, and the second forward pass
at the previous iterate (ASCDRO and the MSVR methods). This is the part of the DDP step ratio
that no communication design can remove.

SGD and the optimizers are timed in interleaved blocks of ``--steps`` steps, and the best of
``--repeats`` blocks counts. The machine is shared, so compare ratios within one run only.
Output: ``benchmarks/results/torch_optim_step_cost/`` (JSON and Markdown).

Usage::

    python benchmarks/torch_optim_step_cost.py [--steps 30] [--repeats 6]
"""
import argparse
import time
from pathlib import Path

import torch

from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.torch.optim import _drive as D

OUT = Path(__file__).resolve().parent / "results" / "torch_optim_step_cost"
ROWS = ["scdro", "ascdro", "pgsmd2", "sonex", "sonx", "sox", "alexr2", "ooa"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(1)
    n = 4096
    X, y, groups, module = D.make_problem(n=n, d=64, hidden=256, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    sgd = torch.optim.SGD(module.parameters(), lr=1e-4)

    def sgd_step():
        idx = torch.randint(0, n, (args.batch,), generator=gen)
        sgd.zero_grad()
        (0.5 * (module(X[idx])[:, 0] - y[idx]) ** 2).mean().backward()
        sgd.step()

    steppers = {"sgd": sgd_step}
    for name in ROWS:
        opt = D.make_optimizer(name, module.parameters(), n, 4, lr=1e-4, on_divergence="ignore")
        kind = D.ROWS[name][2]
        steppers[name] = (lambda o, k: lambda: D.drive_step(
            k, o, module, module, X, y, groups,
            torch.randint(0, n, (args.batch,), generator=gen)))(opt, kind)
    best = {k: float("inf") for k in steppers}
    for f in steppers.values():
        for _ in range(3):
            f()
    for _ in range(args.repeats):
        for k, f in steppers.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                f()
            best[k] = min(best[k], (time.perf_counter() - t0) / args.steps)
    rows = [{"optimizer": k, "ms_per_step": 1e3 * v, "ratio_to_sgd": v / best["sgd"]}
            for k, v in best.items()]
    meta = {"model": "MLP 64-256-1 float32", "batch": args.batch, "threads": 1,
            "steps": args.steps, "repeats": args.repeats, "torch": torch.__version__,
            "note": "2 shared CPU cores, loaded machine"}
    atomic_write_json(OUT / "results.json", {"meta": meta, "rows": rows})
    md = [f"# Optimizer step cost, one process (`python benchmarks/torch_optim_step_cost.py "
          f"--steps {args.steps} --repeats {args.repeats}`)", "",
          f"{meta['model']}, batch {args.batch}, 1 thread, best of {args.repeats} interleaved "
          "blocks. Machine loaded: ratios only.", "",
          "| optimizer | ms / step | x SGD |", "|---|---|---|"]
    md += [f"| {r['optimizer']} | {r['ms_per_step']:.2f} | {r['ratio_to_sgd']:.2f} |"
           for r in rows]
    atomic_write_text(OUT / "results.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
