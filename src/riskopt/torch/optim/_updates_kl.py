r"""The tensor updates of the KL-DRO optimizers (:mod:`riskopt.torch.optim._updates`
describes the conventions): SCDRO's batch statistics and step
(:class:`~riskopt.torch.optim.SCDRO`), ASCDRO's STORM estimators and step
(:class:`~riskopt.torch.optim.ASCDRO`, RASCDRO, RECOVER), each with its NumPy /
Python-float twin (``*_host``) for the eager CPU path, and PG-SMD2's weights, step and
KL-ball projection (:class:`~riskopt.torch.optim.PGSMD2`). Not part of the public API.
"""
import math

import numpy
import torch
from torch._higher_order_ops.while_loop import while_loop
from torch.autograd.graph import increment_version

from ._updates import _foreach_momentum, _host

__all__ = []


# ---------------------------------------------------------------------------- SCDRO
def scdro_batch(l64, lam, log_s, loss_max, log_b, c_old, c_new, started, radius, shift_cost):
    """SCDRO's batch statistics: ``(lo, top, loss_max, log s, w, d_lambda, tracked)``:
    the batch's range, the running largest loss, the moving average ``log s`` (``c_old =
    log(1 - beta)``, ``c_new = log beta``), the surrogate's weights, the ``lambda``-derivative
    and the batch's dual value at ``lambda`` (what the guard tracks)."""
    lo, top = torch.aminmax(l64)
    loss_max = torch.maximum(loss_max, top)
    a = l64 / lam
    log_g = torch.logsumexp(a, 0) - log_b
    log_s = torch.logaddexp(log_s + c_old, log_g + c_new) if started else log_g
    w = torch.exp(a - log_s) / a.shape[0]
    g_lam = -(w * l64).sum() / lam + log_s + radius
    tracked = lam * log_g + (lam - shift_cost) * radius
    return lo, top, loss_max, log_s, w, g_lam, tracked


def scdro_batch_host(l, lam, log_s, loss_max, log_b, c_old, c_new, started, radius,
                     shift_cost):
    """:func:`scdro_batch` eager on the CPU: NumPy on the losses ``l`` (a float64 array),
    Python floats for the scalars (``lam``, ``log_s``, ``loss_max``; a 0-d tensor op costs
    more in dispatch than its arithmetic). The same operations (the scalars' bit for bit;
    ``exp`` / ``log`` / the sums of NumPy, not ATen: the last bits may differ). Returns
    the same tuple, of Python floats and the NumPy weights."""
    with numpy.errstate(all="ignore"):
        lo, top = float(l.min()), float(l.max())
        loss_max = _fmax(loss_max, top)
        a = l / lam
        m = float(a.max())
        m0 = m if math.isfinite(m) else 0.0        # (torch.logsumexp's shift)
        log_g = float(numpy.log(numpy.exp(a - m0).sum())) + m0 - log_b
        log_s = float(numpy.logaddexp(log_s + c_old, log_g + c_new)) if started else log_g
        w = numpy.exp(a - log_s) / a.shape[0]
        g_lam = -float((w * l).sum()) / lam + log_s + radius
    tracked = lam * log_g + (lam - shift_cost) * radius
    return lo, top, loss_max, log_s, w, g_lam, tracked


def _fmax(a, b):
    """``torch.maximum`` of two floats (a NaN wins)."""
    return a if a != a or a >= b else b


def _fmin(a, b):
    """``torch.minimum`` of two floats (a NaN wins)."""
    return a if a != a or a <= b else b


def scdro_lambda_host(u, g_lam, lam, loss_max, lr, beta, mu, started, lam_lo, lam_hi, radius):
    """The scalar half of :func:`scdro_update` in Python floats (the same IEEE operations in
    the same order: bit for bit): ``(u, lambda)``."""
    u = (1.0 - beta) * u + beta * g_lam if started else g_lam
    lam = _fmax(lam - lr * (u + mu * lam if mu else u), lam_lo)
    if lam_hi is None:      # Lemma 1 with C = the largest loss met so far
        return u, _fmin(lam, _fmax(lam_lo + _fmax(loss_max, 0.0) / radius, lam_lo))
    return u, _fmin(lam, lam_hi)


