"""What a worker does (:mod:`riskopt.bench.runner` hands it out): run one cell -- the solver
from its initial point on its problem, recording the objective (the profile value through a
:class:`~riskopt.Trace`, or ``F`` at the reported points, with the recorded metrics) at the
spec's record points -- or compute one problem's reference ``f*``. Kernels are compiled once
per process first (:func:`_warm_up`), so that the timed run measures the algorithm. Nothing
here writes a file: the results go back to the runner's process."""
import json
import math
import time
import traceback
import warnings

import numpy as np

from . import _procs, problems, record_metrics
from ..callbacks import Callback


# ---------------------------------------------------------------------------- problems
def _problem(task):
    return problems.build(task["problem"])


def _compute_fstar(problem, reference):
    """``f*`` of a problem: ``objective.reference_solution(reference["method"])``."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        obj = problems.build(problem).objective
        t0 = time.perf_counter()
        ref = obj.reference_solution(reference["method"])
        sec = time.perf_counter() - t0
    return {"f_star": float(ref.value), "seconds": sec, "message": str(ref.message),
            "aux": [float(a) for a in ref.aux], "n": int(obj.n), "p": int(obj.p)}


# ---------------------------------------------------------------------------- cells
def record_steps(budget, points):
    """Streams: step 0 and ``points`` log-spaced steps in ``[10, budget]`` (unique)."""
    lo = min(10, budget)
    s = np.unique(np.round(np.geomspace(lo, budget, points)).astype(np.int64))
    return np.concatenate([[0], s]).astype(np.int64)


def record_passes(budget, every):
    """Data sets: passes ``0, every, 2 every, ...`` and the budget."""
    k = np.arange(0, budget + 1, every, dtype=np.int64)
    return k if k[-1] == budget else np.append(k, budget)


_WARM = set()


def _warm_up(solver_name, cfg, problem):
    """Compile (or load from numba's cache) the solver's kernels once per process.

    Runs two updates on the first (at most) 128 rows of the problem's data (a stream's solver
    objective), so that the timed run measures the algorithm, not the JIT.
    """
    from .. import solvers as _solvers
    from ..callbacks import DivergenceWarning

    fixed = {k: v for k, v in cfg.items() if k != "lr"}
    o = problem["objective"]
    key = (solver_name, json.dumps(fixed, sort_keys=True, default=str), o["family"], o["loss"])
    if key in _WARM:
        return
    _WARM.add(key)
    try:
        tiny = problems.tiny(problem)
        solver = _solvers.get(solver_name, **{**cfg, "lr": 1e-6}, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DivergenceWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            solver.run(tiny, max_epochs=2)
    except Exception:  # the real run reports any problem
        pass


def _run_profile(task, prob, solver, coef0, aux0):
    """Record the profile objective after every update through a Trace."""
    from ..callbacks import Trace

    obj = prob.objective
    ppu = float(solver.passes_per_update(obj))
    max_epochs = max(1, math.ceil(task["passes"] / ppu - 1e-9))
    trace = Trace(f_star=task["f_star"])
    res = solver.run(obj, max_epochs=max_epochs, callback=trace, coef0=coef0, **aux0)
    values = np.asarray(trace.values, dtype=float)
    passes = np.asarray(trace.passes, dtype=float)
    return {"passes": passes, "step": passes * obj.n, "time": np.asarray(trace.times, float),
            "value": values, "suboptimality": np.asarray(trace.suboptimality, dtype=float),
            "diverged": bool(trace.diverged or res.diverged)}


class _PointRecorder(Callback):
    """Hands the solver's state to ``record(state, elapsed)`` after the updates ``k`` whose
    pass count ``k * passes_per_update`` is a recorded one (the reported point, auxiliary
    variables included, is read from the state: :meth:`~riskopt.solvers.Solver.point`)."""

    def __init__(self, want, ppu, record):
        self.want, self.ppu, self.record, self.k = sorted(w for w in want if w > 0), ppu, record, 0

    def on_update(self, solver, objective, state, passes, elapsed):
        # a record point is taken at the first update reaching it (a solver whose update is
        # not a whole number of passes lands just past it; one whose update is several passes,
        # e.g. LSVRG's 2, records that state for every point it passed)
        self.k += 1
        done = self.k * self.ppu
        if solver._finite(state):
            while self.want and done >= self.want[0] - 1e-9:  # one record per point passed
                self.want.pop(0)
                self.record(state, elapsed, done)


def _run_iterates(task, prob, solver, coef0, aux0):
    """Record the solver's reported point (auxiliary variables included) at the record
    points, then evaluate ``F`` there in one call. A diverged run records NaN points."""
    obj, rec = prob.objective, task["record"]
    state = solver.init_state(obj, coef0=coef0, **aux0)
    coefs, auxs, times, at = [], [], [], []

    def record(state, elapsed, done=None):
        at.append(np.nan if done is None else done)
        if state is None:
            coefs.append(np.full(obj.p * obj.K, np.nan))
            auxs.append((np.nan,) * obj.n_aux)
        else:
            c, a = solver.point(obj, state)
            coefs.append(np.ravel(c).copy())
            auxs.append(a)
        times.append(elapsed)

    elapsed, diverged = 0.0, False
    if prob.streaming:
        steps = record_steps(task["passes"], rec["points"])
        done = 0
        for s in steps:
            if s > done and not diverged:
                res = solver.run_stream(prob.solver_objective, int(s - done),
                                        sampler=prob.sampler, state=state,
                                        chunk_size=prob.chunk_size)
                state, elapsed, done = res.state, elapsed + res.time, int(s)
                diverged = bool(res.diverged)
            record(None if diverged else state, elapsed)
        passes = np.full(len(steps), np.nan)
    else:
        passes = record_passes(task["passes"], rec["every"]).astype(float)
        ppu = float(solver.passes_per_update(obj))
        record(state, 0.0)
        res = solver.run(obj, max_epochs=math.ceil(passes[-1] / ppu - 1e-9), state=state,
                         callback=_PointRecorder(set(passes.tolist()), ppu, record))
        diverged = bool(res.diverged)
        while len(coefs) < len(passes):  # the record points from a divergence on
            record(None, res.time)
        # the passes actually done at each record (past the nominal point by less than one
        # update when an update is not a whole number of passes)
        passes = np.where(np.isfinite(at), at, passes)
        passes[0] = 0.0
        steps = passes * obj.n
    values = problems.evaluate(obj, np.asarray(coefs), np.asarray(auxs))
    out = {"passes": passes, "step": np.asarray(steps, dtype=float),
           "time": np.asarray(times, dtype=float), "value": values, "diverged": diverged}
    if rec.get("metrics"):
        out["metrics"] = record_metrics.compute_for_problem(rec["metrics"], task["problem"],
                                                            obj, np.asarray(coefs))
    return out


def _run_cell(task):
    """Run one cell in a worker; returns ``(cell id, DataFrame or None, error or None)``."""
    import pandas as pd
    from threadpoolctl import threadpool_limits

    from .. import solvers as _solvers
    from ..callbacks import DivergenceWarning

    _procs.watch_parent(task.get("parent"))
    try:
        with threadpool_limits(1):
            prob = _problem(task)
            _warm_up(task["solver"], task["config"], task["problem"])
            solver = _solvers.get(task["solver"], **task["config"], random_state=task["seed"])
            coef0, aux0 = problems.initial_point(task["init"], prob.objective, task["seed"])
            run = _run_profile if task["record"]["value"] == "profile" else _run_iterates
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DivergenceWarning)
                warnings.simplefilter("ignore", RuntimeWarning)  # overflow while blowing up
                out = run(task, prob, solver, coef0, aux0)
        values = out["value"]
        diverged = bool(out["diverged"] or not np.all(np.isfinite(values)))
        frame = pd.DataFrame({
            "update": np.arange(len(values), dtype=np.int64),
            "step": out["step"], "passes": out["passes"], "time": out["time"],
            "value": values,
            "suboptimality": out.get("suboptimality", np.full(len(values), np.nan)),
            "diverged": np.full(len(values), diverged),
            **out.get("metrics", {}),
        })
        return task["id"], frame, None
    except Exception as exc:  # recorded, reported, retried on the next invocation
        return task["id"], None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


def _fstar_task(key, problem, reference, parent=None):
    _procs.watch_parent(parent)
    try:
        return key, _compute_fstar(problem, reference), None
    except Exception as exc:
        return key, None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
