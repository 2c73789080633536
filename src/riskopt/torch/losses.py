r"""``torch.nn.Module`` risk losses: a batch of per-sample losses in, a scalar risk out.

Each module maps the per-sample losses ``l`` (a 1-D tensor, e.g. ``F.cross_entropy(...,
reduction="none")``) of a batch to a scalar whose *value* is the risk and whose *gradient*
with respect to ``l`` is the maximising distribution ``q`` (Danskin's theorem):

.. math::

    R(l) = \max_{q \in \mathcal Q} \; q^\top l - \nu D(q\|\mathbf 1/b), \qquad
    \nabla R(l) = q^\star(l).

The weights ``q*`` are computed outside autograd by an exact oracle and the module returns
``s * (sum(q* * l) - sum(q* * l).detach()) + R(l)``: its value is exactly ``R(l)`` and its
gradient is ``s q*`` (``s = 1`` in one process; see :mod:`riskopt.torch.distributed` for
``s`` under data parallelism). As with any Danskin gradient, second derivatives through ``q``
are not provided (``q*`` is treated as a constant).

Modules
-------
:class:`SpectralRiskLoss`
    Spectral risk of the batch (CVaR, ESRM, extremile, ..., with the chi2 / KL shift
    penalty), weights by the exact sort + PAV oracle of :mod:`riskopt._kernels.oracles`.
    The mini-batch estimate is *biased* for the full-data risk (the max over ``q`` does not
    commute with the expectation over batches).
:class:`TableSpectralRiskLoss`
    Keeps a table of the latest loss of each of the ``n`` training samples (Prospect's loss
    table) and weights the batch by the *global* weights of the table: unbiased for the
    full-batch gradient when the table is exact.
:class:`GroupDROLoss`
    Group DRO (Sagawa et al., 2020): online exponentiated-gradient group weights, the hard
    worst group, or CVaR over groups.
:class:`KLDROLoss`
    KL-penalised DRO ``nu log mean exp(l / nu)`` or KL-constrained DRO (1-D dual solve).

Devices and cost
----------------
The modules accept float32 / float64 tensors on any device; ``q*`` comes back on the losses'
device and dtype. The numba oracles run on the CPU, so :class:`SpectralRiskLoss`,
:class:`TableSpectralRiskLoss`, the ``"cvar"`` mode of :class:`GroupDROLoss` and the
constrained :class:`KLDROLoss` copy the ``b`` batch losses to the host (a device
synchronisation plus ``8 b`` bytes each way) and then run an O(b log b) oracle (O(n) for the
table, which is kept sorted by merging the updated entries). The KL-penalised loss without
``gather`` and the online / max group DRO compute on the device (the group DRO reads back a
few scalars for its input checks). ``check_finite=True`` (the
default) checks the losses for NaN / inf, which costs one host synchronisation on a GPU.

Measured medians on the (shared, heavily loaded) 2-core development CPU, float32/float64,
forward + backward: ``SpectralRiskLoss`` with ``b = 256``: 90-190 us per call, against 30-60
us for ``l.mean()``; the numba oracle itself takes 6-8 us, the rest is tensor <-> NumPy glue.
``TableSpectralRiskLoss`` with ``n = 10^4``, ``b = 256``: 0.3-0.7 ms per call (a full re-sort
oracle on the table alone: 0.8-1.1 ms). Constrained ``KLDROLoss`` (``b = 256``): 0.16 ms.
On a GPU each call adds one device -> host -> device copy of ``b`` numbers and a
synchronisation (not measured: no GPU was available).

Distributed training
--------------------
With ``gather=True`` the losses (and sample indices / group sums) are gathered across the ranks
of ``group`` with :mod:`torch.distributed`, the weights are computed on the global batch on
every rank, and each rank's local part is scaled so that DDP's gradient *averaging* gives the
single-process full-batch gradient (``grad_average=True``; pass ``False`` when gradients are
summed). Values are checked for NaN and indices for range *after* gathering, so a bad input
raises ``ValueError`` on every rank instead of hanging the others. See
:mod:`riskopt.torch.distributed`.

Examples
--------
>>> import torch, riskopt as ro
>>> from riskopt.torch import SpectralRiskLoss
>>> crit = SpectralRiskLoss(ro.CVaR(0.5))
>>> l = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
>>> r = crit(l)
>>> r.backward()
>>> r.item(), l.grad.tolist()
(3.5, [0.0, 0.0, 0.5, 0.5])
"""
import math

