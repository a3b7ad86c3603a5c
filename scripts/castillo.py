"""Cross-model length prediction on CASTILLO: 13 models' sampled lengths, one shared split, one prefill per prompt.

    .venv/bin/python scripts/castillo.py experiment=castillo                        # the full run (make castillo)
    .venv/bin/python scripts/castillo.py experiment=castillo data.per_dataset=8 \
        crossmodel.docs_dir=null                                                     # a small real slice
    .venv/bin/python scripts/castillo.py experiment=castillo crossmodel.proxy_heads=[]   # without MiniLM fits

Writes results.csv, T7 tables, transfer heatmaps and summary.json (stage times) into the run directory
(outputs/castillo/runs/<time>/), and the figures into docs/figures/ (crossmodel.docs_dir); the tables reach the docs
with `python -m docsgen.convert --ingest <run>/tables --prefix castillo_ --made-by "make castillo"` and `make docs`.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.castillo import run_castillo_stage
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_castillo_stage(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
