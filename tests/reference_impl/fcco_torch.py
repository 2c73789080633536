"""NumPy twins of the PyTorch FCCO optimizers (riskopt.torch.optim.fcco): SONEX / SONX / SOX
(Algorithm 1), ALEXR2 (Algorithm 2, MSVR form) and OOA, for a linear logistic model
``z = x^T w + b`` whose parameters are the vector ``theta = [w, b]``, written from the paper's
equations with plain NumPy, one step at a time.

The inner function of outer index ``i`` on the rows ``B`` is ``g_i(theta; B) = mean_{j in B}
log(1 + exp(z_j)) - y_j z_j - offsets[i]``; the optional direct term is the mean logistic loss
over the step's ``drows``. A step is a dict ``{"I": outer ids, "rows": [rows of each id],
"drows": rows or None}``. Outer functions are tuples: ``("hinge", rho, kappa)``,
``("abshinge", rho, kappa)``, ``("sqhinge", rho, kappa, absolute)``, ``("cvar", r)``.
"""
import numpy as np


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def loss_and_grad(X, y, theta, rows):
    """Mean logistic loss over ``rows`` and its gradient wrt ``theta = [w, b]``."""
    A = np.column_stack([X[rows], np.ones(len(rows))])
    z = A @ theta
    val = np.mean(np.logaddexp(0.0, z) - y[rows] * z)
    grad = A.T @ (_sigmoid(z) - y[rows]) / len(rows)
    return val, grad


def outer_grad(outer, u, lam, s=0.0):
    """Gradient of the Moreau envelope (parameter ``lam``; 0: subgradient) at ``u``."""
    kind = outer[0]
    if kind == "sqhinge":
        _, rho, kappa, absolute = outer
        if absolute:
            return rho * np.sign(u) * max(abs(u) - kappa, 0.0)
        return rho * max(u - kappa, 0.0)
    if kind == "hinge":
        t, cap, sign = u - outer[2], outer[1], 1.0
    elif kind == "abshinge":
        t, cap, sign = abs(u) - outer[2], outer[1], np.sign(u)
    elif kind == "cvar":
        t, cap, sign = u - s, 1.0 / outer[1], 1.0
    else:
        raise ValueError(kind)
    if lam > 0:
        return sign * min(max(t / lam, 0.0), cap)
    return sign * (cap if t > 0 else 0.0)


def _estimate(X, y, offsets, outer, step, theta, theta_prev, s, u, seen, lam, gamma, gamma_p):
    """MSVR tracking of ``u`` (in place) and ``(G, G_s)`` at ``theta``."""
    G = np.zeros_like(theta)
    ysum = 0.0
    nI = len(step["I"])
    for i, rows in zip(step["I"], step["rows"]):
        val, grad = loss_and_grad(X, y, theta, rows)
        val -= offsets[i]
        valp = loss_and_grad(X, y, theta_prev, rows)[0] - offsets[i]
        if not seen[i]:
            u[i], seen[i] = val, True
        else:
            u[i] = (1 - gamma) * u[i] + gamma * val + gamma_p * (val - valp)
        yi = outer_grad(outer, u[i], lam, s)
        ysum += yi
        G += yi * grad / nI
    if step.get("drows") is not None:
        G += loss_and_grad(X, y, theta, step["drows"])[1]
    return G, 1.0 - ysum / nI


def _moment(theta, G, v, m2, lr, beta, adam, t, b2, eps):
    v = (1 - beta) * v + beta * G
    if adam:
        m2 = b2 * m2 + (1 - b2) * G * G
        vhat = v / (1 - (1 - beta) ** t)
        mhat = m2 / (1 - b2 ** t)
        theta = theta - lr * vhat / (np.sqrt(mhat) + eps)
    else:
        theta = theta - lr * v
    return theta, v, m2


