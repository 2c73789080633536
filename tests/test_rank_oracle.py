"""The ``nu = 0`` incremental oracle (``riskopt._kernels.rank_oracle``) against the full oracle.

Property tests (hypothesis): the loss tables and update sequences of
``test_incremental_pav._case`` (continuous, ties, exponential, a large offset; small moves,
fresh draws, jumps to both ends, rewrites of an existing value), every spectrum family of that
file, chunk sizes from 2 (every update splits or merges) to 64. After every update the
structure must hold exactly the sorted loss table, and the weight it gives every sample's loss
must equal ``oracles._risk_weights`` (the O(n log n) sorting oracle) to 1e-12 absolute (the
weights sum to 1). A pure-NumPy twin of the weight rule (``_numpy_weight``: counts by
comparison, ``np.mean`` of the spectrum slice) is checked the same way.

Then the solver: Prospect with ``nu = 0`` on the new oracle (``ORACLE_HULL``: ``rank_oracle`` for nu = 0)
against the bubbling path (``ORACLE_FULL``) on the same index sequence, one kernel call per
step, every iterate compared.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

import riskopt as ro
from riskopt._kernels import oracles as ko
from riskopt._kernels import prospect as kp
from riskopt._kernels import rank_oracle as rk
from _prospect_steps import compare_step_by_step, prospect_solvers, run_passes
from test_incremental_pav import DISTS, MOVES, SPECTRA, _case

TOL = 1e-12


@njit(cache=True)
def _replay(losses, sigma, idx, vals, B):
    """Apply ``losses[idx[t]] = vals[t]`` one by one; after each, compare the structure's
    values with the sorted table and every sample's weight with the full oracle.
    Returns ``(max abs weight error, status)``; status 0 ok, 1 the multiset differs from the
    table."""
    n = losses.shape[0]
    R = rk._rank_alloc(n, B)
    rk._rank_build(np.sort(losses), sigma, R)
    qf = np.empty(n)
    out = np.empty(n + 1)
    worst = 0.0
    for t in range(-1, idx.shape[0]):
        if t >= 0:
            i = idx[t]
            rk._rank_replace(R, losses[i], vals[t])
            losses[i] = vals[t]
        m = rk._rank_values(R, out)
        srt = np.sort(losses)
        if m != n:
            return worst, 1
        for r in range(n):
            if out[r] != srt[r]:
                return worst, 1
        ko._risk_weights(losses, sigma, 0.0, ko.CHI2, qf)
        for j in range(n):
            e = abs(rk._rank_weight(R, sigma, losses[j]) - qf[j])
            if e > worst:
                worst = e
    return worst, 0


def _numpy_weight(losses, sigma, x):
    """The twin: ``mean(sigma[a:a + m])`` with ``a = #{l < x}``, ``m = #{l == x}``."""
    a = int(np.count_nonzero(losses < x))
    m = int(np.count_nonzero(losses == x))
    return float(np.mean(sigma[a:a + m]))


def _check(seed, n, spectrum, dist, move, B, steps):
    losses, sigma, idx, vals = _case(seed, n, spectrum, dist, move, steps)
    worst, status = _replay(losses.copy(), sigma, idx, vals, B)
    assert status == 0, "the multiset is not the loss table"
    assert worst <= TOL, worst


PROP = settings(max_examples=50, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
cases = dict(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 200),
             spectrum=st.sampled_from(SPECTRA), dist=st.sampled_from(DISTS),
             move=st.sampled_from(MOVES), B=st.sampled_from([2, 3, 8, 64]))


@PROP
@given(**cases)
def test_rank_weights_equal_full_oracle_after_every_update(seed, n, spectrum, dist, move, B):
    _check(seed, n, spectrum, dist, move, B, steps=min(2 * n + 5, 150))


@pytest.mark.parametrize("n,spectrum,dist,move,B", [
    (2000, "esrm", "gauss", "ends", 8), (3000, "extremile", "ties", "mixed", 16),
    (1500, "user", "exp", "fresh", 4)])