import numpy as np
import torch
from torch import nn

from .. import risks as _risks
from .._kernels import oracles as _ko
from .._validation import check_int, check_positive
from . import distributed as _dist

__all__ = ["SpectralRiskLoss", "TableSpectralRiskLoss", "GroupDROLoss", "KLDROLoss", "kl_dro"]


# ---------------------------------------------------------------------------- validation
def _check_risk(risk):
    risk = _risks.parse_risk(risk)
    if not isinstance(risk, _risks._RiskBase):
        raise ValueError(f"risk must be a riskopt spectral risk, got {type(risk).__name__}")
    return risk


def _check_losses(losses, allow_empty=False):
    if not isinstance(losses, torch.Tensor):
        raise ValueError(f"losses must be a torch.Tensor, got {type(losses).__name__}")
    if losses.ndim != 1:
        raise ValueError(
            f"losses must be a 1-D tensor of per-sample losses (reduction='none'), "
            f"got shape {tuple(losses.shape)}"
        )
    if not losses.is_floating_point():
        raise ValueError(f"losses must be a floating-point tensor, got {losses.dtype}")
    if losses.shape[0] == 0 and not allow_empty:
        raise ValueError("losses is empty")
    return losses


def _check_finite_np(name, a):
    if not np.all(np.isfinite(a)):
        bad = int(a.size - np.count_nonzero(np.isfinite(a)))
        raise ValueError(f"{name} contain {bad} NaN or infinite value(s)")


def _as_index_tensor(name, idx, b):
    """A 1-D int64 CPU tensor of length ``b`` (range checked later, after any gathering)."""
    if isinstance(idx, torch.Tensor):
        if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
            raise ValueError(f"{name} must be integers, got dtype {idx.dtype}")
        t = idx.detach().to("cpu", torch.int64)
    else:
        a = np.asarray(idx)
        if a.dtype.kind not in "iu":
            raise ValueError(f"{name} must be integers, got dtype {a.dtype}")
        t = torch.from_numpy(a.astype(np.int64, copy=True))
    if t.ndim != 1 or t.shape[0] != b:
        raise ValueError(f"{name} must have shape ({b},) like the losses, got {tuple(t.shape)}")
    return t


def _check_range(name, idx_np, n):
    if idx_np.size and (idx_np.min() < 0 or idx_np.max() >= n):
        bad = idx_np[(idx_np < 0) | (idx_np >= n)]
        raise ValueError(f"{name} out of range [0, {n}): {bad[:5].tolist()}")


def _attach(losses, q_local, value, scale):
    """``scale * (q.l - stop_grad(q.l)) + value``: value ``value``, gradient ``scale * q``."""
    q = q_local.to(device=losses.device, dtype=losses.dtype)
    s = torch.dot(q, losses)
    val = torch.as_tensor(value, dtype=losses.dtype, device=losses.device)
    return scale * (s - s.detach()) + val


def _to_numpy64(t):
    return t.detach().to("cpu", torch.float64).numpy()


class _GatherMixin:
    """Shared ``gather`` / ``group`` / ``grad_average`` handling."""

    def _init_gather(self, gather, group, grad_average, check_finite):
        self.gather = bool(gather)
        self.group = group
        self.grad_average = bool(grad_average)
        self.check_finite = bool(check_finite)

    def _scale(self):
        return _dist.grad_scale(self.group, self.grad_average) if self.gather else 1.0

    def _gather(self, tensors):
        if self.gather:
            return _dist.all_gather_1d(tensors, self.group)
        return [t.detach() for t in tensors], [int(tensors[0].shape[0])], 0


