"""The estimators' solver runs: L-BFGS, Newton with its certificate, the stochastic solvers.

:class:`_SolverRuns` is a mixin of :class:`riskopt.estimators._RiskEstimatorBase`: given the
objective built by ``_fit_common`` and the solver picked by ``_solver_name`` (both in
:mod:`riskopt.estimators`, with the solver-choice documentation), it runs the solver and sets
the fitted solver attributes (``solver_``, ``solver_params_``, ``n_iter_``,
``objective_trace_``, ``lr_``, ``lr_search_``, ``dual_gap_``). Warnings keep the stack levels
of the estimators' ``fit`` (the frames: the run, ``_fit_objective``, ``_fit_common``, ``fit``,
scikit-learn's ``_fit_context`` wrapper, the caller).
"""
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from . import _fair
from . import solvers as _solvers
from .solvers.autotune import autotune

#: L-BFGS runs with single-threaded BLAS up to this many entries of the design.
_SMALL_BLAS = 1_000_000
#: The estimators' L-BFGS skips the exact tie polish unless ``tol`` is below this.
_TIE_POLISH_TOL = 1e-8
#: ... and ends its chi-square continuation (shift_cost = 0) at ``nu_min = this x tol`` (not
#: below L-BFGS's 1e-9): adult, RiskClassifier(risk="cvar:0.5"), tol 1e-4: 482 iterations and
#: F within 2e-7 of the 1e-9 run, which hit the 1000-iteration cap (the smoothing bias is at
#: most nu (1/alpha - 1) for a CVaR, and the frozen-order polish finishes the job)
_NU_MIN_PER_TOL = 1e-2
#: the Newton solver's target relative duality gap per unit of ``tol`` (1e-6 at the default
#: tol = 1e-4; 1e-8 is beyond the certificate on some cases, e.g. adult CVaR 0.5)
_NEWTON_GAP_PER_TOL = 1e-2


