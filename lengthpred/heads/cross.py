"""Cross-domain pairs offline: fit a head on each pair's source train split (selected on its val split, as
in-domain), predict the target's test split as `cross/<S>-><T>/test` rows of the predictions file.

Pairs with identical train and val ids (the same source; splits.py's `dedup_train` can make them differ
when a target's test shares a prompt text with the source) share one fit. A pair whose train or test set
fails validation (e.g. < 2 distinct test lengths) is skipped with a warning and counted, never fatal.
The fits are many and small, so BLAS runs on one thread: on 2 busy cores a 2-thread OpenBLAS spin-waited
36x slower on the demo's ridge fits (benchmarks/bench_heads_cross.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from lengthpred.errors import ConfigError, DataError
from lengthpred.heads.base import HEADS, LabeledSet
from lengthpred.heads.settings import HeadSettings
from lengthpred.heads.training import predictions_frame, run_training, score, validate_set
from lengthpred.names import SplitName

log = logging.getLogger("lengthpred.heads")

# the root config's `cross_domain`: true = every pair, false = none, or only single-source / mix pairs
CROSS_MODES = {"all": "every pair", "single": "single-source pairs", "mix": "mix pairs", "none": "no pair"}

# ids -> the split as a LabeledSet, or None when no id has a target
MakeSet = Callable[[Sequence[str], str], LabeledSet | None]


def cross_mode(value: Any) -> str:
    """Normalise the config value (bool, None or a CROSS_MODES name) to a CROSS_MODES name."""
    if value is None or value is False:
        return "none"
    if value is True:
        return "all"
    if isinstance(value, str) and value.lower() in CROSS_MODES:
        return value.lower()
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return "all" if value.lower() == "true" else "none"
    raise ConfigError(f"cross_domain={value!r}: use true, false or one of {sorted(CROSS_MODES)}")


def select_cross(pairs: Sequence[Mapping[str, Any]], mode: str) -> list[Mapping[str, Any]]:
    """The splits.json `cross` pairs a mode fits."""
    if mode == "none":
        return []
    if mode == "all":
        return list(pairs)
    return [p for p in pairs if (p.get("source") == "mix") == (mode == "mix")]


@dataclass
class CrossResult:
    """Predictions rows of every scored pair, per-pair scores, skipped pairs (name -> reason), cost."""

    predictions: pd.DataFrame
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    n_fits: int = 0
    fit_seconds: float = 0.0
    seconds: float = 0.0

    def metrics(self, mode: str) -> dict[str, Any]:
        """metrics.json keys: `cross` (per pair), `cross_skipped`, `cross_summary`, two flat scalars."""
        summary = self.summary(mode)
        return {
            "cross": self.scores,
            "cross_skipped": self.skipped,
            "cross_summary": summary,
            "cross_spearman_median": summary["spearman_median"],
            "n_cross_skipped": len(self.skipped),
        }

    def summary(self, mode: str) -> dict[str, Any]:
        """Counts, cost and the median Spearman over pairs (all, single-source, mix) for metrics.json."""

        def med(names: list[str]) -> float | None:
            v = [self.scores[n]["spearman"] for n in names if self.scores[n]["spearman"] is not None]
            return float(np.median(v)) if v else None

        single = [n for n in self.scores if not n.startswith("mix->")]
        mix = [n for n in self.scores if n.startswith("mix->")]
        return {
            "mode": mode,
            "n_pairs": len(self.scores) + len(self.skipped),
            "n_scored": len(self.scores),
            "n_skipped": len(self.skipped),
            "n_fits": self.n_fits,
            "fit_seconds": round(self.fit_seconds, 3),
            "seconds": round(self.seconds, 3),
            "spearman_median": med(list(self.scores)),
            "spearman_median_single": med(single),
            "spearman_median_mix": med(mix),
        }


def split_name(pair: Mapping[str, Any], part: str = "test") -> str:
    """`cross/<S>-><T>/<part>` (docs/DESIGN.md "Predictions file")."""
    return str(SplitName.cross(pair["name"], part))


def fit_cross(
    head_name: str,
    settings: HeadSettings,
    pairs: Sequence[Mapping[str, Any]],
    make_set: MakeSet,
    *,
    share: bool = True,
    blas_threads: int | None = 1,
) -> CrossResult:
    """Fit `head_name` per distinct (train, val) id lists of `pairs` (per pair when not `share`) with
    run_training's val-based selection, and score every pair's target test split."""
    with threadpool_limits(limits=blas_threads, user_api="blas"):
        return _fit_cross(head_name, settings, pairs, make_set, share=share)


def _fit_cross(
    head_name: str,
    settings: HeadSettings,
    pairs: Sequence[Mapping[str, Any]],
    make_set: MakeSet,
    *,
    share: bool,
) -> CrossResult:
    klass = HEADS.get(head_name)
    t_start = time.perf_counter()
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for p in pairs:
        key = (tuple(p["train"]), tuple(p.get("val") or ())) if share else (p["name"],)
        groups.setdefault(key, []).append(p)
    out = CrossResult(predictions=pd.DataFrame())
    frames: list[pd.DataFrame] = []

    def skip(pair: Mapping[str, Any], reason: str) -> None:
        log.warning("%s: cross pair %s skipped: %s", head_name, pair["name"], reason)
        out.skipped[pair["name"]] = reason

    for members in tqdm(list(groups.values()), desc=f"{head_name}: cross-domain fits", unit="fit"):
        tests: list[tuple[Mapping[str, Any], LabeledSet]] = []
        for p in members:
            try:
                test = make_set(p["test"], split_name(p))
                if test is None:
                    raise DataError(f"{split_name(p)}: no prompt has a target")
                validate_set(split_name(p), test, klass, need_ranking=True)
            except DataError as e:
                skip(p, str(e))
                continue
            tests.append((p, test))
        if not tests:
            continue
        first = tests[0][0]
        try:
            train = make_set(first["train"], split_name(first, "train"))
            if train is None:
                raise DataError(f"{split_name(first, 'train')}: no prompt has a target")
            val = make_set(first.get("val") or [], split_name(first, "val")) if first.get("val") else None
            head, m, _ = run_training(head_name, settings, train, val, tests[0][1], split=split_name(first))
        except DataError as e:
            for p, _ in tests:
                skip(p, str(e))
            continue
        out.n_fits += 1
        out.fit_seconds += m["fit_seconds"]
        for p, test in tests:
            y_pred = head.predict_points(test.inputs.x_for(klass.input_kind))
            frames.append(predictions_frame(head_name, split_name(p), test, y_pred))
            out.scores[p["name"]] = {
                **score(test.y, y_pred),
                "n_train": len(train),
                "n_val": m["n_val"],
                "n_test": len(test),
                "selected": m["selected"],
                "n_candidates": m["n_candidates"],  # 1 under search.cross: reuse (the in-domain choice)
                "val_spearman": m["val_spearman"],
                "fitted_with": first["name"],  # the pair whose fit this one shares (itself when alone)
                "fit_seconds": m["fit_seconds"],  # of that shared fit
            }
    if frames:
        out.predictions = pd.concat(frames, ignore_index=True)
    out.seconds = time.perf_counter() - t_start
    return out
