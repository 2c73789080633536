"""SOREL Table 2 from the results folders of the ``sorel_table2_*`` specs (never reruns a solver).

For every spectral risk and solver (its selected step size): the test fairness metric (mean
over folds and seeds), its relative improvement over ERM in percent (``100 (|m_ERM| - |m|) /
|m_ERM|``, ERM = the "mean" objective, its metric the mean over the solvers), and the training
suboptimality (median over folds and seeds of the final ``(F - f*) / (F(0) - f*)``; the paper
reports ``F - f*``, printed in a second column).

Usage::

    python benchmarks/sorel_table2.py RESULTS [RESULTS ...] [--out table.md]
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def table2(results):
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
    df = pd.DataFrame(rows)
    # ERM first, then the risks and solvers in the order the spec lists them
    order = {o: k for k, o in enumerate(["mean"] + [o for o in t["objective"].unique()
                                                     if o != "mean"])}
    solvers = {s: k for k, s in enumerate(t["solver"].unique())}
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
    args = p.parse_args(argv)
    text = ""
    for r in args.results:
        df, erm, metric = table2(r)
        text += markdown(Path(r).name, df, erm, metric) + "\n"
    if args.out:
        tmp = Path(args.out).with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
