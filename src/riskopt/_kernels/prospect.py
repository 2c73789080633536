"""One-pass kernels of Prospect and Prospect-Moreau (Mehta et al., ICLR 2024).

Linear models ``z = X[i] @ W`` with ``W`` of shape ``(p, K)``; the regulariser is
``0.5 * sum_j reg[j] * ||W[j]||^2`` (``reg[j] = 0`` for an intercept row). All state arrays are
updated in place; randomness enters only through the index arrays drawn in Python.

``_epoch_prospect``  (Algorithm 3 of the paper with ``i_t = j_t``, Appendix C implementation)
    Per step ``t`` with index ``i = indices[t]`` and the iterate ``W = w^(t)``:

    1. ``l_i(W)``, ``d = dloss/dz`` at ``W`` (one oracle call);
    2. ``v = outer(X[i], n q_i d - n rho_i D[i]) + gbar``  (``q`` from the last re-solve);
    3. ``W <- (W - lr v) / (1 + lr reg)`` (exact prox of the l2 term, row-wise);
    4. ``gbar += outer(X[i], q_i d - rho_i D[i])``; ``D[i] <- d``; ``rho[i] <- q_i``;
    5. ``losses[i] <- l_i(w^(t))``; bubble ``i`` into place; ``q <- PAV(sorted losses)``,
       kept incrementally: the hull tree of ``incremental_pav`` is refreshed on the ranks the
       bubbling moved (O(s + log^2 n), ``s`` the number of swaps) and the next step's ``q_i``
       is read off it in O(log n), so no step costs O(n). ``oracle=ORACLE_FULL`` selects the
       O(n) twin instead (PAV resumed at the lowest moved rank for chi2, full PAV for KL).
       The incremental path prefetches the next step's row of ``X`` and table entries
       (``prefetch._prefetch``, a cache hint); its helpers run without reference counting
       (``_nrt=False``, see ``incremental_pav``). For a box spectrum (CVaR) the default
       oracle is ``box_oracle`` instead (``_epoch_prospect_box``): ``q = clip((l - tau) /
       (2 n nu), 0, c)`` (chi-square) or ``min(c, exp((l - m) / nu))`` (KL) with one scalar
       kept in O(log n) per step by heaps, and no sorted table during the pass. Far from
       the optimum (the bubbling's swaps past ``hull_swaps(n)`` / ``RANK_SWAPS`` per step;
       with a shift cost from ``HULL_SWAPS_N`` losses on, from the first step) the
       default hands the rest of a pass to ``_epoch_prospect_box`` on ``rank_oracle``
       (``nu = 0``: ``q_i = mean(sigma[a:a + m])`` with ``a`` / ``m`` the numbers of losses
       below / equal to ``l_i``, counted in a blocked sorted list of the loss multiset,
       O(log n + B) amortised per step) or ``hull_oracle`` (a shift cost: the GCM slope by a
       Newton iteration over a segment tree of that list); neither cost grows with the
       number of ranks a loss crosses.

    So after step ``t`` the tables hold: ``losses[i]`` and ``D[i]`` evaluated at the iterate
    ``w^(s)`` of the last step ``s <= t`` that drew ``i`` (before that step's update),
    ``rho[i] = q_i^(s)`` (the weight used in that step's direction, i.e. *before* its
    re-solve), ``q`` the exact maximiser for the current loss table, ``gbar = sum_j rho_j
    outer(X[j], D[j])`` (recomputed exactly at the start of every pass, updated
    incrementally in between).

``_epoch_prospect_moreau``  (Appendix E): in ``prospect_moreau`` (re-exported here), with
    the proximal oracles of a linear model and the sorted-table helpers both passes share.
"""

import numpy as np
from numba import njit, objmode

from .box_oracle import (_box_alloc, _box_build, _box_spectrum, _box_update, _box_weight,
                         _box_weights, _kl_build, _kl_update, _kl_weight)
from .losses import _add_outer, _loss_deriv, _predict_row
from .incremental_pav import BUCKET, _ipav_alloc, _ipav_build, _ipav_update, _ipav_weight
from .oracles import (CHI2, _chi2_weight_at,
                      _chi2_weights_from_blocks, _nu0_weight_at, _pav_chi2_resume,
                      _weights_sorted_ws, sorted_order)
