"""Where Prospect's hull tree should hand over to ``hull_oracle``: the cost of a step on each,
side by side, against the swaps of the bubbling, by table size.

    python benchmarks/prospect_switch.py [--sizes 20000 200000 1000000] [--cases esrm:chi2
        extremile:kl] [--warms 1e-3 1e-2 3e-2] [--steps 20000] [--out benchmarks/results/...]

``ORACLE_INCREMENTAL`` starts a pass on a non-box spectrum with a shift cost on the hull tree
(``ORACLE_TREE``: O(s + log^2 n) per step, ``s`` the swaps of the bubbling that keeps the loss
table sorted) and hands the rest of the pass to ``hull_oracle`` (``ORACLE_HULL``: cost per step
independent of ``s``) once the swaps so far pass ``prospect.hull_swaps(n)`` per step. This
measures both from the same state on the same sample indices, for starts at the L-BFGS optimum
perturbed by each ``--warm`` (relative to its norm; larger: more swaps per step), the objectives
of ``prospect_incremental.py`` part 3 (lr 3e-3).

Per row: CPU seconds (``time.process_time``, one BLAS thread) of a partial pass of ``--steps``
steps (best of ``--repeats``) minus a pass of one step (the pass's O(n) set-up, median of
3), divided by ``steps - 1``: ns per step
for TREE and HULL, timed alternately (twice each, the lower kept); the swaps per step of TREE
(its counter); ``TREE / HULL``. Per size, a least-squares line ``tree = a + b s`` over the rows
gives the break-even ``s* = (hull - a) / b`` (hull: the median HULL step of the size's rows), the
swaps per step above which the hull oracle is the cheaper one. Writes ``switch_<sizes>.md`` /
``.json`` to ``--out``, atomically.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import prospect_incremental as pi  # noqa: E402
from riskopt._kernels import prospect as kp  # noqa: E402
from riskopt.bench._meta import _cpu_info, _git_commit, _versions, now  # noqa: E402

CLOCK = time.process_time


def _per_step(s, obj, state, idx, repeats):
    """Best-of-``repeats`` CPU ns per step of a pass over ``idx`` (set-up subtracted)."""
    t1 = statistics.median(pi.timed_update(s, obj, state, idx[:1], CLOCK)[1] for _ in range(3))
    tm = min(pi.timed_update(s, obj, state, idx, CLOCK)[1] for _ in range(repeats))
    return (tm - t1) / (idx.shape[0] - 1) * 1e9


def rows_for(n, case, warms, steps, repeats):
    name, cost = case.split(":")
    pi._warm_jit(name, cost)
    obj = pi.spectra_objective(name, cost, n)
    coef = pi.ro.solvers.LBFGS().run(obj).coef
    d = obj.X.shape[1]
    out = []
    for warm in warms:
        rng = np.random.default_rng(1)
        w0 = coef + warm * np.linalg.norm(coef) * rng.normal(size=d) / np.sqrt(d)
        tree, hull = pi.solver(kp.ORACLE_TREE), pi.solver(kp.ORACLE_HULL)
        for s in (tree, hull):
            s.lr = pi.LR
        state = tree.init_state(obj, coef0=w0)
        idx = tree.draw_indices(obj, state)[:min(steps, n)]
        tree._stats[:] = 0
        tree.update(obj, state, indices=idx)
        swaps = tree._stats[0] / tree._stats[3]
        tt = th = np.inf
        for _ in range(2):  # alternately: the load moves both alike
            tt = min(tt, _per_step(tree, obj, state, idx, repeats))
            th = min(th, _per_step(hull, obj, state, idx, repeats))
        out.append(dict(n=n, case=case, warm=warm, steps=int(idx.shape[0]), swaps=swaps,
                        tree_ns=tt, hull_ns=th, threshold=kp.hull_swaps(n)))
        print(json.dumps(out[-1]), flush=True)
    return out


def break_even(rows):
    """``(a, b, hull, s*)``: the line ``tree = a + b s`` fitted to ``rows`` and its crossing
    with their median HULL step (``nan`` with fewer than two distinct swap counts)."""
    s = np.array([r["swaps"] for r in rows])
    t = np.array([r["tree_ns"] for r in rows])
    h = statistics.median(r["hull_ns"] for r in rows)
    if np.unique(s).shape[0] < 2:
        return np.nan, np.nan, h, np.nan
    b, a = np.polyfit(s, t, 1)
    return a, b, h, (h - a) / b if b > 0 else np.inf


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=[20000, 200000, 1000000])
    ap.add_argument("--cases", nargs="+", default=["esrm:chi2", "extremile:kl"])
    ap.add_argument("--warms", nargs="+", type=float, default=[1e-3, 1e-2, 3e-2])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "prospect_incremental"))
    args = ap.parse_args()
    started, t0 = now(), time.perf_counter()
    rows, lines = [], []
    for n in args.sizes:
        for case in args.cases:
            rows += rows_for(n, case, args.warms, args.steps, args.repeats)
    lines += ["# Prospect: hull tree (TREE) vs hull_oracle (HULL) per step, by swaps per step",
              "", f"Partial passes of {args.steps} steps from the L-BFGS optimum perturbed by "
              "`warm` (lr 3e-3), CPU ns per step (set-up subtracted, best of "
              f"{args.repeats} x 2, alternately), load {os.getloadavg()[0]:.1f} at the end.", "",
              "| n | case | warm | swaps/step | TREE ns/step | HULL ns/step | TREE / HULL "
              "| hull_swaps(n) |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['n']:,} | {r['case']} | {r['warm']:g} | {r['swaps']:.0f} | "
                     f"{r['tree_ns']:.0f} | {r['hull_ns']:.0f} | "
                     f"{r['tree_ns'] / r['hull_ns']:.2f} | {r['threshold']} |")
    lines += ["", "| n | TREE = a + b s: a ns | b ns/swap | HULL ns (median) | break-even "
              "s* swaps/step |", "|---:|---:|---:|---:|---:|"]
    fits = []
    for n in args.sizes:
        a, b, h, se = break_even([r for r in rows if r["n"] == n])
        fits.append(dict(n=n, a=a, b=b, hull=h, break_even=se))
        lines.append(f"| {n:,} | {a:.0f} | {b:.2f} | {h:.0f} | {se:.0f} |")
    wall = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "_".join(str(n) for n in args.sizes)
    meta = dict(script="benchmarks/prospect_switch.py", started=started, finished=now(),
                wall_seconds=round(wall, 1), git_commit=_git_commit(), cpu=_cpu_info(),
                versions=_versions(), args=vars(args), load=os.getloadavg(), rows=rows,
                fits=fits)
    pi._write_atomic(out / f"switch_{tag}.md", "\n".join(lines) + "\n")
    pi._write_atomic(out / f"switch_{tag}.json",
                     json.dumps(meta, indent=2, default=float) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {out}/switch_{tag}.md and .json ({wall:.0f} s)")


if __name__ == "__main__":
    main()
