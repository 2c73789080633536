"""Run an experiment spec: f* cache, JIT warm-up, parallel cells, resume, tables, metadata.

Output folder (default ``results/<spec name>``)::

    spec.json            the validated spec (and the TOML source in metadata.json)
    fstar.json           f* per (dataset, objective), from riskopt.solvers.LBFGS (cached)
    cells/<id>.parquet   one finished run (dataset, objective, solver, config, seed); written
                         as soon as the run ends, so an interrupted run loses at most the cells
                         in flight. <id> hashes the run's content (problem, solver, all
                         hyper-parameters, seed, budget), so editing a spec reruns only what
                         changed. cells/<id>.error.json records a run that raised; it is
                         retried on the next invocation. cells/ is a local cache, not the
                         record: a run whose cells/ is missing (a fresh clone) restores every
                         finished run from results.parquet (:mod:`riskopt.bench._record`;
                         or from the table this folder's is a view of, :mod:`._view`)
    results.parquet      long form, one row per recorded point of every run: the record
    selection.parquet    one row per (dataset, objective, solver, config) with the score of
    selection.csv        the selection rule, and the ``selected`` flag
    metadata.json        versions, CPU, spec, timings, f*, selected configs, file list
    sensitivity.parquet  (analyses "sensitivity") per (dataset, objective, solver, lr): final
    sensitivity.csv      suboptimality and budget to reach epsilon, over seeds
    summary.csv          per (dataset, objective, solver): best lr, width of the good lr range
    figure.png           suboptimality vs passes (figure_time.png vs solver wall time), and the
                         other figures of the spec's ``analyses`` (riskopt.bench.figures)

Order: the pending cells run seed by seed, and within a seed the costliest (data set,
objective) first (``n_train`` x budget), each problem's solvers and configurations together
(:func:`riskopt.bench._cells.run_order`). A run cut part-way (Ctrl-C, a time limit,
``max_cells``) leaves whole comparable groups: every problem of the finished seeds with all
its methods, and whole problems of the seed in progress but the one it was in. Within a seed
the long runs start first, which keeps the parallel schedule's benefit of cost ordering.
Finished cells are skipped, so a resumed run continues in the same order.

Every file is written atomically and durably (temporary file, ``fsync``, ``os.replace``,
``fsync`` of the folder; :mod:`riskopt.bench._io`) with the umask's permissions. Rerunning
the same command skips finished cells; ``fresh=True`` (``--fresh``) deletes this spec's cells
first. Crash safety: a run holds ``.riskopt-run.lock`` in the folder (a second run stops with
a message naming the first; a dead run's lock is taken over, :mod:`riskopt.bench._lock`); a
corrupt or truncated cell file or ``fstar.json`` is renamed aside (``*.corrupt-<time>``) and
recomputed (:mod:`riskopt.bench._state`); SIGTERM acts as Ctrl-C, and no worker outlives the
run (:mod:`riskopt.bench._procs`).

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
cost two passes, record every second pass). On a data stream (``steps``) the solver's
``run_stream`` takes the steps between two records in chunks of the source's ``chunk_size``.
What is recorded follows the spec's ``record`` table (:mod:`riskopt.bench.spec`): the profile
value through :class:`riskopt.Trace`, or ``F`` at the solver's reported point (auxiliary
variables included) evaluated after the run by :func:`riskopt.bench.problems.evaluate`. The
runner never asks which family it runs: the problem definitions (:mod:`riskopt.bench.problems`)
build the objectives, the initial points and the evaluations.

Timing: the trace time is solver-only (the clock stops while the objective is evaluated),
after a JIT warm-up in each worker process. Parallel workers share the CPU's caches and
memory bandwidth: for wall-time figures run with ``jobs=1``.
"""
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import (_fingerprint, _io, _lock, _meta, _paths, _procs, _record, _state, _view,
               problems, record_metrics)
from ._cells import (CELL_FORMAT, Cell, cell_labels, config_label,  # noqa: F401
                     enumerate_cells, run_order)
from ._execute import (_compute_fstar, _fstar_task, _run_cell, _warm_up,  # noqa: F401
                       record_passes, record_steps)
