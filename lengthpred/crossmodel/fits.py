"""Fit every head once per fit target (a model's lengths, or the mean over models) and predict every test prompt.

Each fit is `lengthpred.heads.run_training` on the target's own train split, selecting the head config's
`select:` on the target's own val split. It is handed the whole test split (labelled with the all-models
mean only to pass its checks; its scores against that label are dropped), so one call predicts every test
prompt, and scoring against each model's lengths happens afterwards (lengthpred.crossmodel.scoring): the
diagonal of the transfer matrix is the model's own fit, the rest is transfer.

A spec with `within=True` is fitted once per dataset (that dataset's train and val prompts of the target)
and predicts that dataset's test prompts only: the baselines whose pooled fit would rank prompts inside one
dataset by a slope learnt across datasets (prompt_len is monotone in prompt tokens, so within one dataset
its pooled fit scores ±|ρ| with the sign of the pooled slope, whatever that dataset's own slope is). Its
label is `<head> (within dataset)`; a spec scored pooled only is labelled `<head> (pooled fit)`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from threadpoolctl import threadpool_limits

from lengthpred.crossmodel.fit_cache import FitCache
from lengthpred.crossmodel.inputs import PromptInputs
from lengthpred.crossmodel.table import ALL_MODELS, LengthTable, short_model
from lengthpred.errors import DataError
from lengthpred.heads import HeadSettings, run_training
from lengthpred.seeds import POINT_COLUMNS, seed_columns

log = logging.getLogger(__name__)
WITHIN = "(within dataset)"
POOLED_FIT = "(pooled fit)"
FIT_COLUMNS = ["head", "fit", "status", "n_train", "n_val", "selected", "val_spearman", "n_seeds",
               "n_parameters", "fit_seconds", "from_cache"]


@dataclass(frozen=True)
class HeadSpec:
    """One head: its settings (conf/head/<name>.yaml with the run's overrides), the feature column it reads
    (None: no prefill feature) and the fit targets (model names or ALL_MODELS) it is fitted on."""

    name: str
    settings: HeadSettings
    feature: str | None
    targets: tuple[str, ...]
    within: bool = False
    pooled_only: bool = False

    @property
    def label(self) -> str:
        """The head's name in fits, predictions and tables."""
        if self.within:
            return f"{self.name} {WITHIN}"
        return f"{self.name} {POOLED_FIT}" if self.pooled_only else self.name


def _fit(spec: HeadSpec, target: str, inputs: PromptInputs, table: LengthTable, split: Mapping[str, Sequence[str]],
         min_train: int) -> tuple[dict[str, Any], pd.DataFrame | None]:
    """One run_training call on `split`'s prompts: (fit record, predictions on its test prompts or None)."""
    rec: dict[str, Any] = {"head": spec.label, "fit": target, "status": "fitted"}
    train = inputs.labeled(table, target, split["train"], spec.feature)
    val = inputs.labeled(table, target, split["val"], spec.feature)
    rec |= {"n_train": len(train), "n_val": len(val)}
    if len(train) < min_train:
        return rec | {"status": f"not fitted ({len(train)} train < {min_train})"}, None
    test = inputs.labeled(table, ALL_MODELS, split["test"], spec.feature)
    t0 = time.perf_counter()
    try:
        with threadpool_limits(limits=1, user_api="blas"):  # many small fits on busy cores (heads.cross)
            head, m, preds = run_training(spec.name, spec.settings, train, val if len(val) else None, test,
                                          split="test", n_seeds=spec.settings.n_seeds)
    except DataError as e:
        log.warning("%s on %s: not fitted (%s)", spec.label, short_model(target), e)
        return rec | {"status": f"not fitted: {e}"}, None
    rec |= {"selected": str(m["selected"] or ""), "val_spearman": m["val_spearman"],
            "n_seeds": int(m.get("n_seeds", 1)), "n_parameters": m["n_parameters"],
            "fit_seconds": round(time.perf_counter() - t0, 2)}
    if m.get("within_bin") is not None:  # each seed's within-bin reading (chosen on val under "validation")
        rec["within_bin"] = ", ".join(str(s.get("within_bin")) for s in m.get("seeds") or [m])
    points = [c for c in POINT_COLUMNS.values() if c in preds.columns]  # median and mean (MAE scores the median)
    seeds = [*seed_columns(preds.columns), *(c for k in POINT_COLUMNS for c in seed_columns(preds.columns, k))]
    keep = ["id", "y_pred", *points, *seeds]
    return rec, preds[keep].assign(head=spec.label, fit=target)


def fit_one(spec: HeadSpec, target: str, inputs: PromptInputs, table: LengthTable,
            split: Mapping[str, Sequence[str]], min_train: int) -> tuple[dict[str, Any], pd.DataFrame | None]:
    """(fit record, predictions on every test prompt or None when the fit could not run); a `within` spec
    gets one fit per dataset, its record summing counts and naming the datasets it could not fit."""
    if not spec.within:
        return _fit(spec, target, inputs, table, split, min_train)
    ds_of = dict(zip(inputs.ids, inputs.datasets, strict=True))
    parts = []
    for ds in sorted({ds_of[i] for part in split.values() for i in part}):
        sub = {k: [i for i in v if ds_of[i] == ds] for k, v in split.items()}
        rec, preds = _fit(spec, target, inputs, table, sub, min_train)
        parts.append((ds, rec, preds))
    fitted = [(ds, r) for ds, r, p in parts if p is not None]
    missing = [f"{ds}: {r['status']}" for ds, r, p in parts if p is None]
    rec = {"head": spec.label, "fit": target,
           "status": ("fitted" if fitted else "not fitted") + (f" (not in {'; '.join(missing)})" if missing else ""),
           "n_train": sum(r["n_train"] for _, r, _ in parts), "n_val": sum(r["n_val"] for _, r, _ in parts)}
    if fitted:
        rec |= {"selected": "; ".join(f"{ds}: {r['selected']}" for ds, r in fitted if r["selected"]),
                "n_seeds": max(r["n_seeds"] for _, r in fitted),
                "n_parameters": sum(r["n_parameters"] for _, r in fitted),
                "fit_seconds": round(sum(r["fit_seconds"] for _, r in fitted), 2)}
    frames = [p for _, _, p in parts if p is not None]
    return rec, pd.concat(frames, ignore_index=True) if frames else None


def fit_all(specs: Sequence[HeadSpec], inputs: PromptInputs, table: LengthTable,
            split: Mapping[str, Sequence[str]], *, min_train: int = 20,
            cache: FitCache | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(fit records, predictions: one row per head × fit target × test prompt). With a `cache`, a fit whose
    content key is stored is read back instead of fitted (`from_cache` in its record), and each new fit is
    stored as soon as it finishes."""
    records, frames = [], []
    for spec in specs:
        for target in spec.targets:
            key = cache.key(spec, target, inputs, table, split, min_train) if cache is not None else None
            hit = cache.load(key) if cache is not None and key is not None else None
            if hit is None:
                rec, preds = fit_one(spec, target, inputs, table, split, min_train)
                if cache is not None and key is not None:
                    cache.store(key, rec, preds)
            else:
                rec, preds = hit
            rec = rec | {"from_cache": hit is not None}
            records.append(rec)
            if preds is not None:
                frames.append(preds)
            log.info("%s on %s: %s (%.1f s%s)", spec.label, short_model(target), rec["status"],
                     rec.get("fit_seconds") or 0.0, ", from the fit cache" if hit is not None else "")
    fits = pd.DataFrame(records).reindex(columns=FIT_COLUMNS)
    preds = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["head", "fit", "id", "y_pred"])
    return fits, preds
