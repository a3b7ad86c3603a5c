"""The on-disk feature store: `manifest.json` + safetensors part files, read lazily column by column.

Layout of `data/features/<model>/<cache-key>/`:
  manifest.json            model, layers, poolings, fusions, dtype, git revision, expected ids, hashes
  layout.json              the shard count and model that write the store (lengthpred.features.layout)
  parts/shard-<i>-of-<n>/<h>.safetensors   one batch of prompts: every column [b, d]; ids in the metadata
                           (one folder per shard, so shards on several nodes never write one folder; stores
                           from before keep their parts in parts/ itself, read the same way)
  parts/<h>.tokens.safetensors  optional token-level states `hs.L{l}` [tokens, d], next-token `entropy` and
                           attention importance `attn` [tokens] (float32), `span` [tokens] (uint8, 1 = a
                           token the pools range over; absent in stores made before `features.span`),
                           `offsets` [b+1]
  parts/.../<name>.sha256  the sha256 each part was written with, checked once (`.verified.json` keeps the
                           size and mtime checked, and the part's ids): a part that fails it, has no
                           digest, or cannot be read is moved aside as `.bad` and its prompts count as missing,
                           so the extraction's resume recomputes them (lengthpred.integrity)
  compact/                 optional: one memory-mapped Arrow file per column + an id table, read instead of
                           the parts when present (lengthpred.features.compact)
  skipped-<shard>.json     ids rejected by the prompt budget / empty, with the reason
  truncated-<shard>.json   ids cut to the prompt budget (features.overflow=truncate): their full token count
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Iterable, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from lengthpred.errors import DataError
from lengthpred.features.compact import CompactColumns, open_compact
from lengthpred.features.layout import repair_command
from lengthpred.features.settings import LEGACY_POOLING
from lengthpred.integrity import (
    VerifiedFiles,
    atomic_write_text,
    publish,
    quarantine,
    save_tensors,
    temp_path,
)
from lengthpred.names import hidden_name

MANIFEST = "manifest.json"
PART_SUFFIX, TOKENS_SUFFIX = ".safetensors", ".tokens.safetensors"
log = logging.getLogger(__name__)


def atomic_write_json(path: Path, obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True))


def part_name(ids: Sequence[str]) -> str:
    return hashlib.sha1("\n".join(ids).encode()).hexdigest()[:16]


def shard_parts_dir(root: Path, shard: tuple[int, int]) -> Path:
    """`parts/shard-<i>-of-<n>`: the folder one shard writes its parts to."""
    return Path(root) / "parts" / f"shard-{shard[0]}-of-{shard[1]}"


def write_part(root: Path, ids: Sequence[str], columns: dict[str, torch.Tensor],
               tokens: dict[str, torch.Tensor] | None = None, *, shard: tuple[int, int] | None = None) -> Path:
    """Write one batch atomically (a temp name of this writer, its checksum, then a rename) into its shard's
    folder (`parts/` itself without a shard); the token-level file first, so a part that exists is complete."""
    parts = root / "parts" if shard is None else shard_parts_dir(root, shard)
    parts.mkdir(parents=True, exist_ok=True)
    name = part_name(ids)
    meta = {"ids": json.dumps(list(ids))}
    if tokens:
        out = parts / f"{name}{TOKENS_SUFFIX}"
        tmp = temp_path(out)
        save_tensors(save_file, {k: v.contiguous() for k, v in tokens.items()}, tmp, metadata=meta)
        publish(tmp, out)
    out = parts / f"{name}{PART_SUFFIX}"
    tmp = temp_path(out)
    save_tensors(save_file, {k: v.contiguous() for k, v in columns.items()}, tmp, metadata=meta)
    return publish(tmp, out)


def listed_parts(root: Path) -> tuple[list[Path], set[str]]:
    """(every part file of the store, the path of every file under `parts/`), from one walk of the folders (all
    shard folders, and `parts/` itself for stores from before them): what a load needs to know of digests and
    token-level files without a stat per file."""
    parts, names = [], set()
    for folder, _, files in os.walk(root / "parts"):
        for f in files:
            full = os.path.join(folder, f)
            names.add(full)
            if f.endswith(PART_SUFFIX) and not f.endswith(TOKENS_SUFFIX):
                parts.append(Path(full))
    return sorted(parts, key=lambda p: (p.name, str(p))), names


def part_files(root: Path) -> list[Path]:
    """Every part file of the store (`listed_parts`)."""
    return listed_parts(root)[0]


def part_ids(path: Path) -> list[str]:
    with safe_open(str(path), framework="np") as f:
        return json.loads(f.metadata()["ids"])


def _ids_damage(path: str, verified: VerifiedFiles) -> str | None:
    """Why a checked part's ids cannot be read (None: read now, or already in the record)."""
    if verified.extra(path) is not None:
        return None
    try:  # its ids, read once while the check holds
        verified.remember(path, part_ids(Path(path)))
    except (SafetensorError, OSError, KeyError, TypeError, ValueError) as e:
        verified.forget(path)
        return f"unreadable ({e.__class__.__name__})"
    return None


