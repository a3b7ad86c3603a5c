"""Sampled lengths as censored observations: every sample is a draw, a capped one says only "at least the cap".

`Observations` is the long format every distributional fit and score reads: one entry per sample with the
row (prompt) it belongs to, its length, whether it hit the cap (right-censored at `cap`), and the cap.
`from_trace` builds it from a reference trace's rows and meta line (whose `settings.max_new_tokens` is the
cap; a trace that does not record one is refused, since its capped samples could not be told apart), and
`recap` shortens the cap to build a setting where the truth is known (the trace re-capped at 256 against
its own 512-cap samples).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import DataError


@dataclass(frozen=True)
class Observations:
    """row: [N] int index of each sample's prompt; length: [N] tokens; capped: [N] bool; cap: the length cap."""

    row: np.ndarray
    length: np.ndarray
    capped: np.ndarray
    cap: float

    def __post_init__(self) -> None:
        if not (self.row.shape == self.length.shape == self.capped.shape) or self.row.ndim != 1:
            raise DataError("Observations: row, length and capped must be 1-D of one length")
        if not np.isfinite(self.cap) or self.cap <= 0:
            raise DataError(f"Observations: the cap must be a positive number of tokens, got {self.cap}")
        if np.any(self.length[self.capped] < self.cap):
            raise DataError("Observations: a capped sample is shorter than the cap")
        if np.any(self.length > self.cap):
            raise DataError(f"Observations: a sample is longer than the cap {self.cap:g}")

    def __len__(self) -> int:
        return self.row.size

    @property
    def n_rows(self) -> int:
        return int(self.row.max()) + 1 if self.row.size else 0

    @property
    def capped_frac(self) -> float:
        return float(self.capped.mean()) if self.row.size else 0.0


def recap(obs: Observations, cap: float) -> Observations:
    """The same samples under a shorter cap: lengths clipped at `cap`, capped where they reach it."""
    if cap > obs.cap:
        raise DataError(f"cannot re-cap at {cap:g}: the trace was capped at {obs.cap:g}, longer lengths are unknown")
    length = np.minimum(obs.length, cap)
    return Observations(obs.row, length, obs.capped | (obs.length >= cap), float(cap))


def trace_cap(meta: Mapping[str, Any], where: str = "trace") -> float:
    """The cap a reference trace was generated with (its meta's settings.max_new_tokens), or a DataError."""
    cap = (meta.get("settings") or {}).get("max_new_tokens")
    if cap is None:
        raise DataError(f"{where} records no cap (meta.settings.max_new_tokens): its capped samples are not censored "
                        "observations")
    return float(cap)


def from_trace(rows: pd.DataFrame, meta: Mapping[str, Any], ids: Sequence[str], where: str = "trace") -> Observations:
    """The samples of prompts `ids` (rows in that order) from a reference trace's (rows, meta)."""
    cap = trace_cap(meta, where)
    index = {str(i): k for k, i in enumerate(ids)}
    df = rows[rows["id"].astype(str).isin(index)]
    missing = set(index) - set(df["id"].astype(str))
    if missing:
        raise DataError(f"{where}: {len(missing)} requested prompts have no samples (e.g. {sorted(missing)[0]})")
    row = df["id"].astype(str).map(index).to_numpy(np.int64)
    capped = (df["finish_reason"] == "length").to_numpy()
    length = np.where(capped, cap, df["length"].to_numpy(np.float64))
    order = np.argsort(row, kind="stable")
    return Observations(row[order], length[order], capped[order], cap)


__all__ = ["Observations", "from_trace", "recap", "trace_cap"]