def scdro_params(params, vs, moving_vs, moving_grads, lr, beta, mu, max_norm):
    """The parameters' half of :func:`scdro_update`: the moving averages ``v`` (of
    ``moving_*``) and the projected step (``max_norm``: onto the ball)."""
    if moving_vs:
        _foreach_momentum(moving_vs, moving_grads, beta)
    steps = [v + mu * p for v, p in zip(vs, params)] if mu else vs
    if params:
        torch._foreach_add_(params, steps, alpha=-lr)
    if max_norm is not None and params:
        norm = torch.sqrt(sum((p.double() ** 2).sum() for p in params))
        factor = torch.where(norm > max_norm, max_norm / norm, torch.ones_like(norm))
        for p in params:
            p.mul_(factor)


def scdro_update(params, vs, moving_vs, moving_grads, u, g_lam, lam, loss_max, lr, beta, mu,
                 max_norm, started, lam_lo, lam_hi, radius):
    """SCDRO's step: the moving averages ``v`` (of ``moving_*``) and ``u``, the projected step
    of the parameters (``max_norm``: onto the ball) and of ``lambda`` (``lam_hi=None``: the
    bound of Lemma 1 from the largest loss met). Returns ``(u, lambda)``."""
    scdro_params(params, vs, moving_vs, moving_grads, lr, beta, mu, max_norm)
    u = (1.0 - beta) * u + beta * g_lam if started else g_lam.clone()
    lam = (lam - lr * (u + mu * lam if mu else u)).clamp(min=lam_lo)
    if lam_hi is None:      # Lemma 1 with C = the largest loss met so far
        lam_hi = (lam_lo + loss_max.clamp(min=0.0) / radius).clamp(min=lam_lo)
        return u, torch.minimum(lam, lam_hi)
    return u, lam.clamp(max=lam_hi)


# ---------------------------------------------------------------------------- ASCDRO
#: ASCDRO's estimators ``s``, ``u``, ``v`` are kept scaled by ``exp(-m)``; a step rescales
#: them to its batch's largest ``l / lambda`` at the two iterates, ``M``, by ``exp(m - M)``.
#: Where the rescaled ``s`` exceeds ``exp(stale)`` (``m - M + log s > stale``), the
#: estimators are *stale*: the batch's largest term weighs less than ``exp(-stale)`` against
#: them (an earlier batch's largest loss at a small ``lambda``, where ``exp(l / lambda)`` is
#: heavy-tailed), their STORM correction is a difference of numbers that carry the earlier
#: batches alone, and ``s`` overflows (before: the rescale clamped at ``exp(600)``, a wrong
#: scale, then ``inf``, and NaN parameters a step later; ASCDRO from ``lambda``'s floor on
#: the table problem at lr 0.001): they restart on the batch. 600 for float64 estimators of
#: ``v / s`` (the clamp; ``log(float64 max) = 709.8``); ASCDRO passes ``_STALE32`` when
#: a parameter's estimator is float32 (``s`` is cast to it; ``log(float32 max) = 88.7``).
_STALE = 600.0
_STALE32 = 60.0


def ascdro_batch(l64, lp64, lam, lamp, s, u, m, b, log_b, beta, started, rho, shift_cost,
                 stale=_STALE):
    """ASCDRO's STORM estimators on the batch (scaled by ``exp(-m)``): ``(s_old, s, u, m,
    coef, coef_prev, restart, tracked)``. ``restart`` (a 0-d bool tensor): the estimate of
    ``g`` is invalid (``s < beta g_B``, or stale: ``s`` above ``exp(stale)`` in the batch's
    scale, see ``_STALE``) and the estimators restart on this batch (then
    ``coef_prev`` is zero)."""
    a = l64 / lam
    M = a.max()
    if started:
        ap = lp64 / lamp
        M = torch.maximum(M, ap.max())
        old = (m - M) + torch.log(s) > stale       # (s <= 0: False; restarts below)
        scale = torch.exp(torch.clamp(m - M, max=600.0))
        s, u = s * scale, u * scale
    s_old = s                  # in the new scale: the stored v / s needs no rescaling
    e = torch.exp(a - M) / b
    sg, sl = e.sum(), -(e * l64).sum() / lam ** 2
    coef, coef_p = e / lam, None
    if started:
        ep = torch.exp(ap - M) / b
        sgp, slp = ep.sum(), -(ep * lp64).sum() / lamp ** 2
        s = sg + (1 - beta) * (s - sgp)
        u = sl + (1 - beta) * (u - slp)
        coef_p = ep / lamp
    else:
        s, u = sg, sl
    restart = ~((sg > 0) & (s >= beta * sg))
    if started:
        restart = restart | old
    log_g = torch.logsumexp(a, 0) - log_b       # this batch, at lambda_t
    tracked = lam * log_g + (lam - shift_cost) * rho
    if _host(l64) and not bool(restart):   # eager on the CPU (a host read is free there):
        # the restart's estimators only when it happens; the same numbers as the branch-free
        # code below, whose torch.where keeps the other operand
        return s_old, s, u, M, coef, coef_p, restart, tracked
    M0 = a.max()               # the restart: the estimators on this batch alone
    e0 = torch.exp(a - M0) / b
    s = torch.where(restart, e0.sum(), s)
    u = torch.where(restart, -(e0 * l64).sum() / lam ** 2, u)
    coef = torch.where(restart, e0 / lam, coef)
    m = torch.where(restart, M0, M)
    if coef_p is not None:
        coef_p = torch.where(restart, torch.zeros_like(coef_p), coef_p)
    return s_old, s, u, m, coef, coef_p, restart, tracked


