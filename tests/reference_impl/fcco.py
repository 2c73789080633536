"""NumPy twins of the FCCO kernels (riskopt._kernels.fcco): SONX / SONEX / SOX (Algorithm 1 of
the SONEX/ALEXR2 paper), ALEXR2 (Algorithm 2, MSVR form) and OOA, written from the equations
with plain NumPy, one step at a time, on the packed index rows of ``draw_indices``."""
import numpy as np


def _rowlosses(obj, W, rows):
    Z = obj.X[rows] @ W
    if Z.shape[1] == 1:
        return (np.asarray(obj.loss.value(obj.y[rows], Z[:, 0]), float),
                np.asarray(obj.loss.deriv(obj.y[rows], Z[:, 0]), float)[:, None])
    return (np.asarray(obj.loss.value(obj.y[rows], Z), float),
            np.asarray(obj.loss.deriv(obj.y[rows], Z), float))


def outer_grad(kind, t, lam, par):
    if kind == 1:
        return par * max(t, 0.0)
    if lam > 0:
        return float(np.clip(t / lam, 0.0, par))
    return par if t > 0 else 0.0


def _outer(obj):
    if obj.family == "group_risk":
        return 0, 1.0 / obj.tail_fraction
    return obj.kind, obj.rho


def _split(row, b1, b2):
    return row[:b1], row[b1:b1 + b1 * b2].reshape(b1, b2), row[b1 + b1 * b2:]


def gradient(obj, W, Wprev, s, u, seen, row, b1, b2, lam, gamma, gamma_p):
    """``(G, G_s)`` of one step and the updated tracking ``u`` / ``seen`` (in place)."""
    kind, par = _outer(obj)
    gids, rows, drows = _split(row, b1, b2)
    G = obj.reg[:, None] * W
    gsum = 0.0
    for a, i in enumerate(gids):
        lo, de = _rowlosses(obj, W, rows[a])
        val = lo.mean() - obj.outer_offsets[i]
        valp = _rowlosses(obj, Wprev, rows[a])[0].mean() - obj.outer_offsets[i]
        if not seen[i]:
            u[i], seen[i] = val, 1
        else:
            u[i] = (1 - gamma) * u[i] + gamma * val + gamma_p * (val - valp)
        y = outer_grad(kind, u[i] - s, lam, par)
        gsum += y
        G = G + y / b1 * obj.X[rows[a]].T @ de / b2
    if drows.size:
        _, de = _rowlosses(obj, W, drows)
        G = G + obj.X[drows].T @ de / drows.size
    gs = 1.0 - gsum / b1 if obj.has_s else 0.0
    return G, gs


class _Mom:
    def __init__(self, W, beta, adam):
        self.v, self.m2 = np.zeros_like(W), np.zeros_like(W)
        self.vs = self.m2s = 0.0
        self.beta, self.adam, self.t = beta, adam, 0

    def step(self, W, s, G, gs, lr, has_s):
        b, b2m, eps = self.beta, 0.999, 1e-8
        self.t += 1
        self.v = (1 - b) * self.v + b * G
        self.vs = (1 - b) * self.vs + b * gs
        if self.adam:
            self.m2 = b2m * self.m2 + (1 - b2m) * G * G
            self.m2s = b2m * self.m2s + (1 - b2m) * gs * gs
            c1, c2 = 1 - (1 - b) ** self.t, 1 - b2m ** self.t
            W = W - lr * (self.v / c1) / (np.sqrt(self.m2 / c2) + eps)
            if has_s:
                s = s - lr * (self.vs / c1) / (np.sqrt(self.m2s / c2) + eps)
        else:
            W = W - lr * self.v
            if has_s:
                s = s - lr * self.vs
        return W, s


def single_loop(solver, obj, W0, s0, rows_seq, b1, b2):
    """SONX / SONEX / SOX: the iterate after every step."""
    W, Wp, s = W0.copy(), W0.copy(), s0
    u, seen = np.zeros(obj.m), np.zeros(obj.m, dtype=int)
    mom = _Mom(W, solver.beta, solver.step_rule == "adam")
    out = []
    for row in rows_seq:
        G, gs = gradient(obj, W, Wp, s, u, seen, row, b1, b2, solver._lam(), solver.gamma,
                         solver._gp())
        Wp = W.copy()
        W, s = mom.step(W, s, G, gs, solver.lr, obj.has_s)
        out.append(W.copy())
    return out


def alexr2(solver, obj, W0, s0, rows_seq, b1, b2):
    """ALEXR2: the outer iterate after every inner step."""
    W, s = W0.copy(), s0
    Z, Zp, zs = W.copy(), W.copy(), s
    u, seen = np.zeros(obj.m), np.zeros(obj.m, dtype=int)
    mom = _Mom(W, solver.beta, solver.step_rule == "adam")
    eta, nu, k = solver.inner_lr, solver.nu, 0
    out = []
    for row in rows_seq:
        G, gs = gradient(obj, Z, Zp, zs, u, seen, row, b1, b2, solver._lam(), solver.gamma,
                         solver._gp())
        Zp = Z.copy()
        Z = (Z / eta + W / nu - G) / (1 / eta + 1 / nu)
        if obj.has_s:
            zs = (zs / eta + s / nu - gs) / (1 / eta + 1 / nu)
        k += 1
        if k == solver.inner_steps:
            k = 0
            W, s = mom.step(W, s, (W - Z) / nu, (s - zs) / nu, solver.lr, obj.has_s)
            Z, Zp, zs = W.copy(), W.copy(), s
        out.append(W.copy())
    return out


def project_capped_simplex(x, cap):
    """Euclidean projection on ``{sum p = 1, 0 <= p <= cap}`` by a sort-free exact search over
    the breakpoints of the piecewise-linear ``tau -> sum clip(x - tau, 0, cap)``."""
    if x.size * cap <= 1.0 + 1e-12:
        return np.full(x.size, cap)
    bps = np.sort(np.concatenate([x, x - cap]))
    f = [np.clip(x - t, 0, cap).sum() for t in bps]
    for k in range(len(bps) - 1):
        if f[k] >= 1.0 - 1e-12 and 1.0 >= f[k + 1]:
            t0, t1 = bps[k], bps[k + 1]
            tau = t0 if f[k] == f[k + 1] else t0 + (f[k] - 1.0) * (t1 - t0) / (f[k] - f[k + 1])
            return np.clip(x - tau, 0, cap)
    raise AssertionError("infeasible capped simplex")


def ooa(solver, obj, W0, rows_seq, b1, b2):
    W, q = W0.copy(), np.full(obj.m, 1.0 / obj.m)
    cap = 1.0 / (obj.tail_fraction * obj.m)
    out = []
    for row in rows_seq:
        gids, rows, _ = _split(row, b1, b2)
        G = obj.reg[:, None] * W
        x = q.copy()
        for a, g in enumerate(gids):
            lo, de = _rowlosses(obj, W, rows[a])
            G = G + obj.m * q[g] / b1 * obj.X[rows[a]].T @ de / b2
            x[g] += solver.dual_lr * obj.m * lo.mean() / b1
        W = W - solver.lr * G
        q = project_capped_simplex(x, cap)
        out.append(W.copy())
    return out
