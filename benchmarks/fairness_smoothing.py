"""The start smoothing of the rate constraints and the start point (riskopt.fairness): SQP
steps, fit time, bounded and hard training values and training objective on adult (sex),
training data only.

    python benchmarks/fairness_smoothing.py [--smoothing 1,0.3,0.1]
        [--out benchmarks/results/fairness_smoothing]

For every ``riskopt.fairness.SMOOTHING`` value and constraint (demographic parity, equalized
odds; ``constraint_tol=0.02``, ``RiskClassifier(risk="mean", l2_reg=1/n)``), one fit from
``w = 0``; at the default smoothing also one fit warm-started from the unconstrained model.
The fits are the library's (the calibration to the hard rates included: the start smoothing
is where it begins). Reported: SQP steps (``n_iter_``), fit seconds (one BLAS thread; loaded
machine: indicative), the smoothing of the returned round (``smoothing_``), the bounded
(``constraint_values_``) and hard training values and the training objective. Writes
``results.json`` and ``results.md``.
"""
import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

import riskopt as ro
import riskopt.fairness as fairness
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit


def _row(label, tau, c, est, t):
    return {"variant": label, "smoothing": tau, "constraint": c, "n_iter": int(est.n_iter_),
            "fit_s": t, "smoothing_": est.smoothing_, "bounded": est.constraint_values_.tolist(),
            "hard": est.hard_constraint_values_.tolist(),
            "objective": float(est.objective_trace_[-1])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoothing", default="1,0.3,0.1")
    ap.add_argument("--out", default="benchmarks/results/fairness_smoothing")
    args = ap.parse_args(argv)
    d = ro.datasets.load("adult")
    X, y, s = d.X_train, d.y_train, d.groups_train["sex"]
    n = X.shape[0]
    default = fairness.SMOOTHING
    rows = []
    with threadpool_limits(limits=1):
        try:
            for tau in [float(v) for v in args.smoothing.split(",")]:
                fairness.SMOOTHING = tau
                for c in ("demographic_parity", "equalized_odds"):
                    est = ro.RiskClassifier(risk="mean", l2_reg=1.0 / n, constraint=c)
                    t = time.perf_counter()
                    est.fit(X, y, sensitive_features=s)
                    rows.append(_row("from 0", tau, c, est, time.perf_counter() - t))
                    print(rows[-1], flush=True)
            fairness.SMOOTHING = default
            for c in ("demographic_parity", "equalized_odds"):
                est = ro.RiskClassifier(risk="mean", l2_reg=1.0 / n, warm_start=True).fit(X, y)
                est.set_params(constraint=c)
                t = time.perf_counter()
                est.fit(X, y, sensitive_features=s)
                rows.append(_row("from the unconstrained fit", default, c, est,
                                 time.perf_counter() - t))
                print(rows[-1], flush=True)
        finally:
            fairness.SMOOTHING = default
    os.makedirs(args.out, exist_ok=True)
    atomic_write_json(os.path.join(args.out, "results.json"),
                      {"meta": {"commit": _git_commit(), "data": "adult, sex, training set",
                                "constraint_tol": 0.02}, "rows": rows})
    lines = ["# Smoothing of the rate constraints (adult, sex, training data, tol 0.02)", "",
             "| start | SMOOTHING | constraint | SQP steps | fit s | smoothing_ | bounded | "
             "hard | objective |", "|---|---:|---|---:|---:|---:|---|---|---:|"]
    lines += [f"| {r['variant']} | {r['smoothing']:g} | {r['constraint']} | {r['n_iter']} | "
              f"{r['fit_s']:.2f} | {r['smoothing_']:g} | "
              f"{' / '.join(f'{v:.4f}' for v in r['bounded'])} | "
              f"{' / '.join(f'{v:.4f}' for v in r['hard'])} | {r['objective']:.6f} |"
              for r in rows]
    atomic_write_text(os.path.join(args.out, "results.md"), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
