"""The data stage: the prompt set of `cfg.data`, with the served-length shift when the reference trace exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lengthpred.data import build
from lengthpred.stages.locations import reference_path
from lengthpred.stages.outputs import declare_outputs


def reference_trace(cfg: Any) -> Path | None:
    """The committed reference trace of (model, data), when the generate stage committed one."""
    if not (cfg.get("model") or {}).get("name") or not cfg.paths.get("data_dir"):
        return None
    p = reference_path(cfg)
    return p if p.is_file() else None


def prepare(cfg: Any, force: bool = False) -> Path:
    """Build and save `data.out_dir` (`lengthpred.data.build.prepare`); skipped when built with the same config."""
    out = build.prepare(cfg.data, reference=reference_trace(cfg), force=force)
    declare_outputs(cfg, out)
    return out


def run_prepare_data(cfg: Any, out: str | Path) -> Path:
    """The data stage (`out`: its run folder; the set it builds under data/ is declared in the config's run
    folder, `paths.output_dir`, the same folder when a script calls it; `force=true` rebuilds). Returns the
    prepared set's folder."""
    return prepare(cfg, force=bool(cfg.get("force", False)))

