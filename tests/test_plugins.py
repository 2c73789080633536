"""Third-party solvers through the ``riskopt.solvers`` entry-point group.

The toy package ``tests/plugins/riskopt_toy`` (one NumPy solver, ``toy_sgd``) is "installed" by
the ``toy_plugin`` fixture of ``conftest.py`` (a ``.dist-info`` with ``entry_points.txt`` on
``sys.path``); with no change to riskopt it must appear in the registry, run under the shared run
loop (it is also a row of ``test_solvers_common.py``'s table), fit through the estimators and run
in ``riskopt bench run`` in a fresh process. A broken plug-in only warns.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import riskopt as ro


def test_installing_and_removing_the_plugin_leaves_no_trace(tmp_path_factory):
    """Runs first in this module (before the module-scoped ``toy_plugin`` is set up): the
    fixture's install / teardown, driven by hand."""
    from conftest import _plugin_fixture

    before_path, before = list(sys.path), ro.solvers.available()
    assert "toy_sgd" not in before
    gen = _plugin_fixture(tmp_path_factory, "riskopt_toy",
                          "[riskopt.solvers]\ntoy_sgd = riskopt_toy:ToySGD\n",
                          ["toy_sgd"], ["riskopt_toy"])
    next(gen)
    assert "toy_sgd" not in ro.solvers.available()   # not scanned yet
    ro.solvers.reload_entry_points()
    assert "toy_sgd" in ro.solvers.available()
    next(gen, None)
    assert sys.path == before_path and "riskopt_toy" not in sys.modules
    assert ro.solvers.available() == before


def test_toy_solver_is_discovered(toy_plugin):
    import riskopt_toy

    assert "toy_sgd" in ro.solvers.available()
    assert "toy_sgd" in ro.solvers.available("spectral")
    assert "toy_sgd" not in ro.solvers.available("ru_cvar")
    assert ro.solvers.get_class("toy_sgd") is riskopt_toy.ToySGD
    solver = ro.solvers.get("toy_sgd", lr=0.05, random_state=1)
    assert isinstance(solver, ro.solvers.Solver) and solver.get_params() == {
        "lr": 0.05, "random_state": 1}


def test_toy_solver_is_listed_for_spectral_objectives(toy_plugin):
    from conftest import make_problem

    obj = make_problem("squared", ro.CVaR(0.5, shift_cost=0.5))
    assert "toy_sgd" in ro.solvers.solvers_for(obj)
    ru = ro.RUCVaRObjective("squared", obj.X, obj.y, beta=0.5)
    assert "toy_sgd" not in ro.solvers.solvers_for(ru)
    with pytest.raises(ro.solvers.IncompatibleObjectiveError, match="splplus"):
        ro.solvers.get("toy_sgd", lr=0.01).run(ru, max_epochs=1)


def test_toy_solver_runs_and_decreases_the_objective(toy_plugin):
    from conftest import make_problem

    obj = make_problem("squared", ro.CVaR(0.5, shift_cost=0.5), n=30)
    trace = ro.Trace()
    res = ro.solvers.get("toy_sgd", lr=0.02, random_state=0).run(obj, max_epochs=4,
                                                                 callback=trace)
    assert res.n_epochs == 4 and not res.diverged
    assert trace.values[-1] < trace.values[0]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_estimator_fits_with_the_toy_solver(toy_plugin):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=60)
    est = ro.RiskRegressor(solver="toy_sgd", lr=0.01, max_iter=20, random_state=0).fit(X, y)
    assert est.coef_.shape == (3,)
    assert np.all(np.isfinite(est.predict(X)))
    assert np.mean((est.predict(X) - y) ** 2) < np.var(y)


TINY_SPEC = """
name = "tiny_toy"
description = "the toy plug-in solver on yacht, 2 passes"
datasets = ["yacht"]
seeds = [0]
passes = 2
lr = [0.01]
loss = "squared"
shift_cost = 0.5
divergence = "chi2"
l2_reg = "1/n"
objectives = ["cvar:0.5"]

[[solvers]]
name = "toy_sgd"
"""


def test_bench_run_with_the_toy_solver_in_a_fresh_process(toy_plugin, tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY_SPEC)
    out = tmp_path / "out"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        toy_plugin.pythonpath + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    code = textwrap.dedent(f"""
        import sys
        from riskopt.cli import main
        sys.exit(main(["bench", "run", {str(spec)!r}, "--out", {str(out)!r}, "--jobs", "1"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = pd.read_parquet(out / "results.parquet")
    rows = table[table["solver"] == "toy_sgd"]
    assert len(rows) > 0, table["solver"].unique()
    assert set(table["solver"]) == {"toy_sgd"}


def test_a_broken_plugin_warns_and_does_not_break_riskopt(broken_plugin):
    with pytest.warns(RuntimeWarning, match="broken"):
        ro.solvers.reload_entry_points()
    assert "broken" not in ro.solvers.available()
    assert "prospect" in ro.solvers.available()
    ro.solvers.get("prospect")
