"""Integrity of files on disk: content fingerprints, per-file checksums, per-writer temp names, atomic
writes, folder locks and quarantine of damaged parts.

- `file_digest(path)`: sha256 of a file's bytes (a fingerprint of contents, never of the name);
  `tree_digest(folder)` the same over every file of a folder (relative names and contents).
- `write_checksum(path)` stores `<path>.sha256` beside a part; `verify(path)` is True / False, or None for
  a part written before checksums existed (trusted, as before).
- `temp_path(path)`: a temp name unique to this writer (pid + random), so two writers never share one;
  `atomic_write_text` / `atomic_write_bytes` write it and `os.replace` it onto the target.
- `locked(lock_file)`: an exclusive `fcntl.flock` held for the block; a second process waits for it.
- `quarantine(path, why)`: a damaged part is renamed `<name>.bad` (with its checksum), out of every glob,
  and one line names it; the caller then treats its rows as missing and recomputes them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

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
    return p.name.startswith(LOCK_NAME) or p.name.endswith((".lock", ".tmp", CHECKSUM_SUFFIX, BAD_SUFFIX))


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
    """`.<name>.<pid>.<random>.tmp` beside `path`: no two writers (processes or threads) share it."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


_TEMP = re.compile(r"^\..+\.(\d+)\.[0-9a-f]{8}\.tmp$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def sweep_stale_temps(folder: str | Path) -> int:
    """Remove the temps (files or folders, `temp_path` names) left in `folder` by writers that died mid-write:
    their pid no longer runs. Call it under the folder's lock; returns how many it removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    stale = [p for p in folder.iterdir() if (m := _TEMP.match(p.name)) and not _alive(int(m.group(1)))]
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


@contextlib.contextmanager
def locked(lock_file: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_file` (created if needed) for the block; another holder makes this
    one wait (said once in the log). Released when the block ends or the process dies."""
    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for %s (another process is writing there)", lock_file)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def folder_lock(folder: str | Path, name: str = LOCK_NAME) -> contextlib.AbstractContextManager[None]:
    """`locked` on `<folder>/<name>`."""
    return locked(Path(folder) / name)
