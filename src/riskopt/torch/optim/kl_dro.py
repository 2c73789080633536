r"""SCDRO / RSCDRO for any ``nn.Module``: KL-constrained DRO without an ``n``-dimensional dual.

The compositional problem of the SCDRO paper (``../shared/papers/scdro_kl_constrained_dro.txt``,
Algorithms 1 and 3) over the parameters ``w`` and the multiplier ``lambda``:

.. math::

    \min_{w,\ \lambda \ge \lambda_0} \lambda \log \mathbb E_i e^{\ell_i(w)/\lambda}
    + (\lambda - \lambda_0)\rho .

:class:`SCDRO` keeps the moving average ``s`` of ``E exp(l / lambda)`` *in the log domain*
(``log s``; losses of ``1e3`` with ``lambda_0 = 1e-3``, or float16 / float32 models, never
overflow), moving averages ``v`` of the parameter gradients (one buffer per parameter, like
momentum) and ``u`` of the ``lambda``-derivative, and takes the projected step
``w <- w - lr (v + mu w)``, ``lambda <- clip(lambda - lr (u + mu lambda), lambda_0,
lambda_max)``. ``lambda`` is a tensor on the parameters' device, saved in ``state_dict``.

The batch's per-sample losses enter through :meth:`SCDRO.surrogate`: it updates ``log s`` with
the detached losses, then returns ``sum_i w_i l_i`` with the weights ``w_i = exp(l_i / lambda -
log s) / b`` held constant, so that ``backward()`` leaves the SCDRO estimate
``sum_i w_i grad l_i`` (= ``grad f_lambda(s) d_w g_B``) in ``.grad``::

    opt = SCDRO(model.parameters(), radius=0.5, lr=0.1, beta=0.5)
    for x, y in loader:
        losses = F.cross_entropy(model(x), y, reduction="none")
        opt.zero_grad()
        opt.surrogate(losses).backward()
        opt.step()

``stage_steps=T`` gives RSCDRO (Algorithm 3): ``lr`` and ``beta`` halved after ``T``, ``2T``,
``4T``, ... steps, with the optional ``mu |x|^2 / 2``. The plug-in mini-batch estimator
(FastDRO) is :class:`riskopt.torch.KLDROLoss` with ``radius=`` and any torch optimizer.
Works on CPU and CUDA tensors (no host round trip in a step).

Examples
--------
>>> import torch
>>> from riskopt.torch.optim import SCDRO
>>> torch.manual_seed(0)
<torch._C.Generator object at ...>
>>> X = torch.randn(256, 3); y = (X[:, 0] > 0).float()
>>> model = torch.nn.Linear(3, 1)
>>> opt = SCDRO(model.parameters(), radius=0.5, lr=0.5, beta=0.5)
>>> for k in range(0, 256 * 5, 32):
...     idx = torch.arange(k, k + 32) % 256
...     losses = torch.nn.functional.binary_cross_entropy_with_logits(
...         model(X[idx])[:, 0], y[idx], reduction="none")
...     opt.zero_grad()
...     opt.surrogate(losses).backward()
...     opt.step()
>>> 0.001 <= opt.lam <= 10.0
True
"""
import math

import torch

from ..._validation import check_positive

__all__ = ["SCDRO"]


