"""The order the benchmark runner starts runs in (:func:`riskopt.bench._cells.run_order`): seed
by seed, the costliest problem first within a seed, each problem's runs together, so that a
run cut part-way leaves groups that compare across methods."""
import pytest

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("joblib")

import riskopt.bench as rb  # noqa: E402
from riskopt.bench import runner  # noqa: E402
from riskopt.bench._cells import run_order  # noqa: E402
from riskopt.bench.spec import spec_from_dict  # noqa: E402

SOLVERS = ["prospect", "sgd"]   # both run the spectral problems at shift cost 0.5


def _group(c):
    """The comparable group of a cell: one problem at one seed, every solver and config."""
    return c.seed, c.dataset, c.objective_index


def _partial_groups(cells, done):
    """The groups with some but not all of their cells in ``done`` (cell ids), and whether
    every group of a seed before the latest started one is complete."""
    groups = {}
    for c in cells:
        groups.setdefault(_group(c), []).append(c.id in done)
    partial = [g for g, f in groups.items() if any(f) and not all(f)]
    started = [g for g, f in groups.items() if any(f)]
    seeds = [s for s in dict.fromkeys(c.seed for c in cells)]
    last = max((seeds.index(g[0]) for g in started), default=-1)
    earlier_complete = all(all(f) for g, f in groups.items() if seeds.index(g[0]) < last)
    return partial, earlier_complete


def _order_spec(seeds=(3, 1)):
    return spec_from_dict({
        "name": "order", "datasets": ["yacht", "energy"], "seeds": list(seeds), "passes": 4,
        "passes_by_dataset": {"yacht": 2}, "lr": [0.01, 0.1], "shift_cost": 0.5,
        "objectives": ["cvar:0.5", "extremile:2"], "solvers": SOLVERS})


def test_run_order_is_seed_by_seed_costliest_problem_first():
    spec = _order_spec()
    cells = rb.enumerate_cells(spec)
    sizes = {"yacht": {"n_train": 244}, "energy": {"n_train": 614}}
    order = sorted(cells, key=run_order(spec, sizes))
    per_problem = len(SOLVERS) * 2                     # solvers x step sizes
    assert len(order) == 2 * 2 * 2 * per_problem
    # the spec's seed order (3 before 1), not the numeric one
    assert [c.seed for c in order] == [3] * (len(order) // 2) + [1] * (len(order) // 2)
    # within a seed: energy (614 x 4 passes) before yacht (244 x 2), objectives in spec order,
    # each problem's runs contiguous and in spec order (solver, then step size)
    problems = [(c.dataset, c.objective_index) for c in order[: len(order) // 2]]
    assert problems == [(d, j) for d in ("energy", "yacht") for j in (0, 1)
                        for _ in range(per_problem)]
    same = [c for c in cells if (c.seed, c.dataset, c.objective_index) == (3, "energy", 0)]
    assert order[:per_problem] == same
    # a cut after any k runs leaves at most one partial group, and the earlier seeds complete
    for k in range(len(order) + 1):
        partial, earlier = _partial_groups(cells, {c.id for c in order[:k]})
        assert len(partial) <= 1 and earlier, k
    # the old order (cost alone) fails this: it ran every seed of energy before yacht
    by_cost = sorted(cells, key=lambda c: -sizes[c.dataset]["n_train"] * c.passes)
    assert not _partial_groups(cells, {c.id for c in by_cost[: len(order) // 2]})[1]


def _finished(out, cells):
    return {c.id for c in cells if (out / "cells" / f"{c.id}.parquet").exists()}


def test_a_cut_run_leaves_complete_groups_and_resumes(tmp_path, monkeypatch):
    """The runner's own cuts: ``max_cells`` and a Ctrl-C in the k-th run (the cell function
    patched to raise ``KeyboardInterrupt``); each time at most one (seed, problem) group is
    partial and every earlier seed is complete; a resumed run continues in the same order
    and finishes."""
    spec = spec_from_dict({
        "name": "cut", "datasets": ["yacht"], "seeds": [0, 1], "passes": 2,
        "lr": [0.01, 0.1], "shift_cost": 0.5,
        "objectives": ["cvar:0.5", "extremile:2"], "solvers": [SOLVERS[1]],
        "plot": {"x": ["passes"]}})
    cells = rb.enumerate_cells(spec)
    assert len(cells) == 8                                   # 2 objectives x 2 lr x 2 seeds
    out = tmp_path / "res"
    first = rb.run(spec, out=out, jobs=1, progress=False, max_cells=3, plot=False)
    assert first.n_run == 3 and not first.complete
    done = _finished(out, cells)
    assert len(done) == 3 and {c.seed for c in cells if c.id in done} == {0}
    partial, earlier = _partial_groups(cells, done)
    assert len(partial) == 1 and earlier

    real, calls = runner._run_cell, []

    def cut(task):
        calls.append(task["id"])
        if len(calls) == 3:                                  # Ctrl-C during the 3rd run
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(runner, "_run_cell", cut)
    with pytest.raises(KeyboardInterrupt):
        rb.run(spec, out=out, jobs=1, progress=False, plot=False)
    done = _finished(out, cells)
    assert len(done) == 5                                    # 3 + the 2 runs before the cut
    partial, earlier = _partial_groups(cells, done)
    assert len(partial) == 1 and earlier                    # seed 0 complete, seed 1 begun
    assert {_group(c) for c in cells if c.seed == 0} <= {_group(c) for c in cells
                                                          if c.id in done}
    monkeypatch.undo()
    last = rb.run(spec, out=out, jobs=1, progress=False, plot=False)
    assert last.complete and last.n_reused == 5 and last.n_run == 3
