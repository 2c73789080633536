r"""Exact risk oracles as tensor programs (device-resident, ``torch.compile``-ready).

The weights of :mod:`riskopt.torch.losses` computed by torch operations on the losses'
device, in float64, for every row of a ``(..., b)`` tensor at once: no ``.item()``, no
``.cpu()``, no Python control flow that depends on the data (every loop runs a number of
times fixed by ``b``). The numba oracles of :mod:`riskopt._kernels.oracles` stay the
reference; ``tests/test_torch_oracles.py`` checks the two agree to ``1e-10`` in float64.

Maths (Prospect paper, App. B-C; SCDRO paper, Eq. 2):

* ``nu = 0``: ``q`` is the spectrum ``sigma`` by rank, tied losses sharing the mean of their
  spectrum entries (a stable sort; tie runs by ``cummax`` / ``cummin`` of their first / last
  rank, means from prefix sums of ``sigma``). For a spectrum of the form ``(0, .., 0, f, s,
  .., s)`` (CVaR, ``MaxLoss``, ``Mean``) the *selection form*: one ``kthvalue`` at the
  boundary rank ``z``, the losses above it get ``s``, the tie at the threshold the mean of
  ``sigma`` over its ranks, the rest 0 (no sort).
* ``nu > 0``: ``q`` comes from the isotonic regression ``c`` of the sorted losses (chi2:
  ``y = l - 2 b nu sigma`` with unit weights, ``q = max(0, (l - c) / (2 b nu))``; KL: the
  ratios ``e^{l/nu} / sigma`` with weights ``sigma``, in log space, ``q = e^{l/nu - c}``).
  The isotonic regression is computed by an exact **parallel pool-adjacent-violators**
  (:func:`_isotonic`): a merge tree of ``ceil(log2 b)`` levels, at each of which every pair of
  adjacent segments (each already isotonic) is merged at once. Merging two isotonic
  sequences ``A | B`` pools the blocks of ``A`` with values ``>= mu`` and those of ``B`` with
  values ``<= mu`` into one block of value ``mu`` (``A <- min(A, mu)``, ``B <- max(B, mu)``),
  where ``mu`` is the root of the decreasing piecewise-linear
  ``h(t) = sum_A w (c - t)_+ - sum_B w (t - c)_+``. ``h(t)`` has the sign of
  ``mean(region(t)) - t`` with ``region(t) = {A >= t} u {B <= t}``, so testing every value of
  ``A`` and ``B`` as ``t`` (two batched ``searchsorted`` and prefix / suffix sums) finds the
  last breakpoint ``t*`` with ``h >= 0`` and ``mu`` is the mean of ``{A > t*} u {B <= t*}``
  (or ``t*`` itself when ``h(t*) = 0``). Block sums are sums of the current values (a block's
  values are its mean), so nothing but ``c`` is carried. O(b log^2 b) work, O(log b) depth.
* KL-constrained DRO: the 1-D dual in ``a = 1/lambda``, ``KL(softmax(a d)) = rho``, by a fixed
  number of bisection-safeguarded Newton steps on every row at once (:func:`kl_constrained`).
"""
import math

import numpy as np
import torch

from .. import risks as _risks

__all__ = ["spectrum", "spectral_weights", "spectral_risk", "kl_constrained", "kl_penalised",
           "isotonic", "two_level_zero_prefix"]

F64 = torch.float64


def _compiling():
    return torch.compiler.is_compiling()


# ------------------------------------------------------------------------------ spectra
def _cvar_cdf(p, a):
    """The spectrum CDF of ``CVaR(a)`` at the levels ``p`` (as the NumPy ``CVaR.cdf``)."""
    return torch.clamp(p - (1.0 - a), min=0.0) / a


