"""Full-batch L-BFGS reference solver (the ``f*`` of every suboptimality plot).

For ``nu > 0`` the objective is smooth and L-BFGS (scipy) is run to a tight gradient
tolerance. For ``nu = 0`` the spectral risk is non-smooth where losses tie; we use the
"hidden smoothness" of Mehta et al. (2024, Prop. 8): if the losses at the minimiser are
distinct, the chi-square-smoothed problem has *exactly* the same minimiser for all small
enough ``nu``. The reference therefore follows a continuation ``nu = 1, 1e-1, ...`` (warm
starts), then polishes on the smooth function ``sum_i sigma_i l_{pi(i)}(w) + mu/2 |w|^2`` with
the sorting permutation ``pi`` frozen at the current point, and keeps the best point under the
true (``nu = 0``) objective. Tests certify this reference against cvxpy on small problems.
"""
import numpy as np
from scipy.optimize import minimize

from .._kernels import oracles as _ko
from .._validation import check_int, check_positive
from .base import Reference


class ReferenceLBFGS:
    """Deterministic reference minimiser of the spectral family (``f*``).

    The engine behind :meth:`riskopt.Objective.reference_solution` and the
    :class:`riskopt.solvers.LBFGS` solver. ``hit_limit`` is set when any inner L-BFGS-B solve
    stopped at ``max_iter`` (the ``nu = 0`` path runs several).

    Parameters: those of :class:`riskopt.solvers.LBFGS` (``tol``, ``max_iter``, ``nu_min``,
    ``polish_ties``), whose docstring also states the limitations.
    """

    def __init__(self, tol=1e-12, max_iter=20000, nu_min=1e-9, polish_ties=True):
        self.tol = tol
        self.max_iter = max_iter
        self.nu_min = nu_min
        self.polish_ties = polish_ties
        self.hit_limit = False
        self._used = 0

    def _minimize(self, fun, W0, gtol):
        """One L-BFGS-B solve within what is left of ``max_iter`` (a hard cap on the total
        over the continuation / polish solves of one :meth:`minimize`)."""
        from scipy.optimize import OptimizeResult

        shape = W0.shape
        budget = self.max_iter - self._used
        if budget <= 0:
            self.hit_limit = True
            return W0, OptimizeResult(x=np.ravel(W0), nit=0, status=1,
                                      message="max_iter used by the previous solves")

        def f(x):
            v, g = fun(x.reshape(shape))
            return v, np.ravel(g)

        res = minimize(f, np.ravel(W0), jac=True, method="L-BFGS-B",
                       options={"maxiter": budget, "maxfun": 2 * budget,
                                "ftol": 0.0, "gtol": gtol, "maxcor": 30})
        self._used += int(res.nit)
        if getattr(res, "status", 0) == 1:  # L-BFGS-B: iteration / evaluation limit
            self.hit_limit = True
        return res.x.reshape(shape), res

    def minimize(self, objective, coef0=None):
        """Minimise ``objective`` from ``coef0`` (default zeros); returns a ``Reference``."""
        self.hit_limit = False
        self._used = 0
        check_positive("tol", self.tol)
        check_int("max_iter", self.max_iter)
        W0 = objective.as_matrix(objective.zeros() if coef0 is None else coef0)
        g0 = np.linalg.norm(objective.value_grad(W0)[1])
        gtol = self.tol * max(1.0, g0)
        from ..risks import Mean

        if objective.nu > 0 or (isinstance(objective.risk, Mean) and objective.loss.smooth):
            W, res = self._minimize(objective.value_grad, W0, gtol)
            coef = objective.as_coef(W)
            return Reference(coef=coef, value=float(objective.value(coef)), method="lbfgs",
                             n_iter=int(res.nit), message=str(res.message),
                             hit_limit=self.hit_limit,
                             extra={"grad_norm": float(np.linalg.norm(objective.grad(coef)))})
        return self._run_nonsmooth(objective, W0, gtol)

    def _run_nonsmooth(self, objective, W, gtol):
        best_W, best_f = W, objective.value(W)
        nu = 1.0
        n_it = 0
        if objective.sample_weight is not None:  # no chi2 smoothing of a weighted sample
            import warnings

            warnings.warn("L-BFGS on a non-smooth weighted spectral risk (shift_cost=0, "
                          "non-integer sample weights): the solution may be inexact",
                          RuntimeWarning, stacklevel=3)
            W, res = self._minimize(objective.value_grad, W, gtol)
            n_it += res.nit
            if objective.value(W) < best_f:
                best_W, best_f = W, objective.value(W)
            nu = 0.0
        while nu >= self.nu_min and nu > 0:
            smoothed = objective.with_shift(nu, _ko.CHI2)
            W, res = self._minimize(smoothed.value_grad, W, gtol)
            n_it += res.nit
            f = objective.value(W)
            if f < best_f:
                best_W, best_f = W, f
            nu /= 10.0
        if objective.loss.smooth:
            W, f = self._polish(objective, best_W, gtol)
            if f < best_f:
                best_W, best_f = W, f
            if objective.sample_weight is None and self.polish_ties:
                # near-ties across a jump of the spectrum: solve the local piece exactly,
                # trying widening tolerances (the L-BFGS point may sit 1e-4 off the kink)
                seen = set()
                for tol in (1e-7, 1e-5, 1e-4, 1e-3, 1e-2):
                    W, f = self._polish_ties(objective, best_W, tol=tol, seen=seen)
                    if f < best_f:
                        best_W, best_f = W, f
        coef = objective.as_coef(best_W)
        return Reference(coef=coef, value=float(objective.value(coef)), method="lbfgs",
                         n_iter=n_it, message="continuation in nu + frozen-order polish",
                         hit_limit=self.hit_limit)

    def _polish_ties(self, objective, W, tol=1e-5, max_group=6, seen=None):
        """Exact local solve when losses tie across a jump of the spectrum at the optimum.

        Near ``W`` the losses are grouped into blocks of (almost) equal value; outside the blocks
        the order is frozen (weight ``sigma`` by rank). Inside a block ``G`` with spectrum slice
        ``s`` the contribution ``sum_k s_k l_(k)`` is written exactly as
        ``sum_j (s_j - s_{j-1}) top_{m-j+1}(l_G)`` with epigraph variables
        ``t >= sum_{i in S} l_i`` over all subsets ``S`` of the right size, a smooth convex
        program solved by SLSQP. Returns ``(W, F0(W))`` (the input if nothing applies).
        """
        from itertools import combinations

        sigma = objective.sigma
        losses = objective.losses(W)
        order = np.argsort(losses, kind="mergesort")
        ls = losses[order]
        scale = max(1.0, float(np.max(np.abs(ls))))
        n = objective.n
        groups = []
        r = 0
        while r < n:
            e = r + 1
            while e < n and ls[e] - ls[e - 1] <= tol * scale:
                e += 1
            if e - r > 1 and sigma[e - 1] > sigma[r] and not _duplicates(objective, order[r:e]):
                groups.append(np.arange(r, e))
            r = e
        if not groups or any(len(g) > max_group for g in groups):
            return W, objective.value(W)
        key = tuple(tuple(sorted(order[g])) for g in groups)
        if seen is not None:
            if key in seen:  # same local problem as at a tighter tolerance: nothing new
                return W, objective.value(W)
            seen.add(key)
        q = sigma[np.argsort(order)].copy()  # q[i] = sigma[rank(i)]
        terms = []  # (coef, [sample index subsets]) per epigraph variable
        for g in groups:
            idx = order[g]
            q[idx] = 0.0
            s = sigma[g]
            m = len(g)
            prev = 0.0
            for j in range(m):
                c = s[j] - prev
                prev = s[j]
                if c > 0:
                    terms.append((c, [list(S) for S in combinations(idx, m - j)]))
        pk = W.size
        shape = W.shape
        X = objective.X
        t0 = []
        for c, subsets in terms:
            t0.append(max(losses[S].sum() for S in subsets))
        x0 = np.concatenate([W.ravel(), np.asarray(t0)])
        coefs = np.array([c for c, _ in terms])

        def split(x):
            return x[:pk].reshape(shape), x[pk:]

        def fun(x):
            Wc, t = split(x)
            lo, de = objective.losses_derivs(Wc)
            val = q @ lo + coefs @ t + objective._reg_value(Wc)
            G = X.T @ (q[:, None] * de) + objective.reg[:, None] * Wc
            return val, np.concatenate([G.ravel(), coefs])

        cons_rows = [(k, S) for k, (_, subsets) in enumerate(terms) for S in subsets]

        def cons(x):
            Wc, t = split(x)
            lo = objective.losses(Wc)
            return np.array([t[k] - lo[S].sum() for k, S in cons_rows])

        def cons_jac(x):
            Wc, _ = split(x)
            _, de = objective.losses_derivs(Wc)
            J = np.zeros((len(cons_rows), x.size))
            for row, (k, S) in enumerate(cons_rows):
                G = X[S].T @ de[S]
                J[row, :pk] = -G.ravel()
                J[row, pk + k] = 1.0
            return J

        res = minimize(fun, x0, jac=True, method="SLSQP",
                       constraints=[{"type": "ineq", "fun": cons, "jac": cons_jac}],
                       options={"maxiter": 200, "ftol": 1e-16})
        W_new = split(res.x)[0]
        return W_new, objective.value(W_new)

    def _polish(self, objective, W, gtol):
        """Minimise sum_i sigma_i l_{pi(i)}(w) + reg with the order pi frozen; repeat if it moves."""
        for _ in range(5):
            order = objective.sorted_order(W)
            q = objective.weights(W)  # sigma by rank (averaged over exact ties), frozen

            def fun(Wc):
                losses, derivs = objective.losses_derivs(Wc)
                val = q @ losses + objective._reg_value(Wc)
                G = objective.X.T @ (q[:, None] * derivs) + objective.reg[:, None] * Wc
                return val, G

            W_new, _ = self._minimize(fun, W, gtol)
            same = np.array_equal(objective.sorted_order(W_new), order)
            if objective.value(W_new) <= objective.value(W):
                W = W_new
            if same:
                break
        return W, objective.value(W)


def _duplicates(objective, idx):
    """True when all samples ``idx`` have identical rows and targets (always tied: smooth)."""
    X, y = objective.X, objective.y
    return bool(np.all(X[idx] == X[idx[0]]) and np.all(y[idx] == y[idx[0]]))