def test_rank_weights_at_larger_n_with_splits_and_merges(n, spectrum, dist, move, B):
    _check(11 + n, n, spectrum, dist, move, B, steps=60)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(**{**cases, "n": st.integers(1, 3000)})
def test_rank_weights_property_up_to_3000(seed, n, spectrum, dist, move, B):
    _check(seed, n, spectrum, dist, move, B, steps=200)


def test_long_ties_use_the_prefix_sums():
    # ties longer than TIE_SUM: the weight from double-double prefix sums, to 1e-12 relative
    rng = np.random.default_rng(3)
    n = 4000
    sigma = np.ascontiguousarray(ro.ESRM(2.0).spectrum(n), dtype=np.float64)
    losses = rng.integers(0, 5, size=n).astype(float)
    R = rk._rank_alloc(n, 16)
    rk._rank_build(np.sort(losses), sigma, R)
    qf = np.empty(n)
    ko._risk_weights(losses, sigma, 0.0, ko.CHI2, qf)
    for x in np.unique(losses):
        j = int(np.flatnonzero(losses == x)[0])
        assert np.count_nonzero(losses == x) > rk.TIE_SUM
        w = rk._rank_weight(R, sigma, x)
        assert abs(w - qf[j]) <= 1e-12 * qf[j]
        assert abs(w - _numpy_weight(losses, sigma, x)) <= 1e-12 * qf[j]


@pytest.mark.parametrize("dist", ["gauss", "ties"])
def test_numpy_twin_gives_the_same_weights(dist):
    losses, sigma, idx, vals = _case(5, 150, "extremile", dist, "mixed", 100)
    R = rk._rank_alloc(150, 4)
    rk._rank_build(np.sort(losses), sigma, R)
    for i, v in zip(idx, vals):
        w = rk._rank_weight(R, sigma, losses[i])
        assert abs(w - _numpy_weight(losses, sigma, losses[i])) <= TOL
        rk._rank_replace(R, losses[i], v)
        losses[i] = v


def test_chunk_size():
    assert [rk.chunk_size(n) for n in (1, 2e4, 2e5, 1e6)] == [8, 32, 128, 128]


# ------------------------------------------------------------------------------- solver
def _user(rng, n):
    s = np.sort(rng.exponential(size=n))
    return s / s.sum()


