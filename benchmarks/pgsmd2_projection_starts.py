"""PG-SMD2's KL-ball projection in a training run: Newton evaluations per projection with
the library's start (a Newton step from ``a = 1``) against a warm start from the previous
step's multiplier ``a``, and the projection's share of the step's CPU time.

PG-SMD2 is run as in ``torch_step_phases.py`` (the common driver's row: radius 0.5,
dual_lr 0.05, gamma 10; MLP ``d``-``hidden``-1 float32, batch ``b``, ``n = 16 b``, one
thread). Each projection's input is intercepted (``_updates_kl._kl_ball_log_host``); the
library's projection runs on it as usual (its evaluations counted by its ``torch.mv``
calls, its CPU time measured), and a copy of the same safeguarded Newton loop started at
the previous step's ``a`` (the bracket ``[0, a_prev]`` or, when ``KL(a_prev) < rho``,
``[a_prev, 1]`` after the inside test at ``a = 1``) runs on the same input, outside the
timed step. Both stop at the library's rule (``|KL - rho| <= 1e-13 max(1, rho)``).
Reported: the evaluations per projection of each (an evaluation is one ``exp`` and one
matrix-vector product over the ``n`` table entries, 3 ATen ops), the step-to-step change
of ``a``, the largest difference of the two ``a``, and the projection's share of the
step's CPU time (loaded machines move the share little: both are measured in the same
steps).

Also (``--window-calls``, default 300): the start rule's check of the KL methods (SCDRO,
PG-SMD2: every ``check_every`` steps, the window of 10 batches x ``b`` losses) valued on
the whole 18-column grid against the two-column upper bound it tries first
(``kl_dro._kl_dro_dual``), CPU microseconds per check, alternated, median of 5 blocks.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/pgsmd2_projection_starts.py [--steps 300]
        [--hidden 256] [--batch 256] [--out DIR]

Output: ``benchmarks/results/pgsmd2_projection_starts/`` (JSON and Markdown).
"""
import argparse
import math
import os
import statistics
import time
from pathlib import Path

import torch

from riskopt.bench._io import write_results
from riskopt.bench._meta import int_options
from riskopt.torch.optim import _drive as D
from riskopt.torch.optim import _updates_kl

OUT = Path(__file__).resolve().parent / "results" / "pgsmd2_projection_starts"


def warm_newton(d, logn, rho, tol, a_prev):
    """The library's Newton loop on ``log KL(a) = log rho`` started at ``a_prev`` (in
    ``(0, 1)``); returns ``(a, evaluations)`` (``a = 1`` when the input is inside)."""
    moments = torch.stack([torch.ones_like(d), d, d * d])
    count = [0]

    def stats(a):
        count[0] += 1
        s0, s1, s2 = torch.mv(moments, torch.exp(d * a)).tolist()
        lse, mu = math.log(s0), s1 / s0
        return a * mu - (lse - logn), max(s2 / s0 - mu * mu, 0.0)

    lo, hi, a = 0.0, 1.0, a_prev
    for it in range(200):
        kl, var = stats(a)
        err = kl - rho
        if abs(err) <= tol:
            break
        if err > 0:
            hi = a
        elif it == 0:      # below at the start: the inside test at a = 1
            if stats(1.0)[0] <= rho:
                return 1.0, count[0]
            lo = a
        else:
            lo = a
        if hi - lo <= 4e-16 * hi:
            break
        curv = a * var
        if curv > 0:
            step = a - math.log(kl / rho) * kl / curv if kl > 0 else a - err / curv
        else:
            step = math.nan
        a = step if lo < step < hi else 0.5 * (lo + hi)
    return a, count[0]


def window_check_cost(batch, calls, blocks=5):
    """Median CPU microseconds per check: the full grid and the two-column bound."""
    from riskopt.torch.optim.kl_dro import _kl_dro_dual

    gen = torch.Generator().manual_seed(0)
    items = [torch.rand(batch, generator=gen, dtype=torch.float64) for _ in range(10)]
    runs = {"grid": lambda: float(_kl_dro_dual(items, 0.5, 1e-3).amin(1).mean()),
            "bound": lambda: float(_kl_dro_dual(items, 0.5, 1e-3, (-4,)).amin(1).mean())}
    got = {k: [] for k in runs}
    for _ in range(blocks):
        for k, f in runs.items():
            f()
            t = time.process_time()
            for _ in range(calls):
                f()
            got[k].append(1e6 * (time.process_time() - t) / calls)
    return {k: statistics.median(v) for k, v in got.items()}


