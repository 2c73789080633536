"""Incremental exact oracle for every spectrum without a shift cost (``nu = 0``).

With ``nu = 0`` the maximiser of ``q.l`` over the permutahedron ``P(sigma)`` gives the loss
``l_i`` the weight

    q_i = mean(sigma[a : a + m]),    a = #{j : l_j < l_i},    m = #{j : l_j == l_i},

(``sigma`` by rank, averaged over a tie: ``oracles._weights_sorted_ws`` with ``nu = 0``), so
only the *multiset* of the loss table is needed, never which sample holds which rank. The
multiset is the blocked sorted list of :mod:`riskopt._kernels.chunk_tree` (chunks of sorted
values, a Fenwick tree of their counts; splits and merges), whose names this module
re-exports: a query costs ``O(log n + B)``, an update ``O(log n + B + n / B^2)`` amortised
**whatever the number of ranks the changed loss crosses** (the costs there).

A tie longer than ``TIE_SUM`` is not summed entry by entry: its spectrum mass comes from
double-double prefix sums of ``sigma`` (``S = (hi, lo)``, each prefix exact to ~1e-32
relative, filled by ``chunk_tree._rank_build``), so its weight is exact to a few ulps in
O(1); shorter ties use ``oracles._tie_mean`` (the very bits of the sorted-table oracle).

Prospect uses it for ``nu = 0`` (``prospect._epoch_prospect_box`` with ``kind = RANK``): a
step reads ``q_i`` for the sampled index's loss, then replaces that loss in the multiset, with
one search for both (:func:`_rank_weight_at` returns where the loss is, :func:`_rank_replace_at`
moves it from there: within its chunk when the new value belongs to it, without count
changes). The step's entry points are compiled without reference counting and are called,
not inlined, from the pass (a precaution: inlined into a reference-counted caller, each
unpacking of ``R`` may count the references of its 15 arrays; not isolated by a measurement,
see notes/stop37/i31a.md).
"""
from numba import njit

from .chunk_tree import (  # noqa: F401 (re-exported: hull_oracle, prospect, tests, benchmarks)
    _first_chunk, _first_chunk_near, _fterm, _rank_alloc, _rank_build, _rank_count,
    _rank_delete, _rank_insert, _rank_locate, _rank_replace, _rank_replace_at, _rank_values,
    _replace_at, _tree_rebuild, chunk_size)
from .oracles import _tie_mean


#: a tie longer than this takes its spectrum mass from the double-double prefix sums
TIE_SUM = 64


@njit(cache=True, _nrt=False, inline="always")
def _rank_tie(R, k, j, a, x):
    """``#{l == x}`` from the location ``(k, j, a)`` of :func:`_rank_locate`: counted in the
    chunk, or (a tie reaching the chunk's end) by a second search."""
    V, cnt, lid, top, fw, meta, free, Shi, Slo, FV, tc, tF, tlo, thi, fpar = R
    if k == meta[0]:
        return 0
    p = lid[k]
    m = cnt[p]
    e = j
    while e < m and V[p, e] == x:
        e += 1
    if e < m:
        return e - j
    return _rank_count(R, x, True) - a


@njit(cache=True, _nrt=False, inline="always")
def _tie_weight(R, sigma, a, m):
    """``mean(sigma[a:a + m])``: ``_tie_mean`` (the bits of the sorted-table oracle), or the
    double-double prefix sums for a tie longer than ``TIE_SUM``."""
    if m <= TIE_SUM:
        return _tie_mean(sigma, a, m)
    Shi = R[7]
    Slo = R[8]
    return ((Shi[a + m] - Shi[a]) + (Slo[a + m] - Slo[a])) / m


@njit(cache=True, _nrt=False)
def _rank_weight(R, sigma, x):
    """The ``nu = 0`` weight of a loss ``x`` of the multiset: ``mean(sigma[a:a + m])``."""
    k, j, a = _rank_locate(R, x)
    return _tie_weight(R, sigma, a, _rank_tie(R, k, j, a, x))


@njit(cache=True, _nrt=False)
def _rank_weight_at(R, sigma, x):
    """:func:`_rank_weight` and the location of ``x`` (``(weight, k, j)``) for
    :func:`_rank_replace_at`, when ``x`` is the loss about to change (one search for both)."""
    k, j, a = _rank_locate(R, x)
    return _tie_weight(R, sigma, a, _rank_tie(R, k, j, a, x)), k, j
