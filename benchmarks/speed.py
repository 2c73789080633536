"""Speed benchmark: seconds per pass of every stochastic solver, as a ratio to one NumPy
full-batch objective + gradient evaluation on the same data (measured in the same run).

    python benchmarks/speed.py [--datasets kin8nm power] [--passes 5]

For Prospect the script also times the O(n) oracle of its twin path (``Prospect._oracle =
ORACLE_FULL``: re-sort by bubbling + PAV resume + weight lookup, n times) next to a default
pass (the incremental oracle, ``benchmarks/prospect_incremental.py``). Solvers of other
problem families (group DRO, constrained learning) are listed and skipped.
Timings are medians over passes, after a JIT warm-up pass. Everything runs with one BLAS
thread (``threadpoolctl``), the NumPy denominator included: on a small machine a multi-threaded
BLAS makes these small products slower, which would flatter the ratios.
"""
import argparse
import statistics
import time

import numpy as np
from numba import njit

import riskopt as ro
from riskopt._kernels.oracles import _chi2_weight_at, _pav_chi2_resume
from riskopt._kernels.prospect import _resort


def median_time(fn, repeats):
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


@njit(cache=True)
def _oracle_pass(losses, order, rank, sigma, nu, div, idx, newvals):
    """Exactly the oracle part of a Prospect pass (chi2): n single-entry changes of the loss
    table, each bubbled into place, PAV resumed from the lowest moved rank, weight lookup."""
    n = losses.shape[0]
    ls = np.empty(n)
    sums = np.empty(n)
    cnt = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    snap_sum = np.empty(n)
    snap_cnt = np.empty(n, dtype=np.int64)
    for r in range(n):
        ls[r] = losses[order[r]]
    nb = _pav_chi2_resume(ls, sigma, nu, 0, sums, cnt, ends, snap_sum, snap_cnt)
    acc = 0.0
    for t in range(idx.shape[0]):
        i = idx[t]
        acc += _chi2_weight_at(ls, nu, rank[i], sums, cnt, ends, nb)
        losses[i] = newvals[t]
        lo = _resort(order, rank, losses, ls, i)
        nb = _pav_chi2_resume(ls, sigma, nu, lo, sums, cnt, ends, snap_sum, snap_cnt)
    return acc


RU_SOLVERS = {"sgm", "spl", "splplus"}


def objective_for(name, solver, data):
    """CVaR 0.5, mu = 1/n: nu = 0.5 chi2 (nu = 0 for SOREL; RU form for the SPL family)."""
    n = data.X_train.shape[0]
    if name in RU_SOLVERS:
        return ro.RUCVaRObjective(ro.SquaredLoss(), data.X_train, data.y_train, beta=0.5,
                                  l2_reg=1.0 / n)
    nu = 0.0 if name.startswith("sorel") else 0.5
    return ro.Objective(ro.SquaredLoss(), ro.CVaR(0.5, shift_cost=nu), data.X_train,
                        data.y_train, l2_reg=1.0 / n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["kin8nm", "power"])
    ap.add_argument("--passes", type=int, default=5)
    args = ap.parse_args()
    solvers = [s for s in ro.solvers.available() if s not in ("lbfgs", "newton")]  # full-batch
    for dname in args.datasets:
        data = ro.datasets.load(dname)
        n, d = data.X_train.shape
        base_obj = ro.Objective(ro.SquaredLoss(), ro.CVaR(0.5, shift_cost=0.5), data.X_train,
                                data.y_train, l2_reg=1.0 / n)
        w = np.zeros(d)
        base_obj.value_grad(w)  # warm-up
        t_full = median_time(lambda: base_obj.value_grad(w), 21)
        print(f"\n{dname}: n={n}, d={d}; one NumPy full objective+gradient = {t_full * 1e3:.3f} ms")
        print(f"{'solver':<16}{'s/pass':>12}{'ratio':>10}")
        for name in solvers:
            solver = ro.solvers.get(name, lr=1e-3, random_state=0)
            obj = objective_for(name, solver, data)
            if obj.family not in solver.families:  # e.g. the group-DRO / constrained solvers
                print(f"{name:<16}{'(solves ' + ' / '.join(solver.families) + ')':>22}")
                continue
            state = solver.init_state(obj)
            state = solver.update(obj, state)  # JIT warm-up
            times = []
            for _ in range(args.passes):
                idx = solver.draw_indices(obj, state)
                t0 = time.perf_counter()
                state = solver.update(obj, state, indices=idx)
                times.append(time.perf_counter() - t0)
            per_update = statistics.median(times)
            per_pass = per_update / solver.passes_per_update(obj)
            print(f"{name:<16}{per_pass:>12.4g}{per_pass / t_full:>10.2f}")
        # Prospect split: oracle share of a pass
        obj = base_obj
        losses = obj.losses(w) + 1e-3 * np.random.default_rng(0).standard_normal(n)
        order = np.argsort(losses, kind="mergesort")
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        rng = np.random.default_rng(1)
        idx = rng.integers(0, n, size=n)
        newvals = losses[idx] * (1 + 1e-3 * rng.standard_normal(n))
        _oracle_pass(losses.copy(), order.copy(), rank.copy(), obj.sigma, obj.nu, obj.div,
                     idx[:10], newvals[:10])
        t_oracle = median_time(lambda: _oracle_pass(losses.copy(), order.copy(), rank.copy(),
                                                     obj.sigma, obj.nu, obj.div, idx, newvals), 3)
        if "prospect" in solvers:
            solver = ro.solvers.get("prospect", lr=1e-3, random_state=0)
            state = solver.update(obj, solver.init_state(obj))
            t_pass = median_time(lambda: solver.update(obj, state), max(args.passes, 3))
            print(f"prospect pass (incremental oracle, the default) {t_pass:.4g} s; the O(n) "
                  f"oracle of the twin path (bubble + PAV resume + lookup, n times) alone "
                  f"{t_oracle:.4g} s")


if __name__ == "__main__":
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        main()
