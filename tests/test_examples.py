"""The runnable examples of ``examples/`` (shown in the documentation's gallery) run and say
what the documentation says they say.

Each example runs as a subprocess with this interpreter, offline, as a user would run it. The
checks read the printed tables: the documented equivalence (mean-risk RiskRegressor == Ridge),
the direction of the documented effects on deterministic runs (a CVaR fit has a lighter
training tail than ridge; risk-trained networks have a lower training risk than ERM), and the
DDP ``gather=True`` run matching the single-process run to rounding error while
``gather=False`` does not. The torch examples are skipped without torch. Each example takes
< 30 s on 2 cores; the DDP example (~12-20 s, mostly process start-up) and the SONEX row of
``torchrun_mlp.py`` run under ``make test-slow`` (their library paths stay in the default
suite: the gathered spectral loss under 2 gloo ranks in ``tests/test_torch.py``, SONEX under
DDP in ``tests/test_torch_optim_common.py``).
"""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch (the 'torch' extra)")


def run_example(name, *args, env=None, timeout=300):
    full_env = dict(os.environ, MPLBACKEND="Agg", **(env or {}))
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=ROOT,
                          env=full_env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def table_rows(text, labels):
    """``{label: [floats]}`` for the printed table lines starting with each label."""
    rows = {}
    for line in text.splitlines():
        s = line.strip()
        for label in labels:
            if s.startswith(label + " ") and label not in rows:
                rows[label] = [float(v) for v in s[len(label):].split()]
    assert set(rows) == set(labels), f"missing rows {set(labels) - set(rows)} in:\n{text}"
    return rows


