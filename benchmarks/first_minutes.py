"""The first minutes of a new user (issue 29, items 3-5): start-up, the first fit with a cold
numba cache, and small warm fits against scikit-learn -- for this checkout and, optionally,
an older one, in the same run.

    python benchmarks/first_minutes.py [--before OLD_SRC] [--repeats 7] [--starts 5]
                                       [--out benchmarks/results/first_minutes]

``--before`` is the ``src`` folder of another checkout (e.g. ``git archive 6a37f815 src | tar
-x -C /tmp/base``, then ``--before /tmp/base/src``); every measurement runs once per version in
child processes (``PYTHONPATH`` set to that ``src``), the versions alternating.

Measured, per version:

* **start-up** (``--starts`` fresh interpreters each, medians of wall time): ``python -c
  "import riskopt"`` minus a bare ``python -c pass``; ``python -m riskopt.cli --help``; a
  usage error (``riskopt fit data.csv --target y --risk cvr:0.1``: a typo in the risk).
* **first fit**: a fresh process with an empty ``NUMBA_CACHE_DIR`` fits the default
  ``RiskClassifier()`` on a 5,000 x 20 synthetic binary problem; wall and CPU time
  (``time.process_time``: user + system of the process) of the fit alone and of the imports,
  and the number of riskopt kernels compiled (numba compile events).
* **warm fits** (one BLAS thread, ``threadpoolctl``): the default ``RiskRegressor()`` against
  ``Ridge()`` on synthetic 1,000 x 8, 5,000 x 10 and 16,000 x 11 (``y = X w + t(3) noise``)
  and on concrete, kin8nm and law_school, and ``RiskClassifier()`` against
  ``LogisticRegression()`` on compas (``riskopt.datasets.load``; ``RISKOPT_DATA``). Each side
  is fitted ``--repeats`` times, ours and scikit-learn's alternating, after one warm-up fit;
  the ratio is that of the medians (wall and CPU time) within one process. Also recorded:
  the solver, its iterations, a ConvergenceWarning, the certified relative gap
  (``dual_gap_ / F``, Newton).

The machine this ran on is shared (see ``load_average`` in ``results.json``): wall times are
inflated; CPU times and the ratios measured inside one process are the numbers to read.
Writes ``results.json`` and ``results.md``.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
SRC = HERE.parents[1] / "src"

# ----------------------------------------------------------------------------- child modes
_FIRST_FIT = r"""
import time
t0, c0 = time.perf_counter(), time.process_time()
import numpy as np
from numba.core import event
n_compiled = [0]
stack = []
kernels = []
class _L(event.Listener):
    def on_start(self, ev):
        f = getattr(ev.data.get("dispatcher"), "py_func", None)
        mine = str(getattr(f, "__module__", "")).startswith("riskopt.")
        if mine:
            n_compiled[0] += 1
        stack.append((mine, getattr(f, "__qualname__", "?"), time.process_time()))
    def on_end(self, ev):
        mine, name, c = stack.pop()
        if mine and not stack:
            kernels.append([name, round(time.process_time() - c, 4)])
event.register("numba:compile", _L())
from riskopt.estimators import RiskClassifier
rng = np.random.default_rng(0)
X = rng.normal(size=(5000, 20))
y = (X @ rng.normal(size=20) + rng.normal(size=5000) > 0).astype(int)
t1, c1 = time.perf_counter(), time.process_time()
est = RiskClassifier().fit(X, y)
t2, c2 = time.perf_counter(), time.process_time()
import json
print(json.dumps({"import_wall": t1 - t0, "import_cpu": c1 - c0, "fit_wall": t2 - t1,
                  "fit_cpu": c2 - c1, "kernels_compiled": n_compiled[0],
                  "solver": est.solver_, "n_iter": int(est.n_iter_), "kernels": kernels}))
