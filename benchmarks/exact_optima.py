"""The papers' objectives compared at their exact optima (no solver noise).

    python benchmarks/exact_optima.py [--only sorel_law,sorel_acs,scdro] [--datasets D,..]
                                      [--objectives PREFIX,..]
                                      [--out benchmarks/results/exact_optima]

Some claims of the papers are about *objectives*, not solvers: SOREL Table 2 ("spectral risks
improve the fairness metric over ERM": SMD on law, EO on acs) and SCDRO Tables 2-3 ("the
KL-constrained objective reaches a higher test accuracy than ERM and the other DRO
objectives"). Judged on the final iterates of stochastic runs, such a claim mixes the
objective with how far each solver got. Here every (data set, objective) is solved to its
optimum -- the certified Newton solver where it applies (a duality-gap bound of 1e-9
relative), else the objective's reference solver (L-BFGS with an exact polish, the ``f*``
of the benchmark runs) -- and the paper's metric is computed at that point.

Groups (one row per data set and objective; the data sets are the benchmark's own, built from
the same spec entries as the runs):

* ``sorel_law``: SOREL Table 2, law (``ugpa`` regression, race White / non-White, the 5 folds
  of ``sorel_table2_law``), ERM / CVaR 0.05 / ESRM 20 / extremile 10, test SMD (signed and
  absolute).
* ``sorel_acs``: the same on adult's Black / White rows in place of acs (the 5 folds of
  ``sorel_table2_adult``), ERM / CVaR 0.75 / ESRM 1.75 / extremile 2.1, test EO (signed: the
  paper's, averaged over the folds; and absolute) and test accuracy.
* ``scdro``: SCDRO Tables 2-3 (convex), digits_st / adult_st / a9a_st with the runs' l2 and
  intercept: ERM, CVaR 0.1, the KL-constrained objective at rho in {0.1, 0.5, 1} (the paper's
  grid), KL-regularised DRO (lambda in {0.1, 1, 10}) and the chi-square-regularised
  (max-loss with shift cost 1); train and test accuracy.

Writes ``results.csv`` (one row per problem: value, how it was solved, certified gap, the
metrics), ``results.md`` and ``metadata.json`` after every problem; a rerun into the same
folder keeps the problems already there (resumable; ``--datasets`` picks data sets). The
reference solves of the KL objectives take minutes each on adult_st / a9a_st.
"""
import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from riskopt.bench import problems, record_metrics
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit
from riskopt.bench.spec import load_spec, spec_from_dict

_ST = [{"name": "digits_st", "loss": "multinomial"}, {"name": "adult_st", "loss": "logistic"},
       {"name": "a9a_st", "loss": "logistic"}]
_SCDRO = {
    "name": "exact_optima_scdro", "datasets": _ST, "seeds": [0], "passes": 1, "lr": [0.1],
    "l2_reg": 1e-4, "fit_intercept": True,
    "objectives": (["mean", {"risk": "cvar:0.1"}]
                   + [{"family": "kl_dro", "radius": r, "lam0": 0.001} for r in (0.1, 0.5, 1.0)]
                   + [{"family": "kl_dro", "radius": 0, "lam0": lam} for lam in (0.1, 1.0, 10.0)]
                   + [{"risk": "maxloss", "shift_cost": 1.0}]),
    "solvers": [{"name": "sgd"}],
}
#: group -> (spec, metrics)
GROUPS = {
    "sorel_law": ("sorel_table2_law", ["test_smd:race"]),
    "sorel_acs": ("sorel_table2_adult", ["test_eo:race", "test_accuracy"]),
    "scdro": (_SCDRO, ["train_accuracy", "test_accuracy"]),
}


def solve(obj):
    """``(coef, value, how, rel_gap)``: certified Newton where it applies, else the reference."""
    from riskopt.objectives._newton import applicable
    from riskopt.solvers import Newton

    newton = Newton(tol=1e-10, max_iter=400)
    if not applicable(obj) and newton.incompatibility(obj) is None:  # spectral risks only
        res = newton.run(obj)
        if res.extra["certified"]:
            return res.coef, float(res.value), "newton", float(res.extra["rel_gap"])
    ref = obj.reference_solution("auto")
    return ref.coef, float(ref.value), "reference", float("nan")


