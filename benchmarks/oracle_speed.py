"""The exact spectral-risk oracle against ``np.sort`` of the same loss vector.

    python benchmarks/oracle_speed.py [--n 1000000] [--repeats 11] [--out benchmarks/results/oracle_speed]

For each risk, ``risk.weights(losses)`` (value + maximising weights: sort, pool adjacent
violators, scatter back) and ``Objective``'s oracle path (``riskopt._kernels.oracles.
risk_weights`` with the objective's cached spectrum) are timed against ``np.sort(losses)``,
medians over ``--repeats`` calls, all measured in the same run; BEFORE is the former path
(numba's stable merge-sort argsort, ``oracles._risk_weights``, and the spectrum recomputed on
every ``risk.weights`` call). Losses: squared Gaussian residuals (continuous) and the same
rounded to 2 decimals (many ties). Writes ``results.md`` and ``metadata.json``.
"""
import argparse
import os
import platform
import time

import numpy as np

import riskopt as ro
from riskopt._kernels import oracles as ko
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit


def median_time(f, repeats):
    f()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "oracle_speed"))
    args = ap.parse_args()
    t_start = time.time()
    rng = np.random.default_rng(0)
    n = args.n
    cont = rng.standard_normal(n) ** 2
    data = {"continuous": cont, "ties (2 decimals)": np.round(cont, 2)}
    risks = [ro.CVaR(0.1), ro.ESRM(1.0), ro.Extremile(2.0), ro.CVaR(0.5, shift_cost=0.5),
             ro.CVaR(0.5, shift_cost=0.5, divergence="kl")]
    lines = [f"# Exact oracle vs np.sort, n = {n:,}", "",
             f"Medians over {args.repeats} calls, one process. Ratio = oracle time / np.sort "
             "time of the same vector.", "",
             "| losses | risk | np.sort ms | BEFORE ms (ratio) | risk.weights ms (ratio) | "
             "objective path ms (ratio) | max abs diff of q |", "|---|---|---:|---:|---:|---:|---:|"]
    for dname, l in data.items():
        t_sort = median_time(lambda: np.sort(l), args.repeats)
        for risk in risks:
            nu, div = float(risk.shift_cost), risk.div_code
            sigma = np.ascontiguousarray(risk.spectrum(n))
            q_old, q_new, q_obj = np.empty(n), np.empty(n), np.empty(n)

            def before():
                s = risk.spectrum(n)
                return ko._risk_weights(l, s, nu, div, q_old)

            t_old = median_time(before, args.repeats)
            t_new = median_time(lambda: risk.weights(l), args.repeats)
            t_obj = median_time(lambda: ko.risk_weights(l, sigma, nu, div, q_obj), args.repeats)
            v_old = ko._risk_weights(l, sigma, nu, div, q_old)
            v_new = ko.risk_weights(l, sigma, nu, div, q_new)
            assert abs(v_old - v_new) <= 1e-12 * max(1.0, abs(v_old))
            diff = float(np.max(np.abs(q_old - q_new)))
            lines.append(f"| {dname} | {risk!r} | {t_sort * 1e3:.1f} | {t_old * 1e3:.1f} "
                         f"({t_old / t_sort:.1f}x) | {t_new * 1e3:.1f} ({t_new / t_sort:.1f}x) "
                         f"| {t_obj * 1e3:.1f} ({t_obj / t_sort:.1f}x) | {diff:.1e} |")
            print(lines[-1], flush=True)
    atomic_write_text(os.path.join(args.out, "results.md"), "\n".join(lines) + "\n")
    atomic_write_json(os.path.join(args.out, "metadata.json"), {
        "script": "benchmarks/oracle_speed.py", "n": n, "repeats": args.repeats,
        "git_commit": _git_commit(), "machine": platform.platform(), "cpus": os.cpu_count(),
        "numpy": np.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "wall_seconds": round(time.time() - t_start, 1)})
    print(f"wrote {args.out}/results.md")


if __name__ == "__main__":
    main()
