"""How far a query cache that keeps the hull oracle's certified segment across updates can take
Prospect's step (issue 31, stop 42 item 1): its hit rate with exact margins, and the step's
cost when every query hits.

    python benchmarks/prospect_certificate.py [--sizes 20000] [--cases esrm:chi2 esrm:kl
        user:chi2 extremile:kl] [--steps 0] [--out benchmarks/results/...]

The design measured: ``hull_oracle._hull_weight`` certifies the GCM segment ``(p, q)`` over the
queried rank ``r`` (``G_s(k) >= G_s(p) = G_s(q)`` for every ``k``, ``s`` the segment's slope).
Keep that segment for the ranks it covers with a margin per side, ``mL = min_{k < p} G_s(k) -
G_s(p)`` and ``mR = min_{k > q} G_s(k) - G_s(q)``, and answer a later query from it, with no
search, while it stays certified. An update of one loss ``old -> new`` changes the cumulative
diagram by ``dY(k)``: ``0`` for ``k <= lo = #{l < min(old, new)}``, ``df = f(new) - f(old)``
(the term change) for ``k >= hi = #{l <= max(old, new)}``, monotone in between. So

* a segment with ``lo < q`` and ``hi > p`` (the update's ranks reach inside it) changes its
  slope: the certificate is lost (``crossed``);
* ``hi <= p`` (the update left of it): the slope stays, the points left of ``p`` drop by at
  most ``max(df, 0)`` relative to ``p``: ``mL`` is spent by that;
* ``lo >= q`` (right of it): ``mR`` is spent by ``max(-df, 0)``;

and the certificate holds while neither margin is spent (``spent``). The simulation files the
segment found by a query that misses for the slots it covers (``hull_oracle.CACHE_SHIFT`` /
``CACHE_SPAN``, as the warm-start cache does) with the margins computed exactly by an O(n) scan
(any cheaper margin is a lower bound of these: this hit rate is an upper bound for the
design), and on a hit keeps the entry and its spent margins (a hit cannot renew them without
the search). Each predicted hit is checked against the segment the real query finds (the slope
of the cached segment equals the true one to 1e-12, else ``wrong``: the argument above fails).

``floor``: the step when every query hits and the hit costs nothing to check: the located rank
of the loss, the two ends located and the range sum of the certified segment (the query's own
final step, ``hull_oracle._locate_pq`` / ``_range_at``), then the update, replayed on the same
loss changes as ``step`` (the whole oracle step of today, ``prospect_oracle_steps.REPLAY``),
the two timed alternately in this process, CPU, best of 3. ``floor x n / value_grad``: the
oracle's share of a pass in full gradients if the cache were perfect; the pass's goal is 20
full gradients of which the rest of a pass (the O(d) step, the end-of-pass sort and PAV) takes
about 7 (stop 39's profile), so the oracle's budget is about 13.

``--steps m``: the certificate simulation over the first ``m`` steps of the pass only (0: the
whole pass; it costs O(n) per miss, O(n^2) in all). Writes ``certificate_<sizes>.md`` /
``.json`` to ``--out``, atomically.
"""
import argparse
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
import prospect_oracle_steps as pos  # noqa: E402
from riskopt._kernels.hull_oracle import (CACHE_SHIFT, CACHE_SPAN, _hull_build,  # noqa: E402
                                          _hull_move, _hull_replace, _hull_scratch,
                                          _hull_weight, _locate_pq, _range_at, hull_chunk)
from riskopt._kernels.rank_oracle import (_fterm, _rank_alloc, _rank_count,  # noqa: E402
                                          _rank_locate, _rank_values)
from riskopt.bench._meta import now  # noqa: E402


