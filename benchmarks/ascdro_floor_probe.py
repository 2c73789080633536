"""ASCDRO started at lambda's floor (stop 43, task kl3): what blows up, and what changes it.

The problem of ``riskopt.torch.optim._drive`` (48 rows, an 8-unit MLP, squared loss; its
batches of 12, 12, 9, 16, 1 rows), radius 0.5, ``lam_init = shift_cost = 1e-3``, 60 steps,
``on_divergence="raise"``, float64 and float32, ASCDRO and RASCDRO (``stage_steps=2``) at
lr 0.1 / 0.01 / 0.001. Three settings of each run:

* ``old``: the stale-estimator restart off (``opt._stale = inf``: the code before it);
* ``new``: as shipped (restart where the rescaled ``s`` exceeds ``exp(600)``, float32
  estimators ``exp(60)``);
* ``lam_init=1``: as shipped, lambda started at the losses' scale (the default).

Each row: how the run ended (the step and the first words of the ``DivergenceError``, or
"ok"), the final lambda and the mean loss over the 48 rows (the start: 0.696 in float64,
0.531 in float32). Then the linear-model solver ``riskopt.solvers.ASCDRO`` (the NumPy /
numba kernel: its lambda moves at most 11 % a step, ``LAM_FACTOR``) on the same X, y
(``fit_intercept=True``, batch 12, 15 passes = 60 steps) from ``lam0`` 1e-3 and 1: lambda
after each pass, and the final value of the objective against the exact optimum.

    python benchmarks/ascdro_floor_probe.py [--steps 60]
        [--out benchmarks/results/ascdro_floor_probe]

Writes ``results.json`` and ``results.md``.
"""
import argparse
import math
import os
import warnings

import numpy as np
import torch

import riskopt as ro
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.torch.optim import _drive as D

SETTINGS = {"old": dict(lam_init=1e-3, stale=math.inf), "new": dict(lam_init=1e-3),
            "lam_init=1": dict(lam_init=1.0)}


def run(variant, setting, lr, dtype, steps):
    kw = dict(SETTINGS[setting])
    stale = kw.pop("stale", None)
    X, y, groups, model = D.make_problem(dtype=dtype)
    opt = D.make_optimizer(variant, model.parameters(), X.shape[0], 4, lr=lr,
                           on_divergence="raise", **kw)
    if stale is not None:
        opt._stale = stale
    end, done = "ok", 0
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            for idx in D.batches(X.shape[0], steps):
                D.drive_step("ascdro", opt, model, model, X, y, groups, idx)
                done += 1
        except ro.torch.optim.DivergenceError as e:
            end = f"step {done + 1}: {str(e)[:80]}"
        with torch.no_grad():
            loss = float(D._losses(model(X), y).mean())
    return dict(variant=variant, setting=setting, lr=lr, dtype=str(dtype)[6:], steps=done,
                lam=opt.lam, mean_loss=loss, end=end)


def solver_rows():
    X, y, _, _ = D.make_problem()
    obj = ro.Objective("squared", ro.KLDRO(radius=0.5), X.numpy(), y.numpy(),
                       fit_intercept=True)
    ref = obj.reference_solution()
    rows = []
    for lam0 in (1e-3, 1.0):
        for lr in (0.1, 0.01, 0.001):
            s = ro.solvers.get("ascdro", lr=lr, beta=0.5, batch_size=12, lam0=lam0,
                               random_state=0)
            st, lams = s.init_state(obj), []
            for _ in range(15):
                st = s.update(obj, st)
                lams.append(float(st.lam))
            rows.append(dict(lam0=lam0, lr=lr, finite=bool(s._finite(st)), lams=lams,
                             value=float(obj.value(st.coef)), optimum=float(ref.value)))
    return rows


def markdown(res):
    out = ["# ASCDRO from lambda's floor", "",
           "`python benchmarks/ascdro_floor_probe.py` (see its docstring).", "",
           "| variant | setting | lr | dtype | steps | lambda | mean loss | end |",
           "|---|---|---|---|---|---|---|---|"]
    for r in res["torch"]:
        out.append(f"| {r['variant']} | {r['setting']} | {r['lr']:g} | {r['dtype']} | "
                   f"{r['steps']} | {r['lam']:.4g} | {r['mean_loss']:.4g} | {r['end']} |")
    out += ["", "NumPy solver `riskopt.solvers.ASCDRO` (linear model), same data:", "",
            "| lam0 | lr | finite | lambda after passes 1, 5, 10, 15 | value | optimum |",
            "|---|---|---|---|---|---|"]
    for r in res["solver"]:
        ls = ", ".join(f"{r['lams'][k]:.3g}" for k in (0, 4, 9, 14))
        out.append(f"| {r['lam0']:g} | {r['lr']:g} | {r['finite']} | {ls} | "
                   f"{r['value']:.4g} | {r['optimum']:.4g} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "ascdro_floor_probe"))
    a = ap.parse_args()
    rows = [run(v, s, lr, dt, a.steps) for v in ("ascdro", "rascdro") for s in SETTINGS
            for lr in (0.1, 0.01, 0.001) for dt in (torch.float64, torch.float32)]
    res = dict(steps=a.steps, torch=rows, solver=solver_rows())
    os.makedirs(a.out, exist_ok=True)
    atomic_write_json(os.path.join(a.out, "results.json"), res)
    md = markdown(res)
    atomic_write_text(os.path.join(a.out, "results.md"), md)
    print(md)


if __name__ == "__main__":
    main()
