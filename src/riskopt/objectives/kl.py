r"""KL-constrained (and KL-penalised) DRO of a linear model: the ``"kl_dro"`` family.

.. math::

    F(w) = \max_{q \in \Delta_n:\ KL(q\|\mathbf 1/n) \le \rho}
           \sum_i q_i \ell_i(w) - \lambda_0 KL(q\|\mathbf 1/n) + \frac{\mu}{2}\|w\|^2

(SCDRO paper, ``../shared/papers/scdro_kl_constrained_dro.txt``, Eq. (1); ``radius=None``:
the KL-penalised objective :math:`\lambda_0 \log\frac1n\sum_i e^{\ell_i(w)/\lambda_0}` of
RECOVER). By duality (Eq. (2), Appendix G) it is the minimum over the multiplier of the
*compositional* form

.. math::

    F(w, \lambda) = \lambda \log\Big(\frac1n\sum_i e^{\ell_i(w)/\lambda}\Big)
                    + (\lambda - \lambda_0)\rho + \frac{\mu}{2}\|w\|^2,
    \qquad \lambda \in [\lambda_0, \lambda_0 + C/\rho]

(Lemma 1: with losses in an interval of length ``C`` the optimal multiplier lies in that box),
which is what the stochastic solvers (``scdro``, ``ascdro``, ``rscdro``, ``rascdro``,
``recover``) optimise: ``aux_names = ("lam",)``.

* ``value(coef)`` / ``value_grad(coef)``: the exact objective (the profile over ``lambda``):
  the inner maximiser ``q = softmax(l / lambda*)`` and ``lambda*`` by the safeguarded 1-D
  solve of :func:`riskopt.objectives.kl_dro.kl_dro_weights`, gradient by Danskin
  :math:`X^\top(q \odot \ell') + \mu w`; smooth in ``w`` (the maximiser is unique), so
  L-BFGS solves it (``reference_solution``, the ``lbfgs`` solver, the estimators);
* ``value(coef, (lam,))`` / :meth:`value_grad_lam`: the compositional form and its partial
  derivatives (:math:`\partial_\lambda F = \rho - KL(q_\lambda\|\mathbf 1/n)`);
* everything in the log domain (the losses are shifted by their maximum before any
  exponential): losses of ``1e3`` with ``lambda_0 = 1e-3`` do not overflow.

The bound ``C`` of Lemma 1 (``lam_bounds``): the paper assumes losses bounded by ``C`` on a
bounded domain. For an unbounded linear model we take ``C = loss_bound`` when given, else
``1.5`` times the range of the losses at the exact optimum (computed once by L-BFGS and
cached); Lemma 1 applied at the optimum says :math:`\lambda^\star \le \lambda_0 +
(\max_i \ell_i(w^\star) - \min_i \ell_i(w^\star))/\rho`, so the box holds the solution with a
margin. The solvers warn when their ``lambda`` sits on the upper bound.

Examples
--------
>>> import numpy as np, riskopt as ro
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(60, 3)); y = (X[:, 0] + rng.normal(size=60) > 0).astype(float)
>>> obj = ro.Objective("logistic", ro.KLDRO(radius=0.2), X, y, l2_reg=1e-2)
>>> obj.family, obj.aux_names
('kl_dro', ('lam',))
>>> w = np.zeros(3)
>>> v, q, lam = obj.solve(w)
>>> bool(abs(obj.value(w, (lam,)) - obj.value(w)) < 1e-12)   # the profile at lambda*
True
"""
import math

import numpy as np

from .._kl import _kl_stats, _lam_lme, kl_dual
from ..risks import KLDRO, parse_risk
from ._lbfgs import abnormal_extra, stop_report
from .base import LinearModelObjective, Reference


