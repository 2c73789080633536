"""The RU-CVaR (SGM / SPL / SPL+) experiments in the one benchmark schema: specs, data streams,
the value at averaged iterates, sensitivity tables, figures, CLI."""
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")
pytest.importorskip("joblib")

import pandas as pd  # noqa: E402

import riskopt as ro  # noqa: E402
from riskopt.callbacks import DivergenceWarning  # noqa: E402
import riskopt.bench as rb  # noqa: E402
from riskopt.bench import analysis, problems, runner  # noqa: E402
from riskopt.cli import main  # noqa: E402
from riskopt.objectives.ru_cvar import RUCVaRObjective, StreamingRUCVaRObjective, SyntheticSampler  # noqa
from riskopt.solvers.spl import SGM, SPL, SPLPlus  # noqa: E402

FIGURES = ["figure", "sensitivity", "fixed_accuracy"]
TABLE_COLUMNS = ["spec", "dataset", "dataset_label", "objective", "family", "risk", "loss",
                 "shift_cost", "divergence", "l2_reg", "solver", "solver_name", "config", "lr",
                 "params", "seed", "budget", "update", "step", "passes", "time", "value",
                 "suboptimality", "f_star", "f_star_ref", "diverged", "selected"]
METHODS = ["sgm", "spl", "splplus"]
PAPER_GRID = sorted([10.0 ** k for k in range(-6, 5)] + [10.0 ** e for e in (-1.5, -0.5, 0.5,
                                                                             1.5)])


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _ru(**kw):
    """A small RU-CVaR spec dict on one synthetic stream (patched by ``kw``)."""
    base = dict(name="t", family="ru_cvar", beta=0.95, l2_reg=0.0,
                objectives=[{"family": "ru_cvar"}],
                datasets=[{"name": "sq", "source": "synthetic", "loss": "squared",
                           "noise": "normal", "n_eval": 400}],
                steps=300, seeds=[0, 1], lr=[0.1, 1.0], init="random",
                record={"value": "iterate", "points": 5, "suboptimality": "absolute"},
                reference={"method": "lbfgs", "lower_to_best": True},
                selection={"rule": "final"},
                analyses=["convergence", "sensitivity", "fixed_accuracy"],
                analysis={"epsilon": 0.05, "epsilon_scale": "gap"},
                solvers=[{"name": m, "params": {"schedule": "decreasing"}} for m in METHODS])
    base.update(kw)
    return base


def _real(**kw):
    base = dict(datasets=[{"name": "yacht", "loss": "squared"}], steps=None, passes=3,
                record={"value": "iterate", "every": 1, "suboptimality": "absolute"})
    return _ru(**{**base, **kw})


def _clean(d):
    return {k: v for k, v in d.items() if v is not None}


# ---------------------------------------------------------------------------- spec
def test_bundled_specs_follow_the_paper():
    specs = rb.bundled_specs()
    assert {"splplus_synthetic", "splplus_synthetic_quick", "splplus_real",
            "splplus_real_quick"} <= set(specs)
    syn = rb.load_spec("splplus_synthetic")  # the one generic loader
    assert [o.family for o in syn.objectives] == ["ru_cvar"]
    assert syn.objectives[0].params["beta"] == 0.95 and syn.objectives[0].l2_reg == 0
    assert len(syn.datasets) == 9 and all(syn.dataset(d).streaming for d in syn.datasets)
    params = [syn.dataset(d).params for d in syn.datasets]
    assert {p["d"] for p in params} == {10} and {p["n_eval"] for p in params} == {1_000_000}
    assert {p["noise"] for p in params} == {"normal", "gumbel", "lognormal"}
    assert {syn.dataset(d).overrides["loss"] for d in syn.datasets} == {"absolute", "squared",
                                                                        "logistic"}
    assert syn.steps == 100_000 and syn.seeds == [0, 1, 2, 3, 4]
    assert [s.name for s in syn.solvers] == METHODS
    for s in syn.solvers:
        assert np.allclose(s.lr, PAPER_GRID) and s.params == {"schedule": "decreasing"}
    assert syn.init == "random" and syn.record.value == "iterate"
    assert syn.record.points == 30 and syn.reference["lower_to_best"]
    assert "1_000_000" in syn.source or "1000000" in syn.source  # N is stated in the file
    real = rb.load_spec("splplus_real", check_registry=False)
    assert real.passes == 200 and np.allclose(real.solvers[0].lr, PAPER_GRID)
    losses = {d: real.dataset(d).overrides["loss"] for d in real.datasets}
    assert losses["mushrooms"] == losses["a9a"] == "logistic"
    assert "squared" in losses.values()
    for name in ("splplus_synthetic_quick", "splplus_real_quick"):
        q = rb.load_spec(name, check_registry=False)
        assert len(q.seeds) == 2 and q.description
    for i, s in enumerate(syn.solvers):  # registered solvers; schedule is a valid parameter
        s.validate(f"solvers[{i}]", check_registry=True)


