"""The shift-cost incremental oracle (``riskopt._kernels.hull_oracle``) against the O(n) PAV.

Property tests (hypothesis): the loss tables and update sequences of
``test_incremental_pav._case`` (continuous, ties, exponential, a large offset; small moves,
fresh draws, jumps to both ends, rewrites of an existing value), every spectrum family of that
file, chi-square and KL, shift costs over four decades, chunk sizes 2 to 64. After every update
the weight the structure gives every sample's loss must equal ``oracles._risk_weights`` (sort +
PAV) to 1e-12 absolute (the weights sum to 1), and the Newton iteration must settle (no
fallback). A pure-NumPy twin of the query (``_numpy_weight``: the GCM slope over the rank by
the min-max formula on the cumulative-sum diagram) is checked against both.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

import riskopt as ro
from riskopt._kernels import hull_oracle as ho
from riskopt._kernels import oracles as ko
from riskopt._kernels import prospect as kp
from _prospect_steps import certify_step, compare_step_by_step, prospect_solvers, run_passes
from test_incremental_pav import DISTS, MOVES, SPECTRA, _case

TOL = 1e-12


@njit(cache=True)
def _replay(losses, sigma, nu, div, idx, vals, B, warm):
    """Apply ``losses[idx[t]] = vals[t]`` one by one; after each, compare every sample's
    weight with the full oracle (``warm``: with the warm-start cache, which then starts most
    queries from a segment an earlier query found, stale after the updates). Returns ``(max
    abs error, fallbacks, stats)``."""
    n = losses.shape[0]
    R = ho._hull_alloc(n, B)
    ho._hull_build(np.sort(losses), sigma, nu, div, R)
    work = ho._hull_scratch(n if warm else 0)
    stats = np.zeros(2, dtype=np.int64)
    qf = np.empty(n)
    worst = 0.0
    fallbacks = 0
    wide = 0
    for t in range(-1, idx.shape[0]):
        if t >= 0:
            i = idx[t]
            ho._hull_replace(R, sigma, losses[i], vals[t])
            losses[i] = vals[t]
        ko._risk_weights(losses, sigma, nu, div, qf)
        if R[14][4] != 0.0:  # a wide KL table: only if it spans more than 2 KL_RANGE nu
            wide += 1
            if not losses.max() - losses.min() > 2.0 * ho.KL_RANGE * nu:
                return np.inf, 0, stats
            continue
        for j in range(n):
            w = ho._hull_weight(R, losses[j], work, stats)
            if w != w:
                fallbacks += 1
                w = ho._hull_weight_full(R, sigma, losses[j])
            e = abs(w - qf[j])
            if e > worst:
                worst = e
    return worst, fallbacks, stats


def _numpy_weight(losses, sigma, nu, div, x):
    """The twin: sort, the cumulative-sum diagram, and the GCM slope over the first rank of
    ``x`` by the min-max formula ``max_{p < r} min_{q >= r} slope(p, q)`` (O(n^2))."""
    ls = np.sort(losses)
    n = ls.size
    S = np.concatenate([[0.0], np.cumsum(sigma)])
    if div == ko.CHI2:
        A = 2 * n * nu
        L0 = ls[n // 2]
        Y = np.concatenate([[0.0], np.cumsum(ls - L0)]) - A * S
        W = np.arange(n + 1.0)
    else:
        L0 = ls[-1]
        Y = np.concatenate([[0.0], np.cumsum(np.exp((ls - L0) / nu))])
        W = S
    r = int(np.count_nonzero(ls < x)) + 1
    best = -np.inf
    for p in range(r):
        qs = np.arange(r, n + 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            sl = (Y[qs] - Y[p]) / (W[qs] - W[p])
        sl = np.where(W[qs] > W[p], sl, np.inf)
        best = max(best, sl.min())
    if div == ko.CHI2:
        return max(0.0, ((x - L0) - best) / A)
    return np.exp((x - L0) / nu) / best


def _check(seed, n, spectrum, dist, move, div, nu_rel, B, steps, warm=True):
    losses, sigma, idx, vals = _case(seed, n, spectrum, dist, move, steps)
    spread = max(float(np.ptp(np.concatenate([losses, vals]))), 1.0)
    nu = nu_rel * spread
    worst, fallbacks, stats = _replay(losses.copy(), sigma, nu, div, idx, vals, B, warm)
    assert worst <= TOL, (worst, fallbacks)
    assert fallbacks == 0, fallbacks
    return stats


PROP = settings(max_examples=20, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
cases = dict(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80),
             spectrum=st.sampled_from(SPECTRA), dist=st.sampled_from(DISTS),
             move=st.sampled_from(MOVES), div=st.sampled_from([ko.CHI2, ko.KL]),
             nu_rel=st.sampled_from([1e-3, 1e-2, 0.1, 1.0]), B=st.sampled_from([2, 3, 8, 64]),
             warm=st.booleans())


@PROP
@given(**cases)
def test_hull_weights_equal_full_pav_after_every_update(seed, n, spectrum, dist, move, div,
                                                         nu_rel, B, warm):
    _check(seed, n, spectrum, dist, move, div, nu_rel, B, steps=min(2 * n + 5, 60), warm=warm)


@pytest.mark.parametrize("div", [ko.CHI2, ko.KL])
@pytest.mark.parametrize("n,spectrum,dist,move,B", [
    (1500, "esrm", "gauss", "ends", 16), (1200, "extremile", "ties", "mixed", 8),
    (1000, "user", "exp", "fresh", 32)])
def test_hull_weights_at_larger_n(div, n, spectrum, dist, move, B):
    _check(11 + n, n, spectrum, dist, move, div, 0.1, B, steps=20)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(**{**cases, "n": st.integers(1, 2000)})
def test_hull_weights_property_up_to_2000(seed, n, spectrum, dist, move, div, nu_rel, B, warm):
    _check(seed, n, spectrum, dist, move, div, nu_rel, B, steps=40, warm=warm)


#: the update sequences of the tree and fused-step tests (small tables, every move kind)
_updates = given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300),
                 dist=st.sampled_from(DISTS), move=st.sampled_from(MOVES),
                 div=st.sampled_from([ko.CHI2, ko.KL]), B=st.sampled_from([2, 3, 8]))


def _update_case(seed, n, dist, move):
    """``(losses, sigma, idx, vals, nu)`` of :data:`_updates`' tests."""
    losses, sigma, idx, vals = _case(seed, n, "esrm", dist, move, min(3 * n + 5, 120))
    return losses, sigma, idx, vals, 0.1 * max(float(np.ptp(np.concatenate([losses, vals]))), 1.0)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@_updates
