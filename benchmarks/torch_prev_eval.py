"""What the evaluation at the previous iterate costs (ASCDRO, SONEX, ALEXR2), and whether the
current and the previous iterate are cheaper in one call.

The MLP of ``benchmarks/torch_ddp_comm.py`` (``64 -> hidden -> 1``, float32, 256 rows, one
thread). Timed (CPU, median of ``--repeats`` interleaved blocks of 20), as ratios to a plain
forward + backward (what an SGD step computes):

* ``two calls``: the forward + backward at the current parameters, and a no-grad forward at
  the previous ones through ``torch.func.functional_call`` (what ``SONEX.evaluate_previous``
  does);
* ``two calls (swap)``: the same, the previous parameters swapped into ``.data`` for the
  second call (tried in stop 38: no faster, so not used);
* ``one vmap call``: both parameter sets stacked and evaluated by one
  ``torch.func.vmap(functional_call)`` (the backward through the current half).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/torch_prev_eval.py [--hidden 256 1024] [--repeats 7]

Output: ``benchmarks/results/torch_prev_eval/results.md`` (and JSON).
"""
import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from torch.func import functional_call, vmap

from riskopt.bench._io import atomic_write_json, atomic_write_text

OUT = Path(__file__).resolve().parent / "results" / "torch_prev_eval"


def measure(hidden, repeats):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.Tanh(),
                            torch.nn.Linear(hidden, 1))
    prev = {k: v.detach().clone() + 1e-3 for k, v in m.named_parameters()}
    x = torch.randn(256, 64)

    def plain():
        m(x).sum().backward()

    def two():
        out = m(x)
        with torch.no_grad():
            functional_call(m, prev, (x,))
        out.sum().backward()

    def two_swap():
        out = m(x)
        ps = list(m.parameters())
        saved = [p.data for p in ps]
        with torch.no_grad():
            try:
                for p, q in zip(ps, prev.values()):
                    p.data = q
                m(x)
            finally:
                for p, d in zip(ps, saved):
                    p.data = d
        out.sum().backward()

    def one():
        cur = dict(m.named_parameters())
        stacked = {k: torch.stack([cur[k], prev[k]]) for k in cur}
        vmap(lambda p: functional_call(m, p, (x,)))(stacked)[0].sum().backward()

    fns = {"forward + backward": plain, "two calls": two, "two calls (swap)": two_swap,
           "one vmap call": one}
    got = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            c = time.process_time()
            for _ in range(20):
                f()
                m.zero_grad()
            got[k].append((time.process_time() - c) / 20)
    return {k: statistics.median(v) for k, v in got.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    torch.set_num_threads(1)
    res = {h: measure(h, args.repeats) for h in args.hidden}
    names = list(next(iter(res.values())))
    md = [f"# The evaluation at the previous iterate (`OMP_NUM_THREADS=1 python "
          f"benchmarks/torch_prev_eval.py --hidden {' '.join(map(str, args.hidden))} "
          f"--repeats {args.repeats}`)", "",
          "MLP 64-hidden-1 float32, 256 rows, 1 thread; CPU ms (median of interleaved blocks) "
          "and the ratio to one forward + backward. Load average at the end "
          f"{os.getloadavg()[0]:.1f}: ratios only.", "",
          "| hidden | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for h, r in res.items():
        base = r["forward + backward"]
        md.append(f"| {h} | " + " | ".join(f"{1e3 * r[k]:.2f} ({r[k] / base:.2f}x)"
                                           for k in names) + " |")
    out = Path(args.out)
    atomic_write_json(out / "results.json", {"load": os.getloadavg(), "seconds": {
        str(h): r for h, r in res.items()}})
    atomic_write_text(out / "results.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