def ascdro_batch_host(l, lp, lam, lamp, s, u, m, b, log_b, beta, started, rho, shift_cost,
                      stale=_STALE):
    """:func:`ascdro_batch` eager on the CPU: NumPy on the losses ``l`` / ``lp`` (float64
    arrays; ``lp`` None before the start), Python floats for the scalars; the restart's
    estimators only when it happens. The same quantities (the ``1 / b`` applied to the sums
    and as one division of the weights, ``sum e l`` as one dot product, ``exp`` / ``log`` /
    sums NumPy's: equal to rounding). Returns the same tuple, of Python floats (``restart``
    a bool) and the NumPy coefficients."""
    lam, lamp = numpy.float64(lam), numpy.float64(lamp)     # (IEEE: x / 0 is inf, no raise)
    with numpy.errstate(all="ignore"):
        a = l / lam
        amax = float(a.max())
        M = amax
        if started:
            ap = lp / lamp
            M = _fmax(M, float(ap.max()))
            old = s > 0 and (m - M) + math.log(s) > stale
            scale = math.exp(_fmin(m - M, 600.0))
            s, u = s * scale, u * scale
        s_old = s
        e = numpy.exp(a - M)                  # (times 1 / b in the sums and weights)
        sg, sl = float(e.sum()) / b, -float(e @ l) / b / lam ** 2
        coef, coef_p = e / (b * lam), None
        if started:
            ep = numpy.exp(ap - M)
            sgp, slp = float(ep.sum()) / b, -float(ep @ lp) / b / lamp ** 2
            s = sg + (1 - beta) * (s - sgp)
            u = sl + (1 - beta) * (u - slp)
            coef_p = ep / (b * lamp)
        else:
            s, u = sg, sl
        restart = (started and old) or not (sg > 0 and s >= beta * sg)
        # this batch's log-mean-exp at lambda_t (torch.logsumexp's shift: the largest term)
        e0 = e if M == amax else numpy.exp(a - amax)      # shifted by this batch's max
        if math.isfinite(amax):
            log_g = math.log(float(e0.sum())) + amax - log_b
        else:
            log_g = float(numpy.log(numpy.exp(a).sum())) - log_b
        if restart:          # the estimators on this batch alone
            s, u = float(e0.sum()) / b, -float(e0 @ l) / b / lam ** 2
            coef, m = e0 / (b * lam), amax
            if coef_p is not None:
                coef_p = numpy.zeros_like(coef_p)
        else:
            m = M
        tracked = lam * log_g + (lam - shift_cost) * rho
    return (float(s_old), float(s), float(u), float(m), coef, coef_p, bool(restart),
            float(tracked))


