"""``benchmarks/torch_device.py`` runs on the CPU in its short mode (the GPU benchmark of
issue 28: a training step of a ResNet-18-shaped network with each riskopt.torch loss against
the mean) and writes its results atomically."""
import importlib.util
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "torch_device.py"


@pytest.mark.slow
def test_torch_device_benchmark_short_mode_on_cpu(tmp_path):
    """Slow: 9 losses x 3 steps of a width-4 network took 38 s on the loaded machine."""
    spec = importlib.util.spec_from_file_location("torch_device_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--short", "--device", "cpu", "--out", str(tmp_path)])
    res = json.loads((tmp_path / "cpu.json").read_text())
    assert res["short"] and res["device"] == "cpu" and not res["sync_debug_mode_error"]
    names = set(res["ms_per_step"])
    assert {"mean", "KLDROLoss(radius=0.5)", "GroupDROLoss(4)", "PAUCLoss(cvar)"} <= names
    assert any(n.startswith("TableSpectralRiskLoss") for n in names)
    for name, ms in res["ms_per_step"].items():
        assert ms > 0 and math.isfinite(res["ratio_to_mean"][name]), name
    assert (tmp_path / "cpu.md").read_text().count("|") > 10
