"""`vllm bench serve` (vLLM's own client) against a real `vllm serve`, stock and with lengthpred's plugin, in paired
repeats with the arms' order rotated; one cell (load x burstiness) per call, resumable, into a committed folder:

    .venv/bin/python scripts/serve_bench.py experiment=bench logger=disabled                      # load 0.95, Poisson
    .venv/bin/python scripts/serve_bench.py experiment=bench logger=disabled serve_bench.cell.name=load095_b05 \
        serve_bench.cell.burstiness=0.5 serve_bench.cell.seed=2 serve_bench.cell.capacity_from=<out_dir>/load095_b1

Needs the vLLM venv (`make serve-setup`), the embedded model's checkpoint (scripts/prepare_model.py) and a readout
file (serve_bench.readout; scripts/train.py head=linear writes one). conf/serve_bench/default.yaml lists the
settings; scripts/serve_bench_report.py tables what the folders hold.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.serve_bench import run_serve_bench


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_serve_bench(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
