"""`riskopt bench report`: a results folder as Markdown / CSV, without rerunning solvers."""
import numpy as np
import pandas as pd
import pytest

from riskopt.bench import ObjectiveSpec, SolverSpec, Spec, run
from riskopt.bench.report import build_report, configuration_table, passes_to_reach
from riskopt.cli import main


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "small"
    spec = Spec(name="small_report", datasets=["yacht"],
                objectives=[ObjectiveSpec("cvar:0.5", shift_cost=0.5)],
                solvers=[SolverSpec("lsvrg", lr=[0.01, 0.03]),
                         SolverSpec("sgd", lr=[0.03], params={"batch_size": 32})],
                seeds=[0, 1], passes=12, last_passes=4)
    res = run(spec, out=out, jobs=1, progress=False)
    assert res.complete
    return out


def test_passes_to_reach_needs_every_seed_to_stay_below():
    t = pd.DataFrame({"seed": [0] * 4, "update": range(4), "passes": [0.0, 1, 2, 3],
                      "suboptimality": [1.0, 1e-9, 1e-3, 1e-9]})
    assert passes_to_reach(t, 1e-8) == 3.0  # dips below at 1, back above at 2
    assert passes_to_reach(t, 1e-2) == 1.0


def test_report_from_a_results_folder(results, tmp_path, monkeypatch):
    table = pd.read_parquet(results / "results.parquet")
    conf = configuration_table(table)
    assert set(conf["solver"]) == {"lsvrg", "sgd"} and len(conf) == 2
    sel = table[table["selected"]]
    for _, r in conf.iterrows():
        g = sel[sel["solver"] == r["solver"]]
        last = g.sort_values("update").groupby("seed").tail(1)["suboptimality"]
        assert r["final_subopt_median"] == pytest.approx(float(np.median(last)))
    text = build_report(results)
    assert text.startswith("# small_report")
    assert "## Reference optima (f*)" in text and "## Selected configurations" in text
    assert "![figure](figure.png)" in text
    # the report needs no solver: a run that would call one fails the test
    import riskopt.solvers as solvers

    monkeypatch.setattr(solvers, "get", lambda *a, **k: pytest.fail("a solver was built"))
    out = tmp_path / "r.md"
    assert main(["bench", "report", str(results), "--out", str(out)]) == 0
    md = out.read_text()
    assert "small_report" in md and f"]({results.name}/figure.png)" not in md
    assert main(["bench", "report", str(results), "--out", str(tmp_path / "r.csv")]) == 0
    csv = pd.read_csv(tmp_path / "r.csv")
    assert list(csv["solver"]) == list(conf["solver"])


def test_report_errors(tmp_path, capsys):
    assert main(["bench", "report", str(tmp_path / "missing")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["bench", "report", str(tmp_path)]) == 2
    assert "not a finished" in capsys.readouterr().err


def test_report_warns_about_a_broken_metadata_file(results, tmp_path):
    """A truncated metadata.json is reported (RuntimeWarning naming the file and the fix), not
    silently ignored; the report is still built from results.parquet."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(results, copy)
    meta = copy / "metadata.json"
    meta.write_text(meta.read_text()[:40])
    with pytest.warns(RuntimeWarning, match="metadata.json is unreadable"):
        text = build_report(copy)
    assert "## Selected configurations" in text


def test_report_and_plot_of_an_interrupted_run_are_partial(tmp_path, capsys, monkeypatch):
    """A run cut with ``max_cells`` (no results.parquet, no metadata.json): report and plot
    give its complete (seed, problem) groups, labelled partial with the count of runs and the
    incomplete groups left out; the rows are those the finished run's table holds."""
    from riskopt.bench._partial import partial_table
    from riskopt.bench.spec import spec_from_dict

    spec = spec_from_dict({
        "name": "cut", "datasets": ["yacht"], "seeds": [0, 1], "passes": 2,
        "lr": [0.01, 0.1], "shift_cost": 0.5, "objectives": ["cvar:0.5", "extremile:2"],
        "solvers": ["sgd"], "plot": {"x": ["passes"]}, "selection": {"last_passes": 1}})
    out = tmp_path / "cut"
    assert main(["bench", "report", str(out)]) == 2            # not a folder yet
    capsys.readouterr()
    res = run(spec, out=out, jobs=1, progress=False, max_cells=0, plot=False)
    assert not res.complete
    assert main(["bench", "report", str(out)]) == 2
    assert "no complete (seed, problem) group yet (0 of 8 runs done)" in capsys.readouterr().err
    res = run(spec, out=out, jobs=1, progress=False, max_cells=3, plot=False)
    assert not res.complete and not (out / "results.parquet").exists()
    labels = spec.objective_labels()
    line = (f"PARTIAL RUN (interrupted): 3 of 8 runs done; incomplete, left out of the "
            f"comparisons: yacht / {labels[1]} seed 0 (1 of 2); 2 (seed, problem) group(s) "
            "not started")
    text = build_report(out)
    assert text.startswith("# cut (partial)\n") and line in text
    conf = configuration_table(partial_table(out)[0])
    assert list(conf["objective"]) == [labels[0]] and list(conf["seeds"]) == [1]
    assert main(["bench", "report", str(out), "--out", str(tmp_path / "r.csv")]) == 0
    csv = (tmp_path / "r.csv").read_text()
    assert csv.startswith(f"# {line}\n")
    assert pd.read_csv(tmp_path / "r.csv", comment="#")["objective"].tolist() == [labels[0]]
    capsys.readouterr()
    import riskopt.bench.figures as figures

    titles, draw = [], figures.draw_convergence
    monkeypatch.setattr(figures, "draw_convergence",
                        lambda *a, **k: titles.append(k["title"]) or draw(*a, **k))
    assert main(["bench", "plot", str(out), "--out", str(tmp_path / "fig")]) == 0
    assert titles == [f"cut: {line}"]
    said = capsys.readouterr().out
    assert said.startswith(line + "\n") and (tmp_path / "fig" / "figure.png").exists()
    table, note = partial_table(out)
    assert note.line() == line
    partial = table.drop(columns="selected")
    # the finished run's table holds the same rows, bit for bit
    assert run(spec, out=out, jobs=1, progress=False, plot=False).complete
    full = pd.read_parquet(out / "results.parquet")
    full = full[(full["objective"] == labels[0]) & (full["seed"] == 0)]
    pd.testing.assert_frame_equal(partial.reset_index(drop=True),
                                  full[partial.columns].reset_index(drop=True),
                                  check_exact=True)
    assert not build_report(out).startswith("# cut (partial)")
