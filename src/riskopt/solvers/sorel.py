r"""SOREL: stochastic optimiser for spectral risks with trajectory stabilisation.

Wang et al., "SOREL: A Stochastic Algorithm for Spectral Risks Minimization" (Algorithm 1,
Sections 3-4; practical settings of Section 3.2 and Appendix B; mini-batches in Appendix D).

The problem is the plain spectral risk (shift cost ``nu = 0``) with an l2 regulariser,

.. math::

    \min_w \sum_i \sigma_i \ell_{[i]}(w) + \frac{\mu}{2}\|w\|^2
    = \min_w \max_{\lambda \in \Pi_\sigma} \lambda^\top \ell(w) + \frac{\mu}{2}\|w\|^2,

with :math:`\Pi_\sigma` the permutahedron of the spectrum. One outer iteration ``k`` (one call of
:meth:`~riskopt.solvers.Solver.update`) does

1. :math:`v_k = (1 + \theta_k)\,\ell(w_k) - \theta_k\,\ell(w_{k-1})` (momentum on the losses;
   :math:`w_{-1} = w_0`),
2. :math:`\lambda_{k+1} = \arg\min_{\lambda \in \Pi_\sigma} -v_k^\top\lambda
   + \frac{1}{2\eta_k}\|\lambda - \lambda_k\|^2 = \mathrm{Proj}_{\Pi_\sigma}(\lambda_k + \eta_k v_k)`,
   solved exactly by sort + pool-adjacent-violators
   (:func:`riskopt._kernels.sorel._project_permutahedron`: the chi-square oracle with
   ``nu = 1/(2n)`` is exactly this projection),
3. :math:`\bar w = w_k`, :math:`\bar g = \sum_i \lambda_{k+1,i} \nabla\ell_i(\bar w)`, then
   ``m`` variance-reduced stochastic gradient steps on
   :math:`P_k(w) = \lambda_{k+1}^\top \ell(w) + \frac{\mu}{2}\|w\|^2 + \frac{1}{2\tau_k}\|w - w_k\|^2`:

   .. math::

       d_t = \frac{1}{b}\sum_{i \in B_t} n\lambda_{k+1,i}\big(\nabla\ell_i(w_{k,t})
             - \nabla\ell_i(\bar w)\big) + \bar g, \qquad
       w_{k,t+1} = \mathrm{prox}_{\alpha(g + \frac{1}{2\tau_k}\|\cdot - w_k\|^2)}
                   \big(w_{k,t} - \alpha d_t\big)
                 = \frac{w_{k,t} - \alpha d_t + (\alpha/\tau_k)\, w_k}{1 + \alpha\mu + \alpha/\tau_k},

   and :math:`w_{k+1}` is the last inner iterate.

:math:`\lambda_0` is the exact maximiser at :math:`w_0` (Algorithm 1, line 2; tied losses share the
average of their spectrum entries). The practical settings (Section 3.2 and Appendix B), all
followed here: :math:`T_k = m_k = n` inner steps with the reference point and the output the last
iterate (not averages), so one full gradient per outer iteration; :math:`\theta_k = k/(k+1)`,
:math:`\tau_k = 20n/(k+1)`, :math:`\eta_k = C(k+1)/n`. Both the step size :math:`\alpha` and
:math:`C` are tuned by grid search in the paper (:math:`\alpha` on the usual grid, :math:`C` on
``{0.01, 0.02, 0.04, 0.1, 0.2, 0.4, 1, 2, 4, 10}``).

Mapping of the paper's symbols to ours
--------------------------------------
==============================  ============================================================
paper                           riskopt
==============================  ============================================================
:math:`w_k`                     ``state.coef`` (a ``(p, K)`` matrix) after ``k`` updates
:math:`k`                       ``state.epoch`` (outer iterations done)
:math:`\lambda_k`               ``state.lam`` (our ``q``, the weights on the samples)
:math:`\ell(w_{k-1})`           ``state.losses_prev``
:math:`\sigma`                  ``objective.sigma`` (ascending)
:math:`g(w)`                    ``0.5 * sum(objective.reg * W**2)`` (``mu = l2_reg``)
:math:`\alpha`                  ``lr``
:math:`C` in :math:`\eta_k`     ``dual_lr`` (reference code: ``lrdcon``)
20 in :math:`\tau_k`            ``prox_scale`` (reference code: ``xlrcon``)
:math:`\theta_k`                fixed to ``k / (k + 1)``
:math:`T_k = m_k`               ``n`` (SOREL) or ``n // batch_size`` mini-batches
:math:`b`                       ``batch_size`` (Appendix D; the paper uses 64)
==============================  ============================================================

The inner step is the proximal step of Algorithm 1 (line 15), in closed form for the l2
regulariser (the intercept row has ``mu = 0``). Appendix B instead takes a plain gradient step on
:math:`g + \frac{1}{2\tau_k}\|\cdot - w_k\|^2`; that explicit step is unstable once
:math:`\alpha(\mu + 1/\tau_k) > 2`, which always happens eventually because
:math:`1/\tau_k = (k+1)/(20n)` grows without bound (after about ``40 n / lr`` outer iterations:
irrelevant on the benchmark datasets, where both steps give the same curves, but fatal on small
problems). The prox costs the same. Two places where the authors' reference code differs from
Algorithm 1 and we follow the paper: the code applies :math:`\tau_{k+1}` (not :math:`\tau_k`) in
the inner loop of iteration ``k``, and its mini-batch version stops increasing :math:`\eta_k` after
400 outer iterations.

Cost accounting (``passes_per_update``)
---------------------------------------
The papers' x-axis is the number of oracle calls ``w -> (l_i(w), grad l_i(w))`` divided by ``n``.
One update evaluates all ``n`` losses and gradients at :math:`w_k` once (they serve both the
momentum vector :math:`v_k` and :math:`\bar g`: one pass), then makes ``n`` stochastic oracle calls
at the inner iterates (one pass). :math:`\nabla\ell_i(\bar w)` is not recomputed: for a linear model
it is ``outer(x_i, dl/dz)`` and the ``(n, K)`` derivatives at :math:`\bar w` are kept from the full
pass. So ``passes_per_update = 2`` for :class:`SOREL` and ``1 + batch_size * (n // batch_size) / n``
for :class:`SORELMiniBatch`, the accounting of the authors' plots (two passes per outer
iteration, like LSVRG). :meth:`init_state` evaluates the ``n`` losses once more for
:math:`\lambda_0` (one extra pass at the start, as in the reference code; not counted).

Convergence in practice
-----------------------
With an accurate ``f*`` (:class:`~riskopt.solvers.LBFGS`), SOREL is not linearly convergent in
general: on the papers' regression benchmarks (squared loss, ``mu = 1/n``, tuned ``lr`` and
``dual_lr``) it reaches relative suboptimality 1e-8 within 64 passes (32 on kin8nm and power)
for the ESRM on concrete, kin8nm and power and the extremile on kin8nm, stays within 1e-8 .. 5e-7
on the other extremile / ESRM problems and at 2e-7 .. 1e-4 on the CVaR problems. For the CVaR
problems even the outer loop with exactly solved inner problems stalls at 2e-7 .. 3e-5 after the
same number of outer iterations: the dual schedule, not the stochastic inner loop, is the limit
there (see ``tests/test_sorel.py`` for the settings and numbers).

Examples
--------
>>> import numpy as np, riskopt as ro
>>> rng = np.random.default_rng(0); X, y = rng.normal(size=(100, 3)), rng.normal(size=100)
>>> obj = ro.Objective("squared", ro.CVaR(0.5), X, y, l2_reg=1 / 100)
>>> ro.solvers.SOREL(lr=0.03, dual_lr=0.4, random_state=0).run(obj, 10).value < obj.value(np.zeros(3))
True
"""
from typing import NamedTuple

