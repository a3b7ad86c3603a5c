"""The datasets stage (scripts/fetch_datasets.py): every file of the dataset manifest, fetched and verified."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from lengthpred.data.fetch import fetch_all
from lengthpred.paths import resolve


def run_fetch_datasets(cfg: Any, out: str | Path) -> Path:
    """Every file of `data.fetch`'s manifest, verified by sha256, into `data.fetch.dest`; prints the count per
    status. Returns that folder."""
    f = cfg.data.fetch
    dest = resolve(f.dest)
    status = fetch_all(dest, f.base_url, only=f.get("only"), timeout_s=float(f.timeout_s))
    print(f"{dict(Counter(status.values()))} -> {dest}")
    return dest
