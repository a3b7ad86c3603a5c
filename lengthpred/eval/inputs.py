"""Readers for the other stages' outputs that tables and plots use, each with a fixed, checked schema.

- scheduling results (T5; lengthpred/sched/sweep/experiment.py): `sched_results.csv` and `sched_gains.csv`, long:
  `[hardware,] policy, predictor, load, metric, value[, ci_low, ci_high]`; a NaN interval (one seed) is
  shown without a CI, a NaN value or the word `undefined` as undefined
- scheduling latencies (latency CDF plot): `policy, predictor, load, latency` (one row per request;
  per-token latency in seconds)
- adaptation curves (plot): `head, n_updates` + metric columns (`test_spearman`, `stream_spearman`, …) and
  a `pair` column, or one `curves.csv` per pair directory (the directory name is the pair)
- costs (T6): JSON list of objects or CSV, one row per head: `head` + any of `n_parameters`,
  `extraction_overhead_pct`, `predict_latency_ms`, `update_latency_ms` (+ other numeric columns)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from lengthpred.errors import DataError
from lengthpred.metrics import UNDEFINED


def _read_table(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"no such file: {p}")
    if p.suffix == ".parquet":
        return pd.read_parquet(p)
    if p.suffix == ".json":
        blob = json.loads(p.read_text())
        rows = blob.get("rows", blob) if isinstance(blob, dict) else blob
        if not isinstance(rows, list):
            raise DataError(f"{p}: expected a JSON list of rows (or {{'rows': [...]}})")
        return pd.DataFrame(rows)
    return pd.read_csv(p)


def _require(df: pd.DataFrame, cols: Sequence[str], path: str | Path, what: str) -> pd.DataFrame:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DataError(f"{path}: {what} file lacks column(s) {', '.join(missing)} (need {', '.join(cols)})")
    return df


def read_sched(path: str | Path) -> pd.DataFrame:
    df = _require(
        _read_table(path), ("policy", "predictor", "load", "metric", "value"), path, "scheduling results"
    )
    df["load"] = df["load"].astype(float)
    df["value"] = pd.Series([UNDEFINED if pd.isna(v) else _sched_value(v) for v in df["value"]], dtype=object)
    for c in ("ci_low", "ci_high"):
        if c in df.columns:
            df[c] = pd.Series([None if pd.isna(v) else _sched_value(v) for v in df[c]], dtype=object)
    return df


def _sched_value(v: object) -> object:
    """A number, or UNDEFINED for the word `undefined` (a share of an oracle gain that may be 0)."""
    return UNDEFINED if isinstance(v, str) and v.strip().lower() == "undefined" else float(v)


def read_latencies(path: str | Path) -> pd.DataFrame:
    return _require(
        _read_table(path), ("policy", "predictor", "load", "latency"), path, "scheduling latencies"
    )


def read_costs(path: str | Path) -> pd.DataFrame:
    return _require(_read_table(path), ("head",), path, "costs")


def read_curves(paths: Sequence[str | Path]) -> pd.DataFrame:
    frames = []
    for p in paths:
        df = _require(_read_table(p), ("head", "n_updates"), p, "adaptation curves")
        if "pair" not in df.columns:
            df["pair"] = Path(p).parent.name
        frames.append(df)
    if not frames:
        raise DataError("no adaptation curves files given")
    return pd.concat(frames, ignore_index=True)
