r"""What every optimizer of :mod:`riskopt.torch.optim` shares: data parallelism (the batch
statistics all-gathered, the same update on every rank) and the divergence check.

Data parallelism
----------------
Under :class:`~torch.nn.parallel.DistributedDataParallel` each rank sees its share of the
global batch, but the optimizers' multiplier ``lambda``, moving averages (``log s``, ``u``) and
per-sample / per-group tables are *global* state. With an initialised process group (or the
``process_group=`` argument) every optimizer all-gathers the batch's detached losses, indices
and per-sample statistics (:class:`~riskopt.torch.distributed.ColumnGatherer`, one collective
of ``O(global batch)`` numbers), and every rank runs the same deterministic update on the same
gathered numbers, so the state stays identical on every rank and equal to the one-process run
on the concatenated global batch (rank order). The surrogate of each rank carries the global
weights of its own samples times the world size ``W``, because DDP *averages* the gradients.
``process_group=False`` keeps the old local behaviour (each rank its own state).

Divergence
----------
Each step folds two flags into a tensor on the parameters' device without a host sync: a
non-finite tracked objective / statistic, and a *blow-up* (the tracked objective above
``blowup * max(1, |its first value|)``). Every ``check_every`` steps (and on
:meth:`check_divergence`) the flags are read together with a scan of the parameters and the
optimizer state for non-finite values (one sync); a divergence is reported once, as a
:class:`riskopt.DivergenceWarning` (``on_divergence="warn"``, the default) or by raising
:class:`DivergenceError` (``on_divergence="raise"``), naming the optimizer, the step and the
learning rate to lower. Non-finite *input* losses raise :class:`DivergenceError` at once (on
every rank: it is checked on the gathered batch).
"""
import math
import os
import sys
import warnings

import torch

from ...callbacks import DivergenceWarning
from .. import distributed as _dist

__all__ = ["DivergenceError", "GuardMixin"]

_ON_DIVERGENCE = ("warn", "raise", "ignore")
_SKIP = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
         os.path.dirname(os.path.abspath(torch.__file__)))


