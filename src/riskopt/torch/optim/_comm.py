r"""Data parallelism of the optimizers of :mod:`riskopt.torch.optim`: :class:`CommMixin`
(the batch statistics all-gathered, the same update on every rank), which
:class:`~riskopt.torch.optim._guard.GuardMixin` extends with the divergence check.

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

Where a tensor lives (``_on_device`` / ``_on_host``) and ``_all_finite`` are here too: the
gathers and the guard both choose their host or device path with them (the tests switch
the device path on by patching this module's two).
"""
import math

import numpy

import torch

from .. import distributed as _dist

__all__ = ["CommMixin"]


class CommMixin:
    """Mixin: ``_init_comm`` (from ``_init_guard``); ``_gather`` / ``_gather_by_index`` for the
    batch statistics, ``attach`` / ``_post`` to carry them on DDP's all-reduce."""

    #: the ranks' batches under data parallelism (per instance: ``opt.ddp_batches =
    #: "equal"``). ``"any"`` (default): per-rank batches of any size (some may be empty);
    #: each gather reads the ranks' row counts on the host (on a GPU: one synchronisation
    #: per gather). ``"equal"``: every rank has as many rows as the others at every step
    #: (what ``DistributedSampler`` gives, with or without ``drop_last``): the row counts
    #: are known from this rank's own, not read (a device-side assert checks the promise;
    #: see :class:`~riskopt.torch.distributed.ColumnGatherer`), the same numbers.
    ddp_batches = "any"
    #: the per-index merges under data parallelism (SONEX & co, OOA; their rows are the
    #: distinct indices of each rank's batch, whatever :attr:`ddp_batches`): with
    #: ``n_indices`` below this, every rank's rows travel padded to ``n_indices + 1`` (a
    #: bound: its indices are distinct and in range), so the row counts are not read; one
    #: read a step stays, the number of distinct indices of the global batch (``unique``:
    #: the size of all that follows). Above it (0: never), the rows travel padded to the
    #: largest count seen, read once per gather. (Each rank sends ``8 k (n_indices + 1)``
    #: bytes, ``k`` = 3 or 4 columns: 32 KB at 1024 indices.)
    ddp_pad_indices = 1024

    def _init_comm(self, process_group):
        self.process_group = process_group
        self._gatherer = None
        self._attached, self._piggy = None, None

    def _group(self):
        """The active process group (None: nothing to communicate)."""
        return _dist._active_group(self.process_group)

    def world(self):
        """The number of ranks the optimizer's state is shared over (1 without a group)."""
        group = self._group()
        return 1 if group is None else torch.distributed.get_world_size(group)

    def attach(self, ddp_model):
        """Carry this optimizer's batch statistics on the gradient all-reduce of
        ``ddp_model`` (a :class:`~torch.nn.parallel.DistributedDataParallel` of the
        parameters it drives, whose loss is this optimizer's surrogate alone): registers a
        DDP communication hook (:func:`riskopt.torch.distributed.stats_comm_hook`; call it
        once, before the first backward), so that a step issues no collective of its own.

        The gradients are all-reduced in float64 (the bucket's dtype after), with the
        statistics appended to the first bucket; after ``backward()`` the ``.grad`` hold
        the same gradient as without the hook (up to rounding), except in a step whose
        batch is larger than every earlier one on some rank (and the first step): there
        the statistics do not fit and :meth:`step` gathers them and writes the gradients.
        Only the optimizers with a ``_finish_posted`` method support it (others raise
        ``TypeError``); without an active process group it does nothing. Returns
        ``ddp_model``."""
        if not hasattr(self, "_finish_posted"):
            raise TypeError(f"{type(self).__name__} cannot carry its statistics on DDP's "
                            "all-reduce (attach); it gathers them itself")
        if self._group() is None:
            return ddp_model
        if self._attached is not None:
            raise RuntimeError("attach: the optimizer is attached already")
        ddp_model.register_comm_hook(self, _dist.stats_comm_hook)
        self._attached = ddp_model
        return ddp_model

    def _can_post(self):
        """True when this step's statistics may ride on the all-reduce: attached, and the
        capacity of the rows known (after the first gather); the same on every rank."""
        return (self._attached is not None and self._gatherer is not None
                and self._gatherer.capacity > 0 and self._group() is not None)

    def _post(self, columns, scalars, pre, device, local_ok=True, exact32=False):
        """Post the step's statistics for the hook (see :class:`~riskopt.torch.distributed.
        Piggyback`; ``pre`` a number or a 0-d tensor); ``self._finish_posted`` receives
        them."""
        block = torch.stack([c.detach().reshape(-1).to(device, torch.float64)
                             for c in columns], 1)
        self._piggy = _dist.Piggyback(self._gatherer, block,
                                      [torch.as_tensor(v, dtype=torch.float64).reshape(())
                                       .to(device) for v in scalars],
                                      pre if isinstance(pre, torch.Tensor) else float(pre),
                                      self._finish_posted, local_ok, exact32)

    def _complete_post(self):
        """In ``step``: finish the posted statistics (a gather of their own if they did not
        fit) and forget them."""
        post = self._piggy
        if post is None:
            return
        try:
            if post.done is None:
                raise RuntimeError(
                    f"{type(self).__name__}: the step's statistics were posted for DDP's "
                    "all-reduce but no bucket carried them: call backward() on the DDP "
                    "model's surrogate before step()")
            post.complete()
        finally:
            self._piggy = None

    def _gather(self, columns, device):
        """``(table, sizes, offset)`` of the gathered columns (one row per local entry);
        without a group, the local columns (float64) as a one-rank table."""
        group = self._group()
        if group is None:
            cols = [c.detach().reshape(-1).to(device, torch.float64) for c in columns]
            b = int(cols[0].numel()) if cols else 0
            if len(cols) == 1:       # no stack; a copy only where ``to`` aliased the input
                c = cols[0]
                if b and c.data_ptr() == columns[0].data_ptr():
                    c = c.clone()
                return c.unsqueeze(1), [b], 0
            table = torch.stack(cols, 1) if cols else torch.zeros((b, 0), dtype=torch.float64,
                                                                  device=device)
            return table, [b], 0
        return self._gather_start(columns, device).wait()

    def _gather_start(self, columns, device):
        """:meth:`_gather` under a group, launched non-blocking: a handle whose ``wait()``
        gives ``(table, sizes, offset)`` (:meth:`~riskopt.torch.distributed.ColumnGatherer.
        start`)."""
        return self._gatherer_of(self._group()).start(columns, device)

    def _gatherer_of(self, group, by_batch=True):
        """The :class:`~riskopt.torch.distributed.ColumnGatherer` of ``group`` (made at the
        first gather), told this step's :attr:`ddp_batches` (``by_batch``: one row per
        sample of the batch; else per index: never equal)."""
        if self.ddp_batches not in ("any", "equal"):
            raise ValueError(f"ddp_batches must be 'any' or 'equal', got {self.ddp_batches!r}")
        if self._gatherer is None or self._gatherer.group is not group:
            self._gatherer = _dist.ColumnGatherer(group)
        self._gatherer.equal = by_batch and self.ddp_batches == "equal"
        return self._gatherer

    def _gather_by_index(self, idx, counts, values, device, rank_count=None, rank_value=None):
        """Merge the ranks' per-index estimates ``values`` (each of shape ``idx.shape``).

        Returns ``(I, merged, local)``. Without a group: ``idx``, the values (float64) and
        ``None``. Under a group: the distinct indices ``I`` of the global batch (sorted), the
        counts-weighted means of the ranks' estimates of each, and ``(pos, weight)``: where
        this rank's rows sit in ``I`` and their weight ``W c_ir / C_i`` (their share of the
        index's rows, times the world size for DDP's averaging). With ``rank_count`` (a
        number >= 0 per rank, e.g. the rows behind a batch-mean term) or ``rank_value`` (a
        0-d tensor per rank, that term's value), ``local`` also holds this rank's weight
        ``W n_r / sum_r n_r`` for that term (1 without ``rank_count``) and the global value
        ``sum_r n_r v_r / sum_r n_r`` (the mean over ranks without ``rank_count``; None
        without ``rank_value``), all in the same collective's header, so a rank without rows
        still counts. A rank may hold no index at all.
        """
        group = self._group()
        if group is None:
            return idx, [v.detach().reshape(-1).to(device, torch.float64) for v in values], None
        vals = [v.detach().reshape(-1) for v in values]     # (the gatherer: float64)
        if counts is None:
            c = torch.ones(idx.numel(), dtype=torch.float64, device=device)
        else:
            c = torch.as_tensor(counts).detach().reshape(-1)
            _check_counts(c, idx.numel(), getattr(self, "index_checks", "async"))
        gatherer = self._gatherer_of(group, by_batch=False)
        rc = None
        if rank_count is not None:
            rc = float(rank_count)
            if not (math.isfinite(rc) and rc >= 0):
                raise ValueError(f"direct_count must be a number >= 0, got {rank_count!r}")
        scalars = None
        if rc is not None or rank_value is not None:
            scalars = [1.0 if rc is None else rc,
                       0.0 if rank_value is None else rank_value.detach().reshape(())]
        n = getattr(self, "n_indices", None)
        if (n is not None and n < self.ddp_pad_indices
                and not (_dist._comm_device(group).type == "cpu" and gatherer.host)):
            # every rank's rows padded to n + 1 (>= 1 padding row each), counts not read
            rows = n + 1
            table, heads = gatherer.padded([idx, c, *vals], device, rows, scalars)
            ws, b = heads.shape[0], idx.numel()
            off = torch.distributed.get_rank(group) * rows
            real = (torch.arange(rows, device=device) < heads[:, :1]).reshape(-1)
            gi = torch.where(real, table[:, 0].to(torch.int64), -1)
            sc = heads[:, 1:] if scalars is not None else None
        else:
            got = gatherer([idx, c, *vals], device, scalars=scalars)
            table, sizes, off = got[:3]
            if table.device.type == "cpu" and gatherer.host:
                return _merge_host(table, sizes, off, idx.numel(), len(vals),
                                   None if scalars is None else got[3], rc, rank_value)
            gi, ws, b, sc = table[:, 0].to(torch.int64), len(sizes), idx.numel(), (
                got[3] if scalars is not None else None)
            rows = None
        gc = table[:, 1]
        # (the one host read left: the number of distinct indices of the global batch is
        # the size of everything after, and of the optimizers' updates of their tables)
        I, inv = torch.unique(gi, return_inverse=True)
        pad = 0 if rows is None else 1    # (padded: I[0] = -1, the padding's; dropped)
        if I.numel() == pad:          # the same on every rank: no rank raises alone
            raise ValueError("the outer indices of a step must be non-empty (on some rank)")
        # (the padding rows add into their own slot: each index's sums in table order)
        C = torch.zeros(I.numel(), dtype=torch.float64, device=device).index_add_(0, inv, gc)
        merged = [(torch.zeros_like(C).index_add_(0, inv, gc * table[:, 2 + j])[pad:]
                   / C[pad:]) for j in range(len(vals))]
        loc = slice(off, off + b)
        weight = gc[loc] / C[inv[loc]] * ws
        pos = inv[loc] - pad if pad else inv[loc]
        I = I[pad:]
        if scalars is None:
            return I, merged, (pos, weight)
        n_r, v_r = sc[:, 0], sc[:, 1]
        share = 1.0
        if rc is not None:       # (a 0-d tensor: no host read; _merge_host's float)
            total = n_r.sum()
            share = torch.where(total > 0, float(ws) * rc / total, torch.zeros_like(total))
        value = None if rank_value is None else (
            (n_r * v_r).sum() / n_r.sum().clamp(min=1e-300))
        return I, merged, (pos, weight, share, value)

    @property
    def comm_calls(self):
        """Number of collectives the optimizer's gathers issued so far (0 without a group)."""
        return 0 if self._gatherer is None else self._gatherer.calls


