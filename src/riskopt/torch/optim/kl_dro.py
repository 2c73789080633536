r"""SCDRO / RSCDRO and ASCDRO / RASCDRO / RECOVER for any ``nn.Module`` (the primal-dual PG-SMD2 /
SPD baseline: :mod:`riskopt.torch.optim.pgsmd2`): KL-constrained DRO (the SCDRO paper's methods,
non-convex setting).

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
>>> opt = SCDRO(model.parameters(), radius=0.5, lr=0.1, beta=0.5)
>>> for k in range(0, 256 * 5, 32):
...     idx = torch.arange(k, k + 32) % 256
...     losses = torch.nn.functional.binary_cross_entropy_with_logits(
...         model(X[idx])[:, 0], y[idx], reduction="none")
...     opt.zero_grad()
...     opt.surrogate(losses).backward()
...     opt.step()
>>> 0.001 < opt.lam <= 10.0      # lambda inside its box, above its floor
True
>>> bool(((model(X)[:, 0] > 0).float() == y).float().mean() > 0.9)
True
"""
import math

import numpy
import torch

from ..._validation import check_positive
from ..distributed import all_reduce_mean_, carrier_dtype
from . import _updates
from ._guard import GuardMixin

__all__ = ["SCDRO", "ASCDRO"]


#: the loss dtypes NumPy reads (a CPU tensor's ``numpy()``)
_NP_LOSSES = (torch.float64, torch.float32, torch.float16)
#: the loss dtypes whose values are float32 numbers
_F32_EXACT = (torch.float32, torch.float16, torch.bfloat16)


def _f64(v):
    """A CPU 0-d float64 tensor holding the float ``v`` (no dispatch)."""
    return torch.from_numpy(numpy.array(v, dtype=numpy.float64))


def _cast(w, dtype):
    """The float64 weights ``w`` (a tensor, or a NumPy array of the host path) as a tensor
    of ``dtype`` (NumPy's cast to float32 / float64 is torch's: one IEEE rounding)."""
    if isinstance(w, numpy.ndarray):
        if dtype in (torch.float32, torch.float64):
            return torch.from_numpy(w.astype(_NP_DTYPES[dtype], copy=False))
        w = torch.from_numpy(w)
    return w.to(dtype)


def _weighted_sum(w, losses):
    """``sum_i w_i l_i`` with the weights ``w`` constants (float64: a tensor, or a NumPy array
    of the host path, then one ``torch.dot``: the losses' gradient is the same weights, the
    value differs from the tensor code's in its rounding only)."""
    if isinstance(w, numpy.ndarray) and losses.dtype in _NP_DTYPES:
        return torch.dot(losses, _cast(w, losses.dtype))
    return (_cast(w, losses.dtype) * losses).sum()


#: NumPy's twins of the loss dtypes whose casts :func:`_cast` leaves to NumPy
_NP_DTYPES = {torch.float32: numpy.float32, torch.float64: numpy.float64}


class _KLWindow:
    """The start rule's estimate for the KL-DRO optimizers: the window keeps the batches'
    losses, valued at the check (:func:`_kl_dro_value`)."""

    def _window_value(self, items):
        return _kl_dro_value(items, self.radius, self.shift_cost).mean()

    def _window_estimate(self, items, limit):
        """The check's estimate (flags on the host): first an upper bound from two of the
        grid's 18 columns (the exponent where the last full evaluation had most of its
        minima, and ``lambda_0``); when that bound is below the limit (with a margin far
        above rounding), so is the estimate, and the bound is returned: the same decision
        at 1/9 of the exponentials (about half the check's valuation time at 10 x 256
        losses: it is dispatch-bound). Otherwise the whole grid, whose minimisers choose
        the next exponent (kept in the checkpoint with the flags)."""
        g = self._g
        if self.radius is not None and math.isfinite(limit) and math.isfinite(g["lam"]):
            bound = float(_kl_dro_dual(items, self.radius, self.shift_cost,
                                       (int(g["lam"]),)).amin(1).mean())
            if bound < limit - 1e-9 * (abs(limit) + abs(bound) + g["scale"]):
                return bound
        dual = _kl_dro_dual(items, self.radius, self.shift_cost)
        if self.radius is not None:
            cols = dual.argmin(1).tolist()
            c = max(sorted(set(cols)), key=cols.count)     # (lambda_0's column: any)
            g["lam"] = float(_GRID_EXP[min(c, len(_GRID_EXP) - 1)])
        return float(dual.amin(1).mean())

    def _group_lr(self):
        """The learning rate of the parameter groups, read at every step (so that a
        ``torch.optim.lr_scheduler`` scheduler acts; the RSCDRO / ASCDRO schedules multiply
        it). The update takes one rate for all parameters and ``lambda``: groups with
        different rates are refused, not silently given the constructor's."""
        lrs = {g["lr"] for g in self.param_groups if not g.get("previous_iterate")}
        if len(lrs) != 1:
            raise ValueError(f"{type(self).__name__} uses one learning rate for all its "
                             f"parameters and lambda; the parameter groups have "
                             f"{sorted(lrs)}")
        (lr,) = lrs
        lr = float(lr)
        if not (math.isfinite(lr) and lr >= 0.0):
            raise ValueError(f"{type(self).__name__}: the parameter groups' lr must be finite "
                             f"and >= 0, got {lr}")
        return lr


