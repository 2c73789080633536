r"""Prospect and Prospect-Moreau (Mehta, Roulet, Pillutla, Harchaoui, ICLR 2024).

*Distributionally robust optimization with bias and variance reduction*, Sections 2-3
(Algorithm 1), Appendix C (Algorithm 2 and Subroutines 1-4: PAV, conversion, bubble sort),
Algorithm 3 (iteration counters) and Appendix E (Moreau envelopes / proximal oracles).

Both minimise

.. math::

    F(w) = \max_{q \in \mathcal P(\sigma)} \Big[\sum_i q_i \ell_i(w) - \nu D(q\|\mathbf 1/n)\Big]
           + \frac12 \sum_j \mu_j \|w_j\|^2

(``objective.reg`` holds the per-row :math:`\mu_j`: ``l2_reg``, and 0 for an intercept row).

Prospect
--------
Three tables approximate the full-batch quantities at the current iterate: the losses
:math:`l \approx \ell(w)`, the loss gradients :math:`g_i \approx \nabla \ell_i(w)` and the
weights :math:`\rho \approx q^{\ell(w)}`; :math:`q = q^{l}` is the exact maximiser for the
loss table (sort + pool-adjacent-violators, recomputed every step) and
:math:`\bar g = \sum_j \rho_j g_j`. One step with a uniformly drawn index ``i`` (the paper's
``i = j`` variant, "used in experiments", Sec. 3) is

.. math::

    v &= n q_i \nabla\ell_i(w^{(t)}) - n\rho_i g_i + \bar g, \qquad
    w^{(t+1)} = \operatorname{prox}_{\eta\mu/2\|\cdot\|^2}(w^{(t)} - \eta v)
              = (w^{(t)} - \eta v) / (1 + \eta\mu), \\
    \bar g &\leftarrow \bar g + q_i\nabla\ell_i(w^{(t)}) - \rho_i g_i, \quad
    g_i \leftarrow \nabla\ell_i(w^{(t)}), \quad \rho_i \leftarrow q_i, \quad
    l_i \leftarrow \ell_i(w^{(t)}), \quad q \leftarrow q^{l}.

This is Algorithm 3 with :math:`i_t = j_t`: every table entry written at step ``t`` is
evaluated at the iterate :math:`w^{(t)}` at which the step's gradient is computed (one oracle
call per step), and :math:`\rho_i` receives the weight :math:`q_i^{(t)}` used in :math:`v`
(before the re-solve). Hence, at any time, ``losses[i]`` and ``derivs[i]`` are the loss and
``dloss/dz`` at the iterate of the last step that drew ``i`` (the starting point if none did),
``rho[i]`` the weight that step used, ``q`` the exact weights of the loss table.

Implementation (Appendix C): the weights are the exact PAV solution (Subroutines 1-3) of the
loss table, kept incrementally rather than re-solved. For a CVaR spectrum (a box: every weight
in ``[0, c]``) with ``shift_cost > 0`` they are a clipped function of the loss with one scalar
threshold (chi-square: ``clip((l - tau) / (2 n nu), 0, c)``; KL: ``min(c, exp((l - m) / nu))``),
and ``riskopt._kernels.box_oracle`` keeps that scalar under a change of one loss with indexed
heaps: O(log n) per step whatever the ranks the loss moves by, no sorted table (``order`` and
``rank`` are rebuilt by one sort at the end of the pass). For the other spectra the sorting
permutation ``order`` and its inverse ``rank`` are kept up to date by bubbling the changed entry
(Subroutine 4, O(swaps)) and a tree of convex-minorant hulls
(``riskopt._kernels.incremental_pav``) is refreshed on the ranks the bubbling moved, the weight
of the sampled index read off it: O(swaps + log^2 n) per step. Far from the optimum, where a
step moves a loss across ~n/3 ranks, the pass is handed over (once the swaps exceed a few
hundred per step) to an oracle on the loss multiset that keeps no sorted table:
``riskopt._kernels.rank_oracle`` without a shift cost (``sigma`` at the loss's rank, averaged
over a tie, counted in a blocked sorted list: O(log n + B) per step) and
``riskopt._kernels.hull_oracle`` with one (the PAV's convex-minorant slope by a Newton
iteration over a segment tree of that list). The O(n) re-solve is kept as
the twin (``Prospect._oracle = ORACLE_FULL``; ``ORACLE_TREE`` forces the hull tree); the
gradient table stores only ``dloss/dz`` (``n x K``
scalars) since :math:`\nabla \ell_i(w) = x_i \otimes \ell'(x_i^\top W)`; :math:`\bar g` is
updated in O(pK) from ``X[i]`` (and recomputed exactly at the start of each pass to remove
round-off drift). Work per step: O(log n + pK) (box) or O(swaps + log^2 n + pK).

The regulariser is handled exactly rather than through the table: the tables hold gradients of
the unregularised losses and the l2 term is applied by its proximal operator (row-wise, so an
intercept is not shrunk). This is the reference code's default (``oracle_reg="prox"``); the
fixed point is the same (:math:`\mu w + \sum_j q_j\nabla\ell_j(w) = 0`) and storing
:math:`g_i + \mu w` would need O(np) memory.

With ``shift_cost = 0`` the weights are the spectrum by rank (ties averaged); this is the
papers' no-shift-cost setting, where Prospect converges when the optimal losses are distinct
(Prop. 2; no linear-rate guarantee).

Prospect-Moreau (Appendix E)
----------------------------
The regularised losses :math:`r_i = \ell_i + \frac12\sum_j\mu_j\|w_j\|^2` are accessed through
proximal operators. Per step, ``j`` is uniform and ``i`` is drawn from the current weights,
:math:`P[i_t = i] = q_i^{(t)}`; there is no :math:`\rho` table and :math:`\bar g = \sum_m q_m
g_m`:

.. math::

    w^{(t+1)} &= \operatorname{prox}_{\eta r_i}\big(w^{(t)} + \eta (g_i - \bar g)\big), \\
    g_j &\leftarrow \nabla \mathcal M_\eta[r_j]\big(w^{(t)} + \eta (g_j - \bar g)\big)
         = \big(u - \operatorname{prox}_{\eta r_j}(u)\big)/\eta, \qquad
    l_j \leftarrow \ell_j(w^{(t)}), \quad q \leftarrow q^{l},

all right-hand sides at step ``t``'s values. For a linear model the prox reduces to a
``K``-dimensional problem: with :math:`D_j = 1/(1+\eta\mu_j)`,
:math:`\operatorname{prox}(u) = D(u - \eta\, x \otimes \delta)` where :math:`\delta =
\ell'(s)` and :math:`s + b\,\ell'(s) = a`, :math:`a = \sum_j x_j D_j u_j`,
:math:`b = \eta\sum_j x_j^2 D_j`. It is solved in closed form for the squared loss and the
absolute loss (soft-thresholding), and by damped Newton to machine precision for the logistic
and multinomial losses (the paper approximates these by one Newton step). Because the
regulariser sits inside the prox, the Moreau gradients are not rank-one in ``x_j``; the table
is ``(n, p, K)``. The draw ``i ~ q`` is done inside the kernel by inverse CDF from a 53-bit
uniform integer drawn in Python, so the index stream stays reproducible and testable. One step
makes two oracle calls (prox at ``i``; loss and prox at ``j``), so one update (``n`` steps)
counts as two passes.

Examples
--------
>>> import numpy as np, riskopt as ro
>>> rng = np.random.default_rng(0); X, y = rng.normal(size=(60, 3)), rng.normal(size=60)
>>> obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=0.5), X, y, l2_reg=1 / 60)
>>> res = ro.solvers.Prospect(lr=0.03, random_state=0).run(obj, max_epochs=30)
>>> f_star = ro.solvers.LBFGS().run(obj).value
>>> bool(res.value - f_star < 1e-6)
True
"""
from typing import NamedTuple

