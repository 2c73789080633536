"""RSCDRO's collapsed multiplier and Dual SGM's capped exponents on adult_st (stop 39, task
i28b): the per-pass trajectory of one setting of ``scdro_convex_binary_tune`` each, from the
zero start with ``lambda_0 = 1e-3``, radius 0.5, l2 1e-4, batch 128, seed 0.

    RISKOPT_DATA=... python benchmarks/scdro_lambda_collapse.py [--passes 6] [--grid 20]
                                     [--out benchmarks/results/scdro_lambda_collapse]

Each pass is one ``run(obj, 1, state=...)`` (resumed bit for bit), so the run goes on after the
solver's divergence test fires; the pass where it fires and its message are recorded (each call
is judged against its own start, the previous pass's point). Then the same setting as one run
of ``--passes`` passes: where it stops, and its message. Per pass:
the multiplier ``lam`` (and Dual SGM's ``eta``), the exact ``F(w)`` of the iterate, the
compositional ``F(w, lam)``, the relative suboptimality of the reported point against the
exact optimum, ``|w|``. The RSCDRO rows also run the NumPy twin (``tests/reference_impl``,
written from the paper's equations) on the same sample indices without the ``LAM_FACTOR``
bound on a step of ``lambda``: the collapse is the algorithm's (see ``_KLBase._failed``).
Writes ``results.json`` and ``results.md``. ``--grid PASSES``: instead, every setting of the two
solvers in the spec's grid (15 RSCDRO, 45 Dual SGM), one run each: where and why it stopped
(``grid.md``, ``grid.json``).
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

import riskopt as ro
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench.problems import load_dataset

SETTINGS = [("rscdro", dict(lr=0.01, beta=0.9, stage_passes=4)),
            ("dual_sgm", dict(lr=0.05, lam0=10.0, eta0=1.0))]


def objective():
    X, y = load_dataset("adult_st", "paper")
    return ro.Objective("logistic", ro.KLDRO(radius=0.5, shift_cost=1e-3), X, y, l2_reg=1e-4,
                        fit_intercept=True)


def trajectory(obj, f_star, name, params, passes):
    solver = ro.solvers.get(name, batch_size=128, random_state=0, **params)
    rows, res, fired = [], None, None
    for k in range(passes):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = solver.run(obj, 1, state=None if res is None else res.state)
        st, W = res.state, res.state.coef
        for w in caught:
            text = str(w.message)
            if fired is None and ("collapsed" in text or "cap 50" in text
                                  or "objective reached" in text):
                fired = dict(pass_=k + 1, message=text)
        lam = float(st.lam)
        rows.append(dict(passes=k + 1, lam=lam, eta=float(getattr(st, "eta", np.nan)),
                         F_iterate=float(obj.value(W)), F_lam=float(obj.value(W, (lam,))),
                         rel_subopt=float((res.value - f_star) / f_star),
                         norm_w=float(np.linalg.norm(W)), diverged=bool(res.diverged)))
        print(name, rows[-1], flush=True)
    # the same setting as one run: where it stops and what it says
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = ro.solvers.get(name, batch_size=128, random_state=0, **params).run(obj, passes)
    one = dict(n_epochs=int(res.n_epochs), diverged=bool(res.diverged), message=res.message,
               rel_subopt=float((res.value - f_star) / f_star),
               warnings=[str(w.message) for w in caught])
    return rows, fired, one


def twin_lambda(obj, params, passes, bound):
    """The twin's ``lam`` after each pass (indices drawn as the solver draws them)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from reference_impl import scdro as twin
    solver = ro.solvers.get("rscdro", batch_size=128, random_state=0, **params)
    mu, stage_len, t0 = solver._sched(obj)
    lo, hi = obj.lam_bounds()
    step = twin.step
    if not bound:   # the paper's projected step: lam <- clip(lam - eta u, lo, hi)
        def step(W, lam, G, zl, o, mu_, eta, lo_, hi_, R):
            W = W - eta * (G + (o.reg[:, None] + mu_) * W)
            return W, float(np.clip(lam - eta * (zl + mu_ * lam), lo_, hi_))
    rng = np.random.default_rng(0)
    nb = obj.n // 128
    batches = np.concatenate([rng.integers(0, obj.n, size=(nb, 128)) for _ in range(passes)])
    saved, twin.step = twin.step, step
    try:
        traj = twin.moving_average(obj, np.zeros((obj.X.shape[1], 1)), min(max(1.0, lo), hi),
                                   batches, solver.lr, solver.beta, mode=1,
                                   stage_len=stage_len, lo=lo, hi=hi)
    finally:
        twin.step = saved
    return [float(traj[(k + 1) * nb - 1][1]) for k in range(passes)]


GRID_LR = [0.01, 0.05, 0.1, 0.5, 1.0]
GRIDS = {"rscdro": [dict(stage_passes=4, beta=b) for b in (0.1, 0.5, 0.9)],
         "dual_sgm": [dict(lam0=a, eta0=e) for a in (0.1, 1.0, 10.0) for e in (0.1, 1.0, 10.0)]}


