"""Prospect with the incremental exact oracles (box heaps, hull tree) against the O(n) oracle.

    python benchmarks/prospect_incremental.py [--sizes 20000 200000 1000000] [--repeats 3]
        [--passes 4] [--datasets kin8nm power] [--out benchmarks/results/prospect_incremental]
    python benchmarks/prospect_incremental.py --spectra-only --sizes 20000 [--passes 4]
        [--spectra cvar esrm extremile user] [--costs none chi2 kl] [--budget 20]
        [--base-src /path/to/base/checkout/src]

Part 3 (``--spectra-only``, alone): every spectrum (CVaR 0.5, ESRM 1, extremile 2, a user
spectrum) x shift cost (none, chi2 0.5, KL 0.5), Prospect's default oracle (box / rank /
hull tree handing over to ``hull_oracle``) from the default start and from the perturbed
optimum, passes 1 .. ``--passes``, each as a ratio to one ``Objective.value_grad`` of the same
objective in the same process, both in CPU seconds (``time.process_time``, one BLAS thread: on
a loaded machine a pass of seconds is always preempted while the median of short full
gradients is not, which inflated the wall-clock ratios of stop 35); the 'before' column runs
pass 1 of the checkout at ``--base-src`` in a child process (its own full-gradient time).
Writes ``spectra_<sizes>.md`` and ``spectra_<sizes>.json``; ``spectra_<sizes>_wall_<commit>.*``
are stop 35's runs of the commit named, in wall-clock seconds (not comparable with these).

Three oracles, one per column group: FULL (``Prospect._oracle = ORACLE_FULL``: the O(n) PAV
resumed at the lowest moved rank), TREE (``ORACLE_TREE``: the hull tree of
``_kernels/incremental_pav``, O(s + log^2 n) per step plus the bubbling that keeps the loss
table sorted, s swaps) and BOX (``ORACLE_INCREMENTAL``, the solver's default, which for CVaR
with a chi-square cost is ``_kernels/box_oracle``: ``q = clip((l - tau) / (2 n nu), 0, c)``
with ``tau`` kept by heaps in O(log n) per step, no sorted table during the pass).

Part 1, cost of a pass. Synthetic Gaussian regression (d = 20, ``y = X w + noise``), squared
loss, CVaR(0.5) with a chi-square shift cost 0.5, ``l2_reg = 1/n``. Prospect (lr 3e-3) starts
at the L-BFGS minimiser perturbed by 1e-3 of its norm (the regime where the sorted order of
the loss table has settled, which is where Prospect spends its passes; from a cold start the
table is re-sorted by O(n) swaps per step and the sorted oracles pay O(n) per step for the
bubbling alone) and runs ``--passes`` passes with BOX. At the start of every pass TREE runs
the whole pass and FULL its first ``m`` steps (the whole pass for n <= 2e4, else ``m`` = 2e9
/ n, at least 2000; its per-step cost is stationary within a pass, the seconds are scaled by
n / m and marked ``*``) from the same state on the same indices. The three give the same
iterates to rounding (tests/test_incremental_pav.py, tests/test_box_oracle.py). Reported:
seconds per pass divided by one NumPy full objective + gradient on the same data
(``Objective.value_grad``, median of 21 calls, measured in the same run), and per step: the
swaps of the sorted table (TREE's bubbling: what moving a loss costs a sorted oracle), TREE's
hull-tree nodes refreshed and buckets rebuilt, BOX's elements that changed set (the updated
index re-filed or crossed by the walk of ``tau``) and heap levels sifted. Every timing is the
median over ``--repeats`` repetitions of the same passes (the machine is shared and noisy).

Part 2, time to 1e-8 suboptimality (relative, ``ro.Trace``, as in tests/test_prospect.py) on
kin8nm and power, the regression suite's objective (squared loss, CVaR(0.5), chi-square shift
cost 0.5, ``l2_reg = 1/n``, ``Objective`` on the training split as in benchmarks/speed.py),
Prospect from its default start with the step sizes of tests/test_prospect.py (kin8nm 1e-4,
power 1e-3), the three oracles, median over ``--repeats`` runs of the solver's own clock.

Writes ``results.md`` (the printed tables) and ``metadata.json`` (commit, machine, date,
versions, wall time) to ``--out``, each atomically (temporary file + rename). Earlier runs
are kept beside them as ``results_<commit>.md`` / ``metadata_<commit>.json`` (the commit the
run measured): ``results_870afb9.md``, the hull tree before its per-step costs were cut
(reference counting, prefetch, chi-square abscissae; see the incremental_pav docstring), and
``results_8855a0a.md``, the hull tree as the default oracle (its AFTER column is TREE here).
"""
import argparse
import json
import os
import statistics
import time
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # one BLAS thread (before NumPy loads): CPU time = work