def _objective(n, risk, ties, seed=0, d=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.standard_t(4, size=n)
    if ties:  # the absolute loss on integer data: many equal losses
        X = np.round(X)
        y = np.round(y)
    r = {"esrm": ro.ESRM(1.0), "extremile": ro.Extremile(2.0), "cvar": ro.CVaR(0.3),
         "mean": ro.Mean(),
         "user": ro.SpectralRisk(_user(rng, n))}[risk]
    return ro.Objective("absolute" if ties else "squared", r, X, y, l2_reg=1.0 / n,
                        fit_intercept=True)


def _solvers(lr, *oracles):
    return prospect_solvers(lr, *oracles, stats=0)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("risk", ["esrm", "extremile", "cvar", "user", "mean"])
def test_prospect_rank_path_matches_the_sorted_path_step_by_step(risk, ties):
    n = 120
    obj = _objective(n, risk, ties)
    new, old = _solvers(0.02, kp.ORACLE_HULL, kp.ORACLE_FULL)  # ORACLE_HULL: rank for nu = 0
    compare_step_by_step(obj, (new, old), np.random.default_rng(1).integers(0, n, size=n),
                         order=not ties)


@pytest.mark.parametrize("loss", ["squared", "logistic", "multinomial"])
def test_prospect_rank_passes_match_the_sorted_path(loss):
    rng = np.random.default_rng(7)
    n, d = 2000, 5
    X = rng.normal(size=(n, d))
    if loss == "squared":
        y = X @ rng.normal(size=d) + rng.normal(size=n)
    elif loss == "logistic":
        y = np.sign(X @ rng.normal(size=d) + rng.normal(size=n))
    else:
        y = rng.integers(0, 3, size=n).astype(float)
    obj = ro.Objective(loss, ro.ESRM(2.0), X, y, l2_reg=1.0 / n)
    new, old = _solvers(0.01, kp.ORACLE_HULL, kp.ORACLE_FULL)
    new._stats = np.zeros(10, dtype=np.int64)
    run_passes(obj, (new, old), 3, seed=7, checks=60)  # every weight used is the exact one
    assert new._stats[0] == 0 and new._stats[3] == 3 * n  # no bubbling


def test_prospect_rank_path_stops_on_a_diverged_loss():
    # a loss over LOSS_LIMIT ends the pass before it enters the multiset, as on the old path
    rng = np.random.default_rng(2)
    n = 50
    X = rng.normal(size=(n, 3))
    obj = ro.Objective("squared", ro.ESRM(1.0), X, 1e200 * rng.normal(size=n), l2_reg=0.0)
    for s in _solvers(1e-3, kp.ORACLE_HULL):
        st0 = s.init_state(obj)
        st1 = s.update(obj, st0)
        assert np.all(np.isfinite(st1.q))


def test_default_switches_to_the_rank_oracle_far_from_the_optimum():
    # from the default start the bubbling moves ~n/3 ranks per step: the default oracle
    # hands the pass to rank_oracle, and every pass of both uses the exact weights
    n = 3000
    obj = _objective(n, "esrm", False, seed=3)
    inc, tree = _solvers(0.01, kp.ORACLE_INCREMENTAL, kp.ORACLE_TREE)
    inc._stats = np.zeros(10, dtype=np.int64)
    tree._stats = np.zeros(10, dtype=np.int64)
    run_passes(obj, (inc, tree), 1, seed=3, checks=100)  # the pass far from the optimum
    assert inc._stats[0] < tree._stats[0] / 10


@pytest.mark.parametrize("B", [2, 3, 8])
def test_the_query_locates_the_value_its_update_replaces(B):
    # the pass's fused step: _rank_weight_at (one search) gives the weight and where the old
    # value is; _rank_replace_at moves it there (within its chunk when the new value belongs
    # to it, else delete + insert). After every step: the multiset and the weights exact.
    rng = np.random.default_rng(B)
    n = 300
    losses = rng.integers(0, 40, size=n).astype(float)  # ties across chunk ends
    sigma = np.ascontiguousarray(ro.Extremile(2.0).spectrum(n), dtype=np.float64)
    R = rk._rank_alloc(n, B)
    rk._rank_build(np.sort(losses), sigma, R)
    out = np.empty(n)
    for t in range(600):
        i = int(rng.integers(n))
        new = losses[i] + float(rng.integers(-2, 3)) if t % 3 else float(rng.integers(0, 40))
        q, k, j = rk._rank_weight_at(R, sigma, losses[i])
        assert q == rk._rank_weight(R, sigma, losses[i])
        assert abs(q - _numpy_weight(losses, sigma, losses[i])) <= TOL
        rk._rank_replace_at(R, k, j, losses[i], new)
        losses[i] = new
        assert rk._rank_values(R, out) == n
        np.testing.assert_array_equal(out, np.sort(losses))


def test_galloping_chunk_search_equals_the_binary_search():
    # stop 42: the update finds the chunk of its new value by galloping from the old one's;
    # the answer must be the binary search's for every start, value and tie pattern
    from riskopt._kernels.rank_oracle import _first_chunk, _first_chunk_near
    rng = np.random.default_rng(0)
    for nc in (1, 2, 3, 7, 64, 200):
        for ties in (False, True):
            top = np.sort(rng.integers(0, 5, nc) if ties else rng.normal(size=nc)) * 1.0
            xs = np.concatenate([top, top - 1e-9, top + 1e-9, [-np.inf, np.inf, -1e9, 1e9]])
            for x in xs:
                want = _first_chunk(top, nc, x, True)
                for k0 in range(nc):
                    assert _first_chunk_near(top, nc, x, k0) == want