import numpy as np

from .. import samplers
from .._kernels import losses as _kl
from .._kernels import minibatch_vr as _kb
from .._kernels import oracles as _ko
from .._kernels import prospect as _kp
from ._registry import register
from .._validation import check_int
from .base import Solver, check_batches, copy_arrays

_SUPPORTED_LOSSES = (_kl.SQUARED, _kl.ABSOLUTE, _kl.LOGISTIC, _kl.MULTINOMIAL)


def _check_loss(objective, solver):
    if objective.loss.code not in _SUPPORTED_LOSSES:
        raise ValueError(
            f"{solver} supports the squared, absolute, logistic and multinomial losses, "
            f"got loss {objective.loss.name!r}"
        )


def _sorting(losses):
    order = _ko.sorted_order(losses)[0]
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    return order, rank


class ProspectState(NamedTuple):
    coef: np.ndarray     #: (p, K) iterate
    epoch: int
    rng: np.random.Generator
    losses: np.ndarray   #: (n,) loss table l
    derivs: np.ndarray   #: (n, K) dloss/dz table (g_i = outer(X[i], derivs[i]))
    q: np.ndarray        #: (n,) exact weights of the loss table
    rho: np.ndarray      #: (n,) weights paired with the gradient table
    gbar: np.ndarray     #: (p, K) sum_j rho_j g_j
    order: np.ndarray    #: (n,) argsort of the loss table
    rank: np.ndarray     #: (n,) inverse of order


