r"""CVaR in the Rockafellar-Uryasev (RU) form, finite-sum and streaming.

Meng & Gower, "A model-based method for minimizing CVaR and beyond", eq. (5):

.. math::

    F_\beta(w, \alpha) = \alpha
        + \frac{1}{1-\beta}\,\frac1n\sum_{i=1}^n \max\{\ell_i(w) - \alpha, 0\}
        + \frac{\mu}{2}\|w\|^2

(``mu = l2_reg``, not applied to the intercept). ``beta`` is the *confidence level* of the paper
(``beta = 0.95``: the worst 5% of the losses); the spectral-risk tail fraction is ``1 - beta``,
i.e. ``min_alpha F_beta(w, alpha) = riskopt.CVaR(1 - beta).value(losses(w)) + mu/2 |w|^2`` for every
``w`` (tested). A minimising ``alpha`` is the lower ``beta``-quantile of the losses,
``VaR_beta(w) = l_(k)`` with ``k = max(1, ceil(beta n))`` (eq. (3) for the empirical distribution),
returned by :meth:`RUCVaRObjective.value_at_risk`.

The ``"ru_cvar"`` family: auxiliary variable ``alpha`` (``aux_names = ("alpha",)``); with
``aux=None`` the values and gradients are those of the profile ``min_alpha F(w, alpha)``.

Exact minimisers of small finite problems (:meth:`RUCVaRObjective.reference_solution`, alias
``exact_solution``):

* ``"lbfgs"``: the spectral-risk form ``riskopt.Objective(loss, CVaR(1 - beta), X, y, l2_reg)``
  minimised by :class:`riskopt.solvers.LBFGS` (its ``nu = 0`` path), ``alpha* = VaR_beta(w*)``;
* ``"cvxpy"``: the epigraph program ``min alpha + B/n sum t_i + reg, t_i >= l_i(w) - alpha,
  t >= 0`` (squared, absolute, logistic);
* ``"linprog"``: the same as a linear program (scipy HiGHS), absolute loss and ``l2_reg = 0``.

Special cases (Section 4.4-4.5 of the paper), for ``n`` samples:

* :func:`max_loss_objective`: ``beta = 1 - 1/n``. Then ``min_alpha F = max_i l_i(w)``, attained for
  every ``alpha`` in ``[l_(n-1), l_(n)]`` (the paper's ``alpha = max_i l_i`` is the upper end).
* :func:`erm_objective`: the paper's ``beta = 1/n``. The paper argues through the conditional
  expectation (4) that this is ERM. In the RU form (5) on ``n`` atoms the exact identity is
  ``min_alpha F_{1/n}(w, alpha) = (n mean(l) - min(l)) / (n - 1)``, the mean of the ``n - 1``
  largest losses: ERM up to ``(mean(l) - min(l)) / (n - 1) >= 0`` (not a constant: it depends on
  ``w``, but it is O(1/n)). ``beta = 0`` (accepted by :class:`RUCVaRObjective`) gives exactly the mean,
  ``F_0(w, alpha) = mean(l)`` for every ``alpha <= min(l)``.

Streaming: a *sampler* is any object with ``draw(rng, size) -> (X, y)`` (raw features and targets,
as for the finite-sum constructor); :class:`StreamingRUCVaRObjective` holds a sampler and a fixed
evaluation sample of size ``n_eval`` drawn once from it, on which ``value`` is the discretised
objective (27) of the paper. :class:`SyntheticSampler` generates the problems of Section 6.1.

Examples
--------
>>> import numpy as np
>>> from riskopt.objectives.ru_cvar import RUCVaRObjective
>>> rng = np.random.default_rng(0); X, y = rng.normal(size=(40, 3)), rng.normal(size=40)
>>> obj = RUCVaRObjective("squared", X, y, beta=0.9)
>>> w = np.zeros(3)
>>> a = obj.value_at_risk(w)
>>> bool(abs(obj.value(w, a) - obj.cvar_objective().value(w)) < 1e-12)
True
"""
import math
import numbers

import numpy as np

from .._validation import check_int, check_X_y
from .base import LinearModelObjective, Reference


