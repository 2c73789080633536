"""Does ASCDRO (RASCDRO, RECOVER) freeze silently, as SCDRO did (stop 43, task kl)?

SCDRO's stall: every weight ``exp(l / lambda - log s) / b`` underflows (``log s`` an old
batch's), the gradient is exactly zero and the model does not move, without a word (stop 42:
``examples/torchrun_mlp.py``'s former data, the squared loss on a raw noisy target, lambda at
its floor). This runs ASCDRO on the same data and records, step by step: whether the gradient
at the current iterate is exactly zero (every parameter's ``.grad``), whether the step left the
parameters exactly unchanged (frozen), whether the estimators restarted, and lambda.

Settings: ``benchmarks/scdro_example_settings.py``'s "squared" data and network (float64, and
float32 where ``--float32``), radius 0.1, lambda_0 = 1e-3, ``lr`` in {0.1, 0.01, 0.003,
0.001}, ``beta`` in {0.5, 0.1}, ``lam_init`` in {1, 5}; ASCDRO, RASCDRO (``stage_steps=16``,
one epoch) and RECOVER (``radius=None``, lambda fixed at ``shift_cost`` in {1e-3, 0.3}).

    python benchmarks/ascdro_stall_probe.py [--epochs 10] [--float32]
        [--out benchmarks/results/ascdro_stall_probe]

Writes ``results.json`` and ``results.md``.
"""
import argparse
import itertools
import os
import sys
import time
import warnings

import torch
from torch import nn

from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.torch.optim import ASCDRO, DivergenceError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scdro_example_settings as E  # noqa: E402

VARIANTS = {"ascdro": dict(radius=0.1, shift_cost=1e-3),
            "rascdro": dict(radius=0.1, shift_cost=1e-3, stage_steps=16),
            "recover 1e-3": dict(radius=None, shift_cost=1e-3),
            "recover 0.3": dict(radius=None, shift_cost=0.3)}
GRID = list(itertools.product([0.1, 0.01, 0.003, 0.001], [0.5, 0.1], [1.0, 5.0]))


def run(variant, lr, beta, lam_init, epochs, dtype):
    X, y, groups, loss = E.data("squared")
    X, y = X.to(dtype), y.to(dtype)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(E.T.D, 32), nn.Tanh(), nn.Linear(32, 1)).to(dtype)
    kw = dict(VARIANTS[variant])
    if kw["radius"] is not None:
        kw["lam_init"] = lam_init
    opt = ASCDRO(m.parameters(), lr=lr, beta=beta, on_divergence="ignore", **kw)
    zero, frozen, restarts, lams, stopped = [], [], 0, [1.0], None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for ep in range(epochs):
                for idx in E.T.global_batches(1, 128, 0, 1, seed=ep):
                    out = loss(m(X[idx])[:, 0], y[idx])
                    prev = loss(torch.func.functional_call(m, opt.previous_params(m),
                                                           (X[idx],))[:, 0], y[idx])
                    opt.zero_grad()
                    opt.surrogate(out, prev).backward()
                    restarts += bool(opt._pending[1])
                    zero.append(all(p.grad is None or not p.grad.any()
                                    for p in m.parameters()))
                    before = [p.detach().clone() for p in m.parameters()]
                    opt.step()
                    frozen.append(all(torch.equal(a, p)
                                      for a, p in zip(before, m.parameters())))
                    lams.append(opt.lam)
        except DivergenceError:         # (non-finite losses: the model diverged)
            stopped = len(zero) + 1
    lams = lams[1:] or lams
    finite = stopped is None and all(torch.isfinite(p).all() for p in m.parameters())

    def longest(flags):
        best = cur = 0
        for f in flags:
            cur = cur + 1 if f else 0
            best = max(best, cur)
        return best

    return dict(variant=variant, dtype=str(dtype).replace("torch.", ""), lr=lr, beta=beta,
                lam_init=lam_init, steps=len(zero), zero_grad=sum(zero),
                frozen=sum(frozen), longest_frozen=longest(frozen), restarts=restarts,
                lam_min=min(lams), lam_end=lams[-1], floor_steps=sum(
                    lam <= VARIANTS[variant]["shift_cost"] for lam in lams), finite=finite,
                non_finite_losses_at=stopped)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--float32", action="store_true")
    ap.add_argument("--out", default="benchmarks/results/ascdro_stall_probe")
    args = ap.parse_args()
    t0, rows = time.process_time(), []
    dtypes = (torch.float64, torch.float32) if args.float32 else (torch.float64,)
    for dtype in dtypes:
        for variant in VARIANTS:
            grid = GRID if VARIANTS[variant]["radius"] is not None else [
                g for g in GRID if g[2] == 1.0]
            for lr, beta, lam_init in grid:
                rows.append(run(variant, lr, beta, lam_init, args.epochs, dtype))
    cols = ("variant", "dtype", "lr", "beta", "lam_init", "steps", "zero_grad", "frozen",
            "longest_frozen", "restarts", "floor_steps", "lam_min", "lam_end", "finite",
            "non_finite_losses_at")
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    body = "".join("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c])
                                     for c in cols) + " |\n" for r in rows)
    n_floor = sum(r["floor_steps"] > 0 for r in rows)
    summary = (f"- runs: {len(rows)}; with lambda at its floor at some step: {n_floor}; "
               f"steps at the floor: {sum(r['floor_steps'] for r in rows)}\n"
               f"- steps whose gradient at the current iterate is exactly zero: "
               f"{sum(r['zero_grad'] for r in rows)}; frozen steps (parameters exactly "
               f"unchanged): {sum(r['frozen'] for r in rows)} (longest run "
               f"{max(r['longest_frozen'] for r in rows)}); restarts: "
               f"{sum(r['restarts'] for r in rows)}; runs ending non-finite: "
               f"{sum(not r['finite'] for r in rows)}\n")
    text = (f"# ASCDRO / RASCDRO / RECOVER on the squared-loss data: does the model freeze?\n\n"
            f"`python benchmarks/ascdro_stall_probe.py --epochs {args.epochs}"
            f"{' --float32' if args.float32 else ''}` (CPU {time.process_time() - t0:.0f} s)"
            f"\n\n{summary}\n{head}{body}")
    atomic_write_json(os.path.join(args.out, "results.json"), dict(epochs=args.epochs,
                                                                   rows=rows))
    atomic_write_text(os.path.join(args.out, "results.md"), text)
    print(text)


if __name__ == "__main__":
    main()
