"""Peak memory of a default estimator fit, as a multiple of the bytes of X (issue 16, part 2;
KL-DRO and group-DRO rows: issue 30, part 6).

    python benchmarks/memory.py [--n 1000000] [--d 100] [--max-iter 10] [--cases CASE ...]
                                [--out benchmarks/results/memory]

Each case runs in a fresh subprocess: build X (and y), record the resident set size, fit
``RiskRegressor(risk="cvar:0.1", max_iter=...)`` (the default solver: Newton at shift_cost = 0;
a few steps bound the time, the allocations are those of a full fit), and report
``(peak RSS - RSS before the fit) / X bytes``: the extra memory the fit needs beyond the data
the user already holds. Cases: dense float64 with standardised columns, dense float64 with
columns in other units (standardised through the operator design, no copy), dense float64 with
offsets of 1e6 (too large to centre implicitly: the exact standardised copy), dense float32, and
CSR (density 1 %, float64); and the other families on dense float64 standardised columns:
``kl`` (``risk="kl:0.1"``, the KL-DRO family, default solver L-BFGS) and ``group_dro``
(``risk="cvar:0.15"`` over 10 groups, ``fit(X, y, groups=g)``). Writes ``results.md`` and
``metadata.json``.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit

CHILD = r"""
import resource, sys, time, json, warnings
import numpy as np, scipy.sparse as sp
import riskopt as ro
n, d, case, max_iter = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
risk = {"kl": "kl:0.1", "group_dro": "cvar:0.15"}.get(case, "cvar:0.1")
rng = np.random.default_rng(0)
def rss(field="VmRSS"):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
def reset_peak():
    # the high-water mark would otherwise keep the peak of building X (sp.random's
    # temporaries dwarf a CSR fit): writing 5 to clear_refs resets VmHWM (Linux >= 4.0)
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False
if case == "csr":
    X = sp.random(n, d, density=0.01, format="csr", random_state=0, dtype=np.float64)
    xbytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    w = rng.standard_normal(d)
    y = X @ w + rng.standard_normal(n)
else:
    X = rng.standard_normal((n, d), dtype=np.float32 if case == "float32" else np.float64)
    if case == "float64_units":
        X *= np.logspace(-3, 3, d)
    if case == "float64_offset":
        X += 1e6  # |mean| / std = 1e6 > 1e3: the exact standardised copy, not the operator
    y = np.asarray(X @ rng.standard_normal(d).astype(X.dtype), dtype=np.float64)
    y += rng.standard_normal(n)
    xbytes = X.nbytes
g = rng.integers(0, 10, n) if case == "group_dro" else None
kw = {"groups": g} if g is not None else {}
# warm the numba caches on a small copy so compilation does not count
ro.RiskRegressor(risk=risk, max_iter=2).fit(X[:1000], y[:1000],
                                            **({"groups": g[:1000]} if g is not None else {}))
hwm_reset = reset_peak()
base = rss()
t0 = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ro.RiskRegressor(risk=risk, max_iter=max_iter).fit(X, y, **kw)
el = time.perf_counter() - t0
peak = rss("VmHWM") if hwm_reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"x_bytes": int(xbytes), "rss_before_fit": base, "peak_rss": peak,
                  "peak_since_fit_start": hwm_reset,
                  "extra_over_x": (peak - base) / xbytes, "fit_seconds": el}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--max-iter", type=int, default=10)
    ap.add_argument("--cases", nargs="+", default=None, metavar="CASE",
                    help="cases to run (default all): float64 float64_units float64_offset "
                         "float32 csr kl group_dro")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "memory"))
    args = ap.parse_args()
    t_start = time.time()
    lines = [f"# Peak memory of RiskRegressor(...).fit at {args.n:,} x {args.d}", "",
             "Extra = (peak RSS during the fit - RSS before it) / bytes of X; one fresh process "
             "per case; risk cvar:0.1 unless the row says otherwise, the default solver (Newton "
             "for the spectral rows, L-BFGS for KL and group DRO) capped at "
             f"{args.max_iter} steps. The peak is the resident "
             "high-water mark reset just before the fit (/proc/self/clear_refs), so building X "
             "does not count. The default fit passes X to the solver as an operator [(X - m)/s, 1] "
             "(no copy); what remains are n-vectors (predictions, losses, derivatives, weights, "
             "the sort), which dominate for the CSR case (1 stored value per row on average).",
             "",
             "| X | X MiB | extra / X | peak RSS MiB | fit s |", "|---|---:|---:|---:|---:|"]
    labels = {"float64": "dense float64, standardised columns",
              "float64_units": "dense float64, columns in units 1e-3 .. 1e3",
              "float64_offset": "dense float64, columns offset by 1e6 (standardised copy)",
              "float32": "dense float32", "csr": "CSR float64, density 1 %",
              "kl": "dense float64, risk kl:0.1 (KL-DRO)",
              "group_dro": "dense float64, risk cvar:0.15 over 10 groups (group DRO)"}
    for case in args.cases or list(labels):
        label = labels[case]
        res = subprocess.run([sys.executable, "-c", CHILD, str(args.n), str(args.d), case,
                              str(args.max_iter)], capture_output=True, text=True)
        if res.returncode != 0:
            lines.append(f"| {label} | - | failed: {res.stderr.strip().splitlines()[-1]} | - | - |")
        else:
            r = json.loads(res.stdout.strip().splitlines()[-1])
            lines.append(f"| {label} | {r['x_bytes'] / 2**20:.0f} | {r['extra_over_x']:.2f} | "
                         f"{r['peak_rss'] / 2**20:.0f} | {r['fit_seconds']:.1f} |")
        print(lines[-1], flush=True)
    atomic_write_text(os.path.join(args.out, "results.md"), "\n".join(lines) + "\n")
    atomic_write_json(os.path.join(args.out, "metadata.json"), {
        "script": "benchmarks/memory.py", "n": args.n, "d": args.d, "max_iter": args.max_iter,
        "cases": args.cases or list(labels),
        "git_commit": _git_commit(), "machine": platform.platform(), "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "wall_seconds": round(time.time() - t_start, 1)})
    print(f"wrote {args.out}/results.md")


if __name__ == "__main__":
    main()
