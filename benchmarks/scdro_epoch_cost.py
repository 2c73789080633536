"""CPU cost of one training epoch of the committed SCDRO non-convex settings (Figs. 2 / 4 rows,
``benchmarks/scdro_nonconvex.py``), and what the paper's protocol would cost on this CPU.

The two committed settings (their results are not touched here):

- ``scdro_nonconvex``: the 64-64-10 tanh MLP on digits_st (float64), 60 epochs;
- ``scdro_nonconvex_mnist``: the small CNN on MNIST-ST (float32), 16 epochs (decay at 12).

For each method of each setting, one process, one torch thread (as the benchmark runs): one
warm-up epoch, then ``--epochs`` epochs of ``scdro_nonconvex.train`` (the same code path: batches
of 128, the per-epoch evaluation of train / test accuracy and the KL objective) timed with the
process CPU time and the wall time. The cost of the paper's protocol (SCDRO paper, Sec. 5:
ResNet20 from scratch on CIFAR10-ST / CIFAR100-ST, 120 epochs with the step / 10 at 90, primal
steps {0.01, 0.05, 0.1, 0.5, 1}, SCDRO's beta {0.1 : 0.1 : 0.9}, PG-SMD2's dual step {1e-5, 5e-5,
1e-4, 5e-4}) is then counted for the CNN stand-in: the grid on one seed, two more seeds at the
chosen setting, per rho; the same count at the committed grids and epochs for comparison::

    python benchmarks/scdro_epoch_cost.py [--epochs 2] [--out benchmarks/results/scdro_epoch_cost]
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import scdro_nonconvex as nc  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "scdro_epoch_cost"
#: the committed settings: (results folder, dataset, model, epochs, methods, one setting each)
SETTINGS = {
    "scdro_nonconvex": ("digits_st", "mlp", 60,
                        {"scdro": (0.1, 0.1), "fastdro": 0.03, "erm": 0.1}),
    "scdro_nonconvex_mnist": ("mnist_st", "cnn", 16,
                              {"scdro": (0.05, 0.5), "fastdro": 0.05, "erm": 0.1,
                               "pgsmd2": (0.1, 1e-5)}),
}
#: the paper's grid sizes (settings per method) for the non-convex rows, and the committed ones
PAPER_GRID = {"scdro": 5 * 9, "fastdro": 5, "pgsmd2": 5 * 4}
PAPER_EPOCHS, EXTRA_SEEDS = 120, 2


def _data(name, model):
    import torch
    d = nc.ro.datasets.load(name)
    dt = torch.float64 if model == "mlp" else torch.float32
    return (torch.from_numpy(d.X_train).to(dt), torch.from_numpy(d.y_train).long(),
            torch.from_numpy(d.X_test).to(dt), torch.from_numpy(d.y_test).long())


def measure(epochs):
    """CPU and wall seconds per epoch, per setting and method."""
    import torch
    torch.set_num_threads(1)
    out = {}
    for name, (dataset, model, _, methods) in SETTINGS.items():
        data = _data(dataset, model)
        out[name] = {}
        for method, setting in methods.items():
            nc.train(method, setting, 0, data, 1, model)  # warm-up (lazy layers, allocations)
            c0, w0 = time.process_time(), time.perf_counter()
            nc.train(method, setting, 0, data, epochs, model)
            out[name][method] = {"cpu_s_per_epoch": (time.process_time() - c0) / epochs,
                                 "wall_s_per_epoch": (time.perf_counter() - w0) / epochs}
    return out


def protocol_cost(per_epoch, committed_grids):
    """CPU hours of the paper's protocol and of the committed one on the CNN stand-in, per rho
    (the grid on one seed plus ``EXTRA_SEEDS`` seeds at the chosen setting). The committed row
    runs ERM in place of PG-SMD2."""
    cnn = per_epoch["scdro_nonconvex_mnist"]
    epochs = SETTINGS["scdro_nonconvex_mnist"][2]
    rows = {}
    for method in dict.fromkeys([*PAPER_GRID, *committed_grids]):
        c = cnn[method]["cpu_s_per_epoch"]
        grid, ours = PAPER_GRID.get(method), committed_grids.get(method)
        rows[method] = {
            "paper_runs": grid + EXTRA_SEEDS if grid else 0,
            "paper_cpu_h": c * PAPER_EPOCHS * (grid + EXTRA_SEEDS) / 3600 if grid else 0.0,
            "committed_runs": ours + EXTRA_SEEDS if ours else 0,
            "committed_cpu_h": c * epochs * (ours + EXTRA_SEEDS) / 3600 if ours else 0.0}
    rows["total"] = {k: sum(r[k] for r in rows.values()) for k in
                     ("paper_runs", "paper_cpu_h", "committed_runs", "committed_cpu_h")}
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2, help="timed epochs per method")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error(f"--epochs must be >= 1, got {args.epochs}")
    t0 = time.time()
    per_epoch = measure(args.epochs)
    ran = SETTINGS["scdro_nonconvex_mnist"][3]
    grids = {m: len(v) for m, v in nc.GRIDS["cnn"].items() if m in ran and m != "pgsmd2"}
    cost = protocol_cost(per_epoch, grids)
    res = {"command": "python benchmarks/scdro_epoch_cost.py " + " ".join(argv or sys.argv[1:]),
           "timed_epochs": args.epochs, "torch_threads": 1, "per_epoch": per_epoch,
           "paper_protocol": {"epochs": PAPER_EPOCHS, "grid_settings": PAPER_GRID,
                              "extra_seeds": EXTRA_SEEDS},
           "cnn_cost_per_rho": cost, "load_average": os.getloadavg(),
           "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "wall_seconds": time.time() - t0}
    args.out.mkdir(parents=True, exist_ok=True)
    lines = ["# CPU cost of one epoch, SCDRO non-convex settings (`benchmarks/scdro_epoch_cost.py`)",
             "", f"One torch thread, {args.epochs} timed epochs after one warm-up epoch; load "
             f"average {res['load_average'][0]:.1f} (the CPU time is the process's own).", "",
             "| setting | method | CPU s / epoch | wall s / epoch |", "|---|---|---|---|"]
    for name, ms in per_epoch.items():
        for m, r in ms.items():
            lines.append(f"| {name} | {m} | {r['cpu_s_per_epoch']:.2f} | "
                         f"{r['wall_s_per_epoch']:.2f} |")
    lines += ["", f"CNN stand-in, one rho: the grid on one seed + {EXTRA_SEEDS} seeds at the "
              f"chosen setting. Paper: {PAPER_EPOCHS} epochs, grids {PAPER_GRID}; committed: "
              f"{SETTINGS['scdro_nonconvex_mnist'][2]} epochs, grids {grids}.", "",
              "| method | paper runs | paper CPU h | committed runs | committed CPU h |",
              "|---|---|---|---|---|"]
    for m, r in cost.items():
        lines.append(f"| {m} | {r['paper_runs']} | {r['paper_cpu_h']:.2f} | "
                     f"{r['committed_runs']} | {r['committed_cpu_h']:.2f} |")
    for fname, text in (("results.json", json.dumps(res, indent=1)),
                        ("REPORT.md", "\n".join(lines) + "\n")):
        tmp = args.out / (fname + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, args.out / fname)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
