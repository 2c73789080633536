"""Experiment specifications: one schema for every problem family.

A spec is data: a TOML file or the same dataclasses built in Python. It names the *problems*
(data sources x objectives of some family with their parameters), the *solvers* (with their
step-size grids and further hyper-parameter grids), the *seeds*, the *budget* (passes over a
data set, or steps on a data stream), *what to record* (when, and which value), the *initial
point*, the *reference* ``f*`` and the *analyses* (tables and figures) to produce. Example (the
bundled ``quick`` spec)::

    name = "quick"
    description = "Smoke test: two small datasets, two risks, three solvers"
    datasets = ["yacht", "energy"]
    seeds = [0, 1]
    passes = 16                       # budget in passes (oracle calls / n)
    lr = [0.001, 0.01, 0.1]           # default step-size grid of every solver

    # defaults for every objective (each may override them)
    loss = "squared"
    shift_cost = 0.5                  # nu; the Prospect code's shift_cost = 1
    divergence = "chi2"
    l2_reg = "1/n"                    # a number, "c/n" or "1/(k n)"

    objectives = ["cvar:0.5", "extremile:2"]

    [[solvers]]
    name = "prospect"

    [[solvers]]
    name = "sgd"
    params = { batch_size = 64 }      # fixed hyper-parameters
    # grid = { momentum = [0.5, 0.9] }  # further hyper-parameters searched jointly with lr

Another family, a data stream, the value at the averaged iterates and the sensitivity analyses
(a shortened ``ru_cvar_synthetic_quick``)::

    name = "stream_demo"
    family = "ru_cvar"                # objective default: the family ...
    beta = 0.95                       # ... and its parameters
    l2_reg = 0.0
    objectives = [{ family = "ru_cvar" }]
    datasets = [{ name = "sq_normal", source = "synthetic", loss = "squared", noise = "normal",
                  n_eval = 5000 }]
    steps = 2000                      # budget of the streaming runs
    init = "random"                   # coef0 ~ N(0, I), auxiliary variables ~ U(0, 1)
    record = { value = "iterate", points = 10, suboptimality = "absolute" }
    reference = { lower_to_best = true }
    selection = { rule = "final" }
    analyses = ["convergence", "sensitivity", "fixed_accuracy"]
    analysis = { epsilon = 0.05, epsilon_scale = "gap" }
    solvers = [{ name = "sgm", params = { schedule = "decreasing" } }]

Top-level keys
--------------
``name`` (required), ``description``, ``datasets`` (required), ``objectives`` (required),
``solvers`` (required: names or tables), ``seeds`` (list of ints, default ``[0, 1, 2]``; each
is the solver's ``random_state`` and draws the random initial point) or ``n_seeds``,
``passes`` (default 64; budget on data sets), ``passes_by_dataset`` (e.g. ``{kin8nm = 32}``),
``steps`` (budget on data streams), ``lr`` (default grid; the papers' grid ``[1e-4, 3e-4, ...,
1, 3]`` when absent), the objective defaults ``family`` (default ``"spectral"``), ``loss``,
``shift_cost``, ``divergence``, ``l2_reg``, ``fit_intercept`` and the families' parameters
(``beta``), ``protocol`` (dataset preparation, default ``"paper"``), ``jobs``, ``notes`` and
the tables below.

``datasets``
    Data set names (:func:`riskopt.datasets.load`, training split) or tables ``{name, label,
    source, loss, l2_reg, fit_intercept, ...}``: ``source`` is ``"dataset"`` (default) or a
    data stream of :data:`riskopt.bench.problems.SOURCES` (e.g. ``"synthetic"`` with its
    parameters ``noise``, ``d``, ``n_eval``, ...); ``loss``, ``l2_reg``, ``fit_intercept``
    override the objectives' values on this data set. ``dataset_defaults`` (table) gives
    defaults to every dataset table.
``objectives``
    Risk strings of the spectral family (``"cvar:0.5"``) or tables: ``family``, ``risk``,
    ``loss``, ``shift_cost``, ``divergence``, ``l2_reg``, ``fit_intercept``, ``label`` and the
    family's parameters (``beta`` for ``ru_cvar``).
``record``
    ``value``: ``"profile"`` (default: the objective at the solver's iterate, minimised over
    the auxiliary variables, recorded after every update by :class:`riskopt.Trace`) or
    ``"iterate"`` (``F`` at the point the solver reports, auxiliary variables included -- the
    averaged iterate of averaging methods -- evaluated after the run); ``every`` (passes
    between records, ``"iterate"`` only, default 1); ``points`` (streams: records at ``points``
    log-spaced steps in ``[10, steps]`` and at step 0, default 30); ``suboptimality``:
    ``"relative"`` (default, ``(F - f*) / (F(x0) - f*)``) or ``"absolute"`` (``F - f*``);
    ``metrics``: model metrics at the same points (data sets only, ``value = "iterate"``),
    e.g. ``["train_accuracy", "test_accuracy"]``: see :mod:`riskopt.bench.record_metrics`.
``init``
    ``"zeros"`` (default: the solver's start) or ``"random"`` (``coef0 ~ N(0, I)``, auxiliary
    variables ``~ U(0, 1)``, drawn from the seed), or a table ``{coef = "zeros" | "normal",
    aux = "default" | "uniform"}``.
``reference``
    ``method`` (default ``"auto"``: :meth:`objective.reference_solution`), ``lower_to_best``
    (default false: when true, ``f*`` is lowered to the smallest value any run reached on the
    problem; the table keeps ``f_star_ref``).
``selection``
    ``rule``: ``"last_passes"`` (the papers' rule, default; ``last_passes`` = 10) or
    ``"final"`` (the smallest median final suboptimality over seeds).
``analyses``
    Any of ``"convergence"`` (default; the selected configurations' suboptimality curves:
    ``figure.png`` and ``figure_<x>.png``), ``"sensitivity"`` (final suboptimality vs ``lr``:
    ``sensitivity.parquet/csv``, ``summary.csv``, ``sensitivity.png``) and
    ``"fixed_accuracy"`` (budget to reach ``epsilon`` vs ``lr``: ``fixed_accuracy.png``),
    ``"metrics"`` (the recorded ``record.metrics`` of the selected configurations vs samples
    processed: ``metrics.png``, and their final values: ``metrics_final.csv``).
``analysis``
    ``epsilon`` (0.01), ``epsilon_scale`` (``"gap"``: times the median initial gap;
    ``"fstar"``: times ``|f*|``; ``"absolute"``), ``tolerance`` (10: a "good" ``lr`` ends
    within ``tolerance`` x the best).
``plot``
    ``x`` (``["passes", "time"]``; ``"steps"`` for streams), ``band`` (``"minmax"``,
    ``"iqr"``, ``"none"``), ``floor`` (1e-12), ``columns`` (panels per row), ``xscale``
    (``"linear"`` or ``"log"``).

Solver tables: ``name`` (registry name, required), ``label`` (display name; needed when the same
solver appears twice), ``lr`` (grid), ``params`` (fixed constructor arguments), ``grid`` (other
constructor arguments searched jointly with ``lr``: every combination is one configuration).

The same in Python::

    from riskopt.bench import ObjectiveSpec, SolverSpec, Spec, run
    spec = Spec(name="mine", datasets=["yacht"],
                objectives=[ObjectiveSpec("cvar:0.5", shift_cost=0.5)],
                solvers=[SolverSpec("prospect", lr=[0.01, 0.03]),
                         SolverSpec("sgd", lr=[0.01, 0.1], params={"batch_size": 64})],
                seeds=[0, 1], passes=16)
    run(spec, out="results/mine", jobs=2)

Every problem is reported with a :class:`SpecError` whose message starts with the offending key
(``solvers[2].lr[0]: ...``).
"""
import json
import numbers
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional

