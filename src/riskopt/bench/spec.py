"""Experiment specifications: datasets x objectives x solvers x step-size grids x seeds.

A spec is data: a TOML file or the same dataclasses built in Python. Example (the bundled
``quick`` spec)::

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

Top-level keys
--------------
``name`` (required), ``description``, ``datasets`` (required), ``objectives`` (required: risk
strings or tables), ``solvers`` (required: names or tables), ``seeds`` (list of ints, default
``[0, 1, 2]``; each is the solver's ``random_state``) or ``n_seeds`` (int; seeds
``0..n_seeds-1``), ``passes`` (default 64), ``passes_by_dataset``
(table, e.g. ``{kin8nm = 32}``), ``lr`` (default grid; the papers' grid
``[1e-4, 3e-4, ..., 1, 3]`` when absent), ``loss``, ``shift_cost``, ``divergence``, ``l2_reg``,
``fit_intercept`` (objective defaults), ``protocol`` (dataset preparation, default ``"paper"``),
``jobs`` (default number of parallel workers), ``selection`` (table: ``last_passes``, default
10), ``plot`` (table: ``x = ["passes", "time"]``, ``band = "minmax" | "iqr" | "none"``,
``floor = 1e-12``), ``notes`` (free text kept in the metadata).

Objective tables: ``risk`` (required, e.g. ``"cvar:0.5"``, ``"esrm:1"``, ``"extremile:2"``,
``"mean"``), ``loss``, ``shift_cost``, ``divergence``, ``l2_reg``, ``fit_intercept``, ``label``.

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
import hashlib
import itertools
import json
import math
import numbers
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

#: The step-size grid of the Prospect paper (App. H.3).
PAPER_LR_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0)

_TOP_KEYS = {"name", "description", "datasets", "objectives", "solvers", "seeds", "n_seeds",
             "passes", "passes_by_dataset", "lr", "loss", "shift_cost", "divergence", "l2_reg",
             "fit_intercept", "protocol", "jobs", "selection", "plot", "notes"}
_OBJECTIVE_KEYS = {"risk", "loss", "shift_cost", "divergence", "l2_reg", "fit_intercept", "label"}
_SOLVER_KEYS = {"name", "label", "lr", "params", "grid"}
_PLOT_KEYS = {"x", "band", "floor"}
_SELECTION_KEYS = {"last_passes"}
_RESERVED_PARAMS = {"lr", "random_state"}


class SpecError(ValueError):
    """A bad experiment spec. ``key`` is the offending key path, e.g. ``solvers[1].lr[0]``."""

    def __init__(self, key, message):
        self.key = key
        super().__init__(f"{key}: {message}" if key else message)


# ---------------------------------------------------------------------------- helpers
def _is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _check_name(key, value):
    if not isinstance(value, str) or not value.strip():
        raise SpecError(key, f"must be a non-empty string, got {value!r}")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", value):
        raise SpecError(key, f"{value!r} may only contain letters, digits, '_', '-' and '.'")
    return value


def _unknown_keys(key, table, allowed):
    for k in table:
        if k not in allowed:
            raise SpecError(f"{key}.{k}" if key else k,
                            f"unknown key; allowed keys: {', '.join(sorted(allowed))}")


def _as_list(key, value):
    if isinstance(value, (list, tuple)):
        return list(value)
    raise SpecError(key, f"must be a list, got {type(value).__name__} {value!r}")


def parse_l2_reg(value, key="l2_reg"):
    """Validate an l2 strength: a number >= 0, ``"c/n"`` or ``"a/(b n)"`` (n = training size).

    Returns the value unchanged (a float or the normalised string); use :func:`l2_value`.
    """
    if _is_number(value):
        v = float(value)
        if not math.isfinite(v) or v < 0:
            raise SpecError(key, f"must be a finite number >= 0, got {value!r}")
        return v
    if isinstance(value, str):
        s = value.replace(" ", "")
        num = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
        if re.fullmatch(num + r"/n", s) or re.fullmatch(num + r"/\(" + num + r"\*?n\)", s):
            return s
        raise SpecError(key, f"cannot read {value!r}; use a number, 'c/n' or '1/(k n)', "
                             "e.g. '1/n' or '1/(10n)'")
    raise SpecError(key, f"must be a number or a string such as '1/n', got {value!r}")


def l2_value(l2_reg, n):
    """The numeric l2 strength for ``n`` training samples."""
    if _is_number(l2_reg):
        return float(l2_reg)
    s = l2_reg.replace(" ", "")
    m = re.fullmatch(r"([0-9.eE+-]+)/n", s)
    if m:
        return float(m.group(1)) / n
    m = re.fullmatch(r"([0-9.eE+-]+)/\(([0-9.eE+-]+)\*?n\)", s)
    return float(m.group(1)) / (float(m.group(2)) * n)


def _hash(obj):
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _fmt(v):
    return f"{v:g}" if _is_number(v) else str(v)


# ---------------------------------------------------------------------------- dataclasses
@dataclass
class ObjectiveSpec:
    """One training objective (applied to every dataset of the spec).

    ``risk`` is a short string (``"cvar:0.5"``, ``"esrm:1"``, ``"extremile:2"``, ``"mean"``,
    ``"maxloss"``); ``shift_cost`` is ``nu`` (our scaling: the Prospect code's ``shift_cost=s``
    is ``nu = s/2``); ``l2_reg`` a number, ``"c/n"`` or ``"1/(k n)"``.
    """

    risk: str
    loss: str = "squared"
    shift_cost: float = 0.0
    divergence: str = "chi2"
    l2_reg: object = "1/n"
    fit_intercept: bool = False
    label: Optional[str] = None

    def risk_object(self):
        from ..risks import parse_risk

        return parse_risk(self.risk, shift_cost=float(self.shift_cost),
                          divergence=self.divergence)

    def key(self):
        """Content that defines the problem (labels excluded): used for caching."""
        return {"risk": repr(self.risk_object()), "loss": self.loss,
                "l2_reg": self.l2_reg if isinstance(self.l2_reg, str) else float(self.l2_reg),
                "fit_intercept": bool(self.fit_intercept)}

    def build(self, X, y):
        from ..objectives.spectral import Objective

        n = X.shape[0]
        return Objective(self.loss, self.risk_object(), X, y,
                         l2_reg=l2_value(self.l2_reg, n), fit_intercept=self.fit_intercept)

    def validate(self, key):
        from ..losses import get_loss

        if not isinstance(self.risk, str) or not self.risk:
            raise SpecError(f"{key}.risk", f"must be a string such as 'cvar:0.5', got {self.risk!r}")
        if not _is_number(self.shift_cost) or not math.isfinite(self.shift_cost) \
                or self.shift_cost < 0:
            raise SpecError(f"{key}.shift_cost", f"must be a number >= 0, got {self.shift_cost!r}")
        if self.divergence not in ("chi2", "kl"):
            raise SpecError(f"{key}.divergence",
                            f"must be 'chi2' or 'kl', got {self.divergence!r}")
        self.l2_reg = parse_l2_reg(self.l2_reg, f"{key}.l2_reg")
        if not isinstance(self.fit_intercept, bool):
            raise SpecError(f"{key}.fit_intercept", f"must be true or false, got "
                                                    f"{self.fit_intercept!r}")
        try:
            get_loss(self.loss)
        except ValueError as exc:
            raise SpecError(f"{key}.loss", str(exc)) from None
        try:
            self.risk_object()
        except ValueError as exc:
            raise SpecError(f"{key}.risk", str(exc)) from None
        if self.label is not None and (not isinstance(self.label, str) or not self.label):
            raise SpecError(f"{key}.label", f"must be a non-empty string, got {self.label!r}")


@dataclass
class SolverSpec:
    """One solver with its step-size grid, fixed parameters and further searched parameters."""

    name: str
    lr: tuple = PAPER_LR_GRID
    params: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    label: Optional[str] = None

    @property
    def display(self):
        return self.label or self.name

    def configs(self):
        """Every hyper-parameter setting (dicts with ``lr`` first), in grid order."""
        names = list(self.grid)
        out = []
        for lr in self.lr:
            for combo in itertools.product(*(self.grid[k] for k in names)):
                cfg = {"lr": float(lr)}
                cfg.update(self.params)
                cfg.update(dict(zip(names, combo)))
                out.append(cfg)
        return out

    def validate(self, key, check_registry=True):
        _check_name(f"{key}.name", self.name)
        if self.label is not None:
            _check_name(f"{key}.label", self.label)
        lrs = self.lr if isinstance(self.lr, (list, tuple)) else [self.lr]
        if len(lrs) == 0:
            raise SpecError(f"{key}.lr", "the step-size grid is empty")
        clean = []
        for i, v in enumerate(lrs):
            if not _is_number(v) or not math.isfinite(v) or v <= 0:
                raise SpecError(f"{key}.lr[{i}]", f"step sizes must be finite numbers > 0, "
                                                  f"got {v!r}")
            clean.append(float(v))
        if len(set(clean)) != len(clean):
            raise SpecError(f"{key}.lr", f"duplicate step sizes in {clean}")
        self.lr = tuple(clean)
        if not isinstance(self.params, dict):
            raise SpecError(f"{key}.params", "must be a table of fixed hyper-parameters")
        if not isinstance(self.grid, dict):
            raise SpecError(f"{key}.grid", "must be a table of lists of hyper-parameters")
        for k, vals in self.grid.items():
            if not isinstance(vals, (list, tuple)) or len(vals) == 0:
                raise SpecError(f"{key}.grid.{k}", f"must be a non-empty list, got {vals!r}")
            if k in self.params:
                raise SpecError(f"{key}.grid.{k}", "is also given in params")
        for k in list(self.params) + list(self.grid):
            where = "params" if k in self.params else "grid"
            if k in _RESERVED_PARAMS:
                hint = "use the solver's lr list" if k == "lr" else "seeds are set by 'seeds'"
                raise SpecError(f"{key}.{where}.{k}", f"is reserved ({hint})")
        if check_registry:
            self._check_against_registry(key)

    def _check_against_registry(self, key):
        from .. import solvers as _solvers

        available = [s for s in _solvers.available() if s != "lbfgs"]
        if self.name == "lbfgs":
            raise SpecError(f"{key}.name", "lbfgs computes the reference f*; it is not a "
                                           "stochastic solver to benchmark")
        if self.name not in available:
            raise SpecError(f"{key}.name", f"unknown solver {self.name!r}; available: "
                                           f"{', '.join(available) or '(none registered)'}")
        accepted = set(_solvers.get(self.name).get_params())
        for k in list(self.params) + list(self.grid):
            if k not in accepted:
                where = "params" if k in self.params else "grid"
                raise SpecError(f"{key}.{where}.{k}",
                                f"solver {self.name!r} has no parameter {k!r}; its parameters: "
                                f"{', '.join(sorted(accepted - _RESERVED_PARAMS))}")


@dataclass
class PlotSpec:
    x: tuple = ("passes", "time")
    band: str = "minmax"
    floor: float = 1e-12

    def validate(self, key="plot"):
        xs = self.x if isinstance(self.x, (list, tuple)) else [self.x]
        if not xs:
            raise SpecError(f"{key}.x", "needs at least one of 'passes', 'time'")
        for i, v in enumerate(xs):
            if v not in ("passes", "time"):
                raise SpecError(f"{key}.x[{i}]", f"must be 'passes' or 'time', got {v!r}")
        self.x = tuple(xs)
        if self.band not in ("minmax", "iqr", "none"):
            raise SpecError(f"{key}.band", f"must be 'minmax', 'iqr' or 'none', got {self.band!r}")
        if not _is_number(self.floor) or not self.floor > 0:
            raise SpecError(f"{key}.floor", f"must be a number > 0, got {self.floor!r}")


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
    description: str = ""
    protocol: str = "paper"
    jobs: Optional[int] = None
    last_passes: int = 10
    plot: PlotSpec = field(default_factory=PlotSpec)
    notes: str = ""
    source: Optional[str] = None  # the TOML text this spec was read from, if any

    # ---------------------------------------------------------------- derived
    def budget(self, dataset):
        """Number of passes for ``dataset``."""
        return int(self.passes_by_dataset.get(dataset, self.passes))

    def objective_labels(self):
        """Display labels: the risk string, extended by what differs where risks repeat."""
        labels = []
        for i, obj in enumerate(self.objectives):
            if obj.label:
                labels.append(obj.label)
                continue
            same = [o for o in self.objectives if o.risk == obj.risk and not o.label]
            parts = [obj.risk]
            for attr, short in (("shift_cost", "nu"), ("divergence", "div"), ("l2_reg", "l2"),
                                ("loss", "loss"), ("fit_intercept", "intercept")):
                if len({str(getattr(o, attr)) for o in same}) > 1:
                    parts.append(f"{short}={_fmt(getattr(obj, attr))}")
            labels.append(" ".join(parts))
        return labels

    def to_dict(self):
        d = asdict(self)
        d.pop("source", None)
        d["plot"] = asdict(self.plot)
        return d

    def digest(self):
        return _hash(self.to_dict())

    # ---------------------------------------------------------------- validation
    def validate(self, check_registry=True):
        """Raise :class:`SpecError` (naming the key) for anything wrong; normalise values."""
        _check_name("name", self.name)
        if not isinstance(self.description, str):
            raise SpecError("description", "must be a string")
        ds = _as_list("datasets", self.datasets)
        if not ds:
            raise SpecError("datasets", "needs at least one dataset")
        known = None
        if check_registry:
            from .. import datasets as _datasets

            known = list(_datasets.names())
        for i, d in enumerate(ds):
            if not isinstance(d, str) or not d:
                raise SpecError(f"datasets[{i}]", f"must be a dataset name, got {d!r}")
            if known is not None and d not in known:
                raise SpecError(f"datasets[{i}]", f"unknown dataset {d!r}; available: "
                                                  f"{', '.join(known)}")
        if len(set(ds)) != len(ds):
            raise SpecError("datasets", f"duplicate datasets in {ds}")
        self.datasets = ds
        if not isinstance(self.protocol, str):
            raise SpecError("protocol", f"must be a string, got {self.protocol!r}")

        objs = _as_list("objectives", self.objectives)
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

        sols = _as_list("solvers", self.solvers)
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

        seeds = _as_list("seeds", self.seeds)
        if not seeds:
            raise SpecError("seeds", "needs at least one seed")
        for i, s in enumerate(seeds):
            if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
                raise SpecError(f"seeds[{i}]", f"seeds must be integers >= 0, got {s!r}")
        if len(set(seeds)) != len(seeds):
            raise SpecError("seeds", f"duplicate seeds in {seeds}")
        self.seeds = [int(s) for s in seeds]

        def _pos_int(key, v):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise SpecError(key, f"must be an integer >= 1, got {v!r}")
            return int(v)

        self.passes = _pos_int("passes", self.passes)
        if not isinstance(self.passes_by_dataset, dict):
            raise SpecError("passes_by_dataset", "must be a table such as {kin8nm = 32}")
        for d, v in self.passes_by_dataset.items():
            if d not in self.datasets:
                raise SpecError(f"passes_by_dataset.{d}", f"{d!r} is not in datasets")
            self.passes_by_dataset[d] = _pos_int(f"passes_by_dataset.{d}", v)
        self.last_passes = _pos_int("selection.last_passes", self.last_passes)
        if self.jobs is not None:
            if isinstance(self.jobs, bool) or not isinstance(self.jobs, numbers.Integral) \
                    or self.jobs == 0 or self.jobs < -1:
                raise SpecError("jobs", f"must be an integer >= 1 or -1 (all cores), got "
                                        f"{self.jobs!r}")
        if not isinstance(self.plot, PlotSpec):
            raise SpecError("plot", "must be a PlotSpec")
        self.plot.validate()
        return self


# ---------------------------------------------------------------------------- parsing
def spec_from_dict(data, source=None, check_registry=True):
    """Build and validate a :class:`Spec` from a parsed TOML table (or an equivalent dict)."""
    if not isinstance(data, dict):
        raise SpecError("", "a spec must be a table")
    _unknown_keys("", data, _TOP_KEYS)
    for req in ("name", "datasets", "objectives", "solvers"):
        if req not in data:
            raise SpecError(req, "is required")
    defaults = {k: data[k] for k in ("loss", "shift_cost", "divergence", "l2_reg",
                                     "fit_intercept") if k in data}
    objectives = []
    for i, o in enumerate(_as_list("objectives", data["objectives"])):
        key = f"objectives[{i}]"
        if isinstance(o, str):
            o = {"risk": o}
        if not isinstance(o, dict):
            raise SpecError(key, f"must be a risk string or a table, got {o!r}")
        _unknown_keys(key, o, _OBJECTIVE_KEYS)
        if "risk" not in o:
            raise SpecError(f"{key}.risk", "is required")
        objectives.append(ObjectiveSpec(**{**defaults, **o}))

    default_lr = data.get("lr", PAPER_LR_GRID)
    solvers = []
    for i, s in enumerate(_as_list("solvers", data["solvers"])):
        key = f"solvers[{i}]"
        if isinstance(s, str):
            s = {"name": s}
        if not isinstance(s, dict):
            raise SpecError(key, f"must be a solver name or a table, got {s!r}")
        _unknown_keys(key, s, _SOLVER_KEYS)
        if "name" not in s:
            raise SpecError(f"{key}.name", "is required")
        s = dict(s)
        s.setdefault("lr", default_lr)
        solvers.append(SolverSpec(**s))

    if "seeds" in data and "n_seeds" in data:
        raise SpecError("n_seeds", "give either 'seeds' or 'n_seeds', not both")
    if "n_seeds" in data:
        n = data["n_seeds"]
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise SpecError("n_seeds", f"must be an integer >= 1, got {n!r}")
        seeds = list(range(int(n)))
    else:
        seeds = data.get("seeds", [0, 1, 2])

    plot = data.get("plot", {})
    if not isinstance(plot, dict):
        raise SpecError("plot", "must be a table")
    _unknown_keys("plot", plot, _PLOT_KEYS)
    selection = data.get("selection", {})
    if not isinstance(selection, dict):
        raise SpecError("selection", "must be a table")
    _unknown_keys("selection", selection, _SELECTION_KEYS)

    pbd = data.get("passes_by_dataset", {})
    spec = Spec(
        name=data["name"], datasets=data["datasets"], objectives=objectives, solvers=solvers,
        seeds=seeds, passes=data.get("passes", 64),
        passes_by_dataset=dict(pbd) if isinstance(pbd, dict) else pbd,
        description=data.get("description", ""), protocol=data.get("protocol", "paper"),
        jobs=data.get("jobs"), last_passes=selection.get("last_passes", 10),
        plot=PlotSpec(**plot), notes=data.get("notes", ""), source=source,
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
        return path.read_text(encoding="utf-8"), str(path)
    if path.suffix == ".toml":
        raise FileNotFoundError(f"spec file not found: {spec}")
    bundled = bundled_specs()
    if str(spec) in bundled:
        return bundled[str(spec)].read_text(encoding="utf-8"), f"bundled:{spec}"
    raise FileNotFoundError(f"no spec file {spec!r} and no bundled spec of that name; bundled: "
                            f"{', '.join(bundled)}")


#: Specs with a top-level ``driver = "<name>"`` key are read and run by a dedicated module
#: (same output conventions; ``riskopt bench run`` dispatches on the key).
DRIVERS = {"splplus": "riskopt.bench.splplus"}


def driver_module(name):
    """The module that reads and runs specs with ``driver = name``."""
    import importlib

    if name not in DRIVERS:
        raise SpecError("driver", f"unknown driver {name!r}; available: {', '.join(DRIVERS)}")
    return importlib.import_module(DRIVERS[name])


def load_spec(spec, check_registry=True):
    """Read a spec from a TOML path or a bundled name (``"quick"``) and validate it.

    A spec with a top-level ``driver`` key (e.g. ``driver = "splplus"``) is read by that
    driver's module and returned as its own spec type (it has ``.driver``).
    """
    import tomllib

    if isinstance(spec, Spec):
        return spec.validate(check_registry=check_registry)
    if isinstance(getattr(spec, "driver", None), str):
        return driver_module(spec.driver).load_spec(spec, check_registry=check_registry)
    text, origin = read_spec_text(spec)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError("", f"invalid TOML in {origin}: {exc}") from None
    if isinstance(data, dict) and "driver" in data:
        return driver_module(data["driver"]).spec_from_dict(data, source=text,
                                                            check_registry=check_registry)
    return spec_from_dict(data, source=text, check_registry=check_registry)