def test_every_example_is_tested():
    tested = {"quickstart.py", "plot_cvar_regressor.py", "plot_fair_classification.py",
              "torch_spectral_risk.py", "torch_ddp.py", "torchrun_mlp.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_quickstart():
    out = run_example("quickstart.py")
    m = re.search(r"F\(w\) - f\* = (\S+); suboptimality <= 1e-8 after (\S+) passes", out)
    assert m, out
    assert float(m.group(1)) < 1e-10 and float(m.group(2)) <= 64   # Prospect converged
    assert float(re.search(r"test R\^2 = (\S+)", out).group(1)) > 0.3


def test_cvar_regressor(tmp_path):
    fig = tmp_path / "tail.png"
    out = run_example("plot_cvar_regressor.py", *(["--plot", str(fig)] if HAS_MPL else []))
    gap = float(re.search(r"max \|coef difference\| = (\S+)", out).group(1))
    assert gap < 1e-6                                   # RiskRegressor(mean) == Ridge
    train, test = out.split("test losses")
    labels = ["ridge (mean)", "CVaR 0.5", "CVaR 0.1"]
    tr, te = table_rows(train, labels), table_rows(test, labels)
    # columns: mean, CVaR 10%, CVaR 1%, max, fit time
    assert tr["ridge (mean)"][0] < tr["CVaR 0.1"][0]      # ridge: the lowest mean loss
    assert tr["CVaR 0.1"][1] < tr["CVaR 0.5"][1] < tr["ridge (mean)"][1]   # lighter tails
    assert te["CVaR 0.1"][2] < te["ridge (mean)"][2]
    if HAS_MPL:
        assert fig.stat().st_size > 0


def _fair_rows(out):
    labels = ["ERM (mean)", "ESRM(1)", "ESRM(1), KL 0.5", "CVaR(0.8)", "ERM, balanced"]
    rows = table_rows(out.split("test error by group")[1], labels)
    for label, vals in rows.items():
        error, worst, vs_erm, *groups, seconds = vals
        assert worst == max(groups) and min(groups) <= error <= worst, (label, vals)
        assert abs(vs_erm - (worst - rows["ERM (mean)"][1])) < 2e-3
    return rows


def test_fair_classification_synthetic_fallback(tmp_path):
    # an empty data folder: the example must fall back to the synthetic set, offline
    out = run_example("plot_fair_classification.py", env={"RISKOPT_DATA": str(tmp_path)})
    assert out.startswith("group_shift_binary:")
    assert not any(tmp_path.iterdir())                   # nothing was downloaded
    rows = _fair_rows(out)
    # group-balanced weights help the minority group of the 90/10 mixture here
    assert rows["ERM, balanced"][1] < rows["ERM (mean)"][1]


def test_fair_classification_on_real_data_when_present(tmp_path):
    import riskopt as ro

    if not ro.datasets.info("compas")["present"]:
        pytest.skip("compas is not in the data folder ($RISKOPT_DATA)")
    fig = tmp_path / "groups.png"
    out = run_example("plot_fair_classification.py",
                      *(["--plot", str(fig)] if HAS_MPL else []))
    assert out.startswith("compas:")
    _fair_rows(out)
    if HAS_MPL:
        assert fig.stat().st_size > 0


@needs_torch
def test_torch_spectral_risk_training_loop():
    out = run_example("torch_spectral_risk.py")
    rows = table_rows(out, ["mean (ERM)", "batch ESRM", "table ESRM"])
    # columns: train mean, train risk, test mean, test risk, worst group, time
    erm = rows["mean (ERM)"]
    for label in ("batch ESRM", "table ESRM"):
        assert rows[label][1] < erm[1]                   # lower full-data training risk
        assert rows[label][0] > erm[0]                   # at a higher mean loss


@needs_torch
@pytest.mark.slow  # ~12 s idle; test_torch.py::test_two_process_gloo_equals_single_process
def test_torch_ddp_gather_matches_single_process():  # covers gather=True under 2 gloo ranks
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    out = run_example("torch_ddp.py")
    diff = {k: float(v) for k, v in
            re.findall(r"(gather=True|gather=False)\s+([0-9.eE+-]+)\s*$", out, re.M)}
    assert diff["gather=True"] < 1e-10
    assert diff["gather=False"] > 1e-6


def _torchrun_numbers(out):
    m = re.search(r"mean loss = (\S+), worst group loss = (\S+), (?:lambda|s) = (\S+)", out)
    assert m, out
    return [float(v) for v in m.groups()]


@needs_torch
@pytest.mark.parametrize("optimizer", [  # SONEX itself: test_torch_optim_common (default)
    "scdro", pytest.param("sonex", marks=pytest.mark.slow)])
def test_torchrun_mlp_one_process(optimizer, tmp_path):
    out = run_example("torchrun_mlp.py", "--optimizer", optimizer, "--epochs", "1",
                      "--checkpoint", str(tmp_path / "ck.pt"))
    mean, worst, state = _torchrun_numbers(out)
    assert 0 < mean <= worst
    # it trains: the full data's worst-group (and mean) loss below the printed start; SCDRO's
    # lambda inside its box, off its floor lambda_0 (the stall of stop 42 froze it there)
    m = re.search(r"start: mean loss (\S+), worst group loss (\S+)", out)
    assert m, out
    assert worst < float(m.group(2)) and mean < float(m.group(1))
    if optimizer == "scdro":
        floor = float(re.search(r"lambda_0 = (\S+)\)", out).group(1))
        assert floor < state
    import torch
    ck = torch.load(tmp_path / "ck.pt", weights_only=True)    # a complete, portable checkpoint
    assert {"model", "optimizer"} <= set(ck)


@needs_torch
@pytest.mark.slow
@pytest.mark.parametrize("optimizer,attach", [("scdro", ()), ("sonex", ()),
                                              ("scdro", ("--attach",))])
def test_torchrun_mlp_two_processes_print_the_one_process_numbers(optimizer, attach):
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    one = _torchrun_numbers(run_example("torchrun_mlp.py", "--optimizer", optimizer))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", str(EXAMPLES / "torchrun_mlp.py"),
                           "--optimizer", optimizer, *attach], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    two = _torchrun_numbers(proc.stdout)
    assert two == pytest.approx(one, rel=1e-9)