def check_parts(parts: Sequence[Path], listed: set[str], verified: VerifiedFiles, *, tokens: bool = True
                ) -> list[tuple[str | None, str | None]]:
    """(why the part cannot be trusted, why its token-level file cannot) for each of `parts`: what a load verifies,
    one stat per recorded file (`VerifiedFiles.check_all`), with each digest file's presence read from `listed`, the
    listing the load makes anyway. `tokens=False` leaves the token-level files unchecked (None): a load of pooled
    columns does not read them (`FeatureSet.check_token_files` checks them before token states are read)."""
    paths = list(map(os.fspath, parts))
    why = verified.check_all(paths, listed, seal="parts")
    if not tokens:
        return list(zip(why, repeat(None)))
    with_tokens = [t for t in map(_tokens_name, paths) if t in listed]
    token_why = dict(zip(with_tokens, verified.check_all(with_tokens, listed, seal="tokens"), strict=True))
    return [(w, token_why.get(_tokens_name(p))) for p, w in zip(paths, why, strict=True)]


def intact_parts(root: Path, *, tokens: bool = True) -> list[tuple[Path, list[str]]]:
    """(part, its ids) of every part that passes its checksum and reads, with its token-level file (unless
    `tokens=False`: see `check_parts`); a part that fails (or has no digest to check) is moved aside (`.bad`, one
    line naming it) and its prompts count as missing. Each file is hashed once; later loads compare its size and
    mtime (`check_parts`)."""
    out = []
    verified = VerifiedFiles(root)
    parts, listed = listed_parts(root)
    for p, (why, token_why) in zip(parts, check_parts(parts, listed, verified, tokens=tokens), strict=True):
        path = os.fspath(p)
        why = why or _ids_damage(path, verified) or token_why
        if why is not None:
            for f in (_tokens_path(p), p):
                if f.is_file():
                    quarantine(f, why)
                verified.forget(f)
            continue
        out.append((p, verified.extra(path)))
    verified.save()
    return out


def done_ids(root: Path) -> set[str]:
    """Ids already stored, intact, by any shard (resume skips them)."""
    out: set[str] = set()
    for _, ids in intact_parts(root):
        out.update(ids)
    return out


