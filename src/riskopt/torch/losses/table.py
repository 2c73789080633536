r"""Spectral risk of the whole training set through a table of the latest per-sample losses."""
import math

import numpy as np
import torch
from torch import nn

from ... import risks as _risks
from ..._kernels import oracles as _ko
from ..._kernels.box_oracle import _box_spectrum
from ..._kernels.box_table import BoxTable
from ..._validation import check_int
from .. import _oracles as _to
from ._common import (_ORACLES, _GatherMixin, _as_index_tensor, _attach_dot,
                      _check_choice, _check_finite_np, _check_finite_t, _check_losses,
                      _check_range, _check_risk, _host_eager, _to_numpy64)

__all__ = ["TableSpectralRiskLoss"]

_BOX_LIMIT = 1e100  # larger losses (squared in the set sums) take the sorted-table path
#: the box oracle's O(1) value cancels terms of the size of ``nu`` (chi2: ``tau mass`` against
#: ``nu (2 s - 1)`` and the mid sum of squares; KL: ``m`` against ``nu log n``), so it is off
#: by ~``eps nu (1 + log n)``: 1e-6 at ``nu = 1e10`` on losses of scale 1, inf / NaN where
#: ``2 n nu`` overflows (stop 43). A table built with ``nu (1 + log n)`` above this many times
#: its largest loss takes the sorted-table path (exact, its value clamped as the numba
#: oracle's), which keeps the box value within ~1e-12 of the losses' scale.
_BOX_NU_REL = 1e3


def _last_writes(idx, l_np):
    """Distinct indices and their last value (last occurrence wins for duplicates)."""
    uniq, first = np.unique(idx[::-1], return_index=True)
    return uniq, l_np[::-1][first]


