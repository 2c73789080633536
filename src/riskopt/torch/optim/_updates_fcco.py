r"""The tensor updates of the FCCO-family optimizers (:mod:`riskopt.torch.optim._updates`
describes the conventions): the MSVR tracking of the inner values and the moments of
SONEX / SONX / SOX (:mod:`riskopt.torch.optim.fcco`), ALEXR2's inner and outer steps, and
OOA's batch, group step and capped-simplex projection (:mod:`riskopt.torch.optim.ooa`),
with their NumPy / numba host paths on the CPU. Not part of the public API.
"""
import numpy
import torch
from torch.autograd.graph import increment_version

from . import outer as _outer
from ._updates import _foreach_momentum, _host

__all__ = []


# ---------------------------------------------------------------------------- FCCO
#: the table dtypes of the NumPy paths
_NP_FLOATS = (torch.float32, torch.float64)


def fcco_track_numpy(ut, st, i, now, prev, gamma, gamma_prime, outer, lam, s):
    """:func:`fcco_track` in NumPy on the tables' arrays ``ut`` / ``st`` (written in place;
    ``i`` the distinct indices, ``now`` / ``prev`` in ``ut``'s dtype, ``s`` a 0-d array or
    None): the same IEEE operations (bit for bit). Returns ``(u_I, y, value)`` as arrays,
    ``y`` and ``value`` None when the outer function has no NumPy code
    (``grad_value_numpy``, :mod:`riskopt.torch.optim.outer`)."""
    new = (1.0 - gamma) * ut[i] + gamma * now
    if prev is not None:
        new = new + gamma_prime * (now - prev)
    new = numpy.where(st[i], new, now)
    ut[i], st[i] = new, True
    host = getattr(outer, "grad_value_numpy", None)   # (None: the torch code runs)
    if host is None:
        return new, None, None
    y, value = host(new, lam, s)
    return new, y, value


def fcco_track_host(ut, st, i, now, prev, gamma, gamma_prime, outer, lam, s):
    """:func:`fcco_track_numpy` for the optimizers' CPU path: ``(y, sum of the outer values
    in float64, in order)``. A built-in outer function runs in one numba call
    (:mod:`riskopt._kernels.group_host`, the same operations: bit for bit); another runs its
    ``grad_value_numpy``."""
    code = _outer.kernel_code(outer)
    if code is None:
        _, y, value = fcco_track_numpy(ut, st, i, now, prev, gamma, gamma_prime, outer, lam, s)
        return y, sum(value.tolist())
    lam = _outer._lam_host(lam)
    from ..._kernels.group_host import track_outer    # (compiled at the first use: cached)
    kind, rho, kappa, half_rho, r = code
    par = numpy.array((1.0 - gamma, gamma, gamma_prime, lam, rho, kappa, half_rho, r,
                       0.0 if s is None else s), dtype=ut.dtype)
    y = numpy.empty_like(now)
    total = track_outer(ut, st, i, now, now if prev is None else prev, par,
                        kind + 5 * (lam > 0) + 10 * (prev is not None), y)
    return y, total


def fcco_track(u_tab, seen_tab, I, now, prev, gamma, gamma_prime, outer, lam, s):
    """The MSVR update of the tracked inner values ``u_i`` of the distinct indices ``I``
    (``u_i`` set to the estimate at its first visit), written into the tables; returns
    ``(u_I, y = outer gradient, mean outer value)`` (with the threshold ``s`` of
    GroupCVaR when given)."""
    if _host(u_tab, I, now) and u_tab.dtype == now.dtype and u_tab.dtype in _NP_FLOATS and (
            prev is None or prev.dtype == now.dtype):
        # eager on the CPU: the table's rows in NumPy on its memory (the same IEEE
        # operations on a few groups: bit for bit; fewer small tensor ops)
        new, y, value = fcco_track_numpy(
            u_tab.numpy(), seen_tab.numpy(), I.numpy(), now.numpy(),
            None if prev is None else prev.numpy(), gamma, gamma_prime, outer, lam,
            None if s is None else s.numpy())
        if y is not None:
            return torch.from_numpy(new), torch.from_numpy(y), torch.from_numpy(value).mean()
        new = torch.from_numpy(new)
    else:
        u, seen = u_tab.index_select(0, I), seen_tab.index_select(0, I)
        new = (1.0 - gamma) * u + gamma * now
        if prev is not None:
            new = new + gamma_prime * (now - prev)
        new = torch.where(seen, new, now)
        u_tab.index_copy_(0, I, new)
        seen_tab.index_copy_(0, I, torch.ones_like(seen))
    if s is not None:
        return new, outer.grad(new, lam, s), outer.value(new, s).mean()
    return new, outer.grad(new, lam), outer.value(new).mean()