import numpy as np  # noqa: E402

import riskopt as ro  # noqa: E402
from riskopt._kernels import prospect as kp  # noqa: E402
from riskopt.bench._meta import _cpu_info, _git_commit, _versions, now  # noqa: E402

LR = 3e-3
WARM = 1e-3
BEST_LR = {"kin8nm": 1e-4, "power": 1e-3}  # tests/test_prospect.py, CVaR(0.5), chi2 0.5
NSTATS = 10  # _kp._epoch_prospect's counters (8) and the box oracle's (2)


def synthetic(n, d=20, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    return ro.Objective("squared", ro.CVaR(0.5, shift_cost=0.5), X, y, l2_reg=1.0 / n)


def full_eval_seconds(obj, repeats=21, clock=time.perf_counter):
    w = np.zeros(obj.X.shape[1])
    obj.value_grad(w)
    ts = []
    for _ in range(repeats):
        t0 = clock()
        obj.value_grad(w)
        ts.append(clock() - t0)
    return statistics.median(ts)


def solver(oracle):
    s = ro.solvers.Prospect(lr=LR, random_state=0)
    s._oracle = oracle
    s._stats = np.zeros(NSTATS, dtype=np.int64)
    return s


def timed_update(s, obj, state, idx, clock=time.perf_counter):
    s._stats[:] = 0
    t0 = clock()
    out = s.update(obj, state, indices=idx)
    return out, clock() - t0, s._stats.copy()


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
    box, tree, full = (solver(o) for o in (kp.ORACLE_INCREMENTAL, kp.ORACLE_TREE,
                                           kp.ORACLE_FULL))
    # JIT warm-up (every code path) on a tiny table
    tiny = synthetic(64)
    for s in (box, tree, full):
        s.update(tiny, s.init_state(tiny))
    rows = []
    for rep in range(repeats):
        state = box.init_state(obj, coef0=w0)
        for p in range(passes):
            idx = box.draw_indices(obj, state)
            _, tf, sf = timed_update(full, obj, state, idx[:m])
            _, tt, st = timed_update(tree, obj, state, idx)
            state, tb, sb = timed_update(box, obj, state, idx)
            if rep == 0:
                rows.append(dict(tf=[], tt=[], tb=[], st=st, sb=sb,
                                 subopt=float(obj.value(state.coef) - f_star)))
            rows[p]["tf"].append(tf * n / m)
            rows[p]["tt"].append(tt)
            rows[p]["tb"].append(tb)
    log(f"L-BFGS f* in {t_lbfgs:.1f} s; start F(w0) - f* = "
        f"{float(obj.value(w0) - f_star):.2e}; lr = {LR:g}; FULL timed on "
        f"{'the whole pass' if m == n else f'the first {m:,} steps of each pass (*)'}")
    log("")
    log("| pass | F - f* after | FULL s/pass | ratio | TREE s/pass | ratio | BOX s/pass | ratio "
        "| BOX vs TREE | swaps/step | TREE nodes/step | TREE buckets/step "
        "| BOX set changes/step | BOX heap levels/step |")
    log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    star = "" if m == n else "*"
    summary = []
    for p, r in enumerate(rows):
        tf, tt, tb = (statistics.median(r[k]) for k in ("tf", "tt", "tb"))
        st, sb = r["st"], r["sb"]
        T = st[3]
        log(f"| {p + 1} | {r['subopt']:.1e} | {tf:.3g}{star} | {tf / t_full:.0f}{star} | "
            f"{tt:.3g} | {tt / t_full:.1f} | {tb:.3g} | {tb / t_full:.1f} | {tt / tb:.1f}x | "
            f"{st[0] / T:.1f} | {st[1] / T:.1f} | {st[7] / T:.2f} | {sb[8] / sb[3]:.4f} | "
            f"{sb[9] / sb[3]:.3f} |")
        summary.append(dict(pass_=p + 1, full=tf, tree=tt, box=tb, full_ratio=tf / t_full,
                            tree_ratio=tt / t_full, box_ratio=tb / t_full, swaps=st[0] / T,
                            tree_nodes=st[1] / T, tree_buckets=st[7] / T,
                            box_set_changes=sb[8] / sb[3], box_heap_levels=sb[9] / sb[3],
                            subopt=r["subopt"]))
    med = {k: statistics.median(x[f"{k}_ratio"] for x in summary)
           for k in ("full", "tree", "box")}
    log(f"\nmedian over passes: FULL {med['full']:.0f}x, TREE {med['tree']:.1f}x, BOX "
        f"{med['box']:.1f}x one full objective + gradient")
    return dict(n=n, full_eval=t_full, full_steps=m, passes=summary,
                **{f"median_{k}_ratio": v for k, v in med.items()})


def time_to_tol(dataset, repeats, log, tol=1e-8, max_epochs=64):
    data = ro.datasets.load(dataset)
    n = data.X_train.shape[0]
    obj = ro.Objective(ro.SquaredLoss(), ro.CVaR(0.5, shift_cost=0.5), data.X_train,
                       data.y_train, l2_reg=1.0 / n)
    f_star = ro.solvers.LBFGS().run(obj).value
    out = {}
    for name, oracle in (("FULL", kp.ORACLE_FULL), ("TREE", kp.ORACLE_TREE),
                         ("BOX", kp.ORACLE_INCREMENTAL)):
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
                         swaps=stats[0] / stats[3], set_changes=stats[8] / stats[3])
    f, t, b = out["FULL"], out["TREE"], out["BOX"]
    log(f"| {dataset} | {n:,} | {BEST_LR[dataset]:g} | {f['passes']} / {t['passes']} / "
        f"{b['passes']} | {f['seconds']:.3g} | {t['seconds']:.3g} | {b['seconds']:.3g} | "
        f"{t['seconds'] / b['seconds']:.1f}x | {t['swaps']:.1f} | {b['set_changes']:.3f} |")
    return dict(dataset=dataset, n=n, lr=BEST_LR[dataset], **{k.lower(): v for k, v in
                                                              out.items()})


