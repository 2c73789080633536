"""The incremental exact oracle (``riskopt._kernels.incremental_pav``) against the full PAV.

Property tests (hypothesis): random loss tables (continuous, with ties, with a large common
offset), random sequences of single-loss updates (small moves, fresh draws anywhere in the
range, jumps to both ends of the table, rewrites of the same value), every spectrum family
(CVaR, ESRM, extremile, mean, max-loss, a random user spectrum), chi-square and KL, shift
costs over four decades, bucket sizes 1, 2, 32 (1 and 2 exercise the tree part of every
descent, 32 is the production size). After every update the weights of all ranks read off the
structure must equal ``oracles._weights_sorted`` on the same sorted table to 1e-12 (absolute;
the weights sum to 1). n runs from 1 to 1e4 (the largest in a few fixed cases by default, in
hypothesis under ``-m slow``).

The chi-square bucket refresh that skips the abscissae (all 1) is checked bit for bit against
the general one, and the prefetch hint against plain reads.

Then the solver: a Prospect pass with the incremental oracle against the O(n) oracle
(``Prospect._oracle = ORACLE_FULL``) on the same index sequence, one kernel call per step, so
every iterate is compared (to rounding); and the KL fallback when the losses span more than
``2 * KL_RANGE * nu``.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

import riskopt as ro
from riskopt._kernels import incremental_pav as ip
from riskopt._kernels import oracles as ko
from riskopt._kernels import prospect as kp
from riskopt._kernels.prefetch import _prefetch

from _prospect_steps import (certify_step, certify_weights, compare_step_by_step,
                             prospect_solvers, q_tolerance, run_passes)

TOL = 1e-12
SPECTRA = ("cvar", "esrm", "extremile", "mean", "maxloss", "user")
DISTS = ("gauss", "ties", "exp", "offset")
MOVES = ("small", "fresh", "ends", "same", "mixed")


@njit(cache=True)
def _replay(losses, sigma, nu, div, idx, vals, B, check_every):
    """Apply ``losses[idx[t]] = vals[t]`` one by one (bubble + tree update) and compare all
    weights with the full PAV every ``check_every`` steps.

    Returns ``(max abs error, steps checked, status, stats)``; status 0 ok, 1 the KL range
    check refused the table (the first value is then the table's span, for the caller to
    verify the refusal), 2 a broken invariant (table not sorted, or order/rank not inverse
    permutations)."""
    n = losses.shape[0]
    order = np.argsort(losses, kind="mergesort")
    rank = np.empty(n, dtype=np.int64)
    for r in range(n):
        rank[order[r]] = r
    ls = np.empty(n)
    for r in range(n):
        ls[r] = losses[order[r]]
    S = ip._ipav_alloc(n, B)
    stats = np.zeros(8, dtype=np.int64)
    L0 = ip._ipav_build(ls, sigma, nu, div, S)
    if L0 != L0:
        return ls[n - 1] - ls[0], 0, 1, stats
    q = np.empty(n)
    qf = np.empty(n)
    worst = 0.0
    checked = 0
    for t in range(idx.shape[0]):
        i = idx[t]
        r0 = kp._find_rank(ls, order, losses[i], i)  # Prospect's own path (no rank array)
        if r0 != rank[i]:
            return worst, checked, 2, stats
        r1 = kp._move_sorted(order, ls, r0, vals[t])
        losses[i] = vals[t]
        for r in range(min(r0, r1), max(r0, r1) + 1):  # the test's own inverse permutation
            rank[order[r]] = r
        lo = min(r0, r1)
        hi = max(r0, r1)
        stats[0] += hi - lo
        L0 = ip._ipav_update(ls, sigma, nu, div, L0, S, lo, hi, r1, stats)
        if L0 != L0:
            return ls[n - 1] - ls[0], checked, 1, stats
        if t % check_every == 0 or t == idx.shape[0] - 1:
            for r in range(n):
                if order[rank[r]] != r or ls[r] != losses[order[r]]:
                    return worst, checked, 2, stats
                if r > 0 and ls[r - 1] > ls[r]:
                    return worst, checked, 2, stats
            ip._ipav_weights_all(ls, nu, div, L0, S, q)
            ko._weights_sorted(ls, sigma, nu, div, qf)
            for r in range(n):
                e = abs(q[r] - qf[r])
                if e > worst:
                    worst = e
            # the single-rank query used by Prospect gives the same numbers
            r = r1
            e = abs(ip._ipav_weight(r, ls, nu, div, L0, S) - qf[r])
            if e > worst:
                worst = e
            checked += 1
    return worst, checked, 0, stats


def _spectrum(name, n, rng):
    if name == "cvar":
        return ro.CVaR(float(rng.uniform(0.02, 0.98))).spectrum(n)
    if name == "esrm":
        return ro.ESRM(float(rng.uniform(0.1, 5.0))).spectrum(n)
    if name == "extremile":
        return ro.Extremile(float(rng.uniform(1.0, 6.0))).spectrum(n)
    if name == "mean":
        return np.full(n, 1.0 / n)
    if name == "maxloss":
        s = np.zeros(n)
        s[-1] = 1.0
        return s
    s = np.sort(rng.exponential(size=n) * (rng.uniform(size=n) < 0.7))
    if s.sum() == 0.0:
        s[-1] = 1.0
    return s / s.sum()


def _draw(dist, m, rng):
    if dist == "gauss":
        return rng.normal(size=m)
    if dist == "ties":
        return rng.integers(0, 4, size=m).astype(float)
    if dist == "exp":
        return rng.exponential(size=m) * 3.0
    return 1e6 + rng.normal(size=m)  # a large common offset


def _case(seed, n, spectrum, dist, move, steps):
    rng = np.random.default_rng(seed)
    losses = _draw(dist, n, rng)
    sigma = np.ascontiguousarray(_spectrum(spectrum, n, rng), dtype=np.float64)
    idx = rng.integers(0, n, size=steps)
    span0 = float(np.ptp(losses)) + 1.0
    moves = [move] * steps if move != "mixed" else list(rng.choice(MOVES[:4], size=steps))
    vals = np.empty(steps)
    cur = losses.copy()
    for t, (i, mv) in enumerate(zip(idx, moves)):
        if mv == "small":
            v = cur[i] + 1e-3 * rng.normal() * (1.0 + abs(cur[i] - 1e6 * (dist == "offset")))
        elif mv == "fresh":
            v = _draw(dist, 1, rng)[0]
        elif mv == "ends":  # across the whole range, to either end (or beyond)
            lo, hi = cur.min(), cur.max()
            v = (lo - rng.uniform(0, 1) * span0) if rng.uniform() < 0.5 else \
                (hi + rng.uniform(0, 1) * span0)
        else:  # rewrite an existing value: equal losses
            v = cur[rng.integers(0, n)]
        vals[t] = v
        cur[i] = v
    return losses, sigma, idx, vals


def _check(seed, n, spectrum, dist, move, div, nu_rel, B, steps, check_every=1):
    losses, sigma, idx, vals = _case(seed, n, spectrum, dist, move, steps)
    spread = max(float(np.ptp(np.concatenate([losses, vals]))), 1.0)
    nu = nu_rel * spread
    worst, checked, status, stats = _replay(losses.copy(), sigma, nu, div, idx, vals, B,
                                            check_every)
    assert status != 2, "sorted table / permutation invariant broken"
    if status == 1:  # only KL may refuse, and only a table spanning > 2 * KL_RANGE * nu
        assert div == ko.KL and worst > 2 * ip.KL_RANGE * nu
        return stats
    assert worst <= TOL, (worst, checked, stats)
    return stats


PROP = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
cases = dict(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 300),
    spectrum=st.sampled_from(SPECTRA),
    dist=st.sampled_from(DISTS),
    move=st.sampled_from(MOVES),
    div=st.sampled_from([ko.CHI2, ko.KL]),
    nu_rel=st.sampled_from([1e-3, 1e-2, 0.1, 1.0]),
    B=st.sampled_from([1, 2, 32]),
)


@PROP
@given(**cases)
def test_incremental_weights_equal_full_pav_after_every_update(seed, n, spectrum, dist, move,
                                                                div, nu_rel, B):
    _check(seed, n, spectrum, dist, move, div, nu_rel, B, steps=min(3 * n + 5, 200))


@pytest.mark.parametrize("div", [ko.CHI2, ko.KL])
@pytest.mark.parametrize("n,spectrum,move,B", [
    (1000, "cvar", "fresh", 32), (2000, "esrm", "mixed", 2), (3000, "extremile", "ends", 32),
    (10000, "cvar", "mixed", 32), (10000, "extremile", "small", 1)])
def test_incremental_weights_at_larger_n(div, n, spectrum, move, B):
    stats = _check(7 + n, n, spectrum, "gauss", move, div, 0.1, B, steps=120)
    assert stats[1] > 0  # the tree was updated


@pytest.mark.slow
@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(**{**cases, "n": st.integers(1, 10000)})
def test_incremental_weights_property_up_to_1e4(seed, n, spectrum, dist, move, div, nu_rel, B):
    _check(seed, n, spectrum, dist, move, div, nu_rel, B, steps=400,
           check_every=1 if n <= 1000 else 10)


@pytest.mark.parametrize("div", [ko.CHI2, ko.KL])
def test_degenerate_tables(div):
    # n = 1, 2; all losses equal; every update writing the same value; a spectrum with a
    # single nonzero entry
    for n in (1, 2, 3, 33, 64, 65):
        for spectrum in ("cvar", "maxloss", "mean"):
            for B in (1, 2, 32):
                rng = np.random.default_rng(n)
                losses = np.full(n, 0.7)
                sigma = np.ascontiguousarray(_spectrum(spectrum, n, rng), dtype=np.float64)
                idx = rng.integers(0, n, size=40)
                vals = np.where(rng.uniform(size=40) < 0.5, 0.7, rng.normal(size=40))
                worst, _, status, _ = _replay(losses, sigma, 0.3, div, idx, vals, B, 1)
                assert status == 0 and worst <= TOL, (n, spectrum, B, worst)


def test_kl_range_rebuild_and_refusal():
    rng = np.random.default_rng(0)
    n = 50
    sigma = np.ascontiguousarray(ro.ESRM(2.0).spectrum(n), dtype=np.float64)
    nu = 0.01
    losses = rng.uniform(0, 1, size=n)
    # one loss jumps 5 (500 nu) above the reference: a rebuild around the new mid-range
    idx = np.array([3, 4, 5])
    vals = np.array([6.5, 0.2, 6.4])
    worst, checked, status, stats = _replay(losses.copy(), sigma, nu, ko.KL, idx, vals, 32, 1)
    assert status == 0 and stats[4] >= 1 and worst <= TOL
    # a table spanning more than 2 * KL_RANGE * nu: refused (the caller uses the full PAV)
    vals = np.array([13.0, 0.2, 6.4])
    assert _replay(losses.copy(), sigma, nu, ko.KL, idx, vals, 32, 1)[2] == 1


# ------------------------------------------------------------------------------- solver
def _objective(n, risk, div, seed=0, d=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.standard_t(4, size=n)
    r = {"cvar": ro.CVaR(0.5, shift_cost=0.5, divergence=div),
         "esrm": ro.ESRM(1.0, shift_cost=0.2, divergence=div),
         "extremile": ro.Extremile(2.0, shift_cost=1.0, divergence=div)}[risk]
    return ro.Objective("squared", r, X, y, l2_reg=1.0 / n, fit_intercept=True)


def _pair(lr):
    # the hull tree (even where the box oracle would apply) against the O(n) oracle
    return prospect_solvers(lr, kp.ORACLE_TREE, kp.ORACLE_FULL, stats=0)


@pytest.mark.parametrize("div", ["chi2", "kl"])
@pytest.mark.parametrize("risk", ["cvar", "esrm", "extremile"])
def test_prospect_pass_matches_the_O_n_oracle_step_by_step(risk, div):
    n = 300
    obj = _objective(n, risk, div)
    compare_step_by_step(obj, _pair(0.02), np.random.default_rng(1).integers(0, n, size=n),
                         order=True)


def test_the_step_certificate_catches_a_wrong_weight():
    # the checks of _prospect_steps are sharp: a weight 100 rounding bounds off the exact one,
    # or the right weights on the wrong indices (still in P(sigma)), fail them
    obj = _objective(60, "esrm", "chi2")
    s, = prospect_solvers(0.02, kp.ORACLE_TREE, stats=0)
    a = s.init_state(obj)
    b = s.update(obj, a, indices=np.array([7]))
    certify_step(obj, a, b, 7)
    rho = b.rho.copy()
    rho[7] += 100 * q_tolerance(obj, a.losses)
    with pytest.raises(AssertionError, match="off the table's exact"):
        certify_step(obj, a, b._replace(rho=rho), 7)
    q = b.q.copy()
    j, k = int(np.argmax(q)), int(np.argmin(q))
    q[j], q[k] = q[k], q[j]
    with pytest.raises(AssertionError, match="Fenchel gap"):
        certify_weights(obj, b.losses, q)


@pytest.mark.parametrize("div", ["chi2", "kl"])
def test_prospect_passes_match_the_O_n_oracle(div):
    # whole passes (one kernel call each, the tree built once per pass) on a larger table,
    # every weight used certified against the exact oracle (_prospect_steps.certify_pass)
    n = 3000
    obj = _objective(n, "cvar", div, seed=3)
    new, old = _pair(0.01)
    new._stats = np.zeros(8, dtype=np.int64)
    run_passes(obj, (new, old), 3, seed=3, checks=60)
    assert new._stats[3] == 3 * n and new._stats[1] > 0


def test_prospect_kl_falls_back_to_the_full_oracle_on_a_wide_table():
    # losses spanning far more than 2 * KL_RANGE * nu: the pass runs on the O(n) oracle
    rng = np.random.default_rng(0)
    n = 80
    X = rng.normal(size=(n, 3))
    y = 40.0 * rng.normal(size=n)
    obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=1e-3, divergence="kl"), X, y,
                       l2_reg=1.0 / n)
    run_passes(obj, _pair(1e-3), 1, checks=n)  # every step's weight is the exact one


# ------------------------------------------------------------------- per-step fast paths
@njit(cache=True)
def _bucket_both_ways(ls, sigma, nu, B):
    """Every bucket refreshed through the chi-square ``unit`` path (abscissae neither read
    nor written) after the build, against the general path on a copy."""
    S = ip._ipav_alloc(ls.shape[0], B)
    ip._ipav_build(ls, sigma, nu, ko.CHI2, S)
    F, I, ex, ey, px, py, hv, hc, G = S
    px2 = px.copy()
    py2 = py.copy()
    hv2 = hv.copy()
    hc2 = hc.copy()
    for b in range(hv.shape[0]):
        ip._ipav_bucket(b, ex, ey, px, py, hv, hc, True)
        ip._ipav_bucket(b, ex, ey, px2, py2, hv2, hc2, False)
    return px, py, hv, hc, px2, py2, hv2, hc2


@pytest.mark.parametrize("dist", DISTS)
def test_unit_abscissa_bucket_refresh_is_the_general_one(dist):
    # chi-square buckets skip the abscissae (all 1, sums k - bB): same numbers, bit for bit
    rng = np.random.default_rng(5)
    for n in (1, 31, 32, 33, 500):
        ls = np.sort(_draw(dist, n, rng))
        sigma = np.ascontiguousarray(ro.CVaR(0.3).spectrum(n), dtype=np.float64)
        for B in (1, 2, 32):
            a = _bucket_both_ways(ls, sigma, 0.2, B)
            for u, v in zip(a[:4], a[4:]):
                np.testing.assert_array_equal(u, v)


@njit(cache=True)
def _prefetched(A, v, i):
    _prefetch(A, i, A.shape[1] - 1)
    _prefetch(v, i, 0)
    return A[i].sum() + v[i]


def test_prefetch_is_only_a_hint():
    # 1-d and 2-d arrays, C, Fortran and strided layouts (the solver's X is C-ordered)
    A = np.arange(12.0).reshape(3, 4)
    v = np.arange(6.0)
    for M, w in ((A, v), (np.asfortranarray(A), v[::2]), (A[:, ::2], v[1:])):
        assert _prefetched(M, w, 1) == M[1].sum() + w[1]
