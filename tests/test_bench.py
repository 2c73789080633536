"""riskopt.bench: spec validation, the step-size selection rule, the runner (resume), figures."""
import json
import math
import os

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")
pytest.importorskip("joblib")

import riskopt as ro  # noqa: E402
import riskopt.bench as rb  # noqa: E402
from riskopt.bench.spec import SpecError, l2_value, parse_l2_reg, spec_from_dict  # noqa: E402

PREFERRED = ["prospect", "lsvrg", "saddlesaga", "sgd", "srda", "sorel", "sgd_momentum", "adam",
             "prospect_moreau", "sorel_minibatch"]


def _usable_solvers(k=2):
    """Up to k registered stochastic solvers that run the yacht problem used below."""
    X, y = ro.datasets.load("yacht").X_train[:40], ro.datasets.load("yacht").y_train[:40]
    found = []
    names = [s for s in PREFERRED if s in ro.solvers.available()]
    names += [s for s in ro.solvers.available() if s not in names and s not in ("lbfgs", "newton")]
    for name in names:
        for nu in (0.5, 0.0):
            obj = ro.Objective("squared", ro.CVaR(0.5, shift_cost=nu), X, y, l2_reg=1 / 40)
            solver = ro.solvers.get(name, lr=0.01)
            try:
                solver._check_params(obj)
                solver._check_objective(obj)
            except ValueError:
                continue
            found.append((name, nu))
            break
    # keep solvers that share a shift cost with the first one
    found = [f for f in found if f[1] == found[0][1]] if found else []
    return found[:k]


SOLVERS = _usable_solvers()
needs_solver = pytest.mark.skipif(not SOLVERS, reason="no stochastic solver is registered yet")


def _tiny_spec(name="tiny", passes=3, seeds=(0, 1), lrs=(0.01, 1e4)):
    nu = SOLVERS[0][1]
    return {
        "name": name, "description": "tiny end-to-end test", "datasets": ["yacht"],
        "seeds": list(seeds), "passes": passes, "lr": list(lrs), "shift_cost": nu,
        "objectives": ["cvar:0.5"], "solvers": [s for s, _ in SOLVERS],
        "plot": {"x": ["passes"]},
    }