def _adam_step(p, v, m2, G, lr, c1, c2, betas2, eps):
    m2.mul_(betas2).addcmul_(G, G, value=1.0 - betas2)
    p.sub_(lr * (v / c1) / (torch.sqrt(m2 / c2) + eps))


def fcco_moments(params, prevs, grads, vs, m2s, lr, beta, wd, adam, c1, c2, betas2, eps):
    """SONEX's step for one parameter group: the previous iterate set to the parameters
    (``prevs``: all of the group's; None: not kept, SONX / SOX), then for those with a
    gradient (``grads`` None elsewhere) ``v <- (1 - beta) v + beta (G + wd w)`` and
    ``w -= lr v`` or the Adam-type step (``c1``, ``c2``: the bias corrections)."""
    if prevs is not None:
        torch._foreach_copy_(prevs, params)
    live = [(p, g, v, m2) for p, g, v, m2 in zip(params, grads, vs, m2s) if g is not None]
    if not live:
        return
    P = [t[0] for t in live]
    G = [t[1] + wd * t[0] for t in live] if wd else [t[1] for t in live]
    V = [t[2] for t in live]
    _foreach_momentum(V, G, beta)
    if adam:
        for (p, _, v, m2), g in zip(live, G):
            _adam_step(p, v, m2, g, lr, c1, c2, betas2, eps)
    else:
        torch._foreach_add_(P, V, alpha=-lr)


def alexr2_inner(params, prevs, anchors, grads, eta, nu, wd):
    """ALEXR2's inner step ``z <- (z / eta + w_t / nu - G) / (1 / eta + 1 / nu)`` (``G`` the
    gradient, zero where None, plus ``wd z``); the previous iterate set to ``z``."""
    a = 1.0 / eta + 1.0 / nu
    if not params:
        return
    torch._foreach_copy_(prevs, params)
    G = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
    if wd:
        G = torch._foreach_add(G, torch._foreach_mul(params, wd))
    z = torch._foreach_div(params, eta)         # (p / eta + w / nu - G) / a, one call each
    torch._foreach_add_(z, torch._foreach_div(anchors, nu))
    torch._foreach_sub_(z, G)
    torch._foreach_div_(z, a)
    torch._foreach_copy_(params, z)


def alexr2_outer(params, prevs, anchors, vs, m2s, lr, beta, nu, adam, c1, c2, betas2, eps):
    """ALEXR2's outer step: ``G_t = (w_t - z_K) / nu``, the momentum / Adam-type step from
    the anchor, and the anchor and the previous iterate set to ``w_{t+1}``."""
    if not params:
        return
    Gt = torch._foreach_sub(anchors, params)
    torch._foreach_div_(Gt, nu)
    torch._foreach_copy_(params, anchors)
    torch._foreach_mul_(vs, 1.0 - beta)
    torch._foreach_add_(vs, Gt, alpha=beta)
    if adam:
        for p, v, m2, g in zip(params, vs, m2s, Gt):
            _adam_step(p, v, m2, g, lr, c1, c2, betas2, eps)
    else:
        torch._foreach_sub_(params, vs, alpha=lr)
    torch._foreach_copy_(anchors, params)
    torch._foreach_copy_(prevs, params)


# ---------------------------------------------------------------------------- OOA
def _take(t, j):
    """``t[j]`` for a 0-d index tensor ``j`` (a gather: no host read)."""
    return t.gather(0, j.reshape(1)).reshape(())


