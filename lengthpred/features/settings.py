"""What a feature extraction is: layers, poolings, fusion variants, storage dtype, and its cache key.

Column names: `hs.L{l}.{pool}` with `l` the HF `hidden_states` index (0 = embeddings, the last index is
after the final norm) plus the scalars `n_prompt_tokens` and `entropy.mean`. Which tokens the pools range
over (`span`) and how attention importance is computed and fused (`attn_norm`, `fuse_on`) are part of the
cache key and the manifest, not of the column name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lengthpred.errors import ConfigError
from lengthpred.settings import settings_from

POOLS = ("last", "mean", "entropy", "attn")
# per attention head (decoder layer l of attn_layers, head h): hidden_states layer L's state pooled by that
# head's importance alone, column `hs.L{L}.attn_heads` [n_heads_total × d], and each head's share of the mass,
# `attn_heads.share` [n_heads_total]; any set S of heads pools as Σ_S share·state / Σ_S share, which for every
# head is `attn` (lengthpred.heads.attention_heads). Not a default pool: a store of its own.
HEAD_POOL = "attn_heads"
HEAD_SHARE = "attn_heads.share"
OVERFLOWS = ("reject", "truncate")
STAGE_KEYS = ("trim", "compact")  # keys of conf/features the extract stage reads (lengthpred.stages.features)
PADDING_SIDES = ("left", "right")
STORE_DTYPES = ("float16", "bfloat16", "float32")
SCALARS = ("n_prompt_tokens", "entropy.mean")
SPANS = ("content", "all")
ATTN_NORMS = ("lift", "per_query", "sum")
FUSE_ON = ("log", "rank", "z")
_FUSED = re.compile(r"^(mix(?P<alpha>[0-9]*\.?[0-9]+)|prod)$")
# fields that change what is stored: they form the cache key (not batching, chunking or padding side)
HASHED = ("layers", "pools", "fused", "attn_layers", "token_layers", "dtype", "entropy_dtype", "max_prompt_tokens",
          "overflow", "span", "drop_sink", "attn_norm", "fuse_on")
# what every store written before these fields existed did: at these values a field stays out of the cache
# key, so old stores keep their key (and a store whose manifest lacks them was made this way)
LEGACY_POOLING = {"span": "all", "drop_sink": False, "attn_norm": "sum", "fuse_on": "z"}


def _as_layers(value: Any, key: str) -> str | tuple[int, ...]:
    if value in ("all", None) and key != "token_layers":
        return "all"
    if value is None:
        return ()
    if isinstance(value, str):
        raise ConfigError(f"features.{key}={value!r}: use 'all' or a list of integer indices")
    try:
        return tuple(sorted(dict.fromkeys(int(v) for v in value)))
    except (TypeError, ValueError):
        raise ConfigError(f"features.{key}={value!r}: use 'all' or a list of integer indices") from None


@dataclass(frozen=True)
class FeatureSettings:
    """The keys of `conf/features/*.yaml`."""

    # HF hidden_states indices (0 = embeddings, num_layers = after the final norm); negatives count
    # from the end; "all" = every index, so layer choice is an experiment rather than a guess
    layers: str | tuple[int, ...] = "all"
    pools: tuple[str, ...] = POOLS
    # ESTP fusions of entropy H and attention importance A, each stored as pool `fused_<spec>`:
    # "mix<alpha>": w = softmax(alpha z(H) + (1-alpha) z(A)); "prod": w ∝ softmax(H) · A
    fused: tuple[str, ...] = ("mix0.5", "prod")
    # decoder-layer indices (0-based, negatives from the end) whose attention gives importance A
    attn_layers: str | tuple[int, ...] = "all"
    token_layers: tuple[int, ...] = ()  # hidden_states indices also stored token-level (separate file)
    # tokens every pool except `last` ranges over: "content" = the user/assistant messages' own tokens
    # (no system block, role markers or assistant header: identical in every prompt); "all" = every token
    span: str = "content"
    drop_sink: bool = False  # span=all only: leave the first token (the attention sink) out of the pools
    # attention importance of token j from the attention a_ij it receives (summed over heads and layers):
    # "lift" = mean over the real queries i that see j of a_ij / (1 / #keys i sees), 1 everywhere under
    # uniform attention; "per_query" = mean of a_ij over those queries; "sum" = Σ_i a_ij, which favours
    # early tokens by causal position alone
    attn_norm: str = "lift"
    # scores the fused pools mix: "log" = z(H) and z(log A); "rank" = z-scored ranks of both (bounded, so
    # one extreme token cannot take all the weight); "z" = z(H) and z(A)
    fuse_on: str = "log"
    dtype: str = "float16"  # storage dtype of pooled features
    # dtype of the LM-head matmul behind entropy: the one cost a plain prefill does not pay (it computes
    # logits for the last position only); bfloat16 halves it on CPUs with bf16 units, error ≈0.02 nats
    entropy_dtype: str = "float32"
    batch_size: int = 16  # prompts per forward (and per part file: a crash loses at most one batch)
    max_batch_tokens: int = 8192  # padded tokens per forward: bounds memory whatever the prompt count
    padding_side: str = "left"
    max_prompt_tokens: int | None = None  # None: the model's max_context
    overflow: str = "truncate"  # as in generation: reject (skipped, listed) or truncate
    entropy_chunk: int = 256  # prompt tokens per lm_head chunk when computing entropy
    attn_chunk: int = 128  # query positions per chunk when recomputing attention weights
    limit: int | None = None  # only the first `limit` prompts of the id-sorted set

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", _as_layers(self.layers, "layers"))
        object.__setattr__(self, "attn_layers", _as_layers(self.attn_layers, "attn_layers"))
        object.__setattr__(self, "token_layers", _as_layers(self.token_layers, "token_layers"))
        object.__setattr__(self, "pools", tuple(dict.fromkeys(self.pools or ())))
        object.__setattr__(self, "fused", tuple(dict.fromkeys(str(f) for f in (self.fused or ()))))
        bad = [p for p in self.pools if p not in (*POOLS, HEAD_POOL)]
        if bad:
            raise ConfigError(f"features.pools: unknown {bad}; valid: {[*POOLS, HEAD_POOL]}")
        for f in self.fused:
            if not _FUSED.match(f):
                raise ConfigError(f"features.fused: {f!r} is not 'mix<alpha>' (e.g. mix0.5) or 'prod'")
            m = _FUSED.match(f)
            if m.group("alpha") is not None and not 0.0 <= float(m.group("alpha")) <= 1.0:
                raise ConfigError(f"features.fused: {f!r} needs 0 <= alpha <= 1")
        if self.dtype not in STORE_DTYPES:
            raise ConfigError(f"features.dtype={self.dtype!r}: use one of {list(STORE_DTYPES)}")
        if self.entropy_dtype not in STORE_DTYPES:
            raise ConfigError(f"features.entropy_dtype={self.entropy_dtype!r}: use one of {list(STORE_DTYPES)}")
        for key, valid in (("span", SPANS), ("attn_norm", ATTN_NORMS), ("fuse_on", FUSE_ON)):
            if getattr(self, key) not in valid:
                raise ConfigError(f"features.{key}={getattr(self, key)!r}: use one of {list(valid)}")
        if not isinstance(self.drop_sink, bool):
            raise ConfigError(f"features.drop_sink={self.drop_sink!r}: use true or false")
        if self.overflow not in OVERFLOWS:
            raise ConfigError(f"features.overflow={self.overflow!r}: use one of {list(OVERFLOWS)}")
        if self.padding_side not in PADDING_SIDES:
            raise ConfigError(f"features.padding_side={self.padding_side!r}: use one of {list(PADDING_SIDES)}")
        for k in ("batch_size", "max_batch_tokens", "entropy_chunk", "attn_chunk"):
            if int(getattr(self, k)) < 1:
                raise ConfigError(f"features.{k} must be >= 1")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("features.limit must be >= 1 or null")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ConfigError("features.max_prompt_tokens must be >= 1 or null")

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any]) -> FeatureSettings:
        """From the `features` config group; `name`, `trim` and `compact` (read by the extract stage) are not
        settings, unknown keys are a config error."""
        return settings_from(cls, cfg, group="features", skip=("name", *STAGE_KEYS))

    @property
    def needs_attention(self) -> bool:
        return "attn" in self.pools or HEAD_POOL in self.pools or bool(self.fused)

    @property
    def per_head(self) -> bool:
        """Whether importance is kept per attention head (pool `attn_heads`)."""
        return HEAD_POOL in self.pools

    @property
    def needs_entropy(self) -> bool:
        """Entropy costs the LM head over every prompt token: computed only for entropy/fused pools."""
        return "entropy" in self.pools or bool(self.fused)

    @property
    def uses_span(self) -> bool:
        """Whether any pool ranges over a span (`last` is the last prompt token whatever the span)."""
        return bool(set(self.pools) - {"last"} or self.fused)

    @property
    def pool_names(self) -> tuple[str, ...]:
        return self.pools + tuple(f"fused_{f}" for f in self.fused)

    def only(self, needs: Sequence[tuple[int | None, str | None]]) -> FeatureSettings:
        """These settings reduced to what some heads read, each need a (hidden_states layer, pooling) pair:
        `fused_<spec>` a fusion, `learned` the layer token by token with entropy and attention, (None, None)
        the scalar columns alone (from the cheapest pool of the last layer). Span and scores are kept."""
        layers, pools, fused, tokens = [], [], [], []
        for layer, pooling in needs:
            if layer is None or pooling is None:
                layers.append(-1)
                pools.append("last")
                continue
            layers.append(int(layer))
            if pooling == "learned":
                pools += ["entropy", "attn"]
                tokens.append(int(layer))
            elif pooling.startswith("fused_"):
                fused.append(pooling.removeprefix("fused_"))
            else:
                pools.append(pooling)
        return dataclasses.replace(self, layers=tuple(layers), pools=tuple(pools), fused=tuple(fused),
                                   token_layers=tuple(tokens))

    @property
    def pooling(self) -> dict[str, Any]:
        """How the pools are computed (written to the manifest; `FeatureSet.pooling` reads it back)."""
        return {k: getattr(self, k) for k in LEGACY_POOLING}

    def hashed(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in HASHED}
        if not self.needs_attention:
            d["attn_layers"] = None  # unused: must not split the cache
            d["attn_norm"] = LEGACY_POOLING["attn_norm"]
        if not self.fused:
            d["fuse_on"] = LEGACY_POOLING["fuse_on"]
        if self.span == "content" or not self.uses_span:
            d["drop_sink"] = LEGACY_POOLING["drop_sink"]
        if not self.uses_span:
            d["span"] = LEGACY_POOLING["span"]
        for k, v in LEGACY_POOLING.items():
            if d[k] == v:
                del d[k]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def resolve_indices(spec: str | Sequence[int], n: int, what: str) -> list[int]:
    """'all' → 0..n-1; negative indices count from the end; out of range is a ConfigError."""
    if spec == "all":
        return list(range(n))
    out = []
    for i in spec:
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise ConfigError(f"features.{what}: index {i} out of range for this model (valid 0..{n - 1})")
        out.append(j)
    return sorted(dict.fromkeys(out))


def prompts_hash(records: Sequence[tuple[str, Any]]) -> str:
    """sha1 over the (id, messages) pairs in id order: the prompt half of the cache key."""
    h = hashlib.sha1()
    for pid, messages in sorted(records, key=lambda r: r[0]):
        h.update(json.dumps([pid, messages], sort_keys=True, default=str).encode())
    return h.hexdigest()


def cache_key(settings: FeatureSettings, model_id: Mapping[str, Any], prompt_hash: str) -> str:
    """16 hex chars over model identity, the stored-feature settings and the prompts."""
    blob = json.dumps({"model": dict(model_id), "features": settings.hashed(), "prompts": prompt_hash},
                      sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]