def single_loop(X, y, offsets, outer, theta0, steps, m, lr, beta, gamma, gamma_p, lam, adam,
                weight_decay=0.0, b2=0.999, eps=1e-8):
    """SONEX (SONX: ``gamma_p = lam = 0``; SOX: a smooth outer). Returns one
    ``(theta, s, u)`` per step."""
    theta = np.array(theta0, float)
    prev = theta.copy()
    s, vs, m2s = 0.0, 0.0, 0.0
    v, m2 = np.zeros_like(theta), np.zeros_like(theta)
    u, seen = np.zeros(m), np.zeros(m, bool)
    out = []
    for t, step in enumerate(steps, start=1):
        G, Gs = _estimate(X, y, offsets, outer, step, theta, prev, s, u, seen, lam, gamma,
                          gamma_p)
        G = G + weight_decay * theta
        prev = theta.copy()
        theta, v, m2 = _moment(theta, G, v, m2, lr, beta, adam, t, b2, eps)
        if outer[0] == "cvar":
            s_arr, vs_arr, m2s_arr = _moment(np.array([s]), np.array([Gs]), np.array([vs]),
                                             np.array([m2s]), lr, beta, adam, t, b2, eps)
            s, vs, m2s = float(s_arr[0]), float(vs_arr[0]), float(m2s_arr[0])
        out.append((theta.copy(), s, u.copy()))
    return out


def alexr2(X, y, offsets, outer, theta0, steps, m, lr, inner_lr, nu, K, gamma, theta_x, beta,
           lam, adam, weight_decay=0.0, b2=0.999, eps=1e-8):
    """ALEXR2, one entry ``(z, s_z, u)`` per inner step (``z`` the live parameters)."""
    w = np.array(theta0, float)
    z, zprev = w.copy(), w.copy()
    s, zs = 0.0, 0.0
    v, m2 = np.zeros_like(w), np.zeros_like(w)
    vs, m2s = 0.0, 0.0
    u, seen = np.zeros(m), np.zeros(m, bool)
    k, t, out = 0, 0, []
    a = 1 / inner_lr + 1 / nu
    for step in steps:
        G, Gs = _estimate(X, y, offsets, outer, step, z, zprev, zs, u, seen, lam, gamma,
                          gamma * theta_x)
        G = G + weight_decay * z
        zprev = z.copy()
        z = (z / inner_lr + w / nu - G) / a
        if outer[0] == "cvar":
            zs = (zs / inner_lr + s / nu - Gs) / a
        k += 1
        if k == K:
            k, t = 0, t + 1
            w, v, m2 = _moment(w, (w - z) / nu, v, m2, lr, beta, adam, t, b2, eps)
            if outer[0] == "cvar":
                s_arr, vs_arr, m2s_arr = _moment(np.array([s]), np.array([(s - zs) / nu]),
                                                 np.array([vs]), np.array([m2s]), lr, beta,
                                                 adam, t, b2, eps)
                s, vs, m2s = float(s_arr[0]), float(vs_arr[0]), float(m2s_arr[0])
            z, zprev, zs = w.copy(), w.copy(), s
        out.append((z.copy(), zs, u.copy()))
    return out


def project_capped_simplex(x, cap, iters=200):
    """Euclidean projection on ``{p : sum p = 1, 0 <= p <= cap}`` by bisection on the shift."""
    lo, hi = np.min(x) - cap, np.max(x)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if np.clip(x - mid, 0, cap).sum() > 1:
            lo = mid
        else:
            hi = mid
    return np.clip(x - 0.5 * (lo + hi), 0, cap)


def ooa(X, y, offsets, theta0, steps, m, r, lr, dual_lr, weight_decay=0.0):
    """OOA: one ``(theta, p)`` per step; the group losses are the inner functions."""
    theta = np.array(theta0, float)
    p = np.full(m, 1.0 / m)
    out = []
    for step in steps:
        nI = len(step["I"])
        G = weight_decay * theta
        x = p.copy()
        for g, rows in zip(step["I"], step["rows"]):
            val, grad = loss_and_grad(X, y, theta, rows)
            G = G + m / nI * p[g] * grad
            x[g] += dual_lr * m / nI * (val - offsets[g])
        theta = theta - lr * G
        p = project_capped_simplex(x, 1.0 / (r * m))
        out.append((theta.copy(), p.copy()))
    return out