@njit(cache=True)
def _segment_weight(R, x, p, q):
    """The weight of ``x`` from the certified segment ``(p, q)``: ``_hull_weight``'s last
    step (both ends located in one descent, the range sum, the slope)."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    j0, P0, A0, j1, P1, A1 = _locate_pq(R, p, q)
    dy = _range_at(R, p, q, j0, P0, j1, P1)
    ds = (Shi[q] - Shi[p]) + (Slo[q] - Slo[p])
    if fpar[3] == 0.0:
        c = (dy - fpar[2] * ds) / (q - p)
        v = ((x - fpar[0]) - c) / fpar[2]
        return v if v > 0.0 else 0.0
    return _fterm(fpar, x) * (ds / dy)


@njit(cache=True)
def _margins(R, p, q, ls, G):
    """``(mL, mR, tol)`` of the segment ``(p, q)`` by an O(n) scan (``tol``: the rounding
    allowance of ``_hull_weight`` at ``p`` and ``q``)."""
    Shi, Slo, fpar = R[7], R[8], R[14]
    n = _rank_values(R, ls)
    Y = np.empty(n + 1)
    Y[0] = 0.0
    for k in range(n):
        Y[k + 1] = Y[k] + _fterm(fpar, ls[k])
    S = Shi + Slo
    chi2 = fpar[3] == 0.0
    if chi2:
        s = ((Y[q] - Y[p]) - fpar[2] * (S[q] - S[p])) / (q - p)
    else:
        s = (Y[q] - Y[p]) / (S[q] - S[p])
    for k in range(n + 1):
        G[k] = Y[k] - (fpar[2] * S[k] + s * k if chi2 else s * S[k])
    mL = np.inf
    for k in range(p):
        mL = min(mL, G[k] - G[p])
    mR = np.inf
    for k in range(q + 1, n + 1):
        mR = min(mR, G[k] - G[q])
    # the query's own rounding allowance at p and q (hull_oracle._hull_weight: tp, tq)
    tol = 16.0 * 2.220446049250313e-16 * (abs(Y[p]) + abs(G[p] - Y[p]) + abs(Y[q])
                                          + abs(G[q] - Y[q]))
    return mL, mR, tol


@njit(cache=True)
def simulate(ls0, sigma, nu, div, R, olds, news, steps, out):
    """The certificate cache over the first ``steps`` loss changes (see the module
    docstring); ``out`` = [queries, hits, wrong, no entry, crossed, spent, rebuilds, sum of
    the segments' lengths q - p, sum of the updates' rank spans hi - lo, segments filed
    with a margin already within the rounding allowance, updates that split or merged a
    chunk]."""
    _hull_build(ls0, sigma, nu, div, R)
    n = ls0.shape[0]
    work = _hull_scratch(n)
    hst = np.zeros(2, dtype=np.int64)
    m = (n >> CACHE_SHIFT) + 2
    ep = np.full(m, -1, dtype=np.int64)
    eq = np.full(m, -1, dtype=np.int64)
    why = np.zeros(m, dtype=np.int64)  # 0 valid, 1 none, 2 crossed, 3 spent
    why[:] = 1
    remL = np.zeros(m)
    remR = np.zeros(m)
    ls = np.empty(n)
    G = np.empty(n + 1)
    fpar = R[14]
    for t in range(steps):
        x = olds[t]
        r = _rank_count(R, x, False) + 1
        slot = r >> CACHE_SHIFT
        qv = _hull_weight(R, x, work, hst)
        if qv == qv:
            out[0] += 1
            p = work[4][slot]
            q = work[5][slot]
            out[7] += q - p
            if why[slot] == 0 and ep[slot] < r <= eq[slot]:
                out[1] += 1
                qc = _segment_weight(R, x, ep[slot], eq[slot])
                if not abs(qc - qv) <= 1e-12 * abs(qv):
                    out[2] += 1
            else:
                if why[slot] == 1 or not ep[slot] < r <= eq[slot]:
                    out[3] += 1  # no entry covers r
                elif why[slot] == 2:
                    out[4] += 1
                else:
                    out[5] += 1
                mL, mR, tol = _margins(R, p, q, ls, G)
                s0 = max((p + 1) >> CACHE_SHIFT, slot - CACHE_SPAN)
                s1 = min(q >> CACHE_SHIFT, slot + CACHE_SPAN, m - 1)
                for k in range(s0, s1 + 1):
                    ep[k] = p
                    eq[k] = q
                    remL[k] = mL - tol
                    remR[k] = mR - tol
                    why[k] = 0 if (mL > tol and mR > tol) else 3
                out[9] += mL <= tol or mR <= tol
        new = news[t]
        lo = _rank_count(R, min(x, new), False)
        hi = _rank_count(R, max(x, new), True)
        df = _fterm(fpar, new) - _fterm(fpar, x)
        out[8] += hi - lo
        nc = R[5][0]
        if not _hull_move(R, x, new):
            _hull_replace(R, sigma, x, new)
            out[6] += 1
            why[:] = 1
            continue
        out[10] += R[5][0] != nc  # a split or a merge: O(n / B) relayout
        for k in range(m):
            if why[k] != 0:
                continue
            if lo < eq[k] and hi > ep[k]:
                why[k] = 2
            elif hi <= ep[k]:
                remL[k] -= max(df, 0.0)
                if remL[k] <= 0.0:
                    why[k] = 3
            elif lo >= eq[k]:
                remR[k] -= max(-df, 0.0)
                if remR[k] <= 0.0:
                    why[k] = 3


@njit(cache=True)
def segments(ls0, sigma, nu, div, R, olds, news, ps, qs, qv):
    """The certified segment and weight of every query of the replay (``ps[t] < 0``: the
    query did not settle)."""
    _hull_build(ls0, sigma, nu, div, R)
    work = _hull_scratch(ls0.shape[0])
    hst = np.zeros(2, dtype=np.int64)
    for t in range(olds.shape[0]):
        x = olds[t]
        slot = (_rank_count(R, x, False) + 1) >> CACHE_SHIFT
        qv[t] = _hull_weight(R, x, work, hst)
        ps[t] = work[4][slot] if qv[t] == qv[t] else -1
        qs[t] = work[5][slot]
        if not _hull_move(R, x, news[t]):
            _hull_replace(R, sigma, x, news[t])


@njit(cache=True)
def floor_run(ls0, sigma, nu, div, R, olds, news, ps, qs, qv):
    """The replay with every query answered from its certified segment at no check cost:
    the rank located, the segment's weight, the update (``qv``: the weights)."""
    _hull_build(ls0, sigma, nu, div, R)
    for t in range(olds.shape[0]):
        x = olds[t]
        _rank_locate(R, x)
        if ps[t] >= 0:
            qv[t] = _segment_weight(R, x, ps[t], qs[t])
        if not _hull_move(R, x, news[t]):
            _hull_replace(R, sigma, x, news[t])


