"""Benchmarks: experiment specs, runner, step-size selection, results tables and figures.

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

* :mod:`riskopt.bench.spec` -- the spec format (TOML or dataclasses) and its validation;
* :mod:`riskopt.bench.runner` -- f* cache, JIT warm-up, joblib parallel runs (other joblib
  backends such as dask or ray for clusters), resumption, the output files;
* :mod:`riskopt.bench.selection` -- the papers' step-size rule;
* :mod:`riskopt.bench.plotting` -- figures from the tables.
"""
from .plotting import plot_results
from .runner import RunResult, enumerate_cells, merge_cells, run
from .selection import mark_selected, select, seed_scores
from .spec import (PAPER_LR_GRID, ObjectiveSpec, PlotSpec, SolverSpec, Spec, SpecError,
                   bundled_specs, load_spec, spec_from_dict)

__all__ = ["Spec", "ObjectiveSpec", "SolverSpec", "PlotSpec", "SpecError", "PAPER_LR_GRID",
           "load_spec", "spec_from_dict", "bundled_specs", "run", "RunResult",
           "enumerate_cells", "merge_cells", "select", "seed_scores", "mark_selected",
           "plot_results"]
