"""The cells of a spec: one run each (data set, objective, solver, configuration, seed), named
by a hash of its whole content, and the columns that name a cell in the long-form table.
(:mod:`riskopt.bench.runner` runs them; :mod:`riskopt.bench._record` restores them from
``results.parquet``.)"""
import json
from dataclasses import dataclass

from .spec_tools import content_hash as _hash

CELL_FORMAT = 1


@dataclass
class Cell:
    id: str
    dataset: str
    objective_index: int
    solver_index: int
    config: dict
    seed: int
    passes: int  # the budget: passes, or steps on a data stream
    key: dict


def enumerate_cells(spec):
    """Every run of the spec, in spec order (dataset, objective, solver, config, seed)."""
    cells = []
    rec = spec.record
    for d in spec.datasets:
        streaming = spec.dataset(d).streaming
        for j in range(len(spec.objectives)):
            for i, sol in enumerate(spec.solvers):
                for cfg in sol.configs():
                    for seed in spec.seeds:
                        key = {"format": CELL_FORMAT, "problem": spec.problem(d, j),
                               "solver": sol.name, "config": cfg, "seed": seed,
                               "passes": spec.budget(d)}
                        if rec.value != "profile":
                            key["record"] = {"value": rec.value, "every": rec.every} \
                                if not streaming else {"value": rec.value,
                                                       "points": rec.points}
                            if rec.metrics:
                                key["record"]["metrics"] = list(rec.metrics)
                        if spec.init != "zeros":
                            key["init"] = spec.init_table()
                        cells.append(Cell(_hash(key), d, j, i, cfg, seed, spec.budget(d), key))
    return cells


def config_label(cfg):
    """``lr=0.01`` or ``lr=0.01,dual_lr=0.4`` (all hyper-parameters but the seed)."""
    return ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in cfg.items())


def cell_labels(spec, c, labels=None):
    """The columns of the long-form table that name the cell ``c`` (one value each):
    ``dataset, objective, solver, solver_name, config, lr, params, seed, budget``. Together
    they identify a cell's rows in ``results.parquet`` (:mod:`riskopt.bench._record`)."""
    labels = labels if labels is not None else spec.objective_labels()
    sol = spec.solvers[c.solver_index]
    params = {k: v for k, v in c.config.items() if k != "lr"}
    return {"dataset": c.dataset, "objective": labels[c.objective_index],
            "solver": sol.display, "solver_name": sol.name, "config": config_label(c.config),
            "lr": float(c.config["lr"]), "params": json.dumps(params, sort_keys=True),
            "seed": int(c.seed), "budget": int(c.passes)}


def run_order(spec, sizes):
    """The sort key of the order the runner starts runs in: seed by seed (the spec's order of
    ``seeds``), and within one seed the costliest problem first (``n_train`` x budget; ties in
    spec order), each problem's runs (every solver and configuration) one after another.

    A run cut part-way (Ctrl-C, a time limit, ``max_cells``) therefore leaves whole groups
    that can be compared across methods: every (data set, objective) of the finished seeds
    with all its solvers and configurations, and within the seed in progress whole problems
    but the one being run. Ordering by cost alone (largest first, what the runner did up to
    stop 42) left every seed of the large data sets done and the small ones not started.
    Within a seed the long runs still start first, which is what keeps the parallel
    (``jobs``) schedule from ending on a long straggler; across seeds a long run of the next
    seed starts once the previous seed's runs are handed out (joblib dispatches in order).
    A data set's folds are data sets (``law_school/fold1of5``, ...): one group each.

    ``sizes``: ``{dataset: {"n_train": ...}}`` (:func:`riskopt.bench.runner.prepare`). Use
    with a stable sort on cells in spec order (:func:`enumerate_cells`).
    """
    seed_rank = {s: i for i, s in enumerate(spec.seeds)}
    data_rank = {d: i for i, d in enumerate(spec.datasets)}

    def key(c):
        return (seed_rank.get(c.seed, len(seed_rank)), -sizes[c.dataset]["n_train"] * c.passes,
                data_rank.get(c.dataset, len(data_rank)), c.objective_index)

    return key
