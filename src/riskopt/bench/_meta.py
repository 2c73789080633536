"""The provenance of a benchmark run: versions, CPU, git commit, and ``metadata.json``."""
import json
import os
import platform
import sys
import time
from pathlib import Path


def _versions():
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for dist in ("riskopt", "numpy", "scipy", "numba", "scikit-learn", "pandas", "pyarrow",
                 "joblib", "matplotlib", "rich"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _cpu_info():
    model = platform.processor() or None
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {"model": model, "logical_cpus": os.cpu_count(), "usable_cpus": usable,
            "machine": platform.machine(), "system": platform.system(),
            "release": platform.release()}


def _git_commit():
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def int_options(parser, **defaults):
    """Add one integer option ``--name`` per keyword to an ``argparse`` parser (``_`` in the
    name becomes ``-``; a list default takes one or more values). Returns the parser.

    >>> import argparse
    >>> p = int_options(argparse.ArgumentParser(), sizes=[10, 100], steps_old=40)
    >>> vars(p.parse_args(["--steps-old", "3"]))
    {'sizes': [10, 100], 'steps_old': 3}
    """
    for name, default in defaults.items():
        more = {"nargs": "+"} if isinstance(default, list) else {}
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default, **more)
    return parser


def script_metadata(script, wall_seconds, **extra):
    """The provenance a benchmark script writes in its ``metadata.json``: the script, the
    git commit, the machine, the CPU count and the date, then ``extra``, then the run's wall
    seconds (rounded to 0.1)."""
    return {"script": script, "git_commit": _git_commit(), "machine": platform.platform(),
            "cpus": os.cpu_count(), "date": now(), **extra,
            "wall_seconds": round(wall_seconds, 1)}



def metadata(spec, out, result, sizes, fstar, probs, table, selection, summ, started, jobs,
              backend):
    chosen = selection[selection["selected"]]
    no_choice = []
    for k, g in selection.groupby(["dataset", "objective", "solver"], sort=False):
        if not g["selected"].any():
            no_choice.append({"dataset": k[0], "objective": k[1], "solver": k[2],
                              "reason": "every configuration diverged or is incomplete"})
    fs = []
    for k, (d, j) in probs.items():
        rec = fstar[k]
        sub = table[(table["dataset"] == d) & (table["objective"] == rec["objective"])]
        used = float(sub["f_star"].iloc[0]) if len(sub) else float(rec["f_star"])
        fs.append({"dataset": d, "objective": rec["objective"], "f_star": used,
                   "f_star_ref": rec["f_star"], "lowered_by": float(rec["f_star"]) - used,
                   "reference_seconds": rec["seconds"]})
    figures = [str(Path(p).relative_to(out)) for p in result.figures]
    files = {"table": "results.parquet", "selection": "selection.parquet", "figures": figures}
    if summ is not None:
        files.update(sensitivity="sensitivity.parquet", summary="summary.csv")
    return {
        "spec_name": spec.name,
        "description": spec.description,
        "created": started,
        "finished": now(),
        "riskopt_version": _versions()["riskopt"],
        "versions": _versions(),
        "cpu": _cpu_info(),
        "git_commit": _git_commit(),
        "run": {"jobs": jobs, "backend": backend or "joblib default (loky)",
                "cells_total": result.n_cells, "cells_reused": result.n_reused,
                "cells_run": result.n_run, "cells_failed": result.n_errors,
                "wall_seconds_this_invocation": result.wall_seconds},
        "datasets": sizes,
        "f_star": fs,
        "selected": chosen[["dataset", "objective", "solver", "config", "score"]]
        .to_dict(orient="records"),
        "not_selected": no_choice,
        "summary": None if summ is None else json.loads(summ.to_json(orient="records")),
        "files": files,
        "columns": {
            "dataset, objective, solver": "the problem and the solver's display label",
            "family": "the objective's problem family",
            "config": "all searched/fixed hyper-parameters of the run (lr first)",
            "seed": "random_state of the solver (and the random initial point)",
            "update": "index of the recorded point",
            "step": "samples processed (passes x n; streams: steps taken)",
            "passes": "oracle calls / n so far (NaN on data streams)",
            "time": "solver-only seconds so far",
            "value": ("F at the solver's reported point, auxiliary variables included"
                      if spec.record.value == "iterate" else "training objective (profile)"),
            "suboptimality": ("(F - f*) / (F(x0) - f*)" if spec.record.suboptimality ==
                              "relative" else "F - f*"),
            "f_star_ref": "reference_solution value", "f_star": (
                "min(f_star_ref, best value of any run)" if spec.reference["lower_to_best"]
                else "f_star_ref"),
            "diverged": "the run diverged (any point)",
            "selected": "this config is the one chosen by the selection rule"},
        "spec": spec.to_dict(),
        "spec_source": spec.source,
        "spec_digest": spec.digest(),
    }
