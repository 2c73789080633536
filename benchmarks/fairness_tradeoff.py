"""Accuracy against fairness on adult (sex) and compas (race): ERM, spectral risks, group DRO
and the constrained estimator as ``constraint_tol`` varies (issue 33's docs figure).

    python benchmarks/fairness_tradeoff.py [--cases adult:sex,compas:race]
        [--tols 0.005,0.01,0.02,0.05,0.1] [--out benchmarks/results/fairness_tradeoff]

Models (all ``RiskClassifier(l2_reg=1/n)`` on the loader's standardised features, one BLAS
thread): ``risk="mean"`` (ERM), ``"esrm:1"`` and ``"cvar:0.5"`` (spectral risks of the sample
losses), group DRO (``risk="cvar:0.5"`` and ``"maxloss"`` of the group-mean losses,
``groups=`` the sensitive attribute), and ``risk="mean"`` with ``constraint=
"demographic_parity"`` / ``"equalized_odds"`` at every ``--tols`` value. Test-set metrics by
``fairlearn.metrics`` when installed (else :mod:`riskopt.metrics`, the same conventions):
accuracy, worst-group error, DP and EO differences; fit times (shared, loaded machine: only
indicative). With fairlearn installed, its ``ExponentiatedGradient(LogisticRegression(),
DemographicParity / EqualizedOdds(difference_bound=0.02))`` is fitted on the same split too
(predictions drawn with ``random_state=0``; rows "fairlearn EG ..."). Writes
``results.json``, ``results.md`` and the figure ``tradeoff.svg`` (``--figure``: test
accuracy against the test DP / EO difference; a function of the table; SVG, a text file).
"""
import argparse
import os
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

import riskopt as ro
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit
from riskopt.metrics import worst_group_error

try:  # fairlearn's metrics: defined (as 0 rates) where a test group has no positives
    from fairlearn.metrics import demographic_parity_difference as _dpd
    from fairlearn.metrics import equalized_odds_difference as _eod

    def demographic_parity_difference(p, s):
        return _dpd(p, p, sensitive_features=s)

    def equalized_odds_difference(y, p, s):
        return _eod(y, p, sensitive_features=s)
except ImportError:  # riskopt's (same conventions; an error for an empty group)
    from riskopt.metrics import demographic_parity_difference, equalized_odds_difference


def _models(tols):
    yield "ERM (mean)", dict(risk="mean"), False
    yield "ESRM 1", dict(risk="esrm:1"), False
    yield "CVaR 0.5", dict(risk="cvar:0.5"), False
    yield "group DRO CVaR 0.5", dict(risk="cvar:0.5"), True
    yield "group DRO max", dict(risk="maxloss"), True
    for c in ("demographic_parity", "equalized_odds"):
        for t in tols:
            yield f"{c} {t:g}", dict(risk="mean", constraint=c, constraint_tol=t), False


def run_case(name, attr, tols):
    d = ro.datasets.load(name)
    X, y, Xt, yt = d.X_train, d.y_train.astype(int), d.X_test, d.y_test.astype(int)
    s, st = d.groups_train[attr], d.groups_test[attr]
    rows = []
    for label, kw, dro in _models(tols):
        est = ro.RiskClassifier(l2_reg=1.0 / X.shape[0], **kw)
        fit_kw = {"groups": s} if dro else ({"sensitive_features": s} if "constraint" in kw
                                             else {})
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X, y, **fit_kw)
        t = time.perf_counter() - t
        p = est.predict(Xt)
        row = {"model": label, "constraint": kw.get("constraint"),
               "constraint_tol": kw.get("constraint_tol"), "fit_s": t,
               "accuracy": float(np.mean(p == yt)),
               "worst_group_error": float(worst_group_error(yt, p, st)),
               "dp_difference": float(demographic_parity_difference(p, st)),
               "eo_difference": float(equalized_odds_difference(yt, p, st)),
               "warned": bool(caught)}
        rows.append(row)
        print(f"  {name}:{attr} {label:<28} {t:7.2f} s acc {row['accuracy']:.4f} wge "
              f"{row['worst_group_error']:.4f} dp {row['dp_difference']:.4f} eo "
              f"{row['eo_difference']:.4f}", flush=True)
    rows += _fairlearn_rows(X, y, Xt, yt, s, st)
    return {"case": f"{name}:{attr}", "rows": rows}


