"""The costs stage (`scripts/measure_costs.py`, T6): find an experiment's saved heads, sample its prompts,
open the feature stores the heads were trained on and the serving model, then measure
(`lengthpred.costs.measure_costs`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from lengthpred.artefacts import COSTS
from lengthpred.costs import write_costs
from lengthpred.costs.measure import PREFILL_KINDS, CostSettings, OnlineCosts, Sample, measure_costs
from lengthpred.costs.timing import stopwatch
from lengthpred.data import load_prompts, load_splits
from lengthpred.errors import ConfigError, DataError, LengthpredError
from lengthpred.features.store import FeatureStores, load_features
from lengthpred.heads.assemble import indomain_ids, prompt_text
from lengthpred.heads.base import HEADS
from lengthpred.paths import resolve
from lengthpred.stages.features import feature_dir, feature_settings, run_stores
from lengthpred.stages.heads import feature_need
from lengthpred.stages.locations import online_summary
from lengthpred.stages.model import load_model, model_device
from lengthpred.stages.runs import find_head_runs
from lengthpred.stages.tracking import tracked

log = logging.getLogger(__name__)
# the columns printed and logged per head
COLUMNS = ["head", "n_parameters", "extraction_overhead_pct", "predict_latency_ms", "update_latency_ms"]


def costs_from_config(cfg: Any, *, progress: bool = True) -> dict[str, Any]:
    """Measure the costs of every saved head of `cfg`'s experiment on its own prompts, features and model."""
    ccfg = cfg.costs
    settings = CostSettings.from_cfg(ccfg)
    stopwatch(settings.clock, model_device(cfg))  # a host clock for a GPU's work: refused before any work
    exp_dir = resolve(str(ccfg.experiment_dir))  # `${paths.experiment_dir}` unless overridden
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
            online = OnlineCosts.from_cfg(OmegaConf.to_container(cfg.online, resolve=True))
    needs_model = online is not None or any(
        r.pooling is not None and HEADS.get(r.name).input_kind == "features" for r in runs
    )
    model = tokenizer = fsettings = max_tokens = None
    if needs_model:
        model, tokenizer = load_model(cfg)  # on the config's device: timed there (costs.clock)
        fsettings = feature_settings(cfg)
        max_tokens = fsettings.max_prompt_tokens or getattr(model.config, "max_position_embeddings", None)
    given = settings.online_summary
    summary = online_summary(exp_dir) if given == "auto" else resolve(given) if given else None
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
        "experiment": str(cfg.experiment_name),
        "model": model_name,
        "data": str(cfg.data.name),
        "experiment_dir": str(exp_dir),
        "heads": {r.name: str(r.head_dir) for r in runs},
    }
    return doc


def _feature_stores(configs: Sequence[Any], prompts: Any, ids: Sequence[str]) -> FeatureStores | None:
    """The complete stores of these configs that hold every id (each once, in order), or None."""
    sets = []
    for root in run_stores(configs, prompts, ids, lambda c: feature_need(c.head)):
        try:
            sets.append(load_features(root).subset(ids))
        except LengthpredError as e:  # incomplete (being extracted) or lacking these prompts
            log.warning("costs: feature store %s skipped: %s", root, e)
    return FeatureStores(sets) if sets else None


def run_measure_costs(cfg: DictConfig, out: str | Path) -> Path:
    """The costs stage (scripts/measure_costs.py): every trained head's costs into `out`/costs.json, logged to
    W&B and printed a head per line. Returns the file."""
    with tracked(cfg, "costs") as tracker:
        doc = costs_from_config(cfg)
        path = write_costs(doc, Path(out) / COSTS)
        tracker.log_table("costs", COLUMNS, [[r.get(c) for c in COLUMNS] for r in doc["rows"]])
    ext = doc["meta"]["extraction"]
    for r in doc["rows"]:
        cells = [f"{c}={r[c]:.4g}" for c in COLUMNS[1:] if r.get(c) is not None]
        print(f"{r['head']:>14s}  {'  '.join(cells)}")
    used = f"{ext['n_prompts']} prompts × {ext['repeats']} reps" if ext else "none"
    print(
        f"costs of {len(doc['rows'])} heads (extraction timing: {used}) in {doc['meta']['seconds']['total']:.1f} s → {path}"
    )
    return path
