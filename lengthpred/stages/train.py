"""The train stage (`scripts/train.py`): load prompts/splits/targets/features for a config, train one head,
write metrics.json, the saved head and predictions.parquet into the run directory.

The in-domain fit runs over `head.n_seeds` seeds (lengthpred.seeds) and keeps the first seed's head. After
it, the same head (first seed only, with the hyperparameters chosen in-domain on validation under
`search.cross: reuse`, or searched anew on each source's val under `search`) is fitted per cross-domain pair
of splits.json (lengthpred.heads.cross) unless the root `cross_domain` key switches that off."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig
from threadpoolctl import threadpool_limits

from lengthpred.artefacts import HEAD, METRICS, PREDICTIONS
from lengthpred.data import load_prompts, load_splits
from lengthpred.errors import DataError
from lengthpred.eval.predictions import append_predictions
from lengthpred.heads.assemble import forelen_ids, indomain_ids, labeled_set, per_domain_split_names
from lengthpred.heads.base import HEADS, LabeledSet
from lengthpred.heads.cross import CROSS_MODES, cross_mode, fit_cross, select_cross
from lengthpred.heads.settings import HeadSettings
from lengthpred.heads.training import per_domain_scores, predictions_frame, run_training, score
from lengthpred.names import FeatureKey, SplitName
from lengthpred.stages.features import check_head_feature, ensure_features, feature_settings, truncated_counts
from lengthpred.stages.heads import (
    build,
    check_features_config,
    feature_names,
    feature_needs,
    head_name,
    plain,
)
from lengthpred.stages.readout_export import export_readout
from lengthpred.stages.resume import finished_before, mark_finished
from lengthpred.stages.targets import load_targets
from lengthpred.stages.tracking import tracked
from lengthpred.targets import target_frame

log = logging.getLogger("lengthpred.heads")


@dataclass
class StageInputs:
    """What a head's fits read for a config: prompt records, splits.json, targets and (for heads that read
    them) features; `labeled` turns ids into a LabeledSet with this head's feature(s) / token layer."""

    head: str
    feature: str | list[str] | None  # several: side by side (the concat head)
    token_layer: int | None
    by_id: dict[str, dict[str, Any]]
    splits: dict[str, Any]
    targets: pd.DataFrame
    features: Any = None

    def labeled(self, ids: Sequence[str], split: str) -> LabeledSet:
        return labeled_set(
            ids,
            self.by_id,
            self.targets,
            features=self.features,
            feature=self.feature,
            token_layer=self.token_layer,
            split=split,
        )

    def labeled_or_none(self, ids: Sequence[str], split: str) -> LabeledSet | None:
        """None when no id has a target (a pair with nothing to fit or score)."""
        return self.labeled(ids, split) if any(i in self.targets.index for i in ids) else None


def load_stage_inputs(cfg: DictConfig) -> StageInputs:
    """Check the head config against the features config, then load (extracting features when missing)."""
    hcfg = cfg.head
    build(hcfg)  # config errors first
    name = head_name(hcfg)
    kind = HEADS.get(name).input_kind
    names = feature_names(hcfg) if kind == "features" else []
    feature = names[0] if len(names) == 1 else (names or None)
    token_layer = int(hcfg.layer) if kind == "tokens" else None
    if kind == "features" and feature is None:
        raise DataError(f"head {name!r} reads features: set head.layer (or head.layers) and head.pooling")

    prompts = load_prompts(cfg.data)
    inputs = StageInputs(
        name,
        feature,
        token_layer,
        by_id={r["id"]: r for r in prompts},
        splits=load_splits(cfg.data),
        targets=target_frame(load_targets(cfg, prompts=prompts)),
    )
    if kind in ("features", "tokens", "n_prompt_tokens"):
        settings = feature_settings(cfg)
        for key in names or [None]:
            check_features_config(settings, key, token_layer, FeatureKey.parse(key).pool if key else None)
        inputs.features = ensure_features(cfg, prompts, need=feature_needs(hcfg))  # a new trace: only these
        for key in names:
            check_head_feature(inputs.features, key)
    return inputs


