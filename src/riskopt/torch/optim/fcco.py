r"""SONEX, SONX, SOX, ALEXR2 and OOA for any ``nn.Module``: non-smooth finite-sum coupled
compositional optimization (group DRO, constrained learning with hinge penalties).

Paper: "Non-smooth finite-sum coupled compositional optimization"
(``../shared/papers/sonex_alexr2_nonsmooth_fcco.txt``, Algorithms 1-2, Sections 4-6, App. F).
The problem, over the parameters ``w`` of a model,

.. math::

    \min_w\ g_0(w) + \frac1m \sum_{i=1}^m f_i(g_i(w)), \qquad
    g_i(w) = \mathbb E_{\xi}\, g_i(w; \xi),

with ``m`` outer indices (groups, constraints), inner functions ``g_i`` estimated on a mini-batch
``B_i`` of the data of index ``i``, non-smooth convex outer functions ``f_i`` and an optional
*direct* term ``g_0`` (the objective of constrained learning). The outer functions are small
objects with ``grad(u, lam)``, the gradient of the Moreau envelope
:math:`f_\lambda(u) = \min_v f(v) + (u - v)^2 / (2\lambda)` (``lam = 0``: a subgradient):

===================================  ==========================================================
:class:`Hinge` ``(rho, kappa)``      :math:`\rho[u-\kappa]_+`; envelope gradient
                                     :math:`\mathrm{clip}((u-\kappa)/\lambda, 0, \rho)`
:class:`AbsHinge` ``(rho, kappa)``   :math:`\rho[|u|-\kappa]_+` (a two-sided constraint
                                     :math:`|u| \le \kappa`, e.g. ROC fairness);
                                     :math:`\mathrm{sign}(u)\,\mathrm{clip}((|u|-\kappa)
                                     /\lambda, 0, \rho)`
:class:`SquaredHinge` ``(rho)``      :math:`\frac\rho2 [u-\kappa]_+^2` (``absolute=True``:
                                     :math:`|u|`), smooth: :math:`\rho[u-\kappa]_+`, ``lam``
                                     ignored (the outer function of SOX)
:class:`GroupCVaR` ``(r)``           :math:`s + \frac1r[u-s]_+` with a scalar threshold ``s``
                                     that the optimizer keeps and updates: the mean over
                                     groups is the CVaR of the group losses (Eq. (10))
===================================  ==========================================================

The optimizers keep a table ``u`` of the ``m`` tracked inner values (on the parameters'
device, in ``state_dict``; ``u_i`` is set to the first estimate on its first visit). One step
with the distinct outer indices ``I`` of the batch:

1. the user evaluates ``g_now`` (shape ``(|I|,)``, with graph) and, for the MSVR methods, the
   same estimates at the previous iterate ``g_prev`` (no graph; :meth:`~SONEX.evaluate_previous`
   or :func:`torch.func.functional_call` with :meth:`~SONEX.previous_params`);
2. ``opt.surrogate(I, g_now, g_prev, direct=...)`` updates
   :math:`u_i \leftarrow (1-\gamma)u_i + \gamma g_i(w_t) + \gamma'(g_i(w_t) - g_i(w_{t-1}))`,
   sets :math:`y_i = \nabla f_{i,\lambda}(u_i)` and returns
   :math:`\mathrm{direct} + \frac1{|I|}\sum_{i\in I} y_i\, g_i(w_t)` with ``y`` constant, so
   that ``backward()`` leaves the estimate :math:`G_t` in ``.grad``;
3. ``opt.step()``: :math:`v \leftarrow (1-\beta)v + \beta(G_t + \text{weight\_decay}\ w)`,
   :math:`w \leftarrow w - \text{lr}\ v` (``update="momentum"``) or the Adam-type step with
   ``v`` as first moment (:math:`\beta_1 = 1-\beta`), second moment rate ``betas2`` and bias
   corrections (``update="adam"``, the paper's Appendix E).

With :class:`GroupCVaR` the threshold ``s`` is a parameter of the optimizer (its own parameter
group, ``opt.s``): the surrogate is :math:`s + \frac1{|I|}\sum_i y_i (g_i - s)`, whose
``s``-derivative is :math:`1 - \frac1{|I|}\sum_i h_\lambda'(u_i - s)`, and ``s`` takes the same
update as ``w`` (no weight decay). ``lr`` lives in the parameter groups, so
``torch.optim.lr_scheduler`` schedules apply (to the outer step ``alpha`` for ALEXR2).

Examples
--------
>>> import torch
>>> from riskopt.torch.optim import SONEX, GroupCVaR
>>> g = torch.Generator().manual_seed(0)
>>> X = torch.randn(400, 3, generator=g); grp = torch.arange(400) % 4
>>> y = (X[:, 0] + 0.5 * grp * torch.randn(400, generator=g) > 0).double()
>>> X = X.double(); model = torch.nn.Linear(3, 1).double()
>>> opt = SONEX(model.parameters(), n_outer=4, outer=GroupCVaR(0.5), lr=0.05)
>>> def inner(f, rows):
...     losses = torch.nn.functional.binary_cross_entropy_with_logits(
...         f(X[rows])[:, 0], y[rows], reduction="none")
...     return losses.view(4, -1).mean(1)          # rows are grouped by 4 ids
>>> for t in range(300):
...     rows = (torch.arange(4)[:, None] + 4 * torch.randint(0, 100, (4, 8), generator=g))
...     rows = rows.ravel()
...     g_now = inner(model, rows)
...     g_prev = opt.evaluate_previous(model, lambda f: inner(f, rows))
...     opt.zero_grad()
...     opt.surrogate(torch.arange(4), g_now, g_prev).backward()
...     opt.step()
>>> 0.0 < opt.s < 1.0
True
"""
import math

