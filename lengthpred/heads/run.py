"""The `scripts/train.py` stage: load prompts/splits/targets/features for a config, train one head, write
metrics.json, the saved head and predictions.parquet into the run directory.

The in-domain fit runs over `head.n_seeds` seeds (lengthpred.seeds; default 1) and keeps the first seed's
head. After it, the same head (same config and val-based selection, first seed only) is fitted per
cross-domain pair of splits.json (lengthpred.heads.cross) unless the root `cross_domain` key switches that
off."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from threadpoolctl import threadpool_limits

from lengthpred.errors import DataError
from lengthpred.heads.assemble import (
    forelen_ids,
    indomain_ids,
    labeled_set,
    per_domain_split_names,
    target_table,
    targets_from_prompts,
)
from lengthpred.heads.base import HEADS, LabeledSet
from lengthpred.heads.cross import CROSS_MODES, cross_mode, fit_cross, select_cross
from lengthpred.heads.training import build_head, head_params, predictions_frame, run_training, score
from lengthpred.names import FeatureKey, SplitName
from lengthpred.seeds import SEED_METRICS, seed_columns, seed_metric_name, spread

log = logging.getLogger("lengthpred.heads")
PREDICTIONS = "predictions.parquet"


def feature_name(head_cfg: Any) -> str | None:
    """`hs.L{layer}.{pooling}` of a head config, or None for heads that read no hidden state."""
    if head_cfg.get("layer") is None or head_cfg.get("pooling") is None:
        return None
    return str(FeatureKey(int(head_cfg.layer), str(head_cfg.pooling)))


def check_features_config(settings: Any, feature: str | None, token_layer: int | None, pooling: str) -> None:
    """Refuse, before any extraction or training, a head that asks for what the features config omits."""
    if feature is not None and pooling not in settings.pool_names:
        raise DataError(
            f"head.pooling={pooling!r} is not extracted by this features config; pools: {settings.pool_names}"
        )
    if token_layer is not None:
        if token_layer not in settings.token_layers:
            raise DataError(
                f"this head reads token-level states of layer {token_layer}, but features.token_layers="
                f"{list(settings.token_layers)}; add it (e.g. features.token_layers=[{token_layer}])"
            )
        if not (settings.needs_entropy and settings.needs_attention):
            raise DataError("a learned fusion needs token entropy and attention: keep features.fused non-empty")


def load_targets_for(cfg: DictConfig, prompts: Any) -> pd.DataFrame:
    """The serving model's targets (lengthpred.targets) or, for a trace / CASTILLO data config, the
    lengths recorded in the prompt table."""
    if cfg.data.get("kind") == "trace" or cfg.get("targets_from") == "prompts":
        return targets_from_prompts(prompts, str(cfg.data.get("length_stat", "mean")))
    from lengthpred.targets import load_targets

    return target_table(load_targets(cfg))


def append_predictions(path: Path, rows: pd.DataFrame, *, replace_prefix: str | None = None) -> pd.DataFrame:
    """Add rows to a predictions file, replacing earlier rows of the same (head, split, id); with
    `replace_prefix`, also every earlier row of these heads whose split starts with it (a rerun's stale
    pairs: ones now skipped or switched off)."""
    if path.is_file():
        old = pd.read_parquet(path)
        keys = pd.MultiIndex.from_frame(rows[["head", "split", "id"]])
        keep = ~pd.MultiIndex.from_frame(old[["head", "split", "id"]]).isin(keys)
        if replace_prefix is not None:
            keep &= ~(old["head"].isin(rows["head"].unique()) & old["split"].str.startswith(replace_prefix))
        rows = pd.concat([old[keep], rows], ignore_index=True)
    tmp = path.with_suffix(".tmp.parquet")
    rows.to_parquet(tmp, index=False)
    tmp.replace(path)
    return rows


@dataclass
class StageInputs:
    """What a head's fits read for a config: prompt records, splits.json, targets and (for heads that read
    them) features; `labeled` turns ids into a LabeledSet with this head's feature / token layer."""

    head: str
    feature: str | None
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
    from lengthpred.data import load_prompts, load_splits

    hcfg = cfg.head
    name = str(hcfg.name)
    klass = HEADS.get(name)
    build_head(name, **head_params(OmegaConf.to_container(hcfg, resolve=True)))  # config errors first
    feature = feature_name(hcfg) if klass.input_kind == "features" else None
    token_layer = int(hcfg.layer) if klass.input_kind == "tokens" else None
    if klass.input_kind == "features" and feature is None:
        raise DataError(f"head {name!r} reads features: set head.layer and head.pooling")

    prompts = load_prompts(cfg.data)
    inputs = StageInputs(
        name,
        feature,
        token_layer,
        by_id={r["id"]: r for r in prompts},
        splits=load_splits(cfg.data),
        targets=load_targets_for(cfg, prompts),
    )
    if klass.input_kind in ("features", "tokens", "n_prompt_tokens"):
        from lengthpred.features import ensure_features, settings_from_cfg

        check_features_config(settings_from_cfg(cfg), feature, token_layer, str(hcfg.get("pooling")))
        inputs.features = ensure_features(cfg, prompts, need=[feature_need(hcfg)])  # a new trace: only this
    return inputs


