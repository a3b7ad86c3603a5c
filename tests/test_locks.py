"""Writes on a shared filesystem: the lock falls back to an exclusive lock file where `flock` raises ENOSYS (two real
processes, `flock` patched in each), a dead holder's lock is taken over, and the temp sweep leaves another node's
temps alone until their lease runs out."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from lengthpred import locks
from lengthpred.integrity import sweep_stale_temps, temp_path
from lengthpred.paths import REPO_ROOT

WORKER = textwrap.dedent("""
    import errno, fcntl, os, sys, time

    def no_flock(*args, **kwargs):
        raise OSError(errno.ENOSYS, "Function not implemented")

    fcntl.flock = no_flock  # as on Lustre mounted without flock
    from lengthpred.locks import locked

    log = sys.argv[2]
    with locked(sys.argv[1]):
        with open(log, "a") as f:
            f.write(f"in {os.getpid()}\\n")
        time.sleep(0.4)
        with open(log, "a") as f:
            f.write(f"out {os.getpid()}\\n")
""")


def _dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)


def test_two_processes_exclude_each_other_without_flock(tmp_path):
    lock, log = tmp_path / ".lock", tmp_path / "log"
    env = os.environ | {"PYTHONPATH": str(REPO_ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(lock), str(log)], env=env) for _ in range(2)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    lines = log.read_text().split()
    events = list(zip(lines[0::2], lines[1::2], strict=True))  # (in|out, pid)
    assert [e[0] for e in events] == ["in", "out", "in", "out"]  # never two inside at once
    assert events[0][1] == events[1][1] and events[2][1] == events[3][1]
    assert not (tmp_path / ".lock.held").exists()  # released


def test_a_dead_holders_fallback_lock_is_taken_over(tmp_path, monkeypatch):
    held = tmp_path / ".lock.held"
    held.write_text(f"{locks.host_tag()} {_dead_pid()}\n")
    assert locks._abandoned(held)
    held.write_text(f"other-node {os.getpid()}\n")  # another node's, freshly beaten: kept
    assert not locks._abandoned(held)
    os.utime(held, (time.time() - locks.LEASE - 60,) * 2)  # no heartbeat for a lease: abandoned
    assert locks._abandoned(held)


def test_the_sweep_keeps_other_nodes_temps_until_their_lease_ends(tmp_path):
    dead = _dead_pid()
    mine_dead = tmp_path / f".part.parquet.@{locks.host_tag()}.{dead}.0123abcd.tmp"
    other = tmp_path / f".part.parquet.@node-b.{dead}.89abcdef.tmp"  # its pid means nothing here
    old_other = tmp_path / f".part2.parquet.@node-b.{dead}.01234567.tmp"
    for p in (mine_dead, other, old_other):
        p.write_text("half")
    os.utime(old_other, (time.time() - locks.LEASE - 60,) * 2)
    live = temp_path(tmp_path / "part.parquet")
    live.write_text("half")
    assert f".@{locks.host_tag()}.{os.getpid()}." in live.name
    assert sweep_stale_temps(tmp_path) == 2
    assert other.exists() and live.exists() and not mine_dead.exists() and not old_other.exists()
    assert Path(live).exists()
