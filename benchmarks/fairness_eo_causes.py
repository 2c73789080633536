"""Which test cell sets the equalized-odds / demographic-parity difference of the fits cached by
``benchmarks/fairness_vs_fairlearn.py --cache`` (issue 33: why the goal's violation is not
resolvable on some cases), and how many splits resolving the goal would take.

    python benchmarks/fairness_eo_causes.py
        --cache benchmarks/results/fairness_vs_fairlearn/cells/stop40
        [--cases adult:race:splits=16,...] [--variants "equalized_odds,equalized_odds:to_overall"]
        [--out benchmarks/results/fairness_vs_fairlearn/stop40/causes.json]

Per case, split and model (fairlearn's reduction and riskopt's variants, from the cached test
predictions; the groups of :func:`fairness_vs_fairlearn._data` / ``_merge_small``): the test
difference, the two cells (group, label) whose rates set it and their test sizes (a cell with no
test row is left out; fairlearn's metric differs there: compas raw, whose smallest groups have
3 test rows). Per case and
riskopt variant: the mean and standard deviation over the splits of the paired difference of
the violation (riskopt's minus fairlearn's), the share of splits where a cell of fewer than
``--small`` test rows sets the difference of either model (or both), the binomial standard deviation
``sqrt(p (1 - p) / n)`` of the smallest test cell's rate (the test-sampling noise alone), and
``K_needed = (1.96 sd / 0.005)^2``: the splits at which the 95 % interval of the mean paired
difference is +-0.005 wide, the goal's margin (a mean within it of the goal is not resolvable
with fewer). Writes JSON (atomically) and prints a Markdown table.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fairness_vs_fairlearn as fvf  # noqa: E402
from riskopt.bench._io import atomic_write_text  # noqa: E402


def driving_cells(y, pred, s, constraint):
    """``(difference, (group_hi, label, n_hi), (group_lo, label, n_lo))``: fairlearn's
    between-groups difference and the two cells whose rates set it (the label block with the
    larger difference for equalized odds; label None for demographic parity)."""
    blocks = [None] if constraint == "demographic_parity" else [0, 1]
    best = (-1.0, None, None)
    groups = np.unique(s.astype(str))
    for lab in blocks:
        rows = np.ones(y.shape[0], bool) if lab is None else y == lab
        rates, sizes = [], []
        for g in groups:
            m = rows & (s.astype(str) == g)
            if m.sum():
                rates.append(float(pred[m].mean()))
                sizes.append((str(g), lab, int(m.sum())))
        hi, lo = int(np.argmax(rates)), int(np.argmin(rates))
        if rates[hi] - rates[lo] > best[0]:
            best = (rates[hi] - rates[lo], sizes[hi] + (rates[hi],), sizes[lo] + (rates[lo],))
    return best


def case_splits(case, cache, tol=0.02):
    """Per split ``k`` of ``case`` (``name:attr[:min=N][:splits=K]``, fairness_vs_fairlearn's):
    ``(k, (X, y, X_test, y_test, s, s_test), cache)`` with the groups merged as the case says
    and the split's ``--cache`` entry."""
    name, attr, *opts = case.split(":")
    opt = dict(o.split("=") for o in opts)
    min_rows, K = int(opt.get("min", 0)), int(opt.get("splits", 1))
    for k in range(K):
        X, y, Xt, yt, s0, st0 = fvf._data(name, attr, k)
        s, st, _ = fvf._merge_small(s0, st0, y, min_rows)
        yield k, (X, y, Xt, yt, s, st), fvf._Cache(cache, case, tol, k)


def analyse(case, cache, variants, small):
    out = {}
    for k, (X, y, Xt, yt, s, st), store in case_splits(case, cache):
        for spec in variants:
            c = spec.partition(":")[0].partition(" ")[0]
            fl, ro_ = store.get(fvf.FAIRLEARN, c), store.get(fvf.RISKOPT, spec)
            if fl is None or ro_ is None:
                continue
            dl = driving_cells(yt, fl[1].astype(int), st, c)
            dr = driving_cells(yt, ro_[1].astype(int), st, c)
            nmin = min(dl[1][2], dl[2][2], dr[1][2], dr[2][2])
            p = min(max(0.5 * (dl[1][3] + dr[1][3]), 0.05), 0.95)
            out.setdefault(spec, []).append({  # (rounded: the file stays small)
                "split": k, "diff": round(dr[0] - dl[0], 5), "acc_diff": round(float(
                    np.mean(ro_[1] == yt) - np.mean(fl[1] == yt)), 5),
                "fairlearn": [round(dl[0], 5), list(dl[1][:3]), list(dl[2][:3])],
                "riskopt": [round(dr[0], 5), list(dr[1][:3]), list(dr[2][:3])],
                "small": bool(nmin < small),
                "cell_sd": round(float(np.sqrt(p * (1 - p) / nmin)), 4)})
    summary = {}
    for spec, rows in out.items():
        d = np.array([r["diff"] for r in rows])
        sd = float(np.std(d, ddof=1)) if d.size > 1 else float("nan")
        summary[spec] = {"splits": int(d.size), "mean": float(d.mean()), "sd": sd,
                         "small_share": float(np.mean([r["small"] for r in rows])),
                         "cell_sd": float(np.mean([r["cell_sd"] for r in rows])),
                         "k_needed": int(np.ceil((1.96 * sd / 0.005) ** 2)) if d.size > 1 else None}
    return {"case": case, "summary": summary, "splits": out}


def write_split_records(path, cmd, res, row=lambda r: r):
    """Write ``{"command": cmd, "results": [...]}`` (atomically) with one line per split
    record (``row`` maps a record before it is written): the file stays small and diffable.
    ``res``: one ``{"case", "summary", "splits": {spec: [record, ...]}}`` per case."""
    cases = []
    for r in res:
        rows = ",\n".join(f"    [{json.dumps(spec)}, {json.dumps(row(rec))}]"
                           for spec, lst in r["splits"].items() for rec in lst)
        cases.append(f'{{"case": {json.dumps(r["case"])}, "summary": '
                     f'{json.dumps(r["summary"])},\n  "splits": [\n{rows}]}}')
    atomic_write_text(path, f'{{"command": {json.dumps(cmd)},\n"results": [\n'
                      + ",\n".join(cases) + "]}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--cases", default="adult:sex:splits=13,adult:race:splits=16,"
                    "compas:race:splits=30,compas:race:min=100:splits=30")
    ap.add_argument("--variants", default="equalized_odds,equalized_odds:to_overall,"
                    "demographic_parity")
    ap.add_argument("--small", type=int, default=50, help="a 'small' test cell: rows under")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    res = [analyse(c, args.cache, args.variants.split(","), args.small)
           for c in args.cases.split(",")]
    print("| case | riskopt variant | splits | paired violation diff mean | sd over splits | "
          f"splits set by a test cell < {args.small} rows | binomial sd of that cell | "
          "splits for +-0.005 |\n|---|---|---:|---:|---:|---:|---:|---:|")
    for r in res:
        for spec, g in r["summary"].items():
            print(f"| {r['case']} | {spec} | {g['splits']} | {g['mean']:+.4f} | {g['sd']:.4f} | "
                  f"{g['small_share']:.0%} | {g['cell_sd']:.3f} | {g['k_needed']} |")
    if args.out:
        write_split_records(args.out, "python benchmarks/fairness_eo_causes.py " + " ".join(
            argv if argv is not None else sys.argv[1:]), res)

if __name__ == "__main__":
    main()
