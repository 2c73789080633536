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
One module per loss (``riskopt.torch.losses.spectral``, ``.table``, ``.group_dro``, ``.kl``;
shared validation and gathering in ``._common``); every class is re-exported here and from
:mod:`riskopt.torch`. (The KL module is ``kl``, not ``kl_dro``: ``riskopt.torch.losses.kl_dro``
is, as before, the NumPy function.)

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
    KL-penalised DRO ``nu log mean exp(l / nu)`` or KL-constrained DRO (1-D dual solve; the
    NumPy maths live in :mod:`riskopt.objectives.kl_dro`).
:class:`PAUCLoss`, :class:`TwoWayPAUCLoss` (``.xrisk``)
    Pairwise X-risks: one-way partial AUC (CVaR or KL-DRO over the negatives of each
    positive) and two-way partial AUC (an outer CVaR / KL over the positives);
    :class:`ROCFairnessAUCLoss`: AUC with ROC-fairness constraints (SONEX/ALEXR2, Eq. 53).

Batched risks and oracles
-------------------------
:class:`SpectralRiskLoss` and :class:`KLDROLoss` accept ``(..., b)`` tensors and return the
risk of each row over the last dimension (``reduction="none"`` keeps the rows, ``"mean"`` /
``"sum"`` reduce them), each row's gradient its own weights. The weights are computed by the
exact oracles of :mod:`riskopt.torch._oracles`, tensor programs on the losses' device
(``oracle="torch"``: no host round trip, ``torch.compile(fullgraph=True)`` traces them), or
by the numba reference on the host (``oracle="numba"``); ``oracle="auto"`` (default) is the
tensor program on every device but the CPU and under ``torch.compile``, and the numba
oracles on CPU tensors in eager mode, attached to autograd as one node whose backward is
``g * q`` (see :class:`SpectralRiskLoss`; :class:`KLDROLoss` by the kernels of
:mod:`riskopt._kernels.kl_dro`, :class:`GroupDROLoss` by those of
:mod:`riskopt._kernels.group_dro`).

Devices and cost
----------------
The modules accept float32 / float64 tensors on any device; ``q*`` comes back on the losses'
device and dtype. :class:`SpectralRiskLoss`, :class:`KLDROLoss`, :class:`GroupDROLoss` and
the X-risks compute on the losses' device without a host synchronisation (their NaN / range
checks run only on CPU tensors in eager mode, where reading a value costs nothing; elsewhere
a bad input makes the risk NaN). :class:`TableSpectralRiskLoss` with the tensor oracle
moves its complete table to the device (``index_put_`` of the batch, the weights of the
whole table by the tensor oracle, no synchronisation; ``fullgraph=True`` compiles after
:meth:`TableSpectralRiskLoss.move_table`); while the table fills, and with
``oracle="numba"``, it runs on the host (numba incremental oracles). With ``gather=True``
the all-gather reads the per-rank sizes (one synchronisation). Speed: ``benchmarks/torch_losses_speed.py``.

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
from .group_dro import GroupDROLoss
from .kl import KLDROLoss, kl_dro
from .spectral import SpectralRiskLoss
from .table import TableSpectralRiskLoss
from .xrisk import PAUCLoss, ROCFairnessAUCLoss, TwoWayPAUCLoss, pairwise_surrogate

__all__ = ["SpectralRiskLoss", "TableSpectralRiskLoss", "GroupDROLoss", "KLDROLoss", "kl_dro",
           "PAUCLoss", "TwoWayPAUCLoss", "ROCFairnessAUCLoss", "pairwise_surrogate"]
