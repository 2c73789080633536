"""Where a Prospect step's time goes on the rank / hull oracles: the oracle's update and query,
per step, replayed on the loss changes of a real pass, by chunk size.

    python benchmarks/prospect_oracle_steps.py [--sizes 20000 200000] [--chunks 16 32 64 128]
        [--cases esrm:none esrm:chi2 esrm:kl user:chi2] [--out benchmarks/results/...]
        [--base-src /path/to/base/checkout/src]

For each case (spectrum : shift cost, the objectives of ``prospect_incremental.py`` part 3)
and start (the default start and the perturbed optimum, their step sizes), one pass of
Prospect's K = 1 step (squared loss) on ``rank_oracle`` (no shift cost) / ``hull_oracle``
is run and its sequence of loss changes ``(old, new)`` recorded. That sequence is then
replayed on a fresh oracle built from the pass's initial table, for every chunk size:

* ``update``: the replacements alone (``_rank_replace`` / ``_hull_replace``);
* ``step``: the query of the changing loss's weight, then its replacement: the oracle's whole
  share of a step (``step - update`` is the query; for ``nu = 0`` the step is the pass's
  fused one, ``_rank_weight_at`` + ``_rank_replace_at``: the query's search also locates
  the value the update replaces; for the hull, from stop 42, ``_hull_weight_at`` +
  ``_hull_move_at``, the same).

``--base-src``: the rank / hull oracle modules of another checkout (``rank_oracle.py`` and
``hull_oracle.py`` copied into a temporary package, the rest of ``riskopt`` this one's) replay
the same loss changes in the same process, the two timed alternately (best of 3 each):
columns ``before step ns`` and ``after / before`` (the before / after of a change, measured
side by side).

Cells: CPU nanoseconds per step (``time.process_time``, best of 3, one BLAS thread), the
Newton iterations and chunks scanned per query, and ``step x n`` as a ratio to one
``Objective.value_grad`` (CPU, median of 11) in the same process: what the oracle alone
costs of a pass, in full gradients (the pass adds the step's own O(d) work and an O(n log n)
set-up). Writes ``oracle_steps_<sizes>.md`` / ``.json`` to ``--out``, atomically.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import prospect_incremental as pi  # noqa: E402
from riskopt._kernels.hull_oracle import (_hull_build, _hull_move, _hull_replace,  # noqa: E402
                                          _hull_scratch, _hull_weight, _hull_weight_full)
from riskopt._kernels import hull_oracle, rank_oracle  # noqa: E402
from riskopt._kernels.rank_oracle import (_rank_alloc, _rank_build, _rank_replace,  # noqa: E402
                                          _rank_weight)
from riskopt.bench._meta import _cpu_info, _git_commit, _versions, now  # noqa: E402


@njit(cache=True)
def _weight(nu0, R, sigma, x, work, hst):
    if nu0:
        return _rank_weight(R, sigma, x)
    q = _hull_weight(R, x, work, hst)
    return _hull_weight_full(R, sigma, x) if q != q else q


@njit(cache=True)
def _build(nu0, ls0, sigma, nu, div, R):
    if nu0:
        _rank_build(ls0, sigma, R)
    else:
        _hull_build(ls0, sigma, nu, div, R)


@njit(cache=True)
def _replace(nu0, R, sigma, old, new):
    if nu0:
        _rank_replace(R, old, new)
    elif not _hull_move(R, old, new):  # as the pass does
        _hull_replace(R, sigma, old, new)


@njit(cache=True)
def record(X, y, sigma, nu, div, lr, reg, idx, w, losses, D, rho, R, work, hst, olds, news):
    """One pass of Prospect's K = 1 squared-loss step (``_epoch_prospect_box``'s arithmetic)
    on the rank / hull oracle; records every loss change."""
    n, p = X.shape
    nu0 = nu == 0.0
    _build(nu0, np.sort(losses), sigma, nu, div, R)
    g = np.zeros(p)
    for m in range(n):
        for j in range(p):
            g[j] += X[m, j] * rho[m] * D[m]
    for t in range(idx.shape[0]):
        i = idx[t]
        qi = _weight(nu0, R, sigma, losses[i], work, hst)
        z = 0.0
        for j in range(p):
            z += X[i, j] * w[j]
        r = z - y[i]
        c0 = qi * r - rho[i] * D[i]
        for j in range(p):
            w[j] = (w[j] - lr * (n * X[i, j] * c0 + g[j])) / (1.0 + lr * reg[j])
        for j in range(p):
            g[j] += X[i, j] * c0
        D[i] = r
        rho[i] = qi
        olds[t] = losses[i]
        news[t] = 0.5 * r * r
        losses[i] = news[t]
        _replace(nu0, R, sigma, olds[t], news[t])


def load_base(src):
    """The ``rank_oracle`` / ``hull_oracle`` modules of the checkout at ``src`` (its
    ``riskopt`` source folder), as a temporary package beside this one."""
    import importlib
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="oracle_steps_")) / "_base_oracles"
    d.mkdir()
    (d / "__init__.py").write_text("")
    for f in ("chunk_tree.py", "rank_oracle.py", "hull_oracle.py"):
        path = Path(src) / "riskopt" / "_kernels" / f
        if not path.exists():  # (chunk_tree.py: split from rank_oracle.py in stop 43)
            continue
        text = path.read_text()
        (d / f).write_text(text.replace("from .oracles import",
                                        "from riskopt._kernels.oracles import"))
    sys.path.insert(0, str(d.parent))
    return (importlib.import_module("_base_oracles.rank_oracle"),
            importlib.import_module("_base_oracles.hull_oracle"))


def _scratch(ho, n):
    """``ho._hull_scratch`` for ``n`` losses (with its warm-start cache where ``ho`` has one:
    a base before stop 39 takes no argument)."""
    import inspect
    if inspect.signature(ho._hull_scratch.py_func).parameters:
        return ho._hull_scratch(n)
    return ho._hull_scratch()


@njit
def _no_move(R, old, new):
    return False


@njit
def _no_weight_at(R, x, work, hst):
    return np.nan, -1, 0


@njit
def _no_move_at(R, k, j, old, new):
    return False


def make_replay(rk, ho):
    """The replay on the modules ``rk`` / ``hull`` (this checkout's or a base's), the same
    closure for both so that the two compile alike: the replacements alone (``query``
    False) or the step, the query then the replacement (for ``nu = 0``, where ``rk`` has it,
    the pass's fused ``_rank_weight_at`` + ``_rank_replace_at``)."""
    fused = hasattr(rk, "_rank_weight_at")
    # the pass's update entry (stop 40: ``_hull_move``, else ``_hull_replace``) where ho has it
    move = getattr(ho, "_hull_move", _no_move)
    # stop 42: the hull's fused step (the query's search locates the loss the update moves)
    hfused = hasattr(ho, "_hull_weight_at")
    weight_at = getattr(ho, "_hull_weight_at", _no_weight_at)
    move_at = getattr(ho, "_hull_move_at", _no_move_at)

    @njit
    def run(nu0, ls0, sigma, nu, div, R, olds, news, work, hst, query):
        if nu0:
            rk._rank_build(ls0, sigma, R)
        else:
            ho._hull_build(ls0, sigma, nu, div, R)
        acc = 0.0
        for t in range(olds.shape[0]):
            if nu0:
                if query and fused:
                    q, k, j = rk._rank_weight_at(R, sigma, olds[t])
                    acc += q
                    rk._rank_replace_at(R, k, j, olds[t], news[t])
                    continue
                if query:
                    acc += rk._rank_weight(R, sigma, olds[t])
                rk._rank_replace(R, olds[t], news[t])
            else:
                if query and hfused:
                    q, k, j = weight_at(R, olds[t], work, hst)
                    acc += ho._hull_weight_full(R, sigma, olds[t]) if q != q else q
                    if not move_at(R, k, j, olds[t], news[t]):
                        ho._hull_replace(R, sigma, olds[t], news[t])
                    continue
                if query:
                    q = ho._hull_weight(R, olds[t], work, hst)
                    acc += ho._hull_weight_full(R, sigma, olds[t]) if q != q else q
                if not move(R, olds[t], news[t]):
                    ho._hull_replace(R, sigma, olds[t], news[t])
        return acc
    return run


REPLAY = make_replay(rank_oracle, hull_oracle)


def record_pass(obj, start, B=32):
    """The first pass of Prospect's K = 1 step from ``start`` (``prospect_incremental``'s
    starts and step sizes) on the rank / hull oracle of chunk size ``B``: ``(the sorted
    initial losses, olds, news)``, its loss changes."""
    n = obj.X.shape[0]
    s = pi.solver(pi.kp.ORACLE_INCREMENTAL)
    st = s.init_state(obj, coef0=pi.start_point(obj, start))
    idx = s.draw_indices(obj, st)
    losses = st.losses.copy()
    ls0 = np.sort(losses)
    olds, news = np.empty(n), np.empty(n)
    R = _rank_alloc(n, B, obj.nu != 0.0)
    record(obj.X, obj.y, obj.sigma, obj.nu, obj.div, pi.START_LR[start], obj.reg, idx,
           st.coef[:, 0].copy(), losses, st.derivs[:, 0].copy(), st.rho.copy(), R,
           _hull_scratch(n), np.zeros(2, dtype=np.int64), olds, news)
    return ls0, olds, news


def case_rows(name, cost, n, chunks, log, base=None):
    obj = pi.spectra_objective(name, cost, n)
    t_full = pi.full_eval_seconds(obj, 11, time.process_time)
    nu, div, sigma = obj.nu, obj.div, obj.sigma
    nu0 = nu == 0.0
    rows = []
    for start in ("default", "optimum"):
        ls0, olds, news = record_pass(obj, start)
        work, hst = _hull_scratch(n), np.zeros(2, dtype=np.int64)
        for B in chunks:
            R = _rank_alloc(n, B, not nu0)
            cell = dict(n=n, spectrum=name, cost=cost, start=start, B=B, full_eval=t_full)
            for lab, query in (("update", False), ("step", True)):
                ts, tb = [], []
                for _ in range(3):
                    if base is not None and query:  # the base, alternately (same process)
                        Rb = base[0]._rank_alloc(n, B, not nu0)
                        hb = np.zeros(2, dtype=np.int64)
                        wb = _scratch(base[1], n)
                        t0 = time.process_time()
                        base[2](nu0, ls0, sigma, nu, div, Rb, olds, news, wb, hb, True)
                        tb.append(time.process_time() - t0)
                    hst[:] = 0
                    work = _hull_scratch(n)  # a cold warm-start cache, as a pass starts
                    t0 = time.process_time()
                    REPLAY(nu0, ls0, sigma, nu, div, R, olds, news, work, hst, query)
                    ts.append(time.process_time() - t0)
                cell[lab + "_ns"] = min(ts) / n * 1e9
                if tb:
                    cell["base_step_ns"] = min(tb) / n * 1e9
            cell.update(newton=hst[0] / n, chunks=hst[1] / n,
                        ratio=cell["step_ns"] * 1e-9 * n / t_full)
            rows.append(cell)
            ab = ""
            if base is not None:
                ab = (f" {cell['base_step_ns']:.0f} | "
                      f"{cell['step_ns'] / cell['base_step_ns']:.2f} |")
            log(f"| {n:,} | {name} | {cost} | {start} | {B} | {t_full * 1e3:.2f} | "
                f"{cell['update_ns']:.0f} | {cell['step_ns'] - cell['update_ns']:.0f} | "
                f"{cell['step_ns']:.0f} | {cell['ratio']:.1f} | {cell['newton']:.2f} | "
                f"{cell['chunks']:.2f} |" + ab)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=[20000, 200000])
    ap.add_argument("--chunks", nargs="+", type=int, default=[16, 32, 64, 128])
    ap.add_argument("--cases", nargs="+",
                    default=["esrm:none", "esrm:chi2", "esrm:kl", "user:chi2"])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "prospect_incremental"))
    ap.add_argument("--base-src", default=None,
                    help="the src folder of a checkout whose oracles replay alongside")
    args = ap.parse_args()
    base = None
    if args.base_src:
        rk, ho = load_base(args.base_src)
        base = (rk, ho, make_replay(rk, ho))
    started, t0 = now(), time.perf_counter()
    log, lines = make_log()

    log("# Rank / hull oracle: CPU ns per Prospect step, replayed, by chunk size B")
    log("")
    log("Loss changes of one real pass (K = 1 squared loss, d = 20), replayed per B. update: "
        "the replacements alone; query: step - update; step x n / one value_grad (CPU, same "
        "process) = the oracle's share of a pass in full gradients. One BLAS thread; the "
        "machine was shared (load in the JSON).")
    log("")
    log("| n | spectrum | cost | start | B | value_grad ms | update ns | query ns | step ns | "
        "oracle / value_grad | Newton it./query | chunks/query |"
        + (" before step ns | after / before |" if base else ""))
    log("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if base else ""))
    rows = []
    for n in args.sizes:
        for c in args.cases:
            name, cost = c.split(":")
            rows += case_rows(name, cost, n, args.chunks, log, base)
    write_results(args, "oracle_steps", "benchmarks/prospect_oracle_steps.py", lines, rows,
                  started, t0)


def make_log():
    """``(log, lines)``: ``log(s)`` prints ``s`` and keeps it in ``lines``."""
    lines = []

    def log(s=""):
        print(s, flush=True)
        lines.append(s)
    return log, lines


def write_results(args, stem, script, lines, rows, started, t0):
    """``<stem>_<sizes>.md`` (the printed table) and ``.json`` (rows, commit, machine, load)
    to ``args.out``, atomically."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "_".join(str(n) for n in args.sizes)
    meta = dict(script=script, started=started, finished=now(),
                wall_seconds=round(time.perf_counter() - t0, 1), git_commit=_git_commit(),
                cpu=_cpu_info(), versions=_versions(), args=vars(args), load=os.getloadavg(),
                rows=rows)
    pi._write_atomic(out / f"{stem}_{tag}.md", "\n".join(lines) + "\n")
    pi._write_atomic(out / f"{stem}_{tag}.json", json.dumps(meta, indent=2, default=float) + "\n")
    print(f"\nwrote {out}/{stem}_{tag}.md and .json")


if __name__ == "__main__":
    main()
