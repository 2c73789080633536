"""Time per forward + backward of ``riskopt.torch.TableSpectralRiskLoss``: sorted table vs box oracle.

    OPENBLAS_NUM_THREADS=1 python benchmarks/table_loss_speed.py [--sizes 10000 100000 1000000]
        [--batch 64] [--steps-old 40] [--steps-box 2000] [--repeats 5]
        [--out benchmarks/results/table_loss_speed]

CVaR(0.5) with a chi-square shift cost 0.5 over a table of ``n`` losses (standard normal,
filled by ``init_table``), batches of ``b = 64`` distinct uniform indices with fresh standard
normal losses (a stationary table: every write re-files an entry and moves the threshold a
little). One step is ``crit(losses, idx).backward()`` on a float64 leaf tensor. OLD is the
sorted-table path (``_use_box = False``: merge of the b updated entries, then PAV, O(n) per
step); BOX the default for this risk (``_kernels/box_oracle`` + ``_kernels/box_table``, O(b
log n) per step, the value from the set sums). Both modules see the same batches; the table
printed is the median over ``--repeats`` blocks of the seconds per step (blocks of
``--steps-old`` / ``--steps-box`` steps, after one warm-up step that also builds the box
state: its seconds, O(n log n) once, are the ``build`` column; old and box get the same
warm-up batch and the same blocks' batches). ``value diff``: the box module's value after
its last block against the sorted path's value of the same table, relative; ``vs fsum``:
each against ``q.l - nu D(q)`` summed exactly (``math.fsum``) with the sorted path's weights
(the plain sums of the sorted path lose more than the box path's compensated set sums).

Writes ``results.md`` and ``metadata.json`` to ``--out``.
"""
import argparse
import math
import os
import platform
import statistics
import time

import numpy as np
import torch

import riskopt as ro
from riskopt.bench._io import atomic_write_json, write_results
from riskopt.bench._meta import int_options, script_metadata
from riskopt.torch import TableSpectralRiskLoss


def _batches(n, b, count, seed):
    rng = np.random.default_rng(seed)
    return [(torch.from_numpy(rng.choice(n, b, replace=False)),
             torch.from_numpy(rng.normal(size=b))) for _ in range(count)]


def _run(crit, batches):
    t0 = time.perf_counter()
    for idx, l in batches:
        x = l.clone().requires_grad_(True)
        crit(x, idx).backward()
    return (time.perf_counter() - t0) / len(batches)


def _measure(n, args, risk):
    init = np.random.default_rng(n).normal(size=n)
    rows = {}
    for name, use_box, steps in (("old", False, args.steps_old), ("box", True, args.steps_box)):
        crit = TableSpectralRiskLoss(risk, n)
        crit._use_box = use_box
        crit.init_table(init)
        warm = _batches(n, args.batch, 1, 0)
        t_build = _run(crit, warm)  # first step (builds the box state on BOX)
        times = [_run(crit, _batches(n, args.batch, steps, 1 + r)) for r in range(args.repeats)]
        rows[name] = (statistics.median(times), t_build, crit)
    return rows


def main():
    p = int_options(argparse.ArgumentParser(description=__doc__.splitlines()[0]),
                    sizes=[10_000, 100_000, 1_000_000], batch=64, steps_old=40,
                    steps_box=2000, repeats=5)
    p.add_argument("--out", default="benchmarks/results/table_loss_speed")
    args = p.parse_args()
    started = time.perf_counter()
    risk = ro.CVaR(0.5, shift_cost=0.5)
    lines = ["# TableSpectralRiskLoss: seconds per forward + backward, sorted table (old) vs "
             "box oracle (box)", "",
             f"{risk!r}, batch {args.batch}, median over {args.repeats} blocks "
             f"(old: {args.steps_old} steps, box: {args.steps_box} steps per block); "
             f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
             f"torch threads {torch.get_num_threads()}", "",
             "| n | old s/step | box s/step | speed-up | old first step | box first step "
             "(build) | value diff | old / box value vs fsum |", "|---|---|---|---|---|---|---|---|"]
    results = []
    for n in args.sizes:
        rows = _measure(n, args, risk)
        (to, bo, _), (tb, bb, cb) = rows["old"], rows["box"]
        # the box module's value against the sorted path on its own final table
        twin = TableSpectralRiskLoss(risk, n)
        twin._use_box = False
        twin.init_table(cb._table.copy())
        vo, vb = twin.value(), cb.value()
        diff = abs(vo - vb) / abs(vo)
        q = twin.weights().numpy()  # chi-square value of the sorted path's weights, fsum
        exact = math.fsum(q * cb._table) - risk.shift_cost * n * math.fsum((q - 1.0 / n) ** 2)
        eo, eb = abs(vo - exact) / abs(exact), abs(vb - exact) / abs(exact)
        lines.append(f"| {n} | {to:.3e} | {tb:.3e} | {to / tb:.0f}x | {bo:.3e} | {bb:.3e} | "
                     f"{diff:.1e} | {eo:.1e} / {eb:.1e} |")
        results.append({"n": n, "old_s_per_step": to, "box_s_per_step": tb,
                        "old_first_s": bo, "box_first_s": bb, "value_rel_diff": diff,
                        "old_value_rel_err_fsum": eo, "box_value_rel_err_fsum": eb})
        print(lines[-1], flush=True)
    # the measured rows (in metadata.json) before the Markdown
    atomic_write_json(os.path.join(args.out, "metadata.json"), script_metadata(
        "benchmarks/table_loss_speed.py", time.perf_counter() - started,
        processor=platform.processor(),
        openblas_num_threads=os.environ.get("OPENBLAS_NUM_THREADS"),
        torch=torch.__version__, args=vars(args), results=results))
    write_results(args.out, None, lines)


if __name__ == "__main__":
    main()