import numpy as np

from .. import samplers
from .._kernels import sorel as _ks
from .._validation import check_int, check_positive
from ._registry import register
from .base import Solver


class SORELState(NamedTuple):
    """State of SOREL after ``epoch`` outer iterations."""

    coef: np.ndarray          # (p, K) w_k
    epoch: int                # k
    rng: np.random.Generator  # draws the sample indices
    lam: np.ndarray           # (n,) lambda_k in the permutahedron
    losses_prev: np.ndarray   # (n,) l(w_{k-1}) (l(w_0) at k = 0)


@register
class SOREL(Solver):
    """SOREL (Algorithm 1 with the practical settings of the paper), one sample per inner step.

    Parameters
    ----------
    lr : float, default 0.01
        Primal step size :math:`\\alpha` of the inner variance-reduced steps.
    dual_lr : float, default 1.0
        :math:`C` in the dual step size :math:`\\eta_k = C (k + 1) / n` (the median of the values
        the papers' selection rule picks on the 15 regression problems, which range 0.04 .. 10).
    prox_scale : float, default 20
        The constant in the primal proximal parameter :math:`\\tau_k = \\text{prox\\_scale}\\,
        n / (k + 1)` (20 in all the paper's experiments).
    random_state : int, Generator or None
        Seed of the index sequence (``n`` indices uniformly with replacement per update).

    Notes
    -----
    One :meth:`update` is one outer iteration ``k`` and costs
    :meth:`passes_per_update` ``= 2`` passes of oracle calls. Only ``shift_cost = 0`` objectives
    with smooth losses (squared, logistic, multinomial) are accepted. See the module docstring
    for the maths and the mapping to the paper's notation.
    """

    name = "sorel"

    def __init__(self, lr=0.01, dual_lr=1.0, prox_scale=20.0, random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        check_positive("lr", self.lr)
        check_positive("dual_lr", self.dual_lr)
        check_positive("prox_scale", self.prox_scale)

    def _check_objective(self, objective):
        if objective.nu != 0.0:
            raise ValueError(
                f"{type(self).__name__} minimises the plain spectral risk: the objective must have "
                f"shift_cost = 0, got {objective.nu:g} (use Prospect or LSVRG for shift_cost > 0)")
        if not objective.loss.smooth:
            raise ValueError(
                f"{type(self).__name__} needs a smooth loss (squared, logistic, multinomial); "
                f"got the {objective.loss.name} loss")

    def passes_per_update(self, objective):
        """Oracle calls per update divided by n: one full pass plus ``n`` stochastic calls."""
        return 2.0

    def _init(self, objective, W, rng):
        losses = objective.losses(W)
        lam = objective.risk_weights(losses)[1]
        return SORELState(coef=W, epoch=0, rng=rng, lam=lam, losses_prev=losses)

    def _batches(self, objective, indices):
        return indices.reshape(-1, 1)

    def _pass(self, objective, state, indices):
        batches = self._batches(objective, indices)
        W = state.coef.copy()
        n = objective.n
        lam = np.empty(n)
        losses = np.empty(n)
        _ks._epoch_sorel(objective.loss.code, objective.X, objective.y, objective.sigma,
                         objective.reg, W, state.lam, state.losses_prev, int(state.epoch),
                         float(self.lr), float(self.dual_lr), float(self.prox_scale),
                         batches, lam, losses)
        return SORELState(coef=W, epoch=state.epoch + 1, rng=state.rng, lam=lam,
                          losses_prev=losses)


@register
class SORELMiniBatch(SOREL):
    """SOREL with mini-batches (Appendix D of the SOREL paper).

    Each update is one outer iteration: the full pass at :math:`w_k`, then ``n // batch_size``
    inner steps, each on a mini-batch of ``batch_size`` distinct samples; the batches of one update
    are consecutive slices of a random permutation (as in the authors' code), the ``n mod
    batch_size`` left-over samples are not used in that update.

    Parameters
    ----------
    lr : float, default 0.1
        Primal step size :math:`\\alpha`.
    batch_size : int, default 64
        Mini-batch size ``b`` (64 in all the paper's mini-batch experiments); values above ``n``
        are clipped to ``n``.
    dual_lr : float, default 1.0
        :math:`C` in :math:`\\eta_k = C (k + 1) / n`.
    prox_scale : float, default 20
        The constant in :math:`\\tau_k = \\text{prox\\_scale}\\, n / (k + 1)`.
    random_state : int, Generator or None

    Notes
    -----
    :meth:`passes_per_update` is ``1 + batch_size * (n // batch_size) / n`` (about 2).

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> rng = np.random.default_rng(0); X, y = rng.normal(size=(300, 3)), rng.normal(size=300)
    >>> obj = ro.Objective("squared", ro.Extremile(2.0), X, y, l2_reg=1 / 300)
    >>> ro.solvers.SORELMiniBatch(lr=0.3, random_state=0).run(obj, 10).value < obj.value(np.zeros(3))
    True
    """

    name = "sorel_minibatch"

    def __init__(self, lr=0.1, batch_size=64, dual_lr=1.0, prox_scale=20.0, random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        super()._check_params(objective)
        check_int("batch_size", self.batch_size, minimum=1)

    def _shape(self, objective):
        b = min(int(self.batch_size), objective.n)
        return objective.n // b, b

    def passes_per_update(self, objective):
        """One full pass plus ``b * (n // b)`` stochastic calls, divided by n."""
        m, b = self._shape(objective)
        return 1.0 + m * b / objective.n

    def draw_indices(self, objective, state):
        """``(n // b, b)`` indices: consecutive slices of a random permutation of the samples."""
        return samplers.permutation_batches(state.rng, objective.n, self._shape(objective)[1])

    def _batches(self, objective, indices):
        if indices.ndim != 2:
            raise ValueError(
                f"SORELMiniBatch needs indices of shape (n_steps, batch_size), got {indices.shape}")
        return indices
