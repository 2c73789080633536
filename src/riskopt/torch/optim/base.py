r"""Base class of the PyTorch optimizers whose state is indexed by dataset indices.

The stochastic methods for DRO and coupled compositional problems (SCDRO / ASCDRO for
KL-constrained DRO, SONEX / ALEXR2 for group DRO and constrained learning) keep, besides the
usual per-parameter state (momentum, ...), an estimate *per sample or per group*: e.g. a
moving average :math:`u_i \approx g_i(w)` of the inner function of sample (or group) ``i``,
updated only for the ``i`` of the current batch,

.. math:: u_i \leftarrow (1 - \beta) u_i + \beta\, \hat g_i(w_t), \qquad i \in B_t,

while the parameter update uses :math:`f_i'(u_i)`. Such state is a table of ``n_indices``
rows (samples or groups) and lives in tensors on the parameters' device, read and written
at the dataset indices of the batch: :class:`IndexedStateOptimizer` holds these tables, and
its ``step(indices=...)`` receives the indices.

How a loader yields indices
---------------------------
The optimizer needs the dataset index of every sample of the batch (or the group index of
every group). Two ways:

* a dataset that returns the index with the sample, e.g.
  ``TensorDataset(X, y, torch.arange(n))`` (a batch is then ``(x, y, index)``), or a
  ``Dataset.__getitem__(i)`` returning ``(x, y, i)``;
* the index batches of :mod:`riskopt.samplers` as the loader's ``batch_sampler``
  (``PermutationSampler(n, b)``, ``UniformSampler(n, b)``, ``GroupSampler(groups, B1, B2)``),
  over such a dataset: the sampler decides which indices, the dataset hands them back.

With per-group state, the indices passed to ``step`` are the group ids of the batch (e.g.
``groups[index].unique()``), and ``n_indices`` is the number of groups.

Checkpoints
-----------
:meth:`~IndexedStateOptimizer.state_dict` holds the usual ``state`` and ``param_groups`` plus
``indexed_state`` (the tables, as tensors) and ``n_indices``;
:meth:`~IndexedStateOptimizer.load_state_dict` copies them back onto the parameters' device (a
checkpoint saved on a GPU loads on a CPU and back) after checking names and shapes.
"""
import numpy
import torch

from ..._validation import check_int
from . import _updates
from ._guard import GuardMixin

__all__ = ["IndexedStateOptimizer"]


