r"""SCDRO / RSCDRO for any ``nn.Module`` (the STORM methods ASCDRO / RASCDRO / RECOVER:
:mod:`riskopt.torch.optim.ascdro`, also importable from here; the primal-dual PG-SMD2 / SPD
baseline: :mod:`riskopt.torch.optim.pgsmd2`): KL-constrained DRO (the SCDRO paper's methods,
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
from ..distributed import carrier_dtype
from . import _comm, _updates_kl
from ._guard import GuardMixin
# (the shared window and dual grid, and ASCDRO, re-exported: their former home)
from ._kl_window import (_F32_EXACT, _GRID_EXP, _NP_LOSSES, _KLMultiplier,  # noqa: F401
                         _KLWindow, _check_rates, _f64, _kl_dro_dual, _kl_dro_value)
from .ascdro import ASCDRO

__all__ = ["SCDRO", "ASCDRO"]


class SCDRO(_KLMultiplier, _KLWindow, GuardMixin, torch.optim.Optimizer):
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
        Data parallelism (:mod:`riskopt.torch.optim._comm`) and the divergence check
        (:mod:`riskopt.torch.optim._guard`):
        under DDP the batch's losses are all-gathered (one collective per step) and
        ``lambda``, ``log s`` and ``u`` are identical on every rank.
    stall_steps : int >= 1, default 20
        A *stall* is a step whose batch weights ``exp(l / lambda - log s) / b`` all underflow
        (``log s`` still holds earlier batches at a smaller ``lambda``): the gradient is
        exactly zero and the parameters only coast on the moving average ``v``. It is
        reported through ``on_divergence`` (once per run, at the next check, naming its first
        step) when ``stall_steps`` consecutive steps stall; a shorter run is not reported
        (most end by themselves once ``log s`` has fallen to the batches' level). The
        default, from
        ``benchmarks/scdro_stall_lengths.py`` (102 runs of 160-200 steps): 380 of the 381
        stalls that ended by themselves lasted at most 15 steps (the other, 62 steps on a
        run that did not train, is reported); the 19 that lasted to the end of their run and
        were not cut short by it, all at ``lambda``'s floor, 34 steps or more. The count is
        a device flag read with the guard's (no host synchronisation), the same on every
        rank, saved in ``state_dict``.
    """

    _KEY = "scdro"        # (its entry in state_dict)

    def __init__(self, params, radius=0.5, shift_cost=1e-3, lr=0.1, beta=0.1, lam_init=1.0,
                 loss_bound="auto", max_norm=None, stage_steps=None, mu=0.0, *,
                 process_group=None, on_divergence="warn", check_every=10, blowup=1e6,
                 rise=1.0, stall_steps=20):
        check_positive("radius", radius)
        check_positive("shift_cost", shift_cost, allow_zero=True)
        _check_rates(lr, beta, mu)
        check_positive("lam_init", lam_init)
        if isinstance(stall_steps, bool) or not isinstance(stall_steps, int) or stall_steps < 1:
            raise ValueError(f"stall_steps must be an int >= 1, got {stall_steps!r}")
        self.stall_steps = stall_steps
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
        if host:       # NumPy and Python floats (see _updates_kl.scdro_batch_host)
            lo, top, loss_max, log_s, w, g_lam, tracked = _updates_kl.scdro_batch_host(
                l64.numpy(), float(lam), float(sc["log_s"]), float(sc["loss_max"]), *args)
            loss_max, log_s, g_lam, w = _f64(loss_max), _f64(log_s), _f64(g_lam), \
                torch.from_numpy(w)
        else:
            lo, top, loss_max, log_s, w, g_lam, tracked = self._kernel(_updates_kl.scdro_batch)(
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
        stalled = float(w.numpy().sum()) < tiny if host else w.sum() < tiny
        self._flag_stall(stalled, (lam, tracked, log_s), self.stall_steps)
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
        k = self.stall_steps
        run = (f"at this step and the {k - 1} after it (stall_steps={k})" if k > 1
               else "at this step (stall_steps=1)")
        return (f"{type(self).__name__} stalled at step {step}: lambda = {lam:.6g} ({floor}); the "
                f"batch's log-mean-exp of l / lambda, X = {x:.6g}, is below log s = {log_s:.6g} "
                f"(a moving average of earlier batches) by {log_s - x:.4g}, so every weight "
                f"exp(l / lambda - log s) underflowed to 0, {run}: the gradient is exactly zero, "
                f"lambda's derivative (rho + log s > 0) drives it to lambda_0, and log s "
                f"falls only by {drop:.3g} a step: the model only coasts on its moving "
                f"average while this lasts (it can last for the rest of the run; reported "
                f"once). Raise shift_cost (lambda_0), lower lr relative to beta (now "
                f"lr={self._lr_text()}, beta={beta:g}), or normalise the losses (e.g. "
                f"standardised targets)")

    #: how far (in the exponent) a rank's local shift may be from the previous ``log s``
    #: for its gradient to be rescaled inside the all-reduce, by the carrier dtype
    #: (float64: e^709 at most; float32: e^88, and room for the gradient's own size)
    _POST_RANGE = {torch.float64: 600.0, torch.float32: 40.0}

    #: with :meth:`attach`, how a rank's shift out of range (its largest ``l / lambda`` beyond
    #: ``e^600`` from ``log s``, e.g. ``lambda`` at its floor) is handled: ``"sync"``
    #: (default) corrects it exactly (a second all-reduce that step; deciding it reads the
    #: shifts on the host, one read a step); ``"async"``, on a device with ``check_every``:
    #: the shifts and the range test stay on the device (no host read), and an out-of-range
    #: step leaves that rank's gradient out and is a device flag read by the next divergence
    #: check, which raises :class:`DivergenceError` naming the step.
    attach_checks = "sync"

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
        exact32 = losses.dtype in _F32_EXACT
        if self.attach_checks not in ("sync", "async"):
            raise ValueError(f"attach_checks must be 'sync' or 'async', got {self.attach_checks!r}")
        self._post_device = (self.attach_checks == "async" and bool(self.check_every)
                             and _comm._on_device(lam))
        if self._post_device:
            return self._surrogate_posted_device(losses, a, c0, exact32)
        # (numbers, one host read: fewer small tensor ops)
        c, c0f = torch.stack([a.max(), c0]).tolist() if a.numel() else [float(c0)] * 2
        # float32 losses: the shift c rounded to a float32 number, so that everything posted
        # travels as one float32 each in a float32 bucket (any shift cancels; the flag is
        # the dtype's, the same on every rank; a c beyond float32 arrives as inf and the
        # others take it for out of range, which the correction handles exactly)
        if exact32 and math.isfinite(c) and abs(c) < 3e38:
            c = float(numpy.float32(c))
        d = c - c0f
        ok = math.isfinite(d) and abs(d) <= self._post_range()
        self._post_c0, self._post_c = c0, c
        self._post([losses], [c], math.exp(d) if ok else 0.0, lam.device, local_ok=ok,
                   exact32=exact32)
        return torch.exp(a - c)

    def _surrogate_posted_device(self, losses, a, c0, exact32):
        """:meth:`_surrogate_posted` on a device with ``check_every``: the shift ``c``, the
        range test and the factor as tensors (no host read). A rank out of range posts 0
        as on the host; :meth:`_finish_posted` then flags the step on the device (read with
        the next divergence check, which raises): the exact correction, a second
        all-reduce, would need the flag on the host at this step."""
        c = a.max() if a.numel() else c0.clone()
        if exact32:                 # (as float(numpy.float32(c)) on the host path)
            c = torch.where(torch.isfinite(c) & (c.abs() < 3e38),
                            c.to(torch.float32).to(torch.float64), c)
        d = c - c0
        ok = torch.isfinite(d) & (d.abs() <= self._post_range())
        self._post_c0, self._post_c = c0, c
        self._post([losses], [c], torch.where(ok, torch.exp(d), torch.zeros_like(d)),
                   c0.device, local_ok=True, exact32=exact32)
        return torch.exp(a - c)

    def _input_text(self, what, step):
        if what != "shifts":
            return super()._input_text(what, step)
        return (f"{type(self).__name__} (attach): at step {step} a rank's largest loss / "
                f"lambda was out of range (beyond e^{self._post_range():g} from log s, or not "
                "finite): its gradient could not ride on DDP's all-reduce scaled and was left "
                "out of that step and of any later such step until this check (on a device "
                "the exact correction, a second all-reduce, would need a host read every "
                "step). Resume from a checkpoint before that step with attach_checks='sync' (the "
                "default: the correction, one host read a step), without attach (the optimizer gathers "
                "the losses itself), or with a larger shift_cost (lambda_0)")

    def _finish_posted(self, table, sizes, off, scalars):
        """The hook's end (:class:`~riskopt.torch.distributed.Piggyback`): the update on the
        gathered losses; returns the common factor of the summed gradient."""
        w = self._update(table[:, 0])
        log_s, c0 = self._scalars["log_s"], self._post_c0
        rng = self._post_range()
        if getattr(self, "_post_device", False):   # every rank the same gathered flag
            d = scalars[:, 0] - c0
            self._g_inputs.append(("shifts", self._g_steps + 1,
                                   (torch.isfinite(d) & (d.abs() <= rng)).all()))
            return torch.exp(c0 - log_s) / w.numel()
        c0f = float(c0)
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
            _updates_kl.scdro_params(params, vs, moving_vs, [p.grad for p in moving], lr, beta,
                                  self.mu, self.max_norm)
            u, lam = _updates_kl.scdro_lambda_host(
                float(sc["u"]), float(sc["g_lam"]), float(sc["lam"]), float(sc["loss_max"]),
                lr, beta, self.mu, self._started, self.shift_cost, hi, self.radius)
            sc["u"], sc["lam"] = _f64(u), _f64(lam)
        else:
            sc["u"], sc["lam"] = self._kernel(_updates_kl.scdro_update)(
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
        out[self._KEY] = self._checkpoint()
        return out

    def load_state_dict(self, state_dict):
        state_dict, extra = self._pop_checkpoint(state_dict)
        super().load_state_dict(state_dict)
        dev = self.param_groups[0]["params"][0].device
        self._scalars = {k: v.to(dev) for k, v in extra["scalars"].items()}
        self._t, self._started, self._pending = int(extra["t"]), bool(extra["started"]), False
        self._load_guard_state(extra.get("guard"))
