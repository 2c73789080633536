r"""SCDRO, ASCDRO, RSCDRO, RASCDRO and RECOVER: dual-free stochastic methods for
KL-constrained (and KL-penalised) DRO, the ``"kl_dro"`` family.

Qi, Lyu, Chan, Yang et al., "Stochastic constrained DRO with a complexity independent of
sample size" (``../shared/papers/scdro_kl_constrained_dro.txt``): the KL-constrained problem is
written as the two-level compositional problem over ``x = (w, lambda)``

.. math::

    \min_{w,\ \lambda \in [\lambda_0, \lambda_0 + C/\rho]}
    \lambda \log \mathbb E_i\, e^{\ell_i(w)/\lambda} + (\lambda - \lambda_0)\rho
    + \frac{\mu_{reg}}{2}\|w\|^2

(:class:`riskopt.objectives.KLDROObjective`; the box on ``lambda`` is Lemma 1), whose
per-iteration cost does not depend on ``n``: the inner expectation is tracked by a moving
average ``s`` instead of a dual vector of size ``n``.

=============  ================================================================================
``scdro``      Algorithm 1: moving averages ``s, v, u`` (rate ``beta``), projected step (``lr``)
``rscdro``     Algorithm 3 on SCDRO: stages of doubling length with ``lr`` and ``beta`` halved
               (Lemma 4: ``eta_k, beta_k ~ eps_k``, ``T_k ~ 1/eps_k``, ``eps_k`` halving)
``ascdro``     Algorithm 2: STORM estimators, ``eta_t = lr / (1 + t/t0)^(1/3)``,
               ``beta_t = beta (eta_t / lr)^2`` (Theorem 2's ``eta_t ~ t^(-1/3)``,
               ``beta_t = c eta_t^2``), two gradient evaluations per step
``rascdro``    Algorithm 3 on ASCDRO: stages with ``lr`` times ``2^(-1/2)`` and ``beta`` halved
               (Lemma 5: ``eta_k ~ sqrt(eps_k)``, ``beta_k ~ eps_k``)
``recover``    RECOVER (Qi et al. 2021) for the KL-*penalised* objective (``radius=None``):
               the STORM estimators with ``lambda`` fixed at ``lambda_0``
=============  ================================================================================

The restarted variants accept ``mu`` (the ``mu |x|^2 / 2`` of Algorithm 3, default 0: with
``l2_reg > 0`` the objective is already strongly convex; a positive ``mu`` biases the solution
by ``O(mu)``). The paper's stage constants depend on unknown smoothness and variance bounds;
here the first stage lasts ``stage_passes`` passes and each stage doubles it. They report
(``Result.coef``, callbacks) the average of the current stage's end-of-pass iterates, the
deterministic form of Algorithm 1's output ``x_tau``, ``tau`` uniform over the stage
(``_KLBase._average``); the iterates and the restarts are unchanged. ``radius`` (the
ball ``|w| <= radius_w``, Assumption 1(a)) is optional (``None``: unconstrained).

One :meth:`update` is one pass of ``n // batch_size`` mini-batch steps in one kernel call;
the kernels and the log-domain details are in :mod:`riskopt._kernels.scdro`. The state holds
``coef``, ``lam`` (reported by :meth:`Solver.point`), the estimators and the schedule counters.

Examples
--------
>>> import numpy as np, riskopt as ro
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(2000, 3)); y = (X[:, 0] + rng.normal(size=2000) > 0).astype(float)
>>> obj = ro.Objective("logistic", ro.KLDRO(radius=0.2), X, y, l2_reg=0.01)
>>> f_star = obj.reference_solution().value
>>> res = ro.solvers.get("rascdro", lr=0.1, beta=0.5, random_state=0).run(obj, 30)
>>> bool((res.value - f_star) / f_star < 1e-3)    # 30 updates = 60 passes (2 per step)
True
"""
import warnings
from typing import NamedTuple

import numpy as np

from .._kernels import scdro as _k
from .._validation import check_int, check_positive
from ._registry import register
from .base import Solver, copy_arrays


#: ``_KLBase._failed``: a multiplier on ``lambda_0`` whose objective ``F(w, lambda_0)``
#: exceeds ``F(w)`` by more than this times ``F(w) - lower bound`` is a collapse
COLLAPSE_GAP = 1.0


