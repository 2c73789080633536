r"""Biased plug-in mini-batch baselines: SGD, SRDA, SGD with momentum and Adam.

These are the "direct stochastic methods" of Mehta et al. (2024), *Distributionally robust
optimization with bias and variance reduction* (ICLR), Section 4 (SGD and SRDA, batch size 64)
and Appendix I / Fig. 15 (SGD with momentum 0.9 and Adam with ``(beta1, beta2) = (0.9, 0.999)``,
"default hyperparameters", i.e. PyTorch's, so ``eps = 1e-8``).

The plug-in gradient
--------------------
The objective is

.. math::

    F(w) = R_n(\ell_1(w), \dots, \ell_n(w)) + \frac{\mu}{2}\|w\|^2, \qquad
    R_m(l) = \max_{q \in \mathcal{P}(\sigma^{(m)})} q^\top l - \nu D(q \| \mathbf 1/m).

On a mini-batch :math:`B` of size :math:`b` each method uses the gradient of the *batch's own*
spectral risk, the same risk (spectrum :math:`\sigma^{(b)}` = ``risk.spectrum(b)``, same shift
cost :math:`\nu` and divergence) applied to the :math:`b` batch losses:

.. math::

    g_B(w) = \sum_{i \in B} q^{(B)}_i \nabla \ell_i(w), \qquad
    q^{(B)} = \arg\max_{q \in \mathcal{P}(\sigma^{(b)})} q^\top \ell_B(w) - \nu D(q\|\mathbf 1/b),

computed exactly inside the kernel (sort the ``b`` losses, pool-adjacent-violators).

Why these methods are biased
----------------------------
:math:`R_b` is a non-linear (sort-based, convex) function of the losses, so the plug-in
gradient is not an unbiased estimate of :math:`\nabla F`:
:math:`\mathbb E_B[g_B(w)] = \nabla_w \mathbb E_B[R_b(\ell_B(w))] \ne \nabla_w R_n(\ell(w))`
(e.g. the expected CVaR of a batch of 64 is smaller than the CVaR of the full sample, and the
batch weights rank a sample only against the other 63). The fixed point of every method here is
therefore a stationary point of the *different* objective
:math:`\mathbb E_B[R_b(\ell_B(w))] + \frac{\mu}{2}\|w\|^2`, not the minimiser of :math:`F`,
and with a constant step the iterates also keep the variance of the batch gradient. No step size
removes the bias: a smaller step only trades variance for speed, so the suboptimality stalls at a
floor (the paper's Fig. 3 and Fig. 15, "fail to converge for any learning rate"). All four set
``convergent = False``.

Mini-batches (Prospect App. H.3 and its reference code)
-------------------------------------------------------
Sampled without replacement: one pass draws a random permutation of ``0..n-1`` and cuts it into
``n // batch_size`` batches of ``batch_size`` (the last ``n % batch_size`` indices of the
permutation are not used in that pass). :meth:`draw_indices` returns that ``(n // b, b)`` array;
``update(objective, state, indices=...)`` accepts such an array (or a 1-D array whose length is a
multiple of ``b``). When ``batch_size > n`` the whole sample is one batch.

Differences with the reference code (ronakdm/prospect)
------------------------------------------------------
* The batch oracle uses the shift penalty of a ``b``-sample problem, ``nu * b ||q - 1/b||^2``
  (chi2) or ``nu * KL(q || 1/b)``; the reference code's batch smoothing keeps the full-sample
  factor ``n`` in front of the chi2 term.
* SRDA centres its proximal term at the starting point ``coef0`` (the reference starts at 0, where
  both coincide).

Examples
--------
>>> import numpy as np, riskopt as ro
>>> rng = np.random.default_rng(0); X, y = rng.normal(size=(256, 3)), rng.normal(size=256)
>>> obj = ro.Objective(ro.SquaredLoss(), ro.CVaR(0.5, shift_cost=0.5), X, y, l2_reg=1 / 256)
>>> steps = {"sgd": 0.03, "srda": 0.03, "sgd_momentum": 0.003, "adam": 0.01}
>>> [ro.solvers.get(k, lr=v, random_state=0).run(obj, 10).value < obj.value(np.zeros(3))
...  for k, v in steps.items()]
[True, True, True, True]
>>> ro.solvers.Adam(random_state=0).run(obj, max_epochs=10).state.n_iter  # 4 batches per pass
40
"""
from typing import NamedTuple

import numpy as np

from .. import samplers
from .._kernels import sgd as _ks
from .._validation import check_int, check_positive
from ._registry import register
from .base import Solver, copy_arrays


class SGDState(NamedTuple):
    coef: np.ndarray
    epoch: int
    rng: np.random.Generator


class SRDAState(NamedTuple):
    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    coef0: np.ndarray      #: centre of the proximal term (the starting point)
    dual_avg: np.ndarray   #: running average of the unregularised batch gradients
    n_iter: int            #: number of steps taken (t)


class SGDMomentumState(NamedTuple):
    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    velocity: np.ndarray   #: momentum buffer


