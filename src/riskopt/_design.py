"""The design ``[(X - m) / s, 1]`` of a linear model as an operator: no copy of ``X``.

The full-batch code of the spectral family only needs ``X' @ W`` and ``X'.T @ G`` (and a few
rows for the tie polish), so the estimators' L-BFGS path hands the objective a
:class:`LinearDesign` instead of building the float64 array ``[X', 1]``: the intercept column is
implicit, the standardisation ``X' = (X - m) / s`` is applied to the coefficients, and ``X``
stays the caller's array (dense float64 / float32, or CSR). The stochastic solvers' numba
kernels read rows of a dense design: :meth:`LinearDesign.materialize` builds it when one of
them is used (the objective swaps it in once; see
``riskopt.objectives.base.LinearModelObjective.dense_design``).

Accuracy: ``X' @ W = X @ (W / s) - (m / s) . W (+ b)`` loses about ``log10(max |m| / s)``
digits to cancellation, so the estimators centre implicitly only when ``|m| / s <= 1e3`` for
every column (``MAX_IMPLICIT_SHIFT``) and otherwise build the standardised copy.
"""
import numpy as np

#: largest ``|m_j| / s_j`` centred implicitly (3 digits lost at most)
MAX_IMPLICIT_SHIFT = 1e3
#: rows converted at once when ``X`` is not float64 (float32: no full float64 temporary)
BLOCK_ROWS = 8192


class LinearDesign:
    """``[(X - m) / s, 1]`` (the ones column when ``intercept``) as a linear operator.

    Parameters
    ----------
    X : ndarray (n, d) of float64 / float32, or scipy.sparse CSR
        Not copied and never written.
    intercept : bool
    shift, scale : arrays (d,), optional
        ``m`` and ``s`` (default 0 and 1).
    """

    _is_linear_design = True  # recognised by riskopt._validation.design_matrix
    dtype = np.dtype(np.float64)

    def __init__(self, X, intercept, shift=None, scale=None):
        n, d = X.shape
        self.base = X
        self.intercept = bool(intercept)
        self.shift = np.zeros(d) if shift is None else np.asarray(shift, dtype=np.float64)
        self.scale = np.ones(d) if scale is None else np.asarray(scale, dtype=np.float64)
        self.shape = (n, d + self.intercept)
        self.sparse = not isinstance(X, np.ndarray)
        self._blocked = not self.sparse and X.dtype != np.float64

    @property
    def n_features(self):
        return self.base.shape[1]

    def _x_times(self, V):
        """``X @ V`` in float64 (blocked for a float32 X)."""
        if not self._blocked:
            return np.asarray(self.base @ V)
        n = self.base.shape[0]
        out = np.empty((n, V.shape[1]))
        for a in range(0, n, BLOCK_ROWS):
            out[a:a + BLOCK_ROWS] = self.base[a:a + BLOCK_ROWS].astype(np.float64) @ V
        return out

    def _xt_times(self, G):
        """``X.T @ G`` in float64 (blocked for a float32 X)."""
        if not self._blocked:
            return np.asarray(self.base.T @ G)
        out = np.zeros((self.base.shape[1], G.shape[1]))
        for a in range(0, G.shape[0], BLOCK_ROWS):
            out += self.base[a:a + BLOCK_ROWS].astype(np.float64).T @ G[a:a + BLOCK_ROWS]
        return out

    def __matmul__(self, W):
        W = np.asarray(W, dtype=np.float64)
        vec = W.ndim == 1
        d = self.n_features
        if vec and not self._blocked:  # (the Newton solver's products: fewer small steps)
            v = W[:d] / self.scale
            z = np.asarray(self.base @ v, dtype=np.float64)
            c = (float(W[d]) if self.intercept else 0.0) - float(self.shift @ v)
            if c != 0.0:
                z += c
            return z
        W2 = W[:, None] if vec else W
        d = self.n_features
        V = W2[:d] / self.scale[:, None]
        Z = self._x_times(V)
        c = -(self.shift @ V)
        if self.intercept:
            c = c + W2[d]
        if np.any(c):
            Z += c
        return Z[:, 0] if vec else Z

    def rmatmul(self, G):
        """``design.T @ G`` for ``G`` of shape ``(n, K)`` or ``(n,)``."""
        G = np.asarray(G, dtype=np.float64)
        vec = G.ndim == 1
        G2 = G[:, None] if vec else G
        d = self.n_features
        out = np.empty((self.shape[1], G2.shape[1]))
        sums = G2.sum(axis=0)
        out[:d] = (self._xt_times(G2) - self.shift[:, None] * sums) / self.scale[:, None]
        if self.intercept:
            out[d] = sums
        return out[:, 0] if vec else out

    @property
    def T(self):
        return _Transposed(self)

    def __getitem__(self, rows):
        """Dense float64 rows of the design (a few rows: the tie polish)."""
        B = self.base[rows]
        B = np.atleast_2d(B.toarray() if hasattr(B, "toarray") else np.asarray(B, np.float64))
        out = (B - self.shift) / self.scale
        if self.intercept:
            out = np.hstack([out, np.ones((out.shape[0], 1))])
        return out[0] if np.ndim(rows) == 0 else out

    def row_sq_norms(self):
        """``||x'_i||^2`` per row (the smoothness bounds), O(nnz) / blocked."""
        n, d = self.base.shape
        out = np.empty(n)
        if self.sparse:
            A = self.base.tocsr()
            # ||(x - m)/s||^2 = sum_j (x_j^2 - 2 x_j m_j) / s_j^2 + sum_j m_j^2 / s_j^2
            inv2 = 1.0 / self.scale ** 2
            w = (A.data * A.data - 2.0 * A.data * self.shift[A.indices]) * inv2[A.indices]
            rows = np.repeat(np.arange(n), np.diff(A.indptr))
            out[:] = np.bincount(rows, weights=w, minlength=n)
            out += float(np.sum(self.shift ** 2 * inv2))
        else:
            for a in range(0, n, BLOCK_ROWS):
                B = (self.base[a:a + BLOCK_ROWS] - self.shift) / self.scale
                out[a:a + BLOCK_ROWS] = np.einsum("ij,ij->i", B, B)
        if self.intercept:
            out += 1.0
        return out

    def materialize(self):
        """The float64 C-contiguous array ``[(X - m) / s, 1]`` (one allocation)."""
        n, d = self.base.shape
        D = np.empty(self.shape)
        for a in range(0, n, BLOCK_ROWS):
            B = self.base[a:a + BLOCK_ROWS]
            D[a:a + BLOCK_ROWS, :d] = B.toarray() if hasattr(B, "toarray") else B
        D[:, :d] -= self.shift
        D[:, :d] /= self.scale
        if self.intercept:
            D[:, d] = 1.0
        return D


class _Transposed:
    def __init__(self, design):
        self._d = design
        self.shape = design.shape[::-1]

    def __matmul__(self, G):
        return self._d.rmatmul(G)
