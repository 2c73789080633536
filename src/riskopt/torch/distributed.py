r"""``torch.distributed`` helpers for the risk losses of :mod:`riskopt.torch`.

A spectral risk (or any DRO risk) of a batch is *not* an average of per-sample terms: the
weights ``q`` depend on all the losses at once. Under data parallelism each rank only sees
its share of the global batch, so the losses are all-gathered first, the weights are computed
on the global batch (identically on every rank: the oracles are deterministic), and each rank
back-propagates only through its own samples.

Gradient scaling
----------------
With global weights ``q`` over the global batch :math:`B = B_0 \cup \dots \cup B_{W-1}`
(``W`` ranks) the full-batch gradient is :math:`\sum_{i \in B} q_i \nabla \ell_i`. Rank ``r``
returns a loss whose gradient is :math:`s \sum_{i \in B_r} q_i \nabla \ell_i`:

* ``grad_average=True`` (default, what :class:`~torch.nn.parallel.DistributedDataParallel`
  does): DDP *averages* gradients over the ``W`` ranks, so ``s = W`` and the averaged gradient
  is :math:`\frac1W \sum_r W \sum_{i\in B_r} q_i\nabla\ell_i = \sum_{i\in B} q_i\nabla\ell_i`,
  exactly the single-process full-batch gradient;
* ``grad_average=False`` (gradients all-reduced with a *sum*, e.g. by hand): ``s = 1``.

Per-rank batch sizes may differ (and may be zero on some ranks): the sizes are gathered first,
the tensors padded to the largest size, gathered, and trimmed; the global batch is the
concatenation in rank order.

Communication device: CUDA for the NCCL backend (the current device), CPU otherwise (gloo, mpi).
Without an initialised process group (or with a group of one) everything reduces to the
single-process computation, so the same training script runs with and without
``torch.distributed``.
"""
import time

import numpy

import torch
import torch.distributed as dist

__all__ = ["is_distributed", "world_size", "rank", "all_gather_1d", "all_reduce_sum",
           "ColumnGatherer", "all_reduce_mean_", "Piggyback", "stats_comm_hook",
           "carrier_dtype",
           "grad_scale"]


def is_distributed(group=None):
    """True when a process group is initialised (``torch.distributed`` available)."""
    return dist.is_available() and dist.is_initialized()


def world_size(group=None):
    """Number of ranks of ``group`` (1 without an initialised process group)."""
    return dist.get_world_size(group) if is_distributed(group) else 1


def rank(group=None):
    """This process' rank in ``group`` (0 without an initialised process group)."""
    return dist.get_rank(group) if is_distributed(group) else 0


def grad_scale(group=None, grad_average=True):
    """The factor ``s`` multiplying each rank's local part (see the module docstring)."""
    return float(world_size(group)) if grad_average else 1.0


def _comm_device(group):
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_gather_1d(tensors, group=None):
    """All-gather 1-D tensors of a common (per-rank variable) length across ranks.

    Parameters
    ----------
    tensors : sequence of 1-D tensors, all of the same length ``b_r`` on this rank (e.g. the
        local losses and the local sample indices). They are detached and not modified.
    group : process group, optional (default: the world).

    Returns
    -------
    gathered : list of 1-D tensors (on the communication device, the input dtypes), each the
        concatenation over ranks in rank order (length ``sum_r b_r``).
    sizes : list of int, the per-rank lengths ``b_r``.
    offset : int, where this rank's entries start in ``gathered``.

    Without an initialised process group this returns the inputs (detached) unchanged.

    Examples
    --------
    >>> import torch
    >>> from riskopt.torch.distributed import all_gather_1d
    >>> (l,), sizes, offset = all_gather_1d([torch.tensor([1.0, 2.0])])  # single process
    >>> l.tolist(), sizes, offset
    ([1.0, 2.0], [2], 0)
    """
    tensors = [t.detach() for t in tensors]
    b = int(tensors[0].shape[0])
    if any(t.ndim != 1 or int(t.shape[0]) != b for t in tensors):
        raise ValueError("all_gather_1d needs 1-D tensors of a common length")
    if not is_distributed(group) or dist.get_world_size(group) == 1:
        return tensors, [b], 0
    ws = dist.get_world_size(group)
    me = dist.get_rank(group)
    dev = _comm_device(group)
    size = torch.tensor([b], dtype=torch.int64, device=dev)
    sizes_t = [torch.zeros_like(size) for _ in range(ws)]
    dist.all_gather(sizes_t, size, group=group)
    sizes = [int(s.item()) for s in sizes_t]
    m = max(sizes)
    out = []
    for t in tensors:
        padded = torch.zeros(m, dtype=t.dtype, device=dev)
        padded[:b] = t.to(dev)
        parts = [torch.empty_like(padded) for _ in range(ws)]
        dist.all_gather(parts, padded, group=group)
        out.append(torch.cat([p[:s] for p, s in zip(parts, sizes)]))
    return out, sizes, sum(sizes[:me])


