r"""Spectral risks with an optional distribution-shift penalty.

For losses :math:`l \in \mathbb{R}^n` and a spectrum :math:`\sigma` (non-negative,
non-decreasing, summing to one) the risk is

.. math::

    R(l) = \max_{q \in \mathcal{P}(\sigma)} \; q^\top l - \nu\, D(q \,\|\, \mathbf{1}/n)

where :math:`\mathcal{P}(\sigma)` is the permutahedron (convex hull of the permutations of
:math:`\sigma`), :math:`\nu \ge 0` is ``shift_cost`` and :math:`D` is the chi-square divergence
:math:`n \|q - \mathbf{1}/n\|^2` or the KL divergence :math:`\sum_i q_i \log(n q_i)`. With
``shift_cost=0`` this is the L-risk :math:`\sum_i \sigma_i l_{(i)}`.

Mapping to the papers' notation
-------------------------------
* Prospect paper (Mehta et al., ICLR 2024): ``nu`` is their :math:`\nu` with the same :math:`D`;
  their CVaR level ``p`` is our ``tail_fraction``, the extremile ``b`` our ``r``, the ESRM
  :math:`\gamma` our ``rho``. Their reference code's ``shift_cost`` multiplies
  :math:`\frac{n}{2}\|q - \mathbf{1}/n\|^2`, so code ``shift_cost = s`` is our ``nu = s/2``; the
  paper's experiments (code ``shift_cost = 1``) are ``nu = 0.5`` here.
* SOREL paper (Wang et al.): no shift penalty (``nu = 0``); their :math:`\lambda` is our ``q``.
  Their :math:`\alpha`-CVaR (Table 1: weight :math:`1/(n\alpha)` on the ranks
  :math:`i > n(1-\alpha)`) is ``CVaR(tail_fraction=alpha)``.

The maximiser ``q`` is computed exactly by sort + pool-adjacent-violators (numba) in
O(n log n); for ``nu = 0`` and a spectrum constant below and above one rank (CVaR, the mean,
the maximum) by selection instead (``np.partition`` and one pass, O(n)); see
:mod:`riskopt._kernels.oracles`.

Examples
--------
>>> import numpy as np, riskopt as ro
>>> risk = ro.CVaR(0.5)
>>> float(risk.value(np.array([1.0, 2.0, 3.0, 4.0])))
3.5
"""
import functools
from dataclasses import dataclass, field

import numpy as np

from ._validation import check_array, check_positive, lazy_module

#: the numba oracles, imported at their first use (parsing or building a risk needs NumPy only)
_ko = lazy_module("riskopt._kernels.oracles")
_DIVERGENCES = {"chi2": 0, "kl": 1}  # riskopt._kernels.oracles.CHI2 / KL (a test checks)


def _check_common(risk):
    check_positive("shift_cost", risk.shift_cost, allow_zero=True)
    if risk.divergence not in _DIVERGENCES:
        raise ValueError(
            f"divergence must be one of {sorted(_DIVERGENCES)}, got {risk.divergence!r}"
        )


def _from_density_cdf(cdf, n):
    """Discretise a spectrum given by the CDF of its density s on [0, 1] into n bins."""
    grid = np.arange(n + 1) / n
    sigma = np.maximum.accumulate(np.maximum(np.diff(cdf(grid)), 0.0))
    return sigma / sigma.sum()


def check_spectrum(sigma, n=None):
    """Validate a spectrum: 1-D, finite, non-negative, non-decreasing, sums to 1."""
    sigma = check_array("spectrum", sigma, ndim=1)
    if n is not None and sigma.shape[0] != n:
        raise ValueError(f"spectrum has length {sigma.shape[0]} but there are {n} losses")
    if np.any(sigma < 0):
        raise ValueError("spectrum must be non-negative")
    if np.any(np.diff(sigma) < -1e-12):
        raise ValueError("spectrum must be non-decreasing (sigma_1 <= ... <= sigma_n)")
    if abs(sigma.sum() - 1.0) > 1e-8:
        raise ValueError(f"spectrum must sum to 1, sums to {sigma.sum():.10g}")
    sigma = np.maximum.accumulate(sigma)
    return np.ascontiguousarray(sigma / sigma.sum())