class SCDROState(NamedTuple):
    """``coef`` (p, K), ``epoch``, ``rng``, ``lam``; moving averages: ``log_s`` (log of the
    estimate of ``g``), ``v`` (p, K), ``u``; ``started`` (0 before the first step); schedule
    ``counters`` ``[t, stage, steps into the stage]``; ``bounds`` ``(lo, hi)`` of ``lam``;
    the restarted variants' average ``avg`` of the ``avg_n`` iterates (one per pass) of the
    stage ``avg_stage`` (see ``_KLBase._average``)."""

    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    lam: float
    log_s: float
    v: np.ndarray
    u: float
    started: int
    counters: np.ndarray
    bounds: tuple
    avg: object = None
    avg_n: int = 0
    avg_stage: int = -1


class STORMState(NamedTuple):
    """As :class:`SCDROState`, with the previous iterate ``coef_prev``, ``lam_prev`` and the
    estimators ``s``, ``v``, ``u`` scaled by ``exp(-log_scale)``."""

    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    lam: float
    coef_prev: np.ndarray
    lam_prev: float
    s: float
    v: np.ndarray
    u: float
    log_scale: float
    started: int
    counters: np.ndarray
    bounds: tuple
    avg: object = None
    avg_n: int = 0
    avg_stage: int = -1