def all_reduce_sum(tensor, group=None):
    """Sum of a (detached) tensor over ranks, returned on ``tensor``'s device."""
    tensor = tensor.detach()
    if not is_distributed(group) or dist.get_world_size(group) == 1:
        return tensor.clone()
    dev = _comm_device(group)
    buf = tensor.to(dev, copy=True)
    dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
    return buf.to(tensor.device)


def _active_group(process_group):
    """The group to communicate over, or None when there is nothing to communicate:
    ``process_group=False`` (local state by request), no initialised process group, or a
    group of one rank. ``process_group=None`` means the default (world) group."""
    if process_group is False or not is_distributed():
        return None
    group = dist.group.WORLD if process_group is None else process_group
    return group if dist.get_world_size(group) > 1 else None


class ColumnGatherer:
    r"""All-gather of per-rank blocks of float64 columns (one row per local sample / index)
    in **one collective per call** in steady state.

    Every rank sends a buffer of ``1 + capacity * k`` float64 numbers: its row count ``b_r``
    then its ``b_r`` rows of the ``k`` columns, zero-padded to ``capacity`` rows, the largest
    per-rank row count seen so far. After the gather every rank knows every ``b_r``; if one
    exceeds the capacity (the first call, or a larger batch than ever before) the capacity
    grows to ``max_r b_r`` and a second gather sends the full blocks. All ranks take the same
    decision from the same gathered headers, so they never disagree on the buffer size.
    Integers (dataset indices, counts) travel exactly as float64 up to ``2**53``.

    ``calls`` and ``bytes`` count the collectives issued and the bytes each rank received;
    ``seconds`` the wall time spent in them (waiting for the slower rank included).

    Equal batches (``equal=True``): the caller promises that every rank gathers as many
    rows as this one at every call (what ``DistributedSampler`` gives, with or without
    ``drop_last``: the same number of samples on every rank, so the same batch sizes at
    each step). The capacity then grows from this rank's own row count, before the gather
    (the same on every rank), so each call is one gather, and the row counts are not read
    back: on the tensor path (NCCL) the gathered counts are checked by a device-side assert
    (``torch._assert_async``: no host round trip; a broken promise stops the run at the
    next synchronisation, on every rank), on the host path (gloo) by a ``ValueError``. A
    broken promise where one rank's batch outgrows the capacity of the others makes the
    ranks' buffers differ in size: the collective itself fails (gloo aborts the process).
    """

    #: gloo (CPU) collectives: pack and unpack in NumPy (:meth:`_host_parts`); False: the
    #: tensor code of the device path (for tests)
    host = True

    def __init__(self, group=None, equal=False):
        self.group = group
        self.equal = equal         # every rank the same row count at each call (promised)
        self.capacity = 0
        self.carried = 0           # bytes carried on DDP's all-reduce (stats_comm_hook)
        self.calls = 0
        self.bytes = 0
        self.seconds = 0.0

    def __call__(self, columns, device, scalars=None):
        r"""Gather ``columns`` (1-D tensors of a common local length ``b``; detached,
        converted to float64) and, optionally, a few per-rank ``scalars`` (numbers or 0-d
        tensors; they travel in the header, so a rank with no rows still sends them).

        Returns ``(table, sizes, offset)``: ``table`` of shape ``(sum_r b_r, k)`` (float64,
        on ``device``), the rows of all ranks in rank order; ``sizes``, the list of ``b_r``;
        ``offset``, where this rank's rows start. With ``scalars``, a fourth item: the
        ``(W, len(scalars))`` float64 tensor of every rank's scalars.
        """
        return self.start(columns, device, scalars).wait()

    def start(self, columns, device, scalars=None):
        """:meth:`__call__` launched non-blocking (``async_op=True``): returns a handle whose
        ``wait()`` gives :meth:`__call__`'s result (the same collectives in the same order,
        the same numbers). Work done between the two (a backward, DDP's all-reduce) overlaps
        the gather; when a rank's rows outgrew the capacity, ``wait`` issues the second
        (blocking) gather. ``seconds`` counts the launch and the wait only."""
        host = _comm_device(self.group).type == "cpu" and self.host
        if host:
            pack, unpack, k = self._host_parts(columns, device, scalars)
        else:
            pack, unpack, k = self._tensor_parts(columns, device, scalars)
        rows = None
        if self.equal:       # (a shape: no host read) every rank the same, by promise
            rows = int(columns[0].numel()) if k else 0
            if k:
                self.capacity = max(self.capacity, rows)
        return _PendingGather(self, pack, unpack, k, rows, host)

    def padded(self, columns, device, rows, scalars=None):
        """One gather (the tensor code) of every rank's rows zero-padded to ``rows``, a
        bound on every rank's row count (more are cut): the counts are not read. Returns
        ``(table, heads)`` on ``device``: the ``(W * rows, k)`` float64 table (rank ``r``'s
        rows from ``r * rows``, its first ``heads[r, 0]`` real) and the ``(W, 1 + s)``
        headers (row count, then the ``scalars``)."""
        pack, _, k = self._tensor_parts(columns, device, scalars)
        ws = dist.get_world_size(self.group)
        buf = pack(rows)
        got = torch.empty(ws * buf.numel(), dtype=torch.float64, device=buf.device)
        t0 = time.perf_counter()
        _all_gather_single(got, buf, group=self.group)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        self.bytes += 8 * buf.numel() * ws
        parts = got.view(ws, buf.numel())
        h = buf.numel() - rows * k
        return parts[:, h:].reshape(ws * rows, k).to(device), parts[:, :h].to(device)

    def _tensor_parts(self, columns, device, scalars):
        """``(pack, unpack, k)`` of a call in tensor code (the device path)."""
        group = self.group
        dev = _comm_device(group)
        cols = [c.detach().reshape(-1).to(dev, torch.float64) for c in columns]
        k = len(cols)
        b = int(cols[0].numel()) if k else 0
        if any(int(c.numel()) != b for c in cols):
            raise ValueError("the gathered columns must have one entry per local row")
        me = dist.get_rank(group)
        extra = [] if scalars is None else [    # numbers or 0-d tensors (no host sync)
            torch.as_tensor(v, dtype=torch.float64).reshape(()).to(dev) for v in scalars]
        h = 1 + len(extra)
        block = (torch.stack(cols, 1).to(dev) if k > 1 else cols[0].to(dev).unsqueeze(1)
                 if k else torch.zeros((b, 0), dtype=torch.float64, device=dev))
        count = torch.full((1,), float(b), dtype=torch.float64, device=dev)
        head = torch.cat([count, torch.stack(extra)]) if extra else count

        def pack(cap):   # (a few small ops: each costs more than its arithmetic here)
            r = min(b, cap)
            pieces = [head]
            if r and k:
                pieces.append(block[:r].reshape(-1))
            if (cap - r) * k:
                pieces.append(torch.zeros((cap - r) * k, dtype=torch.float64, device=dev))
            return torch.cat(pieces) if len(pieces) > 1 else head

        def unpack(parts, sizes):
            table = _rows(parts, sizes, h, k, torch.cat)
            out = (table.to(device), sizes, sum(sizes[:me]))
            return out if scalars is None else (*out, parts[:, 1:h].to(device))
        return pack, unpack, k

    def _exchange(self, pack, ws, k):
        """The all-gathers of a call: ``pack(capacity)`` gives this rank's buffer (1-D
        float64: the header, then its rows padded to ``capacity``); a second gather when a
        rank's rows outgrew the capacity. Returns ``(parts, sizes)``: the ``(ws, len)``
        view of every rank's buffer and their row counts."""
        while True:
            pending = _PendingGather(self, pack, None, k)
            parts, sizes = pending.parts()
            if max(sizes) <= pending.cap or k == 0:
                return parts, sizes
            self.capacity = max(sizes)

    def _host_parts(self, columns, device, scalars):
        """``(pack, unpack, k)`` when the collective runs on CPU tensors (gloo): the buffer
        is packed and the table unpacked in NumPy (the same float64 numbers, the same
        collectives; each small NumPy call costs a fraction of a tensor op's dispatch)."""
        cols = [_host_f64(c) for c in columns]
        k = len(cols)
        b = int(cols[0].size) if k else 0
        if any(int(c.size) != b for c in cols):
            raise ValueError("the gathered columns must have one entry per local row")
        me = dist.get_rank(self.group)
        head = [float(b)] + ([] if scalars is None else [float(v) for v in scalars])
        h = len(head)

        def pack(cap):
            r = min(b, cap)
            buf = numpy.zeros(h + cap * k)
            buf[:h] = head
            if r and k:
                block = buf[h:h + r * k].reshape(r, k)
                for j, c in enumerate(cols):
                    block[:, j] = c[:r]
            return torch.from_numpy(buf)

        def unpack(parts, sizes):
            parts = parts.numpy()
            table = _rows(parts, sizes, h, k, numpy.concatenate)
            out = (torch.from_numpy(numpy.ascontiguousarray(table)).to(device), sizes,
                   sum(sizes[:me]))
            if scalars is None:
                return out
            return (*out, torch.from_numpy(numpy.ascontiguousarray(parts[:, 1:h])).to(device))
        return pack, unpack, k