def _cdf_torch(risk, p):
    """The spectrum CDF of a built-in risk by torch operations (the same float operations as
    the NumPy ``risk.cdf``), or ``None`` for a risk without one."""
    if isinstance(risk, _risks.CVaR):
        return _cvar_cdf(p, float(risk.tail_fraction))
    if isinstance(risk, _risks.ESRM):
        rho = float(risk.rho)
        return torch.expm1(rho * (p - 1.0)) / -math.expm1(-rho) + 1.0
    if isinstance(risk, _risks.Extremile):
        return p ** float(risk.r)
    if isinstance(risk, _risks.Mean):
        return p
    if isinstance(risk, _risks.MaxLoss):
        return (p >= 1.0).to(F64)
    return None


def _spectrum_tensor(risk, n, device):
    p = torch.arange(n + 1, dtype=F64, device=device) / n
    cdf = _cdf_torch(risk, p)
    if cdf is None:  # a user risk subclass: its NumPy spectrum (host, eager only)
        return torch.as_tensor(np.ascontiguousarray(risk.spectrum(n), dtype=np.float64),
                               device=device)
    sigma = torch.cummax(torch.clamp(cdf[1:] - cdf[:-1], min=0.0), dim=0).values
    sigma = sigma / sigma.sum()
    if isinstance(risk, _risks.CVaR):  # CVaR.spectrum's equal-tail fix
        top = sigma[-1]
        sigma = torch.where((sigma - top).abs() <= 1e-9 * top, top, sigma)
        sigma = sigma / sigma.sum()
    return sigma


_SPECTRA = {}


def spectrum(risk, n, device):
    """``risk.spectrum(n)`` as a float64 tensor on ``device`` (cached in eager mode)."""
    if isinstance(risk, _risks.SpectralRisk):
        raise TypeError("a custom SpectralRisk's spectrum is a buffer of its loss module")
    if _compiling():
        return _spectrum_tensor(risk, n, device)
    key = (risk, int(n), str(device))
    try:
        s = _SPECTRA.get(key)
    except TypeError:  # unhashable risk
        return _spectrum_tensor(risk, n, device)
    if s is None:
        if len(_SPECTRA) > 64:
            _SPECTRA.clear()
        s = _SPECTRA[key] = _spectrum_tensor(risk, n, device)
    return s


def two_level_zero_prefix(risk, n):
    """For a spectrum ``(0, .., 0, f, s, .., s)`` (CVaR, ``MaxLoss``, ``Mean``) the number
    ``z`` of leading zeros (a Python int computed from the same float operations as the CDF,
    so no tensor is read); ``None`` for other spectra."""
    if isinstance(risk, _risks.Mean):
        return 0
    if isinstance(risk, _risks.MaxLoss):
        return n - 1
    if isinstance(risk, _risks.CVaR):
        return _cvar_zeros(float(risk.tail_fraction), n)
    return None


def zero_prefix(risk, n):
    """Number of leading zeros of ``risk.spectrum(n)`` (Python int), for the KL shift."""
    z = two_level_zero_prefix(risk, n)
    if z is not None:
        return z
    if isinstance(risk, (_risks.ESRM, _risks.Extremile)):
        if isinstance(risk, _risks.Extremile):  # (1/n)^r underflows only for huge r
            return 0 if (1.0 / n) ** float(risk.r) > 0.0 else None
        return 0
    return None


def _cvar_zeros(a, n):
    # sigma_i (1-based i) is 0 iff cdf(i/n) = 0 iff i/n - (1 - a) <= 0 (float64, as NumPy)
    lim = 1.0 - a
    z = min(max(int(n * lim) - 2, 0), n)
    while z < n and (z + 1) / n - lim <= 0.0:
        z += 1
    return z


# ------------------------------------------------------------------------- nu = 0
def _tie_rank_bounds(ls):
    """First and last rank of the tie run of each entry of the sorted rows ``ls``."""
    return _run_bounds(ls[..., 1:] != ls[..., :-1])


def _run_bounds(neq):
    """First and last rank of the run of each entry, where ``neq[..., i]`` says whether
    entries ``i`` and ``i + 1`` lie in different runs."""
    n = neq.shape[-1] + 1
    shape = (*neq.shape[:-1], n)
    ar = torch.arange(n, device=neq.device).expand(shape)
    tru = torch.ones(*neq.shape[:-1], 1, dtype=torch.bool, device=neq.device)
    start = torch.cat([tru, neq], dim=-1)
    end = torch.cat([neq, tru], dim=-1)
    first = torch.cummax(torch.where(start, ar, 0), dim=-1).values
    last = torch.where(end, ar, n - 1).flip(-1).cummin(-1).values.flip(-1)
    return first, last


