"""`HeadSettings`: one head config (conf/head/<name>.yaml) as the library reads it.

The stage layer turns a head's config group into this once (`HeadSettings.from_mapping`, the one
`settings_from` rule: an unknown key is a ConfigError naming it), so the fitting code reads typed fields
instead of a mapping's `params` / `select` / `search` layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lengthpred.heads.search import SearchSettings
from lengthpred.settings import settings_from


@dataclasses.dataclass(frozen=True)
class HeadSettings:
    """A head's constructor keywords, its search space and budget, its seeds and the features it reads."""

    params: dict[str, Any] = dataclasses.field(default_factory=dict)  # constructor keywords (no `_target_`)
    select: dict[str, Any] | None = None  # search space: constructor keyword -> candidate values
    search: SearchSettings | None = None  # the shared budget (None: every combination of `select`)
    n_seeds: int = 1  # in-domain fits over this many `random_state`s (lengthpred.seeds)
    layer: int | None = None  # HF hidden_states index of a feature or token head
    layers: tuple[int, ...] | None = None  # the concatenated readout's layers
    pooling: str | tuple[str, ...] | None = None
    feature: str | tuple[str, ...] | None = None  # the feature column(s) the stage resolved (`hs.L20.last`)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None, *, group: str = "head") -> HeadSettings:
        """From a plain head config mapping (`search` a mapping or None, `params` may hold `_target_`)."""
        d = dict(mapping or {})
        params = dict(d.pop("params", None) or {})
        params.pop("_target_", None)
        search = SearchSettings.from_cfg(d.pop("search", None))
        n_seeds = int(d.pop("n_seeds", None) or 1)
        return settings_from(cls, d, group=group, params=params, search=search, n_seeds=n_seeds)

    def replace(self, **changes: Any) -> HeadSettings:
        return dataclasses.replace(self, **changes)

    def for_cross(self, chosen: Mapping[str, Any] | None) -> HeadSettings:
        """The settings a cross-domain fit uses. Under `search.cross: reuse` (the default) the candidate chosen
        in-domain on validation (one candidate, no search): every head's cross pairs then cost one fit, and the
        protocol stays the same for every family. Under `search` (or without a search node) these settings
        themselves: each source domain searches anew on its own val split."""
        if self.search is None or self.search.cross == "search":
            return self
        return self.replace(search=None, select={k: [v] for k, v in (chosen or {}).items()})


HEAD_KEYS = tuple(f.name for f in dataclasses.fields(HeadSettings) if f.name != "feature")  # a head file's top level
