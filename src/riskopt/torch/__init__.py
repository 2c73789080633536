"""PyTorch risk losses (optional extra: ``pip install riskopt[torch]``).

``import riskopt`` never imports torch; ``import riskopt.torch`` does (and raises an
``ImportError`` naming the extra when torch is missing).

* :class:`SpectralRiskLoss` — spectral risk (CVaR, ESRM, extremile, ... with chi2 / KL shift
  penalty) of a batch by the exact oracle;
* :class:`TableSpectralRiskLoss` — Prospect-style table of the latest loss of every sample:
  global weights, unbiased batch gradients when the table is exact;
* :class:`GroupDROLoss` — group DRO (online exponentiated-gradient weights, worst group, CVaR
  over groups);
* :class:`KLDROLoss` — KL-penalised and KL-constrained DRO;
* :class:`PAUCLoss`, :class:`TwoWayPAUCLoss` — one-way / two-way partial AUC (pairwise
  X-risks: CVaR or KL-DRO over the negatives of each positive);
* :class:`ROCFairnessAUCLoss` — AUC with ROC-fairness constraints (SONEX/ALEXR2, Eq. 53);
* :mod:`riskopt.torch.distributed` — all-gathers for ``gather=True`` (global weights under
  data parallelism, gradients scaled for DDP's averaging);
* :mod:`riskopt.torch.optim` — :class:`~riskopt.torch.optim.IndexedStateOptimizer`, the base
  class of optimizers whose per-sample / per-group state is indexed by the dataset indices a
  loader yields.

One module per loss under :mod:`riskopt.torch.losses` (see there for the maths, the gradient
scaling and the cost of the CPU oracle round trip); the NumPy KL-DRO maths live in
:mod:`riskopt.objectives.kl_dro` (``kl_dro`` here is kept as an alias of its
:func:`~riskopt.objectives.kl_dro.kl_dro_weights`).
"""
try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "riskopt.torch needs PyTorch: pip install 'riskopt[torch]'"
    ) from exc

from . import distributed, losses, optim
from .losses import (GroupDROLoss, KLDROLoss, PAUCLoss, ROCFairnessAUCLoss, SpectralRiskLoss,
                     TableSpectralRiskLoss, TwoWayPAUCLoss, kl_dro)

__all__ = ["SpectralRiskLoss", "TableSpectralRiskLoss", "GroupDROLoss", "KLDROLoss", "kl_dro",
           "PAUCLoss", "TwoWayPAUCLoss", "ROCFairnessAUCLoss", "distributed", "losses", "optim"]
