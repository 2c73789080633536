"""NumPy twin of the toy plug-in solver (tests/plugins/riskopt_toy): single-sample SGD with the
exact weights of the full sample, from the formula, with the loss's NumPy ``value`` / ``deriv``
and the slow pool-adjacent-violators oracle of :mod:`reference_impl.oracles`."""
import numpy as np

from . import oracles as ref_oracles
from .prospect import _DIV, _row_loss_grad


def toy_sgd(obj, W, indices, lr):
    """The iterates ``(p, K)`` after every step of ``indices``, starting from ``W``."""
    W = np.array(W, dtype=float).reshape(obj.p, obj.K)
    out = []
    for i in np.asarray(indices).ravel():
        rows = [_row_loss_grad(obj, W, j) for j in range(obj.n)]
        losses = np.array([val for val, _ in rows])
        q = ref_oracles.weights(losses, obj.sigma, obj.nu, _DIV[obj.div])
        W = W - lr * (obj.n * q[i] * rows[i][1] + obj.reg[:, None] * W)
        out.append(W.copy())
    return out
