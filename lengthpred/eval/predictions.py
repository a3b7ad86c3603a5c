"""Read and validate `predictions.parquet` files (docs/DESIGN.md "Predictions file").

Optional columns: `y_pred_median` and `y_pred_mean` (a head's median and mean prediction beside its configured
`y_pred`; NaN where the head has no such point) and their per-seed twins; files written before them score
every metric on `y_pred`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.artefacts import PREDICTIONS
from lengthpred.errors import DataError
from lengthpred.seeds import POINT_COLUMNS, seed_columns

PREDICTION_COLUMNS = ("head", "split", "id", "domain", "y_true", "y_pred", "n_samples", "capped_frac")
PREDICTIONS_NAME = PREDICTIONS


def find_predictions(root: str | Path) -> list[Path]:
    """Every predictions file under `root` (a run or experiment dir), sorted; a file path is returned as is."""
    root = Path(root)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise DataError(f"no such run or experiment directory: {root}")
    return sorted(root.rglob(PREDICTIONS_NAME))


def read_predictions(path: str | Path) -> pd.DataFrame:
    """One predictions file, checked: required columns, finite numbers, one row per (head, split, id)."""
    path = Path(path)
    try:
        df = pd.read_parquet(path)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read predictions parquet ({e})") from None
    missing = [c for c in PREDICTION_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{path}: predictions file lacks column(s) {', '.join(missing)}")
    for col in ("y_true", "y_pred", "capped_frac"):
        vals = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(vals)
        if bad.any():
            raise DataError(f"{path}: {int(bad.sum())} row(s) with a missing or non-finite {col}")
        df[col] = vals
    for col in point_columns(df.columns):  # NaN allowed: the head has no such point
        vals = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
        if np.isinf(vals).any():
            raise DataError(f"{path}: {int(np.isinf(vals).sum())} row(s) with an infinite {col}")
        df[col] = vals
    dup = df.duplicated(["head", "split", "id"])
    if dup.any():
        first = df.loc[dup, ["head", "split", "id"]].iloc[0].tolist()
        raise DataError(f"{path}: {int(dup.sum())} duplicate (head, split, id) row(s), e.g. {first}")
    for col in ("head", "split", "id", "domain"):
        df[col] = df[col].astype(str)
    return df


def append_predictions(path: Path, rows: pd.DataFrame, *, replace_prefix: str | None = None) -> pd.DataFrame:
    """Add rows to a predictions file, replacing earlier rows of the same (head, split, id); with
    `replace_prefix`, also every earlier row of these heads whose split starts with it (a rerun's stale
    pairs: ones now skipped or switched off)."""
    if path.is_file():
        old = pd.read_parquet(path)
        keys = pd.MultiIndex.from_frame(rows[["head", "split", "id"]])
        keep = ~pd.MultiIndex.from_frame(old[["head", "split", "id"]]).isin(keys)
        if replace_prefix is not None:
            keep &= ~(old["head"].isin(rows["head"].unique()) & old["split"].str.startswith(replace_prefix))
        rows = pd.concat([old[keep], rows], ignore_index=True)
    tmp = path.with_suffix(".tmp.parquet")
    rows.to_parquet(tmp, index=False)
    tmp.replace(path)
    return rows


def point_columns(columns: Sequence[str]) -> list[str]:
    """The point-prediction columns among `columns`: `y_pred_median`, `y_pred_mean` and their seed twins."""
    cols = [c for c in POINT_COLUMNS.values() if c in columns]
    return cols + [c for kind in POINT_COLUMNS for c in seed_columns(columns, kind)]


def scored_column(g: pd.DataFrame, point: str | None) -> str:
    """The column a metric rewarding `point` (lengthpred.metrics.Metric.rewards) scores in one (head, split)
    group: the head's median or mean where every row records it, `y_pred` otherwise (rank metrics, older
    files, online heads, and a head without that point)."""
    col = POINT_COLUMNS.get(point) if point is not None else None
    if col is not None and col in g.columns and np.isfinite(g[col].to_numpy(dtype=np.float64)).all():
        return col
    return "y_pred"