@register
class Prospect(Solver):
    r"""Prospect: bias- and variance-reduced stochastic gradient for spectral risks.

    Mehta et al. (ICLR 2024), Algorithm 1 / Algorithm 3 with ``i = j``, implemented as in
    Appendix C (incremental bubble sort, exact PAV weights) with the weights kept by an
    incremental hull tree (O(swaps + log^2 n + pK) work per step). See the module docstring
    for the exact update and which iterate each table entry refers to.

    Parameters
    ----------
    lr : float, default 0.01
        Constant step size :math:`\eta` (the method's only hyper-parameter).
    batch_size : int, default 1
        Samples per step. ``1`` is the method above. ``b > 1`` is the mini-batch form
        (``riskopt._kernels.minibatch_vr``): a step draws ``b`` distinct indices (one update:
        a random permutation cut into ``n // b`` batches), uses the mean of their terms
        ``(1/b) sum_B (n q_i grad l_i(w) - n rho_i g_i) + gbar`` and then updates the ``b``
        table entries and re-solves ``q`` once (O(n) per step, O(n^2 / b) per pass). The
        SOREL paper runs every baseline at ``b = 64`` (its App. B). Capped at ``n``.
    random_state : int, Generator or None
        Seed of the index stream (one uniform index per step, ``n`` steps per pass).

    Notes
    -----
    Linear convergence for any ``shift_cost > 0`` and smooth losses with ``l2_reg > 0``
    (Theorem 1); supports the squared, absolute, logistic and multinomial losses, chi-square
    and KL shift penalties, and ``shift_cost = 0`` (weights = spectrum by rank).

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> rng = np.random.default_rng(1); X, y = rng.normal(size=(50, 2)), rng.normal(size=50)
    >>> obj = ro.Objective("squared", ro.ESRM(1.0, shift_cost=0.5), X, y, l2_reg=0.02)
    >>> state = ro.solvers.Prospect(lr=0.05, random_state=0).init_state(obj)
    >>> state.q.shape, state.derivs.shape
    ((50,), (50, 1))
    """

    name = "prospect"
    #: private switch: ``_kp.ORACLE_INCREMENTAL`` (the box oracle for CVaR with a shift cost,
    #: O(log n) per step; the hull tree otherwise, O(s + log^2 n), handing a pass with many
    #: swaps to the rank / hull oracle), ``_kp.ORACLE_HULL`` (the rank / hull oracle for the
    #: whole pass), ``_kp.ORACLE_TREE`` (the
    #: hull tree always) or ``_kp.ORACLE_FULL`` (the O(n) PAV twin);
    #: benchmarks/prospect_incremental.py compares them
    _oracle = _kp.ORACLE_INCREMENTAL
    #: private: an int64 array of length 8 to accumulate counters into (swaps, tree nodes
    #: refreshed, bridge-descent steps, steps, tree rebuilds, nodes that kept their bridge,
    #: tangent walks, buckets rebuilt; see ``_kp._epoch_prospect``), or None
    _stats = None

    def __init__(self, lr=0.01, batch_size=1, random_state=None):
        self._store(locals())

    def _check_params(self, objective):
        super()._check_params(objective)
        check_int("batch_size", self.batch_size, minimum=1)

    def _check_objective(self, objective):
        _check_loss(objective, "Prospect")

    def _b(self, objective):
        return min(int(self.batch_size), objective.n)

    def passes_per_update(self, objective):
        """``(n // b) * b / n``: 1 when ``batch_size = 1``."""
        n, b = objective.n, self._b(objective)
        return 1.0 if int(self.batch_size) == 1 else (n // b) * b / n

    def draw_indices(self, objective, state):
        """``n`` uniform indices (``batch_size = 1``), else ``(n // b, b)`` permutation batches."""
        if int(self.batch_size) == 1:
            return samplers.uniform(state.rng, objective.n, objective.n)
        return samplers.permutation_batches(state.rng, objective.n, self._b(objective))

    def _init(self, objective, W, rng):
        losses, derivs = objective.losses_derivs(W)
        q = objective.risk_weights(losses)[1]
        rho = q.copy()
        gbar = np.ascontiguousarray(objective.X.T @ (rho[:, None] * derivs))
        order, rank = _sorting(losses)
        return ProspectState(coef=W, epoch=0, rng=rng, losses=losses,
                             derivs=np.ascontiguousarray(derivs), q=q, rho=rho, gbar=gbar,
                             order=order, rank=rank)

    def _pass(self, objective, state, indices):
        a = copy_arrays(state, "coef", "losses", "derivs", "q", "rho", "gbar", "order", "rank")
        if int(self.batch_size) > 1:
            _kb._epoch_prospect_batch(
                objective.loss.code, objective.X, objective.y, objective.reg, objective.sigma,
                objective.nu, objective.div, float(self.lr),
                check_batches(indices, self._b(objective), objective.n), *a.values())
            return state._replace(epoch=state.epoch + 1, **a)
        stats = self._stats if self._stats is not None else np.zeros(0, dtype=np.int64)
        _kp._epoch_prospect(objective.loss.code, objective.X, objective.y, objective.reg,
                            objective.sigma, objective.nu, objective.div, float(self.lr),
                            indices, *a.values(), int(self._oracle), stats)
        return state._replace(epoch=state.epoch + 1, **a)


class ProspectMoreauState(NamedTuple):
    coef: np.ndarray     #: (p, K) iterate
    epoch: int
    rng: np.random.Generator
    losses: np.ndarray   #: (n,) loss table l
    q: np.ndarray        #: (n,) exact weights of the loss table (also the sampling law of i)
    grads: np.ndarray    #: (n, p, K) Moreau-gradient table of the regularised losses
    gbar: np.ndarray     #: (p, K) sum_m q_m grads[m]
    order: np.ndarray    #: (n,) argsort of the loss table
    rank: np.ndarray     #: (n,) inverse of order


@register
class ProspectMoreau(Solver):
    r"""Prospect-Moreau: Prospect with proximal oracles of the regularised losses.

    Mehta et al. (ICLR 2024), Appendix E. Per step ``i ~ q`` and ``j ~ Unif[n]``;
    ``w <- prox_{lr r_i}(w + lr (g_i - gbar))``, ``g_j <- grad M_lr[r_j](w + lr (g_j - gbar))``,
    ``l_j <- l_j(w)`` (all at the step's starting values), then ``q`` is re-solved exactly and
    ``gbar = sum_m q_m g_m``. See the module docstring for the prox of a linear model.

    Parameters
    ----------
    lr : float, default 0.01
        Step size :math:`\eta` (also the Moreau-envelope parameter).
    random_state : int, Generator or None
        Seed of the index stream (``j`` and the uniform variable that draws ``i ~ q``).

    Notes
    -----
    Proximal oracles: closed form for the squared loss and the absolute loss (so non-smooth
    losses are supported), damped Newton to machine precision for the logistic and
    multinomial losses. Memory O(n p K) for the gradient table (the regulariser inside the prox
    makes the Moreau gradients full vectors). One update = ``n`` steps = two passes of oracle
    calls (``passes_per_update() == 2``).

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> rng = np.random.default_rng(1); X, y = rng.normal(size=(50, 2)), rng.normal(size=50)
    >>> obj = ro.Objective("absolute", ro.CVaR(0.5, shift_cost=0.5), X, y, l2_reg=0.02)
    >>> ro.solvers.ProspectMoreau(lr=0.05, random_state=0).run(obj, max_epochs=3).coef.shape
    (2,)
    """

    name = "prospect_moreau"
    #: the re-solve and the gbar update touch every weight: O(n) per step; 1.5e-8 .. 2.6e-8 s x
    #: n^2 per pass measured at n = 4e3 .. 1.6e4 (2-core Xeon)
    quadratic_pass_cost = 2e-8

    def _check_objective(self, objective):
        _check_loss(objective, "ProspectMoreau")

    def passes_per_update(self, objective):
        return 2.0

    def draw_indices(self, objective, state):
        """Rows ``(j, u)``: ``j`` uniform in ``[0, n)``, ``u`` uniform in ``[0, 2**53)``.

        The kernel draws ``i ~ q`` as the first index whose cumulative weight exceeds
        ``u * 2**-53 * sum(q)``.
        """
        n = objective.n
        out = np.empty((n, 2), dtype=np.int64)
        out[:, 0] = samplers.uniform(state.rng, n, n)
        out[:, 1] = state.rng.integers(0, 2**53, size=n)
        return out

    def _init(self, objective, W, rng):
        losses, derivs = objective.losses_derivs(W)
        q = objective.risk_weights(losses)[1]
        grads = np.einsum("ip,ik->ipk", objective.X, derivs) + (objective.reg[:, None] * W)[None]
        grads = np.ascontiguousarray(grads)
        gbar = np.ascontiguousarray(np.einsum("i,ipk->pk", q, grads))
        order, rank = _sorting(losses)
        return ProspectMoreauState(coef=W, epoch=0, rng=rng, losses=losses, q=q, grads=grads,
                                   gbar=gbar, order=order, rank=rank)

    def _pass(self, objective, state, indices):
        jdx = np.ascontiguousarray(np.asarray(indices, dtype=np.int64).reshape(-1, 2))
        a = copy_arrays(state, "coef", "losses", "q", "grads", "gbar", "order", "rank")
        _kp._epoch_prospect_moreau(objective.loss.code, objective.X, objective.y, objective.reg,
                                   objective.sigma, objective.nu, objective.div, float(self.lr),
                                   jdx, *a.values())
        return state._replace(epoch=state.epoch + 1, **a)