class TableSpectralRiskLoss(_GatherMixin, nn.Module):
    r"""Spectral risk of the full training set through a table of the latest per-sample losses.

    Keeps a table :math:`\hat l \in \mathbb R^n` holding, for each training sample ``i``, its
    loss at the last step that saw it (the loss table of Prospect, Mehta et al. 2024, Sec. 2
    "Bias Reduction via Loss Estimation" and Sec. 3). A call ``forward(losses, indices)``

    1. writes the batch losses into the table (``table[indices] = losses``);
    2. computes the *global* weights :math:`q = q^{\hat l} = \arg\max_{q \in \mathcal
       P(\sigma_n)} q^\top \hat l - \nu D(q\|\mathbf 1/n)` over all ``n`` entries with the
       exact oracle (the table is kept sorted by merging the ``b`` updated entries, O(n + b log
       b), then PAV in O(n));
    3. returns a scalar whose value is the risk of the table :math:`R(\hat l)` and whose gradient
       is :math:`\frac{n}{b}\sum_{k=1}^{b} q_{i_k} \nabla \ell_{i_k}(w)`.

    Scaling (unbiasedness): if the batch is a uniformly random subset of size ``b`` (or ``b``
    uniform draws with replacement), each sample is in the batch with probability ``b/n``
    (appears ``b/n`` times on average), so

    .. math::

        \mathbb E_B\Big[\frac nb \sum_{i \in B} q_i \nabla\ell_i(w)\Big]
        = \sum_{i=1}^n \frac bn \cdot \frac nb\, q_i \nabla \ell_i(w)
        = \sum_{i=1}^n q_i \nabla\ell_i(w),

    which is the full-batch gradient :math:`\nabla_w R(\ell(w))` whenever the table is exact
    (:math:`\hat l = \ell(w)`, hence :math:`q = q^{\ell(w)}`) — the paper's estimator
    :math:`n q_i \nabla\ell_i` averaged over a batch. With a stale table the bias is controlled
    by :math:`\|\hat l - \ell(w)\|` (the map :math:`l \mapsto q^l` is Lipschitz for ``nu > 0``,
    Prospect Lemma 6). This module implements the bias reduction only; Prospect's control
    variate (a table of per-sample gradients) is left out, as it needs O(n d) memory for a
    general network.

    With ``gather=True`` the losses and indices of all ranks form the global batch of size
    ``B = sum_r b_r``; every rank applies the same table updates (rank order) and computes the
    same weights, and rank ``r`` back-propagates :math:`s \frac nB \sum_{i\in B_r} q_i \nabla
    \ell_i` with ``s`` the world size (``grad_average=True``, DDP) or 1.

    Initialisation: call :meth:`init_table` with the losses of a full pass (all ``n`` samples,
    or a subset with their ``indices``). Otherwise the table fills lazily: while only ``m < n``
    samples have been seen, the weights are those of the risk of the ``m`` seen samples (a
    spectrum discretised for ``m``) and the scale is ``m/b`` instead of ``n/b``, i.e. the first
    step is the plain mini-batch risk; the estimate is biased until every sample has been seen
    once (one epoch). A custom ``ro.SpectralRisk`` (spectrum for ``n`` only) needs
    :meth:`init_table`.

    Parameters
    ----------
    risk : riskopt risk or str
    n : int
        Number of training samples; ``indices`` are sample ids in ``[0, n)``.
    gather, group, grad_average, check_finite : see :class:`SpectralRiskLoss`.
    oracle : {"auto", "torch", "numba"}, default "auto"
        ``"torch"``: once the table is complete it moves to the losses' device (float64) and
        every forward is a tensor program there: the batch is written by ``index_put_``
        (duplicate indices all write the value of their last occurrence, so the write is
        deterministic on any device), the weights of the whole table by the exact tensor
        oracle (:func:`riskopt.torch._oracles.spectral_weights`: a sort + the parallel PAV,
        or one ``kthvalue`` for CVaR without shift; O(n log n) per step instead of the host's
        incremental O(b log n)), no host synchronisation, traced by ``torch.compile(fullgraph=
        True)``. Out-of-range indices make the risk NaN there (checked, with NaN losses, on
        CPU tensors in eager mode only). While the table is incomplete (lazy filling) the
        forward runs on the host. ``"numba"``: the host table always. ``"auto"``:
        ``"torch"`` on every device but the CPU and under compile, ``"numba"`` for CPU
        tensors in eager mode. ``gather=True`` always uses the host table.

    Notes
    -----
    The table lives on the CPU in float64 (``n`` doubles) and is saved in ``state_dict``
    (extra state, a CPU copy whichever oracle runs: the format does not depend on it); with
    the tensor oracle it moves to the device at the first forward there after it is
    complete (or by :meth:`move_table`, needed before ``torch.compile`` of the first step),
    and back to the host (a device read) when a host method needs it (:meth:`init_table`,
    :meth:`weights`, :meth:`value`, a host forward, a state load). For a CVaR with ``shift_cost > 0`` (a box
    spectrum, chi-square or KL cost) and a complete table, the weights are kept by the
    incremental oracle of ``_kernels.box_oracle`` and the value by the set sums of
    ``_kernels.box_table``: a forward costs O(b log n) instead of O(n) (built once in O(n log
    n) after ``init_table``, a load or the end of the lazy filling; rebuilt exactly every
    ``n`` updates). Other risks, ``shift_cost = 0`` and an incomplete table use the sorted
    table (merge + PAV, O(n) per forward). Duplicate indices in a batch are allowed (sampling
    with replacement): the last value is written and each occurrence is weighted.

    Examples
    --------
    >>> import torch, riskopt as ro
    >>> from riskopt.torch import TableSpectralRiskLoss
    >>> crit = TableSpectralRiskLoss(ro.CVaR(0.5, shift_cost=0.5), n=6)
    >>> crit.init_table(torch.arange(6.0))
    >>> l = torch.tensor([5.0, 0.0], requires_grad=True)
    >>> r = crit(l, torch.tensor([5, 0]))
    >>> r.backward()
    >>> abs(r.item() - ro.CVaR(0.5, shift_cost=0.5).value(crit.table.numpy())) < 1e-6
    True
    >>> [round(g, 6) for g in l.grad.tolist()]  # (n/b) q_i for the two batch samples
    [1.0, 0.0]
    """

    def __init__(self, risk, n, gather=False, group=None, grad_average=True, check_finite=True,
                 oracle="auto"):
        super().__init__()
        self.oracle = _check_choice("oracle", oracle, _ORACLES)
        # the complete table on the device while the tensor oracle owns it (else None)
        self.register_buffer("_tdev", None, persistent=False)
        self.risk = _check_risk(risk)
        self.n = check_int("n", n, minimum=1)
        self._init_gather(gather, group, grad_average, check_finite)
        self._sigma_n = np.ascontiguousarray(self.risk.spectrum(self.n), dtype=np.float64)
        self._table = np.zeros(self.n)
        self._seen = np.zeros(self.n, dtype=bool)
        self._n_seen = 0
        self._order = None  # sorting permutation of the table once complete
        nu = float(self.risk.shift_cost)
        c, k, r = _box_spectrum(self._sigma_n)
        self._box_spec = (c, k, r) if k >= 0 and nu > 0 else None
        self._box = None  # BoxTable of the complete table (built lazily)
        # a custom spectrum (for n only): its tensor for the device oracle, moved with the
        # table (no host-to-device copy of n doubles per step)
        if isinstance(self.risk, _risks.SpectralRisk):
            self.register_buffer("_sigma_fixed", torch.from_numpy(self._sigma_n.copy()),
                                 persistent=False)
            self._z_fixed = int(np.count_nonzero(np.cumsum(self._sigma_n) == 0.0))
        else:
            self._sigma_fixed = None

    _use_box = True  # private switch: False forces the sorted-table path (tests' twin)

    def _box_active(self):
        return self._use_box and self._box_spec is not None and self.complete

    def _box_fits(self):
        """The box oracle's guard on the current table (O(n)): every loss within
        ``_BOX_LIMIT`` and ``nu (1 + log n) <= _BOX_NU_REL max |table|``. Checked when the box
        state is built and at ``BoxTable``'s own rebuilds (every ``n`` updates), so a table
        whose losses shrink by orders after the build returns to the sorted-table path at
        the next rebuild."""
        big = np.max(np.abs(self._table))
        nu = float(self.risk.shift_cost)
        return bool(big <= _BOX_LIMIT and nu * (1.0 + math.log(self.n)) <= _BOX_NU_REL * big)

    def _box_state(self):
        """The box oracle of the complete table, built (seeded by the exact weights) when
        missing; None while the table holds a loss of magnitude above ``_BOX_LIMIT`` (or a
        non-finite one: ``check_finite=False``), or when it is built with a shift cost large
        for its losses (``_BOX_NU_REL``), which the sorted table handles."""
        if self._box is None:
            if not self._box_fits():
                return None
            q = self._weights_sorted()[1]
            c, k, r = self._box_spec
            self._box = BoxTable(self.n, self.risk.shift_cost, c, k, r,
                                 self.risk.div_code == _ko.KL).build(self._table, q)
            self._order = None  # not kept while the box oracle runs
        return self._box

    # ------------------------------------------------------------------ table state
    @property
    def table(self):
        """A copy of the loss table (float64 CPU tensor, zeros where not yet seen)."""
        if self._tdev is not None:
            return self._tdev.detach().to("cpu", torch.float64, copy=True)
        return torch.from_numpy(self._table.copy())

    def _to_host(self):
        """Make the host table the current one again (a device read when the tensor oracle
        owns the table)."""
        if self._tdev is not None:
            self._table = self._tdev.detach().to("cpu", torch.float64).numpy().copy()
            self._tdev = None
            self._order = None
            self._box = None

    def move_table(self, device):
        """Hand the complete table to the tensor oracle on ``device`` (what the first forward
        with the tensor oracle does; call it before ``torch.compile`` of a first step)."""
        if torch.compiler.is_compiling():
            raise ValueError("move_table cannot run under torch.compile")
        if self._tdev is None:
            if not self.complete:
                raise ValueError(f"the tensor oracle needs a complete table ({self._n_seen}/"
                                 f"{self.n} seen): call init_table first")
            self._tdev = torch.from_numpy(self._table.copy()).to(device)
            self._box = None
            self._order = None
        else:
            self._tdev = self._tdev.to(device)
        if self._sigma_fixed is not None:
            self._sigma_fixed = self._sigma_fixed.to(device)

    @property
    def n_seen(self):
        """Number of samples whose loss is in the table."""
        return self._n_seen

    @property
    def complete(self):
        """Whether every sample has a loss in the table."""
        return self._n_seen == self.n

    def init_table(self, losses, indices=None):
        """Fill the table from a pass over the data (no gradient, no communication).

        Parameters
        ----------
        losses : tensor or array of shape (n,) or (m,)
            The per-sample losses (in sample-id order when ``indices`` is None).
        indices : tensor or array of shape (m,), optional
            Sample ids of ``losses`` when they do not cover all samples in order.
        """
        if isinstance(losses, torch.Tensor):
            _check_losses(losses)
            l_np = _to_numpy64(losses).copy()
        else:
            l_np = np.array(losses, dtype=np.float64)
            if l_np.ndim != 1 or l_np.shape[0] == 0:
                raise ValueError(f"losses must be a non-empty 1-D array, got shape {l_np.shape}")
        _check_finite_np("losses", l_np)
        if indices is None:
            if l_np.shape[0] != self.n:
                raise ValueError(
                    f"init_table without indices needs all n={self.n} losses, got "
                    f"{l_np.shape[0]}"
                )
            idx = np.arange(self.n)
        else:
            idx = _as_index_tensor("indices", indices, l_np.shape[0]).numpy()
            _check_range("indices", idx, self.n)
        self._to_host()
        self._write(idx, l_np, resort=True)

    def _write(self, idx, l_np, resort=False):
        uniq, vals = _last_writes(idx, l_np)
        was_complete = self.complete
        self._box = None
        self._table[uniq] = vals
        if not was_complete:
            self._seen[uniq] = True
            self._n_seen = int(np.count_nonzero(self._seen))
        if not self.complete:
            return
        if resort or not was_complete or self._order is None:
            self._order = np.argsort(self._table, kind="mergesort")
            return
        # merge the re-sorted updated entries into the sorted order of the others
        keep = np.ones(self.n, dtype=bool)
        keep[uniq] = False
        rest = self._order[keep[self._order]]
        new = uniq[np.argsort(vals, kind="mergesort")]
        pos = np.searchsorted(self._table[rest], self._table[new], side="right")
        self._order = np.insert(rest, pos, new)

    def _weights_np(self):
        """``(R(table), q)`` over the table (over the seen entries while incomplete)."""
        box = self._box_state() if self._box_active() else None
        if box is not None:
            return box.value(), box.weights(self._table)
        return self._weights_sorted()

    def _weights_sorted(self):
        """``_weights_np`` by the sorted table (merge + PAV)."""
        nu, div = float(self.risk.shift_cost), self.risk.div_code
        if self.complete:
            if self._order is None:
                self._order = np.argsort(self._table, kind="mergesort")
            ls = np.ascontiguousarray(self._table[self._order])
            qs = np.empty(self.n)
            _ko._weights_sorted(ls, self._sigma_n, nu, div, qs)
            q = np.empty(self.n)
            q[self._order] = qs
            return _ko._risk_sorted(ls, qs, nu, div), q
        if self._n_seen == 0:
            raise ValueError("the loss table is empty; call init_table or forward first")
        sub = np.flatnonzero(self._seen)
        if isinstance(self.risk, _risks.SpectralRisk):
            raise self._custom_spectrum_error()
        sigma = np.ascontiguousarray(self.risk.spectrum(sub.shape[0]), dtype=np.float64)
        qsub = np.empty(sub.shape[0])
        val = _ko.risk_weights(np.ascontiguousarray(self._table[sub]), sigma, nu, div, qsub,
                               radix=True)
        q = np.zeros(self.n)
        q[sub] = qsub
        return val, q

    def _custom_spectrum_error(self):
        return ValueError(
            f"a custom SpectralRisk has a spectrum for n={self.n} samples only: fill the "
            f"table with init_table before training ({self._n_seen}/{self.n} seen)")

    def weights(self):
        """The current global weights ``q`` over the table (float64 CPU tensor of shape (n,))."""
        self._to_host()
        return torch.from_numpy(self._weights_np()[1])

    def value(self):
        """The risk of the current table ``R(table)``."""
        self._to_host()
        return float(self._weights_np()[0])

    # ------------------------------------------------------------------ tensor oracle
    def _use_torch(self, losses):
        if self.oracle == "numba" or self.gather:
            if torch.compiler.is_compiling():
                raise ValueError("the host table (oracle='numba' or gather=True) cannot run "
                                 "under torch.compile")
            return False
        return self.oracle == "torch" or not _host_eager(losses)

    def _device_spectrum(self, device):
        nu = float(self.risk.shift_cost)
        if self._sigma_fixed is not None:
            return self._sigma_fixed.to(device), self._z_fixed, None
        z = _to.zero_prefix(self.risk, self.n)
        if nu > 0 and self.risk.div_code == _ko.KL and z is None:
            raise ValueError("the KL shift of a user risk subclass needs oracle='numba'")
        return (_to.spectrum(self.risk, self.n, device), z,
                _to.two_level_zero_prefix(self.risk, self.n) if nu == 0.0 else None)

    def _forward_device(self, losses, indices):
        """The tensor-oracle forward (the table complete and on ``losses.device``)."""
        dev = losses.device
        b = losses.shape[0]
        n = self.n
        idx = _as_index_tensor("indices", indices, b, dev)
        bad = ((idx < 0) | (idx >= n)).any()
        l64 = losses.detach().to(torch.float64)
        if _host_eager(losses):
            if bool(bad):
                raise ValueError(f"indices out of range [0, {n})")
            if self.check_finite:
                _check_finite_t("losses", l64)
        ic = idx.clamp(0, n - 1)
        # duplicates: every occurrence writes the value of the last one (deterministic)
        last = torch.full((n,), -1, dtype=torch.int64, device=dev).scatter_reduce(
            0, ic, torch.arange(b, device=dev), "amax")
        self._tdev.index_put_((ic,), l64[last[ic]])
        sigma, z, two = self._device_spectrum(dev)
        val, q = _to.spectral_weights(self._tdev, sigma, float(self.risk.shift_cost),
                                      self.risk.div_code, z, two)
        val = val + torch.where(bad, math.nan, 0.0)
        return _attach_dot(losses, q[ic], val, n / b)

    def forward(self, losses, indices):
        _check_losses(losses, allow_empty=self.gather)
        if self._use_torch(losses):
            if self._tdev is None or self._tdev.device != losses.device:
                if torch.compiler.is_compiling():
                    raise ValueError(
                        "TableSpectralRiskLoss under torch.compile needs its complete table "
                        "on the losses' device: call init_table, then move_table(device) (or "
                        "run one eager step) before compiling")
                if self.complete:
                    self.move_table(losses.device)
            if self._tdev is not None:
                return self._forward_device(losses, indices)
        self._to_host()
        idx = _as_index_tensor("indices", indices, int(losses.shape[0]))
        l_np, (ig,), local = self._gather_losses(losses, idx)
        i_np = ig.to("cpu", torch.int64).numpy()
        big_b = l_np.shape[0]
        _check_range("indices", i_np, self.n)
        if (isinstance(self.risk, _risks.SpectralRisk) and not self.complete
                and self._n_seen + np.setdiff1d(
                    i_np, np.flatnonzero(self._seen)).shape[0] < self.n):
            raise self._custom_spectrum_error()
        box = None
        if self._box_active() and np.max(np.abs(l_np), initial=0.0) <= _BOX_LIMIT:
            box = self._box_state()
        if box is not None:
            uniq, vals = _last_writes(i_np, l_np)
            if box.step(self._table, uniq, vals) and not self._box_fits():
                box = self._box = None  # rebuilt on a table the guard no longer admits
        if box is not None:
            val = box.value()
            q_local = torch.from_numpy(box.weights_at(self._table, i_np[local]))
        else:  # (after a dropped box the table holds these values already: rewritten)
            self._write(i_np, l_np)
            val, q = self._weights_sorted()
            q_local = torch.from_numpy(q[i_np[local]])
        scale = self._n_seen / big_b * self._scale()
        return _attach_dot(losses, q_local, val, scale)

    # ------------------------------------------------------------------ state_dict
    def get_extra_state(self):
        return {"table": self.table, "seen": torch.from_numpy(self._seen.copy())}

    def set_extra_state(self, state):
        table = state["table"].to("cpu", torch.float64).numpy().copy()
        seen = state["seen"].to("cpu", torch.bool).numpy().copy()
        if table.shape != (self.n,) or seen.shape != (self.n,):
            raise ValueError(f"loss table state has shape {table.shape}, expected ({self.n},)")
        self._tdev = None  # the host table is the loaded one (moved again by a device step)
        self._table, self._seen = table, seen
        self._box = None  # rebuilt from the loaded table at the next forward
        self._n_seen = int(np.count_nonzero(seen))
        self._order = np.argsort(table, kind="mergesort") if self.complete else None

    def extra_repr(self):
        return (f"risk={self.risk!r}, n={self.n}, seen={self._n_seen}, gather={self.gather}, "
                f"oracle={self.oracle!r}")