def test_tree_after_every_update_equals_a_rebuild(seed, n, dist, move, div, B):
    # the step's update (_hull_move: a split or a merge relays out only the leaves that
    # moved and pulls only their ancestors) leaves every node of the segment tree (count,
    # term sum, smallest and largest term) bit for bit what a rebuild from the chunks gives;
    # when _hull_move declines (a KL rebuild is due) it changes nothing
    from riskopt._kernels import rank_oracle as rk
    losses, sigma, idx, vals, nu = _update_case(seed, n, dist, move)
    R = ho._hull_alloc(n, B)
    ho._hull_build(np.sort(losses), sigma, nu, div, R)
    tree = slice(10, 14)  # tc, tF, tlo, thi
    for i, v in zip(idx, vals):
        before = [a.copy() for a in R]
        if not ho._hull_move(R, losses[i], v):
            assert all(np.array_equal(a, b) for a, b in zip(R, before))
            ho._hull_replace(R, sigma, losses[i], v)
        losses[i] = v
        out = np.empty(n)
        assert rk._rank_values(R, out) == n and np.array_equal(out, np.sort(losses))
        fresh = tuple(a.copy() for a in R)
        rk._tree_rebuild(fresh)
        for a, b in zip(R[tree], fresh[tree]):
            assert np.array_equal(a, b)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@_updates