class SCDRO(torch.optim.Optimizer):
    r"""SCDRO (Algorithm 1) and, with ``stage_steps``, RSCDRO (Algorithm 3).

    Parameters
    ----------
    params : iterable of tensors or dicts
    radius : float > 0
        :math:`\rho`.
    shift_cost : float >= 0, default 1e-3
        :math:`\lambda_0` (the lower bound of ``lambda``; the paper's 1e-3).
    lr : float, default 0.1
    beta : float in (0, 1], default 0.1
        Rate of the moving averages.
    lam_init : float, default 1.0
        Starting multiplier (clipped to the box).
    loss_bound : float, optional
        ``C`` of Lemma 1: ``lambda <= lambda_0 + C / rho``; None: no upper bound.
    max_norm : float, optional
        Project the parameters (all of them, as one vector) on the ball of this radius.
    stage_steps : int, optional
        RSCDRO: halve ``lr`` and ``beta`` after stages of ``stage_steps * 2^k`` steps.
    mu : float >= 0, default 0
        The ``mu |x|^2 / 2`` of Algorithm 3 (parameters and ``lambda``).
    """

    def __init__(self, params, radius=0.5, shift_cost=1e-3, lr=0.1, beta=0.1, lam_init=1.0,
                 loss_bound=None, max_norm=None, stage_steps=None, mu=0.0):
        check_positive("radius", radius)
        check_positive("shift_cost", shift_cost, allow_zero=True)
        check_positive("lr", lr)
        b = check_positive("beta", beta)
        if b > 1:
            raise ValueError(f"beta must be in (0, 1], got {beta}")
        check_positive("lam_init", lam_init)
        check_positive("mu", mu, allow_zero=True)
        for name, v in (("loss_bound", loss_bound), ("max_norm", max_norm),
                        ("stage_steps", stage_steps)):
            if v is not None:
                check_positive(name, v)
        super().__init__(params, dict(lr=float(lr)))
        self.radius, self.shift_cost = float(radius), float(shift_cost)
        self.beta0, self.lr0 = float(beta), float(lr)
        self.lam_max = math.inf if loss_bound is None else (
            self.shift_cost + float(loss_bound) / self.radius)
        self.max_norm, self.stage_steps, self.mu = max_norm, stage_steps, float(mu)
        dev = self.param_groups[0]["params"][0].device
        lam = min(max(float(lam_init), self.shift_cost), self.lam_max)
        self._scalars = {"lam": torch.tensor(lam, dtype=torch.float64, device=dev),
                         "log_s": torch.tensor(0.0, dtype=torch.float64, device=dev),
                         "u": torch.tensor(0.0, dtype=torch.float64, device=dev),
                         "g_lam": torch.tensor(0.0, dtype=torch.float64, device=dev)}
        self._t, self._started, self._pending = 0, False, False

    # ------------------------------------------------------------------ schedule
    def _schedule(self):
        if self.stage_steps is None:
            return self.lr0, self.beta0
        t, k, length = self._t, 0, float(self.stage_steps)
        while t >= length:
            t -= length
            k += 1
            length *= 2
        return self.lr0 * 2.0 ** -k, self.beta0 * 2.0 ** -k

    @property
    def lam(self):
        """The current multiplier (a float)."""
        return float(self._scalars["lam"])

    # ------------------------------------------------------------------ the estimator
    def surrogate(self, losses):
        r"""Update ``log s`` with the batch and return the surrogate ``sum_i w_i l_i``
        (``w_i = exp(l_i / lambda - log s) / b``, constant) whose gradient is the SCDRO
        estimate; also prepares the ``lambda``-derivative for :meth:`step`."""
        if not isinstance(losses, torch.Tensor) or losses.ndim != 1 or losses.numel() == 0:
            raise ValueError("surrogate needs the batch's per-sample losses as a non-empty "
                             "1-D tensor (reduction='none')")
        with torch.no_grad():
            l64 = losses.detach().to(torch.float64)
            if not bool(torch.isfinite(l64).all()):
                raise ValueError("non-finite losses in the batch")
            _, beta = self._schedule()
            sc = self._scalars
            lam = sc["lam"]
            a = l64 / lam
            log_g = torch.logsumexp(a, 0) - math.log(a.numel())
            if not self._started:
                log_s = log_g
            else:
                log_s = torch.logaddexp(sc["log_s"] + math.log1p(-beta) if beta < 1
                                        else torch.tensor(-math.inf, dtype=torch.float64,
                                                          device=lam.device),
                                        log_g + math.log(beta))
            sc["log_s"] = log_s
            w = torch.exp(a - log_s) / a.numel()
            sc["g_lam"] = -(w * l64).sum() / lam + log_s + self.radius
            self._pending = True
        return (w.to(losses.dtype) * losses).sum()

    @torch.no_grad()
    def step(self, closure=None):
        """The SCDRO update (after ``surrogate(losses).backward()``)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._pending:
            raise RuntimeError("call opt.surrogate(losses).backward() before opt.step()")
        lr, beta = self._schedule()
        sc = self._scalars
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        for p in params:
            st = self.state[p]
            if "v" not in st or not self._started:
                st["v"] = p.grad.detach().clone()
            else:
                st["v"].mul_(1.0 - beta).add_(p.grad, alpha=beta)
        sc["u"] = sc["g_lam"].clone() if not self._started else (
            (1.0 - beta) * sc["u"] + beta * sc["g_lam"])
        for p in params:
            p.add_(self.state[p]["v"] + self.mu * p, alpha=-lr)
        if self.max_norm is not None:
            norm = torch.sqrt(sum((p.double() ** 2).sum() for p in params))
            if norm > self.max_norm:
                for p in params:
                    p.mul_(self.max_norm / norm)
        lam = sc["lam"] - lr * (sc["u"] + self.mu * sc["lam"])
        sc["lam"] = lam.clamp(self.shift_cost, self.lam_max)
        self._started, self._pending = True, False
        self._t += 1
        return loss

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self):
        out = super().state_dict()
        out["scdro"] = {"scalars": {k: v.detach().clone() for k, v in self._scalars.items()},
                        "t": self._t, "started": self._started}
        return out

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        extra = state_dict.pop("scdro", None)
        if extra is None:
            raise ValueError("state_dict has no 'scdro' entry: not from an SCDRO optimizer")
        super().load_state_dict(state_dict)
        dev = self.param_groups[0]["params"][0].device
        self._scalars = {k: v.to(dev) for k, v in extra["scalars"].items()}
        self._t, self._started, self._pending = int(extra["t"]), bool(extra["started"]), False