@pytest.mark.parametrize("patch, key", [
    ({"objectives": [{"family": "both"}]}, "objectives[0].family"),
    ({"solvers": ["sgm", "nosuch"]}, "solvers[1].name"),
    ({"lr": [0.1, -1.0]}, "solvers[0].lr[1]"),
    ({"datasets": [{"name": "s", "source": "synthetic", "loss": "hinge2"}]}, "datasets[0].loss"),
    ({"datasets": [{"name": "s", "source": "synthetic", "noise": "cauchy"}]},
     "datasets[0].noise"),
    ({"datasets": [{"name": "s", "source": "river"}]}, "datasets[0].source"),
    ({"beta": 1.0}, "objectives[0].beta"),
    ({"steps": 0}, "steps"),
    ({"steps": None}, "steps"),          # a stream needs a budget in steps
    ({"analysis": {"epsilon_scale": "median"}}, "analysis.epsilon_scale"),
    ({"analysis": {"tolerance": 1.0}}, "analysis.tolerance"),
    ({"colour": "red"}, "colour"),
    ({"plot": {"x": "epochs"}}, "plot.x[0]"),
    ({"record": {"value": "last"}}, "record.value"),
    ({"init": "gaussian"}, "init"),
    ({"selection": {"rule": "best"}}, "selection.rule"),
    ({"objectives": [{"family": "ru_cvar", "risk": "cvar:0.5"}]}, "objectives[0].risk"),
    ({"objectives": [{"family": "spectral", "beta": 0.9, "risk": "cvar:0.5"}]},
     "objectives[0].beta"),
])
def test_bad_specs_name_the_key(patch, key):
    with pytest.raises(rb.SpecError) as info:
        rb.spec_from_dict(_clean(_ru(**patch)))
    assert info.value.key == key


def test_bad_real_specs_name_the_key():
    for datasets, key in [([{"name": "yacht", "loss": "hinge2"}], "datasets[0].loss"),
                          ([{"name": "nope", "loss": "squared"}], "datasets[0]"),
                          ([{"name": "yacht", "loss": "squared", "x": 1}], "datasets[0].x"),
                          ([{"loss": "squared"}], "datasets[0].name")]:
        with pytest.raises(rb.SpecError) as info:
            rb.spec_from_dict(_clean(_real(datasets=datasets)))
        assert info.value.key == key
    with pytest.raises(rb.SpecError) as info:  # a stream parameter on a data set
        rb.spec_from_dict(_clean(_real(datasets=[{"name": "yacht", "n_eval": 10}])))
    assert info.value.key == "datasets[0].n_eval"


def test_spec_dict_round_trip():
    spec = rb.spec_from_dict(_clean(_ru()))
    again = rb.spec_from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.to_dict() == spec.to_dict() and again.digest() == spec.digest()
    real = rb.spec_from_dict(_clean(_real()))
    assert rb.spec_from_dict(real.to_dict()).to_dict() == real.to_dict()


def test_record_steps():
    s = runner.record_steps(100_000, 30)
    assert s[0] == 0 and s[1] == 10 and s[-1] == 100_000 and np.all(np.diff(s) > 0)
    assert len(s) == 31
    assert runner.record_passes(7, 3).tolist() == [0, 3, 6, 7]