def _read_listing(root: Path, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in sorted(root.glob(f"{prefix}-*.json")):
        try:
            out.update(json.loads(p.read_text()))
        except ValueError:
            raise DataError(f"{p}: damaged (not JSON); delete it and rerun scripts/extract.py") from None
    return out


def read_skipped(root: Path) -> dict[str, str]:
    """id → why the extraction left the prompt out (empty, over the budget under overflow=reject)."""
    return _read_listing(root, "skipped")


def read_truncated(root: Path) -> dict[str, int]:
    """id → the full token count of each prompt cut to the budget (overflow=truncate)."""
    return _read_listing(root, "truncated")


class FeatureSet:
    """Stored features of a set of prompts, read lazily from part files.

    `ids` (row order), `names` (columns), `get(name) -> [n, d] float32`, `stack(names)`, `subset(ids)`.
    """

    def __init__(self, root: Path, manifest: dict, parts: list[tuple[Path, list[str]]] | None, ids: list[str],
                 compact: CompactColumns | None = None):
        self.root = root
        self.manifest = manifest
        self._parts_read = parts  # None with a compacted store: the parts are listed only for token states
        self._compact = compact
        self._where_map: dict[str, tuple[int, int]] | None = None
        self._tokens_checked = False
        self.ids = list(ids)
        self.names: list[str] = list(manifest.get("columns", {}))
        self.skipped: dict[str, str] = manifest.get("skipped", {})
        self.truncated: dict[str, int] = manifest.get("truncated", {})

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def _parts(self) -> list[tuple[Path, list[str]]]:
        if self._parts_read is None:
            self._parts_read = intact_parts(self.root, tokens=False)
        return self._parts_read

    def check_token_files(self) -> None:
        """Check the parts' token-level files against their digests (once per set: the pooled load leaves them to
        this); a damaged one is moved aside with its part, and one line says to rerun the extraction, which
        recomputes both."""
        if self._tokens_checked:
            return
        verified = VerifiedFiles(self.root)
        listed = listed_parts(self.root)[1]
        names = [_tokens_name(os.fspath(p)) for p, _ in self._parts]
        present = [t for t in names if t in listed]
        damaged = [(t, why) for t, why in zip(present, verified.check_all(present, listed, seal="tokens"),
                                              strict=True) if why is not None]
        for t, why in damaged:
            for f in (t, t.removesuffix(TOKENS_SUFFIX) + PART_SUFFIX):
                if os.path.isfile(f):
                    quarantine(f, why)
                verified.forget(f)
        verified.save()
        if damaged:
            raise DataError(f"{self.root}: {len(damaged)} token-level file(s) cannot be trusted (e.g. "
                            f"{Path(damaged[0][0]).name}: {damaged[0][1]}); moved aside with their parts: rerun "
                            "scripts/extract.py (it resumes)")
        self._tokens_checked = True

    @property
    def _where(self) -> dict[str, tuple[int, int]]:
        if self._where_map is None:
            self._where_map = {pid: (k, r) for k, (_, pids) in enumerate(self._parts) for r, pid in enumerate(pids)}
        return self._where_map

    @property
    def compact(self) -> CompactColumns | None:
        """The store's compacted columns when it is read from them (None: from its parts)."""
        return self._compact

    def _has(self, pid: str) -> bool:
        return pid in self._compact.row if self._compact is not None else pid in self._where

    @property
    def pooling(self) -> dict:
        """`span`, `drop_sink`, `attn_norm`, `fuse_on` the store was made with (a manifest without them is
        from before they existed: every token, raw attention sums, z-scores)."""
        return LEGACY_POOLING | self.manifest.get("pooling", {})

    def __repr__(self) -> str:
        return f"FeatureSet({len(self.ids)} prompts, {len(self.names)} columns, {self.root})"

    def get(self, name: str) -> np.ndarray:
        if name not in self.names:
            raise DataError(f"feature {name!r} not stored in {self.root}; stored: {', '.join(self.names[:8])}, ...")
        if self._compact is not None and name in self._compact:
            values = self._compact.values(name)  # memory-mapped, the store's row order
            if self.ids != self._compact.ids:
                values = values[[self._compact.row[i] for i in self.ids]]
            return to_float32(values)
        return to_float32(self.read(name))

    def read(self, name: str) -> np.ndarray:
        """Column `name` [n, d] in `ids` order, in the dtype it is stored in (float16 by default), from the parts."""
        d = int(self.manifest["columns"][name])
        out: np.ndarray | None = None
        rows_by_part: dict[int, list[tuple[int, int]]] = {}
        for i, pid in enumerate(self.ids):
            k, r = self._where[pid]
            rows_by_part.setdefault(k, []).append((i, r))
        for k, pairs in rows_by_part.items():
            with safe_open(str(self._parts[k][0]), framework="pt") as f:
                t = f.get_tensor(name)
            col = (t.float() if t.dtype == torch.bfloat16 else t).numpy()  # numpy has no bfloat16
            if out is None:
                out = np.empty((len(self.ids), d), dtype=col.dtype)
            dst, src = zip(*pairs, strict=True)
            out[list(dst)] = col[list(src)]
        return out if out is not None else np.empty((0, d), dtype=np.float32)

    def stack(self, names: Iterable[str]) -> np.ndarray:
        """Several columns side by side: [n, Σd]."""
        return np.concatenate([self.get(n) for n in names], axis=1)

    def subset(self, ids: Iterable[str]) -> FeatureSet:
        ids = list(ids)
        missing = [i for i in ids if not self._has(i)]
        if missing:
            raise DataError(f"{len(missing)} ids have no stored features (e.g. {missing[:3]}) in {self.root}")
        sub = FeatureSet(self.root, self.manifest, self._parts_read, ids, self._compact)
        sub._tokens_checked = self._tokens_checked
        return sub

    def token_inputs(self, layer: int, scalars: Sequence[str] = ("entropy", "attn")) -> list[np.ndarray]:
        """Per prompt (in `ids` order) [t, d + len(scalars)] float32: layer `layer`'s token-level states
        with the per-token `scalars` as the last columns, for the t tokens the stored pools range over
        (`features.span`); each part file is opened once."""
        name = hidden_name(layer)
        out: list[np.ndarray | None] = [None] * len(self.ids)
        rows_by_part: dict[int, list[tuple[int, int]]] = {}
        for i, pid in enumerate(self.ids):
            k, r = self._where[pid]
            rows_by_part.setdefault(k, []).append((i, r))
        self.check_token_files()
        for k, pairs in rows_by_part.items():
            path = _tokens_path(self._parts[k][0])
            if not path.is_file():
                raise DataError(f"no token-level states stored in {self.root}; set features.token_layers=[{layer}]")
            with safe_open(str(path), framework="pt") as f:
                keys = set(f.keys())
                need = [name, *scalars]
                if any(n not in keys for n in need):
                    raise DataError(f"{path.name}: token-level {[n for n in need if n not in keys]} not stored "
                                    f"(stored: {sorted(keys)}); extract with features.token_layers=[{layer}] "
                                    "and the entropy/attention pools")
                off = f.get_tensor("offsets").tolist()
                h = f.get_tensor(name).float()
                extra = [f.get_tensor(n).float()[:, None] for n in scalars]
                full = torch.cat([h, *extra], dim=1).numpy()
                span = f.get_tensor("span").bool().numpy() if "span" in keys else np.ones(len(full), dtype=bool)
            for i, r in pairs:
                rows, keep = full[off[r] : off[r + 1]], span[off[r] : off[r + 1]]
                out[i] = rows[keep] if keep.any() else rows  # no span token: the pools took every token
        return out  # type: ignore[return-value]

    def token_states(self, layer: int, prompt_id: str) -> np.ndarray:
        """Token-level hidden states [t, d] of one prompt for a layer in `features.token_layers`."""
        k, r = self._where[prompt_id]
        self.check_token_files()
        path = _tokens_path(self._parts[k][0])
        if not path.is_file():
            raise DataError(f"no token-level states stored in {self.root}; set features.token_layers")
        with safe_open(str(path), framework="pt") as f:
            off = f.get_tensor("offsets")
            name = hidden_name(layer)
            if name not in f.keys():
                raise DataError(f"layer {layer} not stored token-level; stored: {sorted(f.keys())}")
            return f.get_slice(name)[int(off[r]) : int(off[r + 1])].float().numpy()


def to_float32(values: np.ndarray) -> np.ndarray:
    """A float32 copy (torch converts float16 several times faster than numpy's `astype`)."""
    if values.dtype == np.float32:
        return np.array(values)
    with warnings.catch_warnings():  # a read-only memory map: only read here, the result is a new tensor
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.ascontiguousarray(values)).float().numpy()


