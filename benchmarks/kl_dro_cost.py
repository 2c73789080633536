"""Per-iteration cost of SCDRO vs the primal-dual PG-SMD2 as n grows (SCDRO paper, Fig. 5).

SCDRO keeps O(1) state per iteration (moving averages of the inner expectation); PG-SMD2 keeps
an n-dimensional dual vector and projects it on the KL ball at every step, O(n). This times a
fixed number of mini-batch steps (and, as a reference for the memory effects every method
shares, plain mini-batch SGD on the mean loss of the same rows) (batch 64, d = 20, synthetic logistic data) of each solver's
kernel at n = 1e4, 1e5, 1e6 (median of repeats, after a JIT warm-up) and prints seconds per
iteration and the ratio to n = 1e4. Results (CSV, JSON with metadata, figure) go to
``benchmarks/results/kl_dro_cost/``.

Usage::

    python benchmarks/kl_dro_cost.py [--steps 200] [--repeats 3] [--sizes 1e4 1e5 1e6]
"""
import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np

import riskopt as ro
from riskopt.objectives import KLDROObjective

OUT = Path(__file__).resolve().parent / "results" / "kl_dro_cost"


def _problem(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    y = (X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0).astype(float)
    # loss_bound: Lemma 1's C given directly (no reference solve at n = 1e6)
    return KLDROObjective("logistic", X, y, radius=0.5, shift_cost=1e-3, l2_reg=1e-4,
                          loss_bound=5.0)


def time_per_iteration(name, obj, steps, repeats, batch=64, **params):
    solver = ro.solvers.get(name, batch_size=batch, random_state=0, **params)
    rng = np.random.default_rng(1)
    if name == "sgd":  # the reference: plain mini-batch SGD on the mean loss (same rows)
        obj = ro.Objective("logistic", "mean", obj.X, obj.y, l2_reg=1e-4)
    state = solver.init_state(obj)
    warm = rng.integers(0, obj.n, size=(2, batch))
    state = solver.update(obj, state, indices=warm)        # JIT warm-up
    times = []
    for _ in range(repeats):
        idx = rng.integers(0, obj.n, size=(steps, batch))
        t0 = time.perf_counter()
        state = solver.update(obj, state, indices=idx)
        times.append((time.perf_counter() - t0) / steps)
    return float(np.median(times))


def _atomic(path, text):
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sizes", type=float, nargs="+", default=[1e4, 1e5, 1e6])
    p.add_argument("--d", type=int, default=20)
    p.add_argument("--out", type=Path, default=OUT, help="results folder (default: %(default)s)")
    args = p.parse_args(argv)
    out = args.out
    solvers = {"scdro": dict(lr=0.1, beta=0.1), "pgsmd2": dict(lr=0.1, dual_lr=1e-4),
               "sgd": dict(lr=0.1)}
    rows = []
    for n in [int(s) for s in args.sizes]:
        obj = _problem(n, args.d)
        for name, params in solvers.items():
            t = time_per_iteration(name, obj, args.steps, args.repeats, **params)
            rows.append({"solver": name, "n": n, "seconds_per_iteration": t})
            print(f"{name:<8} n = {n:>9,d}: {t * 1e6:10.1f} us / iteration", flush=True)
    base = {r["solver"]: r["seconds_per_iteration"] for r in rows if r["n"] == int(args.sizes[0])}
    for r in rows:
        r["ratio_to_smallest_n"] = r["seconds_per_iteration"] / base[r["solver"]]
    print("\nratio to n = %d:" % int(args.sizes[0]))
    for name in solvers:
        print(f"  {name:<8} " + "  ".join(f"n={r['n']:.0e}: {r['ratio_to_smallest_n']:.2f}x"
                                          for r in rows if r["solver"] == name))
    out.mkdir(parents=True, exist_ok=True)
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    _atomic(out / "cost.csv", buf.getvalue())
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = None
    meta = {"command": "python benchmarks/kl_dro_cost.py " + " ".join(argv or []),
            "steps": args.steps, "repeats": args.repeats, "batch_size": 64, "d": args.d,
            "git_commit": commit, "machine": platform.machine(), "cpus": os.cpu_count(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": rows}
    _atomic(out / "cost.json", json.dumps(meta, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
    for name in solvers:
        pts = [r for r in rows if r["solver"] == name]
        ax.plot([r["n"] for r in pts], [r["seconds_per_iteration"] * 1e3 for r in pts], "o-",
                label=f"{name if name != 'sgd' else 'SGD on the mean (reference)'} "
              f"({', '.join(f'{k}={v:g}' for k, v in solvers[name].items())})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of training samples n (log scale)")
    ax.set_ylabel("time per iteration (ms, log scale)")
    ax.set_title("Per-iteration cost, batch 64, d = %d: SCDRO vs primal-dual PG-SMD2" % args.d,
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    tmp = out / "cost.tmp.png"
    fig.savefig(tmp, dpi=150)
    os.replace(tmp, out / "cost.png")
    print(f"\nwritten: {out}/cost.csv, cost.json, cost.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
