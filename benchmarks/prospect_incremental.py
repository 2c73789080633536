"""Prospect with the incremental exact oracle (hull tree) against the O(n) oracle.

    python benchmarks/prospect_incremental.py [--sizes 20000 200000 1000000] [--repeats 3]
        [--passes 4] [--datasets kin8nm power] [--out benchmarks/results/prospect_incremental]

Part 1, cost of a pass. Synthetic Gaussian regression (d = 20, ``y = X w + noise``), squared
loss, CVaR(0.5) with a chi-square shift cost 0.5, ``l2_reg = 1/n``. Prospect (lr 3e-3) starts
at the L-BFGS minimiser perturbed by 1e-3 of its norm (the regime where the sorted order of
the loss table has settled, which is where Prospect spends its passes; from a cold start the
table is re-sorted by O(n) swaps per step and both oracles pay O(n) per step for the
bubbling alone) and runs ``--passes`` passes with the incremental oracle (AFTER). At the start
of every pass the O(n) oracle (BEFORE, ``Prospect._oracle = ORACLE_FULL``: PAV resumed at the
lowest moved rank) runs from the same state on the same indices, over the whole pass for
n <= 2e4 and over its first ``m`` steps otherwise (``m`` = 2e9 / n, at least 2000; its
per-step cost is stationary within a pass, the seconds are scaled by n / m and marked ``*``).
The two oracles give the same iterates (tests/test_incremental_pav.py). Reported: seconds per
pass divided by one NumPy full objective + gradient on the same data (``Objective.value_grad``,
median of 21 calls, measured in the same run), and per step the mean numbers of swaps, of
touched blocks (AFTER: hull-tree nodes refreshed / buckets rebuilt / nodes whose bridge had to
be recomputed; BEFORE: ranks re-pooled by the PAV). Every timing is the median over
``--repeats`` repetitions of the same passes (the machine is shared and noisy).

Part 2, time to 1e-8 suboptimality (relative, ``ro.Trace``, as in tests/test_prospect.py) on
kin8nm and power, the regression suite's objective (squared loss, CVaR(0.5), chi-square shift
cost 0.5, ``l2_reg = 1/n``, ``Objective`` on the training split as in benchmarks/speed.py),
Prospect from its default start with the step sizes of tests/test_prospect.py (kin8nm 1e-4,
power 1e-3), both oracles, median over ``--repeats`` runs of the solver's own clock.

Writes ``results.md`` (the printed tables) and ``metadata.json`` (commit, machine, date,
versions, wall time) to ``--out``, each atomically (temporary file + rename). Earlier runs
are kept beside them as ``results_<commit>.md`` / ``metadata_<commit>.json`` (the commit the
run measured), e.g. ``results_870afb9.md``: the hull tree before its per-step costs were cut
(reference counting, prefetch, chi-square abscissae; see the incremental_pav docstring).
"""
import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

import riskopt as ro
from riskopt._kernels import prospect as kp
from riskopt.bench._meta import _cpu_info, _git_commit, _versions, now

LR = 3e-3
WARM = 1e-3
BEST_LR = {"kin8nm": 1e-4, "power": 1e-3}  # tests/test_prospect.py, CVaR(0.5), chi2 0.5
NSTATS = 8


