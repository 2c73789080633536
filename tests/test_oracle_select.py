"""The selection oracle (``nu = 0``, no sort) against the sorting oracle.

``riskopt._kernels.oracles.select_risk_weights`` computes the ``nu = 0`` weights of a spectrum
that is constant below a rank ``k_lo`` and above a rank ``k_hi`` (CVaR, ``MaxLoss``, ``Mean``,
user spectra with few values) from order statistics (``np.partition``) and one pass;
``Objective.risk_weights`` and ``risk.weights`` use it through ``spectral_risk_weights``. It
must give the weights of the full oracle (``_risk_weights_ordered`` after a stable argsort, and
the NumPy twin ``tests/reference_impl/oracles.weights_nu0``): ``sigma`` by rank, averaged over
ties, to 1e-15, bit for bit when the losses are distinct, equal weights within a tie. The value
is checked against the exact rational ``sum_r sigma_r l_(r)`` within the rounding bound of a
summation (the sorting oracle's own value is off by up to ~3e-14 relative at n = 2000, so it is
no 1e-15 reference), and to a few ulps when the sums are exact (losses on a 1/64 grid).
"""
import math
import zlib
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import riskopt as ro
from riskopt._kernels import oracles as ko
from reference_impl import oracles as tw

EPS = np.finfo(float).eps
N_MAX = 2000


# ----------------------------------------------------------------------------- references
def full_oracle(l, sigma):
    """The sorting oracle with a stable argsort: ``(value, q)``."""
    q = np.empty(len(l))
    v = ko._risk_weights_ordered(l, np.argsort(l, kind="mergesort"), sigma, 0.0, ko.CHI2, q)
    return v, q


