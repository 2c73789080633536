"""Where each torch optimizer's step spends its time, phase by phase, against
``torch.optim.SGD``, and two source trees side by side: one process, one thread, no process
group (the optimizers' own work; the DDP benchmark ``benchmarks/torch_ddp_comm.py`` adds the
communication).

Same MLP and batch as ``benchmarks/torch_ddp_comm.py`` (``d -> hidden -> 1``, float32, 256
rows), driven by the common table's loop (``riskopt.torch.optim._drive.drive_step``). Each
step is cut into phases by wrapping the calls the loop makes:

* ``forward``: the model at the current parameters;
* ``previous``: the evaluation at the previous iterate (ASCDRO's forward with graph through
  ``torch.func.functional_call``, the MSVR methods' no-grad forward ``evaluate_previous``;
  SONX / SOX skip it; the no-grad forward of the floor row ``floor/nograd``);
* ``surrogate``: the optimizer's batch statistics (``opt.surrogate`` / ``opt.weights``);
* ``backward``; ``step`` (``opt.step``, the amortised divergence check included);
  ``zero_grad``; ``other``: the rest of the loop (indexing the batch, the per-sample losses,
  the group means).

Two numbers per phase, both per step: CPU milliseconds (the median over ``--repeats``
interleaved blocks of ``--steps`` steps; the machine's load moves them) and the count of
ATen operations dispatched (a ``TorchDispatchMode`` count over one block: independent of the
load, a measure of the per-op overhead that dominates a small model on CPU). ``--no-phases``
leaves the calls unwrapped (the whole step lands in ``other``): the step's time without the
wrappers' own cost (a few microseconds per phase).

Besides SGD, two floor rows (those of ``benchmarks/torch_ddp_comm.py`` without the gather):
``floor/groups``, SGD on the loss the group methods are driven with (the group means plus 0.1
times the mean), and ``floor/nograd``, the same plus a no-grad forward at a second parameter
vector.

Before / after: with ``--base-src DIR`` (the ``src`` of another checkout, e.g. ``git archive
<commit> src`` unpacked in /tmp) or ``--before REV`` (that revision's ``src``, archived and
unpacked in a temporary folder) each row also runs that tree's optimizer, loaded as a
separate package in the same process (row ``<name> (before)``), interleaved block by block
with the others: before / after side by side under the same load. A second table then gives,
per optimizer, the median CPU time per step of each tree as a ratio to SGD's, the median
over blocks of the per-block ratio after / before (the pair ran seconds apart: the least
noisy number on a loaded machine; min - max), the CPU microseconds saved per step (median
over blocks of before - after) and the ATen operations per step of each. With a before tree
the defaults are ``--repeats 9`` and the rows ``sonx sox ooa sonex alexr2``.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/torch_step_phases.py [--hidden 256] [--d 64]
        [--batch 256] [--steps 20] [--repeats 5] [--rows scdro ...]
        [--base-src DIR | --before REV] [--no-phases] [--out DIR]

(``--blocks`` is another name of ``--repeats``. This tool absorbed stop 42's
``benchmarks/torch_optim_before_after.py``: its ``--before REV`` run is ``--before REV
--no-phases`` here; its results stay in ``benchmarks/results/torch_optim_before_after/``.)

Output: ``DIR/hidden<h>/`` (``hidden<h>_d<d>`` when ``d`` is not 64; default DIR
``benchmarks/results/torch_step_phases/``): ``results.json`` (``meta``, ``phases`` and, with a
before tree, ``rows``: the paired table) and ``results.md``.
"""
import argparse
import collections
import copy
import importlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import types
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from riskopt.bench._io import write_results
from riskopt.bench._meta import int_options
from riskopt.torch.optim import _drive as D

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "torch_step_phases"
ROWS = ["scdro", "ascdro", "pgsmd2", "sonex", "sonx", "sox", "alexr2", "ooa"]
BEFORE_ROWS = ["sonx", "sox", "ooa", "sonex", "alexr2"]
PHASES = ["forward", "previous", "surrogate", "backward", "step", "zero_grad", "other"]
FLOORS = ["sgd", "floor/groups", "floor/nograd"]


