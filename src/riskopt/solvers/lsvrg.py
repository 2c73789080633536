r"""LSVRG: the epoch-based variance-reduced primal method for spectral risks.

Mehta, Roulet, Pillutla, Liu & Harchaoui, "Stochastic optimization for spectral risk
measures", AISTATS 2023 (LSVRG), used as a baseline in Mehta et al., "Distributionally robust
optimization with bias and variance reduction", ICLR 2024 (Sec. 4: epoch length ``n``).
"""
from typing import NamedTuple

import numpy as np

from .. import samplers
from .._kernels import lsvrg as _k
from .._kernels import minibatch_vr as _kb
from .._validation import check_int, check_positive
from ._registry import register
from .base import Solver, check_batches, copy_arrays


class LSVRGState(NamedTuple):
    """State of :class:`LSVRG`.

    ``coef`` (p, K) iterate; ``epoch`` updates done; ``rng`` index generator;
    ``ckpt_coef`` (p, K) checkpoint; ``ckpt_q`` (n,) maximising weights at the checkpoint
    (original sample order); ``ckpt_derivs`` (n, K) loss derivatives ``dl_i/dz`` at the
    checkpoint; ``ckpt_grad`` (p, K) full risk gradient at the checkpoint, without the
    regulariser; ``since`` steps taken since the checkpoint was set.
    """

    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    ckpt_coef: np.ndarray
    ckpt_q: np.ndarray
    ckpt_derivs: np.ndarray
    ckpt_grad: np.ndarray
    since: int


@register
class LSVRG(Solver):
    r"""LSVRG for spectral risks with a shift penalty (Mehta et al., AISTATS 2023).

    Every ``epoch_length`` steps a checkpoint :math:`\bar w` is set: all losses
    :math:`\ell(\bar w)`, the maximising weights
    :math:`\bar q = \arg\max_{q \in \mathcal P(\sigma)} q^\top \ell(\bar w) - \nu D(q\|\mathbf 1/n)`
    (sort + PAV) and the full gradient :math:`\bar g = \sum_i \bar q_i \nabla\ell_i(\bar w)`.
    Each step draws :math:`i` uniformly and moves along

    .. math::

        v = n \bar q_i \big(\nabla \ell_i(w) - \nabla \ell_i(\bar w)\big) + \bar g + \mu w,
        \qquad w \leftarrow w - \eta v,

    where :math:`\bar q_i` is the checkpoint's weight of sample :math:`i` (by the
    checkpoint's rank of :math:`i`). The estimate is unbiased for the gradient of the
    *checkpoint's* linearisation, so the method converges linearly when the shift cost
    :math:`\nu` is large enough for the weights to be stable over an epoch (Prospect paper,
    Sec. 1 and App. I); with a small or zero shift cost it may stall at a biased point.

    One :meth:`update` is one pass of ``n`` steps in one kernel call. The checkpoint is set in
    :meth:`init_state` and refreshed *inside the kernel*, before the step that follows
    ``epoch_length`` steps since the last one (with the default ``epoch_length = n``: at the
    start of every pass). The checkpoint's per-sample derivatives are cached, so a step costs
    one oracle call and a pass with its checkpoint costs two passes' worth of oracle calls
    (``passes_per_update = 1 + n / epoch_length``), the count used on the papers' x-axes.

    The update order follows the paper and the Prospect reference code
    (``SmoothedLSVRG`` in ronakdm/prospect ``src/optim/baselines.py``): checkpoint weights are
    the shift-penalised (smoothed) weights, the regulariser enters as :math:`\mu w` at the
    current iterate, and the step is a plain gradient step.

    Parameters
    ----------
    lr : float, default 0.01
        Step size :math:`\eta`.
    epoch_length : int, optional
        Steps between checkpoints; default ``n // batch_size`` (an epoch of ``n`` samples, as
        in the Prospect and SOREL papers' experiments).
    batch_size : int, default 1
        Samples per step. ``1`` is the method above (indices uniform with replacement).
        ``b > 1`` is the mini-batch form (``riskopt._kernels.minibatch_vr``): a step draws
        ``b`` distinct indices (one update: a random permutation cut into ``n // b``
        batches, as SOREL's and SGD's mini-batches) and uses the mean of their terms,
        ``v = (1/b) sum_B n qc_i (grad l_i(w) - grad l_i(wc)) + gc + mu w`` (the SOREL
        paper runs every baseline at ``b = 64``, its App. B); capped at ``n``.
    random_state : int, Generator or None
        Seed of the sample-index generator.

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> rng = np.random.default_rng(0); X, y = rng.normal(size=(100, 3)), rng.normal(size=100)
    >>> obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=0.5), X, y, l2_reg=0.01)
    >>> res = ro.solvers.LSVRG(lr=0.03, random_state=0).run(obj, 20, callback=ro.Trace())
    >>> res.trace.passes[-1], res.value < obj.value(np.zeros(3))  # 2 passes per update
    (40.0, True)
    """

    name = "lsvrg"

    def __init__(self, lr=0.01, epoch_length=None, batch_size=1, random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        check_positive("lr", self.lr)
        if self.epoch_length is not None:
            check_int("epoch_length", self.epoch_length, minimum=1)
        check_int("batch_size", self.batch_size, minimum=1)

    def _b(self, objective):
        return min(int(self.batch_size), objective.n)

    def _m(self, objective):
        if self.epoch_length is not None:
            return int(self.epoch_length)
        return objective.n // self._b(objective)

    def passes_per_update(self, objective):
        """Samples of the update's steps over n, plus one per checkpoint:
        ``1 + n / epoch_length`` when ``batch_size = 1``."""
        n, b = objective.n, self._b(objective)
        steps = n // b
        return steps * b / n + steps / self._m(objective)

    def draw_indices(self, objective, state):
        """``n`` uniform indices (``batch_size = 1``), else ``(n // b, b)`` permutation batches."""
        if int(self.batch_size) == 1:
            return samplers.uniform(state.rng, objective.n, objective.n)
        return samplers.permutation_batches(state.rng, objective.n, self._b(objective))

    def _init(self, objective, W, rng):
        n, p, K = objective.n, objective.p, objective.K
        Wc = np.empty((p, K))
        qc = np.empty(n)
        Dc = np.empty((n, K))
        Gc = np.empty((p, K))
        _k._checkpoint_lsvrg(objective.loss.code, objective.X, objective.y, objective.sigma,
                             objective.nu, objective.div, W, Wc, qc, Dc, Gc)
        return LSVRGState(coef=W, epoch=0, rng=rng, ckpt_coef=Wc, ckpt_q=qc, ckpt_derivs=Dc,
                          ckpt_grad=Gc, since=0)

    def _pass(self, objective, state, indices):
        a = copy_arrays(state, "coef", "ckpt_coef", "ckpt_q", "ckpt_derivs", "ckpt_grad")
        if int(self.batch_size) > 1:
            since = _kb._epoch_lsvrg_batch(
                objective.loss.code, objective.X, objective.y, objective.reg, objective.sigma,
                objective.nu, objective.div, float(self.lr), self._m(objective),
                check_batches(indices, self._b(objective), objective.n), *a.values(),
                int(state.since))
            return state._replace(epoch=state.epoch + 1, since=int(since), **a)
        since = _k._epoch_lsvrg(objective.loss.code, objective.X, objective.y, objective.reg,
                                objective.sigma, objective.nu, objective.div, float(self.lr),
                                self._m(objective), indices, *a.values(), int(state.since))
        return state._replace(epoch=state.epoch + 1, since=int(since), **a)