from .prefetch import _prefetch
from .prospect_moreau import (_epoch_prospect_moreau, _prox_linear, _prox_newton,  # noqa: F401
                              _psi, _resort, _sorted_tables)
from .hull_oracle import (_hull_build, _hull_move_at, _hull_replace, _hull_scratch,
                          _hull_weight_at, _hull_weight_full, hull_chunk)
from .rank_oracle import (_rank_alloc, _rank_build, _rank_replace_at, _rank_weight_at,
                          chunk_size as _rank_chunk)

ORACLE_FULL = 0         #: O(n) per step: PAV resumed at the lowest moved rank (chi2), full PAV (KL)
ORACLE_INCREMENTAL = 1  #: the box oracle where it applies (CVaR, nu > 0), else the hull tree
ORACLE_TREE = 2         #: O(s + log^2 n) per step: the hull tree of ``incremental_pav`` always
ORACLE_HULL = 3         #: ``hull_oracle`` for every spectrum with a shift cost (CVaR included)
#: ``ORACLE_INCREMENTAL`` on a non-box spectrum with a shift cost starts a pass on the hull
#: tree (O(s + log^2 n) per step, s the swaps of the bubbling) and hands the rest of the pass
#: to ``hull_oracle`` (cost per step independent of s) once the swaps so far exceed
#: ``hull_swaps(n)`` per step plus ``HULL_SLACK``; from ``HULL_SWAPS_N`` losses on the pass
#: runs on ``hull_oracle`` from its first step. Measured side by side
#: (``benchmarks/prospect_switch.py``, results in
#: ``benchmarks/results/prospect_incremental/stop41/switch_*``, stop 41): the tree costs
#: ``a(n) + b s`` per step with ``b`` about 15-17 ns a swap at every size and ``a(n)`` about
#: 1.7, 4.4 and 8.6 us at n = 2e4, 2e5, 1e6, a hull step 1.9, 4.0 and 5.6 us: the break-even
#: is about 14 swaps a step at 2e4, 0 or below from 2e5 (stop 40's constant 600 kept 1e6
#: passes on the tree at 2.7-8x the hull's cost).
HULL_SWAPS = 16
HULL_SWAPS_N = 100000
HULL_SLACK = 20000
#: the same hand-over for ``nu = 0`` (the bubbling's sorted table -> ``rank_oracle``, whose
#: step costs about as much as ~100 swaps)
RANK_SWAPS = 128
#: a loss above this (or inf / nan) ends the sorted-table pass before it enters the table: the
#: run has diverged, and the hull tree's geometry (prefix sums of losses) is not defined there
#: (an infinite loss corrupted memory)
LOSS_LIMIT = 1e150
#: a shift cost whose scale (chi-square: ``2 n nu``, KL: ``nu (1 + log n)``) is above this
#: takes ``hull_oracle`` in the default (``ORACLE_INCREMENTAL``): ``box_oracle``'s scale (``A =
#: 2 n nu``; KL: its threshold, of the size of ``nu log n``) and the hull tree's slopes
#: overflow near 1.8e308, where their weights were 0.0023 off (chi2, CVaR 0.3, n = 1000, nu =
#: 1e305), NaN (chi2, a cap ``c = 1``) or 0.005 off (KL, CVaR, n = 200, nu = 1.7e308), while
#: ``hull_oracle`` keeps them exact (stop 43)
SCALE_LIMIT = 1e300


@njit(cache=True)
def hull_swaps(n):
    """The swaps per step past which a pass of ``n`` losses leaves the hull tree for
    ``hull_oracle`` (see ``HULL_SWAPS``); 0 from ``HULL_SWAPS_N`` losses on (the pass starts
    on ``hull_oracle``)."""
    return HULL_SWAPS if n < HULL_SWAPS_N else 0