# ---------------------------------------------------------------------------- spec
def test_spec_from_toml_round_trip(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("""
name = "demo"
datasets = ["yacht", "energy"]
n_seeds = 2
passes = 8
passes_by_dataset = { energy = 4 }
lr = [0.001, 0.01]
shift_cost = 0.5
l2_reg = "1/(10n)"
objectives = ["cvar:0.5", { risk = "extremile:2", shift_cost = 0.0, label = "ext-plain" }]

[[solvers]]
name = "sgd"
params = { batch_size = 32 }
grid = { momentum = [0.5] }

[[solvers]]
name = "prospect"
lr = [0.1]
label = "P"
""")
    spec = rb.load_spec(path, check_registry=False)
    assert spec.seeds == [0, 1] and spec.budget("yacht") == 8 and spec.budget("energy") == 4
    assert spec.objectives[0].shift_cost == 0.5 and spec.objectives[1].shift_cost == 0.0
    assert spec.objective_labels() == ["cvar:0.5", "ext-plain"]
    assert spec.solvers[0].configs() == [
        {"lr": 0.001, "batch_size": 32, "momentum": 0.5},
        {"lr": 0.01, "batch_size": 32, "momentum": 0.5}]
    assert spec.solvers[1].display == "P" and spec.solvers[1].lr == (0.1,)
    assert l2_value(spec.objectives[0].l2_reg, 200) == pytest.approx(1 / 2000)
    assert spec.source.startswith("\nname")
    assert json.loads(json.dumps(spec.to_dict()))["name"] == "demo"


@pytest.mark.parametrize("value, n, expected", [
    (0.25, 10, 0.25), ("1/n", 50, 0.02), ("0.5/n", 10, 0.05), ("1/(10n)", 10, 0.01),
    ("1 / (100 n)", 10, 0.001), ("1/(100*n)", 10, 0.001), (0, 5, 0.0)])
def test_l2_reg_forms(value, n, expected):
    assert l2_value(parse_l2_reg(value), n) == pytest.approx(expected)


def _base():
    return {"name": "bad", "datasets": ["yacht"], "objectives": ["cvar:0.5"],
            "solvers": ["sgd"], "lr": [0.01], "seeds": [0]}


@pytest.mark.parametrize("patch, key", [
    ({"datasets": ["yacht", "nope"]}, "datasets[1]"),
    ({"objectives": ["cvar:0.5", "varr:2"]}, "objectives[1].risk"),
    ({"objectives": ["cvar:1.5"]}, "objectives[0].risk"),
    ({"objectives": [{"risk": "cvar:0.5", "loss": "hinge2"}]}, "objectives[0].loss"),
    ({"shift_cost": -1.0}, "objectives[0].shift_cost"),
    ({"divergence": "tv"}, "objectives[0].divergence"),
    ({"l2_reg": "1/m"}, "objectives[0].l2_reg"),
    ({"solvers": ["sgd", "nosuch"]}, "solvers[1].name"),
    ({"solvers": ["lbfgs"]}, "solvers[0].name"),
    ({"lr": [0.1, 0.0]}, "solvers[0].lr[1]"),
    ({"lr": [0.1, -3]}, "solvers[0].lr[1]"),
    ({"lr": ["fast"]}, "solvers[0].lr[0]"),
    ({"lr": [0.1, float("nan")]}, "solvers[0].lr[1]"),
    ({"lr": []}, "solvers[0].lr"),
    ({"lr": [0.1, 0.1]}, "solvers[0].lr"),
    ({"solvers": [{"name": "sgd", "params": {"batchsize": 3}}]}, "solvers[0].params.batchsize"),
    ({"solvers": [{"name": "sgd", "params": {"lr": 3}}]}, "solvers[0].params.lr"),
    ({"solvers": [{"name": "sgd", "grid": {"batch_size": []}}]}, "solvers[0].grid.batch_size"),
    ({"solvers": [{"name": "sgd", "lrs": [1]}]}, "solvers[0].lrs"),
    ({"solvers": ["sgd", "sgd"]}, "solvers"),
    ({"seeds": [0, -1]}, "seeds[1]"),
    ({"seeds": [1, 1]}, "seeds"),
    ({"passes": 0}, "passes"),
    ({"passes_by_dataset": {"power": 3}}, "passes_by_dataset.power"),
    ({"n_seeds": 2}, "n_seeds"),
    ({"jobs": 0}, "jobs"),
    ({"plot": {"x": ["epochs"]}}, "plot.x[0]"),
    ({"passses": 3}, "passses"),
    ({"name": "a b"}, "name"),
])
def test_bad_specs_name_the_offending_key(patch, key):
    if "sgd" not in ro.solvers.available():
        pytest.skip("the bad-spec table uses the sgd solver, not registered yet")
    data = {**_base(), **patch}
    with pytest.raises(SpecError) as info:
        spec_from_dict(data)
    assert info.value.key == key
    assert str(info.value).startswith(key + ":")


def test_missing_required_keys():
    for req in ("name", "datasets", "objectives", "solvers"):
        data = _base()
        del data[req]
        with pytest.raises(SpecError, match=f"^{req}: is required"):
            spec_from_dict(data, check_registry=False)


def test_invalid_toml_and_unknown_spec(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\ndatasets = [\n")
    with pytest.raises(SpecError, match="invalid TOML"):
        rb.load_spec(bad)
    with pytest.raises(FileNotFoundError, match="no bundled spec"):
        rb.load_spec("no_such_spec_name")


def test_bundled_specs_are_valid():
    specs = rb.bundled_specs()
    assert {"quick", "sorel_fig2", "sorel_fig5", "prospect_fig3", "prospect_fig8_hard",
            "prospect_fig9_low_shift", "prospect_fig10_no_shift", "prospect_fig11_l2_small",
            "prospect_fig12_l2_tiny", "prospect_fig14_walltime",
            "prospect_fig15_momentum"} <= set(specs)
    available = set(ro.solvers.available())
    for name in specs:
        spec = rb.load_spec(name, check_registry=False)
        assert spec.name == name and spec.description
        for i, s in enumerate(spec.solvers):  # parameter names against the solvers present
            if s.name in available:
                s.validate(f"solvers[{i}]", check_registry=True)
    fig8 = rb.load_spec("prospect_fig8_hard", check_registry=False)
    assert [o.risk for o in fig8.objectives] == ["cvar:0.25", "extremile:2.5", "esrm:2"]
    fig2 = rb.load_spec("sorel_fig2", check_registry=False)
    assert all(o.shift_cost == 0 for o in fig2.objectives)
    assert "cvar:0.5" in [o.risk for o in fig2.objectives]  # SOREL alpha = 0.5 -> tail 0.5
    fig3 = rb.load_spec("prospect_fig3", check_registry=False)
    assert fig3.budget("kin8nm") == 32 and fig3.budget("yacht") == 64
    assert all(o.shift_cost == 0.5 for o in fig3.objectives)


# ---------------------------------------------------------------------------- selection
def _synthetic(runs):
    """Long table from {(solver, lr, seed): (values per pass, diverged, passes per update)}."""
    rows = []
    for (solver, lr, seed), (values, diverged, ppu) in runs.items():
        for u, v in enumerate(values):
            rows.append(dict(dataset="d", objective="o", solver=solver, config=f"lr={lr:g}",
                             lr=lr, params="{}", seed=seed, update=u, passes=u * ppu,
                             value=v, diverged=diverged))
    return pd.DataFrame(rows)


def test_selection_uses_mean_of_last_ten_passes_averaged_over_seeds():
    n = 30  # passes 0..29: the window is passes 20..29 (> 29 - 10)
    flat = np.r_[np.full(n - 1, 2.0), 0.5]          # best final value, bad last-ten mean
    steady = np.full(n, 1.0)                        # mean 1.0 over the last ten
    runs = {
        ("s", 0.1, 0): (flat, False, 1.0), ("s", 0.1, 1): (flat, False, 1.0),
        ("s", 0.01, 0): (steady, False, 1.0), ("s", 0.01, 1): (steady + 0.2, False, 1.0),
        # the best seed-0 score, but seed 1 is worse: the average decides
        ("s", 0.03, 0): (np.full(n, 0.5), False, 1.0), ("s", 0.03, 1): (np.full(n, 1.8),
                                                                      False, 1.0),
    }
    sel = rb.select(_synthetic(runs), last_passes=10)
    scores = dict(zip(sel["lr"], sel["score"]))
    assert scores[0.1] == pytest.approx((9 * 2.0 + 0.5) / 10)
    assert scores[0.01] == pytest.approx(1.1)
    assert scores[0.03] == pytest.approx(1.15)
    assert sel.loc[sel["selected"], "lr"].tolist() == [0.01]


def test_selection_discards_settings_that_diverge_for_any_seed():
    n = 12
    runs = {
        ("s", 1.0, 0): (np.full(n, 0.1), False, 1.0),
        ("s", 1.0, 1): (np.r_[1.0, 5.0, np.nan], True, 1.0),   # one seed diverged
        ("s", 0.1, 0): (np.full(n, 0.9), False, 1.0), ("s", 0.1, 1): (np.full(n, 0.9),
                                                                    False, 1.0),
        ("t", 1.0, 0): (np.r_[1.0, 9.0], True, 1.0), ("t", 1.0, 1): (np.r_[1.0, 9.0], True,
                                                                    1.0),
    }
    sel = rb.select(_synthetic(runs))
    s = sel[sel["solver"] == "s"].set_index("lr")
    assert not s.loc[1.0, "eligible"] and s.loc[1.0, "n_diverged"] == 1
    assert s.loc[0.1, "selected"] and not s.loc[1.0, "selected"]
    t = sel[sel["solver"] == "t"]
    assert not t["selected"].any() and not t["eligible"].any()  # nothing left to select
    marked = rb.mark_selected(_synthetic(runs), sel)
    assert set(marked.loc[marked["selected"], "config"]) == {"lr=0.1"}
    assert set(marked.loc[marked["selected"], "solver"]) == {"s"}


def test_selection_window_is_in_passes_and_requires_every_seed():
    # two passes per update: the last ten passes are the last five records
    vals = np.r_[np.full(10, 3.0), np.full(5, 1.0)]   # records at passes 0, 2, ..., 28
    runs = {("s", 0.1, 0): (vals, False, 2.0), ("s", 0.1, 1): (vals, False, 2.0),
            ("s", 0.3, 0): (np.full(15, 0.5), False, 2.0)}  # seed 1 missing
    sel = rb.select(_synthetic(runs), seeds=[0, 1]).set_index("lr")
    assert sel.loc[0.1, "score"] == pytest.approx(1.0)
    assert not sel.loc[0.3, "eligible"] and sel.loc[0.1, "selected"]


# ---------------------------------------------------------------------------- runner
EXPECTED_COLUMNS = {
    "spec": "object", "dataset": "object", "dataset_label": "object", "objective": "object",
    "family": "object", "risk": "object",
    "loss": "object", "shift_cost": "float64", "divergence": "object", "l2_reg": "float64",
    "solver": "object", "solver_name": "object", "config": "object", "lr": "float64",
    "params": "object", "seed": "int64", "budget": "int64", "update": "int64",
    "step": "float64", "passes": "float64", "time": "float64", "value": "float64",
    "suboptimality": "float64",
    "f_star": "float64", "f_star_ref": "float64", "diverged": "bool", "selected": "bool"}


def _kind(dtype):
    return "object" if pd.api.types.is_string_dtype(dtype) else str(dtype)


@needs_solver
def test_run_end_to_end_resume_and_plot(tmp_path):
    spec = spec_from_dict(_tiny_spec())
    out = tmp_path / "res"
    n_total = len(rb.enumerate_cells(spec))
    assert n_total == len(SOLVERS) * 2 * 2

    # interrupted: stop after 3 runs
    first = rb.run(spec, out=out, jobs=1, progress=False, max_cells=3)
    assert not first.complete and first.n_run == 3 and first.table is None
    cells = sorted((out / "cells").glob("*.parquet"))
    assert len(cells) == 3 and (out / "fstar.json").exists()
    stamps = {p.name: os.stat(p).st_mtime_ns for p in cells}

    # resumed with the same call: only the missing runs run
    res = rb.run(spec, out=out, jobs=1, progress=False)
    assert res.complete and res.n_reused == 3 and res.n_run == n_total - 3
    for p in cells:
        assert os.stat(p).st_mtime_ns == stamps[p.name]
    assert len(list((out / "cells").glob("*.parquet"))) == n_total

    table = pd.read_parquet(res.table)
    assert {c: _kind(t) for c, t in table.dtypes.items()} == EXPECTED_COLUMNS
    assert set(table["dataset"]) == {"yacht"} and set(table["seed"]) == {0, 1}
    runs = table.groupby(["solver", "config", "seed"])
    assert runs.ngroups == n_total
    ok = table[~table["diverged"]].groupby(["solver", "config", "seed"])
    assert (ok["passes"].max() >= 3 - 1e-9).all()  # the budget is reached unless diverged
    assert (runs["update"].min() == 0).all()
    np.testing.assert_allclose(table.loc[table["update"] == 0, "suboptimality"], 1.0)
    # lr = 1e4 diverges for every solver; lr = 0.01 does not, and is selected
    assert table.loc[table["lr"] == 1e4, "diverged"].all()
    assert not table.loc[table["lr"] == 0.01, "diverged"].any()
    assert set(table.loc[table["selected"], "lr"]) == {0.01}
    assert table.loc[table["selected"], "solver"].nunique() == len(SOLVERS)
    sel = pd.read_parquet(res.selection)
    assert sel["selected"].sum() == len(SOLVERS)

    meta = json.loads(res.metadata.read_text())
    assert meta["spec"]["name"] == "tiny" and meta["versions"]["numpy"]
    assert meta["cpu"]["logical_cpus"] >= 1 and meta["run"]["cells_reused"] == 3
    fstar = json.loads((out / "fstar.json").read_text())
    (rec,) = fstar.values()
    ref = ro.solvers.LBFGS().run(ro.Objective(
        "squared", ro.CVaR(0.5, shift_cost=SOLVERS[0][1]), ro.datasets.load("yacht").X_train,
        ro.datasets.load("yacht").y_train, l2_reg=1 / 244)).value
    assert rec["f_star"] == pytest.approx(ref, rel=1e-12)
    assert math.isclose(table["f_star"].iloc[0], ref, rel_tol=1e-12)
    assert (table["f_star"] == table["f_star_ref"]).all() and set(table["family"]) == {"spectral"}
    np.testing.assert_allclose(table["step"], table["passes"] * 244)

    # by default one small palette PNG per figure and no PDF (a PDF only on request)
    assert [p.name for p in res.figures] == ["figure.png"] and not (out / "figure.pdf").exists()
    assert 1000 < (out / "figure.png").stat().st_size <= rb._io.PNG_LIMIT

    # delete two finished runs and the table (their record): a rerun redoes exactly those
    # two (with the table, they are restored from it: tests/test_bench_record.py)
    victims = cells[:2]
    for p in victims:
        p.unlink()
    os.replace(res.table, tmp_path / "kept.parquet")
    again = rb.run(spec, out=out, jobs=1, progress=False, plot=False)
    assert again.complete and again.n_run == 2 and again.n_reused == n_total - 2
    table2 = pd.read_parquet(again.table)
    pd.testing.assert_frame_equal(
        table.drop(columns="time").sort_values(["solver", "config", "seed", "update"])
        .reset_index(drop=True),
        table2.drop(columns="time").sort_values(["solver", "config", "seed", "update"])
        .reset_index(drop=True))

    # figures come from the table only (no solver runs): redraw both axes elsewhere
    figs = rb.plot_results(out, out_dir=tmp_path / "figs", x=["passes", "time"],
                           formats=["png", "pdf"])
    assert [p.name for p in figs] == ["figure.png", "figure.pdf", "figure_time.png",
                                      "figure_time.pdf"]
    assert (tmp_path / "figs" / "figure.pdf").read_bytes().startswith(b"%PDF")
    assert all(p.stat().st_size > 1000 for p in figs)


@pytest.mark.skipif("sgd" not in ro.solvers.available(), reason="sgd not registered yet")
def test_bad_parameter_value_is_caught_before_running(tmp_path):
    data = {**_base(), "solvers": [{"name": "sgd", "params": {"batch_size": 0}}]}
    with pytest.raises(SpecError, match=r"^solvers\[0\]: sgd with lr=0.01,batch_size=0: .*batch_size"):
        rb.run(spec_from_dict(data), out=tmp_path, jobs=1, progress=False)
    assert not list(tmp_path.glob("cells/*"))


@pytest.mark.skipif("sorel" not in ro.solvers.available(), reason="sorel not registered yet")
def test_solver_that_rejects_the_objective_is_named(tmp_path):
    data = {**_base(), "solvers": ["sorel"], "shift_cost": 0.5}  # SOREL needs nu = 0
    with pytest.raises(SpecError, match=r"^solvers\[0\]: sorel cannot run objectives\[0\] "
                                        r"\(cvar:0.5\) on yacht"):
        rb.run(spec_from_dict(data), out=tmp_path, jobs=1, progress=False)
    assert not list(tmp_path.glob("cells/*"))


def test_import_riskopt_stays_light():
    import subprocess
    import sys

    code = ("import sys, riskopt, riskopt.cli; "
            "bad = [m for m in ('pandas', 'matplotlib', 'rich', 'joblib', 'pyarrow') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_plots_come_from_the_table_alone(tmp_path, monkeypatch):
    """A synthetic table (no solver involved): more panels than MAX_PANELS -> the big figure
    plus one per objective; non-positive suboptimality is drawn at the floor."""
    from riskopt.bench import figures

    monkeypatch.setattr(figures, "MAX_PANELS", 4)
    rng = np.random.default_rng(0)
    rows = []
    for ds in ["a", "b"]:
        for obj in ["cvar:0.5", "extremile:2", "esrm:1"]:
            for solver, chosen in [("fast", 0.1), ("slow", 0.01)]:
                for lr in (0.1, 0.01):
                    for seed in range(3):
                        sub = np.geomspace(1, 1e-9 if solver == "fast" else 1e-3, 9)
                        sub = sub * rng.uniform(0.5, 2, size=9)
                        sub[-1] = -1e-12 if solver == "fast" else sub[-1]
                        for u in range(9):
                            rows.append(dict(spec="synthetic", dataset=ds, objective=obj,
                                             solver=solver, config=f"lr={lr:g}", lr=lr,
                                             seed=seed, update=u, passes=2.0 * u,
                                             time=0.01 * u * (1 + seed), value=1 + sub[u],
                                             suboptimality=sub[u], diverged=False,
                                             selected=lr == chosen))
    table = pd.DataFrame(rows)
    table.to_parquet(tmp_path / "results.parquet")
    paths = rb.plot_results(tmp_path, x=["passes"], formats=["png"])
    assert [p.name for p in paths] == ["figure.png", "figure_cvar_0.5.png",
                                       "figure_extremile_2.png", "figure_esrm_1.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    with pytest.raises(ValueError, match="x must be"):
        rb.plot_results(tmp_path, x=["epochs"])
    table["selected"] = False
    table.to_parquet(tmp_path / "results.parquet")
    with pytest.raises(ValueError, match="no selected configuration"):
        rb.plot_results(tmp_path, x=["passes"], formats=["png"])


def test_benchmark_script_helpers(tmp_path, capsys):
    """The helpers the benchmark scripts share: integer options, the results pair and the
    provenance of ``metadata.json``."""
    import argparse

    from riskopt.bench._io import write_results
    from riskopt.bench._meta import int_options, script_metadata

    ap = int_options(argparse.ArgumentParser(), sizes=[10, 100], steps_old=40)
    args = ap.parse_args(["--sizes", "5", "7", "--steps-old", "3"])
    assert (args.sizes, args.steps_old) == ([5, 7], 3)
    with pytest.raises(SystemExit):
        ap.parse_args(["--steps-old", "x"])
    capsys.readouterr()
    out = write_results(tmp_path / "a" / "b", {"rows": [1.5]}, ["# title", "", "| x |"])
    assert json.loads((out / "results.json").read_text()) == {"rows": [1.5]}
    assert (out / "results.md").read_text() == "# title\n\n| x |\n"
    assert capsys.readouterr().out == "# title\n\n| x |\n"
    write_results(tmp_path / "c", None, ["only"])
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["results.md"]
    meta = script_metadata("benchmarks/x.py", 12.345, sizes=[10], note="n")
    assert list(meta) == ["script", "git_commit", "machine", "cpus", "date", "sizes", "note",
                          "wall_seconds"]
    assert meta["script"] == "benchmarks/x.py" and meta["wall_seconds"] == 12.3


def test_write_results_json_before_markdown(tmp_path, capsys):
    """The measured data are on disk before the Markdown is formatted: a Markdown step that
    raises leaves ``results.json`` (and no ``results.md``)."""
    from riskopt.bench._io import write_results

    def broken():
        raise KeyError("a formatting bug")

    with pytest.raises(KeyError, match="formatting"):
        write_results(tmp_path / "x", {"rows": [2.5]}, broken)
    assert json.loads((tmp_path / "x" / "results.json").read_text()) == {"rows": [2.5]}
    assert not (tmp_path / "x" / "results.md").exists()
    write_results(tmp_path / "y", {"rows": []}, lambda: ["# ok"])   # the callable's lines
    assert (tmp_path / "y" / "results.md").read_text() == "# ok\n"
    assert capsys.readouterr().out == "# ok\n"


def _ddp_comm_timings(ddp):
    """A fake ``out`` of ``torch_ddp_comm``'s ranks for the rows ``ddp.ROWS[:1]``."""
    def ex(t):
        return {"calls": 1.0, "bytes": 64.0, "gather_s": 1e-4, "time": t, "median": t,
                "cpu": t, "walls": [t, t], "cpus": [t, t], "skew_s": 1e-5, "coll_s": 2e-5}
    name = ddp.ROWS[0]
    return {"sgd": ex(1e-3), "bare": ex(1e-4), "sgd/solo": ex(5e-4), "floor/gather": ex(2e-3),
            f"{name}/local": ex(3e-3), f"{name}/exact": ex(4e-3), f"{name}/solo": ex(2e-3),
            f"{name}/overlap": ex(3.5e-3)}


def test_torch_ddp_comm_keeps_json_when_markdown_fails(tmp_path, monkeypatch, capsys):
    """``benchmarks/torch_ddp_comm.py`` writes ``results.json`` before it formats the
    Markdown: with the Markdown step patched to raise, the JSON (rows and the overlap pairs)
    is still there; unpatched, both files are written from the same timings."""
    import argparse

    from conftest import load_benchmark

    ddp = load_benchmark("torch_ddp_comm")
    args = argparse.Namespace(batch=8, steps=2, repeats=2, hidden=4, d=3, rows=ddp.ROWS[:1])
    out = _ddp_comm_timings(ddp)

    def broken(*a, **k):
        raise ValueError("a formatting bug")

    monkeypatch.setattr(ddp, "markdown", broken)
    with pytest.raises(ValueError, match="formatting"):
        ddp.write_report(args, tmp_path / "a", out)
    got = json.loads((tmp_path / "a" / "results.json").read_text())
    name = ddp.ROWS[0]   # SGD, the bare gather, one floor, the row and its overlapped twin
    assert len(got["rows"]) == 5 and got["rows"][0]["optimizer"] == "SGD (plain DDP)"
    assert got["rows"][3]["optimizer"] == name
    assert got["rows"][3]["ratio_exact_to_local"] == pytest.approx(4 / 3)
    assert got["overlap"][0]["wall_ratio_per_block"] == [pytest.approx(3.5 / 4)] * 2
    assert not (tmp_path / "a" / "results.md").exists()
    monkeypatch.undo()
    ddp.write_report(args, tmp_path / "b", out)
    assert json.loads((tmp_path / "b" / "results.json").read_text())["rows"] == got["rows"]
    assert "| SGD (plain DDP) |" in (tmp_path / "b" / "results.md").read_text()
    capsys.readouterr()
