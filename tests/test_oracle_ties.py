"""The sorting oracle on heavily tied losses (``riskopt._kernels.oracle_ties``) and the fast
paths of ``oracles.risk_weights`` (packed-key sort with the local fix of near-equal runs,
the fused chi-square / KL PAV + scatter + value).

The tied oracle sorts the values only, solves on the distinct values and maps every loss to
its value's weight through a bucket table. Checked against the stable merge-sort oracle
(``oracles._risk_weights``: argsort + the log-form PAV, itself checked against cvxpy in
``test_oracles``) and the NumPy twin on tied, few-valued, skewed (crowded buckets), offset and
signed losses, every spectrum, chi-square and KL over six decades of ``nu``; its declines are
the documented ones and hand over to the argsort path.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import riskopt as ro
from riskopt._kernels import oracle_ties as kt
from riskopt._kernels import oracles as ko
from riskopt._kernels import sort_keys as sk
from reference_impl import oracles as tw

EPS = np.finfo(float).eps


def tied_losses(rng, n, kind):
    if kind == "grid":                       # rounded squared residuals (the benchmark's ties)
        return np.round(rng.standard_normal(n) ** 2 * 3.0, 1)
    if kind == "few":                        # a handful of values, long ties at every cut
        return rng.integers(0, 4, size=n).astype(float)
    if kind == "skew":                       # values decades apart: crowded buckets
        vals = np.concatenate([np.arange(40) * 1e-9, [1e-6, 1.0, 1.0 + 2 ** -40, 1e3]])
        return vals[rng.integers(0, vals.size, size=n)]
    if kind == "offset":                     # a common offset costs no precision
        return 1e4 + rng.integers(0, 30, size=n) * 0.25
    if kind == "signed":                     # negatives and both zeros
        vals = np.array([-3.0, -0.0, 0.0, 0.5, 2.0, -1e-300, 7.25])
        return vals[rng.integers(0, vals.size, size=n)]
    raise ValueError(kind)


def risk_of(kind, n, nu, div, rng):
    kw = dict(shift_cost=nu, divergence=div)
    if kind == "esrm":
        return ro.ESRM(1.0, **kw)
    if kind == "extremile":
        return ro.Extremile(2.0, **kw)
    if kind == "cvar":
        return ro.CVaR(0.3, **kw)
    w = np.sort(rng.random(n) * (rng.random(n) < 0.7))     # zeros, then a random ramp
    return ro.SpectralRisk(w / w.sum(), **kw) if w.sum() > 0 else ro.Mean(**kw)


def reference(l, sigma, nu, div):
    q = np.empty(l.shape[0])
    v = ko._risk_weights(l, sigma, nu, div, q)
    return v, q


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 600),
       kind=st.sampled_from(["grid", "few", "skew", "offset", "signed"]),
       spectrum=st.sampled_from(["esrm", "extremile", "cvar", "user"]),
       log_nu=st.sampled_from([None, -3, -1, 0, 1, 3]), div=st.sampled_from(["chi2", "kl"]))
def test_tied_oracle_equals_the_merge_sort_oracle(seed, n, kind, spectrum, log_nu, div):
    rng = np.random.default_rng(seed)
    l = np.ascontiguousarray(tied_losses(rng, n, kind))
    nu = 0.0 if log_nu is None else 10.0 ** log_nu
    risk = risk_of(spectrum, n, nu, div, rng)
    sigma = np.ascontiguousarray(risk.spectrum(n))
    q = np.full(n, np.nan)
    v = kt.tied_risk_weights(l, sigma, nu, risk.div_code, q)
    n_values = np.unique(l).size
    if v is None:    # the documented declines only: too many values, a KL table too wide
        assert (n_values > max(1, n // kt.TIES_MAX_GROUPS)
                or (div == "kl" and nu > 0 and np.ptp(l) / nu > 500)), (n_values, np.ptp(l))
        return
    v_ref, q_ref = reference(l, sigma, nu, risk.div_code)
    np.testing.assert_allclose(q, q_ref, rtol=0, atol=1e-12)
    # the twin is not translation invariant: its KL terms exp(l / nu) overflow for
    # |l| / nu > 700 (found by hypothesis: n = 1, l = 1e3, nu = 1e-3)
    if kind != "offset" and not (div == "kl" and nu > 0 and np.max(np.abs(l)) / nu > 500):
        np.testing.assert_allclose(q, tw.weights(l, sigma, nu, div), rtol=0,
                                   atol=1e-12)
    for u in np.unique(l):                   # one weight per value, exactly
        assert np.ptp(q[l == u]) == 0.0
    tol = 8 * n * EPS * (abs(v_ref) + np.ptp(l) + 1.0 + nu * (1.0 + np.log(n)))
    assert abs(v - v_ref) <= tol, (v, v_ref)


@pytest.mark.parametrize("div", ["chi2", "kl"])
@pytest.mark.parametrize("nu", [0.0, 0.5])
def test_risk_weights_takes_the_tied_path_and_agrees(nu, div):
    """On the benchmark's kind of ties (squared residuals rounded to 2 decimals) the sample
    predicts few values, ``risk_weights`` returns the tied oracle's result bit for bit, and
    that agrees with the merge-sort oracle to 1e-12."""
    rng = np.random.default_rng(5)
    n = 20000
    l = np.round(rng.standard_normal(n) ** 2, 2)
    assert kt.few_values(l, l.view(np.uint64), kt.TIES_MAX_GROUPS)
    for risk in (ro.ESRM(1.0, shift_cost=nu, divergence=div),
                 ro.Extremile(2.0, shift_cost=nu, divergence=div)):
        sigma = np.ascontiguousarray(risk.spectrum(n))
        q, q_t = np.empty(n), np.empty(n)
        v = ko.risk_weights(l, sigma, nu, risk.div_code, q)
        v_t = kt.tied_risk_weights(l, sigma, nu, risk.div_code, q_t)
        assert v == v_t and np.array_equal(q, q_t)
        v_ref, q_ref = reference(l, sigma, nu, risk.div_code)
        np.testing.assert_allclose(q, q_ref, rtol=0, atol=1e-12)
        assert abs(v - v_ref) <= 1e-12 * max(1.0, abs(v_ref))


def test_few_values_guesses_from_the_sample():
    rng = np.random.default_rng(0)
    for n in (300, 8192, 200000):
        cont = rng.standard_normal(n) ** 2
        assert not kt.few_values(cont, cont.view(np.uint64), 4)
        few = rng.integers(0, 50, size=n).astype(float)
        assert kt.few_values(few, few.view(np.uint64), 4)
        half = np.where(rng.random(n) < 0.5, 0.0, cont)        # one giant tie + continuous
        assert not kt.few_values(half, half.view(np.uint64), 4)
        nan = few.copy()
        nan[::7] = np.nan
        assert not kt.few_values(nan, nan.view(np.uint64), 4)


def test_tied_oracle_declines():
    n = 400
    sigma = np.ascontiguousarray(ro.ESRM(1.0).spectrum(n))
    base = np.arange(n) % 5 * 1.0
    q = np.empty(n)
    for bad in (np.nan, np.inf, -np.inf):
        l = base.copy()
        l[3] = bad
        assert kt.tied_risk_weights(l, sigma, 0.5, 0, q) is None
    assert kt.tied_risk_weights(np.array([-1e308, 1e308] * (n // 2)), sigma, 0.0, 0, q) is None
    assert kt.tied_risk_weights(np.arange(n) * 1.0, sigma, 0.5, 0, q) is None     # n values
    assert kt.tied_risk_weights(base * 1e3, sigma, 1.0, 1, q) is None           # KL too wide
    v = kt.tied_risk_weights(np.full(n, 2.5), sigma, 0.5, 1, q)               # one value
    assert v == 2.5 and np.all(q == 1.0 / n)


def test_the_fused_paths_equal_the_unfused_oracle_to_rounding():
    """``_chi2_gathered`` reproduces ``_weights_sorted_ws`` + scatter + ``_risk_sorted``
    bit for bit; ``_chi2_runs_gathered`` (the PAV from the branch-free runs) to rounding:
    weights within ``4 n eps (range / (2 n nu) + max sigma)`` (a block mean's rounding
    over ``2 n nu``), the value within ``8 n eps (|v| + range)``; ``_kl_gathered`` the
    linear KL PAV's weights within ``4 n eps max q`` (relative rounding of ``S_b / A_b``)
    and its value (from the blocks) to rounding. All with the scratch ``iwork`` of
    ``2 n`` (the mark array)."""
    rng = np.random.default_rng(3)
    n = 5000
    for l in (rng.standard_normal(n) ** 2, 1e4 + rng.standard_normal(n),
              rng.standard_normal(n) * 1e-3, 3.0 * rng.random(n)):
        order, ls = ko.sorted_order(l)
        for risk in (ro.ESRM(1.0), ro.Extremile(2.0), ro.CVaR(0.2)):
            sigma = np.ascontiguousarray(risk.spectrum(n))
            for nu, ni in ((1e-3, 2), (0.5, 2), (30.0, 2)):
                qs, q, q_ref = np.empty(n), np.empty(n), np.empty(n)
                work, st_ = np.empty(3 * n), np.empty(ni * n, dtype=np.int64)
                ko._weights_sorted(ls, sigma, nu, 0, qs)
                q_ref[order] = qs
                v_ref = ko._risk_sorted(ls, qs, nu, 0)
                v = ko._chi2_gathered(order, ls, sigma, nu, q, work, st_)
                assert v == v_ref and np.array_equal(q, q_ref)     # the compact PAV
                v = ko._chi2_runs_gathered(order, ls, sigma, nu, q, work, st_)
                tol = 4 * n * EPS * (np.ptp(l) / (2 * n * nu) + sigma.max())
                np.testing.assert_allclose(q, q_ref, rtol=0, atol=tol)
                assert abs(v - v_ref) <= 8 * n * EPS * (abs(v_ref) + np.ptp(l))
                v = ko._kl_gathered(order, ls, sigma, nu, q, work, st_)
                if not ko._kl_weights_linear(ls, sigma, nu, qs, np.empty(2 * n), st_):
                    assert np.isnan(v)
                    continue
                q_ref[order] = qs
                np.testing.assert_allclose(q, q_ref, rtol=0, atol=4 * n * EPS * qs.max())
                v_ref = ko._risk_sorted(ls, qs, nu, 1)
                assert abs(v - v_ref) <= 8 * n * EPS * (abs(v_ref) + np.ptp(l) + nu * np.log(n))


@pytest.mark.parametrize("radix", [False, True])
def test_sorted_order_by_float_keys_is_the_stable_argsort(radix):
    """``sorted_order`` sorts float64 keys (value bits, low bits = the index, complemented
    for negative losses) when every loss is finite: exactly ``np.argsort(kind="stable")``
    also for negative near-equal runs, both zeros, subnormals of both signs, ``n`` a power
    of two (the last index fills every low bit) and one past it; so does its radix sort
    of float32 keys for ``n <= RADIX_MAX`` (``radix``)."""
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 8192, 8193):
        cases = [rng.standard_normal(n), -rng.standard_normal(n) ** 2,
                 np.round(rng.standard_normal(n), 1),
                 np.where(rng.random(n) < .5, -5e-324, 5e-324) * rng.integers(0, 3, n),
                 np.concatenate([[-0.0, 0.0] * 3, rng.standard_normal(n)])[:n],
                 1.0 + rng.standard_normal(n) * 1e-13, -(1.0 + rng.standard_normal(n) * 1e-13),
                 np.where(rng.random(n) < .5, -1e-310, 1e-310) * rng.random(n)]
        for x in cases:
            order, ls = ko.sorted_order(x, radix=radix)
            np.testing.assert_array_equal(order, np.argsort(x, kind="stable"))
            np.testing.assert_array_equal(ls, x[order])


@pytest.mark.parametrize("top", [0.6931471805599453, 0.0, -3.25, 1e8])
def test_equal_losses_in_numpy_equal_the_tied_kernel(top):
    """``equal_risk_weights`` (all losses equal, the fits' ``w = 0``; NumPy, so that a first
    fit compiles no tied-oracle kernel) gives the tied kernel's weights and value (one group:
    the same operations) for ``nu = 0``, chi-square and KL, and declines for losses that are
    not all equal or not finite; the oracles take it from the first equal sample on."""
    n = 1000
    l = np.full(n, top)
    for risk in (ro.ESRM(1.0), ro.Extremile(2.0), ro.CVaR(0.2)):
        sigma = np.ascontiguousarray(risk.spectrum(n))
        for nu, div in ((0.0, 0), (1e-3, 0), (0.5, 0), (1e-3, 1), (0.5, 1)):
            q, q_ref = np.empty(n), np.empty(n)
            v = kt.equal_risk_weights(l, sigma, nu, div, q)
            v_ref = kt.tied_risk_weights(l, sigma, nu, div, q_ref)
            assert v_ref is not None
            assert abs(v - v_ref) <= 4 * EPS * max(abs(top), 1.0), (v, v_ref)
            assert np.allclose(q, q_ref, rtol=4 * EPS, atol=0)
            q2 = np.empty(n)
            assert ko.risk_weights(l, sigma, nu, div, q2) == v and np.array_equal(q2, q)
    q = np.empty(n)
    sigma = np.full(n, 1.0 / n)
    assert kt.equal_risk_weights(np.r_[l[:-1], top + 1.0], sigma, 0.0, 0, q) is None
    assert kt.equal_risk_weights(np.full(n, np.inf), sigma, 0.0, 0, q) is None


@pytest.mark.parametrize("div", [0, 1])
def test_the_pav_from_runs_on_ties_zero_mass_and_extreme_nu(div):
    """The branch-free runs of ``_chi2_runs_gathered`` / ``_kl_gathered`` on what bends them: ties
    (a run of equal losses), spectra with zero mass (CVaR: ``sigma = 0`` below the tail),
    a tiny ``nu`` (chi2: ``2 n nu`` far below the losses' spacing, subnormal ``nu`` where
    ``1 / (2 n nu)`` overflows) and a large one, against the merge-sort oracle (log-form PAV;
    checked against cvxpy in ``test_oracles``): weights to 1e-12, values to rounding,
    through the ``2 n`` and the ``n`` scratch (``iwork``)."""
    rng = np.random.default_rng(11)
    n = 300
    nus = (5e-312, 1e-20, 1e-3, 0.5, 1e4) if div == 0 else (1e-2, 0.5, 1e4)
    for l in (np.round(rng.standard_normal(n), 1), rng.random(n) * 3, 1e4 + rng.random(n),
              np.repeat(rng.random(n // 3), 3)):
        order, ls = ko.sorted_order(l)
        for risk in (ro.CVaR(0.2), ro.ESRM(1.0), ro.Extremile(2.0)):
            sigma = np.ascontiguousarray(risk.spectrum(n))
            for nu in nus:
                q_ms = np.empty(n)
                v_ms = ko._risk_weights(l, sigma, nu, div, q_ms)
                for ni in (1, 2):
                    q = np.empty(n)
                    work, iwork = np.empty(3 * n), np.empty(ni * n, dtype=np.int64)
                    if div == 0:
                        v = ko._chi2_runs_gathered(order, ls, sigma, nu, q, work, iwork)
                    else:
                        v = ko._kl_gathered(order, ls, sigma, nu, q, work, iwork)
                        if np.isnan(v):       # declined: a table too wide for the linear PAV
                            assert np.ptp(l) / nu > ko.KL_LINEAR_RANGE
                            continue
                    np.testing.assert_allclose(q, q_ms, rtol=0, atol=1e-12,
                                               err_msg=f"{risk} nu={nu}")
                    # (nu D(q): the reference's own rounding grows with nu, as above)
                    assert abs(v - v_ms) <= 8 * n * EPS * (abs(v_ms) + np.ptp(l)
                                                           + nu * np.log(n))


def _loss_vectors(rng, n):
    """Distinct, lightly tied, heavily tied, signed-zero, NaN and infinite losses."""
    cont = rng.standard_normal(n) ** 2 - 0.3
    light = cont.copy()
    light[::5] = light[1::5][:len(light[::5])]
    zeros = np.where(rng.random(n) < 0.5, 0.0, -0.0) * (rng.random(n) < 0.3) + cont
    nan = cont.copy()
    nan[3] = np.nan
    inf = cont.copy()
    inf[[1, 7]] = np.inf
    return {"distinct": cont, "light ties": light, "signed zeros": zeros,
            "few values": np.round(cont, 1), "nan": nan, "inf": inf}


@pytest.mark.parametrize("n", [257, 5000])
def test_the_sorted_tie_check_makes_the_choice_of_the_sampled_one(n):
    """``risk_weights_sorted`` checks the sorted losses for equal neighbours before it asks
    the sampled estimate (``few_values``, whose kernel a first fit on continuous losses then
    does not compile): where no two are equal the estimate is False, so the tied oracle is
    chosen exactly as before, and the result is ``risk_weights``' bit for bit."""
    rng = np.random.default_rng(n)
    for kind, l in _loss_vectors(rng, n).items():
        srt = sk.sorted_order(l)
        if ko.n_ties(srt[1]) == 0:
            assert not kt.few_values(l, l.view(np.uint64), kt.TIES_MAX_GROUPS), kind
        for nu in (0.0, 0.3):
            sigma = np.ascontiguousarray(ro.ESRM(1.0, shift_cost=nu).spectrum(n))
            q, q_s = np.empty(n), np.empty(n)
            with np.errstate(invalid="ignore", over="ignore"):
                v = ko.risk_weights(l, sigma, nu, ko.CHI2, q)
                v_s, _ = ko.risk_weights_sorted(l, sigma, nu, ko.CHI2, q_s)
            assert np.array_equal(q, q_s, equal_nan=True), kind
            assert v == v_s or (np.isnan(v) and np.isnan(v_s)), kind