def exact_value(l, sigma):
    """``sum_r sigma_r l_(r)`` in exact rational arithmetic, rounded once."""
    num, den = 0, 1
    for s, x in zip(sigma.tolist(), np.sort(l).tolist()):
        if s == 0.0 or x == 0.0:
            continue
        sn, sd = s.as_integer_ratio()
        xn, xd = x.as_integer_ratio()
        d = sd * xd                 # a power of two, as is den
        if d > den:
            num, den = num * (d // den), d
        num += sn * xn * (den // d)
    return float(Fraction(num, den))


def value_tol(l, sigma, exact_sums=False):
    """Rounding bound of ``c + sum_i q_i (l_i - c)`` for a centre ``c`` among the losses: a
    few ulps, ``n`` ulps of the spread for a running sum (none when the sums are exact), and
    ``|1 - sum sigma|`` times the losses (``sum sigma`` is 1 only up to rounding)."""
    n = len(l)
    ve = exact_value(l, sigma)
    spread = float(np.ptp(l))
    mass = abs(math.fsum(sigma.tolist()) - 1.0)
    terms = 4 if exact_sums else n + 4
    return EPS * (4 * abs(ve) + terms * spread) + 2 * mass * float(np.max(np.abs(l))), ve


def select(l, sigma):
    plan = ko.selection_plan(sigma)
    assert plan is not None
    q = np.empty(len(l))
    v = ko.select_risk_weights(l, sigma, plan, q)
    assert v is not None
    return v, q, plan


def check_against_full(l, sigma, exact_sums=False):
    """Selection vs the sorting oracle, the twin and the exact value; returns the plan."""
    v, q, plan = select(l, sigma)
    v_full, q_full = full_oracle(l, sigma)
    np.testing.assert_allclose(q, q_full, rtol=0, atol=1e-15)
    np.testing.assert_allclose(q, tw.weights_nu0(l, sigma), rtol=0, atol=1e-15)
    if np.unique(l).size == l.size:
        np.testing.assert_array_equal(q, q_full)   # bit for bit without ties
    for u in np.unique(l):
        assert np.ptp(q[l == u]) == 0.0            # one weight per tie
    tol, ve = value_tol(l, sigma, exact_sums)
    assert abs(v - ve) <= tol, (v, ve, tol)
    tol_full, _ = value_tol(l, sigma)
    assert abs(v - v_full) <= tol + tol_full, (v, v_full)
    return plan


def check(l, sigma):
    """``check_against_full`` when the spectrum has a plan, else ``check_declined``."""
    if ko.selection_plan(sigma) is None:
        check_declined(l, sigma, "cvar")
    else:
        check_against_full(l, sigma)


def two_level(n, k0, frac):
    """The CVaR form with an exactly constant tail: ``0`` below ``k0``, ``frac * c`` at
    ``k0``, ``c`` above (``frac = 1``: integer ``a n``), normalised."""
    s = np.zeros(n)
    s[k0:] = 1.0
    s[k0] = frac
    return ro.SpectralRisk(s / s.sum()).spectrum(n)


def check_declined(l, sigma, kind):
    """No plan: a spectrum not constant on more than ``SELECT_MAX_MIDDLE`` of the ranks (a
    user spectrum, or a float CVaR tail varying in its last bits, tail_fraction > 0.5); the
    entry point then is the sorting oracle, bit for bit."""
    assert kind not in ("maxloss", "mean")
    q, q_ref = np.empty(len(l)), np.empty(len(l))
    v = ko.spectral_risk_weights(l, sigma, 0.0, ko.CHI2, q, None)
    assert v == ko.risk_weights(l, sigma, 0.0, ko.CHI2, q_ref)
    np.testing.assert_array_equal(q, q_ref)


# ----------------------------------------------------------------------------- spectra
def levels_spectrum(rng, n):
    """A user spectrum ``lo, ..., lo, b, c, ..., c`` (``lo`` often 0) or with a few more steps
    inside a short window (the sorted middle of the oracle)."""
    k0 = int(rng.integers(0, n))
    lo = 0.0 if rng.random() < 0.6 else float(rng.uniform(0.1, 1.0))
    c = lo + float(rng.uniform(0.0, 2.0))
    s = np.full(n, lo)
    s[k0:] = c
    s[k0] = float(rng.uniform(lo, c))
    if n > 8 and rng.random() < 0.4:               # a few more steps after k0
        width = int(rng.integers(1, max(2, n // 3)))
        steps = np.sort(rng.integers(k0 + 1, min(n, k0 + 1 + width) + 1, size=3))
        for j, r in enumerate(steps):
            s[r:] = c * (1 + 0.1 * (j + 1))
    if s.sum() == 0:
        s[-1] = 1.0
    return ro.SpectralRisk(s / s.sum()).spectrum(n)


def spectrum_of(kind, rng, n):
    if kind == "cvar_int":
        return ro.CVaR(int(rng.integers(1, n + 1)) / n).spectrum(n)
    if kind == "cvar_frac":
        return ro.CVaR((int(rng.integers(0, n)) + float(rng.uniform(0.05, 0.95))) / n).spectrum(n)
    if kind == "cvar_level":
        return ro.CVaR(float(rng.choice([0.01, 0.05, 0.1, 0.2, 0.25, 0.3, 0.5]))).spectrum(n)
    if kind == "maxloss":
        return ro.MaxLoss().spectrum(n)
    if kind == "mean":
        return ro.Mean().spectrum(n)
    return levels_spectrum(rng, n)


SPECTRA = ("cvar_int", "cvar_frac", "cvar_level", "maxloss", "mean", "levels")


def losses_of(kind, rng, n):
    if kind == "ties":                             # heavy ties
        k = int(rng.choice([0, 1, 2, 5, 50]))
        return rng.integers(-k, k + 1, size=n).astype(np.float64)
    if kind == "grid":                             # multiples of 1/64: exact sums
        return rng.integers(-64000, 64001, size=n) / 64.0
    if kind == "normal":
        return rng.normal(size=n)
    if kind == "offset":
        return 1e6 + rng.normal(size=n)
    if kind == "dup":                              # duplicates of a few values
        l = rng.normal(size=n)
        l[rng.integers(n, size=n // 2 + 1)] = l[rng.integers(n)]
        return l
    return np.full(n, float(rng.normal() * 10.0 ** rng.integers(0, 6)))  # all equal


LOSSES = ("ties", "grid", "normal", "offset", "dup", "equal")


# ----------------------------------------------------------------------------- properties
# The default suite draws 300 examples and the first 600 seeded cases (~1/5 of each, a few
# seconds); `make test-slow` runs the full 1,500 examples and all 3,000 cases.
_CASES = st.integers(1, N_MAX), st.sampled_from(LOSSES), st.sampled_from(SPECTRA), \
    st.integers(0, 2**32 - 1)
_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=300, **_SETTINGS)
@given(*_CASES)
def test_selection_equals_the_sorting_oracle(n, lkind, skind, seed):
    check_selection_case(n, lkind, skind, seed)


@pytest.mark.slow
@settings(max_examples=1500, **_SETTINGS)
@given(*_CASES)
def test_selection_equals_the_sorting_oracle_1500_examples(n, lkind, skind, seed):
    check_selection_case(n, lkind, skind, seed)


def check_selection_case(n, lkind, skind, seed):
    rng = np.random.default_rng(seed)
    l = losses_of(lkind, rng, n)
    sigma = spectrum_of(skind, rng, n)
    plan = ko.selection_plan(sigma)
    if plan is None:
        check_declined(l, sigma, skind)
        return
    single = plan.k_lo == plan.k_hi
    check_against_full(l, sigma, exact_sums=(lkind in ("grid", "ties", "equal") and single))


@pytest.mark.parametrize("first,stop", [(0, 600), pytest.param(600, 3000,
                                                                  marks=pytest.mark.slow)])
def test_thousands_of_seeded_cases(first, stop):
    """A fixed sweep of the same families (mostly small n, where ties cross every boundary):
    cases ``first`` to ``stop - 1`` of one seeded stream of 3,000 (the slow row: the rest)."""
    rng = np.random.default_rng(20260131)
    for case in range(stop):
        n = int(rng.integers(1, 40)) if rng.random() < 0.7 else int(rng.integers(40, N_MAX + 1))
        l = losses_of(LOSSES[rng.integers(len(LOSSES))], rng, n)
        skind = SPECTRA[rng.integers(len(SPECTRA))]
        sigma = spectrum_of(skind, rng, n)
        if case < first:
            continue
        if ko.selection_plan(sigma) is None:
            check_declined(l, sigma, skind)
        else:
            check_against_full(l, sigma)


# ----------------------------------------------------------------------------- edge cases
def test_plans_of_the_builtin_spectra():
    assert ko.selection_plan(ro.CVaR(0.5).spectrum(8))[1:3] == (4, 4)       # integer a n
    assert ko.selection_plan(ro.CVaR(0.25).spectrum(10))[1:3] == (7, 7)     # fractional
    assert ko.selection_plan(ro.MaxLoss().spectrum(7))[1:3] == (6, 6)
    assert ko.selection_plan(ro.Mean().spectrum(7))[1:3] == (6, 6)
    assert ko.selection_plan(np.array([1.0]))[1:3] == (0, 0)
    for n in (50, 1000):
        assert ko.selection_plan(ro.ESRM(1.0).spectrum(n)) is None
        assert ko.selection_plan(ro.Extremile(2.0).spectrum(n)) is None
    # three ranks: any spectrum is constant below rank 1 and above it
    assert ko.selection_plan(ro.ESRM(1.0).spectrum(3))[1:3] == (1, 1)
    # every CVaR spectrum is exactly two-level above its boundary (CVaR.spectrum makes the
    # full tail bins equal), so it takes the one-threshold path
    for a in (0.1, 0.3, 0.707, 0.9):
        for n in (396, 1000, 100_000):
            plan = ko.selection_plan(ro.CVaR(a).spectrum(n))
            assert plan is not None and plan.k_lo == plan.k_hi, (a, n)
    # a spectrum whose tail varies in its last bits: the changing ranks form the middle band
    sigma = ro.CVaR(0.3).spectrum(1000)
    sigma[800:] *= 1.0 + 1e-15 * np.sin(np.arange(200))
    plan = ko.selection_plan(sigma)
    assert plan.k_lo == 700 and plan.k_hi > plan.k_lo
    assert np.all(sigma[:plan.k_lo] == plan.lo_w) and np.all(sigma[plan.k_hi + 1:] == plan.hi_w)


def test_ties_across_the_cvar_boundary_by_hand():
    # CVaR(0.5), n = 5: sigma = (0, 0, 0.2, 0.4, 0.4); the three 2s hold ranks 1..3
    l = np.array([2.0, 5.0, 2.0, 1.0, 2.0])
    sigma = ro.CVaR(0.5).spectrum(5)
    v, q, _ = select(l, sigma)
    np.testing.assert_allclose(q, [0.2, 0.4, 0.2, 0.0, 0.2], rtol=0, atol=1e-16)
    assert v == pytest.approx(0.6 * 2 + 0.4 * 5, abs=1e-15)
    check_against_full(l, sigma)


@pytest.mark.parametrize("n", [1, 2])
def test_one_and_two_losses(n):
    values = (-1.5, 0.0, 0.0, 2.0, 1e6)
    risks = [ro.CVaR(a) for a in (0.1, 0.25, 0.5, 0.6, 0.75, 1.0)] + [ro.MaxLoss(), ro.Mean()]
    for risk in risks:
        sigma = risk.spectrum(n)
        for i in range(len(values)):
            for j in range(len(values)):
                l = np.array([values[i], values[j]])[:n]
                check_against_full(l, sigma)


def test_all_equal_losses():
    for n in range(1, 60):
        for k0 in sorted({0, n // 3, n // 2, n - 1}):
            for frac in (1.0, 0.3):
                sigma = two_level(n, k0, frac)
                for c in (0.0, -3.25, 7.0, 1e8 + 0.5):
                    l = np.full(n, c)
                    v, q, _ = select(l, sigma)
                    assert v == c                   # the tie adds exactly 0 to the centre
                    assert np.ptp(q) == 0.0
                    check_against_full(l, sigma)
        for a in np.linspace(0.01, 1.0, 23):        # the built-in CVaR, whichever path
            check(np.full(n, 2.5), ro.CVaR(float(a)).spectrum(n))


def test_boundary_at_the_first_and_the_last_rank():
    rng = np.random.default_rng(7)
    for n in (2, 3, 10, 101):
        for l in (rng.normal(size=n), rng.integers(0, 3, size=n).astype(float)):
            # k0 = n - 1: a <= 1/n puts all the mass on the largest loss
            for a in (1.0 / n, 0.5 / n):
                sigma = ro.CVaR(a).spectrum(n)
                assert check_against_full(l, sigma).k_lo == n - 1
            # k0 = 0, a fractional boundary entry on the smallest loss; k0 = n - 1
            for k0 in (0, n - 1):
                for frac in (1.0, 0.5, 1e-3):
                    check_against_full(l, two_level(n, k0, frac))
            # integer and fractional a n everywhere in between (built-in and exact tails)
            for k in range(n):
                check_against_full(l, two_level(n, k, 1.0))
                check_against_full(l, two_level(n, k, 0.3))
                if k > 0:
                    check(l, ro.CVaR(k / n).spectrum(n))
                check(l, ro.CVaR((k + 0.3) / n).spectrum(n))


def test_non_finite_losses_fall_back_to_the_sorting_oracle():
    n = 9
    sigma = ro.CVaR(0.3).spectrum(n)
    plan = ko.selection_plan(sigma)
    for bad in (np.nan, np.inf, -np.inf):
        for pos in (0, 4, 8):
            l = np.linspace(0.0, 1.0, n)
            l[pos] = bad
            q_sel, q_ref = np.empty(n), np.empty(n)
            if np.isnan(bad):
                assert ko.select_risk_weights(l, sigma, plan, q_sel) is None
            v = ko.spectral_risk_weights(l, sigma, 0.0, ko.CHI2, q_sel, plan)
            v_ref = ko.risk_weights(l, sigma, 0.0, ko.CHI2, q_ref)
            np.testing.assert_array_equal(q_sel, q_ref)
            assert v == v_ref or (np.isnan(v) and np.isnan(v_ref))


# ----------------------------------------------------------------------------- the surfaces
def test_objective_and_risk_use_the_selection_oracle_for_nu_zero():
    rng = np.random.default_rng(11)
    n = 3000
    X, y = rng.normal(size=(n, 3)), rng.normal(size=n)
    for risk in (ro.CVaR(0.1), ro.CVaR(0.3), ro.MaxLoss(), ro.Mean()):
        obj = ro.Objective("squared", risk, X, y)
        losses = np.round(obj.losses(rng.normal(size=3)), 1)   # ties
        v, q = obj.risk_weights(losses)
        q_sel = np.empty(n)
        v_sel = ko.select_risk_weights(losses, obj.sigma, ko.selection_plan(obj.sigma), q_sel)
        assert v == v_sel
        np.testing.assert_array_equal(q, q_sel)
        np.testing.assert_array_equal(risk.weights(losses), q)
        assert risk.value(losses) == v
        check_against_full(losses, obj.sigma)
        # a positive shift cost: the box oracle by selection for a box spectrum (CVaR,
        # MaxLoss; tests/test_box_select.py), else the sorting oracle, unchanged
        shifted = obj.with_shift(0.2)
        v2, q2 = shifted.risk_weights(losses)
        q_ref, q_box = np.empty(n), np.empty(n)
        v_ref = ko.risk_weights(losses, obj.sigma, 0.2, obj.div, q_ref)
        v_box = ko.box_select_weights(losses, obj.sigma, ko.selection_plan(obj.sigma), 0.2,
                                      obj.div, q_box)
        if v_box is None:
            assert v2 == v_ref
            np.testing.assert_array_equal(q2, q_ref)
        else:
            assert v2 == v_box
            np.testing.assert_array_equal(q2, q_box)
            np.testing.assert_allclose(q2, q_ref, rtol=0, atol=1e-12)
            assert abs(v2 - v_ref) <= 8 * n * EPS * (abs(v_ref) + np.ptp(losses))
    # the plan follows the spectrum it was computed for
    obj = ro.Objective("squared", ro.CVaR(0.1), X, y)
    obj.risk_weights(obj.losses(np.zeros(3)))
    obj.sigma = ro.MaxLoss().spectrum(n)
    losses = rng.normal(size=n)
    assert obj.risk_weights(losses)[0] == losses.max()


def test_sample_weights_keep_the_weighted_oracle():
    rng = np.random.default_rng(3)
    n = 40
    X, y = rng.normal(size=(n, 2)), rng.normal(size=n)
    sw = rng.uniform(0.5, 2.0, size=n)
    obj = ro.Objective("squared", ro.CVaR(0.2), X, y, sample_weight=sw)
    losses = obj.losses(np.ones(2))
    v, q = obj.risk_weights(losses)
    q_ref = ro.CVaR(0.2).weighted_weights(losses, sw)
    np.testing.assert_array_equal(q, q_ref)
    assert v == float(q_ref @ losses)


@pytest.mark.parametrize("risk", [ro.CVaR(0.1), ro.CVaR(0.27), ro.CVaR(0.5), ro.MaxLoss(),
                                  ro.Mean()], ids=repr)
@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_value_grad_of_cvar_fits_is_unchanged(loss, risk, monkeypatch):
    """``Objective.value_grad`` along a fit: the same numbers as with the sorting oracle, to
    rounding (random points, the reference optimum of the sorting oracle, where losses tie)."""
    rng = np.random.default_rng(zlib.crc32(f"{loss}/{risk!r}".encode()))
    n, d = 400, 4
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    if loss == "logistic":
        y = (y > 0).astype(float)
    obj = ro.Objective(loss, risk, X, y, l2_reg=1e-2, fit_intercept=True)
    points = [0.3 * rng.normal(size=obj.coef_shape) for _ in range(5)]

    def sorting(losses, sigma, nu, div, q, plan=None):
        return ko.risk_weights(losses, sigma, nu, div, q)

    with monkeypatch.context() as m:
        m.setattr(ko, "spectral_risk_weights", sorting)
        old_opt = obj.reference_solution()
        points.append(old_opt.coef)
        before = [obj.value_grad(w) for w in points]
    new_opt = obj.reference_solution()
    for w, (f0, g0) in zip(points, before):
        f1, g1 = obj.value_grad(w)
        assert abs(f1 - f0) <= 1e-13 * max(1.0, abs(f0))
        np.testing.assert_allclose(g1, g0, rtol=0, atol=1e-12 * max(1.0, np.max(np.abs(g0))))
    assert abs(obj.value(new_opt.coef) - obj.value(old_opt.coef)) <= 1e-9 * max(
        1.0, abs(obj.value(old_opt.coef)))
