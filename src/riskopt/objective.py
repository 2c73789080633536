r"""The single definition of the spectral-risk problem.

.. math::

    F(w) = \max_{q \in \mathcal{P}(\sigma)} \Big[\sum_i q_i \ell_i(w) - \nu D(q\|\mathbf{1}/n)\Big]
           + \frac{\mu}{2}\|w\|^2

for a linear model (coefficient matrix ``W`` of shape ``(p, K)``; ``p = d + 1`` with an
intercept, which is not penalised). The gradient follows from Danskin's theorem:
:math:`\nabla F(w) = \sum_i q_i \nabla \ell_i(w) + \mu w` with ``q`` the maximiser (for
``nu = 0`` this is a subgradient; with ties, the one whose weights average the spectrum over
the tied losses).

Solvers, traces, the L-BFGS reference and the tests all use this class.

Examples
--------
>>> import numpy as np, riskopt as ro
>>> rng = np.random.default_rng(0)
>>> X, y = rng.normal(size=(50, 3)), rng.normal(size=50)
>>> obj = ro.Objective(ro.SquaredLoss(), ro.CVaR(0.5, shift_cost=1.0), X, y, l2_reg=1 / 50)
>>> w = np.zeros(3)
>>> float(obj.value(w)) > 0
True
"""
import numpy as np

from ._kernels import losses as _kl
from ._kernels import oracles as _ko
from ._validation import check_X_y, check_positive
from .losses import get_loss
from .risks import _RiskBase, parse_risk


