"""The ``riskopt`` command line: help, bench run / plot / list / show, datasets, clear errors."""
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")
pytest.importorskip("joblib")

import riskopt as ro  # noqa: E402
from riskopt.cli import main  # noqa: E402
from _cli_helpers import solver_for_yacht  # noqa: E402

RISKOPT = Path(sys.executable).with_name("riskopt")


SOLVER = solver_for_yacht()


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_help_everywhere(capsys):
    for argv in ([], ["bench"], ["datasets"]):
        with pytest.raises(SystemExit) as info:
            main(argv + ["--help"])
        assert info.value.code == 0
    out = capsys.readouterr().out
    assert "bench" in out and "datasets" in out
    for argv in (["bench", "run"], ["bench", "plot"], ["bench", "list"], ["bench", "show"],
                 ["datasets", "list"], ["datasets", "info"]):
        with pytest.raises(SystemExit) as info:
            main(argv + ["--help"])
        assert info.value.code == 0
        assert "usage: riskopt " + " ".join(argv) in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:  # no sub-command: a usage error
        main(["bench"])
    assert info.value.code == 2


def test_bench_list_and_show(capsys):
    code, out, _ = _run(["bench", "list"], capsys)
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert "quick" in names and "prospect_fig3" in names and "sorel_fig2" in names
    assert names.index("prospect_fig3") < names.index("prospect_fig10_no_shift")
    code, out, _ = _run(["bench", "show", "quick"], capsys)
    assert code == 0 and 'name = "quick"' in out


def test_datasets_list_and_info(capsys):
    code, out, _ = _run(["datasets", "list"], capsys)
    assert code == 0 and "yacht" in out.split()
    code, out, _ = _run(["datasets", "info", "yacht"], capsys)
    assert code == 0 and "yacht" in out
    code, out, err = _run(["datasets", "info", "nosuchdata"], capsys)
    assert code == 2 and "unknown dataset 'nosuchdata'" in err and "Traceback" not in err


BAD_SPECS = {
    "unknown solver": ('solvers = ["nosuch"]', "solvers[0].name", "unknown solver 'nosuch'"),
    "unknown dataset": ('solvers = ["SOLVER"]\ndatasets = ["yacht", "mars"]', "datasets[1]",
                        "unknown dataset 'mars'"),
    "unknown risk": ('solvers = ["SOLVER"]\nobjectives = ["var:0.5"]', "objectives[0].risk",
                     "unknown risk"),
    "bad lr": ('solvers = [{ name = "SOLVER", lr = [0.1, -1.0] }]', "solvers[0].lr[1]",
               "step sizes must be finite numbers > 0"),
    "bad grid": ('solvers = [{ name = "SOLVER", lr = [] }]', "solvers[0].lr",
                 "grid is empty"),
    "typo": ('solvers = ["SOLVER"]\nseedz = [1]', "seedz", "unknown key"),
}


def _bad_spec(tmp_path, body):
    text = body.replace("SOLVER", SOLVER[0] if SOLVER else "sgd")
    if "datasets =" not in text:
        text = 'datasets = ["yacht"]\n' + text
    if "objectives =" not in text:
        text = 'objectives = ["cvar:0.5"]\n' + text
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\nseeds = [0]\n' + text + "\n")
    return path


@pytest.mark.skipif(SOLVER is None, reason="no stochastic solver is registered yet")
@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_spec_exits_2_naming_the_key(case, tmp_path, capsys):
    body, key, text = BAD_SPECS[case]
    code, out, err = _run(["bench", "run", str(_bad_spec(tmp_path, body)), "--out",
                           str(tmp_path / "o"), "--quiet"], capsys)
    assert code == 2
    assert err.startswith(f"riskopt: error: bad spec: {key}: ") and text in err
    assert "Traceback" not in err and out == ""
    assert not (tmp_path / "o" / "cells").exists() or not any((tmp_path / "o" / "cells").iterdir())


