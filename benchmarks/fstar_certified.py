"""Certify the reference optima ``f*`` of finished benchmark runs with the exact Newton solver.

    python benchmarks/fstar_certified.py [RESULTS ...] [--rtol 1e-10]
                                        [--out benchmarks/results/fstar_certified]

Every suboptimality in the results (ours and the papers') is measured against an ``f*``. The
runs take it from the L-BFGS reference (continuation in the shift cost plus an exact polish);
the papers from their own L-BFGS, which is why SOREL's Table 2 reports negative
suboptimalities (-2.4e-8 on acs ESRM, -1.1e-7 and -2.1e-7 on law ESRM / extremile: the iterates
beat the reference). Here each problem of each results folder (``metadata.json``: its spec
and ``f_star`` table) is rebuilt and solved again by :class:`riskopt.solvers.Newton`, which
returns a point and a *certified lower bound* on the optimum (a duality gap; no reference
needed). Reported per problem: the run's ``f*``, the Newton value and bound, and
``(f* - bound) / |bound|``, an upper bound on how far the runs' ``f*`` is above the true
optimum (negative: below the Newton value, i.e. the reference was the better point).
Where Newton leaves a CVaR problem uncertified because very many losses tie at the boundary
(the degenerate fits where ``w = 0`` is optimal and every loss equals ``loss(0)``), the tied
samples' weights are chosen by a linear program (:mod:`riskopt.objectives._tie_dual`) and the
better of the two rigorous bounds is kept.

Problems the Newton solver does not take (more than one output, ``l2_reg = 0``, other
families) are listed as skipped with the reason. Writes ``results.md``, ``results.csv`` and
``metadata.json``. With no RESULTS, every folder under ``benchmarks/results`` whose spec is of
the spectral family.
"""
import argparse
import json
import os
import platform
import time
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd

from riskopt.bench import problems
from riskopt.bench._io import atomic_write_json, atomic_write_text
from riskopt.bench._meta import _git_commit
from riskopt.bench.spec import spec_from_dict
from riskopt.bench.spec_tools import SpecError
from riskopt.objectives._newton import applicable, dual_bound
from riskopt.objectives._tie_dual import lp_tie_dual
from riskopt.solvers import Newton

ROOT = Path(__file__).resolve().parent / "results"


def folders(paths):
    if paths:
        return [Path(p) for p in paths]
    out = []
    for meta in sorted(ROOT.glob("*/metadata.json")):
        try:
            spec = json.loads(meta.read_text()).get("spec") or {}
        except ValueError:
            continue
        objs = spec.get("objectives") or []
        if objs and all(o.get("family", "spectral") == "spectral" for o in objs):
            out.append(meta.parent)
    return out


def certify_folder(folder, rtol):
    meta = json.loads((folder / "metadata.json").read_text())
    try:
        spec = spec_from_dict(meta["spec"], check_registry=False)
    except SpecError:  # an older metadata layout: the TOML text that ran is kept too
        spec = spec_from_dict(tomllib.loads(meta["spec_source"]), check_registry=False)
    labels = spec.objective_labels()
    rows = []
    for entry in meta.get("f_star") or []:
        d, label = entry["dataset"], entry["objective"]
        base = {"results": folder.name, "dataset": d, "objective": label,
                "f_star": float(entry["f_star"])}
        if label not in labels or d not in spec.datasets:
            rows.append({**base, "skipped": "not in the spec"})
            continue
        problem = spec.problem_description(d, labels.index(label))
        if problem["source"]["name"] != "dataset":
            rows.append({**base, "skipped": "a data stream"})
            continue
        obj = problems.build(problem).objective
        why = applicable(obj)
        if why:
            rows.append({**base, "skipped": why})
            continue
        t0 = time.perf_counter()
        res = Newton(tol=rtol, max_iter=400).run(obj)
        bound = float(res.extra["bound"])
        how = "newton"
        W = np.asarray(obj.as_matrix(res.coef), dtype=np.float64).reshape(-1)
        if not res.extra["certified"]:
            # many losses tie at the CVaR boundary (e.g. w = 0 optimal, every loss equal):
            # the tied samples' weights chosen by an LP give a (rigorous) bound
            for window in (1e-12, 1e-10, 1e-8):
                q = lp_tie_dual(obj, W, window=window)
                if q is not None:
                    lb = dual_bound(obj, W, q)[0]
                    if lb > bound:
                        bound, how = lb, f"lp ties ({window:g})"
        sec = time.perf_counter() - t0
        gap = (float(res.value) - bound) / abs(bound)
        rows.append({**base, "n": obj.n, "p": obj.p, "newton_value": float(res.value),
                     "bound": bound, "newton_rel_gap": float(res.extra["rel_gap"]),
                     "bound_from": how, "rel_gap": gap,
                     "certified": bool(res.extra["certified"]) or gap <= rtol,
                     "fstar_minus_bound_rel": (base["f_star"] - bound) / abs(bound),
                     "fstar_minus_newton_rel": (base["f_star"] - float(res.value))
                     / abs(float(res.value)),
                     "seconds": sec, "skipped": ""})
        print(f"{folder.name} {d} {label}: f* - bound = "
              f"{rows[-1]['fstar_minus_bound_rel']:.2e} (relative), Newton gap "
              f"{rows[-1]['newton_rel_gap']:.1e}, bound from {how} (gap {gap:.1e}), "
              f"{sec:.2f} s", flush=True)
    return rows


