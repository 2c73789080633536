"""Callbacks for :meth:`riskopt.solvers.Solver.run`.

A callback has ``on_start(objective, coef)`` (called once before the first pass) and
``__call__(passes, coef, elapsed) -> bool`` (called after every pass; ``True`` stops the run).
``elapsed`` is solver-only wall time: the run loop stops its clock while callbacks evaluate
the objective. A callback may set ``stop_reason`` to explain a stop.
"""
import time
import warnings

import numpy as np


class DivergenceWarning(RuntimeWarning):
    """The objective blew up (non-finite, or far above its starting value)."""


class Callback:
    stop_reason = None

    def on_start(self, objective, coef):
        pass

    def __call__(self, passes, coef, elapsed):
        return False


class Trace(Callback):
    """Records passes, solver time, objective and suboptimality; detects divergence.

    Parameters
    ----------
    f_star : float, optional
        Optimal value (e.g. from :class:`riskopt.solvers.LBFGS`). Then ``suboptimality`` is
        ``(F(w) - f*) / (F(w0) - f*)``, equation (9) of the Prospect paper.
    tol : float, optional
        Stop once the suboptimality is at or below ``tol`` (needs ``f_star``).
    divergence_factor : float, default 1.5
        Stop and flag divergence when ``F(w) > F(w0) + (factor - 1) |F(w0)|``, or when ``F`` is
        not finite.
    every : int, default 1
        Evaluate the objective every ``every`` passes.
    """

    def __init__(self, f_star=None, tol=None, divergence_factor=1.5, every=1):
        self.f_star = f_star
        self.tol = tol
        self.divergence_factor = divergence_factor
        self.every = every

    def on_start(self, objective, coef):
        self.objective = objective
        self.passes = []
        self.times = []
        self.values = []
        self._calls = 0
        self.diverged = False
        self.stop_reason = None
        self.f0 = float(objective.value(coef))
        if not np.isfinite(self.f0):
            raise ValueError("the objective is not finite at the initial point")
        self._record(0, 0.0, self.f0)

    def _record(self, passes, elapsed, value):
        self.passes.append(passes)
        self.times.append(elapsed)
        self.values.append(value)

    def __call__(self, passes, coef, elapsed):
        self._calls += 1
        if self._calls % self.every:
            return False
        value = float(self.objective.value(coef)) if np.all(np.isfinite(coef)) else np.nan
        self._record(passes, elapsed, value)
        limit = self.f0 + (self.divergence_factor - 1.0) * abs(self.f0)
        if not np.isfinite(value) or value > limit:
            self.diverged = True
            self.stop_reason = (
                f"diverged after {passes} passes: objective {value:.6g} "
                f"(start {self.f0:.6g}); lower the step size"
            )
            warnings.warn(self.stop_reason, DivergenceWarning, stacklevel=3)
            return True
        if self.tol is not None and self.f_star is not None:
            if self.suboptimality[-1] <= self.tol:
                self.stop_reason = f"suboptimality {self.suboptimality[-1]:.3g} <= tol {self.tol:g}"
                return True
        return False

    @property
    def suboptimality(self):
        if self.f_star is None:
            raise ValueError("Trace needs f_star to report suboptimality")
        denom = self.f0 - self.f_star
        v = np.asarray(self.values)
        if denom <= 0:
            return v - self.f_star
        return (v - self.f_star) / denom

    def as_dict(self):
        out = {"passes": np.asarray(self.passes), "time": np.asarray(self.times),
               "objective": np.asarray(self.values)}
        if self.f_star is not None:
            out["suboptimality"] = self.suboptimality
        return out

    def passes_to(self, level):
        """First recorded pass count with suboptimality <= ``level`` (None if never)."""
        s = self.suboptimality
        hit = np.nonzero(s <= level)[0]
        return None if hit.size == 0 else self.passes[hit[0]]


class Timeout(Callback):
    """Stops the run after ``seconds`` of solver time."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __call__(self, passes, coef, elapsed):
        if elapsed >= self.seconds:
            self.stop_reason = f"timeout after {elapsed:.3g} s of solver time"
            return True
        return False


class CallbackList(Callback):
    def __init__(self, callbacks):
        self.callbacks = [c for c in callbacks if c is not None]

    def on_start(self, objective, coef):
        for c in self.callbacks:
            c.on_start(objective, coef)

    def __call__(self, passes, coef, elapsed):
        stop = False
        for c in self.callbacks:
            if c(passes, coef, elapsed):
                stop = True
                self.stop_reason = self.stop_reason or c.stop_reason
        return stop


def as_callback(callback):
    if callback is None:
        return None
    if isinstance(callback, (list, tuple)):
        return CallbackList(callback)
    return callback


perf_counter = time.perf_counter
