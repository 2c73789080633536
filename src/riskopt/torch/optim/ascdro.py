r"""ASCDRO / RASCDRO / RECOVER for any ``nn.Module``: the SCDRO paper's STORM method
(``../shared/papers/scdro_kl_constrained_dro.txt``, Algorithm 2; with ``stage_steps``
Algorithm 3, RASCDRO; ``radius=None`` the KL-penalised objective of RECOVER, Qi et al. 2021)
for the KL-constrained DRO problem of :mod:`riskopt.torch.optim.kl_dro`, whose moving-average
method :class:`~riskopt.torch.optim.SCDRO` is the simpler alternative.

STORM corrects each moving average with the same batch's statistics at the *previous*
iterate, so a step needs the batch's losses at both iterates (two gradient evaluations, as
in the paper); :meth:`~riskopt.torch.optim.ASCDRO.previous_params` gives the previous
iterate for :func:`torch.func.functional_call`. The estimators of ``E exp(l / lambda)`` (``s``) and of its
``lambda``-derivative (``u``) are kept scaled by ``exp(-m)`` (``m`` a running maximum of
``l / lambda``), the gradient estimator as its ratio ``v / s``; they restart on the current
batch when ``s`` is no longer a valid estimate. Works on CPU and CUDA tensors; under DDP the
batch's losses are all-gathered and the scalars are identical on every rank.
(:class:`~riskopt.torch.optim.ASCDRO` is also importable from
:mod:`riskopt.torch.optim.kl_dro`, its former home.)

Unlike :class:`~riskopt.torch.optim.SCDRO`, ASCDRO has no stall report (``stall_steps``):
its weights cannot all underflow. SCDRO shifts a batch's exponentials by ``log s``, a moving
average of earlier batches, which can sit far above the batch; ASCDRO shifts them by the
batch's own largest ``l / lambda`` at the two iterates, and when the weights at the current
iterate still sum to zero it restarts its estimators on the batch alone, whose largest
coefficient is then ``1 / (b lambda)``. Its step ``lambda v / s`` is a ratio of two
estimators kept in the same scale. ``benchmarks/ascdro_stall_probe.py`` (96 runs of ASCDRO /
RASCDRO / RECOVER on the data where SCDRO stalls, float64 and float32): 2,036 steps with
``lambda`` at its floor and no step that left the parameters unchanged; what it did
instead, in 38 runs, was diverge to non-finite losses, which raises ``DivergenceError``
(measured before the stale-estimator restart, see :class:`ASCDRO`'s "Starting at lambda's
floor", which removed one cause of those non-finite values).
"""
import math

import numpy
import torch

from ..._validation import check_positive
from ..distributed import all_reduce_mean_
from . import _updates_kl
from ._guard import GuardMixin
from ._kl_window import _NP_LOSSES, _KLMultiplier, _KLWindow, _check_rates, _f64

__all__ = ["ASCDRO"]


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

