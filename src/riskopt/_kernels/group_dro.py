"""Group DRO on the host in numba (the CPU path of :class:`riskopt.torch.GroupDROLoss`):
group sums and counts with the range / finiteness checks in one pass, the online
exponentiated-gradient update of the group weights (Sagawa et al., ICLR 2020, Algorithm 1)
in place, and the per-sample gradient weights ``q_g / N_g`` with the risk ``sum_k q_k L_k``.
A handful of NumPy calls on ``m``-element arrays cost more than these loops (each NumPy call
is a microsecond or more)."""
import math

from numba import njit

from .losses import _exp_normalise


@njit(cache=True)
def group_means(losses, groups, means, counts):
    """Writes the group means (0 for an absent group) and counts; returns 0, 1 for a group
    id out of ``[0, m)`` (nothing else is valid then) or 2 for a non-finite group sum."""
    m = means.shape[0]
    for k in range(m):
        means[k] = 0.0
        counts[k] = 0.0
    for i in range(losses.shape[0]):
        k = groups[i]
        if k < 0 or k >= m:
            return 1
        means[k] += losses[i]
        counts[k] += 1.0
    code = 0
    for k in range(m):
        if not math.isfinite(means[k]):
            code = 2
        if counts[k] > 0.0:
            means[k] /= counts[k]
    return code


@njit(cache=True)
def online_update(weights, means, adjustment, step_size):
    """``q_k <- q_k exp(eta (L_k + C_k)) / sum_j q_j exp(eta (L_j + C_j))`` in place (in
    log space, shifted by the largest logit; a zero weight stays zero)."""
    m = weights.shape[0]
    top = -math.inf
    for k in range(m):
        lg = math.log(weights[k]) if weights[k] > 0.0 else -math.inf
        lg += step_size * (means[k] + adjustment[k])
        weights[k] = lg
        if lg > top:
            top = lg
    _exp_normalise(weights, top, weights)


@njit(cache=True)
def sample_weights(q, means, counts, groups, w):
    """Writes ``w_i = q_{g_i} / N_{g_i}``; returns the risk ``sum_k q_k L_k``."""
    for i in range(groups.shape[0]):
        k = groups[i]
        w[i] = q[k] / counts[k]
    v = 0.0
    for k in range(q.shape[0]):
        v += q[k] * means[k]
    return v