from . import problems
from ._paths import check_spec_name
from ._spec_entries import (PAPER_LR_GRID, DatasetSpec, ObjectiveSpec, PlotSpec, RecordSpec,
                            SolverSpec)
from .spec_tools import (SpecError, as_list, check_int, check_number, content_hash, fmt, l2_value,
                         one_of, parse_l2_reg, read_utf8, unknown_keys)

__all__ = ["Spec", "ObjectiveSpec", "SolverSpec", "PlotSpec", "RecordSpec", "SpecError",
           "PAPER_LR_GRID", "spec_from_dict", "load_spec", "bundled_specs", "read_spec_text",
           "l2_value", "parse_l2_reg"]

_OBJ_DEFAULTS = ("family", "loss", "shift_cost", "divergence", "l2_reg", "fit_intercept")
_TOP_KEYS = {"name", "description", "datasets", "dataset_defaults", "objectives", "solvers",
             "seeds", "n_seeds", "passes", "passes_by_dataset", "steps", "lr", "protocol",
             "jobs", "selection", "plot", "record", "init", "reference", "analyses", "analysis",
             "notes", *_OBJ_DEFAULTS}
_OBJECTIVE_KEYS = {"risk", "label", *_OBJ_DEFAULTS}
_OVERRIDES = {"loss", "l2_reg", "fit_intercept"}
_DATASET_KEYS = {"name", "label", "source", *_OVERRIDES}
_SOLVER_KEYS = {"name", "label", "lr", "params", "grid"}
_PLOT_KEYS = {"x", "band", "floor", "columns", "xscale"}
_SELECTION_KEYS = {"last_passes", "rule"}
_RECORD_KEYS = {"value", "every", "points", "suboptimality", "metrics"}
_REFERENCE_KEYS = {"method", "lower_to_best"}
_ANALYSIS_KEYS = {"epsilon", "epsilon_scale", "tolerance"}
ANALYSES = ("convergence", "sensitivity", "fixed_accuracy", "metrics")
_INITS = {"zeros": {"coef": "zeros", "aux": "default"},
          "random": {"coef": "normal", "aux": "uniform"}}