def _cumsum0(x):
    """Prefix sums with a leading 0 (``x[..., :j].sum()`` at ``j``)."""
    return torch.nn.functional.pad(torch.cumsum(x, dim=-1), (1, 0))


def _sorted_nu0(ls, sigma):
    """``q`` in sorted order for ``nu = 0``: ``sigma`` by rank averaged over tie runs."""
    first, last = _tie_rank_bounds(ls)
    cs = _cumsum0(sigma).expand(*ls.shape[:-1], ls.shape[-1] + 1)
    return (cs.gather(-1, last + 1) - cs.gather(-1, first)) / (last + 1 - first).to(ls.dtype)


def _select_two_level(l, sigma, z):
    """Selection form for a two-level spectrum with ``z`` leading zeros (original order)."""
    t = torch.kthvalue(l, z + 1, dim=-1, keepdim=True).values
    below = (l < t).sum(-1, keepdim=True)
    at = l == t
    tie = at.sum(-1, keepdim=True)
    # the tie holds ranks [below, below + tie), z among them: sigma sums to
    # f + (below + tie - 1 - z) s over them
    w_tie = (sigma[z] + (below + tie - 1 - z) * sigma[-1]) / tie
    return torch.where(l > t, sigma[-1], torch.where(at, w_tie, 0.0))


# ------------------------------------------------------------------- parallel PAV
def _rev_cum(x, log):
    f = x.flip(-1)
    return (torch.logcumsumexp(f, -1) if log else torch.cumsum(f, -1)).flip(-1)


def _fwd_cum(x, log):
    return torch.logcumsumexp(x, -1) if log else torch.cumsum(x, -1)


def isotonic(c, lw=None):
    r"""Non-decreasing isotonic regression of each row of ``c`` (last dim a power of two).

    ``lw=None``: unit weights, least squares (block value = mean). Otherwise the KL form:
    ``c`` holds ``log(a_i / w_i)`` and ``lw = log w_i``; a block's value is
    ``log(sum a / sum w)`` (the weighted isotonic regression of the ratios, in log space).
    Exact (a merge tree, see the module docstring).
    """
    log = lw is not None
    N = c.shape[-1]
    lead = c.shape[:-1]
    neg = -math.inf if log else 0.0
    s = 1
    while s < N:
        P = N // (2 * s)
        cv = c.reshape(*lead, P, 2, s)
        cA, cB = cv[..., 0, :], cv[..., 1, :]
        pad0 = torch.full_like(cA[..., :1], neg)
        if log:
            wv = lw.reshape(*lead, P, 2, s)
            wA, wB = wv[..., 0, :], wv[..., 1, :]
            sa = torch.cat([_rev_cum(wA + cA, True), pad0], -1)   # log sum a over A[i:]
            sb = torch.cat([pad0, _fwd_cum(wB + cB, True)], -1)   # log sum a over B[:j]
            ta = torch.cat([_rev_cum(wA, True), pad0], -1)
            tb = torch.cat([pad0, _fwd_cum(wB, True)], -1)
        else:
            sa = torch.cat([_rev_cum(cA, False), pad0], -1)
            sb = torch.cat([pad0, _fwd_cum(cB, False)], -1)
        cA_c, cB_c = cA.contiguous(), cB.contiguous()
        t = torch.cat([cA, cB], -1)

        def region_mean(i, j):
            if log:
                return (torch.logaddexp(sa.gather(-1, i), sb.gather(-1, j))
                        - torch.logaddexp(ta.gather(-1, i), tb.gather(-1, j)))
            cnt = (s - i + j).clamp(min=1).to(c.dtype)
            return (sa.gather(-1, i) + sb.gather(-1, j)) / cnt

        i_ge = torch.searchsorted(cA_c, t, right=False)   # A[i_ge:] >= t
        j_le = torch.searchsorted(cB_c, t, right=True)    # B[:j_le] <= t
        m = region_mean(i_ge, j_le)
        ok = m >= t
        k = torch.where(ok, t, -math.inf).argmax(-1, keepdim=True)
        ts = t.gather(-1, k)
        ms = m.gather(-1, k)
        i_gt = torch.searchsorted(cA_c, ts, right=True)   # A[i_gt:] > t*
        j_s = j_le.gather(-1, k)
        mo = region_mean(i_gt, j_s)
        # mu in [t*, next breakpoint]; h(t*) > 0 by rounding alone may leave the open
        # region empty (then mu = t*)
        nxt = torch.where(t > ts, t, math.inf).amin(-1, keepdim=True)
        mo = torch.minimum(torch.maximum(mo, ts), nxt)
        mu = torch.where((ms > ts) & (s - i_gt + j_s > 0), mo, ts)
        c = torch.stack([torch.minimum(cA, mu), torch.maximum(cB, mu)], -2).reshape(*lead, N)
        s *= 2
    return c