class SCDRO(_KLWindow, GuardMixin, torch.optim.Optimizer):
    r"""SCDRO (Algorithm 1) and, with ``stage_steps``, RSCDRO (Algorithm 3).

    Parameters
    ----------
    params : iterable of tensors or dicts
    radius : float > 0
        :math:`\rho`.
    shift_cost : float >= 0, default 1e-3
        :math:`\lambda_0` (the lower bound of ``lambda``; the paper's 1e-3).
    lr : float, default 0.1
        The step size of the parameters and ``lambda``. It is the parameter groups' ``lr``,
        read at every step: a ``torch.optim.lr_scheduler`` scheduler acts on it (and
        ``stage_steps`` halves what it sets); one rate for all groups.
    beta : float in (0, 1], default 0.1
        Rate of the moving averages.
    lam_init : float, default 1.0
        Starting multiplier (clipped to the box).
    loss_bound : float, "auto" or None, default "auto"
        ``C`` of Lemma 1: ``lambda <= lambda_0 + C / rho`` (the paper's box). ``"auto"``: the
        largest per-sample loss seen so far (a bound on every loss the run has met, growing
        with it); None: no upper bound.
    max_norm : float, optional
        Project the parameters (all of them, as one vector) on the ball of this radius.
    stage_steps : int, optional
        RSCDRO: halve ``lr`` and ``beta`` after stages of ``stage_steps * 2^k`` steps.
    mu : float >= 0, default 0
        The ``mu |x|^2 / 2`` of Algorithm 3 (parameters and ``lambda``).
    process_group, on_divergence, check_every, blowup, rise
        Data parallelism and the divergence check (:mod:`riskopt.torch.optim._guard`):
        under DDP the batch's losses are all-gathered (one collective per step) and
        ``lambda``, ``log s`` and ``u`` are identical on every rank.
    """

    def __init__(self, params, radius=0.5, shift_cost=1e-3, lr=0.1, beta=0.1, lam_init=1.0,
                 loss_bound="auto", max_norm=None, stage_steps=None, mu=0.0, *,
                 process_group=None, on_divergence="warn", check_every=10, blowup=1e6,
                 rise=1.0):
        check_positive("radius", radius)
        check_positive("shift_cost", shift_cost, allow_zero=True)
        check_positive("lr", lr)
        b = check_positive("beta", beta)
        if b > 1:
            raise ValueError(f"beta must be in (0, 1], got {beta}")
        check_positive("lam_init", lam_init)
        check_positive("mu", mu, allow_zero=True)
        self._auto_bound = isinstance(loss_bound, str)
        if self._auto_bound and loss_bound != "auto":
            raise ValueError(f"loss_bound must be a positive number, 'auto' or None, got "
                             f"{loss_bound!r}")
        for name, v in (("loss_bound", None if self._auto_bound else loss_bound),
                        ("max_norm", max_norm), ("stage_steps", stage_steps)):
            if v is not None:
                check_positive(name, v)
        super().__init__(params, dict(lr=float(lr)))
        self.radius, self.shift_cost = float(radius), float(shift_cost)
        self.beta0, self.lr0 = float(beta), float(lr)
        self.lam_max = math.inf if loss_bound is None or self._auto_bound else (
            self.shift_cost + float(loss_bound) / self.radius)
        self.max_norm, self.stage_steps, self.mu = max_norm, stage_steps, float(mu)
        dev = self.param_groups[0]["params"][0].device
        lam = min(max(float(lam_init), self.shift_cost), self.lam_max)
        self._scalars = {"lam": torch.tensor(lam, dtype=torch.float64, device=dev),
                         "log_s": torch.tensor(0.0, dtype=torch.float64, device=dev),
                         "u": torch.tensor(0.0, dtype=torch.float64, device=dev),
                         "g_lam": torch.tensor(0.0, dtype=torch.float64, device=dev),
                         "loss_max": torch.tensor(0.0, dtype=torch.float64, device=dev)}
        self._t, self._started, self._pending = 0, False, False
        self._init_guard(process_group, on_divergence, check_every, blowup, rise)
        self._group_lr()

    def _extra_tensors(self):
        return tuple(self._scalars.values())

    # ------------------------------------------------------------------ schedule
    def _schedule(self):
        lr = self._group_lr()
        if self.stage_steps is None:
            return lr, self.beta0
        t, k, length = self._t, 0, float(self.stage_steps)
        while t >= length:
            t -= length
            k += 1
            length *= 2
        return lr * 2.0 ** -k, self.beta0 * 2.0 ** -k

    @property
    def lam(self):
        """The current multiplier (a float)."""
        return float(self._scalars["lam"])

    def _host(self):
        """Whether this step's batch statistics and scalars run in NumPy / Python floats:
        eager (not :meth:`compile`) on the CPU (chosen by device, not by data)."""
        return self._compile_kwargs is None and _updates._host(self._scalars["lam"])

    # ------------------------------------------------------------------ the estimator
    def surrogate(self, losses):
        r"""Update ``log s`` with the batch and return the surrogate ``sum_i w_i l_i``
        (``w_i = exp(l_i / lambda - log s) / b``, constant) whose gradient is the SCDRO
        estimate; also prepares the ``lambda``-derivative for :meth:`step`."""
        if not isinstance(losses, torch.Tensor) or losses.ndim != 1 or (
                losses.numel() == 0 and self._group() is None):
            raise ValueError("surrogate needs the batch's per-sample losses as a non-empty "
                             "1-D tensor (reduction='none')")
        if losses.dtype.is_floating_point:      # (the weights' dtype in the surrogate)
            self._stall_tiny = torch.finfo(losses.dtype).tiny
        with torch.no_grad():
            if self._can_post():
                w_local = self._surrogate_posted(losses)
            elif (losses.dtype in _NP_LOSSES and losses.device.type == "cpu"
                  and self._group() is None and self._host()):
                # one process, eager on the CPU: the losses as a float64 copy in NumPy (the
                # same numbers as the gather's ``to``: exact)
                w_local = self._update(torch.from_numpy(
                    losses.detach().numpy().astype(numpy.float64)))
            else:
                table, sizes, off = self._gather([losses], self._scalars["lam"].device)
                w = self._update(table[:, 0])
                w_local = w if len(sizes) == 1 else w[off:off + losses.numel()] * len(sizes)
            self._pending = True
        return (w_local.to(losses.dtype) * losses).sum()

    def _update(self, l64):
        """Fold the global batch's losses ``l64`` (float64) into ``log s``, the
        ``lambda``-derivative and the divergence guard; returns the weights
        ``exp(l / lambda - log s) / b``."""
        sc = self._scalars
        lam = sc["lam"]
        if l64.numel() == 0:
            raise ValueError("surrogate needs a non-empty global batch")
        _, beta = self._schedule()
        if "loss_max" not in sc:
            sc["loss_max"] = torch.tensor(-math.inf, dtype=torch.float64, device=lam.device)
        args = (math.log(l64.numel()), math.log1p(-beta) if beta < 1 else -math.inf,
                math.log(beta), self._started, self.radius, self.shift_cost)
        host = self._host()
        if host:       # NumPy and Python floats (see _updates.scdro_batch_host)
            lo, top, loss_max, log_s, w, g_lam, tracked = _updates.scdro_batch_host(
                l64.numpy(), float(lam), float(sc["log_s"]), float(sc["loss_max"]), *args)
            loss_max, log_s, g_lam, w = _f64(loss_max), _f64(log_s), _f64(g_lam), \
                torch.from_numpy(w)
        else:
            lo, top, loss_max, log_s, w, g_lam, tracked = self._kernel(_updates.scdro_batch)(
                l64, lam, sc["log_s"], sc["loss_max"], *args)
        if not host:        # (on a device: a flag read with the next check, no sync)
            self._check_input_finite(l64, "losses")
        elif not (math.isfinite(float(lo)) and math.isfinite(float(top))):
            self._check_input_finite(l64, "losses")
        sc["loss_max"], sc["log_s"], sc["g_lam"] = loss_max, log_s, g_lam
        # the batch's dual at (w, lambda) (not log s: a moving average over earlier
        # lambdas); the start rule gets the batch's losses
        self._track(tracked, window=l64, scale=lambda: l64.abs().mean())
        # the stall: every weight exp(l / lambda - log s) / b below the losses' smallest
        # normal number (sum_i w_i = exp(X - log s), X the batch's log-mean-exp of
        # l / lambda): the surrogate's gradient is zero, lambda's derivative rho + log s > 0
        # keeps lambda at lambda_0, and log s falls only by log(1 / (1 - beta)) a step
        tiny = self._stall_tiny
        if host:
            self._flag_stall(float(w.numpy().sum()) < tiny, (lam, tracked, log_s))
        else:
            self._flag_stall(w.sum() < tiny, (lam, tracked, log_s))
        return w

    _stall_tiny = torch.finfo(torch.float64).tiny

    def _stall_text(self, step):
        g = self._g
        lam, obj, log_s = (float(g[k]) for k in ("stall_lam", "stall_obj", "stall_logs"))
        x = (obj - (lam - self.shift_cost) * self.radius) / lam
        _, beta = self._schedule()
        drop = -math.log1p(-beta) if beta < 1 else math.inf
        floor = (f"at its floor lambda_0 = shift_cost = {self.shift_cost:g}"
                 if lam <= self.shift_cost else f"lambda_0 = shift_cost = {self.shift_cost:g}")
        return (f"{type(self).__name__} stalled at step {step}: lambda = {lam:.6g} ({floor}); the "
                f"batch's log-mean-exp of l / lambda, X = {x:.6g}, is below log s = {log_s:.6g} "
                f"(a moving average of earlier batches) by {log_s - x:.4g}, so every weight "
                f"exp(l / lambda - log s) underflowed to 0: the gradient is exactly zero, "
                f"lambda's derivative (rho + log s > 0) drives it to lambda_0, and log s "
                f"falls only by {drop:.3g} a step: the model does not move while this lasts "
                f"(it can last for the rest of the run; reported once). Raise shift_cost "
                f"(lambda_0), lower lr "
                f"relative to beta (now lr={self._lr_text()}, beta={beta:g}), or normalise "
                f"the losses (e.g. standardised targets)")

    #: how far (in the exponent) a rank's local shift may be from the previous ``log s``
    #: for its gradient to be rescaled inside the all-reduce, by the carrier dtype
    #: (float64: e^709 at most; float32: e^88, and room for the gradient's own size)
    _POST_RANGE = {torch.float64: 600.0, torch.float32: 40.0}

    def _post_range(self):
        dt = self.param_groups[0]["params"][0].dtype
        return self._POST_RANGE[carrier_dtype(dt)]

    def _surrogate_posted(self, losses):
        """The surrogate's weights when the losses ride on DDP's all-reduce (:meth:`attach`): local
        weights ``exp(l / lambda - c_r)`` (``c_r`` this rank's largest ``l / lambda``); the
        hook multiplies the rank's gradient by ``exp(c_r - c0)`` (``c0``: the previous
        ``log s``, the same on every rank) before the sum, and the sum by ``exp(c0 - log s) /
        b`` once the global ``log s`` is known (:meth:`_finish_posted`)."""
        sc = self._scalars
        lam, c0 = sc["lam"], sc["log_s"]
        a = losses.detach().to(lam.device, torch.float64) / lam
        # (numbers, one host read: fewer small tensor ops)
        c, c0f = torch.stack([a.max(), c0]).tolist() if a.numel() else [float(c0)] * 2
        # float32 losses: the shift c rounded to a float32 number, so that everything posted
        # travels as one float32 each in a float32 bucket (any shift cancels; the flag is
        # the dtype's, the same on every rank; a c beyond float32 arrives as inf and the
        # others take it for out of range, which the correction handles exactly)
        exact32 = losses.dtype in _F32_EXACT
        if exact32 and math.isfinite(c) and abs(c) < 3e38:
            c = float(numpy.float32(c))
        d = c - c0f
        ok = math.isfinite(d) and abs(d) <= self._post_range()
        self._post_c0, self._post_c = c0, c
        self._post([losses], [c], math.exp(d) if ok else 0.0, lam.device, local_ok=ok,
                   exact32=exact32)
        return torch.exp(a - c)

    def _finish_posted(self, table, sizes, off, scalars):
        """The hook's end (:class:`~riskopt.torch.distributed.Piggyback`): the update on the
        gathered losses; returns the common factor of the summed gradient."""
        w = self._update(table[:, 0])
        log_s, c0 = self._scalars["log_s"], self._post_c0
        c0f, rng = float(c0), self._post_range()
        if any(not (math.isfinite(c) and abs(c - c0f) <= rng) for c in scalars[:, 0].tolist()):
            post = self._piggy
            post.fix = True          # a rank sent 0: add its gradient on its own
            self._post_fixes = getattr(self, "_post_fixes", 0) + 1
            post.raw_scale = torch.exp(self._post_c - log_s) / w.numel()
        return torch.exp(c0 - log_s) / w.numel()

    @torch.no_grad()
    def step(self, closure=None):
        """The SCDRO update (after ``surrogate(losses).backward()``)."""
        loss = self._closure(closure)
        if not self._pending:
            raise RuntimeError("call opt.surrogate(losses).backward() before opt.step()")
        self._complete_post()
        lr, beta = self._schedule()
        sc = self._scalars
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        moving = []
        for p in params:
            if "v" not in self.state[p] or not self._started:
                self.state[p]["v"] = p.grad.detach().clone()
            else:
                moving.append(p)
        vs, moving_vs = [self.state[p]["v"] for p in params], [self.state[p]["v"] for p in moving]
        hi = None if self._auto_bound else self.lam_max
        if self._host():     # the scalars in Python floats, bit for bit the tensor code's
            _updates.scdro_params(params, vs, moving_vs, [p.grad for p in moving], lr, beta,
                                  self.mu, self.max_norm)
            u, lam = _updates.scdro_lambda_host(
                float(sc["u"]), float(sc["g_lam"]), float(sc["lam"]), float(sc["loss_max"]),
                lr, beta, self.mu, self._started, self.shift_cost, hi, self.radius)
            sc["u"], sc["lam"] = _f64(u), _f64(lam)
        else:
            sc["u"], sc["lam"] = self._kernel(_updates.scdro_update)(
                params, vs, moving_vs, [p.grad for p in moving], sc["u"], sc["g_lam"],
                sc["lam"], sc["loss_max"], lr, beta, self.mu, self.max_norm, self._started,
                self.shift_cost, hi, self.radius)
        self._started, self._pending = True, False
        self._t += 1
        self._end_step()
        return loss

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self):
        out = super().state_dict()
        out["scdro"] = {"scalars": {k: v.detach().clone() for k, v in self._scalars.items()},
                        "t": self._t, "started": self._started, "guard": self._guard_state()}
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
        self._load_guard_state(extra.get("guard"))