from .spec import SpecError, load_spec
from .spec_tools import l2_value
from .spec_tools import content_hash as _hash


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


# ---------------------------------------------------------------------------- helpers
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


# ---------------------------------------------------------------------------- main entry
def run(spec, out=None, jobs=None, backend=None, progress=True, max_cells=None, fresh=False,
        plot=True, echo=None):
    """Run (or resume) an experiment.

    Repairs (each reported by a :class:`riskopt.bench.RecoveryWarning`): corrupt cell
    files, error records or ``fstar.json`` are renamed aside and recomputed; a stale lock is
    taken over; temporary files of a killed run are removed. ``SIGTERM`` / ``SIGHUP`` act as
    ``KeyboardInterrupt`` meanwhile; on any exception the loky workers are killed.

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
        Delete this spec's finished cells (and the f* cache) first and recompute every
        run (nothing is restored from ``results.parquet``).
    plot : bool, default True
        Write the figures once every cell is finished.
    echo : callable, optional
        Receives one-line status messages (default: silent).

    Returns
    -------
    RunResult

    Raises
    ------
    SpecError
        The spec, a data set or a solver configuration is invalid (nothing is written).
    riskopt.bench.RunLockError
        Another run holds the output folder (the message names its pid, host, start time).
    riskopt.bench.OutputError
        The output folder cannot be created or written (the message names it).
    """
    spec = load_spec(spec)
    say = echo or (lambda msg: None)
    t_start = time.perf_counter()
    started = _meta.now()
    jobs = jobs if jobs is not None else (spec.jobs if spec.jobs is not None else -1)
    out = Path(out) if out is not None else _paths.default_out(spec.name)

    # -- data, objectives, compatibility checks (before any long work or any file)
    sizes, _ = prepare(spec)

    finished_ok = False
    try:
        with _procs.terminate_as_interrupt():
            _io.ensure_folder(out)
            with _lock.RunLock(out):
                result = _run_locked(spec, out, sizes, jobs, backend, progress, max_cells,
                                     fresh, plot, say, t_start, started)
        finished_ok = True
        return result
    finally:
        if not finished_ok:  # an exception or an interrupt: no worker may outlive this
            _procs.kill_workers()


