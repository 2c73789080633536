"""The entries of an experiment spec (:mod:`riskopt.bench.spec`): one objective
(:class:`ObjectiveSpec`), one data source (:class:`DatasetSpec`), one solver with its grids
(:class:`SolverSpec`), the figures' settings (:class:`PlotSpec`) and what a run records
(:class:`RecordSpec`), each with its ``validate(key)`` that raises a :class:`SpecError` naming
the offending key. :class:`~riskopt.bench.spec.Spec` assembles them; import them from
:mod:`riskopt.bench.spec` (the public path)."""
import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Optional

from . import problems
from .spec_tools import SpecError, check_int, check_name, is_number, one_of, parse_l2_reg

#: The step-size grid of the Prospect paper (App. H.3).
PAPER_LR_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0)
_RESERVED_PARAMS = {"lr", "random_state"}


@dataclass
class ObjectiveSpec:
    """One training objective (applied to every dataset of the spec).

    ``family`` (default ``"spectral"``) picks the objective class
    (:data:`riskopt.bench.problems.FAMILIES`); ``params`` holds the family's parameters
    (``{"beta": 0.95}`` for ``"ru_cvar"``). Spectral family: ``risk`` is a short string
    (``"cvar:0.5"``, ``"esrm:1"``, ``"extremile:2"``, ``"mean"``, ``"maxloss"``);
    ``shift_cost`` is ``nu`` (our scaling: the Prospect code's ``shift_cost=s`` is
    ``nu = s/2``). ``l2_reg`` a number, ``"c/n"`` or ``"1/(k n)"``.
    """

    risk: Optional[str] = None
    loss: str = "squared"
    shift_cost: float = 0.0
    divergence: str = "chi2"
    l2_reg: object = "1/n"
    fit_intercept: bool = False
    label: Optional[str] = None
    family: str = "spectral"
    params: dict = field(default_factory=dict)

    def key(self):
        """Content that defines the problem (labels excluded): used for caching."""
        return problems.family(self.family).key(self)

    def display(self):
        return self.label or problems.family(self.family).label(self)

    def build(self, X, y):
        return problems.family(self.family).build(self, X, y)

    def validate(self, key):
        from ..losses import get_loss

        fam = problems.family(self.family, f"{key}.family")
        if not isinstance(self.params, dict):
            raise SpecError(f"{key}.params", "must be a table")
        for k in self.params:
            if k not in fam.params:
                raise SpecError(f"{key}.{k}", f"is not a parameter of the {fam.name} family")
        self.params = {**fam.params, **self.params}
        self.l2_reg = parse_l2_reg(self.l2_reg, f"{key}.l2_reg")
        if not isinstance(self.fit_intercept, bool):
            raise SpecError(f"{key}.fit_intercept", f"must be true or false, got "
                                                    f"{self.fit_intercept!r}")
        try:
            get_loss(self.loss)
        except ValueError as exc:
            raise SpecError(f"{key}.loss", str(exc)) from None
        fam.validate(self, key)
        if self.label is not None and (not isinstance(self.label, str) or not self.label):
            raise SpecError(f"{key}.label", f"must be a non-empty string, got {self.label!r}")

    def to_table(self):
        d = {k: v for k, v in asdict(self).items() if v is not None and k != "params"}
        if self.family != "spectral":
            for k in ("shift_cost", "divergence", "risk"):
                d.pop(k, None)
        d.update(self.params)
        return d


@dataclass
class DatasetSpec:
    """A data source of the spec: a data set name, or a stream (``source``) with ``params``;
    ``overrides`` replace objective fields (``loss``, ``l2_reg``, ``fit_intercept``) here."""

    name: str
    source: str = "dataset"
    label: Optional[str] = None
    params: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)

    @property
    def streaming(self):
        return problems.source(self.source).streaming

    def to_table(self):
        if self.source == "dataset" and not self.label and not self.overrides:
            return self.name
        d = {"name": self.name, "source": self.source}
        if self.label:
            d["label"] = self.label
        return {**d, **self.overrides, **self.params}


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
        check_name(f"{key}.name", self.name)
        if self.label is not None:
            check_name(f"{key}.label", self.label)
        lrs = self.lr if isinstance(self.lr, (list, tuple)) else [self.lr]
        if len(lrs) == 0:
            raise SpecError(f"{key}.lr", "the step-size grid is empty")
        clean = []
        for i, v in enumerate(lrs):
            if not is_number(v) or not math.isfinite(v) or v <= 0:
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
    columns: Optional[int] = None
    xscale: str = "linear"

    def validate(self, key="plot"):
        xs = self.x if isinstance(self.x, (list, tuple)) else [self.x]
        if not xs:
            raise SpecError(f"{key}.x", "needs at least one of 'passes', 'steps', 'time'")
        for i, v in enumerate(xs):
            if v not in ("passes", "steps", "time"):
                raise SpecError(f"{key}.x[{i}]", f"must be 'passes', 'steps' or 'time', got "
                                                 f"{v!r}")
        self.x = tuple(xs)
        if self.band not in ("minmax", "iqr", "none"):
            raise SpecError(f"{key}.band", f"must be 'minmax', 'iqr' or 'none', got {self.band!r}")
        if not is_number(self.floor) or not self.floor > 0:
            raise SpecError(f"{key}.floor", f"must be a number > 0, got {self.floor!r}")
        if self.columns is not None:
            self.columns = check_int(f"{key}.columns", self.columns)
        one_of(f"{key}.xscale", self.xscale, ("linear", "log"))


@dataclass
class RecordSpec:
    """What a run records: see ``record`` in the module docstring."""

    value: str = "profile"
    every: int = 1
    points: int = 30
    suboptimality: str = "relative"
    metrics: list = field(default_factory=list)

    def validate(self, key="record"):
        one_of(f"{key}.value", self.value, ("profile", "iterate"))
        if self.metrics:
            from .record_metrics import check_names

            try:
                self.metrics = check_names(self.metrics)
            except ValueError as exc:
                raise SpecError(f"{key}.metrics", str(exc)) from None
            if self.value != "iterate":
                raise SpecError(f"{key}.metrics", 'metrics are recorded with value = "iterate"')
        self.every = check_int(f"{key}.every", self.every)
        if self.value == "profile" and self.every != 1:
            raise SpecError(f"{key}.every", "the profile value is recorded after every update")
        self.points = check_int(f"{key}.points", self.points, 2)
        one_of(f"{key}.suboptimality", self.suboptimality, ("relative", "absolute"))
