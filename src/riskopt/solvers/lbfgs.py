"""Full-batch L-BFGS: the reference solver (the ``f*`` of every suboptimality plot), a
:class:`~riskopt.solvers.base.Solver` like the others.

It calls the objective's :meth:`reference_solution` with ``method="lbfgs"``: for the spectral
family :class:`riskopt.objectives._lbfgs.ReferenceLBFGS` (smooth L-BFGS for ``nu > 0``;
continuation in ``nu`` and exact polishes for ``nu = 0``), for RU-CVaR the same on its CVaR
form. Being deterministic and full-batch, it has no per-pass ``update``: :meth:`LBFGS.run`
calls the callbacks once at the start and once at the end (``passes`` = L-BFGS iterations, an
approximation: each iteration evaluates the full objective and gradient at least once).
"""
from .._validation import check_int, check_positive
from ..callbacks import as_callback, perf_counter
from ._registry import register
from .base import Result, Solver, _find_trace


@register
class LBFGS(Solver):
    """Deterministic reference solver.

    Parameters
    ----------
    tol : float, default 1e-12
        Gradient-norm tolerance (``gtol``) relative to ``max(1, |grad F(w0)|)``.
    max_iter : int, default 20000
        Iteration limit of each inner L-BFGS-B solve (``run(max_epochs=...)`` lowers it).
    nu_min : float, default 1e-9
        Smallest shift cost of the continuation used when ``nu = 0``.
    polish_ties : bool, default True
        For ``nu = 0``: solve exactly (SLSQP on an epigraph form) the local problem where losses
        tie across a jump of the spectrum at the optimum (typical at the CVaR boundary).

    Notes
    -----
    Limitations (``nu = 0``): for the non-smooth absolute loss there is no polish step and the
    reference can stop ~1e-5 (relative) above the optimum; with non-uniform, non-integer
    sample weights there is no smoothing either, and L-BFGS runs on the non-smooth objective
    (a warning says so). ``Result.extra["hit_limit"]`` is True when an inner solve stopped at
    its iteration limit. ``Result.extra["abnormal"]`` is True when L-BFGS-B stopped without
    progress (failed line search, no decrease of ``F``) at a point its gradient does not
    certify, ``|grad F| > max(tol, 1e-5) max(1, |grad F(w0)|)`` (e.g. badly scaled features:
    the start is returned); ``Result.message`` then says so, and ``extra`` holds scipy's
    ``abnormal_message``, the ``rel_grad_norm`` and the ``certificate_tol`` (see
    :mod:`riskopt.objectives._lbfgs`). Stops without progress at machine precision near the
    optimum, routine at ``tol = 1e-12`` and in the ``nu = 0`` continuation, are not reported.
    """

    name = "lbfgs"
    families = ("spectral", "ru_cvar", "kl_dro", "group_risk", "constrained")
    convergent = True
    supports_sample_weight = True
    accepts_sparse = True
    deterministic = True

    def __init__(self, tol=1e-12, max_iter=20000, nu_min=1e-9, polish_ties=True):
        self._store(locals())

    def _check_params(self, objective):
        check_positive("tol", self.tol)
        check_int("max_iter", self.max_iter)
        check_positive("nu_min", self.nu_min)

    def run(self, objective, max_epochs=None, callback=None, coef0=None, state=None,
            timeout=None):
        """Minimise ``objective`` from ``coef0`` (or ``state.coef``); see the class docstring.

        ``timeout`` is not supported (L-BFGS-B cannot be interrupted): pass ``max_epochs``.
        """
        max_iter, W0, cb, trace = self._full_batch_start(objective, max_epochs, callback, coef0,
                                                         state, timeout)
        t0 = perf_counter()
        ref = objective.reference_solution("lbfgs", coef0=objective.as_coef(W0), tol=self.tol,
                                           max_iter=max_iter, nu_min=self.nu_min,
                                           polish_ties=self.polish_ties)
        elapsed = perf_counter() - t0
        message = ref.message
        diverged = False
        if cb is not None and cb(float(max(ref.n_iter, 1)), ref.coef, elapsed):
            message = cb.stop_reason or message
            diverged = bool(getattr(trace, "diverged", False))
        state = _LBFGSState(coef=objective.as_matrix(ref.coef), epoch=int(ref.n_iter), rng=None)
        return Result(coef=ref.coef, value=float(ref.value), n_epochs=int(ref.n_iter),
                      time=elapsed, state=state, trace=trace, diverged=diverged,
                      message=message,
                      extra={"hit_limit": bool(ref.hit_limit), "aux": ref.aux,
                             **ref.extra, "abnormal": bool(ref.extra.get("abnormal", False))})

    def _full_batch_start(self, objective, max_epochs, callback, coef0, state, timeout):
        """The common start of a full-batch ``run`` (this class and
        :class:`riskopt.solvers.Newton`): checks, the iteration cap ``min(max_iter,
        max_epochs)``, the start ``W0`` (``coef0`` or ``state.coef``), the callback (started)
        and its trace. Returns ``(max_iter, W0, callback, trace)``."""
        self._check_params(objective)
        self.check_objective(objective)
        if timeout is not None:
            raise ValueError(f"{type(self).__name__} has no timeout; bound its work with "
                             "max_epochs")
        max_iter = self.max_iter
        if max_epochs is not None:
            max_iter = min(max_iter, check_int("max_epochs", max_epochs, minimum=1))
        if state is not None:
            coef0 = state.coef
        W0 = objective.as_matrix(objective.zeros() if coef0 is None else coef0)
        cb = as_callback(callback)
        trace = _find_trace(callback)
        if cb is not None:
            cb.on_start(objective, objective.as_coef(W0))
        return max_iter, W0, cb, trace

    def update(self, objective, state, indices=None):
        raise NotImplementedError("LBFGS is a full-batch method: call run()")

    @staticmethod
    def abnormal_text(result):
        """The cause and the fix of an uncertified stop of ``result`` (``extra["abnormal"]``,
        see the class docstring), for a ConvergenceWarning; ``None`` when there is none."""
        extra = result.extra
        if not extra.get("abnormal"):
            return None
        return (f"L-BFGS stopped without progress: its line search found no decrease (scipy: "
                f"{extra.get('abnormal_message', '')!r}) at a relative gradient norm "
                f"{extra.get('rel_grad_norm', float('nan')):.3g}, above the certificate "
                f"{extra.get('certificate_tol', float('nan')):.3g} = max(tol, 1e-5), so the "
                f"model may be far from optimal (e.g. the starting point, zero coefficients). "
                f"Rescale the features or the target (badly scaled columns are the usual "
                f"cause), raise tol, or pass another solver (e.g. solver='sorel' for "
                f"shift_cost=0, 'prospect' or 'lsvrg' for shift_cost > 0).")


class _LBFGSState:
    __slots__ = ("coef", "epoch", "rng")

    def __init__(self, coef, epoch, rng):
        self.coef, self.epoch, self.rng = coef, epoch, rng

    def __getstate__(self):
        return (self.coef, self.epoch, self.rng)

    def __setstate__(self, s):
        self.coef, self.epoch, self.rng = s