def markdown(df):
    done = df[df["skipped"] == ""]
    lines = ["# The runs' reference optima f*, certified by the Newton solver", "",
             "Per results folder: problems certified, the largest `(f* - bound) / |bound|` (how "
             "far the runs' f* can be above the true optimum: an upper bound), the largest "
             "relative gap of the bound (Newton's own, or from the LP on tied losses where Newton "
             "left a problem uncertified: column 'LP'), and problems skipped (with the "
             "reason).", "",
             "| results | problems | certified | max (f* - bound)/bound | min (f* - Newton)/Newton"
             " | max gap | LP | skipped |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, g in df.groupby("results", sort=False):
        c = g[g["skipped"] == ""]
        sk = g[g["skipped"] != ""]
        why = "; ".join(sorted(set(sk["skipped"]))) if len(sk) else ""
        if len(c):
            lines.append(f"| {name} | {len(g)} | {int(c['certified'].sum())} | "
                         f"{c['fstar_minus_bound_rel'].max():.1e} | "
                         f"{c['fstar_minus_newton_rel'].min():.1e} | "
                         f"{c['rel_gap'].max():.1e} | "
                         f"{int((c['bound_from'] != 'newton').sum())} | {len(sk)} {why} |")
        else:
            lines.append(f"| {name} | {len(g)} | 0 | - | - | - | - | {len(sk)} {why} |")
    if len(done):
        lines += ["", f"Over the {len(done)} problems solved ({int(done['certified'].sum())} "
                  "certified to the requested relative gap; the bound is valid for all): the "
                  f"runs' f* is at most {done['fstar_minus_bound_rel'].max():.1e} (relative) "
                  "above the optimum" + (
                      f", and at most {np.sort(done['fstar_minus_bound_rel'].to_numpy())[-2]:.1e}"
                      " without the worst problem." if len(done) > 1 else ".")]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="*")
    ap.add_argument("--rtol", type=float, default=1e-10)
    ap.add_argument("--out", default=str(ROOT / "fstar_certified"))
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = []
    for folder in folders(args.results):
        rows += certify_folder(folder, args.rtol)
    df = pd.DataFrame(rows)
    os.makedirs(args.out, exist_ok=True)
    atomic_write_text(os.path.join(args.out, "results.md"), markdown(df))
    atomic_write_text(os.path.join(args.out, "results.csv"), df.to_csv(index=False))
    atomic_write_json(os.path.join(args.out, "metadata.json"), {
        "script": "benchmarks/fstar_certified.py", "rtol": args.rtol,
        "folders": sorted(set(df["results"])) if len(df) else [],
        "git_commit": _git_commit(), "machine": platform.platform(), "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_seconds": round(time.time() - t0, 1)})
    print(markdown(df))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