def _merge_host(table, sizes, off, b, k, scalars, rc, rank_value):
    """:meth:`CommMixin._gather_by_index`'s merge of a gathered CPU ``table`` in NumPy (the
    same float64 operations in the same order: the sums over an index's rows run in table
    order, as ``index_add_`` does; a few rows, so the tensor ops' dispatch would dominate)."""
    t = table.numpy()
    gi, gc = t[:, 0].astype(numpy.int64), t[:, 1]
    I = numpy.array(sorted(set(gi.tolist())), dtype=numpy.int64)  # (numpy.unique: slower)
    if I.size == 0:             # the same on every rank: no rank raises alone
        raise ValueError("the outer indices of a step must be non-empty (on some rank)")
    inv = numpy.searchsorted(I, gi)
    # (bincount adds its weights in table order, one by one: index_add_'s sums)
    C = numpy.bincount(inv, weights=gc, minlength=I.size)
    merged = [torch.from_numpy(numpy.bincount(inv, weights=gc * t[:, 2 + j],
                                              minlength=I.size) / C) for j in range(k)]
    pos = inv[off:off + b]
    weight = gc[off:off + b] / C[pos] * len(sizes)
    local = (torch.from_numpy(pos), torch.from_numpy(weight))
    if scalars is None:
        return torch.from_numpy(I), merged, local
    sc = scalars.numpy()
    n_r, v_r = sc[:, 0], sc[:, 1]
    total = float(n_r.sum())
    share = 1.0
    if rc is not None:
        share = float(len(sizes)) * rc / total if total > 0 else 0.0
    value = None if rank_value is None else torch.tensor(
        float((n_r * v_r).sum()) / max(total, 1e-300), dtype=torch.float64)
    return torch.from_numpy(I), merged, (*local, share, value)


