"""Adaptation figures follow the figure rules: ≤ 8 series per panel, no colour repeated in a panel,
legends outside the data, plain-number ticks that do not overlap."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

import lengthpred.online.plots as plots


@pytest.fixture
def captured(monkeypatch):
    figs = []
    real = plots._save

    def save(fig, path):
        fig.canvas.draw()
        _check_axes(fig)  # before the real save closes the figure
        figs.append(path)
        return real(fig, path)

    monkeypatch.setattr(plots, "_save", save)
    return figs


def _curves(n_pairs: int = 12, heads=("static", "rls@val", "rls@1+mean")):
    rng = np.random.default_rng(0)
    sc, tc = [], []
    doms = ["chat", "code", "math", "qa", "summarization", "writing", "mix"]
    for k in range(n_pairs):
        src, tgt = doms[k % 7], doms[(k + 1 + k // 7) % 6]
        pair = f"{src}->{tgt}"
        for h in heads:
            for w, seen in enumerate(np.linspace(12, 300, 40)):
                d = 0.0 if h == "static" else 0.3 * (1 - np.exp(-seen / 80)) + 0.05 * rng.normal()
                sc.append(
                    {
                        "pair": pair,
                        "source": src,
                        "target": tgt,
                        "head": h,
                        "window_start": w,
                        "labels_seen": seen,
                        "stream_spearman": 0.3 + d,
                        "stream_spearman_delta": d,
                    }
                )
            for u in range(0, 320, 5):
                tc.append(
                    {
                        "pair": pair,
                        "head": h,
                        "n_updates": u,
                        "test_spearman": 0.3 + 0.001 * u * (h != "static"),
                    }
                )
    return pd.DataFrame(sc), pd.DataFrame(tc)


def _check_axes(fig):
    renderer = fig.canvas.get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        series = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        series += [c for c in ax.collections if not c.get_label().startswith("_")]
        assert len(series) <= plots.MAX_SERIES
        colours = [to_rgb(ln.get_color()) for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        assert len(colours) == len(set(colours)), "a colour repeats within a panel"
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        texts = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert all(re.fullmatch(r"[-−]?[0-9.]+", t) for t in texts), texts  # plain numbers
        for a, b in zip(boxes, boxes[1:], strict=False):
            assert a.x1 <= b.x0, f"tick labels overlap: {texts}"
        frame = ax.get_window_extent(renderer)
        for leg in legends:
            lb = leg.get_window_extent(renderer)
            assert lb.x0 >= frame.x1 - 1 or lb.x1 <= frame.x0 + 1, "legend over the data"


def test_summary_grid_and_pair_figures_follow_the_rules(captured, tmp_path):
    sc, tc = _curves()
    plots.plot_delta_summary(sc, tc, tmp_path / "s.png", [("rls@val", "rls"), ("rls@1+mean", "oracle")])
    plots.plot_delta_grid(sc, tmp_path / "g.png")
    many = sorted({*plots.PAIR_HEADS, "rls@1", "rls@0.99", "rls@0.999", "rls@1+mean"})
    sc2, tc2 = _curves(1, heads=many)
    plots.plot_curves(sc2, tc2, "one pair", tmp_path / "c.png")
    gains = pd.DataFrame({"pair": sc["pair"].unique()}).assign(
        head="rls@val",
        target=lambda d: d["pair"].str.split("->").str[1],
        shift=np.linspace(0.1, 2.0, 12),
        stream_spearman_delta=0.1,
        test_spearman_delta=0.2,
    )
    plots.plot_gain_vs_shift(gains, "rls@val", tmp_path / "v.png")
    assert len(captured) == 4
    for f in ("s", "g", "c", "v"):
        assert (tmp_path / f"{f}.png").read_bytes()[:4] == b"\x89PNG"


def test_quantile_band_is_median_and_quartiles_over_pairs():
    rows = [{"pair": f"p{k}", "labels_seen": x, "d": k * 0.1} for k in range(5) for x in (1.0, 100.0)]
    grid, q25, q50, q75 = plots.quantile_band(pd.DataFrame(rows), "labels_seen", "d")
    assert grid[0] == 1.0 and grid[-1] == 100.0
    assert np.allclose(q50, 0.2) and np.allclose(q25, 0.1) and np.allclose(q75, 0.3)
