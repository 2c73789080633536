"""KL-divergence DRO maths (re-exported from :mod:`riskopt._kl`, where they live at the bottom
layer so that :class:`riskopt.KLDRO` can use them); see there for the formulas.

Examples
--------
>>> import numpy as np
>>> from riskopt.objectives.kl_dro import kl_dro_weights
>>> value, q, lam = kl_dro_weights(np.array([0.0, 1.0, 3.0, 3.0]), radius=10.0)
>>> value, lam
(3.0, 0.0)
"""
from .._kl import (_kl_stats, _solve_kl_root, kl_divergence, kl_dro_weights, kl_dual,
                   kl_multiplier_bounds, log_mean_exp)

__all__ = ["kl_divergence", "log_mean_exp", "kl_dual", "kl_multiplier_bounds",
           "kl_dro_weights", "_kl_stats", "_solve_kl_root"]