class _Clock:
    """Exclusive CPU time and op counts per phase (the innermost open phase gets them);
    ``on=False``: nothing is wrapped, everything is ``other``."""

    def __init__(self, on=True):
        self.on, self.stack = on, []
        self.cpu, self.ops = collections.Counter(), collections.Counter()
        self.t = time.process_time()

    def _flush(self):
        now = time.process_time()
        self.cpu[self.stack[-1] if self.stack else "other"] += now - self.t
        self.t = now

    def wrap(self, phase, fn, inside_ok=True):
        """``fn`` timed as ``phase`` (``inside_ok=False``: not inside another phase, e.g.
        the model's forward inside the evaluation at the previous iterate)."""
        if not self.on:
            return fn

        def inner(*args, **kwargs):
            if not inside_ok and self.stack:
                return fn(*args, **kwargs)
            self._flush()
            self.stack.append(phase)
            try:
                return fn(*args, **kwargs)
            finally:
                self._flush()
                self.stack.pop()
        return inner


class _Count(TorchDispatchMode):
    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        c = self.clock
        c.ops[c.stack[-1] if c.stack else "other"] += 1
        return func(*args, **(kwargs or {}))


def _instrument(clock, opt):
    """Wrap the optimizer's calls (on the instance)."""
    for name, phase in (("surrogate", "surrogate"), ("weights", "surrogate"),
                        ("evaluate_previous", "previous"),
                        ("step", "step"), ("zero_grad", "zero_grad")):
        if hasattr(opt, name):
            setattr(opt, name, clock.wrap(phase, getattr(opt, name)))


def load_base(src):
    """``riskopt.torch.optim._drive`` of the checkout at ``src`` as a separate package
    (``_base_riskopt``: its relative imports resolve inside it; its ``__init__`` is not
    run)."""
    pkg = types.ModuleType("_base_riskopt")
    pkg.__path__ = [os.path.join(src, "riskopt")]
    sys.modules["_base_riskopt"] = pkg
    return importlib.import_module("_base_riskopt.torch.optim._drive")