def _tokens_name(part: str) -> str:
    return part[: -len(PART_SUFFIX)] + TOKENS_SUFFIX


def _tokens_path(part: Path) -> Path:
    return Path(_tokens_name(os.fspath(part)))


def read_manifest(root: Path) -> dict:
    """A store's manifest (one line naming the fix when it is missing or damaged)."""
    mf = root / MANIFEST
    if not mf.is_file():
        raise DataError(f"no feature manifest at {mf}; run scripts/extract.py")
    try:
        return json.loads(mf.read_text())
    except ValueError:
        raise DataError(f"{mf}: damaged (not JSON); delete it and rerun scripts/extract.py (it resumes)") from None


def load_features(path: str | Path) -> FeatureSet:
    """Open a feature folder; every expected id must be stored or listed as skipped. A compacted store
    (`lengthpred.features.compact`) is read from its column files, its parts left unopened."""
    root = Path(path)
    manifest = read_manifest(root)
    skipped = read_skipped(root)
    manifest["skipped"] = skipped
    manifest["truncated"] = read_truncated(root)
    expected = [i for i in manifest["ids"] if i not in skipped]
    compact = open_compact(root, manifest.get("cache_key"))
    if compact is not None and set(expected) <= compact.row.keys():
        return FeatureSet(root, manifest, None, expected, compact)
    parts = intact_parts(root, tokens=False)  # token-level files: checked when token states are read
    seen: set[str] = set()
    for p, ids in parts:
        dup = seen.intersection(ids)
        if dup:
            raise DataError(f"{root}: ids stored twice (e.g. {sorted(dup)[:3]}, again in {p.relative_to(root)}): two "
                            f"shard layouts wrote it; `{repair_command(root)}` keeps one copy, then rerun the extraction")
        seen.update(ids)
    missing = [i for i in expected if i not in seen]
    if missing:
        raise DataError(
            f"{root}: features incomplete, {len(missing)} of {len(expected)} prompts missing "
            f"(e.g. {missing[:3]}); run the missing shards of scripts/extract.py (it resumes)"
        )
    return FeatureSet(root, manifest, parts, expected)


