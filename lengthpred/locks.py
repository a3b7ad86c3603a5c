"""Exclusive locks on files that several processes, possibly on several nodes, share.

`locked(lock_file)` holds an exclusive `fcntl.flock` for a block where the filesystem supports it. Where `flock`
raises ENOSYS, EOPNOTSUPP or ENOLCK (Lustre mounted without `flock`, some NFS set-ups), the lock is instead a
file created exclusively beside it (`<lock_file>.held`, `O_CREAT | O_EXCL`, atomic on local disks, NFSv3+ and
Lustre) that names its holder (`host_tag()` and pid) and whose mtime a heartbeat thread refreshes. A waiter
breaks it only when its holder is gone for sure: a dead pid on this host, or (any host) a heartbeat older than
`LEASE` seconds. The lease is also how long a temp file of another host is left alone
(`lengthpred.integrity.sweep_stale_temps`).

`claim(folder, name)`: a folder claimed by creating `name` in it exclusively (the first claimer wins, also over
NFS); a run folder is claimed this way (`lengthpred.cli.claim_run_dir`).

`host_tag()`: this host's name as it appears in temp and lock names (letters, digits and dashes).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("lengthpred.locks")

# seconds without a heartbeat (or, for a temp, without a write) after which another host's lock or temp
# counts as abandoned; $LENGTHPRED_LEASE_S overrides it
LEASE = float(os.environ.get("LENGTHPRED_LEASE_S", 6 * 3600))
HEARTBEAT = 10.0  # seconds between refreshes of a held fallback lock (well inside any sane lease)
POLL = 0.2  # seconds between tries of a waiter on a fallback lock
NO_FLOCK = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK)
HELD_SUFFIX = ".held"


def host_tag() -> str:
    """This host's name, reduced to letters, digits and dashes (it sits between dots in file names)."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname()).strip("-") or "host"


def claim(folder: str | Path, name: str) -> str | None:
    """Create `folder` (if needed) and `<folder>/<name>` exclusively, naming this host and process. None when this
    process holds the claim (now or from before), else the holder's `host pid` ("?" unreadable)."""
    me = f"{host_tag()} {os.getpid()}"
    path = Path(folder) / name
    Path(folder).mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        try:
            holder = path.read_text().strip()
        except OSError:
            holder = "?"
        return None if holder == me else holder
    with os.fdopen(fd, "w") as f:
        f.write(me + "\n")
    return None


def alive(pid: int) -> bool:
    """Whether a process with this id runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextlib.contextmanager
def locked(lock_file: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_file` (created if needed) for the block; another holder makes this one
    wait (said once in the log). `flock` where the filesystem has it, else an exclusive lock file (module
    docstring). Released when the block ends or, for `flock`, when the process dies."""
    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as f:
        try:
            _flock(f, lock_file)
        except OSError as e:
            if e.errno not in NO_FLOCK:
                raise
            log.info("%s: flock unavailable on this filesystem (%s); using an exclusive lock file", lock_file,
                     errno.errorcode.get(e.errno, e.errno))
            with _held(lock_file.with_name(lock_file.name + HELD_SUFFIX)):
                yield
            return
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _flock(f, lock_file: Path) -> None:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log.info("waiting for %s (another process is writing there)", lock_file)
        fcntl.flock(f, fcntl.LOCK_EX)


def _holder(held: Path) -> tuple[str, int] | None:
    try:
        host, pid = held.read_text().split()[:2]
        return host, int(pid)
    except (OSError, ValueError):
        return None


def _abandoned(held: Path) -> bool:
    """Whether the holder of `held` is gone for sure: a dead pid on this host, or no heartbeat within LEASE."""
    try:
        age = time.time() - held.stat().st_mtime
    except FileNotFoundError:
        return False  # released meanwhile: the next try takes it
    owner = _holder(held)
    if owner is not None and owner[0] == host_tag() and not alive(owner[1]):
        return True
    return age > LEASE


@contextlib.contextmanager
def _held(held: Path) -> Iterator[None]:
    said = False
    while True:
        try:
            fd = os.open(held, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            if _abandoned(held):
                log.warning("%s: its holder %s is gone; taking the lock over", held, _holder(held))
                with contextlib.suppress(FileNotFoundError):
                    held.unlink()
                continue
            if not said:
                log.info("waiting for %s (held by %s)", held, _holder(held))
                said = True
            time.sleep(POLL)
    with os.fdopen(fd, "w") as f:
        f.write(f"{host_tag()} {os.getpid()}\n")
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(held, stop), daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        with contextlib.suppress(FileNotFoundError):
            held.unlink()


def _heartbeat(held: Path, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT):
        with contextlib.suppress(OSError):
            os.utime(held)