# ---------------------------------------------------------------------------- evaluation
@pytest.mark.parametrize("loss", ["squared", "absolute", "logistic"])
@pytest.mark.parametrize("fit_intercept, l2", [(False, 0.0), (True, 0.3)])
def test_value_many_equals_objective_value(loss, fit_intercept, l2):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    y = (rng.random(300) < 0.4).astype(float) if loss == "logistic" else rng.normal(size=300)
    obj = RUCVaRObjective(loss, X, y, 0.9, l2_reg=l2, fit_intercept=fit_intercept)
    for scale in (0.01, 1.0, 40.0):  # 40: logistic far in its linear regime (skip branch)
        C = rng.normal(size=(6, obj.p)) * scale
        A = rng.normal(size=6) * scale
        A[0] = obj.value_at_risk(C[0])
        got = obj.value_many(C, A)
        ref = np.array([obj.value(c, a) for c, a in zip(C, A)])
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(problems.evaluate(obj, C, A[:, None]), ref, rtol=1e-12,
                                   atol=1e-12)
    C[1, 0] = np.nan
    A[2] = np.inf
    got = obj.value_many(C, A)
    assert got[1] == np.inf and got[2] == np.inf and np.isfinite(got[3])


def test_initial_point_is_per_seed_and_shared():
    obj = RUCVaRObjective("squared", np.eye(5), np.ones(5), 0.5)
    rand = {"coef": "normal", "aux": "uniform"}
    t0, a0 = problems.initial_point(rand, obj, 3)
    t1, a1 = problems.initial_point(rand, obj, 3)
    t2, _ = problems.initial_point(rand, obj, 4)
    assert np.array_equal(t0, t1) and a0 == a1 and not np.array_equal(t0, t2)
    assert set(a0) == {"alpha0"} and 0.0 <= a0["alpha0"] < 1.0
    tz, az = problems.initial_point({"coef": "zeros", "aux": "uniform"}, obj, 3)
    assert tz is None and az == a0  # the solver's zeros, the same alpha0
    assert problems.initial_point({"coef": "zeros", "aux": "default"}, obj, 3) == (None, {})


# ---------------------------------------------------------------------------- runs
def _task(spec, method, lr, seed):
    c = next(c for c in rb.enumerate_cells(spec) if c.config["lr"] == lr and c.seed == seed
             and spec.solvers[c.solver_index].name == method)
    return {"id": c.id, "problem": spec.problem_description(c.dataset, 0), "solver": method,
            "config": c.config, "seed": seed, "passes": c.passes,
            "record": {"value": "iterate", "every": spec.record.every,
                       "points": spec.record.points}, "init": spec.init_table(),
            "f_star": 0.0}


def test_real_cell_matches_the_solver_run():
    """Each recorded value is F(theta_bar, alpha_bar) of the solver run for that many passes
    from the seed's (theta0, alpha0), with SPL+'s l0 the initial mean training loss."""
    spec = rb.spec_from_dict(_clean(_real(seeds=[2], lr=[0.3])))
    obj = problems.build(spec.problem_description("yacht", 0)).objective
    theta0, aux0 = problems.initial_point(spec.init_table(), obj, 2)
    for method, cls in (("sgm", SGM), ("spl", SPL), ("splplus", SPLPlus)):
        _, frame, err = runner._run_cell(_task(spec, method, 0.3, 2))
        assert err is None
        assert frame["step"].tolist() == [0, obj.n, 2 * obj.n, 3 * obj.n]
        assert frame["passes"].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert frame["value"].iloc[0] == pytest.approx(obj.value(theta0, aux0["alpha0"]),
                                                       rel=1e-12)
        for k in (1, 3):
            with warnings.catch_warnings():  # SGM at lr 0.3 blows up (F 25.6 -> 2e82)
                warnings.simplefilter("ignore", DivergenceWarning)
                res = cls(lr=0.3, random_state=2).run(obj, max_epochs=k, coef0=theta0, **aux0)
            assert frame["value"].iloc[k] == pytest.approx(res.value, rel=1e-10)
        if method == "splplus":
            state = cls(lr=0.3).init_state(obj, coef0=theta0, **aux0)
            assert state.loss_scale == pytest.approx(float(np.mean(obj.losses(theta0))))