def run_group(group, datasets=None, done=(), save=None, objectives=None):
    """The rows of one group (``datasets``: a subset of its data sets by name; ``objectives``:
    of its objectives, by label prefix); problems in ``done`` (``(group, dataset,
    objective)``) are skipped; ``save(row)`` after each."""
    spec, metrics = GROUPS[group]
    spec = spec_from_dict(spec, check_registry=False) if isinstance(spec, dict) else \
        load_spec(spec)
    labels = spec.objective_labels()
    rows = []
    for d in spec.datasets:
        if datasets and d.split("/")[0] not in datasets:
            continue
        for j, label in enumerate(labels):
            if (group, d, label) in done or (
                    objectives and not any(label.startswith(o) for o in objectives)):
                continue
            problem = spec.problem_description(d, j)
            obj = problems.build(problem).objective
            t0 = time.perf_counter()
            coef, value, how, gap = solve(obj)
            sec = time.perf_counter() - t0
            W = np.asarray(obj.as_matrix(coef) if hasattr(obj, "as_matrix") else coef)
            m = record_metrics.compute_for_problem(metrics, problem, obj, W[None])
            n_test = len(problems.load_test_split(problem["dataset"], problem["protocol"])[1])
            row = {"group": group, "spec": spec.name, "dataset": d, "objective": label,
                   "n_train": int(obj.n), "n_test": n_test, "value": value, "solved_by": how,
                   "rel_gap": gap, "seconds": sec}
            for name in metrics:
                v = float(np.asarray(m[record_metrics.column(name)])[0])
                row[name] = v
                if ":" in name:
                    row[f"abs_{name}"] = abs(v)
            rows.append(row)
            if save is not None:
                save(row)
            print(f"{group} {d} {label}: {how} {sec:.2f} s "
                  + ", ".join(f"{k} {row[k]:.4g}" for k in metrics), flush=True)
    return rows


def markdown(df):
    lines = ["# The papers' objectives at their exact optima", "",
             "Built by `benchmarks/exact_optima.py`; one row per data set and objective (the "
             "certified Newton solver where it applies, else the reference L-BFGS).", ""]
    for group, g in df.groupby("group", sort=False):
        cols = [c for c in g.columns if c.startswith(("test_", "train_", "abs_"))
                and g[c].notna().any()]
        lines += [f"## {group}", "", "| dataset | objective | solved by | "
                  + " | ".join(cols) + " |", "|---|---|---|" + "---:|" * len(cols)]
        for _, r in g.iterrows():
            lines.append(f"| {r['dataset']} | {r['objective']} | {r['solved_by']} | "
                         + " | ".join(f"{r[c]:.4f}" for c in cols) + " |")
        lines.append("")
    return "\n".join(lines)


def write(out, df, groups, t0, argv=None, started=None):
    """The tables, and ``metadata.json`` with one entry per invocation (``runs``: the command
    line, commit, seconds) after those of the earlier invocations into the same folder."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.csv", df.to_csv(index=False))
    atomic_write_text(out / "results.md", markdown(df) + "\n")
    path = out / "metadata.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    runs = old.get("runs") or ([{k: old[k] for k in ("groups", "git_commit", "seconds")
                                 if k in old}] if old else [])
    if not runs or runs[-1].get("started") != started:
        runs.append({"started": started})
    runs[-1].update({"argv": argv, "groups": groups.split(","), "git_commit": _git_commit(),
                     "seconds": time.perf_counter() - t0})
    atomic_write_json(path, {
        "script": "benchmarks/exact_optima.py", "groups": sorted(set(df["group"])),
        "python": platform.python_version(), "runs": runs})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(GROUPS),
                    help=f"comma-separated groups of {list(GROUPS)}")
    ap.add_argument("--datasets", default="",
                    help="comma-separated data set names to keep (default: all)")
    ap.add_argument("--objectives", default="",
                    help="comma-separated label prefixes of the objectives to solve (default: "
                         "all), e.g. 'mean,kl_dro:lam0' for ERM and the KL-constrained ones")
    ap.add_argument("--out", default="benchmarks/results/exact_optima")
    argv = list(sys.argv[1:] if argv is None else argv)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    a = ap.parse_args(argv)
    out = Path(a.out)
    t0 = time.perf_counter()
    # resumable: the problems already in OUT/results.csv are kept and not solved again
    old = pd.read_csv(out / "results.csv") if (out / "results.csv").exists() else None
    rows = [] if old is None else old.to_dict("records")
    done = {(r["group"], r["dataset"], r["objective"]) for r in rows}

    def save(row):
        rows.append(row)
        write(out, pd.DataFrame(rows), a.only, t0, argv, started)   # after every problem

    for group in a.only.split(","):
        run_group(group.strip(), [d for d in a.datasets.split(",") if d], done, save,
                  [o for o in a.objectives.split(",") if o])
    print(f"wrote {out}/results.csv ({len(rows)} rows, {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