class ASCDRO(_KLMultiplier, _KLWindow, GuardMixin, torch.optim.Optimizer):
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
    step) where that kernel's own safeguards do not bind (its ``lambda`` moves at most 11 %
    a step, ``LAM_FACTOR``; with a box it also restarts when the estimators leave Lemma 1's
    bound).

    **Starting at lambda's floor** (``lam_init`` near ``shift_cost``, e.g. 1e-3) is the
    method's hard case, not a setting to expect to train. There ``exp(l / lambda)`` is
    heavy-tailed: one earlier batch's largest loss can outweigh a whole batch by
    ``exp(600)`` and more, and the step of ``lambda``, ``lambda u / s + log s + rho``, is a
    difference of terms of size ``l / lambda`` (1e3 for a loss of 1), so the STORM
    estimators' error moves ``lambda`` by orders of magnitude (the paper's condition ``lr
    <= 1 / (4 L_F)``, with ``L_F`` growing like ``exp(max loss / lambda_0) / lambda_0^2``,
    cannot hold there). Estimators that an earlier batch outweighs by more than ``exp(600)``
    (float64 estimators of ``v / s``; ``exp(60)`` for float32) restart on the batch
    (``_updates_kl._STALE``); before, they overflowed and the run ended in NaN
    parameters. ``benchmarks/ascdro_floor_probe.py`` (the small regression problem of
    ``riskopt.torch.optim._drive`` from ``lam_init=1e-3``, 60 steps, ASCDRO and RASCDRO,
    float64 and float32, lr 0.1 / 0.01 / 0.001): before the restart, 7 of the 12 runs ended
    in NaN values; now none does: lr 0.001 (and lr 0.01 in float32) end without a report,
    and lr 0.1 and,
    in float64, lr 0.01 still diverge (6 runs; ``lambda`` runs to 50-3e6), reported by the
    divergence check, whose message then says where ``lambda`` started and what to change:
    ``lam_init=1`` (the default), with which 5 of those 6 runs end below their starting
    loss without a report, or a smaller ``lr``. The linear-model solver
    :class:`riskopt.solvers.ASCDRO` does not diverge from ``lam0=1e-3`` on the same data:
    its ``LAM_FACTOR`` lets ``lambda`` grow 11 % a step, from 1e-3 to 0.04-0.19 in 60 steps.
    """

    _KEY = "ascdro"        # (its entry in state_dict)

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
        _check_rates(lr, beta, mu)
        check_positive("t0", t0)
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
        self._lam_start = lam
        dev = self.param_groups[0]["params"][0].device
        f64 = dict(dtype=torch.float64, device=dev)
        self._scalars = {"lam": torch.tensor(lam, **f64), "lam_prev": torch.tensor(lam, **f64),
                    "s": torch.tensor(0.0, **f64), "u": torch.tensor(0.0, **f64),
                    "m": torch.tensor(-math.inf, **f64)}
        self._params = [p for g in self.param_groups for p in g["params"]]
        # how far the estimators' scale may sit above a batch's before they restart
        self._stale = _updates_kl._STALE if all(
            _work_dtype(p) == torch.float64 for p in self._params) else _updates_kl._STALE32
        self._prev = [p.detach().clone().requires_grad_(True) for p in self._params]
        # the previous iterate is a parameter group of its own (never stepped: lr 0), so that
        # zero_grad clears its gradients and a GradScaler unscales them with the others
        self.add_param_group({"params": self._prev, "lr": 0.0, "previous_iterate": True})
        self._t, self._started, self._pending, self._aliased = 0, False, None, False
        self._init_guard(process_group, on_divergence, check_every, blowup, rise)
        self._group_lr()

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
        sc = self._scalars
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
            args = (b, math.log(b), beta, self._started, rho, self.shift_cost, self._stale)
            if host:      # NumPy and Python floats (see _updates_kl.ascdro_batch_host)
                if not all(numpy.isfinite(c).all() for c in lnp):
                    self._check_input_finite(torch.from_numpy(numpy.concatenate(lnp)),
                                             "losses")
                l64 = torch.from_numpy(lnp[0])
                s_old, s, u, m, coef, coef_p, restart, tracked = _updates_kl.ascdro_batch_host(
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
                    self._kernel(_updates_kl.ascdro_batch)(
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
        sc = self._scalars
        lam = sc["lam"]
        group = self._group()
        aliased, self._aliased = self._aliased, False
        # (the host path's restart is a bool; the tensor code's is not read: its all-reduce
        # runs at a restart too, whose step takes the gradient alone)
        skip = restart if isinstance(restart, bool) else False
        if group is not None and self._started and not aliased and not skip:
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
            got = _updates_kl.ascdro_update_host(
                *args, s_old, *floats, float(lam), lr, beta, self.mu, restart, self._started,
                rho, self.shift_cost, self.lam_max)
        if got is not None:
            voss, lam_new = got
            lam_prev, sc["lam"] = lam, _f64(lam_new)
        else:
            if floats is not None:       # (a float16 / bfloat16 or mixed model)
                s_old, restart = _f64(s_old), torch.tensor(restart)
            lam_prev = lam.clone()
            voss, sc["lam"] = self._kernel(_updates_kl.ascdro_update)(
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
        return tuple(self._scalars.values())

    def _advice(self):
        """The guard's advice, and where ``lambda`` started near its floor (within 10 x
        ``shift_cost``; not RECOVER, whose ``lambda`` is fixed) what to change there: the
        class docstring's "Starting at lambda's floor"."""
        out = super()._advice()
        if self.radius is None or self._lam_start > 10.0 * max(self.shift_cost, 1e-300):
            return out
        return (f"{out}; lambda started at {self._lam_start:g}, near its floor "
                f"shift_cost={self.shift_cost:g}, where exp(loss / lambda) is heavy-tailed: "
                "the STORM estimate of lambda's gradient, a difference of terms of size "
                "loss / lambda, errs by about loss / lambda and lambda runs away (the "
                "paper's step-size condition, lr <= 1 / (4 L_F) with L_F growing like "
                "exp(max loss / lambda), fails by far); start lambda at the losses' scale "
                "(lam_init=1, the default), or keep lr far below lambda")

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self):
        """``torch.optim.Optimizer.state_dict()`` plus ``ascdro``: ``lambda``, the previous
        ``lambda``, ``s``, ``u``, ``m``, the previous iterate, ``t``, the started flag and the
        divergence guard -- everything a resumed run needs."""
        out = super().state_dict()
        out[self._KEY] = self._checkpoint(prev=[q.detach().clone() for q in self._prev])
        return out

    def load_state_dict(self, state_dict):
        """Load a :meth:`state_dict` (onto the parameters' device)."""
        state_dict, extra = self._pop_checkpoint(state_dict)
        if len(extra["prev"]) != len(self._params) or any(
                tuple(q.shape) != tuple(p.shape) for q, p in zip(extra["prev"], self._params)):
            raise ValueError("state_dict's previous iterate does not match the parameters")
        super().load_state_dict(state_dict)
        saved = state_dict.get("state", {})
        for i, p in enumerate(self._params):   # torch casts the state to the parameter dtype
            if "v_over_s" in saved.get(i, {}):
                self.state[p]["v_over_s"] = saved[i]["v_over_s"].to(p.device, _work_dtype(p))
        dev = self._params[0].device
        self._scalars = {k: v.to(dev, torch.float64) for k, v in extra["scalars"].items()}
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