class IndexedStateOptimizer(GuardMixin, torch.optim.Optimizer):
    r"""A ``torch.optim.Optimizer`` with per-sample / per-group state indexed by dataset indices.

    Subclasses declare their tables in ``__init__`` with :meth:`add_indexed_state` and
    implement one method, ``_update(indices, **batch)``, called by :meth:`step` under
    ``torch.no_grad()`` with the validated indices (an ``int64`` tensor on the state device)
    and the keyword arguments given to ``step`` (e.g. the batch's per-sample losses). They
    read and write the tables with :meth:`gather` / :meth:`scatter` (or index
    :meth:`indexed_state` directly) and update the parameters from their ``.grad`` as any
    optimizer does. Nothing else is needed for device placement and checkpoints.

    Parameters
    ----------
    params : iterable of tensors or of dicts (parameter groups)
    defaults : dict
        Default hyperparameters of the parameter groups (as for ``torch.optim.Optimizer``).
    n_indices : int
        Number of rows of the indexed tables: the dataset size for per-sample state, the
        number of groups for per-group state; ``step`` accepts indices in ``[0, n_indices)``.
    process_group, on_divergence, check_every, blowup, rise
        Data parallelism (:mod:`riskopt.torch.optim._comm`) and the divergence check
        (:mod:`riskopt.torch.optim._guard`).
        A subclass that keeps tables under DDP gathers its batch with ``self._gather``
        and updates the tables from the gathered rows on every rank.

    Notes
    -----
    The tables are allocated on the device of the first parameter, in its floating dtype
    unless told otherwise, and follow the parameters if they move (checked at every
    ``step``). :meth:`scatter` with repeated indices (sampling with replacement) writes the
    last occurrence, deterministically on every device.

    Examples
    --------
    A minimal subclass: SGD that also tracks a moving average of every sample's loss.

    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> from riskopt.samplers import PermutationSampler
    >>> from riskopt.torch.optim import IndexedStateOptimizer
    >>> class MovingAverageSGD(IndexedStateOptimizer):
    ...     def __init__(self, params, n, lr=0.1, beta=0.5):
    ...         super().__init__(params, dict(lr=lr), n_indices=n)
    ...         self.beta = beta
    ...         self.add_indexed_state("u")              # u_i, zeros of shape (n,)
    ...     def _update(self, indices, losses):
    ...         u = self.gather("u", indices)
    ...         self.scatter("u", indices, (1 - self.beta) * u + self.beta * losses)
    ...         for group in self.param_groups:
    ...             for p in group["params"]:
    ...                 if p.grad is not None:
    ...                     p.add_(p.grad, alpha=-group["lr"])
    >>> X, y = torch.randn(8, 3), torch.randn(8)
    >>> data = TensorDataset(X, y, torch.arange(8))   # batches are (x, y, index)
    >>> loader = DataLoader(data, batch_sampler=PermutationSampler(8, 4, random_state=0))
    >>> model = torch.nn.Linear(3, 1)
    >>> opt = MovingAverageSGD(model.parameters(), n=8)
    >>> for x, t, idx in loader:
    ...     losses = 0.5 * (model(x)[:, 0] - t) ** 2
    ...     opt.zero_grad()
    ...     losses.mean().backward()
    ...     opt.step(indices=idx, losses=losses.detach())
    >>> opt.indexed_state("u").shape, bool((opt.indexed_state("u") > 0).all())
    (torch.Size([8]), True)
    >>> other = MovingAverageSGD(model.parameters(), n=8)
    >>> other.load_state_dict(opt.state_dict())
    >>> torch.equal(other.indexed_state("u"), opt.indexed_state("u"))
    True
    """

    def __init__(self, params, defaults, n_indices, *, process_group=None,
                 on_divergence="warn", check_every=10, blowup=1e6, rise=1.0):
        super().__init__(params, defaults)
        self.n_indices = check_int("n_indices", n_indices, minimum=1)
        self._indexed = {}
        self._init_guard(process_group, on_divergence, check_every, blowup, rise)

    def _extra_tensors(self):
        return tuple(t for t in self._indexed.values() if t.is_floating_point())

    # ------------------------------------------------------------------ device
    def _first_param(self):
        return self.param_groups[0]["params"][0]

    @property
    def device(self):
        """The device of the parameters (of the first one), where the tables live."""
        return self._first_param().device

    def _default_dtype(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.is_floating_point():
                    return p.dtype
        return torch.get_default_dtype()

    def _sync_device(self):
        dev = self.device
        for name, t in self._indexed.items():
            if t.device != dev:
                self._indexed[name] = t.to(dev)

    # ------------------------------------------------------------------ tables
    def add_indexed_state(self, name, shape=(), fill=0.0, dtype=None):
        """Allocate the table ``name`` of shape ``(n_indices, *shape)`` filled with ``fill``.

        ``dtype`` defaults to the parameters' floating dtype (``torch.bool`` for flags such as
        "seen", ``torch.int64`` for counters, ...). Returns the table.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"the name of an indexed state must be a non-empty str, got {name!r}")
        if name in self._indexed:
            raise ValueError(f"indexed state {name!r} already exists")
        shape = (self.n_indices, *tuple(int(s) for s in shape))
        dtype = self._default_dtype() if dtype is None else dtype
        self._indexed[name] = torch.full(shape, fill, dtype=dtype, device=self.device)
        return self._indexed[name]

    def indexed_state(self, name):
        """The table ``name`` (the tensor itself, shape ``(n_indices, ...)``)."""
        try:
            return self._indexed[name]
        except KeyError:
            raise KeyError(f"no indexed state {name!r}; have {sorted(self._indexed)}") from None

    @property
    def indexed_state_names(self):
        """The names of the tables, in the order they were added."""
        return tuple(self._indexed)

    #: how indices already on a non-CPU device are range-checked: ``"async"`` (default) with
    #: a device-side assert (``torch._assert_async``: no host round trip; a bad index stops
    #: the next synchronising call with a device assert naming the range), ``"sync"`` with a
    #: host read and the clear ``ValueError`` listing the bad indices (one synchronisation
    #: per step: for debugging). Indices that arrive on the host (a CPU tensor, NumPy array
    #: or list: what a DataLoader yields) are always checked on the host, before the copy.
    index_checks = "async"

    def check_indices(self, indices):
        """``indices`` as a 1-D ``int64`` tensor on the tables' device, range-checked.

        Accepts a tensor, a NumPy array or a sequence of integers (what a ``DataLoader``
        yields); raises ``ValueError`` for missing, non-integer, non-1-D or out-of-range
        indices. Indices on the host are checked there before the copy to the tables'
        device (no synchronisation); indices already on another device are checked there
        (see :attr:`index_checks`).
        """
        if indices is None:
            raise ValueError(
                f"{type(self).__name__}.step needs indices=... (the dataset indices of the "
                "batch, e.g. from a dataset returning (x, y, index))"
            )
        if isinstance(indices, torch.Tensor):
            t = indices.detach()
        else:
            t = torch.as_tensor(indices)
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise ValueError(f"indices must be integers, got dtype {t.dtype}")
        if t.ndim != 1:
            raise ValueError(f"indices must be 1-D, got shape {tuple(t.shape)}")
        if _is_host(t):                     # checked on the host, then copied (no sync)
            if t.numel() and not self._in_range(t):
                self._raise_out_of_range(t)
            return t.to(device=self.device, dtype=torch.int64)
        t = t.to(device=self.device, dtype=torch.int64)
        if t.numel():
            if self.index_checks == "sync":
                if not self._in_range(t):
                    self._raise_out_of_range(t)
            else:
                torch._assert_async(((t >= 0) & (t < self.n_indices)).all(),
                                    f"indices out of range [0, {self.n_indices})")
        return t

    def _raise_out_of_range(self, t):
        bad = t[(t < 0) | (t >= self.n_indices)][:5].tolist()
        raise ValueError(f"indices out of range [0, {self.n_indices}): {bad}")

    def _in_range(self, t):
        """Whether every index of ``t`` (non-empty) is in ``[0, n_indices)``: one reduction
        (a host read: on the host, or with ``index_checks="sync"``)."""
        if t.device.type == "cpu":          # (NumPy: less than a tensor op's dispatch)
            a = t.numpy()
            return int(a.min()) >= 0 and int(a.max()) < self.n_indices
        lo, hi = torch.aminmax(t)
        return int(lo) >= 0 and int(hi) < self.n_indices

    def _distinct(self, idx, message, host=None):
        """Whether the entries of the 1-D int64 tensor ``idx`` are distinct: on the host (or
        on ``host``, the indices as they arrived on the host) a bool; on a device
        (``_updates.HOST = False`` forces it) a device-side assert with ``message`` (True;
        ``index_checks="sync"``: a host read)."""
        if host is not None:
            return numpy.unique(host.numpy()).size == host.numel()
        if _updates._host(idx):
            return numpy.unique(idx.numpy()).size == idx.numel()
        if idx.numel() < 2:
            return True
        s = torch.sort(idx).values
        ok = (s[1:] != s[:-1]).all()
        if self.index_checks == "sync":
            return bool(ok)
        torch._assert_async(ok, message)
        return True

    def _distinct_indices(self, indices, message):
        """The step's distinct group indices, checked (:meth:`check_indices`; empty only on
        a rank under a process group); ``ValueError(message)`` otherwise (indices on a
        device: see :attr:`index_checks`). Indices on the host are checked there, before the
        copy; a few given as a 1-D int64 CPU tensor in one Python pass over them (cheaper
        than the general checks' array calls)."""
        t = indices.detach() if isinstance(indices, torch.Tensor) else indices
        if (isinstance(t, torch.Tensor) and t.dtype == torch.int64 and t.ndim == 1
                and _is_host(t) and 0 < t.shape[0] <= 64):
            got = t.tolist()
            if min(got) >= 0 and max(got) < self.n_indices and len(set(got)) == len(got):
                return t.to(self.device)
        if not isinstance(t, torch.Tensor):
            t = torch.as_tensor(t)
        idx = self.check_indices(t)
        host = t if _is_host(t) else None
        if (idx.numel() == 0 and self._group() is None) or not self._distinct(idx, message,
                                                                                host):
            raise ValueError(message)
        return idx

    def gather(self, name, indices):
        """Rows ``indices`` of the table ``name`` (a copy)."""
        return self.indexed_state(name).index_select(0, indices)

    def scatter(self, name, indices, values, distinct=False):
        """Write ``values`` into rows ``indices`` of the table ``name`` (last occurrence wins;
        ``distinct=True``: the caller knows the indices are distinct, one copy)."""
        table = self.indexed_state(name)
        values = torch.as_tensor(values, device=table.device).to(table.dtype)
        values = values.expand(indices.shape[0], *table.shape[1:])
        if distinct:
            table.index_copy_(0, indices, values)
        elif _updates._host(indices):
            pos = _last_occurrence(indices)
            table.index_copy_(0, indices[pos], values[pos])
        else:                   # static shapes: every copy of a row writes the same value
            table.index_copy_(0, indices, values.index_select(0, _last_source(indices)))

    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, closure=None, *, indices=None, **batch):
        """One update on the batch with dataset indices ``indices``.

        Parameters
        ----------
        closure : callable, optional
            Re-evaluates the model and returns the loss (as for any ``torch.optim``
            optimizer); called with gradients enabled before the update.
        indices : tensor, array or sequence of int
            The dataset (or group) indices of the batch, in ``[0, n_indices)``.
        **batch
            Passed to the subclass' ``_update`` (e.g. ``losses=...``).

        Returns
        -------
        The closure's loss, or None.
        """
        loss = self._closure(closure)
        self._sync_device()
        self._update(self.check_indices(indices), **batch)
        self._end_step()
        return loss

    def _update(self, indices, **batch):
        raise NotImplementedError(
            f"{type(self).__name__} must implement _update(indices, **batch)"
        )

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self):
        """``torch.optim.Optimizer.state_dict()`` plus ``indexed_state`` and ``n_indices``."""
        out = super().state_dict()
        out["indexed_state"] = {k: v.detach().clone() for k, v in self._indexed.items()}
        out["n_indices"] = self.n_indices
        out["guard"] = self._guard_state()
        return out

    def load_state_dict(self, state_dict):
        """Load a :meth:`state_dict`; the tables are copied onto the parameters' device."""
        state_dict = dict(state_dict)
        tables = state_dict.pop("indexed_state", None)
        n = state_dict.pop("n_indices", None)
        guard = state_dict.pop("guard", None)
        if tables is None:
            raise ValueError("state_dict has no 'indexed_state': not from an "
                             "IndexedStateOptimizer")
        if n is not None and int(n) != self.n_indices:
            raise ValueError(f"state_dict is for n_indices={n}, this optimizer has "
                             f"{self.n_indices}")
        if set(tables) != set(self._indexed):
            raise ValueError(f"state_dict has indexed state {sorted(tables)}, this optimizer "
                             f"has {sorted(self._indexed)}")
        for name, t in tables.items():
            if tuple(t.shape) != tuple(self._indexed[name].shape):
                raise ValueError(f"indexed state {name!r} has shape {tuple(t.shape)}, expected "
                                 f"{tuple(self._indexed[name].shape)}")
        super().load_state_dict(state_dict)
        self._sync_device()
        with torch.no_grad():
            for name, t in tables.items():
                self._indexed[name].copy_(t)
        self._load_guard_state(guard)