@functools.lru_cache(maxsize=16)
def _spectrum_of(risk, n):
    sigma = np.ascontiguousarray(risk.spectrum(n), dtype=np.float64)
    sigma.setflags(write=False)
    return sigma


def _cached_spectrum(risk, n):
    """``risk.spectrum(n)``, cached for hashable (built-in, frozen) risks: at n = 1e6 the
    spectrum costs 8-10 ms, more than the sort of the losses."""
    try:
        return _spectrum_of(risk, int(n))
    except TypeError:  # an unhashable risk
        return risk.spectrum(n)


@functools.lru_cache(maxsize=16)
def _plan_of(risk, n):
    return _ko.selection_plan(_spectrum_of(risk, n))


def _cached_plan(risk, n, sigma):
    """The selection-oracle plan of ``sigma = risk.spectrum(n)`` (``_kernels.oracles.
    selection_plan``), cached like the spectrum."""
    try:
        return _plan_of(risk, int(n))
    except TypeError:  # an unhashable risk
        return _ko.selection_plan(sigma)


class _RiskBase:
    """Shared methods: the oracle and the value on a loss vector.

    Built-in spectra come from a spectrum density ``s`` on [0, 1] through its CDF ``cdf(p)``:
    ``sigma_i = cdf(i/n) - cdf((i-1)/n)``. The CDF also defines the risk of a *weighted*
    sample (``weighted_weights``), the spectral risk of the weighted empirical distribution.
    """

    cdf = None

    @property
    def div_code(self):
        return _DIVERGENCES[self.divergence]

    def spectrum(self, n):
        raise NotImplementedError

    def _oracle(self, losses):
        losses = check_array("losses", losses, ndim=1)
        n = losses.shape[0]
        sigma = _cached_spectrum(self, n)
        nu = float(self.shift_cost)
        # a CVaR / MaxLoss / Mean spectrum: selection, no sort (same weights; nu > 0: CVaR, MaxLoss)
        plan = _cached_plan(self, n, sigma)
        q = np.empty_like(losses)
        val = _ko.spectral_risk_weights(losses, sigma, nu, self.div_code, q, plan)
        return val, q

    def weights(self, losses):
        """The maximising distribution ``q`` over the samples (the gradient of R at ``losses``)."""
        return self._oracle(losses)[1]

    def value(self, losses):
        """The risk ``R(losses)``."""
        return self._oracle(losses)[0]

    def weighted_weights(self, losses, sample_weight):
        """Maximising ``q`` for the weighted empirical distribution ``sum_i w_i delta_i``.

        Supported for ``shift_cost = 0`` (the L-risk of the weighted sample: the atom of rank
        ``i`` gets ``cdf(W_i) - cdf(W_{i-1})`` with ``W`` the cumulative sorted weights; tied
        losses share their group's mass in proportion to their weights) and for the mean risk
        (``q = w``). Integer weights equal duplicating samples exactly.
        """
        losses = check_array("losses", losses, ndim=1)
        w = check_array("sample_weight", sample_weight, ndim=1)
        if w.shape != losses.shape:
            raise ValueError("sample_weight and losses have different lengths")
        if np.any(w < 0) or w.sum() <= 0:
            raise ValueError("sample_weight must be non-negative with a positive sum")
        w = w / w.sum()
        if isinstance(self, Mean):
            return w.copy()
        if self.shift_cost != 0 or self.cdf is None:
            raise ValueError(
                "non-uniform sample_weight is supported for shift_cost=0 with a built-in "
                "spectrum, or for the mean risk"
            )
        order, ls = _ko.sorted_order(losses)
        ws = w[order]
        cum = np.concatenate([[0.0], np.cumsum(ws)])
        cum[-1] = 1.0
        q_sorted = np.empty_like(ls)
        start = 0
        n = ls.shape[0]
        while start < n:
            end = start + 1
            while end < n and ls[end] == ls[start]:
                end += 1
            mass = float(self.cdf(cum[end]) - self.cdf(cum[start]))
            grp = ws[start:end]
            q_sorted[start:end] = mass * grp / grp.sum() if grp.sum() > 0 else 0.0
            start = end
        q = np.empty_like(q_sorted)
        q[order] = q_sorted
        return q

    def __call__(self, losses):
        return self.value(losses)