def test_synthetic_cell_streams_and_scales_by_the_evaluation_sample():
    spec = rb.spec_from_dict(_clean(_ru(steps=200, record={"value": "iterate", "points": 4})))
    prob = problems.build(spec.problem_description("sq", 0))
    obj, sampler = prob.objective, prob.sampler
    assert isinstance(obj, StreamingRUCVaRObjective) and obj.n == 400
    assert isinstance(sampler, SyntheticSampler) and sampler.d == 10
    theta0, aux0 = problems.initial_point(spec.init_table(), obj, 1)
    _, frame, err = runner._run_cell(_task(spec, "splplus", 1.0, 1))
    assert err is None
    assert frame["step"].iloc[0] == 0 and frame["step"].iloc[-1] == 200
    assert frame["passes"].isna().all()
    assert frame["value"].iloc[0] == pytest.approx(obj.value(theta0, aux0["alpha0"]), rel=1e-12)
    # SPL+'s l0 is the mean loss at theta0 over the evaluation sample, not the solver's twin
    state = SPLPlus(lr=1.0, random_state=1).init_state(obj, coef0=theta0, **aux0)
    assert state.loss_scale == pytest.approx(float(np.mean(obj.losses(theta0))))
    solver, done = SPLPlus(lr=1.0, random_state=1), 0
    for s in runner.record_steps(200, 4)[1:]:  # the runner streams between two records
        res = solver.run_stream(prob.solver_objective, int(s - done), sampler=sampler,
                                state=state)
        state, done = res.state, int(s)
    last = obj.value(res.coef, res.extra["alpha"])
    assert frame["value"].iloc[-1] == pytest.approx(last, rel=1e-10)
    # same seed, same start and samples: reproducible; another seed differs
    _, again, _ = runner._run_cell(_task(spec, "splplus", 1.0, 1))
    pd.testing.assert_frame_equal(frame.drop(columns="time"), again.drop(columns="time"))
    _, other, _ = runner._run_cell(_task(spec, "splplus", 1.0, 0))
    assert other["value"].iloc[-1] != frame["value"].iloc[-1]


def test_divergent_run_is_recorded_as_inf():
    spec = rb.spec_from_dict(_clean(_ru(steps=3000, lr=[1e6], seeds=[0])))
    _, frame, err = runner._run_cell(_task(spec, "sgm", 1e6, 0))
    assert err is None and frame["diverged"].all()
    assert not np.isfinite(frame["value"].iloc[-1])


# ---------------------------------------------------------------------------- tables
def _sens_table(vals, lrs=(0.01, 0.1, 1.0, 10.0, 100.0)):
    rows = []
    for m, v in vals.items():
        for lr, x in zip(lrs, v):
            rows.append({"dataset": "p", "objective": "o", "solver": m, "lr": lr,
                         "final_median": x, "epsilon": 0.35})
    return pd.DataFrame(rows)


