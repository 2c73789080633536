"""Train a small network on a spectral risk with the :mod:`riskopt.torch` losses.

The losses of :mod:`riskopt.torch` take the per-sample losses of a batch
(``reduction="none"``) and return a scalar whose value is the risk and whose gradient with
respect to each loss is the maximising weight ``q_i`` (computed exactly by sort +
pool-adjacent-violators). They drop into an ordinary training loop.

This script trains the same two-layer network three ways, with the same seed, batches and
Adam steps, on the synthetic ``group_shift_regression`` data of :mod:`riskopt.datasets` (2,000
training rows from a 90 / 10 mixture of two groups with their own input means and coefficients;
1,000 test rows, half from each group), where the minority group's samples make the tail of the
training losses:

* ``mean``: ERM, ``losses.mean()``;
* ``batch ESRM``: :class:`~riskopt.torch.SpectralRiskLoss`, the risk of each mini-batch -- a
  *biased* estimate of the full-data risk (the maximum over ``q`` does not commute with the
  average over batches);
* ``table ESRM``: :class:`~riskopt.torch.TableSpectralRiskLoss`, which keeps the latest loss
  of every training sample (Prospect's loss table) and weights the batch by the *global*
  weights of the table: unbiased for the full-batch gradient when the table is fresh.

The risk is the ESRM with ``rho = 5`` and a chi-square shift penalty (``shift_cost = 0.1``).
After training, the script evaluates every network on the *whole* training set and on the
test set: the mean loss, the full-data risk and the mean test loss of the worse group.

Run::

    python examples/torch_spectral_risk.py            # about 10 s on 2 CPU cores

Needs PyTorch (``pip install "riskopt[torch]"``); offline.
"""
import argparse
import time

import numpy as np
import torch
from torch import nn

import riskopt as ro
from riskopt.metrics import worst_group_error
from riskopt.torch import SpectralRiskLoss, TableSpectralRiskLoss


def make_net(d, seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 32), nn.Tanh(), nn.Linear(32, 1)).double()


def per_sample_losses(net, X, y):
    return 0.5 * (net(X)[:, 0] - y) ** 2


def train(kind, risk, X, y, epochs, batch_size, lr, seed):
    n, d = X.shape
    net = make_net(d, seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    if kind == "batch":
        crit = SpectralRiskLoss(risk)
    elif kind == "table":
        crit = TableSpectralRiskLoss(risk, n)
        with torch.no_grad():                      # a fresh table to start from
            crit.init_table(per_sample_losses(net, X, y))
    rng = np.random.default_rng(seed)              # the same batches for every method
    for _ in range(epochs):
        perm = torch.from_numpy(rng.permutation(n))
        for start in range(0, n - batch_size + 1, batch_size):
            idx = perm[start:start + batch_size]
            losses = per_sample_losses(net, X[idx], y[idx])
            if kind == "mean":
                objective = losses.mean()
            elif kind == "batch":
                objective = crit(losses)
            else:
                objective = crit(losses, idx)      # sample ids update the table
            opt.zero_grad()
            objective.backward()
            opt.step()
    return net


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    data = ro.datasets.load("group_shift_regression", random_state=args.seed)
    groups = data.groups_test["group"]
    X, y = torch.from_numpy(data.X_train), torch.from_numpy(data.y_train)
    Xt, yt = torch.from_numpy(data.X_test), torch.from_numpy(data.y_test)
    risk = ro.ESRM(5.0, shift_cost=0.1)
    print(f"{data.name}: {data.n_train} training / {data.n_test} test rows; risk = {risk}")
    print(f"{args.epochs} epochs of Adam (lr {args.lr:g}), batches of {args.batch_size}\n")

    print(f"  {'training objective':<20}{'train mean':>11}{'train risk':>11}"
          f"{'test mean':>11}{'test risk':>11}{'worst group':>13}{'time [s]':>10}")
    methods = (("mean", "mean (ERM)"), ("batch", "batch ESRM"), ("table", "table ESRM"))
    for kind, _ in methods:   # warm-up (torch's lazy initialisation, numba's JIT), not timed
        train(kind, risk, X[:128], y[:128], 1, args.batch_size, args.lr, args.seed)
    for kind, label in methods:
        t0 = time.perf_counter()
        net = train(kind, risk, X, y, args.epochs, args.batch_size, args.lr, args.seed)
        seconds = time.perf_counter() - t0
        with torch.no_grad():
            tr = per_sample_losses(net, X, y).numpy()
            te = per_sample_losses(net, Xt, yt).numpy()
        worst = worst_group_error(None, te, groups, loss="precomputed")
        print(f"  {label:<20}{tr.mean():>11.4f}{risk.value(tr):>11.4f}"
              f"{te.mean():>11.4f}{risk.value(te):>11.4f}{worst:>13.4f}{seconds:>10.2f}")
    print("\n'risk': the ESRM(5) with the chi2 shift penalty of all the per-sample losses of the "
          "split (riskopt.ESRM.value); 'worst group': the larger of the two groups' mean test "
          "losses.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
