"""The generalised Hessian of the chi-square-smoothed spectral risk ``F_nu`` that the Newton
solver (:mod:`riskopt.objectives._newton`) steps with: the loss curvature ``X' diag(q l'') X``
plus the oracle's Jacobian term on the pools of the projection onto ``P(sigma)``. Split from
``_newton`` (which re-exports these names); the solver's stages, line search and certificate
stay there."""
import numpy as np

from .._kernels import gram as _kg
from .._kernels import oracles as _ko
from ._dual import (_box_spectrum, _from_base, _losses_derivs_z, _xt_sparse, curvature,
                    weighted_gram)

#: pools per block of the Hessian's pool term (memory: POOL_BLOCK x p doubles)
POOL_BLOCK = 1024


def _pools(ell, q, sigma, scale, srt=None):
    """Pools of the chi-square oracle's solution (sorted order). In the projection onto
    ``P(sigma)`` a singleton keeps ``q = sigma_rank`` and a pool ``B`` has ``q_i = l_i scale -
    mean_B(l scale) + mean_B(sigma)``: a pool is a maximal run of consecutive sorted samples off
    their ``sigma_rank`` with equal ``q_i - l_i scale`` (``scale = 1 / (2 nu n)``). Returns
    ``(order, starts, ends)`` of the pools of size >= 2; ``srt``: the oracle's sort of ``ell``
    (:func:`riskopt._kernels.oracles.risk_weights_sorted`), else ``ell`` is sorted here."""
    order, ls = _ko.sorted_order(ell) if srt is None else srt
    thr = 1e-9 * float(sigma[-1] - sigma[0])
    starts = np.empty(len(order) // 2 + 1, dtype=np.int64)
    ends = np.empty_like(starts)
    m = _kg.pool_runs(order, ls, np.ascontiguousarray(q, dtype=np.float64),
                      np.ascontiguousarray(sigma, dtype=np.float64), float(scale), thr, starts,
                      ends)
    return order, starts[:m].copy(), ends[:m].copy()


def _box_pool(q, sigma):
    """:func:`_pools` of a box spectrum (``P(sigma) = {lo <= q <= hi, sum q = 1}``: CVaR,
    ``MaxLoss``) without a sort: the chi-square weights strictly inside the box are one run of
    the sorted losses (``q`` increases with the loss) with equal ``q - l scale``, the others sit
    on their rank's ``sigma``. Returns ``(inside, [0], [len(inside)])`` (one pool, its members
    in index order), or no pool when fewer than 2 weights are inside."""
    thr = 1e-9 * float(sigma[-1] - sigma[0])
    inside = np.flatnonzero((q > sigma[0] + thr) & (q < sigma[-1] - thr))
    if len(inside) < 2:
        return inside, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return inside, np.zeros(1, dtype=np.int64), np.full(1, len(inside), dtype=np.int64)


def _pool_members(order, starts, ends):
    """``(member, pid)``: the samples of the pools ``order[starts[b]:ends[b]]`` in sorted order
    and the pool index of each."""
    sizes = ends - starts
    pid = np.repeat(np.arange(len(starts)), sizes)
    first = np.repeat(starts - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    return order[np.arange(len(pid)) + first], pid


def _pool_sums(X, member, vals, pid, n_pools):
    """``X.T @ M`` (``(p, n_pools)``) for ``M[member[k], pid[k]] = vals[k]``: one numba pass
    over the pooled rows of a dense (or ``LinearDesign`` over dense) ``X``; a sparse product
    otherwise."""
    lin = getattr(X, "_is_linear_design", False)
    base = X.base if lin else X
    if not isinstance(base, np.ndarray):
        import scipy.sparse as sp

        n = X.shape[0]
        return _xt_sparse(X, sp.csr_matrix((vals, (member, pid)), shape=(n, n_pools)))
    B = _kg.pool_row_sums(base, member, vals, pid, np.zeros((n_pools, base.shape[1]))).T
    return _from_base(X, B, np.bincount(pid, weights=vals, minlength=n_pools)) if lin else B


def _smoothed_hessian(objective, z, q, der, nu, ell=None, srt=None, grad=False, qg=None,
                      box=None):
    """Generalised Hessian of the chi-square-smoothed ``F_nu`` (``nu > 0``): ``X' diag(q l'')
    X`` plus the oracle's Jacobian term ``X' diag(l') dq/dl diag(l') X``, where ``dq/dl =
    (I - 11'/|B|) / (2 nu n)`` on each pool ``B`` of the projection onto ``P(sigma)``.
    ``srt``: the oracle's sort of ``ell`` (:func:`_pools`; without it a box spectrum's one
    pool is found by :func:`_box_pool`, no sort; ``box``: whether it is one, when the caller
    knows). With ``grad``: ``(H, X' (q l'))``,
    the loss part of the gradient from the same pass over the rows (:func:`weighted_gram`),
    with the weights ``qg`` (default ``q``: those of another shift cost, the Hessian of
    :data:`riskopt.objectives._newton.HESSIAN_NU_FIRST`)."""
    X, n = objective.X, objective.n
    scale = 1.0 / (2.0 * nu * n)
    h = q * curvature(objective.loss, objective.y, z)
    ell = _losses_derivs_z(objective, z)[0] if ell is None else ell
    if srt is None and (_box_spectrum(objective.sigma) if box is None else box):
        order, starts, ends = _box_pool(q, objective.sigma)
    else:
        order, starts, ends = _pools(ell, q, objective.sigma, scale, srt)
    if len(starts):
        sizes = ends - starts
        member, pid = _pool_members(order, starts, ends)
        h[member] += scale * der[member] ** 2
    r = (q if qg is None else qg) * der
    H, g = weighted_gram(X, h, r=r) if grad else (weighted_gram(X, h), None)
    # the pools' rank-one terms by blocks of POOL_BLOCK pools: U is (p, pools) and there can
    # be ~n / 2 pools (a copy of the design in memory otherwise)
    for b0 in range(0, len(starts), POOL_BLOCK):
        b1 = min(b0 + POOL_BLOCK, len(starts))
        k0, k1 = np.searchsorted(pid, [b0, b1])  # pid is sorted: the block's members
        U = _pool_sums(X, member[k0:k1], der[member[k0:k1]], pid[k0:k1] - b0, b1 - b0)
        H -= (U * (scale / sizes[b0:b1])) @ U.T
    return (H, g) if grad else H
