"""Cross-domain pairs as streams: assemble source/stream/test rows, run every head, tidy the outputs.

For a pair `src->tgt` of splits.json: the offline fit sees the pair's `train` ids (source domain(s)); the
stream is the target domain's in-domain `train` (+ `val`) ids in arrival order (a seeded shuffle); the
held-out test is the pair's `test` ids (the target's in-domain test). No id is in two of the three.

The stream depends on the target only (arrival order, which sample each completion reveals): every pair
with that target replays identical work, so their differences come from the source readout alone. The
`val` part, interleaved in the stream, chooses λ (`lengthpred.online.select`). The pair's shift is
measured on served lengths, source train vs target stream (`lengthpred.online.labels.served_shift`);
splits.json's `shift_key` field is kept beside it as `prompt_shift`.
"""

from __future__ import annotations

import logging
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError, DataError
from lengthpred.names import SplitName
from lengthpred.online.labels import RevealedLabels, reveal_samples, served_shift
from lengthpred.online.stream import HeadSpec, StreamData, StreamResult, gain_over_static, run_stream

log = logging.getLogger(__name__)

@dataclass
class PairStream:
    name: str
    shift: float  # served-length shift: source train vs target stream
    data: StreamData
    split_test: str
    split_stream: str  # the stream's requests that did not choose λ
    split_val: str = ""  # the stream's validation requests (they chose λ)
    source: str = ""
    target: str = ""
    prompt_shift: float = float("nan")  # splits.json's shift field (`shift_key`)
    labels: RevealedLabels | None = None


def target_rng(seed: int, target: str) -> np.random.Generator:
    """The stream's randomness (arrival order, revealed samples): a function of (seed, target) only."""
    return np.random.default_rng([int(seed), zlib.crc32(str(target).encode())])


def pair_stream(
    pair: Mapping[str, Any],
    indomain: Mapping[str, Mapping[str, list[str]]],
    features: Callable[[Sequence[str]], np.ndarray],
    targets: pd.DataFrame,
    *,
    stream_parts: Sequence[str] = ("train", "val"),
    val_part: str | None = "val",
    shift_key: str = "length_wasserstein",
    seed: int = 0,
) -> PairStream:
    """One pair's rows; ids without a target are dropped (logged), a part left empty is a DataError."""
    tgt = pair["target"]
    if tgt not in indomain:
        raise DataError(f"pair {pair['name']}: target {tgt!r} has no in-domain split")
    if val_part is not None and val_part not in stream_parts:
        raise ConfigError(
            f"online.val_part={val_part!r} must be one of online.stream_parts {list(stream_parts)}"
        )
    rng = target_rng(seed, tgt)
    stream_ids = sorted(i for p in stream_parts for i in indomain[tgt].get(p, []))
    random.Random(int(rng.integers(2**31))).shuffle(stream_ids)  # arrival order
    val_ids = set(indomain[tgt].get(val_part, [])) if val_part is not None else set()
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
    ids_stream = arrays["stream"][0]
    labels = reveal_samples(targets, ids_stream, rng)
    data = StreamData(
        X_source=arrays["source"][1],
        y_source=arrays["source"][2],
        X_stream=arrays["stream"][1],
        y_stream=labels.y,
        X_test=arrays["test"][1],
        y_test=arrays["test"][2],
        ids_stream=ids_stream,
        ids_test=arrays["test"][0],
        y_stream_mean=labels.y_mean,
        is_val=np.array([i in val_ids for i in ids_stream], dtype=bool),
    )
    shift = pair.get("shift", {})
    return PairStream(
        name=pair["name"],
        shift=served_shift(targets, arrays["source"][0], ids_stream),
        data=data,
        split_test=str(SplitName.cross(pair["name"], "test")),
        split_stream=str(SplitName.cross(pair["name"], "stream")),
        split_val=str(SplitName.cross(pair["name"], "stream_val")),
        source=str(pair.get("source", SplitName.cross(pair["name"], "test").source)),
        target=str(tgt),
        prompt_shift=float(shift.get(shift_key, np.nan)) if isinstance(shift, Mapping) else float(shift),
        labels=labels,
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
    """Predictions-file rows (docs/DESIGN.md): final-state test predictions (target: the prompt's statistic
    over its samples) and at-arrival stream ones (target: the one revealed sample, `n_samples` 1), the
    stream split in two: `stream` (scored) and `stream_val` (chose λ)."""
    capped = dict(zip(ps.data.ids_stream, ps.labels.capped, strict=True)) if ps.labels is not None else {}
    sp = res.stream_predictions
    val = sp["is_val"].to_numpy(dtype=bool) if "is_val" in sp.columns else np.zeros(len(sp), dtype=bool)
    frames = []
    for split, df, stream in (
        (ps.split_test, res.test_predictions, False),
        (ps.split_stream, sp[~val], True),
        (ps.split_val or ps.split_stream, sp[val], True),
    ):
        if df.empty:
            continue
        ids = df["id"].astype(str)
        t = targets.loc[ids]
        frames.append(
            pd.DataFrame(
                {
                    "head": df["head"].to_numpy(),
                    "split": split,
                    "id": ids.to_numpy(),
                    "domain": t["domain"].astype(str).to_numpy() if "domain" in t else "",
                    "y_true": df["y_true"].to_numpy(dtype=float),
                    "y_pred": df["y_pred"].to_numpy(dtype=float),
                    "n_samples": 1 if stream else t["n_samples"].to_numpy(dtype=int),
                    "capped_frac": (
                        np.array([float(capped.get(i, 0.0)) for i in ids])
                        if stream
                        else t["capped_frac"].to_numpy(dtype=float)
                    ),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def gains_table(summary: pd.DataFrame, heads: Sequence[str], baseline: str = "static") -> pd.DataFrame:
    """One row per (pair, head): Spearman differences from the static readout, with the shift size."""
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
        label_pair(df, ps)
    return res


def label_pair(df: pd.DataFrame, ps: PairStream) -> pd.DataFrame:
    """Insert the pair's name, source, target and shift as the first columns (in place)."""
    for col, v in (("shift", ps.shift), ("target", ps.target), ("source", ps.source), ("pair", ps.name)):
        if col not in df.columns:
            df.insert(0, col, v)
    return df
