"""NumPy twins of the Prospect and Prospect-Moreau kernels.

Written from the paper's pseudo-code (Mehta et al. 2024, Algorithm 3 with ``i_t = j_t`` and
Appendix E), with full ``d``-vector gradient tables, full re-sorts (``np.argsort``), the
slow PAV twin of ``reference_impl.oracles`` and ``gbar`` recomputed from its definition every
step. Losses and derivatives come from the NumPy ``Loss.value`` / ``Loss.deriv`` methods; the
proximal operators are solved on the full ``(p, K)`` variable (linear solve for the squared
loss, full Newton for the logistic / multinomial losses, a case analysis of the subgradient
condition for the absolute loss). Each twin returns the list of states after every step.
"""
import numpy as np

from . import oracles as ref_oracles

_DIV = {0: "chi2", 1: "kl"}


def _row_loss_grad(obj, W, i):
    """``(l_i(W), grad l_i(W))`` with the gradient as a (p, K) matrix."""
    x = obj.X[i]
    z = (x @ W)[None, :]                     # (1, K)
    yi = obj.y[i:i + 1]
    if obj.K == 1:
        z = z[:, 0]
    val = float(obj.loss.value(yi, z)[0])
    d = np.atleast_2d(obj.loss.deriv(yi, z)).reshape(1, -1)[0]   # (K,)
    return val, np.outer(x, d)


def _weights(obj, losses):
    return ref_oracles.weights(losses, obj.sigma, obj.nu, _DIV[obj.div])


# ------------------------------------------------------------------------------- Prospect
def prospect_init(obj, W0):
    W = np.array(obj.as_matrix(W0), dtype=float)
    n = obj.n
    losses = np.empty(n)
    G = np.empty((n, obj.p, obj.K))
    for i in range(n):
        losses[i], G[i] = _row_loss_grad(obj, W, i)
    q = _weights(obj, losses)
    rho = q.copy()
    return dict(W=W, losses=losses, G=G, q=q, rho=rho, gbar=np.einsum("i,ipk->pk", rho, G))


def prospect_steps(obj, state, indices, lr):
    """Algorithm 3 with ``i = j``; the l2 term by its prox: ``W <- (W - lr v) / (1 + lr reg)``."""
    s = {k: np.array(v, copy=True) for k, v in state.items()}
    n = obj.n
    out = []
    for i in indices:
        W, losses, G, q, rho = s["W"], s["losses"], s["G"], s["q"], s["rho"]
        l_i, g_i = _row_loss_grad(obj, W, i)             # oracle at w^(t)
        v = n * q[i] * g_i - n * rho[i] * G[i] + s["gbar"]
        W_new = (W - lr * v) / (1.0 + lr * obj.reg)[:, None]
        q_t_i = q[i]                                     # q^(t)_i, before the re-solve
        losses = losses.copy()
        losses[i] = l_i                                  # l_i <- l_i(w^(t))
        q = _weights(obj, losses)                        # q^(t+1)
        G = G.copy()
        G[i] = g_i                                       # g_i <- grad l_i(w^(t))
        rho = rho.copy()
        rho[i] = q_t_i                                   # rho_i <- q_i^(t)
        gbar = np.einsum("i,ipk->pk", rho, G)            # definition, no incremental update
        s = dict(W=W_new, losses=losses, G=G, q=q, rho=rho, gbar=gbar)
        out.append({k: v.copy() for k, v in s.items()})
    return out


def prospect_batch_steps(obj, state, batches, lr):
    """Mini-batch Prospect: per batch ``B`` (distinct indices) every gradient at ``w^(t)``,
    ``v = mean_B(n q_i g_i - n rho_i G_i) + gbar``, the prox step, then the ``B`` table entries
    (``rho_i <- q_i^(t)``) and one full re-solve of ``q``."""
    s = {k: np.array(v, copy=True) for k, v in state.items()}
    n = obj.n
    out = []
    for batch in batches:
        W, q = s["W"], s["q"]
        losses, G, rho = s["losses"].copy(), s["G"].copy(), s["rho"].copy()
        rows = [_row_loss_grad(obj, W, i) for i in batch]
        v = np.mean([n * q[i] * g - n * rho[i] * G[i] for i, (_, g) in zip(batch, rows)],
                    axis=0) + s["gbar"]
        W_new = (W - lr * v) / (1.0 + lr * obj.reg)[:, None]
        for i, (l_i, g_i) in zip(batch, rows):
            losses[i], G[i], rho[i] = l_i, g_i, q[i]
        s = dict(W=W_new, losses=losses, G=G, q=_weights(obj, losses), rho=rho,
                 gbar=np.einsum("i,ipk->pk", rho, G))
        out.append({k: v.copy() for k, v in s.items()})
    return out


