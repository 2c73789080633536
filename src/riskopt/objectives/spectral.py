r"""The single definition of the spectral-risk problem.

.. math::

    F(w) = \max_{q \in \mathcal{P}(\sigma)} \Big[\sum_i q_i \ell_i(w) - \nu D(q\|\mathbf{1}/n)\Big]
           + \frac{\mu}{2}\|w\|^2

for a linear model (coefficient matrix ``W`` of shape ``(p, K)``; ``p = d + 1`` with an
intercept, which is not penalised). The gradient follows from Danskin's theorem:
:math:`\nabla F(w) = \sum_i q_i \nabla \ell_i(w) + \mu w` with ``q`` the maximiser (for
``nu = 0`` this is a subgradient; with ties, the one whose weights average the spectrum over
the tied losses).

The ``"spectral"`` family of :mod:`riskopt.objectives` (protocol in :mod:`riskopt.objectives.base`).

Examples
--------
>>> import numpy as np, riskopt as ro
>>> rng = np.random.default_rng(0); X, y = rng.normal(size=(50, 3)), rng.normal(size=50)
>>> obj = ro.Objective(ro.SquaredLoss(), ro.CVaR(0.5, shift_cost=1.0), X, y, l2_reg=1 / 50)
>>> w = np.zeros(3)
>>> float(obj.value(w)) > 0
True
>>> obj.family, obj.n_aux
('spectral', 0)
"""
import numpy as np

from .._kernels import oracles as _ko
from ..risks import _RiskBase, parse_risk
from .base import LinearModelObjective, shifted_copy


