"""The acceptance measurement (scripts/measure_acceptance.py): a prompt-lookup (n-gram) drafter's per-step
acceptance along the serving model's own sampled answers, one per test prompt (`sched.spec.split`,
`sched.spec.samples`) at the generation settings of `generate=`. Answers the generate stage already stored with
token ids for these settings are reused (`sched.spec.answers=auto`); the rest come from the configured backend,
their token ids kept in `sched.spec.answers_cache`. Acceptance itself needs no model
(`lengthpred.sched.spec.acceptance`); the records go to `sched.spec.path` (`lengthpred.sched.spec.records`)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lengthpred.data import load_prompts, load_splits
from lengthpred.errors import ConfigError, DataError
from lengthpred.generate.backends import Sample, make_backend
from lengthpred.generate.runner import encode_all
from lengthpred.generate.settings import GenerationSettings, derive_seed
from lengthpred.integrity import temp_path
from lengthpred.models.serving import load_tokenizer
from lengthpred.sched.spec import acceptance as sa
from lengthpred.sched.spec import records as sr
from lengthpred.sched.spec.report import acceptance_markdown
from lengthpred.stages.locations import generation_parts
from lengthpred.stages.model import model_device, model_spec

log = logging.getLogger("lengthpred")

Items = list[tuple[str, list[int]]]
Generate = Callable[[Items, GenerationSettings], Iterable[tuple[str, list[Sample]]]]
CACHE_SCHEMA = pa.schema([("id", pa.string()), ("sample", pa.int32()), ("finish_reason", pa.string()),
                          ("token_ids", pa.list_(pa.int32()))])


def prompt_items(cfg: DictConfig, tokenizer, settings: GenerationSettings, max_context: int) -> list[tuple[str, str, list[int]]]:
    """(id, domain, prompt token ids) of the split's prompts, encoded exactly as the generate stage encodes them."""
    sc = cfg.sched.spec
    prompts, splits = load_prompts(cfg.data), load_splits(cfg.data)
    ids = sorted({i for d in splits["indomain"].values() for i in d.get(sc.split, [])})
    if not ids:
        raise ConfigError(f"sched.spec.split={sc.split!r}: no in-domain prompts in that part (train | val | test)")
    ids = ids[: sc.limit] if sc.limit else ids
    enc = encode_all(prompts, ids, tokenizer, settings, settings.max_prompt_tokens or max_context - settings.max_new_tokens)
    domain = dict(zip(prompts["id"], prompts["domain"], strict=True))
    return [(i, str(domain[i]), enc.tokens[i]) for i in enc.ids]


def cache_files(cache_dir: Path) -> list[Path]:
    """This stage's own answer caches (`answers-<settings-hash>.parquet`, written by `_cached`)."""
    return sorted(cache_dir.glob("answers-*.parquet")) if cache_dir.is_dir() else []


def stored_answers(files: list[Path], items: list[tuple[str, str, list[int]]], samples: int) -> dict[str, list[Sample]]:
    """Answers with token ids already on disk (generate-stage parts, this stage's cache files) for prompts that
    have all `samples` of them; a stored prompt length that differs from the encoding stops with the id."""
    want = {pid: len(toks) for pid, _, toks in items}
    got: dict[str, dict[int, Sample]] = {}
    for f in files:
        cols = [c for c in ("id", "sample", "finish_reason", "prompt_tokens", "token_ids")
                if c in pq.ParquetFile(f).schema_arrow.names]
        for r in pq.read_table(f, columns=cols).to_pylist():
            pid, j = r["id"], int(r["sample"])
            if pid not in want or j >= samples or r.get("token_ids") is None:
                continue
            if "prompt_tokens" in r and int(r["prompt_tokens"]) != want[pid]:
                raise DataError(f"{f}: prompt {pid} was generated from {r['prompt_tokens']} prompt tokens, the "
                                f"encoding here gives {want[pid]}: different data or tokenizer")
            got.setdefault(pid, {})[j] = Sample(list(r["token_ids"]), r["finish_reason"])
    return {pid: [s[j] for j in range(samples)] for pid, s in got.items() if len(s) == samples}


