"""Before / after of issue 27: the torch optimizers under DDP, their checkpoints, divergence.

1. **DDP.** Two ranks (gloo, CPU, forked), a float64 MLP, a shuffling ``DistributedSampler``
   (each rank 32 rows, global batch 64). Every optimizer runs twice under DDP: with
   ``process_group=False`` (each rank keeps its own ``lambda``, moving averages and tables,
   updated from its own samples: exactly the code path the optimizers had before) and by
   default (the batch statistics all-gathered). Both are compared with the one-process run on
   the concatenated global batches (the two samplers' batches in rank order): ``lambda`` on
   each rank after 20 steps (SCDRO), relative difference of the parameters and of the
   optimizer state (tables included) after 30 steps, and whether the ranks agree bitwise.
2. **Checkpoints.** Ten steps, ``torch.save`` / ``torch.load(weights_only=True)`` of the
   model and optimizer, a fresh model and optimizer, ten more steps, against twenty
   uninterrupted steps (float64, one process). "before" emulates the old checkpoints: the
   optimizer loads only ``state`` and ``param_groups`` (``torch.optim.Optimizer``'s
   ``load_state_dict``, what the old ASCDRO had) or, for PGSMD2, without its step counter.
3. **Divergence.** ``SCDRO(params, radius=0.5, lr=1e8, beta=0.5)``, 20 steps: the parameter
   magnitude and what is reported.

Output: ``benchmarks/results/torch_ddp_exactness/`` (``results.json``, ``results.md``).

Usage::

    python benchmarks/torch_ddp_exactness.py      # about a minute on 2 loaded CPU cores
"""
import copy
import io
import json
import multiprocessing
import tempfile
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

import riskopt
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.torch.optim import _drive as D

OUT = Path(__file__).resolve().parent / "results" / "torch_ddp_exactness"
N, PER_RANK, WORLD, STEPS, LAM_AT = 512, 32, 2, 30, 20
NAMES = ["scdro", "ascdro", "pgsmd2", "sonex", "sonx", "alexr2", "ooa"]


def global_batches(steps, seed=0):
    """Each rank's batches from its shuffling DistributedSampler (epochs via set_epoch);
    returns per step the list of the ranks' index tensors."""
    samplers = [DistributedSampler(range(N), num_replicas=WORLD, rank=r, shuffle=True,
                                   seed=seed) for r in range(WORLD)]
    out, epoch = [], 0
    while len(out) < steps:
        for s in samplers:
            s.set_epoch(epoch)
        orders = [torch.tensor(list(iter(s))) for s in samplers]
        for k in range(0, orders[0].numel() - PER_RANK + 1, PER_RANK):
            out.append([o[k:k + PER_RANK] for o in orders])
        epoch += 1
    return out[:steps]


def train(name, rank=0, world=1, model=None, module=None, problem=None, steps=STEPS,
          **extra):
    X, y, groups = problem
    opt = D.make_optimizer(name, module.parameters(), N, 4, **extra)
    lam_at = None
    for k, parts in enumerate(global_batches(steps)):
        idx = parts[rank] if world > 1 else torch.cat(parts)
        D.drive_step(D.ROWS[name][2], opt, model, module, X, y, groups, idx)
        if k + 1 == LAM_AT and hasattr(opt, "lam"):
            lam_at = opt.lam
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    return {"params": flat, "state": D.state_tensors(opt), "lam20": lam_at}


def _problem():
    X, y, groups, module = D.make_problem(n=N, d=8, hidden=16)
    return (X, y, groups), module


def _worker(rank, path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}/rendezvous", rank=rank,
                            world_size=WORLD)
    out = {}
    for name in NAMES:
        for mode, pg in (("before", False), ("after", None)):
            problem, module = _problem()
            ddp = torch.nn.parallel.DistributedDataParallel(module)
            out[f"{name}/{mode}"] = train(name, rank, WORLD, ddp, module, problem,
                                          process_group=pg)
    torch.save(out, f"{path}/rank{rank}.pt")
    dist.destroy_process_group()


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-300))


def ddp_section():
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with tempfile.TemporaryDirectory() as path:
        torch.multiprocessing.start_processes(_worker, args=(path,), nprocs=WORLD,
                                              start_method=method)
        ranks = [torch.load(f"{path}/rank{r}.pt", weights_only=True) for r in range(WORLD)]
    rows = []
    for name in NAMES:
        problem, module = _problem()
        ref = train(name, model=module, module=module, problem=problem)
        for mode in ("before", "after"):
            r0, r1 = ranks[0][f"{name}/{mode}"], ranks[1][f"{name}/{mode}"]
            rows.append({
                "optimizer": name, "mode": mode,
                "lambda_step20": None if ref["lam20"] is None else
                [r0["lam20"], r1["lam20"], ref["lam20"]],
                "params_rel_diff": _rel(r0["params"], ref["params"]),
                "state_rel_diff": _rel(r0["state"], ref["state"]),
                "ranks_bitwise_equal": bool(torch.equal(r0["params"], r1["params"])
                                            and torch.equal(r0["state"], r1["state"])),
            })
    return rows