class AdamState(NamedTuple):
    coef: np.ndarray
    epoch: int
    rng: np.random.Generator
    m: np.ndarray          #: first-moment estimate
    v: np.ndarray          #: second-moment estimate
    n_iter: int            #: step count (bias correction)


class _PluginMiniBatch(Solver):
    """Shared machinery of the plug-in mini-batch methods (not registered)."""

    convergent = False

    def __init__(self, lr=0.01, batch_size=64, random_state=None):
        self._store(locals())

    # -- validation ----------------------------------------------------------
    def _check_params(self, objective):
        check_positive("lr", self.lr)
        check_int("batch_size", self.batch_size, minimum=1)

    def _check_objective(self, objective):
        self._batch_spectrum(objective, self._effective_batch(objective))

    # -- helpers -------------------------------------------------------------
    def _effective_batch(self, objective):
        return min(int(self.batch_size), objective.n)

    @staticmethod
    def _batch_spectrum(objective, b):
        try:
            sigma = objective.risk.spectrum(b)
        except ValueError as exc:
            raise ValueError(
                f"{type(objective.risk).__name__} cannot give a spectrum for a mini-batch of "
                f"{b} samples ({exc}); the plug-in mini-batch solvers need risk.spectrum(b)"
            ) from None
        return np.ascontiguousarray(sigma, dtype=np.float64)

    def draw_indices(self, objective, state):
        """One pass: a random permutation cut into ``n // b`` batches, shape ``(n // b, b)``."""
        return samplers.permutation_batches(state.rng, objective.n, self._effective_batch(objective))

    def passes_per_update(self, objective):
        """Oracle calls of one pass divided by n: ``(n // b) * b / n``."""
        b = self._effective_batch(objective)
        return (objective.n // b) * b / objective.n

    def _batches(self, objective, indices):
        b = self._effective_batch(objective)
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim == 1:
            if idx.size % b:
                raise ValueError(
                    f"indices of length {idx.size} cannot be cut into batches of {b}")
            idx = idx.reshape(-1, b)
        elif idx.ndim != 2 or idx.shape[1] != b:
            raise ValueError(f"indices must have shape (n_batches, {b}), got {idx.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= objective.n):
            raise ValueError(f"indices must lie in [0, {objective.n})")
        return np.ascontiguousarray(idx), self._batch_spectrum(objective, b)

    #: The pass kernel, its hyper-parameters after the batch spectrum (``_hyper``) and the
    #: state arrays it updates in place, in the kernel's argument order; a state field
    #: ``n_iter`` is passed last and set from the kernel's return value.
    _kernel = None
    _arrays = ("coef",)

    def _hyper(self):
        return (float(self.lr),)

    def _pass(self, objective, state, indices):
        batches, sigma_b = self._batches(objective, indices)
        a = copy_arrays(state, *self._arrays)
        counter = (int(state.n_iter),) if "n_iter" in state._fields else ()
        out = self._kernel(objective.loss.code, objective.X, objective.y, objective.reg, sigma_b,
                           float(objective.nu), int(objective.div), *self._hyper(), batches,
                           *a.values(), *counter)
        if counter:
            a["n_iter"] = int(out)
        return state._replace(epoch=state.epoch + 1, **a)


@register
class SGD(_PluginMiniBatch):
    r"""Mini-batch stochastic (sub)gradient descent with the plug-in batch gradient.

    .. math::

        w_{t+1} = w_t - \eta\,\big(g_{B_t}(w_t) + \mu w_t\big)

    with :math:`g_B` the gradient of the batch's own spectral risk (module docstring). This is
    the "SGD" baseline of Mehta et al. (2024), Section 4 (batch size 64, mini-batches without
    replacement, App. H.3).

    **Biased**: ``E[g_B(w)]`` is not ``grad F(w)`` (the spectral risk of a batch is a non-linear
    function of its losses), so for no step size does SGD converge to the minimiser of ``F``;
    it settles near a stationary point of ``E_B[R_b] + mu/2 |w|^2`` plus step-size noise.

    Parameters
    ----------
    lr : float, default 0.01
        Constant step size :math:`\eta`.
    batch_size : int, default 64
    random_state : int, Generator or None

    Examples: see the module docstring.
    """

    name = "sgd"

    def _init(self, objective, W, rng):
        return SGDState(coef=W, epoch=0, rng=rng)

    _kernel = staticmethod(_ks._epoch_sgd)


@register
class SRDA(_PluginMiniBatch):
    r"""Stochastic regularised dual averaging (Xiao 2009) with the plug-in batch gradient.

    Keeps the running average :math:`\bar g_t = \frac1{t+1}\sum_{s \le t} g_{B_s}(w_s)` of the
    *unregularised* batch gradients and sets, in closed form,

    .. math::

        w_{t+1} = \arg\min_w \langle \bar g_t, w\rangle + \frac{\mu}{2}\|w\|^2
                  + \frac{\beta_t}{2}\|w - w_0\|^2
                = \frac{\beta_t w_0 - \bar g_t}{\mu + \beta_t},
        \qquad \beta_t = \frac{1/\eta}{t + 1},

    row by row with the objective's per-row ``reg`` (the ``mu`` above). This is the reference
    code's ``StochasticRegularizedDualAveraging`` (ronakdm/prospect, ``src/optim/baselines.py``:
    ``w = -avg / (mu + (1/lr) / (t + 1))``), the "SRDA" baseline of Mehta et al. (2024), Sec. 4,
    with the proximal term centred at the starting point ``w_0`` (0 by default, which is the
    reference code exactly).

    The unpenalised intercept (``reg = 0`` on its row) needs no special case: the formula gives
    ``b_{t+1} = b_0 - eta * sum_{s <= t} g_s``, plain dual averaging with the constant
    proximal weight ``1/eta`` (an SGD-like accumulation of its gradients). It stays well
    defined because ``beta_t > 0``.

    **Biased**: the averaged plug-in gradients estimate ``grad E_B[R_b]``, not ``grad F``; SRDA
    cannot reach the minimiser of ``F`` for any step size.

    Parameters
    ----------
    lr : float, default 0.01
        :math:`\eta`; ``1/lr`` is the weight of the proximal term.
    batch_size : int, default 64
    random_state : int, Generator or None

    Examples: see the module docstring.
    """

    name = "srda"

    def _init(self, objective, W, rng):
        return SRDAState(coef=W, epoch=0, rng=rng, coef0=W.copy(), dual_avg=np.zeros_like(W),
                         n_iter=0)

    _kernel = staticmethod(_ks._epoch_srda)
    _arrays = ("coef", "coef0", "dual_avg")


@register
class SGDMomentum(_PluginMiniBatch):
    r"""Mini-batch SGD with heavy-ball momentum and the plug-in batch gradient.

    PyTorch's convention (no dampening, no Nesterov):

    .. math::

        v_{t+1} = m\, v_t + g_{B_t}(w_t) + \mu w_t, \qquad w_{t+1} = w_t - \eta\, v_{t+1},

    with :math:`v_0 = 0`. Mehta et al. (2024), App. I, Fig. 15: momentum 0.9, batch size 64,
    tuned step size.

    **Biased**: momentum averages plug-in gradients, whose mean is ``grad E_B[R_b]`` and not
    ``grad F``; it does not converge to the minimiser of ``F`` for any step size (Fig. 15).

    Parameters
    ----------
    lr : float, default 0.01
    momentum : float in [0, 1), default 0.9
    batch_size : int, default 64
    random_state : int, Generator or None

    Examples: see the module docstring.
    """

    name = "sgd_momentum"

    def __init__(self, lr=0.01, momentum=0.9, batch_size=64, random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        super()._check_params(objective)
        m = check_positive("momentum", self.momentum, allow_zero=True)
        if m >= 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {m}")

    def _init(self, objective, W, rng):
        return SGDMomentumState(coef=W, epoch=0, rng=rng, velocity=np.zeros_like(W))

    _kernel = staticmethod(_ks._epoch_sgd_momentum)
    _arrays = ("coef", "velocity")

    def _hyper(self):
        return float(self.lr), float(self.momentum)


@register
class Adam(_PluginMiniBatch):
    r"""Adam (Kingma & Ba 2015) on the plug-in batch gradient.

    With :math:`g_t = g_{B_t}(w_t) + \mu w_t` (the regulariser enters the gradient, as
    PyTorch's ``weight_decay``):

    .. math::

        m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad
        v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2, \quad
        w_{t} = w_{t-1} - \eta\, \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t)} + \epsilon}.

    Mehta et al. (2024), App. I, Fig. 15: ``(beta1, beta2) = (0.9, 0.999)`` (the defaults; so
    ``eps = 1e-8``), batch size 64, tuned step size.

    **Biased**: the moments average plug-in gradients whose mean is ``grad E_B[R_b]``, not
    ``grad F``; Adam does not converge to the minimiser of ``F`` for any step size (Fig. 15).

    Parameters
    ----------
    lr : float, default 0.001
    beta1 : float in [0, 1), default 0.9
    beta2 : float in [0, 1), default 0.999
    eps : float > 0, default 1e-8
    batch_size : int, default 64
    random_state : int, Generator or None

    Examples: see the module docstring.
    """

    name = "adam"

    def __init__(self, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, batch_size=64,
                 random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        super()._check_params(objective)
        for name in ("beta1", "beta2"):
            val = check_positive(name, getattr(self, name), allow_zero=True)
            if val >= 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {val}")
        check_positive("eps", self.eps)

    def _init(self, objective, W, rng):
        return AdamState(coef=W, epoch=0, rng=rng, m=np.zeros_like(W), v=np.zeros_like(W),
                         n_iter=0)

    _kernel = staticmethod(_ks._epoch_adam)
    _arrays = ("coef", "m", "v")

    def _hyper(self):
        return float(self.lr), float(self.beta1), float(self.beta2), float(self.eps)


__all__ = ["SGD", "SRDA", "SGDMomentum", "Adam", "SGDState", "SRDAState", "SGDMomentumState",
           "AdamState"]
