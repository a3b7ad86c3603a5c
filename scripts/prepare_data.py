"""Build the prompt table and splits of a data config and print the summary table.

    python scripts/prepare_data.py                 # data=demo -> data/splits/demo/
    python scripts/prepare_data.py data=paper
    python scripts/prepare_data.py data=trace data.train_path=my.jsonl data.prompt_field=prompt \
        data.length_field=length
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.data import run_prepare_data
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_prepare_data(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