# ---------------------------------------------------------------- part 3: every spectrum
SPECTRA = ("cvar", "esrm", "extremile", "user")
COSTS = ("none", "chi2", "kl")
START_LR = {"default": 1e-3, "optimum": LR}
#: part 3's clock: CPU seconds of this process (one BLAS thread), so that the time slices the
#: loaded machine gives other processes count neither in a pass nor in the full gradient
CLOCK = time.process_time


def user_spectrum(n):
    """A user spectrum that is neither a box nor smooth: a cubic ramp plus a step at the top
    decile, normalised."""
    u = (np.arange(n) + 0.5) / n
    s = u ** 3 + (u >= 0.9)
    return s / s.sum()


def spectra_objective(name, cost, n, seed=0, d=20):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    kw = {} if cost == "none" else dict(shift_cost=0.5, divergence=cost)
    risk = {"cvar": lambda: ro.CVaR(0.5, **kw), "esrm": lambda: ro.ESRM(1.0, **kw),
            "extremile": lambda: ro.Extremile(2.0, **kw),
            "user": lambda: ro.SpectralRisk(user_spectrum(n), **kw)}[name]()
    return ro.Objective("squared", risk, X, y, l2_reg=1.0 / n)


def start_point(obj, start):
    d = obj.X.shape[1]
    if start == "default":
        return np.zeros(d)
    coef = ro.solvers.LBFGS().run(obj).coef
    rng = np.random.default_rng(1)
    return coef + WARM * np.linalg.norm(coef) * rng.normal(size=d) / np.sqrt(d)


def _warm_jit(name, cost):
    tiny = spectra_objective(name, cost, 64)
    s = solver(kp.ORACLE_INCREMENTAL)
    st = s.init_state(tiny)
    for _ in range(2):
        st = s.update(tiny, st)


