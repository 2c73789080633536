r"""The SPL+ experiments (Meng & Gower, Sections 6.1-6.2, Figures 3-8): step-size sensitivity.

SGM (Algorithm 1), SPL (one step size) and SPL+ (Algorithm 2) of
:mod:`riskopt.solvers.spl` minimise the Rockafellar-Uryasev CVaR objective
``F(theta, alpha) = alpha + 1/(1-beta) E max(l(theta; z) - alpha, 0)`` (``beta = 0.95``) for every
``lambda`` of a grid; the figures show how good the final point is as a function of ``lambda``.

Two kinds of experiment, chosen by the spec's ``kind``:

``"synthetic"`` (Section 6.1, Figures 3 and 8)
    The problems of Tables 1-2 (:class:`riskopt.objectives.ru_cvar.SyntheticSampler`): ``d = 10``, losses
    absolute / squared (regression) and logistic (classification) x noises Normal(0, 2^2),
    Gumbel(0, 4), LogNormal(2, 1). The methods run in streaming mode (a fresh sample per step,
    :meth:`~riskopt.solvers.spl.SPL.run_stream`) for ``n_steps`` (the paper's ``T = 1e5``)
    steps; the objective is the ``N = n_eval``-sample discretisation (27) of the paper
    (:class:`riskopt.objectives.ru_cvar.StreamingRUCVaRObjective`, one fixed evaluation sample per
    problem), and ``F*`` its exact minimum (:meth:`RUCVaRObjective.exact_solution`, ``"lbfgs"``).
    Values are recorded at ``n_records`` log-spaced steps (and at step 0).
``"real"`` (Section 6.2, Figures 4-7)
    Finite sums on data sets loaded by name (:func:`riskopt.datasets.load`; the training split),
    ``passes`` passes of ``n`` single-sample steps (the paper: 200), recorded after every
    ``record_every`` passes; ``F*`` from ``exact_solution("lbfgs")`` on the training set.

Common to both (Section 6.1): ``theta_0 ~ N(0, I)`` and ``alpha_0 ~ U(0, 1)`` drawn from the seed
(``init = "paper"``; the same start for every method and ``lambda`` of a seed; the seed also
drives the solver's sampling), steps ``lambda / sqrt(t + 1)`` (SGM, SPL) and
``lambda l0 / sqrt(t+1)``, ``lambda / (l0 sqrt(t+1))`` (SPL+, ``l0`` the mean loss at
``theta_0``: over the evaluation sample for the synthetic problems, over the training set for real
data). Every value is ``F(theta_bar_t, alpha_bar_t)`` at the *averaged* iterates (the paper's
"all objective evaluations are on F(theta_bar, alpha_bar)"), not the profile
``min_alpha F(theta_bar, alpha)``; the suboptimality is ``F - F*`` (not normalised). ``F*`` is the
L-BFGS value, lowered to the smallest value any run reached when a run goes below it (both are
kept in the table; the metadata says by how much), so that suboptimalities are ``>= 0``.

Spec (TOML; ``driver = "splplus"`` sends it here from ``riskopt bench run``)::

    driver = "splplus"
    kind = "synthetic"                 # or "real"
    name = "splplus_synthetic"
    description = "..."
    beta = 0.95
    methods = ["sgm", "spl", "splplus"]
    lr = [1e-6, 1e-5, ...]             # default: the paper's grid (PAPER_GRID)
    seeds = [0, 1, 2, 3, 4]            # or n_seeds = 5
    schedule = "decreasing"            # lambda / sqrt(t+1); "constant" drops the sqrt
    init = "paper"                     # theta0 ~ N(0, I), alpha0 ~ U(0,1); "zeros": theta0 = 0
    epsilon = 0.01                     # fixed-accuracy target (Figure 8) ...
    epsilon_scale = "fstar"            # ... times |F*|; "gap": times the initial gap
                                       # F(x0) - F* (median over seeds); "absolute": as is
    tolerance = 10.0                   # "good" lambda: final suboptimality <= 10 x the best
    # synthetic only
    losses = ["absolute", "squared", "logistic"]
    noises = ["normal", "gumbel", "lognormal"]
    d = 10
    n_eval = 1000000                   # N of the discretisation (27)
    n_steps = 100000                   # T
    n_records = 30                     # log-spaced recording steps in [10, T]
    data_seed = 0                      # theta_gen of the sampler
    eval_seed = 1                      # the evaluation sample
    # real only
    datasets = [{name = "mushrooms", loss = "logistic"}, {name = "power", loss = "squared"}]
    passes = 200
    record_every = 1
    l2_reg = 0.0                       # both kinds; the paper has none
    fit_intercept = false
    [plot]
    floor = 1e-12

Output folder (default ``results/<name>``), with the runner's conventions (atomic writes,
resumable cells whose id hashes their content, ``--fresh``, ``--max-cells``)::

    spec.json             the validated spec (with "driver": "splplus")
    fstar.json            F* per problem (L-BFGS; cached)
    cells/<id>.parquet    one run (problem, method, lambda, seed): its recorded values
    results.parquet       long form, one row per recorded point of every run
    sensitivity.parquet   per (problem, method, lambda): final suboptimality and steps to reach
    sensitivity.csv       epsilon, median / min / max over seeds
    summary.csv           per (problem, method): best lambda, width (decades) of the lambda
                          range within `tolerance` x the best, lambda = 1 within it or not
    metadata.json         versions, CPU, spec, wall time, F*, the summary, file list
    sensitivity.png/pdf   final suboptimality vs lambda (Figure 3 / the left panels of 4-7)
    fixed_accuracy.png/pdf  steps to reach epsilon vs lambda (Figure 8)
    convergence.png/pdf   suboptimality vs steps (synthetic) / passes (real) at each method's
                          best lambda (the right panels of Figures 4-7)

Examples
--------
>>> import riskopt.bench as rb                                   # doctest: +SKIP
>>> res = rb.run("splplus_synthetic_quick", out="results/q")     # doctest: +SKIP
>>> res.figures                                                  # doctest: +SKIP
"""
import json
import math
import numbers
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

import numpy as np
from numba import njit

from . import _io
from .spec import SolverSpec, SpecError, _check_name, _hash, _is_number

DRIVER = "splplus"
CELL_FORMAT = 1

#: The paper's grid (Sec. 6.1): 1e-6, 1e-5, ..., 1e4, densified by 10^-1.5, ..., 10^1.5.
PAPER_GRID = tuple(sorted([10.0 ** k for k in range(-6, 5)]
                          + [10.0 ** e for e in (-1.5, -0.5, 0.5, 1.5)]))
METHODS = ("sgm", "spl", "splplus")
LABELS = {"sgm": "SGM", "spl": "SPL", "splplus": "SPL+"}
COLORS = {"sgm": "C0", "spl": "C1", "splplus": "C2"}
KINDS = ("synthetic", "real")
LOSSES = ("absolute", "squared", "logistic")
NOISES = ("normal", "gumbel", "lognormal")
_TASK = {"squared": "regression", "absolute": "regression", "logistic": "classification"}

_TOP_KEYS = {"driver", "kind", "name", "description", "beta", "methods", "lr", "seeds",
             "n_seeds", "schedule", "init", "epsilon", "epsilon_scale", "tolerance",
             "losses", "noises", "d", "n_eval", "n_steps", "n_records", "data_seed", "eval_seed",
             "datasets", "passes", "record_every", "l2_reg", "fit_intercept", "chunk_size",
             "jobs", "plot", "notes"}
_SYNTH_ONLY = {"losses", "noises", "d", "n_eval", "n_steps", "n_records", "data_seed",
               "eval_seed", "chunk_size"}
_REAL_ONLY = {"datasets", "passes", "record_every"}
_DATASET_KEYS = {"name", "loss", "label"}
_PLOT_KEYS = {"floor"}
_EPS_SCALES = ("fstar", "gap", "absolute")