@dataclass(frozen=True)
class CVaR(_RiskBase):
    """Conditional value-at-risk (superquantile): mean of the worst ``tail_fraction`` of losses.

    ``sigma_i = |[(i-1)/n, i/n] ∩ [1 - a, 1]| / a`` — the boundary element gets a fractional
    weight when ``a n`` is not an integer. ``CVaR(1.0)`` is the mean.
    """

    tail_fraction: float = 0.1
    shift_cost: float = 0.0
    divergence: str = "chi2"

    def __post_init__(self):
        a = check_positive("tail_fraction", self.tail_fraction)
        if a > 1:
            raise ValueError(f"tail_fraction must be in (0, 1], got {a}")
        _check_common(self)

    def cdf(self, p):
        # a - (1 - p), not p - (1 - a): exact near p = 1 for any tail fraction (with a tiny a,
        # 1 - a rounds to 1 and the other form loses the whole tail)
        a = float(self.tail_fraction)
        return np.clip(a - (1.0 - np.asarray(p, dtype=float)), 0.0, None) / a

    def spectrum(self, n):
        # counted from the top: t = a n samples in the tail, the last floor(t) bins 1/t each
        # (exactly equal, so the selection oracle, riskopt._kernels.oracles.selection_plan,
        # sees the two-level form), the fraction (t - floor t)/t on the bin below; t <= 1 is
        # the maximum loss. Exact for every tail fraction down to the smallest double (the
        # differences of the cdf lose it below about 1e-16: 1 - a rounds to 1).
        n = int(n)
        a = float(self.tail_fraction)
        sigma = np.zeros(n)
        t = a * n
        if abs(t - round(t)) <= 1e-9 * t:  # a n an integer up to rounding (0.3 x 10)
            t = float(round(t))
        if t <= 1.0:
            sigma[-1] = 1.0
            return sigma
        k = min(int(np.floor(t)), n)
        sigma[n - k:] = 1.0 / t
        if k < n and t > k:
            sigma[n - k - 1] = (t - k) / t
        return sigma / sigma.sum()


@dataclass(frozen=True)
class ESRM(_RiskBase):
    """Exponential spectral risk measure, ``sigma_i = e^-rho (e^(rho i/n) - e^(rho (i-1)/n)) / (1 - e^-rho)``."""

    rho: float = 1.0
    shift_cost: float = 0.0
    divergence: str = "chi2"

    def __post_init__(self):
        check_positive("rho", self.rho)
        _check_common(self)

    def cdf(self, p):
        # (e^{rho (p - 1)} - e^{-rho}) / (1 - e^{-rho}), computed stably
        rho = float(self.rho)
        return np.expm1(rho * (np.asarray(p, dtype=float) - 1.0)) / -np.expm1(-rho) + 1.0

    def spectrum(self, n):
        return _from_density_cdf(self.cdf, n)


@dataclass(frozen=True)
class Extremile(_RiskBase):
    """Extremile, ``sigma_i = (i/n)^r - ((i-1)/n)^r`` with ``r >= 1``."""

    r: float = 2.0
    shift_cost: float = 0.0
    divergence: str = "chi2"

    def __post_init__(self):
        r = check_positive("r", self.r)
        if r < 1:
            raise ValueError(f"extremile r must be >= 1 (a non-decreasing spectrum), got {r}")
        _check_common(self)

    def cdf(self, p):
        return np.asarray(p, dtype=float) ** float(self.r)

    def spectrum(self, n):
        return _from_density_cdf(self.cdf, n)


