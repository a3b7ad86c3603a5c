"""A committed reference trace that grows in parts: `data/reference/<model>/<data>.parts/part-*.jsonl`.

A long generation (hours of CPU) is committed as it goes, one part per finished chunk of prompts, so
work that stops midway keeps every finished part, and a fresh clone resumes from them. Each part has
the trace's format (a `{"meta": ...}` line, then one row per (id, sample), no texts) and its meta
names its row count and a hash of its ids, so a truncated or edited part is detected on load. The
final merge (`merge_parts`) writes `<data>.jsonl` and refuses gaps, duplicates and mixed settings.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from lengthpred.errors import ConfigError, DataError
from lengthpred.integrity import atomic_write_text
from lengthpred.targets import write_reference

log = logging.getLogger(__name__)

ROW_KEYS = ("id", "sample", "length", "finish_reason", "prompt_tokens")
# settings that may differ between a trace and the config that reads it (they do not change the answers'
# distribution): the backend that produced it, and the non-hashed batching keys
IGNORED_SETTINGS = ("backend",)


def parts_dir(reference_file: Path) -> Path:
    """`<data>.parts/` beside `<data>.jsonl`."""
    reference_file = Path(reference_file)
    return reference_file.with_name(reference_file.stem + ".parts")


def ids_hash(ids: Iterable[str]) -> str:
    return hashlib.sha1(",".join(sorted(set(ids))).encode()).hexdigest()[:12]


def settings_mismatch(have: Mapping[str, Any], want: Mapping[str, Any]) -> str | None:
    """A one-line description of the first setting the trace (`have`) states differently from the config
    (`want`); None when they agree. Settings the trace does not state are not compared."""
    for k in sorted(have):
        if k in IGNORED_SETTINGS:
            continue
        if have.get(k) != want.get(k):
            return f"{k}={have.get(k)!r} in the trace but {want.get(k)!r} in the config"
    return None


def write_part(rows: Sequence[Mapping[str, Any]], folder: Path, meta: Mapping[str, Any]) -> Path:
    """One part (complete prompts only), atomically; its name is a hash of its ids, so rewriting the
    same prompts replaces the same file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows, key=lambda r: (r["id"], int(r["sample"])))
    ids = sorted({r["id"] for r in rows})
    h = ids_hash(ids)
    body = "".join(json.dumps({"id": str(r["id"]), "sample": int(r["sample"]), "length": int(r["length"]),
                               "finish_reason": str(r["finish_reason"]),
                               "prompt_tokens": int(r["prompt_tokens"])}) + "\n" for r in rows)
    meta = {**dict(meta), "n_prompts": len(ids), "n_rows": len(rows), "ids_sha1": h,
            "n_capped": sum(r["finish_reason"] == "length" for r in rows), "rows_sha256": rows_digest(body)}
    path = folder / f"part-{ids[0][:8]}-{h}.jsonl"
    atomic_write_text(path, json.dumps({"meta": meta}, sort_keys=True) + "\n" + body)
    return path


def rows_digest(body: str) -> str:
    """sha256 of a part's row lines (everything after the meta line): its checksum, kept in its meta."""
    return hashlib.sha256(body.encode()).hexdigest()


def read_part(path: Path, settings: Mapping[str, Any] | None = None) -> tuple[pd.DataFrame, dict]:
    """(rows, meta) of one part, checked: every row present (the meta's count), the ids its hash names,
    samples 0..n-1 per prompt, and (when given) the same settings. Raises DataError naming the problem."""
    path = Path(path)
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    try:
        meta = json.loads(lines[0])["meta"]
        rows = pd.DataFrame([json.loads(line) for line in lines[1:]], columns=list(ROW_KEYS))
    except (IndexError, KeyError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: unreadable reference part ({e.__class__.__name__}: {e})") from None
    if meta.get("rows_sha256") and rows_digest("".join(line + "\n" for line in lines[1:])) != meta["rows_sha256"]:
        raise DataError(f"{path}: its rows differ from the checksum in its meta (rows_sha256): damaged part")
    if len(rows) != meta.get("n_rows"):
        raise DataError(f"{path}: {len(rows)} rows but its meta says {meta.get('n_rows')} (truncated part)")
    if ids_hash(rows["id"]) != meta.get("ids_sha1"):
        raise DataError(f"{path}: its ids do not match the hash in its meta")
    n = int(meta["settings"]["num_samples"])
    per_id = rows.groupby("id")["sample"].agg(lambda s: sorted(int(x) for x in s))
    bad = [i for i, s in per_id.items() if s != list(range(n))]
    if bad:
        raise DataError(f"{path}: {len(bad)} prompts without exactly samples 0..{n - 1}, e.g. {bad[0]}")
    if settings is not None:
        why = settings_mismatch(meta["settings"], settings)
        if why:
            raise ConfigError(f"{path}: settings differ: {why}")
    return rows, meta


def read_parts(folder: Path, settings: Mapping[str, Any] | None = None) -> tuple[pd.DataFrame, list[dict]]:
    """Every part of a folder, concatenated: (rows, metas). A part that fails its check raises."""
    files = sorted(Path(folder).glob("part-*.jsonl"))
    if not files:
        return pd.DataFrame(columns=list(ROW_KEYS)), []
    loaded = [read_part(f, settings) for f in files]
    return pd.concat([r for r, _ in loaded], ignore_index=True), [m for _, m in loaded]


def done_ids(folder: Path, settings: Mapping[str, Any]) -> set[str]:
    """Prompts whose samples a (valid) committed part already holds. A part that fails its check is
    logged and not counted, so its prompts are regenerated (and the part rewritten)."""
    out: set[str] = set()
    for f in sorted(Path(folder).glob("part-*.jsonl")):
        try:
            rows, _ = read_part(f, settings)
        except DataError as e:
            log.warning("%s; its prompts will be regenerated", e)
            continue
        out.update(rows["id"])
    return out


def merge_parts(folder: Path, expected_ids: Iterable[str], settings: Mapping[str, Any], out: Path,
                meta: Mapping[str, Any]) -> Path:
    """Write the whole trace `out` from its parts after checking that they cover `expected_ids`
    exactly once each; a gap or a duplicate raises DataError naming it."""
    rows, metas = read_parts(folder, settings)
    counts = Counter(zip(rows["id"], rows["sample"], strict=True))
    dups = [k for k, c in counts.items() if c > 1]
    if dups:
        raise DataError(f"cannot merge {folder}: {len(dups)} (id, sample) rows in more than one part, e.g. {dups[0]}")
    expected = set(expected_ids)
    gaps = sorted(expected - set(rows["id"]))
    if gaps:
        raise DataError(f"cannot merge {folder}: {len(gaps)} prompts have no part yet, e.g. {gaps[:3]}")
    extra = set(rows["id"]) - expected
    if extra:
        log.warning("%d prompts in parts are not in the prompt set (left out), e.g. %s", len(extra), sorted(extra)[:3])
        rows = rows[rows["id"].isin(expected)]
    full = {**dict(meta), "settings": dict(settings), "n_prompts": int(rows["id"].nunique()), "n_rows": len(rows),
            "n_capped": int((rows["finish_reason"] == "length").sum()), "partial": False,
            "parts": [{"ids_sha1": m["ids_sha1"], "n_prompts": m["n_prompts"], **({"source": m["source"]}
                      if "source" in m else {})} for m in metas]}
    return write_reference(rows, out, full)
