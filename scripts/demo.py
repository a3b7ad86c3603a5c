"""Every stage in order on one experiment, each cached: `make demo` / `make paper` call this.

    .venv/bin/python scripts/demo.py experiment=demo          # measured times: the README (docs/results/data/timings.csv)
    .venv/bin/python scripts/demo.py experiment=paper         # everything at paper scale
    .venv/bin/python scripts/demo.py experiment=demo pipeline.force=true   # rerun every stage

Each stage is the user-facing script (scripts/<stage>.py) run as a subprocess with the same overrides,
writing to outputs/<experiment>/<stage>/; a stage reruns only when what it reads changed since it last
finished: its own config nodes, the lengthpred modules its script imports, the committed reference trace, or an
earlier stage it reads (lengthpred/stagegraph.py declares each stage's reads; the log line says which changed).
The pipeline: lengthpred/pipeline.py.
"""

from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.pipeline import run_pipeline


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_pipeline(cfg, list(HydraConfig.get().overrides.task))


if __name__ == "__main__":
    main()
