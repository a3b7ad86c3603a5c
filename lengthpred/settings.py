"""`settings_from(cls, mapping, group=...)`: a settings dataclass from one config group's mapping.

The library's settings (`CostSettings`, `GenerationSettings`, `FeatureSettings`, `AdaptSettings`) are
dataclasses; the stage layer hands each its config group as a plain mapping. One rule for all of them: a key
that is not a field is a ConfigError naming the group, the key and the known ones (a typo never falls back
to a default silently); keys starting with `_` and the ones a group holds for someone else (`skip`) are left
out; a list becomes a tuple and a mapping a dict where the field's annotation says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from lengthpred.errors import ConfigError

T = TypeVar("T")


def _convert(annotation: Any, value: Any) -> Any:
    """A config container as the plain value the field's annotation names (others unchanged)."""
    ann = str(annotation)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes) and "tuple" in ann:
        return tuple(value)
    if isinstance(value, Mapping) and "dict" in ann:
        return dict(value)
    return value


def settings_from(cls: type[T], mapping: Mapping[str, Any] | None, *, group: str, skip: Iterable[str] = (),
                  **values: Any) -> T:
    """`cls(**fields)` from `mapping` (None: every default); `values` are fields given by the caller (e.g. the
    run's seed), which the mapping may not hold. A key that is not a field, or a field without a default that
    the mapping lacks, is a ConfigError naming the group."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"settings_from needs a dataclass, not {cls!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    skipped = set(skip) | set(values)
    d = {str(k): v for k, v in dict(mapping or {}).items() if not str(k).startswith("_") and k not in skipped}
    unknown = sorted(set(d) - set(fields))
    if unknown:
        known = sorted(set(fields) - set(values))
        raise ConfigError(f"{group}: unknown keys {unknown}; known: {known}")
    missing = [k for k, f in fields.items() if k not in d and k not in values
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{group}: missing keys {missing}")
    d = {k: _convert(fields[k].type, v) for k, v in d.items()}
    return cls(**d, **values)
