r"""KL-penalised and KL-constrained DRO of a batch (the maths: :mod:`riskopt.objectives.kl_dro`)."""
import math

import torch
from torch import nn

from ..._validation import check_positive
from ...objectives.kl_dro import kl_dro_weights
from ._common import _GatherMixin, _attach, _check_losses, _work_dtype

__all__ = ["KLDROLoss", "kl_dro"]

#: Alias of :func:`riskopt.objectives.kl_dro.kl_dro_weights` (NumPy in, NumPy out), kept at
#: ``riskopt.torch.kl_dro`` for compatibility.
kl_dro = kl_dro_weights


class KLDROLoss(_GatherMixin, nn.Module):
    r"""KL-divergence DRO loss of a batch: penalised or constrained.

    * ``KLDROLoss(shift_cost=lam)``: :math:`\lambda\log\frac1b\sum_i e^{l_i/\lambda} = \max_q
      q^\top l - \lambda KL(q\|\mathbf 1/b)` (the same as ``SpectralRiskLoss(ro.MaxLoss(
      shift_cost=lam, divergence="kl"))``); gradient ``softmax(l / lam)``. Without ``gather``
      this is computed by ``torch.logsumexp`` on the losses' device (no host round trip).
    * ``KLDROLoss(radius=rho, shift_cost=lam0)``: :math:`\max_{KL(q\|\mathbf 1/b)\le\rho}
      q^\top l - \lambda_0 KL(q\|\mathbf 1/b)` through its 1-D dual over :math:`\lambda \ge
      \lambda_0` (SCDRO paper, Eq. 2), solved on the CPU in float64 by
      :func:`riskopt.objectives.kl_dro.kl_dro_weights`;
      gradient :math:`q = \mathrm{softmax}(l/\lambda^\star)`. The optimal multiplier of the
      last call is kept in ``last_lam`` (a float, for logging).

    Parameters
    ----------
    shift_cost : float, optional
        :math:`\lambda > 0` (penalised) or :math:`\lambda_0 \ge 0` (constrained; default 0).
    radius : float > 0, optional
        :math:`\rho`; ``None`` for the penalised version.
    gather, group, grad_average, check_finite : see :class:`SpectralRiskLoss`.

    Examples
    --------
    >>> import torch
    >>> from riskopt.torch import KLDROLoss
    >>> l = torch.tensor([0.0, 1.0, 2.0, 5.0], dtype=torch.float64)
    >>> r = KLDROLoss(radius=0.1)(l)
    >>> float(r) > float(l.mean())
    True
    """

    def __init__(self, shift_cost=None, radius=None, gather=False, group=None,
                 grad_average=True, check_finite=True):
        super().__init__()
        if radius is None:
            if shift_cost is None:
                raise ValueError("KLDROLoss needs shift_cost (penalised) or radius (constrained)")
            self.shift_cost = check_positive("shift_cost", shift_cost)
            self.radius = None
        else:
            self.radius = check_positive("radius", radius)
            self.shift_cost = (0.0 if shift_cost is None
                               else check_positive("shift_cost", shift_cost, allow_zero=True))
        self._init_gather(gather, group, grad_average, check_finite)
        self.last_lam = None

    def forward(self, losses):
        _check_losses(losses, allow_empty=self.gather)
        if self.radius is None and not self.gather:
            if self.check_finite and not bool(torch.isfinite(losses).all()):
                raise ValueError("losses contain NaN or infinite value(s)")
            lam = self.shift_cost
            self.last_lam = lam
            dt = _work_dtype(losses)  # float16: l / lam overflows 65504
            fi = torch.finfo(dt)
            wide = dt if fi.tiny <= lam <= fi.max else torch.float64  # lam = 1e-300 in float32
            x = losses.to(wide)
            c = x.detach().max()
            z = (x - c) / lam  # <= 0: l / lam = 1e5 / 1e-300 overflowed even in float64
            lme = torch.logsumexp(z, dim=0) - math.log(losses.shape[0])
            # lam far above the range of the losses: log1p(mean(expm1(z))) keeps the digits
            # that logsumexp - log(b) cancels (lam = 1e20 gave the max loss, not the mean);
            # chosen on the device (no host round trip)
            near = torch.log1p(torch.expm1(z).mean())
            zmin = z.detach().min()
            val = c + lam * torch.where(zmin > -0.5, near, lme)
            # lam > 1e8 x the range: z may underflow (losses ~1e-300, lam = 1e300 gave the max
            # loss): mean(d) + Var(d) / (2 lam), on d zeroed unless chosen (no NaN gradient)
            d = torch.where(zmin > -1e-8, x - c, torch.zeros_like(x))
            dm = d.mean()
            quad = c + dm + ((d - dm) * ((d - dm) / lam)).mean() / 2
            return torch.where(zmin > -1e-8, quad, val).to(dt)
        l_np, _, local = self._gather_losses(losses)
        val, q, lam = kl_dro_weights(l_np, self.shift_cost, self.radius)
        self.last_lam = lam
        return _attach(losses, torch.from_numpy(q[local]), val, self._scale())

    def extra_repr(self):
        if self.radius is None:
            return f"shift_cost={self.shift_cost:g}"
        return f"radius={self.radius:g}, shift_cost={self.shift_cost:g}, gather={self.gather}"