def test_missing_spec_and_results_exit_2(tmp_path, capsys):
    code, _, err = _run(["bench", "run", str(tmp_path / "nope.toml")], capsys)
    assert code == 2 and "spec file not found" in err
    code, _, err = _run(["bench", "run", "no_such_bundled_spec"], capsys)
    assert code == 2 and "no bundled spec" in err
    code, _, err = _run(["bench", "plot", str(tmp_path)], capsys)
    assert code == 2 and "no results table" in err and "Traceback" not in err


def test_console_script_reports_bad_spec_without_traceback(tmp_path):
    if not RISKOPT.exists():
        pytest.skip("the riskopt console script is not installed in this environment")
    path = _bad_spec(tmp_path, 'solvers = ["nosuch"]')
    proc = subprocess.run([str(RISKOPT), "bench", "run", str(path)], capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert "solvers[0].name" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(SOLVER is None, reason="no stochastic solver is registered yet")
def test_bench_run_resume_and_plot_through_the_cli(tmp_path, capsys):
    name, nu = SOLVER
    spec = tmp_path / "tiny.toml"
    spec.write_text(f"""
name = "tiny_cli"
description = "CLI end to end"
datasets = ["yacht"]
seeds = [0, 1]
passes = 2
lr = [0.01, 0.03]
shift_cost = {nu}
objectives = ["cvar:0.5"]
solvers = ["{name}"]
[plot]
x = ["passes"]
""")
    out_dir = tmp_path / "results"
    base = ["bench", "run", str(spec), "--out", str(out_dir), "--jobs", "1", "--quiet"]
    code, out, _ = _run(base + ["--max-cells", "1"], capsys)
    assert code == 0 and "incomplete" in out and "1 run now" in out
    code, out, _ = _run(base + ["--dry-run"], capsys)
    assert code == 0 and "4 total, 1 finished, 3 to run" in out
    code, out, _ = _run(base, capsys)
    assert code == 0 and "1 reused, 3 run now, 0 failed" in out
    lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert Path(lines["table"]) == out_dir / "results.parquet"
    assert Path(lines["table"]).stat().st_size > 0
    figures = [Path(line.split(": ", 1)[1]) for line in out.splitlines()
               if line.startswith("figure: ")]
    assert [p.name for p in figures] == ["figure.png"]  # no PDF unless asked
    assert all(p.stat().st_size > 1000 for p in figures)
    for p in figures:
        p.unlink()
    code, out, _ = _run(["bench", "plot", str(out_dir), "--format", "png", "pdf"], capsys)
    assert code == 0 and out.split() == ["figure:", str(out_dir / "figure.png"),
                                         "figure:", str(out_dir / "figure.pdf")]
    assert (out_dir / "figure.png").stat().st_size > 1000
    assert (out_dir / "figure.pdf").read_bytes().startswith(b"%PDF")


@pytest.mark.slow
@pytest.mark.skipif(not {"prospect", "lsvrg", "sgd"} <= set(ro.solvers.available()),
                    reason="the quick spec needs prospect, lsvrg and sgd")
def test_bundled_quick_spec_end_to_end(tmp_path, capsys):
    """The bundled smoke test, as CI would run it (two loky workers)."""
    import pandas as pd

    out_dir = tmp_path / "quick"
    code, out, _ = _run(["bench", "run", "quick", "--out", str(out_dir), "--jobs", "2",
                         "--quiet"], capsys)
    assert code == 0 and "72 total, 0 reused, 72 run now, 0 failed" in out
    table = pd.read_parquet(out_dir / "results.parquet")
    assert table.groupby(["dataset", "objective", "solver", "config", "seed"]).ngroups == 72
    chosen = table[table["selected"]].groupby(["dataset", "objective", "solver"])["config"]
    assert chosen.nunique().eq(1).all() and chosen.ngroups == 12
    for name in ("figure.png", "figure_time.png"):
        assert 1000 < (out_dir / name).stat().st_size <= 150_000
    assert not list(out_dir.glob("*.pdf"))
