"""Committed figures are small: a palette PNG at 100 dpi under ``PNG_LIMIT`` where possible
(:func:`riskopt.bench._io.small_png`), a PDF only when asked for."""
import io

import numpy as np
import pytest

pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")

from riskopt.bench import _io  # noqa: E402


def _busy_figure(n_rows, n_cols, seed=0):
    """A grid of noisy log-scale curves with translucent bands (many distinct colours)."""
    from matplotlib.figure import Figure

    rng = np.random.default_rng(seed)
    fig = Figure(figsize=(3.2 * n_cols + 0.4, 2.6 * n_rows + 0.9), layout="constrained")
    for ax in fig.subplots(n_rows, n_cols, squeeze=False).ravel():
        x = np.arange(60)
        for k in range(5):
            y = np.exp(-x / (20 + 10 * k)) * (1 + 0.3 * rng.random(60)) + 1e-6
            ax.plot(x, y, lw=1.4)
            ax.fill_between(x, 0.5 * y, 2 * y, alpha=0.2, lw=0)
        ax.set_yscale("log")
        ax.set_title("panel", fontsize=9)
        ax.set_xlabel("passes")
    fig.suptitle("a busy figure")
    return fig


def test_a_figure_is_written_as_a_small_palette_png(tmp_path):
    fig = _busy_figure(2, 3)
    plain = io.BytesIO()
    fig.savefig(plain, format="png", dpi=150)  # what the writer used to commit
    path = _io.atomic_savefig(fig, tmp_path / "f.png")
    data = path.read_bytes()
    assert len(data) <= _io.PNG_LIMIT < len(plain.getvalue())
    with Image.open(path) as im:
        assert im.mode == "P"  # palette-quantised
        # drawn at 100 dpi (the first try) when that fits the limit
        assert im.size == (round(fig.get_figwidth() * 100), round(fig.get_figheight() * 100))


def test_a_grid_too_big_for_100_dpi_goes_down_in_colours_then_dpi(tmp_path):
    fig = _busy_figure(1, 2, seed=1)
    first = _io.small_png(fig, dpi=100, limit=10**9)
    limit = len(first) // 3  # force at least one step down
    data = _io.small_png(fig, dpi=100, limit=limit)
    assert len(data) < len(first)
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "P" and im.size[0] <= round(fig.get_figwidth() * 100)
    # a limit nothing meets: the smallest try, not an error
    tiny = _io.small_png(fig, dpi=100, limit=1)
    assert len(tiny) <= len(data)


def test_other_formats_and_small_false_are_matplotlib_s_own(tmp_path):
    fig = _busy_figure(1, 2)
    pdf = _io.atomic_savefig(fig, tmp_path / "f.pdf")
    assert pdf.read_bytes().startswith(b"%PDF")
    big = _io.atomic_savefig(fig, tmp_path / "big.png", small=False, dpi=150)
    with Image.open(big) as im:
        assert im.mode in ("RGB", "RGBA")


def test_compact_pngs_script_shrinks_a_committed_figure_in_place(tmp_path):
    """scripts/compact_pngs.py: an old 150-dpi RGB figure becomes a palette PNG under the
    limit (scaled down only if needed); a file already small is left byte for byte."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "compact_pngs.py"
    spec_ = importlib.util.spec_from_file_location("compact_pngs", path)
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    fig = _busy_figure(1, 2, seed=2)
    old = _io.atomic_savefig(fig, tmp_path / "old.png", small=False, dpi=150)
    raw = old.read_bytes()
    limit = len(raw) // 4
    assert mod.main([str(old), "--limit", str(limit)]) == 0
    new = old.read_bytes()
    assert len(new) <= limit
    with Image.open(old) as im:
        assert im.mode == "P" and im.size[0] <= round(fig.get_figwidth() * 150)
    assert mod.main([str(old), "--limit", str(limit)]) == 0
    assert old.read_bytes() == new  # already small: untouched


def test_legend_names_each_solvers_own_settings_and_the_shared_ones_once():
    """The convergence figure's legend: hyper-parameters equal for every solver of a panel
    (fixed in the spec) are split off and named once; the differing ones stay per solver; a
    label that is not a k=v list, or a single solver, is kept whole."""
    from riskopt.bench.figures import _shared_config

    own, shared = _shared_config({"sonex": "lr=0.1,per_group=16,smoothing=0.01",
                                  "ooa": "lr=0.03,dual_lr=0.05,per_group=16"})
    assert own == {"sonex": "lr=0.1,smoothing=0.01", "ooa": "lr=0.03,dual_lr=0.05"}
    assert shared == "per_group=16"
    assert _shared_config({"a": "lr=0.1", "b": "lr=0.1"}) == ({"a": "", "b": ""}, "lr=0.1")
    for whole in ({"a": "lr=0.1,x", "b": "lr=0.1"}, {"a": "lr=0.1,k=1"}):
        assert _shared_config(whole) == (whole, "")
