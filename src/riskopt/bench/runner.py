"""Run an experiment spec: f* cache, JIT warm-up, parallel cells, resume, tables, metadata.

Output folder (default ``results/<spec name>``)::

    spec.json            the validated spec (and the TOML source in metadata.json)
    fstar.json           f* per (dataset, objective), from riskopt.solvers.LBFGS (cached)
    cells/<id>.parquet   one finished run (dataset, objective, solver, config, seed); written
                         as soon as the run ends, so an interrupted run loses at most the cells
                         in flight. <id> hashes the run's content (problem, solver, all
                         hyper-parameters, seed, budget), so editing a spec reruns only what
                         changed. cells/<id>.error.json records a run that raised; it is
                         retried on the next invocation.
    results.parquet      long form, one row per recorded point of every run
    selection.parquet    one row per (dataset, objective, solver, config) with the score of
    selection.csv        the selection rule, and the ``selected`` flag
    metadata.json        versions, CPU, spec, timings, f*, selected configs, file list
    figure.png/.pdf      suboptimality vs passes (figure_time.* vs solver wall time)

Every file is written atomically (temporary file + ``os.replace``). Rerunning the same
command skips finished cells; ``fresh=True`` (``--fresh``) deletes this spec's cells first.

Parallelism uses joblib (``jobs`` workers; loky processes by default). On a cluster, select
another joblib backend, e.g. dask::

    from dask.distributed import Client
    import joblib, riskopt.bench as rb
    client = Client("tcp://scheduler:8786")
    with joblib.parallel_config(backend="dask"):
        rb.run("prospect_fig3", jobs=-1)

or ray (``from ray.util.joblib import register_ray; register_ray(); ray.init(address=...)``
then ``joblib.parallel_config(backend="ray")``); the CLI does the same with
``riskopt bench run SPEC --backend dask --address tcp://scheduler:8786``. The workers need
riskopt installed (and ``RISKOPT_DATA`` for non-bundled data sets); they load the data sets
by name and return each run's trace to this process, which alone writes files, so no shared
file system is needed.

Budget: a run of ``P`` passes makes ``ceil(P / solver.passes_per_update(objective))`` updates
and records the objective after each (so at least ``P`` passes; SOREL and LSVRG, whose updates
cost two passes, record every second pass).

Timing: the trace time is solver-only (the clock stops while the objective is evaluated),
after a JIT warm-up in each worker process. Parallel workers share the CPU's caches and
memory bandwidth: for wall-time figures run with ``jobs=1``.
"""
import json
import math
import os
import platform
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import _io
from .spec import ObjectiveSpec, SpecError, _hash, load_spec

CELL_FORMAT = 1
_CELL_COLUMNS = ["update", "passes", "time", "value", "suboptimality", "diverged"]


@dataclass
class RunResult:
    """What :func:`run` did and where it wrote it."""

    out_dir: Path
    complete: bool
    n_cells: int
    n_reused: int
    n_run: int
    n_errors: int
    wall_seconds: float
    table: Path = None
    selection: Path = None
    metadata: Path = None
    figures: list = field(default_factory=list)
    errors: list = field(default_factory=list)


# ---------------------------------------------------------------------------- data + problems
@lru_cache(maxsize=16)
def _load_dataset(name, protocol):
    from .. import datasets

    data = datasets.load(name, protocol=protocol)
    X = np.ascontiguousarray(data.X_train, dtype=np.float64)
    y = np.ascontiguousarray(data.y_train, dtype=np.float64)
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y


_OBJECTIVES = {}


def _objective(dataset, protocol, obj_dict):
    key = _hash([dataset, protocol, obj_dict])
    if key not in _OBJECTIVES:
        X, y = _load_dataset(dataset, protocol)
        _OBJECTIVES[key] = ObjectiveSpec(**obj_dict).build(X, y)
    return _OBJECTIVES[key]


def problem_key(dataset, protocol, objective):
    return {"dataset": dataset, "protocol": protocol, "objective": objective.key()}


def _compute_fstar(dataset, protocol, obj_dict):
    from ..solvers import LBFGS

    obj = _objective(dataset, protocol, obj_dict)
    t0 = time.perf_counter()
    res = LBFGS().run(obj)
    return {"f_star": float(res.value), "seconds": time.perf_counter() - t0,
            "message": str(res.message)}


# ---------------------------------------------------------------------------- cells
@dataclass
class Cell:
    id: str
    dataset: str
    objective_index: int
    solver_index: int
    config: dict
    seed: int
    passes: int
    key: dict


