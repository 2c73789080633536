r"""KL-penalised and KL-constrained DRO of a batch (the maths: :mod:`riskopt.objectives.kl_dro`)."""
import math

import torch
from torch import nn

import numpy as np

from ..._validation import check_int, check_positive
from ...objectives.kl_dro import kl_dro_weights
from .. import _oracles as _to
from ._common import (_ORACLES, _REDUCTIONS, _GatherMixin, _attach_rows, _check_choice,
                      _check_finite_t, _check_losses, _host_eager, _reduce, _to_numpy64,
                      _work_dtype)

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
      \lambda_0` (SCDRO paper, Eq. 2), solved in float64 on the losses' device by
      :func:`riskopt.torch._oracles.kl_constrained` (``newton_steps`` bisection-safeguarded
      Newton steps on :math:`a = 1/\lambda`, every row at once, no host round trip; on CPU
      tensors in eager mode it stops early once converged), or with ``oracle="numba"`` by
      the NumPy :func:`riskopt.objectives.kl_dro.kl_dro_weights` (the reference; ``"auto"``
      picks it for a 1-D CPU batch in eager mode where it is faster);
      gradient :math:`q = \mathrm{softmax}(l/\lambda^\star)`. The optimal multiplier of the
      last call is kept in ``last_lam`` (a tensor of the rows' multipliers, on the losses'
      device: reading it is the caller's synchronisation, for logging).

    Parameters
    ----------
    shift_cost : float, optional
        :math:`\lambda > 0` (penalised) or :math:`\lambda_0 \ge 0` (constrained; default 0).
    radius : float > 0, optional
        :math:`\rho`; ``None`` for the penalised version.
    gather, group, grad_average, check_finite, reduction, oracle : see
        :class:`SpectralRiskLoss`. A ``(..., b)`` tensor gives the risk of each row.
    newton_steps : int, default 40
        Newton steps of the tensor dual solve (constrained; converged in 5-10 on ordinary
        losses, the rest is margin: they are a no-op once a row is converged).

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
                 grad_average=True, check_finite=True, reduction="mean", oracle="auto",
                 newton_steps=40):
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
        self.reduction = _check_choice("reduction", reduction, _REDUCTIONS)
        self.oracle = _check_choice("oracle", oracle, _ORACLES)
        self.newton_steps = check_int("newton_steps", newton_steps, minimum=1)
        self.last_lam = None

    def _penalised(self, losses):
        """Penalised value with autograd through ``logsumexp`` (gradient ``softmax``)."""
        lam = self.shift_cost
        dt = _work_dtype(losses)  # float16: l / lam overflows 65504
        fi = torch.finfo(dt)
        wide = dt if fi.tiny <= lam <= fi.max else torch.float64  # lam = 1e-300 in float32
        x = losses.to(wide)
        c = x.detach().amax(-1, keepdim=True)
        z = (x - c) / lam  # <= 0: l / lam = 1e5 / 1e-300 overflowed even in float64
        lme = torch.logsumexp(z, dim=-1) - math.log(losses.shape[-1])
        # lam far above the range of the losses: log1p(mean(expm1(z))) keeps the digits
        # that logsumexp - log(b) cancels (lam = 1e20 gave the max loss, not the mean);
        # chosen on the device (no host round trip)
        near = torch.log1p(torch.expm1(z).mean(-1))
        zmin = z.detach().amin(-1)
        c = c.squeeze(-1)
        val = c + lam * torch.where(zmin > -0.5, near, lme)
        # lam > 1e8 x the range: z may underflow (losses ~1e-300, lam = 1e300 gave the max
        # loss): mean(d) + Var(d) / (2 lam), on d zeroed unless chosen (no NaN gradient)
        tiny = (zmin > -1e-8).unsqueeze(-1)
        d = torch.where(tiny, x - c.unsqueeze(-1), torch.zeros_like(x))
        dm = d.mean(-1, keepdim=True)
        quad = c + dm.squeeze(-1) + ((d - dm) * ((d - dm) / lam)).mean(-1) / 2
        return torch.where(zmin > -1e-8, quad, val).to(dt)

    def _constrained(self, l64):
        """``(value, q, lam)`` of each row (float64, no autograd)."""
        use_torch = self.oracle == "torch" or (
            self.oracle == "auto" and (l64.ndim > 1 or not _host_eager(l64)
                                       or l64.shape[-1] > 512))
        if self.oracle == "numba" and torch.compiler.is_compiling():
            raise ValueError("oracle='numba' cannot run under torch.compile; use 'auto'")
        if use_torch:
            return _to.kl_constrained(l64, self.radius, self.shift_cost, self.newton_steps)
        rows = _to_numpy64(l64).reshape(-1, l64.shape[-1])
        out = [kl_dro_weights(r, self.shift_cost, self.radius) for r in rows]
        shape = l64.shape[:-1]
        val = torch.tensor([o[0] for o in out], dtype=torch.float64).reshape(shape)
        q = torch.from_numpy(np.stack([o[1] for o in out])).reshape(l64.shape)
        lam = torch.tensor([o[2] for o in out], dtype=torch.float64).reshape(shape)
        return val.to(l64.device), q.to(l64.device), lam.to(l64.device)

    def forward(self, losses):
        _check_losses(losses, allow_empty=self.gather, batched=not self.gather)
        if self.radius is None and not self.gather:
            if self.check_finite:
                _check_finite_t("losses", losses)
            self.last_lam = self.shift_cost
            return _reduce(self._penalised(losses), self.reduction)
        if self.gather:
            l_np, _, local = self._gather_losses(losses)
            l64 = torch.from_numpy(l_np).to(losses.device)
        else:
            l64 = losses.detach().to(torch.float64)
            if self.check_finite:
                _check_finite_t("losses", l64)
        if self.radius is None:  # penalised, gathered
            val, q = _to.kl_penalised(l64, self.shift_cost)
            lam = self.shift_cost
        else:
            val, q, lam = self._constrained(l64)
        self.last_lam = lam
        if self.gather:
            return _attach_rows(losses, val, q[local], self._scale())
        return _reduce(_attach_rows(losses, val, q), self.reduction)

    def extra_repr(self):
        if self.radius is None:
            return f"shift_cost={self.shift_cost:g}"
        return f"radius={self.radius:g}, shift_cost={self.shift_cost:g}, gather={self.gather}"
