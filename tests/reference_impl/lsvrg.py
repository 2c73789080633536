"""NumPy twin of LSVRG (Mehta et al. 2023), written from the paper's description.

Every ``m`` steps: checkpoint ``wc = w``, losses ``l(wc)``, weights ``qc = q^opt(l(wc))``,
full gradient ``gc = sum_i qc_i grad l_i(wc)``. A step on ``i``:
``v = n qc_i (grad l_i(w) - grad l_i(wc)) + gc + mu w``; ``w <- w - lr v``.
Here the checkpoint gradient of sample ``i`` is recomputed at ``wc`` (no caching), so the
twin also checks the kernel's cached derivatives.
"""
import numpy as np

from . import oracles


def _div_name(obj):
    return "chi2" if obj.div == 0 else "kl"


def sample_grad(obj, W, i):
    """grad l_i(W) as a (p, K) matrix (no regulariser)."""
    z = (obj.X[i] @ W)[None, :]
    d = np.asarray(obj.loss.deriv(obj.y[i:i + 1], z)).reshape(-1)
    return np.outer(obj.X[i], d)


def all_losses(obj, W):
    Z = obj.X @ W
    return np.asarray(obj.loss.value(obj.y, Z if obj.K > 1 else Z[:, 0]), dtype=float)


class LSVRGTwin:
    def __init__(self, obj, W0, lr, epoch_length=None):
        self.obj = obj
        self.lr = lr
        self.m = obj.n if epoch_length is None else epoch_length
        self.W = np.array(W0, dtype=float).reshape(obj.p, obj.K)
        self.checkpoint()

    def checkpoint(self):
        obj = self.obj
        self.Wc = self.W.copy()
        losses = all_losses(obj, self.Wc)
        self.qc = oracles.weights(losses, obj.sigma, obj.nu, _div_name(obj))
        self.Gc = sum(self.qc[i] * sample_grad(obj, self.Wc, i) for i in range(obj.n))
        self.since = 0

    def step(self, i):
        obj = self.obj
        if self.since >= self.m:
            self.checkpoint()
        v = (obj.n * self.qc[i] * (sample_grad(obj, self.W, i) - sample_grad(obj, self.Wc, i))
             + self.Gc + obj.reg[:, None] * self.W)
        self.W = self.W - self.lr * v
        self.since += 1

    def step_batch(self, batch):
        """Mini-batch step: the mean of the batch's terms ``n qc_i (grad l_i(w) - grad
        l_i(wc))`` in place of the single sample's."""
        obj = self.obj
        if self.since >= self.m:
            self.checkpoint()
        terms = [obj.n * self.qc[i] * (sample_grad(obj, self.W, i) - sample_grad(obj, self.Wc, i))
                 for i in batch]
        v = np.mean(terms, axis=0) + self.Gc + obj.reg[:, None] * self.W
        self.W = self.W - self.lr * v
        self.since += 1

    def ckpt_derivs(self):
        Z = self.obj.X @ self.Wc
        return np.asarray(self.obj.loss.deriv(self.obj.y, Z if self.obj.K > 1 else Z[:, 0]),
                          dtype=float).reshape(self.obj.n, self.obj.K)