def capped_simplex(x, cap):
    """The projection of :func:`riskopt.torch.optim.project_capped_simplex` (``x`` 1-D,
    non-empty, ``cap * len(x) >= 1``, checked by the caller)."""
    m = x.numel()
    xd = x.to(torch.float64)

    def pos_part_sum(tau, a_sorted, suffix):
        # sum_g [a_g - tau]_+ for every tau, a_sorted ascending, suffix[j] = sum a_sorted[j:]
        j = torch.searchsorted(a_sorted, tau, right=True)
        return suffix[j] - (m - j).to(tau.dtype) * tau

    a = torch.sort(xd).values
    suffix = torch.cat([torch.flip(torch.cumsum(torch.flip(a, [0]), 0), [0]),
                        a.new_zeros(1)])
    bp = torch.sort(torch.cat([a, a - cap])).values
    phi = pos_part_sum(bp, a, suffix) - pos_part_sum(bp, a - cap, suffix - cap * torch.arange(
        m, -1, -1, dtype=xd.dtype, device=xd.device))
    j = torch.clamp((phi >= 1.0).sum() - 1, min=0)
    k = torch.clamp(j + 1, max=2 * m - 1)
    lo, hi, plo, phi_hi = _take(bp, j), _take(bp, k), _take(phi, j), _take(phi, k)
    denom = plo - phi_hi
    tau = torch.where(denom > 0, lo + (plo - 1.0) * (hi - lo) / torch.where(
        denom > 0, denom, torch.ones_like(denom)), lo)
    return torch.clamp(xd - tau, min=0.0, max=cap).to(x.dtype)


def cvar_of(L, cap):
    """:math:`\\max\\{\\sum_g p_g L_g : p \\in \\Delta,\\ p_g \\le \\mathrm{cap}\\}` by one
    sort (see :func:`riskopt.torch.optim.ooa._cvar`)."""
    top = torch.sort(L.to(torch.float64), descending=True).values
    j = torch.arange(top.numel(), dtype=torch.float64, device=top.device)
    return (torch.clamp(1.0 - j * cap, min=0.0, max=cap) * top).sum()


def ooa_batch(p_tab, I, L, cap, n_over_k):
    """OOA's batch: ``(tracked CVaR of the group losses, the surrogate's weights)`` (the
    CVaR a Python float on the host path, a 0-d tensor otherwise)."""
    if _host(p_tab, I, L) and L.dtype == torch.float64:
        # (one numba call: the NumPy code's operations; the terms summed by NumPy, in its order)
        from ..._kernels.group_host import ooa_terms
        w = numpy.empty(I.shape[0])
        est = float(ooa_terms(L.numpy(), float(cap), p_tab.numpy(), I.numpy(),
                              float(n_over_k), w).sum())                 # (a float: _track)
        return est, torch.from_numpy(w)
    return cvar_of(L, cap), p_tab.index_select(0, I) * n_over_k


def _capped_simplex_host(x, cap):
    """:func:`capped_simplex` in NumPy (float64 ``x``; the same operations): the statement
    of the step's numba kernel (:func:`riskopt._kernels.group_host.ooa_project`), kept as
    the tests' twin of both."""
    m = x.size
    a = numpy.sort(x)
    suffix = numpy.concatenate([numpy.cumsum(a[::-1])[::-1], [0.0]])
    bp = numpy.sort(numpy.concatenate([a, a - cap]))

    def pos_part_sum(tau, a_sorted, suf):
        j = numpy.searchsorted(a_sorted, tau, side="right")
        return suf[j] - (m - j).astype(numpy.float64) * tau

    phi = pos_part_sum(bp, a, suffix) - pos_part_sum(
        bp, a - cap, suffix - cap * numpy.arange(m, -1, -1, dtype=numpy.float64))
    j = max(int((phi >= 1.0).sum()) - 1, 0)
    k = min(j + 1, 2 * m - 1)
    lo, hi, plo, phi_hi = bp[j], bp[k], phi[j], phi[k]
    denom = plo - phi_hi
    tau = lo + (plo - 1.0) * (hi - lo) / denom if denom > 0 else lo
    return numpy.clip(x - tau, 0.0, cap)


def ooa_update(groups, table, idx, L, dual_coef, cap):
    """OOA's step: SGD on every parameter group (``(params, grads, lr, wd)``), then the
    projected ascent step ``p <- Proj(p + dual_coef L e_I)`` of the group weights."""
    for params, grads, lr, wd in groups:
        if params:
            G = [g + wd * p for p, g in zip(params, grads)] if wd else grads
            torch._foreach_add_(params, G, alpha=-lr)
    if _host(table, idx, L) and table.dtype == L.dtype == torch.float64:
        from ..._kernels.group_host import ooa_project     # (_capped_simplex_host's maths)
        ooa_project(table.numpy(), idx.numpy(), L.numpy(), float(dual_coef), float(cap))
        increment_version(table)          # (written behind autograd's back, as copy_ counts)
        return
    x = table.clone().index_add_(0, idx, dual_coef * L)
    table.copy_(capped_simplex(x, cap))