@dataclass(frozen=True)
class Mean(_RiskBase):
    """Empirical risk (uniform spectrum). With a shift cost the weights stay uniform."""

    shift_cost: float = 0.0
    divergence: str = "chi2"

    def __post_init__(self):
        _check_common(self)

    def cdf(self, p):
        return np.asarray(p, dtype=float)

    def spectrum(self, n):
        return np.full(n, 1.0 / n)


@dataclass(frozen=True)
class MaxLoss(_RiskBase):
    """Maximum loss (``sigma = (0, ..., 0, 1)``)."""

    shift_cost: float = 0.0
    divergence: str = "chi2"

    def __post_init__(self):
        _check_common(self)

    def cdf(self, p):
        return (np.asarray(p, dtype=float) >= 1.0).astype(float)

    def spectrum(self, n):
        s = np.zeros(n)
        s[-1] = 1.0
        return s


@dataclass(frozen=True, eq=False)
class SpectralRisk(_RiskBase):
    """A user spectrum for a fixed number of samples (validated on construction)."""

    sigma: np.ndarray = field(default=None)
    shift_cost: float = 0.0
    divergence: str = "chi2"

    def __post_init__(self):
        if self.sigma is None:
            raise ValueError("SpectralRisk needs a spectrum sigma")
        object.__setattr__(self, "sigma", check_spectrum(self.sigma))
        self.sigma.setflags(write=False)
        _check_common(self)

    def spectrum(self, n):
        if n != self.sigma.shape[0]:
            raise ValueError(f"this spectrum is for n={self.sigma.shape[0]} samples, not {n}")
        return self.sigma


@dataclass(frozen=True)
class KLDRO:
    r"""KL-divergence DRO: the worst case over reweightings ``q`` of the samples,

    .. math::

        R(l) = \max_{q \in \Delta_n:\ KL(q\|\mathbf 1/n) \le \rho}\;
               q^\top l - \lambda_0 KL(q\|\mathbf 1/n)

    (SCDRO paper, Eq. (1)): ``radius`` :math:`\rho > 0` (the KL-constrained problem; the
    default ``shift_cost`` :math:`\lambda_0 = 10^{-3}` is the paper's) or ``radius=None``
    (the KL-penalised problem :math:`\lambda_0 \log\frac1n\sum_i e^{l_i/\lambda_0}`, which
    needs ``shift_cost > 0``). Not a spectral risk: the weights depend on the losses' values,
    not only on their order. Evaluated exactly (log domain: losses of any scale) by
    :func:`riskopt.objectives.kl_dro.kl_dro_weights`; the risk string is ``"kl:RHO"``.

    Examples
    --------
    >>> import numpy as np, riskopt as ro
    >>> risk = ro.KLDRO(radius=0.5)
    >>> l = np.array([0.0, 1.0, 2.0, 3.0])
    >>> bool(l.mean() < risk.value(l) < l.max())
    True
    >>> ro.parse_risk("kl:0.5") == risk
    True
    """

    radius: float = None
    shift_cost: float = None

    def __post_init__(self):
        if self.radius is None:
            if self.shift_cost is None:
                raise ValueError("KLDRO needs radius > 0 (constrained) or shift_cost > 0 "
                                 "(penalised, radius=None)")
            check_positive("shift_cost", self.shift_cost)
        else:
            check_positive("radius", self.radius)
            if self.shift_cost is None:
                object.__setattr__(self, "shift_cost", 1e-3)
            check_positive("shift_cost", self.shift_cost, allow_zero=True)
        object.__setattr__(self, "shift_cost", float(self.shift_cost))
        if self.radius is not None:
            object.__setattr__(self, "radius", float(self.radius))

    @property
    def constrained(self):
        return self.radius is not None

    def solve(self, losses):
        """``(value, q, lam)``: the risk, the maximising weights and the optimal multiplier."""
        from ._kl import kl_dro_weights

        losses = check_array("losses", losses, ndim=1)
        return kl_dro_weights(losses, shift_cost=self.shift_cost, radius=self.radius)

    def value(self, losses):
        return self.solve(losses)[0]

    def weights(self, losses):
        return self.solve(losses)[1]

    def __call__(self, losses):
        return self.value(losses)

    def __str__(self):
        if self.radius is None:
            return f"kl(penalised, shift_cost={self.shift_cost:g})"
        return f"kl:{self.radius:g}" + (f" (shift_cost={self.shift_cost:g})"
                                        if self.shift_cost != 1e-3 else "")


