"""NumPy twin of SOREL (Algorithm 1 with the practical settings; Appendix D mini-batches).

Written from the paper's pseudo-code, vector by vector, with the loss functions of
``riskopt.losses`` (NumPy) and scikit-learn's isotonic regression for the projection.
"""
import numpy as np
from sklearn.isotonic import isotonic_regression


def project_permutahedron(u, sigma):
    """Euclidean projection of ``u`` onto the permutahedron of ``sigma`` (ascending).

    With ``u`` sorted ascending, the projection is ``u - iso(u - sigma)`` where ``iso`` is the
    non-decreasing isotonic regression (Lim & Wright 2016; Blondel et al. 2020, Prop. 3).
    """
    u = np.asarray(u, dtype=float)
    order = np.argsort(u, kind="mergesort")
    us = u[order]
    iso = isotonic_regression(us - sigma, increasing=True)
    q = np.empty_like(u)
    q[order] = us - iso
    return q


def losses_derivs(obj, W):
    Z = obj.X @ W
    z = Z if obj.K > 1 else Z[:, 0]
    losses = obj.loss.value(obj.y, z)
    D = np.asarray(obj.loss.deriv(obj.y, z), dtype=float).reshape(obj.n, obj.K)
    return losses, D


def initial_weights(obj, W):
    """lambda_0 = argmax_{lambda in P(sigma)} lambda . l(w_0), ties sharing their spectrum mass."""
    from .oracles import weights_nu0

    losses, _ = losses_derivs(obj, W)
    return weights_nu0(losses, obj.sigma), losses


def sorel_outer_iteration(obj, W, lam, losses_prev, k, lr, dual_lr, prox_scale, batches):
    """One outer iteration k; returns (W_{k+1}, lambda_{k+1}, l(w_k), inner iterates)."""
    n = obj.n
    theta = k / (k + 1)
    eta = dual_lr * (k + 1) / n
    tau = prox_scale * n / (k + 1)
    losses, D_bar = losses_derivs(obj, W)                    # at w_k = w_bar
    v = (1 + theta) * losses - theta * losses_prev           # line 4
    lam_new = project_permutahedron(lam + eta * v, obj.sigma)  # line 5
    W_k = W.copy()
    g_bar = obj.X.T @ (lam_new[:, None] * D_bar)             # line 7
    Wt = W.copy()
    iterates = []
    batches = np.asarray(batches).reshape(len(batches), -1)
    for B in batches:                                        # lines 8-16
        b = len(B)
        Z = obj.X[B] @ Wt
        z = Z if obj.K > 1 else Z[:, 0]
        D = np.asarray(obj.loss.deriv(obj.y[B], z), dtype=float).reshape(b, obj.K)
        coef = n * lam_new[B] / b
        d = obj.X[B].T @ (coef[:, None] * (D - D_bar[B])) + g_bar
        # line 15: prox of lr * (mu/2 ||w||^2 + ||w - w_k||^2 / (2 tau)) at Wt - lr d
        x = Wt - lr * d
        Wt = (x + (lr / tau) * W_k) / (1.0 + lr * (obj.reg[:, None] + 1.0 / tau))
        iterates.append(Wt.copy())
    return Wt, lam_new, losses, iterates


def sorel_run(obj, W0, lr, dual_lr, prox_scale, index_batches):
    """Several outer iterations from w_0; ``index_batches[k]`` are the inner indices of step k.

    Returns the list of (W_{k+1}, lambda_{k+1}, l(w_k)) after each outer iteration.
    """
    lam, losses_prev = initial_weights(obj, W0)
    W = W0.copy()
    out = []
    for k, batches in enumerate(index_batches):
        W, lam, losses_prev, _ = sorel_outer_iteration(obj, W, lam, losses_prev, k, lr, dual_lr,
                                                       prox_scale, batches)
        out.append((W.copy(), lam.copy(), losses_prev.copy()))
    return out
