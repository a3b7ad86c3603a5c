"""One selection protocol for every learned head: a random search of the same budget over each head's space.

A head config's `select:` is its declared search space (constructor keywords → lists of values) and its
`search:` node (conf/search/default.yaml, the same for every head) the budget: `budget` candidates drawn
with `sklearn.model_selection.ParameterSampler` (without replacement from the grid of list-valued spaces,
seeded by `search.seed`), each fitted on train and scored on val; the best validation Spearman wins.
A space with fewer combinations than the budget is a ConfigError naming the head, so no family gets a
smaller search by accident. `search.subsample: N` runs the search on N seeded train prompts and refits the
chosen candidate on all of them (the MiniLM proxies' speed-up; lengthpred.heads.training records it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.model_selection import ParameterSampler

from lengthpred.errors import ConfigError
from lengthpred.heads.base import HeadInput, LabeledSet


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """`budget` candidates per fit, drawn with `seed`; `subsample`: train prompts the search fits on."""

    budget: int = 8
    seed: int = 0
    subsample: int | None = None
    cross: str = "reuse"  # cross-domain fits: "reuse" the in-domain choice, or "search" anew per source

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any] | None) -> SearchSettings | None:
        """None for a head config without a `search:` node (the full grid over `select`, as before)."""
        if cfg is None:
            return None
        unknown = sorted(set(cfg) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"search takes no {unknown}; valid keys: budget, seed, subsample, cross")
        budget = int(cfg.get("budget", cls.budget))
        sub = cfg.get("subsample")
        if budget < 1 or (sub is not None and int(sub) < 2):
            raise ConfigError(
                f"search.budget must be >= 1 and search.subsample null or >= 2, got {dict(cfg)}"
            )
        cross = str(cfg.get("cross", cls.cross))
        if cross not in CROSS:
            raise ConfigError(f"search.cross={cross!r}: expected one of {list(CROSS)}")
        return cls(budget, int(cfg.get("seed", cls.seed)), None if sub is None else int(sub), cross)


CROSS = ("reuse", "search")


def space(select: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    """The search space with every value a list (a scalar is a one-value list)."""
    return {
        str(k): list(v) if isinstance(v, Sequence) and not isinstance(v, str) else [v]
        for k, v in (select or {}).items()
    }


def space_size(select: Mapping[str, Any] | None) -> int:
    return math.prod(len(v) for v in space(select).values())


def sample_candidates(
    head: str, select: Mapping[str, Any] | None, settings: SearchSettings
) -> list[dict[str, Any]]:
    """`settings.budget` distinct candidates of the space; an empty space is no search ([{}])."""
    grid = space(select)
    if not grid:
        return [{}]
    size = space_size(grid)
    if size < settings.budget:
        raise ConfigError(
            f"head {head!r}: its select space has {size} combinations, fewer than search.budget="
            f"{settings.budget}; widen head.select or lower search.budget"
        )
    return [dict(c) for c in ParameterSampler(grid, n_iter=settings.budget, random_state=settings.seed)]


def subset(data: LabeledSet, idx: Sequence[int]) -> LabeledSet:
    """The rows `idx` of a labeled set (every per-prompt field of its inputs, targets and sample counts)."""
    idx = list(idx)

    def take(v: Any) -> Any:
        if v is None:
            return None
        return np.asarray(v)[idx] if isinstance(v, np.ndarray) else [v[i] for i in idx]

    inputs = HeadInput(**{f.name: take(getattr(data.inputs, f.name)) for f in dataclasses.fields(HeadInput)})
    return LabeledSet(inputs, take(np.asarray(data.y)), take(data.n_samples), take(data.capped_frac),
                      sample_lengths=take(data.sample_lengths), sample_capped=take(data.sample_capped))


def search_rows(n: int, settings: SearchSettings) -> list[int] | None:
    """Seeded sorted subsample of `n` train rows for the search, or None when it would take them all."""
    if settings.subsample is None or settings.subsample >= n:
        return None
    rng = np.random.default_rng(settings.seed)
    return sorted(int(i) for i in rng.choice(n, settings.subsample, replace=False))