class _PendingGather:
    """One launched all-gather of a :class:`ColumnGatherer` (see
    :meth:`ColumnGatherer.start`): the buffers stay alive until :meth:`wait`."""

    def __init__(self, gatherer, pack, unpack, k, rows=None, host=True):
        self.gatherer, self.pack, self.unpack, self.k = gatherer, pack, unpack, k
        self.rows, self.host = rows, host      # rows: every rank's row count (equal)
        self.cap = gatherer.capacity
        self.ws = dist.get_world_size(gatherer.group)
        buf = pack(self.cap)
        self.n = buf.numel()
        self.buf = buf
        self.got = torch.empty(self.ws * self.n, dtype=torch.float64, device=buf.device)
        t0 = time.perf_counter()
        self.work = _all_gather_single(self.got, buf, group=gatherer.group, async_op=True)
        gatherer.seconds += time.perf_counter() - t0
        gatherer.calls += 1
        gatherer.bytes += 8 * self.n * self.ws
        self.result = None

    def parts(self):
        """Wait for the collective: ``(parts, sizes)`` as :meth:`ColumnGatherer._exchange`
        returns them (one gather, whatever the capacity)."""
        t0 = time.perf_counter()
        self.work.wait()
        self.gatherer.seconds += time.perf_counter() - t0
        parts = self.got.view(self.ws, self.n)
        if self.rows is None:
            return parts, [int(x) for x in parts[:, 0].tolist()]
        return parts, _equal_sizes(parts[:, 0], self.rows, self.host)

    def wait(self):
        """The gather's result (:meth:`ColumnGatherer.__call__`'s); idempotent."""
        if self.result is None:
            parts, sizes = self.parts()
            if self.k and max(sizes) > self.cap:   # the same decision on every rank
                self.gatherer.capacity = max(sizes)
                parts, sizes = self.gatherer._exchange(self.pack, self.ws, self.k)
            self.result = self.unpack(parts, sizes)
            self.pack = self.unpack = self.buf = self.got = self.work = None
        return self.result