def test_fused_step_equals_the_query_then_the_update(seed, n, dist, move, div, B):
    # stop 42: the pass's step is _hull_weight_at (the query, which also returns where the
    # loss is) + _hull_move_at (the update from that location): the same weight and, after
    # every update, the same state bit for bit as _hull_weight + _hull_move (which locates
    # the loss again). (A move across two chunks pulls their tree paths once where they
    # meet: test_tree_after_every_update_equals_a_rebuild checks that tree.)
    from riskopt._kernels import rank_oracle as rk
    losses, sigma, idx, vals, nu = _update_case(seed, n, dist, move)
    R1, R2 = ho._hull_alloc(n, B), ho._hull_alloc(n, B)
    for R in (R1, R2):
        ho._hull_build(np.sort(losses), sigma, nu, div, R)
    w1, w2 = ho._hull_scratch(n), ho._hull_scratch(n)
    s1, s2 = np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64)
    for i, v in zip(idx, vals):
        x = losses[i]
        q1, k, j = ho._hull_weight_at(R1, x, w1, s1)
        assert (k, j) == tuple(rk._rank_locate(R1, x)[:2])
        q2 = ho._hull_weight(R2, x, w2, s2)
        assert q1 == q2 or (q1 != q1 and q2 != q2)
        ok1 = ho._hull_move_at(R1, k, j, x, v)
        assert ok1 == ho._hull_move(R2, x, v)
        if not ok1:
            ho._hull_replace(R1, sigma, x, v)
            ho._hull_replace(R2, sigma, x, v)
        losses[i] = v
        _assert_same_state(R1, R2)


def _assert_same_state(R1, R2):
    """Two hull states hold the same live values bit for bit (the chunks' values and terms
    up to their counts, the largest values of the live chunks; every other array whole)."""
    nc = R1[5][0]
    assert np.array_equal(R1[5], R2[5]) and np.array_equal(R1[3][:nc], R2[3][:nc])
    for a in (1, 2, 4, 6, 7, 8, 10, 11, 12, 13, 14):
        assert np.array_equal(R1[a], R2[a])
    for k in range(nc):
        p, m = R1[2][k], R1[1][R1[2][k]]
        for a in (0, 9):
            assert np.array_equal(R1[a][p, :m], R2[a][p, :m])


@pytest.mark.parametrize("div", [ko.CHI2, ko.KL])
@pytest.mark.parametrize("spectrum,dist", [("esrm", "gauss"), ("extremile", "ties"),
                                           ("user", "exp")])
def test_warm_start_saves_newton_iterations(div, spectrum, dist):
    # small moves (Prospect near its optimum): queries started from the segment cached for
    # their rank's slot (exact weights, checked by _check after every update) take fewer
    # Newton iterations than queries started from (r - 1, r)
    args = (5, 1000, spectrum, dist, "small", div, 0.1, 16)
    warm = _check(*args, steps=10, warm=True)
    cold = _check(*args, steps=10, warm=False)
    assert warm[0] < cold[0], (warm, cold)


@pytest.mark.parametrize("div", [ko.CHI2, ko.KL])
@pytest.mark.parametrize("spectrum,dist", [("esrm", "gauss"), ("cvar", "ties"),
                                           ("user", "exp")])
def test_numpy_twin_gives_the_same_weights(div, spectrum, dist):
    n = 40
    losses, sigma, idx, vals = _case(9, n, spectrum, dist, "mixed", 12)
    nu = 0.1 * max(float(np.ptp(losses)), 1.0)
    R = ho._hull_alloc(n, 4)
    ho._hull_build(np.sort(losses), sigma, nu, div, R)
    work = ho._hull_scratch(n)
    st_ = np.zeros(2, dtype=np.int64)
    qf = np.empty(n)
    for i, v in zip(idx, vals):
        ko._risk_weights(losses, sigma, nu, div, qf)
        for j in range(n):
            tw = _numpy_weight(losses, sigma, nu, div, losses[j])
            assert abs(tw - qf[j]) <= TOL
            assert abs(ho._hull_weight(R, losses[j], work, st_) - tw) <= TOL
        ho._hull_replace(R, sigma, losses[i], v)
        losses[i] = v