import numpy
import torch

from ..._validation import check_int, check_positive
from . import _updates, _updates_fcco
from .base import IndexedStateOptimizer
from .outer import AbsHinge, GroupCVaR, Hinge, SquaredHinge  # noqa: F401  (re-exported)

__all__ = ["Hinge", "AbsHinge", "SquaredHinge", "GroupCVaR", "SONEX", "SONX", "SOX", "ALEXR2",
           "OOA", "project_capped_simplex"]

_UPDATES = ("momentum", "adam")


# ---------------------------------------------------------------------------- optimizers
def _unit(name, value):
    v = check_positive(name, value)
    if v > 1:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
    return v


class _FCCOBase(IndexedStateOptimizer):
    """Shared machinery: the ``u`` table, the GroupCVaR threshold ``s`` (own parameter group),
    the previous iterate, the surrogate and the first / second moments."""

    _keys = ("prev", "v", "m2")

    def _setup(self, params, defaults, n_outer, outer, update, gamma, gamma_prime, smoothing,
               betas2, eps, guard):
        if not callable(getattr(outer, "grad", None)):
            raise ValueError(f"outer must be an outer function with grad(u, lam) (Hinge, "
                             f"AbsHinge, SquaredHinge, GroupCVaR), got {outer!r}")
        if update not in _UPDATES:
            raise ValueError(f"update must be one of {_UPDATES}, got {update!r}")
        check_positive("lr", defaults["lr"])
        _unit("beta", defaults["beta"])
        check_positive("weight_decay", defaults["weight_decay"], allow_zero=True)
        b2 = check_positive("betas2", betas2, allow_zero=True)
        if b2 >= 1:
            raise ValueError(f"betas2 must be in [0, 1), got {betas2}")
        self.outer, self.update = outer, update
        self.gamma, self.gamma_prime = _unit("gamma", gamma), check_positive(
            "gamma_prime", gamma_prime, allow_zero=True)
        self.smoothing = check_positive("smoothing", smoothing, allow_zero=True)
        self.betas2, self.eps = b2, check_positive("eps", eps)
        super().__init__(params, defaults, n_indices=check_int("n_outer", n_outer), **guard)
        self.add_indexed_state("u")
        self.add_indexed_state("seen", dtype=torch.bool)
        self._s = None
        if getattr(outer, "has_threshold", False):
            self._s = torch.zeros((), dtype=self._default_dtype(), device=self.device,
                                  requires_grad=True)
            self.add_param_group({"params": [self._s], "weight_decay": 0.0})
        self._t, self._pending = 0, None
        # SONX / SOX never read the previous iterate: it is kept (copied at every step) only
        # once previous_params asks for it (see there)
        self._keep_prev = self._gp() > 0
        for p in self._params():
            st = self.state[p]
            for k in self._keys:
                if k in ("prev", "anchor"):
                    st[k] = p.detach().clone()
                elif k == "v" or update == "adam":
                    st[k] = torch.zeros_like(p)

    def _params(self):
        return [p for g in self.param_groups for p in g["params"]]

    @property
    def s(self):
        """The GroupCVaR threshold ``s`` (a float; None for other outer functions)."""
        return None if self._s is None else float(self._s.detach())

    # ------------------------------------------------------------------ devices
    def _sync_device(self):
        params = self._params()
        key = [p.device for p in params]        # (the last synced placement: nothing to do)
        if key == getattr(self, "_synced", None):
            return
        super()._sync_device()
        dev = self.device
        if self._s is not None and self._s.device != dev:
            self._s.data = self._s.data.to(dev)
        for p in params:
            for k, v in self.state[p].items():
                if isinstance(v, torch.Tensor) and v.device != p.device:
                    self.state[p][k] = v.to(p.device)
        self._synced = key

    # ------------------------------------------------------------------ previous iterate
    def previous_params(self, module):
        """``{name: tensor}`` of the previous iterate (detached) for the parameters of
        ``module`` that this optimizer updates, for :func:`torch.func.functional_call`.

        SONX and SOX (``gamma_prime = 0``) do not use it, so they keep it (one copy of the
        parameters per step) only from the first call on: call it (or
        :meth:`evaluate_previous`) before the first step if it is wanted later; a first call
        after steps without it raises."""
        if not self._keep_prev:
            if self._t:
                raise RuntimeError(
                    f"{type(self).__name__} does not keep the previous iterate (it does not "
                    "use it): call previous_params / evaluate_previous before the first step "
                    "to have it kept")
            self._keep_prev = True           # (before any step: the initial parameters)
        ids = {id(p): p for p in self._params()}
        return {name: self.state[ids[id(p)]]["prev"] for name, p in module.named_parameters()
                if id(p) in ids}

    @property
    def needs_previous(self):
        """Whether :meth:`surrogate` needs ``g_prev`` (``gamma_prime > 0``: SONEX, ALEXR2;
        not SONX / SOX, which can skip :meth:`evaluate_previous`, a forward pass)."""
        return self._gp() > 0

    def evaluate_previous(self, module, fn):
        """``fn(call)`` under ``torch.no_grad()``, ``call(*args, **kwargs)`` being ``module``
        evaluated at the previous iterate (its buffers copied, so running statistics are left
        alone): the ``g_prev`` of :meth:`surrogate`, e.g.
        ``opt.evaluate_previous(model, lambda f: group_losses(f(x), y))``."""
        tensors = {**{n: b.clone() for n, b in module.named_buffers()},
                   **self.previous_params(module)}

        def call(*args, **kwargs):
            return torch.func.functional_call(module, tensors, args, kwargs)

        with torch.no_grad():
            return fn(call)

    # ------------------------------------------------------------------ the estimator
    def _check_batch(self, indices, g_now, g_prev, need_prev):
        self._sync_device()
        idx = self._distinct_indices(
            indices, "the outer indices of a step must be non-empty and distinct")
        for name, g in (("g_now", g_now), ("g_prev", g_prev)):
            if g is None:
                continue
            if not isinstance(g, torch.Tensor) or g.ndim != 1 or g.numel() != idx.numel():
                raise ValueError(f"{name} must be a 1-D tensor with one inner estimate per "
                                 f"outer index ({idx.numel()}), got "
                                 f"{getattr(g, 'shape', type(g).__name__)}")
        if need_prev and g_prev is None:
            raise ValueError(f"{type(self).__name__} needs g_prev, the inner estimates at the "
                             "previous iterate (opt.evaluate_previous(model, fn))")
        return idx

    def surrogate(self, indices, g_now, g_prev=None, direct=None, counts=None,
                  direct_count=None):
        r"""Update the tracked values ``u_i`` of the batch's outer indices and return the
        scalar :math:`\mathrm{direct} + \frac1{|I|}\sum_{i\in I} y_i\, g_{\mathrm{now},i}`
        (``y_i = outer.grad(u_i, smoothing)`` held constant; with :class:`GroupCVaR`,
        :math:`s + \frac1{|I|}\sum_i y_i (g_{\mathrm{now},i} - s)`), whose ``backward()``
        leaves the method's gradient estimate in ``.grad``.

        Parameters
        ----------
        indices : tensor, array or sequence of int
            The distinct outer indices ``I`` of the step, in ``[0, n_outer)``.
        g_now : tensor of shape ``(len(I),)``
            The inner estimates :math:`g_i(w_t; B_i)` at the current parameters, with graph.
        g_prev : tensor of shape ``(len(I),)``, optional
            The same estimates (same rows) at the previous iterate, without graph; needed when
            ``gamma_prime > 0`` (:meth:`evaluate_previous`).
        direct : scalar tensor, optional
            The batch estimate of the direct term :math:`g_0` (differentiated as is; under
            DDP its gradient is averaged over the ranks, as DDP does for any loss).
        counts : tensor of shape ``(len(I),)``, optional
            Under data parallelism: the number of rows behind each estimate (``g_now``,
            ``g_prev`` are means over ``counts[i]`` rows of index ``i``). An index present on
            several ranks gets the counts-weighted mean of the ranks' estimates, which is the
            estimate on the global batch, exactly; without ``counts`` every rank's estimate
            counts once (exact when the ranks hold equally many rows of each index). Ignored
            without a process group.
        direct_count : float, optional
            Under data parallelism: the number of rows behind ``direct`` on this rank (a mean
            over them). ``direct`` is then weighted by this rank's share of the global rows,
            which makes its gradient the one of the global batch's mean; without it DDP
            averages the ranks' gradients of ``direct`` (exact for equal per-rank batches).
            Ignored without a process group.
        """
        idx = self._check_batch(indices, g_now, g_prev, self._gp() > 0)
        if direct is not None and (not isinstance(direct, torch.Tensor) or direct.numel() != 1):
            raise ValueError("direct must be a scalar tensor (the batch estimate of g0)")
        use_prev = self._gp() > 0
        if self._on_host(g_now, g_prev if use_prev else None, direct):
            return self._surrogate_host(idx, g_now, g_prev if use_prev else None, direct,
                                        counts, direct_count)
        with torch.no_grad():
            table = self.indexed_state("u")
            vals = [g_now, g_prev] if use_prev else [g_now]
            I, merged, loc = self._gather_by_index(
                idx, counts, vals, table.device,
                rank_count=direct_count if direct is not None else None, rank_value=direct)
            for name, v in zip(("g_now", "g_prev"), merged):
                self._check_input_finite(v, name)
            now = merged[0].to(table.dtype)
            prev = merged[1].to(table.dtype) if use_prev else None
            s_now = None if self._s is None else self._s.detach().to(table.dtype)
            _, y, est = self._kernel(_updates_fcco.fcco_track)(
                table, self.indexed_state("seen"), I, now, prev, self.gamma, self._gp(),
                self.outer, self.smoothing, s_now)
            # the objective estimate, judged against the start: direct + mean outer value
            d = None if direct is None else (
                direct.detach().to(torch.float64).reshape(()) if loc is None else loc[3])
            est = est if d is None else est + d
            self._track(est, window=est, scale=lambda: (
                now.abs().mean() if d is None else torch.maximum(now.abs().mean(), d.abs())))
        self._pending = True
        if loc is None:                            # one process: the plain surrogate
            y = y.to(g_now.dtype)
            out = (y * (g_now - self._s) if self._s is not None else y * g_now).mean()
            if self._s is not None:
                out = out + self._s
        else:   # this rank's rows, weighted by their share of each index, times W (DDP)
            pos, weight = loc[:2]
            out = ((y[pos] * weight).to(g_now.dtype) * g_now).sum() / I.numel()
            if self._s is not None:                # s is not DDP's: its gradient, globally
                self._pending = 1.0 - y.to(torch.float64).mean()
        if direct is not None:
            share = loc[2] if loc is not None and len(loc) > 2 else 1.0
            d = direct.reshape(())
            if isinstance(share, torch.Tensor):   # (a device number: no read; the
                # rounding of a Python number's product, float32 / float64 alike)
                out = out + (d * share.to(d.dtype) if d.dtype in _updates_fcco._NP_FLOATS
                             else (d.float() * share.float()).to(d.dtype))
            else:
                out = out + (d * share if share != 1.0 else d)
        return out

    def _on_host(self, g_now, g_prev, direct):
        """Whether this step's surrogate runs on the host path (:meth:`_surrogate_host`):
        eager (no :meth:`compile`) on the CPU, float32 / float64 estimates and table, and an
        outer function with NumPy code; chosen once per step."""
        table, floats = self.indexed_state("u"), _updates_fcco._NP_FLOATS
        return (self._compile_kwargs is None and _updates._host(table, g_now)
                and table.dtype in floats and g_now.dtype in floats
                and (g_prev is None or (g_prev.device.type == "cpu"
                                        and g_prev.dtype in floats))
                and (direct is None or direct.device.type == "cpu")
                and getattr(self.outer, "grad_value_numpy", None) is not None)

    def _surrogate_host(self, idx, g_now, g_prev, direct, counts, direct_count):
        """:meth:`surrogate` eager on the CPU: the estimates, the table's rows, the outer
        gradients and the tracked objective in NumPy and Python floats, the same IEEE
        operations as the tensor code (the iterates bit for bit), and the returned scalar as
        one ``torch.dot`` of ``g_now`` with the weights its gradient gets (those of the
        tensor code's ``(y * g_now).mean()``: ``y_i * (1 / |I|)``, rounded the same)."""
        table = self._indexed["u"]
        ut = table.numpy()
        dt = ut.dtype
        vals = [g_now] if g_prev is None else [g_now, g_prev]
        loc = None
        if self._group() is None:          # one process: the estimates as they are
            I, merged = idx, [v.detach().numpy() for v in vals]
        else:
            with torch.no_grad():
                I, merged, loc = self._gather_by_index(
                    idx, counts, vals, table.device,
                    rank_count=direct_count if direct is not None else None,
                    rank_value=direct)
            merged = [v.numpy() for v in merged]
        for name, v in zip(("g_now", "g_prev"), merged):
            # (a finite sum in float64 of a few: all finite; otherwise entry by entry)
            if not (v.size <= 64 and math.isfinite(sum(v.tolist()))):
                self._check_input_finite(v, name)      # (raises if one is not finite)
        # (float32 -> float64 -> the table's dtype, as the tensor code: one rounding at most)
        now, prev = [v.astype(dt, copy=False) for v in merged] + [None] * (2 - len(merged))
        s_now = None if self._s is None else self._s.detach().numpy().astype(dt)
        y, total = _updates_fcco.fcco_track_host(
            ut, self._indexed["seen"].numpy(), I.numpy(), now, prev, self.gamma, self._gp(),
            self.outer, self.smoothing, s_now)
        k = y.size
        est = total / k                      # (the mean outer value, in float64)
        d = None if direct is None else (direct if loc is None else loc[3]).item()
        est = est if d is None else est + d
        def scale():                         # (the first step's only)
            mag = sum(numpy.abs(now).tolist()) / now.size
            return torch.tensor(mag if d is None else max(mag, abs(d)), dtype=torch.float64)

        self._track(est, window=est, scale=scale)
        self._pending = True
        gdt = numpy.float32 if g_now.dtype == torch.float32 else numpy.float64
        if loc is None and self._s is not None:   # (the threshold's gradient by autograd)
            yt = torch.from_numpy(y).to(g_now.dtype)
            out = (yt * (g_now - self._s)).mean() + self._s
        else:
            c = y if loc is None else y[loc[0].numpy()] * loc[1].numpy()
            out = torch.dot(g_now, torch.from_numpy(c.astype(gdt) * (gdt(1) / gdt(k))))
            if loc is not None and self._s is not None:   # s is not DDP's: globally
                self._pending = 1.0 - torch.from_numpy(y).to(torch.float64).mean()
        if direct is not None:
            share = loc[2] if loc is not None and len(loc) > 2 else 1.0
            out = out + (direct.reshape(()) * share if share != 1.0 else direct.reshape(()))
        return out

    def _gp(self):
        return self.gamma_prime

    def _corrections(self, beta, t):
        """Adam's bias corrections at step ``t`` (from 1)."""
        return 1.0 - (1.0 - beta) ** t, 1.0 - self.betas2 ** t

    def _begin_step(self, closure):
        loss = self._closure(closure)
        if self._pending is None or self._pending is False:
            raise RuntimeError("call opt.surrogate(indices, g_now, ...).backward() before "
                               "opt.step()")
        self._sync_device()
        if self._s is not None and isinstance(self._pending, torch.Tensor):
            self._s.grad = self._pending.to(self._s.device, self._s.dtype).reshape(())
        return loss

    # ------------------------------------------------------------------ checkpoints
    def _extra(self):
        return {"t": self._t, "s": None if self._s is None else self._s.detach().clone(),
                "keep_prev": self._keep_prev}

    def _load_extra(self, extra):
        self._t = int(extra["t"])
        # (a checkpoint from before the lazy previous iterate kept it at every step)
        self._keep_prev = bool(extra.get("keep_prev", True)) or self._gp() > 0
        if (extra["s"] is None) != (self._s is None):
            raise ValueError("state_dict and optimizer disagree on the threshold s "
                             "(GroupCVaR outer function)")
        if self._s is not None:
            self._s.data.copy_(extra["s"])

    def state_dict(self):
        """:meth:`IndexedStateOptimizer.state_dict` plus ``fcco`` (step counters, ``s``)."""
        out = super().state_dict()
        out["fcco"] = self._extra()
        return out

    def load_state_dict(self, state_dict):
        """Load a :meth:`state_dict` (onto the parameters' device)."""
        state_dict = dict(state_dict)
        extra = state_dict.pop("fcco", None)
        if extra is None:
            raise ValueError(f"state_dict has no 'fcco' entry: not from {type(self).__name__}")
        self._synced = None
        super().load_state_dict(state_dict)
        self._load_extra(extra)
        self._pending = None