# ---------------------------------------------------------------------------- the spec
@dataclass
class Spec:
    """A full experiment. See the module docstring for the TOML form."""

    name: str
    datasets: list
    objectives: list
    solvers: list
    seeds: list = field(default_factory=lambda: [0, 1, 2])
    passes: int = 64
    passes_by_dataset: dict = field(default_factory=dict)
    steps: Optional[int] = None
    description: str = ""
    protocol: str = "paper"
    jobs: Optional[int] = None
    last_passes: int = 10
    selection_rule: str = "last_passes"
    plot: PlotSpec = field(default_factory=PlotSpec)
    record: RecordSpec = field(default_factory=RecordSpec)
    init: object = "zeros"
    reference: dict = field(default_factory=dict)
    analyses: tuple = ("convergence",)
    analysis: dict = field(default_factory=dict)
    notes: str = ""
    source: Optional[str] = None  # the TOML text this spec was read from, if any
    dataset_specs: dict = field(default_factory=dict)  # name -> DatasetSpec (tables only)

    # ---------------------------------------------------------------- derived
    def dataset(self, name):
        """The :class:`DatasetSpec` of a data set name."""
        return self.dataset_specs.get(name) or DatasetSpec(name)

    def budget(self, dataset):
        """Passes for ``dataset`` (or steps when it is a data stream)."""
        if self.dataset(dataset).streaming:
            return int(self.steps)
        return int(self.passes_by_dataset.get(dataset, self.passes))

    def objective_for(self, dataset, j):
        """Objective ``j`` with the data set's overrides applied."""
        return replace(self.objectives[j], **self.dataset(dataset).overrides)

    def problem(self, dataset, j):
        """What defines problem (``dataset``, objective ``j``): its cache key and its
        description for :func:`riskopt.bench.problems.build`."""
        ds = self.dataset(dataset)
        o = self.objective_for(dataset, j)
        key = {"dataset": dataset, "protocol": self.protocol, "objective": o.key()}
        if ds.source != "dataset":
            key["source"] = {"name": ds.source, "params": ds.params}
        return key

    def problem_description(self, dataset, j):
        ds = self.dataset(dataset)
        return {"dataset": dataset, "protocol": self.protocol,
                "source": {"name": ds.source, "params": ds.params},
                "objective": asdict(self.objective_for(dataset, j))}

    def dataset_label(self, dataset):
        return self.dataset(dataset).label or dataset

    def init_table(self):
        return dict(_INITS[self.init]) if isinstance(self.init, str) else dict(self.init)

    def objective_labels(self):
        """Display labels: the family's label, extended by what differs where labels repeat."""
        labels = []
        for obj in self.objectives:
            if obj.label:
                labels.append(obj.label)
                continue
            base = obj.display()
            same = [o for o in self.objectives if o.display() == base and not o.label]
            parts = [base]
            for attr, short in (("shift_cost", "nu"), ("divergence", "div"), ("l2_reg", "l2"),
                                ("loss", "loss"), ("fit_intercept", "intercept")):
                if len({str(getattr(o, attr)) for o in same}) > 1:
                    parts.append(f"{short}={fmt(getattr(obj, attr))}")
            labels.append(" ".join(parts))
        return labels

    def to_dict(self):
        """The spec as a TOML-like table (``spec_from_dict(spec.to_dict())`` rebuilds it)."""
        d = {"name": self.name, "description": self.description,
             "datasets": [self.dataset(n).to_table() for n in self.datasets],
             "objectives": [o.to_table() for o in self.objectives],
             "solvers": [{k: (list(v) if k == "lr" else v) for k, v in asdict(s).items()
                          if v is not None} for s in self.solvers],
             "seeds": list(self.seeds), "passes": self.passes,
             "passes_by_dataset": dict(self.passes_by_dataset), "protocol": self.protocol,
             "selection": {"last_passes": self.last_passes, "rule": self.selection_rule},
             "plot": {k: (list(v) if k == "x" else v) for k, v in asdict(self.plot).items()
                      if v is not None},
             "record": asdict(self.record), "init": self.init_table(),
             "reference": dict(self.reference), "analyses": list(self.analyses),
             "analysis": dict(self.analysis), "notes": self.notes}
        if self.steps is not None:
            d["steps"] = self.steps
        if self.jobs is not None:
            d["jobs"] = self.jobs
        return d

    def digest(self):
        return content_hash(self.to_dict())

    # ---------------------------------------------------------------- validation
    def validate(self, check_registry=True):
        """Raise :class:`SpecError` (naming the key) for anything wrong; normalise values."""
        check_spec_name(self.name, "name")
        if not isinstance(self.description, str):
            raise SpecError("description", "must be a string")
        self._validate_datasets(check_registry)
        if not isinstance(self.protocol, str):
            raise SpecError("protocol", f"must be a string, got {self.protocol!r}")
        self._validate_objectives()
        sols = as_list("solvers", self.solvers)
        if not sols:
            raise SpecError("solvers", "needs at least one solver")
        for i, s in enumerate(sols):
            if not isinstance(s, SolverSpec):
                raise SpecError(f"solvers[{i}]", "must be a SolverSpec")
            s.validate(f"solvers[{i}]", check_registry=check_registry)
        disp = [s.display for s in sols]
        if len(set(disp)) != len(disp):
            dup = sorted({x for x in disp if disp.count(x) > 1})[0]
            raise SpecError("solvers", f"solver {dup!r} appears twice; give each entry a "
                                       "distinct 'label'")
        self.solvers = sols

        seeds = as_list("seeds", self.seeds)
        if not seeds:
            raise SpecError("seeds", "needs at least one seed")
        for i, s in enumerate(seeds):
            if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
                raise SpecError(f"seeds[{i}]", f"seeds must be integers >= 0, got {s!r}")
        if len(set(seeds)) != len(seeds):
            raise SpecError("seeds", f"duplicate seeds in {seeds}")
        self.seeds = [int(s) for s in seeds]
        self._validate_budgets()
        self.last_passes = check_int("selection.last_passes", self.last_passes)
        one_of("selection.rule", self.selection_rule, ("last_passes", "final"))
        if self.jobs is not None:
            if isinstance(self.jobs, bool) or not isinstance(self.jobs, numbers.Integral) \
                    or self.jobs == 0 or self.jobs < -1:
                raise SpecError("jobs", f"must be an integer >= 1 or -1 (all cores), got "
                                        f"{self.jobs!r}")
        for name, cls in (("plot", PlotSpec), ("record", RecordSpec)):
            if not isinstance(getattr(self, name), cls):
                raise SpecError(name, f"must be a {cls.__name__}")
            getattr(self, name).validate()
        self._validate_options()
        return self

    def _validate_datasets(self, check_registry):
        ds = as_list("datasets", self.datasets)
        if not ds:
            raise SpecError("datasets", "needs at least one dataset")
        known = None
        if check_registry:
            from .. import datasets as _datasets

            known = list(_datasets.names())
        names = []
        for i, d in enumerate(ds):
            key = f"datasets[{i}]"
            if isinstance(d, DatasetSpec):
                self.dataset_specs[d.name] = d
                d = d.name
            if not isinstance(d, str) or not d:
                raise SpecError(key, f"must be a dataset name, got {d!r}")
            spec = self.dataset(d)
            problems.source(spec.source, f"{key}.source")
            if spec.source == "dataset" and known is not None and d.split("/")[0] not in known:
                raise SpecError(key, f"unknown dataset {d!r}; available: {', '.join(known)}")
            spec.params = problems.source(spec.source).validate(spec.params, key)
            names.append(d)
        if len(set(names)) != len(names):
            raise SpecError("datasets", f"duplicate datasets in {names}")
        self.datasets = names

    def _validate_objectives(self):
        objs = as_list("objectives", self.objectives)
        if not objs:
            raise SpecError("objectives", "needs at least one objective")
        for i, o in enumerate(objs):
            if not isinstance(o, ObjectiveSpec):
                raise SpecError(f"objectives[{i}]", "must be an ObjectiveSpec")
            o.validate(f"objectives[{i}]")
        self.objectives = objs
        labels = self.objective_labels()
        if len(set(labels)) != len(labels):
            dup = sorted({x for x in labels if labels.count(x) > 1})
            raise SpecError("objectives", f"two objectives share the label {dup[0]!r}; give "
                                          "them distinct 'label' values")
        keys = [json.dumps(o.key(), sort_keys=True) for o in objs]
        if len(set(keys)) != len(keys):
            raise SpecError("objectives", "the same objective is listed twice")
        for d in self.datasets:
            for j in range(len(objs)):
                o = self.objective_for(d, j)
                if o is not objs[j]:
                    o.validate(f"datasets[{self.datasets.index(d)}]")

    def _validate_budgets(self):
        self.passes = check_int("passes", self.passes)
        if not isinstance(self.passes_by_dataset, dict):
            raise SpecError("passes_by_dataset", "must be a table such as {kin8nm = 32}")
        for d, v in self.passes_by_dataset.items():
            if d not in self.datasets:
                raise SpecError(f"passes_by_dataset.{d}", f"{d!r} is not in datasets")
            self.passes_by_dataset[d] = check_int(f"passes_by_dataset.{d}", v)
        streams = [d for d in self.datasets if self.dataset(d).streaming]
        if self.steps is not None:
            self.steps = check_int("steps", self.steps)
        elif streams:
            raise SpecError("steps", f"is required: {streams[0]!r} is a data stream")

    def _validate_options(self):
        init = self.init
        if isinstance(init, str):
            if init not in _INITS:
                raise SpecError("init", f"must be one of {', '.join(_INITS)} or a table, got "
                                        f"{init!r}")
        elif isinstance(init, dict):
            unknown_keys("init", init, {"coef", "aux"})
            self.init = {"coef": one_of("init.coef", init.get("coef", "zeros"),
                                        ("zeros", "normal")),
                         "aux": one_of("init.aux", init.get("aux", "default"),
                                       ("default", "uniform"))}
            for name, table in _INITS.items():
                if table == self.init:
                    self.init = name
        else:
            raise SpecError("init", f"must be a string or a table, got {init!r}")
        if not isinstance(self.reference, dict):
            raise SpecError("reference", "must be a table")
        unknown_keys("reference", self.reference, _REFERENCE_KEYS)
        ref = {"method": "auto", "lower_to_best": False, **self.reference}
        if not isinstance(ref["method"], str):
            raise SpecError("reference.method", f"must be a string, got {ref['method']!r}")
        if not isinstance(ref["lower_to_best"], bool):
            raise SpecError("reference.lower_to_best", "must be true or false")
        self.reference = ref
        an = as_list("analyses", self.analyses)
        for i, a in enumerate(an):
            one_of(f"analyses[{i}]", a, ANALYSES)
        if "fixed_accuracy" in an and "sensitivity" not in an:
            an.insert(an.index("fixed_accuracy"), "sensitivity")
        self.analyses = tuple(dict.fromkeys(an))
        if not isinstance(self.analysis, dict):
            raise SpecError("analysis", "must be a table")
        unknown_keys("analysis", self.analysis, _ANALYSIS_KEYS)
        a = {"epsilon": 0.01, "epsilon_scale": "gap", "tolerance": 10.0, **self.analysis}
        a["epsilon"] = check_number("analysis.epsilon", a["epsilon"], 0.0, lo_open=True)
        one_of("analysis.epsilon_scale", a["epsilon_scale"], ("gap", "fstar", "absolute"))
        a["tolerance"] = check_number("analysis.tolerance", a["tolerance"], 1.0, lo_open=True)
        self.analysis = a