class _KLBase(Solver):
    families = ("kl_dro",)
    _mode = 0
    _eta_pow = 1.0
    _storm = False
    _penalised_only = False

    def __init__(self, lr=0.1, beta=0.1, batch_size=64, radius_w=None, lam0=None,
                 random_state=None):
        self._store(locals())

    # -- parameters -------------------------------------------------------------------
    def _check_params(self, objective):
        check_positive("lr", self.lr)
        b = check_positive("beta", self.beta)
        if b > 1:
            raise ValueError(f"beta must be in (0, 1], got {b}")
        check_int("batch_size", self.batch_size, minimum=1)
        if self.radius_w is not None:
            check_positive("radius_w", self.radius_w)
        if getattr(self, "stage_passes", None) is not None:
            check_positive("stage_passes", self.stage_passes)
        if getattr(self, "mu", 0.0):
            check_positive("mu", self.mu, allow_zero=True)
        if getattr(self, "t0_passes", None) is not None:
            check_positive("t0_passes", self.t0_passes)

    def _check_objective(self, objective):
        if self._penalised_only and getattr(objective, "radius", None) is not None:
            raise ValueError(f"{self.name} solves the KL-penalised objective (radius=None); "
                             "use scdro / ascdro / rscdro / rascdro for the constrained one")

    def _b(self, objective):
        return min(int(self.batch_size), objective.n)

    def draw_indices(self, objective, state):
        b = self._b(objective)
        nb = max(1, objective.n // b)
        return state.rng.integers(0, objective.n, size=(nb, b))

    def passes_per_update(self, objective):
        b = self._b(objective)
        steps = max(1, objective.n // b) * b / objective.n
        return 2.0 * steps if self._storm else steps

    def _sched(self, objective):
        b = self._b(objective)
        steps_per_pass = max(1, objective.n // b)
        stage_len = float(getattr(self, "stage_passes", 1.0) or 1.0) * steps_per_pass
        t0 = float(getattr(self, "t0_passes", 1.0) or 1.0) * steps_per_pass
        return float(getattr(self, "mu", 0.0) or 0.0), stage_len, t0

    # -- state ----------------------------------------------------------------------------
    def _init(self, objective, W, rng, lam0=None):
        lo, hi = objective.lam_bounds()
        start = lam0 if lam0 is not None else self.lam0
        if start is None:
            start = lo if hi == lo else min(max(1.0, lo), hi)
        start = float(np.clip(float(start), lo, hi))
        if self.radius_w is not None:
            _k._project(W, float(self.radius_w))
        counters = np.zeros(3)
        if self._storm:
            return STORMState(coef=W, epoch=0, rng=rng, lam=start, coef_prev=W.copy(),
                              lam_prev=start, s=0.0, v=np.zeros_like(W), u=0.0,
                              log_scale=-np.inf, started=0, counters=counters,
                              bounds=(lo, hi))
        return SCDROState(coef=W, epoch=0, rng=rng, lam=start, log_s=0.0,
                          v=np.zeros_like(W), u=0.0, started=0, counters=counters,
                          bounds=(lo, hi))

    def _common(self, objective, state):
        lo, hi = state.bounds
        rho = 0.0 if objective.radius is None else float(objective.radius)
        mu, stage_len, t0 = self._sched(objective)
        R = 0.0 if self.radius_w is None else float(self.radius_w)
        return (objective.loss.code, objective.X, objective.y, objective.reg, rho, float(lo),
                float(hi), R, mu, self._mode, float(self.lr), float(self.beta),
                float(self._eta_pow), t0, stage_len)

    def _pass(self, objective, state, indices):
        indices = np.ascontiguousarray(np.atleast_2d(indices), dtype=np.int64)
        a = copy_arrays(state, "coef", "v", "counters")
        lam = np.array([state.lam])
        started = np.array([state.started], dtype=np.int64)
        u = np.array([state.u])
        if self._storm:
            Wp = state.coef_prev.copy()
            lamp, s, m = np.array([state.lam_prev]), np.array([state.s]), np.array(
                [state.log_scale])
            _k._pass_storm(*self._common(objective, state), indices, a["coef"], lam, Wp, lamp,
                           s, a["v"], u, m, started, a["counters"])
            new = state._replace(coef_prev=Wp, lam_prev=float(lamp[0]), s=float(s[0]),
                                 log_scale=float(m[0]))
        else:
            logs = np.array([state.log_s])
            _k._pass_ma(*self._common(objective, state), indices, a["coef"], lam, logs,
                        a["v"], u, started, a["counters"])
            new = state._replace(log_s=float(logs[0]))
        new = new._replace(epoch=state.epoch + 1, lam=float(lam[0]), u=float(u[0]),
                           started=int(started[0]), **a)
        return self._average(new) if self._mode == 1 else new

    @staticmethod
    def _average(state):
        """The restarted variants report the average of the current stage's iterates (one
        per pass: the iterate at the end of each pass whose end falls in the stage), not the
        last iterate. Algorithm 1 of the SCDRO paper returns ``x_tau``, ``tau`` uniform over
        the stage, and Lemmas 4-5 bound ``(1 / T_k) sum_t E[F_mu(x_t) - F_mu*]``; for a convex
        ``F`` the average iterate has the same bound (Jensen) without the draw's variance.
        ``benchmarks/kl_defaults.py``: the last iterate of RSCDRO's defaults ended up to
        1.6e-3 above the optimum after 100 passes on 12 fresh problems, the stage average
        at most 3.5e-4. The iterates themselves (and the restarts) are unchanged."""
        stage = int(state.counters[1])
        if stage != state.avg_stage or state.avg is None:
            return state._replace(avg=state.coef.copy(), avg_n=1, avg_stage=stage)
        n = state.avg_n + 1
        return state._replace(avg=state.avg + (state.coef - state.avg) / n, avg_n=n)

    def _iterate(self, state):
        return state.coef if state.avg is None else state.avg

    def _finite(self, state):
        return bool(np.all(np.isfinite(state.coef)) and np.isfinite(state.lam))

    def _failed(self, objective, state):
        """The collapsed multiplier: ``lambda`` on its lower bound ``lambda_0`` where the
        compositional objective there, ``F(w, lambda_0)``, exceeds the exact ``F(w)`` (the
        best ``lambda`` for the same ``w``) by more than ``COLLAPSE_GAP`` times ``F(w) -
        lower bound``. At a small ``lambda`` the samples ``exp(l_i / lambda)`` are
        heavy-tailed: the moving average ``s`` of ``g = E exp(l / lambda)`` follows the
        largest recent batch, ``log s`` exceeds ``log g`` and the estimate of ``dF/dlambda``
        (``log s + rho - (g_B / s) E_q[l] / lambda``) is biased upwards, so ``lambda`` is
        pushed further down: ``lambda_0`` is absorbing (``benchmarks/scdro_lambda_collapse.py``,
        adult_st: ``u ~ +1.2e4`` at every step once there). Checked only while ``lambda``
        is on the bound (two evaluations of the losses); where ``lambda* = lambda_0`` (the
        constraint inactive) the gap is 0."""
        lo, hi = state.bounds
        if not (hi > lo and state.lam <= lo * (1.0 + 1e-12)):
            return None
        with np.errstate(over="ignore", invalid="ignore"):
            f = float(objective.value(state.coef))
            f_lo = float(objective.value(state.coef, (lo,)))
        lower = getattr(objective, "lower_bound", 0.0)
        lower = float(lower) if isinstance(lower, (int, float)) else 0.0
        scale = max(f - lower, 1e-12 * max(1.0, abs(f)))
        if not (np.isfinite(f) and np.isfinite(f_lo)) or f_lo - f <= COLLAPSE_GAP * scale:
            return None
        return (f"{self.name}: lambda collapsed to its lower bound lambda_0 = {lo:.3g}, where "
                f"F(w, lambda_0) = {f_lo:.4g} against F(w) = {f:.4g} at the best lambda: the "
                f"estimate of g = E exp(loss / lambda) is heavy-tailed at small lambda and "
                f"its bias drives lambda down; lr={self.lr:g}, beta={self.beta:g} are too "
                f"large for this problem: use a smaller step size, e.g. lr={self.lr / 10:.3g} "
                f"(lr/10), a smaller beta, or a start lam0 nearer the optimum")

    def _result(self, objective, state, elapsed, trace, diverged, message, progress):
        res = super()._result(objective, state, elapsed, trace, diverged, message, progress)
        lo, hi = state.bounds
        res.extra["lam"] = float(state.lam)
        if hi > lo and state.lam >= hi * (1 - 1e-12):
            warnings.warn(f"{self.name}: lambda ended on its upper bound {hi:.4g} (Lemma 1's "
                          "lambda_0 + C/rho): the box may be too small; pass a larger "
                          "loss_bound to the objective", RuntimeWarning, stacklevel=3)
        return res


@register
class SCDRO(_KLBase):
    """SCDRO (Algorithm 1): moving-average estimators, constant ``lr`` and ``beta`` (module
    docstring). Parameters: ``lr`` (eta), ``beta``, ``batch_size``, ``radius_w`` (ball on the
    coefficients, optional), ``lam0`` (starting multiplier; default ``max(1, lambda_0)`` in the
    box), ``random_state``."""

    name = "scdro"


@register
class RSCDRO(_KLBase):
    """RSCDRO (Algorithm 3 with SCDRO): stages of ``stage_passes * 2^k`` passes, ``lr`` and
    ``beta`` halved at every stage, optional ``mu |x|^2 / 2`` (module docstring)."""

    name = "rscdro"
    _mode = 1

    def __init__(self, lr=0.1, beta=0.5, batch_size=64, stage_passes=4.0, mu=0.0,
                 radius_w=None, lam0=None, random_state=None):
        self._store(locals())


@register
class ASCDRO(_KLBase):
    """ASCDRO (Algorithm 2): STORM estimators, ``eta_t = lr / (1 + t/t0)^(1/3)`` with ``t0``
    = ``t0_passes`` passes of steps, ``beta_t = beta (eta_t / lr)^2`` (module docstring)."""

    name = "ascdro"
    _mode = 2
    _storm = True

    def __init__(self, lr=0.1, beta=0.5, batch_size=64, t0_passes=1.0, radius_w=None,
                 lam0=None, random_state=None):
        self._store(locals())


@register
class RASCDRO(_KLBase):
    """RASCDRO (Algorithm 3 with ASCDRO): stages of ``stage_passes * 2^k`` passes, ``lr``
    times ``2^(-1/2)`` and ``beta`` halved at every stage, optional ``mu``."""

    name = "rascdro"
    _mode = 1
    _eta_pow = 0.5
    _storm = True

    def __init__(self, lr=0.1, beta=0.2, batch_size=64, stage_passes=2.0, mu=0.0,
                 radius_w=None, lam0=None, random_state=None):
        self._store(locals())


@register
class RECOVER(_KLBase):
    """RECOVER (Qi et al. 2021) for the KL-penalised objective: STORM estimators with the
    decreasing schedule of ASCDRO and ``lambda`` fixed at ``lambda_0``."""

    name = "recover"
    _mode = 2
    _storm = True
    _penalised_only = True

    def __init__(self, lr=0.1, beta=0.5, batch_size=64, t0_passes=1.0, radius_w=None,
                 random_state=None):
        self._store(locals())
        self.lam0 = None

    def get_params(self):
        p = super().get_params()
        p.pop("lam0", None)
        return p
