"""The costs stage from an experiment's Hydra config: find its saved heads, sample its prompts, open the
feature stores the heads were trained on and the serving model, then measure (lengthpred.costs.measure)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lengthpred.costs.measure import PREFILL_KINDS, CostSettings, Sample, measure_costs
from lengthpred.costs.runs import find_head_runs
from lengthpred.errors import ConfigError, DataError

log = logging.getLogger(__name__)


def costs_from_config(cfg: Any, *, progress: bool = True) -> dict[str, Any]:
    """Measure the costs of every saved head of `cfg`'s experiment on its own prompts, features and model."""
    from lengthpred.data import load_prompts, load_splits
    from lengthpred.heads.assemble import indomain_ids, prompt_text
    from lengthpred.heads.base import HEADS
    from lengthpred.paths import resolve

    ccfg = cfg.get("costs") or {}
    settings = CostSettings.from_cfg(ccfg)
    exp_dir = resolve(
        ccfg.get("experiment_dir") or Path(str(cfg.paths.root_dir)) / "outputs" / str(cfg.experiment_name)
    )
    runs = find_head_runs(exp_dir, settings.heads)
    model_name = str(cfg.model.name)
    other = [f"{r.name} ({r.model})" for r in runs if r.model not in (None, model_name)]
    if other:
        raise ConfigError(f"heads under {exp_dir} were trained for another model than {model_name}: {other}")

    prompts = load_prompts(cfg.data)
    by_id = {r["id"]: r for r in prompts}
    pool = [i for i in indomain_ids(load_splits(cfg.data)).get(settings.split, []) if i in by_id]
    if not pool:
        raise DataError(f"splits.json has no in-domain {settings.split!r} prompts to time the heads on")
    rng = np.random.default_rng(settings.seed)
    ids = sorted(rng.choice(pool, size=min(settings.predict_prompts, len(pool)), replace=False).tolist())

    kinds = {HEADS.get(r.name).input_kind for r in runs}
    store_kinds = {*PREFILL_KINDS, "n_prompt_tokens"}
    needs_store = bool(kinds & store_kinds) or settings.online
    # the stores the heads were trained on (their run configs), then the current config's
    configs = [r.config for r in runs if r.config is not None and HEADS.get(r.name).input_kind in store_kinds]
    stores = _feature_stores([*configs, cfg], prompts, ids) if needs_store else None
    if stores is None and kinds & store_kinds:
        from lengthpred.features import feature_dir

        raise DataError(f"no feature store at {feature_dir(cfg, prompts)}: run scripts/extract.py first")
    sample = Sample(
        ids=ids,
        texts=[prompt_text(by_id[i]["messages"]) for i in ids],
        domains=[str(by_id[i].get("domain", "")) for i in ids],
        messages=[list(by_id[i]["messages"]) for i in pool],
        columns=stores.get if stores is not None else None,
        tokens=stores.token_inputs if stores is not None else None,
        n_prompt_tokens=stores.n_prompt_tokens() if stores is not None else None,
    )
    online = None
    if settings.online and cfg.get("online") is not None:
        if stores is None:
            log.warning("costs: no feature store, so no rls@λ rows")
        else:
            from omegaconf import OmegaConf

            online = OmegaConf.to_container(cfg.online, resolve=True)
    needs_model = online is not None or any(
        r.pooling is not None and HEADS.get(r.name).input_kind == "features" for r in runs
    )
    model = tokenizer = fsettings = max_tokens = None
    if needs_model:
        from hydra.utils import instantiate

        from lengthpred.features import settings_from_cfg
        from lengthpred.models import load_causal_lm

        model, tokenizer = load_causal_lm(instantiate(cfg.model))
        fsettings = settings_from_cfg(cfg)
        max_tokens = fsettings.max_prompt_tokens or getattr(model.config, "max_position_embeddings", None)
    from lengthpred.eval.report import newest

    pattern = settings.online_summary
    summary = Path(pattern) if pattern and Path(pattern).is_absolute() else newest(exp_dir, pattern)
    doc = measure_costs(
        runs,
        sample,
        settings,
        model=model,
        tokenizer=tokenizer,
        feature_settings=fsettings,
        max_prompt_tokens=max_tokens,
        online=online,
        online_summary=summary,
        progress=progress,
    )
    doc["meta"] |= {
        "experiment": str(cfg.get("experiment_name")),
        "model": model_name,
        "data": str(cfg.data.name),
        "experiment_dir": str(exp_dir),
        "heads": {r.name: str(r.head_dir) for r in runs},
    }
    return doc


class FeatureStores:
    """Several stored feature sets (subset to the same ids) read as one: a column comes from the first
    that holds it."""

    def __init__(self, sets: Sequence[Any]):
        self.sets = list(sets)

    def get(self, name: str) -> np.ndarray:
        for fs in self.sets:
            if name in fs.names:
                return fs.get(name)
        raise DataError(f"feature {name!r} is in none of the stores {[str(fs.root) for fs in self.sets]}")

    def token_inputs(self, layer: int) -> list[np.ndarray]:
        for fs in self.sets:
            if int(layer) in (fs.manifest.get("token_layers") or []):
                return fs.token_inputs(int(layer))
        raise DataError(
            f"layer {layer} is stored token-level in none of {[str(fs.root) for fs in self.sets]}; "
            f"extract with features.token_layers=[{layer}]"
        )

    def n_prompt_tokens(self) -> np.ndarray | None:
        return next(
            (fs.get("n_prompt_tokens")[:, 0] for fs in self.sets if "n_prompt_tokens" in fs.names), None
        )


def _feature_stores(configs: Sequence[Any], prompts: Any, ids: Sequence[str]) -> FeatureStores | None:
    """The complete stores of these configs that hold every id (each once, in order), or None."""
    from lengthpred.errors import LengthpredError
    from lengthpred.features import feature_dir, load_features, settings_from_cfg
    from lengthpred.features.store import MANIFEST
    from lengthpred.heads.run import feature_need

    roots: list[Path] = []
    for c in configs:
        try:
            root = feature_dir(c, prompts)
        except Exception as e:  # a run config that no longer resolves: its store cannot be found
            log.info("costs: cannot locate a run's feature store (%s)", e)
            continue
        if root not in roots and (root / MANIFEST).is_file():
            roots.append(root)
    # a head trained before its config's full store existed was fitted on a reduced store of its own
    # (features.ensure_features(need=...)), at the same settings reduced to what it reads
    for c in configs:
        try:
            root = feature_dir(c, prompts, settings_from_cfg(c).only([feature_need(c.head)]))
        except Exception:  # no head in this config (the current one) or one that no longer resolves
            continue
        if root not in roots and (root / MANIFEST).is_file():
            roots.append(root)
    sets = []
    for root in roots:
        try:
            sets.append(load_features(root).subset(ids))
        except LengthpredError as e:  # incomplete (being extracted) or lacking these prompts
            log.warning("costs: feature store %s skipped: %s", root, e)
    return FeatureStores(sets) if sets else None
