"""SCDRO Fig. 1 / 3 (convex) with the paper's protocol: an ERM warm start and a step decay.

    python benchmarks/scdro_warmstart.py [--seeds 5] [--tune-seeds K] [--datasets D,..]
                                         [--out benchmarks/results/scdro_warmstart]

The paper fine-tunes (the last layer of) a model pretrained by ERM for a few epochs and
divides the step size by 10 partway. The ``scdro_convex`` spec trains the linear model from
zero for 20 passes without a decay (except RSCDRO's stages). Here each solver of that spec
(RSCDRO, RASCDRO, SPD, FastDRO, Dual SGM; KL rho = 0.5, lambda_0 = 1e-3, batch 128, the
same data sets) starts from the ERM optimum of the same loss and l2 (the objective's
reference solver on the ``mean`` risk), runs 2 passes at its step size and 1 pass at a tenth of
it (the run continued with its state: estimators, multipliers and random stream kept).
Grids: lr in {0.01, 0.05, 0.1, 0.5, 1}; SPD's dual step in the paper's {1e-5, 5e-5, 1e-4,
5e-4}; Dual SGM's lambda and eta in {0.1, 1, 10}; beta 0.5 for RSCDRO / RASCDRO. Each
solver's setting is tuned on the mean final training objective over the seeds (the spec's
rule; with ``--tune-seeds K`` the grid runs with the first K seeds and the other seeds only at
the setting they chose); reported per seed: the final KL objective ``F(w)``, train and test
accuracy. Writes
``results.csv`` (one row per run) and ``metadata.json``. digits_st: about 5 minutes on a
loaded 2-core machine; adult_st / a9a_st (25,000+ rows) many times that (``--datasets``).
"""
import argparse
import itertools
import json
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd

from riskopt.bench import problems, record_metrics
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit
from riskopt.bench.spec import spec_from_dict
from riskopt.solvers import get

from exact_optima import solve  # noqa: E402 -- the certified Newton / reference solve

_ST = [{"name": "digits_st", "loss": "multinomial"}, {"name": "adult_st", "loss": "logistic"},
       {"name": "a9a_st", "loss": "logistic"}]
SPEC = {"name": "scdro_warmstart", "datasets": _ST, "seeds": [0], "passes": 3, "lr": [0.1],
        "l2_reg": 1e-4, "fit_intercept": True,
        "objectives": ["mean", {"family": "kl_dro", "radius": 0.5, "lam0": 0.001}],
        "solvers": [{"name": "sgd"}]}
LRS = [0.01, 0.05, 0.1, 0.5, 1.0]
GRIDS = {"rscdro": [{"beta": 0.5, "stage_passes": 4}],
         "rascdro": [{"beta": 0.5, "stage_passes": 4}],
         "spd": [{"dual_lr": v} for v in (1e-5, 5e-5, 1e-4, 5e-4)],
         "fastdro": [{}],
         "dual_sgm": [{"lam0": a, "eta0": b} for a, b in itertools.product((0.1, 1.0, 10.0),
                                                                            repeat=2)]}
METRICS = ["train_accuracy", "test_accuracy"]


