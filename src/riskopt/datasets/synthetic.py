"""Synthetic problems, all seeded by ``random_state`` (``numpy.random.default_rng``).

- :func:`make_splplus`: the SPL+ paper's Section 6.1 problems (Tables 1-2): ``d = 10``, inputs
  uniform on the unit sphere, squared / absolute regression or logistic classification, noise
  Normal / Gumbel / LogNormal.
- :func:`make_heavy_tailed_regression`: linear regression with heavy-tailed noise (and optionally
  heavy-tailed inputs), where tail risks and ERM differ most.
- :func:`make_group_shift`: a majority and minority groups with their own input means and
  coefficients, a skewed training mixture and a (default balanced) test mixture; ``groups`` hold
  the group index, for worst-group and fairness evaluations.

Rows are drawn for train and test together from one generator, then cut: the first
``n_samples`` rows are the training set.
"""
from __future__ import annotations

import numpy as np

from .regression import Dataset

SPLPLUS_LOSSES = ("squared", "absolute", "logistic")
SPLPLUS_NOISES = ("normal", "gumbel", "lognormal")


def _sphere(rng, n, d):
    g = rng.standard_normal((n, d))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _noise(rng, kind, n):
    # SPL+ Table 1: Normal(mu=0, sigma=2), Gumbel(mu=0, beta=4), LogNormal(mu=2, sigma=1)
    if kind == "normal":
        return rng.normal(0.0, 2.0, n)
    if kind == "gumbel":
        return rng.gumbel(0.0, 4.0, n)
    if kind == "lognormal":
        return rng.lognormal(2.0, 1.0, n)
    raise ValueError(f"noise must be one of {SPLPLUS_NOISES}, got {kind!r}")


def _check_n(n_samples, n_test):
    if int(n_samples) < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    if int(n_test) < 0:
        raise ValueError(f"n_test must be >= 0, got {n_test}")
    return int(n_samples), int(n_test)


def _sigmoid(t):
    return 0.5 * (1.0 + np.tanh(0.5 * t))


def make_splplus(loss="squared", noise="normal", n_samples=10_000, n_test=0, n_features=10,
                 random_state=None):
    """A synthetic problem of the SPL+ paper (Meng & Gower), Section 6.1, Tables 1-2.

    - inputs ``x`` uniform on the unit sphere of R^d (``d = n_features = 10`` in the paper),
      drawn as normalised Gaussians;
    - ``theta_gen ~ U([0, 1]^d)`` for regression, ``U([0, 10]^d)`` for classification;
    - noise ``zeta``: ``"normal"`` N(0, sigma=2), ``"gumbel"`` Gumbel(0, beta=4),
      ``"lognormal"`` LogNormal(mu=2, sigma=1) (not centred, as in the paper);
    - ``loss="squared"`` or ``"absolute"``: ``y = x . theta_gen + zeta`` (task "regression");
      ``loss="logistic"``: ``y = 1`` with probability ``sigmoid(x . theta_gen + zeta)``, else 0
      (the paper writes -1; riskopt's logistic loss takes {0, 1}) (task "binary").

    The paper approximates the population CVaR with ``N = 10^6`` draws; pass ``n_samples`` as
    needed. ``info`` holds ``coef`` (theta_gen), ``loss``, ``noise`` and the draw parameters.

    Examples
    --------
    >>> import numpy as np
    >>> from riskopt.datasets import make_splplus
    >>> data = make_splplus("logistic", "gumbel", n_samples=1000, random_state=0)
    >>> data.X_train.shape, np.unique(data.y_train).tolist()
    ((1000, 10), [0.0, 1.0])
    """
    if loss not in SPLPLUS_LOSSES:
        raise ValueError(f"loss must be one of {SPLPLUS_LOSSES}, got {loss!r}")
    if noise not in SPLPLUS_NOISES:
        raise ValueError(f"noise must be one of {SPLPLUS_NOISES}, got {noise!r}")
    n_samples, n_test = _check_n(n_samples, n_test)
    rng = np.random.default_rng(random_state)
    n, d = n_samples + n_test, int(n_features)
    classification = loss == "logistic"
    theta = rng.uniform(0.0, 10.0 if classification else 1.0, d)
    X = _sphere(rng, n, d)
    zeta = _noise(rng, noise, n)
    t = X @ theta + zeta
    if classification:
        y = (rng.uniform(size=n) < _sigmoid(t)).astype(np.float64)
    else:
        y = t
    name = f"splplus_{loss}_{noise}"
    return Dataset(
        name, "binary" if classification else "regression",
        np.ascontiguousarray(X[:n_samples]), y[:n_samples].copy(),
        np.ascontiguousarray(X[n_samples:]), y[n_samples:].copy(),
        [f"x{j}" for j in range(d)], None, None,
        {"loss": loss, "noise": noise, "coef": theta, "random_state": random_state,
         **({"n_classes": 2} if classification else {}),
         "reference": "SPL+ (Meng & Gower) Sec. 6.1, Tables 1-2"})