def _last_occurrence(indices):
    """Positions of the last occurrence of each distinct value of ``indices`` (1-D int64)."""
    b = indices.shape[0]
    if b == 0:
        return indices
    uniq, inverse = torch.unique(indices, return_inverse=True)
    pos = torch.arange(b, device=indices.device)
    last = torch.full((uniq.shape[0],), -1, dtype=torch.int64, device=indices.device)
    return last.scatter_reduce(0, inverse, pos, reduce="amax")


def _last_source(indices):
    """For each position of ``indices`` (1-D int64), the position of the last occurrence of
    its value: shapes fixed by ``indices`` alone (no ``unique``, no host read)."""
    b = indices.shape[0]
    if b < 2:
        return torch.arange(b, device=indices.device)
    s, order = torch.sort(indices, stable=True)
    pos = torch.arange(b, device=indices.device)
    last = torch.ones(b, dtype=torch.bool, device=indices.device)
    last[:-1] = s[1:] != s[:-1]
    run_end = torch.where(last, pos, b).flip(0).cummin(0).values.flip(0)
    return torch.empty_like(order).index_copy_(0, order, order.index_select(0, run_end))


def _is_host(t):
    """Whether the indices ``t`` are on the host (checked there before the copy)."""
    return t.device.type == "cpu"
