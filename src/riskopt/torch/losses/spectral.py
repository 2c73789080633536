r"""Spectral risk of a batch (CVaR, ESRM, extremile, ... with a chi2 / KL shift penalty)."""
import numpy as np
import torch
from torch import nn

from ... import risks as _risks
from ..._kernels import oracles as _ko
from ._common import (_GatherMixin, _attach, _check_finite_np, _check_losses, _check_risk,
                      _to_numpy64)

__all__ = ["SpectralRiskLoss"]


class SpectralRiskLoss(_GatherMixin, nn.Module):
    r"""Spectral risk of a batch of per-sample losses, by the exact oracle.

    For batch losses :math:`l \in \mathbb R^b` returns

    .. math::

        R(l) = \max_{q \in \mathcal P(\sigma_b)} q^\top l - \nu D(q \| \mathbf 1/b)

    with :math:`\sigma_b` = ``risk.spectrum(b)`` (the spectrum discretised for the batch size
    ``b``) and :math:`\nu, D` the risk's ``shift_cost`` and ``divergence``; the gradient with
    respect to ``l`` is the maximiser :math:`q^\star` (Danskin), computed by
    ``riskopt._kernels.oracles._risk_weights`` (sort + pool-adjacent-violators, Prospect
    paper App. B-C) on the CPU in float64. For a full batch (``b = n``) the gradient through a
    model equals :meth:`riskopt.Objective.grad` (without the l2 term).

    This is the plain mini-batch plug-in estimate: for ``b < n`` its expected gradient is not
    the gradient of the full-data risk (Prospect paper, Sec. 2, "Bias Reduction"); use
    :class:`TableSpectralRiskLoss` for an unbiased one.

    Parameters
    ----------
    risk : riskopt risk or str
        ``ro.CVaR(0.1)``, ``ro.ESRM(1.0, shift_cost=0.5)``, ``"extremile:2"``, ... A custom
        ``ro.SpectralRisk(sigma)`` works only for batches of exactly ``len(sigma)`` losses (the
        global batch with ``gather=True``).
    gather : bool, default False
        Gather the losses across the ranks of ``group`` and use the weights of the global batch
        (see :mod:`riskopt.torch.distributed`); without an initialised process group this is a
        no-op.
    group : torch.distributed process group, optional
    grad_average : bool, default True
        With ``gather``, scale each rank's gradient by the world size so that DDP's averaging
        yields the full-batch gradient (``False``: gradients are summed over ranks).
    check_finite : bool, default True
        Raise ``ValueError`` on NaN / infinite losses.

    Examples
    --------
    >>> import torch, riskopt as ro
    >>> from riskopt.torch import SpectralRiskLoss
    >>> crit = SpectralRiskLoss(ro.Extremile(2.0, shift_cost=0.1, divergence="kl"))
    >>> l = torch.rand(64, dtype=torch.float64, requires_grad=True)
    >>> crit(l).backward()
    >>> torch.allclose(l.grad, crit.weights(l))
    True
    """

    def __init__(self, risk, gather=False, group=None, grad_average=True, check_finite=True):
        super().__init__()
        self.risk = _check_risk(risk)
        self._init_gather(gather, group, grad_average, check_finite)
        self._sigma = {}

    def _spectrum(self, b):
        sigma = self._sigma.get(b)
        if sigma is None:
            if isinstance(self.risk, _risks.SpectralRisk) and self.risk.sigma.shape[0] != b:
                raise ValueError(
                    f"this SpectralRisk has a spectrum for {self.risk.sigma.shape[0]} samples "
                    f"but the batch has {b} losses"
                    + (" (global batch over all ranks)" if self.gather else "")
                    + "; use a built-in risk (CVaR, ESRM, Extremile, ...), whose spectrum is "
                    "discretised for any batch size, or batches of the spectrum's length"
                )
            sigma = np.ascontiguousarray(self.risk.spectrum(b), dtype=np.float64)
            if len(self._sigma) > 16:
                self._sigma.clear()
            self._sigma[b] = sigma
        return sigma

    def _oracle(self, l_np, check=True):
        """``(R(l), q*)`` for a float64 numpy loss vector."""
        if check and self.check_finite:
            _check_finite_np("losses", l_np)
        q = np.empty_like(l_np)
        val = _ko.risk_weights(l_np, self._spectrum(l_np.shape[0]),
                                float(self.risk.shift_cost), self.risk.div_code, q)
        return val, q

    def weights(self, losses):
        """The maximising weights ``q*`` of the given (local, not gathered) batch losses."""
        _check_losses(losses)
        q = self._oracle(np.ascontiguousarray(_to_numpy64(losses)))[1]
        return torch.from_numpy(q).to(device=losses.device, dtype=losses.dtype)

    def forward(self, losses):
        _check_losses(losses, allow_empty=self.gather)
        l_np, _, local = self._gather_losses(losses)
        val, q = self._oracle(l_np, check=False)
        return _attach(losses, torch.from_numpy(q[local]), val, self._scale())

    def extra_repr(self):
        return f"risk={self.risk!r}, gather={self.gather}"