def run_one(name, lr, params, seed, obj, w0):
    kw = dict(batch_size=128, random_state=seed, **params)
    res = get(name, lr=lr, **kw).run(obj, max_epochs=2, coef0=w0.copy())
    res = get(name, lr=lr / 10, **kw).run(obj, max_epochs=1, state=res.state)
    return np.asarray(res.coef)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--datasets", default="digits_st,adult_st,a9a_st",
                    help="comma-separated, of digits_st, adult_st, a9a_st")
    ap.add_argument("--tune-seeds", type=int, default=None,
                    help="run the grid with the first K seeds only, then the other seeds at "
                         "the setting they chose (default: every seed at every setting)")
    ap.add_argument("--out", default="benchmarks/results/scdro_warmstart")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = Path(a.out)
    keep = a.datasets.split(",")
    # resumable: the (data set, solver) blocks already in OUT/results.csv are kept, and the
    # rows of the data sets not run now
    finished, rows, runs = {}, [], {}
    if (out / "results.csv").exists():
        old = pd.read_csv(out / "results.csv", keep_default_na=False,  # config "" stays ""
                          na_values={c: [""] for c in ("lr", "F", *METRICS)})
        rows = old[~old["dataset"].isin(keep)].to_dict("records")
        for (d, name), g in old[old["solver"] != "erm_start"].groupby(["dataset", "solver"]):
            finished[d, name] = g.to_dict("records")
        meta = json.loads((out / "metadata.json").read_text()) \
            if (out / "metadata.json").exists() else {}
        runs = meta.get("runs") or {d: {"seeds": meta.get("seeds"), "tune_seeds": meta.get(
            "tune_seeds", meta.get("seeds")), "git_commit": meta.get("git_commit")}
            for d in str(meta.get("datasets", "")).split(",") if d}
    for d, g in pd.DataFrame(rows, columns=["dataset", "solver", "config", "lr", "seed"]
                             ).groupby("dataset"):
        if d not in runs:  # rows of an older invocation without a per-data-set record
            g = g[g["solver"] != "erm_start"]
            n = g.groupby(["solver", "config", "lr"], dropna=False).size()
            runs[d] = {"seeds": int(n.max()), "tune_seeds": int(n.min()), "git_commit": None}
    for d in keep:
        runs[d] = {"seeds": a.seeds, "tune_seeds": a.tune_seeds or a.seeds,
                   "git_commit": _git_commit()}
    spec = spec_from_dict({**SPEC, "datasets": [d for d in _ST if d["name"] in keep]},
                          check_registry=False)
    for d in spec.datasets:
        p_erm, p_kl = (spec.problem_description(d, j) for j in (0, 1))
        erm, obj = problems.build(p_erm).objective, problems.build(p_kl).objective
        w0 = np.asarray(solve(erm)[0])
        start = {"F": float(obj.value(w0))}
        m0 = record_metrics.compute_for_problem(METRICS, p_kl, obj, w0[None])
        start.update({k: float(np.asarray(m0[record_metrics.column(k)])[0]) for k in METRICS})
        rows.append({"dataset": d, "solver": "erm_start", "config": "", "lr": np.nan,
                     "seed": -1, **start})
        tune = a.seeds if a.tune_seeds is None else min(a.tune_seeds, a.seeds)

        def one(name, lr, params, seed):
            cfg = ",".join(f"{k}={v:g}" for k, v in params.items())
            with np.errstate(all="ignore"):
                w = run_one(name, lr, params, seed, obj, w0)
            ok = bool(np.all(np.isfinite(w)))
            m = record_metrics.compute_for_problem(METRICS, p_kl, obj, w[None]) \
                if ok else {record_metrics.column(k): [np.nan] for k in METRICS}
            return {"dataset": d, "solver": name, "config": cfg, "lr": lr, "seed": seed,
                    "F": float(obj.value(w)) if ok else np.inf,
                    **{k: float(np.asarray(m[record_metrics.column(k)])[0]) for k in METRICS}}

        for name, grid in GRIDS.items():
            if (d, name) in finished:
                rows += finished[d, name]
                continue
            mine = [one(name, lr, params, seed) for lr, params in itertools.product(LRS, grid)
                    for seed in range(tune)]
            if tune < a.seeds:  # the other seeds at the setting the first ones chose
                f = pd.DataFrame(mine).groupby(["lr", "config"], sort=False)["F"].mean()
                lr, cfg = f.idxmin()
                params = next(p for p in grid
                              if ",".join(f"{k}={v:g}" for k, v in p.items()) == cfg)
                mine += [one(name, lr, params, seed) for seed in range(tune, a.seeds)]
            rows += mine
            print(f"{d} {name}: {time.perf_counter() - t0:.0f} s", flush=True)
            write(out, rows, runs, t0)   # after every solver: a partial table (resumable)
    write(out, rows, runs, t0)
    print(f"wrote {out}/results.csv ({len(rows)} rows, {time.perf_counter() - t0:.0f} s)")


def write(out, rows, runs, t0):
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.csv", pd.DataFrame(rows).to_csv(index=False))
    atomic_write_json(out / "metadata.json", {
        "script": "benchmarks/scdro_warmstart.py", "datasets": ",".join(runs),
        "runs": runs,   # per data set: seeds, the seeds the grid ran with, the commit
        "lr": LRS, "grids": {k: v for k, v in GRIDS.items()},
        "passes": "2 at lr, 1 at lr / 10", "python": platform.python_version(),
        "seconds_last_invocation": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
