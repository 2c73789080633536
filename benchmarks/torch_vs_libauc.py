"""One-way partial AUC on adult: riskopt's exact batch X-risks vs LibAUC 2.0.1 (issue 28).

LibAUC is an optional benchmark dependency (its declared dependencies would replace the
pinned torch, so install it without them; it imports tqdm):

    pip install --no-deps libauc==2.0.1 && pip install tqdm
    RISKOPT_DATA=... python benchmarks/torch_vs_libauc.py [--epochs 5] [--seeds 0 1 2]

Setting (the same for every method, one process, one thread): adult (the loader's
standardised one-hot features, ``d`` columns), an MLP ``d-64-32-1`` with sigmoid scores,
batch 256, ``--epochs`` epochs, per seed the same initial weights and the same batch order
for all methods, Adam-type updates with lr 1e-3 and no weight decay, squared-hinge
surrogate with margin 1.

* KL-DRO (objective: mean over the positives of ``lam log mean_j exp(L_ij / lam)``,
  ``lam = 1``): LibAUC ``pAUC_DRO_Loss`` (moving-average estimator, gamma 0.9) + ``SOPAs``
  against riskopt ``PAUCLoss("kl", shift_cost=1)`` (exact batch value) + ``torch.optim.Adam``.
* CVaR (objective: mean over the positives of ``CVaR_beta`` of ``L_ij`` over the negatives,
  ``beta = 0.1``): LibAUC ``pAUC_CVaR_Loss`` (per-positive thresholds, eta 0.1) + ``SOPA``
  against riskopt ``PAUCLoss("cvar", tail_fraction=0.1)`` (exact batch CVaR) + Adam.

Reported per method and seed: seconds per epoch (the training loop only, median over the
epochs of the thread's CPU time, ``time.thread_time``, torch on one thread, so that the
time slices the shared machine gives other jobs are not counted; the methods run in turn in
the same process; wall-clock times are kept too), the training objective on the whole training set (exact: every positive
against every negative), test AUC and test pAUC (FPR <= beta, sklearn's standardised
``roc_auc_score(max_fpr=beta)``). Results: ``benchmarks/results/torch_vs_libauc/``
(``runs.jsonl`` holds every finished (seed, method) run; a rerun skips the seeds whose four
runs are there, so a run cut short by a time limit resumes).
"""
import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LAM, BETA, LR, BATCH = 1.0, 0.1, 1e-3, 256


def _args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default=os.path.join(HERE, "results", "torch_vs_libauc"))
    return p.parse_args()


def _model(torch, d, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 1))


def _objective(torch, scores, y, kind):
    """Exact full-data objective: every positive against every negative (chunked)."""
    sp, sn = scores[y == 1], scores[y == 0]
    n_neg = sn.shape[0]
    k = BETA * n_neg
    vals = []
    for c in torch.split(sp, 256):
        L = torch.clamp(1.0 - (c[:, None] - sn[None, :]), min=0.0) ** 2
        if kind == "kl":
            m = L.amax(1, keepdim=True)
            vals.append(m[:, 0] + LAM * (torch.logsumexp((L - m) / LAM, 1) - np.log(n_neg)))
        else:  # CVaR_beta: top floor(k) fully, the next one with the fractional weight
            kf = int(np.floor(k))
            top = torch.topk(L, min(kf + 1, n_neg), dim=1).values
            v = top[:, :kf].sum(1) + (k - kf) * (top[:, kf] if kf < n_neg else 0.0)
            vals.append(v / k)
    return float(torch.cat(vals).mean())