# ---------------------------------------------------------------------------- parsing
def _table(data, key, allowed):
    t = data.get(key, {})
    if not isinstance(t, dict):
        raise SpecError(key, "must be a table")
    unknown_keys(key, t, allowed)
    return dict(t)


def _parse_datasets(data):
    defaults = _table(data, "dataset_defaults", set().union(
        _DATASET_KEYS - {"name", "label"}, *(s.params for s in problems.SOURCES.values())))
    out = []
    for i, d in enumerate(as_list("datasets", data["datasets"])):
        key = f"datasets[{i}]"
        if isinstance(d, str) and not defaults:
            out.append(d)
            continue
        if isinstance(d, str):
            d = {"name": d}
        if not isinstance(d, dict):
            raise SpecError(key, f"must be a dataset name or a table, got {d!r}")
        d = {**defaults, **d}
        if "name" not in d:
            raise SpecError(f"{key}.name", "is required")
        src = d.pop("source", "dataset")
        allowed = _DATASET_KEYS | set(problems.source(src, f"{key}.source").params)
        unknown_keys(key, d, allowed)
        out.append(DatasetSpec(d.pop("name"), src, d.pop("label", None),
                               overrides={k: d.pop(k) for k in list(d) if k in _OVERRIDES},
                               params=d))
    return out


