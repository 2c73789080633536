"""The SPL+ experiment driver (riskopt.bench.splplus): spec, evaluation, runs, tables, CLI."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")
pytest.importorskip("joblib")

import pandas as pd  # noqa: E402

import riskopt as ro  # noqa: E402
import riskopt.bench as rb  # noqa: E402
from riskopt.bench import splplus as sp  # noqa: E402
from riskopt.cli import main  # noqa: E402
from riskopt.objectives.ru_cvar import RUCVaRObjective, StreamingRUCVaRObjective, SyntheticSampler  # noqa
from riskopt.solvers.spl import SGM, SPL, SPLPlus  # noqa: E402

FIGURES = ["sensitivity", "fixed_accuracy", "convergence"]
TABLE_COLUMNS = ["spec", "experiment", "problem", "problem_label", "dataset", "loss", "noise",
                 "method", "method_label", "lr", "seed", "budget", "record", "step", "passes",
                 "time", "value", "f_star_lbfgs", "f_star", "suboptimality", "diverged"]


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _synthetic(**kw):
    base = dict(driver="splplus", kind="synthetic", name="t", n_eval=400, n_steps=300,
                n_records=5, seeds=[0, 1], lr=[0.1, 1.0], losses=["squared"],
                noises=["normal"])
    base.update(kw)
    return sp.spec_from_dict(base)


# ---------------------------------------------------------------------------- spec
def test_paper_grid():
    g = np.asarray(sp.PAPER_GRID)
    assert len(g) == 15 and np.all(np.diff(g) > 0)
    assert g[0] == pytest.approx(1e-6) and g[-1] == pytest.approx(1e4)
    for e in (-1.5, -0.5, 0.0, 0.5, 1.5):
        assert np.any(np.isclose(g, 10.0 ** e))


def test_bundled_specs_follow_the_paper():
    specs = rb.bundled_specs()
    assert {"splplus_synthetic", "splplus_synthetic_quick", "splplus_real",
            "splplus_real_quick"} <= set(specs)
    syn = rb.load_spec("splplus_synthetic")  # through the generic loader (driver dispatch)
    assert isinstance(syn, sp.SPLSpec) and syn.driver == "splplus"
    assert syn.kind == "synthetic" and syn.beta == 0.95 and syn.d == 10
    assert syn.n_steps == 100_000 and syn.seeds == [0, 1, 2, 3, 4]
    assert np.allclose(syn.lr, sp.PAPER_GRID) and syn.methods == ("sgm", "spl", "splplus")
    assert set(syn.losses) == {"absolute", "squared", "logistic"}
    assert set(syn.noises) == {"normal", "gumbel", "lognormal"}
    assert syn.schedule == "decreasing" and syn.init == "paper" and syn.l2_reg == 0
    assert str(syn.n_eval) in syn.source.replace("_", "")  # N is stated in the spec file
    real = rb.load_spec("splplus_real", check_registry=False)
    assert real.kind == "real" and real.passes == 200 and np.allclose(real.lr, sp.PAPER_GRID)
    losses = {d["name"]: d["loss"] for d in real.datasets}
    assert losses["mushrooms"] == losses["a9a"] == "logistic"
    assert "squared" in losses.values()
    for name in ("splplus_synthetic_quick", "splplus_real_quick"):
        q = rb.load_spec(name, check_registry=False)
        assert len(q.seeds) == 2 and q.description
    # the methods are registered solvers with the fixed schedule as a valid parameter
    for i, s in enumerate(syn.solvers):
        s.validate(f"solvers[{i}]", check_registry=True)


@pytest.mark.parametrize("patch, key", [
    ({"kind": "both"}, "kind"),
    ({"methods": ["sgm", "adam"]}, "methods[1]"),
    ({"lr": [0.1, -1.0]}, "lr[1]"),
    ({"losses": ["hinge"]}, "losses[0]"),
    ({"noises": ["cauchy"]}, "noises[0]"),
    ({"beta": 1.0}, "beta"),
    ({"n_steps": 0}, "n_steps"),
    ({"passes": 10}, "passes"),          # a real-data key in a synthetic spec
    ({"epsilon_scale": "median"}, "epsilon_scale"),
    ({"tolerance": 1.0}, "tolerance"),
    ({"colour": "red"}, "colour"),
    ({"plot": {"x": "passes"}}, "plot.x"),
])
def test_bad_specs_name_the_key(patch, key):
    base = dict(driver="splplus", kind="synthetic", name="t")
    base.update(patch)
    with pytest.raises(rb.SpecError) as info:
        sp.spec_from_dict(base)
    assert info.value.key == key


def test_bad_real_specs_name_the_key():
    base = dict(driver="splplus", kind="real", name="t")
    with pytest.raises(rb.SpecError, match="datasets"):
        sp.spec_from_dict(base)
    for datasets, key in [([{"name": "yacht"}], "datasets[0].loss"),
                          ([{"name": "nope", "loss": "squared"}], "datasets[0].name"),
                          (["yacht"], "datasets[0]"),
                          ([{"name": "yacht", "loss": "squared", "x": 1}], "datasets[0].x")]:
        with pytest.raises(rb.SpecError) as info:
            sp.spec_from_dict({**base, "datasets": datasets})
        assert info.value.key == key
    with pytest.raises(rb.SpecError) as info:
        sp.spec_from_dict({**base, "datasets": [{"name": "yacht", "loss": "squared"}],
                           "n_eval": 10})
    assert info.value.key == "n_eval"


def test_spec_dict_round_trip():
    spec = _synthetic()
    again = sp.spec_from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.to_dict() == spec.to_dict() and again.digest() == spec.digest()
    real = sp.spec_from_dict(dict(driver="splplus", kind="real", name="r", passes=3,
                                  datasets=[{"name": "yacht", "loss": "absolute"}]))
    assert sp.spec_from_dict(real.to_dict()).to_dict() == real.to_dict()


def test_record_steps():
    spec = _synthetic(n_steps=100_000, n_records=30)
    s = spec.record_steps()
    assert s[0] == 0 and s[1] == 10 and s[-1] == 100_000 and np.all(np.diff(s) > 0)
    assert len(s) == 31
    real = sp.spec_from_dict(dict(driver="splplus", kind="real", name="r", passes=7,
                                  record_every=3,
                                  datasets=[{"name": "yacht", "loss": "squared"}]))
    assert real.record_steps(10).tolist() == [0, 30, 60, 70]


# ---------------------------------------------------------------------------- evaluation
@pytest.mark.parametrize("loss", ["squared", "absolute", "logistic"])
@pytest.mark.parametrize("fit_intercept, l2", [(False, 0.0), (True, 0.3)])
def test_ru_values_equals_objective_value(loss, fit_intercept, l2):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    y = (rng.random(300) < 0.4).astype(float) if loss == "logistic" else rng.normal(size=300)
    obj = RUCVaRObjective(loss, X, y, 0.9, l2_reg=l2, fit_intercept=fit_intercept)
    for scale in (0.01, 1.0, 40.0):  # 40: logistic far in its linear regime (skip branch)
        C = rng.normal(size=(6, obj.p)) * scale
        A = rng.normal(size=6) * scale
        A[0] = obj.value_at_risk(C[0])
        got = sp.ru_values(obj, C, A)
        ref = np.array([obj.value(c, a) for c, a in zip(C, A)])
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    C[1, 0] = np.nan
    A[2] = np.inf
    got = sp.ru_values(obj, C, A)
    assert got[1] == np.inf and got[2] == np.inf and np.isfinite(got[3])


def test_initial_point_is_per_seed_and_shared():
    t0, a0 = sp.initial_point("paper", 5, 3)
    t1, a1 = sp.initial_point("paper", 5, 3)
    t2, _ = sp.initial_point("paper", 5, 4)
    assert np.array_equal(t0, t1) and a0 == a1 and not np.array_equal(t0, t2)
    assert 0.0 <= a0 < 1.0
    tz, az = sp.initial_point("zeros", 5, 3)
    assert np.all(tz == 0) and az == a0


# ---------------------------------------------------------------------------- runs
def _task(spec, prob, method, lr, seed, n=None):
    return {"id": "x", "problem": spec.problem_key(prob), "method": method, "lr": lr,
            "seed": seed, "schedule": spec.schedule, "init": spec.init,
            "chunk_size": spec.chunk_size, "steps": spec.record_steps(n).tolist()}


def test_real_cell_matches_the_solver_run():
    """Each recorded value is F(theta_bar, alpha_bar) of the solver run for that many passes
    from the seed's (theta0, alpha0), with SPL+'s l0 the initial mean training loss."""
    spec = sp.spec_from_dict(dict(driver="splplus", kind="real", name="r", passes=3,
                                  seeds=[0], lr=[1.0],
                                  datasets=[{"name": "yacht", "loss": "squared"}]))
    prob = spec.problems()[0]
    obj, _ = sp._problem_objective(spec.problem_key(prob))
    theta0, alpha0 = sp.initial_point("paper", obj.p, 2)
    for method, cls in (("sgm", SGM), ("spl", SPL), ("splplus", SPLPlus)):
        kind, _, frame, info, err = sp._run_cell(_task(spec, prob, method, 0.3, 2, obj.n))
        assert err is None and kind == "cell"
        assert frame["step"].tolist() == [0, obj.n, 2 * obj.n, 3 * obj.n]
        assert frame["passes"].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert frame["value"].iloc[0] == pytest.approx(obj.value(theta0, alpha0), rel=1e-12)
        for k in (1, 3):
            res = cls(lr=0.3, random_state=2).run(obj, max_epochs=k, coef0=theta0,
                                                  alpha0=alpha0)
            assert frame["value"].iloc[k] == pytest.approx(res.value, rel=1e-10)
        if method == "splplus":
            assert info["loss_scale"] == pytest.approx(float(np.mean(obj.losses(theta0))))


def test_synthetic_cell_streams_and_scales_by_the_evaluation_sample():
    spec = _synthetic(n_eval=500, n_steps=200, n_records=4)
    prob = spec.problems()[0]
    obj, sampler = sp._problem_objective(spec.problem_key(prob))
    assert isinstance(obj, StreamingRUCVaRObjective) and obj.n == 500
    assert isinstance(sampler, SyntheticSampler) and sampler.d == 10
    theta0, alpha0 = sp.initial_point("paper", obj.p, 1)
    _, _, frame, info, err = sp._run_cell(_task(spec, prob, "splplus", 1.0, 1))
    assert err is None
    assert frame["step"].iloc[0] == 0 and frame["step"].iloc[-1] == 200
    assert frame["passes"].isna().all()
    assert frame["value"].iloc[0] == pytest.approx(obj.value(theta0, alpha0), rel=1e-12)
    assert info["loss_scale"] == pytest.approx(float(np.mean(obj.losses(theta0))))
    # same seed, same start and samples: reproducible; another seed differs
    _, _, again, _, _ = sp._run_cell(_task(spec, prob, "splplus", 1.0, 1))
    pd.testing.assert_frame_equal(frame.drop(columns="time"), again.drop(columns="time"))
    _, _, other, _, _ = sp._run_cell(_task(spec, prob, "splplus", 1.0, 2))
    assert other["value"].iloc[-1] != frame["value"].iloc[-1]


def test_divergent_run_is_recorded_as_inf():
    spec = _synthetic(n_eval=300, n_steps=3000, n_records=4)
    prob = spec.problems()[0]
    _, _, frame, _, err = sp._run_cell(_task(spec, prob, "sgm", 1e6, 0))
    assert err is None and frame["diverged"].all()
    assert not np.isfinite(frame["value"].iloc[-1])


# ---------------------------------------------------------------------------- tables
def _sens_table(vals, lrs=(0.01, 0.1, 1.0, 10.0, 100.0)):
    rows = []
    for m, v in vals.items():
        for lr, x in zip(lrs, v):
            rows.append({"problem": "p", "problem_label": "p", "method": m, "lr": lr,
                         "final_median": x, "epsilon": 0.35})
    return pd.DataFrame(rows)


def test_summary_widths():
    spec = _synthetic(lr=[0.01, 0.1, 1.0, 10.0, 100.0])
    sens = _sens_table({"sgm": [5.0, 0.1, 2.0, np.inf, np.inf],
                        "spl": [0.5, 0.3, 0.2, 1.0, 50.0],
                        "splplus": [0.9, 0.05, 0.4, 0.3, 0.01]})
    s = sp.summary(sens, spec).set_index("method")
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
def _check_outputs(out_dir, n_cells, kind):
    table = pd.read_parquet(out_dir / "results.parquet")
    assert list(table.columns) == TABLE_COLUMNS
    assert table.groupby(["problem", "method", "lr", "seed"]).ngroups == n_cells
    assert set(table["experiment"]) == {kind}
    assert (table["suboptimality"][np.isfinite(table["value"])] >= 0).all()
    assert np.allclose(table["suboptimality"], table["value"] - table["f_star"], equal_nan=True)
    assert (table["f_star"] <= table["f_star_lbfgs"]).all()
    sens = pd.read_parquet(out_dir / "sensitivity.parquet")
    assert len(sens) == n_cells // table["seed"].nunique()
    assert (sens["final_min"] <= sens["final_median"]).all()
    assert (sens["final_median"] <= sens["final_max"]).all()
    summ = pd.read_csv(out_dir / "summary.csv")
    assert {"best_lr", "best_final", "width_decades", "width_decades_vs_all",
            "width_decades_eps", "lr1_good"} <= set(summ.columns)
    assert len(summ) == table.groupby(["problem", "method"]).ngroups
    meta = json.loads((out_dir / "metadata.json").read_text())
    assert meta["driver"] == "splplus" and meta["kind"] == kind
    assert meta["run"]["cells_total"] == n_cells and len(meta["summary"]) == len(summ)
    assert {f["problem"] for f in meta["f_star"]} == set(table["problem"])
    for name in FIGURES:
        for fmt in ("png", "pdf"):
            assert (out_dir / f"{name}.{fmt}").stat().st_size > 1000
    return table, meta


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
    code, out, _ = _run(base, capsys)
    assert code == 0 and "270 total, 20 reused, 250 run now, 0 failed" in out
    lines = [line.split(": ", 1) for line in out.splitlines() if ": " in line]
    figures = [Path(v) for k, v in lines if k == "figure"]
    assert sorted(p.name for p in figures) == sorted(f"{n}.{e}" for n in FIGURES
                                                     for e in ("png", "pdf"))
    table, meta = _check_outputs(out_dir, 270, "synthetic")
    assert set(table["noise"]) == {"normal", "gumbel", "lognormal"}
    assert table["passes"].isna().all() and table["step"].max() == 2000
    assert meta["problems"]["squared_normal"]["n"] == 5000
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
driver = "splplus"
kind = "real"
name = "tiny_real"
description = "bundled sets only"
seeds = [0, 1]
lr = [0.1, 1.0, 10.0]
passes = 3
datasets = [{name = "yacht", loss = "squared"}, {name = "energy", loss = "absolute"}]
epsilon = 0.5
epsilon_scale = "gap"
""")
    res = rb.run(str(spec), out=tmp_path / "r", jobs=1, progress=False)  # the generic entry
    assert res.complete and res.n_run == 36 and res.n_errors == 0
    table, meta = _check_outputs(tmp_path / "r", 36, "real")
    assert table["passes"].max() == 3 and set(table["passes"]) == {0.0, 1.0, 2.0, 3.0}
    sens = pd.read_parquet(tmp_path / "r" / "sensitivity.parquet")
    first = table[table["record"] == 0].groupby(["problem", "seed"])["suboptimality"].first()
    for pid, g in sens.groupby("problem"):  # epsilon = 0.5 x median initial gap
        assert g["epsilon"].iloc[0] == pytest.approx(0.5 * np.median(first.loc[pid]))
    assert sp.status(str(spec), tmp_path / "r") == (36, 36)


