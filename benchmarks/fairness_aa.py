"""Noise or a systematic effect? The A/A spread of fairlearn's randomised test violation and
both models' training violations, for the fits cached by ``benchmarks/fairness_vs_fairlearn.py
--cache`` (issue 33, the race cases whose mean paired difference misses the goal).

    python benchmarks/fairness_aa.py --cache benchmarks/results/fairness_vs_fairlearn/cells/stop40
        [--cases adult:race:splits=16,compas:race:splits=30] [--constraints demographic_parity,
        equalized_odds] [--variants default,to_overall] [--draws 20]
        [--out benchmarks/results/fairness_vs_fairlearn/stop41/aa.json]
    python benchmarks/fairness_aa.py --show FILE.json [FILE.json ...]  # the tables

Per case, split and constraint: fairlearn's ``ExponentiatedGradient`` is refitted (its fit is
deterministic; its *prediction* is a draw: ``predict(X, random_state=k)``, checked to
reproduce the cached test predictions bit for bit) and its test predictions are drawn again
with ``--draws`` other random states. From these and riskopt's cached (deterministic) test
predictions:

* ``single``: riskopt's test violation minus fairlearn's with the benchmark's draw (the goal's
  paired difference, as in fairness_vs_fairlearn's verdict);
* ``aa``: fairlearn against itself, another draw minus the benchmark's draw (the A/A
  difference: the same classifier, another random state); its standard deviation over the
  splits and draws is the part of the paired spread that fairlearn's randomisation alone makes;
* ``avg``: riskopt's violation minus the mean of fairlearn's violation over all its draws
  (fairlearn's expected test violation at this fit: a paired difference with fairlearn's draw
  noise averaged out; reported next to ``single``, not in its place);
* both models' *training* violations, between groups and to the overall rate: riskopt's of
  its predictions; fairlearn's of its expected predictions (``_pmf_predict``: the rates its
  reduction bounds) and of the benchmark's draw; and the training rows of the smallest
  (group, label) cell (demographic parity: the smallest group).

Summary per case, constraint and riskopt variant: mean, standard deviation and 95 % Student-t
interval over the splits of ``single`` and ``avg`` (accuracy too), the A/A standard deviation,
the means of the training violations, and the splits that would put the 95 % interval of
``avg`` at +-0.005, the goal's margin: ``(1.96 sd / 0.005)^2``. Writes JSON (atomically) and
prints a Markdown table. One BLAS thread.
"""
import argparse
import json
import os
import sys

import numpy as np
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fairness_vs_fairlearn as fvf  # noqa: E402
from fairness_eo_causes import case_splits, write_split_records  # noqa: E402


def violations(y, rates, s, constraint):
    """``(between groups, to overall)`` of the constraint's difference of the predictions or
    expected predictions ``rates`` (fairlearn's definitions: max - min of the group rates, or
    the largest distance of a group's rate to the overall rate; equalized odds: the larger of
    the two label blocks; a cell with no row is left out)."""
    rates = np.asarray(rates, dtype=float)
    _, g = np.unique(np.asarray(s).astype(str), return_inverse=True)
    between, to_overall = 0.0, 0.0
    for keep in ([np.ones(y.shape[0], bool)] if constraint == "demographic_parity"
                 else [y == 0, y == 1]):
        cnt = np.bincount(g[keep], minlength=g.max() + 1)
        r = np.bincount(g[keep], weights=rates[keep], minlength=g.max() + 1)[cnt > 0] / cnt[cnt > 0]
        between = max(between, float(r.max() - r.min()))
        to_overall = max(to_overall, float(np.max(np.abs(r - rates[keep].mean()))))
    return between, to_overall


def smallest_cell(y, s, constraint):
    """Training rows of the smallest (group, label) cell (demographic parity: group)."""
    s = np.asarray(s).astype(str)
    labels = [None] if constraint == "demographic_parity" else [0, 1]
    return int(min(np.sum((s == g) & (True if v is None else y == v))
                   for g in np.unique(s) for v in labels))


