r"""SaddleSAGA: primal-dual SAGA on the saddle-point form of the shift-penalised spectral risk.

Palaniappan & Bach, "Stochastic variance reduction methods for saddle-point problems",
NeurIPS 2016; the two-step-size variant and its step-size schemes are from Mehta et al.,
"Distributionally robust optimization with bias and variance reduction", ICLR 2024 (Sec. 4,
Appendix F, Appendix I / Fig. 13).
"""
from typing import NamedTuple

import numpy as np

from .._kernels import oracles as _ko
from .._kernels import saddlesaga as _k
from .._validation import check_positive
from ._registry import register
from .base import Solver, copy_arrays

#: Step-size schemes of the Prospect paper (App. I, Fig. 13), by the paper's names.
SCHEMES = {
    "heuristic": "Primal-Dual Heuristic: dual_lr = lr / (10 n) (the main-text baseline)",
    "equal": "Primal LR = Dual LR: dual_lr = lr (the original Palaniappan & Bach variant)",
    "dual": "Search Dual LR: lr fixed (e.g. Prospect's best), dual_lr given and searched",
}


class SaddleSAGAState(NamedTuple):
    """State of :class:`SaddleSAGA` (tables in original sample order).

    ``coef`` (p, K) primal iterate; ``epoch``; ``rng``; ``q`` (n,) dual iterate in the
    permutahedron; ``rho`` (n,) dual weights stored with the gradient table; ``losses`` (n,)
    loss table; ``derivs`` (n, K) table of ``dl_i/dz`` (gradient ``outer(x_i, derivs[i])``);
    ``grad_avg`` (p, K) ``sum_i rho_i outer(x_i, derivs[i])``; ``order`` (n,) permutation
    sorting the last dual-prox argument (a cache that speeds up the next sort).
    """

    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    q: np.ndarray
    rho: np.ndarray
    losses: np.ndarray
    derivs: np.ndarray
    grad_avg: np.ndarray
    order: np.ndarray


def _kl_geometry(nu, div):
    """The entropic dual step is used for the KL penalty with ``nu > 0`` (else Euclidean)."""
    return bool(div == _ko.KL and nu > 0.0)


def dual_prox(q, pi, sigma, shift_cost, divergence, dual_lr):
    r"""One exact dual proximal step of SaddleSAGA (the kernel's code path).

    chi2: :math:`\arg\min_{q' \in \mathcal P(\sigma)} \delta\nu n\|q' - \mathbf 1/n\|^2
    + \tfrac12\|q' - (q + \delta\pi)\|^2`;
    KL (``shift_cost > 0``): :math:`\arg\max_{q'} \delta q'^\top\pi - \delta\nu
    \mathrm{KL}(q'\|\mathbf 1/n) - \tfrac1n \mathrm{KL}(q'\|q)`.

    Parameters
    ----------
    q, pi : arrays (n,)
        Current dual point (in the permutahedron) and ascent direction.
    sigma : array (n,)
        Spectrum (non-decreasing).
    shift_cost : float
        ``nu``.
    divergence : {"chi2", "kl"}
    dual_lr : float
        ``delta``.
    """
    q = np.array(q, dtype=np.float64)
    pi = np.ascontiguousarray(pi, dtype=np.float64)
    sigma = np.ascontiguousarray(sigma, dtype=np.float64)
    n = q.shape[0]
    div = {"chi2": _ko.CHI2, "kl": _ko.KL}[divergence]
    order = np.arange(n, dtype=np.int64)
    _k._dual_prox(q, pi, sigma, float(shift_cost), _kl_geometry(shift_cost, div),
                  float(dual_lr), order, np.empty(n), np.empty(n), np.empty(n),
                  np.empty(n, dtype=np.int64))
    return q