def test_summary_widths():
    sens = _sens_table({"sgm": [5.0, 0.1, 2.0, np.inf, np.inf],
                        "spl": [0.5, 0.3, 0.2, 1.0, 50.0],
                        "splplus": [0.9, 0.05, 0.4, 0.3, 0.01]})
    s = analysis.summary(sens, tolerance=10.0).set_index("solver")
    # SGM: best 0.1 at lr 0.1; <= 1.0 only there (5 and 2 are above): zero width
    assert s.loc["sgm", "best_lr"] == 0.1 and s.loc["sgm", "width_decades"] == 0
    assert not s.loc["sgm", "lr1_good"] and s.loc["sgm", "lr1_ratio"] == pytest.approx(20)
    # SPL: best 0.2 at lr 1; <= 2 from 0.01 to 10 (4 decades); lambda = 1 is the best
    assert s.loc["spl", "lr_lo"] == 0.01 and s.loc["spl", "lr_hi"] == 10.0
    assert s.loc["spl", "width_decades"] == pytest.approx(3.0) and s.loc["spl", "lr1_good"]
    # SPL+: best 0.01 at lr 100; contiguous run <= 0.1: only lr = 100 (0.3 at lr 10 > 0.1),
    # although lr = 0.1 is also within 10x (counted by n_good_all)
    assert s.loc["splplus", "best_lr"] == 100.0 and s.loc["splplus", "width_decades"] == 0
    assert s.loc["splplus", "n_good_all"] == 2 and not s.loc["splplus", "lr1_good"]
    # against the best of all methods (0.01): only SPL+ qualifies
    assert np.isnan(s.loc["spl", "width_decades_vs_all"])
    assert s.loc["splplus", "n_good_vs_all"] == 1
    # within the fixed-accuracy target epsilon = 0.35
    assert s.loc["sgm", "width_decades_eps"] == 0 and s.loc["sgm", "n_reach_eps"] == 1
    assert s.loc["spl", "width_decades_eps"] == pytest.approx(1.0)
    assert s.loc["splplus", "width_decades_eps"] == pytest.approx(1.0)
    assert s.loc["splplus", "n_reach_eps"] == 3


# ---------------------------------------------------------------------------- end to end
def _check_outputs(out_dir, n_cells):
    table = pd.read_parquet(out_dir / "results.parquet")
    assert list(table.columns) == TABLE_COLUMNS
    assert table.groupby(["dataset", "solver", "lr", "seed"]).ngroups == n_cells
    assert set(table["family"]) == {"ru_cvar"}
    assert (table["suboptimality"][np.isfinite(table["value"])] >= 0).all()
    assert np.allclose(table["suboptimality"], table["value"] - table["f_star"], equal_nan=True)
    assert (table["f_star"] <= table["f_star_ref"]).all()
    sens = pd.read_parquet(out_dir / "sensitivity.parquet")
    assert len(sens) == n_cells // table["seed"].nunique()
    assert (sens["final_min"] <= sens["final_median"]).all()
    assert (sens["final_median"] <= sens["final_max"]).all()
    summ = pd.read_csv(out_dir / "summary.csv")
    assert {"best_lr", "best_final", "width_decades", "width_decades_vs_all",
            "width_decades_eps", "lr1_good"} <= set(summ.columns)
    assert len(summ) == table.groupby(["dataset", "solver"]).ngroups
    meta = json.loads((out_dir / "metadata.json").read_text())
    assert meta["spec"]["objectives"][0]["family"] == "ru_cvar"
    assert meta["run"]["cells_total"] == n_cells and len(meta["summary"]) == len(summ)
    assert {f["dataset"] for f in meta["f_star"]} == set(table["dataset"])
    assert all(f["f_star"] <= f["f_star_ref"] for f in meta["f_star"])
    for name in FIGURES:  # the runner writes PNGs only (a PDF on request: bench plot --format)
        assert (out_dir / f"{name}.png").stat().st_size > 1000
        assert not (out_dir / f"{name}.pdf").exists()
    return table, meta


