r"""The protocol every problem family implements.

A *problem family* is a class of training objectives with its own maths (spectral risks with a
shift penalty, CVaR in the Rockafellar-Uryasev form, KL-constrained DRO, coupled compositional
problems, ...). Each family is one module of :mod:`riskopt.objectives` holding one subclass of
:class:`ObjectiveBase`, and declares itself with the class attribute ``family`` (``"spectral"``,
``"ru_cvar"``, ...). Solvers declare the families they solve (``Solver.families``), and the
registry (:func:`riskopt.solvers.solvers_for`) answers which solvers fit an objective. Solvers,
callbacks (:class:`riskopt.Trace`), the reference optimum, the benchmark runner and the tests
only use what is below, so they never ask which family they hold.

Decision variable
-----------------
``x = (coef, aux)``: the model coefficients ``coef`` (public shape ``coef_shape``: ``(p,)`` or
``(p, K)``; kernels use the ``(p, K)`` matrix of :meth:`as_matrix`) and ``n_aux`` auxiliary
scalars named by ``aux_names`` (the RU threshold ``alpha``, KL-DRO's ``lambda``, a group-DRO
threshold, ...; none for the spectral family). :meth:`pack` / :meth:`unpack` convert to and from
one flat vector ``[coef.ravel(), aux]``.

Values and (sub)gradients
-------------------------
``value(coef, aux=None)``, ``grad(coef, aux=None)`` (``subgradient`` is the same method: it
returns a subgradient where the objective is not differentiable) and ``value_grad``.
With ``aux`` given they are those of ``F(coef, aux)`` and ``grad`` returns the pair
``(g_coef, g_aux)``. With ``aux=None`` they are those of the *profile*
``P(coef) = min_aux F(coef, aux)`` (for families without auxiliary variables, ``F`` itself) and
``grad`` returns ``g_coef`` alone, in the shape of ``coef``. The profile is what traces,
suboptimality plots, the estimators and L-BFGS see, so every family is compared on the same
footing (for RU-CVaR the profile is exactly the CVaR of the losses plus the l2 term).

Data
----
``n_samples`` (also ``n``), ``losses(coef)`` (the ``(n,)`` per-sample losses),
``losses_derivs(coef)`` (and the derivatives w.r.t. the predictions, ``(n, K)``), ``X``,
``y``, ``reg`` (per-row l2 strength, 0 on the intercept row) for the linear families.

Reference optimum
-----------------
``reference_solution(method="auto", **options) -> Reference``: the minimiser every
suboptimality is measured against. Each family documents its methods in
``reference_methods`` (``"auto"`` picks the first): L-BFGS where the problem is smooth (or made
so exactly, e.g. the spectral family's continuation in the shift cost), exact LP / QP / cvxpy
where it is not.

Adding a family: see ``docs/extending.rst`` ("Adding a problem family").
"""
from dataclasses import dataclass, field

import numpy as np

from .._validation import check_array, check_positive, design_matrix
from ..losses import get_loss


def shifted_copy(objective, shift_cost, divergence_code=None):
    """A shallow copy of ``objective`` with the shift cost ``nu = shift_cost`` (and the
    divergence code ``div`` when given): the same data, nothing copied (the ``with_shift``
    of the spectral and group-risk objectives)."""
    import copy

    other = copy.copy(objective)
    other.nu = float(shift_cost)
    if divergence_code is not None:
        other.div = divergence_code
    return other


@dataclass
class Reference:
    """A reference minimiser: ``coef``, auxiliary variables ``aux`` (a tuple, possibly empty),
    ``value = F(coef, aux)`` (the profile value when ``aux`` is empty), the ``method`` used,
    iterations ``n_iter``, the method's ``message`` and ``hit_limit`` (an iteration limit was
    reached: the point may be inexact)."""

    coef: np.ndarray
    value: float
    method: str
    aux: tuple = ()
    n_iter: int = 0
    message: str = ""
    hit_limit: bool = False
    extra: dict = field(default_factory=dict)


