"""What a prompt set is built from: the keys of `conf/data/*.yaml`, typed, for the two kinds `prepare` builds.

`data_settings(data_cfg)` reads a data group into `SourceData` (`kind: sources`, the pinned public datasets)
or `TraceData` (`kind: trace`, a user's or CASTILLO's file of prompts and lengths); an unknown key is a
ConfigError naming it. The prepared set's cache key stays the hash of the group's mapping
(`lengthpred.data.build.config_hash`), so reading it through these classes changes no key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lengthpred.errors import ConfigError
from lengthpred.settings import settings_from

# keys a data group holds for someone else: the fetch script's, and the CASTILLO model the trace keys interpolate
NOT_BUILD_KEYS = ("fetch", "castillo_model")


@dataclass(frozen=True)
class Forelen:
    """`data.forelen`: how many prompts each ForeLen-style subset takes (None: all of them)."""

    longseq: int | None = None  # the longest prompts
    reasoning: int | None = None  # chain-of-thought variants of math prompts (0: none)
    rl: int | None = None  # math and code prompts, many samples each
    cot_instruction: str = "Let's think step by step."
    exclude_train: bool = False  # no subset prompt (nor a CoT variant's base) is in any train split


@dataclass(frozen=True)
class SourceData:
    """`kind: sources`: per-domain samples of the pinned public datasets under `root`."""

    name: str
    root: str
    domains: dict[str, Any]  # domain -> the sources it draws from
    split: dict[str, Any]  # train / val / test: counts or fractions per domain
    seed: int = 0
    per_domain: int | None = None  # prompts per domain (None: all)
    max_prompt_chars: int | None = None  # a cheap pre-filter before the token rule
    max_prompt_tokens: int | None = None  # chat-templated tokens of the serving tokenizer
    on_bad_input: str = "raise"
    cross_mix: bool = True
    forelen: Forelen = field(default_factory=Forelen)
    kind: str = "sources"
    out_dir: str | None = None
    length_stat: str = "mean"  # how a prompt's recorded lengths become its `length`


@dataclass(frozen=True)
class TraceData:
    """`kind: trace`: prompts with their lengths from JSONL / CSV / Parquet files (a glob, a list, or folders
    holding `trace_file`)."""

    name: str
    train_path: str | tuple[str, ...] | None = None
    test_path: str | tuple[str, ...] | None = None  # None: test carved from train (test_fraction)
    trace_file: str | None = None
    prompt_field: str = "prompt"
    length_field: str | None = "length"
    length_stat: str = "mean"
    domain_field: str | None = None
    length_model: str = "trace"
    seed: int = 0
    val_fraction: float = 0.1
    test_fraction: float = 0.2
    cross_mix: bool = True
    on_bad_input: str = "raise"
    forelen: Forelen = field(default_factory=Forelen)
    kind: str = "trace"
    out_dir: str | None = None


KINDS: dict[str, type[SourceData] | type[TraceData]] = {"sources": SourceData, "trace": TraceData}


def data_settings(data_cfg: Mapping[str, Any]) -> SourceData | TraceData:
    """A data group's build settings; its `kind` picks the class."""
    kind = str(data_cfg.get("kind", "sources"))
    cls = KINDS.get(kind)
    if cls is None:
        raise ConfigError(f"data.kind={kind!r}: prepare builds {' or '.join(KINDS)} (castillo_union is read by "
                          "experiment=castillo)")
    fl = settings_from(Forelen, data_cfg.get("forelen"), group="data.forelen")
    return settings_from(cls, data_cfg, group=f"data (kind {kind})", skip=NOT_BUILD_KEYS, forelen=fl)