@njit(cache=True, _nrt=False)
def _find_rank(ls, order, v, i):
    """The rank of sample ``i`` whose table value is ``v``: the first ``r`` with ``ls[r] >= v``
    by binary search, then along the tie (``ls[r] == v``) to ``order[r] == i``."""
    lo = 0
    hi = ls.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if ls[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    while order[lo] != i:
        lo += 1
    return lo


@njit(cache=True, _nrt=False)
def _move_sorted(order, ls, r0, v):
    """``oracles._bubble`` on the sorted copy ``ls``, without the rank array: the entry at
    rank ``r0`` takes the value ``v`` and moves to its place by the same rule (so the same
    permutation); returns its new rank. The shifts run over contiguous memory."""
    n = order.shape[0]
    i = order[r0]
    r = r0
    while r > 0 and ls[r - 1] > v:
        r -= 1
    if r < r0:
        for a in range(r0, r, -1):
            ls[a] = ls[a - 1]
            order[a] = order[a - 1]
    else:
        while r < n - 1 and ls[r + 1] < v:
            r += 1
        for a in range(r0, r):
            ls[a] = ls[a + 1]
            order[a] = order[a + 1]
    ls[r] = v
    order[r] = i
    return r


@njit(cache=True, _nrt=False)
def _prefetch_rank(r, ls, order, sigma, S, tree):
    """Cache hints (no values change) for a step at rank ``r``: the sorted table and the
    spectrum around ``r`` and, with the hull tree (``tree``), the increments, prefix sums and
    hull of ``r``'s bucket and the tree nodes above it, which the step's query, move and tree
    update read. Issued one step ahead, they overlap those misses with the step's work."""
    n = ls.shape[0]
    for k in (r - 8, r, r + 8):
        if 0 <= k < n:
            _prefetch(ls, k, 0)
            _prefetch(order, k, 0)
    if not tree:
        return
    F, I, ex, ey, px, py, hv, hc, G = S
    B = hv.shape[1]
    b = r // B
    P = b * B
    for k in range(P, min(P + B, n), 8):
        _prefetch(sigma, k, 0)
        _prefetch(ey, k, 0)
        _prefetch(py, k, 0)
        _prefetch(hv, b, k - P)


@njit(cache=True)
def _step_scratch(K, lr, reg):
    """A step's work vectors ``z``, ``dz``, ``c`` (length ``K``) and the prox factors
    ``shrink[j] = 1 / (1 + lr reg[j])``."""
    shrink = np.empty(reg.shape[0])
    for j in range(reg.shape[0]):
        shrink[j] = 1.0 / (1.0 + lr * reg[j])
    return np.empty(K), np.empty(K), np.empty(K), shrink


@njit(cache=True, _nrt=False, inline="always")
def _prefetch_row(X, D, y, losses, rho, i):
    """Cache hints for step of index ``i``: its row of ``X`` and its table entries."""
    p = X.shape[1]
    for j in range(0, p, 8):
        _prefetch(X, i, j)
    _prefetch(X, i, p - 1)
    _prefetch(D, i, 0)
    _prefetch(y, i, 0)
    _prefetch(losses, i, 0)
    _prefetch(rho, i, 0)


@njit(cache=True, inline="always")
def _step_update(X, i, W, gbar, D, c, dz, qi, ri, lr, shrink):
    """Steps 2-4 of the module docstring for index ``i`` (``dz`` = dloss/dz at ``W``):
    ``c = q_i d - rho_i D[i]``, the prox-gradient step on ``W``, ``gbar += outer(X[i], c)``,
    ``D[i] <- d``."""
    n, p = X.shape
    K = W.shape[1]
    for k in range(K):
        c[k] = qi * dz[k] - ri * D[i, k]
    # iterate update: v = outer(x_i, n c) + gbar, then the prox of the l2 term
    for j in range(p):
        a = n * X[i, j]
        for k in range(K):
            W[j, k] = (W[j, k] - lr * (a * c[k] + gbar[j, k])) * shrink[j]
    # variance-reducing update (tables at w^(t), rho_i <- q_i^(t))
    _add_outer(X, i, 1.0, c, gbar)
    for k in range(K):
        D[i, k] = dz[k]


@njit(cache=True)
def _epoch_prospect(code, X, y, reg, sigma, nu, div, lr, indices, W, losses, D, q, rho, gbar,
                    order, rank, oracle, stats):
    """One pass of Prospect over ``indices`` (in-place on W and the tables).

    A step only needs ``q_i`` of the sampled index, so the weights are not materialised per
    step. ``oracle``:

    * ``ORACLE_INCREMENTAL`` (the solver's default): for a box spectrum (CVaR, detected by
      ``box_oracle._box_spectrum``) with ``nu > 0``, ``_epoch_prospect_box`` (no bubbling);
      otherwise (a shift cost, ``n < HULL_SWAPS_N``; else ``hull_oracle`` from the first
      step) as ``ORACLE_TREE`` until the swaps pass ``hull_swaps(n)`` per step
      (``RANK_SWAPS`` for ``nu = 0``) plus ``HULL_SLACK``, then ``_epoch_prospect_box`` on
      ``hull_oracle`` (``rank_oracle`` for ``nu = 0``) for the rest of the pass; a
      shift cost of scale (``2 n nu``, KL ``nu (1 + log n)``) above ``SCALE_LIMIT`` runs
      on ``hull_oracle`` whatever the spectrum (the box oracle's scale overflows there);
    * ``ORACLE_HULL``: ``_epoch_prospect_box`` on ``hull_oracle`` for every spectrum with a
      shift cost (``rank_oracle`` for ``nu = 0``);
    * ``ORACLE_TREE``: for ``nu > 0`` (chi2 and KL) the hull
      tree of ``incremental_pav`` is built at the start of the pass, refreshed on the ranks
      the bubbling moved (O(s + log^2 n)) and ``q_i`` is read off it (O(log n)); a KL table
      whose losses span more than ``2 * KL_RANGE * nu`` falls back to the full PAV;
    * ``ORACLE_FULL`` (the O(n) twin): chi-square resumes the PAV at the lowest rank the
      bubbling changed (``_pav_chi2_resume``) and reads ``q_i`` off its blocks by binary search,
      KL runs the full PAV every step.

    For ``nu = 0`` ``q_i`` is ``sigma`` at ``i``'s rank (averaged over ties) either way. ``q``
    is written back in full at the end of the pass (one O(n) PAV). ``stats`` (int64, length
    8, or empty to skip) accumulates ``[0]`` swaps, ``[1]`` tree nodes refreshed (O(n)
    oracle: ranks re-pooled by the PAV), ``[2]`` bridge-descent steps, ``[3]`` steps, ``[4]``
    tree rebuilds (KL range), ``[5]`` refreshed nodes that kept their bridge, ``[6]`` tangent
    walks, ``[7]`` buckets rebuilt (and, length 10, ``[8]`` / ``[9]`` of
    ``_epoch_prospect_box``).
    """
    if oracle == ORACLE_INCREMENTAL or oracle == ORACLE_HULL:
        bc, bk, br = _box_spectrum(sigma) if nu > 0.0 else (0.0, 0, 0.0)
        # hull_oracle: ORACLE_HULL whatever the spectrum; a large table (HULL_SWAPS_N); a
        # shift cost's scale past SCALE_LIMIT
        scale = 2.0 * X.shape[0] * nu if div == CHI2 else nu * (1.0 + np.log(X.shape[0]))
        huge = not scale <= SCALE_LIMIT
        hull = nu > 0.0 and (oracle == ORACLE_HULL or huge
                             or (bk <= 0 and hull_swaps(X.shape[0]) == 0))
        if hull:
            bk = -1
        if bk > 0 or hull or oracle == ORACLE_HULL:  # a box: box_oracle; ORACLE_HULL, nu = 0: rank
            _epoch_prospect_box(code, X, y, reg, sigma, nu, div, lr, indices, W, losses, D, q,
                                rho, gbar, order, rank, bc, bk, br, stats)
            return
    n, p = X.shape
    K = W.shape[1]
    z, dz, c, shrink = _step_scratch(K, lr, reg)
    ls = np.empty(n)
    qs = np.empty(n)
    work = np.empty(2 * n)
    iwork = np.empty(n, dtype=np.int64)
    _sorted_tables(losses, q, order, ls, qs)
    # 0: nu = 0 lookup, 1: chi2 PAV resume, 2: full PAV, 3: hull tree
    mode = 0
    nb = 0
    L0 = 0.0
    S = _ipav_alloc(n if (oracle != ORACLE_FULL and nu > 0.0) else 0, BUCKET)
    ends = np.empty(0, dtype=np.int64)
    snap_sum = np.empty(0)
    snap_cnt = np.empty(0, dtype=np.int64)
    if nu > 0.0:
        if oracle != ORACLE_FULL:
            L0 = _ipav_build(ls, sigma, nu, div, S)
            mode = 3 if L0 == L0 else 2
        elif div == CHI2:
            mode = 1  # (the resume's oracles kernels: in this file's numba cache; stop 43)
            ends = np.empty(n, dtype=np.int64)
            snap_sum = np.empty(n)
            snap_cnt = np.empty(n, dtype=np.int64)
            nb = _pav_chi2_resume(ls, sigma, nu, 0, work, iwork, ends, snap_sum, snap_cnt)
        else:
            mode = 2
        if mode == 2:
            _weights_sorted_ws(ls, sigma, nu, div, qs, work, iwork)
    collect = stats.shape[0] >= 8
    # exact control-variate mean at the start of the pass (no drift across passes)
    gbar[:, :] = 0.0
    for m in range(n):
        if rho[m] != 0.0:
            _add_outer(X, m, rho[m], D[m], gbar)
    inc = oracle != ORACLE_FULL
    switch = oracle == ORACLE_INCREMENTAL and (mode == 3 or mode == 0)
    per_step = hull_swaps(n) if mode == 3 else RANK_SWAPS
    swaps = 0
    T = indices.shape[0]
    rnext = -1
    for t in range(T):
        i = indices[t]
        if inc and t + 1 < T:  # the next step's row and table entries (a hint, no values)
            _prefetch_row(X, D, y, losses, rho, indices[t + 1])
        _predict_row(X, i, W, z)
        li = _loss_deriv(code, y[i], z, dz)
        if not li <= LOSS_LIMIT:  # diverged (LOSS_LIMIT): the tables stay as they are
            break
        # the incremental path keeps no rank array during the pass (its updates are random
        # writes, the cost of the bubbling at large n): i's rank is found in the sorted table,
        # at the end of the previous step (the same table) so that its entries are prefetched
        if inc:
            ri0 = rnext if rnext >= 0 else _find_rank(ls, order, losses[i], i)
        else:
            ri0 = rank[i]
        if mode == 3:
            qi = _ipav_weight(ri0, ls, nu, div, L0, S)
        elif mode == 1:
            qi = _chi2_weight_at(ls, nu, ri0, work, iwork, ends, nb)
        elif mode == 0:
            qi = _nu0_weight_at(ls, sigma, ri0)
        else:
            qi = qs[ri0]
        _step_update(X, i, W, gbar, D, c, dz, qi, rho[i], lr, shrink)
        rho[i] = qi
        # bias-reducing update: loss table, incremental sort, exact weights
        losses[i] = li
        if inc:
            r0 = ri0
            r1 = _move_sorted(order, ls, r0, li)
        else:  # the pre-tree code path, unchanged
            r0 = rank[i]
            _resort(order, rank, losses, ls, i)
            r1 = rank[i]
        lo = r0 if r0 < r1 else r1
        hi = r1 if r0 < r1 else r0
        if collect:
            stats[0] += hi - lo
            stats[3] += 1
        swaps += hi - lo
        if switch and swaps > per_step * (t + 1) + HULL_SLACK and t + 1 < T:
            # far from the optimum: the rest of the pass on hull_oracle / rank_oracle
            # (``order`` sorts the table; gbar is recomputed exactly there, as at the start
            # of every pass)
            _epoch_prospect_box(code, X, y, reg, sigma, nu, div, lr, indices[t + 1:], W,
                                losses, D, q, rho, gbar, order, rank, 0.0, -1, 0.0, stats)
            return
        if mode == 3:
            L0 = _ipav_update(ls, sigma, nu, div, L0, S, lo, hi, r1, stats)
            if L0 != L0:  # KL range exceeded: the O(n) oracle for the rest of the pass
                mode = 2
                _weights_sorted_ws(ls, sigma, nu, div, qs, work, iwork)
        elif mode == 1:
            nb = _pav_chi2_resume(ls, sigma, nu, lo, work, iwork, ends, snap_sum, snap_cnt)
            if collect:
                stats[1] += n - lo
        elif mode == 2:
            _weights_sorted_ws(ls, sigma, nu, div, qs, work, iwork)
            if collect:
                stats[1] += n
        if inc and t + 1 < T:  # the next step's rank, and hints for what it will touch
            i2 = indices[t + 1]
            rnext = _find_rank(ls, order, losses[i2], i2)
            _prefetch_rank(rnext, ls, order, sigma, S, mode == 3)
    if mode == 1:
        _chi2_weights_from_blocks(ls, nu, work, iwork, nb, qs)
    elif mode != 2:
        _weights_sorted_ws(ls, sigma, nu, div, qs, work, iwork)
    for r in range(n):
        q[order[r]] = qs[r]
        if inc:
            rank[order[r]] = r


def _sort_state(losses, order):
    """``order`` = the stable argsort of ``losses`` (``oracles.sorted_order``: NumPy's SIMD
    sort, ~15x faster than numba's own at n = 1e6)."""
    order[:] = sorted_order(losses)[0]


@njit(cache=True)
def _epoch_prospect_box(code, X, y, reg, sigma, nu, div, lr, indices, W, losses, D, q, rho,
                        gbar, order, rank, bc, bk, br, stats):
    """``_epoch_prospect`` without a sorted table during the pass: for a box spectrum (``bk``
    entries ``bc``, one ``br``: CVaR) with a chi-square or KL cost, ``q_i`` is read off
    ``box_oracle`` (O(log n) per step); for ``nu = 0`` (any spectrum ``sigma``), off the
    multiset of ``rank_oracle`` (O(log n + B) amortised per step, whatever the number of ranks
    the loss crosses); for any other spectrum with a shift cost (``bk < 0``), off
    ``hull_oracle`` (its cost per step does not depend on the ranks crossed either; a wide
    KL table or an unsettled query takes the O(n) PAV). The same steps as
    ``_epoch_prospect``; ``order`` / ``rank`` are rebuilt by one sort at the end of the pass.
    For ``K = 1`` the iterate and ``gbar`` live in local vectors during the pass (the same
    operations in the same order as the general loops, so the same numbers, vectorised).
    ``stats`` (int64; length 10 to collect): ``[3]`` steps, ``[8]`` elements that changed
    set (the updated index re-filed, or crossed by the walk), ``[9]`` heap levels sifted;
    on ``hull_oracle`` (``bk < 0`` with ``nu > 0``): ``[8]`` Newton iterations, ``[9]``
    chunks scanned."""
    n, p = X.shape
    K = W.shape[1]
    z, dz, c, shrink = _step_scratch(K, lr, reg)
    nu0 = nu == 0.0
    hull = not nu0 and bk < 0
    B = _box_alloc(0 if (nu0 or hull) else n)
    kl = div != CHI2
    R = _rank_alloc(n if (nu0 or hull) else 1, hull_chunk(n) if hull else _rank_chunk(n), hull)
    work = _hull_scratch(n if hull else 0)
    hst = np.zeros(2, dtype=np.int64)
    if nu0 or hull:  # ``order`` sorts the table at the start of a pass (rebuilt at each end)
        ls0 = np.empty(n)
        for r in range(n):
            ls0[r] = losses[order[r]]
        if nu0:
            _rank_build(ls0, sigma, R)
        else:
            _hull_build(ls0, sigma, nu, div, R)
    elif kl:
        _kl_build(losses, q, nu, bc, bk, br, B, stats)
    else:
        _box_build(losses, q, nu, bc, bk, br, B, stats)
    f = B[4]
    pos = B[2]
    collect = stats.shape[0] >= 8
    one = K == 1
    w1 = np.zeros(p if one else 0)
    g1 = np.zeros(p if one else 0)
    # exact control-variate mean: _add_outer(X, m, rho[m], D[m], gbar) summed over m (adding
    # the products it skips, +-0, changes no value)
    gbar[:, :] = 0.0
    for m in range(n):
        rm = rho[m]
        if rm != 0.0:
            if one:
                d = D[m, 0]
                for j in range(p):
                    g1[j] += (X[m, j] * rm) * d
            else:
                _add_outer(X, m, rm, D[m], gbar)
    if one:
        for j in range(p):
            w1[j] = W[j, 0]
    T = indices.shape[0]
    hpar = R[14]  # the hull's parameters (wide: hpar[4]), fetched once (a reference count)
    k0 = 0  # rank / hull oracle: where losses[i] is (found by the query, used by the update)
    j0 = 0
    for t in range(T):
        i = indices[t]
        # the next step's row and table entries (a hint, no values); the box's position
        # hint in a test of its own: nested in this one, the rank pass ran ~1.7x slower
        # (measured, not understood: stop 37's notes)
        if t + 1 < T:
            _prefetch_row(X, D, y, losses, rho, indices[t + 1])
        if t + 1 < T and not (nu0 or hull):
            _prefetch(pos, indices[t + 1], 0)
        if nu0:
            qi, k0, j0 = _rank_weight_at(R, sigma, losses[i])
        elif hull:
            k0 = -1  # hull_oracle: where losses[i] is, found by the query (-1: not searched)
            if hpar[4] == 0.0:
                qi, k0, j0 = _hull_weight_at(R, losses[i], work, hst)
            else:
                qi = np.nan
            if qi != qi:  # a wide KL table, or an unsettled query: the O(n) PAV
                qi = _hull_weight_full(R, sigma, losses[i])
        else:
            qi = _kl_weight(losses[i], f) if kl else _box_weight(losses[i], f)
        lold = losses[i]
        ri = rho[i]
        if one:
            zz = 0.0
            for j in range(p):
                zz += X[i, j] * w1[j]
            z[0] = zz
            li = _loss_deriv(code, y[i], z, dz)
            if (nu0 or hull) and not li <= LOSS_LIMIT:  # diverged: the tables stay as they are
                break
            c0 = qi * dz[0] - ri * D[i, 0]
            for j in range(p):
                w1[j] = (w1[j] - lr * ((n * X[i, j]) * c0 + g1[j])) * shrink[j]
            for j in range(p):
                g1[j] += (X[i, j] * 1.0) * c0
            D[i, 0] = dz[0]
        else:
            _predict_row(X, i, W, z)
            li = _loss_deriv(code, y[i], z, dz)
            if (nu0 or hull) and not li <= LOSS_LIMIT:
                break
            _step_update(X, i, W, gbar, D, c, dz, qi, ri, lr, shrink)
        rho[i] = qi
        losses[i] = li
        if nu0:
            _rank_replace_at(R, k0, j0, lold, li)
        elif hull:  # _hull_move_at, not reference-counted: _hull_replace for a KL rebuild
            if not _hull_move_at(R, k0, j0, lold, li):
                _hull_replace(R, sigma, lold, li)
        elif kl:
            _kl_update(B, i, li, stats)
        else:
            _box_update(B, i, li, stats)
        if collect:
            stats[3] += 1
    if one:
        for j in range(p):
            W[j, 0] = w1[j]
            gbar[j, 0] = g1[j]
    if stats.shape[0] >= 10 and hull:
        stats[8] += hst[0]
        stats[9] += hst[1]
    if not (nu0 or hull):
        _box_weights(losses, B, q, kl)
    with objmode():
        _sort_state(losses, order)
    for r in range(n):
        rank[order[r]] = r
    if nu0 or hull:  # q: the sorted-table oracle's end of pass (one PAV)
        ls = np.empty(n)
        qs = np.empty(n)
        for r in range(n):
            ls[r] = losses[order[r]]
        _weights_sorted_ws(ls, sigma, nu, div, qs, np.empty(2 * n), np.empty(n, dtype=np.int64))
        for r in range(n):
            q[order[r]] = qs[r]