class ObjectiveBase:
    """Base class of the problem families (see the module docstring for the protocol)."""

    #: Name of the family (solvers list the families they solve).
    family = None
    #: Names of the auxiliary scalars packed after the coefficients.
    aux_names = ()
    #: Methods of :meth:`reference_solution`; ``"auto"`` is the first.
    reference_methods = ("lbfgs",)
    #: The family's own parameters with their defaults (beyond ``loss``, ``X``, ``y``,
    #: ``l2_reg``, ``fit_intercept``): the keys a benchmark spec's objective table may set.
    spec_params = {}

    @classmethod
    def from_params(cls, loss, X, y, *, l2_reg=0.0, fit_intercept=False, **params):
        """Build the objective from the common arguments and the family's ``spec_params``
        (how the benchmark runner builds objectives of any registered family)."""
        return cls(loss, X, y, l2_reg=l2_reg, fit_intercept=fit_intercept, **params)

    # ------------------------------------------------------------------ protocol
    @property
    def n_samples(self):
        return self.n

    @property
    def n_aux(self):
        return len(self.aux_names)

    def losses(self, coef):
        raise NotImplementedError

    def value(self, coef, aux=None):
        raise NotImplementedError

    def value_grad(self, coef, aux=None):
        raise NotImplementedError

    def grad(self, coef, aux=None):
        """Gradient (a subgradient where not differentiable); see the module docstring."""
        return self.value_grad(coef, aux)[1]

    subgradient = grad

    def reference_solution(self, method="auto", **options):
        raise NotImplementedError

    def _check_method(self, method):
        if method == "auto":
            return self.reference_methods[0]
        if method not in self.reference_methods:
            raise ValueError(f"method must be 'auto' or one of {list(self.reference_methods)} "
                             f"for the {self.family} family, got {method!r}")
        return method

    # ------------------------------------------------------------------ packing
    def pack(self, coef, aux=None):
        """One flat vector ``[coef.ravel(), aux]``."""
        aux = np.zeros(0) if aux is None else np.atleast_1d(np.asarray(aux, dtype=np.float64))
        if aux.size != self.n_aux:
            raise ValueError(f"{self.family} objectives have {self.n_aux} auxiliary variable(s) "
                             f"{list(self.aux_names)}, got {aux.size}")
        return np.concatenate([self.as_matrix(coef).ravel(), aux])

    def unpack(self, x):
        """``(coef, aux)`` of a flat vector made by :meth:`pack`."""
        x = np.asarray(x, dtype=np.float64)
        size = self.p * self.K
        if x.shape != (size + self.n_aux,):
            raise ValueError(f"expected a vector of {size + self.n_aux} entries, got {x.shape}")
        return self.as_coef(x[:size]), tuple(float(a) for a in x[size:])

    def __repr__(self):
        return f"{type(self).__name__}(family={self.family!r}, n={self.n})"