def test_bundled_real_quick_spec(tmp_path, capsys):
    if not ro.datasets.info("mushrooms")["present"]:
        pytest.skip("mushrooms is not in the data folder ($RISKOPT_DATA)")
    out_dir = tmp_path / "rq"
    code, out, _ = _run(["bench", "run", "splplus_real_quick", "--out", str(out_dir),
                         "--jobs", "1", "--quiet"], capsys)
    assert code == 0 and "48 total, 0 reused, 48 run now, 0 failed" in out
    table, _ = _check_outputs(out_dir, 48, "real")
    assert set(table["problem"]) == {"power", "mushrooms"}


def test_bench_list_shows_the_splplus_specs(capsys):
    code, out, _ = _run(["bench", "list"], capsys)
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert "invalid" not in rows["splplus_synthetic"] and "SPL+" in rows["splplus_real"]


def test_bad_splplus_spec_exits_2_naming_the_key(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('driver = "splplus"\nkind = "synthetic"\nname = "b"\nlr = [0.1, 0]\n')
    code, _, err = _run(["bench", "run", str(bad)], capsys)
    assert code == 2 and "lr[1]" in err
    bad.write_text('driver = "nope"\nname = "b"\n')
    code, _, err = _run(["bench", "run", str(bad)], capsys)
    assert code == 2 and "driver" in err


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
