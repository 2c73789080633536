"""Common solver interface.

A solver stores hyper-parameters only (scikit-learn rule). Its state is an explicit
``NamedTuple`` of arrays with at least ``coef`` (the ``(p, K)`` coefficient matrix),
``epoch`` (passes done) and ``rng`` (a ``numpy.random.Generator`` drawing sample indices), so
warm starts and pickling come free.

* ``init_state(objective, coef0=None) -> state``
* ``draw_indices(objective, state) -> indices`` — the sample-index sequence of one pass, drawn
  in Python from the seeded generator.
* ``update(objective, state, indices=None) -> state`` — one pass, inside one kernel call; with
  ``indices`` given, the pass uses exactly that sequence (how the tests compare a kernel to its
  NumPy twin).
* ``run(objective, max_epochs, callback, coef0, state) -> Result``.
"""
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import check_int, check_positive
from ..callbacks import Trace, as_callback, perf_counter


@dataclass
class Result:
    """Outcome of :meth:`Solver.run`.

    ``coef`` has the objective's public coefficient shape; ``trace`` is the first
    :class:`~riskopt.callbacks.Trace` among the callbacks (or None); ``diverged`` and
    ``message`` say why the run stopped.
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
    """Base class. Subclasses define ``name``, ``_init(objective, W, rng)`` and ``_pass``."""

    name = "base"
    #: True when the method converges to the minimiser of the objective (not biased).
    convergent = True
    #: Stochastic solvers sample uniformly: they need uniform sample weights.
    supports_sample_weight = False

    def __init__(self, lr=0.01, random_state=None):
        self.lr = lr
        self.random_state = random_state

    # -- hooks ---------------------------------------------------------------
    def _check_params(self, objective):
        check_positive("lr", self.lr)

    def _check_objective(self, objective):
        """Raise ValueError when the solver does not support this objective."""

    def _init(self, objective, W, rng):
        raise NotImplementedError

    def _pass(self, objective, state, indices):
        raise NotImplementedError

    def passes_per_update(self, objective):
        """Oracle calls of one ``update`` divided by n (the papers' x-axis unit). Default 1."""
        return 1.0

    def draw_indices(self, objective, state):
        """Default: n indices drawn uniformly with replacement."""
        return state.rng.integers(0, objective.n, size=objective.n)

    # -- public --------------------------------------------------------------
    def get_params(self):
        import inspect

        sig = inspect.signature(type(self).__init__)
        return {k: getattr(self, k) for k in sig.parameters if k != "self"}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def init_state(self, objective, coef0=None):
        self._check_params(objective)
        if getattr(objective, "sample_weight", None) is not None and not self.supports_sample_weight:
            raise ValueError(f"solver {self.name!r} does not support non-uniform sample_weight; "
                             "use the 'lbfgs' solver")
        self._check_objective(objective)
        W = objective.zeros() if coef0 is None else coef0
        W = objective.as_matrix(W).copy()
        if not np.all(np.isfinite(W)):
            raise ValueError("coef0 contains NaN or infinite values")
        rng = np.random.default_rng(self.random_state)
        return self._init(objective, W, rng)

    def update(self, objective, state, indices=None):
        if indices is None:
            indices = self.draw_indices(objective, state)
        indices = np.ascontiguousarray(indices, dtype=np.int64)
        return self._pass(objective, state, indices)

    def run(self, objective, max_epochs=64, callback=None, coef0=None, state=None):
        """Run ``max_epochs`` updates (or until a callback stops it).

        ``state`` continues a previous run (warm start); otherwise ``coef0`` (default zeros)
        is the starting point.
        """
        max_epochs = check_int("max_epochs", max_epochs, minimum=0)
        if state is None:
            state = self.init_state(objective, coef0)
        cb = as_callback(callback)
        trace = _find_trace(callback)
        if cb is not None:
            cb.on_start(objective, objective.as_coef(state.coef))
        elapsed = 0.0
        passes = 0.0
        ppu = float(self.passes_per_update(objective))
        message = "max_epochs reached"
        diverged = False
        for _ in range(max_epochs):
            t0 = perf_counter()
            state = self.update(objective, state)
            elapsed += perf_counter() - t0
            passes += ppu
            finite = bool(np.all(np.isfinite(state.coef)))
            if cb is not None and cb(passes, objective.as_coef(state.coef), elapsed):
                message = cb.stop_reason or "stopped by callback"
                diverged = bool(getattr(trace, "diverged", False)) or not finite
                break
            if not finite:
                diverged = True
                message = f"diverged after {state.epoch} passes: non-finite coefficients"
                import warnings

                from ..callbacks import DivergenceWarning

                warnings.warn(message, DivergenceWarning, stacklevel=2)
                break
        coef = objective.as_coef(state.coef)
        value = float(objective.value(coef)) if np.all(np.isfinite(coef)) else float("nan")
        return Result(coef=coef, value=value, n_epochs=int(state.epoch), time=elapsed,
                      state=state, trace=trace, diverged=diverged, message=message,
                      extra={"passes": passes})


def _find_trace(callback):
    if isinstance(callback, Trace):
        return callback
    if isinstance(callback, (list, tuple)):
        for c in callback:
            if isinstance(c, Trace):
                return c
    return None