def _equal_sizes(counts, rows, host):
    """The ranks' row counts under the equal-batches promise (``rows`` each), checked
    against the gathered ``counts``: on the host (``host``: a ``ValueError``) or by a
    device-side assert (no host read)."""
    msg = (f"ddp_batches='equal': the ranks' batches differ in size (this rank has {rows} "
           "rows); use ddp_batches='any' for unequal per-rank batches")
    if host:
        sizes = [int(x) for x in counts.tolist()]
        if any(s != rows for s in sizes):
            raise ValueError(f"{msg}: {sizes}")
    else:
        torch._assert_async((counts == float(rows)).all(), msg)
    return [rows] * counts.numel()


def _rows(parts, sizes, h, k, cat):
    """The ``(sum(sizes), k)`` table of the ranks' rows in ``parts`` (a tensor or an array:
    ``cat`` joins them), each after its ``h`` header numbers."""
    cap = (parts.shape[1] - h) // k if k else 0
    if all(s == cap for s in sizes):          # every rank's rows fill its slot
        return parts[:, h:].reshape(len(sizes) * cap, k)
    return cat([parts[i, h:h + s * k].reshape(s, k) for i, s in enumerate(sizes)])


def _host_f64(c):
    """A column as a float64 NumPy array (on the host; bfloat16 has no NumPy dtype)."""
    c = c.detach().reshape(-1)
    if c.device.type != "cpu" or c.dtype in (torch.bfloat16, torch.bool):
        c = c.to("cpu", torch.float64)
    return c.numpy().astype(numpy.float64, copy=False)


