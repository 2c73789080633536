"""riskopt_toy: a third-party package adding one solver to riskopt through an entry point.

It stands for a user's package: it imports only riskopt's public API and declares, in its
``pyproject.toml``::

    [project.entry-points."riskopt.solvers"]
    toy_sgd = "riskopt_toy:ToySGD"

(the tests "install" it by writing that ``entry_points.txt`` into a ``.dist-info`` folder on
``sys.path``; see ``tests/conftest.py::toy_plugin``).

``ToySGD`` is single-sample SGD on a spectral-risk objective, written in NumPy. At step
``t`` with sample ``i_t`` (drawn uniformly with replacement):

.. math::

    q = \\arg\\max_{q \\in \\mathcal P(\\sigma)} q^\\top \\ell(w) - \\nu D(q \\| 1/n)
        \\quad (\\text{the weights oracle, } \\texttt{objective.weights(w)}), \\\\
    w \\leftarrow w - \\eta \\,( n q_{i_t} \\nabla \\ell_{i_t}(w) + \\mu w ),

an unbiased estimate of the gradient of ``F`` at ``w`` (Danskin). One update is ``n`` steps.
"""
from typing import NamedTuple

import numpy as np

import riskopt
from riskopt.solvers import Solver

__version__ = "0.1"


class ToySGDState(NamedTuple):
    coef: np.ndarray
    epoch: int
    rng: np.random.Generator


class ToySGD(Solver):
    """Single-sample SGD with the exact weights of the full sample (toy, O(n log n) a step)."""

    name = "toy_sgd"
    families = ("spectral",)

    def __init__(self, lr=0.01, random_state=None):
        self.lr = lr
        self.random_state = random_state

    def _init(self, objective, W, rng):
        return ToySGDState(coef=W, epoch=0, rng=rng)

    def _pass(self, objective, state, indices):
        W = state.coef.copy()
        X, reg, n = objective.X, objective.reg[:, None], objective.n
        with np.errstate(all="ignore"):
            for i in np.asarray(indices).ravel():
                if not np.all(np.isfinite(W)):
                    break
                q = objective.weights(W)
                derivs = objective.losses_derivs(W)[1]
                W = W - self.lr * (n * q[i] * np.outer(X[i], derivs[i]) + reg * W)
        return ToySGDState(coef=W, epoch=state.epoch + 1, rng=state.rng)


__all__ = ["ToySGD", "ToySGDState", "riskopt"]