def analyse(case, cache, constraints, variants, draws, tol=0.02, log=print):
    from fairlearn import reductions

    per = {}
    for k, (X, y, Xt, yt, s, st), store in case_splits(case, cache, tol):
        for c in constraints:
            fl = store.get(fvf.FAIRLEARN, c)
            labels = [lab for lab, _, _ in fvf._variants(c) if fvf._variant_tag(lab) in variants]
            ours = {lab: store.get(fvf.RISKOPT, lab) for lab in labels}
            if fl is None or any(v is None for v in ours.values()):
                log(f"  {case} k{k} {c}: not cached, skipped")
                continue
            eg = reductions.ExponentiatedGradient(
                LogisticRegression(max_iter=1000),
                getattr(reductions, fvf.CONSTRAINTS[c])(difference_bound=tol))
            eg.fit(X, y, sensitive_features=s)
            p_test, p_train = eg._pmf_predict(Xt)[:, 1], eg._pmf_predict(X)[:, 1]
            same = bool(np.array_equal(eg.predict(Xt, random_state=k), fl[1].astype(int)))
            v_k = violations(yt, fl[1], st, c)[0]
            other = [(p_test >= np.random.RandomState(10_000 + 100 * k + j).rand(p_test.size))
                     .astype(int) for j in range(draws)]
            v_draws = np.array([v_k] + [violations(yt, p, st, c)[0] for p in other])
            a_draws = np.array([np.mean(fl[1] == yt)] + [np.mean(p == yt) for p in other])
            fl_train = (violations(y, p_train, s, c),
                        tuple(fl[0]["train"]))  # expected rates; the benchmark's draw
            for lab, (row, pred) in ours.items():
                v_ro = violations(yt, pred, st, c)[0]
                per.setdefault((c, lab), []).append({
                    "split": k, "reproduced": same,
                    "single": v_ro - v_k, "aa": (v_draws[1:] - v_k).tolist(),
                    "avg": v_ro - float(v_draws.mean()),
                    "acc_single": float(np.mean(pred == yt) - a_draws[0]),
                    "acc_avg": float(np.mean(pred == yt) - a_draws.mean()),
                    "train_riskopt": list(row["train"]), "train_fairlearn_expected":
                        list(fl_train[0]), "train_fairlearn_draw": list(fl_train[1]),
                    "smallest_train_cell": smallest_cell(y, s, c)})
            log(f"  {case} k{k} {c}: fairlearn draws {v_draws.mean():.4f} +- "
                f"{v_draws.std(ddof=1):.4f} (reproduced {same}); riskopt "
                + ", ".join(f"{lab} {per[(c, lab)][-1]['single'] + v_k:.4f}" for lab in ours))
    return {"case": case, "summary": {f"{c}|{lab}": summarise(rows)
                                      for (c, lab), rows in per.items()},
            "splits": {f"{c}|{lab}": rows for (c, lab), rows in per.items()}}


def _t(d):
    """``[mean, sd, low, high]``: the 95 % Student-t interval of the mean of ``d``."""
    from scipy.stats import t as student

    d = np.asarray(d, dtype=float)
    if d.size < 2:
        return [float(d.mean()), float("nan"), float("nan"), float("nan")]
    sd = float(np.std(d, ddof=1))
    h = float(student.ppf(0.975, d.size - 1)) * sd / np.sqrt(d.size)
    return [float(d.mean()), sd, float(d.mean()) - h, float(d.mean()) + h]


def summarise(rows):
    out = {"splits": len(rows), "reproduced": all(r["reproduced"] for r in rows)}
    for key in ("single", "avg", "acc_single", "acc_avg"):
        out[key] = _t([r[key] for r in rows])
    aa = np.array([r["aa"] for r in rows])
    out["aa_sd"] = float(np.std(aa, ddof=1)) if aa.size > 1 else float("nan")
    out["aa_mean"] = float(aa.mean())
    for key in ("train_riskopt", "train_fairlearn_expected", "train_fairlearn_draw"):
        out[key] = np.mean([r[key] for r in rows], axis=0).tolist()
    out["smallest_train_cell"] = int(np.median([r["smallest_train_cell"] for r in rows]))
    k = (1.96 * out["avg"][1] / 0.005) ** 2  # (one split: no sd, None)
    out["k_needed_avg"] = int(np.ceil(k)) if np.isfinite(k) else None
    return out


def table(res):
    """The Markdown table of :func:`analyse`'s results (one row per case, constraint and
    riskopt variant)."""
    lines = ["| case | constraint, riskopt variant | splits | violation diff, benchmark's draw "
             "[95 %] | vs fairlearn's mean over draws [95 %] | A/A sd | accuracy diff vs mean "
             "[95 %] | train between ; to overall: riskopt / fairlearn expected / fl draw | "
             "splits for +-0.005 |", "|---|---|---:|---|---|---:|---|---|---:|"]
    for r in res:
        for spec, g in r["summary"].items():
            iv = lambda v: f"{v[0]:+.4f} [{v[2]:+.4f}, {v[3]:+.4f}]"  # noqa: E731
            tr = " / ".join(" ; ".join(f"{x:.3f}" for x in g[k]) for k in
                            ("train_riskopt", "train_fairlearn_expected", "train_fairlearn_draw"))
            lines.append(f"| {r['case']} | {spec} | {g['splits']} | {iv(g['single'])} | "
                         f"{iv(g['avg'])} | {g['aa_sd']:.4f} | {iv(g['acc_avg'])} | {tr} | "
                         f"{g['k_needed_avg']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default="", help="fairness_vs_fairlearn's --cache folder")
    ap.add_argument("--cases", default="adult:race:splits=16,compas:race:splits=30")
    ap.add_argument("--constraints", default="demographic_parity,equalized_odds")
    ap.add_argument("--variants", default="default,to_overall")
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--out", default="")
    ap.add_argument("--show", nargs="*", default=None,
                    help="only print the tables of these earlier --out files")
    args = ap.parse_args(argv)
    if args.show is not None:
        for path in args.show:
            with open(path) as fh:
                print(table(json.load(fh)["results"]) + "\n")
        return
    if not args.cache:
        ap.error("--cache is required (but with --show)")
    with threadpool_limits(limits=1):
        res = [analyse(c, args.cache, args.constraints.split(","), args.variants.split(","),
                       args.draws, log=lambda m: print(m, flush=True))
               for c in args.cases.split(",")]
    print(table(res))
    if args.out:
        def num(v):
            return [num(x) for x in v] if isinstance(v, (list, tuple)) else (
                float(f"{v:.5g}") if isinstance(v, float) else v)
        write_split_records(args.out, "python benchmarks/fairness_aa.py " + " ".join(
            argv if argv is not None else sys.argv[1:]), res,
            row=lambda rec: {k: num(v) for k, v in rec.items()})

if __name__ == "__main__":
    main()
