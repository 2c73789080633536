"""Benchmarks: experiment specs, runner, analyses (selection, sensitivity), tables and figures.

Needs the ``bench`` extra (pandas, pyarrow, matplotlib, rich, joblib); ``import riskopt`` does
not import this package.

>>> import riskopt.bench as rb
>>> spec = rb.load_spec("quick")                 # a bundled spec (or a path to a TOML file)
>>> [s.name for s in spec.solvers]               # doctest: +SKIP
['prospect', 'lsvrg', 'sgd']
>>> res = rb.run(spec, out="results/quick")      # doctest: +SKIP
>>> res.table, res.figures                       # doctest: +SKIP

The same from the shell::

    riskopt bench list
    riskopt bench run quick --out results/quick --jobs 2
    riskopt bench plot results/quick

One schema and one runner serve every problem family:

* :mod:`riskopt.bench.spec` -- the spec format (TOML or dataclasses) and its validation;
* :mod:`riskopt.bench.problems` -- problem definitions: objective families and data sources
  (data sets, data streams), initial points, evaluation of recorded points;
* :mod:`riskopt.bench.runner` -- f* cache, JIT warm-up, joblib parallel runs (other joblib
  backends such as dask or ray for clusters), resumption, the output files;
* :mod:`riskopt.bench.analysis` -- the papers' step-size selection, sensitivity, fixed accuracy,
  the step-size range summary (tables in, tables out);
* :mod:`riskopt.bench.figures` -- figures from the tables.

Runs are crash-proof: one run per output folder (:class:`RunLockError` names the other one),
durable atomic writes, corrupt files renamed aside and recomputed (each reported by a
:class:`RecoveryWarning`), an unusable output folder reported by :class:`OutputError`.
"""
import importlib

#: public name -> its submodule; loaded at first use (PEP 562), so that importing one light
#: submodule (``riskopt.bench._io``, ``.spec_tools``: the CLI's error types) does not load
#: pandas, matplotlib and the runner
_LAZY = {
    "OutputError": "._io", "RecoveryWarning": "._io", "RunLockError": "._lock",
    "mark_selected": ".analysis", "select": ".analysis", "seed_scores": ".analysis",
    "sensitivity": ".analysis", "summary": ".analysis", "plot_results": ".figures",
    "RunResult": ".runner", "enumerate_cells": ".runner", "merge_cells": ".runner",
    "run": ".runner", "PAPER_LR_GRID": ".spec", "ObjectiveSpec": ".spec", "PlotSpec": ".spec",
    "RecordSpec": ".spec", "SolverSpec": ".spec", "Spec": ".spec", "SpecError": ".spec_tools",
    "bundled_specs": ".spec", "load_spec": ".spec", "spec_from_dict": ".spec",
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'riskopt.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


__all__ = ["Spec", "ObjectiveSpec", "SolverSpec", "PlotSpec", "RecordSpec", "SpecError",
           "PAPER_LR_GRID", "load_spec", "spec_from_dict", "bundled_specs", "run", "RunResult",
           "enumerate_cells", "merge_cells", "select", "seed_scores", "mark_selected",
           "sensitivity", "summary", "plot_results", "RecoveryWarning", "RunLockError",
           "OutputError"]
