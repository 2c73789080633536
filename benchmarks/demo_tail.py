"""Why a tail risk: the test-loss distribution of ERM (the mean) against CVaR(0.1), on the five
bundled regression sets (part of ``make demo``).

    python benchmarks/demo_tail.py [--out results/quick]

Each model is ``RiskRegressor`` with default settings (L-BFGS, l2 1e-4) fitted on the
training split with ``risk="mean"`` (ERM) or ``risk="cvar:0.1"`` (the mean of the worst 10 %
of the squared losses). Writes ``tail.png`` (the upper quantiles of the test squared losses,
log scale, per data set) and ``tail.md`` (mean, CVaR(0.1) and maximum of the test losses).
"""
import argparse
import os

import numpy as np

import riskopt as ro
from riskopt.bench._io import atomic_savefig, atomic_write_text

DATASETS = ["yacht", "energy", "concrete", "kin8nm", "power"]
RISKS = {"ERM (risk='mean')": "mean", "CVaR(0.1) (risk='cvar:0.1')": "cvar:0.1"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/quick")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = np.linspace(0.5, 1.0, 201)
    fig, axes = plt.subplots(1, len(DATASETS), figsize=(4 * len(DATASETS), 3.8))
    rows = ["| data | model | test mean loss | test CVaR(0.1) | test max loss |",
            "|---|---|---:|---:|---:|"]
    for ax, name in zip(axes, DATASETS):
        d = ro.datasets.load(name)
        for (label, risk), color in zip(RISKS.items(), ("0.45", "C3")):
            est = ro.RiskRegressor(risk=risk).fit(d.X_train, d.y_train)
            loss = 0.5 * (est.predict(d.X_test) - d.y_test) ** 2
            ax.plot(levels, np.quantile(loss, levels), color=color, lw=1.8, label=label)
            rows.append(f"| {name} | {label} | {loss.mean():.4f} | "
                        f"{ro.CVaR(0.1).value(loss):.4f} | {loss.max():.4f} |")
        ax.set_yscale("log")
        ax.set_title(f"{name} (n_test = {len(d.y_test)})", fontsize=10)
        ax.set_xlabel("quantile level of the test losses")
        ax.axvline(0.9, color="0.8", lw=0.8, ls="--")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("squared loss 0.5 (y - prediction)^2 (log scale)")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("Why a tail risk: upper quantiles of the test losses, ERM vs CVaR(0.1) "
                 "(linear models, default RiskRegressor; dashed: the 90 % quantile, where "
                 "CVaR(0.1)'s tail starts)", fontsize=10)
    fig.tight_layout()
    png = os.path.join(args.out, "tail.png")
    atomic_savefig(fig, png, dpi=110)
    text = ("# Why a tail risk: test losses of ERM vs CVaR(0.1)\n\nProduced by "
            "`python benchmarks/demo_tail.py`.\n\n" + "\n".join(rows) + "\n")
    atomic_write_text(os.path.join(args.out, "tail.md"), text)
    print(text)
    print(f"figure: {png}")


if __name__ == "__main__":
    main()
