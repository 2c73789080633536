r"""KL-penalised and KL-constrained DRO of a batch (the maths: :mod:`riskopt.objectives.kl_dro`)."""
import math

import numpy as np
import torch
from torch import nn

from ..._kernels import kl_dro as _kk
from ..._validation import check_int, check_positive
from ...objectives.kl_dro import kl_dro_weights
from .. import _oracles as _to
from ._common import (_ORACLES, _REDUCTIONS, _GatherMixin, _attach_dot, _check_choice,
                      _check_finite_np, _check_losses, _check_value_finite, _host_attach,
                      _host_eager, _host_out, _host_view, _reduce)

__all__ = ["KLDROLoss", "kl_dro"]

#: Alias of :func:`riskopt.objectives.kl_dro.kl_dro_weights` (NumPy in, NumPy out), kept at
#: ``riskopt.torch.kl_dro`` for compatibility.
kl_dro = kl_dro_weights


class KLDROLoss(_GatherMixin, nn.Module):
    r"""KL-divergence DRO loss of a batch: penalised or constrained.

    * ``KLDROLoss(shift_cost=lam)``: :math:`\lambda\log\frac1b\sum_i e^{l_i/\lambda} = \max_q
      q^\top l - \lambda KL(q\|\mathbf 1/b)` (the same as ``SpectralRiskLoss(ro.MaxLoss(
      shift_cost=lam, divergence="kl"))``); gradient ``softmax(l / lam)``, computed in float64
      on the losses' device (:func:`riskopt.torch._oracles.kl_penalised`).
    * ``KLDROLoss(radius=rho, shift_cost=lam0)``: :math:`\max_{KL(q\|\mathbf 1/b)\le\rho}
      q^\top l - \lambda_0 KL(q\|\mathbf 1/b)` through its 1-D dual over :math:`\lambda \ge
      \lambda_0` (SCDRO paper, Eq. 2), solved in float64 on the losses' device by
      :func:`riskopt.torch._oracles.kl_constrained` (``newton_steps`` bisection-safeguarded
      Newton steps on :math:`a = 1/\lambda`, every row at once, no host round trip; on CPU
      tensors in eager mode it stops early once converged), or with ``oracle="numba"`` (what
      ``"auto"`` picks for CPU tensors in eager mode) by the numba kernels of
      :mod:`riskopt._kernels.kl_dro` (Halley steps started from the previous call's root,
      to :math:`|KL - \rho| \le 10^{-13}` for float64 losses, :math:`10^{-10}` for float32;
      checked against the NumPy reference :func:`riskopt.objectives.kl_dro.kl_dro_weights`);
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
        self._a_warm = 0.0  # the last root a = range / lambda: the next solve's start

    def _weights(self, l64):
        """``(value, q, lam)`` of each row (float64, no autograd): the tensor program on a
        device / under compile (or with ``oracle="torch"``), else the numba kernels on the
        host (:meth:`_host`; the gathered batch on CPU tensors in eager mode, and
        ``oracle="numba"`` on a device)."""
        if self.oracle == "numba" and torch.compiler.is_compiling():
            raise ValueError("oracle='numba' cannot run under torch.compile; use 'auto'")
        if self.oracle == "torch" or (self.oracle == "auto" and not _host_eager(l64)):
            if self.radius is None:
                val, q = _to.kl_penalised(l64, self.shift_cost)
                return val, q, self.shift_cost
            return _to.kl_constrained(l64, self.radius, self.shift_cost, self.newton_steps)
        val, q, lam = self._host(np.ascontiguousarray(l64.cpu().numpy()))
        if l64.ndim == 1:
            return val, torch.from_numpy(q), lam
        return torch.from_numpy(val), torch.from_numpy(q), torch.from_numpy(lam)

    def _host(self, l_np, tol=1e-13, q=None):
        """``(value, q, lam)`` of every row of the float64 or float32 array ``l_np`` by the
        numba kernels of :mod:`riskopt._kernels.kl_dro` (floats for a 1-D batch, else arrays;
        ``q`` float64, into ``q`` if given), the constrained root started from the previous
        call's (``tol``: on ``|KL - rho|``, relative to ``max(1, rho)``)."""
        b = l_np.shape[-1]
        dn = self.__dict__.get("_dn")           # scratch, kept for the last b
        if dn is None or dn.shape[0] != b:
            dn = self.__dict__["_dn"] = np.empty(b)
        if l_np.ndim == 1:
            q = np.empty(b) if q is None else q
            val, lam = self._row(l_np, q, dn, tol, l_np)
            return val, q, lam
        rows = l_np.reshape(-1, b)
        q = np.empty(rows.shape) if q is None else q.reshape(rows.shape)
        val = np.empty(rows.shape[0])
        lam = np.empty(rows.shape[0])
        for i in range(rows.shape[0]):
            val[i], lam[i] = self._row(rows[i], q[i], dn, tol, l_np)
        shape = l_np.shape[:-1]
        return val.reshape(shape), q.reshape(l_np.shape), lam.reshape(shape)

    def _row(self, row, q, dn, tol, l_np):
        """``(value, lam)`` of one row (writes its weights ``q``); ``l_np``: all the losses,
        checked for NaN / inf when the value is not finite."""
        if self.radius is None:
            val = _kk.kl_penalised(row, self.shift_cost, q, dn)
            lam = self.shift_cost
        else:
            val, lam, a = _kk.kl_constrained(row, self.radius, self.shift_cost,
                                             self._a_warm, q, dn, tol)
            if math.isnan(val):  # a range that overflows: the NumPy reference
                if self.check_finite:   # (or non-finite losses: raise)
                    _check_finite_np("losses", l_np)
                val, q[:], lam = kl_dro_weights(np.asarray(row, dtype=np.float64),
                                                self.shift_cost, self.radius)
            elif 0.0 < a < math.inf:
                self.__dict__["_a_warm"] = a   # (not nn.Module.__setattr__: 10 us)
        # the kernels' value is non-finite for non-finite losses (NaN: the passes; inf: the
        # range): one check of the value instead of a pass over the losses
        if self.check_finite and not math.isfinite(val):
            _check_finite_np("losses", l_np)
        return val, lam

    def forward(self, losses):
        _check_losses(losses, allow_empty=self.gather, batched=not self.gather)
        if not self.gather and self.oracle != "torch" and _host_eager(losses):
            # CPU, eager: the numba kernels, one autograd node; float32 losses need the
            # root to float32 precision only
            tol = 1e-13 if losses.dtype == torch.float64 else 1e-10
            val, q, lam = self._host(_host_view(losses), tol, _host_out(self, losses))
            self.__dict__["last_lam"] = lam if isinstance(lam, float) else torch.from_numpy(lam)
            return _reduce(_host_attach(losses, val, q), self.reduction)
        if self.gather:
            l_np, _, local = self._gather_losses(losses)
            l64 = torch.from_numpy(l_np).to(losses.device)
        else:
            l64 = losses.detach().to(torch.float64)
        val, q, lam = self._weights(l64)
        if self.check_finite and isinstance(val, torch.Tensor):
            _check_value_finite(val, l64)  # a NaN / inf loss makes the risk non-finite
        self.last_lam = lam
        if self.gather:
            return _attach_dot(losses, q[local], val, self._scale())
        return _reduce(_attach_dot(losses, q, val), self.reduction)

    def extra_repr(self):
        if self.radius is None:
            return f"shift_cost={self.shift_cost:g}"
        return f"radius={self.radius:g}, shift_cost={self.shift_cost:g}, gather={self.gather}"