def _run(torch, method, Xtr, ytr, order, seed, epochs):
    from riskopt.torch.losses import PAUCLoss
    model = _model(torch, Xtr.shape[1], seed)
    n = Xtr.shape[0]
    if method == "libauc_kl":
        from libauc.losses import pAUC_DRO_Loss
        from libauc.optimizers import SOPAs
        crit = pAUC_DRO_Loss(data_len=n, gamma=0.9, margin=1.0, Lambda=LAM, device="cpu")
        opt = SOPAs(model.parameters(), lr=LR, mode="adam", weight_decay=0.0, verbose=False,
                    device="cpu")
    elif method == "libauc_cvar":
        from libauc.losses import pAUC_CVaR_Loss
        from libauc.optimizers import SOPA
        crit = pAUC_CVaR_Loss(data_len=n, pos_len=int(ytr.sum()), beta=BETA, eta=0.1,
                              margin=1.0, device="cpu")
        opt = SOPA(model.parameters(), lr=LR, mode="adam", weight_decay=0.0, verbose=False,
                   device="cpu")
    else:
        crit = PAUCLoss("kl" if method.endswith("kl") else "cvar", tail_fraction=BETA,
                        shift_cost=LAM)
        opt = torch.optim.Adam(model.parameters(), lr=LR)
    lib = method.startswith("libauc")
    times, walls = [], []
    for ep in range(epochs):
        t0, w0 = time.thread_time(), time.perf_counter()
        for idx in order[ep]:
            x, y = Xtr[idx], ytr[idx]
            s = torch.sigmoid(model(x))
            loss = crit(s, y.float().unsqueeze(1), idx) if lib else crit(s[:, 0], y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        times.append(time.thread_time() - t0)
        walls.append(time.perf_counter() - w0)
    return model, times, walls


def main():
    a = _args()
    import torch
    torch.set_num_threads(1)
    import libauc
    from sklearn.metrics import roc_auc_score

    from riskopt.bench._io import atomic_write_text
    from riskopt.datasets.real import load_adult
    ds = load_adult()
    Xtr = torch.tensor(ds.X_train, dtype=torch.float32)
    ytr = torch.tensor(ds.y_train).long()
    Xte = torch.tensor(ds.X_test, dtype=torch.float32)
    yte = np.asarray(ds.y_test).astype(int)
    n = Xtr.shape[0]
    methods = ["libauc_kl", "riskopt_kl", "libauc_cvar", "riskopt_cvar"]
    os.makedirs(a.out, exist_ok=True)
    runs_path = os.path.join(a.out, "runs.jsonl")  # one line per finished run: a run cut
    done = {}                                      # short (time limit) resumes from it
    if os.path.exists(runs_path):
        with open(runs_path) as f:
            for line in f:
                r = json.loads(line)
                done[(r["seed"], r["method"])] = r
    rows = []
    for seed in a.seeds:
        if all((seed, m) in done for m in methods):
            rows += [done[(seed, m)] for m in methods]
            continue
        g = torch.Generator().manual_seed(1000 + seed)
        order = []
        for _ in range(a.epochs):
            perm = torch.randperm(n, generator=g)
            # drop batches without a positive or a negative (LibAUC asserts on them)
            bs = [perm[i:i + BATCH] for i in range(0, n, BATCH)]
            order.append([b for b in bs if 0 < int(ytr[b].sum()) < b.shape[0]])
        for m in methods:
            model, times, walls = _run(torch, m, Xtr, ytr, order, seed, a.epochs)
            with torch.no_grad():
                s_tr = torch.sigmoid(model(Xtr))[:, 0].double()
                s_te = torch.sigmoid(model(Xte))[:, 0].double().numpy()
            kind = "kl" if m.endswith("kl") else "cvar"
            row = {"seed": seed, "method": m, "objective": kind,
                   "sec_per_epoch": statistics.median(times),
                   "wall_sec_per_epoch": statistics.median(walls),
                   "train_objective": _objective(torch, s_tr, ytr, kind),
                   "test_auc": float(roc_auc_score(yte, s_te)),
                   "test_pauc": float(roc_auc_score(yte, s_te, max_fpr=BETA))}
            rows.append(row)
            print(json.dumps(row), flush=True)
            with open(runs_path, "a") as f:
                f.write(json.dumps(row) + "\n")
    summary = {}
    for kind in ("kl", "cvar"):
        lib = [r for r in rows if r["method"] == f"libauc_{kind}"]
        rio = [r for r in rows if r["method"] == f"riskopt_{kind}"]
        ratio = [b["sec_per_epoch"] / l["sec_per_epoch"] for l, b in zip(lib, rio)]
        summary[kind] = {
            "time_ratio_riskopt_over_libauc": [round(x, 3) for x in ratio],
            **{f"{k}_{m}": round(statistics.mean(r[k] for r in rs), 4)
               for m, rs in (("libauc", lib), ("riskopt", rio))
               for k in ("sec_per_epoch", "train_objective", "test_auc", "test_pauc")}}
    meta = {"libauc": libauc.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "epochs": a.epochs, "seeds": a.seeds,
            "batch": BATCH, "lr": LR, "lambda": LAM, "beta": BETA, "threads": 1,
            "n_train": n, "d": Xtr.shape[1],
            "note": "2-core machine shared with other jobs: absolute times are noisy; "
                    "the methods run in turn in one process"}
    atomic_write_text(os.path.join(a.out, "results.json"),
                  json.dumps({"meta": meta, "summary": summary, "runs": rows}, indent=1) + "\n")
    lines = ["# One-way pAUC on adult: riskopt vs LibAUC " + libauc.__version__, "",
             f"MLP {Xtr.shape[1]}-64-32-1, batch {BATCH}, {a.epochs} epochs, seeds {a.seeds}, "
             "one thread, same initial weights and batch order; means over seeds. "
             "Machine shared and loaded (2 cores): times are ratios taken in one process.", "",
             "| objective | method | s / epoch | train objective | test AUC | test pAUC(FPR<=0.1)"
             " |", "|---|---|---|---|---|---|"]
    for kind, s in summary.items():
        for m in ("libauc", "riskopt"):
            lines.append(f"| {kind} | {m} | {s[f'sec_per_epoch_{m}']:.3f} | "
                         f"{s[f'train_objective_{m}']:.4f} | {s[f'test_auc_{m}']:.4f} | "
                         f"{s[f'test_pauc_{m}']:.4f} |")
        lines.append(f"| {kind} | riskopt / libauc time | "
                     f"{', '.join(f'{x:.2f}' for x in s['time_ratio_riskopt_over_libauc'])}"
                     " | | | |")
    atomic_write_text(os.path.join(a.out, "results.md"), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
