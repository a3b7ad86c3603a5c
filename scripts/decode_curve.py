"""The refinement curve (issue 27): remaining-length heads on decode states (linear, TRAIL's probe, each with
and without the prompt-time prediction) against the prompt-only head's implied remaining length, by tokens
generated; fit on train, chosen on val, scored on test with bootstrap CIs over prompts.

    python scripts/decode_curve.py generate=reference generate.num_samples=1 data=demo   # same overrides as extract

Writes curve.csv, curve.md, curve.png and chosen.json into the run folder. The stage: lengthpred/stages/decode.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.decode import run_decode_curve
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_decode_curve(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
