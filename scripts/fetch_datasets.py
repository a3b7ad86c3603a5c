"""Download every dataset file in MANIFEST.json (pinned GitHub commit), verify sha256, write data/datasets/.

    python scripts/fetch_datasets.py
    python scripts/fetch_datasets.py data.fetch.base_url=http://127.0.0.1:8000   # a mirror
    python scripts/fetch_datasets.py 'data.fetch.only=[gsm8k/,castillo/]'
"""

from __future__ import annotations

from collections import Counter

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.data.fetch import fetch_all
from lengthpred.paths import resolve


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    f = cfg.data.fetch
    status = fetch_all(resolve(f.dest), f.base_url, only=f.get("only"), timeout_s=float(f.timeout_s))
    print(f"{dict(Counter(status.values()))} -> {resolve(f.dest)}")


if __name__ == "__main__":
    main()