@pytest.mark.parametrize("n", [1, 2, 300, 5000])
def test_distinct_losses_at_nu0_in_numpy_equal_the_kernel(n):
    """``oracles._distinct_nu0`` (no kernel: a fit's ``nu = 0`` evaluations on distinct
    losses) gives ``_risk_weights_nu0``'s weights bit for bit, infinite and NaN losses
    included, and its value to the rounding of the two summation orders (pairwise against
    rank order: ``2 n eps`` times the sum of the terms' magnitudes), equal where it is not
    finite."""
    rng = np.random.default_rng(n)
    for kind, l in _loss_vectors(rng, max(n, 8)).items():
        l = l[:n]
        order, ls = sk.sorted_order(l)
        if ko.n_ties(ls):
            continue
        for spectrum in (ro.ESRM(1.0), ro.Extremile(2.0), ro.CVaR(0.1)):
            sigma = np.ascontiguousarray(spectrum.spectrum(n))
            q, q_k = np.full(n, -1.0), np.full(n, -1.0)
            v = ko._distinct_nu0(order, ls, sigma, q)
            v_k = ko._risk_weights_nu0(order, ls, sigma, q_k)
            assert np.array_equal(q, q_k), kind
            if not np.isfinite(v_k):
                assert v == v_k or (np.isnan(v) and np.isnan(v_k)), kind
                continue
            terms = np.abs(sigma * (ls - ls[-1]))
            assert abs(v - v_k) <= 2 * n * np.finfo(float).eps * terms.sum(), kind