def ascdro_update(params, prevs, grads, prev_grads, voss, s_old, s, u, m, lam, lr, beta, mu,
                  restart, started, rho, lam_lo, lam_hi):
    """ASCDRO's step: the estimator ``v / s`` of every parameter with a gradient (STORM, or
    the plain gradient at a restart), the previous iterate set to the parameters, the step
    ``w -= lr (lambda v / s + mu w)`` and the projected step of ``lambda``
    (``lam_hi <= lam_lo``: ``lambda`` fixed). Returns ``(new v / s list, lambda)``."""
    live = [i for i, g in enumerate(grads) if g is not None]
    dts = {params[i].dtype for i in live}
    if len(dts) == 1 and dts <= {torch.float32, torch.float64}:
        return _ascdro_update_foreach(params, prevs, grads, prev_grads, voss, s_old, s, u,
                                      m, lam, lr, beta, mu, restart, started, rho, lam_lo,
                                      lam_hi, live, dts.pop())
    new_voss = []
    for p, g, gp, vos in zip(params, grads, prev_grads, voss):
        if g is None:
            new_voss.append(None)
            continue
        wdt = torch.promote_types(p.dtype, torch.float32)
        g = g.to(wdt)
        v = g
        if started and vos is not None:
            gp = torch.zeros_like(g) if gp is None else gp.to(wdt)
            v = torch.where(restart, g, g + (1 - beta) * (vos * s_old.to(wdt) - gp))
        new_voss.append(v / s.to(wdt))
    zl = lam * u / s + torch.log(s) + m + rho
    torch._foreach_copy_(prevs, params)      # the previous iterate
    for p, vos in zip(params, new_voss):
        if vos is not None:
            step = (lam.to(vos.dtype) * vos).to(p.dtype)
            p.add_(step + mu * p if mu else step, alpha=-lr)
    if lam_hi > lam_lo:
        lam = (lam - lr * (zl + mu * lam)).clamp(lam_lo, lam_hi)
    return new_voss, lam


def _ascdro_update_foreach(params, prevs, grads, prev_grads, voss, s_old, s, u, m, lam, lr,
                           beta, mu, restart, started, rho, lam_lo, lam_hi, live, dt):
    """:func:`ascdro_update` when every parameter with a gradient has the one dtype ``dt``
    (float32 or float64, the estimator's own): the same operations, in the same order, one
    ``torch._foreach_*`` call each over the parameters (the ``torch.where`` of the restart
    per parameter)."""
    G = [grads[i] for i in live]
    V = G
    storm = [i for i in live if voss[i] is not None] if started else []
    if storm:
        keep = [j for j, i in enumerate(live) if voss[i] is not None]
        T = torch._foreach_mul([voss[i] for i in storm], s_old.to(dt))
        gps = [prev_grads[i] for i in storm]
        if any(gp is not None for gp in gps):
            torch._foreach_sub_(T, [torch.zeros_like(G[j]) if gp is None else gp
                                    for j, gp in zip(keep, gps)])
        torch._foreach_mul_(T, 1 - beta)
        torch._foreach_add_(T, [G[j] for j in keep])
        V = list(G)
        for j, t in zip(keep, T):
            V[j] = torch.where(restart, G[j], t)
    V = torch._foreach_div(V, s.to(dt))
    new_voss = [None] * len(params)
    for i, v in zip(live, V):
        new_voss[i] = v
    zl = lam * u / s + torch.log(s) + m + rho
    torch._foreach_copy_(prevs, params)      # the previous iterate
    if live:
        P = [params[i] for i in live]
        steps = torch._foreach_mul(V, lam.to(dt))
        if mu:
            torch._foreach_add_(steps, torch._foreach_mul(P, mu))
        torch._foreach_add_(P, steps, alpha=-lr)
    if lam_hi > lam_lo:
        lam = (lam - lr * (zl + mu * lam)).clamp(lam_lo, lam_hi)
    return new_voss, lam


