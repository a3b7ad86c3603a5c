"""Decode-time states (issue 27): the chosen layer's state every `decode.every` generated tokens of each prompt's
sampled answer, by teacher-forced prefill of prompt + answer (needs generations with token ids).

    python scripts/extract_decode.py generate=reference generate.num_samples=1 data=demo   # the answers' settings
    python scripts/extract_decode.py ... decode.every=16 shard=0/4                         # one slice of four
    python scripts/extract_decode.py ... decode.generations=data/generations/smollm2-135m/demo/<hash>

Writes `${paths.data_dir}/decode/<model.name>/<key>/` and prints it; a rerun resumes.
The stage: lengthpred/stages/decode.py (`run_extract_decode`).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.decode import run_extract_decode
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_extract_decode(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
