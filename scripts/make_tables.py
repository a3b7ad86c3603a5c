"""Paper tables T1–T6 and plots from results files only (no model needed); prints T1 and T3.

    .venv/bin/python scripts/make_tables.py experiment=demo
    .venv/bin/python scripts/make_tables.py eval.results_file=outputs/paper/results.csv 'eval.print=[T1,T2]'

Writes `<tables_dir>/T*.md|.tex|.csv` and `<tables_dir>/plots/*.png`, and logs them to W&B.
The stage: lengthpred/stages/tables.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.tables import run_make_tables


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_make_tables(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
