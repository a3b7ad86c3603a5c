"""The sampling-noise ceiling of each model's mean-of-k target, per dataset and pooled over datasets.

`ceiling_mean_k` (Spearman–Brown: √(k·r/(1+(k−1)·r)) from the mean pairwise Spearman r between two samples)
bounds the Spearman a perfect predictor of the expected length reaches against the mean of k samples; the
leave-one-out figure (one sample vs the mean of the other k−1) is the one RESEARCH.md quotes. Both are
estimates with a bootstrap-over-prompts CI (lengthpred.metrics.noise_ceiling).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from lengthpred.crossmodel.table import LengthTable
from lengthpred.metrics import is_undefined, noise_ceiling

POOLED = "pooled"  # the dataset label of rows over every dataset
COLUMNS = ["model", "dataset", "n", "k", "ceiling_mean_k", "ceiling_mean_k_lo", "ceiling_mean_k_hi",
           "ceiling_loo", "ceiling_pairwise_r", "capped_share"]


def _num(v: object) -> float:
    return float("nan") if v is None or is_undefined(v) else float(v)


def ceiling_row(table: LengthTable, model: str, ids: Sequence[str], dataset: str, *, n_boot: int,
                seed: int) -> dict[str, object]:
    """One (model, dataset) row of the ceiling table on the prompts of `ids` that model has."""
    have = table.ids_with(model, ids)
    row: dict[str, object] = {"model": model, "dataset": dataset, "n": len(have), "k": table.k}
    if not have:
        return row | {c: float("nan") for c in COLUMNS[4:]}
    s = table.per_sample(model, have)
    nc = noise_ceiling(list(s), k=table.k, n_boot=n_boot, seed=seed)
    lo, hi = nc.ci.get("ceiling_mean_k", (None, None))
    return row | {
        "ceiling_mean_k": _num(nc.ceiling_mean_k), "ceiling_mean_k_lo": _num(lo), "ceiling_mean_k_hi": _num(hi),
        "ceiling_loo": _num(nc.loo), "ceiling_pairwise_r": _num(nc.pairwise_r),
        "capped_share": float((s >= table.cap).mean()) if table.cap is not None else 0.0,
    }


def ceiling_table(table: LengthTable, ids: Sequence[str], dataset_of: Mapping[str, str], *, n_boot: int = 0,
                  seed: int = 0, pooled: bool = True) -> pd.DataFrame:
    """Rows per (model, dataset) over `ids`, plus a POOLED row per model when `pooled`."""
    datasets = sorted({dataset_of[i] for i in ids})
    rows = []
    for m in table.models:
        for ds in datasets:
            rows.append(ceiling_row(table, m, [i for i in ids if dataset_of[i] == ds], ds, n_boot=n_boot,
                                    seed=seed))
        if pooled:
            rows.append(ceiling_row(table, m, list(ids), POOLED, n_boot=n_boot, seed=seed))
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["n"] = df["n"].astype(int)
    return df


def ceiling_lookup(df: pd.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
    """(model, dataset) → that row as a dict (the tables read the ceiling beside each score from here)."""
    return {(r["model"], r["dataset"]): r for r in df.to_dict("records")}


def ceiling_range(df: pd.DataFrame, column: str = "ceiling_loo") -> pd.DataFrame:
    """Per dataset, the range over models of a ceiling column (the "code 0.67–0.92, Alpaca 0.96–0.99" line)."""
    d = df[df["dataset"] != POOLED].dropna(subset=[column])
    g = d.groupby("dataset")[column]
    return pd.DataFrame({"min": g.min(), "max": g.max(), "n_models": g.size()}).reset_index().assign(
        column=column).replace({np.nan: None})
