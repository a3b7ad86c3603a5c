"""The main adaptation curve: in-stream accuracy against the number of labels seen at prediction time.

A stream request is predicted when it arrives, with the labels revealed by then (`labels_seen`), and
scored later against the one length its completion reveals. Rolling windows of consecutive arrivals
(requests that chose λ excluded) give one point each: the window's median `labels_seen` against the
Spearman/MAE of every head's at-arrival predictions in it, and each head's difference from the baseline
on the same requests (paired).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError
from lengthpred.metrics import spearman_or_nan
from lengthpred.online.stream import _mae

CURVE_COLUMNS = (
    "head",
    "window_start",
    "n_requests",
    "labels_seen",
    "labels_seen_min",
    "labels_seen_max",
    "stream_spearman",
    "stream_mae",
    "stream_spearman_delta",
    "stream_mae_delta",
)


def effective_window(n: int, window: int) -> int:
    """`window`, shrunk on short streams so at least two windows fit (never below 3 requests)."""
    return max(3, min(int(window), n // 2)) if n >= 6 else n


def window_starts(n: int, window: int, step: int) -> list[int]:
    """Starts of rolling windows of `window` requests every `step`, the last one flush with the end."""
    if n < window:
        return []
    starts = list(range(0, n - window + 1, max(1, int(step))))
    return starts if starts[-1] == n - window else [*starts, n - window]


def labels_seen_curves(
    stream_predictions: pd.DataFrame,
    *,
    window: int = 30,
    step: int = 5,
    baseline: str = "static",
    heads: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per (head, window) of the non-validation stream requests in arrival order."""
    if window < 3 or step < 1:
        raise ConfigError(f"curves: window={window} must be >= 3 and step={step} >= 1")
    sp = stream_predictions
    if "is_val" in sp.columns:
        sp = sp[~sp["is_val"].astype(bool)]
    by_head = {h: g.sort_values(["arrival_s", "id"]) for h, g in sp.groupby("head", sort=False)}
    if baseline not in by_head:
        raise ConfigError(f"curves: baseline head {baseline!r} not in the stream ({sorted(by_head)})")
    base = by_head[baseline]
    n = len(base)
    w = effective_window(n, window)
    y = base["y_true"].to_numpy(dtype=np.float64)
    seen = base["labels_seen"].to_numpy(dtype=np.float64)
    p0 = base["y_pred"].to_numpy(dtype=np.float64)
    rows = []
    for h in heads if heads is not None else list(by_head):
        g = by_head[h]
        if list(g["id"]) != list(base["id"]):
            raise ConfigError(f"curves: head {h!r} saw a different stream than {baseline!r}")
        p = g["y_pred"].to_numpy(dtype=np.float64)
        for s in window_starts(n, w, step):
            sl = slice(s, s + w)
            rho, rho0 = spearman_or_nan(y[sl], p[sl]), spearman_or_nan(y[sl], p0[sl])
            mae, mae0 = _mae(y[sl], p[sl]), _mae(y[sl], p0[sl])
            rows.append(
                {
                    "head": h,
                    "window_start": s,
                    "n_requests": w,
                    "labels_seen": float(np.median(seen[sl])),
                    "labels_seen_min": float(seen[sl].min()),
                    "labels_seen_max": float(seen[sl].max()),
                    "stream_spearman": rho,
                    "stream_mae": mae,
                    "stream_spearman_delta": rho - rho0,
                    "stream_mae_delta": mae - mae0,
                }
            )
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))
