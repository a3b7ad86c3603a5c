"""Stack two trained heads: one weight chosen on their validation predictions, applied to test.

    .venv/bin/python scripts/train.py experiment=demo head=linear hydra.run.dir=outputs/demo/ens/linear
    .venv/bin/python scripts/train.py experiment=demo head=proxy_reg hydra.run.dir=outputs/demo/ens/proxy_reg
    .venv/bin/python scripts/stack.py experiment=demo                          # stack.heads=[linear,proxy_reg]
    .venv/bin/python scripts/evaluate.py experiment=demo 'eval.paired.heads=[linear]'   # paired vs linear

Writes predictions.parquet (head stack_<a>_<b>) and metrics.json (the weight, every weight's val Spearman)
into the run directory. The stage: lengthpred/stages/stack.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.stack import run_stack


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_stack(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
