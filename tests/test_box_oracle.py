"""The box-spectrum oracle (``riskopt._kernels.box_oracle``) against the full PAV.

For CVaR with a chi-square shift cost the weights are ``clip((l - tau) / (2 n nu), 0, c)``,
with a KL cost ``min(c, exp((l - m) / nu))``, with one scalar ``tau`` / ``m`` kept under
single-loss changes. Property tests (hypothesis), both costs: random
loss tables (continuous, ties, exponential, a large common offset; ``oracles`` test style,
the tables and update sequences of ``test_incremental_pav._case``: small moves, fresh draws,
jumps to both ends of the range and beyond, rewrites of existing values), CVaR levels at
random, with ``alpha n`` an integer, ``alpha n = n`` (all weights ``1/n``) and ``alpha n =
1`` (max loss); after every update the weights of the updated index (before and after the
update: Prospect's two queries) and of every index (materialised) must equal
``oracles._risk_weights`` on the same table to 1e-12. n runs from 1 to 300 by default (1000
sequences) and to 1e4 under ``-m slow`` (2000 more).

Then the solver: Prospect with the box oracle (the default for CVaR, chi2 and KL) against the hull
tree (``ORACLE_TREE``) and the O(n) oracle (``ORACLE_FULL``) on the same index sequences.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

import riskopt as ro
from riskopt._kernels import box_oracle as bo
from riskopt._kernels import oracles as ko
from riskopt._kernels import prospect as kp

from _prospect_steps import compare_step_by_step, prospect_solvers, q_tolerance, run_passes
from test_incremental_pav import DISTS, MOVES, PROP as IPAV_PROP, _case, _objective
from test_incremental_pav import cases as IPAV_CASES

TOL = 1e-12
LEVELS = ("random", "integer", "all", "one")


@njit(cache=True)
def _build(losses, q0, nu, div, c, k, r, S, stats):
    if div == ko.CHI2:
        bo._box_build(losses, q0, nu, c, k, r, S, stats)
    else:
        bo._kl_build(losses, q0, nu, c, k, r, S, stats)


@njit(cache=True)
def _update(S, i, v, div, stats):
    if div == ko.CHI2:
        bo._box_update(S, i, v, stats)
    else:
        bo._kl_update(S, i, v, stats)


@njit(cache=True)
def _weight(l, f, div):
    return bo._box_weight(l, f) if div == ko.CHI2 else bo._kl_weight(l, f)


@njit(cache=True)
def _replay_box(losses, sigma, nu, div, idx, vals, q0, check_every):
    """Apply ``losses[idx[t]] = vals[t]`` one by one through ``_box_update``; compare the
    updated index's weight before and after each update, and every ``check_every`` steps all
    weights, with the full oracle. Returns ``(max abs error, status, stats)``; status 0 ok, 1
    not a box spectrum, 2 a broken invariant (heap order, positions, set thresholds, sizes)."""
    n = losses.shape[0]
    stats = np.zeros(10, dtype=np.int64)
    c, k, r = bo._box_spectrum(sigma)
    if k < 0:
        return 0.0, 1, stats
    S = bo._box_alloc(n)
    _build(losses, q0, nu, div, c, k, r, S, stats)
    qf = np.empty(n)
    qb = np.empty(n)
    ko._risk_weights(losses, sigma, nu, div, qf)
    worst = 0.0
    for t in range(idx.shape[0]):
        i = idx[t]
        e = abs(_weight(losses[i], S[4], div) - qf[i])  # the sampled index's query
        worst = max(worst, e)
        losses[i] = vals[t]
        _update(S, i, vals[t], div, stats)
        ko._risk_weights(losses, sigma, nu, div, qf)
        e = abs(_weight(losses[i], S[4], div) - qf[i])  # the refreshed index's query
        worst = max(worst, e)
        if t % check_every == 0 or t == idx.shape[0] - 1:
            if not _consistent(losses, S, div):
                return worst, 2, stats
            bo._box_weights(losses, S, qb, div != ko.CHI2)
            for m in range(n):
                worst = max(worst, abs(qb[m] - qf[m]))
    return worst, 0, stats


@njit(cache=True)
def _consistent(losses, S, div):
    """Heap order and positions of the heaps, every index in exactly one set, sizes, and the
    sets on their side of the thresholds at the final ``tau`` / ``m`` (the walk leaves no
    violation beyond their rounding: a walk that stops at a breakpoint ``l - L0 - W`` may
    leave ``l`` a few ulps of the range below ``tau + W``). KL: sets mid (``MIDMAX`` only)
    and top."""
    hk, hi, pos, size, f = S
    n = losses.shape[0]
    chi2 = div == ko.CHI2
    if chi2 and (size[bo.MIDMIN] != size[bo.MIDMAX] or size[0] + size[1] + size[3] != n):
        return False
    if not chi2 and (size[bo.LOW] != 0 or size[bo.MIDMIN] != 0 or size[2] + size[3] != n):
        return False
    for h in range(4):
        sgn = -1.0 if (h == bo.LOW or h == bo.MIDMAX) else 1.0
        for p in range(size[h]):
            i = hi[h, p]
            if pos[i, h] != p or hk[h, p] != sgn * losses[i]:
                return False
            if p > 0 and hk[h, (p - 1) >> 1] > hk[h, p]:
                return False
    t, L0, W = f[0], f[3], f[7]
    # the rounding of tau / m: a breakpoint l - R carries eps |l - R|, and KL re-centres its
    # reference R on losses (R + t rounded), so allow a few hundred ulps of the magnitudes
    span = 0.0
    for i in range(n):
        span = max(span, abs(losses[i]))
    e = 1e-13 * (span + abs(L0) + abs(t) + abs(W))
    for i in range(n):
        d = losses[i] - L0
        inm = pos[i, bo.MIDMAX] >= 0
        int_ = pos[i, bo.TOP] >= 0
        if not chi2:  # mid below m + h (h = nu log c, f[7]), top from there on
            if inm + int_ != 1 or (inm and d > t + W + e) or (int_ and d < t + W - e):
                return False
            continue
        inl = pos[i, bo.LOW] >= 0
        if inl + inm + int_ != 1 or inm != (pos[i, bo.MIDMIN] >= 0):
            return False
        if (inl and d > t + e) or (inm and (d < t - e or d > t + W + e)) or \
                (int_ and d < t + W - e):
            return False
    return True


def _sigma(level, n, rng):
    if level == "random":
        a = float(rng.uniform(0.02, 0.98))
    elif level == "integer":
        a = int(rng.integers(1, n + 1)) / n
    elif level == "all":
        a = 1.0
    else:
        a = 1.0 / n
    return np.ascontiguousarray(ro.CVaR(a).spectrum(n), dtype=np.float64)


def _check(seed, n, level, dist, move, div, nu_rel, start, steps, check_every=1):
    losses, _, idx, vals = _case(seed, n, "mean", dist, move, steps)
    sigma = _sigma(level, n, np.random.default_rng(seed + 1))
    spread = max(float(np.ptp(np.concatenate([losses, vals]))), 1.0)
    nu = nu_rel * spread
    if start == "exact":
        q0 = np.empty(n)
        ko.risk_weights(losses, sigma, nu, div, q0)
    elif start == "uniform":
        q0 = np.full(n, 1.0 / n)
    else:
        q0 = np.zeros(n)
    worst, status, stats = _replay_box(losses.copy(), sigma, nu, div, idx, vals, q0,
                                       check_every)
    assert status == 0, status
    assert worst <= TOL, (worst, stats)
    return stats


PROP = settings(IPAV_PROP, max_examples=1000)
cases = {k: v for k, v in IPAV_CASES.items() if k not in ("spectrum", "B", "nu_rel")}
cases.update(level=st.sampled_from(LEVELS), nu_rel=st.sampled_from([1e-3, 1e-2, 0.1, 1.0, 10.0]),
             start=st.sampled_from(["exact", "uniform", "zeros"]))


@PROP
@given(**cases)
def test_box_weights_equal_full_oracle_after_every_update(seed, n, level, dist, move, div,
                                                          nu_rel, start):
    _check(seed, n, level, dist, move, div, nu_rel, start, steps=min(3 * n + 5, 200))


@pytest.mark.parametrize("div", [ko.CHI2, ko.KL])
@pytest.mark.parametrize("n,level,move", [
    (1000, "random", "fresh"), (2000, "integer", "mixed"), (3000, "random", "ends"),
    (10000, "random", "mixed"), (10000, "integer", "small"), (5000, "all", "mixed")])
def test_box_weights_at_larger_n(n, level, move, div):
    stats = _check(11 + n, n, level, "gauss", move, div, 0.1, "exact", steps=150)
    assert stats[9] > 0  # the heaps were used


@pytest.mark.slow
@settings(PROP, max_examples=2000)
@given(**{**cases, "n": st.integers(1, 10000)})
def test_box_weights_property_up_to_1e4(seed, n, level, dist, move, div, nu_rel, start):
    _check(seed, n, level, dist, move, div, nu_rel, start, steps=400,
           check_every=1 if n <= 1000 else 10)


@pytest.mark.parametrize("div", [ko.CHI2, ko.KL])
def test_degenerate_tables(div):
    # n = 1; every loss equal (and rewritten to the same value); alpha n = n and alpha n
    # integer with integer losses and W = 2 n nu c = 1, so losses sit exactly on the
    # thresholds (mid empty, ties at tau and tau + W); jumps across the whole range
    for n in (1, 2, 3, 4, 5, 8, 33):
        for k in range(1, n + 1):
            sigma = np.ascontiguousarray(ro.CVaR(k / n).spectrum(n), dtype=np.float64)
            assert bo._box_spectrum(sigma)[1] == k
            nu = 1.0 / (2.0 * n * sigma[-1])  # W = 2 n nu c = 1
            rng = np.random.default_rng(n * 100 + k)
            for losses, vals in (
                    (np.full(n, 0.7), np.where(rng.uniform(size=60) < 0.5, 0.7,
                                               rng.normal(size=60))),
                    (rng.integers(0, 4, size=n).astype(float),
                     rng.integers(-2, 6, size=60).astype(float)),
                    (rng.normal(size=n), rng.choice([-1e3, 1e3, 0.0], size=60))):
                idx = rng.integers(0, n, size=60)
                for q0 in (np.zeros(n), np.full(n, 1.0 / n)):
                    worst, status, _ = _replay_box(losses.copy(), sigma, nu, div, idx, vals,
                                                   q0, 1)
                    assert status == 0 and worst <= TOL, (n, k, worst)


def test_box_spectrum_detection():
    for n in (1, 2, 7, 100, 1001):
        for a in (0.01, 0.1, 0.37, 0.5, 0.999, 1.0, 1.0 / n):
            sigma = np.ascontiguousarray(ro.CVaR(a).spectrum(n), dtype=np.float64)
            c, k, r = bo._box_spectrum(sigma)
            assert k >= 1 and c == sigma.max() and 0.0 <= r < c
            assert np.isclose(k * c + r, 1.0, rtol=0, atol=1e-12)
    for risk in (ro.ESRM(1.0), ro.Extremile(2.0)):
        assert bo._box_spectrum(np.ascontiguousarray(risk.spectrum(50)))[1] == -1
    two = np.array([0.0, 0.1, 0.2, 0.35, 0.35])  # two fractional entries: not a box
    assert bo._box_spectrum(two)[1] == -1
    assert bo._box_spectrum(np.zeros(3))[1] == -1


# ------------------------------------------------------------------------------- solver
_solvers = prospect_solvers


@pytest.mark.parametrize("div", ["chi2", "kl"])
@pytest.mark.parametrize("intercept", [False, True])
def test_prospect_box_matches_tree_and_full_step_by_step(intercept, div):
    n = 300
    rng = np.random.default_rng(2)
    X = rng.normal(size=(n, 5))
    y = X @ rng.normal(size=5) + rng.standard_t(4, size=n)
    obj = ro.Objective("squared", ro.CVaR(0.37, shift_cost=0.3, divergence=div), X, y,
                       l2_reg=1.0 / n, fit_intercept=intercept)
    solvers = _solvers(0.02, kp.ORACLE_INCREMENTAL, kp.ORACLE_TREE, kp.ORACLE_FULL)
    compare_step_by_step(obj, solvers, rng.integers(0, n, size=n), order=True, rank=True)
    box, tree, _ = (s._stats for s in solvers)
    assert box[0] == 0 and box[9] > 0 and box[3] == n  # the box path: no swaps, heaps used
    assert tree[0] > 0 and tree[9] == 0


@pytest.mark.parametrize("loss,alpha,div", [
    (loss, alpha, div) if div == "chi2" or (loss, alpha) == ("squared", 0.5) else
    # the KL passes cost ~3x the chi-square ones: one KL row by default, the rest slow
    pytest.param(loss, alpha, div, marks=pytest.mark.slow)
    for div in ("chi2", "kl")
    for loss, alpha in (("squared", 0.5), ("squared", 0.1), ("logistic", 0.3),
                        ("multinomial", 0.25))])
def test_prospect_box_passes_match_the_old_paths(loss, alpha, div):
    # whole passes on a larger table (K = 1 and K = 3 loops): the box path, the hull tree and
    # the O(n) oracle, each pass's weights certified against the exact oracle of each step's
    # table (_prospect_steps.certify_pass)
    n = 3000
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 6))
    z = X @ rng.normal(size=6)
    y = {"squared": z + rng.standard_t(4, size=n), "logistic": (z + rng.normal(size=n) > 0),
         "multinomial": rng.integers(0, 3, size=n)}[loss].astype(float)
    obj = ro.Objective(loss, ro.CVaR(alpha, shift_cost=0.5, divergence=div), X, y,
                       l2_reg=1.0 / n)
    solvers = _solvers(0.01, kp.ORACLE_INCREMENTAL, kp.ORACLE_TREE, kp.ORACLE_FULL)
    run_passes(obj, solvers, 3, checks=60)
    assert solvers[0]._stats[0] == 0 and solvers[0]._stats[3] == 3 * n


@pytest.mark.parametrize("risk", [ro.ESRM(1.0, shift_cost=0.5),
                                  ro.Extremile(2.0, shift_cost=0.5, divergence="kl")])
def test_other_problems_stay_on_the_sorted_paths(risk):
    # a non-box spectrum with a shift cost is not the box oracle's: the default still bubbles
    # (near the optimum; far from it, it hands the pass to hull_oracle:
    # tests/test_hull_oracle.py; nu = 0 takes the rank oracle: tests/test_rank_oracle.py)
    n = 200
    rng = np.random.default_rng(4)
    X = rng.normal(size=(n, 3))
    obj = ro.Objective("squared", risk, X, X @ rng.normal(size=3) + rng.normal(size=n),
                       l2_reg=1.0 / n)
    s, = _solvers(0.01, kp.ORACLE_INCREMENTAL)
    s.update(obj, s.init_state(obj))
    assert s._stats[0] > 0 and s._stats[9] == 0


@pytest.mark.parametrize("div", ["chi2", "kl"])
def test_objective_helper_problem_runs_on_the_box_path(div):
    # the CVaR problems of test_incremental_pav's solver tests take the box path by default,
    # and their passes (as the tree's) use the exact weights (_prospect_steps.certify_pass)
    obj = _objective(500, "cvar", div, seed=5)
    box, tree = _solvers(0.01, kp.ORACLE_INCREMENTAL, kp.ORACLE_TREE)
    run_passes(obj, (box, tree), 2, seed=5)
    assert box._stats[0] == 0 and tree._stats[0] > 0



def test_an_infinite_loss_gets_the_limit_weights():
    # a loss of +inf (a diverging run) is filed on top with weight c; the other weights are
    # those of the full oracle with that loss replaced by a huge finite one (the limit)
    rng = np.random.default_rng(8)
    for n, a in ((1, 1.0), (5, 0.4), (50, 0.3), (50, 1.0)):
        sigma = np.ascontiguousarray(ro.CVaR(a).spectrum(n), dtype=np.float64)
        losses = rng.normal(size=n)
        idx = rng.integers(0, n, size=30)
        vals = np.where(rng.uniform(size=30) < 0.3, np.inf, rng.normal(size=30))
        c, k, r = bo._box_spectrum(sigma)
        S = bo._box_alloc(n)
        table = losses.copy()
        bo._box_build(table, np.zeros(n), 0.2, c, k, r, S, np.zeros(0, dtype=np.int64))
        for i, v in zip(idx, vals):
            table[i] = v
            bo._box_update(S, i, v, np.zeros(0, dtype=np.int64))
            if np.isinf(table).sum() > k:  # more infinite losses than the cap allows
                break
            qb = np.empty(n)
            bo._box_weights(table, S, qb, False)
            qf = np.empty(n)
            ko.risk_weights(np.where(np.isinf(table), 1e12, table), sigma, 0.2, ko.CHI2, qf)
            np.testing.assert_allclose(qb, qf, rtol=0, atol=TOL)


@pytest.mark.parametrize("div", ["chi2", "kl"])
@pytest.mark.parametrize("nu", [1e305, 1.7e308])
@pytest.mark.parametrize("risk", ["cvar", "max", "esrm"])
def test_prospect_at_huge_shift_costs_keeps_exact_weights(risk, nu, div):
    # the shift cost's scale (2 n nu, KL nu (1 + log n)) past SCALE_LIMIT: box_oracle's
    # scale overflows (chi2, CVaR 0.3: weights 0.0023 off; a cap c = 1: NaN weights and a
    # NaN iterate; KL at 1.7e308: 0.005 off), as do the hull tree's slopes (chi2 ESRM); the
    # default takes hull_oracle there. Every 7th step's weight, and the end of each pass,
    # equal the exact oracle's on that table (the Fenchel certificate of _prospect_steps
    # overflows at this nu: the weights are compared directly)
    n = 200
    rng = np.random.default_rng(9)
    X = rng.normal(size=(n, 4))
    y = X @ rng.normal(size=4) + rng.standard_t(4, size=n)
    r = {"cvar": ro.CVaR(0.3, shift_cost=nu, divergence=div),
         "max": ro.CVaR(0.5 / n, shift_cost=nu, divergence=div),
         "esrm": ro.ESRM(1.0, shift_cost=nu, divergence=div)}[risk]
    obj = ro.Objective("squared", r, X, y, l2_reg=1.0 / n)
    assert nu > kp.SCALE_LIMIT / (2.0 * n if div == "chi2" else 1.0 + np.log(n))
    s, = _solvers(0.01, kp.ORACLE_INCREMENTAL)
    st = s.init_state(obj)
    for e in range(2):
        idx = np.random.default_rng([9, e]).permutation(n)
        new = s.update(obj, st, indices=idx)
        assert np.all(np.isfinite(new.coef))
        table = st.losses.copy()
        for t, i in enumerate(idx):  # the weight each 7th step used, on that step's table
            if t % 7 == 0 or t == n - 1:
                q = obj.risk_weights(table)[1]
                assert abs(new.rho[i] - q[i]) <= q_tolerance(obj, table), (e, t)
            table[i] = new.losses[i]
        np.testing.assert_allclose(new.q, obj.risk_weights(new.losses)[1], rtol=0,
                                   atol=q_tolerance(obj, new.losses))
        st = new
    assert s._stats[0] == 0 and s._stats[8] > 0  # hull_oracle: no swaps, Newton iterations
