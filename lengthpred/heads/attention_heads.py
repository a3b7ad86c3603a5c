"""Attention importance from a subset of the model's attention heads, the subset chosen on validation.

A store with the `attn_heads` pool (lengthpred.features.settings.HEAD_POOL) holds, per prompt and per query
head k (decoder layer l of the store's `attn_layers`, head h), the state pooled by that head's importance
alone, P_k [d], and the head's share of the summed importance mass, m_k. Any set S of heads pools as

    x_S = Σ_{k∈S} m_k P_k / Σ_{k∈S} m_k,

which for S = every head is the store's `attn` pool (the same importance summed over heads and layers), so
"late layers only" and "heads chosen on validation" are two more sets, not two more extractions.

Choosing S on validation: every head alone is scored by the linear readout (ridge on standardised states,
log1p target, each α of the head's grid) fitted on train and scored on validation; the heads are ranked by
that score, and the number k of top-ranked heads pooled together is chosen by the validation Spearman of
the readout on x_S (α again chosen on validation). Test is never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lengthpred.errors import ConfigError, DataError
from lengthpred.metrics import spearman_rows


@dataclass(frozen=True)
class HeadStates:
    """One split's per-head pools: `states` [n, K, d] and `share` [n, K] over K = len(layers) × n_heads heads."""

    states: np.ndarray
    share: np.ndarray
    layers: tuple[int, ...]  # the decoder layers whose heads these are, in the store's order
    n_heads: int

    def __post_init__(self) -> None:
        n, k = self.share.shape
        if self.states.shape[:2] != (n, k) or k != len(self.layers) * self.n_heads:
            raise DataError(f"per-head pools of shape {self.states.shape} and shares {self.share.shape} do not "
                            f"match {len(self.layers)} layers × {self.n_heads} heads")

    @classmethod
    def from_columns(cls, flat: np.ndarray, share: np.ndarray, layers: Sequence[int], n_heads: int) -> HeadStates:
        """From a store's flat `hs.L{l}.attn_heads` column [n, K·d] and `attn_heads.share` [n, K]."""
        n, k = share.shape
        if k == 0 or flat.shape[1] % k:
            raise DataError(f"attn_heads column of width {flat.shape[1]} is not {k} heads × d")
        return cls(flat.reshape(n, k, flat.shape[1] // k), share, tuple(int(v) for v in layers), int(n_heads))

    def label(self, k: int) -> tuple[int, int]:
        """(decoder layer, head) of head index k."""
        return self.layers[k // self.n_heads], k % self.n_heads

    def heads_of_layers(self, layers: Sequence[int]) -> list[int]:
        """Indices of every head of these decoder layers (all must be in the store)."""
        missing = sorted(set(int(v) for v in layers) - set(self.layers))
        if missing:
            raise ConfigError(f"attention layers {missing} are not in the store's attn_layers {list(self.layers)}")
        keep = {int(v) for v in layers}
        return [k for k in range(len(self.layers) * self.n_heads) if self.label(k)[0] in keep]

    def pooled(self, heads: Sequence[int]) -> np.ndarray:
        """x_S [n, d] for the head indices `heads` (module docstring)."""
        idx = np.asarray(list(heads), dtype=int)
        if idx.size == 0:
            raise ConfigError("a head set needs at least one head")
        w = self.share[:, idx].astype(np.float64)
        total = w.sum(axis=1, keepdims=True)
        return (np.einsum("nk,nkd->nd", w, self.states[:, idx].astype(np.float64))
                / np.where(total > 0, total, 1.0)).astype(np.float32)


def _standardise(train: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, sd = train.mean(axis=0), train.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    return (train - mean) / sd, (other - mean) / sd


def ridge_val_scores(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray,
                     alphas: Sequence[float]) -> np.ndarray:
    """Validation Spearman of the linear readout (StandardScaler → ridge on log1p(y)) for each α, from one SVD.
    Spearman is rank-based, so the back-transform to tokens does not change it."""
    xt, xv = _standardise(x_train.astype(np.float64), x_val.astype(np.float64))
    z = np.log1p(np.maximum(np.asarray(y_train, dtype=np.float64), 0.0))
    zc = z - z.mean()
    u, s, vt = np.linalg.svd(xt, full_matrices=False)
    uz = u.T @ zc
    a = np.asarray(list(alphas), dtype=np.float64)
    coefs = vt.T @ (s / (s**2 + a[:, None]) * uz).T  # [d, n_alpha]: V diag(s / (s² + α)) Uᵀ z
    preds = (xv @ coefs).T  # [n_alpha, n_val]
    return spearman_rows(np.broadcast_to(np.asarray(y_val, dtype=np.float64), preds.shape), preds)


@dataclass(frozen=True)
class HeadChoice:
    """Per-head validation scores, the head ranking, and the top-k set chosen on validation."""

    head_val: np.ndarray  # [K] best validation Spearman of each head alone (over α)
    order: np.ndarray  # head indices, best first (ties: lower index first)
    k_val: dict[int, float]  # k → validation Spearman of the top-k heads pooled together (best α)
    k: int  # the chosen number of heads
    heads: list[int] = field(default_factory=list)  # the chosen head indices


def choose_heads(train: HeadStates, y_train: np.ndarray, val: HeadStates, y_val: np.ndarray,
                 alphas: Sequence[float], counts: Sequence[int]) -> HeadChoice:
    """Rank every head alone on validation, then choose among the top-k sets for each k of `counts` (capped at
    the number of heads; every head, the `attn` pool, is always a candidate) by validation Spearman; the
    smallest k wins a tie."""
    if len(y_train) < 3 or len(y_val) < 2:
        raise DataError(f"choosing attention heads needs train and val prompts ({len(y_train)}, {len(y_val)})")
    n = train.share.shape[1]
    if val.share.shape[1] != n:
        raise DataError("train and val per-head pools come from different stores")
    if any(int(c) < 1 for c in counts):
        raise ConfigError(f"head counts {list(counts)}: every count must be >= 1")
    ks = sorted({min(int(c), n) for c in counts} | {n})
    head_val = np.array([np.nanmax(ridge_val_scores(train.states[:, k], y_train, val.states[:, k], y_val, alphas))
                         for k in range(n)])
    order = np.lexsort((np.arange(n), -np.nan_to_num(head_val, nan=-2.0)))
    k_val = {}
    for k in ks:
        top = order[:k]
        k_val[k] = float(np.nanmax(ridge_val_scores(train.pooled(top), y_train, val.pooled(top), y_val, alphas)))
    best = max(ks, key=lambda k: (np.nan_to_num(k_val[k], nan=-2.0), -k))
    return HeadChoice(head_val, order, k_val, best, sorted(int(i) for i in order[:best]))
