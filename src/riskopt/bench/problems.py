r"""Problem definitions of the benchmarks: objective families and data sources.

A benchmark *problem* is a data source (a data set loaded by name, or a data stream) plus an
objective of some family with its parameters. The runner, the spec schema and the figures are
generic; everything that depends on the family or on the source lives here (or in the family's
objective module), behind two small tables that plug-ins may extend:

* :data:`FAMILIES`: ``family name -> FamilySpec`` -- which objective-table keys the family reads
  (``params`` with their defaults, on top of the common ``loss``, ``l2_reg``,
  ``fit_intercept``), how to validate them, the cache key, the display label, and how to build
  the objective on ``(X, y)`` (:meth:`FamilySpec.build`) or on a stream
  (:meth:`FamilySpec.build_stream`);
* :data:`SOURCES`: ``source name -> Source`` -- ``"dataset"`` (the default: the training split
  of :func:`riskopt.datasets.load`) and ``"synthetic"`` (the stream of
  :class:`riskopt.objectives.ru_cvar.SyntheticSampler`: ``noise``, ``d``, ``task`` (default
  from the loss), ``data_seed`` (the sampler's ``theta_gen``), ``n_eval`` / ``eval_seed``
  (the fixed evaluation sample on which values and ``f*`` are computed) and ``chunk_size``
  (samples drawn per kernel call)).

Generic helpers used by the runner: :func:`initial_point` (the spec's ``init``),
:func:`evaluate` (``F`` at many points, through the objective's ``value_many`` when it has one)
(the solver's reported point is :meth:`riskopt.solvers.Solver.point`).
"""
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .spec_tools import SpecError, is_number, l2_value


# ---------------------------------------------------------------------------- families
@dataclass
class FamilySpec:
    """How the benchmarks build objectives of one family (see the module docstring)."""

    name: str
    params: dict = field(default_factory=dict)   # family keys with their defaults

    def validate(self, o, key):
        """Check ``o.params`` (an :class:`~riskopt.bench.spec.ObjectiveSpec`); normalise them."""

    def key(self, o):
        raise NotImplementedError

    def label(self, o):
        raise NotImplementedError

    def build(self, o, X, y):
        raise NotImplementedError

    def build_stream(self, o, sampler, n_eval, random_state):
        raise SpecError("datasets", f"the {self.name} family has no streaming objective")


class _Spectral(FamilySpec):
    def validate(self, o, key):
        if not isinstance(o.risk, str) or not o.risk:
            raise SpecError(f"{key}.risk", f"must be a string such as 'cvar:0.5', got {o.risk!r}")
        if not is_number(o.shift_cost) or not math.isfinite(o.shift_cost) or o.shift_cost < 0:
            raise SpecError(f"{key}.shift_cost", f"must be a number >= 0, got {o.shift_cost!r}")
        if o.divergence not in ("chi2", "kl"):
            raise SpecError(f"{key}.divergence", f"must be 'chi2' or 'kl', got {o.divergence!r}")
        try:
            self.risk(o)
        except ValueError as exc:
            raise SpecError(f"{key}.risk", str(exc)) from None

    @staticmethod
    def risk(o):
        from ..risks import parse_risk

        return parse_risk(o.risk, shift_cost=float(o.shift_cost), divergence=o.divergence)

    def key(self, o):
        return {"risk": repr(self.risk(o)), "loss": o.loss,
                "l2_reg": o.l2_reg if isinstance(o.l2_reg, str) else float(o.l2_reg),
                "fit_intercept": bool(o.fit_intercept)}

    def label(self, o):
        return o.risk

    def build(self, o, X, y):
        from ..objectives.spectral import Objective

        return Objective(o.loss, self.risk(o), X, y, l2_reg=l2_value(o.l2_reg, X.shape[0]),
                         fit_intercept=o.fit_intercept)


