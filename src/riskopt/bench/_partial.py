"""An interrupted run's folder as a partial table, for ``bench report`` and ``bench plot``.

A run cut part-way (Ctrl-C, a time limit, ``max_cells``) leaves ``spec.json``,
``fstar.json`` and its finished cells (``cells/<id>.parquet``), but no ``results.parquet``
or ``metadata.json``: those are written when every run has finished. Since the runner goes
seed by seed and problem by problem (:func:`riskopt.bench._cells.run_order`), the finished
cells form whole (seed, data set, objective) groups, every solver and configuration of a
problem on one seed, but the one group the run was in. :func:`partial_table` merges the
finished cells of the complete groups only (an incomplete group would compare a method that
ran against one that did not), selects the configurations per problem over the seeds that
problem completed, and says in one :class:`Partial` note how many runs are done and which
groups are incomplete and left out. Nothing is run, repaired or written.
"""
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Partial:
    """What an interrupted folder holds: ``n_done`` of ``n_total`` runs finished;
    ``left_out``: ``(seed, data set, objective label, finished, runs)`` of each group with
    some but not all of its runs finished (left out of the table); ``n_not_started``: groups
    with none."""

    n_done: int
    n_total: int
    left_out: list = field(default_factory=list)
    n_not_started: int = 0

    def line(self):
        """One line for a report header or a figure title."""
        text = f"PARTIAL RUN (interrupted): {self.n_done} of {self.n_total} runs done"
        if self.left_out:
            groups = ", ".join(f"{d} / {o} seed {s} ({k} of {m})"
                               for s, d, o, k, m in self.left_out)
            text += f"; incomplete, left out of the comparisons: {groups}"
        if self.n_not_started:
            text += f"; {self.n_not_started} (seed, problem) group(s) not started"
        return text


def is_interrupted(folder):
    """Whether ``folder`` is a run that has not finished: a ``spec.json`` and a ``cells/``
    folder but neither ``results.parquet`` nor ``metadata.json``."""
    folder = Path(folder)
    return ((folder / "spec.json").is_file() and (folder / "cells").is_dir()
            and not (folder / "results.parquet").exists()
            and not (folder / "metadata.json").exists())


def partial_table(folder):
    """``(table, Partial)`` of an interrupted run folder (:func:`is_interrupted`): the
    long-form table of its complete (seed, problem) groups with a ``selected`` column, or a
    ``ValueError`` when no group is complete yet."""
    from . import _state
    from ._cells import enumerate_cells
    from .analysis import mark_selected, select
    from .runner import merge_cells
    from .spec import SpecError, spec_from_dict
    from .spec_tools import content_hash

    folder = Path(folder)
    try:
        spec = spec_from_dict(json.loads((folder / "spec.json").read_text()),
                              check_registry=False)
    except (OSError, ValueError, SpecError) as exc:
        raise ValueError(f"{folder / 'spec.json'} is unreadable ({exc}): not a "
                         "`riskopt bench run` folder") from None
    cells = enumerate_cells(spec)
    fstar = _state.load_fstar(folder / "fstar.json", repair=False, key_hash=content_hash)
    done, _ = _state.check_cells(cells, folder / "cells", repair=False)
    labels = spec.objective_labels()
    groups = {}
    for c in cells:
        has_f = content_hash(spec.problem(c.dataset, c.objective_index)) in fstar
        groups.setdefault((c.seed, c.dataset, c.objective_index), []).append(
            (c, c.id in done and has_f))
    keep, note = [], Partial(sum(ok for g in groups.values() for _, ok in g), len(cells))
    for (seed, d, j), g in groups.items():
        k = sum(ok for _, ok in g)
        if k == len(g):
            keep += [c for c, _ in g]
        elif k:
            note.left_out.append((seed, d, labels[j], k, len(g)))
        else:
            note.n_not_started += 1
    if not keep:
        raise ValueError(f"{folder} is an interrupted run with no complete (seed, problem) "
                         f"group yet ({note.n_done} of {note.n_total} runs done): nothing to "
                         "compare; run the same `riskopt bench run` command again to resume")
    table = merge_cells(spec, keep, folder / "cells", fstar)
    # each problem's configurations are selected over the seeds it completed
    parts = [select(g, last_passes=spec.last_passes, rule=spec.selection_rule)
             for _, g in table.groupby(["dataset", "objective"], sort=False)]
    import pandas as pd

    table = mark_selected(table, pd.concat(parts, ignore_index=True))
    return table, note