def _fairlearn_rows(X, y, Xt, yt, s, st, bound=0.02):
    """fairlearn's reductions at ``bound`` on the same split (none without fairlearn)."""
    try:
        from fairlearn import reductions
    except ImportError:
        return []
    from sklearn.linear_model import LogisticRegression

    rows = []
    for c, cls in (("demographic_parity", "DemographicParity"),
                   ("equalized_odds", "EqualizedOdds")):
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eg = reductions.ExponentiatedGradient(
                LogisticRegression(max_iter=1000),
                getattr(reductions, cls)(difference_bound=bound)).fit(
                    X, y, sensitive_features=s)
        t = time.perf_counter() - t
        p = eg.predict(Xt, random_state=0)
        rows.append({"model": f"fairlearn EG {c} {bound:g}", "constraint": c,
                     "constraint_tol": bound, "fairlearn": True, "fit_s": t,
                     "accuracy": float(np.mean(p == yt)),
                     "worst_group_error": float(worst_group_error(yt, p, st)),
                     "dp_difference": float(demographic_parity_difference(p, st)),
                     "eo_difference": float(equalized_odds_difference(yt, p, st)),
                     "warned": False})
    return rows


def _figure(results, path):
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: a small SVG
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(9, 3.4 * len(results)), squeeze=False)
    for i, res in enumerate(results):
        for j, (c, key, what) in enumerate([("demographic_parity", "dp_difference", "DP"),
                                            ("equalized_odds", "eo_difference", "EO")]):
            ax = axes[i, j]
            cur = [r for r in res["rows"] if r["constraint"] == c and not r.get("fairlearn")]
            ax.plot([r[key] for r in cur], [r["accuracy"] for r in cur], "o-", color="C0",
                    label=f"riskopt constraint={c}, tol " + ", ".join(
                        f"{r['constraint_tol']:g}" for r in cur))
            for k, r in enumerate(r for r in res["rows"] if r["constraint"] is None):
                ax.plot(r[key], r["accuracy"], "s", color=f"C{k + 1}", label=r["model"])
            for r in res["rows"]:
                if r.get("fairlearn") and r["constraint"] == c:
                    ax.plot(r[key], r["accuracy"], "*", ms=12, color="k",
                            label="fairlearn ExponentiatedGradient (bound 0.02)")
            ax.set_xlabel(f"test {what} difference (fairlearn.metrics, between groups)")
            ax.set_ylabel("test accuracy")
            ax.set_title(f"{res['case']}: accuracy vs {what} difference")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
    fig.tight_layout()
    root, ext = os.path.splitext(path)
    tmp = root + ".tmp" + ext
    fig.savefig(tmp, dpi=70)
    plt.close(fig)
    os.replace(tmp, path)


def _markdown(results):
    lines = ["# Accuracy / fairness trade-off (test set; RiskClassifier, l2_reg = 1/n)", ""]
    for res in results:
        lines += [f"## {res['case']}", "", "| model | fit s | accuracy | worst-group error | "
                  "DP diff | EO diff | warned |", "|---|---:|---:|---:|---:|---:|---|"]
        lines += [f"| {r['model']} | {r['fit_s']:.2f} | {r['accuracy']:.4f} | "
                  f"{r['worst_group_error']:.4f} | {r['dp_difference']:.4f} | "
                  f"{r['eo_difference']:.4f} | {r['warned']} |" for r in res["rows"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="adult:sex,compas:race")
    ap.add_argument("--tols", default="0.005,0.01,0.02,0.05,0.1")
    ap.add_argument("--out", default="benchmarks/results/fairness_tradeoff")
    ap.add_argument("--figure", default="tradeoff.svg",
                    help="the figure's file name in --out (its extension picks the format)")
    args = ap.parse_args(argv)
    tols = [float(t) for t in args.tols.split(",")]
    with threadpool_limits(limits=1):
        results = [run_case(*case.split(":"), tols) for case in args.cases.split(",")]
    os.makedirs(args.out, exist_ok=True)
    atomic_write_json(os.path.join(args.out, "results.json"),
                      {"meta": {"commit": _git_commit(), "tols": tols}, "results": results})
    atomic_write_text(os.path.join(args.out, "results.md"), _markdown(results))
    _figure(results, os.path.join(args.out, args.figure))


if __name__ == "__main__":
    main()
