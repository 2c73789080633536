"""Exact full-batch solver with a certificate: Newton on chi-square-smoothed spectral risks.

:func:`riskopt.objectives._newton.newton` (the module docstring there states the method): Newton
steps with the generalised Hessian of the smoothed risk (the oracle's Jacobian included), the
shift cost ``nu`` driven down by factors of 10 with warm starts, stopped by a **duality gap**:
for any weights ``q`` in the spectrum's permutahedron, ``min_w sum_i q_i l_i(w) + mu/2 |w|^2``
bounds ``F*`` from below, and strong convexity (``l2_reg = mu > 0``) turns the gradient at the
current point into a computable lower bound. ``Result.extra`` holds ``gap`` (``F(w) - bound``),
``rel_gap`` and ``bound``: a proof of accuracy that needs no reference optimum.

Scope: the spectral family with one output (squared or logistic loss), ``l2_reg > 0``, uniform
sample weights and at most ``riskopt.objectives._newton.MAX_FEATURES`` columns (one ``p x p``
Gram matrix per step); dense, CSR and the estimators' operator designs.
"""
import numpy as np

from .._validation import check_int, check_positive
from ..callbacks import perf_counter
from ._registry import register
from .base import Result, Solver


@register
class Newton(Solver):
    """Exact Newton solver with a duality-gap certificate (spectral family).

    Parameters
    ----------
    tol : float, default 1e-10
        Target relative duality gap ``(F(w) - bound) / |F(w)|``.
    max_iter : int, default 200
        Newton steps over all the continuation stages.
    accept : float, optional
        A relative gap (``>= tol``) good enough to stop after the continuation stage that
        reaches it (each stage is solved to ``tol``'s gradient test; ``certified`` is then
        False and ``rel_gap <= accept``). The estimators pass their accepted gap here
        (``1e-2`` times their own ``tol``) and a ``tol`` 100x below it.

    Notes
    -----
    ``Result.extra``: ``gap``, ``rel_gap``, ``bound``, ``certified`` (``rel_gap <= tol``),
    ``dual_nu`` (the shift cost whose weights gave the bound), ``hit_limit``, ``value0``
    (``F`` at the start) and ``weights`` (the oracle's ``q`` at the solution). An uncertified
    stop (``max_iter`` or no descent) is reported in ``Result.message`` with the gap reached.
    """

    name = "newton"
    families = ("spectral",)
    convergent = True
    supports_sample_weight = False
    accepts_sparse = True
    deterministic = True

    def __init__(self, tol=1e-10, max_iter=200, accept=None):
        self._store(locals())

    def _check_params(self, objective):
        check_positive("tol", self.tol)
        check_int("max_iter", self.max_iter)
        if self.accept is not None:
            check_positive("accept", self.accept)
            if self.accept < self.tol:
                raise ValueError(f"accept = {self.accept!r} must be at least tol = {self.tol!r}")

    def _check_objective(self, objective):
        from ..objectives._newton import applicable

        why = applicable(objective)
        if why:
            raise ValueError(f"solver 'newton' needs a one-output smooth loss with l2_reg > 0: "
                             f"{why}")

    def run(self, objective, max_epochs=None, callback=None, coef0=None, state=None,
            timeout=None):
        """Minimise ``objective`` from ``coef0`` (or ``state.coef``); ``max_epochs`` caps the
        Newton steps; no ``timeout`` (bound the work with ``max_epochs``)."""
        from ..objectives._newton import newton

        from .lbfgs import LBFGS, _LBFGSState

        max_iter, W0, cb, trace = LBFGS._full_batch_start(self, objective, max_epochs, callback,
                                                          coef0, state, timeout)
        t0 = perf_counter()
        # from w = 0 (the estimators' start) with the squared loss: ridge regression first
        # (objectives/_newton.py, ``mean_start``; for the logistic loss one IRLS step lowered
        # F on the 5,000 x 20 synthetic fit, 7 -> 6 steps, but not on compas, 16 -> 17)
        ridge = not np.any(W0) and getattr(objective.loss, "name", "") == "squared"
        out = newton(objective, W0, rtol=self.tol, max_iter=max_iter, accept=self.accept,
                     mean_start=ridge)
        elapsed = perf_counter() - t0
        coef = objective.as_coef(out["coef"])
        message = out["message"]
        diverged = False
        if cb is not None and cb(float(max(out["n_iter"], 1)), coef, elapsed):
            message = cb.stop_reason or message
            diverged = bool(getattr(trace, "diverged", False))
        st = _LBFGSState(coef=objective.as_matrix(coef), epoch=int(out["n_iter"]), rng=None)
        return Result(coef=coef, value=float(out["value"]), n_epochs=int(out["n_iter"]),
                      time=elapsed, state=st, trace=trace, diverged=diverged, message=message,
                      extra={"gap": out["gap"], "rel_gap": out["rel_gap"],
                             "bound": out["bound"], "certified": out["converged"],
                             "dual_nu": out["dual_nu"], "abnormal": False,
                             "value0": out["value0"], "weights": out["weights"],
                             "z": out["z"],
                             "hit_limit": (not out["converged"]
                                           and out["n_iter"] >= max_iter)})

    def update(self, objective, state, indices=None):
        raise NotImplementedError("Newton is a full-batch method: call run()")
