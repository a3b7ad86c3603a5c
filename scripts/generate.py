"""Generate the serving model's own answers (the length targets) for every prompt of a data config.

    python scripts/generate.py                                   # cb backend, conf/generate/default.yaml
    python scripts/generate.py generate=live                     # a ≈1-2 min live slice (8 prompts × 1 × 64)
    python scripts/generate.py shard=0/4                         # one of 4 parallel processes; each merges when all are done
    .venv-vllm/bin/python scripts/generate.py generate=reference # the committed reference trace's settings (vLLM)

A rerun continues where a crash or Ctrl-C stopped. Writes data/generations/<model>/<data>/<settings-hash>/.
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.generate import generate_from_cfg
from lengthpred.stages.targets import export_reference

log = logging.getLogger("lengthpred")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    s = generate_from_cfg(cfg)
    print(
        f"generate: {s.n_prompts} prompts in shard {cfg.shard}, {s.n_generated} generated now "
        f"({s.new_tokens} tokens, {s.tokens_per_s:.1f} tok/s), {s.n_rejected} rejected, "
        f"{s.n_truncated} truncated; {'merged' if s.merged else 'not merged yet'} at {s.root}"
    )
    for what, counts in (("rejected", s.rejected_by_domain), ("truncated", s.truncated_by_domain)):
        if counts:
            print(f"generate: {what} per domain: " + ", ".join(f"{d} {n}" for d, n in sorted(counts.items())))
    if s.reference is not None:
        print(f"generate: reference trace merged from its parts into {s.reference}")
    elif cfg.generate.export_reference and s.merged and not cfg.generate.commit_parts:
        print(f"generate: reference trace written to {export_reference(cfg)}")


if __name__ == "__main__":  # the guard vLLM's spawned engine process needs
    main()
