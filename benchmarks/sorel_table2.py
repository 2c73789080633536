"""SOREL Table 2 from the results folders of the ``sorel_table2_*`` specs (never reruns a solver).

For every spectral risk and solver (its selected step size): the test fairness metric (mean
over folds and seeds), its relative improvement over ERM in percent (``100 (|m_ERM| - |m|) /
|m_ERM|``, ERM = the "mean" objective, its metric the mean over the solvers), and the training
suboptimality (median over folds and seeds of the final ``(F - f*) / (F(0) - f*)``; the paper
reports ``F - f*``, printed in a second column). The ``lbfgs`` rows are the exact full-batch
fits (the reference solution whose value is the runs' ``f*``, one per fold: it has no seed),
refitted here, a few seconds per fold; ``--no-lbfgs`` leaves them out.

Usage::

    python benchmarks/sorel_table2.py RESULTS [RESULTS ...] [--out table.md] [--no-lbfgs]
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def lbfgs_rows(results, metric, erm, labels):
    """Rows of the exact full-batch fits: the spec's reference solution (L-BFGS with the
    frozen-order polish, whose value is the runs' ``f*``) on every fold, its test metric
    computed as the runner computes the recorded metrics."""
    from riskopt.bench import problems, record_metrics
    from riskopt.bench.spec import spec_from_dict

    spec = spec_from_dict(json.loads((Path(results) / "metadata.json").read_text())["spec"])
    method = spec.reference.get("method", "auto")
    rows = []
    for j, o in enumerate(spec.objectives):
        vals = []
        for d in spec.datasets:
            problem = spec.problem_description(d, j)
            obj = problems.build(problem).objective
            ref = obj.reference_solution(method)
            coefs = np.asarray(ref.coef, dtype=float).reshape(1, -1)
            out = record_metrics.compute_for_problem([metric], problem, obj, coefs)
            vals.append(float(out[record_metrics.column(metric)][0]))
        m = float(np.mean(vals))
        name = labels[j]
        rows.append({"objective": name, "solver": "lbfgs", "metric": metric, "test_metric": m,
                     "folds": len(vals), "seeds": 1,
                     "improvement_vs_erm_%": 100 * (abs(erm) - abs(m)) / abs(erm)
                     if name != "mean" else 0.0,
                     "train_subopt_rel": 0.0, "train_subopt_abs": 0.0})
    return rows


def table2(results, lbfgs=True):
    t = pd.read_parquet(Path(results) / "results.parquet")
    metric = [c for c in t.columns if c.startswith("m_test_") and ":" in c][0]
    sel = t[t["selected"].astype(bool)]
    last = sel.sort_values("update").groupby(["dataset", "objective", "solver", "seed"],
                                             sort=False).tail(1)
    last = last.assign(gap=last["value"] - last["f_star"])
    erm = last[last["objective"] == "mean"][metric].mean()
    rows = []
    for (obj, solver), g in last.groupby(["objective", "solver"], sort=False):
        m = float(g[metric].mean())
        rows.append({"objective": obj, "solver": solver, "metric": metric[2:],
                     "test_metric": m, "folds": g["dataset"].nunique(),
                     "seeds": g["seed"].nunique(),
                     "improvement_vs_erm_%": 100 * (abs(erm) - abs(m)) / abs(erm)
                     if obj != "mean" else 0.0,
                     "train_subopt_rel": float(g["suboptimality"].median()),
                     "train_subopt_abs": float(g["gap"].median())})
    if lbfgs:
        rows += lbfgs_rows(results, metric[2:], erm, list(t["objective"].unique()))
    df = pd.DataFrame(rows)
    # ERM first, then the risks and solvers in the order the spec lists them
    order = {o: k for k, o in enumerate(["mean"] + [o for o in t["objective"].unique()
                                                     if o != "mean"])}
    solvers = {s: k for k, s in enumerate(list(t["solver"].unique()) + ["lbfgs"])}
    df = df.sort_values(["objective", "solver"], key=lambda c: c.map(
        order if c.name == "objective" else solvers), kind="stable").reset_index(drop=True)
    return df, erm, metric[2:]


def markdown(name, df, erm, metric):
    lines = [f"### {name}: {metric} (ERM: {erm:.5f})", "",
             "| risk | solver | test metric | improvement vs ERM (%) | train subopt (rel) | "
             "train subopt (F - f*) | folds x seeds |", "|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        lines.append(f"| {r['objective']} | {r['solver']} | {r['test_metric']:.5f} | "
                     f"{r['improvement_vs_erm_%']:.2f} | {r['train_subopt_rel']:.2e} | "
                     f"{r['train_subopt_abs']:.2e} | {r['folds']} x {r['seeds']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+")
    p.add_argument("--out")
    p.add_argument("--no-lbfgs", action="store_true",
                   help="leave out the exact full-batch (L-BFGS) rows")
    args = p.parse_args(argv)
    text = ""
    for r in args.results:
        df, erm, metric = table2(r, lbfgs=not args.no_lbfgs)
        text += markdown(Path(r).name, df, erm, metric) + "\n"
    if args.out:
        tmp = Path(args.out).with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
