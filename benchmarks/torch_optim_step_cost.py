"""The torch optimizers' own cost per step in one process, against ``torch.optim.SGD``.

Same MLP and batch as ``benchmarks/torch_ddp_comm.py`` (64-256-1, float32, 256 rows; one
thread), no process group, so no communication: what remains is each optimizer's own work.
That work is its tensor ops on the batch statistics, its moments, and the second forward pass
at the previous iterate (ASCDRO and the MSVR methods). This is the part of the DDP step ratio
that no communication design can remove.

SGD and the optimizers are timed in interleaved blocks of ``--steps`` steps, and the best of
``--repeats`` blocks counts, in wall time and in the process' CPU time. The machine is shared,
so compare ratios within one run only. Output: ``benchmarks/results/torch_optim_step_cost/``
(JSON and Markdown).

``--ab BEFORE_SRC AFTER_SRC`` compares two source trees (e.g. ``git archive REV src | tar -x
-C /tmp/before``): ``--rounds`` rounds, each measuring BEFORE then AFTER in fresh processes
(alternating, so both see the same load), and reports the median over rounds of each
optimizer's ratio to SGD (measured in the same process) for each tree
(``results_ab.json`` / ``results_ab.md``).

Usage::

    python benchmarks/torch_optim_step_cost.py [--steps 30] [--repeats 6]
    python benchmarks/torch_optim_step_cost.py --ab /tmp/before/src src --rounds 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from riskopt.bench._io import atomic_write_json, atomic_write_text

OUT = Path(__file__).resolve().parent / "results" / "torch_optim_step_cost"
ROWS = ["scdro", "ascdro", "pgsmd2", "sonex", "sonx", "sox", "alexr2", "ooa"]


def measure(steps, repeats, batch):
    """``{name: (best wall s / step, best CPU s / step)}`` for SGD and every row."""
    from riskopt.torch.optim import _drive as D

    torch.set_num_threads(1)
    n = 4096
    X, y, groups, module = D.make_problem(n=n, d=64, hidden=256, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    sgd = torch.optim.SGD(module.parameters(), lr=1e-4)

    def sgd_step():
        idx = torch.randint(0, n, (batch,), generator=gen)
        sgd.zero_grad()
        (0.5 * (module(X[idx])[:, 0] - y[idx]) ** 2).mean().backward()
        sgd.step()

    steppers = {"sgd": sgd_step}
    for name in ROWS:
        opt = D.make_optimizer(name, module.parameters(), n, 4, lr=1e-4, on_divergence="ignore")
        kind = D.ROWS[name][2]
        steppers[name] = (lambda o, k: lambda: D.drive_step(
            k, o, module, module, X, y, groups,
            torch.randint(0, n, (batch,), generator=gen)))(opt, kind)
    best = {k: [float("inf"), float("inf")] for k in steppers}
    for f in steppers.values():
        for _ in range(3):
            f()
    for _ in range(repeats):
        for k, f in steppers.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                f()
            best[k][0] = min(best[k][0], (time.perf_counter() - t0) / steps)
            best[k][1] = min(best[k][1], (time.process_time() - c0) / steps)
    return best


def ab(args):
    """Alternate BEFORE / AFTER trees in fresh processes; medians over rounds."""
    trees = {"before": str(Path(args.ab[0]).resolve()), "after": str(Path(args.ab[1]).resolve())}
    runs = {k: [] for k in trees}
    for r in range(args.rounds):
        for label, src in trees.items():
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "m.json"
                env = dict(os.environ, PYTHONPATH=src)
                subprocess.run([sys.executable, __file__, "--measure-to", str(out), "--steps",
                                str(args.steps), "--repeats", str(args.repeats), "--batch",
                                str(args.batch)], env=env, check=True)
                runs[label].append(json.loads(out.read_text()))
            print(f"round {r + 1}/{args.rounds} {label} done", flush=True)
    rows = []
    for name in ["sgd", *ROWS]:
        row = {"optimizer": name}
        for label in trees:
            for j, kind in enumerate(("wall", "cpu")):
                ratios = [m[name][j] / m["sgd"][j] for m in runs[label]]
                row[f"{label}_{kind}_ratio"] = statistics.median(ratios)
                row[f"{label}_{kind}_ms"] = 1e3 * statistics.median(m[name][j]
                                                                    for m in runs[label])
        rows.append(row)
    meta = {"model": "MLP 64-256-1 float32", "batch": args.batch, "threads": 1,
            "steps": args.steps, "repeats": args.repeats, "rounds": args.rounds,
            "trees": trees, "torch": torch.__version__, "load": os.getloadavg(),
            "note": "2 shared CPU cores, loaded machine; medians over rounds of the ratio "
                    "to SGD measured in the same process"}
    _write("results_ab", {"meta": meta, "rows": rows, "runs": runs}, [
        f"# Optimizer step cost, before / after (`python benchmarks/torch_optim_step_cost.py "
        f"--ab BEFORE AFTER --rounds {args.rounds} --steps {args.steps} --repeats "
        f"{args.repeats}`)", "",
        f"{meta['model']}, batch {args.batch}, 1 thread; each round measures both trees in "
        f"fresh processes (best of {args.repeats} interleaved blocks of {args.steps} steps); "
        f"medians over {args.rounds} rounds. Load average at the end: "
        f"{meta['load'][0]:.1f}: ratios only."],
        [("x SGD wall, before", "before_wall_ratio"), ("after", "after_wall_ratio"),
         ("x SGD CPU, before", "before_cpu_ratio"), ("after", "after_cpu_ratio")])


def _write(stem, payload, head, columns):
    """``stem``.json (the payload) and ``stem``.md: the ``head`` lines, then a table of the
    payload's rows (``columns``: (header, key) pairs)."""
    atomic_write_json(OUT / f"{stem}.json", payload)
    md = [*head, "", "| optimizer | " + " | ".join(c for c, _ in columns) + " |",
          "|---|" + "---|" * len(columns)]
    md += ["| " + " | ".join([r["optimizer"], *(f"{r[k]:.2f}" for _, k in columns)])
           + " |" for r in payload["rows"]]
    atomic_write_text(OUT / f"{stem}.md", "\n".join(md) + "\n")
    print("\n".join(md))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--ab", nargs=2, metavar=("BEFORE_SRC", "AFTER_SRC"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--measure-to", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ab:
        return ab(args)
    best = measure(args.steps, args.repeats, args.batch)
    if args.measure_to:
        Path(args.measure_to).write_text(json.dumps(best))
        return None
    rows = [{"optimizer": k, "ms_per_step": 1e3 * v[0], "ratio_to_sgd": v[0] / best["sgd"][0],
             "cpu_ms_per_step": 1e3 * v[1], "cpu_ratio_to_sgd": v[1] / best["sgd"][1]}
            for k, v in best.items()]
    meta = {"model": "MLP 64-256-1 float32", "batch": args.batch, "threads": 1,
            "steps": args.steps, "repeats": args.repeats, "torch": torch.__version__,
            "note": "2 shared CPU cores, loaded machine"}
    _write("results", {"meta": meta, "rows": rows}, [
        f"# Optimizer step cost, one process (`python benchmarks/torch_optim_step_cost.py "
        f"--steps {args.steps} --repeats {args.repeats}`)", "",
        f"{meta['model']}, batch {args.batch}, 1 thread, best of {args.repeats} interleaved "
        "blocks. Machine loaded: ratios only."],
        [("ms / step", "ms_per_step"), ("x SGD", "ratio_to_sgd"),
         ("CPU ms / step", "cpu_ms_per_step"), ("x SGD (CPU)", "cpu_ratio_to_sgd")])
    return None


if __name__ == "__main__":
    main()
