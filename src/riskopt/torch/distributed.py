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
import torch
import torch.distributed as dist

__all__ = ["is_distributed", "world_size", "rank", "all_gather_1d", "all_reduce_sum",
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
