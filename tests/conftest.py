"""Shared helpers for the test suite: small random problems.

Kept minimal on purpose; other test modules may import from here
(``from conftest import make_problem``; ``tests/`` is on ``sys.path`` under pytest's default
import mode because it has no ``__init__.py``).
"""
import numpy as np
import pytest

import riskopt as ro

#: the four losses of the core and a default number of classes for the multinomial one
LOSSES = ("squared", "absolute", "logistic", "multinomial")
N_CLASSES = 3


def make_targets(loss, X, rng, n_classes=N_CLASSES):
    """Targets in the natural encoding of ``loss`` for the design ``X`` (noisy linear model)."""
    n, d = X.shape
    signal = X @ rng.normal(size=d)
    if loss in ("squared", "absolute"):
        return signal + 0.5 * rng.normal(size=n)
    if loss == "logistic":
        y = (signal + rng.normal(size=n) > 0).astype(np.float64)
        y[:2] = (0.0, 1.0)  # both classes present
        return y
    if loss == "multinomial":
        y = rng.integers(0, n_classes, size=n).astype(np.float64)
        y[:n_classes] = np.arange(n_classes)  # every class present
        return y
    raise ValueError(f"unknown loss {loss!r}")


def make_problem(loss="squared", risk=None, n=20, d=3, fit_intercept=False, l2_reg=0.1, seed=0):
    """A small random :class:`riskopt.Objective` (standard normal design, noisy linear targets)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = make_targets(loss, X, rng)
    risk = ro.CVaR(0.5) if risk is None else risk
    return ro.Objective(loss, risk, X, y, l2_reg=l2_reg, fit_intercept=fit_intercept)


def heavy_tail_data(loss, n, d, seed):
    """``(X, y)``: a standard normal design and the targets of a random linear model, with
    t(3) noise (scale 0.3) for the squared / absolute losses, logistic labels, or 3 classes
    drawn uniformly (the solvers' step-by-step twin tests)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    if loss in ("squared", "absolute"):
        y = X @ w + 0.3 * rng.standard_t(3, size=n)
    elif loss == "logistic":
        y = (X @ w + rng.normal(size=n) > 0).astype(float)
    else:
        y = rng.integers(0, 3, size=n).astype(float)
    return X, y


def steps_match_twin(solver, obj, state, twin, indices, check):
    """The solver one index per update and its NumPy ``twin`` (``twin.step(i)``) in lockstep,
    ``check(state, twin, obj)`` at the start and after every step; returns the last state."""
    check(state, twin, obj)
    for i in indices:
        state = solver.update(obj, state, indices=[i])
        twin.step(i)
        check(state, twin, obj)
    return state


def passes_match_twin(solver, obj, state, twin, check, passes=2):
    """``passes`` updates on the solver's own draws, the twin stepping through the same
    indices, ``check(state, twin, obj)`` after each; returns the last state and the draws."""
    draws = []
    for _ in range(passes):
        idx = solver.draw_indices(obj, state)
        state = solver.update(obj, state, indices=idx)
        for i in idx:
            twin.step(i)
        check(state, twin, obj)
        draws.append(idx)
    return state, draws


def random_coef(obj, rng, scale=0.5):
    """A random coefficient in the objective's public shape."""
    return scale * rng.normal(size=obj.coef_shape)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


# ------------------------------------------------------------------------ plug-in fixtures
PLUGINS_DIR = __import__("pathlib").Path(__file__).resolve().parent / "plugins"


def _install_dist(root, dist, entry_points):
    """Write a minimal ``<dist>-0.1.dist-info`` (METADATA + entry_points.txt) under ``root``."""
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    return info


class _Installed:
    def __init__(self, site, pythonpath):
        self.site = site                  # the folder holding the .dist-info
        self.pythonpath = pythonpath      # what a subprocess needs on PYTHONPATH


def _plugin_fixture(tmp_path_factory, dist, entry_points, solver_names, modules):
    import importlib
    import sys

    from riskopt.solvers import _registry

    site = tmp_path_factory.mktemp(dist)
    _install_dist(site, dist, entry_points)
    added = [str(site), str(PLUGINS_DIR)]
    sys.path[:0] = added
    importlib.invalidate_caches()
    try:
        yield _Installed(site, added)
    finally:
        for p in added:
            if p in sys.path:
                sys.path.remove(p)
        for name in solver_names:
            _registry._REGISTRY.pop(name, None)
        for mod in modules:
            sys.modules.pop(mod, None)
        importlib.invalidate_caches()
        _registry._state["entry_points"] = False  # the next lookup rescans, without the plug-in


@pytest.fixture(scope="module")
def toy_plugin(tmp_path_factory):
    """Install the toy third-party package ``tests/plugins/riskopt_toy`` for the module: a
    ``riskopt_toy-0.1.dist-info`` declaring ``toy_sgd = riskopt_toy:ToySGD`` in the
    ``riskopt.solvers`` entry-point group, on ``sys.path`` with the package folder; then
    :func:`riskopt.solvers.reload_entry_points`. Removed (registry entry included) afterwards."""
    import riskopt.solvers

    gen = _plugin_fixture(tmp_path_factory, "riskopt_toy",
                          "[riskopt.solvers]\ntoy_sgd = riskopt_toy:ToySGD\n",
                          ["toy_sgd"], ["riskopt_toy"])
    installed = next(gen)
    riskopt.solvers.reload_entry_points()
    yield installed
    next(gen, None)


@pytest.fixture
def broken_plugin(tmp_path_factory):
    """A plug-in whose entry point cannot be imported (``ImportError`` on load); not yet
    scanned: the test calls :func:`riskopt.solvers.reload_entry_points` itself."""
    gen = _plugin_fixture(tmp_path_factory, "riskopt_broken",
                          "[riskopt.solvers]\nbroken = riskopt_broken_missing_module:Nope\n",
                          ["broken"], ["riskopt_broken_missing_module"])
    yield next(gen)
    next(gen, None)


def require_data(*names):
    """Skip the calling test when a data set (or the base of a view such as
    ``law_school/fold1of5``) is not in the data folder (``$RISKOPT_DATA``): a clone without
    ``../shared/data`` skips these tests instead of failing them."""
    for name in names:
        try:
            ro.datasets.load(name.split("/")[0])
        except ro.datasets.MissingDataError as exc:
            pytest.skip(str(exc))


def load_benchmark(name):
    """The module of the script ``benchmarks/<name>.py`` (benchmarks are scripts, not a
    package): for tests of a benchmark's own functions."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
