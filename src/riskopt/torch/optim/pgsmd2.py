r"""PG-SMD2 (Rafique et al. 2021) and SPD (Namkoong & Duchi 2016): the primal-dual baseline of
the SCDRO paper (``../shared/papers/scdro_kl_constrained_dro.txt``) for the KL-constrained
problem of :mod:`riskopt.torch.optim.kl_dro`, with an ``n``-dimensional dual table (split from
that module; imported as ``riskopt.torch.optim.PGSMD2``).
"""
import math

import torch

from ..._validation import check_positive
from . import _comm, _updates_kl
from .base import IndexedStateOptimizer
from ._kl_window import _F32_EXACT, _KLWindow

__all__ = ["PGSMD2"]


class PGSMD2(_KLWindow, IndexedStateOptimizer):
    r"""PG-SMD2 (Rafique et al. 2021) / SPD (Namkoong & Duchi 2016, ``gamma=None``): the
    primal-dual baseline of the SCDRO paper with the ``n``-dimensional dual ``p`` (a table on
    the parameters' device, in ``state_dict``): the primal step uses the importance-weighted
    gradient ``n p_i grad l_i / b`` of the batch (the weights come from :meth:`weights`), the
    dual a mirror-ascent step ``log p_i += dual_lr n l_i / b`` (and ``log p *= 1 - dual_lr
    lambda_0``) followed by the KL-Bregman projection on the ball -- O(n) per step, which is the
    cost the paper's Fig. 5 shows. PG-SMD2 adds ``(w - w_c) / gamma`` with the center ``w_c``
    moved to ``w`` every ``center_every`` steps. Usage::

        opt = PGSMD2(model.parameters(), n=len(data), radius=0.5, lr=0.1, dual_lr=1e-3)
        for x, y, idx in loader:
            losses = F.cross_entropy(model(x), y, reduction="none")
            opt.zero_grad()
            (opt.weights(idx) * losses).sum().backward()
            opt.step(indices=idx, losses=losses.detach())
    """

    def __init__(self, params, n, radius=0.5, shift_cost=1e-3, lr=0.1, dual_lr=1e-3,
                 gamma=10.0, center_every=None, **guard):
        check_positive("radius", radius)
        check_positive("shift_cost", shift_cost, allow_zero=True)
        check_positive("lr", lr)
        check_positive("dual_lr", dual_lr)
        if gamma is not None:
            check_positive("gamma", gamma)
        super().__init__(params, dict(lr=float(lr)), n_indices=n, **guard)
        self.radius, self.shift_cost, self.dual_lr = float(radius), float(shift_cost), dual_lr
        self.gamma, self.center_every = gamma, center_every
        self.add_indexed_state("log_p", fill=-math.log(self.n_indices),
                               dtype=torch.float64)
        self._steps = 0
        self._posted = self._gathered = None
        self._last_b = None         # the previous step's global batch size (under DDP)
        self.overlapped = 0         # the steps whose gather overlapped the backward

    #: opt-in (default False: ``weights`` waits for its gather). True: under DDP,
    #: ``weights(idx, losses=...)`` launches its gather non-blocking and :meth:`step` waits
    #: for it, so that it overlaps the backward and DDP's all-reduce; the weights take the
    #: previous step's global batch size and a step whose batch changed size rescales the
    #: whole ``.grad`` (see :meth:`weights`): exact only when the loss is the surrogate
    #: ``(weights * losses).sum()`` alone, hence not the default (a term added to the loss,
    #: e.g. a regulariser, would be rescaled on such a step). No measurable gain on a loaded
    #: 2-core CPU (``docs/distributed.rst``)
    overlap = False

    def _wait_gathered(self):
        """Wait for (and forget) a gather that ``weights`` launched and no step took: a
        handle never outlives the next ``weights``, ``step`` or ``load_state_dict``."""
        gathered, self._gathered = self._gathered, None
        if gathered is not None:
            gathered[0].wait()

    def weights(self, indices, losses=None):
        """``n p_i / b`` for the batch (constants for the primal surrogate; ``b`` the global
        batch size, times the world size under DDP, which averages the gradients).

        Under DDP, with ``losses`` (the batch's detached losses: the same as :meth:`step`'s,
        which it checks) the one gather of the step happens here, indices and losses together,
        and :meth:`step` takes its table; without, :meth:`step` gathers again. After
        :meth:`attach` the indices (and ``losses`` when given here) ride on DDP's all-reduce:
        the weights are ``n p_i`` and the hook divides the summed gradient by the global
        ``b``.

        Under DDP without :meth:`attach`, with ``losses`` and :attr:`overlap` set (opt-in)
        the gather is launched non-blocking and :meth:`step` waits for it: only the global batch
        size ``b`` is needed here, and the previous step's is taken (the first step, and
        the first after :meth:`load_state_dict`, wait for the gather). When the step's global
        batch turns out to have another size, :meth:`step` multiplies the gradients by
        ``b_previous / b`` before the update (the whole ``.grad``: exact for the surrogate
        ``(weights * losses).sum()``; a term added to it is rescaled too). A
        :meth:`state_dict` taken between ``weights`` and ``step`` is the state before the
        step (the pending gather is not part of it)."""
        idx = self.check_indices(indices)
        if self._can_post():
            cols = [idx]
            if losses is not None:
                cols.append(self._losses64(losses, idx))
            # indices below 2**24 and float32 losses are float32 numbers (one each)
            exact32 = self.n_indices <= 2 ** 24 and (
                losses is None or torch.as_tensor(losses).dtype in _F32_EXACT)
            self._post(cols, [], 1.0, self.device, exact32=exact32)
            self._posted = None
            return (self.n_indices * torch.exp(self.gather("log_p", idx))).to(
                self._default_dtype())
        self._wait_gathered()
        b, scale = idx.numel(), 1.0
        if self._group() is not None:     # the global batch size (one small collective)
            if losses is None:
                table, sizes, _ = self._gather([idx], self.device)
                b = table.shape[0]
            else:       # the batch's losses too: step() takes this table (no 2nd gather)
                mine = self._losses64(losses, idx)
                pending = self._gather_start([idx, mine], self.device)
                if self.overlap and self._last_b:     # (None or 0: wait)
                    b = self._last_b      # (step waits for the gather)
                    self.overlapped += 1
                else:
                    b = self._last_b = pending.wait()[0].shape[0]
                self._gathered = (pending, b, idx, mine)
            scale = float(self.world())
        return self._kernel(_updates_kl.pgsmd2_weights)(
            self.indexed_state("log_p"), idx, self.n_indices * scale, max(b, 1),
            self._default_dtype())

    def _losses64(self, losses, indices):
        losses = torch.as_tensor(losses).detach().to(self.device, torch.float64)
        if losses.shape != indices.shape:
            raise ValueError("losses and indices must have one entry per sample of the batch")
        return losses

    def _finish_posted(self, table, sizes, off, scalars):
        """The hook's end: keep the gathered batch for :meth:`step`; the summed gradient is
        divided by the global batch size."""
        self._posted = table if table.shape[1] == 2 else None
        return torch.full((), 1.0 / max(table.shape[0], 1), dtype=torch.float64,
                          device=table.device)

    def _same_batch(self, idx, indices, mine, losses):
        """``step``'s batch is ``weights()``'s (whose gather it takes): a ``ValueError``
        otherwise; on a device a device-side assert (no host read; ``index_checks="sync"``:
        the host read and the ``ValueError``). NaN losses count as equal (the finite-input
        check names them)."""
        msg = "PGSMD2.step: indices / losses differ from weights()'s"
        if idx.shape != indices.shape or mine.shape != losses.shape:
            raise ValueError(msg)
        if _comm._on_device(mine) and self.index_checks != "sync":
            same = (idx == indices.to(idx.device)).all() & (
                (mine == losses) | (torch.isnan(mine) & torch.isnan(losses))).all()
            torch._assert_async(same, msg)
        elif not (torch.equal(idx, indices) and torch.equal(mine, losses)):
            raise ValueError(msg)

    def _update(self, indices, losses=None):
        if losses is None:
            raise ValueError("PGSMD2.step needs losses= (the batch's detached losses)")
        losses = self._losses64(losses, indices)
        posted = self._piggy
        self._complete_post()
        table, self._posted = self._posted, None
        gathered, self._gathered = self._gathered, None
        if table is not None:      # the batch rode on the all-reduce with weights()
            mine = posted.block
            self._same_batch(mine[:, 0].to(torch.int64), indices, mine[:, 1], losses)
        elif gathered is not None and self._group() is not None:   # weights() gathered it
            pending, b_used, idx, mine = gathered
            table, _, _ = pending.wait()
            self._same_batch(idx, indices, mine, losses)
            self._last_b = table.shape[0]
            if b_used != self._last_b:    # weights() took the previous step's batch size
                ratio = b_used / max(self._last_b, 1)
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            p.grad.mul_(ratio)
        else:
            table, _, _ = self._gather([indices, losses], self.device)
        indices, losses = table[:, 0].to(torch.int64), table[:, 1]
        self._check_input_finite(losses, "losses")
        b = indices.numel()
        if b == 0:
            raise ValueError("PGSMD2.step needs a non-empty global batch")
        live = [(p, group["lr"]) for group in self.param_groups for p in group["params"]
                if p.grad is not None]
        for p, _ in live:
            if self.gamma is not None and "center" not in self.state[p]:
                self.state[p]["center"] = p.detach().clone()
        tracked = self._kernel(_updates_kl.pgsmd2_update)(
            [p for p, _ in live], [p.grad for p, _ in live],
            [self.state[p].get("center") for p, _ in live], [lr for _, lr in live],
            self.gamma, self.indexed_state("log_p"), indices, losses, self.n_indices, b,
            self.dual_lr, self.shift_cost, self.radius)
        self._track(tracked, window=losses, scale=lambda: losses.abs().mean())
        self._steps += 1
        every = self.center_every or max(1, self.n_indices // b)
        if self.gamma is not None and self._steps % every == 0:
            for group in self.param_groups:
                for p in group["params"]:
                    if "center" in self.state[p]:
                        self.state[p]["center"].copy_(p.detach())

    def state_dict(self):
        """:meth:`IndexedStateOptimizer.state_dict` plus ``pgsmd2``: the step counter that
        drives the centre schedule."""
        out = super().state_dict()
        out["pgsmd2"] = {"steps": self._steps}
        return out

    def load_state_dict(self, state_dict):
        """Load a :meth:`state_dict` (onto the parameters' device)."""
        state_dict = dict(state_dict)
        extra = state_dict.pop("pgsmd2", None)   # None: a checkpoint from before the counter
        self._wait_gathered()
        self._last_b = None
        super().load_state_dict(state_dict)
        self._steps = 0 if extra is None else int(extra["steps"])
