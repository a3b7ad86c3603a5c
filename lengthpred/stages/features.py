"""A config's feature store: its settings, its folder (cache key), `ensure_features` (find or extract) and
`run_extract` (the extract stage, scripts/extract.py).

`data/features/<model>/<cache-key>/`, the key a hash of the settings, the model identity and the prompts
(lengthpred.features.settings.cache_key): the same features are found whatever split or stage asks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, open_dict

from lengthpred.data import load_prompts
from lengthpred.errors import ConfigError, DataError, LengthpredError
from lengthpred.features import extract as fx
from lengthpred.features.budget import trim_for_model
from lengthpred.features.maintenance import compact_store, verify_store
from lengthpred.features.settings import FeatureSettings, cache_key, prompts_hash
from lengthpred.features.store import MANIFEST, FeatureSet, load_features
from lengthpred.models.checkpoint import layer_shape
from lengthpred.stages.distributed import launcher_shard, process_group
from lengthpred.stages.locations import data_dir
from lengthpred.stages.model import load_model, model_device, model_dtype
from lengthpred.stages.outputs import declare_outputs
from lengthpred.stages.shards import check_shard_fits, parse_shard
from lengthpred.stages.tracking import tracked

log = logging.getLogger(__name__)
_SAID: set[str] = set()  # the trim line, once per process


def feature_settings(cfg: Any) -> FeatureSettings:
    """FeatureSettings from a whole config: `features.max_prompt_tokens: null` takes generation's budget; for a
    large model the default feature set is trimmed (`features.trim`, lengthpred.features.budget), said once."""
    settings = _settings(cfg)
    shape = layer_shape(instantiate(cfg.model)) if cfg.features.get("trim", True) else None
    if shape is None:
        return settings
    settings, said = trim_for_model(settings, *shape)
    if said and said not in _SAID:
        _SAID.add(said)
        log.warning("features: %s %s", cfg.model.name, said)
    return settings


def _settings(cfg: Any) -> FeatureSettings:
    d = dict(cfg.features)
    if d.get("max_prompt_tokens") is None:
        gen = cfg.get("generate") or {}
        if gen.get("max_prompt_tokens") is not None:
            d["max_prompt_tokens"] = gen["max_prompt_tokens"]
        elif cfg.model.get("max_context") and gen.get("max_new_tokens"):
            room = int(cfg.model.max_context) - int(gen["max_new_tokens"])
            if room < 1:
                raise ConfigError(f"model.max_context={cfg.model.max_context} leaves no prompt tokens after "
                                  f"generate.max_new_tokens={gen['max_new_tokens']}; set features.max_prompt_tokens")
            d["max_prompt_tokens"] = room
        elif cfg.model.get("max_context"):
            d["max_prompt_tokens"] = int(cfg.model.max_context)
    return FeatureSettings.from_cfg(d)


def feature_dir(cfg: Any, prompts: Any, settings: FeatureSettings | None = None) -> Path:
    """The cache folder the config (or `settings` in its place) + prompts map to (existing or not)."""
    settings = settings or feature_settings(cfg)
    records = fx.prompt_records(prompts)
    if settings.limit:
        records = records[: settings.limit]
    key = cache_key(settings, fx.model_identity(cfg.model.name, model_dtype(cfg)), prompts_hash(records))
    return data_dir(cfg) / "features" / str(cfg.model.name) / key


def extract(cfg: Any, model: Any, tokenizer: Any, prompts: Any, *, settings: FeatureSettings | None = None,
            out_dir: str | Path | None = None) -> Path:
    """Extract this config's features (its settings, `model.name`, `shard`) into its folder (or `out_dir`)."""
    settings = settings or feature_settings(cfg)
    out = out_dir if out_dir is not None else feature_dir(cfg, prompts, settings)
    return fx.extract_features(settings, model, tokenizer, prompts, out_dir=out, model_name=str(cfg.model.name),
                               shard=parse_shard(cfg.shard), source=model_source(cfg))


def model_source(cfg: Any) -> str:
    """Where the weights come from (a store records it: two checkpoints under one model.name never share one)."""
    m = cfg.model
    return str(m.get("path") or m.get("hf_id") or m.get("package") or ("tiny" if m.get("tiny") else m.name))


def ensure_features(cfg: Any, prompts: Any, model: Any = None, tokenizer: Any = None, *,
                    need: Sequence[tuple[int | None, str | None]] | None = None) -> FeatureSet:
    """Load the features for (config, prompts) from the cache, extracting whatever is missing first.

    `need`: the (layer, pooling) pairs the caller reads (`FeatureSettings.only`). The config's full store
    is used when it exists; otherwise only what is needed is extracted (a store of its own), so that
    `train.py head=linear` on a new trace does not pay for every layer, entropy and attention.
    """
    settings = feature_settings(cfg)
    root, shard = feature_dir(cfg, prompts, settings), parse_shard(cfg.shard)
    if need is not None and not (root / MANIFEST).is_file():
        settings, shard = settings.only(need), (0, 1)  # a reduced store of its own, never sharded
    return ensure_store(cfg, prompts, settings, model, tokenizer, need=need, shard=shard)