def _run_locked(spec, out, sizes, jobs, backend, progress, max_cells, fresh, plot, say,
                t_start, started):
    _paths.check_inside(out, out / "cells", out / "fstar.json", out / "spec.json",
                        out / "figures", out / "results.parquet", out / "metadata.json")
    cells_dir = _io.ensure_folder(out / "cells")
    _io.sweep_temporaries(out, cells_dir)
    cells = enumerate_cells(spec)
    fstar_path = out / "fstar.json"
    _paths.check_inside(out, *(cells_dir / f"{c.id}{ext}" for c in cells
                               for ext in (".parquet", ".error.json")))
    if fresh:
        for c in cells:
            for p in (cells_dir / f"{c.id}.parquet", cells_dir / f"{c.id}.error.json"):
                if p.exists():
                    p.unlink()
        if fstar_path.exists():
            fstar_path.unlink()
    _io.atomic_write_json(out / "spec.json", spec.to_dict())
    fps = _fingerprint.spec_fingerprints(spec)  # the data loaded now (cached by prepare)
    probs = {}
    for d in spec.datasets:
        for j in range(len(spec.objectives)):
            probs[_hash(spec.problem(d, j))] = (d, j)

    errors, n_run, n_reused = [], 0, None
    for attempt in range(2):  # a second round only if a cell proves unreadable at the merge
        fstar = _state.load_fstar(fstar_path, key_hash=_hash, data=fps)
        if n_reused is None and not fresh:  # the cache lacks a run the record holds
            source = _view.table_path(out)  # its own table, or the one it is a view of
            restored = _record.restore_cells(_absent(cells, cells_dir), cells_dir, source, fps)
            if restored:
                name = _record.TABLE if source.parent == out else _view.view_entry(out)[
                    "view_of"] + " (this folder's table is a view of it)"
                say(f"restored {len(restored)} finished run(s) from {name} into the cells/ "
                    "cache")
        done, _ = _state.check_cells(cells, cells_dir, data=fps)
        if n_reused is None:
            n_reused = len(done)
        pending = [c for c in cells if c.id not in done]

        order = run_order(spec, sizes)  # seed by seed, the costliest problem first
        pending.sort(key=order)
        if max_cells is not None:
            pending = pending[: max(0, int(max_cells) - n_run)]
        say(f"spec {spec.name}: {len(cells)} runs, {len(done)} already finished, "
            f"{len(pending)} to run (jobs={jobs})")
        n_run += _compute(spec, cells, pending, probs, fstar, fstar_path, cells_dir, jobs,
                          backend, progress, say, errors, order, fps)

        finished = {c.id for c in cells if (cells_dir / f"{c.id}.parquet").exists()}
        n_err = sum(1 for c in cells if (cells_dir / f"{c.id}.error.json").exists())
        f_missing = [k for k in probs if k not in fstar]
        remaining = len(cells) - len(finished) - n_err
        result = RunResult(out_dir=out, complete=remaining == 0 and n_err == 0 and not f_missing,
                           n_cells=len(cells), n_reused=n_reused, n_run=n_run,
                           n_errors=n_err + len(f_missing), wall_seconds=0.0, errors=errors)
        if remaining > 0 or f_missing:
            result.wall_seconds = time.perf_counter() - t_start
            say(f"stopped with {remaining} of {len(cells)} runs left; run the same command "
                "again to resume")
            return result
        corrupt = []
        table = merge_cells(spec, cells, cells_dir, fstar, corrupt=corrupt)
        if not corrupt:
            break
        for path, why in corrupt:
            _io.quarantine(path, why)
    else:
        result.complete = False
        result.wall_seconds = time.perf_counter() - t_start
        say("stopped: cell files keep turning out unreadable; run the same command again")
        return result

    # -- analyses, tables + metadata (+ figures)
    from . import analysis

    selection = analysis.select(table, last_passes=spec.last_passes, seeds=spec.seeds,
                                rule=spec.selection_rule)
    table = analysis.mark_selected(table, selection)
    result.table = out / "results.parquet"
    result.selection = out / "selection.parquet"
    _io.atomic_write_parquet(result.table, table, {"riskopt.spec": json.dumps(spec.to_dict()),
                                                   **_fingerprint.table_metadata(fps)})
    _io.atomic_write_parquet(result.selection, selection)
    _io.atomic_write_text(out / "selection.csv", selection.to_csv(index=False))
    summ = None
    if "sensitivity" in spec.analyses:
        a = spec.analysis
        sens = analysis.sensitivity(table, a["epsilon"], a["epsilon_scale"])
        summ = analysis.summary(sens, a["tolerance"], spec.plot.floor)
        _io.atomic_write_parquet(out / "sensitivity.parquet", sens)
        _io.atomic_write_text(out / "sensitivity.csv", sens.to_csv(index=False))
        _io.atomic_write_text(out / "summary.csv", summ.to_csv(index=False))
    if plot:
        from .figures import plot_results

        result.figures = plot_results(out, table=table)
    if "metrics" in spec.analyses and spec.record.metrics:
        record_metrics.write_analysis(out, table, spec, plot=plot)
    result.wall_seconds = time.perf_counter() - t_start
    result.metadata = out / "metadata.json"
    meta = _meta.metadata(spec, out, result, sizes, fstar, probs, table, selection, summ,
                          started, jobs, backend)
    _io.atomic_write_json(result.metadata, meta)
    return result


