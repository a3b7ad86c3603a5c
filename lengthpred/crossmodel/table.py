"""The per-model length table of a prompt union: ids × models × k sampled lengths, NaN where a model has no row.

One prompt id has one row whichever model's lengths come with it, so one feature store serves every model.
A model's target for a prompt is the mean of its k samples; the "one predictor for all" target is the mean,
over the models that have the prompt, of those per-model means.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lengthpred.errors import DataError

ALL_MODELS = "all-models"  # the fit target "mean over models" (a row of the transfer matrix, never a column)


def short_model(name: str) -> str:
    """`meta-llama--Llama-3.1-8B-Instruct` → `Llama-3.1-8B-Instruct` (the one display formatter)."""
    return name.split("--", 1)[-1]


@dataclass
class LengthTable:
    """`samples[i, m, j]`: sample j of model m on prompt ids[i] (float tokens; NaN = no row for that model)."""

    ids: list[str]
    models: list[str]
    samples: np.ndarray  # [n_ids, n_models, k] float64
    cap: float | None = None  # a sample >= cap hit the generation limit (censored, counts as the cap)

    def __post_init__(self) -> None:
        self.samples = np.asarray(self.samples, dtype=np.float64)
        if self.samples.shape[:2] != (len(self.ids), len(self.models)) or self.samples.ndim != 3:
            raise DataError(f"length table: samples {self.samples.shape} do not match "
                            f"{len(self.ids)} ids × {len(self.models)} models × k")
        self._row = {pid: i for i, pid in enumerate(self.ids)}
        if len(self._row) != len(self.ids):
            raise DataError("length table: duplicate prompt ids")

    @property
    def k(self) -> int:
        return int(self.samples.shape[2])

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        try:
            return np.array([self._row[i] for i in ids], dtype=np.int64)
        except KeyError as e:
            raise DataError(f"length table has no prompt {e.args[0]!r}") from None

    def model_index(self, model: str) -> int:
        if model not in self.models:
            raise DataError(f"length table has no model {model!r}; models: {', '.join(self.models)}")
        return self.models.index(model)

    def has(self, model: str, ids: Sequence[str]) -> np.ndarray:
        """[n] bool: which of `ids` have model's samples (all k of them)."""
        s = self.samples[self.rows(ids), self.model_index(model)]
        return np.isfinite(s).all(axis=1)

    def ids_with(self, model: str, ids: Sequence[str]) -> list[str]:
        """The subset of `ids` (order kept) with model's samples; ALL_MODELS: with any model's."""
        mask = self.has_any(ids) if model == ALL_MODELS else self.has(model, ids)
        return [i for i, ok in zip(ids, mask, strict=True) if ok]

    def has_any(self, ids: Sequence[str]) -> np.ndarray:
        return np.isfinite(self.samples[self.rows(ids)]).all(axis=2).any(axis=1)

    def per_sample(self, model: str, ids: Sequence[str]) -> np.ndarray:
        """[n, k] samples of model on ids (every id must have them)."""
        s = self.samples[self.rows(ids), self.model_index(model)]
        if not np.isfinite(s).all():
            raise DataError(f"{short_model(model)}: some of the {len(ids)} prompts have no samples")
        return s

    def target(self, model: str, ids: Sequence[str]) -> np.ndarray:
        """[n] per-prompt mean of k samples (ALL_MODELS: mean over the models that have the prompt)."""
        if model == ALL_MODELS:
            s = self.samples[self.rows(ids)]  # [n, M, k]
            per_model = np.where(np.isfinite(s).all(axis=2), s.mean(axis=2), np.nan)
            if np.isnan(per_model).all(axis=1).any():
                raise DataError("all-models target: a prompt has no model's samples")
            return np.nanmean(per_model, axis=1)
        return self.per_sample(model, ids).mean(axis=1)

    def capped_frac(self, model: str, ids: Sequence[str]) -> np.ndarray:
        """[n] share of a prompt's samples at or above the cap (0 without a cap; ALL_MODELS: over models)."""
        if self.cap is None:
            return np.zeros(len(ids))
        if model == ALL_MODELS:
            s = self.samples[self.rows(ids)]
            ok = np.isfinite(s)
            return (np.where(ok, s, 0) >= self.cap).sum(axis=(1, 2)) / np.maximum(ok.sum(axis=(1, 2)), 1)
        return (self.per_sample(model, ids) >= self.cap).mean(axis=1)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, ids=np.array(self.ids), models=np.array(self.models), samples=self.samples,
                            cap=np.array(np.nan if self.cap is None else self.cap))
        return path

    @classmethod
    def load(cls, path: str | Path) -> LengthTable:
        with np.load(path) as z:
            cap = float(z["cap"])
            return cls([str(i) for i in z["ids"]], [str(m) for m in z["models"]], z["samples"],
                       None if np.isnan(cap) else cap)
