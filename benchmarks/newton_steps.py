"""Newton steps, oracle calls and CPU of the exact solver's call on warm default fits and on
other risks, for settings of its step rules side by side in one process (issue 29, item 4).

    python benchmarks/newton_steps.py [--repeats 7] [--cases compas,concrete,...]
        [--variant 'HESSIAN_NU_FIRST=1'] [--variant 'BACKTRACK_MIN=0.1'] [--out DIR]

Each case (``name`` or ``name@risk``: the default estimator of ``benchmarks/first_minutes.py``
for the data set, ``RiskClassifier`` for compas and adult, or that estimator with ``risk=``;
``synNxD`` is the synthetic regression ``y = X w + t(3) noise`` of n x d) is fitted once to
capture the objective Newton is called on; then ``objectives._newton.newton`` runs on it with
the estimator's arguments for the current settings (``default``) and each ``--variant``
(module constants of ``riskopt.objectives._newton``, ``NAME=value[,NAME=value]``), the
settings alternating, ``--repeats`` times. Reported per setting: Newton steps, smoothed and
exact oracle calls (``risk_weights_sorted``: the line searches, the stage starts and ends),
the certified relative gap and the median CPU time of the call (one BLAS thread). The
machine may be shared: read the ratios between settings, measured in one process.
``RISKOPT_DATA`` for the bundled sets. Writes ``results.json`` and ``results.md`` to
``--out`` when given.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
if not os.environ.get("PYTHONPATH"):  # (set it to measure another checkout's src)
    sys.path.insert(0, str(HERE.parents[1] / "src"))

CASES = ("syn1000x8,syn5000x10,syn16000x11,concrete,kin8nm,law_school,compas,compas@cvar:0.1,"
         "compas@extremile:2,concrete@esrm:1,kin8nm@extremile:2,adult,adult@cvar:0.5")


def _data(name):
    import numpy as np

    import riskopt as ro

    if name.startswith("syn"):
        n, d = map(int, name[3:].split("x"))
        rng = np.random.default_rng(0)
        X = rng.normal(size=(n, d))
        return X, X @ rng.normal(size=d) + rng.standard_t(3, size=n), False
    data = ro.datasets.load(name)
    return data.X_train, data.y_train, name in ("compas", "adult")


def _capture(case):
    """``(objective, W0, kwargs)`` of the estimator's Newton call on ``case``."""
    import warnings

    from riskopt.estimators import RiskClassifier, RiskRegressor
    from riskopt.objectives import _newton

    name, _, risk = case.partition("@")
    X, y, cls = _data(name)
    est = (RiskClassifier if cls else RiskRegressor)(**({"risk": risk} if risk else {}))
    seen = {}
    orig = _newton.newton

    def spy(objective, W0, **kw):
        seen.update(obj=objective, W0=W0, kw=kw)
        return orig(objective, W0, **kw)

    _newton.newton = spy
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
    finally:
        _newton.newton = orig
    return seen["obj"], seen["W0"], seen["kw"]


def _parse(variant):
    out = {}
    for item in filter(None, variant.split(",")):
        k, v = item.split("=")
        out[k.strip()] = float(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=CASES)
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from threadpoolctl import threadpool_limits

    from riskopt._kernels import oracles as ko
    from riskopt.objectives import _newton

    settings = {"default": {}}
    settings.update({v: _parse(v) for v in args.variant})
    defaults = {k: getattr(_newton, k) for s in settings.values() for k in s}
    calls = [0]
    sorted_oracle = ko.risk_weights_sorted

    def counted(*a, **k):
        calls[0] += 1
        return sorted_oracle(*a, **k)

    rows = []
    with threadpool_limits(limits=1):
        for case in args.cases.split(","):
            obj, W0, kw = _capture(case)
            res = {s: {"cpu": []} for s in settings}
            for r in range(args.repeats + 1):  # (the first round warms up)
                for s, attrs in settings.items():
                    for k, v in {**defaults, **attrs}.items():
                        setattr(_newton, k, v)
                    calls[0] = 0
                    ko.risk_weights_sorted = counted
                    try:
                        c = time.process_time()
                        out = _newton.newton(obj, W0, **kw)
                        c = time.process_time() - c
                    finally:
                        ko.risk_weights_sorted = sorted_oracle
                    if r:
                        res[s]["cpu"].append(c)
                    res[s].update(steps=int(out["n_iter"]), oracle_calls=calls[0],
                                  rel_gap=float(out["rel_gap"]), message=out["message"])
            for k, v in defaults.items():
                setattr(_newton, k, v)
            row = {"case": case, "n": int(obj.n), "p": int(obj.p)}
            for s in settings:
                res[s]["cpu_ms"] = 1e3 * statistics.median(res[s].pop("cpu"))
                row[s] = res[s]
            rows.append(row)
            print(case, " | ".join(f"{s}: {res[s]['steps']} steps, {res[s]['oracle_calls']} "
                                   f"oracle calls, gap {res[s]['rel_gap']:.2g}, "
                                   f"{res[s]['cpu_ms']:.2f} ms" for s in settings), flush=True)
    if args.out:
        from riskopt.bench._io import atomic_write_json, atomic_write_text

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        meta = {"command": " ".join(["python", "benchmarks/newton_steps.py", *sys.argv[1:]]),
                "load_average": round(os.getloadavg()[0], 1), "repeats": args.repeats,
                "settings": settings, "rows": rows}
        atomic_write_json(out / "results.json", meta)
        lines = ["# Newton steps per setting (one process, one BLAS thread)", "",
                 f"Command: `{meta['command']}`; load average {meta['load_average']} (shared "
                 "machine: read the CPU ratios between settings).", "",
                 "| case | n x p | " + " | ".join(settings) + " |",
                 "|---|---|" + "---|" * len(settings)]
        for row in rows:
            cells = [f"{row[s]['steps']} / {row[s]['oracle_calls']} / {row[s]['rel_gap']:.1e}"
                     f" / {row[s]['cpu_ms']:.2f} ms" for s in settings]
            lines.append(f"| {row['case']} | {row['n']:,} x {row['p']} | " + " | ".join(cells)
                         + " |")
        lines += ["", "Cells: Newton steps / oracle calls (risk_weights_sorted) / certified "
                  "relative gap / median CPU of the Newton call."]
        atomic_write_text(out / "results.md", "\n".join(lines) + "\n")
        print(f"wrote {out / 'results.md'}")


if __name__ == "__main__":
    main()
