"""Online adaptation of the decode-time readout (issue 27, item 3): per cross-domain pair of splits.json, the
readout fitted on the source domain is updated by RLS from each completed request of the target's stream (labels
at every checkpoint it passed) and scored on the target's test answers, against the same readout frozen.

    python scripts/decode_online.py generate=reference generate.num_samples=1 data=demo   # same overrides as extract

Writes online.csv, online.md and online.png into the run folder. The stage: lengthpred/stages/decode.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.decode import run_decode_online
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_decode_online(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