_RISKS = {"cvar": CVaR, "esrm": ESRM, "extremile": Extremile, "mean": Mean, "erm": Mean,
          "maxloss": MaxLoss, "max": MaxLoss}


def parse_risk(spec, shift_cost=0.0, divergence="chi2"):
    """A risk from a short string.

    Grammar: ``NAME[:PARAM][,OPTION=VALUE]``:

    * ``cvar:A``, ``esrm:RHO``, ``extremile:R``, ``mean``, ``maxloss``: spectral risks; the
      option ``chi2=NU`` or ``kl=NU`` sets the shift cost and its divergence (e.g.
      ``"cvar:0.1,chi2=0.5"``, ``"esrm:1,kl=0.2"``, ``"mean,chi2=1"``);
    * ``kl:RHO``: KL-constrained DRO with radius ``RHO``; the option ``lam0=L`` sets its
      lambda_0 (default 1e-3, the SCDRO paper's: ``"kl:0.5"`` is ``KLDRO(radius=0.5,
      shift_cost=1e-3)``, the constrained problem with a small KL penalty); ``"kl:0.5,lam0=0"``
      is the purely constrained problem that other packages (e.g. ``dro``) solve.

    ``shift_cost`` / ``divergence`` are the defaults the string's option overrides (for
    ``kl:RHO``, ``shift_cost > 0`` is its lambda_0). Errors name the bad part.
    """
    if isinstance(spec, (_RiskBase, KLDRO)):
        return spec
    head, *opts = [part.strip() for part in str(spec).split(",")]
    name, _, arg = head.partition(":")
    options = {}
    for opt in opts:
        key, eq, value = opt.partition("=")
        key = key.strip().lower()
        try:
            number = float(value)
        except ValueError:
            number = None
        if not eq or number is None:
            raise ValueError(f"bad option {opt!r} in risk {spec!r}: write KEY=NUMBER, e.g. "
                             "cvar:0.1,chi2=0.5")
        if key in options or (key in ("chi2", "kl") and {"chi2", "kl"} & set(options)):
            raise ValueError(f"risk {spec!r} sets the shift cost twice")
        options[key] = number
    if name.lower() == "kl":
        try:
            rho = float(arg)
        except ValueError:
            raise ValueError(f"risk 'kl' needs a radius, e.g. kl:0.1; got {spec!r}") from None
        bad = set(options) - {"lam0"}
        if bad:
            raise ValueError(f"risk 'kl:RHO' takes the option lam0=L only, got {sorted(bad)} "
                             f"in {spec!r}")
        lam0 = options.get("lam0", shift_cost if shift_cost else None)
        return KLDRO(radius=rho, shift_cost=lam0)
    cls = _RISKS.get(name.lower())
    if cls is None:
        raise ValueError(f"unknown risk {spec!r}; choose one of {sorted(_RISKS) + ['kl']}")
    bad = set(options) - {"chi2", "kl"}
    if bad:
        raise ValueError(f"unknown option(s) {sorted(bad)} in risk {spec!r}: a spectral risk "
                         "takes chi2=NU or kl=NU (the shift cost and its divergence)")
    for div in ("chi2", "kl"):
        if div in options:
            shift_cost, divergence = options[div], div
    if cls in (Mean, MaxLoss):
        if arg:
            raise ValueError(f"risk {name!r} takes no parameter")
        return cls(shift_cost=shift_cost, divergence=divergence)
    if not arg:
        raise ValueError(f"risk {name!r} needs a parameter, e.g. {name}:0.5")
    try:
        val = float(arg)
    except ValueError:
        raise ValueError(f"bad risk parameter {arg!r} in {spec!r}") from None
    return cls(val, shift_cost=shift_cost, divergence=divergence)