def _check_beta(beta):
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
        raise ValueError(f"beta must be a real number in [0, 1), got {beta!r}")
    beta = float(beta)
    if not (0.0 <= beta < 1.0):
        raise ValueError(
            f"beta (the CVaR confidence level) must be in [0, 1), got {beta}; the worst "
            f"(1 - beta) fraction of the losses is averaged"
        )
    return beta


def _one(aux):
    """The scalar ``alpha`` of ``aux`` (a number or a one-element sequence)."""
    if np.ndim(aux) == 1 and np.size(aux) == 1:
        return np.asarray(aux).ravel()[0]
    return aux


def _check_alpha(alpha):
    if isinstance(alpha, (bool, str, bytes)) or np.ndim(alpha) != 0:
        raise ValueError(f"alpha must be a real number, got {alpha!r}")
    try:
        alpha = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a real number, got {alpha!r}") from None
    if not np.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}")
    return alpha


class RUSolution(Reference):
    """An exact minimiser ``(coef, alpha)`` of the RU objective and ``value = F(coef, alpha)``."""

    @property
    def alpha(self):
        return self.aux[0]


class RUCVaRObjective(LinearModelObjective):
    r"""Finite-sum CVaR objective in the Rockafellar-Uryasev form.

    ``F(w, alpha) = alpha + 1/(1-beta) mean_i max(l_i(w) - alpha, 0) + l2_reg/2 |w|^2``.

    Parameters
    ----------
    loss : Loss or str
        ``"squared"`` (``0.5 r^2``), ``"absolute"``, ``"logistic"`` (labels {0,1} or {-1,1}),
        ``"multinomial"``.
    X : array of shape (n, d)
    y : array of shape (n,)
    beta : float in [0, 1)
        Confidence level (paper's ``beta``): CVaR of the worst ``1 - beta`` fraction.
    l2_reg : float, default 0
    fit_intercept : bool, default False
        Append a column of ones; its coefficient is not penalised.

    Attributes
    ----------
    X, y, n, p, K, reg, loss, coef_shape
        As in :class:`riskopt.Objective` (same kernel encoding), so the kernels of
        :mod:`riskopt._kernels.losses` apply unchanged.
    beta : float
    inv_tail : float
        ``1 / (1 - beta)``.
    """

    family = "ru_cvar"
    aux_names = ("alpha",)
    spec_params = {"beta": 0.95}
    reference_methods = ("lbfgs", "cvxpy", "linprog")

    def __init__(self, loss, X, y, beta, l2_reg=0.0, fit_intercept=False):
        self.beta = _check_beta(beta)
        self.inv_tail = 1.0 / (1.0 - self.beta)
        self._init_data(loss, X, y, l2_reg, fit_intercept)

    @property
    def smooth(self):
        return False

    def prepare(self, X, y):
        """Validate raw ``(X, y)`` (e.g. a sampler's draw); encode them like ``self.X, self.y``."""
        X, y = check_X_y(X, y)
        if X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, expected {self.n_features}")
        y = np.ascontiguousarray(self.loss.prepare_targets(y), dtype=np.float64)
        if self.K > 1 and (np.max(y) >= self.K):
            raise ValueError(f"label {int(np.max(y))} out of range for {self.K} classes")
        if self.fit_intercept:
            X = np.hstack([X, np.ones((X.shape[0], 1))])
        return np.ascontiguousarray(X), y

    # ------------------------------------------------------------------ oracles
    def _quantile(self, losses):
        """Lower beta-quantile ``l_(k)``, ``k = max(1, ceil(beta n))`` (a minimiser in alpha)."""
        n = losses.shape[0]
        k = max(1, math.ceil(self.beta * n * (1.0 - 1e-12)))
        return float(np.partition(losses, k - 1)[k - 1])

    def value_at_risk(self, w):
        """``VaR_beta(w)``, the lower beta-quantile of the losses: a minimiser of ``F(w, .)``."""
        return self._quantile(self.losses(w))

    def _value_losses(self, losses, alpha):
        return alpha + self.inv_tail * float(np.mean(np.maximum(losses - alpha, 0.0)))

    def value(self, w, aux=None):
        """``F(w, alpha)`` (``aux = alpha``); ``aux=None`` gives the profile
        ``min_alpha F(w, alpha)`` (CVaR of w).

        The profile equals ``self.cvar_objective().value(w)``; the callbacks of
        :meth:`riskopt.solvers.Solver.run` (``Trace``) see this profile value.
        """
        W = self.as_matrix(w)
        losses = self.losses(W)
        alpha = self._quantile(losses) if aux is None else _check_alpha(_one(aux))
        return self._value_losses(losses, alpha) + self._reg_value(W)

    def value_grad(self, w, aux=None):
        """``(F, grad)`` at ``(w, alpha)``; see :meth:`grad`."""
        W = self.as_matrix(w)
        losses, derivs = self.losses_derivs(W)
        alpha = self._quantile(losses) if aux is None else _check_alpha(_one(aux))
        u = (losses > alpha).astype(np.float64)
        c = self.inv_tail / self.n
        G = (c * (self.X.T @ (u[:, None] * derivs)) + self.reg[:, None] * W).reshape(np.shape(w))
        value = self._value_losses(losses, alpha) + self._reg_value(W)
        if aux is None:
            return value, G
        return value, (G, 1.0 - c * float(u.sum()))

    def grad(self, w, aux=None):
        """A subgradient ``(g_w, g_alpha)`` of ``F`` at ``(w, alpha)`` (``u_i = 1[l_i > alpha]``).

        ``g_w = B/n sum_i u_i grad l_i(w) + reg w``, ``g_alpha = 1 - B/n sum_i u_i`` (eq. (6)
        averaged over the samples), ``B = 1/(1-beta)``. ``g_w`` has the shape of ``w``. With
        ``aux=None``, ``g_w`` alone at ``alpha = VaR_beta(w)``: a subgradient of the profile.
        """
        return self.value_grad(w, aux)[1]

    subgradient = grad

    # ------------------------------------------------------------------ exact solutions
    def cvar_objective(self):
        """The same problem as a spectral risk: ``riskopt.Objective(loss, CVaR(1 - beta), ...)``."""
        from ..risks import CVaR
        from .spectral import Objective

        X = self.X[:, :-1] if self.fit_intercept else self.X
        return Objective(self.loss, CVaR(1.0 - self.beta), X, self.y, l2_reg=self.l2_reg,
                         fit_intercept=self.fit_intercept)

    def reference_solution(self, method="auto", **options):
        """An exact minimiser ``(w*, alpha*)`` (small problems); see the module docstring.

        Parameters
        ----------
        method : {"lbfgs", "cvxpy", "linprog"}
        **options
            ``"lbfgs"``: passed to :class:`riskopt.solvers.LBFGS`; ``"cvxpy"``: ``solver``
            (default ``"CLARABEL"``) and further ``problem.solve`` keywords.

        Returns
        -------
        RUSolution
            ``value`` is ``self.value(coef, alpha)`` evaluated here, not the solver's report.
        """
        method = self._check_method(method)
        n_iter, message, hit, extra = 0, "", False, {}
        if method == "lbfgs":
            ref = self.cvar_objective().reference_solution(**options)
            coef, n_iter, message, hit = ref.coef, ref.n_iter, ref.message, ref.hit_limit
            extra = dict(ref.extra)  # the stop report (``abnormal``, see objectives._lbfgs)
            alpha = self.value_at_risk(coef)
        elif method == "cvxpy":
            coef, alpha = self._solve_cvxpy(**options)
        elif method == "linprog":
            coef, alpha = self._solve_linprog()
        coef = self.as_coef(coef)
        return RUSolution(coef=coef, aux=(float(alpha),), value=self.value(coef, alpha),
                          method=method, n_iter=n_iter, message=message, hit_limit=hit,
                          extra=extra)

    exact_solution = reference_solution

    def value_many(self, coefs, alphas):
        """``F(w_k, alpha_k)`` for many points at once (equals ``value(w_k, alpha_k)`` to
        rounding).

        ``coefs``: ``(m, p)`` (squared, absolute and logistic losses); ``alphas``: ``(m,)``.
        Non-finite points (and overflowing values) give ``inf``. One fused numba pass over the
        rows (:func:`riskopt._kernels.ru_cvar._ru_hinge_sums`): the benchmarks evaluate every
        recorded point of a run in one call.
        """
        from .._kernels.ru_cvar import CODES, _ru_hinge_sums

        alphas = np.asarray(alphas, dtype=np.float64).reshape(-1)
        m = alphas.size
        W = np.asarray(coefs, dtype=np.float64).reshape(m, self.p).T  # (p, m)
        out = np.full(m, np.inf)
        ok = np.all(np.isfinite(W), axis=0) & np.isfinite(alphas)
        if not ok.any():
            return out
        if self.loss.name not in CODES:
            raise ValueError(f"value_many covers {tuple(CODES)}, not {self.loss.name!r}")
        Wk = np.ascontiguousarray(W[:, ok])
        a = np.ascontiguousarray(alphas[ok])
        acc = np.zeros(a.size)
        _ru_hinge_sums(CODES[self.loss.name], self.X, self.y, Wk, a, acc)
        with np.errstate(over="ignore", invalid="ignore"):
            vals = a + self.inv_tail * acc / self.n \
                + 0.5 * np.sum(self.reg[:, None] * Wk * Wk, axis=0)
        vals[~np.isfinite(vals)] = np.inf
        out[ok] = vals
        return out

    def _solve_cvxpy(self, solver="CLARABEL", **kw):
        import cvxpy as cp

        if self.K != 1:
            raise ValueError("the cvxpy formulation covers the squared, absolute, logistic losses")
        w = cp.Variable(self.p)
        a = cp.Variable()
        t = cp.Variable(self.n, nonneg=True)
        z = self.X @ w
        name = self.loss.name
        if name == "squared":
            ell = 0.5 * cp.square(z - self.y)
        elif name == "absolute":
            ell = cp.abs(z - self.y)
        elif name == "logistic":
            ell = cp.logistic(z) - cp.multiply(self.y, z)
        else:
            raise ValueError(f"no cvxpy formulation for the {name} loss")
        obj = a + (self.inv_tail / self.n) * cp.sum(t)
        if self.l2_reg > 0:
            obj = obj + 0.5 * cp.sum(cp.multiply(self.reg, cp.square(w)))
        prob = cp.Problem(cp.Minimize(obj), [t >= ell - a])
        prob.solve(solver=solver, **kw)
        if w.value is None:
            raise RuntimeError(f"cvxpy did not solve the problem: {prob.status}")
        return np.asarray(w.value, dtype=np.float64), float(a.value)

    def _solve_linprog(self):
        from scipy import sparse
        from scipy.optimize import linprog

        if self.loss.name != "absolute" or self.l2_reg > 0:
            raise ValueError("method='linprog' needs the absolute loss and l2_reg = 0")
        n, p = self.n, self.p
        # variables [w (p), alpha, t (n)]; rows: +-(x_i w - y_i) - alpha - t_i <= 0
        c = np.concatenate([np.zeros(p), [1.0], np.full(n, self.inv_tail / n)])
        X = sparse.csr_matrix(self.X)
        ones = sparse.csr_matrix(np.ones((n, 1)))
        eye = sparse.identity(n, format="csr")
        A = sparse.vstack([sparse.hstack([X, -ones, -eye]), sparse.hstack([-X, -ones, -eye])])
        b = np.concatenate([self.y, -self.y])
        bounds = [(None, None)] * (p + 1) + [(0, None)] * n
        res = linprog(c, A_ub=A.tocsr(), b_ub=b, bounds=bounds, method="highs",
                      options={"primal_feasibility_tolerance": 1e-10,
                               "dual_feasibility_tolerance": 1e-10})
        if res.status != 0:
            raise RuntimeError(f"linprog failed: {res.message}")
        return res.x[:p], float(res.x[p])

    def __repr__(self):
        return (f"{type(self).__name__}(loss={self.loss.name}, beta={self.beta:g}, n={self.n}, "
                f"p={self.p}, K={self.K}, l2_reg={self.l2_reg:g})")


