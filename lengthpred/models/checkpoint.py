"""A serving model's checkpoint on disk: an embedded GGUF dequantised once into safetensors, a local
checkpoint or an HF id; and its tokenizer (`serving_tokenizer`: the embedded SmolLM2's, loaded once).

Nothing here reaches a model hub unless the spec names an HF id. transformers is imported where a file is read.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
from pathlib import Path

from lengthpred.errors import ModelError
from lengthpred.integrity import (
    atomic_write_text,
    file_digest,
    locked,
    quarantine,
    sweep_stale_temps,
    temp_path,
)
from lengthpred.models.specs import ModelSpec, _package_dir, embedded_serving_spec
from lengthpred.paths import resolve

log = logging.getLogger(__name__)


def _gguf_source(spec: ModelSpec) -> tuple[Path, str] | None:
    """(dir, gguf file name) when the spec points at a GGUF, else None."""
    if not spec.gguf_file:
        return None
    src_dir = _package_dir(spec) if spec.package else resolve(spec.path)
    f = src_dir / spec.gguf_file
    if not f.is_file():
        raise ModelError(f"model {spec.name!r}: GGUF file not found: {f}; reinstall with `make setup`")
    return src_dir, spec.gguf_file


CHECKSUMS = "checksums.json"  # file name -> sha256 of every file of a dequantised cache, written with it
_VERIFIED: set[Path] = set()  # caches checked in this process (a stage loads the model and tokenizer)


def _cache_ready(cache: Path) -> bool:
    return (cache / "config.json").is_file() and any(cache.glob("*.safetensors")) and (
        cache / "tokenizer_config.json"
    ).is_file()


def _write_checksums(folder: Path) -> None:
    sums = {p.name: file_digest(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != CHECKSUMS}
    atomic_write_text(folder / CHECKSUMS, json.dumps(sums, indent=1, sort_keys=True))


def _cache_damage(cache: Path) -> str | None:
    """The first file of a cache that differs from its checksum (or is gone), else None; a cache from before
    checksums gets them now."""
    sums_file = cache / CHECKSUMS
    if not sums_file.is_file():
        _write_checksums(cache)
        return None
    try:
        sums = json.loads(sums_file.read_text())
    except ValueError:
        return CHECKSUMS
    for name, digest in sums.items():
        f = cache / name
        if not f.is_file() or file_digest(f) != digest:
            return name
    return None


def _verified_cache(cache: Path) -> bool:
    """True when the cache is complete and every file matches its checksum; a damaged cache is moved aside
    (`.bad`, one line naming the file) so it is rebuilt."""
    if cache in _VERIFIED:
        return True
    if not _cache_ready(cache):
        return False
    bad = _cache_damage(cache)
    if bad is not None:
        old = cache.with_name(cache.name + ".bad")
        shutil.rmtree(old, ignore_errors=True)
        quarantine(cache, f"{bad} does not match its checksum")
        return False
    _VERIFIED.add(cache)
    return True


def convert_gguf(spec: ModelSpec) -> Path:
    """Dequantise a GGUF once and save it as safetensors under `spec.cache_dir` (≈20 s; reload ≈0.1 s).

    A GGUF-loaded model refuses `save_pretrained`, so build a fresh model from the GGUF's config,
    load the dequantised state dict into it and save that. Each file's sha256 is stored with it
    (`checksums.json`) and checked once per process; a damaged cache is moved aside and rebuilt.
    """
    src = _gguf_source(spec)
    if src is None or not spec.cache_dir:
        raise ModelError(f"model {spec.name!r}: convert_gguf needs gguf_file and cache_dir")
    cache = resolve(spec.cache_dir)
    if cache in _VERIFIED:
        return cache
    # one converter per cache: a second process waits, then finds the cache made (or rebuilds a damaged one)
    with locked(cache.with_name(f".{cache.name}.lock")):
        sweep_stale_temps(cache.parent)
        if not _verified_cache(cache):
            _convert(spec, src, cache)
            _VERIFIED.add(cache)
    return cache


def _convert(spec: ModelSpec, src: tuple[Path, str], cache: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src_dir, gguf = src
    log.info("dequantising %s/%s into %s (once)", src_dir, gguf, cache)
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=gguf)
    config = AutoConfig.from_pretrained(src_dir, gguf_file=gguf)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=gguf, dtype=torch.float32)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    if missing or unexpected:
        raise ModelError(f"GGUF conversion of {spec.name!r}: missing {missing[:3]} unexpected {unexpected[:3]}")
    fresh.generation_config = loaded.generation_config
    tmp = temp_path(cache)  # this writer's own: a crash mid-save leaves no half cache behind
    fresh.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    _write_checksums(tmp)
    if cache.exists():  # an incomplete cache (from before the lock): replaced whole
        shutil.rmtree(cache)
    os.replace(tmp, cache)


def checkpoint_dir(spec: ModelSpec) -> str:
    """The directory or hub id `from_pretrained` should read."""
    if spec.gguf_file:
        return str(convert_gguf(spec))
    if spec.path:
        p = resolve(spec.path)
        if not p.is_dir() or not (p / "config.json").is_file():
            raise ModelError(f"model {spec.name!r}: {p} is not a readable HF checkpoint dir (no config.json)")
        return str(p)
    return spec.hf_id  # type: ignore[return-value]


@functools.lru_cache(maxsize=1)
def serving_tokenizer():
    """The embedded serving model's (SmolLM2) tokenizer, loaded once: the tiny test model borrows it, and the
    data stage counts tokens with it whatever model later generates."""
    return load_tokenizer(embedded_serving_spec())


def load_tokenizer(spec: ModelSpec):
    """The serving model's tokenizer (with its chat template). The tiny model borrows SmolLM2's."""
    from transformers import AutoTokenizer

    if spec.tiny:
        return serving_tokenizer()
    try:
        tok = AutoTokenizer.from_pretrained(checkpoint_dir(spec))
    except OSError as e:
        raise ModelError(f"model {spec.name!r}: cannot load tokenizer ({e.__class__.__name__}: {e})") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


@functools.lru_cache(maxsize=8)
def layer_shape(spec: ModelSpec) -> tuple[int, int] | None:
    """(decoder layers, hidden size) of a model without loading it, for sizing its feature store: the spec's own
    `num_hidden_layers`/`hidden_size`, else a local checkpoint's config.json; None otherwise (the embedded model,
    a hub id without them). Never reaches a hub, so the answer, and the store key it shapes, cannot change with
    what a cache happens to hold."""
    if spec.tiny:
        from lengthpred.models.tiny import TINY_HIDDEN, TINY_LAYERS

        return TINY_LAYERS, TINY_HIDDEN
    if spec.num_hidden_layers and spec.hidden_size:
        return int(spec.num_hidden_layers), int(spec.hidden_size)
    if not spec.path or spec.gguf_file:
        return None
    try:
        config = json.loads((resolve(spec.path) / "config.json").read_text())
    except (OSError, ValueError) as e:
        log.debug("no config for %s: %s", spec.name, e)
        return None
    config = config.get("text_config", config)  # a multimodal checkpoint's language model
    try:
        return int(config["num_hidden_layers"]), int(config["hidden_size"])
    except (KeyError, TypeError, ValueError):
        return None
