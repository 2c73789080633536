"""``riskopt warmup``: compile (and cache on disk) the numba kernels a user's first fits need.

The kernels are compiled at their first call and cached (``NUMBA_CACHE_DIR``, else next to
the package); a cold cache costs seconds on the first fit. :func:`warmup` fits the estimators'
default paths on small synthetic data -- ``RiskRegressor()`` (CVaR 0.1: Newton and its
crossover), ``RiskRegressor(risk="mean")``, ``RiskRegressor(risk=CVaR(0.1, shift_cost=1))``
(a shifted spectrum), ``RiskClassifier()`` (ESRM 1), ``RiskClassifier(risk="mean")``, a
3-class ``RiskClassifier`` (multinomial: L-BFGS) and the oracle on tied losses, the list of
:func:`_default_fits` --, the risks that ``riskopt fit --risk`` documents (:data:`CLI_RISKS`)
for a regression and a classification target as the command line fits them
(:func:`_cli_fits`), and, for each bench spec named, its solvers once (the runner's own
warm-up). ``make warmup`` runs it; ``make demo`` calls it first.

The command line's fits run on real tables: categorical columns (one-hot) and integer columns
make tied losses, which take other oracle paths (``oracle_ties``, the gathered PAV of
``oracle_fused``) than continuous data. :func:`_cli_fits` therefore fits each risk on three
small designs: continuous, mixed (an integer column and categories: many ties) and
categories only (few distinct losses). ``tests/test_first_minutes.py`` checks (slow) that
after a warmup in an empty cache these command-line fits compile nothing.
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


#: the ``--risk`` values of ``riskopt fit --help``: each spectral family plain and with a
#: chi-square or KL shift cost, and the KL-constrained DRO (with its default and a zero
#: lambda_0)
CLI_RISKS = tuple(f"{r}{c}" for r in ("cvar:0.2", "esrm:2", "extremile:2", "mean", "maxloss")
                  for c in ("", ",chi2=0.5", ",kl=0.5")) + ("kl:0.5", "kl:0.5,lam0=0")


def _cli_designs(n=1000):
    """Three small tables as ``riskopt fit`` preprocesses them (standardised, one-hot): a
    continuous one, a mixed one (an integer column and categories) and a categorical one;
    each with a regression and a 0/1 target."""
    import numpy as np

    rng = np.random.default_rng(1)

    def onehot(k):
        return np.eye(k)[rng.integers(0, k, size=n)][:, 1:]

    def standard(a):
        return (a - a.mean(0)) / np.where(a.std(0) > 0, a.std(0), 1.0)

    cont = rng.normal(size=(n, 4))
    mixed = np.column_stack([standard(rng.integers(18, 70, size=(n, 1)).astype(float)),
                             standard(rng.poisson(2.0, size=(n, 1)).astype(float)),
                             onehot(3), onehot(4)])
    cat = np.column_stack([onehot(3), onehot(2), onehot(4)])
    out = []
    for name, X in (("continuous", cont), ("mixed", mixed), ("categorical", cat)):
        z = X @ rng.normal(size=X.shape[1])
        y = z + rng.normal(size=n)
        out.append((name, X, y if name == "continuous" else np.round(y),  # integer targets
                    (z + rng.logistic(size=n) > 0).astype(int)))
    return out


def _cli_fits():
    """One fit per (risk of :data:`CLI_RISKS`, target, design of :func:`_cli_designs`) with the
    command line's settings (its defaults: ``l2_reg=1e-4``, ``max_iter=1000``, ``tol=1e-4``,
    ``random_state=0``, the estimator's solver), and the objective's value and gradient at the
    fitted point (``riskopt fit``'s certificate line)."""
    import numpy as np

    from .estimators import RiskClassifier, RiskRegressor, _build_objective
    from .risks import parse_risk

    designs = _cli_designs()
    for spec in CLI_RISKS:
        risk = parse_risk(spec)
        for cls, loss in ((RiskRegressor, "squared"), (RiskClassifier, "logistic")):
            for _, X, y, yc in designs:
                est = cls(risk=risk, l2_reg=1e-4, max_iter=1000, tol=1e-4, random_state=0)
                target = y if cls is RiskRegressor else yc
                est.fit(X, target)
                obj = _build_objective(est.risk_, loss, X, np.asarray(target, dtype=np.float64),
                                       1e-4, True, None)
                with np.errstate(all="ignore"):
                    obj.value_grad(obj.zeros())


def _tied_oracle():
    """The oracle calls of a default fit whose losses tie (a first fit on continuous losses
    skips them: ``oracles._tied_or_none``, ``oracles._gathered``): 300 losses, 200 values;
    and the sort of nearly equal losses."""
    import numpy as np

    from ._kernels import oracles as ko

    losses = np.repeat(np.arange(200.0), [2] * 100 + [1] * 100)
    sigma = np.full(300, 1.0 / 300)
    for nu in (0.0, 1e-2):
        ko.risk_weights_sorted(losses, sigma, nu, ko.CHI2, np.empty(300))
    # losses a few ulps apart, the larger first: one sort key, so the sort's fix-up of such
    # runs (sort_keys._fix_runs), which a table's near-equal losses reach (a default
    # RiskClassifier on compas)
    near = np.ones(300)
    near[::2] = np.nextafter(1.0, 2.0)
    ko.sorted_order(near)


def warmup(specs=(), log=print, cli=True):
    """Compile the default paths' kernels, those of ``riskopt fit``'s documented risks
    (``cli``) and those of the bench ``specs``; returns the number of kernel compilations
    (0: everything was cached already)."""
    from . import _runtime
    from . import _kernels  # noqa: F401  (installs the compile listener)

    start, t0 = _runtime.compiled_count(), time.perf_counter()
    for label, fit in _default_fits():
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tiny data: degenerate-model notes are expected
            fit()
        log(f"  {label}: {time.perf_counter() - t:.2f} s")
    if cli:
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _cli_fits()
        log(f"  riskopt fit's {len(CLI_RISKS)} documented risks, regression and classification "
            f"targets: {time.perf_counter() - t:.2f} s")
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
