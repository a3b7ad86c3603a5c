"""Download every dataset file in MANIFEST.json (pinned GitHub commit), verify sha256, write data/datasets/.

    python scripts/fetch_datasets.py
    python scripts/fetch_datasets.py data.fetch.base_url=http://127.0.0.1:8000   # a mirror
    python scripts/fetch_datasets.py 'data.fetch.only=[gsm8k/,castillo/]'
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.fetch import run_fetch_datasets
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_fetch_datasets(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