#: ``all_gather_single(output, input, group=)`` (torch >= 2.12; before, under its old name)
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def all_reduce_mean_(tensors, group=None):
    """Average the tensors over the ranks in place, flattened into one buffer (one
    collective); a no-op without an active group."""
    if group is None or not tensors:
        return tensors
    dev = _comm_device(group)
    flat = torch.cat([t.detach().reshape(-1).to(dev, torch.float64) for t in tensors])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    flat /= dist.get_world_size(group)
    pos = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[pos:pos + n].view_as(t).to(t.device, t.dtype))
        pos += n
    return tensors


class Piggyback:
    r"""One step's batch statistics carried on DDP's gradient all-reduce (see
    :func:`stats_comm_hook`): no collective of their own.

    ``block``: this rank's rows (``(b, k)`` float64), ``scalars``: a few 0-d float64 tensors
    per rank, ``pre``: a number (or a 0-d float64 tensor on the rows' device: no host
    read) this rank's gradient is multiplied by before the sum, ``finish(table, sizes, offset, scalars)``: called with the gathered rows (as
    :class:`ColumnGatherer` returns them) once the all-reduce is done; returns the common 0-d
    factor of the summed gradient. Every gradient bucket ``g`` becomes
    ``finish(...) * sum_r pre_r g_r`` (in float64, then the bucket's dtype).

    The rows travel zero-padded to ``capacity`` rows per rank (the gatherer's, the same on
    every rank). When a rank has more rows, or ``finish`` raises, the summed gradient is kept
    (float64) and :meth:`complete` finishes the step with a separate gather.

    ``exact32``: every number posted (rows, scalars, the row count) is a float32 number (e.g.
    the losses of a float32 model, indices below ``2**24``), so that a float32 bucket carries
    each as one float32 instead of three; it must be the same on every rank (the poster
    decides it from dtypes and sizes only).
    """

    def __init__(self, gatherer, block, scalars, pre, finish, local_ok=True, exact32=False):
        self.gatherer, self.block, self.scalars = gatherer, block, list(scalars)
        self.pre, self.finish, self.local_ok = pre, finish, local_ok
        self.exact32 = exact32
        self.factor = None          # the common factor, once known
        self.done = None            # the future of the bucket that carries the rows
        self.kept = []              # (summed float64 gradient, parameters) to finish later
        self.buckets = []           # (this rank's float64 gradient or None, parameters)
        self.error = None
        #: set by ``finish`` when some rank's ``pre`` was out of range (``local_ok`` False:
        #: it sent 0): ``raw_scale``, this rank's factor for its own gradient (the sum of the
        #: ranks' ``raw_scale * g_r`` is added to the gradients by :meth:`complete`)
        self.fix, self.raw_scale = False, None

    def payload(self):
        """This rank's slot (header: row count and scalars, then the rows) inside a zero
        buffer of one slot per rank."""
        group, cap = self.gatherer.group, self.gatherer.capacity
        ws, me = dist.get_world_size(group), dist.get_rank(group)
        b, k = self.block.shape
        h = 1 + len(self.scalars)
        slot = h + cap * k
        dev = self.block.device
        r = min(b, cap)
        f64 = dict(dtype=torch.float64, device=dev)
        # one cat: the zeros before this rank's slot, its header and rows, the zeros after
        pieces = [torch.zeros(me * slot, **f64), torch.full((1,), float(b), **f64)]
        if self.scalars:
            pieces.append(torch.stack(self.scalars))
        if r and k:
            pieces.append(self.block[:r].reshape(-1))
        pieces.append(torch.zeros((cap - r) * k + (ws - 1 - me) * slot, **f64))
        return torch.cat(pieces), slot, h

    def decode(self, flat, slot, h):
        """The gathered rows from the summed payload; None when some rank had more rows
        than the capacity (the rows did not fit)."""
        ws = flat.numel() // slot
        parts = flat.view(ws, slot)
        k, cap = self.block.shape[1], self.gatherer.capacity
        if self.gatherer.equal:     # every rank this rank's row count (no host read)
            sizes = _equal_sizes(parts[:, 0], self.block.shape[0], False)
        else:
            sizes = [int(x) for x in parts[:, 0].tolist()]
        if max(sizes) > cap and k:
            return None
        if all(s == cap for s in sizes):          # every rank's rows fill its slot
            table = parts[:, h:].reshape(ws * cap, k)
        else:
            table = torch.cat([parts[r, h:h + s * k].reshape(s, k)
                               for r, s in enumerate(sizes)])
        me = dist.get_rank(self.gatherer.group)
        return table, sizes, sum(sizes[:me]), parts[:, 1:h]

    def complete(self):
        """After the backward: finish a step whose rows did not fit (or whose ``finish``
        raised) with a gather of its own, and write the gradients. Re-raises ``finish``'s
        error."""
        if self.factor is None and self.error is None:
            try:
                got = self.gatherer(list(self.block.unbind(1)), self.block.device,
                                    scalars=self.scalars)
                self.factor = self.finish(*got)
            except Exception as exc:       # noqa: BLE001  (re-raised below)
                self.error = exc
        if self.error is not None:
            raise self.error
        for flat, params in self.kept:
            _write_grads(params, flat * self.factor, add=False)
        if self.fix:                 # the same decision on every rank (gathered numbers)
            for raw, params in self.buckets:
                corr = (raw * self.raw_scale if raw is not None else torch.zeros(
                    sum(p.numel() for p in params), dtype=torch.float64,
                    device=self.block.device))
                dist.all_reduce(corr, group=self.gatherer.group)
                _write_grads(params, corr, add=True)


