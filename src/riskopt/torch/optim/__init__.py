"""PyTorch optimizers whose per-sample or per-group state is indexed by dataset indices.

:class:`IndexedStateOptimizer` is the base class of the stochastic DRO / compositional
optimizers (SCDRO in :mod:`~riskopt.torch.optim.kl_dro`, ASCDRO in
:mod:`~riskopt.torch.optim.ascdro`, PG-SMD2 in
:mod:`~riskopt.torch.optim.pgsmd2`; SONEX / SONX /
SOX / ALEXR2 in :mod:`~riskopt.torch.optim.fcco`, their outer functions in
:mod:`~riskopt.torch.optim.outer`; OOA in :mod:`~riskopt.torch.optim.ooa`): a
``torch.optim.Optimizer`` holding tables indexed by the dataset (or group) indices that the
loader yields, on the parameters' device, saved in ``state_dict``. See :mod:`riskopt.torch.optim.base` for the conventions.
"""
from ._guard import DivergenceError
from .base import IndexedStateOptimizer
from .fcco import ALEXR2, SONEX, SONX, SOX
from .outer import AbsHinge, GroupCVaR, Hinge, SquaredHinge
from .ooa import OOA, project_capped_simplex
from .kl_dro import SCDRO
from .ascdro import ASCDRO
from .pgsmd2 import PGSMD2

#: every optimizer of this package, by name (the common test table has a row for each)
OPTIMIZERS = {"SCDRO": SCDRO, "ASCDRO": ASCDRO, "PGSMD2": PGSMD2, "SONEX": SONEX, "SONX": SONX,
              "SOX": SOX, "ALEXR2": ALEXR2, "OOA": OOA}

__all__ = ["OPTIMIZERS", "DivergenceError", "IndexedStateOptimizer", "SCDRO", "ASCDRO", "PGSMD2", "SONEX", "SONX", "SOX",
           "ALEXR2", "OOA", "Hinge", "AbsHinge", "SquaredHinge", "GroupCVaR",
           "project_capped_simplex"]
