"""NumPy twins of the plug-in mini-batch kernels (``riskopt._kernels.sgd``).

Written from the update rules of Mehta et al. (2024), Sec. 4 / App. I and the reference code
(ronakdm/prospect ``src/optim/baselines.py``), for clarity, not speed. Every function takes
the objective, a starting state, the ``(n_batches, b)`` batch array and the batch spectrum, and
returns the list of states after each step (dicts of copies), so tests can compare step by step.
"""
import numpy as np

from . import oracles


def plugin_grad(objective, W, batch, sigma_b):
    """Gradient of the batch's own spectral risk (same nu and divergence), no regulariser."""
    Xb = objective.X[batch]
    yb = objective.y[batch]
    Z = Xb @ W
    loss = objective.loss
    if objective.K == 1:
        losses = loss.value(yb, Z[:, 0])
        derivs = loss.deriv(yb, Z[:, 0])[:, None]
    else:
        losses = loss.value(yb, Z)
        derivs = loss.deriv(yb, Z)
    divergence = "chi2" if objective.div == 0 else "kl"
    q = oracles.weights(losses, sigma_b, objective.nu, divergence)
    return Xb.T @ (q[:, None] * derivs)


def _reg(objective):
    return objective.reg[:, None]


def sgd(objective, W, batches, sigma_b, lr):
    W = np.array(W, dtype=float)
    out = []
    for batch in batches:
        g = plugin_grad(objective, W, batch, sigma_b) + _reg(objective) * W
        W = W - lr * g
        out.append({"coef": W.copy()})
    return out


def srda(objective, W, batches, sigma_b, lr, coef0, dual_avg, n_iter):
    """Xiao's RDA: w_{t+1} = argmin <avg_t, w> + mu/2 |w|^2 + (1/lr)/(t+1)/2 |w - w0|^2."""
    W = np.array(W, dtype=float)
    avg = np.array(dual_avg, dtype=float)
    t = int(n_iter)
    out = []
    for batch in batches:
        g = plugin_grad(objective, W, batch, sigma_b)
        total = avg * t + g             # sum of all gradients so far
        avg = total / (t + 1)
        beta = (1.0 / lr) / (t + 1)
        # first-order condition: avg + mu w + beta (w - w0) = 0
        W = (beta * coef0 - avg) / (_reg(objective) + beta)
        t += 1
        out.append({"coef": W.copy(), "dual_avg": avg.copy(), "n_iter": t})
    return out


def sgd_momentum(objective, W, batches, sigma_b, lr, momentum, velocity):
    W = np.array(W, dtype=float)
    V = np.array(velocity, dtype=float)
    out = []
    for batch in batches:
        g = plugin_grad(objective, W, batch, sigma_b) + _reg(objective) * W
        V = momentum * V + g
        W = W - lr * V
        out.append({"coef": W.copy(), "velocity": V.copy()})
    return out


def adam(objective, W, batches, sigma_b, lr, beta1, beta2, eps, m, v, n_iter):
    W = np.array(W, dtype=float)
    m = np.array(m, dtype=float)
    v = np.array(v, dtype=float)
    t = int(n_iter)
    out = []
    for batch in batches:
        g = plugin_grad(objective, W, batch, sigma_b) + _reg(objective) * W
        t += 1
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g**2
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        W = W - lr * m_hat / (np.sqrt(v_hat) + eps)
        out.append({"coef": W.copy(), "m": m.copy(), "v": v.copy(), "n_iter": t})
    return out
