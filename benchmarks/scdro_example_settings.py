"""Which SCDRO settings train ``examples/torchrun_mlp.py``'s network (stop 42, task i27d).

The example's data before stop 42 (regression, the squared loss: per-sample losses up to
30-60 from the noisiest group), the same with standardised targets, and the example's data
since stop 42 (the labels ``score > median``, the logistic loss). For each, a grid of SCDRO
settings (radius 0.1; ``lr``, ``beta``, ``shift_cost`` = lambda_0, ``lam_init``), one process,
``--epochs`` epochs of the example's batches (128, a fresh permutation per epoch, seed = the
epoch), the example's network (seed 0). Per run: the full data's mean and worst-group loss at
the start and the end, the final ``lambda``, and the guard's warnings (``stalled``: every
weight underflowed, zero gradient; ``diverged``). "trains": the final worst-group loss below
its start, lambda off its floor and no warning.

    python benchmarks/scdro_example_settings.py [--epochs 10]
                                  [--out benchmarks/results/scdro_example_settings]

Writes ``results.json`` and ``results.md``. 96 runs: about 7 minutes CPU (a loaded machine).
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
from riskopt.torch.optim import SCDRO

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torchrun_mlp as T  # noqa: E402

GRID = list(itertools.product([0.1, 0.01, 0.003, 0.001], [0.5, 0.1], [1e-3, 0.3], [1.0, 5.0]))


def data(kind):
    """``(X, y, groups, loss)`` of one data set (see the module docstring)."""
    g = torch.Generator().manual_seed(0)        # T.make_data's draws, the real-valued score
    X = torch.randn(T.N, T.D, generator=g, dtype=torch.float64)
    groups = torch.randint(0, T.GROUPS, (T.N,), generator=g)
    noise = (0.2 + 0.6 * groups) * torch.randn(T.N, generator=g, dtype=torch.float64)
    score = torch.sin(X[:, 0]) + X[:, 1] * X[:, 2] + noise
    if kind == "logistic":
        X2, y, g2 = T.make_data()
        assert torch.equal(X2, X) and torch.equal(g2, groups)
        return X, y, groups, lambda out, t: T.nn.functional.binary_cross_entropy_with_logits(
            out, t, reduction="none")
    y = score if kind == "squared" else (score - score.mean()) / score.std()
    return X, y, groups, lambda out, t: 0.5 * (out - t) ** 2


def run(kind, lr, beta, lam0, lam_init, epochs):
    X, y, groups, loss = data(kind)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(T.D, 32), nn.Tanh(), nn.Linear(32, 1)).double()

    def full():
        with torch.no_grad():
            l = loss(m(X)[:, 0], y)
        return float(l.mean()), max(float(l[groups == k].mean()) for k in range(T.GROUPS))

    opt = SCDRO(m.parameters(), radius=0.1, lr=lr, beta=beta, shift_cost=lam0,
                lam_init=lam_init)
    start = full()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for ep in range(epochs):
            for idx in T.global_batches(1, 128, 0, 1, seed=ep):
                opt.zero_grad()
                opt.surrogate(loss(m(X[idx])[:, 0], y[idx])).backward()
                opt.step()
    end = full()
    msgs = [str(w.message) for w in rec if issubclass(w.category, Warning)]
    warn = ",".join(sorted({"stalled" if " stalled " in s else "diverged" for s in msgs}))
    ok = end[1] < start[1] and opt.lam > lam0 and not msgs
    return dict(data=kind, lr=lr, beta=beta, shift_cost=lam0, lam_init=lam_init,
                start_mean=start[0], start_worst=start[1], end_mean=end[0], end_worst=end[1],
                lam=opt.lam, warnings=warn, trains=ok)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--out", default="benchmarks/results/scdro_example_settings")
    args = ap.parse_args()
    t0, rows = time.process_time(), []
    for kind in ("squared", "standardised", "logistic"):
        for lr, beta, lam0, lam_init in GRID:
            rows.append(run(kind, lr, beta, lam0, lam_init, args.epochs))
    head = ("| data | lr | beta | lambda_0 | lam_init | worst start | worst end | mean end | "
            "lambda end | warnings | trains |\n|" + "---|" * 11 + "\n")
    body = "".join(
        f"| {r['data']} | {r['lr']:g} | {r['beta']:g} | {r['shift_cost']:g} | "
        f"{r['lam_init']:g} | {r['start_worst']:.4f} | {r['end_worst']:.4g} | "
        f"{r['end_mean']:.4g} | {r['lam']:.4g} | {r['warnings'] or '-'} | "
        f"{'yes' if r['trains'] else 'no'} |\n" for r in rows)
    summary = "".join(
        f"- {kind}: {sum(r['trains'] for r in rows if r['data'] == kind)} of "
        f"{sum(r['data'] == kind for r in rows)} settings train\n"
        for kind in ("squared", "standardised", "logistic"))
    text = (f"# SCDRO settings on torchrun_mlp.py's data ({args.epochs} epochs, radius 0.1)\n\n"
            f"`python benchmarks/scdro_example_settings.py --epochs {args.epochs}` "
            f"(CPU {time.process_time() - t0:.0f} s)\n\n{summary}\n{head}{body}")
    atomic_write_json(os.path.join(args.out, "results.json"),
                      dict(epochs=args.epochs, rows=rows))
    atomic_write_text(os.path.join(args.out, "results.md"), text)
    print(text)


if __name__ == "__main__":
    main()
