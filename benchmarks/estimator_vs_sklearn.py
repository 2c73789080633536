"""Default estimator fits against scikit-learn's same-loss fit (issue 13's cases).

    python benchmarks/estimator_vs_sklearn.py [--repeats 3] [--out benchmarks/results/estimator_vs_sklearn]

Cases: synthetic regression 200,000 x 50 (``y = X w + t(3) noise``), ``RiskRegressor`` with
``cvar:0.1``, ``esrm:1`` and ``extremile:2`` against ``Ridge(alpha = n * l2_reg)`` (the same
squared loss and penalty); adult (``riskopt.datasets.load("adult")``, the loader's
standardised features) ``RiskClassifier`` with its default ``esrm:1`` and ``cvar:0.5``
against ``LogisticRegression(C = 1 / (n * l2_reg))``. Default settings otherwise
(``l2_reg = 1e-4``, ``solver="auto"``, ``tol = 1e-4``). Reported: the median fit time over
``--repeats`` fits, the ratio to scikit-learn's median in the same run, the solver used, its
iterations, whether it warned (ConvergenceWarning) and the certified relative duality gap
(``dual_gap_ / F``: an upper bound on the relative suboptimality; the Newton solver only).
Each risk is also fitted with ``solver="lbfgs"`` and ``solver="newton"`` (the exact solver
with a certificate; the default at shift_cost = 0). Writes ``results.md`` and
``metadata.json``. Run it with ``PYTHONPATH=<an older checkout>/src`` for a before/after.

Threads: every fit (ours and scikit-learn's) is timed twice, with the BLAS limited to one
thread (``threadpoolctl``) and with the default threads (all cores), and each side's ratio
uses its faster setting. On this 2-core machine scikit-learn's ``LogisticRegression`` on adult
took 0.33-0.39 s with two OpenBLAS threads and 0.085-0.10 s with one (the earlier results of
this script timed only the default threads, which handicapped it).
"""
import argparse
import os
import platform
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge
from threadpoolctl import threadpool_limits

import riskopt as ro
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit


def timed(make, X, y, repeats):
    """``(one-thread median, default-threads median, fitted estimator, warned)``."""
    with threadpool_limits(limits=1):
        t1, _, w1 = _timed(make, X, y, repeats)
    t2, est, w2 = _timed(make, X, y, repeats)
    return t1, t2, est, w1 or w2


def _timed(make, X, y, repeats):
    ts, est, warned = [], None, False
    for _ in range(repeats):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always", ConvergenceWarning)
            t0 = time.perf_counter()
            est = make().fit(X, y)
            ts.append(time.perf_counter() - t0)
        warned = warned or any(issubclass(x.category, ConvergenceWarning) for x in w)
    return float(np.median(ts)), est, warned


#: each risk with the default solver ("auto": Newton at shift_cost = 0, both losses) and with
#: both full-batch solvers by name, in one run
VARIANTS = [("", {}), (" (solver='lbfgs')", {"solver": "lbfgs"}),
            (" (solver='newton')", {"solver": "newton"})]


def _rel_gap(est):
    """The certified relative duality gap ``dual_gap_ / |F|`` of the fit (the Newton
    solver's proof of accuracy); "-" where the solver gives none."""
    gap = getattr(est, "dual_gap_", float("nan"))
    if not np.isfinite(gap):
        return "-"
    return f"{gap / abs(float(est.objective_trace_[-1])):.1e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "estimator_vs_sklearn"))
    args = ap.parse_args()
    t_start = time.time()
    rng = np.random.default_rng(0)
    n, d = 200_000, 50
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + rng.standard_t(3, n)
    adult = ro.datasets.load("adult")
    mu = 1e-4
    cases = [("synthetic 200000x50", X, y, "Ridge", lambda: Ridge(alpha=n * mu),
              [(f"{r}{tag}", lambda r=r, k=k: ro.RiskRegressor(risk=r, **k))
               for r in ("cvar:0.1", "esrm:1", "extremile:2") for tag, k in VARIANTS]),
             ("adult", adult.X_train, adult.y_train, "LogisticRegression",
              lambda: LogisticRegression(C=1.0 / (adult.X_train.shape[0] * mu), max_iter=1000),
              [(f"{r}{tag}", lambda r=r, k=k: ro.RiskClassifier(risk=r, **k))
               for r in ("esrm:1", "cvar:0.5") for tag, k in VARIANTS])]
    lines = ["# Default estimator fits vs scikit-learn", "",
             f"Median of {args.repeats} fits, with one BLAS thread (1t) and the default threads "
             f"({os.cpu_count()}t); ratio = our faster time / scikit-learn's faster time, in the "
             "same run.", "",
             "| data | risk | ours s (1t / default) | sklearn s (1t / default) | ratio | solver | "
             "iterations | ConvergenceWarning | certified rel. gap |",
             "|---|---|---:|---:|---:|---|---:|---|---:|"]
    for name, Xc, yc, skname, sk, ours in cases:
        s1, s2, _, _ = timed(sk, Xc, yc, args.repeats)
        for risk, make in ours:
            t1, t2, est, warned = timed(make, Xc, yc, args.repeats)
            lines.append(f"| {name} | {risk} | {t1:.3f} / {t2:.3f} | {s1:.3f} / {s2:.3f} "
                         f"({skname}) | {min(t1, t2) / min(s1, s2):.1f}x | {est.solver_} | "
                         f"{est.n_iter_} | {'yes' if warned else 'no'} | {_rel_gap(est)} |")
            print(lines[-1], flush=True)
    atomic_write_text(os.path.join(args.out, "results.md"), "\n".join(lines) + "\n")
    atomic_write_json(os.path.join(args.out, "metadata.json"), {
        "script": "benchmarks/estimator_vs_sklearn.py", "riskopt_path": ro.__file__,
        "git_commit_of_riskopt": _git_commit(), "repeats": args.repeats,
        "machine": platform.platform(), "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "wall_seconds": round(time.time() - t_start, 1)})
    print(f"wrote {args.out}/results.md")


if __name__ == "__main__":
    main()