@register
class SaddleSAGA(Solver):
    r"""Primal-dual SAGA on :math:`\min_w \max_{q \in \mathcal P(\sigma)} \Psi(w, q)`.

    .. math::

        \Psi(w, q) = q^\top \ell(w) - \nu D(q\|\mathbf 1/n) + \tfrac{\mu}{2}\|w\|^2 .

    Each step draws :math:`i` uniformly and, with SAGA tables of losses :math:`l`, gradients
    :math:`g` and weights :math:`\rho` (Prospect paper, App. F, eq. after (63)),

    .. math::

        v &= n q_i \nabla\ell_i(w) - n\rho_i g_i + \textstyle\sum_j \rho_j g_j,
        \qquad w \leftarrow \operatorname{prox}_{\eta\frac{\mu}{2}\|\cdot\|^2}(w - \eta v)
        = (w - \eta v)/(1 + \eta\mu), \\
        \pi &= n\ell_i(w) e_i - n l_i e_i + l,
        \qquad q \leftarrow \operatorname{prox}_{\iota_{\mathcal P(\sigma)}
        + \delta\nu D}(q + \delta\pi),

    then :math:`l_i \leftarrow \ell_i(w)`, :math:`g_i \leftarrow \nabla\ell_i(w)`,
    :math:`\rho_i \leftarrow q_i` (the values at the *start* of the step). (The paper's
    display writes :math:`q - \delta\pi`; its proof (Lemma 21) and the reference code use the
    ascent step :math:`q + \delta\pi`.) The dual prox is solved exactly by sort + PAV: for the
    chi-square penalty (Euclidean prox, as in App. F) it is the oracle with shift cost
    :math:`\delta\nu + 1/(2n)` applied to :math:`q + \delta\pi`; for the KL penalty we take the
    entropic (Bregman) prox with divergence :math:`\frac1n\mathrm{KL}(\cdot\|q)`, which is the
    KL oracle with shift cost :math:`1 + n\delta\nu` applied to :math:`n\delta\pi + \log q`
    (derivations in :mod:`riskopt._kernels.saddlesaga`). With ``nu = 0`` the step is the
    Euclidean projection onto the permutahedron whatever the divergence.

    Initialisation follows the paper (Algorithm 3, which App. F modifies):
    :math:`q = \rho = q^{opt}(\ell(w_0))`, :math:`l = \ell(w_0)`,
    :math:`g_i = \nabla\ell_i(w_0)`. (The reference code starts from :math:`q = \sigma` by
    rank instead; both converge to the same saddle point.) One :meth:`update` is one pass of
    ``n`` steps in one kernel call; each step costs one oracle call plus an O(n) dual step.

    Step-size schemes (``scheme``), named after the Prospect paper, App. I / Fig. 13:

    * ``"heuristic"`` (default) -- *Primal-Dual Heuristic*, the "SaddleSAGA" of the main
      text: ``dual_lr = lr / (10 n)``;
    * ``"equal"`` -- *Primal LR = Dual LR*, the original variant of Palaniappan & Bach:
      ``dual_lr = lr``;
    * ``"dual"`` -- *Search Dual LR*: the primal ``lr`` is fixed (the paper uses Prospect's
      best) and ``dual_lr`` is passed explicitly (and searched).

    ``dual_lr`` must be given with ``"dual"`` and only then. The step sizes of Theorem 20
    (App. F) need the Lipschitz constant ``G`` of the losses, which is unbounded for the
    squared loss; the paper does not run them, and neither scheme here uses them.

    Parameters
    ----------
    lr : float, default 0.01
        Primal step size :math:`\eta`.
    dual_lr : float, optional
        Dual step size :math:`\delta`, for ``scheme="dual"`` only.
    scheme : {"heuristic", "equal", "dual"}, default "heuristic"
    random_state : int, Generator or None

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> rng = np.random.default_rng(0); X, y = rng.normal(size=(100, 3)), rng.normal(size=100)
    >>> obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=0.5), X, y, l2_reg=0.01)
    >>> ro.solvers.SaddleSAGA(lr=0.03, random_state=0).run(obj, 20).value < obj.value(np.zeros(3))
    True
    """

    name = "saddlesaga"
    #: the dual step re-solves the whole weight vector: O(n) per step; 1.2e-8 .. 1.8e-8 s x n^2
    #: per pass measured at n = 4e3 .. 1.6e4 (2-core Xeon), so about 6 h per pass at n = 1e6
    quadratic_pass_cost = 2e-8

    def __init__(self, lr=0.01, dual_lr=None, scheme="heuristic", random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        check_positive("lr", self.lr)
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {sorted(SCHEMES)}, got {self.scheme!r}")
        if self.scheme == "dual":
            if self.dual_lr is None:
                raise ValueError("scheme='dual' needs an explicit dual_lr")
            check_positive("dual_lr", self.dual_lr)
        elif self.dual_lr is not None:
            raise ValueError(f"dual_lr is only used with scheme='dual' (scheme={self.scheme!r} "
                             "sets it from lr); pass dual_lr=None")

    def dual_step_size(self, objective):
        """The dual step size :math:`\\delta` the scheme gives on ``objective``."""
        self._check_params(objective)
        lr = float(self.lr)
        if self.scheme == "heuristic":
            return lr / (10.0 * objective.n)
        if self.scheme == "equal":
            return lr
        return float(self.dual_lr)

    def _init(self, objective, W, rng):
        losses, derivs = objective.losses_derivs(W)
        q = objective.risk_weights(losses)[1]
        rho = q.copy()
        G = np.ascontiguousarray(objective.X.T @ (rho[:, None] * derivs))
        order = _ko.sorted_order(losses)[0]
        return SaddleSAGAState(coef=W, epoch=0, rng=rng, q=q, rho=rho,
                               losses=np.ascontiguousarray(losses),
                               derivs=np.ascontiguousarray(derivs), grad_avg=G, order=order)

    def _pass(self, objective, state, indices):
        a = copy_arrays(state, "coef", "q", "rho", "losses", "derivs", "grad_avg", "order")
        _k._epoch_saddlesaga(objective.loss.code, objective.X, objective.y, objective.reg,
                             objective.sigma, objective.nu,
                             _kl_geometry(objective.nu, objective.div), float(self.lr),
                             self.dual_step_size(objective), indices, *a.values())
        return state._replace(epoch=state.epoch + 1, **a)
