"""Figures a reader can read: plain numbers on log axes, legends off the data, at most 8 series per
panel, no colour repeated within a panel."""

from __future__ import annotations

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest

from lengthpred.eval import plots


@pytest.fixture
def captured(monkeypatch):
    figs = []

    def keep(fig, path):
        figs.append(fig)
        fig.canvas.draw()
        return path

    monkeypatch.setattr(plots, "_save", keep)
    return figs


def _lat(n_heads: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [("fcfs", "none", 0.8, v) for v in rng.lognormal(-3, 1, 50)]
    rows += [("sjf", f"h{i:02d}", 0.8, v) for i in range(n_heads) for v in rng.lognormal(-3, 1, 50)]
    return pd.DataFrame(rows, columns=["policy", "predictor", "load", "latency"])


def _check_panel(ax) -> None:
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert len(lines) <= plots.MAX_SERIES
    colours = [mcolors.to_hex(ln.get_color()) for ln in lines]
    assert len(set(colours)) == len(colours)
    for lab in ax.get_xticklabels():
        text = lab.get_text()
        assert "times" not in text and "^" not in text, text  # no 2×10² mathtext labels


def test_latency_cdfs_split_many_predictors_and_keep_legends_outside(captured):
    plots.latency_cdfs(_lat(13), "x.png")
    (fig,) = captured
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2  # 13 predictors + the dashed fcfs reference: two panels of <= 8 lines
    renderer = fig.canvas.get_renderer()
    for ax in axes:
        _check_panel(ax)
        box, leg = ax.get_window_extent(renderer), ax.get_legend().get_window_extent(renderer)
        assert leg.x0 >= box.x1 - 1  # the legend sits right of the panel, not on the curves


def test_log_ticks_are_plain_numbers():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_xscale("log")
    ax.set_xlim(30, 600)
    plots.plain_log_axis(ax.xaxis)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all(lab.replace(".", "").isdigit() for lab in labels), labels
    plt.close(fig)


def test_scatter_legend_is_one_figure_legend(captured):
    rng = np.random.default_rng(1)
    rows = [(h, f"indomain/{d}/test", d, t, t * 1.1) for h in ("a", "b") for d in ("chat", "code")
            for t in rng.lognormal(5, 1, 10)]
    preds = pd.DataFrame(rows, columns=["head", "split", "domain", "y_true", "y_pred"])
    plots.scatter_pred_true(preds, "x.png")
    (fig,) = captured
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)


def test_scatter_shows_test_rows_only(captured):
    """The train stage also writes val rows: the pred-vs-true figure stays a test-set figure."""
    rows = [("a", f"indomain/chat/{part}", "chat", t, t) for part, ts in (("test", [10, 20, 40]), ("val", [5, 900]))
            for t in ts]
    preds = pd.DataFrame(rows, columns=["head", "split", "domain", "y_true", "y_pred"])
    plots.scatter_pred_true(preds, "x.png")
    (fig,) = captured
    (points,) = fig.axes[0].collections
    assert sorted(points.get_offsets()[:, 0]) == [10, 20, 40]
