r"""KL-divergence DRO: the inner maximisation over the sample weights, in NumPy.

Notation (SCDRO paper, ``../shared/papers/scdro_kl_constrained_dro.txt``, Eq. (1)-(2) and
Lemma 1): per-sample losses :math:`l \in \mathbb R^n`, weights :math:`q` in the simplex
:math:`\Delta_n`, :math:`KL(q\|\mathbf 1/n) = \sum_i q_i \log(n q_i)`, the radius
:math:`\rho > 0` and the shift cost :math:`\lambda_0 \ge 0`.

* **KL-penalised** DRO (``radius=None``, :math:`\lambda = \lambda_0 > 0`):

  .. math::

      \max_{q \in \Delta_n} q^\top l - \lambda\,KL(q\|\mathbf 1/n)
      = \lambda \log \frac1n \sum_i e^{l_i/\lambda}, \qquad
      q^\star = \mathrm{softmax}(l/\lambda).

* **KL-constrained** DRO (the SCDRO problem, Eq. (1)):

  .. math::

      \max_{q \in \Delta_n:\ KL(q\|\mathbf 1/n) \le \rho} q^\top l - \lambda_0 KL(q\|\mathbf 1/n)
      = \min_{\lambda \ge \lambda_0} F(\lambda), \quad
      F(\lambda) = \lambda \log \frac1n \sum_i e^{l_i/\lambda} + (\lambda - \lambda_0)\rho,

  the 1-D dual of Eq. (2) (strong duality: the primal is a concave maximisation with a
  Slater point, the uniform weights). :math:`F` is convex with
  :math:`F'(\lambda) = \rho - KL(q_\lambda\|\mathbf 1/n)`,
  :math:`q_\lambda = \mathrm{softmax}(l/\lambda)`, and its minimiser lies in
  :math:`[\lambda_0, \lambda_0 + C/\rho]` for losses in an interval of length :math:`C`
  (Lemma 1; the dual is invariant to shifting all the losses, so ``C = max(l) - min(l)``
  works).

Everything is computed in the log domain (the losses are shifted by their maximum before any
exponential), so losses of any scale and tiny multipliers do not overflow. These functions
are the maths of :class:`riskopt.KLDRO` (the risk), of the ``"kl_dro"`` problem family
(:class:`riskopt.objectives.KLDROObjective`, over ``(w, lambda)``) and of
:class:`riskopt.torch.KLDROLoss`, which calls :func:`kl_dro_weights` on the losses of a batch.
No torch here. This module sits at the bottom layer (NumPy only); its public names are
re-exported by :mod:`riskopt.objectives.kl_dro`.

Examples
--------
>>> import numpy as np
>>> from riskopt.objectives.kl_dro import kl_dro_weights, kl_divergence
>>> losses = np.linspace(0.0, 3.0, 7)
>>> value, q, lam = kl_dro_weights(losses, shift_cost=0.05, radius=0.2)  # constrained
>>> round(kl_divergence(q), 12), lam > 0.05, bool(value > losses.mean())
(0.2, True, True)
"""
import math

import numpy as np

__all__ = ["kl_divergence", "log_mean_exp", "kl_dual", "kl_multiplier_bounds",
           "kl_dro_weights"]


def _as_losses(losses):
    l = np.asarray(losses, dtype=np.float64)
    if l.ndim != 1 or l.shape[0] == 0:
        raise ValueError(f"losses must be a non-empty 1-D array, got shape {l.shape}")
    return l


def _check_lam(lam):
    lam = float(lam)
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam}")
    return lam


def kl_divergence(q):
    r""":math:`KL(q\|\mathbf 1/n) = \sum_i q_i \log(n q_i)` (with :math:`0 \log 0 = 0`).

    Examples
    --------
    >>> from riskopt.objectives.kl_dro import kl_divergence
    >>> float(kl_divergence([0.5, 0.5, 0.0, 0.0]))  # log(4/2)
    0.6931471805599453
    """
    q = np.asarray(q, dtype=np.float64)
    pos = q > 0
    return float(np.sum(q[pos] * np.log(q.shape[0] * q[pos])))


