"""OOA, the stochastic primal-dual baseline for group DRO with the CVaR over groups (SONEX/ALEXR2
paper, Sec. 6), and the exact projection on the capped simplex that it uses. Split from
:mod:`riskopt.torch.optim.fcco` (same API, re-exported by :mod:`riskopt.torch.optim`).
"""
import torch

from ..._validation import check_int, check_positive
from . import _updates_fcco
from .base import IndexedStateOptimizer
from .fcco import _unit

def project_capped_simplex(x, cap):
    r"""Euclidean projection of ``x`` (1-D tensor) on
    :math:`\Omega = \{p : \sum_g p_g = 1,\ 0 \le p_g \le \mathrm{cap}\}` (needs
    ``cap * len(x) >= 1``), exactly (up to rounding): :math:`p = \mathrm{clip}(x - \tau, 0,
    \mathrm{cap})` with the shift :math:`\tau` found among the ``2m`` breakpoints
    :math:`\{x_g, x_g - \mathrm{cap}\}` of the piecewise-linear
    :math:`\varphi(\tau) = \sum_g \mathrm{clip}(x_g - \tau, 0, \mathrm{cap})` by sorting and
    prefix sums (``O(m log m)``, on the tensor's device, no host round trip).

    >>> import torch
    >>> project_capped_simplex(torch.tensor([0.9, 0.5, 0.1, -0.5], dtype=torch.float64), 0.5)
    tensor([0.5000, 0.4500, 0.0500, 0.0000], dtype=torch.float64)
    """
    x = torch.as_tensor(x)
    m = x.numel()
    if x.ndim != 1 or m == 0:
        raise ValueError("x must be a non-empty 1-D tensor")
    if not cap * m >= 1.0 - 1e-12:
        raise ValueError(f"the capped simplex is empty: cap * m = {cap * m} < 1")
    return _updates_fcco.capped_simplex(x, cap)


def _cvar(L, cap):
    r""":math:`\max\{\sum_g p_g L_g : p \in \Delta,\ p_g \le \mathrm{cap}\}` (the CVaR of the
    group losses ``L`` at level ``1 / (cap len(L))``: the objective OOA minimises, on the
    batch's groups), by one sort; on ``L``'s device, no host sync.

    >>> import torch
    >>> float(_cvar(torch.tensor([1.0, 4.0, 2.0, 3.0]), 0.5))
    3.5
    """
    return _updates_fcco.cvar_of(L, cap)