def max_loss_objective(loss, X, y, l2_reg=0.0, fit_intercept=False):
    """The max-loss problem ``min_w max_i l_i(w)`` as RU-CVaR with ``beta = 1 - 1/n`` (Section 4.4).

    ``min_alpha F(w, alpha) = max_i l_i(w)`` (+ l2), attained on ``[l_(n-1), l_(n)]``.
    """
    n = np.shape(X)[0]
    if n < 2:
        raise ValueError("the max-loss objective needs at least 2 samples")
    return RUCVaRObjective(loss, X, y, beta=1.0 - 1.0 / n, l2_reg=l2_reg,
                           fit_intercept=fit_intercept)


def erm_objective(loss, X, y, l2_reg=0.0, fit_intercept=False):
    """The paper's ERM case ``beta = 1/n`` (Section 4.5); SPL+ on it is an adaptive ERM method.

    Exactly, ``min_alpha F(w, alpha) = (n mean(l) - min(l)) / (n - 1)`` = mean of the ``n - 1``
    largest losses (ERM up to ``(mean - min)/(n - 1)``); use ``RUCVaRObjective(..., beta=0)`` for
    the mean itself. See the module docstring.
    """
    n = np.shape(X)[0]
    if n < 2:
        raise ValueError("the ERM special case needs at least 2 samples")
    return RUCVaRObjective(loss, X, y, beta=1.0 / n, l2_reg=l2_reg, fit_intercept=fit_intercept)