def log_mean_exp(losses, lam):
    r"""``(lam * log mean exp(l / lam), softmax(l / lam))``: the KL-penalised value and weights.

    This is :math:`\max_{q\in\Delta_n} q^\top l - \lambda KL(q\|\mathbf 1/n)` and its maximiser
    (the Gibbs variational principle), computed stably as
    :math:`c + \lambda \log\frac1n\sum_i e^{(l_i - c)/\lambda}` with :math:`c = \max_i l_i`.

    Parameters
    ----------
    losses : array-like of shape (n,)
    lam : float > 0

    Returns
    -------
    value : float
    q : ndarray of shape (n,)

    Examples
    --------
    >>> import numpy as np
    >>> from riskopt.objectives.kl_dro import log_mean_exp
    >>> value, q = log_mean_exp(np.array([1000.0, 1000.0]), 1e-3)  # no overflow
    >>> value, q.tolist()
    (1000.0, [0.5, 0.5])
    """
    l, lam = _as_losses(losses), _check_lam(lam)
    c = float(l.max())
    _, _, q, lme = _kl_stats(l - c, 1.0 / lam, math.log(l.shape[0]))
    return c + _lam_lme(l - c, lam, lme), q


def kl_dual(losses, lam, radius, shift_cost=0.0):
    r"""The dual objective :math:`F(\lambda)` of the KL-constrained problem and :math:`F'(\lambda)`.

    .. math::

        F(\lambda) = \lambda \log\frac1n\sum_i e^{l_i/\lambda} + (\lambda - \lambda_0)\rho,
        \qquad F'(\lambda) = \rho - KL(q_\lambda\|\mathbf 1/n)

    (SCDRO paper, Eq. (2), for one fixed loss vector). :math:`\min_{\lambda\ge\lambda_0}
    F(\lambda)` is the KL-constrained DRO value (:func:`kl_dro_weights`); an upper-level
    solver over :math:`(w, \lambda)` evaluates ``F`` and its derivative here.

    Parameters
    ----------
    losses : array-like of shape (n,)
    lam : float > 0
        The multiplier :math:`\lambda`.
    radius : float > 0
        :math:`\rho`.
    shift_cost : float >= 0, default 0
        :math:`\lambda_0`.

    Returns
    -------
    value : float
    derivative : float

    Examples
    --------
    >>> import numpy as np
    >>> from riskopt.objectives.kl_dro import kl_dual, kl_dro_weights
    >>> l = np.array([0.0, 1.0, 2.0, 5.0])
    >>> value, q, lam = kl_dro_weights(l, radius=0.1)
    >>> f, df = kl_dual(l, lam, radius=0.1)
    >>> bool(abs(f - value) < 1e-12 and abs(df) < 1e-12)
    True
    """
    l, lam = _as_losses(losses), _check_lam(lam)
    c = float(l.max())
    kl, _, _, lme = _kl_stats(l - c, 1.0 / lam, math.log(l.shape[0]))
    rho = float(radius)
    return c + _lam_lme(l - c, lam, lme) + (lam - float(shift_cost)) * rho, rho - kl


def kl_multiplier_bounds(losses, radius, shift_cost=0.0):
    r"""An interval :math:`[\lambda_0, \lambda_0 + C/\rho]` holding the optimal multiplier.

    SCDRO paper, Lemma 1, with :math:`C = \max_i l_i - \min_i l_i` (the dual is invariant to
    shifting the losses). Proof sketch: by Jensen, :math:`KL(q_\lambda\|\mathbf 1/n) =
    \mathbb E_{q_\lambda}[l]/\lambda - \log\frac1n\sum_i e^{l_i/\lambda} \le (\max_i l_i -
    \bar l)/\lambda \le C/\lambda`, so :math:`F'(\lambda) > 0` for :math:`\lambda > C/\rho`.
    A solver over :math:`(w, \lambda)` projects :math:`\lambda` on this box (with ``C`` a
    bound on the losses over the model's domain), which makes :math:`F` smooth (Lemma 2).

    Returns
    -------
    (lower, upper) : tuple of float
    """
    l = _as_losses(losses)
    lam0 = float(shift_cost)
    return lam0, lam0 + float(l.max() - l.min()) / float(radius)


