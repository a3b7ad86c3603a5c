"""What writes a store: its shard layout and the model behind it, recorded by the first writer (`layout.json`).

A store is written by one layout of shards (`shard=i/n` for one n). Two layouts at once would each write every
prompt of their own slices, so the same prompt lands in two parts and the store refuses to load (ids stored
twice). The first extraction records `{"shards": n, "model": ..., "layers": ...}` with an exclusive create
(`claim`); a later one with another n, another model (name, dtype or checkpoint) or another layer set is refused
in one line before any work, naming the command that repairs the store (`repair`: one copy of every prompt is
kept, the duplicates are moved aside, and the record is dropped so the next extraction, of any layout, resumes
from what is left).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lengthpred.errors import ConfigError
from lengthpred.integrity import claim_json, quarantine

log = logging.getLogger(__name__)
LAYOUT = "layout.json"


def repair_command(root: Path) -> str:
    return f"lengthpred store repair {root}"


def read_layout(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(root) / LAYOUT).read_text())
    except (OSError, ValueError):
        return None


def _differs(have: Mapping[str, Any], want: Mapping[str, Any]) -> str | None:
    """The first thing that makes `want` another writer than the one recorded in `have`, in words."""
    if have.get("shards") != want.get("shards"):
        n = have.get("shards")
        return (f"was started in {n} shard(s) (shard=i/{n}) and this run asks shard=?/{want.get('shards')}: run its "
                f"remaining shards with shard=i/{n}")
    for key, what in (("model", "model"), ("source", "checkpoint"), ("layers", "layer set")):
        # a writer that does not say (a library call without `source`) is not a different one
        if have.get(key) is not None and want.get(key) is not None and have[key] != want[key]:
            return (f"was written by {what} {have.get(key)} and this run has {want.get(key)}: give this run its own "
                    f"folder (another model.name)")
    return None


def claim(root: Path, want: Mapping[str, Any]) -> None:
    """Record `want` (shards, model, source, layers) as this store's writer, or check it against the record; a
    different writer is a ConfigError naming the repair command."""
    have = claim_json(Path(root) / LAYOUT, dict(want))
    why = None if not have else _differs(have, want)
    if why is not None:
        raise ConfigError(f"feature store {root} {why}; or, to change it, `{repair_command(root)}` then rerun")


def repair(root: Path, part_ids: Mapping[Path, list[str]]) -> tuple[int, int]:
    """Keep one part for every prompt (the first by name), move the parts that repeat a prompt aside, and drop the
    layout record. `part_ids`: every intact part with its ids. Returns (parts kept, parts moved aside)."""
    seen: set[str] = set()
    kept = moved = 0
    for part in sorted(part_ids, key=lambda p: p.name):
        ids = part_ids[part]
        if seen.intersection(ids):
            tokens = part.with_name(part.name.replace(".safetensors", ".tokens.safetensors"))
            for f in (tokens, part):
                if f.is_file():
                    quarantine(f, "repeats prompts another part holds (two shard layouts wrote this store)")
            moved += 1
            continue
        seen.update(ids)
        kept += 1
    with contextlib.suppress(FileNotFoundError):
        (Path(root) / LAYOUT).unlink()
    log.info("%s: %d parts kept, %d moved aside; the layout record is dropped", root, kept, moved)
    return kept, moved