"""


def _cases():
    import numpy as np

    import riskopt as ro

    out = []
    for n, d in [(1000, 8), (5000, 10), (16000, 11)]:
        rng = np.random.default_rng(0)
        X = rng.normal(size=(n, d))
        y = X @ rng.normal(size=d) + rng.standard_t(3, size=n)
        out.append((f"synthetic {n:,} x {d}", X, y, False))
    for name in ("concrete", "kin8nm", "law_school", "compas"):
        data = ro.datasets.load(name)
        out.append((name, data.X_train, data.y_train, name == "compas"))
    return out


def _warm(repeats):
    import warnings

    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression, Ridge
    from threadpoolctl import threadpool_limits

    from riskopt.estimators import RiskClassifier, RiskRegressor

    rows = []
    with threadpool_limits(limits=1):
        for label, X, y, cls in _cases():
            ours, theirs = (RiskClassifier, LogisticRegression) if cls else (RiskRegressor, Ridge)
            ours().fit(X, y)
            theirs().fit(X, y)
            tw, tc, sw, sc, warned, est = [], [], [], [], False, None
            for _ in range(repeats):
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always", ConvergenceWarning)
                    a, b = time.perf_counter(), time.process_time()
                    est = ours().fit(X, y)
                    tc.append(time.process_time() - b)
                    tw.append(time.perf_counter() - a)
                warned = warned or any(issubclass(x.category, ConvergenceWarning) for x in w)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    a, b = time.perf_counter(), time.process_time()
                    theirs().fit(X, y)
                    sc.append(time.process_time() - b)
                    sw.append(time.perf_counter() - a)
            F = float(est.objective_trace_[-1])
            gap = float(getattr(est, "dual_gap_", float("nan")))
            rows.append({
                "case": label, "n": int(X.shape[0]), "d": int(X.shape[1]),
                "estimator": f"{ours.__name__}()", "sklearn": f"{theirs.__name__}()",
                "ours_wall": statistics.median(tw), "ours_cpu": statistics.median(tc),
                "sk_wall": statistics.median(sw), "sk_cpu": statistics.median(sc),
                "ratio_wall": statistics.median(tw) / statistics.median(sw),
                "ratio_cpu": statistics.median(tc) / max(statistics.median(sc), 1e-9),
                "solver": est.solver_, "n_iter": int(est.n_iter_),
                "convergence_warning": bool(warned),
                "rel_gap": gap / max(abs(F), 1e-300) if np.isfinite(gap) else None})
    return rows


# ----------------------------------------------------------------------------- parent
def _env(src, **extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _run(args, src, timeout=900, cpu=None, **extra):
    """Run ``python ARGS`` with ``src`` on the path: ``(wall seconds, completed process)``;
    the child's CPU time (user + system, ``RUSAGE_CHILDREN``) is appended to ``cpu``."""
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, *args], env=_env(src, **extra), capture_output=True,
                       text=True, timeout=timeout, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
    return wall, r


def _startup(src, starts, csv):
    """Medians over ``starts`` fresh interpreters: wall seconds and CPU seconds (``_cpu``)."""
    wall = {k: [] for k in ("bare_python", "import_riskopt", "help", "usage_error")}
    cpu = {k: [] for k in wall}
    cmds = {"bare_python": ["-c", "pass"], "import_riskopt": ["-c", "import riskopt"],
            "help": ["-m", "riskopt.cli", "--help"],
            "usage_error": ["-m", "riskopt.cli", "fit", str(csv), "--target", "y", "--risk",
                            "cvr:0.1", "--out", os.devnull]}
    for _ in range(starts):
        for k, cmd in cmds.items():
            t, r = _run(cmd, src, cpu=cpu[k])
            if k == "usage_error":
                assert r.returncode == 2 and "unknown risk" in r.stderr, r.stderr[-500:]
            wall[k].append(t)
    med = statistics.median
    out = {k: med(v) for k, v in wall.items()}
    out.update({f"{k}_cpu": med(v) for k, v in cpu.items()})
    out["import_beyond_bare"] = out["import_riskopt"] - out["bare_python"]
    out["import_beyond_bare_cpu"] = out["import_riskopt_cpu"] - out["bare_python_cpu"]
    return out