# -------------------------------------------------------------------------- Prospect-Moreau
def _prox_full(obj, i, V, eta):
    """argmin_Z l_i(Z) + 0.5 sum_j reg_j |Z_j|^2 + |Z - V|^2 / (2 eta), on the full (p, K) Z."""
    x, yi, reg = obj.X[i], obj.y[i], obj.reg
    p, K = V.shape
    code = obj.loss.name
    if code == "squared":
        A = np.outer(x, x) + np.diag(reg + 1.0 / eta)
        return np.linalg.solve(A, x * yi + V[:, 0] / eta)[:, None]
    if code == "absolute":
        # optimality: (R + I/eta) Z = V/eta - t x, t in sign(x.Z - y)
        def Z_of(t):
            return ((V[:, 0] / eta - t * x) / (reg + 1.0 / eta))[:, None]
        for t in (1.0, -1.0):
            Z = Z_of(t)
            if t * (x @ Z[:, 0] - yi) > 0:
                return Z
        # kink: x.Z = y, linear in t
        u0 = x @ Z_of(0.0)[:, 0]
        u1 = x @ Z_of(1.0)[:, 0]
        t = (u0 - yi) / (u0 - u1) if u0 != u1 else 0.0
        return Z_of(t)
    # smooth losses: Newton on the flattened Z with backtracking
    Z = V.copy()

    def psi(Z):
        z = x @ Z
        val = obj.loss.value(np.array([yi]), z[None, :] if K > 1 else z[None])[0]
        return val + 0.5 * np.sum(reg[:, None] * Z * Z) + np.sum((Z - V) ** 2) / (2 * eta)

    def grad_of(Z):
        z = x @ Z
        if K == 1:
            pr = 1.0 / (1.0 + np.exp(-z))
            d = pr - yi
            Hz = np.diag(pr * (1 - pr))
        else:
            e = np.exp(z - z.max())
            pr = e / e.sum()
            d = pr.copy()
            d[int(yi)] -= 1.0
            Hz = np.diag(pr) - np.outer(pr, pr)
        return np.outer(x, d) + reg[:, None] * Z + (Z - V) / eta, Hz

    # Newton with Armijo backtracking while the decrement is large, full steps near the end
    for _ in range(200):
        grad, Hz = grad_of(Z)
        H = np.kron(np.outer(x, x), Hz) + np.kron(np.diag(reg + 1.0 / eta), np.eye(K))
        step = np.linalg.solve(H, grad.ravel()).reshape(p, K)
        lam2 = float(np.sum(grad * step))
        size = np.max(np.abs(step))
        if size <= 1e-16 * max(1.0, np.max(np.abs(Z))):
            break
        t = 1.0
        if lam2 >= 1e-8:
            f0 = psi(Z)
            while psi(Z - t * step) > f0 - 1e-4 * t * lam2 and t > 1e-12:
                t *= 0.5
        Z = Z - t * step
        if lam2 < 1e-8 and size <= 1e-15 * max(1.0, np.max(np.abs(Z))):
            break
    return Z


def moreau_init(obj, W0):
    W = np.array(obj.as_matrix(W0), dtype=float)
    n = obj.n
    losses = np.empty(n)
    G = np.empty((n, obj.p, obj.K))
    for i in range(n):
        losses[i], g = _row_loss_grad(obj, W, i)
        G[i] = g + obj.reg[:, None] * W                 # grad r_i(w0)
    q = _weights(obj, losses)
    return dict(W=W, losses=losses, G=G, q=q, gbar=np.einsum("i,ipk->pk", q, G))


def moreau_steps(obj, state, jdx, lr):
    """Appendix E: ``i ~ q`` (inverse CDF of ``u = jdx[t, 1] / 2**53``), ``j = jdx[t, 0]``."""
    s = {k: np.array(v, copy=True) for k, v in state.items()}
    out = []
    for j, u53 in np.asarray(jdx).reshape(-1, 2):
        W, losses, G, q, gbar = s["W"], s["losses"], s["G"], s["q"], s["gbar"]
        cum = np.cumsum(q)
        i = int(np.searchsorted(cum, (u53 * 2.0**-53) * cum[-1], side="right"))
        if i >= obj.n:
            i = int(np.nonzero(q > 0)[0][-1])
        Ui = W + lr * (G[i] - gbar)
        Uj = W + lr * (G[j] - gbar)
        l_j, _ = _row_loss_grad(obj, W, j)               # l_j <- l_j(w^(t))
        W_new = _prox_full(obj, i, Ui, lr)
        G = G.copy()
        G[j] = (Uj - _prox_full(obj, j, Uj, lr)) / lr    # Moreau gradient (53)
        losses = losses.copy()
        losses[j] = l_j
        q = _weights(obj, losses)
        gbar = np.einsum("i,ipk->pk", q, G)
        s = dict(W=W_new, losses=losses, G=G, q=q, gbar=gbar, i=i)
        out.append({k: np.copy(v) for k, v in s.items()})
        s.pop("i")
    return out
