r"""Group DRO (Sagawa et al., ICLR 2020): online, worst-group and CVaR-over-groups weights."""
import math

import numpy as np
import torch
from torch import nn

from ... import risks as _risks
from ..._kernels import group_dro as _kg
from ..._kernels import oracles as _ko
from ..._validation import check_int, check_positive
from .. import distributed as _dist
from .. import _oracles as _to
from ._common import (_GatherMixin, _as_index_tensor, _check_losses, _host_attach,
                      _host_eager, _host_out, _host_view)

__all__ = ["GroupDROLoss"]

_GROUP_MODES = ("online", "max", "cvar")


class GroupDROLoss(_GatherMixin, nn.Module):
    r"""Group distributionally robust loss over ``n_groups`` groups (Sagawa et al., ICLR 2020).

    For a batch with per-sample losses ``l`` and group ids ``g`` let
    :math:`L_k = \frac{1}{N_k}\sum_{i: g_i = k} l_i` be the average loss of group ``k`` in the
    batch (:math:`N_k` samples; :math:`L_k = 0` for a group absent from the batch). The loss is
    :math:`\sum_k q_k L_k` with group weights ``q`` given by ``mode``:

    * ``"online"`` (default): the online group DRO algorithm of Sagawa et al. (Algorithm 1):
      a persistent buffer ``group_weights`` (uniform at start) updated by exponentiated
      gradient ascent on every training call,

      .. math:: q_k \leftarrow \frac{q_k \exp(\eta (L_k + C_k))}{\sum_j q_j \exp(\eta(L_j + C_j))}

      with ``step_size`` :math:`\eta` (their default 0.01) and the optional generalisation
      ``adjustment`` :math:`C_k` (theirs is :math:`C/\sqrt{n_k}` with :math:`n_k` the training
      size of group k); the *updated* weights then weight the loss, as in their code. In
      ``eval()`` mode the weights are used but not updated.
    * ``"max"``: the worst present group, :math:`\max_k L_k` (ties share the weight).
    * ``"cvar"``: CVaR over the present groups, the average of the worst ``tail_fraction`` of
      the group losses (exact oracle by tensor operations on the losses' device, fractional
      boundary group, ties sharing their weight); ``tail_fraction = 1/m``
      with ``m`` present groups is ``"max"``, ``1`` the average of the group means.

    The gradient with respect to ``l_i`` is :math:`q_{g_i}/N_{g_i}` (the weights are constants
    for autograd). With ``gather=True`` the group sums and counts are all-reduced over the ranks
    (so :math:`L_k` and ``q`` are the global ones, identical on all ranks) and each rank's part
    is scaled by the world size for DDP averaging (``grad_average``).

    Parameters
    ----------
    n_groups : int
    mode : {"online", "max", "cvar"}, default "online"
    step_size : float, default 0.01
        :math:`\eta` of the online mode.
    tail_fraction : float in (0, 1], default 0.5 (used by ``"cvar"``)
    adjustment : array-like of shape (n_groups,), optional
        :math:`C_k` added to the group losses in the online weight update only.
    gather, group, grad_average, check_finite : see :class:`SpectralRiskLoss`. The range
        / NaN checks read the batch statistics, so they run only on CPU tensors in eager
        mode (and with ``gather``); on a device and under ``torch.compile`` an out-of-range
        group or a NaN loss makes the risk NaN (no host synchronisation in the step).

    Examples
    --------
    >>> import torch
    >>> from riskopt.torch import GroupDROLoss
    >>> crit = GroupDROLoss(2, mode="max")
    >>> l = torch.tensor([1.0, 5.0, 2.0, 2.0], requires_grad=True)
    >>> r = crit(l, torch.tensor([0, 0, 1, 1]))
    >>> r.backward()
    >>> r.item(), l.grad.tolist()
    (3.0, [0.5, 0.5, 0.0, 0.0])
    """

    def __init__(self, n_groups, mode="online", step_size=0.01, tail_fraction=0.5,
                 adjustment=None, gather=False, group=None, grad_average=True,
                 check_finite=True):
        super().__init__()
        self.n_groups = check_int("n_groups", n_groups, minimum=1)
        if mode not in _GROUP_MODES:
            raise ValueError(f"mode must be one of {_GROUP_MODES}, got {mode!r}")
        self.mode = mode
        self.step_size = check_positive("step_size", step_size)
        tf = check_positive("tail_fraction", tail_fraction)
        if tf > 1:
            raise ValueError(f"tail_fraction must be in (0, 1], got {tf}")
        self.tail_fraction = tf
        self._init_gather(gather, group, grad_average, check_finite)
        m = self.n_groups
        if adjustment is None:
            adj = torch.zeros(m, dtype=torch.float64)
        else:
            adj = torch.as_tensor(np.asarray(adjustment, dtype=np.float64))
            if adj.shape != (m,) or not bool(torch.isfinite(adj).all()):
                raise ValueError(f"adjustment must be a finite array of shape ({m},)")
        self.register_buffer("adjustment", adj)
        self.register_buffer("group_weights", torch.full((m,), 1.0 / m, dtype=torch.float64))
        self._cvar_spectra = {}  # CVaR(tail_fraction).spectrum(k) by (tail_fraction, k)

    def reset_weights(self):
        """Reset the online group weights to uniform."""
        with torch.no_grad():
            self.group_weights.fill_(1.0 / self.n_groups)

    def _group_q(self, means, present):
        m = self.n_groups
        if self.mode == "online":
            q = self.group_weights.to(means.device)
            if self.training:
                adjusted = means + self.adjustment.to(means.device)
                logits = torch.log(q) + self.step_size * adjusted
                q = torch.softmax(logits, dim=0)
                with torch.no_grad():
                    self.group_weights.copy_(q.to(self.group_weights.device))
            return q
        if self.mode == "max":
            masked = torch.where(present, means, torch.full_like(means, -math.inf))
            top = masked == masked.max()
            return top.to(means.dtype) / top.sum()
        if not _host_eager(means):  # tensor program: no host read of the present groups
            return _to.cvar_present(means, present, self.tail_fraction)
        # CPU, eager: the numba oracle on the present groups (faster than the tensor program)
        return torch.from_numpy(self._host_q(means.numpy(), present.numpy()))

    def _host_q(self, means, present):
        """:meth:`_group_q` in NumPy / numba (CPU, eager; the online weights updated in
        place)."""
        if self.mode == "online":
            gw = self.group_weights.numpy()
            if self.training:
                _kg.online_update(gw, means, self.adjustment.numpy(), self.step_size)
            return gw.copy()
        if self.mode == "max":
            masked = np.where(present, means, -np.inf)
            top = masked == masked.max()
            return top / np.count_nonzero(top)
        mp = np.ascontiguousarray(means[present])
        k = mp.shape[0]
        key = (self.tail_fraction, k)
        sigma = self._cvar_spectra.get(key)
        if sigma is None:
            sigma = self._cvar_spectra[key] = _risks.CVaR(self.tail_fraction).spectrum(k)
        qp = np.empty(k)
        _ko._risk_weights(mp, sigma, 0.0, _ko.CHI2, qp)
        q = np.zeros(self.n_groups)
        q[present] = qp
        return q

    def _forward_host(self, losses, g):
        """CPU, eager, no gather: the group means, the weights and ``q_g / N_g`` per sample
        by the numba loops of :mod:`riskopt._kernels.group_dro`; one autograd node."""
        m = self.n_groups
        means = np.empty(m)
        counts = np.empty(m)
        code = _kg.group_means(_host_view(losses), g, means, counts)
        if code == 1:
            raise ValueError(f"groups out of range [0, {m})")
        if code == 2 and self.check_finite:
            raise ValueError("losses contain NaN or infinite value(s)")
        q = self._host_q(means, counts > 0)
        w = _host_out(self, losses)
        return _host_attach(losses, _kg.sample_weights(q, means, counts, g, w), w)

    def forward(self, losses, groups):
        _check_losses(losses, allow_empty=self.gather)
        m = self.n_groups
        b = int(losses.shape[0])
        if (not self.gather and _host_eager(losses) and self.group_weights.device.type == "cpu"
                and not (isinstance(groups, torch.Tensor) and groups.device.type != "cpu")):
            g = _as_index_tensor("groups", groups, b).numpy()
            return self._forward_host(losses, g)
        g = _as_index_tensor("groups", groups, b, losses.device)
        out_of_range = ((g < 0) | (g >= m)).sum().to(torch.float64).reshape(1)
        local_sums = torch.zeros(m, dtype=losses.dtype, device=losses.device)
        gc = g.clamp(0, m - 1)
        local_sums = local_sums.index_add(0, gc, losses)
        # index_add, not torch.bincount: CUDA's bincount reads the maximum on the host (a
        # device sync, found by benchmarks/torch_device.py under set_sync_debug_mode("error"))
        counts = torch.zeros(m, dtype=torch.float64, device=losses.device).index_add(
            0, gc, torch.ones(b, dtype=torch.float64, device=losses.device))
        stats = torch.cat([local_sums.detach().to(torch.float64), counts, out_of_range])
        if self.gather:
            stats = _dist.all_reduce_sum(stats, self.group)
        sums, counts = stats[:m], stats[m:2 * m]
        if self.gather or _host_eager(losses):  # reading the stats costs no device sync
            if float(stats[-1]) > 0:
                raise ValueError(f"groups out of range [0, {m})")
            if float(counts.sum()) == 0:
                raise ValueError("losses is empty on every rank")
            if self.check_finite and not bool(torch.isfinite(sums).all()):
                raise ValueError("losses contain NaN or infinite value(s)")
        present = counts > 0
        means = sums / counts.clamp(min=1.0)
        q = self._group_q(means, present)
        # on a device / under compile the range is not checked (no sync): an out-of-range
        # group makes the risk NaN instead of silently joining a clamped group
        value = torch.dot(q, means) + torch.where(stats[-1] > 0, math.nan, 0.0)
        per_group = (q / counts.clamp(min=1.0)).to(losses.dtype)
        s = torch.dot(per_group, local_sums)
        return self._scale() * (s - s.detach()) + value.to(losses.dtype)

    def extra_repr(self):
        return f"n_groups={self.n_groups}, mode={self.mode!r}, step_size={self.step_size:g}"


