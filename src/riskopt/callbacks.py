"""Callbacks for :meth:`riskopt.solvers.Solver.run`.

A callback has ``on_start(objective, coef)`` (called once before the first pass) and
``__call__(passes, coef, elapsed) -> bool`` (called after every pass; ``True`` stops the run).
A callback that needs more than the reported coefficients (e.g. the auxiliary variables of the
solver's point) may define ``on_update(solver, objective, state, passes, elapsed)``, called
after every pass just before ``__call__``, with the solver's state.
``elapsed`` is solver-only wall time: the run loop stops its clock while callbacks evaluate
the objective. A callback may set ``stop_reason`` to explain a stop.
"""
import time
import warnings

import numpy as np

from ._validation import SparseDensifyWarning  # noqa: F401  (defined low, for the objectives)


class DivergenceWarning(RuntimeWarning):
    """The objective blew up (non-finite, or far above its starting value)."""


class DegenerateFitWarning(UserWarning):
    """A fit returned a model that is probably useless: constant predictions (a single class
    for a classifier), or an objective driven by a handful of samples. The message says why
    and what to try."""


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

    def _record(self, passes, elapsed, value, coef=None):
        self.passes.append(passes)
        self.times.append(elapsed)
        self.values.append(value)

    def _evaluate(self, coef):
        """``F(coef)``, NaN at a non-finite point."""
        return float(self.objective.value(coef)) if np.all(np.isfinite(coef)) else np.nan

    def __call__(self, passes, coef, elapsed):
        self._calls += 1
        if self._calls % self.every:
            return False
        value = self._evaluate(coef)
        self._record(passes, elapsed, value, coef)
        return self._diverging(passes, value) or self._converged(value)

    def _diverging(self, passes, value):
        """Flag (and warn about) a non-finite or blown-up objective."""
        limit = self.f0 + (self.divergence_factor - 1.0) * abs(self.f0)
        if np.isfinite(value) and not value > limit:  # (a NaN start diverges nothing)
            return False
        self.diverged = True
        self.stop_reason = (
            f"diverged after {passes} passes: objective {value:.6g} "
            f"(start {self.f0:.6g}); lower the step size"
        )
        warnings.warn(self.stop_reason, DivergenceWarning, stacklevel=4)
        return True

    def _converged(self, value):
        """The stopping test (here: suboptimality at most ``tol``)."""
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


def value_grad_norm(objective, coef):
    """``(F(coef), |grad F(coef)|)`` as floats, without floating-point warnings: NaN where
    ``coef`` is not finite, and a NaN norm when the objective has no ``value_grad``."""
    if not np.all(np.isfinite(coef)):
        return np.nan, np.nan
    with np.errstate(all="ignore"):
        if hasattr(objective, "value_grad"):
            f, g = objective.value_grad(coef)
            return float(f), float(np.linalg.norm(g))
        return float(objective.value(coef)), np.nan


