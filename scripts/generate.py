"""Generate the serving model's own answers (the length targets) for every prompt of a data config.

    python scripts/generate.py                                   # cb backend, conf/generate/default.yaml
    python scripts/generate.py generate=live                     # a ≈1-2 min live slice (8 prompts × 1 × 64)
    python scripts/generate.py shard=0/4                         # one of 4 parallel processes; each merges when all are done
    .venv-vllm/bin/python scripts/generate.py generate=reference # the committed reference trace's settings (vLLM)

A rerun continues where a crash or Ctrl-C stopped. Writes data/generations/<model>/<data>/<settings-hash>/.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.generate import run_generate
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_generate(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
