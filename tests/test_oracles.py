"""Correctness of the spectral-risk oracles.

The maximiser ``q`` of ``max_{q in P(sigma)} q.l - nu D(q || 1/n)`` and the value are checked,
for every spectrum x divergence x shift-cost level, on random small cases (n = 1..12, ties,
duplicated, negative and large losses) against

* membership in the permutahedron ``P(sigma)`` (majorization test),
* the NumPy twin ``tests/reference_impl/oracles.py`` (same formulas: to 1e-12 for losses of
  the size of their spread, within the error model below otherwise),
* a Fenchel-duality certificate (``q`` maximises ``u.q`` over ``P(sigma)`` for
  ``u = l - grad(nu D)(q)``, checked by the rearrangement inequality),
* cvxpy (chi2: a QP; KL: the exponential cone, polished by Newton-QP steps, because the
  exponential-cone solve alone was measured ~3e-5 off the n = 2 closed form), with ``P(sigma)``
  written as
  ``sum_largest(q, k) <= sum of the k largest sigma``,
* for ``nu = 0``: the sorted formula ``sum sigma_i l_(i)``, brute force over all permutations
  (n <= 7) and the tie-averaged weights.

Precision. The current kernels compute ``q`` as ``(l - c) / (2 n nu)`` (chi2) or
``exp((l - c)/nu - 1)/n`` (KL) with ``c`` of the size of ``l``, so their error grows like
``eps |l|_inf / (2 n nu)`` (chi2) or ``eps |l|_inf / nu`` (KL): fine for losses of the size of
their spread, off by ~1e-5 for losses with a large common offset, and meaningless when ``nu`` is
below the resolution of the losses (``CVaR(0.5, shift_cost=1e-20).weights(np.full(6, 1.4))`` is
1850 per sample). The checks below use that error model (``err_scale``) where it matters;
``test_oracle_is_accurate_to_machine_precision`` asks for translation-invariant machine
precision against a high-precision twin and is ``xfail(strict=True)`` until the kernels are
fixed (a translation-invariant PAV meeting it is in the helper's report).

Surfaces tested: ``riskopt.risks.*.weights/value``, ``Objective.risk_weights`` and the kernels
``_weights_sorted``, ``_risk_weights``, ``_pav_chi2``, ``_pav_kl``, ``_bubble``. Property tests
(hypothesis) cover equivariances, monotonicity and limits in ``nu``, the chi2 Lipschitz bound
and ``grad R = q``. The full >= 200 cvxpy cases per combination run under ``-m slow``; the
default run checks every combination on fewer cvxpy cases and 200 cases for everything else.
"""
import itertools
import math
import warnings
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import riskopt as ro
from riskopt._kernels import oracles as ko
from reference_impl import oracles as tw

cp = pytest.importorskip("cvxpy")

SPECTRA = ("cvar_int", "cvar_frac", "esrm", "extremile", "mean", "maxloss", "user")
DIVS = ("chi2", "kl")
#: shift cost = level x the spread of the losses (``loss_scale``)
NU_LEVELS = {"zero": 0.0, "small": 1e-3, "moderate": 0.3, "large": 30.0}
N_CASES = 200          # cases per combination for the cheap checks
N_CASES_DEFAULT = 60   # of which the default run checks the first 60 (the other 140: -m slow)
N_CVX_DEFAULT = 12     # cvxpy cases per combination in the default run
N_CVX_SLOW = 200       # cvxpy cases per combination under -m slow
N_MAX = 12


# --------------------------------------------------------------------------- case generation
def _seed(*parts):
    return zlib.crc32("/".join(map(str, parts)).encode())