#: Losses whose range is outside ``[1 / _RESCALE, _RESCALE]`` are divided by it in the root
#: solve (``Var(d)`` of losses ~1e300 overflowed, ~1e-300 underflowed).
_RESCALE = 1e100


def _kl_stats(d, a, logn):
    r"""For ``d = l - max(l) <= 0`` and ``a = 1/lambda > 0``: ``(KL(q||1/n), Var_q(l), q,
    log mean exp(a d))`` with ``q = softmax(a d)`` (no overflow: ``a d <= 0``).

    Log space at both ends: ``a d`` below the double range is ``-inf`` (weight 0, its true
    value) without a warning; when ``lambda`` is far above the range of the losses
    (``a d > -1/2``) the log-mean-exp is ``log1p(mean(expm1(a d)))``, which keeps the digits
    that ``log(sum) - log(n)`` cancels (``lambda = 1e20`` gave the largest loss, not the mean).
    ``Var`` is computed on ``d`` divided by its range (inf only when it overflows itself).
    """
    with np.errstate(over="ignore"):  # a d < -1.8e308: exp -> 0, the weight it has
        x = a * d
    e = np.exp(x)
    s = e.sum()
    q = e / s
    mu = float(q @ d)
    span = -float(d.min()) if d.size else 0.0
    if _RESCALE >= span >= 1.0 / _RESCALE or span == 0.0:
        var = float(q @ (d - mu) ** 2)
    else:  # |d| ~1e300: (d - mu)^2 overflows; ~1e-300: underflows
        with np.errstate(over="ignore"):
            var = float(q @ ((d - mu) / span) ** 2) * span * span
    if float(x.min()) > -0.5:  # lambda >> range: no cancellation in log(s) - log(n)
        lme = math.log1p(float(np.mean(np.expm1(x))))
    else:
        lme = math.log(s) - logn
    return a * mu - lme, var, q, lme


def _lam_lme(d, lam, lme):
    r"""``lam * lme`` = :math:`\lambda \log \frac1n \sum_i e^{d_i/\lambda}` for ``d = l -
    max(l)`` and ``lme`` from :func:`_kl_stats`; when ``lam`` exceeds the range of the losses
    1e8-fold (``d / lam`` may be subnormal or 0: losses ~1e-300 with ``lam = 1e300`` gave the
    largest loss) by its expansion ``mean(d) + Var(d) / (2 lam)`` (relative error
    ``(range / lam)^2 / 6``)."""
    span = -float(d.min())
    if span == 0.0 or not span / lam < 1e-8:
        return lam * lme
    mu = float(d.mean())
    return mu + 0.5 * (span / lam) * span * float(np.mean(((d - mu) / span) ** 2))


def _solve_kl_root(d, rho, hi, logn):
    r"""The root ``a`` of ``KL(softmax(a d)) = rho`` in ``(0, hi)``, with its stats.

    ``KL(q_a)`` increases from 0 (``a = 0``) to ``log(n/k)`` (``a -> inf``; ``k`` the
    multiplicity of the largest loss) with derivative ``a Var_{q_a}(d)``: Newton's method
    safeguarded by bisection on the bracket, started from the small-``a`` expansion
    ``KL ~ a^2 Var(d) / 2``; about 5-10 O(n) evaluations to ``|KL - rho| <= 1e-13``.
    """
    span = -float(d.min())
    if not _RESCALE >= span >= 1.0 / _RESCALE:  # solve for a * span on d / span (range 1)
        with np.errstate(over="ignore"):
            a, q, lme = _solve_kl_root(d / span, rho, hi * span, logn)
        return a / span, q, lme
    lo = 0.0
    a = math.sqrt(2.0 * rho / float(np.var(d)))
    if not a < hi:
        a = 0.5 * hi
    for _ in range(200):
        kl, var, q, lme = _kl_stats(d, a, logn)
        err = kl - rho
        if abs(err) <= 1e-13 * max(1.0, rho):
            break
        if err > 0:
            hi = a
        else:
            lo = a
        if hi < math.inf and hi - lo <= 4e-16 * hi:
            break
        step = a - err / (a * var) if var > 0 else math.nan
        if lo < step < hi:
            a = step
        else:
            a = 2.0 * a if hi == math.inf else 0.5 * (lo + hi)
    return a, q, lme