def _entries(data, name, scalar_key, allowed):
    """``(key, table)`` of the entries of list ``name``: strings become ``{scalar_key: s}``;
    unknown keys are reported."""
    for i, e in enumerate(as_list(name, data[name])):
        key = f"{name}[{i}]"
        if isinstance(e, str):
            e = {scalar_key: e}
        if not isinstance(e, dict):
            what = "a risk string" if scalar_key == "risk" else f"a {scalar_key}"
            raise SpecError(key, f"must be {what} or a table, got {e!r}")
        unknown_keys(key, e, allowed)
        yield key, dict(e)


def _parse_objectives(data):
    fam_keys = problems.family_param_names()
    defaults = {k: data[k] for k in _OBJ_DEFAULTS if k in data}
    fam_defaults = {k: data[k] for k in fam_keys if k in data}
    objectives = []
    for key, o in _entries(data, "objectives", "risk", _OBJECTIVE_KEYS | fam_keys):
        o = {**defaults, **o}
        fam = problems.family(o.get("family", "spectral"), f"{key}.family")
        if fam.name == "spectral" and "risk" not in o:
            raise SpecError(f"{key}.risk", "is required")
        params = {k: v for k, v in fam_defaults.items() if k in fam.params}
        params.update({k: o.pop(k) for k in list(o) if k in fam_keys})
        if fam.name != "spectral":
            o.pop("shift_cost", None)
            o.pop("divergence", None)
        objectives.append(ObjectiveSpec(**o, params=params))
    return objectives


