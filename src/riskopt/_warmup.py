"""``riskopt warmup``: compile (and cache on disk) the numba kernels a user's first fits need.

The kernels are compiled at their first call and cached (``NUMBA_CACHE_DIR``, else next to
the package); a cold cache costs seconds on the first fit. :func:`warmup` fits the estimators'
default paths on small synthetic data -- ``RiskRegressor()`` (CVaR 0.1: Newton and its
crossover), ``RiskRegressor(risk="mean")``, ``RiskRegressor(risk=CVaR(0.1, shift_cost=1))``
(a shifted spectrum), ``RiskClassifier()`` (ESRM 1), ``RiskClassifier(risk="mean")``, a
3-class ``RiskClassifier`` (multinomial: L-BFGS) and the oracle on tied losses, the list of
:func:`_default_fits` -- and,
for each bench spec named, its solvers once (the runner's own warm-up). ``make warmup`` runs
it; ``make demo`` calls it first.
"""
import time
import warnings


def _default_fits():
    import numpy as np

    from . import risks
    from .estimators import RiskClassifier, RiskRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    z = X @ np.array([1.0, -0.5, 0.25, 0.0])
    y = z + rng.normal(size=300)
    yc = (z + rng.normal(size=300) > 0).astype(int)
    y3 = np.digitize(z, [-0.5, 0.5])
    return [
        ("RiskRegressor()", lambda: RiskRegressor().fit(X, y)),
        ("RiskRegressor(risk='mean')", lambda: RiskRegressor(risk="mean").fit(X, y)),
        ("RiskRegressor(risk=CVaR(0.1, shift_cost=1))",
         lambda: RiskRegressor(risk=risks.CVaR(0.1, shift_cost=1.0)).fit(X, y)),
        ("RiskClassifier()", lambda: RiskClassifier().fit(X, yc)),
        ("RiskClassifier(risk='mean')", lambda: RiskClassifier(risk="mean").fit(X, yc)),
        ("RiskClassifier() on 3 classes", lambda: RiskClassifier().fit(X, y3)),
        ("the oracle on tied losses", _tied_oracle),
    ]


def _tied_oracle():
    """The oracle calls of a default fit whose losses tie (a first fit on continuous losses
    skips them: ``oracles._tied_or_none``, ``oracles._gathered``): 300 losses, 200 values."""
    import numpy as np

    from ._kernels import oracles as ko

    losses = np.repeat(np.arange(200.0), [2] * 100 + [1] * 100)
    sigma = np.full(300, 1.0 / 300)
    for nu in (0.0, 1e-2):
        ko.risk_weights_sorted(losses, sigma, nu, ko.CHI2, np.empty(300))


def warmup(specs=(), log=print):
    """Compile the default paths' kernels (and those of the bench ``specs``); returns the number
    of kernel compilations (0: everything was cached already)."""
    from . import _runtime
    from . import _kernels  # noqa: F401  (installs the compile listener)

    start, t0 = _runtime.compiled_count(), time.perf_counter()
    for label, fit in _default_fits():
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tiny data: degenerate-model notes are expected
            fit()
        log(f"  {label}: {time.perf_counter() - t:.2f} s")
    for name in specs:
        from .bench.runner import _warm_up_parent
        from .bench.spec import load_spec

        t = time.perf_counter()
        spec = load_spec(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _warm_up_parent(spec)
        log(f"  spec {spec.name}: {time.perf_counter() - t:.2f} s")
    n = _runtime.compiled_count() - start
    total = time.perf_counter() - t0
    if n:
        log(f"compiled {n} kernels in {total:.1f} s (cached on disk: later runs start fast)")
    else:
        log(f"nothing to compile (already cached; {total:.1f} s)")
    return n
