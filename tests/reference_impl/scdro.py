"""NumPy twins of the SCDRO-family kernels (riskopt._kernels.scdro), written from the paper's
equations (Algorithms 1-3, eq. (6)-(8)) with plain NumPy, one mini-batch step at a time."""
import numpy as np


def schedule(mode, lr, beta, eta_pow, t0, stage_len, t, k, pos):
    if mode == 0:
        eta, bet = lr, beta
    elif mode == 1:
        eta, bet = lr * 2.0 ** (-k * eta_pow), beta * 2.0 ** (-k)
    else:
        eta = lr / (1.0 + t / t0) ** (1.0 / 3.0)
        bet = beta * (eta / lr) ** 2
    bet = min(bet, 1.0)
    t += 1
    if mode == 1:
        pos += 1
        if pos >= stage_len * 2.0 ** k:
            k, pos = k + 1, 0
    return eta, bet, t, k, pos


def batch(obj, W, lam, idx):
    """Losses (b,), gradients (b, p, K) and exponents l / lam."""
    Z = obj.X[idx] @ W
    losses, derivs = obj.loss.value(obj.y[idx], Z if Z.shape[1] > 1 else Z[:, 0]), None
    if Z.shape[1] == 1:
        derivs = obj.loss.deriv(obj.y[idx], Z[:, 0])[:, None]
    else:
        derivs = obj.loss.deriv(obj.y[idx], Z)
    grads = obj.X[idx][:, :, None] * derivs[:, None, :]
    return np.asarray(losses, float), grads, np.asarray(losses, float) / lam


def step(W, lam, G, zl, obj, mu, eta, lo, hi, R):
    W = W - eta * (G + (obj.reg[:, None] + mu) * W)
    if R > 0 and np.linalg.norm(W) > R:
        W = W * (R / np.linalg.norm(W))
    if hi > lo:
        lam = float(np.clip(min(max(lam - eta * (zl + mu * lam), 0.9 * lam), lam / 0.9), lo,
                            hi))
    return W, lam


def moving_average(obj, W, lam, batches, lr, beta, mode=0, eta_pow=1.0, t0=1.0, stage_len=1.0,
                   mu=0.0, R=0.0, lo=None, hi=None, log_s=0.0, v=None, u=0.0, started=False,
                   counters=(0, 0, 0)):
    """SCDRO / RSCDRO: the iterates after every mini-batch."""
    rho = 0.0 if obj.radius is None else obj.radius
    t, k, pos = counters
    v = np.zeros_like(W) if v is None else v
    out = []
    for idx in batches:
        eta, bet, t, k, pos = schedule(mode, lr, beta, eta_pow, t0, stage_len, t, k, pos)
        losses, grads, a = batch(obj, W, lam, idx)
        log_g = np.log(np.mean(np.exp(a - a.max()))) + a.max()
        log_s = log_g if not started else np.logaddexp(np.log1p(-bet) + log_s if bet < 1
                                                       else -np.inf, np.log(bet) + log_g)
        w = np.exp(a - log_s) / len(idx)
        G = np.einsum("i,ipk->pk", w, grads)
        gl = -np.sum(w * losses) / lam + log_s + rho
        if not started:
            v, u, started = G, gl, True
        else:
            v, u = (1 - bet) * v + bet * G, (1 - bet) * u + bet * gl
        W, lam = step(W, lam, v, u, obj, mu, eta, lo, hi, R)
        out.append((W.copy(), lam))
    return out


def storm(obj, W, lam, batches, lr, beta, mode=2, eta_pow=1.0, t0=1.0, stage_len=1.0, mu=0.0,
          R=0.0, lo=None, hi=None):
    """ASCDRO / RASCDRO / RECOVER from a fresh start, with the *unscaled* estimators kept in
    the log domain via a common shift recomputed from scratch each step."""
    rho = 0.0 if obj.radius is None else obj.radius
    t = k = pos = 0
    out = []
    Wp, lamp = W.copy(), lam
    s = u = None
    v = None
    m = -np.inf
    for step_no, idx in enumerate(batches):
        eta, bet, t, k, pos = schedule(mode, lr, beta, eta_pow, t0, stage_len, t, k, pos)
        losses, grads, a = batch(obj, W, lam, idx)
        M = a.max()
        if step_no > 0:
            lp, gp, ap = batch(obj, Wp, lamp, idx)
            M = max(M, ap.max())
            sc = np.exp(min(m - M, 600.0))
            s, u, v = s * sc, u * sc, v * sc
        m = M
        b = len(idx)
        e = np.exp(a - M) / b
        g, gu = e.sum(), -np.sum(e * losses) / lam**2
        gv = np.einsum("i,ipk->pk", e / lam, grads)
        if step_no == 0:
            s, u, v = g, gu, gv
        else:
            ep = np.exp(ap - M) / b
            s = g + (1 - bet) * (s - ep.sum())
            u = gu + (1 - bet) * (u - (-np.sum(ep * lp) / lamp**2))
            v = gv + (1 - bet) * (v - np.einsum("i,ipk->pk", ep / lamp, gp))
        beyond = (hi is not None and lo is not None and hi > lo and rho > 0 and s > 0
                  and -lam**2 * u / s > losses.min() + (hi - lo) * rho)
        if not (g > 0 and s >= bet * g) or beyond:   # restart the estimators on this batch
            M = a.max()
            m = M
            e = np.exp(a - M) / b
            g, gu = e.sum(), -np.sum(e * losses) / lam**2
            s, u, v = g, gu, np.einsum("i,ipk->pk", e / lam, grads)
        Z = lam * v / s
        zl = lam * u / s + np.log(s) + M + rho
        Wp, lamp = W.copy(), lam
        W, lam = step(W, lam, Z, zl, obj, mu, eta, lo, hi, R)
        out.append((W.copy(), lam))
    return out