def _pad_pow2(x, value):
    n = x.shape[-1]
    N = 1 << max(n - 1, 0).bit_length()
    if N == n:
        return x
    return torch.cat([x, value.expand(*x.shape[:-1], N - n)], -1)


def _blocks(ls, c):
    """First and last rank of each entry's block: the runs of equal values of the isotonic
    regression ``c`` (a block holds one value), tied losses ``ls`` always in one run (they
    pool in exact arithmetic, or their blocks have one mean; ``c`` may split a tie by an
    ulp, which matters once ``2 n nu sigma`` is below the resolution of the losses)."""
    return _run_bounds((c[..., 1:] != c[..., :-1]) & (ls[..., 1:] != ls[..., :-1]))


def _block_sums(first, last, x):
    """Sums over each entry's block (``first`` / ``last``: its first and last rank,
    :func:`_blocks`) of each tensor in the tuple ``x``. Each block is summed over its own
    entries only (not a difference of prefix sums: a block far down the row keeps the
    precision of its own entries), by a segmented inclusive scan of ``ceil(log2 n)`` fixed
    steps: deterministic on every device (no atomic ``scatter_add``: data-parallel ranks get
    the same bits), no host read."""
    n = first.shape[-1]
    ar = torch.arange(n, device=first.device)
    out = []
    for v in x:
        v = v.expand(first.shape)
        s = 1
        while s < n:  # v[i] = sum of v over [max(first[i], i - 2 s + 1), i]
            prev = torch.nn.functional.pad(v[..., :-s], (s, 0))
            v = v + torch.where(ar - s >= first, prev, 0.0)
            s *= 2
        out.append(v.gather(-1, last))
    return tuple(out)


def _kl_exponents(ls, nu, lw):
    """``(l - max l) / nu`` for the KL isotonic regression, each gap between consecutive
    sorted losses wider than ``G = max lw - min lw + log n + 1`` (``lw = log sigma`` over
    the spectrum's nonzero entries) narrowed to ``G``: no block crosses such a gap (every
    value left of it, the folded zero prefix included, lies below every value right of it),
    and within the runs between them the regression is translation equivariant, so the
    blocks are those of ``(l - max l) / nu``, whose values, ``|l| / nu`` large when ``nu`` is
    below the resolution of the losses, would drop ``lw`` (blocks pooled across gaps of
    ``1e15`` at ``nu = 1e-16``, stop 43). Without such a gap: ``(l - max l) / nu`` exactly."""
    n = ls.shape[-1]
    big = (lw.amax() - lw.amin()) + (math.log(n) + 1.0)  # (a tensor: nothing is read)
    g = (ls[..., 1:] - ls[..., :-1]) / nu
    last = _run_bounds(g > big)[1]  # last rank of each entry's run
    rest = torch.nn.functional.pad(_rev_cum(torch.minimum(g, big), False), (0, 1))
    return (ls - ls.gather(-1, last)) / nu - rest.gather(-1, last)


