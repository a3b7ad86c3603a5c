"""What a generation run is: the sampling settings that make its lengths comparable, and their hash."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lengthpred.errors import ConfigError
from lengthpred.settings import settings_from

BACKEND_NAMES = ("cb", "static", "vllm")
OVERFLOWS = ("reject", "truncate")
NOT_SETTINGS = ("targets", "export_reference", "commit_parts")  # keys of conf/generate that are read elsewhere
# fields that change what is generated: they form the settings hash (and so the output folder)
HASHED = (
    "backend", "num_samples", "temperature", "top_p", "top_k", "repetition_penalty",
    "max_new_tokens", "seed", "max_prompt_tokens", "overflow",
)


@dataclass(frozen=True)
class GenerationSettings:
    """The sampling settings of one generation run (the keys of `conf/generate/*.yaml`)."""

    backend: str = "cb"  # cb: transformers continuous batching; static: generate(); vllm: the `vllm` extra
    num_samples: int = 3  # answers per prompt (noise ceiling, ForeLen RL subset)
    temperature: float = 0.7  # 0 = greedy
    top_p: float = 0.9
    top_k: int = 0  # 0 = off
    repetition_penalty: float = 1.0
    max_new_tokens: int = 256  # the cap: an answer that reaches it is censored (finish_reason "length")
    seed: int = 0
    max_prompt_tokens: int | None = None  # None: model max_context - max_new_tokens
    overflow: str = "truncate"  # over-long prompt: reject (skipped, counted) or truncate (counted)
    batch_size: int = 16  # prompts per part file: a crash loses at most one part
    limit: int | None = None  # only the first `limit` prompts of the id-sorted set (a live slice)
    # streaming backends (vllm): prompts kept in the engine at once, so its batch stays full across part
    # boundaries; 0 = one engine call per part (the batch drains at the end of every part)
    in_flight: int = 0
    engine_args: dict | None = None  # extra engine keyword arguments (vllm: max_num_seqs, enforce_eager, ...)

    def __post_init__(self) -> None:
        if self.backend not in BACKEND_NAMES:
            raise ConfigError(f"generate.backend={self.backend!r}: use one of {list(BACKEND_NAMES)}")
        if self.overflow not in OVERFLOWS:
            raise ConfigError(f"generate.overflow={self.overflow!r}: use one of {list(OVERFLOWS)}")
        if self.num_samples < 1 or self.max_new_tokens < 1 or self.batch_size < 1:
            raise ConfigError("generate.num_samples, max_new_tokens and batch_size must be >= 1")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ConfigError("generate: need temperature >= 0, 0 < top_p <= 1, top_k >= 0")
        if self.num_samples > 1 and self.temperature == 0:
            raise ConfigError("generate.num_samples > 1 with temperature 0 gives identical samples")
        if self.in_flight < 0:
            raise ConfigError("generate.in_flight must be >= 0")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("generate.limit must be >= 1 or null")

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any]) -> GenerationSettings:
        """From the `generate` config group; unknown keys are a config error naming them."""
        return settings_from(cls, cfg, group="generate", skip=NOT_SETTINGS)

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0

    def hashed(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in HASHED}

    def settings_hash(self) -> str:
        """12 hex chars over the fields that change the answers (not batch_size or limit)."""
        blob = json.dumps(self.hashed(), sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]


def derive_seed(seed: int, *keys: object) -> int:
    """A 31-bit seed from the run seed and any keys (prompt id, sample, part), stable across machines."""
    blob = json.dumps([seed, *[str(k) for k in keys]])
    return int.from_bytes(hashlib.sha1(blob.encode()).digest()[:4], "big") & 0x7FFFFFFF
