"""Where a slow constrained fit spends its SQP steps: every solve of
``riskopt.fairness`` (the first, smoothed one and each calibration round) with its smoothing,
SQP steps, whether it converged, the largest violation of the bound by the rates the
calibration holds (hard for the calibrated cells) and the objective (issue 33: the splits of
``benchmarks/fairness_vs_fairlearn.py`` whose fit took over half of fairlearn's time).

    python benchmarks/fairness_calibration_trace.py --case compas:race:min=100
        --constraint equalized_odds --splits 0,21
        [--out benchmarks/results/fairness_vs_fairlearn/stop41/calibration_trace.md]

The data and groups are fairness_vs_fairlearn's (``_data``, ``_merge_small``); one BLAS thread;
``RiskClassifier(risk="mean", l2_reg=1/n, constraint=..., constraint_tol=--tol)``. Writes a
Markdown file (atomically) and prints it.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fairness_vs_fairlearn as fvf  # noqa: E402
import riskopt as ro  # noqa: E402
import riskopt.fairness as fair  # noqa: E402
from riskopt.bench._io import atomic_write_text  # noqa: E402


def trace_fit(X, y, s, constraint, tol):
    """``(cpu seconds, estimator, rounds)``: one fit, each ``_sqp`` solve of it as ``(smoothing,
    steps, converged, largest violation of the bound, objective)``."""
    orig, rounds, b0 = fair._sqp, [], []

    def traced(obj, prob, w, lam, feas, rtol, max_iter):
        r = orig(obj, prob, w, lam, feas, rtol, max_iter)
        if not b0:
            b0.append(prob.b.copy())
        rs, rh = fair._rates(prob, obj.X, r.coef)
        rates = fair.rate_estimate(prob, rs, rh) if getattr(prob, "calibrated", None) \
            is not None else rh
        rounds.append((prob.tau, r.n_iter, bool(r.converged),
                       float(np.max(prob.E @ rates - b0[0])), float(obj.value(r.coef))))
        return r

    fair._sqp = traced
    try:
        t = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = ro.RiskClassifier(risk="mean", l2_reg=1.0 / X.shape[0], constraint=constraint,
                                    constraint_tol=tol).fit(X, y, sensitive_features=s)
        return time.process_time() - t, est, rounds
    finally:
        fair._sqp = orig


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", default="compas:race:min=100")
    ap.add_argument("--constraint", default="equalized_odds")
    ap.add_argument("--splits", default="0")
    ap.add_argument("--tol", type=float, default=0.02)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    name, attr, *opts = args.case.split(":")
    min_rows = int(dict(o.split("=") for o in opts).get("min", 0))
    lines = [f"# Calibration trace: {args.case}, {args.constraint}, tol {args.tol}", "",
             "Command: `python benchmarks/fairness_calibration_trace.py " + " ".join(
                 argv if argv is not None else sys.argv[1:]) + "`", "",
             "One row per SQP solve (row 1: the first, smoothed solve; then the calibration "
             "rounds). violation: the largest excess over the bound of the rates the "
             "calibration holds (hard rates; cells under 100 rows their smoothed rate), "
             "> 0 misses. x: the round was cut off (CALIBRATION_ROUND_STEPS) and dropped.", ""]
    with threadpool_limits(limits=1):
        for k in (int(v) for v in args.splits.split(",")):
            X, y, _, _, s0, st0 = fvf._data(name, attr, k)
            s, _, _ = fvf._merge_small(s0, st0, y, min_rows)
            t, est, rounds = trace_fit(X, y, s, args.constraint, args.tol)
            lines += [f"## split {k}: {t:.2f} CPU s, {est.n_iter_} SQP steps, {len(rounds)} "
                      f"solves; {est.solver_reason_}", "",
                      "| solve | smoothing | steps | violation | objective |",
                      "|---:|---:|---:|---:|---:|"]
            lines += [f"| {i} | {tau:g} | {n}{'' if ok else ' x'} | {v:+.4f} | {f:.5f} |"
                      for i, (tau, n, ok, v, f) in enumerate(rounds)]
            lines.append("")
    text = "\n".join(lines) + "\n"
    if args.out:
        atomic_write_text(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