def synthetic(n, d=20, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    return ro.Objective("squared", ro.CVaR(0.5, shift_cost=0.5), X, y, l2_reg=1.0 / n)


def full_eval_seconds(obj, repeats=21):
    w = np.zeros(obj.X.shape[1])
    obj.value_grad(w)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        obj.value_grad(w)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def solver(oracle):
    s = ro.solvers.Prospect(lr=LR, random_state=0)
    s._oracle = oracle
    s._stats = np.zeros(NSTATS, dtype=np.int64)
    return s


def timed_update(s, obj, state, idx):
    s._stats[:] = 0
    t0 = time.perf_counter()
    out = s.update(obj, state, indices=idx)
    return out, time.perf_counter() - t0, s._stats.copy()


def pass_costs(n, passes, repeats, log):
    obj = synthetic(n)
    t_full = full_eval_seconds(obj, 21 if n <= 200000 else 7)
    log(f"\n### n = {n:,}, d = 20: one NumPy full objective + gradient = {t_full * 1e3:.2f} ms")
    t0 = time.perf_counter()
    res = ro.solvers.LBFGS().run(obj)
    t_lbfgs = time.perf_counter() - t0
    rng = np.random.default_rng(1)
    d = obj.X.shape[1]
    w0 = res.coef + WARM * np.linalg.norm(res.coef) * rng.normal(size=d) / np.sqrt(d)
    f_star = res.value
    m = n if n <= 20000 else max(2000, int(2e9 // n))
    after, before = solver(kp.ORACLE_INCREMENTAL), solver(kp.ORACLE_FULL)
    # JIT warm-up (both code paths) on a tiny table
    tiny = synthetic(64)
    for s in (after, before):
        s.update(tiny, s.init_state(tiny))
    rows = []
    for rep in range(repeats):
        state = after.init_state(obj, coef0=w0)
        for p in range(passes):
            idx = after.draw_indices(obj, state)
            _, tb, sb = timed_update(before, obj, state, idx[:m])
            state, ta, sa = timed_update(after, obj, state, idx)
            if rep == 0:
                rows.append(dict(tb=[], ta=[], sb=sb, sa=sa,
                                 subopt=float(obj.value(state.coef) - f_star)))
            rows[p]["tb"].append(tb * n / m)
            rows[p]["ta"].append(ta)
    log(f"L-BFGS f* in {t_lbfgs:.1f} s; start F(w0) - f* = "
        f"{float(obj.value(w0) - f_star):.2e}; lr = {LR:g}; BEFORE timed on "
        f"{'the whole pass' if m == n else f'the first {m:,} steps of each pass (*)'}")
    log("")
    log("| pass | F - f* after | BEFORE s/pass | ratio | AFTER s/pass | ratio | speed-up "
        "| swaps/step | BEFORE ranks re-pooled/step | AFTER nodes/step | buckets/step "
        "| bridges recomputed/step |")
    log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    star = "" if m == n else "*"
    summary = []
    for p, r in enumerate(rows):
        tb, ta = statistics.median(r["tb"]), statistics.median(r["ta"])
        sa, sb = r["sa"], r["sb"]
        T = sa[3]
        recomputed = (sa[1] - sa[5]) / T
        log(f"| {p + 1} | {r['subopt']:.1e} | {tb:.3g}{star} | {tb / t_full:.0f}{star} | "
            f"{ta:.3g} | {ta / t_full:.1f} | {tb / ta:.0f}x | {sa[0] / T:.1f} | "
            f"{sb[1] / sb[3]:.0f} | {sa[1] / T:.1f} | {sa[7] / T:.2f} | {recomputed:.3f} |")
        summary.append(dict(pass_=p + 1, before=tb, after=ta, before_ratio=tb / t_full,
                            after_ratio=ta / t_full, swaps=sa[0] / T,
                            before_repooled=sb[1] / sb[3], nodes=sa[1] / T,
                            buckets=sa[7] / T, recomputed=recomputed,
                            subopt=r["subopt"]))
    med_b = statistics.median(x["before_ratio"] for x in summary)
    med_a = statistics.median(x["after_ratio"] for x in summary)
    log(f"\nmedian over passes: BEFORE {med_b:.0f}x, AFTER {med_a:.1f}x one full "
        f"objective + gradient")
    return dict(n=n, full_eval=t_full, before_steps=m, passes=summary,
                median_before_ratio=med_b, median_after_ratio=med_a)


def time_to_tol(dataset, repeats, log, tol=1e-8, max_epochs=64):
    data = ro.datasets.load(dataset)
    n = data.X_train.shape[0]
    obj = ro.Objective(ro.SquaredLoss(), ro.CVaR(0.5, shift_cost=0.5), data.X_train,
                       data.y_train, l2_reg=1.0 / n)
    f_star = ro.solvers.LBFGS().run(obj).value
    out = {}
    for name, oracle in (("BEFORE", kp.ORACLE_FULL), ("AFTER", kp.ORACLE_INCREMENTAL)):
        times, passes, stats = [], [], np.zeros(NSTATS, dtype=np.int64)
        for rep in range(repeats + 1):  # the first run warms the JIT up and is not counted
            s = ro.solvers.Prospect(lr=BEST_LR[dataset], random_state=0)
            s._oracle = oracle
            s._stats = np.zeros(NSTATS, dtype=np.int64)
            trace = ro.Trace(f_star=f_star, tol=tol)
            s.run(obj, max_epochs=max_epochs, callback=trace)
            k = trace.passes_to(tol)
            if rep == 0:
                continue
            if k is None:
                times.append(float("nan"))
            else:
                times.append(trace.times[trace.passes.index(k)])
            passes.append(k)
            stats = s._stats
        out[name] = dict(seconds=statistics.median(times), passes=passes[0],
                         swaps=stats[0] / stats[3])
    b, a = out["BEFORE"], out["AFTER"]
    log(f"| {dataset} | {n:,} | {BEST_LR[dataset]:g} | {b['passes']} | {b['seconds']:.3g} | "
        f"{a['seconds']:.3g} | {b['seconds'] / a['seconds']:.1f}x | {a['swaps']:.1f} |")
    return dict(dataset=dataset, n=n, lr=BEST_LR[dataset], **{k.lower(): v for k, v in
                                                              out.items()})


def _write_atomic(path, text):
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename,
    so an interrupted run leaves the previous file whole."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=[20000, 200000, 1000000])
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--datasets", nargs="+", default=["kin8nm", "power"])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "prospect_incremental"))
    args = ap.parse_args()
    started, t0 = now(), time.perf_counter()
    lines = []

    def log(s=""):
        print(s, flush=True)
        lines.append(s)

    log("# Prospect: incremental exact oracle (AFTER) vs O(n) oracle (BEFORE)")
    log("")
    log("Seconds per pass as a ratio to one NumPy full objective + gradient on the same data "
        "(synthetic Gaussian regression, d = 20, squared loss, CVaR(0.5), chi-square shift cost "
        f"0.5, l2 = 1/n; Prospect lr {LR:g} from the L-BFGS minimiser perturbed by {WARM:g} of "
        f"its norm; medians over {args.repeats} repetitions). `*`: BEFORE timed on the first m "
        "steps of the pass and scaled by n/m.")
    sizes = [pass_costs(n, args.passes, args.repeats, log) for n in args.sizes]
    log("\n## Time to 1e-8 suboptimality (CVaR 0.5, chi2 0.5, l2 = 1/n, default start)\n")
    log("| dataset | n | lr | passes | BEFORE s | AFTER s | speed-up | AFTER swaps/step |")
    log("|---|---:|---:|---:|---:|---:|---:|---:|")
    real = [time_to_tol(d, args.repeats, log) for d in args.datasets]
    wall = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(script="benchmarks/prospect_incremental.py", started=started, finished=now(),
                wall_seconds=round(wall, 1), git_commit=_git_commit(), cpu=_cpu_info(),
                versions=_versions(), args=vars(args), synthetic=sizes, time_to_tol=real)
    _write_atomic(out / "results.md", "\n".join(lines) + "\n")
    _write_atomic(out / "metadata.json", json.dumps(meta, indent=2, default=float) + "\n")
    print(f"\nwrote {out}/results.md and metadata.json ({wall:.0f} s)")


if __name__ == "__main__":
    main()
