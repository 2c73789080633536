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
sgm              stochastic subgradient on the RU-CVaR form (SPL+ paper)  averaged iterates
spl              stochastic prox-linear, one step size (SPL+ paper)       averaged iterates
splplus          SPL+ (Algorithm 2, Lemma 1 closed form)                  averaged iterates
===============  =======================================================  =================

``sgm``, ``spl`` and ``splplus`` solve :class:`riskopt.ru_cvar.RUCVaRObjective`, the others
:class:`riskopt.Objective`.
"""
from .base import Result, Solver
from .lbfgs import LBFGS

_REGISTRY = {"lbfgs": LBFGS}


def register(cls):
    """Class decorator adding a solver to the registry under ``cls.name``."""
    _REGISTRY[cls.name] = cls
    return cls


def get(name, **params):
    """A solver instance from its registry name, e.g. ``get("prospect", lr=0.03)``."""
    _load_all()
    key = str(name).lower()
    if key not in _REGISTRY:
        raise ValueError(f"unknown solver {name!r}; available: {sorted(_REGISTRY)}")
    return _REGISTRY[key](**params)


def available():
    _load_all()
    return sorted(_REGISTRY)


def _load_all():
    import importlib

    for mod in ("sgd", "lsvrg", "saddlesaga", "prospect", "sorel", "spl"):
        try:
            importlib.import_module(f"{__name__}.{mod}")
        except ModuleNotFoundError as exc:  # module not written yet
            if exc.name != f"{__name__}.{mod}":
                raise


def __getattr__(attr):
    _load_all()
    for cls in _REGISTRY.values():
        if cls.__name__ == attr:
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


__all__ = ["Solver", "Result", "LBFGS", "get", "register", "available"]
