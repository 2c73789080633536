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


# ---------------------------------------------------------------------------------------------
# High-precision twin: the same pool-adjacent-violators algorithm in exact rational arithmetic
# (chi2, ``fractions.Fraction``) or 60-digit decimal arithmetic (KL, ``decimal.Decimal``), so
# that its answer is the true maximiser for the given float inputs, whatever their conditioning
# (large common offsets, shift costs far below the resolution of the losses).
# ---------------------------------------------------------------------------------------------
def _pav_blocks(n, less_or_equal):
    """Generic PAV over positions 0..n-1: ``less_or_equal(A, B)`` says whether block A (left)
    must be pooled with block B (right). Returns the list of blocks (lists of positions)."""
    blocks = []
    for i in range(n):
        blocks.append([i])
        while len(blocks) > 1 and less_or_equal(blocks[-2], blocks[-1]):
            last = blocks.pop()
            blocks[-1] = blocks[-1] + last
    return blocks


def risk_value_exact(losses, sigma, nu, divergence="chi2"):
    """``(value, q)`` of ``max_{q in P(sigma)} q.l - nu D(q||1/n)`` computed to (near) exact
    precision and rounded to float at the end. Slow; for tests on small n."""
    import decimal
    from fractions import Fraction

    losses = np.asarray(losses, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    n = len(losses)
    if nu == 0:
        q = weights_nu0(losses, sigma)
        return float(np.sort(sigma) @ np.sort(losses)), q
    order = np.argsort(losses, kind="mergesort")
    ls = losses[order]
    if divergence == "chi2":
        L = [Fraction(float(v)) for v in ls]
        S = [Fraction(float(v)) for v in sigma]
        two_n_nu = 2 * n * Fraction(float(nu))

        def val(B):
            return sum(L[i] - two_n_nu * S[i] for i in B) / len(B)

        blocks = _pav_blocks(n, lambda A, B: val(A) >= val(B))
        qs = [None] * n
        for B in blocks:
            c = val(B)
            for i in B:
                qs[i] = max((L[i] - c) / two_n_nu, Fraction(0))
        inv_n = Fraction(1, n)
        value = sum(qs[i] * L[i] for i in range(n)) - Fraction(float(nu)) * n * sum(
            (qs[i] - inv_n) ** 2 for i in range(n))
        q = np.empty(n)
        q[order] = [float(v) for v in qs]
        return float(value), q

    ctx = decimal.Context(prec=60, Emin=-10**8, Emax=10**8)
    D = lambda v: decimal.Decimal(float(v))  # exact conversion of the float
    L = [D(v) for v in ls]
    S = [D(v) for v in sigma]
    NU = D(nu)
    log_n1 = ctx.ln(decimal.Decimal(n)) + 1

    def val(B):
        mass = sum(S[i] for i in B)
        if mass == 0:
            return None  # +infinity
        M = max(L[i] for i in B)
        lse = ctx.ln(sum(ctx.exp(ctx.divide(L[i] - M, NU)) for i in B)) + ctx.divide(M, NU)
        return NU * (lse - ctx.ln(mass) - log_n1)

    def pool(A, B):
        va, vb = val(A), val(B)
        if va is None:
            return True
        if vb is None:
            return False
        return va >= vb

    blocks = _pav_blocks(n, pool)
    qs = [None] * n
    for B in blocks:
        mass = sum(S[i] for i in B)
        M = max(L[i] for i in B)
        e = {i: ctx.exp(ctx.divide(L[i] - M, NU)) for i in B}
        tot = sum(e.values())
        for i in B:
            qs[i] = mass * e[i] / tot
    n_dec = decimal.Decimal(n)
    value = sum(qs[i] * L[i] for i in range(n)) - NU * sum(
        qs[i] * ctx.ln(n_dec * qs[i]) for i in range(n) if qs[i] > 0)
    q = np.empty(n)
    q[order] = [float(v) for v in qs]
    return float(value), q
