"""Attention importance in more forms: every head's (`attn`), the late layers' heads only and the heads chosen
on validation, each pooling one layer for the readout heads, with paired differences
(`lengthpred.stages.attention_sweep.sweep_attention`).

    .venv/bin/python scripts/sweep_attention.py experiment=demo sweep=attention_heads \
        sweep.layer_choice=outputs/demo/layers/layer_choice.json

Writes attention.md, attention_heads.csv/.png, attention_choice.json, poolings.csv and pooling_diffs.csv into
the run directory.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.attention_sweep import run_sweep_attention
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_sweep_attention(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
