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
from lengthpred.stages.locations import run_dir
from lengthpred.stages.stack import stack_from_config


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    m = stack_from_config(cfg, run_dir(cfg))
    print(
        f"{m['head']}: weight {m['weight']:.2f} on {m['heads'][0]} (val spearman {m['val_spearman']:.3f}); "
        f"test spearman {m.get('spearman')}, mae {m.get('mae')} (n_test {m['n_test']}) → {run_dir(cfg)}"
    )


if __name__ == "__main__":
    main()