class Objective(LinearModelObjective):
    """Loss + risk + l2 regularisation + data: the ``"spectral"`` family.

    Parameters
    ----------
    loss : Loss or str
    risk : risk object (``CVaR``, ``ESRM``, ``Extremile``, ``Mean``, ``MaxLoss``, ``SpectralRisk``)
        or a string such as ``"cvar:0.5"``.
    X : array or scipy.sparse matrix of shape (n, d)
        A sparse ``X`` is kept as a float64 CSR design (O(nnz) memory): the full-batch
        :class:`~riskopt.solvers.LBFGS` solves it; the stochastic solvers need a dense ``X``
        and say so.
    y : array of shape (n,)
    l2_reg : float, default 0
        ``mu`` in ``(mu/2) ||w||^2``.
    fit_intercept : bool, default False
        Append a column of ones; its coefficient is not penalised.
    groups : array of shape (n,), optional
        Group labels: the risk then applies to the ``m`` group-mean losses (group DRO) and
        the result is a :class:`~riskopt.objectives.fcco.GroupRiskObjective`.
    sample_weight : array of shape (n,), optional
        Weights of the empirical distribution (normalised to sum 1). Non-uniform weights are
        supported for ``shift_cost = 0`` spectral risks with a built-in spectrum and for the
        mean risk (see ``risks._RiskBase.weighted_weights``); integer weights equal duplicating
        rows. Stochastic solvers need uniform weights; :class:`~riskopt.solvers.LBFGS` takes any.

    Attributes
    ----------
    X : (n, p) float64 design used by the kernels (with the ones column if ``fit_intercept``;
        a CSR matrix for a sparse input)
    y : (n,) float64 targets in the kernels' encoding
    sigma : (n,) spectrum; ``nu``, ``div`` the shift cost and divergence code
    reg : (p,) per-row l2 strength (``mu`` except 0 for the intercept)
    coef_shape : shape of the public coefficient (``(p,)`` or ``(p, K)``)

    Notes
    -----
    No auxiliary variables (``aux`` must be None). Reference optimum
    (:meth:`reference_solution`): ``"lbfgs"``, see :mod:`riskopt.objectives._lbfgs`
    (smooth for ``nu > 0``; continuation in ``nu`` and exact polishes for ``nu = 0``, certified
    against cvxpy in the tests).
    """

    family = "spectral"
    reference_methods = ("lbfgs",)
    _keeps_sparse = True  # value / grad are X @ W and X.T @ G: a CSR design works as is

    def __new__(cls, loss=None, risk=None, X=None, y=None, l2_reg=0.0, fit_intercept=False,
                sample_weight=None, groups=None, **kwargs):
        # a KL-DRO risk is another family: build its objective (riskopt.objectives.kl)
        from ..risks import KLDRO

        if cls is Objective and groups is not None:
            # a risk of the group losses (group DRO): riskopt.objectives.fcco
            from .fcco import GroupRiskObjective

            if sample_weight is not None:
                raise ValueError("group-risk objectives take no sample_weight")
            return GroupRiskObjective(loss, risk, X, y, groups, l2_reg=l2_reg,
                                      fit_intercept=fit_intercept, **kwargs)

        if cls is Objective and (isinstance(risk, KLDRO) or (
                isinstance(risk, str) and risk.partition(":")[0].lower() == "kl")):
            from .kl import KLDROObjective

            if sample_weight is not None:
                raise ValueError("KL-DRO objectives take no sample_weight")
            return KLDROObjective(loss, X, y, risk=parse_risk(risk), l2_reg=l2_reg,
                                  fit_intercept=fit_intercept, **kwargs)
        return super().__new__(cls)

    def __init__(self, loss, risk, X, y, l2_reg=0.0, fit_intercept=False, sample_weight=None):
        risk_obj = parse_risk(risk)
        if not isinstance(risk_obj, _RiskBase):
            raise ValueError(f"risk must be a spectral risk object, got {type(risk).__name__}")
        self._init_data(loss, X, y, l2_reg, fit_intercept)
        self.risk = risk_obj
        self.sigma = np.ascontiguousarray(self.risk.spectrum(self.n), dtype=np.float64)
        self.nu = float(self.risk.shift_cost)
        self.div = self.risk.div_code
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

    @property
    def smooth(self):
        """True when ``F`` is differentiable everywhere (smooth loss and ``nu > 0`` or the mean)."""
        if not self.loss.smooth:
            return False
        return self.nu > 0 or bool(np.ptp(self.sigma) == 0.0)

    def _no_aux(self, aux):
        if aux is not None and np.size(aux) != 0:
            raise ValueError("the spectral family has no auxiliary variables; pass aux=None")

    # ------------------------------------------------------------------ oracles
    def risk_weights(self, losses):
        """``(R(losses), q)`` by the exact oracle (by selection, no sort, for ``nu = 0`` and
        a spectrum with few distinct values: ``_kernels.oracles.spectral_risk_weights``)."""
        losses = np.ascontiguousarray(losses, dtype=np.float64)
        if losses.shape != (self.n,):
            raise ValueError(f"losses must have shape ({self.n},), got {losses.shape}")
        if self.sample_weight is not None:
            q = self.risk.weighted_weights(losses, self.sample_weight)
            return float(q @ losses), q
        q = np.empty(self.n)
        plan = self._selection_plan()
        val = _ko.spectral_risk_weights(losses, self.sigma, self.nu, self.div, q, plan)
        return val, q

    def _selection_plan(self):
        """The selection-oracle plan of ``self.sigma`` (``_kernels.oracles.selection_plan``:
        CVaR, ``MaxLoss``, ``Mean`` take O(n) selection instead of a sort for ``nu = 0``),
        computed on first use and cached with the spectrum it was computed for."""
        cached = self.__dict__.get("_plan")
        if cached is None or cached[0] is not self.sigma:
            cached = (self.sigma, _ko.selection_plan(self.sigma))
            self._plan = cached
        return cached[1]

    def weights(self, w):
        """The maximising distribution ``q`` at ``w``."""
        return self.risk_weights(self.losses(w))[1]

    def value(self, w, aux=None):
        """``F(w)``."""
        self._no_aux(aux)
        W = self.as_matrix(w)
        return self.risk_weights(self.losses(W))[0] + self._reg_value(W)

    def value_grad(self, w, aux=None):
        """``(F(w), grad F(w))``, the gradient in the shape of ``w``."""
        self._no_aux(aux)
        W = self.as_matrix(w)
        losses, derivs = self.losses_derivs(W)
        val, q = self.risk_weights(losses)
        G = self.X.T @ (q[:, None] * derivs) + self.reg[:, None] * W
        return val + self._reg_value(W), G.reshape(np.shape(w))

    def grad(self, w, aux=None):
        """``grad F(w)`` (Danskin); a subgradient when ``nu = 0``."""
        return self.value_grad(w, aux)[1]

    subgradient = grad

    # ------------------------------------------------------------------ reference
    def reference_solution(self, method="auto", coef0=None, **options):
        """The reference minimiser (``f*``) by full-batch L-BFGS.

        ``options`` go to :class:`riskopt.objectives._lbfgs.ReferenceLBFGS` (``tol``,
        ``max_iter``, ``nu_min``, ``polish_ties``).
        """
        from ._lbfgs import ReferenceLBFGS

        self._check_method(method)
        return ReferenceLBFGS(**options).minimize(self, coef0)

    def __repr__(self):
        return (f"Objective(loss={self.loss.name}, risk={self.risk!r}, n={self.n}, p={self.p}, "
                f"K={self.K}, l2_reg={self.l2_reg:g})")

    def with_shift(self, shift_cost, divergence_code=None):
        """A shallow copy of this objective with another shift cost (same data, no copy)."""
        return shifted_copy(self, shift_cost, divergence_code)

    def sorted_order(self, w):
        """Indices sorting the losses at ``w`` (stable)."""
        return _ko.sorted_order(self.losses(w))[0]
