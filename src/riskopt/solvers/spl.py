r"""SGM, SPL and SPL+ for CVaR in the Rockafellar-Uryasev form.

Meng & Gower, "A model-based method for minimizing CVaR and beyond". The objective is
:class:`riskopt.objectives.ru_cvar.RUCVaRObjective`,
``F(w, alpha) = alpha + B mean_i max(l_i(w) - alpha, 0) + mu/2 |w|^2`` with ``B = 1/(1-beta)``.
Each step samples one ``i`` and, with ``ell = l_i(w_t)``, ``v = grad l_i(w_t)`` and the step scale
``c_t = 1/sqrt(t+1)`` (``schedule="decreasing"``, the paper's choice) or ``1`` (``"constant"``):

=========  ======================================================================================
SGM        Algorithm 1: if ``alpha_t >= ell``: ``alpha -= lr_t`` else ``w -= lr_t B v``,
           ``alpha += lr_t beta B``; ``lr_t = lr c_t`` (the l2 term adds ``-lr_t mu w``).
SPL        prox-linear step (11) on the truncated model (12), one step size for ``w`` and
           ``alpha``: the closed form of Lemma 1 with ``lr_theta = lr_alpha = lr c_t``.
SPL+       Algorithm 2 / Lemma 1 with separate step sizes (16):
           ``lr_alpha = lr l0 c_t`` and ``lr_theta = lr c_t / l0``, where
           ``l0 = E_z[l(w_0; z)]`` is the mean loss at the initial point over the objective's
           samples (the training set; the evaluation sample for a streaming objective), without
           the l2 term. ``loss_scale`` overrides it.
=========  ======================================================================================

Lemma 1: ``eta = min(B, max(ell - alpha_t + lr_alpha, 0) / (lr_theta |v|^2 + lr_alpha))``,
``w_{t+1} = w_t - lr_theta eta v``, ``alpha_{t+1} = alpha_t - lr_alpha + lr_alpha eta``. The l2
term, when present, is kept exactly in the model (the subproblem is still solved in closed form:
see :func:`riskopt._kernels.spl._prox_linear_step`); with ``l2_reg = 0`` this is Lemma 1 as printed.

Averaging: the reported point is the uniform average of all iterates produced by the steps,
``x_bar = 1/T sum_{t=1}^{T} x_t`` (the return value of Algorithms 1-2; the initial point is not
included), continued across passes and warm starts. ``Result.coef`` is the averaged ``w``;
``Result.value`` is ``F(w_bar, alpha_bar)``; ``Result.extra`` holds ``alpha`` (``alpha_bar``),
``coef_last``/``alpha_last`` (the last iterate), ``value_last``, ``steps`` and ``loss_scale``.
The callbacks (e.g. :class:`riskopt.Trace`) receive ``w_bar`` and evaluate the profile
``min_alpha F(w_bar, alpha)`` (``objective.value(w)``), which is ``<= F(w_bar, alpha_bar)``.

Initial point: ``coef0`` (default zeros) and ``alpha0`` (default ``VaR_beta(coef0)``, the
minimising ``alpha`` for ``coef0``). With a far-off ``alpha0`` and small steps the methods spend
many steps only moving ``alpha``, which moves by at most ``lr_alpha,t beta/(1-beta)`` up or
``lr_alpha,t`` down per step.

Losses: squared, absolute (non-smooth) and logistic as in the paper, and multinomial (``v`` is
then the ``(p, K)`` matrix ``outer(x_i, dl/dz)``).

A finite-sum pass (``update``) is ``n`` single-sample steps on indices drawn uniformly with
replacement, in one kernel call. ``run_stream`` draws fresh samples from a sampler in chunks and
feeds each chunk to the same kernel.

Examples
--------
>>> import numpy as np
>>> from riskopt.objectives.ru_cvar import RUCVaRObjective
>>> from riskopt.solvers.spl import SPLPlus
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(200, 3)); y = X @ np.ones(3) + rng.normal(size=200)
>>> obj = RUCVaRObjective("squared", X, y, beta=0.9)
>>> res = SPLPlus(lr=1.0, random_state=0).run(obj, max_epochs=20)
>>> bool(res.value < obj.value(np.zeros(3)))  # F(w_bar, alpha_bar) < min_alpha F(0, alpha)
True
"""
from typing import NamedTuple

import numpy as np

from .._kernels import spl as _ks
from .._validation import check_positive
from ..objectives.ru_cvar import _check_alpha
from ._registry import register
from .base import Result, Solver, _safe_value

_SCHEDULES = ("decreasing", "constant")


class RUState(NamedTuple):
    """Explicit state of SGM / SPL / SPL+.

    ``coef``/``alpha``: last iterate; ``coef_avg``/``alpha_avg``: uniform average of the ``t``
    iterates produced so far; ``t``: steps taken (drives ``1/sqrt(t+1)``); ``epoch``: kernel calls
    (passes, or chunks in streaming mode); ``loss_scale``: ``l0``.
    """

    coef: np.ndarray
    alpha: float
    coef_avg: np.ndarray
    alpha_avg: float
    t: int
    epoch: int
    rng: np.random.Generator
    loss_scale: float