class KLDROObjective(LinearModelObjective):
    """KL-constrained / penalised DRO of a linear model (module docstring).

    Parameters
    ----------
    loss : Loss or str
    X, y : arrays
    radius : float > 0 or None
        :math:`\\rho`; None for the KL-penalised objective.
    shift_cost : float, optional
        :math:`\\lambda_0` (default 1e-3 when constrained; required > 0 when penalised).
    l2_reg : float, default 0
    fit_intercept : bool, default False
    loss_bound : float, optional
        ``C`` of Lemma 1 for :meth:`lam_bounds` (default: 1.5 x the loss range at the optimum).
    risk : KLDRO, optional
        Instead of ``radius`` / ``shift_cost``.
    """

    family = "kl_dro"
    #: value / grad are ``X @ W`` and ``X.T @ G``: the estimators' operator design works as is
    _keeps_operator = True
    aux_names = ("lam",)
    reference_methods = ("lbfgs",)
    #: benchmark spec keys (``lam0`` is ``shift_cost``: the spec's ``shift_cost`` key is the
    #: spectral family's ``nu``)
    spec_params = {"radius": 0.5, "lam0": 1e-3}

    def __init__(self, loss, X, y, radius=None, shift_cost=None, l2_reg=0.0,
                 fit_intercept=False, loss_bound=None, risk=None):
        self._init_data(loss, X, y, l2_reg, fit_intercept)
        if risk is None:
            risk = KLDRO(radius=radius, shift_cost=shift_cost)
        risk = parse_risk(risk)
        if not isinstance(risk, KLDRO):
            raise ValueError(f"risk must be a KLDRO, got {risk!r}")
        self.risk = risk
        self.radius, self.shift_cost = risk.radius, risk.shift_cost
        if loss_bound is not None:
            loss_bound = float(loss_bound)
            if not (loss_bound > 0 and math.isfinite(loss_bound)):
                raise ValueError(f"loss_bound must be finite and > 0, got {loss_bound}")
        self.loss_bound = loss_bound
        self.sample_weight = None
        self._ref = None

    @classmethod
    def from_params(cls, loss, X, y, *, l2_reg=0.0, fit_intercept=False, lam0=1e-3,
                    radius=0.5, **params):
        """From benchmark spec keys: ``radius`` (``0`` or ``"none"``: penalised), ``lam0``."""
        if radius in (0, "none", "None", None):
            radius = None
        return cls(loss, X, y, radius=radius, shift_cost=lam0, l2_reg=l2_reg,
                   fit_intercept=fit_intercept, **params)

    @property
    def smooth(self):
        return bool(self.loss.smooth)

    # ------------------------------------------------------------------ the inner problem
    def risk_weights(self, losses):
        """``(R(losses), q)``."""
        value, q, _ = self.risk.solve(losses)
        return value, q

    def solve(self, coef):
        """``(F(w) without the regulariser, q, lambda*)`` at ``coef``."""
        return self.risk.solve(self.losses(self.as_matrix(coef)))

    def weights(self, coef):
        return self.solve(coef)[1]

    def _lam(self, aux):
        if aux is None or np.size(aux) == 0:
            return None
        lam = float(np.ravel(aux)[0])
        if not (lam > 0 and math.isfinite(lam)):
            raise ValueError(f"lam must be finite and > 0, got {lam}")
        return lam

    # ------------------------------------------------------------------ values
    def value(self, coef, aux=None):
        """``F(w)`` (exact), or the compositional ``F(w, lam)`` with ``aux=(lam,)``."""
        W = self.as_matrix(coef)
        lam = self._lam(aux)
        losses = self.losses(W)
        if lam is None:
            v = self.risk.solve(losses)[0]
        else:
            v = self._compositional(losses, lam)[0]
        return float(v) + self._reg_value(W)

    def _compositional(self, losses, lam):
        """``(value, q_lam, dF/dlam)`` of the compositional form (no regulariser)."""
        if self.radius is None:  # penalised: lam is fixed at lambda_0
            lam = self.shift_cost
            c = float(losses.max())
            _, _, q, lme = _kl_stats(losses - c, 1.0 / lam, math.log(losses.shape[0]))
            return c + _lam_lme(losses - c, lam, lme), q, 0.0
        f, df = kl_dual(losses, lam, self.radius, self.shift_cost)
        c = float(losses.max())
        q = _kl_stats(losses - c, 1.0 / lam, math.log(losses.shape[0]))[2]
        return f, q, df

    def value_grad(self, coef, aux=None):
        """``(F, grad_w F)``: exact (``aux=None``) or compositional at ``aux=(lam,)``."""
        W = self.as_matrix(coef)
        losses, derivs = self.losses_derivs(W)
        lam = self._lam(aux)
        if lam is None:
            v, q, _ = self.risk.solve(losses)
        else:
            v, q, _ = self._compositional(losses, lam)
        G = self.X.T @ (q[:, None] * derivs) + self.reg[:, None] * W
        return float(v) + self._reg_value(W), G.reshape(np.shape(coef))

    def grad(self, coef, aux=None):
        return self.value_grad(coef, aux)[1]

    subgradient = grad

    def value_grad_lam(self, coef, lam):
        """``(F(w, lam), grad_w F, dF/dlam)`` of the compositional form (``dF/dlam = rho -
        KL(q_lam || 1/n)``; 0 for the penalised objective)."""
        W = self.as_matrix(coef)
        losses, derivs = self.losses_derivs(W)
        v, q, df = self._compositional(losses, self._lam((lam,)))
        G = self.X.T @ (q[:, None] * derivs) + self.reg[:, None] * W
        return float(v) + self._reg_value(W), G.reshape(np.shape(coef)), float(df)

    # ------------------------------------------------------------------ Lemma 1
    def lam_bounds(self):
        """``(lo, hi)`` for the multiplier: ``lo = lambda_0``; ``hi = lambda_0 + C / rho``
        (``hi = lo`` for the penalised objective); ``C`` see the module docstring."""
        lo = self.shift_cost
        if self.radius is None:
            return lo, lo
        C = self.loss_bound
        if C is None:
            ref = self.reference_solution()
            losses = self.losses(ref.coef)
            C = 1.5 * max(float(losses.max() - losses.min()), 1e-12)
        return lo, lo + C / self.radius

    # ------------------------------------------------------------------ reference
    def reference_solution(self, method="auto", coef0=None, tol=1e-10, max_iter=20000,
                           **options):
        """The exact minimiser by L-BFGS on the (smooth) profile objective, cached for the
        default start. ``aux`` of the result is ``(lambda*,)``. Other ``options`` (those of the
        spectral family's engine) are accepted and ignored."""
        from scipy.optimize import minimize

        self._check_method(method)
        default = coef0 is None and tol == 1e-10 and max_iter == 20000
        if default and self._ref is not None:
            return self._ref
        W0 = self.as_matrix(self.zeros() if coef0 is None else coef0)
        g0 = float(np.linalg.norm(self.value_grad(W0)[1]))
        shape = W0.shape

        def f(x):
            v, g = self.value_grad(x.reshape(shape))
            return v, np.ravel(g)

        res = minimize(f, np.ravel(W0), jac=True, method="L-BFGS-B",
                       options={"maxiter": int(max_iter), "maxfun": 2 * int(max_iter),
                                "ftol": 0.0, "gtol": float(tol) * max(1.0, g0),
                                "maxcor": 30})
        coef = self.as_coef(res.x.reshape(shape))
        value, _, lam = self.solve(coef)
        value = float(value) + self._reg_value(self.as_matrix(coef))
        grad_norm = float(np.linalg.norm(self.grad(coef)))
        # a stop without progress far from the optimum is reported (see objectives._lbfgs)
        abnormal, rel, text = stop_report(res, max(1.0, g0) if math.isfinite(g0) else 1.0,
                                          float(tol) * max(1.0, g0), tol)
        if abnormal and not self.loss.smooth and value < self.value(W0):
            abnormal, text = False, ""  # a kink of the loss: the gradient proves nothing
        ref = Reference(coef=coef, value=value,
                        method="lbfgs", aux=(float(lam),), n_iter=int(res.nit),
                        message=text or str(res.message),
                        hit_limit=getattr(res, "status", 0) == 1,
                        extra={"grad_norm": grad_norm,
                               **abnormal_extra(abnormal, rel, res, tol)})
        if default:
            self._ref = ref
        return ref

    def __repr__(self):
        return (f"KLDROObjective(loss={self.loss.name}, risk={self.risk}, n={self.n}, "
                f"p={self.p}, K={self.K}, l2_reg={self.l2_reg:g})")