def spec_from_dict(data, source=None, check_registry=True):
    """Build and validate a :class:`Spec` from a parsed TOML table (or an equivalent dict)."""
    if not isinstance(data, dict):
        raise SpecError("", "a spec must be a table")
    _fam_keys = problems.family_param_names()
    unknown_keys("", data, _TOP_KEYS | _fam_keys)
    for req in ("name", "datasets", "objectives", "solvers"):
        if req not in data:
            raise SpecError(req, "is required")
    datasets = _parse_datasets(data)
    objectives = _parse_objectives(data)
    default_lr = data.get("lr", PAPER_LR_GRID)
    solvers = []
    for key, s in _entries(data, "solvers", "name", _SOLVER_KEYS):
        if "name" not in s:
            raise SpecError(f"{key}.name", "is required")
        s.setdefault("lr", default_lr)
        solvers.append(SolverSpec(**s))

    if "seeds" in data and "n_seeds" in data:
        raise SpecError("n_seeds", "give either 'seeds' or 'n_seeds', not both")
    if "n_seeds" in data:
        seeds = list(range(check_int("n_seeds", data["n_seeds"])))
    else:
        seeds = data.get("seeds", [0, 1, 2])
    plot = _table(data, "plot", _PLOT_KEYS)
    selection = _table(data, "selection", _SELECTION_KEYS)
    record = _table(data, "record", _RECORD_KEYS)
    pbd = data.get("passes_by_dataset", {})
    spec = Spec(
        name=data["name"], datasets=datasets, objectives=objectives, solvers=solvers,
        seeds=seeds, passes=data.get("passes", 64), steps=data.get("steps"),
        passes_by_dataset=dict(pbd) if isinstance(pbd, dict) else pbd,
        description=data.get("description", ""), protocol=data.get("protocol", "paper"),
        jobs=data.get("jobs"), last_passes=selection.get("last_passes", 10),
        selection_rule=selection.get("rule", "last_passes"), plot=PlotSpec(**plot),
        record=RecordSpec(**record), init=data.get("init", "zeros"),
        reference=data.get("reference", {}), analyses=data.get("analyses", ["convergence"]),
        analysis=data.get("analysis", {}), notes=data.get("notes", ""), source=source,
    )
    return spec.validate(check_registry=check_registry)