# ------------------------------------------------------------------------------- solver
def _user(rng, n):
    s = np.sort(rng.exponential(size=n))
    return s / s.sum()


def _objective(n, risk, div, seed=0, d=4, ties=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.standard_t(4, size=n)
    if ties:
        X = np.round(X)
        y = np.round(y)
    kw = dict(shift_cost=0.3, divergence=div)
    r = {"esrm": ro.ESRM(1.0, **kw), "extremile": ro.Extremile(2.0, **kw),
         "cvar": ro.CVaR(0.3, **kw), "user": ro.SpectralRisk(_user(rng, n), **kw)}[risk]
    return ro.Objective("absolute" if ties else "squared", r, X, y, l2_reg=1.0 / n,
                        fit_intercept=True)


_solvers = prospect_solvers


@pytest.mark.parametrize("risk,ties,div", [
    (risk, ties, div) if (risk, div) != ("user", "chi2") else
    pytest.param(risk, ties, div, marks=pytest.mark.slow)  # 30 s warm, the others <= 2 s
    for div in ("chi2", "kl")
    for risk, ties in (("esrm", False), ("extremile", True), ("user", False), ("cvar", False))])
def test_prospect_hull_path_matches_the_sorted_path_step_by_step(risk, ties, div):
    n = 100
    obj = _objective(n, risk, div, ties=ties)
    new, old = _solvers(0.02, kp.ORACLE_HULL, kp.ORACLE_FULL)
    compare_step_by_step(obj, (new, old), np.random.default_rng(1).integers(0, n, size=n))
    assert new._stats[8] > 0 and new._stats[0] == 0  # Newton iterations, no bubbling


@pytest.mark.parametrize("div", ["chi2", "kl"])
def test_default_switches_to_the_hull_far_from_the_optimum(div):
    # from the default start the bubbling moves ~n/3 ranks per step: the default oracle
    # hands the pass to hull_oracle within a few dozen steps, and every pass of both (before
    # and after the switch) uses the exact weights (_prospect_steps.certify_pass)
    n = 3000
    obj = _objective(n, "esrm", div, seed=3)
    inc, tree = _solvers(0.01, kp.ORACLE_INCREMENTAL, kp.ORACLE_TREE)
    run_passes(obj, (inc, tree), 1, seed=3, checks=100)  # the pass far from the optimum
    assert inc._stats[8] > 0 and inc._stats[0] < tree._stats[0] / 10


def test_hand_over_threshold_is_size_aware():
    # benchmarks/prospect_switch.py: the tree's fixed cost per step reaches the hull's step
    # from ~1e5 losses on, so the threshold falls to 0 there and never rises with n
    sizes = [1, 3000, 2e4, kp.HULL_SWAPS_N - 1, kp.HULL_SWAPS_N, 2e5, 1e6, 1e8]
    t = [kp.hull_swaps(int(n)) for n in sizes]
    assert all(a >= b for a, b in zip(t, t[1:])) and t[0] == kp.HULL_SWAPS > 0
    assert kp.hull_swaps(kp.HULL_SWAPS_N) == 0 and kp.hull_swaps(kp.HULL_SWAPS_N - 1) > 0


@pytest.mark.parametrize("div", ["chi2", "kl"])
def test_default_runs_a_large_table_on_the_hull_from_the_first_step(div):
    # n >= HULL_SWAPS_N: the default oracle is ORACLE_HULL itself (no bubbling, the same
    # iterates bit for bit on the same indices), and its weights are exact (certify_step)
    n = kp.HULL_SWAPS_N
    obj = _objective(n, "esrm", div, seed=5)
    inc, hull = _solvers(0.01, kp.ORACLE_INCREMENTAL, kp.ORACLE_HULL)
    idx = np.random.default_rng(5).integers(0, n, size=300)
    ends = []
    for s in (inc, hull):
        before = s.update(obj, s.init_state(obj), indices=idx[:-1])
        after = s.update(obj, before, indices=idx[-1:])
        certify_step(obj, before, after, int(idx[-1]), f"{div}, oracle {s._oracle}")
        ends.append(after.coef)
    assert inc._stats[0] == 0 and inc._stats[8] > 0  # no bubbling; Newton iterations
    assert np.array_equal(ends[0], ends[1])


def test_hull_chunk_caps_the_rank_chunk():
    from riskopt._kernels.rank_oracle import chunk_size
    for n in (1, 3000, 2e4, 2e5, 1e6):
        b = ho.hull_chunk(n)
        assert b == min(chunk_size(n), ho.HULL_B) and b & (b - 1) == 0  # a power of two
    assert ho.hull_chunk(1e6) < chunk_size(1e6)


@pytest.mark.slow
def test_oracle_steps_benchmark_replays_a_pass(tmp_path, monkeypatch):
    # benchmarks/prospect_oracle_steps.py on a tiny table: it writes one row per start and
    # chunk size, with positive per-step costs, and the hull's queries take at least one
    # Newton iteration and one chunk scan each (no timing is compared: the machine is shared);
    # --base-src replays a checkout's oracles alongside (here this one's)
    import importlib
    import json
    import sys
    from pathlib import Path
    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    mod = importlib.import_module("prospect_oracle_steps")  # by its name: numba's cache pickles it
    monkeypatch.setattr(sys, "argv", ["x", "--sizes", "600", "--chunks", "8", "--cases",
                                      "esrm:none", "esrm:chi2", "--out", str(tmp_path),
                                      "--base-src", str(bench.parent / "src")])
    mod.main()
    rows = json.loads((tmp_path / "oracle_steps_600.json").read_text())["rows"]
    assert len(rows) == 4
    for r in rows:
        assert 0 < r["update_ns"] and r["ratio"] > 0 and r["base_step_ns"] > 0
        if r["cost"] == "chi2":
            assert r["newton"] >= 1.0 and r["chunks"] >= 1.0


@pytest.mark.slow
def test_switch_benchmark_fits_the_tree_against_the_hull(tmp_path, monkeypatch):
    # benchmarks/prospect_switch.py on a tiny table: one row per perturbation, more swaps a
    # step from the larger one, and a fitted line per size (no timing is compared: the
    # machine is shared)
    import importlib
    import json
    import sys
    from pathlib import Path
    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    mod = importlib.import_module("prospect_switch")  # by its name: numba's cache pickles it
    monkeypatch.setattr(sys, "argv", ["x", "--sizes", "2000", "--cases", "esrm:chi2",
                                      "--warms", "1e-3", "1e-1", "--steps", "500",
                                      "--repeats", "1", "--out", str(tmp_path)])
    mod.main()
    res = json.loads((tmp_path / "switch_2000.json").read_text())
    rows = res["rows"]
    assert len(rows) == 2 and rows[0]["swaps"] < rows[1]["swaps"]
    assert all(r["threshold"] == kp.hull_swaps(2000) for r in rows)
    assert len(res["fits"]) == 1 and res["fits"][0]["n"] == 2000


@pytest.mark.slow
def test_certificate_benchmark_checks_its_hits(tmp_path, monkeypatch):
    # benchmarks/prospect_certificate.py on a tiny table: one row per start, every query
    # counted once (a hit or one kind of miss), no hit whose cached weight differs from the
    # query's (the margin argument), and the floor's weights (each query answered from its
    # certified segment) those of the query (no timing is compared: the machine is shared)
    import importlib
    import json
    import sys
    from pathlib import Path
    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    mod = importlib.import_module("prospect_certificate")  # by its name: numba's cache pickles it
    monkeypatch.setattr(sys, "argv", ["x", "--sizes", "600", "--cases", "esrm:chi2",
                                      "extremile:kl", "--out", str(tmp_path)])
    mod.main()
    rows = json.loads((tmp_path / "certificate_600.json").read_text())["rows"]
    assert len(rows) == 4
    for r in rows:
        assert r["queries"] == r["steps"] - r["unsettled"] and r["wrong"] == 0
        assert r["hits"] + r["miss_none"] + r["miss_crossed"] + r["miss_spent"] == r["queries"]
        assert r["floor_max_rel_err"] <= 1e-12 and r["step_ns"] > 0 and r["floor_ns"] > 0