@pytest.mark.slow  # 40 s warm (stop 37); the real-data quick spec stays in the default suite
def test_bundled_synthetic_quick_spec_through_the_cli(tmp_path, capsys):
    """The bundled quick spec end to end: a chunk, dry-run counts, resume, figures, replot."""
    out_dir = tmp_path / "q"
    base = ["bench", "run", "splplus_synthetic_quick", "--out", str(out_dir), "--jobs", "1",
            "--quiet"]
    code, out, _ = _run(base + ["--max-cells", "20"], capsys)
    assert code == 0 and "incomplete" in out and "20 run now" in out
    fstar = json.loads((out_dir / "fstar.json").read_text())
    assert len(fstar) == 9  # every problem's F*, computed once
    code, out, _ = _run(base + ["--dry-run"], capsys)
    assert code == 0 and "270 total, 20 finished, 250 to run" in out
    assert "squared_normal: 5000 x 10, 2000 steps" in out
    code, out, _ = _run(base, capsys)
    assert code == 0 and "270 total, 20 reused, 250 run now, 0 failed" in out
    lines = [line.split(": ", 1) for line in out.splitlines() if ": " in line]
    figures = [Path(v) for k, v in lines if k == "figure"]
    assert sorted(p.name for p in figures) == sorted(f"{n}.png" for n in FIGURES)
    table, meta = _check_outputs(out_dir, 270)
    assert table["passes"].isna().all() and table["step"].max() == 2000
    assert meta["datasets"]["squared_normal"]["n_train"] == 5000
    # a second invocation reruns nothing; plotting redraws from the table alone
    code, out, _ = _run(base, capsys)
    assert code == 0 and "270 reused, 0 run now" in out
    for p in out_dir.glob("*.png"):
        p.unlink()
    code, out, _ = _run(["bench", "plot", str(out_dir), "--format", "png"], capsys)
    assert code == 0 and len(out.splitlines()) == 3
    assert all((out_dir / f"{n}.png").stat().st_size > 1000 for n in FIGURES)


def test_real_data_spec_through_the_python_api(tmp_path):
    spec = tmp_path / "real.toml"
    spec.write_text("""
name = "tiny_real"
description = "bundled sets only"
family = "ru_cvar"
beta = 0.95
l2_reg = 0.0
objectives = [{ family = "ru_cvar" }]
datasets = [{name = "yacht", loss = "squared"}, {name = "energy", loss = "absolute"}]
seeds = [0, 1]
lr = [0.1, 1.0, 10.0]
passes = 3
init = "random"
record = { value = "iterate", suboptimality = "absolute" }
reference = { lower_to_best = true }
selection = { rule = "final" }
analyses = ["convergence", "fixed_accuracy"]
analysis = { epsilon = 0.5, epsilon_scale = "gap" }
solvers = ["sgm", "spl", "splplus"]
""")
    res = rb.run(str(spec), out=tmp_path / "r", jobs=1, progress=False)  # the generic entry
    assert res.complete and res.n_run == 36 and res.n_errors == 0
    table, meta = _check_outputs(tmp_path / "r", 36)
    assert table["passes"].max() == 3 and set(table["passes"]) == {0.0, 1.0, 2.0, 3.0}
    assert table.loc[table["dataset"] == "energy", "loss"].eq("absolute").all()
    sens = pd.read_parquet(tmp_path / "r" / "sensitivity.parquet")
    first = table[table["update"] == 0].groupby(["dataset", "seed"])["suboptimality"].first()
    for ds, g in sens.groupby("dataset"):  # epsilon = 0.5 x median initial gap
        assert g["epsilon"].iloc[0] == pytest.approx(0.5 * np.median(first.loc[ds]))
    assert runner.status(str(spec), tmp_path / "r") == (36, 36)
    # the convergence figure shows each solver's lr with the smallest median final value
    chosen = table[table["selected"]].groupby(["dataset", "solver"])["lr"].first()
    best = sens.loc[sens.groupby(["dataset", "solver"])["final_median"].idxmin()]
    assert chosen.to_dict() == best.set_index(["dataset", "solver"])["lr"].to_dict()


def test_bundled_real_quick_spec(tmp_path, capsys):
    if not ro.datasets.info("mushrooms")["present"]:
        pytest.skip("mushrooms is not in the data folder ($RISKOPT_DATA)")
    out_dir = tmp_path / "rq"
    code, out, _ = _run(["bench", "run", "splplus_real_quick", "--out", str(out_dir),
                         "--jobs", "1", "--quiet"], capsys)
    assert code == 0 and "48 total, 0 reused, 48 run now, 0 failed" in out
    table, _ = _check_outputs(out_dir, 48)
    assert set(table["dataset"]) == {"power", "mushrooms"}


