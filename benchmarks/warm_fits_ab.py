"""Warm default fits of two checkouts side by side (issue 29): the cases of
``benchmarks/first_minutes.py``, one persistent process per ``src`` folder, rounds alternating
between them, so that a load that drifts over minutes hits both alike (``first_minutes.py``
measures its "before" and "after" minutes apart: on a shared machine that moved a ratio by
15 % between the two).

    python benchmarks/warm_fits_ab.py --before /tmp/base/src [--after src] [--rounds 8]
                                      [--cases law_school,kin8nm] [--out DIR]

Each round: per case 4 fits of ours (``RiskRegressor()`` / ``RiskClassifier()``) and 2 of
scikit-learn's (``Ridge()`` / ``LogisticRegression()``), CPU time, one BLAS thread
(``threadpoolctl``); ``RISKOPT_DATA`` for the bundled sets. Reports per case and version the
median and minimum CPU ms, scikit-learn's median (in each process, and over both: the same
code), the CPU ratio (our median / scikit-learn's over both processes), the
Newton steps and certified gap, and after / before (medians and minima). Writes
``results.json`` and ``results.md`` to ``--out`` when given.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def _worker(cases):
    sys.path.insert(0, str(HERE.parent))
    from sklearn.linear_model import LogisticRegression, Ridge
    from threadpoolctl import threadpool_limits

    import riskopt
    from first_minutes import _cases
    from riskopt.estimators import RiskClassifier, RiskRegressor

    todo = [c for c in _cases() if not cases or c[0].split()[0] in cases]
    with threadpool_limits(limits=1):
        info = {}
        for label, X, y, cls in todo:
            est = (RiskClassifier if cls else RiskRegressor)().fit(X, y)
            info[label] = {"steps": int(est.n_iter_), "solver": est.solver_,
                           "gap": float(est.dual_gap_)}
        print(json.dumps({"file": riskopt.__file__, "info": info}), flush=True)
        for _ in sys.stdin:
            out = {}
            for label, X, y, cls in todo:
                ours, theirs = (RiskClassifier, LogisticRegression) if cls else (RiskRegressor,
                                                                                 Ridge)
                t, s = [], []
                for _ in range(4):
                    c = time.process_time()
                    ours().fit(X, y)
                    t.append(time.process_time() - c)
                for _ in range(2):
                    c = time.process_time()
                    theirs().fit(X, y)
                    s.append(time.process_time() - c)
                out[label] = [t, s]
            print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="src folder of the older checkout")
    ap.add_argument("--after", default=str(HERE.parents[1] / "src"))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--cases", default="", help="comma-separated case names (first word)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        return _worker([c for c in a.worker.split(",") if c])
    env0 = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    procs, heads = [], []
    for src in (a.before, a.after):
        p = subprocess.Popen([sys.executable, str(HERE), "--before", src, "--worker", a.cases],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=dict(env0, PYTHONPATH=str(Path(src).resolve())))
        heads.append(json.loads(p.stdout.readline()))
        procs.append(p)
    times = [{}, {}]
    load0 = os.getloadavg()[0]
    for _ in range(a.rounds):
        for k, p in enumerate(procs):
            p.stdin.write("go\n")
            p.stdin.flush()
            for label, (t, s) in json.loads(p.stdout.readline()).items():
                d = times[k].setdefault(label, [[], []])
                d[0] += t
                d[1] += s
    for p in procs:
        p.stdin.close()
        p.wait()
    rows = []
    for label in times[0]:
        row = {"case": label}
        sk = statistics.median(times[0][label][1] + times[1][label][1])  # (the same code)
        row["sk_ms"] = 1e3 * sk
        for k, name in enumerate(("before", "after")):
            t, s = times[k][label]
            row[name] = {"ms": 1e3 * statistics.median(t), "min_ms": 1e3 * min(t),
                         "sk_ms": 1e3 * statistics.median(s),
                         "ratio": statistics.median(t) / sk, **heads[k]["info"][label]}
        row["after_over_before"] = row["after"]["ms"] / row["before"]["ms"]
        row["after_over_before_min"] = row["after"]["min_ms"] / row["before"]["min_ms"]
        rows.append(row)
    res = {"before": heads[0]["file"], "after": heads[1]["file"], "rounds": a.rounds,
           "load_average": [round(load0, 1), round(os.getloadavg()[0], 1)],
           "command": "python " + " ".join([str(Path(sys.argv[0]))] + sys.argv[1:]), "rows": rows}
    lines = ["# Warm default fits, two checkouts in alternating rounds (CPU, one BLAS thread)", "",
             f"before: `{res['before']}`; after: `{res['after']}`; {a.rounds} rounds x 4 fits "
             f"(scikit-learn 2 per round); load average at the start / end: "
             f"{res['load_average'][0]} / {res['load_average'][1]}.", "",
             "Command: `" + res["command"] + "`", "",
             "| case | before ms (min) | after ms (min) | sklearn ms (before / after process) "
             "| ratio before | ratio after | after / before (min) | steps | certified gap after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b, f = r["before"], r["after"]
        lines.append(f"| {r['case']} | {b['ms']:.2f} ({b['min_ms']:.2f}) | {f['ms']:.2f} "
                     f"({f['min_ms']:.2f}) | {r['sk_ms']:.2f} ({b['sk_ms']:.2f} / {f['sk_ms']:.2f}) | "
                     f"{b['ratio']:.2f} | {f['ratio']:.2f} | {r['after_over_before']:.3f} "
                     f"({r['after_over_before_min']:.3f}) | {b['steps']} -> {f['steps']} | "
                     f"{f['gap']:.1e} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, body in (("results.json", json.dumps(res, indent=1)), ("results.md", text)):
            tmp = out / (name + ".tmp")
            tmp.write_text(body)
            tmp.replace(out / name)


if __name__ == "__main__":
    main()
