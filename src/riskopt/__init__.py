"""riskopt: fast, correct stochastic optimisation of spectral risks and DRO objectives.

``import riskopt`` stays light: no torch, pandas or matplotlib.
"""
from . import datasets, metrics, objectives, samplers, solvers
from .callbacks import (DegenerateFitWarning, DivergenceWarning, SparseDensifyWarning, Timeout,
                        Trace)
from .losses import AbsoluteLoss, LogisticLoss, Loss, MultinomialLoss, SquaredLoss, get_loss
from .objectives import (ConstrainedObjective, GroupRiskObjective, Objective, ObjectiveBase,
                         RUCVaRObjective, StreamingRUCVaRObjective, erm_objective,
                         max_loss_objective)
from .risks import CVaR, ESRM, Extremile, KLDRO, MaxLoss, Mean, SpectralRisk, parse_risk

__version__ = "0.1.0"


def __getattr__(name):  # lazy: keeps ``import riskopt`` free of scikit-learn's estimator stack
    if name in ("RiskRegressor", "RiskClassifier"):
        from . import estimators

        return getattr(estimators, name)
    raise AttributeError(f"module 'riskopt' has no attribute {name!r}")


__all__ = [
    "Objective", "ObjectiveBase", "objectives", "RiskRegressor", "RiskClassifier", "Trace", "Timeout", "DivergenceWarning",
    "DegenerateFitWarning", "SparseDensifyWarning",
    "Loss", "SquaredLoss", "AbsoluteLoss", "LogisticLoss", "MultinomialLoss", "get_loss",
    "CVaR", "ESRM", "Extremile", "Mean", "MaxLoss", "SpectralRisk", "KLDRO", "parse_risk",
    "RUCVaRObjective", "StreamingRUCVaRObjective", "erm_objective", "max_loss_objective",
    "GroupRiskObjective", "ConstrainedObjective",
    "solvers", "datasets", "metrics", "samplers", "__version__",
]