def ascdro_update_host(params, prevs, grads, prev_grads, voss, s_old, s, u, m, lam, lr, beta,
                       mu, restart, started, rho, lam_lo, lam_hi):
    """:func:`ascdro_update` eager on the CPU, the scalars as Python floats and ``restart`` a
    bool, when every parameter with a gradient is float32 or float64 (the estimator's own
    dtype; otherwise None: the tensor code): the same ``torch._foreach_*``
    arithmetic on the parameters (a Python scalar is rounded to their dtype as the tensor
    code's ``.to`` rounds it: bit for bit), the estimators ``v / s`` updated in place, no
    ``torch.where``, and ``lambda``'s step in Python floats (``log`` is NumPy's, not ATen's:
    its last bit may differ)."""
    live = [i for i, g in enumerate(grads) if g is not None]
    if len({params[i].dtype for i in live} | {torch.float32, torch.float64}) != 2:
        return None
    G = [grads[i] for i in live]
    new_voss = [None] * len(params)
    if not live:
        V = []
    elif started and not restart and all(voss[i] is not None for i in live):
        V = [voss[i] for i in live]          # (the estimators of this optimizer's state)
        gps = [prev_grads[i] for i in live]
        if len({gp is None for gp in gps}) == 1:    # the usual step: NumPy, per tensor
            # (all None: under DDP ``.grad`` holds g - (1 - beta) g_prev already)
            lam = _storm_step_numpy([params[i] for i in live], [prevs[i] for i in live], G,
                                    gps, V, s_old, s, u, m, lam, lr, beta, mu, rho, lam_lo,
                                    lam_hi)
            for i, v in zip(live, V):
                new_voss[i] = v
            for i, (p, q) in enumerate(zip(params, prevs)):     # (no gradient: copy only)
                if grads[i] is None:
                    q.detach().copy_(p.detach())
            return new_voss, lam
        torch._foreach_mul_(V, s_old)
        gps = [prev_grads[i] for i in live]
        if any(gp is not None for gp in gps):
            torch._foreach_sub_(V, [torch.zeros_like(G[j]) if gp is None else gp
                                    for j, gp in enumerate(gps)])
        torch._foreach_mul_(V, 1 - beta)
        torch._foreach_add_(V, G)
        torch._foreach_div_(V, s)
    else:                  # the start, a restart or a parameter without an estimator yet
        V = list(G)
        storm = [j for j, i in enumerate(live) if voss[i] is not None] if (
            started and not restart) else []
        if storm:
            T = torch._foreach_mul([voss[live[j]] for j in storm], s_old)
            gps = [prev_grads[live[j]] for j in storm]
            if any(gp is not None for gp in gps):
                torch._foreach_sub_(T, [torch.zeros_like(G[j]) if gp is None else gp
                                        for j, gp in zip(storm, gps)])
            torch._foreach_mul_(T, 1 - beta)
            torch._foreach_add_(T, [G[j] for j in storm])
            for j, t in zip(storm, T):
                V[j] = t
        V = torch._foreach_div(V, s)
    for i, v in zip(live, V):
        new_voss[i] = v
    torch._foreach_copy_(prevs, params)      # the previous iterate
    if live:
        P = [params[i] for i in live]
        steps = torch._foreach_mul(V, lam)
        if mu:
            torch._foreach_add_(steps, torch._foreach_mul(P, mu))
        torch._foreach_add_(P, steps, alpha=-lr)
    return new_voss, _ascdro_lambda_host(s, u, m, lam, lr, mu, rho, lam_lo, lam_hi)


def _ascdro_lambda_host(s, u, m, lam, lr, mu, rho, lam_lo, lam_hi):
    """ASCDRO's projected ``lambda`` step in Python floats (``lam_hi <= lam_lo``: fixed)."""
    if not lam_hi > lam_lo:
        return lam
    with numpy.errstate(all="ignore"):       # (IEEE: x / 0 is inf, no raise)
        zl = float(numpy.float64(lam) * u / s + numpy.log(s) + m + rho)
    return _fmin(_fmax(lam - lr * (zl + mu * lam), lam_lo), lam_hi)


def _storm_step_numpy(P, Q, G, GP, V, s_old, s, u, m, lam, lr, beta, mu, rho, lam_lo,
                      lam_hi):
    """ASCDRO's usual step (STORM, every parameter with its estimator; ``GP`` all tensors
    or all None) in NumPy on the tensors' memory, one tensor at a time: ``v / s <- (g + (1 - beta)
    (v / s_old' - g_prev)) / s``, the previous iterate ``<- w``, ``w -= lr (lambda v / s + mu
    w)``. The tensor code's operations in its order, the scalars rounded to the parameters'
    dtype as it rounds them; ``torch.add(alpha=)`` may fuse its last multiply-add (one
    rounding) where NumPy rounds twice: the parameters may differ in their last bit.
    Returns the new ``lambda``."""
    for p, q, g, gp, v in zip(P, Q, G, GP, V):
        pn, vn = p.detach().numpy(), v.numpy()
        dt = pn.dtype.type
        numpy.multiply(vn, dt(s_old), out=vn)
        if gp is not None:
            numpy.subtract(vn, gp.numpy(), out=vn)
        numpy.multiply(vn, dt(1 - beta), out=vn)
        numpy.add(vn, g.numpy(), out=vn)
        numpy.divide(vn, dt(s), out=vn)
        numpy.copyto(q.detach().numpy(), pn)
        st = numpy.multiply(vn, dt(lam))
        if mu:
            numpy.add(st, numpy.multiply(pn, dt(mu)), out=st)
        numpy.multiply(st, dt(-lr), out=st)
        numpy.add(pn, st, out=pn)
    # (NumPy bypasses autograd's version counters: a graph that saved these tensors must
    # still refuse a backward after the step, as after torch's in-place ops)
    increment_version(P + Q + V)
    return _ascdro_lambda_host(s, u, m, lam, lr, mu, rho, lam_lo, lam_hi)


