"""Integrity of files on disk: content fingerprints, per-file checksums, per-writer temp names, atomic
writes, folder locks and quarantine of damaged parts.

- `file_digest(path)`: sha256 of a file's bytes (a fingerprint of contents, never of the name);
  `tree_digest(folder)` the same over every file of a folder (relative names and contents).
- `write_checksum(path)` stores `<path>.sha256` beside a part; `verify(path)` is True / False, or None for
  a part written before checksums existed (trusted, as before).
- `temp_path(path)`: a temp name unique to this writer (host + pid + random), so two writers never share one,
  even on two nodes of a shared filesystem; `atomic_write_text` / `atomic_write_bytes` write it and `os.replace`
  it onto the target. `sweep_stale_temps` removes only this host's temps whose writer died, and any temp left
  untouched longer than the lease (`lengthpred.locks.LEASE`): never a temp another node is still writing.
- `locked(lock_file)` (`lengthpred.locks`): an exclusive lock held for the block, `flock` or, where the
  filesystem lacks it, an exclusive lock file; a second process waits for it.
- `VerifiedFiles(folder)`: each file checked against its stored digest once, then trusted while its size and
  mtime stay as they were checked and its digest file is there (`.verified.json` in the folder), so a large store
  is not re-hashed on every load. A file without a stored digest is never trusted.
- `claim_json(path, record)`: a record created exclusively (the first writer's wins), e.g. a store's layout.
- `quarantine(path, why)`: a damaged part is renamed `<name>.bad` (with its checksum), out of every glob,
  and one line names it; the caller then treats its rows as missing and recomputes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from array import array
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, repeat
from operator import add, attrgetter
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from lengthpred.locks import LEASE, alive, host_tag, locked

log = logging.getLogger("lengthpred.integrity")

CHECKSUM_SUFFIX = ".sha256"
BAD_SUFFIX = ".bad"
LOCK_NAME = ".lock"
_CHUNK = 1 << 22


def file_digest(path: str | Path) -> str:
    """sha256 (hex) of a file's contents."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _is_bookkeeping(p: Path) -> bool:
    """Locks, temps, checksums, quarantined files and the verification record: never content."""
    return (p.name.startswith(LOCK_NAME) or p.name == VERIFIED
            or p.name.endswith((".lock", ".tmp", CHECKSUM_SUFFIX, BAD_SUFFIX, ".held")))


def tree_digest(root: str | Path, skip: Iterable[str] = (), *, use_checksums: bool = False) -> str:
    """sha256 over every file under `root` (relative name + contents; locks, temps, checksums, logs and any path
    with a part named in `skip` left out); a file's digest when `root` is a file. `use_checksums`: a file
    with a stored checksum enters by it, unread (a large store fingerprinted in a moment)."""
    root = Path(root)
    if root.is_file():
        return file_digest(root)
    h = hashlib.sha256()
    skip = set(skip)
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        rel = p.relative_to(root)
        if _is_bookkeeping(p) or p.suffix == ".log" or skip.intersection(rel.parts):
            continue  # a log's timestamps are not content: a byte-identical rerun keeps its digest
        ck = checksum_path(p)
        digest = ck.read_text().strip() if use_checksums and ck.is_file() else file_digest(p)
        h.update(str(rel).encode() + b"\0" + digest.encode())
    return h.hexdigest()


