"""Per-sample losses for linear models ``z = x @ W (+ b)``.

Each loss is a frozen dataclass with vectorised NumPy ``value(y, z)`` / ``deriv(y, z)`` (used by
the reference implementations and tests) and the integer ``code`` the numba kernels dispatch on
(``riskopt._kernels.losses``). ``prepare_targets`` validates labels and maps them to the float
encoding the kernels use.

================  =========================================  ==========================
loss              value                                      targets
================  =========================================  ==========================
SquaredLoss       ``0.5 (z - y)^2``                          real
AbsoluteLoss      ``|z - y|`` (non-smooth)                   real
LogisticLoss      ``log(1 + exp(z)) - y z``                  {0, 1} (or {-1, 1})
MultinomialLoss   ``logsumexp(z) - z_y``, ``z`` of length K  integers 0..K-1
================  =========================================  ==========================

The squared loss carries the factor 1/2, as in the reference code of the Prospect paper.
"""
from dataclasses import dataclass

import numpy as np
from scipy.special import log_expit, logsumexp, softmax, expit

from ._kernels import losses as _kl


@dataclass(frozen=True)
class Loss:
    """Base class. ``n_outputs(y)`` is K, the number of columns of the coefficient matrix."""

    code = -1
    smooth = True
    name = "loss"

    def prepare_targets(self, y):
        return np.asarray(y, dtype=np.float64)

    def n_outputs(self, y):
        return 1

    def value(self, y, z):
        raise NotImplementedError

    def deriv(self, y, z):
        raise NotImplementedError

    def smoothness(self, X):
        """Upper bound on the Lipschitz constant of each ``grad l_i`` (per row), or None."""
        return None


@dataclass(frozen=True)
class SquaredLoss(Loss):
    code = _kl.SQUARED
    name = "squared"

    def value(self, y, z):
        r = np.ravel(z) - y
        return 0.5 * r * r  # (r / 2) r: finite up to |r| = 1.9e154 (r ** 2 overflowed at 1.3e154)

    def deriv(self, y, z):
        return np.ravel(z) - y

    def smoothness(self, X):
        return np.einsum("ij,ij->i", X, X)


@dataclass(frozen=True)
class AbsoluteLoss(Loss):
    code = _kl.ABSOLUTE
    smooth = False
    name = "absolute"

    def value(self, y, z):
        return np.abs(np.ravel(z) - y)

    def deriv(self, y, z):
        return np.sign(np.ravel(z) - y)


@dataclass(frozen=True)
class LogisticLoss(Loss):
    code = _kl.LOGISTIC
    name = "logistic"

    def prepare_targets(self, y):
        y = np.asarray(y, dtype=np.float64)
        vals = np.unique(y)
        if np.all(np.isin(vals, [0.0, 1.0])):
            return y
        if np.all(np.isin(vals, [-1.0, 1.0])):
            return (y > 0).astype(np.float64)
        raise ValueError(
            f"LogisticLoss needs binary labels in {{0, 1}} or {{-1, 1}}; got values {vals[:10]}"
        )

    def value(self, y, z):
        z = np.ravel(z)
        return -log_expit(z) + (1.0 - y) * z

    def deriv(self, y, z):
        return expit(np.ravel(z)) - y

    def smoothness(self, X):
        return 0.25 * np.einsum("ij,ij->i", X, X)


@dataclass(frozen=True)
class MultinomialLoss(Loss):
    """Multinomial logistic (softmax cross-entropy) loss over ``n_classes`` classes.

    ``n_classes=None`` infers K as ``max(y) + 1``.
    """

    n_classes: int = None
    code = _kl.MULTINOMIAL
    name = "multinomial"

    def prepare_targets(self, y):
        y = np.asarray(y, dtype=np.float64)
        if np.any(y != np.round(y)) or np.any(y < 0):
            raise ValueError("MultinomialLoss needs integer class labels 0..K-1")
        if self.n_classes is not None and np.max(y) >= self.n_classes:
            raise ValueError(
                f"label {int(np.max(y))} out of range for n_classes={self.n_classes}"
            )
        return y

    def n_outputs(self, y):
        k = self.n_classes if self.n_classes is not None else int(np.max(y)) + 1
        if k < 2:
            raise ValueError("MultinomialLoss needs at least 2 classes")
        return k

    def value(self, y, z):
        z = np.atleast_2d(z)
        yi = y.astype(np.int64)
        return logsumexp(z, axis=1) - z[np.arange(len(yi)), yi]

    def deriv(self, y, z):
        z = np.atleast_2d(z)
        yi = y.astype(np.int64)
        g = softmax(z, axis=1)
        g[np.arange(len(yi)), yi] -= 1.0
        return g

    def smoothness(self, X):
        return 0.5 * np.einsum("ij,ij->i", X, X)


_LOSSES = {
    "squared": SquaredLoss,
    "absolute": AbsoluteLoss,
    "logistic": LogisticLoss,
    "multinomial": MultinomialLoss,
}


def get_loss(loss):
    """A Loss instance from an instance or a name (squared, absolute, logistic, multinomial)."""
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str) and loss in _LOSSES:
        return _LOSSES[loss]()
    raise ValueError(f"unknown loss {loss!r}; choose one of {sorted(_LOSSES)} or a Loss instance")