def ensure_store(cfg: Any, prompts: Any, settings: FeatureSettings, model: Any = None, tokenizer: Any = None, *,
                 need: Sequence[tuple[int | None, str | None]] | None = None,
                 shard: tuple[int, int] = (0, 1)) -> FeatureSet:
    """The store of exactly these settings (for the config's model and these prompts): loaded, else extracted
    (resuming whatever parts exist), then loaded."""
    root = feature_dir(cfg, prompts, settings)
    if (root / MANIFEST).is_file():
        try:
            return load_features(root)
        except LengthpredError:
            log.info("features at %s incomplete: resuming", root)
    if model is None:
        model, tokenizer = load_model(cfg)  # on cfg.device (this process's GPU under a launcher)
    check_need_layers(model, need or [], str(cfg.model.name))
    with torch.inference_mode():
        out = fx.extract_features(settings, model, tokenizer, prompts, out_dir=root, model_name=str(cfg.model.name),
                                  shard=shard, source=model_source(cfg))
    return load_features(out)


def check_need_layers(model: Any, need: Sequence[tuple[int | None, str | None]], model_name: str) -> None:
    """A head's layer (`need`, from the head config) that the model does not have is the head's error."""
    n = int(model.config.num_hidden_layers) + 1  # hidden_states 0 (embeddings) .. num_hidden_layers
    for layer, _ in need:
        if layer is not None and not 0 <= int(layer) < n:
            raise ConfigError(f"head.layer={layer}: {model_name} has hidden_states 0..{n - 1}")


def check_head_feature(features: FeatureSet, feature: str | None) -> None:
    """A head's column that the store lacks, named by the head keys that chose it."""
    if feature is not None and feature not in features.names:
        layers = features.manifest.get("layers")
        raise ConfigError(f"head.layer / head.pooling give {feature}, which the feature store {features.root} "
                          f"does not hold (layers {layers}, pools {features.manifest.get('poolings')})")


def truncated_counts(features: FeatureSet | None, parts: dict[str, Sequence[str]]) -> dict[str, int]:
    """How many prompts of each split part the extraction cut to the prompt budget (said in one line when
    any was): `features.overflow=reject` leaves them out instead."""
    cut = getattr(features, "truncated", None) or {}
    counts = {part: sum(i in cut for i in ids) for part, ids in parts.items()}
    if any(counts.values()):
        log.warning("prompts cut to the prompt budget (features.overflow=truncate; `reject` leaves them out): "
                    "%s", ", ".join(f"{k} {v}" for k, v in counts.items()))
    return counts


def run_stores(configs: Sequence[Any], prompts: Any, ids: Sequence[str], need: Any) -> list[Path]:
    """The complete stores of these (run) configs, each once in order: each config's full store, then the
    reduced store a head trained before its config's full store existed was fitted on
    (`ensure_features(need=...)`; `need(cfg)` gives its (layer, pooling) or raises for a config without a head)."""
    roots: list[Path] = []
    for c in configs:
        try:
            root = feature_dir(c, prompts)
        except Exception as e:  # a run config that no longer resolves: its store cannot be found
            log.info("cannot locate a run's feature store (%s)", e)
            continue
        if root not in roots and (root / MANIFEST).is_file():
            roots.append(root)
    for c in configs:
        try:
            root = feature_dir(c, prompts, feature_settings(c).only([need(c)]))
        except Exception:  # no head in this config (the current one) or one that no longer resolves
            continue
        if root not in roots and (root / MANIFEST).is_file():
            roots.append(root)
    return roots


def run_extract(cfg: DictConfig, out: str | Path) -> Path:
    """The extract stage (`out`: its run folder; the store it writes under data/ is declared in the config's run
    folder, `paths.output_dir`, which is `out` when a script calls it): this config's features for its data
    (`shard`, or the launcher's rank under torchrun, lengthpred.stages.distributed), printed with the store's size
    once complete. Under a launcher every rank waits at a barrier and rank 0 checks the whole store. Returns the
    store folder."""
    feature_settings(cfg)  # a bad features config fails before the model or data load
    device = model_device(cfg)  # a bad device (or LOCAL_RANK) too
    with open_dict(cfg):
        cfg.shard = launcher_shard(cfg)
    prompts = load_prompts(cfg.data)
    check_shard_fits(cfg.shard, len(prompts))
    root = feature_dir(cfg, prompts)
    try:  # a read-only data folder: one line before the model loads
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"cannot create the feature store at {root}: {e.strerror}") from None
    with process_group(device) as group:
        model, tokenizer = load_model(cfg)
        with torch.inference_mode():
            root = extract(cfg, model, tokenizer, prompts, out_dir=root)
        declare_outputs(cfg, root)
        group.barrier()  # every rank's shard is written
        if not group.is_main:
            return root
        return _report(cfg, root, group.size)


def _report(cfg: DictConfig, root: Path, world: int) -> Path:
    i, n = parse_shard(cfg.shard)
    if n == 1 or world > 1:
        fs = verify_store(root)  # checks: no duplicates, no gaps, every part and token-level file intact
        if cfg.features.get("compact", False):
            print(f"compacted: {compact_store(root)}")
        with tracked(cfg, "extract") as tracker:  # the store by reference: its path and digest, nothing uploaded
            tracker.log_reference(f"features-{cfg.model.name}-{root.name}", "feature-store", root,
                                  {"model": str(cfg.model.name), "prompts": len(fs), "columns": len(fs.names)})
        print(f"{root}  ({len(fs)} prompts, {len(fs.names)} columns, {len(fs.skipped)} skipped)")
    else:
        print(f"{root}  (shard {i}/{n} done; load_features checks completeness once all shards ran)")
    return root
