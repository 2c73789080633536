"""Validation, gathering and gradient-attachment helpers shared by the loss modules."""
import math

import numpy as np
import torch

from ... import risks as _risks
from ..._kernels import host_copy as _kh
from ..._validation import check_finite
from .. import distributed as _dist

def _check_risk(risk):
    risk = _risks.parse_risk(risk)
    if not isinstance(risk, _risks._RiskBase):
        raise ValueError(f"risk must be a riskopt spectral risk, got {type(risk).__name__}")
    return risk


def _check_losses(losses, allow_empty=False, batched=False):
    """Type / shape checks (static: no tensor is read). ``batched``: ``(..., b)`` rows."""
    if not isinstance(losses, torch.Tensor):
        raise ValueError(f"losses must be a torch.Tensor, got {type(losses).__name__}")
    if batched:
        if losses.ndim < 1:
            raise ValueError(
                "losses must be a 1-D tensor of per-sample losses (reduction='none') or a "
                f"(..., b) tensor of rows, got shape {tuple(losses.shape)}")
    elif losses.ndim != 1:
        raise ValueError(
            f"losses must be a 1-D tensor of per-sample losses (reduction='none'), "
            f"got shape {tuple(losses.shape)}"
        )
    if not losses.is_floating_point():
        raise ValueError(f"losses must be a floating-point tensor, got {losses.dtype}")
    if losses.shape[-1] == 0 and not allow_empty:
        raise ValueError("losses is empty")
    return losses


_REDUCTIONS = ("mean", "sum", "none")
_ORACLES = ("auto", "torch", "numba")


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _host_eager(t):
    """True for a CPU tensor outside ``torch.compile``: reading a value costs no device
    synchronisation there, so input checks (NaN, range) run and raise ``ValueError``; on
    any other device and under compile they are skipped (a NaN loss propagates to the risk)
    so that the step never waits for the device."""
    return not torch.compiler.is_compiling() and t.is_cpu


def _check_finite_t(name, t):
    if _host_eager(t) and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contain {bad} NaN or infinite value(s)")


