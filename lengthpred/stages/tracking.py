"""The one module that imports wandb. Offline by default, disabled in tests, finished in `finally`.

A run is named by its stage and the overrides it was started with (`train head=linear data=trace`), so the jobs of
a multirun are told apart; tables keep their numbers (`table_cells`: numpy scalars as Python numbers, NaN as
empty, anything else as text); a feature store or a predictions file is logged as a reference artifact
(`Tracker.log_reference`: its path and our own digest, nothing uploaded or re-hashed)."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from lengthpred.errors import ConfigError
from lengthpred.integrity import tree_digest

log = logging.getLogger(__name__)
LOGGER_MODES = ("offline", "online", "disabled")
WANDB_MODES = {"offline": "offline", "dryrun": "offline", "online": "online", "run": "online",
               "disabled": "disabled"}


def logger_mode(lcfg: Mapping[str, Any] | None) -> str:
    """The W&B mode a run uses: `logger.mode` (no logger group: disabled), overridden by `WANDB_MODE` (W&B's
    own variable) unless the config turned tracking off; `WANDB_MODE=disabled` always turns it off."""
    mode = (lcfg or {}).get("mode", "disabled")
    if mode not in LOGGER_MODES:
        raise ConfigError(f"logger.mode={mode!r}: must be one of {list(LOGGER_MODES)}")
    env = os.environ.get("WANDB_MODE")
    if env and env not in WANDB_MODES:
        raise ConfigError(f"WANDB_MODE={env!r}: must be one of {sorted(WANDB_MODES)}")
    return str(mode) if not env or mode == "disabled" else WANDB_MODES[env]


# overrides that say where a run writes or how it logs, not what it computes: left out of run names
_NOT_IN_NAME = re.compile(r"^[+~]*(hydra[./]|paths\.|logger[.=]|pipeline\.)")
NAME_CHARS = 128


def table_cells(rows: Iterable[Iterable[Any]]) -> list[list[Any]]:
    """Rows for a W&B table with their numbers kept: numpy scalars as Python numbers, NaN/inf and None as empty,
    strings and bools as they are, anything else (lists, dicts, objects) as its text."""

    def cell(v: Any) -> Any:
        if isinstance(v, np.generic):
            v = v.item()
        if v is None or isinstance(v, bool | str | int):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        return json.dumps(v, default=str) if isinstance(v, list | dict | tuple) else str(v)

    return [[cell(v) for v in row] for row in rows]


def run_name(stage: str, overrides: Iterable[str]) -> str:
    """`<stage> <override> ...` without the path and logging overrides, cut to W&B's readable length."""
    kept = [o for o in overrides if not _NOT_IN_NAME.match(o)]
    name = " ".join([stage, *kept])
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def _task_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


class Tracker:
    """A thin handle that is a no-op when the logger is disabled."""

    def __init__(self, run: Any | None) -> None:
        self.run = run

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        if self.run is not None:
            self.run.log(metrics, step=step)

    def log_table(self, key: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Table(columns=list(columns), data=table_cells(rows))})

    def log_frame(self, key: str, df: Any) -> None:
        """A pandas frame as a table, its numbers kept (`table_cells`)."""
        self.log_table(key, [str(c) for c in df.columns], df.itertuples(index=False))

    def log_reference(self, name: str, kind: str, path: str | Path, metadata: Mapping[str, Any] | None = None) -> Any:
        """A file or folder logged as a reference artifact: W&B records its path (`file://`) and our digest of it
        (from the stored checksums, so a large store is not re-read), uploads nothing. Returns the artifact."""
        if self.run is None:
            return None
        import wandb

        path = Path(path).resolve()
        meta = {"path": str(path), "digest": tree_digest(path, use_checksums=True), **dict(metadata or {})}
        art = wandb.Artifact(re.sub(r"[^A-Za-z0-9._-]+", "-", name)[:120], type=kind, metadata=meta)
        art.add_reference(path.as_uri(), checksum=False)
        self.run.log_artifact(art)
        return art

    def log_image(self, key: str, path: str | Path) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Image(str(path))})

    def summary(self, values: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.summary.update(values)


@contextlib.contextmanager
def tracked(cfg: DictConfig, stage: str) -> Iterator[Tracker]:
    """A W&B run for one stage, grouped by experiment; always finished, so a crash never breaks a multirun.
    `WANDB_MODE` (W&B's own variable) overrides `logger.mode` unless that is `disabled`."""
    lcfg = cfg.get("logger") or {}
    mode = logger_mode(lcfg)  # no logger group (a config built by hand): no tracking
    if mode == "disabled":
        yield Tracker(None)
        return
    import wandb

    run = wandb.init(
        project=lcfg.project,
        group=lcfg.group or cfg.experiment_name,
        job_type=stage,
        name=run_name(stage, _task_overrides()),
        mode=mode,
        dir=str(lcfg.dir or "."),
        config=OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False),
        reinit="finish_previous",
    )
    exit_code = 0
    try:
        yield Tracker(run)
    except BaseException:
        exit_code = 1
        raise
    finally:
        run.finish(exit_code=exit_code)