class _RUCVaR(FamilySpec):
    def validate(self, o, key):
        beta = o.params.get("beta")
        if not is_number(beta) or not 0.0 <= beta < 1.0:
            raise SpecError(f"{key}.beta", f"must be a number in [0, 1), got {beta!r}")
        o.params["beta"] = float(beta)
        if o.risk is not None:
            raise SpecError(f"{key}.risk", "the ru_cvar family has no risk string (use beta)")

    def key(self, o):
        return {"family": self.name, "beta": o.params["beta"], "loss": o.loss,
                "l2_reg": o.l2_reg if isinstance(o.l2_reg, str) else float(o.l2_reg),
                "fit_intercept": bool(o.fit_intercept)}

    def label(self, o):
        return f"ru_cvar:{o.params['beta']:g}"

    def build(self, o, X, y):
        from ..objectives.ru_cvar import RUCVaRObjective

        return RUCVaRObjective(o.loss, X, y, o.params["beta"],
                               l2_reg=l2_value(o.l2_reg, X.shape[0]),
                               fit_intercept=o.fit_intercept)

    def build_stream(self, o, sampler, n_eval, random_state):
        from ..objectives.ru_cvar import StreamingRUCVaRObjective

        return StreamingRUCVaRObjective(o.loss, sampler, o.params["beta"], n_eval=n_eval,
                                        l2_reg=l2_value(o.l2_reg, n_eval),
                                        fit_intercept=o.fit_intercept,
                                        random_state=random_state)


class _Registered(FamilySpec):
    """Any other family of :func:`riskopt.objectives.families` (built-in or plug-in): its
    objective class's ``spec_params`` (parameters with defaults) and ``from_params``. Adding a
    family therefore needs no entry in :data:`FAMILIES` (only a family with a data stream or
    custom validation does)."""

    def __init__(self, name, cls):
        super().__init__(name, dict(getattr(cls, "spec_params", {})))
        self.cls = cls

    def validate(self, o, key):
        if o.risk is not None:
            raise SpecError(f"{key}.risk", f"the {self.name} family takes no risk string; its "
                                           f"parameters: {', '.join(self.params) or '(none)'}")
        for k, v in o.params.items():
            if not (is_number(v) or isinstance(v, (str, bool))):
                raise SpecError(f"{key}.{k}", f"must be a number, string or boolean, got {v!r}")

    def key(self, o):
        return {"family": self.name, **{k: o.params[k] for k in sorted(o.params)},
                "loss": o.loss,
                "l2_reg": o.l2_reg if isinstance(o.l2_reg, str) else float(o.l2_reg),
                "fit_intercept": bool(o.fit_intercept)}

    def label(self, o):
        params = ",".join(f"{k}={v:g}" if is_number(v) else f"{k}={v}"
                          for k, v in sorted(o.params.items()))
        return f"{self.name}:{params}" if params else self.name

    @property
    def needs_groups(self):
        """True for families built from the data set's group attributes (``group_by``)."""
        return bool(getattr(self.cls, "spec_needs_groups", False))

    def build(self, o, X, y, groups=None):
        extra = {"groups": groups} if self.needs_groups else {}
        try:
            return self.cls.from_params(o.loss, X, y, l2_reg=l2_value(o.l2_reg, X.shape[0]),
                                        fit_intercept=o.fit_intercept, **o.params, **extra)
        except (TypeError, ValueError) as exc:
            raise SpecError("objectives", f"cannot build a {self.name} objective: {exc}") from None


#: Families with a dedicated definition here (``family = "..."`` in objective tables); every
#: other registered family (:func:`riskopt.objectives.families`) is served by ``_Registered``.
FAMILIES = {"spectral": _Spectral("spectral"), "ru_cvar": _RUCVaR("ru_cvar", {"beta": 0.95})}


def _registered():
    from ..objectives import families

    return {name: _Registered(name, cls) for name, cls in families().items()
            if name not in FAMILIES}


def family(name, key="family"):
    if name in FAMILIES:
        return FAMILIES[name]
    others = _registered()
    if name not in others:
        raise SpecError(key, f"unknown family {name!r}; available: "
                             f"{', '.join([*FAMILIES, *others])}")
    return others[name]


def family_param_names():
    """Every family parameter (allowed as objective keys and as top-level defaults)."""
    fams = [*FAMILIES.values(), *_registered().values()]
    return {k for f in fams for k in f.params}