def _sorted_shift(ls, sigma, nu, div, z):
    """``q`` in sorted order for ``nu > 0`` (``ls`` sorted rows, float64).

    The isotonic regression finds the blocks; the weights come from each block's sums kept
    apart, as the numba ``_weights_sorted_ws`` keeps them: the losses relative to a reference
    loss inside the block (chi2: its first, KL: its last), the spectrum on its own. So
    nothing of the size of ``|l|`` is divided by ``nu`` and ``2 n nu sigma`` is never added
    to a loss (before stop 43, ``q = (d - c) / (2 n nu)`` with ``c`` the block mean of ``d -
    2 n nu sigma``: ``q`` summed to 0.0033 at ``nu = 1e-20`` on losses of scale 1).
    """
    n = ls.shape[-1]
    top = ls[..., -1:]
    d = ls - top  # <= 0: translation invariance, nothing of the size of |l| divided by nu
    if div == 0:  # chi2
        tnn = 2.0 * n * nu
        y = d - tnn * sigma
        big = y.amax(-1, keepdim=True)
        big = big + 1.0 + big.abs()
        c = isotonic(_pad_pow2(y, big))[..., :n]
        first, last = _blocks(ls, c)
        e = ls - ls.gather(-1, first)  # relative to the block's first loss
        se, ss = _block_sums(first, last, (e, sigma))
        cnt = (last + 1 - first).to(ls.dtype)
        return torch.clamp(ss / cnt + (e - se / cnt) / tnn, min=0.0)
    # KL: fold the zero-mass prefix (z leading zeros of sigma) into the first unit
    if z is None:
        raise ValueError("the KL shift needs a spectrum with a known zero prefix")
    lw = torch.log(sigma[z:])
    x = _kl_exponents(ls, nu, lw)
    la = torch.cat([torch.logsumexp(x[..., :z + 1], -1, keepdim=True), x[..., z + 1:]], -1)
    lw = lw.expand(la.shape)
    c0 = la - lw
    big = c0.amax(-1, keepdim=True)
    big = big + 1.0 + big.abs()
    m = la.shape[-1]
    c = isotonic(_pad_pow2(c0, big), _pad_pow2(lw, torch.zeros_like(big)))[..., :m]
    c = torch.cat([c[..., :1].expand(*c.shape[:-1], z + 1), c[..., 1:]], -1)
    first, last = _blocks(ls, c)
    e = (ls - ls.gather(-1, last)) / nu  # <= 0, 0 at the block's last (largest) loss
    se, ss = _block_sums(first, last, (torch.exp(e), sigma))  # se >= 1
    return torch.exp(e + torch.log(ss) - torch.log(se))


def _risk_sorted(ls, qs, nu, div):
    """``q.l - nu D(q)`` centred on the largest loss, clamped as the numba ``_risk_sorted``."""
    n = ls.shape[-1]
    top = ls[..., -1]
    d = ls - top.unsqueeze(-1)
    v = top + (qs * d).sum(-1)
    if nu == 0.0:
        return v
    if div == 0:
        s2 = ((qs - 1.0 / n) ** 2).sum(-1)  # (nu n overflows: nu (n s2), not inf * 0 = NaN)
        pen = nu * n * s2 if nu * n < math.inf else nu * (n * s2)
    else:
        pen = nu * torch.xlogy(qs, n * qs).sum(-1)
    v = v - pen
    lo = top + d.mean(-1)
    span = -d[..., 0]
    hi = lo + (span / nu) * span * 0.125
    tol = 1e-10 * (lo.abs() + span)
    return torch.where(v < lo - tol, lo, torch.where(v > hi + tol, hi, v))


def spectral_weights(l, sigma, nu, div, z=None, two_level=None):
    """``(value, q)`` of the spectral risk with shift for each row of ``l`` (float64, ``(...,
    b)``); ``sigma`` the float64 spectrum for ``b``; ``z`` its number of leading zeros (needed
    for the KL shift); ``two_level`` the ``z`` of a two-level spectrum for the selection form
    (``nu = 0`` only)."""
    if nu == 0.0 and two_level is not None:
        q = _select_two_level(l, sigma, two_level)
        return (q * l).sum(-1), q
    ls, order = torch.sort(l, dim=-1, stable=True)
    if nu == 0.0:
        qs = _sorted_nu0(ls, sigma)
    else:
        qs = _sorted_shift(ls, sigma, nu, div, z)
    val = _risk_sorted(ls, qs, nu, div)
    q = torch.empty_like(qs).scatter_(-1, order, qs)
    return val, q


