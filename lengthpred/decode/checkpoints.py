"""Per-request test predictions at every checkpoint (`checkpoints.parquet`): what the simulator replays.

One row per (test answer, checkpoint t): the answer's id, length, capped flag and prompt tokens, the true
remaining length, and every predictor's remaining-length prediction at t (column `pred:<label>`; `prompt-only`
at t = 0 is the prompt head's total). `pred:best` repeats the decode head chosen on validation (the highest
mean-over-t validation Spearman), so a scheduler entry can name it without reading `chosen.json`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.artefacts import CHECKPOINT_PRED as PRED
from lengthpred.decode.readout import Curve
from lengthpred.decode.score import BASELINE
from lengthpred.decode.store import DecodeSet
from lengthpred.errors import ConfigError, DataError

BEST = "best"


def best_decode_head(chosen: Mapping[str, Mapping[str, Any]]) -> str:
    """The decode head with the highest validation mean-over-t Spearman (never the prompt-only baseline)."""
    scored = {k: float(v.get("val_mean_spearman", np.nan)) for k, v in chosen.items() if k != BASELINE}
    scored = {k: s for k, s in scored.items() if np.isfinite(s)}
    if not scored:
        raise DataError("decode curve: no decode head has a finite validation score")
    return max(scored, key=scored.__getitem__)


def checkpoint_frame(ds: DecodeSet, curve: Curve, every: int) -> pd.DataFrame:
    """The test rows of `curve` at multiples of `every` (the scheduler's checkpoints; the curve's extra
    `also_at` points off that grid are left out), with `pred:best` added."""
    if BEST in curve.predictions:
        raise ConfigError(f"decode.curve.heads: {BEST!r} names the head chosen on validation; rename that head")
    keep = curve.t % every == 0
    a = ds.row_prompt[curve.rows[keep]]
    df = pd.DataFrame({"id": np.asarray(ds.ids)[a], "t": curve.t[keep].astype(np.int64),
                       "length": ds.length[a], "capped": ds.capped[a], "prompt_tokens": ds.prompt_tokens[a],
                       "remaining": curve.y[keep]})
    for label, p in curve.predictions.items():
        df[PRED + label] = np.asarray(p, dtype=np.float64)[keep]
    df[PRED + BEST] = df[PRED + best_decode_head(curve.chosen)]
    return df.sort_values(["id", "t"], kind="stable").reset_index(drop=True)
