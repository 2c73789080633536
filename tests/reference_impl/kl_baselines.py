"""NumPy twins of the KL-DRO baseline kernels (riskopt._kernels.kl_baselines)."""
import numpy as np
from scipy.optimize import brentq

from riskopt.objectives.kl_dro import kl_divergence, kl_dro_weights

from .scdro import batch


def _project(W, R):
    if R > 0 and np.linalg.norm(W) > R:
        return W * (R / np.linalg.norm(W))
    return W


def fastdro(obj, W, batches, lr, R=0.0):
    out = []
    rho = obj.radius
    for idx in batches:
        losses, grads, _ = batch(obj, W, 1.0, idx)
        _, q, _ = kl_dro_weights(losses, shift_cost=obj.shift_cost if (obj.shift_cost or rho is None)
                                 else 0.0, radius=rho)
        W = _project(W - lr * (np.einsum("i,ipk->pk", q, grads) + obj.reg[:, None] * W), R)
        out.append(W.copy())
    return out


def dual_sgm(obj, W, lam, eta, batches, lr, lo, hi, R=0.0):
    rho = 0.0 if obj.radius is None else obj.radius
    out = []
    for idx in batches:
        losses, grads, _ = batch(obj, W, 1.0, idx)
        e = np.minimum((losses - eta) / lam - 1.0, 50.0)
        w = np.exp(e) / len(idx)
        G = np.einsum("i,ipk->pk", w, grads)
        g_eta = 1.0 - w.sum()
        g_lam = rho + np.sum(w * (1.0 - (losses - eta) / lam))
        W = _project(W - lr * (G + obj.reg[:, None] * W), R)
        eta = eta - lr * g_eta
        if hi > lo:
            lam = float(np.clip(lam - lr * g_lam, lo, hi))
        out.append(W.copy())
    return out


def kl_ball_projection(p, rho):
    """argmin_q KL(q || p) s.t. KL(q || 1/n) <= rho: q ~ p^a, a in (0, 1] by brentq."""
    if kl_divergence(p) <= rho:
        return p

    def q_of(a):
        z = a * np.log(p)
        z -= z.max()
        q = np.exp(z)
        return q / q.sum()

    a = brentq(lambda a: kl_divergence(q_of(a)) - rho, 1e-12, 1.0, xtol=1e-15)
    return q_of(a)


def primal_dual(obj, W, logp, batches, lr, dual_lr, gamma=0.0, center=None, R=0.0):
    n = obj.n
    p = np.exp(logp)
    out = []
    for idx in batches:
        losses, grads, _ = batch(obj, W, 1.0, idx)
        G = np.einsum("i,ipk->pk", n * p[idx] / len(idx), grads)
        logq = np.log(p)
        np.add.at(logq, idx, dual_lr * n * losses / len(idx))
        prox = (W - center) / gamma if gamma > 0 else 0.0
        W = _project(W - lr * (G + obj.reg[:, None] * W + prox), R)
        logq *= 1.0 - dual_lr * obj.shift_cost
        q = np.exp(logq - logq.max())
        p = kl_ball_projection(q / q.sum(), obj.radius)
        out.append(W.copy())
    return out