def spectral_risk(l, risk, sigma=None):
    """``(value, q)`` for a riskopt spectral ``risk`` (float64 rows ``l``)."""
    n = l.shape[-1]
    if sigma is None:
        sigma = spectrum(risk, n, l.device)
    nu = float(risk.shift_cost)
    return spectral_weights(l, sigma, nu, risk.div_code, zero_prefix(risk, n),
                            two_level_zero_prefix(risk, n) if nu == 0.0 else None)


# ------------------------------------------------------------------------------ KL
def kl_penalised(l, lam, mask=None):
    """``(lam log mean exp(l / lam), softmax(l / lam))`` per row (float64); with ``mask``
    (boolean, ``l``'s shape) over the flagged entries of each row only (the others get
    ``q = 0``; no data-dependent shape: the masked X-risks on a device)."""
    if mask is None:
        c = l.amax(-1, keepdim=True)
        d = l - c
        z = zs = d / lam
        logn = math.log(l.shape[-1])
        zmin = z.amin(-1, keepdim=True)

        def mean(x):
            return x.mean(-1, keepdim=True)
    else:
        k = mask.sum(-1, keepdim=True).to(l.dtype)
        c = torch.where(mask, l, -math.inf).amax(-1, keepdim=True)
        d = torch.where(mask, l - c, 0.0)
        z = d / lam
        zs = torch.where(mask, z, -math.inf)
        logn = torch.log(k)
        zmin = torch.where(mask, z, math.inf).amin(-1, keepdim=True)

        def mean(x):
            return torch.where(mask, x, 0.0).sum(-1, keepdim=True) / k
    lse = torch.logsumexp(zs, -1, keepdim=True)
    q = torch.exp(zs - lse)
    lme = lse - logn
    near = torch.log1p(mean(torch.expm1(z)))  # lam >> range: no cancellation
    val = c + lam * torch.where(zmin > -0.5, near, lme)
    # lam > 1e8 x the range (d / lam may underflow): mean(d) + Var(d) / (2 lam)
    dm = mean(d)
    quad = c + dm + mean((d - dm) * ((d - dm) / lam)) / 2
    return torch.where(zmin > -1e-8, quad, val).squeeze(-1), q


