r"""Baselines of the KL-constrained DRO experiments (SCDRO paper, Section 6), ``"kl_dro"``
family, linear models (kernels: :mod:`riskopt._kernels.kl_baselines`).

=============  ================================================================================
``fastdro``    The mini-batch plug-in estimator of Levy et al. (2020) ("FastDRO" after their
               repository): the exact KL-DRO weights of each mini-batch's losses, then a
               gradient step. **Biased** for a finite batch (the DRO value of a batch is not
               an unbiased estimate of the population's); the bias shrinks as ``batch_size``
               grows (``convergent = False``). For CVaR-constrained and chi-square DRO the
               same estimator is :class:`riskopt.solvers.SGD` on a spectral objective
               (``ro.CVaR(a)``, or a chi-square shift cost): it computes the exact spectral
               weights of each mini-batch the same way.
``dual_sgm``   Dual SGM (Levy et al. 2020): SGD on ``(w, lambda, eta)`` for the dual
               ``lambda E exp((l - eta)/lambda - 1) + eta + (lambda - lambda_0) rho`` of the KL
               ball, whose mini-batch gradients are unbiased; ``lam0`` and ``eta0`` start the
               multipliers (the paper tunes both in {0.1, 1, 10}); exponents capped at 50:
               a pass that caps one, or whose ``F`` rose above its start (``rise_every_pass``),
               stops the run as diverged (``DualSGM._failed``).
``spd``        Stochastic primal-dual (Namkoong & Duchi 2016, convex): a dual vector ``p`` of
               size ``n`` (mirror ascent, then the KL-Bregman projection on the KL ball: O(n)
               per step), primal steps with the importance-weighted gradient.
``pgsmd2``     PG-SMD2 (Rafique et al. 2021, non-convex): SPD's updates on the proximal
               subproblems ``F(w) + |w - w_c|^2 / (2 gamma)``, the center ``w_c`` moved to the
               iterate at every pass.
=============  ================================================================================

``dual_lr`` is the dual step size of ``spd`` / ``pgsmd2`` (the paper tunes it in
``{1e-5, 5e-5, 1e-4, 5e-4}``). One :meth:`update` is one pass of ``n // batch_size``
mini-batch steps in one kernel call.
"""
from typing import NamedTuple

import numpy as np

from .._kernels import kl_baselines as _k
from .._validation import check_int, check_positive
from ._registry import register
from .base import Solver, copy_arrays


class FastDROState(NamedTuple):
    coef: np.ndarray
    epoch: int
    rng: np.random.Generator


class DualSGMState(NamedTuple):
    """``lam`` the KL multiplier, ``eta`` the normalisation multiplier of the dual."""

    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    lam: float
    eta: float
    bounds: tuple
    capped: int = 0


class PrimalDualState(NamedTuple):
    """``log_p`` (n,) the log of the dual weights; ``center`` the proximal center (PG-SMD2)."""

    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    log_p: np.ndarray
    center: np.ndarray


