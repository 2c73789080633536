"""How often the default ``RiskRegressor``'s Newton solver falls back to L-BFGS on small
random problems with about as many features as samples (issue 29, found in stop 38).

    python benchmarks/newton_wide.py [--seeds 30] [--out benchmarks/results/newton_wide]

For each shape ``n x p`` and seed: ``X ~ U(0, 1)^(n x p)``; ``y`` integers 0..2 (even seeds,
as scikit-learn's sample-weight check) or ``X w + t_3`` noise (odd seeds); one
``RiskRegressor(tol=--tol)`` fit (default risk, loss, l2; ``--tol default``: the default). Counts the fits whose
``solver_`` is not ``"newton"`` (Newton not certified, L-BFGS from its point) and the CPU
time. Writes ``results.json`` / ``results.md`` to ``--out``.
"""
import argparse
import json
import os
import re
import time
import warnings
from pathlib import Path

import numpy as np

SHAPES = [(15, 30), (30, 30), (45, 30), (40, 60), (200, 10)]


def _stop_gap(reason):
    """The relative gap in ``"Newton stopped at a relative gap G > ..."`` (NaN if absent)."""
    m = re.search(r"relative gap ([0-9.eE+-]+) >", reason)
    return float(m.group(1)) if m else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--tol", default="1e-10", help="the estimators' tol, or 'default'")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results/newton_wide"))
    args = ap.parse_args(argv)
    from riskopt.estimators import RiskRegressor

    kw = {} if args.tol == "default" else {"tol": float(args.tol)}
    rows = []
    for n, p in SHAPES:
        fallbacks, cpu, gaps = 0, 0.0, []
        for seed in range(args.seeds):
            rng = np.random.RandomState(seed)
            X = rng.rand(n, p)
            y = rng.randint(0, 3, size=n).astype(float)
            if seed % 2:
                y = X @ rng.randn(p) + rng.standard_t(3, size=n)
            t = time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = RiskRegressor(**kw).fit(X, y)
            cpu += time.process_time() - t
            if est.solver_ != "newton":
                fallbacks += 1
                gaps.append(_stop_gap(est.solver_reason_))
        rows.append({"n": n, "p": p, "seeds": args.seeds, "fallbacks": fallbacks,
                     "cpu_s": round(cpu, 3),
                     "median_stop_gap": float(np.median(gaps)) if gaps else None})
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# Newton -> L-BFGS fallbacks of RiskRegressor(tol={args.tol}) on small wide problems",
             "", f"Command: `python benchmarks/newton_wide.py --seeds {args.seeds} --tol {args.tol}`",
             "",
             "| n | p | fits | not certified by Newton | their median relative gap at Newton's stop |"
             " CPU s (all fits) |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['n']} | {r['p']} | {r['seeds']} | {r['fallbacks']} | {r['median_stop_gap']} |"
              f" {r['cpu_s']} |" for r in rows]
    for name, text in (("results.json", json.dumps(rows, indent=1)), ("results.md", "\n".join(lines) + "\n")):
        tmp = out / (name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, out / name)


if __name__ == "__main__":
    main()
