"""Problem families: one module per family, each an implementation of
:class:`~riskopt.objectives.base.ObjectiveBase` (see that module for the protocol).

===============  ==================================================================================  ================================================
family           class                                                                               reference optimum
===============  ==================================================================================  ================================================
``spectral``     :class:`~riskopt.objectives.spectral.Objective`                                     L-BFGS (+ exact polish, nu = 0)
``ru_cvar``      :class:`~riskopt.objectives.ru_cvar.RUCVaRObjective`, ``StreamingRUCVaRObjective``  L-BFGS on the CVaR form, cvxpy, or an LP (HiGHS)
``kl_dro``       :class:`~riskopt.objectives.kl.KLDROObjective`                                      L-BFGS on the exact profile
``group_risk``   :class:`~riskopt.objectives.fcco.GroupRiskObjective`                                continuation L-BFGS, cvxpy
``constrained``  :class:`~riskopt.objectives.fcco.ConstrainedObjective`                              continuation L-BFGS, cvxpy
===============  ==================================================================================  ================================================
"""
from ._registry import ENTRY_POINT_GROUP, families, get_family, register_family
from .base import LinearModelObjective, ObjectiveBase, Reference
from .ru_cvar import (RUCVaRObjective, RUSolution, StreamingRUCVaRObjective, erm_objective,
                      max_loss_objective)
from .kl import KLDROObjective
from .fcco import ConstrainedObjective, GroupRiskObjective
from .spectral import Objective

register_family(Objective)
register_family(RUCVaRObjective)
register_family(KLDROObjective)
register_family(GroupRiskObjective)
register_family(ConstrainedObjective)

__all__ = ["families", "get_family", "register_family", "ENTRY_POINT_GROUP", "ObjectiveBase", "LinearModelObjective", "Reference", "Objective", "RUCVaRObjective", "KLDROObjective", "GroupRiskObjective", "ConstrainedObjective",
           "StreamingRUCVaRObjective", "RUSolution", "erm_objective", "max_loss_objective"]