# ---------------------------------------------------------------------------- spec
def _int(key, v, minimum=1):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
        raise SpecError(key, f"must be an integer >= {minimum}, got {v!r}")
    return int(v)


def _num(key, v, lo=None, hi=None, lo_open=False):
    if not _is_number(v) or not math.isfinite(v):
        raise SpecError(key, f"must be a finite number, got {v!r}")
    v = float(v)
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise SpecError(key, f"must be {'>' if lo_open else '>='} {lo:g}, got {v:g}")
    if hi is not None and v >= hi:
        raise SpecError(key, f"must be < {hi:g}, got {v:g}")
    return v


@dataclass
class Problem:
    """One problem of an SPL+ spec: a synthetic (loss, noise) pair or a data set with a loss."""

    id: str
    kind: str
    loss: str
    noise: Optional[str] = None
    dataset: Optional[str] = None
    label: Optional[str] = None

    @property
    def display(self):
        if self.label:
            return self.label
        if self.kind == "synthetic":
            return f"{self.loss} / {self.noise}"
        return f"{self.dataset} ({self.loss})"


@dataclass
class SPLSpec:
    """An SPL+ experiment (see the module docstring for the TOML keys)."""

    name: str
    kind: str
    description: str = ""
    beta: float = 0.95
    methods: tuple = METHODS
    lr: tuple = PAPER_GRID
    seeds: list = field(default_factory=lambda: [0, 1, 2, 3, 4])
    schedule: str = "decreasing"
    init: str = "paper"
    epsilon: float = 0.01
    epsilon_scale: str = "fstar"
    tolerance: float = 10.0
    losses: tuple = LOSSES
    noises: tuple = NOISES
    d: int = 10
    n_eval: int = 1_000_000
    n_steps: int = 100_000
    n_records: int = 30
    data_seed: int = 0
    eval_seed: int = 1
    chunk_size: int = 8192
    datasets: list = field(default_factory=list)
    passes: int = 200
    record_every: int = 1
    l2_reg: float = 0.0
    fit_intercept: bool = False
    jobs: Optional[int] = None
    floor: float = 1e-12
    notes: str = ""
    source: Optional[str] = None
    driver: str = DRIVER

    # ---------------------------------------------------------------- derived
    @property
    def solvers(self):
        """The methods as :class:`SolverSpec` (registry name, grid, fixed ``schedule``)."""
        return [SolverSpec(m, lr=tuple(self.lr), params={"schedule": self.schedule})
                for m in self.methods]

    def problems(self):
        if self.kind == "synthetic":
            return [Problem(f"{loss}_{noise}", "synthetic", loss, noise=noise)
                    for loss in self.losses for noise in self.noises]
        return [Problem(d["name"], "real", d["loss"], dataset=d["name"], label=d.get("label"))
                for d in self.datasets]

    def problem_key(self, prob):
        """What defines a problem's objective and its evaluation (cache key of F*)."""
        base = {"driver": DRIVER, "kind": prob.kind, "loss": prob.loss, "beta": self.beta,
                "l2_reg": self.l2_reg, "fit_intercept": self.fit_intercept}
        if prob.kind == "synthetic":
            base.update(noise=prob.noise, d=self.d, n_eval=self.n_eval,
                        data_seed=self.data_seed, eval_seed=self.eval_seed)
        else:
            base.update(dataset=prob.dataset)
        return base

    def record_steps(self, n=None):
        """The steps at which values are recorded (0 first, the budget last)."""
        if self.kind == "synthetic":
            T = self.n_steps
            lo = min(10, T)
            s = np.unique(np.round(np.geomspace(lo, T, self.n_records)).astype(np.int64))
            return np.concatenate([[0], s]).astype(np.int64)
        k = np.arange(0, self.passes + 1, self.record_every, dtype=np.int64)
        if k[-1] != self.passes:
            k = np.append(k, self.passes)
        return k * int(n)

    def budget(self):
        return self.n_steps if self.kind == "synthetic" else self.passes

    def objective_labels(self):  # for `riskopt bench run --dry-run` style listings
        return [p.display for p in self.problems()]

    def to_dict(self):
        d = asdict(self)
        d.pop("source", None)
        d["methods"] = list(self.methods)
        d["lr"] = list(self.lr)
        d["losses"] = list(self.losses)
        d["noises"] = list(self.noises)
        d["plot"] = {"floor": d.pop("floor")}
        for k in (_REAL_ONLY if self.kind == "synthetic" else _SYNTH_ONLY):
            d.pop(k, None)
        return d

    def digest(self):
        return _hash(self.to_dict())

    # ---------------------------------------------------------------- validation
    def validate(self, check_registry=True):
        _check_name("name", self.name)
        if self.driver != DRIVER:
            raise SpecError("driver", f"must be {DRIVER!r}, got {self.driver!r}")
        if self.kind not in KINDS:
            raise SpecError("kind", f"must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.description, str):
            raise SpecError("description", "must be a string")
        self.beta = _num("beta", self.beta, lo=0.0, hi=1.0)
        methods = list(self.methods) if isinstance(self.methods, (list, tuple)) else None
        if not methods:
            raise SpecError("methods", f"must be a non-empty list of {METHODS}")
        for i, m in enumerate(methods):
            if m not in METHODS:
                raise SpecError(f"methods[{i}]", f"must be one of {METHODS}, got {m!r}")
        if len(set(methods)) != len(methods):
            raise SpecError("methods", f"duplicate methods in {methods}")
        self.methods = tuple(methods)
        lrs = list(self.lr) if isinstance(self.lr, (list, tuple)) else None
        if not lrs:
            raise SpecError("lr", "must be a non-empty list of step sizes")
        for i, v in enumerate(lrs):
            if not _is_number(v) or not math.isfinite(v) or v <= 0:
                raise SpecError(f"lr[{i}]", f"step sizes must be finite numbers > 0, got {v!r}")
        lrs = sorted(float(v) for v in lrs)
        if len(set(lrs)) != len(lrs):
            raise SpecError("lr", "duplicate step sizes")
        self.lr = tuple(lrs)
        if not isinstance(self.seeds, (list, tuple)) or not self.seeds:
            raise SpecError("seeds", "needs at least one seed")
        for i, s in enumerate(self.seeds):
            _int(f"seeds[{i}]", s, minimum=0)
        if len(set(self.seeds)) != len(self.seeds):
            raise SpecError("seeds", f"duplicate seeds in {list(self.seeds)}")
        self.seeds = [int(s) for s in self.seeds]
        if self.schedule not in ("decreasing", "constant"):
            raise SpecError("schedule", f"must be 'decreasing' or 'constant', got "
                                        f"{self.schedule!r}")
        if self.init not in ("paper", "zeros"):
            raise SpecError("init", f"must be 'paper' or 'zeros', got {self.init!r}")
        self.epsilon = _num("epsilon", self.epsilon, lo=0.0, lo_open=True)
        if self.epsilon_scale not in _EPS_SCALES:
            raise SpecError("epsilon_scale", f"must be one of {_EPS_SCALES}, got "
                                             f"{self.epsilon_scale!r}")
        self.tolerance = _num("tolerance", self.tolerance, lo=1.0, lo_open=True)
        self.l2_reg = _num("l2_reg", self.l2_reg, lo=0.0)
        if not isinstance(self.fit_intercept, bool):
            raise SpecError("fit_intercept", "must be true or false")
        self.floor = _num("plot.floor", self.floor, lo=0.0, lo_open=True)
        if self.jobs is not None and (isinstance(self.jobs, bool)
                                      or not isinstance(self.jobs, numbers.Integral)
                                      or self.jobs == 0 or self.jobs < -1):
            raise SpecError("jobs", f"must be an integer >= 1 or -1, got {self.jobs!r}")
        if not isinstance(self.notes, str):
            raise SpecError("notes", "must be a string")
        if self.kind == "synthetic":
            self._validate_synthetic()
        else:
            self._validate_real(check_registry)
        return self

    def _validate_synthetic(self):
        for key, vals, allowed in (("losses", self.losses, LOSSES),
                                   ("noises", self.noises, NOISES)):
            vals = list(vals) if isinstance(vals, (list, tuple)) else None
            if not vals:
                raise SpecError(key, f"must be a non-empty list of {allowed}")
            for i, v in enumerate(vals):
                if v not in allowed:
                    raise SpecError(f"{key}[{i}]", f"must be one of {allowed}, got {v!r}")
            if len(set(vals)) != len(vals):
                raise SpecError(key, f"duplicates in {vals}")
            setattr(self, key, tuple(vals))
        self.d = _int("d", self.d)
        self.n_eval = _int("n_eval", self.n_eval, minimum=2)
        self.n_steps = _int("n_steps", self.n_steps)
        self.n_records = _int("n_records", self.n_records, minimum=2)
        self.data_seed = _int("data_seed", self.data_seed, minimum=0)
        self.eval_seed = _int("eval_seed", self.eval_seed, minimum=0)
        self.chunk_size = _int("chunk_size", self.chunk_size)

    def _validate_real(self, check_registry):
        ds = self.datasets
        if not isinstance(ds, (list, tuple)) or not ds:
            raise SpecError("datasets", "needs at least one {name = ..., loss = ...} table")
        known = None
        if check_registry:
            from .. import datasets as _datasets

            known = set(_datasets.names())
        clean = []
        for i, d in enumerate(ds):
            key = f"datasets[{i}]"
            if isinstance(d, str):
                raise SpecError(key, f"must be a table such as {{name = {d!r}, loss = "
                                     "\"squared\"}")
            if not isinstance(d, dict):
                raise SpecError(key, f"must be a table, got {d!r}")
            for k in d:
                if k not in _DATASET_KEYS:
                    raise SpecError(f"{key}.{k}", f"unknown key; allowed keys: "
                                                  f"{', '.join(sorted(_DATASET_KEYS))}")
            if "name" not in d or not isinstance(d["name"], str) or not d["name"]:
                raise SpecError(f"{key}.name", "is required (a data set name)")
            if known is not None and d["name"] not in known:
                raise SpecError(f"{key}.name", f"unknown dataset {d['name']!r}")
            if d.get("loss") not in LOSSES:
                raise SpecError(f"{key}.loss", f"must be one of {LOSSES}, got "
                                               f"{d.get('loss')!r}")
            if "label" in d and (not isinstance(d["label"], str) or not d["label"]):
                raise SpecError(f"{key}.label", "must be a non-empty string")
            clean.append(dict(d))
        names = [d["name"] for d in clean]
        if len(set(names)) != len(names):
            raise SpecError("datasets", f"duplicate datasets in {names}")
        self.datasets = clean
        self.passes = _int("passes", self.passes)
        self.record_every = _int("record_every", self.record_every)


def spec_from_dict(data, source=None, check_registry=True):
    """Build and validate an :class:`SPLSpec` from a parsed TOML table."""
    if not isinstance(data, dict):
        raise SpecError("", "a spec must be a table")
    for k in data:
        if k not in _TOP_KEYS:
            raise SpecError(k, f"unknown key; allowed keys: {', '.join(sorted(_TOP_KEYS))}")
    for req in ("name", "kind"):
        if req not in data:
            raise SpecError(req, "is required")
    kind = data["kind"]
    if kind not in KINDS:
        raise SpecError("kind", f"must be one of {KINDS}, got {kind!r}")
    wrong = _REAL_ONLY if kind == "synthetic" else _SYNTH_ONLY
    for k in data:
        if k in wrong:
            raise SpecError(k, f"does not apply to kind = {kind!r}")
    if kind == "real" and "datasets" not in data:
        raise SpecError("datasets", "is required for kind = 'real'")
    if "seeds" in data and "n_seeds" in data:
        raise SpecError("n_seeds", "give either 'seeds' or 'n_seeds', not both")
    kw = {k: v for k, v in data.items() if k not in ("plot", "n_seeds")}
    if "n_seeds" in data:
        kw["seeds"] = list(range(_int("n_seeds", data["n_seeds"])))
    plot = data.get("plot", {})
    if not isinstance(plot, dict):
        raise SpecError("plot", "must be a table")
    for k in plot:
        if k not in _PLOT_KEYS:
            raise SpecError(f"plot.{k}", f"unknown key; allowed keys: {', '.join(_PLOT_KEYS)}")
    if "floor" in plot:
        kw["floor"] = plot["floor"]
    return SPLSpec(**kw, source=source).validate(check_registry=check_registry)


def load_spec(spec, check_registry=True):
    """An :class:`SPLSpec` from an instance, a TOML path or a bundled spec name."""
    import tomllib

    from .spec import read_spec_text

    if isinstance(spec, SPLSpec):
        return spec.validate(check_registry=check_registry)
    text, origin = read_spec_text(spec)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError("", f"invalid TOML in {origin}: {exc}") from None
    if data.get("driver") != DRIVER:
        raise SpecError("driver", f"{origin} is not an SPL+ spec (driver = {DRIVER!r})")
    return spec_from_dict(data, source=text, check_registry=check_registry)


# ---------------------------------------------------------------------------- problems
@lru_cache(maxsize=4)
def _load_real(name):
    from .. import datasets

    data = datasets.load(name)
    X = np.ascontiguousarray(data.X_train, dtype=np.float64)
    y = np.ascontiguousarray(data.y_train, dtype=np.float64)
    return X, y


@lru_cache(maxsize=2)
def _build(pkey_json):
    """``(objective, sampler)`` of a problem (cached per process; the evaluation sample is big)."""
    from ..objectives.ru_cvar import RUCVaRObjective, StreamingRUCVaRObjective, SyntheticSampler

    k = json.loads(pkey_json)
    if k["kind"] == "synthetic":
        sampler = SyntheticSampler(_TASK[k["loss"]], d=k["d"], noise=k["noise"],
                                   random_state=k["data_seed"])
        obj = StreamingRUCVaRObjective(k["loss"], sampler, k["beta"], n_eval=k["n_eval"],
                                       l2_reg=k["l2_reg"], fit_intercept=k["fit_intercept"],
                                       random_state=k["eval_seed"])
        return obj, sampler
    X, y = _load_real(k["dataset"])
    obj = RUCVaRObjective(k["loss"], X, y, k["beta"], l2_reg=k["l2_reg"],
                          fit_intercept=k["fit_intercept"])
    return obj, None


def _problem_objective(pkey):
    return _build(json.dumps(pkey, sort_keys=True))


_LN2 = math.log(2.0)


@njit(cache=True)
def _ru_hinge_sums(code, X, y, W, a, acc):
    """``acc[k] += sum_i max(l_i(W[:, k]) - a[k], 0)`` (codes: 0 squared, 1 absolute, 2 logistic).

    One fused pass over the rows (no n x m temporaries); logistic: ``log(1 + e^z) - y z``
    with ``y`` in {0, 1}, computed stably.
    """
    n, p = X.shape
    m = W.shape[1]
    for i in range(n):
        yi = y[i]
        for k in range(m):
            z = 0.0
            for j in range(p):
                z += X[i, j] * W[j, k]
            if code == 0:
                r = z - yi
                ell = 0.5 * r * r
            elif code == 1:
                ell = abs(z - yi)
            else:
                # max(z, 0) - y z <= ell <= that + log 2: skip the logarithm when the hinge
                # is 0 anyway (most rows lie below alpha ~ VaR)
                lb = (z if z > 0.0 else 0.0) - yi * z
                if lb + _LN2 <= a[k]:
                    continue
                ell = lb + math.log1p(math.exp(-abs(z)))
            h = ell - a[k]
            if h > 0.0:
                acc[k] += h


_CODES = {"squared": 0, "absolute": 1, "logistic": 2}


def ru_values(objective, coefs, alphas):
    """``F(w_k, alpha_k)`` for many points at once (equals ``objective.value(w_k, alpha_k)``).

    ``coefs``: ``(m, p)`` (scalar-output losses: squared, absolute, logistic); ``alphas``:
    ``(m,)``. Non-finite points (and overflowing values) give ``inf``. One fused numba pass
    over the rows (:func:`_ru_hinge_sums`).
    """
    alphas = np.asarray(alphas, dtype=np.float64).reshape(-1)
    m = alphas.size
    W = np.asarray(coefs, dtype=np.float64).reshape(m, objective.p).T  # (p, m)
    out = np.full(m, np.inf)
    ok = np.all(np.isfinite(W), axis=0) & np.isfinite(alphas)
    if not ok.any():
        return out
    code = objective.loss.name
    if code not in _CODES:
        raise ValueError(f"ru_values covers {LOSSES}, not {code!r}")
    Wk = np.ascontiguousarray(W[:, ok])
    a = np.ascontiguousarray(alphas[ok])
    acc = np.zeros(a.size)
    _ru_hinge_sums(_CODES[code], objective.X, objective.y, Wk, a, acc)
    with np.errstate(over="ignore", invalid="ignore"):
        vals = a + objective.inv_tail * acc / objective.n \
            + 0.5 * np.sum(objective.reg[:, None] * Wk * Wk, axis=0)
    vals[~np.isfinite(vals)] = np.inf
    out[ok] = vals
    return out


def initial_point(spec_init, p, seed):
    """``(theta0, alpha0)`` of a seed: ``N(0, I_p)`` and ``U(0, 1)`` (Sec. 6.1), or zeros."""
    rng = np.random.default_rng([int(seed), 2023])
    theta = rng.standard_normal(p)
    alpha = float(rng.uniform(0.0, 1.0))
    if spec_init == "zeros":
        theta = np.zeros(p)
    return theta, alpha


# ---------------------------------------------------------------------------- cells
@dataclass
class Cell:
    id: str
    problem: str
    method: str
    lr: float
    seed: int
    key: dict


def enumerate_cells(spec):
    """Every run: (problem, method, lambda, seed), in spec order."""
    cells = []
    for prob in spec.problems():
        pk = spec.problem_key(prob)
        for m in spec.methods:
            for lr in spec.lr:
                for seed in spec.seeds:
                    key = {"format": CELL_FORMAT, "problem": pk, "method": m, "lr": float(lr),
                           "seed": int(seed), "schedule": spec.schedule, "init": spec.init,
                           "budget": spec.budget(), "records": _record_key(spec)}
                    cells.append(Cell(_hash(key), prob.id, m, float(lr), int(seed), key))
    return cells


def _record_key(spec):
    if spec.kind == "synthetic":
        return {"n_records": spec.n_records, "chunk_size": spec.chunk_size}
    return {"record_every": spec.record_every}


def _solver(method, lr, schedule, seed, loss_scale=None):
    from ..solvers.spl import SGM, SPL, SPLPlus

    if method == "splplus":
        return SPLPlus(lr=lr, schedule=schedule, loss_scale=loss_scale, random_state=seed)
    return {"sgm": SGM, "spl": SPL}[method](lr=lr, schedule=schedule, random_state=seed)


_WARM = set()


def _warm_up(loss):
    """Compile (or load from numba's cache) the three kernels once per process and loss."""
    if loss in _WARM:
        return
    _WARM.add(loss)
    from ..objectives.ru_cvar import RUCVaRObjective

    rng = np.random.default_rng(0)
    X = rng.standard_normal((16, 2))
    y = (rng.random(16) < 0.5).astype(float) if loss == "logistic" else rng.standard_normal(16)
    obj = RUCVaRObjective(loss, X, y, 0.5)
    for m in METHODS:
        try:
            _solver(m, 1e-3, "decreasing", 0).run(obj, max_epochs=1)
        except Exception:  # the real run reports any problem
            pass


def _run_synthetic(task, obj, sampler, theta0, alpha0, steps):
    """Streaming run; returns the averaged iterates at ``steps`` and solver time."""
    from ..objectives.ru_cvar import StreamingRUCVaRObjective

    k = task["problem"]
    # a 64-row twin of the objective for the solver (encoding, loss, beta, l2); the big
    # evaluation sample is only used to evaluate the recorded points (ru_values) and for l0
    small = StreamingRUCVaRObjective(k["loss"], sampler, k["beta"], n_eval=64,
                                     l2_reg=k["l2_reg"], fit_intercept=k["fit_intercept"],
                                     random_state=k["eval_seed"])
    l0 = None
    if task["method"] == "splplus":
        l0 = float(np.mean(obj.losses(theta0)))
    solver = _solver(task["method"], task["lr"], task["schedule"], task["seed"], l0)
    state = solver.init_state(small, coef0=theta0, alpha0=alpha0)
    coefs, alphas, times = [], [], []
    elapsed, done, diverged = 0.0, 0, False
    for s in steps:
        if s > done and not diverged:
            res = solver.run_stream(small, int(s - done), sampler=sampler, state=state,
                                    chunk_size=task["chunk_size"])
            state, elapsed, done = res.state, elapsed + res.time, int(s)
            diverged = bool(res.diverged)
        if diverged:
            coefs.append(np.full(obj.p, np.nan))
            alphas.append(np.nan)
        else:
            coefs.append(np.ravel(state.coef_avg).copy())
            alphas.append(float(state.alpha_avg))
        times.append(elapsed)
    return coefs, alphas, times, diverged, (l0 if l0 is not None else state.loss_scale)


def _run_real(task, obj, theta0, alpha0, steps):
    from ..callbacks import perf_counter

    solver = _solver(task["method"], task["lr"], task["schedule"], task["seed"])
    state = solver.init_state(obj, coef0=theta0, alpha0=alpha0)
    want = set(int(s) for s in steps)
    coefs, alphas, times = [], [], []
    elapsed, diverged = 0.0, False
    n_pass = int(steps[-1] // obj.n)

    def record():
        if diverged:
            coefs.append(np.full(obj.p, np.nan))
            alphas.append(np.nan)
        else:
            coefs.append(np.ravel(state.coef_avg).copy())
            alphas.append(float(state.alpha_avg))
        times.append(elapsed)

    record()
    for k in range(1, n_pass + 1):
        if not diverged:
            t0 = perf_counter()
            state = solver.update(obj, state)
            elapsed += perf_counter() - t0
            diverged = not (np.all(np.isfinite(state.coef_avg)) and np.isfinite(state.alpha_avg)
                            and np.all(np.isfinite(state.coef)) and np.isfinite(state.alpha))
        if k * obj.n in want:
            record()
    return coefs, alphas, times, diverged, state.loss_scale


def _run_cell(task):
    """Run one cell in a worker: ``(kind, id, frame or None, info, error or None)``."""
    import pandas as pd
    from threadpoolctl import threadpool_limits

    from ..callbacks import DivergenceWarning

    try:
        with threadpool_limits(1), warnings.catch_warnings():
            warnings.simplefilter("ignore", DivergenceWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            obj, sampler = _problem_objective(task["problem"])
            _warm_up(obj.loss.name)
            theta0, alpha0 = initial_point(task["init"], obj.p, task["seed"])
            steps = np.asarray(task["steps"], dtype=np.int64)
            if task["problem"]["kind"] == "synthetic":
                out = _run_synthetic(task, obj, sampler, theta0, alpha0, steps)
            else:
                out = _run_real(task, obj, theta0, alpha0, steps)
            coefs, alphas, times, diverged, l0 = out
            values = ru_values(obj, np.asarray(coefs), np.asarray(alphas))
        diverged = bool(diverged or not np.all(np.isfinite(values)))
        frame = pd.DataFrame({
            "record": np.arange(len(steps), dtype=np.int64),
            "step": steps,
            "passes": steps / obj.n if task["problem"]["kind"] == "real"
            else np.full(len(steps), np.nan),
            "time": np.asarray(times, dtype=float),
            "value": values,
            "diverged": np.full(len(steps), diverged),
        })
        info = {"loss_scale": float(l0), "alpha0": alpha0}
        return "cell", task["id"], frame, info, None
    except Exception as exc:  # recorded, reported, retried on the next invocation
        return "cell", task["id"], None, None, f"{type(exc).__name__}: {exc}\n" \
                                               f"{traceback.format_exc()}"


def _fstar_task(key, pkey):
    from threadpoolctl import threadpool_limits

    try:
        with threadpool_limits(1):
            obj, _ = _problem_objective(pkey)
            t0 = time.perf_counter()
            sol = obj.exact_solution("lbfgs")
            sec = time.perf_counter() - t0
        return "fstar", key, {"f_star": float(sol.value), "alpha": float(sol.alpha),
                              "coef": np.ravel(sol.coef).tolist(), "seconds": sec,
                              "n": int(obj.n), "p": int(obj.p)}, None, None
    except Exception as exc:
        return "fstar", key, None, None, f"{type(exc).__name__}: {exc}\n" \
                                         f"{traceback.format_exc()}"


# ---------------------------------------------------------------------------- run
def prepare(spec):
    """Check that every problem can be built (data present, loss fits the labels); returns
    ``{problem id: {"n", "p", "kind"}}``. Synthetic problems are not drawn (that is cheap but
    big); their sizes come from the spec."""
    spec = load_spec(spec)
    out = {}
    for i, prob in enumerate(spec.problems()):
        if prob.kind == "synthetic":
            out[prob.id] = {"n": spec.n_eval, "p": spec.d + int(spec.fit_intercept),
                            "kind": "synthetic"}
            continue
        try:
            obj, _ = _problem_objective(spec.problem_key(prob))
        except (ValueError, FileNotFoundError, OSError) as exc:
            raise SpecError(f"datasets[{i}]", f"cannot load {prob.dataset!r} with the "
                                              f"{prob.loss} loss: {exc}") from None
        out[prob.id] = {"n": int(obj.n), "p": int(obj.p), "kind": "real"}
    return out


def status(spec, out=None):
    """``(n_runs, n_finished)`` in an output folder (nothing is run)."""
    spec = load_spec(spec)
    out = Path(out) if out is not None else Path("results") / spec.name
    cells = enumerate_cells(spec)
    return len(cells), sum((out / "cells" / f"{c.id}.parquet").exists() for c in cells)


def run(spec, out=None, jobs=None, backend=None, progress=True, max_cells=None, fresh=False,
        plot=True, echo=None):
    """Run (or resume) an SPL+ experiment; the arguments are those of
    :func:`riskopt.bench.runner.run`. Returns a :class:`riskopt.bench.runner.RunResult`
    (``selection`` is the path of ``summary.csv``)."""
    from joblib import delayed

    from .runner import RunResult, _now, _parallel, _Progress

    say = echo or (lambda msg: None)
    t_start = time.perf_counter()
    started = _now()
    spec = load_spec(spec)
    jobs = jobs if jobs is not None else (spec.jobs if spec.jobs is not None else -1)
    out = Path(out) if out is not None else Path("results") / spec.name
    sizes = prepare(spec)

    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    cells = enumerate_cells(spec)
    if fresh:
        for c in cells:
            for p in (cells_dir / f"{c.id}.parquet", cells_dir / f"{c.id}.error.json"):
                if p.exists():
                    p.unlink()
        if (out / "fstar.json").exists():
            (out / "fstar.json").unlink()
    _io.atomic_write_json(out / "spec.json", spec.to_dict())

    probs = {p.id: p for p in spec.problems()}
    pkeys = {pid: spec.problem_key(p) for pid, p in probs.items()}
    fstar_path = out / "fstar.json"
    fstar = json.loads(fstar_path.read_text()) if fstar_path.exists() else {}
    missing = [pid for pid in probs if _hash(pkeys[pid]) not in fstar]

    done = {c.id for c in cells if (cells_dir / f"{c.id}.parquet").exists()}
    pending = [c for c in cells if c.id not in done]
    n_reused = len(done)
    if max_cells is not None:
        pending = pending[: max(0, int(max_cells))]
    say(f"spec {spec.name}: {len(cells)} runs, {n_reused} already finished, {len(pending)} to "
        f"run, {len(missing)} F* to compute (jobs={jobs})")

    tasks = [delayed(_fstar_task)(_hash(pkeys[pid]), pkeys[pid]) for pid in missing]
    # group the cells by problem so a worker keeps its problem's evaluation sample in cache
    order = {pid: i for i, pid in enumerate(probs)}
    for c in sorted(pending, key=lambda c: order[c.problem]):
        pk = pkeys[c.problem]
        tasks.append(delayed(_run_cell)({
            "id": c.id, "problem": pk, "method": c.method, "lr": c.lr, "seed": c.seed,
            "schedule": spec.schedule, "init": spec.init, "chunk_size": spec.chunk_size,
            "steps": spec.record_steps(sizes[c.problem]["n"]).tolist()}))
    by_id = {c.id: c for c in cells}
    pid_of = {_hash(pkeys[pid]): pid for pid in probs}
    errors, n_run = [], 0
    with _Progress(progress) as bar:
        if tasks:
            task_bar = bar.task(f"{spec.name}: F* and runs", len(tasks))
            ctx, par = _parallel(jobs, backend)
            with ctx:
                for kind, key, payload, info, err in par(tasks):
                    if kind == "fstar":
                        pid = pid_of[key]
                        if err is None:
                            fstar[key] = {"problem": pid, "key": pkeys[pid], **payload}
                            _io.atomic_write_json(fstar_path, fstar)
                        else:
                            errors.append((f"F* of {pid}", err))
                    else:
                        c = by_id[key]
                        if err is None:
                            _io.atomic_write_parquet(
                                cells_dir / f"{key}.parquet", payload,
                                {"riskopt.cell": json.dumps(c.key),
                                 "riskopt.run": json.dumps(info)})
                            e = cells_dir / f"{key}.error.json"
                            if e.exists():
                                e.unlink()
                            n_run += 1
                        else:
                            desc = f"{c.problem} / {LABELS[c.method]} lr={c.lr:g} seed={c.seed}"
                            _io.atomic_write_json(cells_dir / f"{key}.error.json",
                                                  {"cell": c.key, "run": desc, "error": err})
                            errors.append((desc, err))
                    bar.advance(task_bar)

    finished = {c.id for c in cells if (cells_dir / f"{c.id}.parquet").exists()}
    n_err = sum(1 for c in cells if (cells_dir / f"{c.id}.error.json").exists())
    f_missing = [pid for pid in probs if _hash(pkeys[pid]) not in fstar]
    remaining = len(cells) - len(finished) - n_err
    result = RunResult(out_dir=out, complete=remaining == 0 and n_err == 0 and not f_missing,
                       n_cells=len(cells), n_reused=n_reused, n_run=n_run,
                       n_errors=n_err + len(f_missing), wall_seconds=0.0, errors=errors)
    if remaining > 0 or f_missing:
        result.wall_seconds = time.perf_counter() - t_start
        say(f"stopped with {remaining} of {len(cells)} runs left; run the same command again "
            "to resume")
        return result

    table = merge_cells(spec, cells, cells_dir, fstar)
    sens = sensitivity(table, spec)
    summ = summary(sens, spec)
    result.table = out / "results.parquet"
    result.selection = out / "summary.csv"
    _io.atomic_write_parquet(result.table, table, {"riskopt.spec": json.dumps(spec.to_dict())})
    _io.atomic_write_parquet(out / "sensitivity.parquet", sens)
    _io.atomic_write_text(out / "sensitivity.csv", sens.to_csv(index=False))
    _io.atomic_write_text(out / "summary.csv", summ.to_csv(index=False))
    if plot:
        result.figures = plot_results(out, table=table, spec=spec)
    result.wall_seconds = time.perf_counter() - t_start
    result.metadata = out / "metadata.json"
    _io.atomic_write_json(result.metadata, _metadata(spec, out, result, sizes, fstar, pkeys,
                                                     table, summ, started, jobs, backend))
    return result


# ---------------------------------------------------------------------------- tables
def merge_cells(spec, cells, cells_dir, fstar):
    """The long table: one row per recorded point of every finished run."""
    import pandas as pd

    probs = {p.id: p for p in spec.problems()}
    parts = []
    for c in cells:
        path = cells_dir / f"{c.id}.parquet"
        if not path.exists():
            continue
        f = pd.read_parquet(path)
        prob = probs[c.problem]
        rec = fstar[_hash(spec.problem_key(prob))]
        const = {"spec": spec.name, "experiment": spec.kind, "problem": c.problem,
                 "problem_label": prob.display, "dataset": prob.dataset or "synthetic",
                 "loss": prob.loss, "noise": prob.noise or "", "method": c.method,
                 "method_label": LABELS[c.method], "lr": c.lr, "seed": c.seed,
                 "budget": spec.budget(), "f_star_lbfgs": float(rec["f_star"])}
        for k, v in const.items():
            f[k] = v
        parts.append(f)
    cols = ["spec", "experiment", "problem", "problem_label", "dataset", "loss", "noise",
            "method", "method_label", "lr", "seed", "budget", "record", "step", "passes",
            "time", "value", "f_star_lbfgs", "f_star", "suboptimality", "diverged"]
    if not parts:
        return pd.DataFrame(columns=cols)
    t = pd.concat(parts, ignore_index=True)
    finite = t[np.isfinite(t["value"])]
    low = finite.groupby("problem")["value"].min()
    t["f_star"] = np.minimum(t["f_star_lbfgs"].to_numpy(),
                             t["problem"].map(low).fillna(np.inf).to_numpy())
    t["suboptimality"] = t["value"] - t["f_star"]
    return t[cols]


def epsilons(table, spec):
    """``{problem: epsilon}``: ``epsilon |F*|``, ``epsilon x`` the median over seeds of the
    initial gap ``F(x0) - F*`` (``epsilon_scale = "gap"``), or ``epsilon``."""
    out = {}
    for pid, g in table.groupby("problem", sort=False):
        if spec.epsilon_scale == "fstar":
            out[pid] = spec.epsilon * abs(float(g["f_star"].iloc[0]))
        elif spec.epsilon_scale == "gap":
            first = g[g["record"] == 0].groupby("seed")["suboptimality"].first()
            out[pid] = spec.epsilon * float(np.median(first))
        else:
            out[pid] = spec.epsilon
    return out


def sensitivity(table, spec):
    """Per (problem, method, lambda): final suboptimality and steps to epsilon over seeds.

    ``final_*``: the suboptimality at the last record (``inf`` when the run diverged), median /
    min / max over seeds; ``steps_to_eps_*``: the first recorded step with suboptimality
    ``<= epsilon`` (``inf`` when never), likewise; ``epsilon`` is that of the problem.
    """
    import pandas as pd

    rows = []
    probs = [p.id for p in spec.problems()]
    eps_of = epsilons(table, spec)
    for (pid, m, lr), g in table.groupby(["problem", "method", "lr"], sort=False):
        finals, hits = [], []
        eps = eps_of[pid]
        for _, r in g.groupby("seed", sort=True):
            r = r.sort_values("record")
            sub = r["suboptimality"].to_numpy(dtype=float)
            sub = np.where(np.isfinite(sub), sub, np.inf)
            finals.append(sub[-1])
            hit = np.flatnonzero(sub <= eps)
            hits.append(float(r["step"].to_numpy()[hit[0]]) if hit.size else np.inf)
        finals, hits = np.asarray(finals), np.asarray(hits)
        gap0 = g[g["record"] == 0].groupby("seed")["suboptimality"].first().to_numpy()
        rows.append({"problem": pid, "problem_label": g["problem_label"].iloc[0],
                     "method": m, "method_label": LABELS[m], "lr": float(lr),
                     "n_seeds": len(finals), "n_diverged": int(g.groupby("seed")["diverged"]
                                                               .any().sum()),
                     "final_median": float(np.median(finals)), "final_min": float(finals.min()),
                     "final_max": float(finals.max()), "epsilon": eps,
                     "steps_to_eps_median": float(np.median(hits)),
                     "steps_to_eps_min": float(hits.min()),
                     "steps_to_eps_max": float(hits.max()),
                     "initial_gap": float(np.median(gap0)) if gap0.size else np.nan,
                     "f_star": float(g["f_star"].iloc[0])})
    out = pd.DataFrame(rows)
    if len(out):
        out["_p"] = out["problem"].map({p: i for i, p in enumerate(probs)})
        out["_m"] = out["method"].map({m: i for i, m in enumerate(spec.methods)})
        out = out.sort_values(["_p", "_m", "lr"]).drop(columns=["_p", "_m"])
    return out.reset_index(drop=True)


def _good_range(lrs, vals, threshold, i_best):
    """Contiguous run of grid points around ``i_best`` with ``vals <= threshold``."""
    lo = hi = i_best
    while lo > 0 and vals[lo - 1] <= threshold:
        lo -= 1
    while hi < len(vals) - 1 and vals[hi + 1] <= threshold:
        hi += 1
    return lo, hi


def summary(sens, spec):
    """Per (problem, method): the best lambda and how wide the set of good lambdas is.

    ``best_lr``/``best_final``: the lambda with the smallest median final suboptimality;
    ``width_decades``: ``log10(lr_hi / lr_lo)`` of the contiguous grid range around it where the
    median final suboptimality is ``<= tolerance x best_final`` (``n_good``: grid points in the
    range; ``n_good_all``: anywhere in the grid); ``*_vs_all``: the same with the threshold
    ``tolerance x`` the best of all methods on the problem; ``*_eps``: the same with the
    threshold ``epsilon`` of the problem (the median run ends within the fixed-accuracy target;
    ``NaN`` width when no lambda does); ``lr1_ratio``: median final at ``lambda = 1`` over
    ``best_final``, ``lr1_good``: ``lr1_ratio <= tolerance``.
    Suboptimalities are floored at ``plot.floor`` so the ratios are defined.
    """
    import pandas as pd

    rows = []
    floor = spec.floor
    for pid, gp in sens.groupby("problem", sort=False):
        overall = max(float(np.min(gp["final_median"])), floor)
        for m, g in gp.groupby("method", sort=False):
            g = g.sort_values("lr")
            lrs = g["lr"].to_numpy()
            vals = np.maximum(g["final_median"].to_numpy(), floor)
            eps = float(g["epsilon"].iloc[0]) if "epsilon" in g.columns else np.nan
            i = int(np.argmin(vals))
            best = float(vals[i])
            row = {"problem": pid, "problem_label": g["problem_label"].iloc[0], "method": m,
                   "method_label": LABELS[m], "best_lr": float(lrs[i]), "best_final": best}
            if not np.isfinite(best):
                row.update(lr_lo=np.nan, lr_hi=np.nan, width_decades=0.0, n_good=0,
                           n_good_all=0, width_decades_vs_all=0.0, n_good_vs_all=0)
            else:
                lo, hi = _good_range(lrs, vals, spec.tolerance * best, i)
                row.update(lr_lo=float(lrs[lo]), lr_hi=float(lrs[hi]),
                           width_decades=float(np.log10(lrs[hi] / lrs[lo])), n_good=hi - lo + 1,
                           n_good_all=int(np.sum(vals <= spec.tolerance * best)))
                thr = spec.tolerance * overall
                if vals[i] <= thr:
                    lo2, hi2 = _good_range(lrs, vals, thr, i)
                    row.update(width_decades_vs_all=float(np.log10(lrs[hi2] / lrs[lo2])),
                               n_good_vs_all=hi2 - lo2 + 1)
                else:
                    row.update(width_decades_vs_all=np.nan, n_good_vs_all=0)
            if np.isfinite(best) and vals[i] <= eps:
                lo3, hi3 = _good_range(lrs, vals, eps, i)
                row.update(width_decades_eps=float(np.log10(lrs[hi3] / lrs[lo3])),
                           n_reach_eps=int(np.sum(vals <= eps)))
            else:
                row.update(width_decades_eps=np.nan, n_reach_eps=0)
            one = np.flatnonzero(np.isclose(lrs, 1.0))
            if one.size:
                r1 = float(vals[one[0]] / best) if np.isfinite(best) else np.nan
                row.update(lr1_final=float(vals[one[0]]), lr1_ratio=r1,
                           lr1_good=bool(np.isfinite(r1) and r1 <= spec.tolerance))
            else:
                row.update(lr1_final=np.nan, lr1_ratio=np.nan, lr1_good=False)
            rows.append(row)
    return pd.DataFrame(rows)


def _versions_cpu():
    from .runner import _cpu_info, _git_commit, _versions

    return _versions(), _cpu_info(), _git_commit()


def _metadata(spec, out, result, sizes, fstar, pkeys, table, summ, started, jobs, backend):
    from .runner import _now

    versions, cpu, commit = _versions_cpu()
    eps_of = epsilons(table, spec)
    fs = []
    for pid, pk in pkeys.items():
        rec = fstar[_hash(pk)]
        sub = table[table["problem"] == pid]
        used = float(sub["f_star"].iloc[0]) if len(sub) else float(rec["f_star"])
        fs.append({"problem": pid, "f_star_lbfgs": rec["f_star"], "f_star": used,
                   "lowered_by": float(rec["f_star"]) - used, "alpha_star": rec["alpha"],
                   "coef_star_norm": float(np.linalg.norm(rec["coef"])),
                   "lbfgs_seconds": rec["seconds"], "n": rec["n"], "p": rec["p"],
                   "epsilon": eps_of.get(pid)})
    return {
        "spec_name": spec.name, "driver": DRIVER, "kind": spec.kind,
        "description": spec.description, "created": started, "finished": _now(),
        "riskopt_version": versions["riskopt"], "versions": versions, "cpu": cpu,
        "git_commit": commit,
        "run": {"jobs": jobs, "backend": backend or "joblib default (loky)",
                "cells_total": result.n_cells, "cells_reused": result.n_reused,
                "cells_run": result.n_run, "cells_failed": result.n_errors,
                "wall_seconds_this_invocation": result.wall_seconds},
        "problems": sizes,
        "record_steps": {pid: spec.record_steps(sizes[pid]["n"]).tolist()[:3] + ["..."]
                         + spec.record_steps(sizes[pid]["n"]).tolist()[-2:] for pid in sizes},
        "f_star": fs,
        "summary": json.loads(summ.to_json(orient="records")),
        "files": {"table": "results.parquet", "sensitivity": "sensitivity.parquet",
                  "summary": "summary.csv",
                  "figures": [str(Path(p).relative_to(out)) for p in result.figures]},
        "columns": {
            "problem": "synthetic '<loss>_<noise>' or the data set name",
            "method": "sgm / spl / splplus (method_label: SGM / SPL / SPL+)",
            "lr": "lambda", "seed": "drives theta0, alpha0 and the solver's sampling",
            "record, step": "index of the recorded point and the number of steps taken",
            "passes": "step / n (real data; NaN for the streaming synthetic runs)",
            "time": "solver seconds so far (streaming: sampling included)",
            "value": "F(theta_bar, alpha_bar) on the evaluation sample / training set",
            "f_star_lbfgs": "exact_solution('lbfgs') value",
            "f_star": "min(f_star_lbfgs, smallest value of any run on the problem)",
            "suboptimality": "value - f_star", "diverged": "non-finite iterates or values"},
        "spec": spec.to_dict(), "spec_source": spec.source, "spec_digest": spec.digest(),
    }


# ---------------------------------------------------------------------------- figures
def _layout(spec):
    """Rows x columns of problem ids: synthetic losses x noises; real data in one row."""
    if spec.kind == "synthetic":
        return [[f"{loss}_{noise}" for noise in spec.noises] for loss in spec.losses]
    ids = [p.id for p in spec.problems()]
    return [ids]


def _panel_title(spec, pid):
    p = {q.id: q for q in spec.problems()}[pid]
    if spec.kind == "synthetic":
        return f"{p.loss} loss, {p.noise} noise"
    return p.display


def _figure(spec, n_rows, n_cols):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.3 * n_cols + 0.4, 2.7 * n_rows + 0.9), layout="constrained")
    return fig, fig.subplots(n_rows, n_cols, squeeze=False)


def _legend(fig, axes_handles):
    if axes_handles:
        fig.legend(list(axes_handles.values()), list(axes_handles), loc="outside lower center",
                   ncol=min(len(axes_handles), 6), frameon=False)


def _sens_panel(ax, g_sens, spec, col_med, col_lo, col_hi, handles, top_factor=10.0,
                cap=None, band_top=None):
    """Median line + min-max band vs lambda; non-finite points (and points above ``cap``)
    drawn as x at the top."""
    finite = []
    for m in spec.methods:
        g = g_sens[g_sens["method"] == m].sort_values("lr")
        for c in (col_med, col_lo, col_hi):
            v = g[c].to_numpy(dtype=float)
            finite.extend(v[np.isfinite(v)].tolist())
    if cap is not None:
        top = cap
    else:
        top = max(finite) * top_factor if finite else 1.0
    top = max(top, spec.floor * 10)
    for im, m in enumerate(spec.methods):
        g = g_sens[g_sens["method"] == m].sort_values("lr")
        if g.empty:
            continue
        lr = g["lr"].to_numpy(dtype=float)
        med = np.maximum(g[col_med].to_numpy(dtype=float), spec.floor)
        lo = np.maximum(g[col_lo].to_numpy(dtype=float), spec.floor)
        hi = np.maximum(g[col_hi].to_numpy(dtype=float), spec.floor)
        ok = np.isfinite(med) & (med <= top)
        (line,) = ax.plot(lr, np.where(ok, med, np.nan), color=COLORS[m], lw=1.6, marker="o",
                          ms=2.5, label=LABELS[m])
        handles[LABELS[m]] = line
        if (~ok).any():  # staggered so that the methods' markers do not hide each other
            ax.plot(lr[~ok], np.full((~ok).sum(), top * 1.6 ** im), ls="none", marker="x",
                    ms=5, color=COLORS[m])
        if len(spec.seeds) > 1:
            bt = top if band_top is None else band_top
            ax.fill_between(lr, np.minimum(np.where(np.isfinite(lo), lo, bt), bt),
                            np.minimum(np.where(np.isfinite(hi), hi, bt), bt),
                            color=COLORS[m], alpha=0.18, lw=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axvline(1.0, color="0.6", ls=":", lw=1)
    ax.grid(True, which="major", alpha=0.3)
    return top


def plot_sensitivity(spec, sens, path_stem, formats=("png", "pdf")):
    layout = _layout(spec)
    fig, axes = _figure(spec, len(layout), len(layout[0]))
    handles = {}
    for r, row in enumerate(layout):
        for c, pid in enumerate(row):
            ax = axes[r, c]
            g = sens[sens["problem"] == pid]
            gap = g["initial_gap"].to_numpy(dtype=float)
            gap = gap[np.isfinite(gap)]
            # blown-up runs (SGM: 1e40 and beyond) would flatten the panel: anything above
            # 10x the initial gap F(x0) - F* is drawn as an x at the top, like a divergence
            _sens_panel(ax, g, spec, "final_median", "final_min", "final_max", handles,
                        cap=10.0 * float(gap.max()) if gap.size else None)
            ax.set_title(_panel_title(spec, pid), fontsize=9)
            if c == 0:
                ax.set_ylabel("final suboptimality")
            if r == len(layout) - 1:
                ax.set_xlabel(r"$\lambda$")
    budget = (f"T = {spec.n_steps:g} steps" if spec.kind == "synthetic"
              else f"{spec.passes} passes")
    fig.suptitle(f"{spec.name}: final F(avg iterate) - F* after {budget}\nmedian and min-max "
                 f"over {len(spec.seeds)} seeds; x at the top: diverged or above 10x the initial "
                 "gap", fontsize=10)
    _legend(fig, handles)
    return _save(fig, path_stem, formats)


def plot_fixed_accuracy(spec, sens, table, path_stem, formats=("png", "pdf")):
    layout = _layout(spec)
    fig, axes = _figure(spec, len(layout), len(layout[0]))
    handles = {}
    unit = "steps" if spec.kind == "synthetic" else "passes"
    for r, row in enumerate(layout):
        for c, pid in enumerate(row):
            ax = axes[r, c]
            g = sens[sens["problem"] == pid].copy()
            t = table[table["problem"] == pid]
            budget = float(t["step"].max()) if len(t) else 1.0
            per = 1.0
            if spec.kind == "real" and len(t):
                per = budget / float(t["passes"].max())  # steps per pass = n
            for col in ("steps_to_eps_median", "steps_to_eps_min", "steps_to_eps_max"):
                g[col] = g[col] / per
            _sens_panel(ax, g, spec, "steps_to_eps_median", "steps_to_eps_min",
                        "steps_to_eps_max", handles, cap=2.0 * budget / per,
                        band_top=budget / per)
            ax.axhline(budget / per, color="0.5", ls="--", lw=1)
            eps = float(g["epsilon"].iloc[0]) if len(g) else float("nan")
            ax.set_title(f"{_panel_title(spec, pid)}\n$\\epsilon$ = {eps:.3g}", fontsize=9)
            if c == 0:
                ax.set_ylabel(f"{unit} to reach F - F* <= eps")
            if r == len(layout) - 1:
                ax.set_xlabel(r"$\lambda$")
    what = {"fstar": f"{spec.epsilon:g} |F*|", "gap": f"{spec.epsilon:g} (F(x0) - F*)",
            "absolute": f"{spec.epsilon:g}"}[spec.epsilon_scale]
    fig.suptitle(f"{spec.name}: {unit} to reach F(avg iterate) - F* <= eps = {what}\nmedian "
                 f"and min-max over seeds; x above the dashed budget line: not reached",
                 fontsize=10)
    _legend(fig, handles)
    return _save(fig, path_stem, formats)


def plot_convergence(spec, table, sens, path_stem, formats=("png", "pdf")):
    layout = _layout(spec)
    fig, axes = _figure(spec, len(layout), len(layout[0]))
    handles = {}
    xcol = "step" if spec.kind == "synthetic" else "passes"
    for r, row in enumerate(layout):
        for c, pid in enumerate(row):
            ax = axes[r, c]
            for m in spec.methods:
                s = sens[(sens["problem"] == pid) & (sens["method"] == m)]
                if s.empty:
                    continue
                vals = np.maximum(s["final_median"].to_numpy(dtype=float), spec.floor)
                if not np.isfinite(vals).any():
                    continue
                lr = float(s["lr"].to_numpy()[int(np.argmin(vals))])
                g = table[(table["problem"] == pid) & (table["method"] == m)
                          & np.isclose(table["lr"], lr)]
                piv = g.pivot_table(index=xcol, columns="seed", values="suboptimality",
                                    aggfunc="first")
                x = piv.index.to_numpy(dtype=float)
                S = piv.to_numpy(dtype=float)
                S = np.where(np.isfinite(S), S, np.nan)
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    med = np.nanmedian(S, axis=1)
                    lo, hi = np.nanmin(S, axis=1), np.nanmax(S, axis=1)
                keep = x > 0 if spec.kind == "synthetic" else np.ones_like(x, dtype=bool)
                label = f"{LABELS[m]}"
                (line,) = ax.plot(x[keep], np.maximum(med[keep], spec.floor), color=COLORS[m],
                                  lw=1.6, label=label)
                handles[label] = line
                ax.text(0.98, 0.97 - 0.08 * spec.methods.index(m),
                        f"{LABELS[m]}: $\\lambda$={lr:.3g}", transform=ax.transAxes,
                        ha="right", va="top", fontsize=7, color=COLORS[m])
                if S.shape[1] > 1:
                    ax.fill_between(x[keep], np.maximum(lo[keep], spec.floor),
                                    np.maximum(hi[keep], spec.floor), color=COLORS[m],
                                    alpha=0.18, lw=0)
            if spec.kind == "synthetic":
                ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.3)
            ax.set_title(_panel_title(spec, pid), fontsize=9)
            if c == 0:
                ax.set_ylabel("suboptimality")
            if r == len(layout) - 1:
                ax.set_xlabel("steps" if spec.kind == "synthetic" else "passes")
    fig.suptitle(f"{spec.name}: F(avg iterate) - F* at each method's best $\\lambda$\n(smallest "
                 "median final suboptimality); median and min-max over seeds", fontsize=10)
    _legend(fig, handles)
    return _save(fig, path_stem, formats)


def _save(fig, stem, formats):
    written = []
    for fmt in formats:
        path = Path(f"{stem}.{fmt}")
        _io.atomic_savefig(fig, path, dpi=150 if fmt == "png" else None)
        written.append(path)
    return written


def plot_results(results, out_dir=None, table=None, spec=None, formats=("png", "pdf")):
    """Draw the SPL+ figures of a results folder from its tables (no solver is rerun).

    Returns the paths written: ``sensitivity``, ``fixed_accuracy`` and ``convergence`` in each
    of ``formats``.
    """
    import pandas as pd

    folder = Path(results)
    if folder.is_file():
        folder = folder.parent
    if spec is None:
        p = folder / "spec.json"
        if not p.exists():
            raise FileNotFoundError(f"no spec.json in {folder} (run `riskopt bench run` first)")
        d = json.loads(p.read_text())
        if d.get("driver") != DRIVER:
            raise ValueError(f"{folder} does not hold SPL+ results")
        spec = spec_from_dict(d, check_registry=False)
    if table is None:
        tp = folder / "results.parquet"
        if not tp.exists():
            raise FileNotFoundError(f"no results table at {tp} (run `riskopt bench run` first)")
        table = pd.read_parquet(tp)
    if table.empty:
        raise ValueError("the results table is empty")
    out_dir = Path(out_dir) if out_dir is not None else folder
    out_dir.mkdir(parents=True, exist_ok=True)
    sens = sensitivity(table, spec)
    written = []
    written += plot_sensitivity(spec, sens, out_dir / "sensitivity", formats)
    written += plot_fixed_accuracy(spec, sens, table, out_dir / "fixed_accuracy", formats)
    written += plot_convergence(spec, table, sens, out_dir / "convergence", formats)
    return written


def is_results_folder(path):
    """True when ``path`` (a folder or its results.parquet) holds SPL+ results."""
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    p = folder / "spec.json"
    if not p.exists():
        return False
    try:
        return json.loads(p.read_text()).get("driver") == DRIVER
    except (OSError, ValueError):
        return False