class ASCDRO(_KLWindow, GuardMixin, torch.optim.Optimizer):
    r"""ASCDRO (Algorithm 2) with STORM estimators; ``radius=None`` gives RECOVER (the
    KL-penalised objective, ``lambda`` fixed at ``shift_cost``); ``stage_steps`` gives RASCDRO
    (Algorithm 3: ``lr`` times ``2^-1/2`` and ``beta`` halved per stage of doubling length).

    STORM needs the batch's losses at the *previous* iterate as well: evaluate the model with
    the previous parameters through :func:`torch.func.functional_call` and pass both::

        opt = ASCDRO(model.parameters(), radius=0.5, lr=0.1, beta=0.5)
        for x, y in loader:
            losses = F.cross_entropy(model(x), y, reduction="none")
            prev = F.cross_entropy(torch.func.functional_call(
                model, opt.previous_params(model), (x,)), y, reduction="none")
            opt.zero_grad()
            opt.surrogate(losses, prev).backward()
            opt.step()

    (two gradient evaluations per step, as in the paper). The estimators of ``g`` and
    ``d_lambda g`` are kept scaled by ``exp(-m)`` (``m`` a running maximum of ``l / lambda``),
    which cancels in the step, and the estimator of ``d_w g`` as its ratio ``v / s`` to the
    one of ``g`` (in at least float32: scale-free, so nothing overflows, even in float16); the estimators restart on the current batch
    when ``s < beta g_B(x_t)`` (``s`` must stay positive). ``eta_t = lr / (1 + t/t0)^(1/3)``, ``beta_t = beta (eta_t / lr)^2``
    (Theorem 2) unless ``stage_steps`` is given; ``lr`` there is the parameter groups' rate,
    read at every step, so a ``torch.optim.lr_scheduler`` scheduler scales ``eta_t``. Same
    numbers as the linear-model kernel ``riskopt._kernels.scdro._pass_storm`` (tested step by
    step).
    """

    def __init__(self, params, radius=0.5, shift_cost=None, lr=0.1, beta=0.5, t0=100.0,
                 lam_init=1.0, loss_bound=None, stage_steps=None, mu=0.0, *,
                 process_group=None, on_divergence="warn", check_every=10, blowup=1e6,
                 rise=1.0):
        if radius is None:
            check_positive("shift_cost", shift_cost if shift_cost is not None else -1.0)
        else:
            check_positive("radius", radius)
        lam0 = float(shift_cost) if shift_cost is not None else 1e-3
        check_positive("shift_cost", lam0, allow_zero=radius is not None)
        check_positive("lr", lr)
        b = check_positive("beta", beta)
        if b > 1:
            raise ValueError(f"beta must be in (0, 1], got {beta}")
        check_positive("t0", t0)
        check_positive("mu", mu, allow_zero=True)
        for name, v in (("loss_bound", loss_bound), ("stage_steps", stage_steps)):
            if v is not None:
                check_positive(name, v)
        super().__init__(params, dict(lr=float(lr)))
        self.radius = None if radius is None else float(radius)
        self.shift_cost, self.lr0, self.beta0, self.t0 = lam0, float(lr), float(beta), float(t0)
        self.stage_steps, self.mu = stage_steps, float(mu)
        if self.radius is None:
            self.lam_max, lam = lam0, lam0
        else:
            self.lam_max = math.inf if loss_bound is None else lam0 + float(loss_bound) / radius
            lam = min(max(float(lam_init), lam0), self.lam_max)
        dev = self.param_groups[0]["params"][0].device
        f64 = dict(dtype=torch.float64, device=dev)
        self._sc = {"lam": torch.tensor(lam, **f64), "lam_prev": torch.tensor(lam, **f64),
                    "s": torch.tensor(0.0, **f64), "u": torch.tensor(0.0, **f64),
                    "m": torch.tensor(-math.inf, **f64)}
        self._params = [p for g in self.param_groups for p in g["params"]]
        self._prev = [p.detach().clone().requires_grad_(True) for p in self._params]
        # the previous iterate is a parameter group of its own (never stepped: lr 0), so that
        # zero_grad clears its gradients and a GradScaler unscales them with the others
        self.add_param_group({"params": self._prev, "lr": 0.0, "previous_iterate": True})
        self._t, self._started, self._pending, self._aliased = 0, False, None, False
        self._init_guard(process_group, on_divergence, check_every, blowup, rise)
        self._group_lr()

    @property
    def lam(self):
        return float(self._sc["lam"])

    def _host(self):
        """Whether this step's batch statistics and scalars run in NumPy / Python floats:
        eager (not :meth:`compile`) on the CPU (chosen by device, not by data)."""
        return self._compile_kwargs is None and _updates._host(self._sc["lam"])

    def previous_params(self, module):
        """``{name: tensor}`` of the previous iterate for ``torch.func.functional_call``
        (leaves whose gradients :meth:`step` reads).

        Under data parallelism (float32 / float64 parameters) they are instead aliases of
        the previous iterate whose gradient flows into the *current* parameters: the
        surrogate weighs the losses at the previous iterate by ``-(1 - beta)``, so that
        ``.grad`` holds ``g_t - (1 - beta) g_{t-1}`` (all STORM needs of the two) and DDP's
        own all-reduce averages it: no collective of the optimizer's for the gradients."""
        ids = {id(p): i for i, p in enumerate(self._params)}
        self._aliased = self._group() is not None and all(
            p.dtype in (torch.float32, torch.float64) for p in self._params)
        out = {}
        for name, p in module.named_parameters():
            if id(p) in ids:
                q = self._prev[ids[id(p)]]
                out[name] = _PrevAlias.apply(p, q) if self._aliased else q
        for name, b in module.named_buffers():
            out[name] = b
        return out

    def _schedule(self):
        if self.stage_steps is not None:
            t, k, length = self._t, 0, float(self.stage_steps)
            while t >= length:
                t, k, length = t - length, k + 1, 2 * length
            return self._group_lr() * 2.0 ** (-0.5 * k), min(1.0, self.beta0 * 2.0 ** -k)
        lr = self._group_lr()
        decay = (1.0 + self._t / self.t0) ** (1.0 / 3.0)
        eta = lr / decay
        return eta, min(1.0, self.beta0 * ((eta / lr) if lr > 0 else 1.0 / decay) ** 2)

    def surrogate(self, losses, losses_prev=None):
        """Rescale the estimators, prepare ``s`` and ``u``, and return the scalar whose
        ``backward()`` leaves ``sum_B e_i grad l_i(x_t) / lambda_t`` in the parameters' ``.grad``
        and the same at the previous iterate in the previous-parameter leaves."""
        for name, t in (("losses", losses), ("losses_prev", losses_prev)):
            if t is not None and (not isinstance(t, torch.Tensor) or t.ndim != 1
                                  or t.numel() != losses.numel()):
                raise ValueError(f"{name} must be a 1-D tensor of the batch's per-sample losses")
        if self._started and losses_prev is None:
            raise ValueError("ASCDRO needs the batch's losses at the previous iterate after "
                             "the first step (see previous_params)")
        sc = self._sc
        with torch.no_grad():
            _, beta = self._schedule()
            lam, lamp = sc["lam"], sc["lam_prev"]
            cols = [losses] if losses_prev is None else [losses, losses_prev]
            host = self._host()
            if host and self._group() is None and all(
                    c.dtype in _NP_LOSSES and c.device.type == "cpu" for c in cols):
                # one process, eager on the CPU: the losses as float64 copies in NumPy (the
                # same numbers as the gather's ``to``: exact)
                lnp = [c.detach().numpy().astype(numpy.float64) for c in cols]
                table, sizes, off = None, [lnp[0].size], 0
            else:
                table, sizes, off = self._gather(cols, lam.device)
                lnp = [table[:, k].numpy() for k in range(len(cols))] if host else None
            scale_w = float(len(sizes))
            loc = slice(off, off + losses.numel())
            b = sum(sizes)
            if b == 0:
                raise ValueError("surrogate needs a non-empty global batch")
            rho = 0.0 if self.radius is None else self.radius
            args = (b, math.log(b), beta, self._started, rho, self.shift_cost)
            if host:      # NumPy and Python floats (see _updates.ascdro_batch_host)
                if not all(numpy.isfinite(c).all() for c in lnp):
                    self._check_input_finite(torch.from_numpy(numpy.concatenate(lnp)),
                                             "losses")
                l64 = torch.from_numpy(lnp[0])
                s_old, s, u, m, coef, coef_p, restart, tracked = _updates.ascdro_batch_host(
                    lnp[0], lnp[1] if self._started else None, float(lam), float(lamp),
                    float(sc["s"]), float(sc["u"]), float(sc["m"]), *args)
                sc["s"], sc["u"], sc["m"] = _f64(s), _f64(u), _f64(m)
                coef = coef[loc] * scale_w if len(sizes) > 1 else coef
                coef_p = None if coef_p is None else coef_p[loc]
                self._pending = (beta, restart, s_old, (s, u, m))
            else:
                l64 = table[:, 0]
                self._check_input_finite(table, "losses")
                s_old, sc["s"], sc["u"], sc["m"], coef, coef_p, restart, tracked = \
                    self._kernel(_updates.ascdro_batch)(
                        l64, table[:, 1] if self._started else None, lam, lamp, sc["s"],
                        sc["u"], sc["m"], *args)
                coef = coef[loc] * scale_w
                coef_p = None if coef_p is None else coef_p[loc]
                self._pending = (beta, restart, s_old, None)
            self._track(tracked, window=l64, scale=lambda: l64.abs().mean())
        out = _weighted_sum(coef, losses)
        if self._started:       # (coef_p is zero at a restart)
            if self._aliased:      # the gradient at x_{t-1} goes into .grad: -(1 - beta) g_p
                scale_w = -(1.0 - beta) * scale_w
            cp = coef_p if scale_w == 1.0 else coef_p * scale_w
            out = out + _weighted_sum(cp, losses_prev)
        return out

    @torch.no_grad()
    def step(self, closure=None):
        loss = self._closure(closure)
        if self._pending is None:
            raise RuntimeError("call opt.surrogate(losses, losses_prev).backward() first")
        beta, restart, s_old, floats = self._pending
        lr, _ = self._schedule()
        sc = self._sc
        lam = sc["lam"]
        group = self._group()
        aliased, self._aliased = self._aliased, False
        if group is not None and self._started and not bool(restart) and not aliased:
            # DDP averages the gradients of the module's parameters only: average the
            # gradients at the previous iterate (leaves of this optimizer) in one collective
            for q in self._prev:
                if q.grad is None:
                    q.grad = torch.zeros_like(q)
            all_reduce_mean_([q.grad for q in self._prev], group)
            self._grad_reduces = getattr(self, "_grad_reduces", 0) + 1
        rho = 0.0 if self.radius is None else self.radius
        args = (self._params, self._prev, [p.grad for p in self._params],
                # aliased: .grad holds g_t - (1 - beta) g_{t-1} already (no separate g_{t-1})
                [None if aliased else q.grad for q in self._prev],
                [self.state[p].get("v_over_s") for p in self._params])
        got = None
        if floats is not None:     # the host path's Python floats (ascdro_update_host)
            got = _updates.ascdro_update_host(
                *args, s_old, *floats, float(lam), lr, beta, self.mu, restart, self._started,
                rho, self.shift_cost, self.lam_max)
        if got is not None:
            voss, lam_new = got
            lam_prev, sc["lam"] = lam, _f64(lam_new)
        else:
            if floats is not None:       # (a float16 / bfloat16 or mixed model)
                s_old, restart = _f64(s_old), torch.tensor(restart)
            lam_prev = lam.clone()
            voss, sc["lam"] = self._kernel(_updates.ascdro_update)(
                *args, s_old, sc["s"], sc["u"], sc["m"], lam, lr, beta, self.mu, restart,
                self._started, rho, self.shift_cost, self.lam_max)
        for p, q, vos in zip(self._params, self._prev, voss):
            q.grad = None
            if vos is not None:
                self.state[p]["v_over_s"] = vos
        sc["lam_prev"] = lam_prev
        self._started, self._pending = True, None
        self._t += 1
        self._end_step()
        return loss

    def _extra_tensors(self):
        return tuple(self._sc.values())

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self):
        """``torch.optim.Optimizer.state_dict()`` plus ``ascdro``: ``lambda``, the previous
        ``lambda``, ``s``, ``u``, ``m``, the previous iterate, ``t``, the started flag and the
        divergence guard -- everything a resumed run needs."""
        out = super().state_dict()
        out["ascdro"] = {"scalars": {k: v.detach().clone() for k, v in self._sc.items()},
                         "prev": [q.detach().clone() for q in self._prev],
                         "t": self._t, "started": self._started,
                         "guard": self._guard_state()}
        return out

    def load_state_dict(self, state_dict):
        """Load a :meth:`state_dict` (onto the parameters' device)."""
        state_dict = dict(state_dict)
        extra = state_dict.pop("ascdro", None)
        if extra is None:
            raise ValueError("state_dict has no 'ascdro' entry: not from an ASCDRO optimizer")
        if len(extra["prev"]) != len(self._params) or any(
                tuple(q.shape) != tuple(p.shape) for q, p in zip(extra["prev"], self._params)):
            raise ValueError("state_dict's previous iterate does not match the parameters")
        super().load_state_dict(state_dict)
        saved = state_dict.get("state", {})
        for i, p in enumerate(self._params):   # torch casts the state to the parameter dtype
            if "v_over_s" in saved.get(i, {}):
                self.state[p]["v_over_s"] = saved[i]["v_over_s"].to(p.device, _work_dtype(p))
        dev = self._params[0].device
        self._sc = {k: v.to(dev, torch.float64) for k, v in extra["scalars"].items()}
        with torch.no_grad():
            for q, saved, p in zip(self._prev, extra["prev"], self._params):
                q.data = saved.to(p.device, p.dtype).clone()
                q.grad = None
        self._t, self._started, self._pending = int(extra["t"]), bool(extra["started"]), None
        self._load_guard_state(extra.get("guard"))


