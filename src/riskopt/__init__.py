"""riskopt: fast, correct stochastic optimisation of spectral risks and DRO objectives.

``import riskopt`` stays light: it imports nothing but this file. Every public name (and the
submodules ``solvers``, ``datasets``, ...) is loaded on first use (module ``__getattr__``,
PEP 562), so ``import riskopt``, ``riskopt --help`` and the CLI's usage errors do not pay for
numba, SciPy or scikit-learn; ``ro.CVaR(0.1)`` loads only the risk module and NumPy.
"""
import importlib

__version__ = "0.1.0"

#: public name -> the module (relative to this package) that defines it
_LAZY = {
    "RiskRegressor": ".estimators", "RiskClassifier": ".estimators",
    "DegenerateFitWarning": ".callbacks", "DivergenceWarning": ".callbacks",
    "SparseDensifyWarning": ".callbacks", "Timeout": ".callbacks", "Trace": ".callbacks",
    "AbsoluteLoss": ".losses", "LogisticLoss": ".losses", "Loss": ".losses",
    "MultinomialLoss": ".losses", "SquaredLoss": ".losses", "get_loss": ".losses",
    "ConstrainedObjective": ".objectives", "GroupRiskObjective": ".objectives",
    "Objective": ".objectives", "ObjectiveBase": ".objectives",
    "RUCVaRObjective": ".objectives", "StreamingRUCVaRObjective": ".objectives",
    "erm_objective": ".objectives", "max_loss_objective": ".objectives",
    "CVaR": ".risks", "ESRM": ".risks", "Extremile": ".risks", "KLDRO": ".risks",
    "MaxLoss": ".risks", "Mean": ".risks", "SpectralRisk": ".risks", "parse_risk": ".risks",
}
#: submodules reachable as attributes without an explicit import
_SUBMODULES = ("datasets", "metrics", "objectives", "samplers", "solvers", "estimators",
               "risks", "losses", "callbacks", "bench")


def __getattr__(name):  # PEP 562: the first use of a name imports its module
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module("." + name, __name__)
    else:
        raise AttributeError(f"module 'riskopt' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Objective", "ObjectiveBase", "objectives", "RiskRegressor", "RiskClassifier", "Trace", "Timeout", "DivergenceWarning",
    "DegenerateFitWarning", "SparseDensifyWarning",
    "Loss", "SquaredLoss", "AbsoluteLoss", "LogisticLoss", "MultinomialLoss", "get_loss",
    "CVaR", "ESRM", "Extremile", "Mean", "MaxLoss", "SpectralRisk", "KLDRO", "parse_risk",
    "RUCVaRObjective", "StreamingRUCVaRObjective", "erm_objective", "max_loss_objective",
    "GroupRiskObjective", "ConstrainedObjective",
    "solvers", "datasets", "metrics", "samplers", "__version__",
]
