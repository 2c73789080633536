"""Where the time of a warm default fit goes (issue 29, item 4): per-phase CPU time of
``RiskRegressor()`` / ``RiskClassifier()`` on the cases of ``benchmarks/first_minutes.py``.

    python benchmarks/fit_phases.py [--repeats 20] [--cases concrete,kin8nm] [--profile 25]
                                    [--out benchmarks/results/first_minutes/phases]

One process, one BLAS thread (``threadpoolctl``), ``RISKOPT_DATA`` for the bundled sets; the
``src`` of this checkout, or that on ``PYTHONPATH`` when it is set (e.g. an older one). Each
case is fitted once to warm up, then ``--repeats`` times with a timer on the phases below
(wrappers on the functions named; time is charged to the innermost phase running, so the
columns add up to the fit), then ``--repeats`` times bare (no wrappers) for the fit's CPU
time, and the same number of scikit-learn fits for the ratio:

* ``validate``: scikit-learn's parameter validation and ``_validate_X_y``;
* ``scale``: the feature and target scalings and the operator design (``riskopt._scaling``);
* ``build``: the objective (``estimators._build_objective``);
* ``newton``: ``objectives._newton.newton`` itself (its steps: Gram matrices, oracle calls,
  line searches), less the phases below;
* ``crossover``: the exact finish of a box spectrum (``_newton._crossover``: model solves, its
  line search), less its certificates;
* ``certify``: the weak-duality bounds (``dual_bound``, ``newton_bound``, ``certify``);
* ``end``: after the solver (``warn_if_degenerate``, ``_from_scaled``);
* ``other``: the rest of ``fit`` (the estimator's driver, the solver's set-up and result).

``--profile N``: also a cProfile of ``--repeats`` fits of each case, its top ``N`` functions by
own time (``tottime``) and the total number of Python-level calls per fit. Writes
``results.json`` and ``results.md`` to ``--out``.
"""
import argparse
import cProfile
import functools
import io
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
if not os.environ.get("PYTHONPATH"):  # (set it to measure another checkout's src)
    sys.path.insert(0, str(HERE.parents[1] / "src"))

PHASES = ("validate", "scale", "build", "newton", "crossover", "certify", "end", "other")


class _Clock:
    """Exclusive CPU time per phase: a stack of running phases, time charged to the top."""

    def __init__(self):
        self.acc = dict.fromkeys(PHASES, 0.0)
        self.stack = ["other"]
        self.last = time.process_time()

    def enter(self, phase):
        now = time.process_time()
        self.acc[self.stack[-1]] += now - self.last
        self.stack.append(phase)
        self.last = now

    def leave(self):
        now = time.process_time()
        self.acc[self.stack.pop()] += now - self.last
        self.last = now


def _wrap(clock, fn, phase):
    @functools.wraps(fn)
    def inner(*a, **k):
        clock.enter(phase)
        try:
            return fn(*a, **k)
        finally:
            clock.leave()
    return inner


def _patch(clock):
    """Wrap the phase functions where they are looked up; returns the undo list."""
    from riskopt import _scaling, estimators
    from riskopt.objectives import _crossover, _dual, _newton, _newton_cert

    targets = [
        (estimators._RiskEstimatorBase, "_validate_params", "validate"),
        (estimators._RiskEstimatorBase, "_validate_X_y", "validate"),
        (estimators, "_feature_scaling", "scale"), (estimators, "_target_scaling", "scale"),
        (estimators, "_operator_design", "scale"), (estimators, "_build_objective", "build"),
        (_newton, "newton", "newton"), (_newton, "_crossover", "crossover"),
        (_dual, "dual_bound", "certify"), (_newton, "dual_bound", "certify"),
        (_newton, "newton_bound", "certify"), (_newton, "certify", "certify"),
        (_newton_cert, "dual_bound", "certify"),
        (estimators, "warn_if_degenerate", "end"), (estimators, "_from_scaled", "end"),
    ]
    # the Newton solver imports ``newton`` at call time from the module: patched there
    undo = []
    for owner, name, phase in targets:
        if name not in vars(owner) and not hasattr(owner, name):
            continue
        old = vars(owner).get(name, getattr(owner, name))
        undo.append((owner, name, old))
        setattr(owner, name, _wrap(clock, old, phase))
    _ = _crossover  # (box_newton imports dual_bound from _dual at call time: patched above)
    return undo


def _unpatch(undo):
    for owner, name, old in reversed(undo):
        setattr(owner, name, old)


