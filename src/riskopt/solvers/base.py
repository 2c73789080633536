"""The solver interface and the one run loop every solver uses.

A solver stores hyper-parameters only (scikit-learn rule) and declares the problem families it
solves (``families``, see :mod:`riskopt.objectives.base`). Its state is an explicit
``NamedTuple`` of arrays with at least ``coef`` (the ``(p, K)`` coefficient matrix), ``epoch``
(updates done) and ``rng`` (a ``numpy.random.Generator`` drawing sample indices), so warm
starts, pickling and resuming come free.

* ``init_state(objective, coef0=None, **init) -> state`` (``init``: family-specific starting
  values of the auxiliary variables, e.g. ``alpha0`` for the RU-CVaR solvers);
* ``draw_indices(objective, state) -> indices``: the sample-index sequence of one update, drawn
  in Python from the seeded generator (:mod:`riskopt.samplers`);
* ``update(objective, state, indices=None) -> state``: one pass, inside one kernel call; with
  ``indices`` given the pass uses exactly that sequence (how the tests compare a kernel to its
  NumPy twin);
* ``run(objective, max_epochs, callback, coef0, state, timeout, **init) -> Result``: the run
  loop below, shared by all solvers: callbacks (:class:`riskopt.Trace` records passes,
  solver-only time and the objective; :class:`riskopt.Timeout`), divergence detection
  (non-finite iterates stop the run with a :class:`~riskopt.callbacks.DivergenceWarning`; the
  trace also flags a blown-up objective; a run that ends above its start F(start) by more than
  ``RISE_MARGIN`` x (max(F(start), F(0)) - lower bound) is flagged ``diverged`` with the same
  warning, naming lr/10), an optional ``timeout`` in seconds of solver time,
  warm starts (``coef0``) and resuming (``state=result.state`` continues where a run stopped,
  bit for bit);
* ``run_stream(objective, n_steps, sampler, ...)``: the same loop on fresh samples from a data
  stream, for solvers with ``streaming = True``.

Hooks for subclasses: ``_check_params``, ``_check_objective`` (beyond the family), ``_init``,
``_pass`` (and ``_pass_data`` for streaming), ``passes_per_update``, ``draw_indices``,
``_iterate`` (the point the callbacks see; default ``state.coef``; the averaged iterate for
averaging methods), ``_finite``, ``_failed`` and ``_result``. See ``docs/extending.rst``.
"""
import inspect
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import check_int, check_positive, store_params
from ..callbacks import DivergenceWarning, Timeout, Trace, as_callback, perf_counter
from ._registry import IncompatibleObjectiveError, solvers_for


@dataclass
class Result:
    """Outcome of :meth:`Solver.run`.

    ``coef`` has the objective's public coefficient shape; ``value`` is the objective there
    (the profile over auxiliary variables, or ``F(coef, aux)`` for averaging methods: see the
    solver); ``trace`` is the first :class:`~riskopt.callbacks.Trace` among the callbacks (or
    None); ``diverged`` and ``message`` say why the run stopped; ``state`` resumes the run.
    """

    coef: np.ndarray
    value: float
    n_epochs: int
    time: float
    state: Any = None
    trace: Any = None
    diverged: bool = False
    message: str = "max_epochs reached"
    extra: dict = field(default_factory=dict)


