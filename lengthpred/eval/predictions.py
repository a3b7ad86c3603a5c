"""Read and validate `predictions.parquet` files (docs/DESIGN.md "Predictions file")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.errors import DataError

PREDICTION_COLUMNS = ("head", "split", "id", "domain", "y_true", "y_pred", "n_samples", "capped_frac")
PREDICTIONS_NAME = "predictions.parquet"


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