class SONEX(_FCCOBase):
    r"""SONEX (Algorithm 1): MSVR tracking of the inner values, the gradient of the Moreau
    envelope of the outer function, momentum or Adam-type update.

    Per step, for the distinct outer indices ``I`` (module docstring for the loop):

    .. math::

        u_i &\leftarrow (1-\gamma)u_i + \gamma g_i(w_t; B_i)
              + \gamma'\,(g_i(w_t; B_i) - g_i(w_{t-1}; B_i)), \quad i \in I \\
        G_t &= \frac1{|I|}\sum_{i\in I} \nabla f_{i,\lambda}(u_i)\, \nabla g_i(w_t; B_i)
               \ [+ \nabla g_0(w_t; B_0)] \\
        v &\leftarrow (1-\beta) v + \beta (G_t + \text{weight\_decay}\ w_t), \qquad
        w_{t+1} = w_t - \text{lr}\ v \ \text{(or Adam-type)}

    Parameters
    ----------
    params : iterable of tensors or dicts
    n_outer : int
        ``m``, the number of outer indices (groups / constraints): the rows of ``u``.
    outer : Hinge, AbsHinge, SquaredHinge or GroupCVaR
    lr : float > 0
        :math:`\eta` (in the parameter groups: schedulers apply).
    beta : float in (0, 1], default 0.1
        Momentum rate (Adam: :math:`\beta_1 = 1 - \beta`).
    gamma : float in (0, 1], default 0.8
        Tracking rate of ``u``.
    gamma_prime : float >= 0, default 0.1
        MSVR correction (0: the moving average of SONX).
    smoothing : float >= 0, default 0.01
        The Moreau parameter :math:`\lambda` (0: a subgradient).
    update : {"momentum", "adam"}
    weight_decay : float >= 0, default 0
        Adds ``weight_decay * w`` to the gradient (not to ``s``).
    betas2, eps : float
        Adam's second-moment rate and denominator guard.
    """

    def __init__(self, params, n_outer, outer, lr, beta=0.1, gamma=0.8, gamma_prime=0.1,
                 smoothing=0.01, update="momentum", weight_decay=0.0, betas2=0.999, eps=1e-8,
                 **guard):
        defaults = dict(lr=lr, beta=beta, weight_decay=weight_decay)
        self._setup(params, defaults, n_outer, outer, update, gamma, gamma_prime, smoothing,
                    betas2, eps, guard)

    @torch.no_grad()
    def step(self, closure=None):
        """The momentum / Adam-type update from ``.grad`` (after
        ``surrogate(...).backward()``); the current parameters become the previous iterate."""
        loss = self._begin_step(closure)
        self._t += 1
        adam = self.update == "adam"
        merged = {}        # groups with the same hyperparameters in one call (the threshold s'
        for group in self.param_groups:      # group and the model's: fewer foreach calls)
            key = (group["lr"], group["beta"], group["weight_decay"])
            merged.setdefault(key, []).extend(group["params"])
        for (lr, beta, wd), params in merged.items():
            st = [self.state[p] for p in params]
            self._kernel(_updates_fcco.fcco_moments)(
                params, [s["prev"] for s in st] if self._keep_prev else None,
                [p.grad for p in params], [s["v"] for s in st], [s.get("m2") for s in st],
                lr, beta, wd, adam, *self._corrections(beta, self._t), self.betas2, self.eps)
        self._pending = None
        self._end_step()
        return loss