# ---------------------------------------------------------------------------- PG-SMD2
def kl_ball_log(logp, rho):
    """``log`` of the KL-Bregman projection of ``softmax(logp)`` on ``{KL(p||1/n) <= rho}``
    (``p ~ softmax(a logp)``, ``a`` in ``(0, 1]`` by safeguarded Newton on ``log KL``,
    stopping at ``|KL - rho| <= 1e-13 max(1, rho)`` or a bracket of relative width
    ``4e-16``, at most 200 steps: a ``while_loop`` under compile, no host read; eagerly on
    the CPU a host loop, :func:`_kl_ball_log_host`; eagerly elsewhere a fixed number of
    steps, :func:`_kl_ball_log_device`, no host read either); float64, on ``logp``'s
    device."""
    d = (logp - logp.max()).double()
    logn = math.log(logp.numel())
    tol = 1e-13 * max(1.0, rho)
    if not torch.compiler.is_compiling():
        if _host(d):
            return _kl_ball_log_host(d, logn, rho, tol)
        return _kl_ball_log_device(d, logn, rho)

    def stats(a):
        z = a * d
        lse = torch.logsumexp(z, 0)
        q = torch.exp(z - lse)
        mu = (q * d).sum()
        return a * mu - (lse - logn), (q * (d - mu) ** 2).sum(), lse

    one = torch.ones((), dtype=torch.float64, device=d.device)
    kl, var1, lse1 = stats(one)
    inside = kl <= rho
    # Newton on log KL(a) = log rho (KL(a) ~ a^2 var / 2 is far from linear in a: about 4
    # steps where Newton on KL takes 7), started by that step from a = 1 (stats known);
    # outside (0, 1): sqrt(2 rho / var) (the small-a model)
    a1 = 1.0 - torch.log(kl / rho) * kl / torch.where(var1 > 0, var1, one)
    var0 = d.var(unbiased=False)
    a0 = torch.where(var0 > 0, torch.sqrt(2.0 * rho / var0).clamp(max=0.5), 0.5 * one)
    a0 = torch.where(~inside & (var1 > 0) & (a1 > 0) & (a1 < 1), a1, a0)

    def cond(it, a, lo, hi, lse, stop):
        return (~stop) & (it < 200)

    def body(it, a, lo, hi, lse, stop):
        kl, var, lse = stats(a)
        err = kl - rho
        done = err.abs() <= tol
        up = err > 0             # (a NaN error moves lo, as the former host loop did)
        hi = torch.where(done | ~up, hi, a)
        lo = torch.where(done | up, lo, a)
        done = done | (hi - lo <= 4e-16 * hi)
        curv = a * var       # 0 once a underflows (losses of a diverging run)
        safe = torch.where(curv > 0, curv, one)
        # Newton on log KL where KL > 0, on KL otherwise
        step = torch.where(kl > 0, a - torch.log(kl.clamp(min=1e-300) / rho) * kl / safe,
                           a - err / safe)
        step = torch.where(curv > 0, step, torch.full_like(step, math.nan))
        nxt = torch.where((lo < step) & (step < hi), step, 0.5 * (lo + hi))
        return it + 1, torch.where(done, a, nxt), lo, hi, lse, done

    # (fresh tensors: a carried value must not alias the body's closures, for AOTAutograd)
    state = (torch.zeros((), dtype=torch.int64, device=d.device), a0, 0.0 * one, one.clone(),
             lse1, inside)
    _, a, _, _, lse, _ = while_loop(cond, body, state)
    return torch.where(inside, d - lse1, a * d - lse)


