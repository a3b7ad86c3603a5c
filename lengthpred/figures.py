"""Figure rules every package's plots share: plain-number ticks on log axes, one legend outside the panels,
at most MAX_SERIES series per panel (so no colour repeats). Matplotlib only; below every plotting package."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

MAX_SERIES = 8  # lines or point groups per panel: more cannot be told apart (tab10 has 10 colours)


def plain_log_axis(axis) -> None:
    """Log-axis ticks as plain numbers at 1-2-5 steps (no 2×10² labels running into each other)."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def legend_outside(fig, axes, title: str | None = None) -> None:
    """One legend for the figure, right of the panels (never over the data), from every panel's labels."""
    seen: dict[str, object] = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside right upper", fontsize=7, title=title,
                   title_fontsize=7, frameon=False)


def first_series(names, k: int = MAX_SERIES) -> list:
    """At most k series (in the given order), so no colour repeats within a panel."""
    return list(names)[:k]