def _first_fit(src):
    with tempfile.TemporaryDirectory() as cache:
        _, r = _run(["-c", _FIRST_FIT], src, timeout=900, NUMBA_CACHE_DIR=cache)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def _warm_child(src, repeats):
    _, r = _run([str(HERE), "--child", "warm", "--repeats", str(repeats)], src, timeout=1200)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def _markdown(res):
    lines = ["# First minutes: start-up, first fit, small warm fits", "",
             f"Commit {res['commit']}; before: {res.get('before_label') or '-'}; machine: "
             f"{res['machine']}; load average at the start / end: {res['load_average'][0]} / "
             f"{res['load_average'][1]} (shared machine: wall times are inflated; read CPU "
             "times and the ratios measured inside one process).", "",
             "Command: `" + res["command"] + "`", ""]
    versions = list(res["versions"])
    lines += ["## Start-up (median over fresh interpreters; seconds, wall / CPU)", "",
              "| version | bare python | import riskopt | beyond bare (goal <= 0.3) | "
              "riskopt --help (goal <= 0.5) | --risk typo |", "|---|---|---|---|---|---|"]
    for v in versions:
        s = res["versions"][v]["startup"]
        cell = [f"{s[k]:.3f} / {s[k + '_cpu']:.3f}" for k in (
            "bare_python", "import_riskopt", "import_beyond_bare", "help", "usage_error")]
        lines.append(f"| {v} | " + " | ".join(cell) + " |")
    lines += ["", "## First fit, empty numba cache: RiskClassifier() on 5,000 x 20 "
              "(goal <= 3 s)", "",
              "| version | fit wall s | fit CPU s | imports wall s | imports CPU s | "
              "riskopt kernels compiled | solver, iterations |", "|---|---|---|---|---|---|---|"]
    for v in versions:
        f = res["versions"][v]["first_fit"]
        lines.append(f"| {v} | {f['fit_wall']:.2f} | {f['fit_cpu']:.2f} | "
                     f"{f['import_wall']:.2f} | {f['import_cpu']:.2f} | "
                     f"{f['kernels_compiled']} | {f['solver']}, {f['n_iter']} |")
    lines += ["", f"## Warm default fits against scikit-learn (one BLAS thread, medians of "
              f"{res['repeats']}; goal <= 3x, converged)", "",
              "| case | estimator | version | ours ms (CPU) | sklearn ms (CPU) | ratio CPU | "
              "ratio wall | solver, iterations | warning | certified rel. gap |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for i, row in enumerate(res["versions"][versions[0]]["warm"]):
        for v in versions:
            r = res["versions"][v]["warm"][i]
            gap = "-" if r["rel_gap"] is None else f"{r['rel_gap']:.1e}"
            lines.append(
                f"| {row['case']} | {r['estimator']} vs {r['sklearn']} | {v} | "
                f"{1e3 * r['ours_cpu']:.2f} | {1e3 * r['sk_cpu']:.2f} | {r['ratio_cpu']:.2f} | "
                f"{r['ratio_wall']:.2f} | {r['solver']}, {r['n_iter']} | "
                f"{'yes' if r['convergence_warning'] else 'no'} | {gap} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="src folder of an older checkout to measure too")
    ap.add_argument("--before-label", default=None, help="its name in the report")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--out", default=str(HERE.parents[1] / "benchmarks/results/first_minutes"))
    ap.add_argument("--child", choices=["warm"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "warm":
        print(json.dumps(_warm(args.repeats)))
        return
    sys.path.insert(0, str(SRC))
    from riskopt.bench._meta import _git_commit

    versions = {"after": SRC}
    if args.before:
        versions = {"before": Path(args.before).resolve(), "after": SRC}
    load0 = os.getloadavg()[0]
    res = {"commit": _git_commit(), "before_label": args.before_label or args.before,
           "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
                      f"Python {platform.python_version()}",
           "command": " ".join(["python", "benchmarks/first_minutes.py", *sys.argv[1:]]),
           "repeats": args.repeats, "versions": {v: {} for v in versions}}
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "d.csv"
        csv.write_text("a,b,y\n1,2,3\n2,3,5\n3,1,4\n")
        for v, src in versions.items():
            res["versions"][v]["startup"] = _startup(src, args.starts, csv)
            print(v, "start-up", res["versions"][v]["startup"], flush=True)
    for v, src in versions.items():
        res["versions"][v]["first_fit"] = _first_fit(src)
        print(v, "first fit", res["versions"][v]["first_fit"], flush=True)
    for v, src in versions.items():
        res["versions"][v]["warm"] = _warm_child(src, args.repeats)
        for r in res["versions"][v]["warm"]:
            print(v, r["case"], f"ratio cpu {r['ratio_cpu']:.2f} wall {r['ratio_wall']:.2f}",
                  r["solver"], r["n_iter"], flush=True)
    res["load_average"] = [round(load0, 1), round(os.getloadavg()[0], 1)]
    write_results(args.out, res, lambda: _markdown(res))


def write_results(out, res, markdown):
    """``results.json`` (``res``) and ``results.md`` (``markdown``, or a function of no
    arguments that returns it, called after the JSON is written: a formatting error keeps
    the data) into the folder ``out``, atomically."""
    from riskopt.bench._io import atomic_write_json, atomic_write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "results.json", res)
    atomic_write_text(out / "results.md", markdown() if callable(markdown) else markdown)
    print(f"wrote {out / 'results.md'}")


if __name__ == "__main__":
    main()
