"""NumPy twins of the SGM / SPL / SPL+ kernels (Meng & Gower, Algorithms 1 and 2).

Written from the pseudo-code: Algorithm 1 (SGM) and the three branches of Algorithm 2 (SPL+;
SPL is the same with one step size), one sample at a time, with the losses and derivatives of
``riskopt.losses`` (NumPy). The l2 term (absent from the paper) is handled as in the kernel's
docstring: SGM adds ``reg * w`` to the subgradient; SPL/SPL+ keep it exactly in the model, which
amounts to running Algorithm 2 around the shrunk centre ``w / (1 + lr_theta reg)`` with per-row
step ``lr_theta / (1 + lr_theta reg)`` and the linearisation re-centred there (reg = 0: the
paper's algorithm verbatim).

Each twin returns the list of states ``(W, alpha, W_avg, alpha_avg, t)`` after every step.
"""
import numpy as np


def _loss_grad(loss, X, y, i, W):
    z = X[i] @ W  # (K,)
    y_i = np.array([y[i]])
    ell = float(loss.value(y_i, z[None, :] if W.shape[1] > 1 else z)[0])
    dz = np.atleast_1d(loss.deriv(y_i, z[None, :] if W.shape[1] > 1 else z)).reshape(-1)
    return ell, np.outer(X[i], dz)


def _scale(schedule, t):
    return 1.0 / np.sqrt(t + 1.0) if schedule == "decreasing" else 1.0


def sgm(loss, X, y, reg, beta, lr, schedule, idx, W0, alpha0, W_avg0=None, alpha_avg0=None,
        t0=0):
    W = np.array(W0, dtype=float)
    alpha = float(alpha0)
    W_avg = W.copy() if W_avg0 is None else np.array(W_avg0, dtype=float)
    alpha_avg = alpha if alpha_avg0 is None else float(alpha_avg0)
    t = t0
    out = []
    for i in idx:
        ell, v = _loss_grad(loss, X, y, i, W)
        lam = lr * _scale(schedule, t)
        reg_grad = reg[:, None] * W
        if alpha >= ell:  # alpha_t too big
            W = W - lam * reg_grad
            alpha = alpha - lam
        else:  # alpha_t too small
            W = W - lam / (1 - beta) * v - lam * reg_grad
            alpha = alpha + lam / (1 - beta) * beta
        t += 1
        W_avg = W_avg + (W - W_avg) / t
        alpha_avg = alpha_avg + (alpha - alpha_avg) / t
        out.append((W.copy(), alpha, W_avg.copy(), alpha_avg, t))
    return out


def algorithm2_step(ell, v, W, alpha, beta, lam_theta, lam_alpha, reg):
    """One step of Algorithm 2 (three branches), with the exact l2 term (see module doc)."""
    shrink = 1.0 / (1.0 + lam_theta * reg)  # (p,)
    Wc = shrink[:, None] * W  # centre of the l2-augmented proximal term
    lam_rows = lam_theta * shrink  # per-row step
    ell_c = ell + np.sum(v * (Wc - W))  # linearisation at the centre
    vnorm2 = np.sum(lam_rows[:, None] * v * v)  # lam_theta ||v||^2 in the paper
    if alpha > ell_c + lam_alpha:  # alpha_t too big
        return Wc, alpha - lam_alpha, "big"
    if alpha < ell_c - vnorm2 / (1 - beta) - lam_alpha * beta / (1 - beta):  # alpha_t too small
        return (Wc - lam_rows[:, None] * v / (1 - beta),
                alpha + lam_alpha / (1 - beta) * beta, "small")
    nu = (ell_c + lam_alpha - alpha) / (vnorm2 + lam_alpha)  # middle range
    return Wc - nu * lam_rows[:, None] * v, alpha - lam_alpha + lam_alpha * nu, "middle"


def spl(loss, X, y, reg, beta, lr_theta, lr_alpha, schedule, idx, W0, alpha0, W_avg0=None,
        alpha_avg0=None, t0=0):
    """SPL+ (SPL when lr_theta == lr_alpha); also returns the branch taken at every step."""
    W = np.array(W0, dtype=float)
    alpha = float(alpha0)
    W_avg = W.copy() if W_avg0 is None else np.array(W_avg0, dtype=float)
    alpha_avg = alpha if alpha_avg0 is None else float(alpha_avg0)
    t = t0
    out, branches = [], []
    for i in idx:
        ell, v = _loss_grad(loss, X, y, i, W)
        c = _scale(schedule, t)
        W, alpha, br = algorithm2_step(ell, v, W, alpha, beta, lr_theta * c, lr_alpha * c, reg)
        branches.append(br)
        t += 1
        W_avg = W_avg + (W - W_avg) / t
        alpha_avg = alpha_avg + (alpha - alpha_avg) / t
        out.append((W.copy(), alpha, W_avg.copy(), alpha_avg, t))
    return out, branches