def _kl_ball_log_host(d, logn, rho, tol):
    """:func:`kl_ball_log` eagerly: the same safeguarded Newton steps, with the scalars (``a``,
    the bracket, the stopping rule) as Python numbers and one host read per step.

    A step's ``O(n)`` statistics are three tensor operations: ``e = exp(a d)`` (``d <= 0``
    with maximum 0, so no shift is needed and ``sum e >= 1``) and one matrix-vector product of
    ``(1, d, d^2)`` with ``e`` for the sums ``S0, S1, S2``: ``lse = log S0``, the mean
    ``mu = S1 / S0`` and the variance ``S2 / S0 - mu^2`` of ``d`` under ``softmax(a d)``
    (about 11 operations and four passes over ``d`` with ``logsumexp``, against 3 and two).
    The variance only scales the Newton step (the stopping rule uses ``lse`` and ``mu``).

    Where ``d^2`` overflows (``log p`` more than ``1e154`` apart: a diverging table) the
    variance is not finite; only there it is taken of ``d / R`` (``R = -min d``) and
    scaled back (:func:`_scaled_var`), so every other input keeps its numbers bit for bit."""
    moments = torch.stack([torch.ones_like(d), d, d * d])

    def stats(a):
        e = torch.exp(d * a)
        s0, s1, s2 = torch.mv(moments, e).tolist()
        lse, mu = math.log(s0), s1 / s0
        var = max(s2 / s0 - mu * mu, 0.0)
        if math.isfinite(var):
            curv = a * var       # the derivative of KL in a
        else:                    # (a R) var(d / R) R
            var, r = _scaled_var(d, e, s0)
            curv = (a * r) * (var * r)
        return a * mu - (lse - logn), curv, lse

    kl, curv1, lse1 = stats(1.0)
    if kl <= rho:
        return d - lse1
    a1 = 1.0 - math.log(kl / rho) * kl / (curv1 if curv1 > 0 else 1.0)
    if curv1 > 0 and 0.0 < a1 < 1.0:
        a = a1
    else:
        var0 = float(d.var(unbiased=False))
        if math.isinf(var0):     # d^2 overflows: sqrt(2 rho / var0) from d / R
            var0, r = _scaled_var(d, torch.ones_like(d), float(d.numel()))
            a = min(math.sqrt(2.0 * rho / var0) / r, 0.5)
        else:
            a = min(math.sqrt(2.0 * rho / var0), 0.5) if var0 > 0 else 0.5
    lo, hi = 0.0, 1.0
    for _ in range(200):
        kl, curv, lse = stats(a)
        err = kl - rho
        done = abs(err) <= tol
        up = err > 0             # (a NaN error moves lo, as the tensor loop does)
        if not done:
            if up:
                hi = a
            else:
                lo = a
        if done or hi - lo <= 4e-16 * hi:
            break
        # (curv: 0 once a underflows, losses of a diverging run)
        if curv > 0:         # Newton on log KL where KL > 0, on KL otherwise
            step = a - math.log(kl / rho) * kl / curv if kl > 0 else a - err / curv
        else:
            step = math.nan
        a = step if lo < step < hi else 0.5 * (lo + hi)
    return d * a - lse


def _scaled_var(d, e, s0):
    """Where ``d^2`` overflows: ``(var, R)``, ``var`` the variance of ``x = d / R`` (``R =
    -min d``, so ``x`` in ``[-1, 0]``) under the weights ``e / s0``, Python numbers; the
    variance of ``d`` is ``var R^2`` (itself possibly beyond a double: use it in products
    such as ``(a R) (var R)``). NaN where ``d`` is not finite."""
    r = -float(d.min())
    x = d / r
    m1, m2 = torch.mv(torch.stack([x, x * x]), e).tolist()
    m = m1 / s0
    return max(m2 / s0 - m * m, 0.0), r


#: :func:`_kl_ball_log_device`'s rounds, points a round and Newton steps: ``16**12`` sections
#: of at most 745 in ``log a`` (``a >= exp(-745)``, the smallest double), a bracket of
#: width ``3e-12`` in ``log a``, that three Newton steps take to the rounding
_ROUNDS, _POINTS, _POLISH = 12, 15, 3