def make_heavy_tailed_regression(n_samples=1000, n_test=0, n_features=10, noise="student_t",
                                 df=2.5, noise_scale=1.0, heavy_features=False, random_state=None):
    """Linear regression ``y = X w + noise`` with heavy-tailed noise.

    ``w ~ N(0, I / d)``; ``X`` standard normal rows (``heavy_features=True``: Student-t rows with
    ``df`` degrees of freedom per coordinate). ``noise``: ``"student_t"`` (``df`` degrees of
    freedom; infinite variance for ``df <= 2``), ``"pareto"`` (symmetrised Lomax with shape ``df``)
    or ``"lognormal"`` (``exp(N(0, 1))`` centred at its median, one-sided tail); all multiplied by
    ``noise_scale``. ``info`` holds ``coef`` and ``noise``; task "regression".

    Examples
    --------
    >>> from riskopt.datasets import make_heavy_tailed_regression
    >>> data = make_heavy_tailed_regression(500, n_test=100, df=2.0, random_state=0)
    >>> data.X_train.shape, data.X_test.shape
    ((500, 10), (100, 10))
    """
    n_samples, n_test = _check_n(n_samples, n_test)
    if df <= 0:
        raise ValueError(f"df must be > 0, got {df}")
    rng = np.random.default_rng(random_state)
    n, d = n_samples + n_test, int(n_features)
    w = rng.standard_normal(d) / np.sqrt(d)
    X = rng.standard_t(df, (n, d)) if heavy_features else rng.standard_normal((n, d))
    if noise == "student_t":
        eps = rng.standard_t(df, n)
    elif noise == "pareto":
        eps = rng.pareto(df, n) * rng.choice((-1.0, 1.0), n)
    elif noise == "lognormal":
        eps = rng.lognormal(0.0, 1.0, n) - 1.0
    else:
        raise ValueError(f"noise must be 'student_t', 'pareto' or 'lognormal', got {noise!r}")
    y = X @ w + noise_scale * eps
    return Dataset(
        "heavy_tailed_regression", "regression", np.ascontiguousarray(X[:n_samples]),
        y[:n_samples].copy(), np.ascontiguousarray(X[n_samples:]), y[n_samples:].copy(),
        [f"x{j}" for j in range(d)], None, None,
        {"coef": w, "noise": noise, "df": df, "noise_scale": noise_scale,
         "heavy_features": heavy_features, "random_state": random_state})