def _compute(spec, cells, pending, probs, fstar, fstar_path, cells_dir, jobs, backend,
             progress, say, errors, cost, fps):
    """f* of the problems without one, then the pending cells of the problems with one, in
    the order of the sort key ``cost`` (the runner's: :func:`run_order`); each result is
    written the moment it arrives, with the fingerprint of its data (``fps``). Returns the
    number of cells run."""
    from joblib import delayed

    labels = spec.objective_labels()
    missing = [k for k in probs if k not in fstar]
    parent, n_run = os.getpid(), 0
    with _Progress(progress) as bar:
        if missing:
            say(f"computing f* for {len(missing)} problem(s)")
            task = bar.task("f* (reference)", len(missing))
            with _procs.parallel(jobs, backend) as par:
                it = par(delayed(_fstar_task)(k, spec.problem_description(*probs[k]),
                                              spec.reference, parent) for k in missing)
                for k, rec, err in it:
                    d, j = probs[k]
                    if err is not None:
                        errors.append((f"f* of {d} / {labels[j]}", err))
                    else:
                        rec = {"dataset": d, "objective": labels[j], "key": spec.problem(d, j),
                               **rec}
                        if fps.get(d) is not None:
                            rec["data"] = fps[d]
                        fstar[k] = _state.seal_fstar(k, rec)
                        _io.atomic_write_json(fstar_path, fstar)
                    bar.advance(task)
        pending = [c for c in pending if _hash(spec.problem(c.dataset, c.objective_index))
                   in fstar]
        if not pending:
            return 0
        _warm_up_parent(spec)
        tasks = []
        for c in sorted(pending, key=cost):
            pk = _hash(spec.problem(c.dataset, c.objective_index))
            tasks.append({"id": c.id,
                          "problem": spec.problem_description(c.dataset, c.objective_index),
                          "solver": spec.solvers[c.solver_index].name,
                          "config": c.config, "seed": c.seed, "passes": c.passes,
                          "record": asdict(spec.record), "init": spec.init_table(),
                          "f_star": fstar[pk]["f_star"], "parent": parent})
        by_id = {c.id: c for c in cells}
        task_bar = bar.task(f"runs of {spec.name}", len(tasks))
        with _procs.parallel(jobs, backend) as par:
            for cid, frame, err in par(delayed(_run_cell)(t) for t in tasks):
                c = by_id[cid]
                if err is None:
                    _io.atomic_write_parquet(cells_dir / f"{cid}.parquet", frame,
                                             {"riskopt.cell": json.dumps(c.key),
                                              **_fingerprint.cell_metadata(fps.get(c.dataset))})
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
    return n_run


def prepare(spec):
    """Build every problem and check that every solver configuration accepts it; raise
    :class:`SpecError` naming the key otherwise. A stream's evaluation sample is not drawn
    here (its size comes from the spec).

    Returns ``(sizes, objectives)``: ``{dataset: {"n_train", "n_features"}}`` and
    ``{(dataset, objective index): objective}`` (data sets only).
    """
    spec = load_spec(spec)
    sizes, objectives = {}, {}
    for i, d in enumerate(spec.datasets):
        for j, o in enumerate(spec.objectives):
            desc = spec.problem_description(d, j)
            try:
                sz = problems.size(desc)
                if not spec.dataset(d).streaming:
                    objectives[d, j] = problems.build(desc).objective
            except (FileNotFoundError, OSError) as exc:
                raise SpecError(f"datasets[{i}]", f"cannot load {d!r}: {exc}") from None
            except ValueError as exc:
                key = f"objectives[{j}]" if j or d in sizes else f"datasets[{i}]"
                raise SpecError(key, f"on {d}: {exc}") from None
            sizes[d] = {"n_train": sz["n"], "n_features": sz["p"]}
    _check_compatibility(spec, objectives)
    return sizes, objectives


def status(spec, out=None):
    """``(n_runs, n_finished)`` of a spec in an output folder (nothing is run or repaired;
    unreadable cell files do not count as finished; a run that ``results.parquet`` holds
    counts as finished: :func:`run` restores it from there)."""
    spec = load_spec(spec)
    out = Path(out) if out is not None else _paths.default_out(spec.name)
    cells = enumerate_cells(spec)
    fps = _fingerprint.spec_fingerprints(spec)
    done, _ = _state.check_cells(cells, out / "cells", repair=False, data=fps)
    restorable = _record.restorable(_absent(cells, out / "cells"), _view.table_path(out), fps)
    return len(cells), len(done | restorable)