# ---------------------------------------------------------------------- streaming
class ArraySampler:
    """Sampler drawing rows of ``(X, y)`` uniformly with replacement (a finite sum as a stream)."""

    def __init__(self, X, y):
        self.X, self.y = check_X_y(X, y)

    def draw(self, rng, size):
        idx = rng.integers(0, self.X.shape[0], size=size)
        return self.X[idx], self.y[idx]


_NOISES = ("normal", "gumbel", "lognormal")


class SyntheticSampler:
    """The synthetic distributions of Section 6.1 (Tables 1-2) of Meng & Gower.

    ``x`` uniform on the unit sphere of R^d; ``zeta`` from Normal(0, 2^2), Gumbel(0, 4) or
    LogNormal(2, 1). Regression: ``y = x.theta_gen + zeta``, ``theta_gen ~ U[0, 1]^d``.
    Classification: ``y = 1`` with probability ``sigmoid(x.theta_gen + zeta)``, else ``-1``,
    ``theta_gen ~ U[0, 10]^d``. ``theta_gen`` is drawn once from ``random_state``.

    Parameters
    ----------
    task : {"regression", "classification"}
    d : int, default 10
    noise : {"normal", "gumbel", "lognormal"}
    random_state : int, default 0
    """

    def __init__(self, task="regression", d=10, noise="normal", random_state=0):
        if task not in ("regression", "classification"):
            raise ValueError(f"task must be 'regression' or 'classification', got {task!r}")
        if noise not in _NOISES:
            raise ValueError(f"noise must be one of {_NOISES}, got {noise!r}")
        self.task = task
        self.d = check_int("d", d)
        self.noise = noise
        self.random_state = random_state
        hi = 1.0 if task == "regression" else 10.0
        self.theta_gen = np.random.default_rng(random_state).uniform(0.0, hi, size=self.d)

    def _noise(self, rng, size):
        if self.noise == "normal":
            return rng.normal(0.0, 2.0, size=size)
        if self.noise == "gumbel":
            return rng.gumbel(0.0, 4.0, size=size)
        return rng.lognormal(2.0, 1.0, size=size)

    def draw(self, rng, size):
        x = rng.normal(size=(size, self.d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        s = x @ self.theta_gen + self._noise(rng, size)
        if self.task == "regression":
            return x, s
        prob = 1.0 / (1.0 + np.exp(-s))
        return x, np.where(rng.random(size) < prob, 1.0, -1.0)


class StreamingRUCVaRObjective(RUCVaRObjective):
    """RU-CVaR of a distribution given by a sampler; values on a fixed sample of size ``n_eval``.

    The fixed sample (drawn once with ``np.random.default_rng(random_state)``) makes ``value``
    the discretised objective (27); ``X, y, n`` are that sample, so ``exact_solution`` and the
    SPL+ scale ``l0`` (the mean initial loss) are computed on it. Solvers draw fresh training
    samples from ``sampler`` with their own generator
    (:meth:`riskopt.solvers.spl.SPLPlus.run_stream`).
    """

    def __init__(self, loss, sampler, beta, n_eval=100_000, l2_reg=0.0, fit_intercept=False,
                 random_state=0):
        if not callable(getattr(sampler, "draw", None)):
            raise ValueError("sampler must have a draw(rng, size) -> (X, y) method")
        n_eval = check_int("n_eval", n_eval)
        X, y = sampler.draw(np.random.default_rng(random_state), n_eval)
        super().__init__(loss, X, y, beta, l2_reg=l2_reg, fit_intercept=fit_intercept)
        self.sampler = sampler
        self.random_state = random_state