def _check_value_finite(value, losses):
    """After the oracle: a non-finite risk on a host tensor in eager mode is traced to the
    losses (one read of the ``(...)`` risks instead of a pass over the ``b`` losses)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            _check_finite_t("losses", losses)
    elif _host_eager(value) and not bool(torch.isfinite(value).all()):
        _check_finite_t("losses", losses)


def _reduce(v, reduction):
    if v.ndim == 0:
        return v
    if reduction == "mean":
        return v.mean()
    if reduction == "sum":
        return v.sum()
    return v


def _check_finite_np(name, a):
    check_finite(name, a, "contain")


def _as_index_tensor(name, idx, b, device="cpu"):
    """A 1-D int64 tensor of length ``b`` on ``device`` (range checked later, after any
    gathering); an index tensor goes there directly (no host round trip)."""
    if isinstance(idx, torch.Tensor):
        if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
            raise ValueError(f"{name} must be integers, got dtype {idx.dtype}")
        t = idx.detach().to(device, torch.int64)
    else:
        a = np.asarray(idx)
        if a.dtype.kind not in "iu":
            raise ValueError(f"{name} must be integers, got dtype {a.dtype}")
        t = torch.from_numpy(a.astype(np.int64, copy=True))
    if t.ndim != 1 or t.shape[0] != b:
        raise ValueError(f"{name} must have shape ({b},) like the losses, got {tuple(t.shape)}")
    return t.to(device)


def _check_range(name, idx_np, n):
    if idx_np.size and (idx_np.min() < 0 or idx_np.max() >= n):
        bad = idx_np[(idx_np < 0) | (idx_np >= n)]
        raise ValueError(f"{name} out of range [0, {n}): {bad[:5].tolist()}")


def _work_dtype(losses):
    """float32 or better: half-precision losses (float16 / bfloat16, e.g. under autocast)
    would underflow the weights (~1/n) and overflow ``exp(l / nu)``; the loss value is then
    returned in float32 and the gradient reaches the half-precision losses by the cast."""
    return torch.promote_types(losses.dtype, torch.float32)


def _attach_dot(losses, q, value=None, scale=1.0):
    """A tensor whose gradient with respect to ``losses`` (``(..., b)``) is ``scale * q``
    (``q`` constant: the Danskin gradient of a risk whose weights an oracle computed) and
    whose value is exactly ``value`` (the ``(...)`` risks), or ``scale * q . l`` itself when
    ``value`` is None (``nu = 0``: the risk *is* ``q . l``). In float32 or better
    (:func:`_work_dtype`).

    ``torch.dot`` (1-D) or ``(q * l).sum(-1)`` plus, for a given value, ``scale * (s -
    stop_grad(s)) + value`` (zero plus the value: the value is not rounded through ``s``):
    two or three ops and their backward, cheaper in eager mode
    than an ``autograd.Function`` (whose Python ``apply`` cost more than the rest of a CVaR
    step at b = 1024), and traced by ``torch.compile``."""
    dt = _work_dtype(losses)
    x = losses if losses.dtype == dt else losses.to(dt)
    qd = q.to(device=x.device, dtype=dt)
    s = torch.dot(qd, x) if x.ndim == 1 else (qd * x).sum(-1)
    if value is None:
        return s if scale == 1.0 else scale * s
    v = value.to(device=x.device, dtype=dt) if isinstance(value, torch.Tensor) \
        else torch.tensor(value, dtype=dt, device=x.device)
    d = s - s.detach()
    return (d if scale == 1.0 else scale * d) + v


class _HostDanskin(torch.autograd.Function):
    """The risks ``value`` (a NumPy array, computed on the host) with gradient ``q`` (the
    oracle's weights, a tensor of the losses' shape: Danskin). Used on CPU tensors in eager
    mode for ``(..., b)`` rows and half-precision losses (one autograd node, whose backward
    is ``g * q``); a 1-D float32 / float64 batch takes the cheaper C++ node of
    :func:`_host_attach`."""

    @staticmethod
    def forward(ctx, losses, value, q):
        ctx.q = q
        return torch.from_numpy(value)

    @staticmethod
    def backward(ctx, g):
        q = ctx.q
        return (g.unsqueeze(-1) * q if g.ndim else g * q), None, None


_NP_WORK = {torch.float32: np.float32, torch.float64: np.float64}


def _host_array(losses):
    """The detached CPU losses as a contiguous float64 NumPy array (no torch op for float32
    / float64 losses)."""
    t = losses.detach()
    if t.dtype not in _NP_WORK:
        t = t.to(torch.float64)
    return np.ascontiguousarray(t.numpy(), dtype=np.float64)


def _host_checked(losses, owner, check):
    """The detached CPU losses as a contiguous float64 NumPy array for an oracle: a view of
    contiguous float64 losses, the copy of contiguous float32 ones in a buffer kept in
    ``owner`` (a module) for the last shape (valid until its next call: an oracle's input
    only), else :func:`_host_array`. With ``check``: ``ValueError`` on NaN / inf, counted
    in the same pass as the copy (:mod:`riskopt._kernels.host_copy`)."""
    t = losses.detach()
    if t.dtype not in _NP_WORK or not t.is_contiguous():
        a = _host_array(t)
        if check:
            _check_finite_np("losses", a)
        return a
    src = t.numpy()
    if src.dtype == np.float64:
        a = src
        bad = _kh.count_nonfinite(src.reshape(-1)) if check else 0
    else:
        a = owner.__dict__.get("_host64")
        if a is None or a.shape != src.shape:
            a = owner.__dict__["_host64"] = np.empty(src.shape)
        bad = _kh.copy_count_nonfinite(src.reshape(-1), a.reshape(-1))
    if check and bad:
        raise ValueError(f"losses contain {bad} NaN or infinite value(s)")
    return a


def _host_view(losses):
    """The detached CPU losses as a NumPy array: a view of contiguous float32 / float64
    losses (for kernels that read either), else a float64 copy."""
    t = losses.detach()
    if t.dtype in _NP_WORK and t.is_contiguous():
        return t.numpy()
    return _host_array(t)


def _host_out(owner, losses):
    """A float64 array for an oracle's weights ``q`` of ``losses``: for float64 losses a
    new one (the autograd graph keeps it, :func:`_host_attach`), else a buffer kept in
    ``owner`` for the last shape (the graph keeps its cast copy only)."""
    if losses.dtype == torch.float64:
        return np.empty(losses.shape)
    buf = owner.__dict__.get("_q64")
    if buf is None or buf.shape != tuple(losses.shape):
        buf = owner.__dict__["_q64"] = np.empty(tuple(losses.shape))
    return buf


def _host_attach(losses, value, q, scale=1.0):
    """A tensor of value ``value`` (float or ``(...)`` array: the risks) whose gradient with
    respect to ``losses`` is ``scale * q`` (a float64 NumPy array of the losses' shape), in
    float32 or better (:func:`_work_dtype`); CPU, eager.

    1-D float32 / float64 losses: ``torch.dot(losses, q)`` with its value then overwritten
    by ``value`` (the dot's own value is discarded; nothing saved it): one C++ autograd node
    whose backward is ``g * q``, instead of the Python node :class:`_HostDanskin` (15-20 us
    less per step at every ``b``: ``benchmarks/torch_losses_speed.py``). Other shapes and
    dtypes: :class:`_HostDanskin`."""
    npdt = _NP_WORK.get(losses.dtype)
    if npdt is not None and losses.ndim == 1:
        if scale != 1.0:
            q = scale * q
        out = torch.dot(losses, torch.from_numpy(q if npdt is np.float64 else q.astype(npdt)))
        out.detach().fill_(value)
        return out
    npdt = _NP_WORK[_work_dtype(losses)]
    qt = torch.from_numpy(q.astype(npdt) if scale == 1.0 else (scale * q).astype(npdt))
    return _HostDanskin.apply(losses, np.asarray(value, dtype=npdt), qt)


def _to_numpy64(t):
    return t.detach().to("cpu", torch.float64).numpy()


class _GatherMixin:
    """Shared ``gather`` / ``group`` / ``grad_average`` handling."""

    def _init_gather(self, gather, group, grad_average, check_finite):
        self.gather = bool(gather)
        self.group = group
        self.grad_average = bool(grad_average)
        self.check_finite = bool(check_finite)

    def _scale(self):
        return _dist.grad_scale(self.group, self.grad_average) if self.gather else 1.0

    def _gather(self, tensors):
        if self.gather:
            return _dist.all_gather_1d(tensors, self.group)
        return [t.detach() for t in tensors], [int(tensors[0].shape[0])], 0

    def _gather_losses(self, losses, *others):
        """Gather the losses (and ``others``, 1-D tensors of the same length) over the ranks.

        Returns ``(l_np, others, local)``: the global losses as a contiguous float64 NumPy
        array, the gathered ``others`` and the slice of this rank's entries. Raises
        ``ValueError`` when the global batch is empty or (with ``check_finite``) holds NaN /
        inf, on every rank alike (the checks run after gathering).
        """
        b = int(losses.shape[0])
        gathered, _, offset = self._gather([losses.detach().to(torch.float64), *others])
        l_np = np.ascontiguousarray(_to_numpy64(gathered[0]))
        if l_np.shape[0] == 0:
            raise ValueError("losses is empty on every rank")
        if self.check_finite:
            _check_finite_np("losses", l_np)
        return l_np, gathered[1:], slice(offset, offset + b)
