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
from ._io import OutputError, RecoveryWarning
from ._lock import RunLockError
from .analysis import mark_selected, select, seed_scores, sensitivity, summary
from .figures import plot_results
from .runner import RunResult, enumerate_cells, merge_cells, run
from .spec import (PAPER_LR_GRID, ObjectiveSpec, PlotSpec, RecordSpec, SolverSpec, Spec,
                   SpecError, bundled_specs, load_spec, spec_from_dict)

__all__ = ["Spec", "ObjectiveSpec", "SolverSpec", "PlotSpec", "RecordSpec", "SpecError",
           "PAPER_LR_GRID", "load_spec", "spec_from_dict", "bundled_specs", "run", "RunResult",
           "enumerate_cells", "merge_cells", "select", "seed_scores", "mark_selected",
           "sensitivity", "summary", "plot_results", "RecoveryWarning", "RunLockError",
           "OutputError"]
