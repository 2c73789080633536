"""NumPy twins of the oracle kernels."""
import numpy as np


def weights_nu0(losses, sigma):
    """q = sigma by rank; ties share the mean of their spectrum entries."""
    order = np.argsort(losses, kind="mergesort")
    ls = losses[order]
    qs = sigma.astype(float).copy()
    i = 0
    n = len(ls)
    while i < n:
        j = i
        while j + 1 < n and ls[j + 1] == ls[i]:
            j += 1
        qs[i:j + 1] = sigma[i:j + 1].mean()
        i = j + 1
    q = np.empty(n)
    q[order] = qs
    return q


def pav(ls, sigma, nu, divergence):
    """Plain PAV with python lists for problem (13) of the Prospect paper."""
    n = len(ls)
    blocks = []  # (value, [indices], meta)
    for i in range(n):
        if divergence == "chi2":
            blk = [ls[i] - 2 * n * nu * sigma[i], [i]]
        else:
            blk = [None, [i]]
        blocks.append(blk)
        blk[0] = _block_value(ls, sigma, nu, divergence, blk[1])
        while len(blocks) > 1 and blocks[-2][0] >= blocks[-1][0]:
            last = blocks.pop()
            blocks[-1][1] += last[1]
            blocks[-1][0] = _block_value(ls, sigma, nu, divergence, blocks[-1][1])
    c = np.empty(n)
    for v, idx in blocks:
        c[idx] = v
    return c


def _block_value(ls, sigma, nu, divergence, idx):
    n = len(ls)
    idx = np.asarray(idx)
    if divergence == "chi2":
        return np.mean(ls[idx] - 2 * n * nu * sigma[idx])
    s = sigma[idx].sum()
    if s == 0:
        return np.inf
    m = np.max(ls[idx] / nu)
    lse = m + np.log(np.sum(np.exp(ls[idx] / nu - m)))
    return nu * (lse - np.log(s) - np.log(n) - 1)


def weights(losses, sigma, nu, divergence="chi2"):
    if nu == 0:
        return weights_nu0(losses, sigma)
    n = len(losses)
    order = np.argsort(losses, kind="mergesort")
    ls = losses[order]
    c = pav(ls, sigma, nu, divergence)
    if divergence == "chi2":
        qs = np.maximum((ls - c) / (2 * n * nu), 0.0)
    else:
        qs = np.exp((ls - c) / nu - 1) / n
    q = np.empty(n)
    q[order] = qs
    return q


def penalty(q, nu, divergence="chi2"):
    n = len(q)
    if nu == 0:
        return 0.0
    if divergence == "chi2":
        return nu * n * np.sum((q - 1 / n) ** 2)
    qp = q[q > 0]
    return nu * np.sum(qp * np.log(n * qp))


def risk_value(losses, sigma, nu, divergence="chi2"):
    q = weights(losses, sigma, nu, divergence)
    return q @ losses - penalty(q, nu, divergence), q