def _save_load(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def resume_section():
    rows = []
    for name in ("scdro", "ascdro", "pgsmd2"):
        # PGSMD2 with its default centre schedule (every n / b = 8 steps, driven by _steps)
        extra = {"center_every": None} if name == "pgsmd2" else {}
        problem, module = _problem()
        full = train(name, model=module, module=module, problem=problem, steps=20, **extra)
        for mode in ("before", "after"):
            problem, module = _problem()
            X, y, groups = problem
            opt = D.make_optimizer(name, module.parameters(), N, 4, **extra)
            batches = global_batches(20)
            for parts in batches[:10]:
                D.drive_step(D.ROWS[name][2], opt, module, module, X, y, groups,
                             torch.cat(parts))
            saved = _save_load(copy.deepcopy((module.state_dict(), opt.state_dict())))
            _, module2 = _problem()
            module2.load_state_dict(saved[0])
            opt2 = D.make_optimizer(name, module2.parameters(), N, 4, **extra)
            sd = saved[1]
            if mode == "before" and name == "ascdro":
                sd = {k: v for k, v in sd.items() if k in ("state", "param_groups")}
                torch.optim.Optimizer.load_state_dict(opt2, sd)
            elif mode == "before" and name == "pgsmd2":
                opt2.load_state_dict({k: v for k, v in sd.items() if k != "pgsmd2"})
            else:
                opt2.load_state_dict(sd)
            for parts in batches[10:]:
                D.drive_step(D.ROWS[name][2], opt2, module2, module2, X, y, groups,
                             torch.cat(parts))
            flat = torch.cat([p.detach().reshape(-1) for p in module2.parameters()])
            rows.append({"optimizer": name, "mode": mode,
                         "params_rel_diff": _rel(flat, full["params"])})
    return rows


def divergence_section():
    X, y, groups, module = D.make_problem(n=N, d=8, hidden=16)
    out = {}
    for mode, on in (("before", "ignore"), ("after", "warn")):
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 1).double()
        opt = riskopt.torch.optim.SCDRO(model.parameters(), radius=0.5, lr=1e8, beta=0.5,
                                        on_divergence=on)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for parts in global_batches(20):
                idx = torch.cat(parts)
                losses = 0.5 * (model(X[idx])[:, 0] - y[idx]) ** 2
                opt.zero_grad()
                opt.surrogate(losses).backward()
                opt.step()
        out[mode] = {"max_abs_param": float(max(p.detach().abs().max()
                                                for p in model.parameters())),
                     "warnings": [str(w.message) for w in caught
                                  if issubclass(w.category, riskopt.DivergenceWarning)]}
    return out


def main():
    import riskopt.torch  # noqa: F401  (riskopt.torch.optim for the divergence section)
    res = {"ddp": ddp_section(), "resume": resume_section(), "divergence": divergence_section(),
           "setup": {"n": N, "per_rank_batch": PER_RANK, "world": WORLD, "steps": STEPS,
                     "backend": "gloo", "dtype": "float64", "torch": torch.__version__}}
    atomic_write_json(OUT / "results.json", res)
    md = ["# Issue 27: before / after (`python benchmarks/torch_ddp_exactness.py`)", "",
          f"2 gloo ranks x {PER_RANK} rows (shuffling DistributedSampler), global batch "
          f"{WORLD * PER_RANK}, float64 MLP 8-16-1, {STEPS} steps; 'before' = "
          "`process_group=False` (each rank its own state, the old code path).", "",
          "| optimizer | mode | lambda@20 rank0 / rank1 / 1-process | params rel. diff | "
          "state rel. diff | ranks bitwise equal |", "|---|---|---|---|---|---|"]
    for r in res["ddp"]:
        lam = ("-" if r["lambda_step20"] is None else
               " / ".join(f"{v:.6f}" for v in r["lambda_step20"]))
        md.append(f"| {r['optimizer']} | {r['mode']} | {lam} | {r['params_rel_diff']:.2e} | "
                  f"{r['state_rel_diff']:.2e} | {r['ranks_bitwise_equal']} |")
    md += ["", "Resume (10 steps, save, load with weights_only=True, 10 steps) vs 20 steps:", "",
           "| optimizer | mode | params rel. diff |", "|---|---|---|"]
    md += [f"| {r['optimizer']} | {r['mode']} | {r['params_rel_diff']:.2e} |"
           for r in res["resume"]]
    md += ["", "Divergence, SCDRO(lr=1e8, radius=0.5, beta=0.5), 20 steps:", ""]
    for mode, d in res["divergence"].items():
        md.append(f"- {mode}: max |param| = {d['max_abs_param']:.3g}; warnings: "
                  f"{d['warnings'] or 'none'}")
    atomic_write_text(OUT / "results.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