class OOA(IndexedStateOptimizer):
    r"""OOA: the stochastic primal-dual baseline for group DRO with the CVaR over groups
    (paper Sec. 6, Eq. (10) as :math:`\min_w \max_{p\in\Omega} \sum_g p_g L_g(w)`,
    :math:`\Omega = \{p \in \Delta_m,\ p_g \le 1/(r m)\}`). The group weights ``p`` are a
    table (float64, on the parameters' device, in ``state_dict``), starting uniform. One step
    with the distinct group ids ``I`` and the batch's group losses :math:`L_g`:

    .. math::

        w &\leftarrow w - \text{lr}\Big(\frac m{|I|}\sum_{g\in I} p_g \nabla L_g(w)
             + \text{weight\_decay}\ w\Big), \\
        p &\leftarrow \mathrm{Proj}_\Omega\Big(p + \text{dual\_lr}\,\frac m{|I|}
             \sum_{g\in I} L_g\, e_g\Big)

    (:func:`project_capped_simplex`): ``opt.surrogate(I, group_losses).backward();
    opt.step()``.

    Parameters
    ----------
    params : iterable of tensors or dicts
    n_groups : int
    tail_fraction : float in (0, 1]
        ``r`` (needs ``r * n_groups >= 1``).
    lr, dual_lr : float > 0
    weight_decay : float >= 0, default 0

    Examples
    --------
    >>> import torch
    >>> from riskopt.torch.optim import OOA
    >>> _ = torch.manual_seed(0)
    >>> X = torch.randn(400, 2); y = X[:, 0] + torch.arange(400) % 4 * torch.randn(400)
    >>> model = torch.nn.Linear(2, 1)
    >>> opt = OOA(model.parameters(), n_groups=4, tail_fraction=0.5, lr=0.05, dual_lr=0.05)
    >>> for t in range(200):
    ...     L = ((model(X)[:, 0] - y) ** 2).view(-1, 4).mean(0)   # group g: rows i % 4 == g
    ...     opt.zero_grad()
    ...     opt.surrogate(torch.arange(4), L).backward()
    ...     opt.step()
    >>> p = opt.group_weights
    >>> abs(float(p.sum()) - 1.0) < 1e-12, float(p.max()) <= 0.5, float(p[3]) > float(p[0])
    (True, True, True)
    """

    def __init__(self, params, n_groups, tail_fraction, lr, dual_lr, weight_decay=0.0, **guard):
        r = _unit("tail_fraction", tail_fraction)
        check_positive("lr", lr)
        self.dual_lr = check_positive("dual_lr", dual_lr)
        check_positive("weight_decay", weight_decay, allow_zero=True)
        n = check_int("n_groups", n_groups)
        # the caps sum to 1/r >= 1, so the set is never empty; r n < 1 (e.g. r = 0.15 over 4
        # groups) makes the cap > 1: the whole simplex, i.e. the worst group's loss
        super().__init__(params, dict(lr=float(lr), weight_decay=float(weight_decay)),
                         n_indices=n, **guard)
        self.cap = 1.0 / (r * n)
        self.add_indexed_state("p", fill=1.0 / n, dtype=torch.float64)
        self._pending = None

    def surrogate(self, indices, group_losses, counts=None):
        r""":math:`\frac m{|I|}\sum_{g\in I} p_g L_g` with ``p`` constant (its ``backward()``
        leaves the primal gradient in ``.grad``); remembers the losses for the dual step.
        ``counts`` (rows behind each group loss) as for :meth:`SONEX.surrogate` under data
        parallelism."""
        self._sync_device()
        idx = self._distinct_indices(indices, "indices must be non-empty distinct group ids")
        L = group_losses
        if not isinstance(L, torch.Tensor) or L.ndim != 1 or L.numel() != idx.numel():
            raise ValueError("group_losses must be a 1-D tensor with one loss per group id")
        with torch.no_grad():
            I, (Lm,), loc = self._gather_by_index(idx, counts, [L], self.device)
            self._check_input_finite(Lm, "group losses")
            est, w = self._kernel(_updates_fcco.ooa_batch)(
                self.indexed_state("p"), I, Lm, self.cap * self.n_indices / I.numel(),
                self.n_indices / I.numel())
            self._track(est, window=est, scale=lambda: Lm.abs().mean())
            if loc is not None:
                w = w[loc[0]] * loc[1]
        self._pending = (I, Lm)
        if L.dtype in _updates_fcco._NP_FLOATS:
            # (one op; L's gradient is w, as (w * L).sum()'s: the same weights)
            return torch.dot(L, w.to(L.dtype))
        return (w.to(L.dtype) * L).sum()

    @torch.no_grad()
    def step(self, closure=None):
        """SGD step on the parameters, then the projected ascent step on ``p``."""
        loss = self._closure(closure)
        if self._pending is None:
            raise RuntimeError("call opt.surrogate(indices, group_losses).backward() first")
        self._sync_device()
        idx, L = self._pending
        groups = []
        for group in self.param_groups:
            live = [p for p in group["params"] if p.grad is not None]
            groups.append((live, [p.grad for p in live], group["lr"], group["weight_decay"]))
        self._kernel(_updates_fcco.ooa_update)(
            groups, self.indexed_state("p"), idx, L,
            self.dual_lr * (self.n_indices / idx.numel()), self.cap)
        self._pending = None
        self._end_step()
        return loss

    @property
    def group_weights(self):
        """The group weights ``p`` (a copy of the table)."""
        return self.indexed_state("p").clone()
