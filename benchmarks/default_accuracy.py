"""How close the estimators' default fits come to the exact optimum (issue 13: "to 1e-6
relative of the exact optimum").

    python benchmarks/default_accuracy.py [--out benchmarks/results/default_accuracy]

For each case (law_school, concrete, compas, adult; CVaR 0.1 / 0.5, ESRM 1, extremile 2) the
default estimator (``solver="auto"``, ``tol = 1e-4``) and the L-BFGS path by name are fitted,
and the same objective is solved by the Newton solver at ``tol = 1e-8``, whose duality gap
gives a proven lower bound ``F* >= F_newton - gap``. Reported: ``(F_fit - bound) / |bound|``, an
upper bound on the fit's relative suboptimality (NaN where Newton stopped uncertified and fell
back to L-BFGS). Writes ``results.md`` and ``metadata.json``.
"""
import argparse
import os
import platform
import time
import warnings

import numpy as np

import riskopt as ro
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit

CASES = [("law_school", "r"), ("concrete", "r"), ("compas", "c"), ("adult", "c")]
RISKS = ("cvar:0.1", "cvar:0.5", "esrm:1", "extremile:2")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "default_accuracy"))
    args = ap.parse_args()
    t0 = time.time()
    lines = ["# Default fits against the certified optimum", "",
             "Upper bound on the relative suboptimality `(F_fit - bound) / |bound|`, `bound` the "
             "Newton solver's certified lower bound on the optimum (tol 1e-8). Issue 13 asks "
             "for 1e-6.", "",
             "| data | risk | default solver | default fit | solver='lbfgs' fit | "
             "Newton bound's own gap |", "|---|---|---|---:|---:|---:|"]
    for name, kind in CASES:
        d = ro.datasets.load(name)
        Est = ro.RiskRegressor if kind == "r" else ro.RiskClassifier
        for risk in RISKS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                default = Est(risk=risk).fit(d.X_train, d.y_train)
                lbfgs = Est(risk=risk, solver="lbfgs").fit(d.X_train, d.y_train)
                ref = Est(risk=risk, solver="newton", tol=1e-8).fit(d.X_train, d.y_train)
            F_ref = float(ref.objective_trace_[-1])
            bound = F_ref - float(ref.dual_gap_)   # NaN when Newton fell back to L-BFGS

            def rel(est):
                return (float(est.objective_trace_[-1]) - bound) / abs(bound)

            lines.append(f"| {name} | {risk} | {default.solver_} | {rel(default):.1e} | "
                         f"{rel(lbfgs):.1e} | {float(ref.dual_gap_) / abs(F_ref):.1e} |")
            print(lines[-1], flush=True)
    atomic_write_text(os.path.join(args.out, "results.md"), "\n".join(lines) + "\n")
    atomic_write_json(os.path.join(args.out, "metadata.json"), {
        "script": "benchmarks/default_accuracy.py", "git_commit": _git_commit(),
        "machine": platform.platform(), "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_seconds": round(time.time() - t0, 1)})
    print(f"wrote {args.out}/results.md")


if __name__ == "__main__":
    main()