def temp_path(path: str | Path) -> Path:
    """`.<name>.@<host>.<pid>.<random>.tmp` beside `path`: no two writers (threads, processes, nodes) share it."""
    path = Path(path)
    return path.with_name(f".{path.name}.@{host_tag()}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


# a temp name: `.@<host>` is absent from those written before hosts were part of it (this host's, as then)
_TEMP = re.compile(r"^\..+?(?:\.@(?P<host>[A-Za-z0-9-]+))?\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")


def _last_write(p: Path) -> float:
    """The newest mtime of a temp file, or of a temp folder and anything in it."""
    try:
        times = [p.stat().st_mtime] + ([q.stat().st_mtime for q in p.rglob("*")] if p.is_dir() else [])
    except FileNotFoundError:
        return time.time()  # gone meanwhile: not ours to judge
    return max(times)


def _stale(p: Path, now: float) -> bool:
    """A temp whose writer is gone for sure: this host's with a dead pid, or any untouched for the lease. A temp
    named before hosts were part of the name counts as this host's (it was written before shared stores)."""
    m = _TEMP.match(p.name)
    if m is None:
        return False
    host = m.group("host")
    if (host is None or host == host_tag()) and not alive(int(m.group("pid"))):
        return True
    return now - _last_write(p) > LEASE


def sweep_stale_temps(folder: str | Path) -> int:
    """Remove the temps (files or folders, `temp_path` names) left in `folder` by writers that died mid-write:
    this host's whose pid no longer runs, and any host's untouched for longer than the lease. Call it under the
    folder's lock; returns how many it removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    now = time.time()
    stale = [p for p in folder.iterdir() if _stale(p, now)]
    for p in stale:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    if stale:
        log.info("%s: removed %d temp file(s) of writers that died mid-write", folder, len(stale))
    return len(stale)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to a temp name of this writer, then rename it onto `path` (readers see old or new)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def checksum_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def write_checksum(path: str | Path, digest: str | None = None, *, target: str | Path | None = None) -> str:
    """Store the sha256 of `path` (or the given `digest`) as `<target or path>.sha256`; returns it."""
    digest = digest or file_digest(path)
    atomic_write_text(checksum_path(target or path), digest + "\n")
    return digest


def save_tensors(save: Callable[..., None], tensors: dict[str, Any], path: str | Path, **kw: Any) -> None:
    """`save(tensors, path, **kw)` with safetensors' `save_file` (torch or numpy), its I/O failures (a full disk, a
    read-only folder) raised as the OSError they are, naming `path`, where safetensors raises its own error
    type; the partly written file is removed."""
    try:
        save(tensors, str(path), **kw)
    except SafetensorError as e:
        code = re.search(r"os error (\d+)", str(e))
        if code is None:
            raise
        Path(path).unlink(missing_ok=True)
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from e


def publish(tmp: str | Path, path: str | Path) -> Path:
    """Checksum a finished temp file, store the checksum for `path`, then rename the file onto `path`: a part
    that exists always has the checksum it was written with."""
    write_checksum(tmp, target=path)
    os.replace(tmp, path)
    return Path(path)


def verify(path: str | Path) -> bool | None:
    """True when `path` matches its stored checksum, False when not, None when it has none (older part)."""
    ck = checksum_path(path)
    if not ck.is_file():
        return None
    try:
        return ck.read_text().strip() == file_digest(path)
    except OSError:  # moved aside by another reader meanwhile, or unreadable: damaged either way
        return False


def quarantine(path: str | Path, why: str) -> Path:
    """Rename a damaged file (and its checksum) to `<name>.bad` and say so in one line."""
    path = Path(path)
    bad = path.with_name(path.name + BAD_SUFFIX)
    try:
        os.replace(path, bad)
    except FileNotFoundError:  # another reader moved it aside first
        return bad
    ck = checksum_path(path)
    if ck.is_file():
        os.replace(ck, checksum_path(bad))
    log.warning("%s: %s; moved aside to %s and recomputed", path, why, bad.name)
    return bad


def folder_lock(folder: str | Path, name: str = LOCK_NAME) -> contextlib.AbstractContextManager[None]:
    """`locked` on `<folder>/<name>`."""
    return locked(Path(folder) / name)


def claim_json(path: str | Path, record: dict[str, Any]) -> dict[str, Any] | None:
    """Write `record` to `path` only if no file is there (an atomic create-if-absent, also over NFS: of several
    writers exactly one wins). Returns None when this call wrote it, else the record already there ({} when it
    cannot be read)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    try:
        os.link(tmp, path)
        return None
    except FileExistsError:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
    finally:
        tmp.unlink(missing_ok=True)


VERIFIED = ".verified.json"  # file (relative to its folder) -> [size, mtime_ns, None, extra] as last checked (an
#                                entry from before, with its digest file's stamp in the third slot, is re-hashed once)
SEAL = ""  # the record's key for the seals (`check_all`): no file's relative path is empty
_STAMP = attrgetter("st_size", "st_mtime_ns")


def _fingerprint(keys: list[str], stamps: list[int]) -> str:
    """sha256 of a list of files (relative paths, in order) and their sizes and mtimes: a seal kept as one string,
    so it adds nothing worth measuring to reading the record."""
    h = hashlib.sha256("\0".join(keys).encode())
    h.update(array("q", stamps).tobytes())
    return h.hexdigest()