def test_the_kl_pav_fast_loop_equals_the_checked_one_and_declines_near_underflow():
    """``oracle_fused._kl_pav`` (no test in its loop but the pool's) makes the blocks of
    ``_kl_pav_checked`` bit for bit on positive spectra (the same sums in the same order),
    hands spectra with zeros (CVaR) to it, and declines (-1: the log form decides) where a
    product the PAV compares comes near underflow: a spectrum whose first entries are 1e-250
    against terms down to ``exp(-500)``. ``risk_weights`` then still agrees with the
    merge-sort oracle (log-form PAV) to 1e-12."""
    from riskopt._kernels import oracle_fused as kf
    rng = np.random.default_rng(5)
    n = 400
    for l in (3.0 * rng.random(n), 1e4 + rng.random(n), np.round(rng.random(n), 1)):
        ls = np.sort(l)
        for risk in (ro.ESRM(1.0), ro.Extremile(2.0), ro.CVaR(0.2)):
            sigma = np.ascontiguousarray(risk.spectrum(n))
            for nu in (1e-2, 0.1, 1.0):
                e = np.exp((ls - ls[-1]) / nu)
                out = [(np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64)) for _ in "ab"]
                nb = kf._kl_pav(e, sigma, *out[0])
                assert nb == kf._kl_pav_checked(e, sigma, *out[1]) and nb > 0
                for x, y in zip(*out):
                    assert np.array_equal(x[:nb], y[:nb]), (risk, nu)
    sigma = np.full(n, 1e-250)
    sigma[n // 2:] = 2.0 / n
    sigma /= sigma.sum()
    l = np.linspace(0.0, 5.0, n)[rng.permutation(n)]
    ls = np.sort(l)
    e = np.exp((ls - ls[-1]) / 0.01)            # down to exp(-500)
    assert kf._kl_pav(e, sigma, np.empty(n), np.empty(n), np.empty(n, dtype=np.int64)) == -1
    q, q_ms = np.empty(n), np.empty(n)
    v = ko.risk_weights(l, sigma, 0.01, 1, q)
    v_ms = ko._risk_weights(l, sigma, 0.01, 1, q_ms)
    np.testing.assert_allclose(q, q_ms, rtol=0, atol=1e-12)
    assert abs(v - v_ms) <= 8 * n * EPS * (abs(v_ms) + np.ptp(l))