def grid(obj, f_star, passes):
    """Every setting of the two solvers in ``scdro_convex_binary_tune``'s grid, one run of
    ``passes`` passes each: where it stops and why."""
    rows = []
    for name, settings in GRIDS.items():
        for extra in settings:
            for lr in GRID_LR:
                params = dict(lr=lr, **extra)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = ro.solvers.get(name, batch_size=128, random_state=0,
                                         **params).run(obj, passes)
                msg = res.message
                kind = ("lambda collapsed" if "collapsed" in msg else "exponent capped"
                        if "cap 50" in msg else "F rose (per pass)" if "reached" in msg
                        else "F rose (end)" if "ended at" in msg else "non-finite"
                        if "non-finite" in msg else "ran to the end")
                rows.append(dict(solver=name, params=params, n_epochs=int(res.n_epochs),
                                 diverged=bool(res.diverged), kind=kind, message=msg,
                                 lam=float(res.state.lam),
                                 rel_subopt=float((res.value - f_star) / f_star)))
                print(rows[-1]["solver"], params, kind, res.n_epochs, flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "scdro_lambda_collapse"))
    ap.add_argument("--grid", type=int, default=0, metavar="PASSES",
                    help="instead: every grid setting of rscdro and dual_sgm, one run of "
                         "PASSES passes each (writes grid.md / grid.json)")
    args = ap.parse_args()
    t0 = time.time()
    obj = objective()
    ref = obj.reference_solution()
    f_star, lam_star = float(ref.value), float(ref.aux[0])
    if args.grid:
        rows = grid(obj, f_star, args.grid)
        lines = [f"# adult_st grid of scdro_convex_binary_tune, seed 0, {args.grid} passes", "",
                 "| solver | setting | stopped after | why | lambda at the end | "
                 "rel. subopt. of its point |", "|---|---|---:|---|---:|---:|"]
        lines += [f"| {r['solver']} | {r['params']} | {r['n_epochs']} | {r['kind']} | "
                  f"{r['lam']:.4g} | {r['rel_subopt']:.3g} |" for r in rows]
        atomic_write_text(os.path.join(args.out, "grid.md"), "\n".join(lines) + "\n")
        atomic_write_json(os.path.join(args.out, "grid.json"),
                          dict(f_star=f_star, passes=args.grid, rows=rows,
                               wall_seconds=round(time.time() - t0, 1)))
        print("\n".join(lines))
        return
    out = dict(f_star=f_star, lam_star=lam_star, lam_bounds=list(obj.lam_bounds()), runs=[])
    lines = [f"# adult_st, lambda_0 = 1e-3, radius 0.5: per-pass trajectories (seed 0)", "",
             f"F* = {f_star:.6g}, lambda* = {lam_star:.4g}, lambda box = "
             f"[{obj.lam_bounds()[0]:g}, {obj.lam_bounds()[1]:.4g}]", ""]
    for name, params in SETTINGS:
        rows, fired, one = trajectory(obj, f_star, name, params, args.passes)
        run = dict(solver=name, params=params, rows=rows, fired=fired, one_run=one)
        if name == "rscdro":
            run["twin_lam_bounded"] = twin_lambda(obj, params, args.passes, True)
            run["twin_lam_paper"] = twin_lambda(obj, params, args.passes, False)
        out["runs"].append(run)
        lines += [f"## {name} {params}", "",
                  "the divergence test fired: " + (f"pass {fired['pass_']}: {fired['message']}"
                                                   if fired else "never"), "",
                  f"one run of {args.passes} passes: stopped after {one['n_epochs']} updates, "
                  f"diverged = {one['diverged']}, relative suboptimality of its point "
                  f"{one['rel_subopt']:.3g}; message: {one['message']}", "",
                  "| pass | lam | eta | F(w) | F(w, lam) | rel. subopt. (reported) | |w| |"
                  + (" twin lam (LAM_FACTOR) | twin lam (paper step) |" if name == "rscdro"
                     else ""),
                  "|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if name == "rscdro"
                                                            else "")]
        for i, r in enumerate(rows):
            extra = (f" {run['twin_lam_bounded'][i]:.4g} | {run['twin_lam_paper'][i]:.4g} |"
                     if name == "rscdro" else "")
            lines.append(f"| {r['passes']} | {r['lam']:.4g} | {r['eta']:.4g} | "
                         f"{r['F_iterate']:.5g} | {r['F_lam']:.4g} | {r['rel_subopt']:.3g} | "
                         f"{r['norm_w']:.4g} |" + extra)
        lines.append("")
    out["wall_seconds"] = round(time.time() - t0, 1)
    atomic_write_text(os.path.join(args.out, "results.md"), "\n".join(lines) + "\n")
    atomic_write_json(os.path.join(args.out, "results.json"), out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
