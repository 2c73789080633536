"""PyTorch optimizers whose per-sample or per-group state is indexed by dataset indices.

:class:`IndexedStateOptimizer` is the base class of the stochastic DRO / compositional
optimizers (SCDRO / ASCDRO, SONEX / ALEXR2, to come): a ``torch.optim.Optimizer`` holding
tables indexed by the dataset (or group) indices that the loader yields, on the parameters'
device, saved in ``state_dict``. See :mod:`riskopt.torch.optim.base` for the conventions.
"""
from .base import IndexedStateOptimizer
from .kl_dro import ASCDRO, PGSMD2, SCDRO

__all__ = ["IndexedStateOptimizer", "SCDRO", "ASCDRO", "PGSMD2"]
