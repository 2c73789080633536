r"""Spectral risk of a batch (CVaR, ESRM, extremile, ... with a chi2 / KL shift penalty)."""
import numpy as np
import torch
from torch import nn

from ... import risks as _risks
from ..._kernels import oracle_batch as _kb
from ..._kernels import oracle_select as _ks
from ..._kernels import oracles as _ko
from ..._kernels.sort_keys import RADIX_MAX as _RADIX_MAX
from .. import _oracles as _to
from ._common import (_ORACLES, _REDUCTIONS, _GatherMixin, _attach_dot, _check_choice,
                      _check_finite_np, _check_losses, _check_risk, _check_value_finite,
                      _host_attach, _host_checked, _host_eager, _host_out, _reduce)

__all__ = ["SpectralRiskLoss"]


class SpectralRiskLoss(_GatherMixin, nn.Module):
    r"""Spectral risk of a batch of per-sample losses, by the exact oracle.

    For batch losses :math:`l \in \mathbb R^b` returns

    .. math::

        R(l) = \max_{q \in \mathcal P(\sigma_b)} q^\top l - \nu D(q \| \mathbf 1/b)

    with :math:`\sigma_b` = ``risk.spectrum(b)`` (the spectrum discretised for the batch size
    ``b``) and :math:`\nu, D` the risk's ``shift_cost`` and ``divergence``; the gradient with
    respect to ``l`` is the maximiser :math:`q^\star` (Danskin), computed in float64 by an
    exact oracle (sort or selection + pool-adjacent-violators, Prospect paper App. B-C):
    a tensor program on the losses' device or the numba oracle (``oracle``). For a full batch (``b = n``) the gradient through a
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
        Raise ``ValueError`` on NaN / infinite losses (CPU tensors in eager mode; on another
        device and under ``torch.compile`` the check would synchronise the host with the
        device, so it is skipped and a NaN loss makes the risk NaN).
    reduction : {"mean", "sum", "none"}, default "mean"
        Losses of shape ``(..., b)`` give the risk of each row over the last dimension
        (with the gradient of each row its own weights); ``"none"`` returns the ``(...)``
        risks, ``"mean"`` / ``"sum"`` reduce them (a 1-D batch: the scalar risk either way).
    oracle : {"auto", "torch", "numba"}, default "auto"
        ``"torch"``: the exact oracle as a tensor program on the losses' device
        (:mod:`riskopt.torch._oracles`: no host synchronisation, ``torch.compile(fullgraph=
        True)`` traces it). ``"numba"``: the reference numba oracle on the host (eager only).
        ``"auto"``: ``"torch"`` on every device but the CPU and under ``torch.compile``;
        ``"numba"`` for CPU tensors in eager mode, where there is no device to wait for and
        the numba oracle (selection / sequential PAV, O(b)) is faster than the tensor
        program (whose merge tree costs ~40 small ops per level in eager mode).

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

    def __init__(self, risk, gather=False, group=None, grad_average=True, check_finite=True,
                 reduction="mean", oracle="auto"):
        super().__init__()
        self.risk = _check_risk(risk)
        self._init_gather(gather, group, grad_average, check_finite)
        self.reduction = _check_choice("reduction", reduction, _REDUCTIONS)
        self.oracle = _check_choice("oracle", oracle, _ORACLES)
        self._sigma = {}
        self._plans = {}
        self._batch = {}
        if isinstance(self.risk, _risks.SpectralRisk):
            self.register_buffer("_sigma_fixed", torch.from_numpy(
                np.array(self.risk.sigma, dtype=np.float64)), persistent=False)
            self._z_fixed = int(np.count_nonzero(np.cumsum(self.risk.sigma) == 0.0))
        else:
            self._sigma_fixed = None

    def _check_b(self, b):
        if self._sigma_fixed is not None and self._sigma_fixed.shape[0] != b:
            raise ValueError(
                f"this SpectralRisk has a spectrum for {self._sigma_fixed.shape[0]} samples "
                f"but the batch has {b} losses"
                + (" (global batch over all ranks)" if self.gather else "")
                + "; use a built-in risk (CVaR, ESRM, Extremile, ...), whose spectrum is "
                "discretised for any batch size, or batches of the spectrum's length"
            )

    def _spectrum(self, b):
        self._check_b(b)
        sigma = self._sigma.get(b)
        if sigma is None:
            sigma = np.ascontiguousarray(self.risk.spectrum(b), dtype=np.float64)
            if len(self._sigma) > 16:
                self._sigma.clear()
            self._sigma[b] = sigma
        return sigma

    def _use_torch(self, l):
        """The oracle for these losses: ``"auto"`` runs the tensor program on any device but
        the CPU and under ``torch.compile``, and the numba oracle on CPU tensors in eager
        mode (no device to wait for there, and faster: benchmarks/torch_losses_speed.py)."""
        if self.oracle == "numba":
            if torch.compiler.is_compiling():
                raise ValueError("oracle='numba' cannot run under torch.compile; use 'auto'")
            return False
        if self.oracle == "torch":
            return True
        return not _host_eager(l)

    def _oracle_args(self, b):
        """``(sigma, nu, div, plan)``: the numba oracle's arguments for ``b`` losses (the
        spectrum, shift cost, divergence code and selection plan; kept per ``b``)."""
        args = self._plans.get(b)
        if args is None:
            sigma = self._spectrum(b)
            args = (sigma, float(self.risk.shift_cost), self.risk.div_code,
                    _ko.selection_plan(sigma))
            if len(self._plans) > 16:
                self._plans.clear()
            self._plans[b] = args
        return args

    def _batch_args(self, b):
        """``(sigma, nu, div)`` where ``spectral_risk_weights(..., plan, radix=True)`` on
        ``b`` losses goes straight to the one-call batch kernel (the sorting oracle: no
        selection or box oracle for this spectrum and shift), else None; kept per ``b``."""
        args = self._batch.get(b, False)
        if args is False:
            sigma, nu, div, plan = self._oracle_args(b)
            sorts = plan is None or plan.n != b or (nu > 0 and _ks.box_of(sigma, plan) is None)
            args = (sigma, float(nu), int(div)) if sorts else None
            if len(self._batch) > 16:
                self._batch.clear()
            self._batch[b] = args
        return args

    def _host_fast(self, losses):
        """The host path's result for a 1-D float32 CPU batch in eager mode whose oracle is
        the one-call batch kernel, run on the batch in place
        (``oracle_batch.batch_risk_weights_f32``: the value and weights of the float64
        copy's call bit for bit, no copy, no NaN pass: it declines for a NaN / infinite
        loss); None where that does not apply or the kernel declines (the caller then runs
        the general path, which copies, checks and raises). Written flat (no helper calls
        around the kernel): the Python of a step runs with cold caches after the kernel,
        where each call costs several times its warm time
        (``benchmarks/torch_losses_speed.py --ab-host`` times this path against the general
        one in one process)."""
        if not (losses.ndim == 1 and losses.dtype == torch.float32
                and losses.is_contiguous()):
            return None            # (ndim first: a 0-d input has no shape[0])
        b = losses.shape[0]
        if not 2 <= b <= _RADIX_MAX:
            return None
        args = self._batch.get(b, False)
        if args is False:
            args = self._batch_args(b)
        if args is None:
            return None
        q = self.__dict__.get("_q64")
        if q is None or q.shape != (b,):
            q = self.__dict__["_q64"] = np.empty(b)
        x = losses.detach().numpy()
        # (batch_risk_weights_f32's call, without its checks: made above)
        val, ok = _kb._batch_weights(x, x.view(np.uint32), args[0], args[1], args[2], q,
                                     *_kb._scratch(b))
        if not ok:
            return None
        q32 = torch.empty(b)
        q32.numpy()[:] = q        # (rounded as q.astype(float32))
        out = torch.dot(losses, q32)
        out.detach().fill_(val)   # (as _host_attach: the value, the gradient q)
        return out

    def _numba_rows(self, l64):
        """``(values, q)`` of every row by the numba oracle (host, float64) as tensors;
        ``values`` a float for a 1-D batch."""
        val, q = self._numba_np(np.ascontiguousarray(l64.cpu().numpy()))
        return (val if l64.ndim == 1 else torch.from_numpy(val)), torch.from_numpy(q)

    def _numba_np(self, l_np, q=None, checked=False):
        """``(values, q)`` of every row of the float64 array ``l_np`` by the numba oracle
        (NumPy out, into ``q`` if given; ``values`` a float for a 1-D batch; ``checked``:
        the losses were checked for NaN / inf already)."""
        if self.check_finite and not checked:
            _check_finite_np("losses", l_np)
        b = l_np.shape[-1]
        sigma, nu, div, plan = self._oracle_args(b)
        if q is None:
            q = np.empty(l_np.shape)
        if l_np.ndim == 1:
            return _ko.spectral_risk_weights(l_np, sigma, nu, div, q, plan, radix=True), q
        rows = l_np.reshape(-1, b)
        qs = q.reshape(rows.shape)
        vals = np.empty(rows.shape[0])
        for i in range(rows.shape[0]):
            vals[i] = _ko.spectral_risk_weights(rows[i], sigma, nu, div, qs[i], plan,
                                                radix=True)
        return vals.reshape(l_np.shape[:-1]), qs.reshape(l_np.shape)

    def _rows(self, l64):
        """``(R, q)`` of each row of float64 losses (no autograd)."""
        b = l64.shape[-1]
        self._check_b(b)
        if self._use_torch(l64):
            nu = float(self.risk.shift_cost)
            if self._sigma_fixed is not None:
                sigma, z, two = self._sigma_fixed.to(l64.device), self._z_fixed, None
            else:
                sigma = _to.spectrum(self.risk, b, l64.device)
                z = _to.zero_prefix(self.risk, b)
                two = _to.two_level_zero_prefix(self.risk, b) if nu == 0.0 else None
            if nu > 0 and self.risk.div_code == 1 and z is None:
                raise ValueError("the KL shift of a user risk subclass needs oracle='numba'")
            return _to.spectral_weights(l64, sigma, nu, self.risk.div_code, z, two)
        return self._numba_rows(l64)

    def weights(self, losses):
        """The maximising weights ``q*`` of the given (local, not gathered) batch losses
        (each row of a ``(..., b)`` tensor)."""
        _check_losses(losses, batched=True)
        l64 = losses.detach().to(torch.float64)
        val, q = self._rows(l64)
        if self.check_finite:
            _check_value_finite(val, l64)
        return q.to(device=losses.device, dtype=losses.dtype)

    def forward(self, losses):
        if (type(losses) is torch.Tensor and not self.gather and losses.is_cpu
                and self.oracle != "torch" and not torch.compiler.is_compiling()):
            out = self._host_fast(losses)  # (a float32 batch: the one-call kernel in place)
            if out is not None:
                return out
        _check_losses(losses, allow_empty=self.gather, batched=not self.gather)
        if self.gather:
            l_np, _, local = self._gather_losses(losses)
            val, q = self._rows(torch.from_numpy(l_np))
            return _attach_dot(losses, q[local], val, self._scale())
        if not self._use_torch(losses):  # CPU, eager: numba, one autograd node
            l_np = _host_checked(losses, self, self.check_finite)
            val, q = self._numba_np(l_np, _host_out(self, losses), checked=True)
            return _reduce(_host_attach(losses, val, q), self.reduction)
        l64 = losses.detach().to(torch.float64)
        val, q = self._rows(l64)
        if self.check_finite:
            _check_value_finite(val, l64)  # a NaN / inf loss makes the risk non-finite
        # nu = 0: the risk is q . l itself
        nu0 = float(self.risk.shift_cost) == 0.0
        return _reduce(_attach_dot(losses, q, None if nu0 else val), self.reduction)

    def extra_repr(self):
        return (f"risk={self.risk!r}, gather={self.gather}, reduction={self.reduction!r}, "
                f"oracle={self.oracle!r}")
