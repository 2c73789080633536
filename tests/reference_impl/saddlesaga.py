"""NumPy twin of SaddleSAGA, written from the Prospect paper (App. F) and Algorithm 3.

Init: ``q = rho = q^opt(l(w0))``, loss table ``l = l(w0)``, gradient table
``g_i = grad l_i(w0)``. A step on ``i`` (all quantities at the start of the step):

    v   = n q_i grad l_i(w) - n rho_i g_i + sum_j rho_j g_j
    w  <- (w - lr v) / (1 + lr mu)
    pi  = n l_i(w) e_i - n l_i e_i + l
    q  <- dual prox of (q, pi)
    l_i <- l_i(w);  g_i <- grad l_i(w);  rho_i <- q_i(old)

The dual prox is written from its definition as a proximal problem and solved with the
plain-Python PAV twin (``oracles.weights``) through the mapping derived in
``riskopt._kernels.saddlesaga``; the tests check that mapping against cvxpy.
"""
import numpy as np

from . import oracles
from .lsvrg import all_losses, sample_grad


def prox_chi2(q, pi, sigma, nu, dlr):
    """argmin_{q' in P} dlr nu n |q' - 1/n|^2 + 1/2 |q' - (q + dlr pi)|^2."""
    n = len(q)
    return oracles.weights(q + dlr * pi, sigma, dlr * nu + 1.0 / (2 * n), "chi2")


def prox_kl(q, pi, sigma, nu, dlr):
    """argmax_{q' in P} dlr q'.pi - dlr nu KL(q'||1/n) - (1/n) KL(q'||q)."""
    n = len(q)
    logq = np.log(np.maximum(q, 1e-300))
    return oracles.weights(n * dlr * pi + logq, sigma, 1.0 + n * dlr * nu, "kl")


class SaddleSAGATwin:
    def __init__(self, obj, W0, lr, dual_lr):
        self.obj = obj
        self.lr = lr
        self.dlr = dual_lr
        n = obj.n
        self.W = np.array(W0, dtype=float).reshape(obj.p, obj.K)
        self.L = all_losses(obj, self.W)
        div = "chi2" if obj.div == 0 else "kl"
        self.kl = div == "kl" and obj.nu > 0
        self.q = oracles.weights(self.L, obj.sigma, obj.nu, div)
        self.rho = self.q.copy()
        self.g = [sample_grad(obj, self.W, i) for i in range(n)]
        self.G = sum(self.rho[i] * self.g[i] for i in range(n))

    def step(self, i):
        obj = self.obj
        n = obj.n
        gi = sample_grad(obj, self.W, i)
        z = obj.X[i] @ self.W
        li = float(np.asarray(obj.loss.value(obj.y[i:i + 1], z[None, :] if obj.K > 1 else z))
                   .reshape(-1)[0])
        v = n * self.q[i] * gi - n * self.rho[i] * self.g[i] + self.G
        self.W = (self.W - self.lr * v) / (1.0 + self.lr * obj.reg[:, None])
        pi = self.L.copy()
        pi[i] = n * li - (n - 1) * self.L[i]
        q_old = self.q[i]
        prox = prox_kl if self.kl else prox_chi2
        self.q = prox(self.q, pi, obj.sigma, obj.nu, self.dlr)
        self.G = self.G + q_old * gi - self.rho[i] * self.g[i]
        self.L[i] = li
        self.g[i] = gi
        self.rho[i] = q_old