class SONX(SONEX):
    r"""SONX (Wang & Yang 2022), the paper's baseline: :class:`SONEX` with ``gamma_prime = 0``
    (moving average) and ``smoothing = 0`` (a subgradient of the outer function); ``g_prev``
    is not needed. Same parameters as :class:`SONEX` otherwise."""

    def __init__(self, params, n_outer, outer, lr, beta=0.1, gamma=0.8, update="momentum",
                 weight_decay=0.0, betas2=0.999, eps=1e-8, **guard):
        super().__init__(params, n_outer, outer, lr, beta=beta, gamma=gamma, gamma_prime=0.0,
                         smoothing=0.0, update=update, weight_decay=weight_decay,
                         betas2=betas2, eps=eps, **guard)


class SOX(SONX):
    r"""SOX (Wang & Yang 2022) for a *smooth* outer function (:class:`SquaredHinge`, the
    squared-hinge penalty of the paper's Fig. 2-3 baselines): the :class:`SONX` update with
    the outer gradient itself. Raises for a non-smooth ``outer``."""

    def __init__(self, params, n_outer, outer, lr, beta=0.1, gamma=0.8, update="momentum",
                 weight_decay=0.0, betas2=0.999, eps=1e-8, **guard):
        if not getattr(outer, "smooth", False):
            raise ValueError(f"SOX needs a smooth outer function (SquaredHinge), got {outer!r};"
                             " use SONX or SONEX for hinges")
        super().__init__(params, n_outer, outer, lr, beta=beta, gamma=gamma, update=update,
                         weight_decay=weight_decay, betas2=betas2, eps=eps, **guard)


