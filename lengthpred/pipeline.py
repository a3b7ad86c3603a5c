"""Run stages in order with a progress line each, skipping a stage whose inputs and config are unchanged.

A stage's output folder holds `_stage.json` with the hash of what it was built from; a rerun with the
same hash costs nothing, a crash mid-stage leaves no marker so the stage runs again (stages are
themselves resumable where they are long).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

MARKER = "_stage.json"


def config_hash(*parts: Any) -> str:
    """A short stable hash of configs (DictConfig or plain values)."""
    plain = [OmegaConf.to_container(p, resolve=True) if isinstance(p, DictConfig) else p for p in parts]
    return hashlib.sha1(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:12]


def run_stage(name: str, out_dir: Path, key: str, fn: Callable[[Path], Any], *, force: bool = False) -> bool:
    """Run `fn(out_dir)` unless `out_dir` already holds a finished run with the same key.

    Returns True when the stage ran, False when it was cached.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    marker = out_dir / MARKER
    if not force and marker.is_file() and json.loads(marker.read_text()).get("key") == key:
        print(f"[{name}] cached → {out_dir}", flush=True)
        return False
    marker.unlink(missing_ok=True)
    print(f"[{name}] running …", flush=True)
    t0 = time.perf_counter()
    fn(out_dir)
    dt = time.perf_counter() - t0
    marker.write_text(json.dumps({"key": key, "seconds": round(dt, 1), "finished": time.time()}))
    print(f"[{name}] done in {dt:.0f} s → {out_dir}", flush=True)
    return True


def source_hash(repo: Path, extra: list[str] | None = None) -> str:
    """Hash of everything a stage's result depends on besides cached data: library and script code,
    configs, the committed reference traces, and the command-line overrides."""
    h = hashlib.sha1()
    patterns = ["lengthpred/**/*.py", "scripts/*.py", "conf/**/*.yaml", "data/reference/**/*.jsonl"]
    for pattern in patterns:
        for f in sorted(repo.glob(pattern)):
            h.update(str(f.relative_to(repo)).encode())
            h.update(f.read_bytes())
    h.update(json.dumps(extra or []).encode())
    return h.hexdigest()[:12]
