"""Measure a prompt-lookup (n-gram) drafter's per-step acceptance along the serving model's own sampled answers.

    make spec                                                            # this (if its file is missing), then simulate_spec
    VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=6 OMP_WAIT_POLICY=PASSIVE nice -n 10 \
      .venv-vllm/bin/python scripts/measure_acceptance.py data=bench generate=reference model.dtype=bfloat16 logger=disabled
    python scripts/measure_acceptance.py data=bench generate=reference sched.spec.answers=stored   # stored answers only

One answer per test prompt (`sched.spec.split`, `sched.spec.samples`) at the generation settings of `generate=`
(the reference trace's: T 0.7, top-p 0.9, cap 512, chat template). Answers the generate stage already stored
with token ids for these settings are reused (`sched.spec.answers=auto`); the rest are generated with the
configured backend (vLLM from the vLLM venv), their token ids kept in `sched.spec.answers_cache` (git-ignored).
Acceptance is then exact and needs no model (lengthpred/sched/spec/acceptance.py). Writes
`sched.spec.path` (default data/reference/<model>/spec_ngram_<data>.parquet: no texts, no token ids; format in
lengthpred/sched/spec/records.py) and prints how variable acceptance is.
The stage: lengthpred/stages/acceptance.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.acceptance import run_measure_acceptance
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_measure_acceptance(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
