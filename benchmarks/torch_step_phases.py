"""Where each torch optimizer's step spends its time, phase by phase, against
``torch.optim.SGD``: one process, one thread, no process group (the optimizers' own work;
the DDP benchmark ``benchmarks/torch_ddp_comm.py`` adds the communication).

Same MLP and batch as ``benchmarks/torch_ddp_comm.py`` (``d -> hidden -> 1``, float32, 256
rows), driven by the common table's loop (``riskopt.torch.optim._drive.drive_step``). Each
step is cut into phases by wrapping the calls the loop makes:

* ``forward``: the model at the current parameters;
* ``previous``: the evaluation at the previous iterate (ASCDRO's forward with graph through
  ``torch.func.functional_call``, the MSVR methods' no-grad forward ``evaluate_previous``;
  SONX / SOX skip it);
* ``surrogate``: the optimizer's batch statistics (``opt.surrogate`` / ``opt.weights``);
* ``backward``; ``step`` (``opt.step``, the amortised divergence check included);
  ``zero_grad``; ``other``: the rest of the loop (indexing the batch, the per-sample losses,
  the group means).

Two numbers per phase, both per step: CPU milliseconds (the median over ``--repeats``
interleaved blocks of ``--steps`` steps; the machine's load moves them) and the count of
ATen operations dispatched (a ``TorchDispatchMode`` count over one block: independent of the
load, a measure of the per-op overhead that dominates a small model on CPU).

With ``--base-src DIR`` (the ``src`` of another checkout, e.g. ``git archive <commit> src``
unpacked in /tmp) each row also runs that checkout's optimizer, loaded as a separate package
in the same process (row ``<name> (before)``), interleaved block by block with the others:
before / after side by side under the same load.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/torch_step_phases.py [--hidden 256] [--steps 20]
        [--repeats 5] [--rows scdro ...] [--base-src DIR] [--out DIR]

Output: ``benchmarks/results/torch_step_phases/hidden<h>/`` (JSON and Markdown).
"""
import argparse
import collections
import importlib
import os
import sys
import types
import statistics
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.torch.optim import _drive as D

OUT = Path(__file__).resolve().parent / "results" / "torch_step_phases"
ROWS = ["scdro", "ascdro", "pgsmd2", "sonex", "sonx", "sox", "alexr2", "ooa"]
PHASES = ["forward", "previous", "surrogate", "backward", "step", "zero_grad", "other"]


class _Clock:
    """Exclusive CPU time and op counts per phase (the innermost open phase gets them)."""

    def __init__(self):
        self.stack, self.cpu, self.ops = [], collections.Counter(), collections.Counter()
        self.t = time.process_time()

    def _flush(self):
        now = time.process_time()
        self.cpu[self.stack[-1] if self.stack else "other"] += now - self.t
        self.t = now

    def wrap(self, phase, fn, inside_ok=True):
        """``fn`` timed as ``phase`` (``inside_ok=False``: not inside another phase, e.g.
        the model's forward inside the evaluation at the previous iterate)."""
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


def measure(args):
    torch.set_num_threads(1)
    n = args.batch * 16
    X, y, groups, module = D.make_problem(n=n, d=args.d, hidden=args.hidden,
                                          dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    clock = _Clock()
    fc, bw = torch.func.functional_call, torch.Tensor.backward
    torch.func.functional_call = clock.wrap("previous", fc)
    torch.Tensor.backward = clock.wrap("backward", bw)
    try:
        module.forward = clock.wrap("forward", module.forward, inside_ok=False)
        sgd = torch.optim.SGD(module.parameters(), lr=1e-4)
        _instrument(clock, sgd)

        def sgd_step():
            idx = torch.randint(0, n, (args.batch,), generator=gen)
            sgd.zero_grad()
            (0.5 * (module(X[idx])[:, 0] - y[idx]) ** 2).mean().backward()
            sgd.step()

        steppers = {"sgd": sgd_step}
        trees = [("", D)] + ([(" (before)", load_base(args.base_src))] if args.base_src else [])
        for name in args.rows:
            for tag, drv in trees:
                opt = drv.make_optimizer(name, module.parameters(), n, 4, lr=1e-4,
                                         on_divergence="ignore")
                _instrument(clock, opt)
                steppers[name + tag] = (lambda o, k, drv: lambda: drv.drive_step(
                    k, o, module, module, X, y, groups,
                    torch.randint(0, n, (args.batch,), generator=gen)))(
                        opt, D.ROWS[name][2], drv)
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
        for _ in range(args.repeats):
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
        del module.forward
    return {k: {p: {"cpu_ms": 1e3 * statistics.median(cpu[k][p]), "ops": ops[k][p]}
                for p in PHASES} for k in steppers}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rows", nargs="+", default=ROWS, choices=list(D.ROWS))
    ap.add_argument("--base-src", default=None,
                    help="the src of another checkout: its optimizers side by side")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    got = measure(args)
    total = {k: sum(v[p]["cpu_ms"] for p in PHASES) for k, v in got.items()}
    tops = {k: sum(v[p]["ops"] for p in PHASES) for k, v in got.items()}
    meta = {"model": f"MLP {args.d}-{args.hidden}-1 float32", "batch": args.batch,
            "threads": torch.get_num_threads(), "steps": args.steps,
            "repeats": args.repeats, "torch": torch.__version__, "load": os.getloadavg()}
    out = Path(args.out) / f"hidden{args.hidden}"
    atomic_write_json(out / "results.json", {"meta": meta, "phases": got})
    md = [f"# Step phases, one process (`OMP_NUM_THREADS=1 python benchmarks/torch_step_phases.py"
          f" --hidden {args.hidden} --steps {args.steps} --repeats {args.repeats}`)", "",
          f"{meta['model']}, batch {args.batch}, 1 thread, no process group. CPU ms per step "
          f"(median of {args.repeats} blocks) / ATen ops per step, by phase. Load average at "
          f"the end {meta['load'][0]:.1f}: the ms move with it, the op counts do not."
          + (f" Rows `(before)`: {args.base_src}, loaded side by side." if args.base_src
             else ""), "",
          "| optimizer | total ms | x SGD | total ops | "
          + " | ".join(PHASES) + " |", "|---|---|---|---|" + "---|" * len(PHASES)]
    for k, v in got.items():
        md.append(f"| {k} | {total[k]:.2f} | {total[k] / total['sgd']:.2f} | {tops[k]:.0f} | "
                  + " | ".join(f"{v[p]['cpu_ms']:.2f} / {v[p]['ops']:.0f}" for p in PHASES)
                  + " |")
    atomic_write_text(out / "results.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
