"""The generate stage: the serving model's own answers for every prompt of a config (scripts/generate.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import open_dict

from lengthpred.data import load_prompts
from lengthpred.errors import ConfigError
from lengthpred.generate import reference_parts, store
from lengthpred.generate.backends import make_backend
from lengthpred.generate.runner import RunSummary, run_generation, try_merge
from lengthpred.generate.settings import GenerationSettings
from lengthpred.stages.distributed import launcher_shard, process_group, world
from lengthpred.stages.locations import generations_dir, reference_path
from lengthpred.stages.model import model_device, model_spec
from lengthpred.stages.outputs import declare_outputs
from lengthpred.stages.shards import check_shard_fits, parse_shard
from lengthpred.stages.targets import export_reference

log = logging.getLogger(__name__)


def generate_from_cfg(cfg: Any, prompts: Any = None, *, model: Any = None, tokenizer: Any = None,
                      progress: bool = True) -> RunSummary:
    """Run the generate stage for `cfg` (model, data, generate, shard); prompts default to
    `lengthpred.data.load_prompts(cfg.data)`."""
    settings = GenerationSettings.from_cfg(cfg.generate)
    spec = model_spec(cfg)  # dtype auto resolved for this process's device
    if prompts is None:
        prompts = load_prompts(cfg.data)
    backend, tokenizer, ctx = make_backend(settings, spec, model=model, tokenizer=tokenizer, device=model_device(cfg))
    root = generations_dir(cfg, settings)
    manifest = {"model": spec.name, "data": cfg.data.name, "dtype": spec.dtype, "max_context": ctx}
    skip, on_part = None, None
    if cfg.generate.commit_parts:
        folder = reference_parts.parts_dir(reference_path(cfg))
        skip = reference_parts.done_ids(folder, settings.hashed())
        part_meta = {**manifest, "settings": settings.hashed(), "settings_hash": settings.settings_hash()}

        def on_part(rows):
            reference_parts.write_part(rows, folder, part_meta)

    summary = run_generation(prompts, backend, tokenizer, settings, root, max_context=ctx,
                             shard=parse_shard(cfg.shard), manifest=manifest, progress=progress,
                             skip=skip, on_part=on_part)
    if cfg.generate.commit_parts:
        summary.reference = merge_committed_parts(cfg, prompts, settings, manifest)
    declare_outputs(cfg, root)
    return summary


def merge_committed_parts(cfg: Any, prompts: Any, settings: GenerationSettings, manifest: dict) -> Path | None:
    """The whole reference trace from its committed parts once they cover every prompt of the set
    (none rejected); None while prompts are missing."""
    folder = reference_parts.parts_dir(reference_path(cfg))
    rejected = store.rejected(generations_dir(cfg, settings))
    expected = [i for i in prompts["id"] if i not in rejected]
    missing = set(expected) - reference_parts.done_ids(folder, settings.hashed())
    if missing:
        log.info("reference parts: %d of %d prompts still to generate", len(missing), len(expected))
        return None
    meta = {**manifest, "settings_hash": settings.settings_hash(), "rejected": rejected}
    return reference_parts.merge_parts(folder, expected, settings.hashed(), reference_path(cfg), meta)


def run_generate(cfg: Any, out: str | Path) -> Path:
    """The generate stage (`out`: its run folder; the generations it writes under data/ are declared in the config's run folder, `paths.output_dir`, which is `out` when a script calls it): this shard's
    answers, merged once every shard is done, the reference trace exported when asked; prints what it did.
    Returns the generations folder. Under torchrun each process generates its shard (RANK/WORLD_SIZE) on its own
    GPU, and rank 0 merges once every rank is past the barrier."""
    device = model_device(cfg)  # a bad device (or LOCAL_RANK) fails before any work
    with open_dict(cfg):
        cfg.shard = launcher_shard(cfg)
    settings = GenerationSettings.from_cfg(cfg.generate)
    prompts = load_prompts(cfg.data)
    check_shard_fits(cfg.shard, min(len(prompts), settings.limit or len(prompts)))
    if world()[1] > 1 and settings.backend == "vllm":
        raise ConfigError("generate.backend=vllm under torchrun: vLLM runs its own workers; run one shard per GPU as "
                          "separate jobs (`lengthpred generate --shards N hydra/launcher=slurm`), or give vLLM the "
                          "GPUs itself (+generate.engine_args.tensor_parallel_size=N)")
    with process_group(device) as group:
        s = generate_from_cfg(cfg, prompts)
        group.barrier()  # every rank's shard is written
        if not group.is_main:
            return Path(s.root)
        if not s.merged and group.size > 1:
            s.merged = try_merge(prompts, Path(s.root), settings, group.size)
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
    return Path(s.root)
