"""On-disk layout of a generation run: shard folders of atomic part files, a manifest, a merged set.

    data/generations/<model>/<data.name>/<settings-hash>/
        manifest.json                 settings, model, data name, counts (after merge)
        shard-<i>-of-<n>/part-<k>-<h>.parquet   one row per (id, sample), written tmp → rename
        shard-<i>-of-<n>/part-<k>-<h>.parquet.sha256   its checksum, checked once (`.verified.json`): a part
                                      that fails it, has none, or cannot be read is moved aside as `.bad` and its
                                      prompts are generated again
        shard-<i>-of-<n>/rejected.json          {id: reason} prompts not generated (empty, too long)
        layout.json                   the shard count that writes it (the first writer's; another is refused)
        merged/                       HF datasets folder: every part, checked for duplicates and gaps; each file
                                      with its `.sha256`, checked (once) by `load_generations`
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

from lengthpred.errors import ConfigError, DataError
from lengthpred.integrity import (
    VerifiedFiles,
    atomic_write_text,
    claim_json,
    folder_lock,
    publish,
    quarantine,
    sweep_stale_temps,
    temp_path,
    write_checksum,
)

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
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True))


def read_json(path: Path, default: Any = None) -> Any:
    return json.loads(path.read_text()) if path.is_file() else default


def write_part(path: Path, rows: list[dict]) -> None:
    """One part file, atomically, with its checksum: a crash leaves either the whole part or nothing (a stray
    temp file of this writer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    tmp = temp_path(path)
    pq.write_table(table, tmp)
    publish(tmp, path)


def _intact(files: list[Path]) -> list[tuple[Path, pa.Table]]:
    """(file, table) of each part that passes its checksum (hashed once per file: `VerifiedFiles` of its run
    folder) and reads; one that fails, or has no checksum, is moved aside (one line naming it) and its prompts
    count as not generated."""
    out = []
    checked: dict[Path, VerifiedFiles] = {}
    for f in files:
        root = f.parent.parent  # <run>/shard-i-of-n/part-*.parquet
        verified = checked.setdefault(root, VerifiedFiles(root))
        why = verified.check(f)
        if why is None:
            try:
                out.append((f, pq.read_table(f, schema=SCHEMA)))
                continue
            except (OSError, pa.ArrowException) as e:
                why = f"unreadable ({e.__class__.__name__})"
        verified.forget(f)
        quarantine(f, why)
    for verified in checked.values():
        verified.save()
    return out


LAYOUT = "layout.json"


def claim_layout(root: Path, n_shards: int) -> None:
    """Record the shard count that writes this run folder, or refuse another one (two layouts at once would
    generate some prompts twice and the merge would refuse duplicates)."""
    have = claim_json(Path(root) / LAYOUT, {"shards": n_shards})
    if have and have.get("shards") != n_shards:
        n = have.get("shards")
        raise ConfigError(f"generations at {root} were started in {n} shard(s) (shard=i/{n}) and this run asks "
                          f"shard=?/{n_shards}: run the remaining shards with shard=i/{n}, or, to change it, "
                          f"`lengthpred store repair {root}` then rerun")


def repair(root: Path) -> tuple[int, int]:
    """Keep one part per prompt (the first by name), move aside parts that repeat a prompt, drop the layout
    record. Returns (parts kept, parts moved aside)."""
    seen: set[str] = set()
    kept = moved = 0
    for f, table in sorted(_intact(part_files(root)), key=lambda ft: ft[0].name):
        ids = set(table.column("id").to_pylist())
        if seen & ids:
            quarantine(f, "repeats prompts another part holds (two shard layouts wrote this folder)")
            moved += 1
            continue
        seen |= ids
        kept += 1
    (Path(root) / LAYOUT).unlink(missing_ok=True)
    return kept, moved


def part_files(root: Path) -> list[Path]:
    return sorted(root.glob("shard-*-of-*/part-*.parquet"))


def done_ids(folder: Path) -> set[str]:
    """Prompt ids that already have an intact part file under `folder` (a shard folder or the run root)."""
    ids: set[str] = set()
    for _, table in _intact(sorted(folder.rglob("part-*.parquet"))):
        ids.update(table.column("id").to_pylist())
    return ids


def rejected(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in sorted(root.glob("shard-*-of-*/rejected.json")):
        out.update(read_json(f, {}))
    return out


def read_parts(root: Path) -> pa.Table:
    parts = _intact(part_files(root))
    if not parts:
        raise DataError(f"no generation parts under {root}; run scripts/generate.py first")
    return pa.concat_tables([t for _, t in parts])


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

    with folder_lock(root, ".merge.lock"):  # two shards finishing together: one merges, then the other
        sweep_stale_temps(root)
        return _merge(datasets, root, expected_ids, num_samples, manifest_extra)


def _merge(datasets: Any, root: Path, expected_ids: Iterable[str], num_samples: int,
           manifest_extra: Mapping | None):
    table = read_parts(root)
    expected = sorted(set(expected_ids))
    problems = check_complete(table, expected, num_samples)
    if problems:
        raise DataError(f"cannot merge {root}: " + "; ".join(problems))
    table = table.filter(pc.is_in(table.column("id"), value_set=pa.array(expected, pa.string())))
    table = table.sort_by([("id", "ascending"), ("sample", "ascending")])
    ds = datasets.Dataset(table)
    tmp = temp_path(root / "merged")
    ds.save_to_disk(str(tmp))
    for f in sorted(tmp.iterdir()):  # digests like every other part: an edit there no longer reaches the targets
        write_checksum(f)
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
    truncated, token_ids) of a run folder (`lengthpred.stages.locations.generations_dir` of a config), each file
    checked against its digest (once: `VerifiedFiles`); a merge made before digests is checked against its parts
    once and then given them."""
    import datasets

    root = Path(root)
    merged = root / "merged"
    if not merged.is_dir():
        raise DataError(f"no merged generations at {merged}; run scripts/generate.py (all shards) first")
    _verify_merged(root)
    return datasets.load_from_disk(str(merged))


def _verify_merged(root: Path) -> None:
    merged = root / "merged"
    files = sorted(p for p in merged.iterdir() if p.is_file() and not p.name.endswith(".sha256"))
    verified = VerifiedFiles(root)
    if not any(p.with_name(p.name + ".sha256").is_file() for p in files):
        _digest_legacy_merge(root, files)
    for f in files:
        why = verified.check(f)
        if why is not None:
            verified.save()
            raise DataError(f"merged generations {f}: {why}; remove {merged} and rerun scripts/generate.py with the "
                            "same overrides (it merges again from the parts)")
    verified.save()


def _digest_legacy_merge(root: Path, files: list[Path]) -> None:
    """A merge written before digests: trusted only if it equals a merge of the parts now, then given digests."""
    import datasets

    try:
        have = datasets.load_from_disk(str(root / "merged")).data.table.select(list(COLUMNS)).combine_chunks()
        parts = read_parts(root)
        parts = parts.filter(pc.is_in(parts.column("id"), value_set=have.column("id").unique()))
        parts = parts.sort_by([("id", "ascending"), ("sample", "ascending")]).select(list(COLUMNS)).combine_chunks()
        same = have.equals(parts)
    except (DataError, KeyError, OSError, pa.ArrowException):  # no parts to compare with, or another layout
        same = False
    if not same:
        raise DataError(f"merged generations {root / 'merged'} carry no digests and do not match parts here: remove "
                        f"it and rerun scripts/generate.py with the same overrides (it merges again from its parts)")
    for f in files:
        write_checksum(f)
    log.info("%s: a merge from before digests matches its parts; digests written", root / "merged")