class _SolverRuns:
    """The solver driver of the estimators (see the module docstring)."""

    def _solver_params(self):
        params = dict(self.solver_params or {})
        for key in ("lr", "random_state", "tol", "max_iter"):
            if key in params:
                raise ValueError(
                    f"solver_params must not set {key!r}: use the estimator's "
                    f"{key} parameter")
        return params

    def _fit_objective(self, obj, risk, weighted, coef0, shape):
        """Minimise ``obj``; sets the solver attributes and returns ``(W, converged)``.
        ``shape``: that of the ``X`` given to fit (for the ``verbose`` line)."""
        if getattr(self, "_fair_problem", None) is not None:  # constraint= (riskopt._fair)
            return _fair.fit(self, obj, coef0)
        name, self.solver_reason_ = self._solver_name(risk, obj, weighted)
        self.dual_gap_ = float("nan")
        if self.verbose:
            print(f"[{type(self).__name__}] fit: risk={risk}, solver {name!r}, "
                  f"n x p = {shape[0]} x {shape[1]}", flush=True)
        prev_lr = getattr(self, "lr_", None) if getattr(self, "solver_", None) == name else None
        self.solver_ = name
        params = self._solver_params()
        # an incompatible solver: the registry's error, listing the solvers that fit (not
        # for the Newton solver that "auto" picked: _solver_name found it applicable)
        if not (name == "newton" and self.solver == "auto" and not params):
            _solvers.get(name, **params).check_objective(obj)
        if name == "newton":
            return self._fit_newton(obj, params, coef0)
        if name == "lbfgs":
            return self._fit_lbfgs(obj, params, coef0)
        return self._fit_stochastic(obj, risk, name, params, coef0, prev_lr)

    def _fit_lbfgs(self, obj, params, coef0, _depth=0, max_iter=None):
        """L-BFGS from ``coef0``, at most ``max_iter`` iterations (default: the estimator's)."""
        tol = self.tol if self.tol else 1e-15
        # The tie polish (SLSQP on an epigraph program, shift_cost = 0) makes f* exact to
        # ~1e-12 but can cost seconds on small data with duplicated rows (14 s for one fit of
        # RiskClassifier(risk="esrm:1") on scikit-learn's sample-weight check data, 30 rows,
        # against 0.03 s without it): kept only when tol < _TIE_POLISH_TOL.
        solver = _solvers.LBFGS(polish_ties=tol < _TIE_POLISH_TOL, tol=tol,
                                max_iter=self._max_iter() if max_iter is None else max_iter,
                                **{"nu_min": max(1e-9, _NU_MIN_PER_TOL * tol), **params})
        self.solver_params_ = params
        W0 = obj.zeros() if coef0 is None else coef0
        f0 = float(obj.value(W0))
        if obj.n * obj.p * obj.K <= _SMALL_BLAS:
            # tiny BLAS calls (L-BFGS-B's own, the n x p mat-vecs) gain nothing from threads
            # and lose a lot when cores are busy (0.71 s -> 0.03 s on a 200 x 4 problem)
            with threadpool_limits(limits=1, user_api="blas"):
                res = solver.run(obj, coef0=W0)
        else:
            res = solver.run(obj, coef0=W0)
        self.lr_ = None
        self.lr_search_ = None
        self.n_iter_ = max(int(res.n_epochs), 1)
        self.objective_trace_ = np.array([f0, float(res.value)])
        converged = not res.extra["hit_limit"] or self.tol is None
        why = solver.abnormal_text(res)  # a line search failed far from the optimum
        if why:  # stack: here, _fit_objective, _fit_common, fit, _fit_context, the caller
            # (one more frame when called from _fit_newton: _depth)
            warnings.warn(f"{type(self).__name__}: {why}", ConvergenceWarning,
                          stacklevel=6 + _depth)
        return obj.as_matrix(res.coef), converged

    def _fit_newton(self, obj, params, coef0):
        """Newton to a certified relative gap ``1e-2 tol``; if not reached, L-BFGS from its point
        with what is left of ``max_iter`` (``solver_reason_`` says so; n_iter_ counts both)."""
        tol = max(_NEWTON_GAP_PER_TOL * self.tol, 1e-12) if self.tol else 1e-12
        # each continuation stage is solved to a gradient test 100x below the accepted gap (its
        # weights then give a tight bound); the run ends after the first stage certified
        # within ``tol`` (Newton's ``accept``)
        solver = _solvers.Newton(**{"tol": max(1e-2 * tol, 1e-12), "max_iter": self._max_iter(),
                                    "accept": tol, **params})
        W0 = obj.zeros() if coef0 is None else coef0
        res = solver.run(obj, coef0=W0)
        f0 = float(res.extra["value0"])
        self.solver_params_ = params
        self.lr_, self.lr_search_ = None, None
        self.dual_gap_ = float(res.extra["gap"])
        steps = int(res.n_epochs)
        left = self._max_iter() - steps
        if not res.extra["rel_gap"] <= tol and left >= 1:
            self.solver_ = "lbfgs"
            self.solver_reason_ = (f"Newton stopped at a relative gap {res.extra['rel_gap']:.3g}"
                                   f" > {tol:g} ({res.message}): L-BFGS from its point")
            W, converged = self._fit_lbfgs(obj, {}, obj.as_coef(res.coef), 1, left)
            self.n_iter_ += steps  # max_iter caps both together
            self.objective_trace_[0] = f0
            # Newton's bound on the optimum still holds: the gap of the final point
            bound = float(res.extra["bound"])
            self.dual_gap_ = max(float(self.objective_trace_[-1]) - bound, 0.0) \
                if np.isfinite(bound) else float("nan")
            return W, converged
        self.n_iter_ = max(steps, 1)
        self.objective_trace_ = np.array([f0, float(res.value)])
        if not res.extra["rel_gap"] <= tol:  # max_iter spent by Newton: its point, uncertified
            self.solver_reason_ += (f" (max_iter = {self._max_iter()} reached at a relative "
                                    f"gap {res.extra['rel_gap']:.3g} > {tol:g})")
            return obj.as_matrix(res.coef), False
        # (for warn_if_degenerate: no oracle call, no product with X)
        obj._solution_weights, obj._solution_z = res.extra["weights"], res.extra["z"]
        return obj.as_matrix(res.coef), True

    def _fit_stochastic(self, obj, risk, name, params, coef0, prev_lr):
        res = autotune(name, obj, params=params, lr=self.lr,
                       base_lr=getattr(risk, "auto_lr", None), max_epochs=self._max_iter(),
                       tol=self.tol, random_state=self.random_state, coef0=coef0,
                       prev_lr=prev_lr)
        self.solver_params_ = res.solver_params
        self.lr_, self.lr_search_ = res.lr, res.lr_search
        self.n_iter_ = max(res.n_updates, 1)
        self.objective_trace_ = res.values
        return obj.as_matrix(res.coef), res.converged
