"""Solvers: one algorithm per module, a registry by lower-case name.

===============  =======================================================  =================
name             algorithm                                                converges?
===============  =======================================================  =================
sgd              mini-batch SGD with plug-in (biased) weights             no (biased)
srda             stochastic regularised dual averaging (Xiao 2009)        no (biased)
sgd_momentum     SGD with heavy-ball momentum (Prospect App. I)           no (biased)
adam             Adam (Prospect App. I)                                   no (biased)
lsvrg            LSVRG (Mehta et al. 2023), epoch length n                yes (nu > 0)
saddlesaga       Saddle-SAGA primal-dual (Palaniappan & Bach 2016)        yes (nu > 0)
prospect         Prospect (Mehta et al. 2024)                             yes (nu > 0)
prospect_moreau  Prospect with proximal oracles (App. E)                  yes (nu > 0)
sorel            SOREL (Algorithm 1, practical settings)                  yes (nu = 0)
sorel_minibatch  SOREL with mini-batches (App. D)                         yes (nu = 0)
lbfgs            full-batch L-BFGS reference                              yes
newton           Newton on smoothed risks + duality-gap certificate       yes (certified)
sgm              stochastic subgradient on the RU-CVaR form (SPL+ paper)  averaged iterates
spl              stochastic prox-linear, one step size (SPL+ paper)       averaged iterates
splplus          SPL+ (Algorithm 2, Lemma 1 closed form)                  averaged iterates
scdro ...        SCDRO family and KL baselines (:mod:`.scdro`)            see the module
sonx             SONX, subgradient of the outer hinge (FCCO)              no (stochastic)
sonex            SONEX (Algorithm 1 of the FCCO paper)                    no (smoothed)
sox              SOX, squared-hinge penalty                               no (biased)
alexr2           ALEXR2 (Algorithm 2 of the FCCO paper)                   no (smoothed)
ooa              primal-dual baseline for group DRO                       no (constant steps)
===============  =======================================================  =================

Each solver declares the problem families it solves (``Solver.families``): ``sgm``, ``spl`` and
``splplus`` solve the ``"ru_cvar"`` family (:class:`riskopt.objectives.ru_cvar.RUCVaRObjective`),
``sonx``, ``sonex``, ``sox``, ``alexr2`` and ``ooa`` the ``"group_risk"`` / ``"constrained"``
families (:mod:`riskopt.objectives.fcco`), ``lbfgs`` all of them, the others the
``"spectral"`` family (:class:`riskopt.Objective`).
:func:`solvers_for` lists the solvers that accept an objective; passing an incompatible one
raises :class:`IncompatibleObjectiveError` with that list. Third-party solvers plug in through
the ``riskopt.solvers`` entry-point group (see :mod:`riskopt.solvers._registry`).
"""
from . import _registry
from ._registry import (ENTRY_POINT_GROUP, IncompatibleObjectiveError, available, get,
                        get_class, register, reload_entry_points, solvers_for)
from .base import Result, Solver

_registry._load_builtins()  # every solver module of this package registers itself

from .fcco import ALEXR2, OOA, SONEX, SONX, SOX  # noqa: E402
from .kl_baselines import PGSMD2, SPD, DualSGM, FastDRO  # noqa: E402
from .lbfgs import LBFGS  # noqa: E402
from .lsvrg import LSVRG  # noqa: E402
from .newton import Newton  # noqa: E402
from .prospect import Prospect, ProspectMoreau  # noqa: E402
from .saddlesaga import SaddleSAGA  # noqa: E402
from .scdro import ASCDRO, RASCDRO, RECOVER, RSCDRO, SCDRO  # noqa: E402
from .sgd import SGD, SRDA, Adam, SGDMomentum  # noqa: E402
from .sorel import SOREL, SORELMiniBatch  # noqa: E402
from .spl import SGM, SPL, SPLPlus  # noqa: E402

__all__ = ["Solver", "Result", "get", "get_class", "register", "available", "solvers_for",
           "reload_entry_points", "IncompatibleObjectiveError", "ENTRY_POINT_GROUP",
           "LBFGS", "Newton", "LSVRG", "Prospect", "ProspectMoreau", "SaddleSAGA", "SGD", "SRDA", "Adam",
           "SGDMomentum", "SOREL", "SORELMiniBatch", "SGM", "SPL", "SPLPlus", "SCDRO", "RSCDRO",
           "ASCDRO", "RASCDRO", "RECOVER", "FastDRO", "DualSGM", "SPD", "PGSMD2", "SONX",
           "SONEX", "SOX", "ALEXR2", "OOA"]