class FeatureStores:
    """Several stored feature sets (subset to the same ids) read as one: a column comes from the first
    that holds it."""

    def __init__(self, sets: Sequence[Any]):
        self.sets = list(sets)

    def get(self, name: str) -> np.ndarray:
        for fs in self.sets:
            if name in fs.names:
                return fs.get(name)
        raise DataError(f"feature {name!r} is in none of the stores {[str(fs.root) for fs in self.sets]}")

    def token_inputs(self, layer: int) -> list[np.ndarray]:
        for fs in self.sets:
            if int(layer) in (fs.manifest.get("token_layers") or []):
                return fs.token_inputs(int(layer))
        raise DataError(
            f"layer {layer} is stored token-level in none of {[str(fs.root) for fs in self.sets]}; "
            f"extract with features.token_layers=[{layer}]"
        )

    def n_prompt_tokens(self) -> np.ndarray | None:
        return next(
            (fs.get("n_prompt_tokens")[:, 0] for fs in self.sets if "n_prompt_tokens" in fs.names), None
        )


class WithColumns:
    """A feature set plus columns computed in memory (rows aligned to `base.ids`), read like a FeatureSet:
    e.g. pools derived from the stored per-head attention pools (lengthpred.heads.attention_heads)."""

    def __init__(self, base: FeatureSet, extra: dict[str, np.ndarray]):
        bad = [k for k, v in extra.items() if len(v) != len(base.ids) or k in base.names]
        if bad:
            raise DataError(f"in-memory columns {bad} clash with the store's names or rows ({len(base.ids)})")
        self.base, self.extra = base, extra
        self.ids, self.root, self.manifest = base.ids, base.root, base.manifest
        self.names = [*base.names, *extra]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def pooling(self) -> dict:
        return self.base.pooling

    def get(self, name: str) -> np.ndarray:
        return np.asarray(self.extra[name], dtype=np.float32) if name in self.extra else self.base.get(name)

    def subset(self, ids: Iterable[str]) -> WithColumns:
        ids = list(ids)
        sub = self.base.subset(ids)
        pos = {pid: r for r, pid in enumerate(self.ids)}
        rows = [pos[i] for i in ids]
        return WithColumns(sub, {k: v[rows] for k, v in self.extra.items()})

    def token_inputs(self, layer: int, scalars: Sequence[str] = ("entropy", "attn")) -> list[np.ndarray]:
        return self.base.token_inputs(layer, scalars)