def kl_dro_weights(losses, shift_cost=None, radius=None):
    r"""KL-DRO value, maximising weights and multiplier of a loss vector (float64).

    * penalised (``radius=None``): :math:`\max_q q^\top l - \lambda KL(q\|\mathbf 1/n) =
      \lambda \log \frac1n \sum_i e^{l_i/\lambda}` with ``lambda = shift_cost > 0`` and
      ``q = softmax(l / lambda)`` (:func:`log_mean_exp`);
    * constrained: :math:`\max_{q: KL(q\|\mathbf 1/n) \le \rho} q^\top l - \lambda_0 KL(q\|
      \mathbf 1/n) = \min_{\lambda \ge \lambda_0} F(\lambda)` (:func:`kl_dual`; SCDRO paper,
      Eq. (2)) with ``rho = radius`` and :math:`\lambda_0` = ``shift_cost`` (default 0).
      :math:`F'(\lambda) = \rho - KL(q_\lambda\|\mathbf 1/n)`; in :math:`a = 1/\lambda`,
      :math:`KL(q_a)` increases from 0 (``a = 0``) to :math:`\log(n/k)` (``a -> inf``; ``k``
      the multiplicity of the largest loss) with derivative :math:`a\,\mathrm{Var}_{q_a}(l)`,
      so the root of :math:`KL(q_a) = \rho` is found by Newton's method safeguarded by
      bisection (about 5-10 O(n) evaluations, to :math:`|KL - \rho| \le 10^{-13}`). If
      :math:`KL(q_{1/\lambda_0}) \le \rho` the constraint is inactive and
      :math:`\lambda^\star = \lambda_0`; for :math:`\lambda_0 = 0` and :math:`\rho \ge
      \log(n/k)` the value is the max loss with ``q`` uniform on the argmax
      (:math:`\lambda^\star = 0`).

    Parameters
    ----------
    losses : array-like of shape (n,)
    shift_cost : float, optional
        :math:`\lambda > 0` (penalised) or :math:`\lambda_0 \ge 0` (constrained; default 0).
    radius : float > 0, optional
        :math:`\rho`; ``None`` for the penalised problem.

    Returns
    -------
    value : float
        The optimal value (primal = dual).
    q : ndarray of shape (n,)
        The maximiser; also the gradient of ``value`` with respect to the losses (Danskin).
    lam : float
        The optimal multiplier :math:`\lambda^\star` (``shift_cost`` in the penalised case).

    Examples
    --------
    >>> import numpy as np
    >>> from riskopt.objectives.kl_dro import kl_dro_weights
    >>> value, q, lam = kl_dro_weights(np.array([0.0, 1.0, 3.0, 3.0]), radius=10.0)
    >>> value, q.tolist(), lam  # radius >= log(4/2): the max loss
    (3.0, [0.0, 0.0, 0.5, 0.5], 0.0)
    """
    l = _as_losses(losses)
    if radius is None:
        if shift_cost is None:
            raise ValueError("kl_dro_weights needs shift_cost (penalised) or radius "
                             "(constrained)")
        value, q = log_mean_exp(l, shift_cost)
        return value, q, float(shift_cost)
    rho = float(radius)
    if not rho > 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    lam0 = 0.0 if shift_cost is None else float(shift_cost)
    if not lam0 >= 0:
        raise ValueError(f"shift_cost must be >= 0, got {shift_cost}")
    n = l.shape[0]
    logn = math.log(n)
    c = float(l.max())
    d = l - c
    k = int(np.count_nonzero(d == 0.0))
    if lam0 > 0.0:
        kl0, _, q, lme = _kl_stats(d, 1.0 / lam0, logn)
        if kl0 <= rho:  # the dual's derivative is >= 0 at lam0: lam* = lam0
            return c + _lam_lme(d, lam0, lme), q, lam0
    elif rho >= math.log(n / k):
        return c, (d == 0.0) / k, 0.0
    a, q, lme = _solve_kl_root(d, rho, math.inf if lam0 == 0.0 else 1.0 / lam0, logn)
    lam = 1.0 / a
    return c + lam * lme + (lam - lam0) * rho, q, lam