class Solver:
    """Base class. Subclasses define ``name``, ``families``, ``_init(objective, W, rng)`` and
    ``_pass(objective, state, indices)``."""

    name = "base"
    #: Problem families (``objective.family``) this solver solves.
    families = ("spectral",)
    #: True when the method converges to the minimiser of the objective (not biased).
    convergent = True
    #: Stochastic solvers sample uniformly: they need uniform sample weights.
    supports_sample_weight = False
    #: solves an objective whose design is scipy.sparse (full-batch ``X @ W`` code only)
    accepts_sparse = False
    #: True when :meth:`run_stream` is available (updates on fresh samples of a stream).
    streaming = False
    #: True for deterministic full-batch methods (no sample indices).
    deterministic = False

    def __init__(self, lr=0.01, random_state=None):
        self._store(locals())

    def _store(self, params):
        """Store the constructor's arguments as attributes: ``self._store(locals())``.

        Constructors only store (scikit-learn rule); validation happens in ``init_state``.
        """
        store_params(self, params)

    # -- hooks ---------------------------------------------------------------
    def _check_params(self, objective):
        check_positive("lr", self.lr)

    def _check_objective(self, objective):
        """Raise ValueError when the solver does not support this objective of its family."""

    def _init(self, objective, W, rng):
        raise NotImplementedError

    def _pass(self, objective, state, indices):
        raise NotImplementedError

    def _pass_data(self, objective, state, X, y, indices):
        raise NotImplementedError(f"solver {self.name!r} has no streaming mode")

    def passes_per_update(self, objective):
        """Oracle calls of one ``update`` divided by n (the papers' x-axis unit). Default 1."""
        return 1.0

    def draw_indices(self, objective, state):
        """Default: n indices drawn uniformly with replacement."""
        from .. import samplers

        return samplers.uniform(state.rng, objective.n, objective.n)

    def _iterate(self, state):
        """The ``(p, K)`` point handed to the callbacks and returned (default: ``state.coef``)."""
        return state.coef

    def _finite(self, state):
        return bool(np.all(np.isfinite(state.coef)))

    #: judge the objective against its start after every pass (one evaluation of ``F`` per
    #: pass, outside the solver's clock), not only at the end: for solvers whose iterates can
    #: leave far and come back part way (Dual SGM), so that the run stops where it left
    rise_every_pass = False

    def _failed(self, objective, state):
        """A solver-specific divergence found after a pass, as the reason (a sentence naming
        the step size), or None (default): the run then stops, ``diverged``, with a
        :class:`~riskopt.callbacks.DivergenceWarning` (e.g. the KL solvers' collapsed
        multiplier, Dual SGM's capped exponents)."""
        return None

    def point(self, objective, state):
        """The point the solver reports: ``(coef, aux)``, ``coef`` the ``(p, K)`` matrix of
        :meth:`_iterate` and ``aux`` the tuple of the objective's auxiliary variables
        (``objective.aux_names``) read from the state (NaN where the state has none)."""
        aux = tuple(float(getattr(state, a, np.nan)) for a in objective.aux_names)
        return self._iterate(state), aux

    def _result(self, objective, state, elapsed, trace, diverged, message, progress):
        coef = objective.as_coef(self._iterate(state))
        value = _safe_value(objective, coef)
        return Result(coef=coef, value=value, n_epochs=int(state.epoch), time=elapsed,
                      state=state, trace=trace, diverged=diverged, message=message,
                      extra={"passes": progress})

    # -- compatibility -------------------------------------------------------
    def incompatibility(self, objective):
        """None when this solver solves ``objective``, else the reason (a string)."""
        family = getattr(objective, "family", None)
        if family not in self.families:
            return (f"solver {self.name!r} solves the {' / '.join(self.families)} "
                    f"famil{'ies' if len(self.families) > 1 else 'y'}, not {family!r} "
                    f"({type(objective).__name__})")
        if getattr(objective, "sparse", False) and not self.accepts_sparse:
            return (f"solver {self.name!r} needs a dense X (its kernels read rows of the "
                    "design) and this objective's X is scipy.sparse: use 'lbfgs', or pass "
                    "X.toarray() if it fits in memory")
        try:
            self._check_objective(objective)
        except (ValueError, TypeError) as exc:
            return str(exc)
        return None

    def check_objective(self, objective):
        """Raise :class:`IncompatibleObjectiveError` (listing the solvers that fit) if this
        solver cannot solve ``objective``."""
        reason = self.incompatibility(objective)
        if reason is not None:
            fits = [s for s in solvers_for(objective) if s != self.name]
            raise IncompatibleObjectiveError(
                f"{reason}; solvers for this objective: {', '.join(fits) or '(none)'}")

    # -- public --------------------------------------------------------------
    def get_params(self):
        sig = inspect.signature(type(self).__init__)
        return {k: getattr(self, k) for k in sig.parameters if k not in ("self", "args", "kwargs")}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def init_state(self, objective, coef0=None, **init):
        self._check_params(objective)
        if getattr(objective, "sample_weight", None) is not None and not self.supports_sample_weight:
            raise ValueError(f"solver {self.name!r} does not support non-uniform sample_weight; "
                             "use the 'lbfgs' solver")
        self.check_objective(objective)
        if not self.accepts_sparse and hasattr(objective, "dense_design"):
            objective.dense_design()  # an operator design (estimators): the rows, once
        W = objective.zeros() if coef0 is None else coef0
        W = objective.as_matrix(W).copy()
        if not np.all(np.isfinite(W)):
            raise ValueError("coef0 contains NaN or infinite values")
        rng = np.random.default_rng(self.random_state)
        return self._init(objective, W, rng, **init)

    def update(self, objective, state, indices=None):
        if indices is None:
            indices = self.draw_indices(objective, state)
        indices = np.ascontiguousarray(indices, dtype=np.int64)
        return self._pass(objective, state, indices)

    def run(self, objective, max_epochs=64, callback=None, coef0=None, state=None, timeout=None,
            **init):
        """Run ``max_epochs`` updates (or until a callback or the ``timeout`` stops it).

        ``state`` continues a previous run (``result.state``: warm start and resume, the
        random stream included); otherwise ``coef0`` (default zeros) and the family-specific
        ``init`` values are the starting point. ``timeout`` is in seconds of solver time.
        """
        max_epochs = check_int("max_epochs", max_epochs, minimum=0)
        if state is None:
            state = self.init_state(objective, coef0, **init)
        elif coef0 is not None or init:
            raise ValueError("give either state (to resume) or a starting point, not both")
        else:
            self.check_objective(objective)
        ppu = float(self.passes_per_update(objective))
        self._warn_if_hours(objective, max_epochs * ppu)

        def step(st, k):
            return self.update(objective, st), ppu

        return self._loop(objective, state, step, max_epochs, callback, timeout, "passes")

    #: seconds per pass / n^2 for a solver whose step costs O(n) (None: a pass is O(n));
    #: set by such solvers from a measurement, for the warning of :meth:`_warn_if_hours`
    quadratic_pass_cost = None
    #: a run estimated longer than this (seconds) warns before it starts
    LONG_RUN_SECONDS = 3600.0

    def _warn_if_hours(self, objective, passes):
        c = self.quadratic_pass_cost
        n = getattr(objective, "n", None)
        if not c or not n or passes <= 0:
            return
        per_pass = c * float(n) ** 2
        if per_pass * passes > self.LONG_RUN_SECONDS:
            warnings.warn(
                f"{self.name} costs O(n) per step, O(n^2) per pass: about {per_pass:.0f} s per "
                f"pass at n = {n}, {per_pass * passes / 3600:.2g} h for {passes:g} passes (on a "
                f"2-core machine); prospect (incremental exact oracle) and lsvrg cost a few full "
                f"gradients per pass", RuntimeWarning, stacklevel=3)

    def run_stream(self, objective, n_steps, sampler=None, chunk_size=8192, callback=None,
                   coef0=None, state=None, timeout=None, **init):
        """Streaming mode: ``n_steps`` steps on fresh samples ``z ~ P`` (one sample per step).

        Samples are drawn from ``sampler.draw(state.rng, m)`` in chunks of ``chunk_size``, each
        validated and encoded by ``objective.prepare`` and passed whole to the pass kernel.
        Callbacks are called after every chunk with the number of steps taken so far (in place
        of ``passes``). ``sampler`` defaults to ``objective.sampler``.
        """
        if not self.streaming:
            raise ValueError(f"solver {self.name!r} has no streaming mode")
        n_steps = check_int("n_steps", n_steps, minimum=0)
        chunk_size = check_int("chunk_size", chunk_size)
        if sampler is None:
            sampler = getattr(objective, "sampler", None)
        if not callable(getattr(sampler, "draw", None)):
            raise ValueError("run_stream needs a sampler with draw(rng, size) -> (X, y)")
        if state is None:
            state = self.init_state(objective, coef0, **init)
        n_chunks = -(-n_steps // chunk_size)

        def step(st, k):
            m = min(chunk_size, n_steps - k * chunk_size)
            X, y = objective.prepare(*sampler.draw(st.rng, m))
            return self._pass_data(objective, st, X, y, np.arange(m, dtype=np.int64)), float(m)

        return self._loop(objective, state, step, n_chunks, callback, timeout, "steps")

    # -- the run loop ----------------------------------------------------------
    def _loop(self, objective, state, step, n_calls, callback, timeout, unit):
        callbacks = list(callback) if isinstance(callback, (list, tuple)) else [callback]
        if timeout is not None:
            callbacks.append(Timeout(check_positive("timeout", timeout)))
        callbacks = [c for c in callbacks if c is not None]
        cb = as_callback(callbacks) if callbacks else None
        on_update = getattr(cb, "on_update", None)
        trace = _find_trace(callbacks)
        if cb is not None:
            cb.on_start(objective, objective.as_coef(self._iterate(state)))
        elapsed, progress = 0.0, 0.0
        message = "max_epochs reached" if unit == "passes" else "n_steps reached"
        diverged = False
        # divergence is also judged against the starting value (not only non-finite iterates):
        # one objective evaluation here and one at the end, outside the solver's clock
        rise_check = unit == "passes" and n_calls > 0 and callable(
            getattr(objective, "value", None))
        f_start = (_safe_value(objective, objective.as_coef(self._iterate(state)))
                   if rise_check else float("nan"))
        rise_check = rise_check and bool(np.isfinite(f_start))
        limit = (f_start + RISE_MARGIN * self._rise_scale(objective, f_start) if rise_check
                 else float("nan"))
        for k in range(n_calls):
            t0 = perf_counter()
            state, amount = step(state, k)
            elapsed += perf_counter() - t0
            progress += amount
            finite = self._finite(state)
            if on_update is not None:
                on_update(self, objective, state, progress, elapsed)
            if cb is not None and cb(progress, objective.as_coef(self._iterate(state)), elapsed):
                message = cb.stop_reason or "stopped by callback"
                diverged = bool(getattr(trace, "diverged", False)) or not finite
                break
            if not finite:
                diverged = True
                message = (f"diverged after {state.epoch} updates ({progress:g} {unit}): "
                           f"non-finite iterates; {self._smaller_lr()}")
                warnings.warn(message, DivergenceWarning, stacklevel=3)
                break
            reason = self._failed(objective, state)
            if not reason and rise_check and self.rise_every_pass:
                f_now = _safe_value(objective, objective.as_coef(self._iterate(state)))
                reason = (None if f_now <= limit
                          else self._rise_reason(f_now, f_start, limit, "reached"))
            if reason:
                diverged = True
                message = f"diverged after {state.epoch} updates ({progress:g} {unit}): {reason}"
                warnings.warn(message, DivergenceWarning, stacklevel=3)
                break
        if rise_check and not diverged:
            f_end = _safe_value(objective, objective.as_coef(self._iterate(state)))
            if not f_end <= limit:  # NaN f_end counts
                diverged = True
                message = (f"diverged after {state.epoch} updates ({progress:g} {unit}): "
                           f"{self._rise_reason(f_end, f_start, limit)}")
                warnings.warn(message, DivergenceWarning, stacklevel=3)
        return self._result(objective, state, elapsed, trace, diverged, message, progress)

    def _rise_reason(self, f_end, f_start, limit, verb="ended at"):
        end = f"{f_end:.6g}" if np.isfinite(f_end) else "an overflow"
        return (f"the objective {verb} {end}, above its start {f_start:.6g} by more than "
                f"{RISE_MARGIN:g} x (max(F(start), F(0)) - lower bound) = "
                f"{limit - f_start:.3g}; {self._smaller_lr()}")

    def _smaller_lr(self):
        """The advice of a divergence message: the step size to try."""
        lr = getattr(self, "lr", None)
        if isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > 0:
            return f"use a smaller step size, e.g. lr={lr / 10:.3g} (lr/10)"
        return "use a smaller step size (lr/10)"

    @staticmethod
    def _rise_scale(objective, f_start):
        """``max(F(start), F(0)) - lower`` (``lower``: the objective's ``lower_bound``
        attribute, default 0: the built-in losses, risks and penalties are non-negative);
        ``max(|F(start)|, |F(0)|)`` where that is not positive; a tiny floor for F = 0."""
        f0 = _safe_value(objective, objective.zeros())
        top = max(f_start, f0) if np.isfinite(f0) else f_start
        lower = getattr(objective, "lower_bound", 0.0)
        lower = float(lower) if isinstance(lower, (int, float)) else 0.0
        scale = top - lower if np.isfinite(lower) and top >= lower else np.nan
        if not scale > 0:
            scale = max(abs(f_start), abs(f0) if np.isfinite(f0) else 0.0)
        return max(scale, 1e-12 * max(1.0, abs(f_start)))


#: a run whose final objective exceeds its start F(start) by more than ``RISE_MARGIN`` times
#: ``max(F(start), F(0)) - lower bound`` is reported as diverged (``Result.diverged``, a
#: DivergenceWarning naming lr/10): the end-point form of :class:`~riskopt.callbacks.Trace`'s
#: per-pass test (``divergence_factor = 1.5``), so a run is judged the same with or without a
#: trace
RISE_MARGIN = 0.5


def _safe_value(objective, coef, *aux):
    """``objective.value(coef, *aux)``, NaN (without overflow warnings) where not finite."""
    if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(aux))):
        return float("nan")
    with np.errstate(over="ignore", invalid="ignore"):
        value = float(objective.value(coef, *aux))
    return value if np.isfinite(value) else float("nan")


def copy_arrays(state, *names):
    """``{name: state.name.copy()}``: the arrays a pass kernel updates in place.

    A pass copies them (the old state stays valid: warm starts, comparisons), hands them to the
    kernel in this order and puts them back with ``state._replace(**arrays)``.
    """
    return {name: getattr(state, name).copy() for name in names}


def check_batches(indices, b, n):
    """``indices`` as an int64 ``(n_steps, b)`` array of mini-batches of distinct indices in
    ``[0, n)`` (the mini-batch kernels of LSVRG and Prospect need distinct indices within a
    batch); a clear ValueError otherwise."""
    idx = np.asarray(indices, dtype=np.int64)
    if idx.ndim != 2 or idx.shape[1] != b:
        raise ValueError(f"indices must have shape (n_steps, {b}), got {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"indices must lie in [0, {n})")
    if b > 1 and idx.size and (np.diff(np.sort(idx, axis=1), axis=1) == 0).any():
        raise ValueError("the indices of a mini-batch must be distinct")
    return np.ascontiguousarray(idx)


def _find_trace(callback):
    if isinstance(callback, Trace):
        return callback
    if isinstance(callback, (list, tuple)):
        for c in callback:
            if isinstance(c, Trace):
                return c
    return None