def enumerate_cells(spec):
    """Every run of the spec, in spec order (dataset, objective, solver, config, seed)."""
    cells = []
    for d in spec.datasets:
        for j, obj in enumerate(spec.objectives):
            for i, sol in enumerate(spec.solvers):
                for cfg in sol.configs():
                    for seed in spec.seeds:
                        key = {"format": CELL_FORMAT,
                               "problem": problem_key(d, spec.protocol, obj),
                               "solver": sol.name, "config": cfg, "seed": seed,
                               "passes": spec.budget(d)}
                        cells.append(Cell(_hash(key), d, j, i, cfg, seed, spec.budget(d), key))
    return cells


def config_label(cfg):
    """``lr=0.01`` or ``lr=0.01,dual_lr=0.4`` (all hyper-parameters but the seed)."""
    return ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in cfg.items())


_WARM = set()


def _warm_up(solver_name, cfg, dataset, protocol, obj_dict):
    """Compile (or load from numba's cache) the solver's kernels once per process.

    Runs two updates on the first (at most) 128 rows of the data set, so that the timed run
    measures the algorithm, not the JIT.
    """
    from .. import solvers as _solvers
    from ..callbacks import DivergenceWarning

    fixed = {k: v for k, v in cfg.items() if k != "lr"}
    key = (solver_name, json.dumps(fixed, sort_keys=True, default=str), obj_dict["loss"])
    if key in _WARM:
        return
    _WARM.add(key)
    try:
        X, y = _load_dataset(dataset, protocol)
        tiny = ObjectiveSpec(**obj_dict).build(X[:128], y[:128])
        solver = _solvers.get(solver_name, **{**cfg, "lr": 1e-6}, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DivergenceWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            solver.run(tiny, max_epochs=2)
    except Exception:  # the real run reports any problem
        pass


def _run_cell(task):
    """Run one cell in a worker; returns ``(cell id, DataFrame or None, error or None)``."""
    import pandas as pd

    from .. import solvers as _solvers
    from ..callbacks import DivergenceWarning, Trace

    try:
        obj = _objective(task["dataset"], task["protocol"], task["objective"])
        _warm_up(task["solver"], task["config"], task["dataset"], task["protocol"],
                 task["objective"])
        solver = _solvers.get(task["solver"], **task["config"], random_state=task["seed"])
        ppu = float(solver.passes_per_update(obj))
        max_epochs = max(1, math.ceil(task["passes"] / ppu - 1e-9))
        trace = Trace(f_star=task["f_star"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DivergenceWarning)
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow while blowing up
            res = solver.run(obj, max_epochs=max_epochs, callback=trace)
        values = np.asarray(trace.values, dtype=float)
        diverged = bool(trace.diverged or res.diverged or not np.all(np.isfinite(values)))
        frame = pd.DataFrame({
            "update": np.arange(len(values), dtype=np.int64),
            "passes": np.asarray(trace.passes, dtype=float),
            "time": np.asarray(trace.times, dtype=float),
            "value": values,
            "suboptimality": np.asarray(trace.suboptimality, dtype=float),
            "diverged": np.full(len(values), diverged),
        })
        return task["id"], frame, None
    except Exception as exc:  # recorded, reported, retried on the next invocation
        return task["id"], None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


# ---------------------------------------------------------------------------- helpers
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


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class _Progress:
    """A rich progress bar, or nothing."""

    def __init__(self, enabled):
        self.enabled = enabled
        self._p = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            self._p = Progress(TextColumn("[progress.description]{task.description}"),
                               BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                               TimeRemainingColumn(), console=Console(stderr=True))
            self._p.__enter__()
        return self

    def task(self, description, total):
        return self._p.add_task(description, total=total) if self._p else None

    def advance(self, task_id, n=1):
        if self._p is not None:
            self._p.advance(task_id, n)

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)


def _parallel(jobs, backend):
    from contextlib import nullcontext

    from joblib import Parallel, parallel_config

    ctx = parallel_config(backend=backend) if backend else nullcontext()
    return ctx, Parallel(n_jobs=jobs, return_as="generator_unordered")


# ---------------------------------------------------------------------------- main entry
def run(spec, out=None, jobs=None, backend=None, progress=True, max_cells=None, fresh=False,
        plot=True, echo=None):
    """Run (or resume) an experiment.

    Parameters
    ----------
    spec : Spec, path to a TOML file, or a bundled spec name (``"quick"``)
    out : path, default ``results/<spec name>``
    jobs : int, default the spec's ``jobs`` or -1 (all cores); 1 runs in this process
    backend : str, optional
        A joblib backend name (``"loky"``, ``"threading"``, ``"dask"``, ``"ray"``, ...); by
        default the active ``joblib.parallel_config``.
    progress : bool, default True
        Show rich progress bars (on stderr).
    max_cells : int, optional
        Run at most this many not-yet-finished cells, then stop (resume later by running
        again). Useful to split work or to test resumption.
    fresh : bool, default False
        Delete this spec's finished cells (and the f* cache) first.
    plot : bool, default True
        Write the figures once every cell is finished.
    echo : callable, optional
        Receives one-line status messages (default: silent).

    Returns
    -------
    RunResult
    """
    spec = load_spec(spec)
    if isinstance(getattr(spec, "driver", None), str):  # e.g. the SPL+ experiments
        from .spec import driver_module

        return driver_module(spec.driver).run(spec, out=out, jobs=jobs, backend=backend,
                                              progress=progress, max_cells=max_cells,
                                              fresh=fresh, plot=plot, echo=echo)
    say = echo or (lambda msg: None)
    t_start = time.perf_counter()
    started = _now()
    jobs = jobs if jobs is not None else (spec.jobs if spec.jobs is not None else -1)
    out = Path(out) if out is not None else Path("results") / spec.name

    # -- data, objectives, compatibility checks (before any long work or any file)
    sizes, _ = prepare(spec)

    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    cells = enumerate_cells(spec)
    if fresh:
        for c in cells:
            for p in (cells_dir / f"{c.id}.parquet", cells_dir / f"{c.id}.error.json"):
                if p.exists():
                    p.unlink()
        if (out / "fstar.json").exists():
            (out / "fstar.json").unlink()
    _io.atomic_write_json(out / "spec.json", spec.to_dict())

    # -- f* (cached per problem)
    fstar_path = out / "fstar.json"
    fstar = json.loads(fstar_path.read_text()) if fstar_path.exists() else {}
    problems = {}
    for d in spec.datasets:
        for j, o in enumerate(spec.objectives):
            problems[_hash(problem_key(d, spec.protocol, o))] = (d, j)
    missing = [k for k in problems if k not in fstar]

    # -- cells still to run
    done = {c.id for c in cells if (cells_dir / f"{c.id}.parquet").exists()}
    pending = [c for c in cells if c.id not in done]
    n_reused = len(done)
    if max_cells is not None:
        pending.sort(key=lambda c: -sizes[c.dataset]["n_train"] * c.passes)
        pending = pending[: max(0, int(max_cells))]
    say(f"spec {spec.name}: {len(cells)} runs, {n_reused} already finished, "
        f"{len(pending)} to run (jobs={jobs})")

    errors = []
    n_run = 0
    with _Progress(progress) as bar:
        if missing:
            say(f"computing f* for {len(missing)} problem(s) with L-BFGS")
            task = bar.task("f* (L-BFGS)", len(missing))
            ctx, par = _parallel(jobs, backend)
            from joblib import delayed

            with ctx:
                it = par(delayed(_fstar_task)(k, problems[k][0], spec.protocol,
                                              asdict(spec.objectives[problems[k][1]]))
                         for k in missing)
                for k, rec in it:
                    d, j = problems[k]
                    fstar[k] = {"dataset": d, "objective": spec.objective_labels()[j],
                                "key": problem_key(d, spec.protocol, spec.objectives[j]), **rec}
                    _io.atomic_write_json(fstar_path, fstar)
                    bar.advance(task)
        if pending:
            _warm_up_parent(spec)
            labels = spec.objective_labels()
            tasks = []
            for c in sorted(pending, key=lambda c: -sizes[c.dataset]["n_train"] * c.passes):
                pk = _hash(problem_key(c.dataset, spec.protocol, spec.objectives[c.objective_index]))
                tasks.append({"id": c.id, "dataset": c.dataset, "protocol": spec.protocol,
                              "objective": asdict(spec.objectives[c.objective_index]),
                              "solver": spec.solvers[c.solver_index].name,
                              "config": c.config, "seed": c.seed, "passes": c.passes,
                              "f_star": fstar[pk]["f_star"]})
            by_id = {c.id: c for c in cells}
            task_bar = bar.task(f"runs of {spec.name}", len(tasks))
            ctx, par = _parallel(jobs, backend)
            from joblib import delayed

            with ctx:
                for cid, frame, err in par(delayed(_run_cell)(t) for t in tasks):
                    c = by_id[cid]
                    if err is None:
                        _io.atomic_write_parquet(cells_dir / f"{cid}.parquet", frame,
                                                 {"riskopt.cell": json.dumps(c.key)})
                        err_path = cells_dir / f"{cid}.error.json"
                        if err_path.exists():
                            err_path.unlink()
                        n_run += 1
                    else:
                        desc = (f"{c.dataset} / {labels[c.objective_index]} / "
                                f"{spec.solvers[c.solver_index].display} "
                                f"{config_label(c.config)} seed={c.seed}")
                        _io.atomic_write_json(cells_dir / f"{cid}.error.json",
                                              {"cell": c.key, "run": desc, "error": err})
                        errors.append((desc, err))
                    bar.advance(task_bar)

    finished = {c.id for c in cells if (cells_dir / f"{c.id}.parquet").exists()}
    n_err = sum(1 for c in cells if (cells_dir / f"{c.id}.error.json").exists())
    remaining = len(cells) - len(finished) - n_err
    result = RunResult(out_dir=out, complete=remaining == 0 and n_err == 0,
                       n_cells=len(cells), n_reused=n_reused, n_run=n_run, n_errors=n_err,
                       wall_seconds=0.0, errors=errors)
    if remaining > 0:
        result.wall_seconds = time.perf_counter() - t_start
        say(f"stopped with {remaining} of {len(cells)} runs left; run the same command again "
            "to resume")
        return result

    # -- merge, select, write tables + metadata (+ figures)
    from .selection import mark_selected, select

    table = merge_cells(spec, cells, cells_dir, fstar)
    selection = select(table, last_passes=spec.last_passes, seeds=spec.seeds)
    table = mark_selected(table, selection)
    result.table = out / "results.parquet"
    result.selection = out / "selection.parquet"
    _io.atomic_write_parquet(result.table, table, {"riskopt.spec": json.dumps(spec.to_dict())})
    _io.atomic_write_parquet(result.selection, selection)
    _io.atomic_write_text(out / "selection.csv", selection.to_csv(index=False))
    if plot:
        from .plotting import plot_results

        result.figures = plot_results(out, table=table)
    result.wall_seconds = time.perf_counter() - t_start
    result.metadata = out / "metadata.json"
    meta = _metadata(spec, out, result, sizes, fstar, problems, selection, started, jobs,
                     backend)
    _io.atomic_write_json(result.metadata, meta)
    return result


def prepare(spec):
    """Load the data sets, build every objective and check that every solver configuration
    accepts it; raise :class:`SpecError` naming the key otherwise.

    Returns ``(sizes, objectives)``: ``{dataset: {"n_train", "n_features"}}`` and
    ``{(dataset, objective index): Objective}``.
    """
    spec = load_spec(spec)
    sizes, objectives = {}, {}
    for i, d in enumerate(spec.datasets):
        try:
            X, y = _load_dataset(d, spec.protocol)
        except (ValueError, FileNotFoundError, OSError) as exc:
            raise SpecError(f"datasets[{i}]", f"cannot load {d!r}: {exc}") from None
        sizes[d] = {"n_train": int(X.shape[0]), "n_features": int(X.shape[1])}
        for j, o in enumerate(spec.objectives):
            try:
                objectives[d, j] = _objective(d, spec.protocol, asdict(o))
            except ValueError as exc:
                raise SpecError(f"objectives[{j}]", f"on {d}: {exc}") from None
    _check_compatibility(spec, objectives)
    return sizes, objectives


def status(spec, out=None):
    """``(n_runs, n_finished)`` of a spec in an output folder (nothing is run)."""
    spec = load_spec(spec)
    out = Path(out) if out is not None else Path("results") / spec.name
    cells = enumerate_cells(spec)
    done = sum((out / "cells" / f"{c.id}.parquet").exists() for c in cells)
    return len(cells), done


def _fstar_task(key, dataset, protocol, obj_dict):
    return key, _compute_fstar(dataset, protocol, obj_dict)


def _check_compatibility(spec, objectives):
    """Every solver configuration must accept every objective (clear error otherwise)."""
    from .. import solvers as _solvers

    labels = spec.objective_labels()
    for i, sol in enumerate(spec.solvers):
        for cfg in sol.configs():
            solver = _solvers.get(sol.name, **cfg, random_state=0)
            for (d, j), obj in objectives.items():
                try:
                    solver._check_params(obj)
                except (ValueError, TypeError) as exc:
                    raise SpecError(f"solvers[{i}]", f"{sol.display} with "
                                                     f"{config_label(cfg)}: {exc}") from None
                try:
                    solver._check_objective(obj)
                except (ValueError, TypeError) as exc:
                    raise SpecError(f"solvers[{i}]", f"{sol.display} cannot run objectives[{j}] "
                                                     f"({labels[j]}) on {d}: {exc}") from None


def _warm_up_parent(spec):
    """Compile every solver's kernels once here so parallel workers load numba's cache."""
    first = spec.datasets[0]
    for sol in spec.solvers:
        cfg = sol.configs()[0]
        seen = set()
        for o in spec.objectives:
            if o.loss not in seen:
                seen.add(o.loss)
                _warm_up(sol.name, cfg, first, spec.protocol, asdict(o))


def merge_cells(spec, cells, cells_dir, fstar):
    """Concatenate the finished cells into the long-form table (spec order)."""
    import pandas as pd

    labels = spec.objective_labels()
    parts = []
    for c in cells:
        path = cells_dir / f"{c.id}.parquet"
        if not path.exists():
            continue
        f = pd.read_parquet(path)
        obj = spec.objectives[c.objective_index]
        sol = spec.solvers[c.solver_index]
        X, _ = _load_dataset(c.dataset, spec.protocol)
        pk = _hash(problem_key(c.dataset, spec.protocol, obj))
        params = {k: v for k, v in c.config.items() if k != "lr"}
        const = {
            "spec": spec.name, "dataset": c.dataset, "objective": labels[c.objective_index],
            "risk": obj.risk, "loss": obj.loss, "shift_cost": float(obj.shift_cost),
            "divergence": obj.divergence,
            "l2_reg": float(_l2(obj, X.shape[0])), "solver": sol.display,
            "solver_name": sol.name, "config": config_label(c.config),
            "lr": float(c.config["lr"]), "params": json.dumps(params, sort_keys=True),
            "seed": int(c.seed), "budget": int(c.passes), "f_star": float(fstar[pk]["f_star"]),
        }
        for k, v in const.items():
            f[k] = v
        parts.append(f)
    cols = ["spec", "dataset", "objective", "risk", "loss", "shift_cost", "divergence",
            "l2_reg", "solver", "solver_name", "config", "lr", "params", "seed", "budget",
            "update", "passes", "time", "value", "suboptimality", "f_star", "diverged"]
    if not parts:
        return pd.DataFrame(columns=cols)
    table = pd.concat(parts, ignore_index=True)
    return table[cols]


def _l2(obj, n):
    from .spec import l2_value

    return l2_value(obj.l2_reg, n)


def _metadata(spec, out, result, sizes, fstar, problems, selection, started, jobs, backend):
    chosen = selection[selection["selected"]]
    no_choice = []
    for k, g in selection.groupby(["dataset", "objective", "solver"], sort=False):
        if not g["selected"].any():
            no_choice.append({"dataset": k[0], "objective": k[1], "solver": k[2],
                              "reason": "every configuration diverged or is incomplete"})
    return {
        "spec_name": spec.name,
        "description": spec.description,
        "created": started,
        "finished": _now(),
        "riskopt_version": _versions()["riskopt"],
        "versions": _versions(),
        "cpu": _cpu_info(),
        "git_commit": _git_commit(),
        "run": {"jobs": jobs, "backend": backend or "joblib default (loky)",
                "cells_total": result.n_cells, "cells_reused": result.n_reused,
                "cells_run": result.n_run, "cells_failed": result.n_errors,
                "wall_seconds_this_invocation": result.wall_seconds},
        "datasets": sizes,
        "f_star": [{"dataset": problems[k][0], "objective": fstar[k]["objective"],
                    "f_star": fstar[k]["f_star"], "lbfgs_seconds": fstar[k]["seconds"]}
                   for k in problems],
        "selected": chosen[["dataset", "objective", "solver", "config", "score"]]
        .to_dict(orient="records"),
        "not_selected": no_choice,
        "files": {"table": "results.parquet", "selection": "selection.parquet",
                  "figures": [str(Path(p).relative_to(out)) for p in result.figures]},
        "columns": {
            "dataset, objective, solver": "the problem and the solver's display label",
            "config": "all searched/fixed hyper-parameters of the run (lr first)",
            "seed": "random_state of the solver", "update": "index of the recorded point",
            "passes": "oracle calls / n so far", "time": "solver-only seconds so far",
            "value": "training objective F(w)", "suboptimality": "(F - f*) / (F(w0) - f*)",
            "f_star": "L-BFGS reference value", "diverged": "the run diverged (any point)",
            "selected": "this config is the one chosen by the selection rule"},
        "spec": spec.to_dict(),
        "spec_source": spec.source,
        "spec_digest": spec.digest(),
    }
