"""The one module that imports wandb. Offline by default, disabled in tests, finished in `finally`."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthpred.errors import ConfigError

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


class Tracker:
    """A thin handle that is a no-op when the logger is disabled."""

    def __init__(self, run: Any | None) -> None:
        self.run = run

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        if self.run is not None:
            self.run.log(metrics, step=step)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Table(columns=columns, data=rows)})

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
        name=f"{stage}-{cfg.experiment_name}",
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