def measure(args):
    torch.set_num_threads(1)
    n = 16 * args.batch
    X, y, groups, module = D.make_problem(n=n, d=args.d, hidden=args.hidden,
                                          dtype=torch.float32)
    gen = torch.Generator().manual_seed(args.seed)
    opt = D.make_optimizer("pgsmd2", module.parameters(), n, 4, lr=1e-4,
                           on_divergence="ignore")
    library, mv = _updates_kl._kl_ball_log_host, torch.mv
    rows, side = [], [0.0]

    def counted_mv(*a, **k):
        rows[-1]["cold_evals"] += 1
        return mv(*a, **k)

    def intercepted(d, logn, rho, tol):
        rows.append({"cold_evals": 0})
        torch.mv = counted_mv
        t = time.process_time()
        try:
            out = library(d, logn, rho, tol)
        finally:
            torch.mv = mv
        rows[-1]["cpu_s"] = time.process_time() - t
        t = time.process_time()
        i, j = int(d.argmax()), int(d.argmin())     # a = the slope of the output in d
        a = float((out[i] - out[j]) / (d[i] - d[j])) if i != j else math.nan
        prev = rows[-2]["a"] if len(rows) > 1 else math.nan
        if 0.0 < prev < 1.0:
            aw, ew = warm_newton(d, logn, rho, tol, prev)
            rows[-1].update(warm_evals=ew, a_warm=aw)
        rows[-1]["a"] = a
        side[0] += time.process_time() - t
        return out

    _updates_kl._kl_ball_log_host = intercepted
    try:
        step_cpu = []
        for i in range(args.steps):
            idx = torch.randint(0, n, (args.batch,), generator=gen)
            side[0], t = 0.0, time.process_time()
            D.drive_step("pgsmd2", opt, module, module, X, y, groups, idx)
            step_cpu.append(time.process_time() - t - side[0])
    finally:
        _updates_kl._kl_ball_log_host = library
    keep = args.warmup
    rows, step_cpu = rows[keep:], step_cpu[keep:]
    both = [r for r in rows if "warm_evals" in r]
    cold = [r["cold_evals"] for r in both]
    warm = [r["warm_evals"] for r in both]
    da = [abs(r["a"] - p["a"]) for p, r in zip(rows, rows[1:])]
    return {
        "meta": {"model": f"MLP {args.d}-{args.hidden}-1 float32", "batch": args.batch,
                 "n": n, "steps": args.steps, "warmup": keep, "seed": args.seed,
                 "torch": torch.__version__, "load": os.getloadavg()},
        "projections": len(both),
        "cold_evals_mean": statistics.fmean(cold), "warm_evals_mean": statistics.fmean(warm),
        "cold_evals_hist": {k: cold.count(k) for k in sorted(set(cold))},
        "warm_evals_hist": {k: warm.count(k) for k in sorted(set(warm))},
        "a_median": statistics.median(r["a"] for r in rows),
        "a_change_median": statistics.median(da), "a_change_max": max(da),
        "a_warm_minus_cold_max": max(abs(r["a_warm"] - r["a"]) for r in both),
        "projection_cpu_share": sum(r["cpu_s"] for r in rows) / sum(step_cpu),
        "projection_us_median": 1e6 * statistics.median(r["cpu_s"] for r in rows),
        "step_ms_median": 1e3 * statistics.median(step_cpu),
    }


def main():
    ap = int_options(argparse.ArgumentParser(description=__doc__.split("\n")[0]),
                     hidden=256, d=64, batch=256, steps=300, warmup=20, seed=0,
                     window_calls=300)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    if args.steps <= args.warmup + 2:
        raise SystemExit("--steps must exceed --warmup + 2")
    got = measure(args)
    got["window_check_us"] = window_check_cost(args.batch, args.window_calls)
    out = Path(args.out) / f"hidden{args.hidden}"
    # the JSON first: a formatting error keeps the measured data
    write_results(out, got, lambda: markdown(args, got))


def markdown(args, got):
    """The Markdown lines of ``results.md``."""
    m = got["meta"]
    hist = lambda h: ", ".join(f"{k}: {v}" for k, v in h.items())   # noqa: E731
    md = [f"# PG-SMD2's KL-ball projection: cold vs warm Newton start "
          f"(`OMP_NUM_THREADS=1 python benchmarks/pgsmd2_projection_starts.py --hidden "
          f"{args.hidden} --steps {args.steps}`)", "",
          f"{m['model']}, batch {m['batch']}, n = {m['n']}, seed {m['seed']}, "
          f"{got['projections']} projections after {m['warmup']} warm-up steps, 1 thread, "
          f"load average at the end {m['load'][0]:.1f}.", "",
          "| start | Newton evaluations per projection (mean) | histogram (evaluations: count) |",
          "|---|---|---|",
          f"| library (Newton step from a = 1) | {got['cold_evals_mean']:.2f} | "
          f"{hist(got['cold_evals_hist'])} |",
          f"| warm (previous step's a) | {got['warm_evals_mean']:.2f} | "
          f"{hist(got['warm_evals_hist'])} |", "",
          f"The multiplier a: median {got['a_median']:.3f}, step-to-step change median "
          f"{got['a_change_median']:.3f}, max {got['a_change_max']:.3f}; the two starts' a "
          f"differ by at most {got['a_warm_minus_cold_max']:.1e} (the stopping rule).", "",
          f"The projection: median {got['projection_us_median']:.0f} us CPU, "
          f"{100 * got['projection_cpu_share']:.1f} % of the step's CPU time (median step "
          f"{got['step_ms_median']:.2f} ms, forward and backward included).", "",
          f"The KL methods' start-rule check (10 batches x {args.batch} losses): the whole "
          f"grid {got['window_check_us']['grid']:.0f} us, the two-column bound "
          f"{got['window_check_us']['bound']:.0f} us CPU per check (median of 5 blocks)."]
    return md


if __name__ == "__main__":
    main()