def random_losses(rng, n):
    """Random loss vectors: plain, ties, duplicates, negative, large magnitudes, constant.

    The offset of the losses stays within a few spreads of zero; losses with a large common
    offset relative to their spread are the separate family ``offset_losses`` (see
    ``test_oracle_is_accurate_to_machine_precision``).
    """
    kind = rng.integers(7)
    if kind == 0:
        return rng.normal(size=n)
    if kind == 1:  # many ties
        return rng.integers(-2, 3, size=n).astype(np.float64)
    if kind == 2:  # duplicated entries
        l = rng.normal(size=n)
        if n > 1:
            l[rng.integers(n, size=n // 2 + 1)] = l[rng.integers(n)]
        return l
    if kind == 3:  # negative
        return -np.abs(rng.exponential(5.0, size=n))
    if kind == 4:  # large magnitude, offset
        return 1e6 * rng.normal(size=n) + 2e6
    if kind == 5:  # large magnitude with ties
        return 1e5 * rng.integers(-3, 4, size=n).astype(np.float64)
    return np.full(n, rng.normal() * 10.0 ** rng.integers(0, 7))  # all equal


def offset_losses(rng, n):
    """Losses with a common offset 1e3..1e8 times their spread (or n = 1 and |l| up to 1e6)."""
    if n == 1:
        return np.array([rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(2, 6)])
    return 10.0 ** rng.uniform(3, 8) + rng.normal(size=n)


def random_spectrum(rng, n):
    """A valid user spectrum: sorted Dirichlet, sometimes with zeros and ties."""
    s = np.sort(rng.dirichlet(np.full(n, rng.choice([0.3, 1.0, 5.0]))))
    if n > 2 and rng.random() < 0.3:
        s[: rng.integers(1, n)] = 0.0  # zero mass on the smallest losses
    if n > 2 and rng.random() < 0.3:
        k = rng.integers(1, n)
        s[k - 1:k + 1] = s[k - 1:k + 1].mean()  # a tie
    return np.sort(s) / np.sum(s)


def make_risk(rng, spectrum, n, nu, div):
    kw = dict(shift_cost=nu, divergence=div)
    if spectrum == "cvar_int":
        return ro.CVaR(rng.integers(1, n + 1) / n, **kw)
    if spectrum == "cvar_frac":
        return ro.CVaR((rng.integers(0, n) + rng.uniform(0.1, 0.9)) / n, **kw)
    if spectrum == "esrm":
        return ro.ESRM(float(np.exp(rng.uniform(np.log(0.1), np.log(10.0)))), **kw)
    if spectrum == "extremile":
        return ro.Extremile(float(rng.uniform(1.0, 5.0)), **kw)
    if spectrum == "mean":
        return ro.Mean(**kw)
    if spectrum == "maxloss":
        return ro.MaxLoss(**kw)
    return ro.SpectralRisk(random_spectrum(rng, n), **kw)


def loss_scale(l):
    """The spread max |l - mean l|, or max(1, |l|) when all losses are equal."""
    if np.ptp(l) == 0:
        return max(1.0, float(np.abs(l[0])))
    return float(np.max(np.abs(l - l.mean())))


def make_cases(spectrum, div, level, count, tag=""):
    rng = np.random.default_rng(_seed(spectrum, div, level, tag))
    cases = []
    for _ in range(count):
        n = int(rng.integers(1, N_MAX + 1))
        l = random_losses(rng, n)
        nu = NU_LEVELS[level] * loss_scale(l)
        risk = make_risk(rng, spectrum, n, nu, div)
        cases.append((l, risk))
    return cases


COMBOS = list(itertools.product(SPECTRA, DIVS, NU_LEVELS))
COMBO_IDS = ["-".join(c) for c in COMBOS]


# --------------------------------------------------------------------------- independent checks
def np_penalty(q, nu, div):
    n = len(q)
    if nu == 0:
        return 0.0
    if div == "chi2":
        return nu * n * np.sum((q - 1.0 / n) ** 2)
    qp = q[q > 0]
    return nu * np.sum(qp * np.log(n * qp))


def np_objective(q, l, nu, div):
    return float(q @ l - np_penalty(q, nu, div))


def assert_in_permutahedron(q, sigma, atol=1e-12):
    """q in P(sigma): non-negative, sums to one, majorized by sigma."""
    assert np.all(q >= -atol), q
    assert abs(q.sum() - 1.0) <= atol * len(q)
    top_q = np.cumsum(np.sort(q)[::-1])
    top_s = np.cumsum(np.sort(sigma)[::-1])
    assert np.all(top_q <= top_s + atol * np.arange(1, len(q) + 1)), (top_q - top_s)


def tie_averaged_sigma(l, sigma):
    """q_i = mean of sigma over the rank positions occupied by the losses equal to l_i."""
    S = np.concatenate([[0.0], np.cumsum(sigma)])
    lo = np.array([np.sum(l < v) for v in l])
    hi = np.array([np.sum(l <= v) for v in l])
    return (S[hi] - S[lo]) / (hi - lo)


EPS = np.finfo(np.float64).eps


def err_scale(l, nu, div):
    """Error scale of the current kernels' q: eps |l|_inf / (2 n nu) (chi2) or
    eps |l|_inf / nu (KL)."""
    if nu == 0:
        return 0.0
    big = float(np.max(np.abs(l)))
    return EPS * big / (2 * len(l) * nu if div == "chi2" else nu)


def q_tolerance(l, nu, div):
    return 1e-12 + 64.0 * err_scale(l, nu, div)


def penalty_rounding(n, nu):
    """Rounding of nu D(q) itself: q exact to eps moves it by ~ nu n eps (1 + log n)."""
    return 8.0 * n * EPS * nu * (1.0 + math.log(n))


def fenchel_gap(q, l, sigma, nu, div):
    """supp_P(u) - u.q with u = l - grad(nu D)(q): >= 0 on P(sigma), 0 iff q is the maximiser.

    Returns the gap and the size of the terms that make up u (for the rounding tolerance).
    """
    n = len(q)
    if div == "chi2":
        g = 2.0 * n * nu * (q - 1.0 / n)
    else:
        g = nu * (np.log(n * q) + 1.0)
    u = l - g
    return float(np.sort(sigma) @ np.sort(u) - q @ u), float(np.max(np.abs(l)) + np.max(np.abs(g)))


class CvxOracle:
    """The maximiser by cvxpy (Clarabel), one parametrised problem per (n, divergence).

    The losses are centred and scaled to unit spread (``q`` is invariant under
    ``l -> (l - m)/s, nu -> nu/s``) so the conic solver sees a well-scaled problem.
    """

    TIGHT = dict(tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12, tol_ktratio=1e-10)

    def __init__(self):
        self._cache = {}

    def _problem(self, n, kind):
        key = (n, kind)
        if key not in self._cache:
            L = cp.Parameter(n)
            S = cp.Parameter(n)  # S[k-1] = sum of the k largest sigma
            nu = cp.Parameter(nonneg=True)
            if kind == "kl_newton":
                # Newton step of the KL problem at q0: max g.d - 1/2 sum h_i^2 d_i^2, q0 + d in P
                G, H, Q0 = cp.Parameter(n), cp.Parameter(n, nonneg=True), cp.Parameter(n)
                d = cp.Variable(n)
                q = Q0 + d
                cons = [cp.sum(d) == 0] + [cp.sum_largest(q, k) <= S[k - 1] for k in range(1, n)]
                prob = cp.Problem(cp.Maximize(G @ d - 0.5 * cp.sum_squares(cp.multiply(H, d))),
                                  cons)
                self._cache[key] = (prob, dict(G=G, H=H, Q0=Q0, S=S), d)
            else:
                r = cp.Variable(n)  # r = n q, entries of order one
                cons = [cp.sum(r) == n]
                cons += [cp.sum_largest(r, k) <= n * S[k - 1] for k in range(1, n)]
                if kind == "chi2":
                    obj = L @ r / n - nu * cp.sum_squares(r - 1.0) / n
                else:
                    obj = L @ r / n + nu * cp.sum(cp.entr(r)) / n  # = q.l - nu KL + nu log n
                prob = cp.Problem(cp.Maximize(obj), cons)
                self._cache[key] = (prob, dict(L=L, S=S, nu=nu), r)
        return self._cache[key]

    @staticmethod
    def _solve(prob, tight=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # warm_start=False: cvxpy would otherwise reuse the cached Clarabel object through
            # its `update` path, and the results then depend on the previously solved cases
            try:
                prob.solve(solver="CLARABEL", warm_start=False,
                           **(CvxOracle.TIGHT if tight else {}))
            except cp.error.SolverError:
                prob.solve(solver="CLARABEL", warm_start=False)
            if prob.status != "optimal" and tight:
                prob.solve(solver="CLARABEL", warm_start=False)
        assert prob.status in ("optimal", "optimal_inaccurate"), prob.status

    def solve(self, l, sigma, nu, div):
        """Returns ``(q, value)``."""
        n = len(l)
        m, s = l.mean(), loss_scale(l)
        lt, nut = (l - m) / s, nu / s
        kind = "chi2" if (div == "chi2" or nu == 0) else "kl"
        prob, par, r = self._problem(n, kind)
        par["L"].value = lt
        par["S"].value = np.cumsum(np.sort(sigma)[::-1])
        par["nu"].value = nut
        self._solve(prob)
        q = r.value / n
        if kind == "kl":
            q = np.maximum(q, 1e-300)
            q /= q.sum()
            newton, npar, d = self._problem(n, "kl_newton")
            npar["S"].value = par["S"].value
            # Newton-QP polish (locally quadratic, but not monotone with the positivity
            # safeguard): keep the iterate with the smallest Fenchel gap, an optimality measure
            # that needs nothing but the problem data
            best_q, best_gap = q, abs(fenchel_gap(q, lt, sigma, nut, "kl")[0])
            for _ in range(15):
                npar["Q0"].value = q
                npar["G"].value = lt - nut * (np.log(n * q) + 1.0)
                npar["H"].value = np.sqrt(nut / q)
                self._solve(newton)
                # entries near zero (true value ~0) must stay positive: shrink them at most
                # tenfold instead of damping the whole step
                q_new = np.maximum(q + d.value, 0.1 * q)
                q_new /= q_new.sum()
                delta, q = np.max(np.abs(q_new - q)), q_new
                gap = abs(fenchel_gap(q, lt, sigma, nut, "kl")[0])
                if gap < best_gap:
                    best_q, best_gap = q, gap
                if delta < 1e-13:
                    break
            q = best_q
            value = s * np_objective(q, lt, nut, "kl") + m
        else:
            value = s * prob.value + m
        return q, value


@pytest.fixture(scope="module")
def cvx_oracle():
    return CvxOracle()


# --------------------------------------------------------------------------- spectra
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12])
def test_spectra_match_their_formulas(n):
    i = np.arange(1, n + 1)
    for a in (1.0 / n, 0.5, 0.37, 1.0, min(1.0, 3.0 / n)):
        # sigma_i = |[(i-1)/n, i/n] cap [1-a, 1]| / a
        lo = np.maximum((i - 1) / n, 1 - a)
        expected = np.clip(i / n - lo, 0.0, None) / a
        np.testing.assert_allclose(ro.CVaR(a).spectrum(n), expected, atol=1e-12)
    for rho in (0.1, 1.0, 5.0):
        expected = (np.exp(-rho) * (np.exp(rho * i / n) - np.exp(rho * (i - 1) / n))
                    / (1 - np.exp(-rho)))
        np.testing.assert_allclose(ro.ESRM(rho).spectrum(n), expected, atol=1e-12)
    for r in (1.0, 2.0, 3.5):
        expected = (i / n) ** r - ((i - 1) / n) ** r
        np.testing.assert_allclose(ro.Extremile(r).spectrum(n), expected, atol=1e-12)
    np.testing.assert_array_equal(ro.Mean().spectrum(n), np.full(n, 1.0 / n))
    np.testing.assert_array_equal(ro.MaxLoss().spectrum(n), np.eye(n)[-1])
    for risk in (ro.CVaR(0.3), ro.ESRM(2.0), ro.Extremile(2.0), ro.Mean(), ro.MaxLoss()):
        s = risk.spectrum(n)
        assert np.all(s >= 0) and np.all(np.diff(s) >= -1e-15) and abs(s.sum() - 1) < 1e-12


def test_builtin_spectra_are_exactly_non_decreasing():
    for n in range(1, 40):
        for risk in [ro.CVaR(a) for a in np.linspace(0.05, 1.0, 20)] + \
                [ro.ESRM(r) for r in (0.1, 1.0, 10.0)] + [ro.Extremile(r) for r in (1.0, 2.0, 4.5)]:
            assert np.all(np.diff(risk.spectrum(n)) >= 0), (risk, n)


def test_cvar_values_by_hand():
    l = np.array([1.0, 2.0, 3.0, 4.0])
    assert ro.CVaR(0.5).value(l) == pytest.approx(3.5, abs=1e-15)
    # fractional a n: a = 0.3, n = 4 puts weight 0.05/0.3 on the second largest loss
    assert ro.CVaR(0.3).value(l) == pytest.approx((0.05 * 3 + 0.25 * 4) / 0.3, rel=1e-14)
    assert ro.CVaR(1.0).value(l) == pytest.approx(2.5, abs=1e-15)
    assert ro.MaxLoss().value(l) == 4.0 and ro.Mean().value(l) == 2.5


# ------------------------------------------------------------------- 200 cases per combination
@pytest.mark.parametrize("part", ["first", pytest.param("rest", marks=pytest.mark.slow)])
@pytest.mark.parametrize("spectrum,div,level", COMBOS, ids=COMBO_IDS)
def test_oracle_surfaces_agree_with_twin_and_lie_in_permutahedron(spectrum, div, level, part):
    cases = make_cases(spectrum, div, level, N_CASES)
    for l, risk in cases[:N_CASES_DEFAULT] if part == "first" else cases[N_CASES_DEFAULT:]:
        n, nu = len(l), float(risk.shift_cost)
        sigma = risk.spectrum(n)
        scale = max(1.0, float(np.max(np.abs(l))))
        qtol = q_tolerance(l, nu, div)

        # the public surfaces agree exactly
        q = risk.weights(l)
        value = risk.value(l)
        q_kernel = np.empty(n)
        value_kernel = ko._risk_weights(l, sigma, nu, risk.div_code, q_kernel)
        obj = ro.Objective("squared", risk, np.ones((n, 1)), np.zeros(n))
        value_obj, q_obj = obj.risk_weights(l)
        np.testing.assert_array_equal(q, q_obj)  # one path (NumPy's unstable argsort)
        assert value == value_obj
        # the numba kernel sorts stably: tied losses may land on other ranks, whose weights
        # agree to rounding (1e-13, see below); the value too
        np.testing.assert_allclose(q, q_kernel, rtol=0, atol=1e-13)
        assert abs(value - value_kernel) <= 1e-13 * scale
        order = np.argsort(l, kind="mergesort")
        q_sorted = np.empty(n)
        ko._weights_sorted(l[order], sigma, nu, risk.div_code, q_sorted)
        np.testing.assert_array_equal(q_sorted, q_kernel[order])
        np.testing.assert_allclose(q_sorted, q[order], rtol=0, atol=1e-13)

        # (a) q in P(sigma)
        assert_in_permutahedron(q, sigma, atol=qtol)

        # the NumPy twin (same formulas, so it shares the kernels' error model; 1e-12 when the
        # losses are of the size of their spread)
        value_twin, q_twin = tw.risk_value(l, sigma, nu, div)
        np.testing.assert_allclose(q, q_twin, rtol=0, atol=qtol)
        assert abs(value - value_twin) <= (1e-12 + n * qtol) * scale

        # the value is the objective at q
        assert abs(value - np_objective(q, l, nu, div)) <= 1e-12 * scale

        # tied losses get equal weights (the result does not depend on how ties are ordered);
        # 1e-13, not exact: the built-in spectra are non-decreasing only up to rounding
        # (test_builtin_spectra_are_exactly_non_decreasing)
        for v in np.unique(l):
            assert np.ptp(q[l == v]) <= 1e-13

        if nu == 0:
            # value = sum sigma_i l_(i); q = sigma by rank, averaged over ties
            assert abs(value - np.sort(sigma) @ np.sort(l)) <= 1e-12 * scale
            np.testing.assert_allclose(q, tie_averaged_sigma(l, sigma), rtol=0, atol=1e-15)
            if n <= 7:  # brute force over all permutations of sigma (the vertices of P)
                perms = np.array(list(itertools.permutations(range(n))))
                assert abs(value - np.max(sigma[perms] @ l)) <= 1e-12 * scale
        else:
            # the PAV kernels against the twin
            c = np.empty(n)
            pav = ko._pav_chi2 if div == "chi2" else ko._pav_kl
            pav(l[order], sigma, nu, c)
            c_twin = tw.pav(l[order], sigma, nu, div)
            np.testing.assert_allclose(c, c_twin, rtol=1e-12, atol=1e-12 * scale)
            # optimality certificate by Fenchel duality (KL needs q > 0)
            if div == "chi2" or np.all(q > 0):
                gap, umax = fenchel_gap(q, l, sigma, nu, div)
                tol = (1e-12 + n * qtol) * (1.0 + umax)
                assert -tol <= gap <= tol, (gap, tol)
            # between the mean (uniform q, no penalty) and the unpenalised spectral risk
            assert l.mean() - 1e-12 * scale <= value
            assert value <= np.sort(sigma) @ np.sort(l) + 1e-12 * scale


def _check_against_cvxpy(oracle, spectrum, div, level, count, tag):
    worst_q = worst_v = 0.0
    for l, risk in make_cases(spectrum, div, level, count, tag=tag):
        n, nu = len(l), float(risk.shift_cost)
        sigma = risk.spectrum(n)
        q, value = risk.weights(l), risk.value(l)
        q_cvx, value_cvx = oracle.solve(l, sigma, nu, div)
        s = loss_scale(l)
        worst_v = max(worst_v, abs(value - value_cvx) / s)
        # (c) the optimal value, relative to the spread of the losses
        assert abs(value - value_cvx) <= 1e-7 * s, (l, risk, value, value_cvx)
        if nu > 0:  # (b) the maximiser is unique
            worst_q = max(worst_q, float(np.max(np.abs(q - q_cvx))))
            np.testing.assert_allclose(q, q_cvx, rtol=0, atol=1e-6, err_msg=f"{l} {risk}")
    return worst_q, worst_v


@pytest.mark.parametrize("spectrum,div,level", COMBOS, ids=COMBO_IDS)
def test_oracle_matches_cvxpy(cvx_oracle, spectrum, div, level):
    _check_against_cvxpy(cvx_oracle, spectrum, div, level, N_CVX_DEFAULT, tag="cvx")


@pytest.mark.slow
@pytest.mark.parametrize("spectrum,div,level", COMBOS, ids=COMBO_IDS)
def test_oracle_matches_cvxpy_full(cvx_oracle, spectrum, div, level):
    _check_against_cvxpy(cvx_oracle, spectrum, div, level, N_CVX_SLOW, tag="cvx-full")


def test_kl_cvxpy_reference_is_accurate_for_two_samples(cvx_oracle):
    """The polished cvxpy KL reference against the closed form for n = 2 (a check of the
    reference itself): q = softmax(l/nu) clipped to the segment between the permutations."""
    rng = np.random.default_rng(7)
    for _ in range(30):
        l = rng.normal(size=2) * 10 ** rng.uniform(-2, 6)
        sigma = np.sort(rng.dirichlet([1.0, 1.0]))
        nu = loss_scale(l) * 10 ** rng.uniform(-3, 2)
        p = np.exp((l - l.max()) / nu)
        p /= p.sum()
        j = int(np.argmax(l))
        if p[j] > sigma[1]:
            p[j], p[1 - j] = sigma[1], sigma[0]
        q_cvx, _ = cvx_oracle.solve(l, sigma, nu, "kl")
        np.testing.assert_allclose(q_cvx, p, atol=1e-8)
        q = ro.SpectralRisk(sigma, shift_cost=nu, divergence="kl").weights(l)
        np.testing.assert_allclose(q, p, atol=1e-12 + 64 * err_scale(l, nu, "kl"))


# --------------------------------------------------------------------------- precision
def _precision_cases(family, div, count):
    """offset: losses 1e3..1e8 spreads away from zero (nu = 1e-3..1e2 spreads);
    tiny: nu 1e-25..1e-14 times the spread; extreme: absolute nu over 16 decades."""
    rng = np.random.default_rng(_seed("precision", family, div))
    for _ in range(count):
        n = int(rng.integers(1, N_MAX + 1))
        l = offset_losses(rng, n) if family == "offset" else random_losses(rng, n)
        if family == "offset":
            nu = loss_scale(l) * 10 ** rng.uniform(-3, 2)
        elif family == "tiny":
            nu = loss_scale(l) * 10 ** rng.uniform(-25, -14)
        else:
            nu = 10 ** rng.uniform(-8, 8)
        yield l, make_risk(rng, SPECTRA[rng.integers(len(SPECTRA))], n, nu, div)


@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("family", ["offset", "extreme"])
def test_oracle_error_is_within_the_backward_stable_bound(family, div):
    """Against the high-precision twin: |q - q*| <= 1e-12 + 64 err_scale and the value within
    n |l| of that, where the bound is informative (err_scale <= 1e-4)."""
    checked = 0
    for l, risk in _precision_cases(family, div, 150):
        n, nu = len(l), float(risk.shift_cost)
        if err_scale(l, nu, div) > 1e-4:
            continue
        checked += 1
        sigma = risk.spectrum(n)
        value_hp, q_hp = tw.risk_value_exact(l, sigma, nu, div)
        qtol = q_tolerance(l, nu, div)
        q, value = risk.weights(l), risk.value(l)
        np.testing.assert_allclose(q, q_hp, rtol=0, atol=qtol)
        assert abs(value - value_hp) <= ((1e-12 + 2 * n * qtol) * max(1.0, np.max(np.abs(l)))
                                         + penalty_rounding(n, nu))
        assert_in_permutahedron(q, sigma, atol=qtol)
    assert checked >= 50


@pytest.mark.parametrize("div", DIVS)
@pytest.mark.parametrize("family", ["offset", "tiny", "extreme"])
def test_oracle_is_accurate_to_machine_precision(family, div):
    """The maximiser is translation invariant and 1/(2 n nu)-Lipschitz, but the exact answer
    for float inputs can be computed to machine precision whatever the offset and nu."""
    for l, risk in _precision_cases(family, div, 100):
        n, nu = len(l), float(risk.shift_cost)
        sigma = risk.spectrum(n)
        value_hp, q_hp = tw.risk_value_exact(l, sigma, nu, div)
        q, value = risk.weights(l), risk.value(l)
        np.testing.assert_allclose(q, q_hp, rtol=0, atol=1e-12, err_msg=f"{l!r} {risk}")
        assert abs(value - value_hp) <= (1e-12 * max(1.0, np.max(np.abs(l)))
                                         + penalty_rounding(n, nu)), (l, risk)


@pytest.mark.parametrize("div", DIVS)
def test_tiny_shift_cost_gives_weights_in_the_permutahedron(div):
    """Minimal reproducer: all-equal losses must get uniform weights, distinct ones sigma by
    rank, for any nu > 0 (here 1e-20)."""
    risk = ro.CVaR(0.5, shift_cost=1e-20, divergence=div)
    ties = np.full(6, 1.4)
    np.testing.assert_allclose(risk.weights(ties), np.full(6, 1 / 6), atol=1e-12)
    assert risk.value(ties) == pytest.approx(1.4, rel=1e-12)
    l = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(risk.weights(l), [0.0, 0.0, 0.5, 0.5], atol=1e-12)
    assert risk.value(l) == pytest.approx(3.5, rel=1e-12)


# --------------------------------------------------------------------------- _bubble
def _check_sorted_state(order, rank, losses):
    n = len(losses)
    np.testing.assert_array_equal(np.sort(order), np.arange(n))
    np.testing.assert_array_equal(rank[order], np.arange(n))
    np.testing.assert_array_equal(losses[order], np.sort(losses))


@pytest.mark.parametrize("with_ties", [False, True])
def test_bubble_keeps_order_and_rank_sorted(with_ties):
    rng = np.random.default_rng(_seed("bubble", with_ties))
    sigmas = {n: ro.Extremile(2.0).spectrum(n) for n in range(1, 15)}
    for _ in range(120):
        n = int(rng.integers(1, 15))
        if with_ties:
            def draw(size):
                return rng.integers(-3, 4, size=size).astype(np.float64)
        else:
            def draw(size):
                return rng.normal(size=size)
        losses = draw(n)
        order = np.argsort(losses, kind="mergesort").astype(np.int64)
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        for _ in range(20):
            i = int(rng.integers(n))
            u = rng.random()
            if u < 0.2:
                losses[i] = losses[rng.integers(n)]  # a tie with another entry (or itself)
            elif u < 0.3:
                losses[i] = losses.max() + 1.0  # to the end
            elif u < 0.4:
                losses[i] = losses.min() - 1.0  # to the front
            else:
                losses[i] = draw(1)[0]
            ko._bubble(order, rank, losses, i)
            _check_sorted_state(order, rank, losses)
            if len(np.unique(losses)) == n:  # no ties: the order is the argsort
                np.testing.assert_array_equal(order, np.argsort(losses))
            # weights computed in the bubbled order equal the full oracle's
            for nu, div in ((0.0, ko.CHI2), (0.5, ko.CHI2), (0.5, ko.KL)):
                qs = np.empty(n)
                ko._weights_sorted(losses[order], sigmas[n], nu, div, qs)
                q_full = np.empty(n)
                ko._risk_weights(losses, sigmas[n], nu, div, q_full)
                np.testing.assert_allclose(qs, q_full[order], rtol=0, atol=1e-15)


# ------------------------------------------------------------------- properties (hypothesis)
@st.composite
def oracle_inputs(draw, min_nu=0.0, div=None, distinct=False):
    n = draw(st.integers(1, N_MAX))
    if distinct:
        gaps = draw(st.lists(st.integers(1, 64), min_size=n, max_size=n))
        l = np.cumsum(np.array(gaps, dtype=np.float64) / 16.0) - draw(st.integers(-50, 50))
        l = l[np.array(draw(st.permutations(range(n))))]
    else:
        # multiples of 1/64: sums with other such numbers are exact, ties are frequent
        l = np.array(draw(st.lists(st.integers(-64000, 64000), min_size=n, max_size=n)),
                     dtype=np.float64) / 64.0
    spectrum = draw(st.sampled_from(SPECTRA))
    div = div if div is not None else draw(st.sampled_from(DIVS))
    if min_nu == 0:
        nu = draw(st.one_of(st.just(0.0), st.floats(1e-3, 1e3)))
    else:
        nu = draw(st.floats(min_nu, 1e3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return l, make_risk(rng, spectrum, n, nu, div)


def _oracle(l, sigma, nu, div):
    q = np.empty(len(l))
    v = ko._risk_weights(np.ascontiguousarray(l, dtype=np.float64), sigma, float(nu),
                         ko.CHI2 if div == "chi2" else ko.KL, q)
    return v, q


PROP = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@PROP
@given(oracle_inputs(), st.integers(-64000, 64000))
def test_translation_equivariance(inp, shift):
    """R(l + c) = R(l) + c and q(l + c) = q(l) (c exact in floating point with l)."""
    l, risk = inp
    c = shift / 64.0
    sigma, nu, div = risk.spectrum(len(l)), risk.shift_cost, risk.divergence
    v, q = _oracle(l, sigma, nu, div)
    v2, q2 = _oracle(l + c, sigma, nu, div)
    qtol = max(q_tolerance(l, nu, div), q_tolerance(l + c, nu, div))
    scale = 1.0 + np.max(np.abs(l)) + abs(c)
    assert abs(v2 - (v + c)) <= (1e-12 + len(l) * qtol) * scale
    np.testing.assert_allclose(q2, q, rtol=0, atol=qtol if nu > 0 else 0.0)


@PROP
@given(oracle_inputs(), st.integers(-20, 20))
def test_positive_homogeneity(inp, log2t):
    """R(t l; t nu) = t R(l; nu) with q unchanged; for nu = 0 this is R(t l) = t R(l)."""
    l, risk = inp
    t = 2.0 ** log2t  # exact scaling
    sigma, nu, div = risk.spectrum(len(l)), risk.shift_cost, risk.divergence
    v, q = _oracle(l, sigma, nu, div)
    v2, q2 = _oracle(t * l, sigma, t * nu, div)
    assert abs(v2 - t * v) <= 1e-12 * t * (1.0 + np.max(np.abs(l)))
    np.testing.assert_allclose(q2, q, rtol=0, atol=1e-15)


@PROP
@given(oracle_inputs(), st.randoms(use_true_random=False))
def test_permutation_equivariance(inp, rnd):
    l, risk = inp
    perm = np.array(rnd.sample(range(len(l)), len(l)))
    sigma, nu, div = risk.spectrum(len(l)), risk.shift_cost, risk.divergence
    v, q = _oracle(l, sigma, nu, div)
    v2, q2 = _oracle(l[perm], sigma, nu, div)
    assert abs(v2 - v) <= 1e-12 * (1.0 + np.max(np.abs(l)))
    np.testing.assert_allclose(q2, q[perm], rtol=0, atol=1e-15)


@PROP
@given(oracle_inputs(), st.lists(st.floats(1e-3, 1e4), min_size=2, max_size=6))
def test_value_is_monotone_in_nu(inp, nus):
    """R decreases in nu, from sum sigma_i l_(i) at nu = 0 towards the mean."""
    l, risk = inp
    n, div = len(l), risk.divergence
    sigma = risk.spectrum(n)
    nus = np.sort(np.concatenate([[0.0], nus]))
    values = np.array([_oracle(l, sigma, nu, div)[0] for nu in nus])
    scale = 1.0 + np.max(np.abs(l))
    tols = np.array([(1e-12 + n * q_tolerance(l, nu, div)) * scale for nu in nus])
    assert np.all(np.diff(values) <= tols[:-1] + tols[1:]), values
    assert values[0] == pytest.approx(np.sort(sigma) @ np.sort(l), abs=tols[0])
    assert np.all(values >= l.mean() - tols)  # uniform q is feasible with zero penalty


@PROP
@given(oracle_inputs(distinct=True))
def test_weights_tend_to_sigma_by_rank_as_nu_vanishes(inp):
    l, risk = inp
    n, div = len(l), risk.divergence
    sigma = risk.spectrum(n)
    q0 = np.empty(n)
    q0[np.argsort(l)] = sigma
    gap = np.min(np.diff(np.sort(l))) if n > 1 else 1.0
    # chi2: no pooling once 2 n nu (sigma_(i+1) - sigma_(i)) < gap, so q = sigma by rank;
    # KL: the pooled mass is ~exp(-gap/nu). Up to the kernels' error scale.
    for k in (4, 6):
        nu = gap * 10.0**-k
        err = np.max(np.abs(_oracle(l, sigma, nu, div)[1] - q0))
        assert err <= 1e-9 + q_tolerance(l, nu, div), (nu, err)


@PROP
@given(oracle_inputs())
def test_weights_tend_to_uniform_as_nu_grows(inp):
    l, risk = inp
    n, div = len(l), risk.divergence
    sigma = risk.spectrum(n)
    spread = np.ptp(l)
    for factor in (1e6, 1e9):
        nu = factor * (1.0 + spread)
        q = _oracle(l, sigma, nu, div)[1]
        # |q - 1/n| <= spread / (2 n nu) (chi2), <= ~spread / (n nu) (KL, first order)
        assert np.max(np.abs(q - 1.0 / n)) <= 2.0 * spread / nu + q_tolerance(l, nu, div)


@PROP
@given(oracle_inputs(min_nu=1e-3, div="chi2"),
       st.lists(st.floats(-100, 100), min_size=N_MAX, max_size=N_MAX))
def test_chi2_weights_are_lipschitz(inp, delta):
    """q is the Euclidean projection of 1/n + l/(2 n nu) onto P(sigma), hence
    |q(l) - q(l')|_2 <= |l - l'|_2 / (2 n nu)."""
    l, risk = inp
    n = len(l)
    l2 = l + np.array(delta[:n])
    sigma, nu = risk.spectrum(n), risk.shift_cost
    q = _oracle(l, sigma, nu, "chi2")[1]
    q2 = _oracle(l2, sigma, nu, "chi2")[1]
    bound = np.linalg.norm(l - l2) / (2 * n * nu)
    slack = np.sqrt(n) * (q_tolerance(l, nu, "chi2") + q_tolerance(l2, nu, "chi2"))
    assert np.linalg.norm(q - q2) <= bound * (1 + 1e-9) + slack


@PROP
@given(oracle_inputs(min_nu=1e-2), st.lists(st.floats(-1, 1), min_size=N_MAX, max_size=N_MAX))
def test_weights_are_the_gradient_of_the_value(inp, direction):
    """For nu > 0 the risk is differentiable with gradient q (Danskin): central differences."""
    l, risk = inp
    n = len(l)
    d = np.array(direction[:n])
    assume(np.linalg.norm(d) > 1e-3)
    sigma, nu, div = risk.spectrum(n), risk.shift_cost, risk.divergence
    q = _oracle(l, sigma, nu, div)[1]
    # R is convex with a (1/nu)-Lipschitz gradient (chi2: 1/(2 n nu)), so the central difference
    # errs by at most h |d|^2 / (4 nu), plus the value error / h; h balances the two.
    scale = 1.0 + np.max(np.abs(l))
    h = math.sqrt(1e-15 * scale * nu)
    fd = (_oracle(l + h * d, sigma, nu, div)[0] - _oracle(l - h * d, sigma, nu, div)[0]) / (2 * h)
    value_err = (1e-14 + n * q_tolerance(l, nu, div)) * scale
    tol = h * (d @ d) / (4 * nu) + value_err / h
    assert abs(fd - q @ d) <= tol, (fd, q @ d, tol)


# --------------------------------------------------- the packed-key sort of risk_weights
def _near_equal_cases(rng):
    n = 3000
    yield rng.standard_normal(n) ** 2                           # continuous
    yield np.round(rng.standard_normal(n), 1)                   # many ties, negatives
    yield rng.integers(0, 3, n).astype(float)                   # three values
    yield 1.0 + rng.standard_normal(n) * 1e-13                  # all in one key prefix
    yield np.concatenate([1.0 + rng.standard_normal(50) * 1e-13,    # short near-equal runs
                          rng.standard_normal(n)])
    yield np.concatenate([[-0.0, 0.0, -0.0, 5e-324, -5e-324, -1e-300, 1e300, -np.inf, np.inf],
                          rng.standard_normal(40)])
    yield np.array([2.0])
    yield np.array([1.0, 1.0 + 2 ** -52, 1.0 - 2 ** -53, 1.0])  # last-bit differences


def test_sorted_order_is_an_exact_sort():
    """``sorted_order`` (np.sort of value bits with the index in the low bits, then a
    fix-up of near-equal runs) is exactly NumPy's stable argsort, also for
    losses that differ only in the dropped low bits, signed zeros, subnormals, infinities,
    NaNs, and when one near-equal run is long enough to fall back to ``np.argsort``."""
    rng = np.random.default_rng(11)
    for x in _near_equal_cases(rng):
        for y in (x, rng.permutation(x)):
            order, ls = ko.sorted_order(y)
            assert order.dtype == np.int64
            np.testing.assert_array_equal(np.sort(order), np.arange(y.shape[0]))
            np.testing.assert_array_equal(y[order], ls)
            np.testing.assert_array_equal(ls, np.sort(y))
            np.testing.assert_array_equal(order, np.argsort(y, kind="stable"))
    nan = np.array([np.nan, 1.0, -np.nan, -0.0, np.inf, 0.0, np.nan, -np.inf, 1.0])
    for y in (nan, np.concatenate([nan, np.random.default_rng(3).standard_normal(100)])):
        order, ls = ko.sorted_order(y)
        np.testing.assert_array_equal(order, np.argsort(y, kind="stable"))


@pytest.mark.parametrize("risk", [ro.ESRM(1.0), ro.Extremile(2.0), ro.CVaR(0.3),
                                  ro.CVaR(0.3, shift_cost=0.5),
                                  ro.CVaR(0.3, shift_cost=0.1, divergence="kl")],
                         ids=repr)
def test_risk_weights_equals_the_stable_sort_oracle(risk):
    """The fast sorting oracle (packed-key sort, fused weights / scatter / value for
    ``nu = 0``) gives the stable merge-sort oracle's weights and value, ties included."""
    rng = np.random.default_rng(12)
    nu, div = float(risk.shift_cost), risk.div_code
    for x in _near_equal_cases(rng):
        x = x[np.isfinite(x)]
        n = x.shape[0]
        sigma = risk.spectrum(n)
        q_ref, q = np.empty(n), np.empty(n)
        v_ref = ko._risk_weights(x, sigma, nu, div, q_ref)
        v = ko.risk_weights(x, sigma, nu, div, q)
        scale = max(1.0, float(np.max(np.abs(x))))
        assert abs(v - v_ref) <= 1e-12 * scale
        np.testing.assert_allclose(q, q_ref, rtol=0, atol=1e-13)
        # a second call on other losses of the same n reuses this thread's scratch arrays
        y = rng.permutation(x)[::-1].copy()
        v2_ref = ko._risk_weights(y, sigma, nu, div, q_ref)
        assert abs(ko.risk_weights(y, sigma, nu, div, q) - v2_ref) <= 1e-12 * scale
        np.testing.assert_allclose(q, q_ref, rtol=0, atol=1e-13)