def backend_generate(cfg: DictConfig) -> Generate:
    """Answers from the configured generation backend (vLLM: keeps `in_flight` prompts in the engine)."""

    def gen(items: Items, settings: GenerationSettings) -> Iterator[tuple[str, list[Sample]]]:
        backend, _, _ = make_backend(settings, model_spec(cfg), device=model_device(cfg))
        if settings.in_flight > 0 and hasattr(backend, "stream"):
            yield from backend.stream(iter(items), settings.in_flight)
            return
        for k in range(0, len(items), settings.batch_size):
            chunk = items[k: k + settings.batch_size]
            keys = [i for i, _ in chunk]
            out = backend.generate([t for _, t in chunk], keys, derive_seed(settings.seed, *keys))
            yield from zip(keys, out, strict=True)

    return gen


def _cached(answers: Iterable[tuple[str, list[Sample]]], path: Path) -> Iterator[tuple[str, list[Sample]]]:
    """Pass answers through, writing their token ids to `path` at the end (also after a crash)."""
    rows: list[dict] = []
    try:
        for pid, samples in answers:
            rows += [dict(id=pid, sample=j, finish_reason=s.finish_reason, token_ids=list(s.token_ids))
                     for j, s in enumerate(samples)]
            yield pid, samples
    finally:
        if rows:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_path(path)  # this writer's own
            pq.write_table(pa.Table.from_pylist(rows, schema=CACHE_SCHEMA), tmp)
            tmp.replace(path)


def measure_acceptance(cfg: DictConfig, *, generate: Generate | None = None, tokenizer=None, progress: bool = True) -> Path:
    """The measurement: prompts → answers (stored, else `generate`, default the configured backend) →
    acceptance records → `sched.spec.path`. Returns the path written."""
    sc = cfg.sched.spec
    if sc.answers not in ("auto", "stored", "vllm"):
        raise ConfigError(f"sched.spec.answers={sc.answers!r}; valid: auto, stored, vllm")
    drafter = sa.NgramDrafter(**OmegaConf.to_container(sc.drafter))
    stored_settings = GenerationSettings.from_cfg(cfg.generate)
    settings = dataclasses.replace(stored_settings, num_samples=int(sc.samples), limit=None)
    spec = instantiate(cfg.model)
    if tokenizer is None:
        tokenizer = load_tokenizer(spec)
    if not spec.max_context:
        raise ConfigError(f"model {spec.name}: set model.max_context (the prompt budget is max_context - max_new_tokens)")
    items = prompt_items(cfg, tokenizer, settings, int(spec.max_context))
    cache = Path(sc.answers_cache) / f"answers-{settings.settings_hash()}.parquet"
    files = [*generation_parts(cfg, stored_settings), *cache_files(cache.parent)] if sc.answers != "vllm" else []
    have = stored_answers(files, items, int(sc.samples))
    todo = [(pid, toks) for pid, _, toks in items if pid not in have]
    print(f"measure_acceptance: {len(items)} {sc.split} prompts of {cfg.data.name}; {len(have)} with stored answers, "
          f"{len(todo)} to generate" + (" (left out: sched.spec.answers=stored)" if sc.answers == "stored" else ""))
    if sc.answers == "stored":
        items = [it for it in items if it[0] in have]
        todo = []
        if not items:
            raise DataError(f"no stored answers with token ids for {cfg.data.name}/{sc.split} at these settings")

    def answers() -> Iterator[tuple[str, list[Sample]]]:
        yield from ((pid, have[pid]) for pid, _, _ in items if pid in have)
        if todo:
            yield from _cached((generate or backend_generate(cfg))(todo, settings), cache)

    frame = sa.measure(items, answers(), drafter, progress=progress)
    meta = {"drafter": drafter.to_dict(), "model": spec.name, "dtype": spec.dtype, "data": cfg.data.name,
            "split": sc.split, "samples": int(sc.samples), "settings": stored_settings.hashed() | {
                "num_samples": int(sc.samples)}, "n_rows": len(frame), "n_stored": len(have) * int(sc.samples)}
    path = sr.write_records(frame, sc.path, meta)
    records = sr.read_records(path)
    stats = sa.request_stats(records.frame, records.k, list(sc.early_k))
    print(acceptance_markdown(sa.variability_summary(stats, records.frame, records.k, list(sc.early_k)),
                              sa.by_domain(stats)))
    print(f"wrote {path} ({len(frame)} answers)")
    return path


def run_measure_acceptance(cfg: DictConfig, out: str | Path) -> Path:
    """The acceptance stage (`out`: its run folder): `measure_acceptance` with the configured backend. Returns
    the acceptance file."""
    return measure_acceptance(cfg)
