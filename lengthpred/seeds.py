"""Heads fitted over several seeds: the seed list, the predictions-file columns, and mean ± sd over seeds.

An MLP head's test score depends on its initialisation and batch order, so `scripts/train.py` fits the
heads whose config sets `n_seeds > 1` once per seed (`random_state`, `random_state + 1`, …; each seed runs
the whole fit-and-select-on-val procedure). The predictions file keeps the first seed's predictions in
`y_pred` (the saved head, the one T5 schedules with and T6 times) and every seed's, the first included, in
`y_pred_seed0`, `y_pred_seed1`, …; `scripts/evaluate.py` turns those into `<metric>_seed_mean`,
`<metric>_seed_sd` and `n_seeds` rows beside the bootstrap CI of the first seed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

SEED_COLUMN_PREFIX = "y_pred_seed"
_SEED_COLUMN = re.compile(rf"^{SEED_COLUMN_PREFIX}(\d+)$")
SEED_METRICS = ("spearman", "mae")  # the metrics T1 shows as mean ± sd over seeds
# a head's median and mean predictions beside `y_pred` (lengthpred.heads.base.Points; NaN: no such point)
POINT_COLUMNS = {"median": "y_pred_median", "mean": "y_pred_mean"}


def seed_list(first: int, n_seeds: int) -> list[int]:
    """`n_seeds` consecutive seeds from the configured one (so n_seeds=1 is the single-seed run)."""
    if int(n_seeds) < 1:
        raise ValueError(f"n_seeds={n_seeds!r} must be >= 1")
    return [int(first) + i for i in range(int(n_seeds))]


def seed_column(i: int, point: str | None = None) -> str:
    """The predictions-file column of the i-th seed (0 = the first, whose predictions are also `y_pred`);
    with `point` ("median" | "mean"), that seed's point prediction (`y_pred_median_seed0`, …)."""
    if point is None:
        return f"{SEED_COLUMN_PREFIX}{int(i)}"
    return f"{POINT_COLUMNS[point]}_seed{int(i)}"


def seed_columns(columns: Iterable[str], point: str | None = None) -> list[str]:
    """The seed columns among `columns` (of `point`'s predictions with a point), in seed order."""
    pattern = _SEED_COLUMN if point is None else re.compile(rf"^{POINT_COLUMNS[point]}_seed(\d+)$")
    found = [(int(m.group(1)), c) for c in columns if (m := pattern.match(str(c)))]
    return [c for _, c in sorted(found)]


def seed_metric_name(metric: str, stat: str) -> str:
    """`spearman_seed_mean` / `spearman_seed_sd`: the results.csv metric of a statistic over seeds."""
    if stat not in ("mean", "sd"):
        raise ValueError(f"stat must be 'mean' or 'sd', not {stat!r}")
    return f"{metric}_seed_{stat}"


@dataclass(frozen=True)
class SeedSpread:
    """Mean and sample standard deviation (ddof 1) of one metric over seeds; NaN where undefined."""

    mean: float
    sd: float
    n: int


def spread(values: Sequence[float | None]) -> SeedSpread:
    """Mean ± sd of per-seed values; undefined (None/NaN) values make the spread undefined (NaN)."""
    v = np.array([math.nan if x is None else float(x) for x in values], dtype=np.float64)
    if v.size == 0 or not np.isfinite(v).all():
        return SeedSpread(math.nan, math.nan, int(v.size))
    sd = float(v.std(ddof=1)) if v.size > 1 else math.nan
    return SeedSpread(float(v.mean()), sd, int(v.size))
