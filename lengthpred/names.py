"""Typed names: one formatter and one parser per kind of name the stages pass around as strings.

- `FeatureKey(layer, pool)` ↔ `hs.L{layer}.{pool}`: a pooled feature column of the store (docs/DESIGN.md
  "Features"), `layer` the HF `hidden_states` index. The store's token-level tensors are `hs.L{layer}`
  (`hidden_name`); its scalar columns (`n_prompt_tokens`, `entropy.mean`) are not feature keys.
- `SplitName(kind, name, part)` ↔ a predictions file's `split` (docs/DESIGN.md "Predictions file"):
  `indomain/<domain>/<part>` (`<domain>` may be `all`, every domain pooled), `cross/<S>-><T>/<part>`,
  `forelen/<subset>`.
- `rls_name(λ)` ↔ `forgetting_of(name)`: an online RLS head, `rls@<λ>` (`rls@1`, `rls@0.999`); `rls@<λ>+mean` is
  its mean-label oracle and `rls@val` the head whose λ was chosen on the stream's validation requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from lengthpred.errors import ConfigError, DataError

HS = "hs.L"  # prefix of every hidden-state name
POOLED_DOMAIN = "all"  # `indomain/all/<part>`: every domain's in-domain rows pooled
PAIR_SEP = "->"


def hidden_name(layer: int) -> str:
    """`hs.L{layer}`: the token-level states of one layer (the store's `*.tokens.safetensors`)."""
    return f"{HS}{int(layer)}"


@dataclass(frozen=True)
class FeatureKey:
    """A pooled hidden-state column: `str(FeatureKey(20, "last")) == "hs.L20.last"`."""

    layer: int
    pool: str

    @property
    def name(self) -> str:
        return f"{hidden_name(self.layer)}.{self.pool}"

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def is_key(name: str) -> bool:
        """Whether `name` is a hidden-state column (vs a scalar one such as `n_prompt_tokens`)."""
        return str(name).startswith(HS)

    @classmethod
    def parse(cls, name: str) -> FeatureKey:
        """`hs.L20.last` → FeatureKey(20, "last"); pools may hold dots (`hs.L2.fused_mix0.5`)."""
        layer, dot, pool = str(name).removeprefix(HS).partition(".")
        if not str(name).startswith(HS) or not dot or not pool or not layer.isdigit():
            raise ConfigError(f"feature {name!r} is not of the form hs.L<layer>.<pooling> (e.g. hs.L20.last)")
        return cls(int(layer), pool)


RLS_PREFIX = "rls@"
SELECTED_RLS = "rls@val"  # the online stage's RLS head with λ chosen on the stream's validation requests
MEAN_SUFFIX = "+mean"


def rls_name(forgetting: float) -> str:
    """`rls@1`, `rls@0.999`: an RLS head with forgetting factor λ, in curves, predictions and cost files."""
    return f"{RLS_PREFIX}{float(forgetting):g}"


def mean_oracle_name(forgetting: float) -> str:
    """`rls@1+mean`: RLS updated with the mean of each prompt's samples (an oracle no server has)."""
    return f"{rls_name(forgetting)}{MEAN_SUFFIX}"


def forgetting_of(head: str) -> float:
    """`rls@0.99` → 0.99; anything else (`rls@val`, `rls@1+mean`, `static`) a ConfigError."""
    name = str(head)
    try:
        lam = float(name.removeprefix(RLS_PREFIX)) if name.startswith(RLS_PREFIX) else math.nan
    except ValueError:
        lam = math.nan
    if not math.isfinite(lam):
        raise ConfigError(f"{head!r} is not an rls@<λ> head")
    return lam


def is_rls(head: str) -> bool:
    """Whether `head` is a plain `rls@<λ>` head (not `rls@val`, not `rls@<λ>+mean`)."""
    try:
        forgetting_of(head)
    except ConfigError:
        return False
    return True


def pair_name(source: str, target: str) -> str:
    """`<S>-><T>`: a cross-domain pair's name in splits.json."""
    return f"{source}{PAIR_SEP}{target}"


@dataclass(frozen=True)
class SplitName:
    """A predictions file's split: `kind` (indomain | cross | forelen), `name` (the domain, the pair
    `<S>-><T>` or the subset) and `part` (train | val | test | stream | stream_val; "" for forelen)."""

    kind: str
    name: str
    part: str = ""

    KINDS: ClassVar[tuple[str, ...]] = ("indomain", "cross", "forelen")
    FORMS: ClassVar[str] = "indomain/<domain>/<part>, cross/<source>-><target>/<part> or forelen/<subset>"

    @classmethod
    def indomain(cls, domain: str, part: str) -> SplitName:
        return cls("indomain", str(domain), str(part))

    @classmethod
    def cross(cls, pair: str, part: str) -> SplitName:
        """`pair`: the pair's name in splits.json, `<S>-><T>` (`pair_name`)."""
        return cls("cross", str(pair), str(part))

    @classmethod
    def forelen(cls, subset: str) -> SplitName:
        return cls("forelen", str(subset))

    @staticmethod
    def prefix(kind: str) -> str:
        """`cross/`: what every split of one kind starts with."""
        return f"{kind}/"

    @property
    def source(self) -> str:
        return self.name.split(PAIR_SEP, 1)[0]

    @property
    def target(self) -> str:
        return self.name.split(PAIR_SEP, 1)[1]

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}/{self.part}" if self.part else f"{self.kind}/{self.name}"

    @classmethod
    def parse(cls, split: str) -> SplitName:
        """`cross/chat->math/test` → SplitName("cross", "chat->math", "test"); anything else a DataError."""
        out = cls.try_parse(split)
        if out is None:
            raise DataError(f"split {split!r} is not of the form {cls.FORMS}")
        return out

    @classmethod
    def try_parse(cls, split: str) -> SplitName | None:
        """As `parse`, None for a name that is not a split of ours (e.g. a bare `test`)."""
        parts = str(split).split("/")
        if not all(parts):
            return None
        kind = parts[0]
        if kind == "forelen" and len(parts) == 2:
            return cls(kind, parts[1])
        if kind not in ("indomain", "cross") or len(parts) != 3:
            return None
        if kind == "cross":
            src, sep, tgt = parts[1].partition(PAIR_SEP)
            if not (src and sep and tgt):
                return None
        return cls(kind, parts[1], parts[2])