class _RUSolver(Solver):
    """Common machinery of the RU-CVaR solvers: state with averaged iterates, streaming."""

    families = ("ru_cvar",)
    convergent = True
    streaming = True

    def __init__(self, lr=1.0, schedule="decreasing", random_state=None):
        self._store(locals())

    # -- hooks ---------------------------------------------------------------
    def _check_params(self, objective):
        check_positive("lr", self.lr)
        if self.schedule not in _SCHEDULES:
            raise ValueError(f"schedule must be one of {_SCHEDULES}, got {self.schedule!r}")

    def _loss_scale(self, objective, W):
        """``l0``: the mean loss at the initial point (``loss_scale`` when given)."""
        given = getattr(self, "loss_scale", None)
        if given is not None:
            return check_positive("loss_scale", given)
        l0 = float(np.mean(objective.losses(W)))
        return l0

    def _kernel(self, objective, X, y, state, indices, W, W_avg):
        """Run the pass kernel on ``(X, y)[indices]``, updating ``W``, ``W_avg`` in place."""
        raise NotImplementedError

    def _init(self, objective, W, rng, alpha0=None):
        """Initial state at ``(coef0, alpha0)``.

        ``coef0`` defaults to zeros; ``alpha0`` to ``objective.value_at_risk(coef0)``, the
        beta-quantile of the initial losses, i.e. the best ``alpha`` for ``coef0`` (the paper's
        experiments draw ``alpha0 ~ U(0, 1)``; pass it explicitly to reproduce them).
        """
        alpha0 = objective.value_at_risk(W) if alpha0 is None else _check_alpha(alpha0)
        l0 = self._loss_scale(objective, W)
        return RUState(coef=W, alpha=alpha0, coef_avg=W.copy(), alpha_avg=alpha0, t=0, epoch=0,
                       rng=rng, loss_scale=l0)

    def _pass_data(self, objective, state, X, y, indices):
        W = state.coef.copy()
        W_avg = state.coef_avg.copy()
        alpha, alpha_avg, t = self._kernel(objective, X, y, state, indices, W, W_avg)
        return state._replace(coef=W, alpha=float(alpha), coef_avg=W_avg,
                              alpha_avg=float(alpha_avg), t=int(t), epoch=state.epoch + 1)

    def _pass(self, objective, state, indices):
        if indices.size and (indices.min() < 0 or indices.max() >= objective.n):
            raise ValueError(f"indices must lie in [0, {objective.n})")
        return self._pass_data(objective, state, objective.X, objective.y, indices)

    # -- the run loop's view -------------------------------------------------
    def _iterate(self, state):
        return state.coef_avg

    def point(self, objective, state):
        """The averaged iterate ``(w_bar, (alpha_bar,))``."""
        return state.coef_avg, (float(state.alpha_avg),)

    def _finite(self, state):
        return bool(np.all(np.isfinite(state.coef_avg)) and np.isfinite(state.alpha_avg)
                    and np.all(np.isfinite(state.coef)) and np.isfinite(state.alpha))

    def _result(self, objective, state, elapsed, trace, diverged, message, passes):
        coef = objective.as_coef(state.coef_avg)
        value = _safe_value(objective, coef, state.alpha_avg)
        value_last = _safe_value(objective, state.coef, state.alpha)
        extra = {"passes": passes, "alpha": float(state.alpha_avg),
                 "coef_last": objective.as_coef(state.coef), "alpha_last": float(state.alpha),
                 "value_last": value_last, "steps": int(state.t),
                 "loss_scale": float(state.loss_scale)}
        return Result(coef=coef, value=value, n_epochs=int(state.epoch), time=elapsed,
                      state=state, trace=trace, diverged=diverged, message=message, extra=extra)


@register
class SGM(_RUSolver):
    r"""Stochastic subgradient method for RU-CVaR (Meng & Gower, Algorithm 1, eqs. (6)-(9)).

    Parameters
    ----------
    lr : float, default 0.1
        ``lambda``; step ``lambda_t = lr / sqrt(t+1)`` (or ``lr`` with ``schedule="constant"``).
        The paper gives no default for SGM; 0.1 was the best or near-best value on the small
        problems of the test suite. SGM is sensitive to it (it diverges for large ``lr``): tune.
    schedule : {"decreasing", "constant"}, default "decreasing"
    random_state : int or None

    Notes
    -----
    ``alpha_t >= l`` (u = 0): ``w`` unchanged, ``alpha -= lambda_t``; otherwise
    ``w -= lambda_t/(1-beta) v`` and ``alpha += lambda_t beta/(1-beta)``. With ``l2_reg`` the
    subgradient ``l2_reg w`` is added in both branches. Reported point: the uniform average of
    the iterates (module docstring).

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> rng = np.random.default_rng(0); X, y = rng.normal(size=(100, 2)), rng.normal(size=100)
    >>> ro.solvers.SGM(lr=0.1).run(ro.RUCVaRObjective("absolute", X, y, 0.8), 5).coef.shape
    (2,)
    """

    name = "sgm"

    def __init__(self, lr=0.1, schedule="decreasing", random_state=None):
        self._store(locals())

    def _kernel(self, objective, X, y, state, indices, W, W_avg):
        lr = float(self.lr)
        return _ks._epoch(objective.loss.code, X, y, objective.reg, objective.inv_tail, lr, lr,
                          self.schedule == "decreasing", False, indices, W, W_avg,
                          float(state.alpha), float(state.alpha_avg), int(state.t))