def train_from_config(cfg: DictConfig, out_dir: str | Path, tracker: Any = None) -> dict[str, Any]:
    """Fit `cfg.head` on the pooled in-domain train split, select on val, score on test (and ForeLen subsets);
    then per cross-domain pair (root `cross_domain`: true | false | single | mix)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    mode = cross_mode(cfg.cross_domain)
    data = load_stage_inputs(cfg)
    name, feature, splits = data.head, data.feature, data.splits
    klass = HEADS.get(name)
    ids = indomain_ids(splits)
    sets = {part: data.labeled(ids[part], part) for part in ("train", "val", "test")}
    settings = HeadSettings.from_mapping(plain(cfg.head) | {"feature": feature}, group=f"head {name}")
    with threadpool_limits(limits=1, user_api="blas"):  # see lengthpred.heads.cross: small fits, busy cores
        head, metrics, preds = run_training(
            name,
            settings,
            sets["train"],
            sets["val"],
            sets["test"],
            split=per_domain_split_names(sets["test"]),
            val_split=per_domain_split_names(sets["val"], "val"),  # for choices made later on val (stacking)
            n_seeds=settings.n_seeds,  # in-domain only: the cross pairs use the first seed
        )
    is_test = [SplitName.parse(v).part == "test" for v in preds["split"]]
    metrics["per_domain"] = per_domain_scores(preds[is_test])
    metrics["n_truncated"] = truncated_counts(data.features, {part: ids[part] for part in ("train", "val", "test")})
    frames = [preds]
    seen = set(ids["train"]) | set(ids["val"])
    for split_name, sub_ids in forelen_ids(splits, seen).items():
        sub = data.labeled(sub_ids, split_name)
        if len(sub):
            y_pred = head.predict_points(sub.inputs.x_for(klass.input_kind))
            frames.append(predictions_frame(name, split_name, sub, y_pred))
            metrics.setdefault("forelen", {})[split_name] = {**score(sub.y, y_pred), "n": len(sub)}
    cross_pairs = select_cross(splits.get("cross") or [], mode)
    if cross_pairs:
        cross = fit_cross(name, settings.for_cross(metrics.get("selected")), cross_pairs, data.labeled_or_none)
        if len(cross.predictions):
            frames.append(cross.predictions)
        metrics |= cross.metrics(mode)
        log.info(
            "%s: %d cross-domain pairs (%s) in %d fits, %.1f s; median spearman %s; %d skipped",
            name,
            len(cross.scores),
            CROSS_MODES[mode],
            cross.n_fits,
            cross.seconds,
            metrics["cross_spearman_median"],
            len(cross.skipped),
        )
    metrics |= {
        "model": str(cfg.model.name),
        "data": str(cfg.data.name),
        "experiment": cfg.experiment_name,
    }

    head.save(out_dir / HEAD)
    if name == "linear":  # the file `vllm serve` reads (lengthpred.vllm_plugin)
        export_readout(cfg, head, feature, sets["train"].inputs.x_for(klass.input_kind), out_dir)
    (out_dir / METRICS).write_text(json.dumps(_json_safe(metrics), indent=2) + "\n")
    append_predictions(out_dir / PREDICTIONS, pd.concat(frames, ignore_index=True), replace_prefix=SplitName.prefix("cross"))
    if tracker is not None:
        tracker.summary({k: v for k, v in metrics.items() if isinstance(v, (int, float, str)) or v is None})
    log.info(
        "%s: spearman %s, mae %s on %d test prompts",
        name,
        metrics["spearman"],
        metrics["mae"],
        metrics["n_test"],
    )
    return metrics


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (np.generic,)):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def run_train(cfg: DictConfig, out: str | Path) -> Path:
    """The train stage (scripts/train.py): `train_from_config` into `out`, logged to W&B, its scores printed.
    A head already finished in `out` with this config (a resumed pipeline stage) is skipped. Returns the folder."""
    if finished_before(out, cfg):
        print(f"{head_name(cfg.head)}: finished before with this config in {out}; skipped (resumed stage)")
        return Path(out)
    with tracked(cfg, "train") as tracker:
        m = train_from_config(cfg, out, tracker=tracker)
        tracker.log_reference(f"predictions-{m['head']}", "predictions", Path(out) / PREDICTIONS,
                              {"head": m["head"], "experiment": str(cfg.experiment_name)})
    mark_finished(out, cfg)
    print(
        f"{m['head']}: spearman {m['spearman']}, kendall {m['kendall']}, mae {m['mae']} "
        f"(n_train {m['n_train']}, n_test {m['n_test']}, {m['n_parameters']} parameters) → {out}"
    )
    return Path(out)
