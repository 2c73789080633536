"""Shared helpers for the test suite: small random problems.

Kept minimal on purpose; other test modules may import from here
(``from conftest import make_problem``; ``tests/`` is on ``sys.path`` under pytest's default
import mode because it has no ``__init__.py``).
"""
import numpy as np
import pytest

import riskopt as ro

#: the four losses of the core and a default number of classes for the multinomial one
LOSSES = ("squared", "absolute", "logistic", "multinomial")
N_CLASSES = 3


def make_targets(loss, X, rng, n_classes=N_CLASSES):
    """Targets in the natural encoding of ``loss`` for the design ``X`` (noisy linear model)."""
    n, d = X.shape
    signal = X @ rng.normal(size=d)
    if loss in ("squared", "absolute"):
        return signal + 0.5 * rng.normal(size=n)
    if loss == "logistic":
        y = (signal + rng.normal(size=n) > 0).astype(np.float64)
        y[:2] = (0.0, 1.0)  # both classes present
        return y
    if loss == "multinomial":
        y = rng.integers(0, n_classes, size=n).astype(np.float64)
        y[:n_classes] = np.arange(n_classes)  # every class present
        return y
    raise ValueError(f"unknown loss {loss!r}")


def make_problem(loss="squared", risk=None, n=20, d=3, fit_intercept=False, l2_reg=0.1, seed=0):
    """A small random :class:`riskopt.Objective` (standard normal design, noisy linear targets)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = make_targets(loss, X, rng)
    risk = ro.CVaR(0.5) if risk is None else risk
    return ro.Objective(loss, risk, X, y, l2_reg=l2_reg, fit_intercept=fit_intercept)


def random_coef(obj, rng, scale=0.5):
    """A random coefficient in the objective's public shape."""
    return scale * rng.normal(size=obj.coef_shape)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