class LinearModelObjective(ObjectiveBase):
    """Shared data handling of the families on a linear model ``z_i = x_i^T W``.

    Validates ``X``/``y``, encodes the targets for the loss, appends the intercept column and
    sets ``n, p, K, reg, coef_shape``; provides the shape helpers and the per-sample losses.
    """

    #: a scipy.sparse ``X`` is kept as a CSR design (O(nnz)) when True (the families whose
    #: full-batch code is written with ``X @ W`` / ``X.T @ G`` only); else densified with a
    #: :class:`riskopt.SparseDensifyWarning`
    _keeps_sparse = False
    #: an operator design (``riskopt._design.LinearDesign``, the estimators' ``[(X - m)/s, 1]``
    #: over the caller's X, no copy) is accepted when True (full-batch code written with
    #: ``X @ W``, ``X.T @ G`` and a few rows ``X[rows]``); None: as ``_keeps_sparse``
    _keeps_operator = None

    def _init_data(self, loss, X, y, l2_reg, fit_intercept):
        from .._kernels import losses as _kl

        self._kl = _kl
        self.loss = get_loss(loss)
        if not isinstance(fit_intercept, (bool, np.bool_)):
            raise ValueError(f"fit_intercept must be True or False, got {fit_intercept!r}")
        self.fit_intercept = bool(fit_intercept)
        # one allocation for the design (float32 converted while copied, the intercept column
        # filled in place): the peak memory of a fit is about one float64 design beyond X
        X = design_matrix(X, self.fit_intercept, keep_sparse=self._keeps_sparse,
                          who=type(self).__name__, keep_operator=self._keeps_operator)
        y = check_array("y", y, ndim=1)
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"X and y have mismatched numbers of rows: {X.shape[0]} != "
                             f"{y.shape[0]}")
        self.l2_reg = check_positive("l2_reg", l2_reg, allow_zero=True)
        y = np.ascontiguousarray(self.loss.prepare_targets(y), dtype=np.float64)
        # a read-only y (pandas 3's to_numpy of a float64 column is a read-only view) is
        # another numba type: every kernel that takes y would compile again for it
        self.y = y if y.flags.writeable else y.copy()
        self.n_features = X.shape[1] - self.fit_intercept
        self.X = X
        self.n, self.p = self.X.shape
        self.K = self.loss.n_outputs(self.y)
        self.reg = np.full(self.p, self.l2_reg)
        if self.fit_intercept:
            self.reg[-1] = 0.0
        self.coef_shape = (self.p,) if self.K == 1 else (self.p, self.K)

    # ------------------------------------------------------------------ shapes
    def as_matrix(self, w):
        """The coefficient as a C-contiguous ``(p, K)`` float64 matrix (validated)."""
        W = np.asarray(w, dtype=np.float64)
        if W.size != self.p * self.K:
            raise ValueError(f"coefficient has {W.size} entries, expected shape {self.coef_shape}")
        return np.ascontiguousarray(W.reshape(self.p, self.K))

    def as_coef(self, W):
        """The public coefficient shape of a ``(p, K)`` matrix."""
        return np.asarray(W).reshape(self.coef_shape).copy()

    def zeros(self):
        return np.zeros(self.coef_shape)

    # ------------------------------------------------------------------ losses
    def losses_derivs(self, w):
        """Per-sample losses ``(n,)`` and derivatives w.r.t. the predictions ``(n, K)``."""
        W = self.as_matrix(w)
        Z = np.ascontiguousarray(self.X @ W)
        losses = np.empty(self.n)
        derivs = np.empty((self.n, self.K))
        self._kl._losses_derivs_z(self.loss.code, self.y, Z, losses, derivs)
        return losses, derivs

    def losses(self, w):
        return self.losses_derivs(w)[0]

    def _reg_value(self, W):
        return 0.5 * float(np.sum(self.reg[:, None] * W * W))

    @property
    def sparse(self):
        """True when the design is scipy.sparse (a CSR matrix, or a ``LinearDesign`` over
        one): only the full-batch solvers take it."""
        if isinstance(self.X, np.ndarray):
            return False
        return bool(getattr(self.X, "sparse", True))

    def dense_design(self):
        """Make ``X`` a dense float64 array (the stochastic kernels read its rows): a
        ``LinearDesign`` over a dense ``X`` is materialised once; a sparse design raises."""
        if isinstance(self.X, np.ndarray):
            return self.X
        if self.sparse:
            raise ValueError("this objective's X is scipy.sparse: only 'lbfgs' solves it")
        self.X = self.X.materialize()
        return self.X

    def row_sq_norms(self):
        """``||x_i||^2`` of the design's rows (intercept column included)."""
        if hasattr(self.X, "row_sq_norms"):
            return self.X.row_sq_norms()
        if self.sparse:
            return np.asarray(self.X.multiply(self.X).sum(axis=1)).ravel()
        return np.einsum("ij,ij->i", self.X, self.X)

    def smoothness(self):
        """Per-sample smoothness bounds ``L_i`` of the losses (None for non-smooth losses)."""
        if not isinstance(self.X, np.ndarray):  # the bounds use the row norms only: O(nnz)
            return self.loss.smoothness(np.sqrt(self.row_sq_norms())[:, None])
        return self.loss.smoothness(self.X)