class _PrevAlias(torch.autograd.Function):
    """``prev``'s values, with the gradient passed to ``p`` (ASCDRO under DDP)."""

    @staticmethod
    def forward(ctx, p, prev):
        return prev.detach().clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _work_dtype(p):
    """The dtype of ASCDRO's gradient estimator ``v / s`` for parameter ``p``: at least
    float32 (a float16 or bfloat16 model keeps its estimator in float32)."""
    return torch.promote_types(p.dtype, torch.float32)


#: the grid of lambda / spread of :func:`_kl_dro_value`: 4^-10 ... 4^6
_GRID_EXP = tuple(range(-20, 13, 2))
#: the grids ``2 ** exps`` by (device, exps)
_GRID = {}


def _kl_dro_value(batches, radius, shift_cost=0.0):
    r"""Each batch's KL-DRO value :math:`\max\{\sum_i p_i\ell_i - \lambda_0 KL(p\|u) :
    KL(p\|u) \le \rho\}` (``u`` uniform over the batch) through its dual
    :math:`\min_{\lambda\ge\lambda_0} \lambda\log\frac1b\sum_i e^{\ell_i/\lambda}
    + (\lambda-\lambda_0)\rho`, minimised over a geometric grid of ``lambda`` (factor 4
    apart, ``2^-20`` to ``2^12`` times the spread of the batch's losses, and ``lambda_0``):
    an upper bound, within 25 % of the excess over the mean loss for Gaussian losses.
    ``radius=None``: the KL-penalised value :math:`\lambda_0\log\frac1b\sum_i
    e^{\ell_i/\lambda_0}` (RECOVER). One tensor program over all the batches (a list of 1-D
    tensors, padded), no host sync; float64.

    >>> import torch
    >>> l = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    >>> v = _kl_dro_value([l, l[:2]], 0.1)
    >>> bool(1.5 < v[0] < 3.0 and 0.5 < v[1] < 1.0)
    True
    """
    return _kl_dro_dual(batches, radius, shift_cost).amin(1)