# ---------------------------------------------------------------------------- sources
@dataclass
class Source:
    """A data source: ``params`` (allowed keys with defaults); ``streaming`` sources are run
    for a budget of ``steps`` on fresh samples, the others for ``passes`` over the data."""

    name: str
    params: dict = field(default_factory=dict)
    streaming: bool = False

    def validate(self, params, key):
        for k, v in params.items():
            if k not in self.params:
                raise SpecError(f"{key}.{k}", f"unknown key for source {self.name!r}; allowed: "
                                              f"{', '.join(sorted(self.params)) or '(none)'}")
        return {**self.params, **params}


_TASKS = {"squared": "regression", "absolute": "regression", "logistic": "classification"}


class _Synthetic(Source):
    def validate(self, params, key):
        from .spec_tools import check_int

        out = super().validate(params, key)
        if out["noise"] not in ("normal", "gumbel", "lognormal"):
            raise SpecError(f"{key}.noise", f"must be normal, gumbel or lognormal, got "
                                            f"{out['noise']!r}")
        if out["task"] not in (None, "regression", "classification"):
            raise SpecError(f"{key}.task", f"must be regression or classification, got "
                                           f"{out['task']!r}")
        for k, lo in (("d", 1), ("n_eval", 2), ("data_seed", 0), ("eval_seed", 0),
                      ("chunk_size", 1)):
            out[k] = check_int(f"{key}.{k}", out[k], lo)
        return out


#: Data sources (``source = "..."`` in dataset tables; default ``"dataset"``).
SOURCES = {
    "dataset": Source("dataset"),
    "synthetic": _Synthetic("synthetic", {"noise": "normal", "task": None, "d": 10,
                                          "n_eval": 100_000, "data_seed": 0, "eval_seed": 1,
                                          "chunk_size": 8192}, streaming=True),
}


def source(name, key="source"):
    if name not in SOURCES:
        raise SpecError(key, f"unknown source {name!r}; available: {', '.join(SOURCES)}")
    return SOURCES[name]


# ---------------------------------------------------------------------------- building
@lru_cache(maxsize=8)
def _load(name, protocol):
    from .. import datasets

    return datasets.load(name, protocol=protocol)


def _split(name, protocol, split):
    data = _load(name, protocol)
    X = np.ascontiguousarray(getattr(data, f"X_{split}"), dtype=np.float64)
    y = np.ascontiguousarray(getattr(data, f"y_{split}"), dtype=np.float64)
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y


@lru_cache(maxsize=16)
def load_dataset(name, protocol):
    """``(X_train, y_train)`` of a data set (read-only float64 arrays, cached per process)."""
    return _split(name, protocol, "train")


@lru_cache(maxsize=16)
def load_test_split(name, protocol):
    """``(X_test, y_test)`` of a data set (read-only float64 arrays, cached per process)."""
    return _split(name, protocol, "test")


@lru_cache(maxsize=16)
def load_groups(name, protocol):
    """``{"train": {attribute: array}, "test": {...}}`` of a data set (cached per process)."""
    data = _load(name, protocol)
    return {"train": dict(data.groups_train or {}), "test": dict(data.groups_test or {})}


@dataclass
class Problem:
    """A built problem: ``objective`` (values, ``f*``), ``solver_objective`` (what the solver
    is handed: the same, or for a stream a small twin carrying the encoding and parameters),
    ``sampler`` (streams) and ``chunk_size``."""

    objective: object
    solver_objective: object
    sampler: object = None
    chunk_size: int = 8192

    @property
    def streaming(self):
        return self.sampler is not None


def _build(pkey_json):
    from types import SimpleNamespace

    k = json.loads(pkey_json)
    o = SimpleNamespace(**k["objective"])  # the fields of an ObjectiveSpec
    fam = family(o.family)
    src = k["source"]
    if src["name"] == "dataset":
        X, y = load_dataset(k["dataset"], k["protocol"])
        if getattr(fam, "needs_groups", False):
            obj = fam.build(o, X, y, load_groups(k["dataset"], k["protocol"])["train"])
        else:
            obj = fam.build(o, X, y)
        return Problem(obj, obj)
    p = src["params"]
    from ..objectives.ru_cvar import SyntheticSampler

    sampler = SyntheticSampler(p["task"] or _TASKS.get(o.loss, "regression"), d=p["d"],
                               noise=p["noise"], random_state=p["data_seed"])
    obj = fam.build_stream(o, sampler, p["n_eval"], p["eval_seed"])
    small = fam.build_stream(o, sampler, 64, p["eval_seed"])
    return Problem(obj, small, sampler, p["chunk_size"])


