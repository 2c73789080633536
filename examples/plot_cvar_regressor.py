"""Fit a CVaR regressor and compare its tail losses with ridge regression.

A linear model fitted by :class:`riskopt.RiskRegressor` with ``risk=CVaR(a)`` minimises the
average of the worst ``a`` fraction of the squared losses (plus the same l2 penalty as ridge),
instead of the average of all of them. This script fits ridge regression (the mean risk) and
CVaR regressors at ``a = 0.5`` and ``a = 0.1`` on the bundled ``kin8nm`` data (the papers'
preparation: standardised, 6,553 training and 1,639 test rows) and compares, on the test set,
the mean loss against the tail of the loss distribution (CVaR at 10% and 1%, the maximum).

It also checks the documented equivalence ``RiskRegressor(risk="mean", l2_reg=mu)`` ==
``Ridge(alpha=n * mu)`` on the same data.

Run::

    python examples/plot_cvar_regressor.py                  # prints the table (a few seconds)
    python examples/plot_cvar_regressor.py --plot tail.png  # also draws the sorted test losses

Offline: the data set ships with the package. ``--plot`` needs matplotlib (the ``bench``
extra).
"""
import argparse
import time

import numpy as np
from sklearn.linear_model import Ridge

import riskopt as ro


def loss_summary(model, X, y):
    """Per-sample losses ``0.5 (x.w + b - y)^2`` and their mean / tail statistics."""
    losses = 0.5 * (model.predict(X) - y) ** 2
    return losses, {
        "mean": float(losses.mean()),
        "CVaR 10%": float(ro.CVaR(0.1).value(losses)),
        "CVaR 1%": float(ro.CVaR(0.01).value(losses)),
        "max": float(losses.max()),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="kin8nm",
                        help="a bundled regression set: yacht, energy, concrete, kin8nm, power")
    parser.add_argument("--plot", metavar="PATH", help="save a figure of the sorted test losses")
    args = parser.parse_args(argv)

    data = ro.datasets.load(args.dataset)
    n = data.n_train
    l2_reg = 1.0 / n          # the papers' regularisation; Ridge's alpha is n * l2_reg
    print(f"{args.dataset}: {n} training rows, {data.n_test} test rows, "
          f"{data.n_features} features; l2_reg = 1/n")

    models = {"ridge (mean)": Ridge(alpha=n * l2_reg)}
    for a in (0.5, 0.1):
        models[f"CVaR {a:g}"] = ro.RiskRegressor(risk=ro.CVaR(a), l2_reg=l2_reg)
    fit_time = {}
    for name, model in models.items():
        t0 = time.perf_counter()
        model.fit(data.X_train, data.y_train)
        fit_time[name] = time.perf_counter() - t0

    # The mean-risk RiskRegressor is ridge regression (module docstring of riskopt.estimators).
    # (tol=1e-8: a tighter solve than the default 1e-4, to compare the coefficients)
    mean_est = ro.RiskRegressor(risk="mean", l2_reg=l2_reg, tol=1e-8).fit(data.X_train,
                                                                        data.y_train)
    gap = np.max(np.abs(mean_est.coef_ - models["ridge (mean)"].coef_))
    print(f"RiskRegressor(risk='mean') vs Ridge: max |coef difference| = {gap:.1e}\n")

    cols = ["mean", "CVaR 10%", "CVaR 1%", "max"]
    for split, X, y in (("train", data.X_train, data.y_train), ("test", data.X_test, data.y_test)):
        print(f"{split} losses 0.5 (prediction - y)^2")
        print(f"  {'model':<14}" + "".join(f"{c:>10}" for c in cols) + f"{'fit [s]':>10}")
        for name, model in models.items():
            _, stats = loss_summary(model, X, y)
            print(f"  {name:<14}" + "".join(f"{stats[c]:>10.4f}" for c in cols)
                  + f"{fit_time[name]:>10.2f}")
        print()
    print("A smaller tail fraction trades a higher mean loss for a lighter tail: compare the "
          "'mean' and 'CVaR 1%' columns.")

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        low = np.inf
        for name, model in models.items():
            losses, _ = loss_summary(model, data.X_test, data.y_test)
            losses = np.sort(losses)
            ranks = np.arange(1, losses.size + 1) / losses.size
            ax.plot(ranks, losses, label=name)
            low = min(low, float(np.quantile(losses, 0.8)))
        ax.set_xlim(0.8, 1.0)
        ax.set_ylim(bottom=0.9 * low)
        ax.set_xlabel("rank of the test loss (fraction)")
        ax.set_ylabel("test loss 0.5 (prediction - y)^2")
        ax.set_title(f"{args.dataset}: the worst 20% of the test losses")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"figure: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