class VerifiedFiles:
    """The files of `folder` already checked against their stored digests (`<file>.sha256`), kept in
    `<folder>/.verified.json`: a file whose size and mtime are those of its last check, and whose digest file is
    still there, is trusted without being read again; any change re-hashes it against its digest. `extra` holds what a
    caller read from a checked file (a part's ids), valid exactly as long as the check. `save()` writes the record
    back when it changed (a read-only folder keeps it in memory only)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._file = self.folder / VERIFIED
        self._prefix = os.path.join(os.fspath(self.folder), "")  # keys are paths relative to it
        try:
            self._seen: dict[str, list[Any]] = json.loads(self._file.read_text())
        except (OSError, ValueError):
            self._seen = {}
        seals = self._seen.pop(SEAL, None)
        self._seals: dict[str, dict[str, list]] = seals if isinstance(seals, dict) else {}
        self._dirty = False

    def _key(self, path: str | Path) -> str:
        p, root = os.fspath(path), self._prefix
        return p[len(root):] if p.startswith(root) else str(Path(p).relative_to(self.folder))

    def check(self, path: str | Path, *, has_digest: bool | None = None) -> str | None:
        """Why `path` cannot be trusted ("no stored digest", "checksum mismatch ...", "unreadable"), or None.
        `has_digest`: whether its digest file is there, when the caller has listed the folder anyway (a load of
        many parts then costs one stat per file); None stats it."""
        p = os.fspath(path)  # plain strings and os.stat: a load checks every part, so this path is kept lean
        if not (os.path.exists(p + CHECKSUM_SUFFIX) if has_digest is None else has_digest):
            return "no stored digest (written before checksums, or its digest file was removed)"
        try:
            st = os.stat(p)
        except OSError:
            return "unreadable (gone)"
        key = self._key(p)
        seen = self._seen.get(key)
        if seen is not None and seen[0] == st.st_size and seen[1] == st.st_mtime_ns and seen[2] is None:
            return None
        try:
            digest = Path(p + CHECKSUM_SUFFIX).read_text().strip()
            actual = file_digest(path)
        except OSError:
            return "unreadable"
        if actual != digest:
            self._seen.pop(key, None)
            self._seals, self._dirty = {}, True
            return "checksum mismatch (the file changed after it was written)"
        self._seen[key] = [st.st_size, st.st_mtime_ns, None, None]
        self._dirty = True
        return None

    def check_all(self, paths: Sequence[str], listed: set[str], seal: str = "") -> list[str | None]:
        """`check` of each of `paths`, whose digest files' presence `listed` says (a listing the caller made anyway):
        a file recorded as checked costs one stat and a comparison, nothing else. When every one of `paths` passes,
        the record keeps them with their sizes and mtimes as the seal named `seal` (one per kind of file list, e.g.
        a store's parts and its token-level files); a later call with the same paths, each still of that size and
        mtime and with its digest file listed, compares the whole list at once (the per-file comparisons in Python
        cost about as much as the stats themselves on a store of small parts)."""
        if self._sealed(seal, paths, listed):
            return [None] * len(paths)
        out = [self.check(p, has_digest=p + CHECKSUM_SUFFIX in listed) for p in paths]
        if not any(out):
            keys = [self._key(p) for p in paths]
            stamps = [x for k in keys for x in self._seen[k][:2]]
            self._seals[seal] = {"n": len(paths), "fingerprint": _fingerprint(keys, stamps)}
            self._dirty = True
        return out

    def _sealed(self, name: str, paths: Sequence[str], listed: set[str]) -> bool:
        """Whether the seal `name` covers exactly `paths`, each unchanged since and with its digest file in
        `listed`: what `check` would find of each, in one pass of C-level maps and list comparisons."""
        seal, root = self._seals.get(name), self._prefix
        if not seal or seal.get("n") != len(paths) or not all(map(str.startswith, paths, repeat(root))):
            return False
        n = len(root)
        try:
            stamps = list(chain.from_iterable(map(_STAMP, map(os.stat, paths))))
        except OSError:
            return False
        return (_fingerprint([p[n:] for p in paths], stamps) == seal.get("fingerprint")
                and listed.issuperset(map(add, paths, repeat(CHECKSUM_SUFFIX))))

    def extra(self, path: str | Path) -> Any:
        """What `remember` stored for a checked file (None: nothing yet)."""
        entry = self._seen.get(self._key(path))
        return entry[3] if entry and len(entry) > 3 else None

    def remember(self, path: str | Path, value: Any) -> None:
        key = self._key(path)
        entry = self._seen.get(key)
        if entry is not None and (len(entry) < 4 or entry[3] != value):
            self._seen[key] = [*entry[:3], value]
            self._dirty = True

    def forget(self, path: str | Path) -> None:
        if self._seen.pop(self._key(path), None) is not None:
            self._seals, self._dirty = {}, True

    def save(self) -> None:
        if not self._dirty:
            return
        try:
            atomic_write_text(self._file, json.dumps({**self._seen, SEAL: self._seals} if self._seals else
                                                     self._seen))
            self._dirty = False
        except OSError as e:  # a read-only store: checked again next time
            log.debug("cannot record verified files in %s: %s", self._file, e)
