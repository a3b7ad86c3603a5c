"""Whole-store operations behind `lengthpred store verify|compact|repair <folder>` and the merge-and-verify job that
follows a sharded extraction: check a store is complete and intact, compact it, repair a store two shard layouts
wrote."""

from __future__ import annotations

import logging
from pathlib import Path

from lengthpred.errors import DataError
from lengthpred.features.compact import write_compact
from lengthpred.features.layout import repair
from lengthpred.features.store import FeatureSet, intact_parts, load_features, read_manifest
from lengthpred.integrity import locked

log = logging.getLogger(__name__)


def verify_store(root: str | Path) -> FeatureSet:
    """Every part and token-level file checked (once: `VerifiedFiles`), no prompt missing or stored twice, and a
    compacted store's every column file too; one line when not."""
    fs = load_features(root)
    if fs.compact is not None:  # the load read the compacted columns: check them all, and the parts beside them
        _check_columns(fs)
        stored = {i for _, ids in intact_parts(Path(root)) for i in ids}
        missing = [i for i in fs.ids if i not in stored]
        if missing:
            raise DataError(f"{root}: the parts lack {len(missing)} prompts the compacted columns hold (e.g. "
                            f"{missing[:3]}); rerun scripts/extract.py (it resumes), then `lengthpred store compact "
                            f"{root}`")
    fs.check_token_files()
    return fs


def compact_store(root: str | Path) -> Path:
    """Write `<root>/compact/` from a complete store (lengthpred.features.compact); returns that folder. Under
    the store's compaction lock, so two merge jobs never write it at once."""
    root = Path(root)
    with locked(root / ".lock-compact"):
        fs = load_features(root)
        if fs.compact is not None and _columns_intact(fs):  # already compacted from this very store
            return fs.compact.folder
        manifest = read_manifest(root)
        columns = {name: fs.read(name) for name in fs.names}
        folder = write_compact(root, fs.ids, columns, str(manifest.get("dtype", "float16")),
                               str(manifest.get("cache_key")))
    log.info("%s: %d columns of %d prompts compacted into %s", root, len(columns), len(fs.ids), folder)
    return folder


def _check_columns(fs: FeatureSet) -> None:
    """Every compacted column file against its digest: a DataError naming the first that fails (moved aside)."""
    for name in fs.compact.index["columns"]:  # type: ignore[union-attr]
        fs.compact.values(name)  # type: ignore[union-attr]


def _columns_intact(fs: FeatureSet) -> bool:
    """Whether every compacted column file checks out (one that does not is moved aside, saying so)."""
    try:
        _check_columns(fs)
    except DataError as e:
        log.warning("%s; compacting again from the parts", str(e).split(";")[0])
        return False
    return True


def repair_store(root: str | Path) -> tuple[int, int]:
    """Keep one copy of every prompt's features (duplicate parts moved aside) and drop the layout record, so the
    next extraction of any layout resumes from what is left. Returns (parts kept, parts moved aside)."""
    root = Path(root)
    read_manifest(root)  # a folder that is no store: one line
    with locked(root / ".lock-compact"):
        return repair(root, dict(intact_parts(root)))