def _kl_ball_log_device(d, logn, rho):
    """:func:`kl_ball_log` eagerly on a device, without a host read: the root ``a`` of
    ``KL(softmax(a d) || 1/n) = rho`` (``KL`` increasing in ``a``) bracketed in ``log a`` by a
    fixed number of rounds, each evaluating ``KL`` at ``_POINTS`` equispaced points of the
    bracket at once (a ``(_POINTS, n)`` matrix ``z = a d``: ``KL = S1 / S0 - log S0 + log n``
    with ``S0 = sum exp z``, ``S1 = sum z exp z``; ``d <= 0`` with maximum 0: no shift), then
    polished by ``_POLISH`` Newton steps on ``KL`` in ``a`` inside the bracket (``a KL'(a) =
    var(z)``: the step ``a (1 - err / var z)``, no ``d^2`` to overflow); the evaluated point
    nearest to ``rho`` is kept. The bracket starts at ``[sqrt(8 rho) / R, 1]``, ``R = -min
    d``: ``KL(a) = int_0^a s var_s(d) ds <= a^2 R^2 / 8`` (a variable in ``[-R, 0]`` has
    variance at most ``R^2 / 4``). A NaN ``KL`` counts as below ``rho`` (as in the host
    loop)."""
    one = torch.ones((), dtype=torch.float64, device=d.device)
    e = torch.exp(d)
    s0 = e.sum()
    lse1 = torch.log(s0)
    inside = (e * d).sum() / s0 - (lse1 - logn) <= rho
    lo = (0.5 * math.log(8.0 * rho) - torch.log(-d.min())).clamp(-745.0, 0.0)
    hi = 0.0 * one
    frac = torch.arange(1, _POINTS + 1, dtype=torch.float64, device=d.device) / (_POINTS + 1)
    for _ in range(_ROUNDS):
        t = lo + (hi - lo) * frac
        z = torch.exp(t)[:, None] * d
        e = torch.exp(z)
        s0 = e.sum(1)
        below = ~(z.mul_(e).sum(1) / s0 - (torch.log(s0) - logn) > rho)
        lo = torch.maximum(lo, torch.where(below, t, -math.inf).amax())
        hi = torch.minimum(hi, torch.where(below, math.inf, t).amin())
    lo, hi = torch.exp(lo), torch.exp(hi)
    a = lo
    best, best_a, best_lse = math.inf * one, a, lse1
    for _ in range(_POLISH):
        z = a * d
        e = torch.exp(z)
        s0, s1, s2 = torch.stack([e, e * z, e * z * z]).sum(1)
        lse, mu = torch.log(s0), s1 / s0
        err = mu - (lse - logn) - rho
        better = err.abs() < best
        best = torch.where(better, err.abs(), best)
        best_a, best_lse = torch.where(better, a, best_a), torch.where(better, lse, best_lse)
        up = err > 0
        hi = torch.where(up, torch.minimum(hi, a), hi)
        lo = torch.where(up, lo, torch.maximum(lo, a))
        var = (s2 / s0 - mu * mu).clamp(min=0.0)
        step = a * (1.0 - err / torch.where(var > 0, var, one))
        a = torch.where((var > 0) & (lo < step) & (step < hi), step, 0.5 * (lo + hi))
    return torch.where(inside, d - lse1, best_a * d - best_lse)


def pgsmd2_weights(logp, indices, n, b, dtype):
    """PG-SMD2's primal weights ``n p_i / b`` of the batch (in ``dtype``)."""
    return (n * torch.exp(logp.index_select(0, indices)) / b).to(dtype)


def pgsmd2_update(params, grads, centers, lrs, gamma, logp, indices, losses, n, b, dual_lr,
                  shift_cost, radius):
    """PG-SMD2's step: the primal step (with the proximal term ``(w - w_c) / gamma``), the
    mirror-ascent step of the dual table ``log p`` and its KL-ball projection. Returns the
    tracked objective (the batch's importance-weighted loss, before the dual step)."""
    if params and len(set(lrs)) == 1:      # one foreach call per operation
        if gamma is None:
            torch._foreach_add_(params, grads, alpha=-lrs[0])
        else:
            prox = torch._foreach_sub(params, centers)
            torch._foreach_div_(prox, gamma)
            torch._foreach_add_(prox, grads)
            torch._foreach_add_(params, prox, alpha=-lrs[0])
    else:
        for p, g, c, lr in zip(params, grads, centers, lrs):
            prox = (p - c) / gamma if gamma is not None else 0.0
            p.add_(g + prox, alpha=-lr)
    tracked = n / b * (torch.exp(logp.index_select(0, indices)) * losses).sum()
    logp.index_add_(0, indices, dual_lr * n * losses / b)
    if shift_cost > 0:
        logp.mul_(1.0 - dual_lr * shift_cost)
    logp.copy_(kl_ball_log(logp, radius))
    return tracked