def test_results_of_the_older_layout_still_plot(tmp_path):
    """Tables written before the one schema (problem / method / record columns, the spec's
    analysis settings at the top level) are read and drawn without rerunning anything."""
    rows = []
    for pid in ("a", "b"):
        for m in METHODS:
            for lr in (0.1, 1.0):
                for seed in (0, 1):
                    for k in range(4):
                        sub = 1.0 / (1 + k) * (1 + lr)
                        rows.append({"spec": "old", "problem": pid, "problem_label": pid,
                                     "dataset": "synthetic", "method": m, "method_label": m,
                                     "lr": lr, "seed": seed, "record": k, "step": 10 * k,
                                     "passes": float(k), "time": 0.1 * k, "value": 1 + sub,
                                     "f_star": 1.0, "suboptimality": sub, "diverged": False})
    pd.DataFrame(rows).to_parquet(tmp_path / "results.parquet")
    (tmp_path / "spec.json").write_text(json.dumps({"name": "old", "epsilon": 0.5,
                                                    "epsilon_scale": "gap"}))
    paths = rb.plot_results(tmp_path, x=["passes"], formats=["png"])
    assert [p.name for p in paths] == ["figure.png", "sensitivity.png", "fixed_accuracy.png"]


def test_bench_list_shows_the_ru_cvar_specs(capsys):
    code, out, _ = _run(["bench", "list"], capsys)
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert "invalid" not in rows["splplus_synthetic"] and "SPL+" in rows["splplus_real"]


def test_bad_ru_cvar_spec_exits_2_naming_the_key(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "b"\nfamily = "ru_cvar"\nobjectives = [{family = "ru_cvar"}]\n'
                   'datasets = ["yacht"]\nsolvers = ["sgm"]\nlr = [0.1, 0]\n')
    code, _, err = _run(["bench", "run", str(bad)], capsys)
    assert code == 2 and "lr[1]" in err
    bad.write_text('name = "b"\nobjectives = [{family = "nope"}]\ndatasets = ["yacht"]\n'
                   'solvers = ["sgm"]\n')
    code, _, err = _run(["bench", "run", str(bad)], capsys)
    assert code == 2 and "family" in err
    bad.write_text('name = "b"\ndriver = "x"\nobjectives = ["cvar:0.5"]\ndatasets = ["yacht"]\n'
                   'solvers = ["sgm"]\n')
    code, _, err = _run(["bench", "run", str(bad)], capsys)
    assert code == 2 and "driver" in err  # no per-family drivers any more: an unknown key


def test_spectral_solver_on_a_ru_cvar_objective_is_named(tmp_path):
    data = _clean(_real(solvers=["sgd"] if "sgd" in ro.solvers.available() else ["prospect"]))
    with pytest.raises(rb.SpecError, match=r"^solvers\[0\]: .* cannot run objectives\[0\]"):
        rb.run(rb.spec_from_dict(data), out=tmp_path, jobs=1, progress=False)


def test_splplus_is_unit_free():
    """The point of SPL+'s steps lambda l0 (alpha) and lambda / l0 (theta), Sec. 4.2: scaling
    the losses by c (absolute loss on (c x, c y)) leaves the theta path unchanged and scales
    alpha and F by c, so a lambda that is good for one scale is good for all."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = X @ np.ones(3) + rng.normal(size=200)
    theta0, alpha0 = np.zeros(3), 0.5
    a = RUCVaRObjective("absolute", X, y, 0.95)
    c = 7.0
    b = RUCVaRObjective("absolute", c * X, c * y, 0.95)  # losses (and alpha) scale by c
    ra = SPLPlus(lr=1.0, random_state=0).run(a, max_epochs=2, coef0=theta0, alpha0=alpha0)
    rb_ = SPLPlus(lr=1.0, random_state=0).run(b, max_epochs=2, coef0=theta0, alpha0=c * alpha0)
    # unit-consistent: the same theta path, alpha scaled by c, F scaled by c
    np.testing.assert_allclose(ra.coef, rb_.coef, rtol=1e-9, atol=1e-12)
    assert rb_.value == pytest.approx(c * ra.value, rel=1e-9)
    assert math.isclose(rb_.extra["loss_scale"], c * ra.extra["loss_scale"], rel_tol=1e-12)