# ---------------------------------------------------------------------------- spectral risk
class SpectralRiskLoss(_GatherMixin, nn.Module):
    r"""Spectral risk of a batch of per-sample losses, by the exact oracle.

    For batch losses :math:`l \in \mathbb R^b` returns

    .. math::

        R(l) = \max_{q \in \mathcal P(\sigma_b)} q^\top l - \nu D(q \| \mathbf 1/b)

    with :math:`\sigma_b` = ``risk.spectrum(b)`` (the spectrum discretised for the batch size
    ``b``) and :math:`\nu, D` the risk's ``shift_cost`` and ``divergence``; the gradient with
    respect to ``l`` is the maximiser :math:`q^\star` (Danskin), computed by
    ``riskopt._kernels.oracles._risk_weights`` (sort + pool-adjacent-violators, Prospect
    paper App. B-C) on the CPU in float64. For a full batch (``b = n``) the gradient through a
    model equals :meth:`riskopt.Objective.grad` (without the l2 term).

    This is the plain mini-batch plug-in estimate: for ``b < n`` its expected gradient is not
    the gradient of the full-data risk (Prospect paper, Sec. 2, "Bias Reduction"); use
    :class:`TableSpectralRiskLoss` for an unbiased one.

    Parameters
    ----------
    risk : riskopt risk or str
        ``ro.CVaR(0.1)``, ``ro.ESRM(1.0, shift_cost=0.5)``, ``"extremile:2"``, ... A custom
        ``ro.SpectralRisk(sigma)`` works only for batches of exactly ``len(sigma)`` losses (the
        global batch with ``gather=True``).
    gather : bool, default False
        Gather the losses across the ranks of ``group`` and use the weights of the global batch
        (see :mod:`riskopt.torch.distributed`); without an initialised process group this is a
        no-op.
    group : torch.distributed process group, optional
    grad_average : bool, default True
        With ``gather``, scale each rank's gradient by the world size so that DDP's averaging
        yields the full-batch gradient (``False``: gradients are summed over ranks).
    check_finite : bool, default True
        Raise ``ValueError`` on NaN / infinite losses.

    Examples
    --------
    >>> import torch, riskopt as ro
    >>> from riskopt.torch import SpectralRiskLoss
    >>> crit = SpectralRiskLoss(ro.Extremile(2.0, shift_cost=0.1, divergence="kl"))
    >>> l = torch.rand(64, dtype=torch.float64, requires_grad=True)
    >>> crit(l).backward()
    >>> torch.allclose(l.grad, crit.weights(l))
    True
    """

    def __init__(self, risk, gather=False, group=None, grad_average=True, check_finite=True):
        super().__init__()
        self.risk = _check_risk(risk)
        self._init_gather(gather, group, grad_average, check_finite)
        self._sigma = {}

    def _spectrum(self, b):
        sigma = self._sigma.get(b)
        if sigma is None:
            if isinstance(self.risk, _risks.SpectralRisk) and self.risk.sigma.shape[0] != b:
                raise ValueError(
                    f"this SpectralRisk has a spectrum for {self.risk.sigma.shape[0]} samples "
                    f"but the batch has {b} losses"
                    + (" (global batch over all ranks)" if self.gather else "")
                    + "; use a built-in risk (CVaR, ESRM, Extremile, ...), whose spectrum is "
                    "discretised for any batch size, or batches of the spectrum's length"
                )
            sigma = np.ascontiguousarray(self.risk.spectrum(b), dtype=np.float64)
            if len(self._sigma) > 16:
                self._sigma.clear()
            self._sigma[b] = sigma
        return sigma

    def _oracle(self, l_np):
        """``(R(l), q*)`` for a float64 numpy loss vector."""
        if self.check_finite:
            _check_finite_np("losses", l_np)
        q = np.empty_like(l_np)
        val = _ko._risk_weights(l_np, self._spectrum(l_np.shape[0]),
                                float(self.risk.shift_cost), self.risk.div_code, q)
        return val, q

    def weights(self, losses):
        """The maximising weights ``q*`` of the given (local, not gathered) batch losses."""
        _check_losses(losses)
        q = self._oracle(np.ascontiguousarray(_to_numpy64(losses)))[1]
        return torch.from_numpy(q).to(device=losses.device, dtype=losses.dtype)

    def forward(self, losses):
        _check_losses(losses, allow_empty=self.gather)
        b = int(losses.shape[0])
        (lg,), _, offset = self._gather([losses])
        l_np = np.ascontiguousarray(_to_numpy64(lg))
        if l_np.shape[0] == 0:
            raise ValueError("losses is empty on every rank")
        val, q = self._oracle(l_np)
        return _attach(losses, torch.from_numpy(q[offset:offset + b]), val, self._scale())

    def extra_repr(self):
        return f"risk={self.risk!r}, gather={self.gather}"