def _absent(cells, cells_dir):
    """The cells with neither a file nor an error record in ``cells_dir``: those a run
    restores from ``results.parquet`` when it holds them (a corrupt file is recomputed, a
    recorded error retried, as before)."""
    return [c for c in cells if not (cells_dir / f"{c.id}.parquet").exists()
            and not (cells_dir / f"{c.id}.error.json").exists()]


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
                reason = solver.incompatibility(obj)
                if reason is not None:
                    raise SpecError(f"solvers[{i}]", f"{sol.display} cannot run objectives[{j}] "
                                                     f"({labels[j]}) on {d}: {reason}")
        if spec.dataset(spec.datasets[0]).streaming or any(
                spec.dataset(d).streaming for d in spec.datasets):
            if not getattr(_solvers.get(sol.name), "streaming", False):
                raise SpecError(f"solvers[{i}]", f"{sol.display} has no streaming mode (the "
                                                 "spec has data streams)")


def _warm_up_parent(spec):
    """Compile every solver's kernels once here so parallel workers load numba's cache."""
    first = spec.datasets[0]
    for sol in spec.solvers:
        cfg = sol.configs()[0]
        for j in range(len(spec.objectives)):
            _warm_up(sol.name, cfg, spec.problem_description(first, j))


def merge_cells(spec, cells, cells_dir, fstar, corrupt=None):
    """Concatenate the finished cells into the long-form table (spec order).

    A cell file that does not read raises, or, when ``corrupt`` is a list, is appended to it
    as ``(path, reason)`` and left out."""
    import pandas as pd

    labels = spec.objective_labels()
    parts = []
    for c in cells:
        path = cells_dir / f"{c.id}.parquet"
        if not path.exists():
            continue
        try:
            f = pd.read_parquet(path)
        except Exception as exc:  # ArrowInvalid, OSError, ...
            if corrupt is None:
                raise
            corrupt.append((path, f"unreadable parquet: {str(exc).splitlines()[0][:200]}"))
            continue
        obj = spec.objective_for(c.dataset, c.objective_index)
        rec = fstar[_hash(spec.problem(c.dataset, c.objective_index))]
        ident = cell_labels(spec, c, labels)
        const = {
            "spec": spec.name, "dataset": c.dataset,
            "dataset_label": spec.dataset_label(c.dataset),
            "objective": ident["objective"], "family": obj.family,
            "risk": obj.risk or "", "loss": obj.loss,
            "shift_cost": float(obj.shift_cost) if obj.family == "spectral" else 0.0,
            "divergence": obj.divergence if obj.family == "spectral" else "",
            "l2_reg": float(l2_value(obj.l2_reg, rec.get("n", _n_train(spec, c)))),
            **{k: ident[k] for k in ("solver", "solver_name", "config", "lr", "params",
                                     "seed", "budget")},
            "f_star_ref": float(rec["f_star"]),
        }
        for k, v in const.items():
            f[k] = v
        parts.append(f)
    cols = ["spec", "dataset", "dataset_label", "objective", "family", "risk", "loss",
            "shift_cost", "divergence", "l2_reg", "solver", "solver_name", "config", "lr",
            "params", "seed", "budget", "update", "step", "passes", "time", "value",
            "suboptimality", "f_star", "f_star_ref", "diverged"]
    cols += [record_metrics.column(m) for m in spec.record.metrics]
    if not parts:
        return pd.DataFrame(columns=cols)
    t = pd.concat(parts, ignore_index=True)
    t["f_star"] = t["f_star_ref"]
    if spec.reference["lower_to_best"]:
        keys = ["dataset", "objective"]
        low = t[np.isfinite(t["value"])].groupby(keys)["value"].min()
        best = pd.Series([low.get(tuple(k), np.inf) for k in t[keys].to_numpy()],
                         index=t.index)
        t["f_star"] = np.minimum(t["f_star_ref"].to_numpy(), best.to_numpy())
    if spec.record.value != "profile" or spec.reference["lower_to_best"]:
        gap = t["value"] - t["f_star"]
        if spec.record.suboptimality == "relative":
            first = t.groupby(["dataset", "objective", "solver", "config", "seed"],
                              sort=False)["value"].transform("first")
            gap = gap / (first - t["f_star"])
        t["suboptimality"] = gap
    return t[cols]


def _n_train(spec, c):
    return problems.size(spec.problem_description(c.dataset, c.objective_index))["n"]
