"""What the decode-time extraction reads and stores (`conf/decode/default.yaml`), checked before any work."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from lengthpred.errors import ConfigError

DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class DecodeSettings:
    """layer: HF hidden_states index read at each checkpoint (0 = embeddings, num_layers = after the final norm).
    every: checkpoint interval k in generated tokens; also_at: extra checkpoints (the curve's points, so a
    k that does not divide them still scores there); token 0 (the prompt's last token) is always one.
    sample: which sampled answer of each prompt (one per prompt). max_t: no checkpoint after t tokens generated
    (the forward stops there too: a curve up to 128 tokens needs no states beyond; None: to the answer's end)."""

    layer: int = 20
    every: int = 8
    also_at: tuple[int, ...] = (8, 16, 32, 64, 128)
    sample: int = 0
    max_t: int | None = None
    dtype: str = "float16"
    batch_size: int = 8
    max_batch_tokens: int = 8192
    limit: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys are an error, kept only to name them

    def __post_init__(self) -> None:
        if self.extra:
            raise ConfigError(f"decode: unknown keys {sorted(self.extra)}")
        if int(self.every) < 1:
            raise ConfigError(f"decode.every={self.every}: the checkpoint interval k must be >= 1")
        if any(int(t) < 0 for t in self.also_at):
            raise ConfigError(f"decode.also_at={list(self.also_at)}: tokens generated must be >= 0")
        if self.max_t is not None and int(self.max_t) < 0:
            raise ConfigError(f"decode.max_t={self.max_t} must be >= 0 or null")
        if self.dtype not in DTYPES:
            raise ConfigError(f"decode.dtype={self.dtype!r}: one of {DTYPES}")
        if int(self.sample) < 0:
            raise ConfigError(f"decode.sample={self.sample} must be >= 0")
        if int(self.batch_size) < 1 or int(self.max_batch_tokens) < 1:
            raise ConfigError("decode.batch_size and decode.max_batch_tokens must be >= 1")
        if self.limit is not None and int(self.limit) < 1:
            raise ConfigError("decode.limit must be >= 1 or null")

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any]) -> DecodeSettings:
        d = dict(cfg)
        known = {k: d.pop(k) for k in list(d) if k in cls.__dataclass_fields__ and k != "extra"}
        for k in ("generations", "partial", "curve", "online", "name"):  # read by the stages, not by the extraction
            d.pop(k, None)
        if "also_at" in known:
            known["also_at"] = tuple(int(t) for t in (known["also_at"] or ()))
        return cls(**known, extra=d)

    def hashed(self) -> dict[str, Any]:
        """The fields that change what is stored (not batching or limit)."""
        d = asdict(self)
        return {k: d[k] for k in ("layer", "every", "also_at", "sample", "max_t", "dtype")} | {"also_at": list(self.also_at)}


def checkpoints(length: int, every: int, also_at: Sequence[int] = (), max_t: int | None = None) -> np.ndarray:
    """Tokens generated t at which an answer of `length` tokens is still running (0 <= t < length), at
    multiples of `every` and at `also_at`, none after `max_t`, sorted: [n] int64. Empty for an empty answer."""
    if every < 1:
        raise ConfigError(f"checkpoint interval k={every} must be >= 1")
    end = int(length) if max_t is None else min(int(length), int(max_t) + 1)
    ts = set(range(0, max(end, 0), int(every))) | {int(t) for t in also_at if 0 <= int(t) < end}
    return np.array(sorted(ts), dtype=np.int64)
