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
from .base import Result


class LBFGS:
    """Deterministic reference solver.

    Parameters
    ----------
    tol : float, default 1e-12
        Gradient-norm tolerance (``gtol``) relative to ``max(1, |grad F(w0)|)``.
    max_iter : int, default 20000
    nu_min : float, default 1e-9
        Smallest shift cost of the continuation used when ``nu = 0``.
    """

    name = "lbfgs"
    convergent = True

    def __init__(self, tol=1e-12, max_iter=20000, nu_min=1e-9):
        self.tol = tol
        self.max_iter = max_iter
        self.nu_min = nu_min

    def _minimize(self, fun, W0, gtol):
        shape = W0.shape

        def f(x):
            v, g = fun(x.reshape(shape))
            return v, np.ravel(g)

        res = minimize(f, np.ravel(W0), jac=True, method="L-BFGS-B",
                       options={"maxiter": self.max_iter, "maxfun": 2 * self.max_iter,
                                "ftol": 0.0, "gtol": gtol, "maxcor": 30})
        return res.x.reshape(shape), res

    def run(self, objective, coef0=None):
        check_positive("tol", self.tol)
        check_int("max_iter", self.max_iter)
        W0 = objective.as_matrix(objective.zeros() if coef0 is None else coef0)
        g0 = np.linalg.norm(objective.value_grad(W0)[1])
        gtol = self.tol * max(1.0, g0)
        if objective.nu > 0 or objective.sample_weight is not None and objective.loss.smooth \
                and type(objective.risk).__name__ == "Mean":
            W, res = self._minimize(objective.value_grad, W0, gtol)
            coef = objective.as_coef(W)
            return Result(coef=coef, value=float(objective.value(coef)), n_epochs=int(res.nit),
                          time=0.0, message=str(res.message), extra={"grad_norm": float(
                              np.linalg.norm(objective.grad(coef)))})
        return self._run_nonsmooth(objective, W0, gtol)

    def _run_nonsmooth(self, objective, W, gtol):
        best_W, best_f = W, objective.value(W)
        nu = 1.0
        n_it = 0
        if objective.sample_weight is not None:  # no chi2 smoothing of a weighted sample
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
        coef = objective.as_coef(best_W)
        return Result(coef=coef, value=float(objective.value(coef)), n_epochs=n_it, time=0.0,
                      message="continuation in nu + frozen-order polish")

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
