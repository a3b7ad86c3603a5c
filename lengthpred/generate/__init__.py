"""The generate stage: the serving model's own answers (and so output lengths) for every prompt.

    from lengthpred.generate import generate_from_cfg, load_generations
    summary = generate_from_cfg(cfg)          # what scripts/generate.py runs
    ds = load_generations(cfg)                # HF Dataset, one row per (id, sample)
"""

from __future__ import annotations

import logging
from pathlib import Path

from lengthpred.errors import DataError
from lengthpred.generate import reference_parts, store
from lengthpred.generate.backends import BACKENDS, VLLM_MISSING, Sample, split_answer
from lengthpred.generate.runner import RunSummary, run_generation, try_merge
from lengthpred.generate.settings import GenerationSettings
from lengthpred.paths import resolve


def reference_path(cfg) -> Path:
    """`<data_dir>/reference/<model>/<data>.jsonl`: the committed trace of a composed config."""
    return resolve(cfg.paths.data_dir) / "reference" / cfg.model.name / f"{cfg.data.name}.jsonl"

__all__ = [
    "BACKENDS", "GenerationSettings", "RunSummary", "Sample", "VLLM_MISSING", "generate_from_cfg",
    "generations_dir", "load_generations", "make_backend", "run_generation", "split_answer", "try_merge",
]

log = logging.getLogger(__name__)


def generations_dir(cfg, settings: GenerationSettings | None = None) -> Path:
    """`data/generations/<model>/<data.name>/<settings-hash>/` for a composed config."""
    settings = settings or GenerationSettings.from_cfg(cfg.generate)
    return resolve(cfg.paths.data_dir) / "generations" / cfg.model.name / cfg.data.name / settings.settings_hash()


def make_backend(settings: GenerationSettings, spec, *, model=None, tokenizer=None, device: str = "cpu"):
    """The configured backend over a model spec (or an already loaded model, as in tests)."""
    from lengthpred.models.serving import load_causal_lm, load_tokenizer, max_context

    cls = BACKENDS.get(settings.backend)
    if settings.backend == "vllm":
        from lengthpred.models.serving import _checkpoint_dir  # the folder or hub id vLLM should read

        tokenizer = tokenizer or load_tokenizer(spec)
        ctx = spec.max_context
        return cls(_checkpoint_dir(spec), tokenizer, settings, dtype=spec.dtype, max_model_len=ctx), tokenizer, ctx
    if model is None:
        model, tokenizer = load_causal_lm(spec, device=device)
    return cls(model, tokenizer, settings), tokenizer, max_context(spec, model)


def generate_from_cfg(cfg, prompts=None, *, model=None, tokenizer=None, progress: bool = True) -> RunSummary:
    """Run the generate stage for `cfg` (model, data, generate, shard); prompts default to
    `lengthpred.data.load_prompts(cfg.data)`."""
    from hydra.utils import instantiate

    from lengthpred.cli import parse_shard

    settings = GenerationSettings.from_cfg(cfg.generate)
    spec = instantiate(cfg.model)
    if prompts is None:
        from lengthpred.data import load_prompts

        prompts = load_prompts(cfg.data)
    backend, tokenizer, ctx = make_backend(settings, spec, model=model, tokenizer=tokenizer, device=cfg.device)
    root = generations_dir(cfg, settings)
    manifest = {"model": spec.name, "data": cfg.data.name, "dtype": spec.dtype, "max_context": ctx}
    skip, on_part = None, None
    if cfg.generate.get("commit_parts"):
        folder = reference_parts.parts_dir(reference_path(cfg))
        skip = reference_parts.done_ids(folder, settings.hashed())
        part_meta = {**manifest, "settings": settings.hashed(), "settings_hash": settings.settings_hash()}

        def on_part(rows):
            reference_parts.write_part(rows, folder, part_meta)

    summary = run_generation(prompts, backend, tokenizer, settings, root, max_context=ctx,
                             shard=parse_shard(cfg.shard), manifest=manifest, progress=progress,
                             skip=skip, on_part=on_part)
    if cfg.generate.get("commit_parts"):
        summary.reference = merge_committed_parts(cfg, prompts, settings, manifest)
    return summary


def merge_committed_parts(cfg, prompts, settings: GenerationSettings, manifest: dict) -> Path | None:
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


def load_generations(where):
    """The merged generations (HF Dataset: id, sample, length, finish_reason, text, prompt_tokens,
    truncated, token_ids) of a config or a run folder."""
    import datasets

    root = Path(where) if isinstance(where, (str, Path)) else generations_dir(where)
    merged = root / "merged"
    if not merged.is_dir():
        raise DataError(f"no merged generations at {merged}; run scripts/generate.py (all shards) first")
    return datasets.load_from_disk(str(merged))