class Objective:
    """Loss + risk + l2 regularisation + data.

    Parameters
    ----------
    loss : Loss or str
    risk : risk object (``CVaR``, ``ESRM``, ``Extremile``, ``Mean``, ``MaxLoss``, ``SpectralRisk``)
        or a string such as ``"cvar:0.5"``.
    X : array of shape (n, d)
    y : array of shape (n,)
    l2_reg : float, default 0
        ``mu`` in ``(mu/2) ||w||^2``.
    fit_intercept : bool, default False
        Append a column of ones; its coefficient is not penalised.
    sample_weight : array of shape (n,), optional
        Weights of the empirical distribution (normalised to sum 1). Non-uniform weights are
        supported for ``shift_cost = 0`` spectral risks with a built-in spectrum and for the
        mean risk (see ``risks._RiskBase.weighted_weights``); integer weights equal duplicating
        rows. Stochastic solvers need uniform weights; :class:`~riskopt.solvers.LBFGS` takes any.

    Attributes
    ----------
    X : (n, p) float64 design used by the kernels (with the ones column if ``fit_intercept``)
    y : (n,) float64 targets in the kernels' encoding
    sigma : (n,) spectrum; ``nu``, ``div`` the shift cost and divergence code
    reg : (p,) per-row l2 strength (``mu`` except 0 for the intercept)
    coef_shape : shape of the public coefficient (``(p,)`` or ``(p, K)``)
    """

    def __init__(self, loss, risk, X, y, l2_reg=0.0, fit_intercept=False, sample_weight=None):
        self.loss = get_loss(loss)
        self.risk = parse_risk(risk)
        if not isinstance(self.risk, _RiskBase):
            raise ValueError(f"risk must be a spectral risk object, got {type(risk).__name__}")
        X, y = check_X_y(X, y)
        self.l2_reg = check_positive("l2_reg", l2_reg, allow_zero=True)
        if not isinstance(fit_intercept, (bool, np.bool_)):
            raise ValueError(f"fit_intercept must be True or False, got {fit_intercept!r}")
        self.fit_intercept = bool(fit_intercept)
        self.y = np.ascontiguousarray(self.loss.prepare_targets(y))
        self.n_features = X.shape[1]
        if self.fit_intercept:
            X = np.hstack([X, np.ones((X.shape[0], 1))])
        self.X = np.ascontiguousarray(X)
        self.n, self.p = self.X.shape
        self.K = self.loss.n_outputs(self.y)
        self.sigma = np.ascontiguousarray(self.risk.spectrum(self.n), dtype=np.float64)
        self.nu = float(self.risk.shift_cost)
        self.div = self.risk.div_code
        self.reg = np.full(self.p, self.l2_reg)
        if self.fit_intercept:
            self.reg[-1] = 0.0
        self.coef_shape = (self.p,) if self.K == 1 else (self.p, self.K)
        self.sample_weight = None
        if sample_weight is not None:
            sw = np.asarray(sample_weight, dtype=np.float64)
            if sw.ndim != 1 or sw.shape[0] != self.n:
                raise ValueError(f"sample_weight must have shape ({self.n},), got {sw.shape}")
            if not np.all(np.isfinite(sw)) or np.any(sw < 0) or sw.sum() <= 0:
                raise ValueError("sample_weight must be finite, non-negative, with a positive sum")
            if not np.all(sw == sw[0]):
                self.risk.weighted_weights(np.zeros(self.n), sw)  # raises if unsupported
                self.sample_weight = sw / sw.sum()

    # ------------------------------------------------------------------ shapes
    def as_matrix(self, w):
        """The coefficient as a C-contiguous ``(p, K)`` float64 matrix (validated)."""
        W = np.asarray(w, dtype=np.float64)
        if W.size != self.p * self.K:
            raise ValueError(
                f"coefficient has {W.size} entries, expected shape {self.coef_shape}"
            )
        return np.ascontiguousarray(W.reshape(self.p, self.K))

    def as_coef(self, W):
        """The public coefficient shape of a ``(p, K)`` matrix."""
        return np.asarray(W).reshape(self.coef_shape).copy()

    def zeros(self):
        return np.zeros(self.coef_shape)

    # ------------------------------------------------------------------ oracles
    def losses_derivs(self, w):
        """Per-sample losses ``(n,)`` and derivatives w.r.t. the predictions ``(n, K)``."""
        W = self.as_matrix(w)
        Z = np.ascontiguousarray(self.X @ W)
        losses = np.empty(self.n)
        derivs = np.empty((self.n, self.K))
        _kl._losses_derivs_z(self.loss.code, self.y, Z, losses, derivs)
        return losses, derivs

    def losses(self, w):
        return self.losses_derivs(w)[0]

    def risk_weights(self, losses):
        """``(R(losses), q)`` by the exact oracle."""
        losses = np.ascontiguousarray(losses, dtype=np.float64)
        if losses.shape != (self.n,):
            raise ValueError(f"losses must have shape ({self.n},), got {losses.shape}")
        if self.sample_weight is not None:
            q = self.risk.weighted_weights(losses, self.sample_weight)
            return float(q @ losses), q
        q = np.empty(self.n)
        val = _ko._risk_weights(losses, self.sigma, self.nu, self.div, q)
        return val, q

    def weights(self, w):
        """The maximising distribution ``q`` at ``w``."""
        return self.risk_weights(self.losses(w))[1]

    def _reg_value(self, W):
        return 0.5 * float(np.sum(self.reg[:, None] * W * W))

    def value(self, w):
        """``F(w)``."""
        W = self.as_matrix(w)
        return self.risk_weights(self.losses(W))[0] + self._reg_value(W)

    def value_grad(self, w):
        """``(F(w), grad F(w))``, the gradient in the shape of ``w``."""
        W = self.as_matrix(w)
        losses, derivs = self.losses_derivs(W)
        val, q = self.risk_weights(losses)
        G = self.X.T @ (q[:, None] * derivs) + self.reg[:, None] * W
        return val + self._reg_value(W), G.reshape(np.shape(w))

    def grad(self, w):
        """``grad F(w)`` (Danskin); a subgradient when ``nu = 0``."""
        return self.value_grad(w)[1]

    # ------------------------------------------------------------------ constants
    def smoothness(self):
        """Per-sample smoothness bounds ``L_i`` of the losses (None for non-smooth losses)."""
        return self.loss.smoothness(self.X)

    def __repr__(self):
        return (f"Objective(loss={self.loss.name}, risk={self.risk!r}, n={self.n}, p={self.p}, "
                f"K={self.K}, l2_reg={self.l2_reg:g})")

    def with_shift(self, shift_cost, divergence_code=None):
        """A shallow copy of this objective with another shift cost (same data, no copy)."""
        import copy

        other = copy.copy(self)
        other.nu = float(shift_cost)
        if divergence_code is not None:
            other.div = divergence_code
        return other

    def sorted_order(self, w):
        """Indices sorting the losses at ``w`` (stable)."""
        return np.argsort(self.losses(w), kind="mergesort")