def kl_constrained(l, radius, shift_cost=0.0, steps=40, early_exit=None):
    r"""``(value, q, lam)`` of :math:`\max_{KL(q\|1/b) \le \rho} q^\top l - \lambda_0 KL(q\|
    1/b)` per row, by the 1-D dual (see :func:`riskopt.objectives.kl_dro.kl_dro_weights`).

    The root ``a = 1/lambda`` of ``KL(softmax(a d)) = rho`` (``d = l - max l``) by ``steps``
    Newton steps safeguarded by bisection on the bracket ``(lo, hi)``, every row at once.
    ``early_exit`` (default: on for CPU tensors in eager mode, where reading a scalar costs
    no device synchronisation) stops once every row is converged, checked every 4 steps.
    """
    n = l.shape[-1]
    rho = float(radius)
    lam0 = float(shift_cost)
    logn = math.log(n)
    c = l.amax(-1, keepdim=True)
    d = l - c
    span = (-d.amin(-1, keepdim=True))
    unit = torch.where(span > 0, span, torch.ones_like(span))
    dn = d / unit  # range 1 (the root is solved for a * span)
    if early_exit is None:
        early_exit = l.device.type == "cpu" and not _compiling()

    def stats(a):
        x = a * dn
        lse = torch.logsumexp(x, -1, keepdim=True)
        q = torch.exp(x - lse)
        mu = (q * dn).sum(-1, keepdim=True)
        var = (q * (dn - mu) ** 2).sum(-1, keepdim=True)
        lme = lse - logn
        near = torch.log1p(torch.expm1(x).mean(-1, keepdim=True))
        lme = torch.where(x.amin(-1, keepdim=True) > -0.5, near, lme)
        return a * mu - lme, var, q, lme

    hi0 = math.inf if lam0 == 0.0 else 1.0 / lam0
    hi = torch.full_like(span, hi0) * unit
    lo = torch.zeros_like(span)
    var0 = (dn - dn.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True)
    a = torch.sqrt(2.0 * rho / var0.clamp(min=1e-300))
    a = torch.where(a < hi, a, 0.5 * hi)
    a = torch.where(torch.isfinite(a), a, torch.ones_like(a))
    for it in range(steps):
        kl, var, _, _ = stats(a)
        err = kl - rho
        hi = torch.where(err > 0, a, hi)
        lo = torch.where(err > 0, lo, a)
        step = a - err / (a * var)
        bis = torch.where(torch.isinf(hi), 2.0 * a, 0.5 * (lo + hi))
        good = (step > lo) & (step < hi) & torch.isfinite(step)
        done = err.abs() <= 1e-13 * max(1.0, rho)
        a = torch.where(done, a, torch.where(good, step, bis))
        if early_exit and it % 4 == 3 and bool(done.all()):
            break
    kl, _, q, lme = stats(a)
    lam = unit / a
    val = c + lam * lme + (lam - lam0) * rho
    # inactive constraint: KL(q_{1/lam0}) <= rho -> lam* = lam0 (penalised solution)
    k = (d == 0).sum(-1, keepdim=True).to(l.dtype)
    if lam0 > 0.0:
        v0, q0 = kl_penalised(l, lam0)
        kl0 = (torch.xlogy(q0, n * q0)).sum(-1, keepdim=True)
        inactive = kl0 <= rho
        val = torch.where(inactive, v0.unsqueeze(-1), val)
        q = torch.where(inactive, q0, q)
        lam = torch.where(inactive, torch.full_like(lam, lam0), lam)
    else:  # rho >= log(n / k): the max loss, q uniform on the argmax, lam* = 0
        maxed = rho >= torch.log(n / k)
        val = torch.where(maxed, c, val)
        q = torch.where(maxed, (d == 0).to(l.dtype) / k, q)
        lam = torch.where(maxed, torch.zeros_like(lam), lam)
    # all losses equal: the value is the loss, q uniform
    flat = span == 0
    val = torch.where(flat, c, val)
    q = torch.where(flat, torch.full_like(q, 1.0 / n), q)
    return val.squeeze(-1), q, lam.squeeze(-1)


# ------------------------------------------------------------------- group DRO
def cvar_present(means, present, alpha):
    """Weights of ``CVaR_alpha`` over the entries of ``means`` flagged ``present`` (absent
    ones get 0): the spectrum of ``CVaR(alpha)`` for ``k = present.sum()`` entries (a
    tensor: no read), by rank among the present, ties sharing their mean weight."""
    m = means.shape[-1]
    dt = means.dtype
    x = torch.where(present, means, -math.inf)  # absent first in the sort
    xs, order = torch.sort(x, dim=-1, stable=True)
    k = present.sum(-1, keepdim=True).to(dt)
    r = torch.arange(m, dtype=dt, device=means.device) - (m - k)  # rank among the present
    a = float(alpha)
    kk = k.clamp(min=1.0)
    sig = torch.where(r >= 0, torch.clamp(_cvar_cdf((r + 1) / kk, a) - _cvar_cdf(r / kk, a),
                                          min=0.0), 0.0)
    sig = torch.cummax(sig, dim=-1).values
    sig = sig / sig.sum(-1, keepdim=True)
    top = sig[..., -1:]
    sig = torch.where((sig - top).abs() <= 1e-9 * top, top, sig)
    sig = sig / sig.sum(-1, keepdim=True)
    qs = _sorted_nu0(xs, sig)
    return torch.empty_like(qs).scatter_(-1, order, qs)