def _check_counts(c, b, checks):
    """``counts`` of :meth:`CommMixin._gather_by_index`: one positive finite count per
    index (``b``): on the host (a ``ValueError``), or on a device by a device-side assert
    (no host read; ``checks="sync"``, the optimizer's ``index_checks``: the host read and
    the ``ValueError``)."""
    msg = "counts must hold one positive finite count per index"
    if c.numel() != b:
        raise ValueError(msg)
    if not c.numel():
        return
    if not _on_device(c) or checks == "sync":
        if not (_all_finite(c) and bool((c.numpy() > 0).all() if _on_host(c)
                                        else (c > 0).all())):
            raise ValueError(msg)
        return
    torch._assert_async((torch.isfinite(c) & (c > 0)).all(), msg)


def _on_device(t):
    """Whether ``t`` is off the CPU (its flags stay there: no host read per step)."""
    return t.device.type != "cpu"


def _on_host(t):
    """Whether ``t`` can be read as a NumPy array without a copy (a CPU tensor of a NumPy
    dtype: its small reductions then cost less in NumPy than as tensor ops)."""
    return t.device.type == "cpu" and t.dtype in (torch.float64, torch.float32,
                                                  torch.float16, torch.int64, torch.int32)


def _all_finite(t):
    """Whether every entry of the tensor ``t`` is finite (a bool)."""
    t = t.detach()
    if _on_host(t):
        return bool(numpy.isfinite(t.numpy()).all())
    return bool(torch.isfinite(t).all())
