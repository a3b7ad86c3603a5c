"""Where a measurement ran: the machine (CPU count and model, platform, load when it started) and the checkout's
commit, recorded beside timed results so a reader can tell quiet cores from shared ones."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "platform": platform.platform(), "load_at_start": os.getloadavg()[0]}


CODE = ("*.py", "*.yaml", "*.toml", "Makefile", "*.lock")  # what a measurement depends on (not the result files)


def git_commit() -> str:
    """The checkout's short commit, with "+changes" when tracked code or configs differ from it ("" outside a
    checkout)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *CODE],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return sha + ("+changes" if dirty else "")


def record(result: dict[str, Any], settings: dict[str, Any], load_at_start: float) -> dict[str, Any]:
    """A timed result as a committed file holds it: the numbers, the settings they were measured with, the machine
    (its load when the run started and now), the commit and the UTC date."""
    import datetime as dt

    return {"result": result, "settings": settings,
            "machine": machine() | {"load_at_start": load_at_start, "load_at_end": os.getloadavg()[0]},
            "commit": git_commit(), "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")}