# ---------------------------------------------------------------------------- loss table
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

    Notes
    -----
    The table lives on the CPU in float64 (``n`` doubles; the oracle runs there anyway) and
    is saved in ``state_dict`` (extra state). Duplicate indices in a batch are allowed (sampling
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

    def __init__(self, risk, n, gather=False, group=None, grad_average=True, check_finite=True):
        super().__init__()
        self.risk = _check_risk(risk)
        self.n = check_int("n", n, minimum=1)
        self._init_gather(gather, group, grad_average, check_finite)
        self._sigma_n = np.ascontiguousarray(self.risk.spectrum(self.n), dtype=np.float64)
        self._table = np.zeros(self.n)
        self._seen = np.zeros(self.n, dtype=bool)
        self._n_seen = 0
        self._order = None  # sorting permutation of the table once complete

    # ------------------------------------------------------------------ table state
    @property
    def table(self):
        """A copy of the loss table (float64 CPU tensor, zeros where not yet seen)."""
        return torch.from_numpy(self._table.copy())

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
        self._write(idx, l_np, resort=True)

    def _write(self, idx, l_np, resort=False):
        # last occurrence wins for duplicated indices
        rev = idx[::-1]
        uniq, first = np.unique(rev, return_index=True)
        vals = l_np[::-1][first]
        was_complete = self.complete
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
        nu, div = float(self.risk.shift_cost), self.risk.div_code
        if self.complete:
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
            raise ValueError(
                f"a custom SpectralRisk has a spectrum for n={self.n} samples only: fill the "
                f"table with init_table before training ({self._n_seen}/{self.n} seen)"
            )
        sigma = np.ascontiguousarray(self.risk.spectrum(sub.shape[0]), dtype=np.float64)
        qsub = np.empty(sub.shape[0])
        val = _ko._risk_weights(np.ascontiguousarray(self._table[sub]), sigma, nu, div, qsub)
        q = np.zeros(self.n)
        q[sub] = qsub
        return val, q

    def weights(self):
        """The current global weights ``q`` over the table (float64 CPU tensor of shape (n,))."""
        return torch.from_numpy(self._weights_np()[1])

    def value(self):
        """The risk of the current table ``R(table)``."""
        return float(self._weights_np()[0])

    def forward(self, losses, indices):
        _check_losses(losses, allow_empty=self.gather)
        b = int(losses.shape[0])
        idx = _as_index_tensor("indices", indices, b)
        (lg, ig), _, offset = self._gather([losses.detach().to(torch.float64), idx])
        l_np = np.ascontiguousarray(_to_numpy64(lg))
        i_np = ig.to("cpu", torch.int64).numpy()
        big_b = l_np.shape[0]
        if big_b == 0:
            raise ValueError("losses is empty on every rank")
        _check_range("indices", i_np, self.n)
        if self.check_finite:
            _check_finite_np("losses", l_np)
        if (isinstance(self.risk, _risks.SpectralRisk) and not self.complete
                and np.count_nonzero(self._seen) + np.setdiff1d(
                    i_np, np.flatnonzero(self._seen)).shape[0] < self.n):
            raise ValueError(
                f"a custom SpectralRisk has a spectrum for n={self.n} samples only: fill the "
                f"table with init_table before training ({self._n_seen}/{self.n} seen)"
            )
        self._write(i_np, l_np)
        val, q = self._weights_np()
        scale = self._n_seen / big_b * self._scale()
        q_local = torch.from_numpy(q[i_np[offset:offset + b]])
        return _attach(losses, q_local, val, scale)

    # ------------------------------------------------------------------ state_dict
    def get_extra_state(self):
        return {"table": torch.from_numpy(self._table.copy()),
                "seen": torch.from_numpy(self._seen.copy())}

    def set_extra_state(self, state):
        table = state["table"].to("cpu", torch.float64).numpy().copy()
        seen = state["seen"].to("cpu", torch.bool).numpy().copy()
        if table.shape != (self.n,) or seen.shape != (self.n,):
            raise ValueError(f"loss table state has shape {table.shape}, expected ({self.n},)")
        self._table, self._seen = table, seen
        self._n_seen = int(np.count_nonzero(seen))
        self._order = np.argsort(table, kind="mergesort") if self.complete else None

    def extra_repr(self):
        return f"risk={self.risk!r}, n={self.n}, seen={self._n_seen}, gather={self.gather}"


# ---------------------------------------------------------------------------- group DRO
_GROUP_MODES = ("online", "max", "cvar")


class GroupDROLoss(_GatherMixin, nn.Module):
    r"""Group distributionally robust loss over ``n_groups`` groups (Sagawa et al., ICLR 2020).

    For a batch with per-sample losses ``l`` and group ids ``g`` let
    :math:`L_k = \frac{1}{N_k}\sum_{i: g_i = k} l_i` be the average loss of group ``k`` in the
    batch (:math:`N_k` samples; :math:`L_k = 0` for a group absent from the batch). The loss is
    :math:`\sum_k q_k L_k` with group weights ``q`` given by ``mode``:

    * ``"online"`` (default): the online group DRO algorithm of Sagawa et al. (Algorithm 1):
      a persistent buffer ``group_weights`` (uniform at start) updated by exponentiated
      gradient ascent on every training call,

      .. math:: q_k \leftarrow \frac{q_k \exp(\eta (L_k + C_k))}{\sum_j q_j \exp(\eta(L_j + C_j))}

      with ``step_size`` :math:`\eta` (their default 0.01) and the optional generalisation
      ``adjustment`` :math:`C_k` (theirs is :math:`C/\sqrt{n_k}` with :math:`n_k` the training
      size of group k); the *updated* weights then weight the loss, as in their code. In
      ``eval()`` mode the weights are used but not updated.
    * ``"max"``: the worst present group, :math:`\max_k L_k` (ties share the weight).
    * ``"cvar"``: CVaR over the present groups, the average of the worst ``tail_fraction`` of
      the group losses (exact oracle, fractional boundary group); ``tail_fraction = 1/m``
      with ``m`` present groups is ``"max"``, ``1`` the average of the group means.

    The gradient with respect to ``l_i`` is :math:`q_{g_i}/N_{g_i}` (the weights are constants
    for autograd). With ``gather=True`` the group sums and counts are all-reduced over the ranks
    (so :math:`L_k` and ``q`` are the global ones, identical on all ranks) and each rank's part
    is scaled by the world size for DDP averaging (``grad_average``).

    Parameters
    ----------
    n_groups : int
    mode : {"online", "max", "cvar"}, default "online"
    step_size : float, default 0.01
        :math:`\eta` of the online mode.
    tail_fraction : float in (0, 1], default 0.5 (used by ``"cvar"``)
    adjustment : array-like of shape (n_groups,), optional
        :math:`C_k` added to the group losses in the online weight update only.
    gather, group, grad_average, check_finite : see :class:`SpectralRiskLoss`.

    Examples
    --------
    >>> import torch
    >>> from riskopt.torch import GroupDROLoss
    >>> crit = GroupDROLoss(2, mode="max")
    >>> l = torch.tensor([1.0, 5.0, 2.0, 2.0], requires_grad=True)
    >>> r = crit(l, torch.tensor([0, 0, 1, 1]))
    >>> r.backward()
    >>> r.item(), l.grad.tolist()
    (3.0, [0.5, 0.5, 0.0, 0.0])
    """

    def __init__(self, n_groups, mode="online", step_size=0.01, tail_fraction=0.5,
                 adjustment=None, gather=False, group=None, grad_average=True,
                 check_finite=True):
        super().__init__()
        self.n_groups = check_int("n_groups", n_groups, minimum=1)
        if mode not in _GROUP_MODES:
            raise ValueError(f"mode must be one of {_GROUP_MODES}, got {mode!r}")
        self.mode = mode
        self.step_size = check_positive("step_size", step_size)
        tf = check_positive("tail_fraction", tail_fraction)
        if tf > 1:
            raise ValueError(f"tail_fraction must be in (0, 1], got {tf}")
        self.tail_fraction = tf
        self._init_gather(gather, group, grad_average, check_finite)
        m = self.n_groups
        if adjustment is None:
            adj = torch.zeros(m, dtype=torch.float64)
        else:
            adj = torch.as_tensor(np.asarray(adjustment, dtype=np.float64))
            if adj.shape != (m,) or not bool(torch.isfinite(adj).all()):
                raise ValueError(f"adjustment must be a finite array of shape ({m},)")
        self.register_buffer("adjustment", adj)
        self.register_buffer("group_weights", torch.full((m,), 1.0 / m, dtype=torch.float64))

    def reset_weights(self):
        """Reset the online group weights to uniform."""
        with torch.no_grad():
            self.group_weights.fill_(1.0 / self.n_groups)

    def _group_q(self, means, present):
        m = self.n_groups
        if self.mode == "online":
            q = self.group_weights.to(means.device)
            if self.training:
                adjusted = means + self.adjustment.to(means.device)
                logits = torch.log(q) + self.step_size * adjusted
                q = torch.softmax(logits, dim=0)
                with torch.no_grad():
                    self.group_weights.copy_(q.to(self.group_weights.device))
            return q
        if self.mode == "max":
            masked = torch.where(present, means, torch.full_like(means, -math.inf))
            top = masked == masked.max()
            return top.to(means.dtype) / top.sum()
        # cvar over the present groups by the exact oracle (CPU)
        pres = present.cpu().numpy()
        mp = np.ascontiguousarray(means.cpu().numpy()[pres])
        k = mp.shape[0]
        sigma = np.ascontiguousarray(_risks.CVaR(self.tail_fraction).spectrum(k))
        qp = np.empty(k)
        _ko._risk_weights(mp, sigma, 0.0, _ko.CHI2, qp)
        q = np.zeros(m)
        q[pres] = qp
        return torch.from_numpy(q).to(means.device)

    def forward(self, losses, groups):
        _check_losses(losses, allow_empty=self.gather)
        m = self.n_groups
        b = int(losses.shape[0])
        if isinstance(groups, torch.Tensor):
            if groups.is_floating_point() or groups.dtype == torch.bool or groups.is_complex():
                raise ValueError(f"groups must be integers, got dtype {groups.dtype}")
            g = groups.detach().to(losses.device, torch.int64)
            if g.ndim != 1 or g.shape[0] != b:
                raise ValueError(f"groups must have shape ({b},), got {tuple(g.shape)}")
        else:
            g = _as_index_tensor("groups", groups, b).to(losses.device)
        out_of_range = ((g < 0) | (g >= m)).sum().to(torch.float64).reshape(1)
        local_sums = torch.zeros(m, dtype=losses.dtype, device=losses.device)
        local_sums = local_sums.index_add(0, g.clamp(0, m - 1), losses)
        counts = torch.bincount(g.clamp(0, m - 1), minlength=m).to(torch.float64)
        stats = torch.cat([local_sums.detach().to(torch.float64), counts, out_of_range])
        if self.gather:
            stats = _dist.all_reduce_sum(stats, self.group)
        if float(stats[-1]) > 0:
            raise ValueError(f"groups out of range [0, {m})")
        sums, counts = stats[:m], stats[m:2 * m]
        if float(counts.sum()) == 0:
            raise ValueError("losses is empty on every rank")
        if self.check_finite and not bool(torch.isfinite(sums).all()):
            raise ValueError("losses contain NaN or infinite value(s)")
        present = counts > 0
        means = sums / counts.clamp(min=1.0)
        q = self._group_q(means, present)
        value = torch.dot(q, means)
        per_group = (q / counts.clamp(min=1.0)).to(losses.dtype)
        s = torch.dot(per_group, local_sums)
        return self._scale() * (s - s.detach()) + value.to(losses.dtype)

    def extra_repr(self):
        return f"n_groups={self.n_groups}, mode={self.mode!r}, step_size={self.step_size:g}"


# ---------------------------------------------------------------------------- KL DRO
def _kl_stats(d, a, logn):
    """For ``d = l - max(l) <= 0`` and ``a = 1/lambda > 0``: ``(KL(q||1/n), Var_q(l), q,
    log mean exp(a d))`` with ``q = softmax(a d)``."""
    e = np.exp(a * d)
    s = e.sum()
    q = e / s
    mu = float(q @ d)
    var = float(q @ (d - mu) ** 2)
    lme = math.log(s) - logn
    return a * mu - lme, var, q, lme


def kl_dro(losses, shift_cost=None, radius=None):
    r"""KL-DRO value, weights and multiplier of a loss vector (float64 NumPy).

    * penalised (``radius=None``): :math:`\max_q q^\top l - \lambda\,KL(q\|\mathbf 1/n) =
      \lambda \log \frac1n \sum_i e^{l_i/\lambda}` with ``lambda = shift_cost > 0``,
      ``q = softmax(l / lambda)``;
    * constrained: :math:`\max_{q: KL(q\|\mathbf 1/n) \le \rho} q^\top l - \lambda_0 KL(q\|
      \mathbf 1/n) = \min_{\lambda \ge \lambda_0} \lambda \log\frac1n\sum_i e^{l_i/\lambda}
      + (\lambda - \lambda_0)\rho` (the dual of the SCDRO paper, Eq. 2) with ``rho = radius``
      and :math:`\lambda_0` = ``shift_cost`` (default 0). The dual is convex in
      :math:`\lambda` with derivative :math:`\rho - KL(q_\lambda\|\mathbf 1/n)`,
      :math:`q_\lambda = \mathrm{softmax}(l/\lambda)`. In :math:`a = 1/\lambda`,
      :math:`KL(q_a)` increases from 0 (``a = 0``) to :math:`\log(n/k)` (``a -> inf``; ``k``
      the multiplicity of the largest loss) with derivative :math:`a\,\mathrm{Var}_{q_a}(l)`,
      so its root is found by Newton's method safeguarded by bisection (about 5-10 O(n)
      evaluations, to :math:`|KL - \rho| \le 10^{-13}`). If :math:`KL(q_{1/\lambda_0}) \le
      \rho` the constraint is inactive and :math:`\lambda^\star = \lambda_0`; for
      :math:`\lambda_0 = 0` and :math:`\rho \ge \log(n/k)` the value is the max loss with
      ``q`` uniform on the argmax.

    Returns
    -------
    value : float
    q : ndarray of shape (n,), the maximiser (the gradient of the value, Danskin)
    lam : float, the optimal multiplier (``shift_cost`` in the penalised case)
    """
    l = np.asarray(losses, dtype=np.float64)
    n = l.shape[0]
    logn = math.log(n)
    c = float(l.max())
    d = l - c
    if radius is None:
        lam = float(shift_cost)
        _, _, q, lme = _kl_stats(d, 1.0 / lam, logn)
        return c + lam * lme, q, lam
    lam0 = 0.0 if shift_cost is None else float(shift_cost)
    rho = float(radius)
    k = int(np.count_nonzero(d == 0.0))
    if lam0 > 0.0:
        kl0, _, q, lme = _kl_stats(d, 1.0 / lam0, logn)
        if kl0 <= rho:  # the dual's derivative is >= 0 at lam0: lam* = lam0
            return c + lam0 * lme, q, lam0
    elif rho >= math.log(n / k):
        return c, (d == 0.0) / k, 0.0
    # root of KL(q_a) = rho in a = 1/lambda, bracketed in (lo, hi)
    lo, hi = 0.0, math.inf if lam0 == 0.0 else 1.0 / lam0
    var0 = float(np.var(d))
    a = math.sqrt(2.0 * rho / var0)  # small-a expansion KL ~ a^2 Var/2
    if not a < hi:
        a = 0.5 * hi
    for _ in range(200):
        kl, var, q, lme = _kl_stats(d, a, logn)
        err = kl - rho
        if abs(err) <= 1e-13 * max(1.0, rho):
            break
        if err > 0:
            hi = a
        else:
            lo = a
        if hi < math.inf and hi - lo <= 4e-16 * hi:
            break
        step = a - err / (a * var) if var > 0 else math.nan
        if lo < step < hi:
            a = step
        else:
            a = 2.0 * a if hi == math.inf else 0.5 * (lo + hi)
    lam = 1.0 / a
    return c + lam * lme + (lam - lam0) * rho, q, lam


class KLDROLoss(_GatherMixin, nn.Module):
    r"""KL-divergence DRO loss of a batch: penalised or constrained.

    * ``KLDROLoss(shift_cost=lam)``: :math:`\lambda\log\frac1b\sum_i e^{l_i/\lambda} = \max_q
      q^\top l - \lambda KL(q\|\mathbf 1/b)` (the same as ``SpectralRiskLoss(ro.MaxLoss(
      shift_cost=lam, divergence="kl"))``); gradient ``softmax(l / lam)``. Without ``gather``
      this is computed by ``torch.logsumexp`` on the losses' device (no host round trip).
    * ``KLDROLoss(radius=rho, shift_cost=lam0)``: :math:`\max_{KL(q\|\mathbf 1/b)\le\rho}
      q^\top l - \lambda_0 KL(q\|\mathbf 1/b)` through its 1-D dual over :math:`\lambda \ge
      \lambda_0` (SCDRO paper, Eq. 2), solved on the CPU in float64 by :func:`kl_dro`;
      gradient :math:`q = \mathrm{softmax}(l/\lambda^\star)`. The optimal multiplier of the
      last call is kept in ``last_lam`` (a float, for logging).

    Parameters
    ----------
    shift_cost : float, optional
        :math:`\lambda > 0` (penalised) or :math:`\lambda_0 \ge 0` (constrained; default 0).
    radius : float > 0, optional
        :math:`\rho`; ``None`` for the penalised version.
    gather, group, grad_average, check_finite : see :class:`SpectralRiskLoss`.

    Examples
    --------
    >>> import torch
    >>> from riskopt.torch import KLDROLoss
    >>> l = torch.tensor([0.0, 1.0, 2.0, 5.0], dtype=torch.float64)
    >>> r = KLDROLoss(radius=0.1)(l)
    >>> float(r) > float(l.mean())
    True
    """

    def __init__(self, shift_cost=None, radius=None, gather=False, group=None,
                 grad_average=True, check_finite=True):
        super().__init__()
        if radius is None:
            if shift_cost is None:
                raise ValueError("KLDROLoss needs shift_cost (penalised) or radius (constrained)")
            self.shift_cost = check_positive("shift_cost", shift_cost)
            self.radius = None
        else:
            self.radius = check_positive("radius", radius)
            self.shift_cost = (0.0 if shift_cost is None
                               else check_positive("shift_cost", shift_cost, allow_zero=True))
        self._init_gather(gather, group, grad_average, check_finite)
        self.last_lam = None

    def forward(self, losses):
        _check_losses(losses, allow_empty=self.gather)
        if self.radius is None and not self.gather:
            if self.check_finite and not bool(torch.isfinite(losses).all()):
                raise ValueError("losses contain NaN or infinite value(s)")
            lam = self.shift_cost
            self.last_lam = lam
            return lam * (torch.logsumexp(losses / lam, dim=0) - math.log(losses.shape[0]))
        b = int(losses.shape[0])
        (lg,), _, offset = self._gather([losses])
        l_np = np.ascontiguousarray(_to_numpy64(lg))
        if l_np.shape[0] == 0:
            raise ValueError("losses is empty on every rank")
        if self.check_finite:
            _check_finite_np("losses", l_np)
        val, q, lam = kl_dro(l_np, self.shift_cost, self.radius)
        self.last_lam = lam
        return _attach(losses, torch.from_numpy(q[offset:offset + b]), val, self._scale())

    def extra_repr(self):
        if self.radius is None:
            return f"shift_cost={self.shift_cost:g}"
        return f"radius={self.radius:g}, shift_cost={self.shift_cost:g}, gather={self.gather}"
