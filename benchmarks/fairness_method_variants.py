"""Issue 33: variants of riskopt's fairness-constrained fit against fairlearn's
``ExponentiatedGradient`` on the same splits -- the candidate fixes for the train -> test
fairness gap of the deterministic (hard-calibrated) model.

    python benchmarks/fairness_method_variants.py [--cases compas:race:min=100:splits=10,
        adult:sex] [--tol 0.02] [--out benchmarks/results/fairness_method_variants]

Variants of ``RiskClassifier(risk="mean", l2_reg=1/n, constraint=c)`` (between groups):

* ``deterministic``: the default (``constraint_tol=tol``, hard-calibrated);
* ``margin tol/2``, ``margin tol/4``: the bound tightened to ``tol/2``, ``tol/4`` (a margin for
  the sampling noise of the training rates);
* ``randomized tau``: ``randomized=True`` with ``riskopt.fairness.SMOOTHING = tau`` (the draws'
  probability ``sigmoid(z / tau)``; the bound holds for their expected rates), tau 1 (the
  default), 0.1, 0.03.

Splits, the small-group merge and the data as in ``fairness_vs_fairlearn.py`` (its ``_data``
and ``_merge_small``); randomised predictions (both libraries) drawn with ``random_state`` =
the split's index. Reported per case and constraint: mean test violation (fairlearn.metrics,
between groups), accuracy, the mean paired difference to fairlearn's with its standard error
over the splits, and the CPU-time ratio (one fit each, one BLAS thread). Writes
``results.json`` and ``results.md`` (atomically).
"""
import argparse
import importlib.util
import os
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

import riskopt as ro
import riskopt.fairness as fairness
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit

_spec = importlib.util.spec_from_file_location(
    "fairness_vs_fairlearn", os.path.join(os.path.dirname(__file__), "fairness_vs_fairlearn.py"))
vs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vs)

VARIANTS = [("deterministic", 1.0, {}), ("margin tol/2", 1.0, {"margin": 0.5}),
            ("margin tol/4", 1.0, {"margin": 0.25}), ("randomized tau=1", 1.0, {"rand": 1}),
            ("randomized tau=0.1", 0.1, {"rand": 1}), ("randomized tau=0.03", 0.03, {"rand": 1})]


def _violation(c, yt, pred, st):
    from fairlearn.metrics import demographic_parity_difference, equalized_odds_difference

    fn = demographic_parity_difference if c == "demographic_parity" else \
        equalized_odds_difference
    return float(fn(yt, pred, sensitive_features=st))


def run_case(case, tol, log=print):
    from fairlearn import reductions

    name, attr, *opts = case.split(":")
    opt = dict(o.split("=") for o in opts)
    out = {}
    for k in range(int(opt.get("splits", 1))):
        X, y, Xt, yt, s0, st0 = vs._data(name, attr, k)
        s, st, _ = vs._merge_small(s0, st0, y, int(opt.get("min", 0)))
        for c, cls in vs.CONSTRAINTS.items():
            t = time.process_time()
            eg = reductions.ExponentiatedGradient(
                LogisticRegression(max_iter=1000),
                getattr(reductions, cls)(difference_bound=tol)).fit(X, y, sensitive_features=s)
            t_fl = time.process_time() - t
            p = eg.predict(Xt, random_state=k)
            fl = (_violation(c, yt, p, st), float(np.mean(p == yt)))
            for label, tau, o in VARIANTS:
                kw = {"randomized": True, "random_state": k} if o.get("rand") else {}
                fairness.SMOOTHING = tau
                try:
                    t = time.process_time()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est = ro.RiskClassifier(
                            risk="mean", l2_reg=1.0 / X.shape[0], constraint=c,
                            constraint_tol=tol * o.get("margin", 1.0), **kw).fit(
                                X, y, sensitive_features=s)
                    t_ro = time.process_time() - t
                    p = est.predict(Xt)
                finally:
                    fairness.SMOOTHING = 1.0
                v, a = _violation(c, yt, p, st), float(np.mean(p == yt))
                out.setdefault(c, {}).setdefault(label, []).append(
                    {"violation": v, "accuracy": a, "d_violation": v - fl[0],
                     "d_accuracy": a - fl[1], "time_ratio": t_ro / t_fl})
        log(f"  {case} split {k} done")
    summary = {}
    for c, per in out.items():
        for label, rows in per.items():
            r = {key: np.array([x[key] for x in rows]) for key in rows[0]}
            K = len(rows)
            se = (lambda v: float(np.std(v, ddof=1) / np.sqrt(K))) if K > 1 else \
                (lambda v: float("nan"))
            summary.setdefault(c, {})[label] = {
                "violation": float(r["violation"].mean()),
                "accuracy": float(r["accuracy"].mean()),
                "d_violation": float(r["d_violation"].mean()),
                "d_violation_se": se(r["d_violation"]),
                "d_accuracy": float(r["d_accuracy"].mean()), "d_accuracy_se": se(r["d_accuracy"]),
                "time_ratio": float(np.median(r["time_ratio"])), "splits": K}
    return {"case": case, "summary": summary, "per_split": out}


def _markdown(results, tol):
    lines = [f"# riskopt fairness-constraint variants vs fairlearn ExponentiatedGradient "
             f"(tol {tol})",
             "", "Test set, fairlearn.metrics (between groups); means over the splits; "
             "differences paired with fairlearn's fit on the same split (± standard error over "
             "the splits); time: median CPU-time ratio riskopt / fairlearn (one fit each, one "
             "thread, the machine shared). Variants: benchmarks/fairness_method_variants.py.", ""]
    for res in results:
        lines += [f"## {res['case']}", "", "| constraint | variant | test violation | accuracy | "
                  "violation - fl's | accuracy - fl's | time ratio |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for c, per in res["summary"].items():
            for label, g in per.items():
                lines.append(f"| {c} | {label} | {g['violation']:.4f} | {g['accuracy']:.4f} | "
                             f"{g['d_violation']:+.4f} ± {g['d_violation_se']:.4f} | "
                             f"{g['d_accuracy']:+.4f} ± {g['d_accuracy_se']:.4f} | "
                             f"{g['time_ratio']:.3f} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="compas:race:min=100:splits=10,adult:sex")
    ap.add_argument("--tol", type=float, default=0.02)
    ap.add_argument("--out", default="benchmarks/results/fairness_method_variants")
    args = ap.parse_args(argv)
    with threadpool_limits(limits=1):
        rng = np.random.default_rng(0)  # JIT warm-up
        Xw = rng.normal(size=(300, 4))
        ro.RiskClassifier(risk="mean", constraint="equalized_odds").fit(
            Xw, (Xw[:, 0] > 0).astype(int), sensitive_features=rng.integers(0, 2, 300))
        results = [run_case(c, args.tol, log=lambda m: print(m, flush=True))
                   for c in args.cases.split(",")]
    os.makedirs(args.out, exist_ok=True)
    meta = {"commit": _git_commit(), "tol": args.tol, "command":
            "python benchmarks/fairness_method_variants.py " + " ".join(
                argv if argv is not None else __import__("sys").argv[1:])}
    atomic_write_json(os.path.join(args.out, "results.json"), {"meta": meta, "results": results})
    atomic_write_text(os.path.join(args.out, "results.md"), _markdown(results, args.tol))
    print(_markdown(results, args.tol))


if __name__ == "__main__":
    main()
