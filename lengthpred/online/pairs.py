"""Cross-domain pairs as streams: assemble source/stream/test rows, run every head, tidy the outputs.

For a pair `src->tgt` of splits.json: the offline fit sees the pair's `train` ids (source domain(s)); the
stream is the target domain's in-domain `train` (+ `val`) ids in arrival order (a seeded shuffle); the
held-out test is the pair's `test` ids (the target's in-domain test). No id is in two of the three.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError, DataError
from lengthpred.online.stream import HeadSpec, StreamData, StreamResult, gain_over_static, run_stream

log = logging.getLogger(__name__)

TARGET_COLUMNS = ("y", "n_samples", "capped_frac")


def as_target_frame(targets: Any) -> pd.DataFrame:
    """Per-prompt targets indexed by id with columns y (tokens), n_samples, capped_frac, domain (optional).

    Accepts a DataFrame (an `id` column or index; the target in `y`, `target`, `length` or `mean`) or a
    mapping id → length.
    """
    if isinstance(targets, Mapping):
        df = pd.DataFrame({"y": pd.Series(targets, dtype=float)})
    elif isinstance(targets, pd.DataFrame):
        df = targets.set_index("id") if "id" in targets.columns else targets.copy()
        ycol = next((c for c in ("y", "target", "length", "mean") if c in df.columns), None)
        if ycol is None:
            raise DataError(f"targets frame has no target column (y/target/length/mean): {list(df.columns)}")
        df = df.rename(columns={ycol: "y"})
    else:
        raise DataError(
            f"targets must be a DataFrame or a mapping id -> length, got {type(targets).__name__}"
        )
    df.index = df.index.astype(str)
    if "n_samples" not in df.columns:
        df["n_samples"] = 1
    if "capped_frac" not in df.columns:
        df["capped_frac"] = 0.0
    return df


@dataclass
class PairStream:
    name: str
    shift: float
    data: StreamData
    split_test: str
    split_stream: str


def pair_stream(
    pair: Mapping[str, Any],
    indomain: Mapping[str, Mapping[str, list[str]]],
    features: Callable[[Sequence[str]], np.ndarray],
    targets: pd.DataFrame,
    *,
    stream_parts: Sequence[str] = ("train", "val"),
    shift_key: str = "length_wasserstein",
    seed: int = 0,
) -> PairStream:
    """One pair's rows; ids without a target are dropped (logged), a part left empty is a DataError."""
    tgt = pair["target"]
    if tgt not in indomain:
        raise DataError(f"pair {pair['name']}: target {tgt!r} has no in-domain split")
    stream_ids = sorted(i for p in stream_parts for i in indomain[tgt].get(p, []))
    random.Random(seed).shuffle(stream_ids)  # arrival order
    parts = {"source": list(pair["train"]), "stream": stream_ids, "test": list(pair["test"])}
    arrays: dict[str, Any] = {}
    for part, ids in parts.items():
        known = [i for i in ids if i in targets.index]
        if len(known) < len(ids):
            log.info(
                "pair %s %s: %d of %d ids have no target, dropped",
                pair["name"],
                part,
                len(ids) - len(known),
                len(ids),
            )
        if len(known) < 3:
            raise DataError(f"pair {pair['name']}: only {len(known)} {part} prompts with targets (need >= 3)")
        arrays[part] = (known, features(known), targets.loc[known, "y"].to_numpy(dtype=np.float64))
    data = StreamData(
        X_source=arrays["source"][1],
        y_source=arrays["source"][2],
        X_stream=arrays["stream"][1],
        y_stream=arrays["stream"][2],
        X_test=arrays["test"][1],
        y_test=arrays["test"][2],
        ids_stream=arrays["stream"][0],
        ids_test=arrays["test"][0],
    )
    shift = pair.get("shift", {})
    return PairStream(
        name=pair["name"],
        shift=float(shift.get(shift_key, np.nan)) if isinstance(shift, Mapping) else float(shift),
        data=data,
        split_test=f"cross/{pair['name']}/test",
        split_stream=f"cross/{pair['name']}/stream",
    )


def select_pairs(cross: Sequence[Mapping[str, Any]], names: Sequence[str] | None) -> list[Mapping[str, Any]]:
    if not names:
        return list(cross)
    by_name = {p["name"]: p for p in cross}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ConfigError(f"online.pairs: unknown pair(s) {missing}; valid: {sorted(by_name)}")
    return [by_name[n] for n in names]


def prediction_rows(ps: PairStream, res: StreamResult, targets: pd.DataFrame) -> pd.DataFrame:
    """Predictions-file rows (docs/DESIGN.md): final-state test predictions and at-arrival stream ones."""
    frames = []
    for split, df in ((ps.split_test, res.test_predictions), (ps.split_stream, res.stream_predictions)):
        t = targets.loc[df["id"].astype(str)]
        frames.append(
            pd.DataFrame(
                {
                    "head": df["head"].to_numpy(),
                    "split": split,
                    "id": df["id"].astype(str).to_numpy(),
                    "domain": t["domain"].astype(str).to_numpy() if "domain" in t else "",
                    "y_true": df["y_true"].to_numpy(dtype=float),
                    "y_pred": df["y_pred"].to_numpy(dtype=float),
                    "n_samples": t["n_samples"].to_numpy(dtype=int),
                    "capped_frac": t["capped_frac"].to_numpy(dtype=float),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def gains_table(summary: pd.DataFrame, heads: Sequence[str], baseline: str = "static") -> pd.DataFrame:
    """One row per (pair, head): Spearman deltas and % gains over the static readout, with shift size."""
    rows = []
    for (pair, shift), s in summary.groupby(["pair", "shift"], sort=False):
        for h in heads:
            if h in set(s["head"]) and baseline in set(s["head"]):
                rows.append({"pair": pair, "shift": shift, "head": h, **gain_over_static(s, h, baseline)})
    return pd.DataFrame(rows)


def run_pair(
    ps: PairStream, heads: Callable[[], dict[str, HeadSpec]], completion: Any, **kw: Any
) -> StreamResult:
    """`heads` is a factory so every pair starts from fresh estimators."""
    res = run_stream(heads(), ps.data, completion, **kw)
    for df in (res.curves, res.summary):
        df.insert(0, "shift", ps.shift)
        df.insert(0, "pair", ps.name)
    return res