def feature_need(hcfg) -> tuple[int | None, str | None]:
    """The (layer, pooling) a head config reads from a feature store (`FeatureSettings.only`):
    (layer, "learned") for token-level heads, (None, None) for the scalar columns alone."""
    kind = HEADS.get(str(hcfg.name)).input_kind
    if kind == "tokens":
        return int(hcfg.layer), "learned"
    if kind == "features":
        return int(hcfg.layer), str(hcfg.pooling)
    return None, None


def train_from_config(cfg: DictConfig, out_dir: str | Path, tracker: Any = None) -> dict[str, Any]:
    """Fit `cfg.head` on the pooled in-domain train split, select on val, score on test (and ForeLen subsets);
    then per cross-domain pair (root `cross_domain`: true | false | single | mix; default true)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    mode = cross_mode(cfg.get("cross_domain", True))
    data = load_stage_inputs(cfg)
    name, feature, splits = data.head, data.feature, data.splits
    klass = HEADS.get(name)
    ids = indomain_ids(splits)
    sets = {part: data.labeled(ids[part], part) for part in ("train", "val", "test")}
    head_cfg = OmegaConf.to_container(cfg.head, resolve=True) | {"feature": feature}
    with threadpool_limits(limits=1, user_api="blas"):  # see lengthpred.heads.cross: small fits, busy cores
        head, metrics, preds = run_training(
            name,
            head_cfg,
            sets["train"],
            sets["val"],
            sets["test"],
            split=per_domain_split_names(sets["test"]),
            n_seeds=int(head_cfg.get("n_seeds") or 1),  # in-domain only: the cross pairs use the first seed
        )
    metrics["per_domain"] = _per_domain(preds)
    frames = [preds]
    seen = set(ids["train"]) | set(ids["val"])
    for split_name, sub_ids in forelen_ids(splits, seen).items():
        sub = data.labeled(sub_ids, split_name)
        if len(sub):
            y_pred = head.predict(sub.inputs.x_for(klass.input_kind))
            frames.append(predictions_frame(name, split_name, sub, y_pred))
            metrics.setdefault("forelen", {})[split_name] = {**score(sub.y, y_pred), "n": len(sub)}
    cross_pairs = select_cross(splits.get("cross") or [], mode)
    if cross_pairs:
        cross = fit_cross(name, head_cfg, cross_pairs, data.labeled_or_none)
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
        "experiment": cfg.get("experiment_name"),
    }

    head.save(out_dir / "head")
    (out_dir / "metrics.json").write_text(json.dumps(_json_safe(metrics), indent=2) + "\n")
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


def _per_domain(preds: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Scores per domain (first seed), with mean ± sd over seeds when the frame has seed columns."""
    out = {}
    cols = seed_columns(preds.columns)
    for dom, g in preds.groupby("domain"):
        m: dict[str, Any] = {}
        if g["y_true"].nunique() > 1:
            m = score(g["y_true"].to_numpy(), g["y_pred"].to_numpy())
            per_seed = [score(g["y_true"].to_numpy(), g[c].to_numpy()) for c in cols]
            for metric in SEED_METRICS if len(cols) > 1 else ():
                sp = spread([s[metric] for s in per_seed])
                m[seed_metric_name(metric, "mean")] = sp.mean
                m[seed_metric_name(metric, "sd")] = sp.sd
        out[str(dom)] = {**m, "n": len(g)}
    return out


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