def _kl_dro_dual(batches, radius, shift_cost=0.0, exps=_GRID_EXP):
    """:func:`_kl_dro_value`'s dual objective at each ``lambda`` of its grid: a (batches,
    ``len(exps) + 1``) array, the columns ``lambda = 2^e`` times the spread (``e`` in
    ``exps``) and ``lambda_0`` (each at least ``lambda_0``). Any subset of the grid's
    exponents gives some of the grid's columns: their minimum bounds the value from above."""
    rows = [t.reshape(-1).to(torch.float64) for t in batches]
    dev = rows[0].device
    sizes = [t.numel() for t in rows]
    padded = len(set(sizes)) > 1        # (equal batches: one stack, no padding to mask)
    L = (torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=-math.inf)
         if padded else torch.stack(rows))
    lam0 = max(float(shift_cost), 1e-300)
    hi = L.amax(1)
    if radius is None:
        lam = torch.full((len(rows), 1), lam0, dtype=torch.float64, device=dev)
        radius = 0.0
    else:
        lo = (torch.where(torch.isinf(L), math.inf, L) if padded else L).amin(1)
        spread = torch.maximum(hi - lo, 1e-12 * torch.maximum(hi.abs(), lo.abs()))
        grid = _GRID.get((dev, exps))
        if grid is None:
            grid = _GRID[dev, exps] = torch.exp2(torch.tensor(exps, dtype=torch.float64,
                                                              device=dev))
        lam = torch.cat([spread.clamp(min=1e-300)[:, None] * grid,
                         torch.full((len(rows), 1), lam0, dtype=torch.float64, device=dev)],
                        1).clamp(min=lam0)
    # the log-sum-exp with its shift known (the batch's largest loss over lambda > 0): two
    # passes fewer over the (batches, grid, rows) array than torch.logsumexp
    e = ((L - hi[:, None])[:, None, :] / lam[:, :, None]).exp_().sum(2)
    lse = e.log_() + hi[:, None] / lam - torch.log(
        torch.tensor(sizes, dtype=torch.float64, device=dev))[:, None]
    return lam * (lse + radius) - float(shift_cost) * radius