def archive_src(rev, tmp):
    """``git archive rev src/riskopt`` unpacked in ``tmp``; returns its ``src`` folder."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src/riskopt"],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(tmp, filter="data")
    return os.path.join(tmp, "src")


def measure(args, base=None):
    """Per stepper: the median CPU ms and the ops per step of each phase, the CPU seconds per
    step of each block, and the ops per step."""
    torch.set_num_threads(1)
    n = args.batch * 16
    X, y, groups, module = D.make_problem(n=n, d=args.d, hidden=args.hidden,
                                          dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    twin = copy.deepcopy(module)
    clock = _Clock(on=args.phases)
    fc, bw = torch.func.functional_call, torch.Tensor.backward
    torch.func.functional_call = clock.wrap("previous", fc)
    torch.Tensor.backward = clock.wrap("backward", bw)
    try:
        module.forward = clock.wrap("forward", module.forward, inside_ok=False)
        twin.forward = clock.wrap("previous", twin.forward)
        sgd = torch.optim.SGD(module.parameters(), lr=1e-4)
        _instrument(clock, sgd)

        def batch():
            return torch.randint(0, n, (args.batch,), generator=gen)

        def sgd_step():
            idx = batch()
            sgd.zero_grad()
            (0.5 * (module(X[idx])[:, 0] - y[idx]) ** 2).mean().backward()
            sgd.step()

        def floor_step(nograd):
            idx = batch()
            x, t = X[idx], y[idx]
            sgd.zero_grad()
            losses = 0.5 * (module(x)[:, 0] - t) ** 2
            loss = D._group_means(losses, groups[idx])[1].mean() + 0.1 * losses.mean()
            if nograd:
                with torch.no_grad():
                    twin(x)
            loss.backward()
            sgd.step()

        steppers = {"sgd": sgd_step, "floor/groups": lambda: floor_step(False),
                    "floor/nograd": lambda: floor_step(True)}
        trees = [("", D)] + ([(" (before)", base)] if base is not None else [])
        for name in args.rows:
            for tag, drv in trees:
                opt = drv.make_optimizer(name, module.parameters(), n, 4, lr=1e-4,
                                         on_divergence="ignore")
                _instrument(clock, opt)
                steppers[name + tag] = (lambda o, k, drv: lambda: drv.drive_step(
                    k, o, module, module, X, y, groups, batch()))(opt, drv.ROWS[name][2], drv)
        cpu = {k: collections.defaultdict(list) for k in steppers}
        ops = {}
        for k, f in steppers.items():
            for _ in range(3):
                f()
            clock.ops.clear()
            with _Count(clock):
                for _ in range(args.steps):
                    f()
            ops[k] = {p: clock.ops[p] / args.steps for p in PHASES}
        for _ in range(args.repeats):     # interleaved: the machine's load drifts
            for k, f in steppers.items():
                clock.cpu.clear()
                clock.t = time.process_time()
                for _ in range(args.steps):
                    f()
                clock._flush()
                for p in PHASES:
                    cpu[k][p].append(clock.cpu[p] / args.steps)
    finally:
        torch.func.functional_call, torch.Tensor.backward = fc, bw
        del module.forward, twin.forward
    phases = {k: {p: {"cpu_ms": 1e3 * statistics.median(cpu[k][p]), "ops": ops[k][p]}
                  for p in PHASES} for k in steppers}
    blocks = {k: [sum(b) for b in zip(*(cpu[k][p] for p in PHASES))] for k in steppers}
    return phases, blocks, {k: sum(v.values()) for k, v in ops.items()}


def paired_rows(rows, blocks, ops):
    """The before / after table: SGD and the floors as ratios to SGD, then per optimizer
    both trees, the per-block ratio after / before and the time saved."""
    sgd = statistics.median(blocks["sgd"])
    out = [{"row": k, "ratio": statistics.median(blocks[k]) / sgd, "ops": ops[k]}
           for k in FLOORS]
    for name in rows:
        b, a = blocks[f"{name} (before)"], blocks[name]
        out.append({"row": name, "before": statistics.median(b) / sgd,
                    "after": statistics.median(a) / sgd,
                    "after_over_before": statistics.median(x / y for x, y in zip(a, b)),
                    "paired_min_max": [min(x / y for x, y in zip(a, b)),
                                       max(x / y for x, y in zip(a, b))],
                    "saved_us": 1e6 * statistics.median(y - x for x, y in zip(a, b)),
                    "ops_before": ops[f"{name} (before)"], "ops_after": ops[name]})
    return out, sgd


def paired_md(rows):
    md = ["| row | x SGD before | x SGD after | after / before (min - max) | saved us | "
          "ops before | ops after |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "before" in r:
            lo, hi = r["paired_min_max"]
            md.append(f"| {r['row']} | {r['before']:.2f} | {r['after']:.2f} | "
                      f"{r['after_over_before']:.3f} ({lo:.2f} - {hi:.2f}) | "
                      f"{r['saved_us']:.0f} | {r['ops_before']:.0f} | {r['ops_after']:.0f} |")
        else:
            md.append(f"| {r['row']} | - | {r['ratio']:.2f} | - | - | - | {r['ops']:.0f} |")
    return md


def parse_args(argv=None):
    ap = int_options(argparse.ArgumentParser(description=__doc__.split("\n")[0]),
                     hidden=256, d=64, batch=256, steps=20)
    ap.add_argument("--repeats", "--blocks", dest="repeats", type=int, default=None,
                    help="interleaved blocks (default 5; 9 with a before tree)")
    ap.add_argument("--rows", nargs="+", default=None, choices=list(D.ROWS),
                    help="optimizers (default: %s; with a before tree: %s)"
                    % (" ".join(ROWS), " ".join(BEFORE_ROWS)))
    tree = ap.add_mutually_exclusive_group()
    tree.add_argument("--base-src", default=None,
                      help="the src of another checkout: its optimizers side by side")
    tree.add_argument("--before", default=None,
                      help="a git revision: its src (archived) side by side")
    ap.add_argument("--no-phases", dest="phases", action="store_false",
                    help="do not wrap the calls (the whole step in 'other')")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    paired = args.base_src is not None or args.before is not None
    if args.repeats is None:
        args.repeats = 9 if paired else 5
    if args.rows is None:
        args.rows = BEFORE_ROWS if paired else ROWS
    return args


def main(argv=None):
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        src = archive_src(args.before, tmp) if args.before else args.base_src
        got, blocks, ops = measure(args, load_base(src) if src else None)
    before = args.before or args.base_src
    meta = {"model": f"MLP {args.d}-{args.hidden}-1 float32", "hidden": args.hidden,
            "d": args.d, "batch": args.batch, "threads": torch.get_num_threads(),
            "steps": args.steps, "repeats": args.repeats, "blocks": args.repeats,
            "phases": args.phases,
            "before": before, "sgd_cpu_ms": 1e3 * statistics.median(blocks["sgd"]),
            "torch": torch.__version__, "load": os.getloadavg()}
    payload, sgd = {"meta": meta, "phases": got}, None
    if before:
        payload["rows"], sgd = paired_rows(args.rows, blocks, ops)
    out = Path(args.out) / (f"hidden{args.hidden}" + (f"_d{args.d}" if args.d != 64 else ""))
    # the JSON first: a formatting error keeps the measured data
    write_results(out, payload, lambda: markdown(args, payload, sgd))


def markdown(args, payload, sgd=None):
    """The Markdown lines of ``results.md`` (``sgd``: SGD's CPU seconds per step of the paired
    rows, with a before tree)."""
    meta, got = payload["meta"], payload["phases"]
    before = meta["before"]
    total = {k: sum(v[p]["cpu_ms"] for p in PHASES) for k, v in got.items()}
    tops = {k: sum(v[p]["ops"] for p in PHASES) for k, v in got.items()}
    cmd = (f"OMP_NUM_THREADS=1 python benchmarks/torch_step_phases.py --hidden {args.hidden} "
           f"--d {args.d} --steps {args.steps} --repeats {args.repeats} --rows "
           + " ".join(args.rows) + (f" --before {args.before}" if args.before else "")
           + (f" --base-src {args.base_src}" if args.base_src else "")
           + ("" if args.phases else " --no-phases"))
    md = [f"# Step phases, one process (`{cmd}`)", "",
          f"{meta['model']}, batch {args.batch}, 1 thread, no process group. CPU ms per step "
          f"(median of {args.repeats} interleaved blocks of {args.steps} steps) / ATen ops per "
          f"step, by phase{'' if args.phases else ' (not wrapped: all in other)'}. Load "
          f"average at the end {meta['load'][0]:.1f}: the ms move with it, the op counts do "
          "not." + (f" Rows `(before)`: {before}, loaded side by side." if before else ""), "",
          "| optimizer | total ms | x SGD | total ops | "
          + " | ".join(PHASES) + " |", "|---|---|---|---|" + "---|" * len(PHASES)]
    for k, v in got.items():
        md.append(f"| {k} | {total[k]:.2f} | {total[k] / total['sgd']:.2f} | {tops[k]:.0f} | "
                  + " | ".join(f"{v[p]['cpu_ms']:.2f} / {v[p]['ops']:.0f}" for p in PHASES)
                  + " |")
    if before:
        md += ["", f"Before ({before}) and after: CPU time per step (median over blocks) as a "
               f"ratio to SGD's ({1e3 * sgd:.2f} ms). after / before: the median of the "
               "per-block ratios (min - max). Saved: the median over blocks of before - "
               "after, CPU us per step. Ops: ATen operations per step.", ""]
        md += paired_md(payload["rows"])
    return md


if __name__ == "__main__":
    main()
