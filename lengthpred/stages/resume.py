"""A long stage's finished parts, so that its interrupted run resumes instead of starting over.

The pipeline keeps a stage's folder when it reruns with the same key after a crash (`STARTED`, which also tells the
run-folder guard of `lengthpred.cli` that the pipeline owns the folder);
inside it, each part of the stage (one head of the train stage's multirun) writes `DONE` last, holding the hash
of its resolved config, and a resumed run skips every part whose `DONE` matches its own config. A part that
crashed left no `DONE` and runs again (its files are rewritten, not appended to).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthpred.integrity import atomic_write_text

DONE = "_part_done.json"
STARTED = "_stage.started.json"  # a pipeline stage's key, written when it starts in an emptied folder


def pipeline_owned(folder: str | Path) -> bool:
    """Whether `folder` is a pipeline stage's folder or a multirun job inside one (the pipeline has emptied it,
    or resumes its own interrupted run there)."""
    folder = Path(folder)
    return (folder / STARTED).is_file() or (folder.parent / STARTED).is_file()


def config_fingerprint(cfg: DictConfig) -> str:
    """A short hash of the resolved config (Hydra's own node is not part of it)."""
    plain: Any = OmegaConf.to_container(cfg, resolve=True)
    return hashlib.sha1(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:16]


def finished_before(out: str | Path, cfg: DictConfig) -> bool:
    """Whether `out` holds this config's finished part."""
    try:
        done = json.loads((Path(out) / DONE).read_text())
    except (OSError, ValueError):
        return False
    return done.get("config") == config_fingerprint(cfg)


def mark_finished(out: str | Path, cfg: DictConfig) -> None:
    """Record, last, that this config's part in `out` finished."""
    atomic_write_text(Path(out) / DONE, json.dumps({"config": config_fingerprint(cfg)}))
