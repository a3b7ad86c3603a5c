"""Online adaptation stage: stream each cross-domain target split through RLS and its baselines.

    .venv/bin/python scripts/adapt.py experiment=demo                      # every pair, conf/online/rls.yaml
    .venv/bin/python scripts/adapt.py online=sweep "online.pairs=['chat->math','summarization->qa']"
    .venv/bin/python scripts/adapt.py online/completion=instant online.forgetting=[1.0,0.99]
    .venv/bin/python scripts/adapt.py online.completion.load=0.9          # a busier (still stable) server

Each target's train+val prompts arrive as a stream on the serving model's simulated CPU server at load
0.7 of its capacity; a completion reveals one sampled length; λ is chosen per pair on the stream's val
requests (head `rls@val`). Writes stream_curves.csv (the main curve: in-stream Spearman vs labels seen),
curves.csv, summary.csv, pairs.csv, gains.csv, per_target.csv (T3), predictions.parquet, plots/*.png and
adapt.json into the run directory (outputs/<experiment>/runs/<time>/) and logs them to W&B (offline by
default). See lengthpred/online/experiment.py for the columns.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.adapt import run_adapt
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_adapt(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