def _user_stacklevel():
    """The ``stacklevel`` of the first frame outside riskopt.torch and torch (the user's
    ``opt.step()`` line), for the caller of ``warnings.warn``."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP):
        frame, level = frame.f_back, level + 1
    return level


class DivergenceError(ValueError, ArithmeticError):
    """An optimizer of :mod:`riskopt.torch.optim` diverged (``on_divergence="raise"``) or was
    given non-finite losses. A ``ValueError`` (bad input) and an ``ArithmeticError``."""


class GuardMixin:
    """Mixin: ``_init_guard`` in ``__init__``; ``_gather`` for the batch statistics,
    ``_track`` per step, ``_end_step`` at the end of ``step``; ``_guard_state`` /
    ``_load_guard_state`` in the checkpoints."""

    def _init_guard(self, process_group=None, on_divergence="warn", check_every=10,
                    blowup=1e6):
        if on_divergence not in _ON_DIVERGENCE:
            raise ValueError(f"on_divergence must be one of {_ON_DIVERGENCE}, "
                             f"got {on_divergence!r}")
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 0:
            raise ValueError(f"check_every must be an int >= 0 (0: never), got {check_every!r}")
        if not (isinstance(blowup, (int, float)) and blowup > 1):
            raise ValueError(f"blowup must be a number > 1, got {blowup!r}")
        self.process_group = process_group
        self.on_divergence, self.check_every, self.blowup = on_divergence, check_every, blowup
        self._gatherer = None
        dev = self.param_groups[0]["params"][0].device
        self._g = {"bad": False, "first": -1, "ref": math.nan}
        self._g_on(dev)
        self._g_steps, self._g_reported = 0, False

    # ------------------------------------------------------------------ communication
    def _group(self):
        """The active process group (None: nothing to communicate)."""
        return _dist._active_group(self.process_group)

    def world(self):
        """The number of ranks the optimizer's state is shared over (1 without a group)."""
        group = self._group()
        return 1 if group is None else torch.distributed.get_world_size(group)

    def _gather(self, columns, device):
        """``(table, sizes, offset)`` of the gathered columns (one row per local entry);
        without a group, the local columns (float64) as a one-rank table."""
        group = self._group()
        if group is None:
            cols = [c.detach().reshape(-1).to(device, torch.float64) for c in columns]
            b = int(cols[0].numel()) if cols else 0
            table = torch.stack(cols, 1) if cols else torch.zeros((b, 0), dtype=torch.float64,
                                                                  device=device)
            return table, [b], 0
        if self._gatherer is None or self._gatherer.group is not group:
            self._gatherer = _dist.ColumnGatherer(group)
        return self._gatherer(columns, device)

    def _gather_by_index(self, idx, counts, values, device, rank_count=None):
        """Merge the ranks' per-index estimates ``values`` (each of shape ``idx.shape``).

        Returns ``(I, merged, local)``. Without a group: ``idx``, the values (float64) and
        ``None``. Under a group: the distinct indices ``I`` of the global batch (sorted), the
        counts-weighted means of the ranks' estimates of each, and ``(pos, weight)``: where
        this rank's rows sit in ``I`` and their weight ``W c_ir / C_i`` (their share of the
        index's rows, times the world size for DDP's averaging). With ``rank_count`` (a
        number >= 0 per rank, e.g. the rows behind a batch-mean term), ``local`` also holds
        this rank's weight ``W n_r / sum_r n_r`` for that term (in the same collective's
        header, so a rank without rows still counts). A rank may hold no index at all.
        """
        vals = [v.detach().reshape(-1).to(device, torch.float64) for v in values]
        if self._group() is None:
            return idx, vals, None
        if counts is None:
            c = torch.ones(idx.numel(), dtype=torch.float64, device=device)
        else:
            c = torch.as_tensor(counts).detach().reshape(-1).to(device, torch.float64)
            if c.numel() != idx.numel() or not bool(torch.isfinite(c).all() & (c > 0).all()):
                raise ValueError("counts must hold one positive finite count per index")
        group = self._group()
        if self._gatherer is None or self._gatherer.group is not group:
            self._gatherer = _dist.ColumnGatherer(group)
        rc = None
        if rank_count is not None:
            rc = float(rank_count)
            if not (math.isfinite(rc) and rc >= 0):
                raise ValueError(f"direct_count must be a number >= 0, got {rank_count!r}")
        got = self._gatherer([idx, c, *vals], device, scalars=None if rc is None else [rc])
        table, sizes, off = got[:3]
        gi, gc = table[:, 0].to(torch.int64), table[:, 1]
        I, inv = torch.unique(gi, return_inverse=True)
        if I.numel() == 0:          # the same on every rank: no rank raises alone
            raise ValueError("the outer indices of a step must be non-empty (on some rank)")
        C = torch.zeros(I.numel(), dtype=torch.float64, device=device).index_add_(0, inv, gc)
        merged = [torch.zeros_like(C).index_add_(0, inv, gc * table[:, 2 + j]) / C
                  for j in range(len(vals))]
        loc = slice(off, off + idx.numel())
        weight = gc[loc] / C[inv[loc]] * len(sizes)
        if rc is None:
            return I, merged, (inv[loc], weight)
        total = float(got[3].sum())
        share = float(len(sizes)) * rc / total if total > 0 else 0.0
        return I, merged, (inv[loc], weight, share)

    @property
    def comm_calls(self):
        """Number of collectives the optimizer's gathers issued so far (0 without a group)."""
        return 0 if self._gatherer is None else self._gatherer.calls

    def _check_input_finite(self, values, what):
        """Raise :class:`DivergenceError` when the gathered ``values`` are not all finite."""
        if values.numel() and not bool(torch.isfinite(values).all()):
            raise DivergenceError(
                f"{type(self).__name__}: non-finite {what} at step {self._g_steps + 1}; the "
                f"model (or the loss) diverged: lower lr (now {self._lr_text()}) or check the "
                "data")

    # ------------------------------------------------------------------ divergence
    def _lr_text(self):
        return ", ".join(f"{g['lr']:g}" for g in self.param_groups
                         if "lr" in g and not g.get("previous_iterate"))

    @torch.no_grad()
    def _track(self, objective):
        """Fold the step's tracked objective (0-d tensor) into the divergence flags: Python
        numbers for a CPU objective (no sync to avoid, fewer small ops), tensors on its
        device otherwise (no host sync)."""
        obj = objective.detach()
        g = self._g_on(obj.device)
        if obj.device.type == "cpu":
            v = float(obj)
            if math.isnan(g["ref"]):
                g["ref"] = max(abs(v), 1.0) if math.isfinite(v) else 1.0
            bad = not math.isfinite(v) or abs(v) > self.blowup * g["ref"]
            if bad and g["first"] < 0:
                g["first"] = self._g_steps + 1
            g["bad"] = g["bad"] or bad
            return
        self._track_tensor(obj, g)

    def _track_tensor(self, obj, g):
        """The device path of :meth:`_track`: ``g`` holds 0-d tensors on ``obj``'s device,
        updated without a host sync."""
        obj = obj.to(torch.float64)
        first = torch.where(torch.isfinite(obj), obj.abs().clamp(min=1.0), torch.ones_like(obj))
        g["ref"] = torch.where(torch.isnan(g["ref"]), first, g["ref"])
        bad = ~torch.isfinite(obj) | (obj.abs() > self.blowup * g["ref"])
        g["first"] = torch.where(bad & (g["first"] < 0),
                                 torch.full_like(g["first"], self._g_steps + 1), g["first"])
        g["bad"] = g["bad"] | bad

    def _g_on(self, device):
        """The flags as Python numbers (CPU) or as tensors on ``device``."""
        g = self._g
        if device.type == "cpu":
            if isinstance(g["ref"], torch.Tensor):
                self._g = g = {"bad": bool(g["bad"]), "first": int(g["first"]),
                               "ref": float(g["ref"])}
        elif not isinstance(g["ref"], torch.Tensor) or g["ref"].device != device:
            self._g = g = {
                "bad": torch.as_tensor(g["bad"], dtype=torch.bool).to(device),
                "first": torch.as_tensor(g["first"], dtype=torch.int64).to(device),
                "ref": torch.as_tensor(g["ref"], dtype=torch.float64).to(device)}
        return g

    def _end_step(self):
        self._g_steps += 1
        if self.check_every and self._g_steps % self.check_every == 0:
            self.check_divergence()

    def _state_tensors(self):
        for group in self.param_groups:
            for p in group["params"]:
                yield p
                for v in self.state[p].values():
                    if isinstance(v, torch.Tensor) and v.is_floating_point():
                        yield v
        yield from self._extra_tensors()

    def _extra_tensors(self):
        return ()

    @torch.no_grad()
    def check_divergence(self):
        """Check now (one host sync): returns True when the run diverged, after reporting it
        (once) as ``on_divergence`` says."""
        flags = [torch.isfinite(t).all() for t in self._state_tensors() if t.numel()]
        finite = True if not flags else bool(   # one host sync
            torch.stack([f.to(flags[0].device) for f in flags]).all())
        blew = bool(self._g["bad"])
        if finite and not blew:
            return False
        if self._g_reported or self.on_divergence == "ignore":
            return True
        self._g_reported = True
        first = int(self._g["first"])
        where = f"at step {first}" if first > 0 else f"by step {self._g_steps}"
        what = ("non-finite parameters or optimizer state" if not finite else
                f"the tracked objective blew up (more than {self.blowup:g} x its first value)")
        msg = (f"{type(self).__name__} diverged {where}: {what}; lower lr (now "
               f"{self._lr_text()}) or the moving-average rate, or clip the gradients")
        if self.on_divergence == "raise":
            raise DivergenceError(msg)
        warnings.warn(msg, DivergenceWarning, stacklevel=_user_stacklevel())
        return True

    # ------------------------------------------------------------------ checkpoints
    def _guard_state(self):
        return {"steps": self._g_steps, "reported": self._g_reported,
                **{k: torch.as_tensor(v).clone() for k, v in self._g.items()}}

    def _load_guard_state(self, state):
        if state is None:      # a checkpoint from before the guard
            return
        dev = self.param_groups[0]["params"][0].device
        self._g_steps, self._g_reported = int(state["steps"]), bool(state["reported"])
        self._g = {k: state[k].to(dev) for k in ("bad", "first", "ref")}
        self._g_on(dev)