def _write_grads(params, flat, add):
    pos = 0
    for p in params:
        n = p.numel()
        part = flat[pos:pos + n].view_as(p).to(p.grad.dtype)
        p.grad.add_(part) if add else p.grad.copy_(part)
        pos += n


def carrier_dtype(dtype):
    """The dtype a gradient bucket of ``dtype`` is all-reduced in by :func:`stats_comm_hook`:
    float32 stays float32 (the statistics travel as three float32 each), anything else is
    summed in float64."""
    return torch.float32 if dtype == torch.float32 else torch.float64


def _split3(x):
    """float64 ``x`` as three float32 ``hi + mid + lo`` (exact unless a piece underflows:
    values below about 1e-23 with more than float32's digits)."""
    hi = x.to(torch.float32)
    r = x - hi.to(torch.float64)
    mid = r.to(torch.float32)
    lo = (r - mid.to(torch.float64)).to(torch.float32)
    return torch.cat([hi, mid, lo])


def _join3(y):
    hi, mid, lo = y.to(torch.float64).view(3, -1)
    return hi + mid + lo


def stats_comm_hook(opt, bucket):
    """A DDP communication hook (``ddp.register_comm_hook(opt, stats_comm_hook)``, what
    ``opt.attach(ddp)`` does): when the optimizer ``opt`` has posted its step's batch
    statistics (:class:`Piggyback`, ``opt._piggy``) each bucket's gradient, times the rank's
    factor, is all-reduced (summed) in :func:`carrier_dtype`, the first bucket carrying the
    statistics, and every bucket is scaled as the statistics say. Without posted statistics
    it is DDP's default (the mean over ranks)."""
    buf = bucket.buffer()
    post = getattr(opt, "_piggy", None)
    group = opt._group()
    ws = dist.get_world_size(group)
    if post is None:
        fut = dist.all_reduce(buf.div_(ws), group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])
    n = buf.numel()
    params = bucket.parameters()
    post.buckets.append((None if post.local_ok else buf.to(torch.float64, copy=True), params))
    cdt = carrier_dtype(buf.dtype)
    grad = buf.to(cdt)
    if isinstance(post.pre, torch.Tensor) or post.pre != 1.0:
        grad = grad * post.pre
    first = post.done is None
    if first:
        payload, slot, h = post.payload()
        enc = (payload if cdt == torch.float64 else
               payload.to(cdt) if post.exact32 else _split3(payload))
        flat = torch.cat([grad, enc])
        post.gatherer.carried += enc.element_size() * enc.numel()   # no collective of its own
    else:
        flat = grad
    fut = dist.all_reduce(flat, group=group, async_op=True).get_future()

    def write(flat_sum):
        g = flat_sum[:n]
        if post.factor is None:           # finish later (complete)
            post.kept.append((g.to(torch.float64, copy=True), params))
            return buf
        f = post.factor
        if cdt == torch.float64 or not 1e-30 < float(f) < 1e30:
            buf.copy_((g.to(torch.float64) * f).to(buf.dtype))
        elif buf.dtype == cdt:
            torch.mul(g, f.to(cdt), out=buf)
        else:
            buf.copy_((g * f.to(cdt)).to(buf.dtype))
        return buf

    if first:
        def on_first(f):
            flat_sum = f.value()[0]
            try:
                rest = flat_sum[n:]
                got = post.decode(rest if cdt == torch.float64 else
                                  rest.to(torch.float64) if post.exact32 else _join3(rest),
                                  slot, h)
                if got is not None:
                    post.factor = post.finish(*got)
            except Exception as exc:      # noqa: BLE001  (re-raised in step)
                post.error = exc
            return write(flat_sum)
        post.done = fut.then(on_first)
        return post.done
    both = torch.futures.collect_all([post.done, fut])
    return both.then(lambda f: write(f.value()[1].value()[0]))