def estimate_pass(s, obj, state, idx, budget, clock=CLOCK):
    """CPU seconds of the pass over ``idx`` from ``state``: the whole pass when a probe
    predicts it within ``budget`` seconds, else estimated from a pass of one step (the O(n)
    set-up of a pass, ``t1``) and one of ``m`` steps from the same state: ``t1 + (n - 1)
    (t_m - t1) / (m - 1)`` (``t_m / m`` per step if the difference is not positive), with
    ``m`` sized for ~``budget / 4`` seconds: ``(seconds, exact?, (state after, counters) or
    None)``. An estimate assumes the first ``m`` steps cost what the rest do."""
    n = idx.shape[0]

    def predict(m):
        t1 = timed_update(s, obj, state, idx[:1], clock)[1]
        tm = timed_update(s, obj, state, idx[:m], clock)[1]
        per = (tm - t1) / (m - 1) if tm > t1 else tm / m
        return t1 + (n - 1) * per, t1, per

    m = min(n, max(400, n // 50))  # long enough that the steps outweigh the set-up's noise
    pred, t1, per = predict(m)
    if pred <= budget:
        out, sec, st = timed_update(s, obj, state, idx, clock)
        return sec, True, (out, st)
    m = min(max(m, int(0.25 * budget / max(per, 1e-12))), n // 2)
    return predict(m)[0], False, None


def spectra_rows(n, passes, names, costs, budget, log_json):
    """Pass 1 .. ``passes`` of the default oracle from both starts, per spectrum and cost;
    one JSON line per row (``log_json``). Passes after an estimated one are not run."""
    out = []
    for name in names:
        for cost in costs:
            _warm_jit(name, cost)
            obj = spectra_objective(name, cost, n)
            t_full = full_eval_seconds(obj, 11 if n <= 200000 else 5, CLOCK)
            for start in ("default", "optimum"):
                w0 = start_point(obj, start)
                s = solver(kp.ORACLE_INCREMENTAL)
                s.lr = START_LR[start]
                state = s.init_state(obj, coef0=w0)
                row = dict(n=n, spectrum=name, cost=cost, start=start, full_eval=t_full,
                           passes=[])
                for p in range(passes):
                    idx = s.draw_indices(obj, state)
                    sec, exact, after = estimate_pass(s, obj, state, idx, budget)
                    rec = dict(pass_=p + 1, seconds=sec, ratio=sec / t_full, exact=exact)
                    if exact:
                        state, st = after
                        rec.update(swaps=st[0] / st[3], newton=st[8] / st[3],
                                   chunks=st[9] / st[3])
                    row["passes"].append(rec)
                    if not exact:
                        break
                out.append(row)
                log_json(row)
    return out


def spectra_part(args, log):
    """Part 3: after (this checkout) in this process, before (``--base-src``) in a child
    process with that ``src`` first on PYTHONPATH; both write JSON rows."""
    import subprocess
    import sys
    rows_after = []
    for n in args.sizes:
        rows_after += spectra_rows(n, args.passes, args.spectra, args.costs, args.budget,
                                   lambda r: print(json.dumps(r, default=float), flush=True))
    rows_before = []
    if args.base_src:
        env = dict(os.environ, PYTHONPATH=args.base_src)
        cmd = [sys.executable, __file__, "--worker", "--passes", "1", "--budget",
               str(args.budget), "--sizes", *map(str, args.sizes), "--spectra",
               *args.spectra, "--costs", *args.costs]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        rows_before = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    spectra_table(rows_after, rows_before, log)
    return dict(after=rows_after, before=rows_before)


def spectra_table(rows_after, rows_before, log):
    """The Markdown table of part 3 (also rebuilt from a JSON file by ``--table-from``)."""
    before = {(r["n"], r["spectrum"], r["cost"], r["start"]): r for r in rows_before}
    log("| n | spectrum | cost | start | before: value_grad ms | pass 1 s | ratio | after: "
        "value_grad ms | pass 1 s | ratio | pass 4 s | ratio | swaps/step (p1) | Newton "
        "it./step (p1) | chunks/step (p1) |")
    log("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def cell(r, k):
        if r is None or len(r["passes"]) <= k:
            return "- | -"
        p = r["passes"][k]
        star = "" if p["exact"] else "*"
        return f"{p['seconds']:.3g}{star} | {p['ratio']:.1f}{star}"

    for r in rows_after:
        b = before.get((r["n"], r["spectrum"], r["cost"], r["start"]))
        p1 = r["passes"][0]
        extra = (f"{p1['swaps']:.0f} | {p1['newton']:.2f} | {p1['chunks']:.2f}"
                 if p1["exact"] else "- | - | -")
        bf = f"{b['full_eval'] * 1e3:.2f}" if b else "-"
        log(f"| {r['n']:,} | {r['spectrum']} | {r['cost']} | {r['start']} | {bf} | "
            f"{cell(b, 0)} | {r['full_eval'] * 1e3:.2f} | {cell(r, 0)} | {cell(r, 3)} | "
            f"{extra} |")


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
    ap.add_argument("--spectra-only", action="store_true",
                    help="part 3 only: every spectrum x cost, default start and optimum")
    ap.add_argument("--spectra", nargs="+", default=list(SPECTRA))
    ap.add_argument("--costs", nargs="+", default=list(COSTS))
    ap.add_argument("--budget", type=float, default=20.0,
                    help="part 3: a pass predicted longer (s) is estimated (marked *)")
    ap.add_argument("--base-src", default=None,
                    help="part 3: the src folder of the base checkout (the 'before' column)")
    ap.add_argument("--tag", default="",
                    help="--spectra-only: appended to the output names (spectra_<sizes><tag>)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--table-from", default=None, help="print part 3's table from its JSON")
    args = ap.parse_args()
    if args.table_from:  # rebuild part 3's Markdown table from its JSON file
        res = json.loads(Path(args.table_from).read_text())
        spectra_table(res["after"], res["before"], print)
        return
    if args.worker:  # the 'before' child of part 3: JSON rows on stdout
        for n in args.sizes:
            spectra_rows(n, args.passes, args.spectra, args.costs, args.budget,
                         lambda r: print(json.dumps(r, default=float), flush=True))
        return
    started, t0 = now(), time.perf_counter()
    lines = []

    def log(s=""):
        print(s, flush=True)
        lines.append(s)

    if args.spectra_only:
        log("# Prospect on every spectrum: first and fourth pass / one full objective + gradient")
        log("")
        log("Synthetic Gaussian regression (d = 20, squared loss, l2 = 1/n); spectra CVaR 0.5, "
            "ESRM 1, extremile 2, a user spectrum (cubic ramp + top-decile step); shift cost "
            "none, chi2 0.5, KL 0.5. Prospect's default oracle from the default start (zeros, "
            f"lr {START_LR['default']:g}) and from the L-BFGS optimum perturbed by {WARM:g} of "
            f"its norm (lr {LR:g}). Cells: CPU seconds of the pass (`time.process_time`, one "
            "BLAS thread) / the CPU seconds of one `Objective.value_grad` of the same objective "
            "(median of 11; 5 at n > 2e5) in the same process. `before`: the checkout "
            f"at --base-src ({args.base_src}) in a child process, pass 1 only. `*`: a pass "
            f"predicted over {args.budget:g} s is estimated from partial passes of m and 2m "
            "steps (set-up + n x per-step cost). swaps: the hull tree's bubbling (0 on the "
            "rank / box / hull oracles); Newton iterations and chunks scanned: hull_oracle.")
        log("")
        res = spectra_part(args, log)
        wall = time.perf_counter() - t0
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        tag = "_".join(str(n) for n in args.sizes) + args.tag
        meta = dict(script="benchmarks/prospect_incremental.py --spectra-only", started=started,
                    finished=now(), wall_seconds=round(wall, 1), git_commit=_git_commit(),
                    cpu=_cpu_info(), versions=_versions(), args=vars(args),
                    load=os.getloadavg(), **res)
        _write_atomic(out / f"spectra_{tag}.md", "\n".join(lines) + "\n")
        _write_atomic(out / f"spectra_{tag}.json", json.dumps(meta, indent=2, default=float)
                      + "\n")
        print(f"\nwrote {out}/spectra_{tag}.md and .json ({wall:.0f} s)")
        return

    log("# Prospect: box oracle (BOX, the default for CVaR + chi2) vs hull tree (TREE) vs "
        "O(n) oracle (FULL)")
    log("")
    log("Seconds per pass as a ratio to one NumPy full objective + gradient on the same data "
        "(synthetic Gaussian regression, d = 20, squared loss, CVaR(0.5), chi-square shift cost "
        f"0.5, l2 = 1/n; Prospect lr {LR:g} from the L-BFGS minimiser perturbed by {WARM:g} of "
        f"its norm; medians over {args.repeats} repetitions). `*`: FULL timed on the first m "
        "steps of the pass and scaled by n/m. Swaps: TREE's bubbling (BOX keeps no sorted "
        "table); BOX set changes and heap levels: its per-step work.")
    sizes = [pass_costs(n, args.passes, args.repeats, log) for n in args.sizes]
    log("\n## Time to 1e-8 suboptimality (CVaR 0.5, chi2 0.5, l2 = 1/n, default start)\n")
    log("| dataset | n | lr | passes FULL / TREE / BOX | FULL s | TREE s | BOX s | BOX vs TREE "
        "| TREE swaps/step | BOX set changes/step |")
    log("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
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