@register
class SPL(_RUSolver):
    r"""Stochastic prox-linear method for RU-CVaR, one step size (Meng & Gower, Sections 4.1, 6).

    The update minimises the truncated model (12) plus ``1/(2 lambda_t) |x - x_t|^2`` for
    ``x = (w, alpha)``: Lemma 1 with ``lambda_theta = lambda_alpha = lambda_t``.

    Parameters
    ----------
    lr : float, default 0.1
        ``lambda``; ``lambda_t = lr / sqrt(t+1)`` (or ``lr`` with ``schedule="constant"``).
        No default in the paper; 0.1 as for :class:`SGM`. The step is not scale-free (the units
        of ``w`` and ``alpha`` clash, Section 4.2): :class:`SPLPlus` fixes that.
    schedule : {"decreasing", "constant"}, default "decreasing"
    random_state : int or None

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> rng = np.random.default_rng(0); X, y = rng.normal(size=(100, 2)), rng.integers(0, 2, 100)
    >>> bool(np.isfinite(ro.solvers.SPL(lr=1.0).run(ro.RUCVaRObjective("logistic", X, y, 0.9)).value))
    True
    """

    name = "spl"

    def __init__(self, lr=0.1, schedule="decreasing", random_state=None):
        self._store(locals())

    def _steps(self, state):
        """``(lr_theta, lr_alpha)`` before the schedule factor ``c_t``."""
        return float(self.lr), float(self.lr)

    def _kernel(self, objective, X, y, state, indices, W, W_avg):
        lr_theta, lr_alpha = self._steps(state)
        return _ks._epoch(objective.loss.code, X, y, objective.reg, objective.inv_tail,
                          lr_theta, lr_alpha, self.schedule == "decreasing", True, indices, W,
                          W_avg, float(state.alpha), float(state.alpha_avg), int(state.t))


@register
class SPLPlus(SPL):
    r"""SPL+: stochastic prox-linear with separate, unit-consistent step sizes (Algorithm 2).

    ``lambda_{alpha,t} = lr l0 / sqrt(t+1)`` and ``lambda_{theta,t} = lr / (l0 sqrt(t+1))``
    (eq. (16) with the ``t+1`` of Section 6; ``schedule="constant"`` drops the ``sqrt``), where
    ``l0 = E_z[l(w_0; z)]`` is the mean loss at the initial point (Section 4.2), computed over the
    objective's samples without the l2 term, once, at :meth:`init_state`; it is kept in the state
    so warm starts reuse it. Closed-form update: Lemma 1.

    Parameters
    ----------
    lr : float, default 1.0
        ``lambda`` (the paper's recommended default is 1).
    schedule : {"decreasing", "constant"}, default "decreasing"
    loss_scale : float or None, default None
        Use this ``l0`` instead of the initial mean loss (e.g. when that is 0).
    random_state : int or None

    Notes
    -----
    Also usable as an adaptive ERM method on :func:`riskopt.objectives.ru_cvar.erm_objective` (Section 4.5)
    and as a max-loss solver on :func:`riskopt.objectives.ru_cvar.max_loss_objective` (Section 4.4).

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> rng = np.random.default_rng(0); X = rng.normal(size=(100, 2)); y = X @ [1.0, -2.0]
    >>> res = ro.solvers.SPLPlus().run(ro.RUCVaRObjective("squared", X, y, 0.95), max_epochs=10)
    >>> round(res.extra["loss_scale"], 3) == round(float(np.mean(0.5 * y**2)), 3)
    True
    """

    name = "splplus"

    def __init__(self, lr=1.0, schedule="decreasing", loss_scale=None, random_state=None):
        self._store(locals())

    def _loss_scale(self, objective, W):
        l0 = super()._loss_scale(objective, W)
        if not (np.isfinite(l0) and l0 > 0):
            raise ValueError(
                f"SPL+ scales its steps by the initial mean loss l0, which is {l0:g} at this "
                f"starting point; pass loss_scale > 0"
            )
        return l0

    def _steps(self, state):
        return float(self.lr) / state.loss_scale, float(self.lr) * state.loss_scale