class ALEXR2(_FCCOBase):
    r"""ALEXR2 (Algorithm 2) in its MSVR-equivalent form (paper footnote 4, App. F.2): a double
    loop whose live parameters are the inner iterate ``z``; the optimizer keeps the anchor
    ``w_t`` (``state[p]["anchor"]``). Each :meth:`step` is one inner step ``k``:

    .. math::

        u_i &\leftarrow (1-\hat\gamma)u_i + \hat\gamma g_i(z_k; B_i)
              + \hat\gamma\theta\,(g_i(z_k; B_i) - g_i(z_{k-1}; B_i)), \quad
        y_i = \nabla f_{i,\lambda}(u_i) \\
        G_k &= \frac1{|I|}\sum_{i\in I} y_i \nabla g_i(z_k; B_i) \ [+ \nabla g_0(z_k; B_0)]
               \ [+ \text{weight\_decay}\ z_k] \\
        z_{k+1} &= \Big(\frac{z_k}{\eta} + \frac{w_t}{\nu} - G_k\Big)
                   \Big/ \Big(\frac1\eta + \frac1\nu\Big)

    (the surrogate is the one of :class:`SONEX`); after ``K = inner_steps`` inner steps
    :math:`G_t = (w_t - z_K)/\nu` (the inexact gradient of the Moreau envelope
    :math:`F_{\lambda,\nu}`; the paper's line 13 writes :math:`\beta/\nu`, whose extra
    :math:`\beta` duplicates line 14's and is dropped, as in :mod:`riskopt.solvers.fcco`),
    :math:`v \leftarrow (1-\beta)v + \beta G_t`, :math:`w_{t+1} = w_t - \alpha v` (or Adam-type),
    and the parameters and the anchor are set to :math:`w_{t+1}`. The previous iterate of the
    MSVR correction (:meth:`previous_params`) is :math:`z_{k-1}` (:math:`w_t` at ``k = 0``).

    Parameters
    ----------
    params, n_outer, outer
        As for :class:`SONEX`.
    lr : float > 0
        :math:`\alpha`, the outer step (in the parameter groups, as ``inner_lr``).
    inner_lr : float > 0
        :math:`\eta`.
    nu : float > 0, default 0.1
        The Moreau parameter of the objective (:math:`\nu`).
    inner_steps : int >= 1, default 5
        ``K``.
    gamma : float in (0, 1], default 0.8
        :math:`\hat\gamma` of the MSVR form.
    theta : float >= 0, default 0.125
        Extrapolation (:math:`\hat\gamma\theta = 0.1` with the defaults, the paper's F.2).
    beta, smoothing, update, weight_decay, betas2, eps
        As for :class:`SONEX`.

    Examples
    --------
    Maximise the mean score subject to ``mean score <= 1`` (exact penalty ``rho = 10``):

    >>> import torch
    >>> from riskopt.torch.optim import ALEXR2, Hinge
    >>> _ = torch.manual_seed(0)
    >>> X = torch.randn(256, 2); model = torch.nn.Linear(2, 1)
    >>> opt = ALEXR2(model.parameters(), n_outer=1, outer=Hinge(10.0), lr=0.05, inner_lr=0.1,
    ...              update="adam")
    >>> for t in range(500):
    ...     b = torch.randint(0, 256, (32,))
    ...     inner = lambda f: f(X[b]).mean().reshape(1) - 1.0      # g_1(z) = mean score - 1
    ...     g_now, g_prev = inner(model), opt.evaluate_previous(model, inner)
    ...     opt.zero_grad()
    ...     opt.surrogate([0], g_now, g_prev, direct=-model(X[b]).mean()).backward()
    ...     opt.step()
    >>> abs(float(model(X).detach().mean()) - 1.0) < 0.1
    True
    """

    _keys = ("prev", "anchor", "v", "m2")

    def __init__(self, params, n_outer, outer, lr, inner_lr, nu=0.1, inner_steps=5, gamma=0.8,
                 theta=0.125, beta=0.1, smoothing=0.01, update="momentum", weight_decay=0.0,
                 betas2=0.999, eps=1e-8, **guard):
        check_positive("inner_lr", inner_lr)
        self.nu = check_positive("nu", nu)
        self.inner_steps = check_int("inner_steps", inner_steps)
        self.theta = check_positive("theta", theta, allow_zero=True)
        defaults = dict(lr=lr, inner_lr=float(inner_lr), beta=beta, weight_decay=weight_decay)
        self._setup(params, defaults, n_outer, outer, update, gamma, 0.0, smoothing, betas2,
                    eps, guard)
        self._k = 0

    def _gp(self):
        return self.gamma * self.theta

    @property
    def inner_position(self):
        """``k``, the number of inner steps taken since the last outer update."""
        return self._k

    @torch.no_grad()
    def step(self, closure=None):
        """One inner step (after ``surrogate(...).backward()``); every ``inner_steps``-th call
        also takes the outer step and resets ``z`` to the new anchor."""
        loss = self._begin_step(closure)
        for group in self.param_groups:
            params = group["params"]
            st = [self.state[p] for p in params]
            self._kernel(_updates_fcco.alexr2_inner)(
                params, [s["prev"] for s in st], [s["anchor"] for s in st],
                [p.grad for p in params], group["inner_lr"], self.nu, group["weight_decay"])
        self._k += 1
        if self._k >= self.inner_steps:
            self._k = 0
            self._t += 1
            adam = self.update == "adam"
            for group in self.param_groups:
                params = group["params"]
                st = [self.state[p] for p in params]
                self._kernel(_updates_fcco.alexr2_outer)(
                    params, [s["prev"] for s in st], [s["anchor"] for s in st],
                    [s["v"] for s in st], [s.get("m2") for s in st], group["lr"],
                    group["beta"], self.nu, adam, *self._corrections(group["beta"], self._t),
                    self.betas2, self.eps)
        self._pending = None
        self._end_step()
        return loss

    def _extra(self):
        return {**super()._extra(), "k": self._k}

    def _load_extra(self, extra):
        super()._load_extra(extra)
        self._k = int(extra.get("k", 0))