def case_rows(name, cost, n, steps, log):
    obj = pi.spectra_objective(name, cost, n)
    t_full = pi.full_eval_seconds(obj, 11, time.process_time)
    nu, div, sigma = obj.nu, obj.div, obj.sigma
    B = hull_chunk(n)
    rows = []
    for start in ("default", "optimum"):
        ls0, olds, news = pos.record_pass(obj, start, B)
        ps, qs, qv, qf = (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
                          np.empty(n), np.full(n, np.nan))
        segments(ls0, sigma, nu, div, _rank_alloc(n, B, True), olds, news, ps, qs, qv)
        ok = ps >= 0
        t_step, t_floor, t_upd = [], [], []
        for _ in range(3):  # alternately, same process
            R = _rank_alloc(n, B, True)
            work, hst = _hull_scratch(n), np.zeros(2, dtype=np.int64)
            t0 = time.process_time()
            pos.REPLAY(False, ls0, sigma, nu, div, R, olds, news, work, hst, True)
            t_step.append(time.process_time() - t0)
            R = _rank_alloc(n, B, True)
            t0 = time.process_time()
            floor_run(ls0, sigma, nu, div, R, olds, news, ps, qs, qf)
            t_floor.append(time.process_time() - t0)
            R = _rank_alloc(n, B, True)
            t0 = time.process_time()
            pos.REPLAY(False, ls0, sigma, nu, div, R, olds, news, work, hst, False)
            t_upd.append(time.process_time() - t0)
        err = float(np.max(np.abs(qf[ok] - qv[ok]) / np.maximum(np.abs(qv[ok]), 1e-300)))
        m = n if steps <= 0 else min(steps, n)
        out = np.zeros(11, dtype=np.int64)
        t0 = time.process_time()
        simulate(ls0, sigma, nu, div, _rank_alloc(n, B, True), olds, news, m, out)
        t_sim = time.process_time() - t0
        nq = max(int(out[0]), 1)
        cell = dict(n=n, spectrum=name, cost=cost, start=start, B=B, full_eval=t_full,
                    step_ns=min(t_step) / n * 1e9, floor_ns=min(t_floor) / n * 1e9,
                    update_ns=min(t_upd) / n * 1e9,
                    floor_max_rel_err=err, unsettled=int((~ok).sum()), steps=m,
                    queries=int(out[0]), hits=int(out[1]), wrong=int(out[2]),
                    born_spent=int(out[9]), miss_none=int(out[3]),
                    miss_crossed=int(out[4]), miss_spent=int(out[5]),
                    rebuilds=int(out[6]), seg_len=out[7] / nq, update_span=out[8] / m,
                    relayouts=out[10] / m, chunks=n // B,
                    sim_seconds=t_sim)
        cell.update(hit_rate=cell["hits"] / nq,
                    step_fg=cell["step_ns"] * 1e-9 * n / t_full,
                    floor_fg=cell["floor_ns"] * 1e-9 * n / t_full,
                    budget_ns=13 * t_full / n * 1e9)
        rows.append(cell)
        log(f"| {n:,} | {name} | {cost} | {start} | {t_full * 1e3:.2f} | "
            f"{cell['budget_ns']:.0f} | {cell['step_ns']:.0f} | {cell['floor_ns']:.0f} | "
            f"{cell['step_fg']:.1f} | {cell['floor_fg']:.1f} | {err:.1e} | {m:,} | "
            f"{cell['hit_rate']:.3f} | {cell['miss_none'] / nq:.3f} | "
            f"{cell['miss_crossed'] / nq:.3f} | {cell['miss_spent'] / nq:.3f} | "
            f"{cell['wrong']} | {cell['seg_len']:.1f} | {cell['update_span']:.1f} | "
            f"{cell['born_spent'] / nq:.3f} | {cell['update_ns']:.0f} | "
            f"{cell['relayouts']:.4f} |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=[20000])
    ap.add_argument("--cases", nargs="+",
                    default=["esrm:chi2", "esrm:kl", "user:chi2", "extremile:kl"])
    ap.add_argument("--steps", type=int, default=0,
                    help="simulate the certificate cache over this many steps (0: all)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "prospect_incremental"))
    args = ap.parse_args()
    started, t0 = now(), time.perf_counter()
    log, lines = pos.make_log()

    log("# Hull oracle: a certificate cache across updates, its hit rate and its floor")
    log("")
    log("One real pass's loss changes (K = 1 squared loss, d = 20), replayed. budget: 13 x "
        "value_grad / n (the oracle's share of a 20-full-gradient pass); step: today's query "
        "+ update; floor: every query answered from its certified segment at no check cost "
        "(+ update), timed alternately with step, CPU, best of 3; x fg: x n / value_grad. "
        "hit / miss rates: the certificate cache with exact margins over the first `steps` "
        "steps (an upper bound of the design's hit rate); wrong: hits whose cached weight "
        "differs from the query's by more than 1e-12 (must be 0); segment q - p: the "
        "certified segment's length, mean over queries; update span: hi - lo, the ranks on "
        "which an update's change of the diagram is not constant, mean over steps; filed spent: "
        "misses whose new segment has a margin within the rounding allowance already (per "
        "query); update ns: the updates alone; split / merge per update: the updates that "
        "changed the number of chunks (each an O(n / B) relayout of the Fenwick and segment "
        "trees; a share of two chunks, also O(n / B), is not counted). One BLAS "
        "thread; the machine was shared (load in the JSON).")
    log("")
    log("| n | spectrum | cost | start | value_grad ms | budget ns | step ns | floor ns | "
        "step x fg | floor x fg | floor rel. err | steps | hit | miss: none | miss: crossed | "
        "miss: spent | wrong | segment q - p | update span | filed spent | update ns | "
        "split / merge per update |")
    log("|---:|---|---|---|" + "---:|" * 18)
    rows = []
    for n in args.sizes:
        for c in args.cases:
            name, cost = c.split(":")
            rows += case_rows(name, cost, n, args.steps, log)
    pos.write_results(args, "certificate", "benchmarks/prospect_certificate.py", lines, rows,
                      started, t0)

if __name__ == "__main__":
    main()
