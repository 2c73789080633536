"""``benchmarks/scdro_epoch_cost.py``: the count of the paper's SCDRO non-convex protocol
(120 epochs, the 5 x 9 grid, PG-SMD2's 5 x 4) from measured seconds per epoch."""
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "scdro_epoch_cost.py"


def _module():
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("scdro_epoch_cost", BENCH)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH.parent))
    return mod


def test_protocol_cost_counts_the_papers_grids_and_the_committed_ones():
    mod = _module()
    per = {"scdro_nonconvex_mnist": {m: {"cpu_s_per_epoch": c} for m, c in
                                     (("scdro", 2.0), ("fastdro", 1.0), ("pgsmd2", 3.0),
                                      ("erm", 0.5))}}
    cost = mod.protocol_cost(per, {"scdro": 12, "fastdro": 4, "erm": 4})
    # the paper: 45 (lr, beta) settings + 2 more seeds, 120 epochs each
    assert cost["scdro"]["paper_runs"] == 47
    assert cost["scdro"]["paper_cpu_h"] == pytest.approx(2.0 * 120 * 47 / 3600)
    assert cost["pgsmd2"]["paper_cpu_h"] == pytest.approx(3.0 * 120 * 22 / 3600)
    # committed: 16 epochs; ERM stands in for PG-SMD2 (no paper grid, no committed PG-SMD2)
    assert cost["scdro"]["committed_cpu_h"] == pytest.approx(2.0 * 16 * 14 / 3600)
    assert cost["erm"]["paper_runs"] == 0 and cost["pgsmd2"]["committed_runs"] == 0
    assert cost["total"]["paper_runs"] == 47 + 7 + 22
    assert cost["total"]["committed_cpu_h"] == pytest.approx(
        (2.0 * 14 + 1.0 * 6 + 0.5 * 6) * 16 / 3600)
