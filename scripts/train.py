"""Train one length-predictor head: fit on train, select on val, score on test, save it.

    .venv/bin/python scripts/train.py head=linear                     # LEAP readout on hs.L20.last
    .venv/bin/python scripts/train.py head=egtp head.layer=15         # any head of conf/head/
    .venv/bin/python scripts/train.py -m head=constant,prompt_len,domain_median,linear,egtp,estp,estp_learned,probe
    .venv/bin/python scripts/train.py head=linear cross_domain=false           # in-domain only (no per-pair fits)
    .venv/bin/python scripts/train.py head=linear data=trace data.train_path=log.jsonl   # your own trace

Writes metrics.json (in-domain, per domain, per cross-domain pair), head/ (safetensors + json) and
predictions.parquet into the run directory
(outputs/<experiment>/runs/<time>/). Features are extracted first when missing (cached by key).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.train import run_train


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_train(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
