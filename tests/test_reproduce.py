"""`riskopt bench reproduce`: the papers' claims next to our results, from cached results."""
import time

import pytest

from riskopt.bench import ObjectiveSpec, SolverSpec, Spec, run
from riskopt.bench.reproduce import EXPERIMENTS, build, papers
from riskopt.cli import main


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A results root holding one small run in the folder of the SOREL Fig. 2 spec."""
    root = tmp_path_factory.mktemp("results")
    spec = Spec(name="sorel_fig2", datasets=["yacht"], objectives=[ObjectiveSpec("esrm:2")],
                solvers=[SolverSpec("sgd", lr=[0.03], params={"batch_size": 64}),
                         SolverSpec("sorel", lr=[0.03], grid={"dual_lr": [0.1]})],
                seeds=[1], passes=8, last_passes=2)
    assert run(spec, out=root / "sorel_fig2", jobs=1, progress=False).complete
    return root


def test_every_experiment_names_a_bundled_spec():
    from riskopt.bench.spec import bundled_specs

    names = set(bundled_specs())
    missing = [s for e in EXPERIMENTS if not e.script for s in (e.spec, *e.fallbacks)
               if s not in names]
    assert not missing, missing
    assert set(e.paper for e in EXPERIMENTS) <= set(papers())


def test_report_from_cached_results_without_solvers(root, monkeypatch):
    import riskopt.solvers as solvers

    monkeypatch.setattr(solvers, "get", lambda *a, **k: pytest.fail("a solver was run"))
    t0 = time.perf_counter()
    text = build(["sorel"], results_root=root)
    assert time.perf_counter() - t0 < 60
    line = next(l for l in text.splitlines() if "`sorel_fig2`" in l and l.startswith("|"))
    # one seed: no noise estimate, and the point estimate is said
    assert "| too few seeds |" in line and "of 1 (1 without a noise estimate)" in line
    assert "would read" in line
    assert "| sorel | Fig. 5 | `sorel_fig5` | not run |" in text
    assert "![sorel_fig2/figure.png]" in text


def test_cli_writes_the_report_and_rejects_unknown_papers(root, tmp_path, capsys):
    out = tmp_path / "REPRO.md"
    assert main(["bench", "reproduce", "sorel", "--results", str(root), "--out",
                 str(out), "-q"]) == 0
    assert out.read_text().startswith("# Reproduction report")
    assert main(["bench", "reproduce", "nonsense", "--results", str(root)]) == 2
    assert "unknown paper" in capsys.readouterr().err


def test_a_reduced_spec_stands_in_and_the_report_says_so(tmp_path, monkeypatch):
    # results only in the folder of a fallback spec: used, and named as a stand-in
    import dataclasses
    import shutil

    import riskopt.bench.reproduce as rep

    exp = next(e for e in EXPERIMENTS if e.item == "Fig. 2" and e.paper == "sorel")
    spec = Spec(name="sorel_fig2", datasets=["yacht"], objectives=[ObjectiveSpec("esrm:2")],
                solvers=[SolverSpec("sorel", lr=[0.03], grid={"dual_lr": [0.1]})],
                seeds=[1], passes=4, last_passes=2)
    assert run(spec, out=tmp_path / "src", jobs=1, progress=False).complete
    shutil.copytree(tmp_path / "src", tmp_path / "root" / "sorel_fig2_short")
    monkeypatch.setattr(rep, "EXPERIMENTS",
                        [dataclasses.replace(exp, fallbacks=("sorel_fig2_short",))])
    text = rep.build(["sorel"], results_root=tmp_path / "root")
    assert "| sorel | Fig. 2 | `sorel_fig2_short` |" in text
    assert "Stand-in: the reduced spec `sorel_fig2_short`" in text
    assert "the full `sorel_fig2` has not been run" in text
