"""A complete feature store compacted: one memory-mappable Arrow file per column plus an id table.

    <store>/compact/ids.arrow            one column `id`, the store's row order
    <store>/compact/<column>.arrow       one column named like the feature (`hs.L12.last`): fixed-size lists of d
                                         values in the store's dtype (bfloat16, which Arrow lacks, as float32)
    <store>/compact/index.json           the columns, their widths and dtypes, the cache key and the row count:
                                         written last, so a compaction cut short is not used
    every file with its `.sha256`, checked once (`lengthpred.integrity.VerifiedFiles`)

The files are Arrow IPC streams, the format `datasets` keeps on disk, so besides `load_features` (which prefers
them: one memory-mapped read per column instead of one file per 16 prompts) they open with
`datasets.Dataset.from_file(path)` or `pyarrow.ipc.open_stream(pyarrow.memory_map(path))`. The part files stay
(the token-level states are read from them, and a damaged compact file falls back to them).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from lengthpred.errors import DataError
from lengthpred.integrity import VerifiedFiles, atomic_write_text, publish, quarantine, temp_path

log = logging.getLogger(__name__)
COMPACT = "compact"
INDEX = "index.json"
IDS = "ids.arrow"
_ARROW = {"float16": pa.float16(), "float32": pa.float32(), "bfloat16": pa.float32()}


def column_file(folder: Path, name: str) -> Path:
    return folder / f"{name}.arrow"


def _write_stream(path: Path, table: pa.Table) -> None:
    tmp = temp_path(path)
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(table.num_rows, 1))  # one batch: one contiguous buffer
    publish(tmp, path)


def write_compact(root: Path, ids: Sequence[str], columns: dict[str, np.ndarray], dtype: str, cache_key: str) -> Path:
    """Write `columns` ({name: [n, d] array, rows in `ids` order}) as `<root>/compact/`; returns that folder."""
    folder = Path(root) / COMPACT
    folder.mkdir(parents=True, exist_ok=True)
    (folder / INDEX).unlink(missing_ok=True)  # not valid until rewritten below
    _write_stream(folder / IDS, pa.table({"id": pa.array(list(ids), pa.string())}))
    atype = _ARROW[dtype]
    index: dict[str, Any] = {"cache_key": cache_key, "n": len(ids), "dtype": dtype, "columns": {}}
    for name, values in columns.items():
        values = np.ascontiguousarray(values, dtype=atype.to_pandas_dtype())
        n, d = values.shape
        flat = pa.array(values.reshape(-1), type=atype)
        _write_stream(column_file(folder, name), pa.table({name: pa.FixedSizeListArray.from_arrays(flat, d)}))
        index["columns"][name] = {"d": int(d), "dtype": str(atype)}
    atomic_write_text(folder / INDEX, json.dumps(index, indent=1, sort_keys=True))
    return folder


class CompactColumns:
    """The compacted columns of a store, read by memory map; each file's digest checked once."""

    def __init__(self, folder: Path, index: dict[str, Any], ids: list[str], verified: VerifiedFiles) -> None:
        self.folder, self.index, self.ids, self._verified = folder, index, ids, verified
        self.row = {pid: r for r, pid in enumerate(ids)}

    def __contains__(self, name: str) -> bool:
        return name in self.index["columns"]

    def values(self, name: str) -> np.ndarray:
        """[n, d] in the file's dtype, memory-mapped (read-only: copy before changing it)."""
        path = column_file(self.folder, name)
        why = self._verified.check(path)
        if why is not None:
            quarantine(path, why)
            self._verified.save()
            raise DataError(f"{path}: {why}; rerun `lengthpred store compact {self.folder.parent}` (the parts are "
                            "still there)")
        self._verified.save()
        # not closed here: the array below is a view of the map, which its buffers keep alive
        batch = pa.ipc.open_stream(pa.memory_map(str(path))).read_next_batch()
        col = batch.column(0)
        d = col.type.list_size
        return col.values.to_numpy(zero_copy_only=True).reshape(len(col), d)


def open_compact(root: Path, cache_key: str | None) -> CompactColumns | None:
    """The store's compacted columns when a finished compaction of this very store is there (its index names the
    same cache key and its id table checks out), else None."""
    folder = Path(root) / COMPACT
    try:
        index = json.loads((folder / INDEX).read_text())
    except (OSError, ValueError):
        return None
    if index.get("cache_key") != cache_key:
        log.warning("%s was compacted from another store (cache key %s): not used", folder, index.get("cache_key"))
        return None
    verified = VerifiedFiles(folder)
    why = verified.check(folder / IDS)
    if why is not None:
        log.warning("%s: %s; reading the parts instead", folder / IDS, why)
        return None
    ids = pa.ipc.open_stream(pa.memory_map(str(folder / IDS))).read_all().column("id").to_pylist()
    verified.save()
    if len(ids) != index.get("n"):
        return None
    return CompactColumns(folder, index, ids, verified)