class ConvergenceMonitor(Trace):
    r"""A :class:`Trace` that also tests convergence without knowing ``f*``, keeps the best
    iterate and carries on across successive runs.

    After every pass it evaluates ``F`` and ``grad F`` (``objective.value_grad``; one full
    pass of oracle calls) and stops when

    * ``|grad F(w)| <= grad_tol |grad F(0)|`` (relative to the gradient at the zero model, so
      a warm start does not tighten the test), or, for a problem that is not smooth
      (``smooth=False``: the subgradient need not vanish at the minimiser),
    * the objective changed by at most ``grad_tol**2 (F(0) - F(w))`` over each of the last
      three passes (near a minimum the objective gap scales as the square of the gradient
      norm, hence the square).

    Divergence is detected as by :class:`Trace`. The same monitor can be handed to several
    ``run`` calls (a run resumed from ``result.state``, or restarted from
    :attr:`best_coef`): only the first ``on_start`` records the starting point; later runs
    append to the same trace, their passes and times counted on from where the previous run
    stopped. Set ``diverged = False`` before continuing after a divergence.

    Parameters
    ----------
    grad_tol : float or None
        Relative gradient tolerance; ``None``: no convergence test (divergence only).
    f_zero, g_zero : float, optional
        ``F(0)`` and ``|grad F(0)|``; computed at ``objective.zeros()`` when not given.
    smooth : bool, optional
        Whether ``grad F`` vanishes at the minimiser; default: the objective's ``smooth``
        attribute (False when it has none).
    f_star, tol, divergence_factor, every
        As for :class:`Trace` (``tol`` is the suboptimality tolerance, needs ``f_star``).

    Attributes
    ----------
    values, grad_norms : list of float
        ``F`` and ``|grad F|`` at the start and after every evaluated pass (NaN where not
        finite, or without ``value_grad``).
    best_value, best_coef
        The lowest finite objective seen and its point (None before any).
    converged, diverged : bool

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 3)); y = X @ [1.0, 2.0, 0.0] + rng.normal(size=100)
    >>> obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=1.0), X, y, l2_reg=0.01)
    >>> mon = ro.callbacks.ConvergenceMonitor(grad_tol=1e-3)
    >>> res = ro.solvers.Prospect(lr=0.01, random_state=0).run(obj, 200, callback=mon)
    >>> mon.converged, len(mon.values) == res.n_epochs + 1
    (True, True)
    """

    def __init__(self, grad_tol=None, *, f_zero=None, g_zero=None, smooth=None, f_star=None,
                 tol=None, divergence_factor=1.5, every=1):
        super().__init__(f_star=f_star, tol=tol, divergence_factor=divergence_factor,
                         every=every)
        self.grad_tol = grad_tol
        self.f_zero = f_zero
        self.g_zero = g_zero
        self.smooth = smooth
        self.values = None

    def _evaluate(self, coef):
        """``F(coef)``; stores ``|grad F(coef)|`` for the stopping test."""
        f, self._grad_norm = value_grad_norm(self.objective, coef)
        return f

    def on_start(self, objective, coef):
        self.objective = objective
        self._calls = 0
        if self.values is not None:  # a further run: continue the same trace
            self._offset = (self.passes[-1], self.times[-1])
            return
        if self.f_zero is None or self.g_zero is None:
            f, g = value_grad_norm(objective, objective.zeros())
            self.f_zero = f if self.f_zero is None else self.f_zero
            self.g_zero = g if self.g_zero is None else self.g_zero
        if self.smooth is None:
            self.smooth = bool(getattr(objective, "smooth", False))
        self.passes, self.times, self.values, self.grad_norms = [], [], [], []
        self.best_value, self.best_coef = np.inf, None
        self.converged = self.diverged = False
        self.stop_reason = None
        self._offset = (0, 0.0)
        self.f0 = self._evaluate(coef)
        self._record(0, 0.0, self.f0, coef)

    def _record(self, passes, elapsed, value, coef=None):
        super()._record(self._offset[0] + passes, self._offset[1] + elapsed, value)
        self.grad_norms.append(self._grad_norm)
        if np.isfinite(value) and value < self.best_value:
            self.best_value = value
            self.best_coef = np.array(coef, copy=True)

    def _converged(self, value):
        if super()._converged(value):
            self.converged = True
            return True
        if self.grad_tol is None:
            return False
        g = self.grad_norms[-1]
        if np.isfinite(g) and g <= self.grad_tol * self.g_zero:
            self.converged = True
            self.stop_reason = f"|grad F| <= {self.grad_tol:g} |grad F(0)|"
            return True
        if not self.smooth and len(self.values) >= 4:
            last = np.asarray(self.values[-4:])
            gain = max(self.f_zero - value, 0.0)
            if np.all(np.abs(np.diff(last)) <= self.grad_tol ** 2 * gain):
                self.converged = True
                self.stop_reason = "objective change below grad_tol**2 (F(0) - F)"
                return True
        return False


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

    def on_update(self, solver, objective, state, passes, elapsed):
        for c in self.callbacks:
            hook = getattr(c, "on_update", None)
            if hook is not None:
                hook(solver, objective, state, passes, elapsed)

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
