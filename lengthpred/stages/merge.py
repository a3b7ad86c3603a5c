"""The merge-and-verify step after a sharded stage (`shard=0/n,...,n-1/n` run as a multirun, e.g. a Slurm array):
the whole store is checked (every part's and token-level file's digest, no prompt missing or stored twice; a feature
store is then logged by reference, as a one-process extraction logs it), generations are merged, a
feature store is compacted when `features.compact` asks. `lengthpred.shard_merge.MergeShards` runs it as one more
job on the multirun's launcher once the shard jobs are done.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf, open_dict

from lengthpred.data import load_prompts
from lengthpred.decode.store import load_decode
from lengthpred.errors import LengthpredError
from lengthpred.features.maintenance import compact_store, verify_store
from lengthpred.generate.runner import try_merge
from lengthpred.generate.settings import GenerationSettings
from lengthpred.generate.store import load_generations
from lengthpred.stages.locations import generations_dir
from lengthpred.stages.shards import parse_shard
from lengthpred.stages.tracking import tracked

log = logging.getLogger(__name__)
MERGED_STAGES = ("extract", "generate", "extract_decode")  # the sharded stages and what their merge checks


def merge_and_verify(config: dict[str, Any], stage: str) -> str:
    """Check (and merge) what the shards of `stage` wrote for `config` (a resolved config of one shard job); one
    line saying what was found. A LengthpredError names what is missing or damaged."""
    cfg = OmegaConf.create(config)
    _, n = parse_shard(cfg.get("shard"))
    with open_dict(cfg):
        cfg.shard = "0/1"
    prompts = load_prompts(cfg.data)
    if stage == "extract":
        from lengthpred.stages.features import feature_dir

        root = feature_dir(cfg, prompts)
        fs = verify_store(root)  # every part and token-level file against its digest
        compacted = f"; compacted into {compact_store(root)}" if cfg.features.get("compact", False) else ""
        with tracked(cfg, "extract") as tracker:  # the whole store by reference, as a one-process extraction logs it
            tracker.log_reference(f"features-{cfg.model.name}-{root.name}", "feature-store", root,
                                  {"model": str(cfg.model.name), "prompts": len(fs), "columns": len(fs.names)})
        return f"feature store {root}: {n} shards complete and intact, {len(fs)} prompts, {len(fs.names)} columns{compacted}"
    if stage == "generate":
        settings = GenerationSettings.from_cfg(cfg.generate)
        root = generations_dir(cfg, settings)
        if not (root / "merged").is_dir():
            try_merge(prompts, root, settings, n)
        ds = load_generations(root)  # merged, every file checked against its digest
        return f"generations {root}: {n} shards merged and verified, {len(ds)} rows"
    if stage == "extract_decode":
        from lengthpred.stages.decode import decode_dir, decode_settings, load_answers

        settings = decode_settings(cfg)
        answers, _, budget = load_answers(cfg, settings)
        root = decode_dir(cfg, prompts, answers, settings, budget)
        ds = load_decode(root)
        return f"decode store {root}: {n} shards complete and intact, {len(ds.ids)} answers"
    raise ValueError(f"no merge step for stage {stage!r}; stages with one: {list(MERGED_STAGES)}")


def merge_job(config: dict[str, Any], stage: str) -> tuple[bool, str]:
    """`merge_and_verify` as a job: (True, its line), or (False, the one-line error) instead of a traceback."""
    try:
        return True, merge_and_verify(config, stage)
    except LengthpredError as e:
        return False, str(e)


# what a merge reads of a shard job's config (the rest, e.g. serving settings, may not even resolve for its model)
MERGE_NODES = ("paths", "model", "data", "generate", "features", "decode", "shard", "seed", "device",
               "experiment_name", "logger")


def job_config(job_dir: Path) -> dict[str, Any]:
    """What a merge reads of a finished shard job's config (its `.hydra/config.yaml`, its own folder as
    output_dir), resolved here: the merge job needs neither Hydra nor lengthpred's resolvers."""
    cfg = OmegaConf.load(job_dir / ".hydra" / "config.yaml")
    with open_dict(cfg):
        cfg.paths.output_dir = str(job_dir)
    out = {}
    for key in MERGE_NODES:
        node = OmegaConf.select(cfg, key)
        out[key] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    return out
