"""What the heads read about the union's prompts, loaded once: feature columns, texts, datasets, token counts.

The prefill of the embedded model is extracted once per prompt; every target model's fit reads the same
rows. `prompt_len` reads the full (untruncated) templated token count, so truncating long prompts for
extraction does not cap that baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lengthpred.crossmodel.table import LengthTable
from lengthpred.errors import DataError
from lengthpred.heads import HeadInput, LabeledSet
from lengthpred.heads.assemble import prompt_text
from lengthpred.prompting import encode_prompt


def prompt_tokens(tokenizer: Any, records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """id → chat-templated token count, untruncated (the serving tokenizer, as extraction encodes)."""
    return {r["id"]: len(encode_prompt(tokenizer, r["messages"], prompt_id=r["id"])) for r in records}


@dataclass
class PromptInputs:
    """Rows aligned with `ids`: `features` {column name: [n, d]}, `texts`, `datasets`, `n_tokens` [n], and each
    prompt's chat `messages` (for heads that run the serving model)."""

    ids: list[str]
    features: dict[str, np.ndarray]
    texts: list[str]
    datasets: list[str]
    n_tokens: np.ndarray
    messages: list[list[dict]] | None = None

    def __post_init__(self) -> None:
        self._row = {pid: i for i, pid in enumerate(self.ids)}
        n = len(self.ids)
        bad = {k: len(v) for k, v in self.features.items() if len(v) != n}
        if bad or len(self.texts) != n or len(self.datasets) != n or len(self.n_tokens) != n:
            raise DataError(f"prompt inputs: {n} ids but rows {bad or ''} texts {len(self.texts)} "
                            f"datasets {len(self.datasets)} tokens {len(self.n_tokens)}")

    @classmethod
    def build(cls, records: Sequence[Mapping[str, Any]], features: Any, columns: Sequence[str],
              n_tokens: Mapping[str, int]) -> PromptInputs:
        """From prompt records (with `dataset`), a FeatureSet (or None when no head reads features) and the
        feature columns the heads read."""
        ids = [r["id"] for r in records]
        cols: dict[str, np.ndarray] = {}
        if columns:
            sub = features.subset(ids)
            cols = {c: sub.get(c) for c in columns}
        return cls(ids, cols, [prompt_text(r["messages"]) for r in records], [str(r["dataset"]) for r in records],
                   np.array([float(n_tokens[i]) for i in ids]), [list(r["messages"]) for r in records])

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        return np.array([self._row[i] for i in ids], dtype=np.int64)

    def head_input(self, ids: Sequence[str], feature: str | None) -> HeadInput:
        """The HeadInput of `ids`; `domains` are the dataset names (the dataset-median baseline's groups)."""
        r = self.rows(ids)
        if feature is not None and feature not in self.features:
            raise DataError(f"feature {feature!r} not loaded; loaded: {sorted(self.features)}")
        return HeadInput(
            ids=list(ids),
            features=None if feature is None else self.features[feature][r],
            texts=[self.texts[i] for i in r],
            messages=None if self.messages is None else [self.messages[i] for i in r],
            domains=[self.datasets[i] for i in r],
            n_prompt_tokens=self.n_tokens[r],
        )

    def labeled(self, table: LengthTable, target: str, ids: Sequence[str], feature: str | None) -> LabeledSet:
        """`ids` (those with target's samples) labelled with target's mean-of-k lengths."""
        have = table.ids_with(target, ids)
        return LabeledSet(
            self.head_input(have, feature),
            table.target(target, have),
            n_samples=np.full(len(have), table.k),
            capped_frac=table.capped_frac(target, have),
        )