_build_cached = lru_cache(maxsize=4)(_build)


def build(problem):
    """The :class:`Problem` of a problem description (cached per process)."""
    return _build_cached(json.dumps(problem, sort_keys=True))


def tiny(problem):
    """A small objective of the problem (its first 128 rows; a stream's solver objective), for
    warming up the JIT."""
    from types import SimpleNamespace

    if problem["source"]["name"] != "dataset":
        return build(problem).solver_objective
    X, y = load_dataset(problem["dataset"], problem["protocol"])
    o = SimpleNamespace(**problem["objective"])
    fam = family(o.family)
    if getattr(fam, "needs_groups", False):
        groups = load_groups(problem["dataset"], problem["protocol"])["train"]
        return fam.build(o, X[:128], y[:128], {a: v[:128] for a, v in groups.items()})
    return fam.build(o, X[:128], y[:128])


def size(problem):
    """``{"n", "p"}`` of a problem without drawing a stream's evaluation sample."""
    src = problem["source"]
    if src["name"] != "dataset":
        p = src["params"]
        return {"n": int(p["n_eval"]), "p": int(p["d"]) + int(problem["objective"]
                                                             ["fit_intercept"])}
    obj = build(problem).objective
    return {"n": int(obj.n), "p": int(obj.p)}


# ---------------------------------------------------------------------------- runs
def initial_point(init, objective, seed):
    """``(coef0, aux0)`` for a seed. ``init = {"coef": "zeros" | "normal", "aux": "default" |
    "uniform"}``: ``coef0 ~ N(0, I)`` and each auxiliary variable ``~ U(0, 1)`` are drawn (in
    that order) from ``np.random.default_rng([seed, 2023])``; ``None`` means the solver's
    default (zeros; e.g. ``VaR_beta(coef0)`` for the RU threshold). ``aux0`` is the dict of
    ``init_state`` keywords (``alpha0`` for the auxiliary variable ``alpha``)."""
    if init["coef"] == "zeros" and init["aux"] == "default":
        return None, {}
    rng = np.random.default_rng([int(seed), 2023])
    size = objective.p * objective.K
    theta = rng.standard_normal(size)
    aux = [float(rng.uniform(0.0, 1.0)) for _ in objective.aux_names]
    coef0 = theta.reshape(objective.coef_shape) if init["coef"] == "normal" else None
    aux0 = ({f"{a}0": v for a, v in zip(objective.aux_names, aux)}
            if init["aux"] == "uniform" else {})
    return coef0, aux0


def evaluate(objective, coefs, auxs):
    """``F(coef_k, aux_k)`` for every recorded point (``inf`` where not finite; the profile
    ``F(coef_k)`` when the solver reports no auxiliary variable: all NaN)."""
    coefs = np.asarray(coefs, dtype=float)
    auxs = np.asarray(auxs, dtype=float).reshape(len(coefs), -1)
    many = getattr(objective, "value_many", None)
    if many is not None and auxs.shape[1] == 1:
        return many(coefs, auxs[:, 0])
    out = np.full(len(coefs), np.inf)
    for k, (c, a) in enumerate(zip(coefs, auxs)):
        if not np.all(np.isfinite(c)):
            continue
        with np.errstate(all="ignore"):
            if a.size and np.all(np.isnan(a)):
                # the solver keeps no auxiliary variable (e.g. a primal-dual KL-DRO method
                # without lambda): its point is the coefficient, valued by the exact profile
                v = float(objective.value(objective.as_coef(c)))
            elif np.all(np.isfinite(a)):
                v = float(objective.value(objective.as_coef(c), *a))
            else:
                continue
        out[k] = v if np.isfinite(v) else np.inf
    return out
