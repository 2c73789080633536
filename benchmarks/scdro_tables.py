"""SCDRO paper, Tables 2-4 (convex rows) from the results of the ``scdro_*`` specs (no rerun).

Each spec's folder is ``RESULTS/<spec>`` or, when absent, ``RESULTS/<spec>_short``.

* Tables 2-3: final test accuracy and worst-class (minority) test accuracy, mean +- std over
  seeds, of every objective with its method: KL-constrained DRO (``scdro_convex``: each
  solver), KL-regularised DRO by RECOVER (``scdro_compare_klreg``), ERM by SGD with momentum,
  CVaR and chi-square-regularised DRO by the plug-in estimator (``scdro_compare_spectral``);
* Table 4: test accuracy for rho in {0.1, 0.5, 1} (``scdro_rho``).

Selected step sizes: the smallest final training objective over each solver's grid (the
specs' ``selection = "final"``), the metrics at the last pass.

Usage::

    python benchmarks/scdro_tables.py [--results benchmarks/results] [--out FILE.md]
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROWS = {"scdro_convex": "KL-constrained", "scdro_compare_klreg": "KL-regularised",
        "scdro_compare_spectral": None}
SPECTRAL_NAMES = {"mean": "ERM", "cvar:0.1": "CVaR-constrained (0.1)",
                  "maxloss,chi2=1": "chi2-regularised (nu = 1)"}


def _folder(root, spec):
    """``root/spec``, else its short variant ``root/spec_short``."""
    full = Path(root) / spec
    return full if (full / "results.parquet").exists() else Path(root) / f"{spec}_short"


def _final(folder):
    t = pd.read_parquet(Path(folder) / "results.parquet")
    t = t[t["selected"].astype(bool)]
    return t.sort_values("update").groupby(["dataset", "objective", "solver", "seed"],
                                           sort=False).tail(1)


def _fmt(v):
    return f"{100 * np.mean(v):.2f} ± {100 * np.std(v):.2f}"


def _label(spec, objective, risk, shift):
    if ROWS.get(spec):
        return f"{ROWS[spec]} ({objective})"
    key = risk if not shift else f"{risk},chi2={shift:g}"
    return SPECTRAL_NAMES.get(key, key)


def tables_2_3(root):
    rows = []
    for spec in ROWS:
        folder = _folder(root, spec)
        if not (folder / "results.parquet").exists():
            continue
        last = _final(folder)
        for (ds, obj, solver), g in last.groupby(["dataset", "objective", "solver"],
                                                 sort=False):
            rows.append({"dataset": ds, "objective": _label(spec, obj, g["risk"].iloc[0],
                                                            float(g["shift_cost"].iloc[0])),
                         "method": solver, "config": g["config"].iloc[0],
                         "test accuracy (%)": _fmt(g["m_test_accuracy"]),
                         "worst-class test accuracy (%)": _fmt(g["m_test_worst_class_accuracy"]),
                         "train accuracy (%)": _fmt(g["m_train_accuracy"]),
                         "seeds": g["seed"].nunique()})
    # one block per dataset, objectives and methods in a fixed (alphabetical) order
    return pd.DataFrame(rows).sort_values(["dataset", "objective", "method"],
                                          ignore_index=True) if rows else pd.DataFrame()


def table_4(root):
    folder = _folder(root, "scdro_rho")
    if not (folder / "results.parquet").exists():
        return pd.DataFrame()
    last = _final(folder)
    out = last.groupby(["objective", "solver"], sort=False).agg(
        test=("m_test_accuracy", _fmt), worst=("m_test_worst_class_accuracy", _fmt)).reset_index()
    out = out.sort_values(["objective", "solver"], ignore_index=True)
    return out.rename(columns={"test": "test accuracy (%)",
                               "worst": "worst-class test accuracy (%)"})


def markdown(df):
    if df.empty:
        return "(no results)\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for _, r in df.iterrows()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(Path(__file__).parent / "results"))
    p.add_argument("--out")
    args = p.parse_args(argv)
    text = ("## Tables 2-3 (convex): test accuracy by objective and method\n\n"
            + markdown(tables_2_3(args.results))
            + "\n## Table 4: sensitivity to rho (digits_st)\n\n" + markdown(table_4(args.results)))
    if args.out:
        tmp = Path(args.out).with_name(Path(args.out).name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, args.out)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
