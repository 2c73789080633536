"""SGM / SPL / SPL+ milliseconds per pass, this checkout against another one, side by side.

    python benchmarks/spl_kernel_ab.py --base-src /path/to/other/checkout/src [--rounds 5]

Written for stop 43's merge of ``_epoch_sgm`` / ``_epoch_spl`` into one kernel ``_epoch`` with a
``prox`` flag (5a50c3dd): does the runtime branch cost anything? Each round runs one child
process per tree, alternately (same synthetic problem: n = 20000, d = 20, squared loss,
beta = 0.9, l2 = 1e-4, intercept; one BLAS thread); a child warms each solver up with one pass,
then reports the median of 7 one-pass runs. Prints each round and the median over rounds of the
per-round ratio this / base. Numba caches: one directory per tree under the system temp dir.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import os, time, statistics
import numpy as np
from riskopt.objectives.ru_cvar import RUCVaRObjective
from riskopt.solvers import SGM, SPL, SPLPlus
rng = np.random.default_rng(0)
X = rng.standard_normal((20000, 20))
y = X @ rng.standard_normal(20) + rng.standard_t(3, 20000)
obj = RUCVaRObjective("squared", X, y, 0.9, l2_reg=1e-4, fit_intercept=True)
for name, S in (("sgm", SGM), ("spl", SPL), ("splplus", SPLPlus)):
    s = S(lr=1e-3, random_state=0)
    r = s.run(obj, max_epochs=1)
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        r = s.run(obj, max_epochs=1, state=r.state)
        ts.append(time.perf_counter() - t0)
    print(name, statistics.median(ts) * 1e3)
"""
SOLVERS = ("sgm", "spl", "splplus")


def child(src, cache):
    env = dict(os.environ, PYTHONPATH=str(src), NUMBA_CACHE_DIR=str(cache), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, capture_output=True,
                         text=True).stdout
    return {k: float(v) for k, v in (line.split() for line in out.splitlines())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-src", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    here = Path(__file__).resolve().parents[1] / "src"
    tmp = Path(tempfile.gettempdir())
    ratios = {k: [] for k in SOLVERS}
    for r in range(a.rounds):
        this = child(here, tmp / "spl_ab_this")
        base = child(a.base_src, tmp / "spl_ab_base")
        print(f"round {r + 1}: " + "  ".join(
            f"{k} {this[k]:.2f} / {base[k]:.2f} ms" for k in SOLVERS), flush=True)
        for k in SOLVERS:
            ratios[k].append(this[k] / base[k])
    print("median this / base over rounds: " + "  ".join(
        f"{k} {statistics.median(v):.3f} (range {min(v):.3f}-{max(v):.3f})"
        for k, v in ratios.items()))


if __name__ == "__main__":
    main()