def _case_rows(cases, repeats, profile):
    import warnings

    import numpy as np
    from sklearn.linear_model import LogisticRegression, Ridge
    from threadpoolctl import threadpool_limits

    from first_minutes import _cases
    from riskopt.estimators import RiskClassifier, RiskRegressor

    rows = []
    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, X, y, cls in _cases():
            if cases and label.split()[0] not in cases and label not in cases:
                continue
            ours, theirs = (RiskClassifier, LogisticRegression) if cls else (RiskRegressor, Ridge)
            est = ours().fit(X, y)
            theirs().fit(X, y)
            clock = _Clock()
            undo = _patch(clock)
            try:
                for _ in range(repeats):
                    clock.enter("other")
                    ours().fit(X, y)
                    clock.leave()
            finally:
                _unpatch(undo)
            bare, sk = [], []
            for _ in range(repeats):
                c = time.process_time()
                est = ours().fit(X, y)
                bare.append(time.process_time() - c)
                c = time.process_time()
                theirs().fit(X, y)
                sk.append(time.process_time() - c)
            row = {"case": label, "n": int(X.shape[0]), "d": int(X.shape[1]),
                   "steps": int(est.n_iter_), "solver": est.solver_,
                   "fit_ms": 1e3 * statistics.median(bare), "sk_ms": 1e3 * statistics.median(sk),
                   "phases_ms": {k: 1e3 * v / repeats for k, v in clock.acc.items()}}
            row["ratio"] = row["fit_ms"] / row["sk_ms"]
            if profile:
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(repeats):
                    ours().fit(X, y)
                pr.disable()
                st = pstats.Stats(pr, stream=io.StringIO())
                row["calls_per_fit"] = st.total_calls / repeats
                top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:profile]
                row["top"] = [{"function": f"{Path(k[0]).name}:{k[1]}({k[2]})",
                               "calls_per_fit": v[1] / repeats,
                               "own_ms_per_fit": 1e3 * v[2] / repeats} for k, v in top]
            rows.append(row)
            print(f"{label}: {row['fit_ms']:.2f} ms vs {row['sk_ms']:.2f} ms "
                  f"({row['ratio']:.2f}x), {row['steps']} steps; " + ", ".join(
                      f"{k} {v:.2f}" for k, v in row["phases_ms"].items()), flush=True)
            _ = np
    return rows


def _markdown(res):
    lines = ["# Phases of a warm default fit (CPU ms per fit)", "",
             f"Commit {res['commit']}; load average {res['load_average']}; one BLAS thread; "
             f"{res['repeats']} fits per column (phases: means of the timed fits, whose "
             "wrappers add a little; fit and sklearn: medians of bare fits).", "",
             "Command: `" + res["command"] + "`", "",
             "| case | steps | fit | sklearn | ratio | " + " | ".join(PHASES) + " |",
             "|---|---|---|---|---|" + "---|" * len(PHASES)]
    for r in res["rows"]:
        lines.append(f"| {r['case']} | {r['steps']} | {r['fit_ms']:.2f} | {r['sk_ms']:.2f} | "
                     f"{r['ratio']:.2f} | " + " | ".join(
                         f"{r['phases_ms'][k]:.2f}" for k in PHASES) + " |")
    for r in res["rows"]:
        if "top" not in r:
            continue
        lines += ["", f"## cProfile, {r['case']}: {r['calls_per_fit']:.0f} Python-level calls "
                  "per fit; top functions by own time", "",
                  "| function | calls per fit | own ms per fit |", "|---|---|---|"]
        lines += [f"| `{t['function']}` | {t['calls_per_fit']:.1f} | {t['own_ms_per_fit']:.3f} |"
                  for t in r["top"]]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--cases", default="", help="comma-separated case names (first word)")
    ap.add_argument("--profile", type=int, default=0, help="top N functions of a cProfile")
    ap.add_argument("--out", default=None, help="folder for results.json / results.md")
    args = ap.parse_args()
    cases = {c.strip() for c in args.cases.split(",") if c.strip()}
    rows = _case_rows(cases, args.repeats, args.profile)
    from riskopt.bench._meta import _git_commit

    res = {"commit": _git_commit(), "load_average": round(os.getloadavg()[0], 1),
           "repeats": args.repeats, "rows": rows,
           "command": " ".join(["python", "benchmarks/fit_phases.py", *sys.argv[1:]])}
    print(_markdown(res))
    if args.out:
        from riskopt.bench._io import atomic_write_json, atomic_write_text

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / "results.json", res)
        atomic_write_text(out / "results.md", _markdown(res))


if __name__ == "__main__":
    main()
