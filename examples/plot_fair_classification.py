"""Worst-group error of risk-averse classifiers against ERM.

A spectral risk re-weights the *samples* by the rank of their loss; a group-fairness criterion
looks at the error of the worst *group*. This script fits :class:`riskopt.RiskClassifier`
(logistic loss, L-BFGS) with

* the mean risk (ERM, scikit-learn's ``LogisticRegression`` with ``C = 1 / (n l2_reg)``),
* the ESRM with ``rho = 1`` and the same with a KL shift penalty (``shift_cost = 0.5``),
* CVaR at tail fraction 0.8,
* ERM with group-balanced sample weights (every group gets the same total weight), the
  standard group-aware baseline, for reference,

and prints the test error of every group, the worst one and its change against ERM.

Data (``--dataset``, default ``auto``):

* ``compas`` (ProPublica two-year recidivism; groups Caucasian / Non-Caucasian, as in the
  SONEX/ALEXR2 paper) or ``law_school`` (bar passage, target ``pass_bar``; groups White /
  Non-White, as in the SOREL paper) when their files are in the data folder
  (``$RISKOPT_DATA``; nothing is downloaded);
* otherwise the synthetic ``group_shift_binary`` set of :mod:`riskopt.datasets` (a 90 / 10
  training mixture of two groups with their own input means and coefficients, a balanced
  test mixture).

Run::

    python examples/plot_fair_classification.py               # a few seconds
    python examples/plot_fair_classification.py --dataset group_shift_binary --plot groups.png

Nothing here guarantees that a risk-averse objective lowers the worst-group error: the
printout shows what happens on the data at hand. Group-aware objectives are in
:mod:`riskopt.torch` (:class:`~riskopt.torch.GroupDROLoss`).
"""
import argparse
import time
import warnings

import numpy as np

import riskopt as ro
from riskopt.metrics import group_errors

_GROUPS = {"compas": "caucasian", "law_school": "race", "group_shift_binary": "group"}


def load(name):
    """``(Dataset, group attribute)``; real sets only from the data folder (no download)."""
    if name == "auto":
        for candidate in ("compas", "law_school"):
            if ro.datasets.info(candidate)["present"]:
                return load(candidate)
        return load("group_shift_binary")
    if name == "group_shift_binary":
        return ro.datasets.load(name, random_state=0), _GROUPS[name]
    if name == "law_school":
        return ro.datasets.load(name, target="pass_bar", download=False), _GROUPS[name]
    return ro.datasets.load(name, download=False), _GROUPS[name]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="auto", choices=["auto", *_GROUPS])
    parser.add_argument("--plot", metavar="PATH", help="save a bar chart of the group errors")
    args = parser.parse_args(argv)

    data, attr = load(args.dataset)
    g_train, g_test = data.groups_train[attr], data.groups_test[attr]
    n = data.n_train
    l2_reg = 1.0 / n
    names, counts = np.unique(g_train, return_counts=True)
    print(f"{data.name}: {n} training / {data.n_test} test rows, {data.n_features} features; "
          f"groups '{attr}' (training counts: "
          + ", ".join(f"{k}={c}" for k, c in zip(names, counts)) + ")")

    # group-balanced weights: each group's weights sum to n / (number of groups)
    balanced = (n / (len(names) * counts))[np.searchsorted(names, g_train)]
    candidates = [
        ("ERM (mean)", "mean", None),
        ("ESRM(1)", ro.ESRM(1.0), None),
        ("ESRM(1), KL 0.5", ro.ESRM(1.0, shift_cost=0.5, divergence="kl"), None),
        ("CVaR(0.8)", ro.CVaR(0.8), None),
        ("ERM, balanced", "mean", balanced),
    ]
    rows = []
    for label, risk, weights in candidates:
        est = ro.RiskClassifier(risk=risk, l2_reg=l2_reg)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(data.X_train, data.y_train, sample_weight=weights)
        seconds = time.perf_counter() - t0
        pred = est.predict(data.X_test)
        table = group_errors(data.y_test, pred, g_test)  # test error of every group
        errs = {str(g): e for g, e in table.errors.items()}
        rows.append((label, float(np.mean(pred != data.y_test)), errs, seconds,
                     [str(w.message) for w in caught]))

    groups = list(rows[0][2])
    worst_erm = max(rows[0][2].values())
    head = f"  {'objective':<17}{'error':>7}{'worst':>7}{'vs ERM':>8}"
    print("\ntest error by group")
    print(head + "".join(f"{g[:13]:>14}" for g in groups) + f"{'fit [s]':>9}")
    for label, err, errs, seconds, caught in rows:
        worst = max(errs.values())
        print(f"  {label:<17}{err:>7.3f}{worst:>7.3f}{worst - worst_erm:>+8.3f}"
              + "".join(f"{errs[g]:>14.3f}" for g in groups) + f"{seconds:>9.2f}")
        for msg in caught:
            print(f"    warning: {msg}")

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / len(rows)
        x = np.arange(len(groups))
        for k, (label, _, errs, _, _) in enumerate(rows):
            ax.bar(x + k * width, [errs[g] for g in groups], width, label=label)
        ax.set_xticks(x + 0.4 - width / 2, groups)
        ax.set_ylabel("test error")
        ax.set_title(f"{data.name}: test error by '{attr}' group")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"figure: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