def make_group_shift(task="regression", n_samples=2000, n_test=1000, n_features=10,
                     proportions=(0.9, 0.1), test_proportions=None, mean_shift=2.0,
                     coef_shift=1.0, noise_scale=0.5, random_state=None):
    """Groups with their own input distribution and coefficients; shifted group mixtures.

    Group ``g`` (``0`` is the majority) has input mean ``mu_g = mean_shift * u_g`` (``u_g`` a
    random unit vector, ``mu_0 = 0``) and coefficients ``w_g = w_0 + coef_shift * v_g``
    (``w_0, v_g ~ N(0, I / d)``, ``v_0 = 0``); ``x ~ N(mu_g, I)``. ``task="regression"``:
    ``y = x . w_g + noise_scale * N(0, 1)``; ``task="binary"``: ``y = 1`` with probability
    ``sigmoid(x . w_g)`` (``noise_scale`` unused). Training rows draw their group from
    ``proportions`` (default 90 / 10), test rows from ``test_proportions`` (default uniform), so
    ERM fits the majority and the minority group's error shows the shift. ``groups_train`` /
    ``groups_test`` = ``{"group": int array}``; ``info`` holds ``coefs`` (n_groups, d) and
    ``means``.

    Examples
    --------
    >>> from riskopt.datasets import make_group_shift
    >>> data = make_group_shift("binary", n_samples=1000, random_state=0)
    >>> data.groups["group"].shape
    (1000,)
    """
    if task not in ("regression", "binary"):
        raise ValueError(f"task must be 'regression' or 'binary', got {task!r}")
    n_samples, n_test = _check_n(n_samples, n_test)
    p_train = np.asarray(proportions, dtype=np.float64)
    k = p_train.size
    p_test = np.full(k, 1.0 / k) if test_proportions is None else \
        np.asarray(test_proportions, dtype=np.float64)
    for nm, p in (("proportions", p_train), ("test_proportions", p_test)):
        if p.size != k or k < 1 or np.any(p < 0) or not np.isclose(p.sum(), 1.0):
            raise ValueError(f"{nm} must be {k} non-negative numbers summing to 1, got {p}")
    rng = np.random.default_rng(random_state)
    d = int(n_features)
    w0 = rng.standard_normal(d) / np.sqrt(d)
    V = rng.standard_normal((k, d)) / np.sqrt(d)
    V[0] = 0.0
    U = _sphere(rng, k, d)
    U[0] = 0.0
    coefs = w0 + coef_shift * V
    means = mean_shift * U
    g = np.concatenate([rng.choice(k, n_samples, p=p_train), rng.choice(k, n_test, p=p_test)])
    X = means[g] + rng.standard_normal((g.size, d))
    t = np.einsum("ij,ij->i", X, coefs[g])
    if task == "regression":
        y = t + noise_scale * rng.standard_normal(g.size)
    else:
        y = (rng.uniform(size=g.size) < _sigmoid(t)).astype(np.float64)
    tr, te = slice(0, n_samples), slice(n_samples, None)
    return Dataset(
        f"group_shift_{task}", task, np.ascontiguousarray(X[tr]), y[tr].copy(),
        np.ascontiguousarray(X[te]), y[te].copy(), [f"x{j}" for j in range(d)],
        {"group": g[tr].copy()}, {"group": g[te].copy()},
        {"coefs": coefs, "means": means, "proportions": p_train, "test_proportions": p_test,
         "random_state": random_state, **({"n_classes": 2} if task == "binary" else {})})


SYNTHETIC = {
    **{f"splplus_{loss}_{noise}": (make_splplus, {"loss": loss, "noise": noise})
       for loss in SPLPLUS_LOSSES for noise in SPLPLUS_NOISES},
    "heavy_tailed_regression": (make_heavy_tailed_regression, {}),
    "group_shift_regression": (make_group_shift, {"task": "regression"}),
    "group_shift_binary": (make_group_shift, {"task": "binary"}),
}


def load_synthetic(name, **kwargs):
    fn, fixed = SYNTHETIC[name]
    clash = set(fixed) & set(kwargs)
    if clash:
        raise TypeError(f"{name} fixes {sorted(clash)}; call {fn.__name__} to change them")
    return fn(**fixed, **kwargs)
