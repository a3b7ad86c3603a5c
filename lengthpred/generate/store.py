"""On-disk layout of a generation run: shard folders of atomic part files, a manifest, a merged set.

    data/generations/<model>/<data.name>/<settings-hash>/
        manifest.json                 settings, model, data name, counts (after merge)
        shard-<i>-of-<n>/part-<k>-<h>.parquet   one row per (id, sample), written tmp → rename
        shard-<i>-of-<n>/rejected.json          {id: reason} prompts not generated (empty, too long)
        merged/                       HF datasets folder: every part, checked for duplicates and gaps
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lengthpred.errors import DataError

log = logging.getLogger(__name__)

COLUMNS = ("id", "sample", "length", "finish_reason", "text", "prompt_tokens", "truncated", "token_ids")
SCHEMA = pa.schema([
    ("id", pa.string()), ("sample", pa.int32()), ("length", pa.int32()), ("finish_reason", pa.string()),
    ("text", pa.string()), ("prompt_tokens", pa.int32()), ("truncated", pa.bool_()),
    ("token_ids", pa.list_(pa.int32())),
])


def shard_dir(root: Path, shard: tuple[int, int]) -> Path:
    return root / f"shard-{shard[0]}-of-{shard[1]}"


def write_json_atomic(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path, default: Any = None) -> Any:
    return json.loads(path.read_text()) if path.is_file() else default


def write_part(path: Path, rows: list[dict]) -> None:
    """One part file, atomically: a crash leaves either the whole part or nothing (a stray .tmp)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def part_files(root: Path) -> list[Path]:
    return sorted(root.glob("shard-*-of-*/part-*.parquet"))


def done_ids(folder: Path) -> set[str]:
    """Prompt ids that already have a part file under `folder` (a shard folder or the run root)."""
    ids: set[str] = set()
    for f in sorted(folder.rglob("part-*.parquet")):
        ids.update(pq.read_table(f, columns=["id"]).column("id").to_pylist())
    return ids


def rejected(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in sorted(root.glob("shard-*-of-*/rejected.json")):
        out.update(read_json(f, {}))
    return out


def read_parts(root: Path) -> pa.Table:
    files = part_files(root)
    if not files:
        raise DataError(f"no generation parts under {root}; run scripts/generate.py first")
    return pa.concat_tables([pq.read_table(f, schema=SCHEMA) for f in files])


def check_complete(table: pa.Table, expected_ids: Iterable[str], num_samples: int) -> list[str]:
    """Problems that stop a merge: duplicate (id, sample) rows and ids with missing samples."""
    ids, samples = table.column("id").to_pylist(), table.column("sample").to_pylist()
    pairs = Counter(zip(ids, samples, strict=True))
    dups = [p for p, c in pairs.items() if c > 1]
    per_id = Counter(ids)
    expected = set(expected_ids)
    gaps = sorted(i for i in expected if per_id.get(i, 0) < num_samples)
    extra = sorted(set(per_id) - expected)
    problems = []
    if dups:
        problems.append(f"{len(dups)} duplicate (id, sample) rows, e.g. {dups[0]}")
    if gaps:
        problems.append(f"{len(gaps)} ids missing samples, e.g. {gaps[:3]}")
    if extra:
        log.warning("%d generated ids are no longer in the prompt set (left out), e.g. %s", len(extra), extra[:3])
    return problems


def merge(root: Path, expected_ids: Iterable[str], num_samples: int, manifest_extra: Mapping | None = None):
    """Join every shard's parts into `merged/` (HF datasets, sorted by id, sample) after checking for
    duplicates and gaps; update the manifest with counts. Raises DataError naming the problem."""
    import datasets

    table = read_parts(root)
    expected = sorted(set(expected_ids))
    problems = check_complete(table, expected, num_samples)
    if problems:
        raise DataError(f"cannot merge {root}: " + "; ".join(problems))
    table = table.filter(pc.is_in(table.column("id"), value_set=pa.array(expected, pa.string())))
    table = table.sort_by([("id", "ascending"), ("sample", "ascending")])
    ds = datasets.Dataset(table)
    tmp = root / "merged.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    ds.save_to_disk(str(tmp))
    shutil.rmtree(root / "merged", ignore_errors=True)
    os.replace(tmp, root / "merged")
    manifest = read_json(root / "manifest.json", {})
    reasons = table.column("finish_reason").to_pylist()
    manifest.update(dict(manifest_extra or {}))
    manifest.update(
        n_prompts=len(expected), n_rows=len(ds), n_capped=reasons.count("length"),
        n_truncated=len(set(i for i, t in zip(table.column("id").to_pylist(),
                                               table.column("truncated").to_pylist(), strict=True) if t)),
        rejected=rejected(root),
    )
    write_json_atomic(root / "manifest.json", manifest)
    return ds


def load_generations(root: str | Path):
    """The merged generations (HF Dataset: id, sample, length, finish_reason, text, prompt_tokens,
    truncated, token_ids) of a run folder (`lengthpred.stages.locations.generations_dir` of a config)."""
    import datasets

    merged = Path(root) / "merged"
    if not merged.is_dir():
        raise DataError(f"no merged generations at {merged}; run scripts/generate.py (all shards) first")
    return datasets.load_from_disk(str(merged))