class _Base(Solver):
    families = ("kl_dro",)

    def _check_params(self, objective):
        check_positive("lr", self.lr)
        check_int("batch_size", self.batch_size, minimum=1)
        if self.radius_w is not None:
            check_positive("radius_w", self.radius_w)

    def _b(self, objective):
        return min(int(self.batch_size), objective.n)

    def draw_indices(self, objective, state):
        b = self._b(objective)
        return state.rng.integers(0, objective.n, size=(max(1, objective.n // b), b))

    def passes_per_update(self, objective):
        b = self._b(objective)
        return max(1, objective.n // b) * b / objective.n

    def _R(self):
        return 0.0 if self.radius_w is None else float(self.radius_w)

    def _rho(self, objective):
        return 0.0 if objective.radius is None else float(objective.radius)


@register
class FastDRO(_Base):
    """The mini-batch plug-in estimator (module docstring); biased for finite batches."""

    name = "fastdro"
    convergent = False

    def __init__(self, lr=0.1, batch_size=64, radius_w=None, random_state=None):
        self._store(locals())

    def _init(self, objective, W, rng):
        return FastDROState(coef=W, epoch=0, rng=rng)

    def _pass(self, objective, state, indices):
        a = copy_arrays(state, "coef")
        _k._pass_fastdro(objective.loss.code, objective.X, objective.y, objective.reg,
                         self._rho(objective), float(objective.shift_cost), self._R(),
                         float(self.lr), np.atleast_2d(indices), a["coef"])
        return state._replace(epoch=state.epoch + 1, **a)


@register
class DualSGM(_Base):
    """Dual SGM (module docstring): ``lam0`` / ``eta0`` start the multipliers."""

    name = "dual_sgm"
    rise_every_pass = True

    def __init__(self, lr=0.1, batch_size=64, lam0=1.0, eta0=1.0, radius_w=None,
                 random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        super()._check_params(objective)
        check_positive("lam0", self.lam0)

    def _init(self, objective, W, rng):
        lo = float(objective.shift_cost)
        hi = lo if objective.radius is None else np.inf
        lam = lo if hi == lo else max(float(self.lam0), lo)
        return DualSGMState(coef=W, epoch=0, rng=rng, lam=lam, eta=float(self.eta0),
                            bounds=(lo, hi))

    def _pass(self, objective, state, indices):
        a = copy_arrays(state, "coef")
        st = np.array([state.lam, state.eta, 0.0])
        lo, hi = state.bounds
        _k._pass_dual_sgm(objective.loss.code, objective.X, objective.y, objective.reg,
                          self._rho(objective), lo, hi, self._R(), float(self.lr),
                          np.atleast_2d(indices), a["coef"], st)
        return state._replace(epoch=state.epoch + 1, lam=float(st[0]), eta=float(st[1]),
                              capped=int(st[2]), **a)

    def _failed(self, objective, state):
        """A pass that capped an exponent ``(l - eta) / lambda - 1`` at 50: the step then
        weighted a sample by ``e^50 / b`` (the true weight is larger still), a point far from
        the dual's stationary ``E exp(.) = 1``. Where the exponents stay below the cap and
        the iterates still leave (adult_st: ``|w|`` from 1.5 to 484 and ``lambda`` from 2.5
        to 553 in one pass, ``benchmarks/scdro_lambda_collapse.py``), ``rise_every_pass``
        stops the run at the pass where ``F`` rose above its start."""
        if not state.capped:
            return None
        return (f"dual_sgm: {state.capped} exponents (loss - eta) / lambda - 1 reached their "
                f"cap 50 in the last pass (lambda = {state.lam:.4g}, eta = {state.eta:.4g}): "
                f"the stochastic gradient of the dual grows like exp(loss / lambda) and "
                f"lr={self.lr:g} is too large for it: use a smaller step size, e.g. "
                f"lr={self.lr / 10:.3g} (lr/10), or a larger lam0")

    def _finite(self, state):
        return bool(np.all(np.isfinite(state.coef)) and np.isfinite(state.lam)
                    and np.isfinite(state.eta))


@register
class SPD(_Base):
    """Stochastic primal-dual with an ``n``-dimensional dual (module docstring)."""

    name = "spd"
    _gamma = 0.0

    def __init__(self, lr=0.1, dual_lr=1e-4, batch_size=64, radius_w=None, random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        super()._check_params(objective)
        check_positive("dual_lr", self.dual_lr)

    def _check_objective(self, objective):
        if getattr(objective, "radius", 0.0) is None:
            raise ValueError(f"{self.name} solves the KL-constrained objective (radius > 0)")

    def _init(self, objective, W, rng):
        n = objective.n
        return PrimalDualState(coef=W, epoch=0, rng=rng, log_p=np.full(n, -np.log(n)),
                               center=W.copy())

    def _pass(self, objective, state, indices):
        a = copy_arrays(state, "coef", "log_p")
        _k._pass_primal_dual(objective.loss.code, objective.X, objective.y, objective.reg,
                             self._rho(objective), float(objective.shift_cost), self._R(),
                             float(self.lr), float(self.dual_lr), float(self._g()),
                             np.atleast_2d(indices), a["coef"], a["log_p"], state.center)
        center = a["coef"].copy() if self._g() > 0 else state.center
        return state._replace(epoch=state.epoch + 1, center=center, **a)

    def _g(self):
        return self._gamma


@register
class PGSMD2(SPD):
    """PG-SMD2: SPD on proximal subproblems with parameter ``gamma`` (module docstring)."""

    name = "pgsmd2"

    def __init__(self, lr=0.1, dual_lr=1e-4, gamma=10.0, batch_size=64, radius_w=None,
                 random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        super()._check_params(objective)
        check_positive("gamma", self.gamma)

    def _g(self):
        return float(self.gamma)
