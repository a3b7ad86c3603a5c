"""Extract prefill features (hidden states pooled per layer, entropy, attention importance) for a data config.

    python scripts/extract.py                                   # embedded SmolLM2, data=demo, all layers
    python scripts/extract.py features.layers=[10,20,30] features.fused=[]  # fewer columns
    python scripts/extract.py shard=0/4                         # one slice of four (resumes what exists)
    torchrun --nproc-per-node 4 scripts/extract.py device=cuda  # one shard per process (RANK/WORLD_SIZE)

Writes `${paths.data_dir}/features/<model.name>/<cache-key>/` and prints that path; a rerun resumes.
"""

from __future__ import annotations

import logging
import os

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, open_dict

from lengthpred.cli import stage
from lengthpred.data import load_prompts
from lengthpred.features import load_features
from lengthpred.models.serving import load_causal_lm
from lengthpred.stages.features import extract, feature_settings
from lengthpred.stages.shards import parse_shard

log = logging.getLogger("lengthpred")


def launcher_shard(cfg: DictConfig) -> str:
    """Under torchrun / accelerate launch (WORLD_SIZE > 1) each process takes shard RANK/WORLD_SIZE."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and parse_shard(cfg.shard) == (0, 1):
        return f"{int(os.environ['RANK'])}/{world}"
    return cfg.shard or "0/1"


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    feature_settings(cfg)  # a bad features config fails before the model or data load
    with open_dict(cfg):
        cfg.shard = launcher_shard(cfg)
    device = cfg.device
    if device == "cuda" and "LOCAL_RANK" in os.environ:
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
    prompts = load_prompts(cfg.data)
    model, tokenizer = load_causal_lm(instantiate(cfg.model))
    model.to(device)
    with torch.inference_mode():
        root = extract(cfg, model, tokenizer, prompts)
    i, n = parse_shard(cfg.shard)
    if n == 1:
        fs = load_features(root)  # checks: no duplicates, no gaps
        print(f"{root}  ({len(fs)} prompts, {len(fs.names)} columns, {len(fs.skipped)} skipped)")
    else:
        print(f"{root}  (shard {i}/{n} done; load_features checks completeness once all shards ran)")


if __name__ == "__main__":
    main()