def bundled_specs():
    """``{name: path}`` of the specs shipped with riskopt (``riskopt bench list``)."""
    from importlib import resources

    folder = resources.files("riskopt.bench") / "specs"
    out = {}

    def natural(p):
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]

    for entry in sorted(folder.iterdir(), key=natural):
        if entry.name.endswith(".toml"):
            out[entry.name[:-5]] = entry
    return out


def read_spec_text(spec):
    """TOML text of a spec given as a path or a bundled spec name."""
    path = Path(spec)
    if path.is_file():
        return read_utf8(path), str(path)
    if path.suffix == ".toml":
        raise FileNotFoundError(f"spec file not found: {spec}")
    bundled = bundled_specs()
    if str(spec) in bundled:
        return bundled[str(spec)].read_text(encoding="utf-8"), f"bundled:{spec}"
    raise FileNotFoundError(f"no spec file {spec!r} and no bundled spec of that name; bundled: "
                            f"{', '.join(bundled)}")


def load_spec(spec, check_registry=True):
    """Read a spec from a TOML path or a bundled name (``"quick"``) and validate it."""
    import tomllib

    if isinstance(spec, Spec):
        return spec.validate(check_registry=check_registry)
    text, origin = read_spec_text(spec)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError("", f"invalid TOML in {origin}: {exc}") from None
    return spec_from_dict(data, source=text, check_registry=check_registry)
