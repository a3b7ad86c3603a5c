"""Glue for the thin Hydra entry points in `scripts/`: resolvers and the heads' constructor defaults
(registered on import, before any config is composed), one-line errors, the checks every script makes
before any work (its config's values, a fresh run folder), and `parse_shard` (from `lengthpred.stages.shards`)."""

from __future__ import annotations

import functools
import inspect
import logging
import multiprocessing
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from lengthpred.errors import ConfigError, LengthpredError
from lengthpred.heads.layer_choice import read_layer
from lengthpred.paths import REPO_ROOT, default_datasets_root, home, reference_dir, resolve
from lengthpred.stages.heads import register_head_params
from lengthpred.stages.resume import pipeline_owned
from lengthpred.stages.shards import parse_shard
from lengthpred.stages.validate import validate

log = logging.getLogger("lengthpred")
__all__ = ["parse_shard", "register_resolvers", "stage"]


def register_resolvers() -> None:
    """`${lp.home:}` (where runs write), `${lp.repo:}` (the checkout), `${lp.reference_dir:<data_dir>}` and
    `${lp.datasets_root:}`: lengthpred.paths, so configs work from any working directory.
    `${lp.chosen_layer:<layer_choice.json or its run folder>,<head>}`: the layer a layer sweep chose on
    validation for that head (scripts/sweep_layers.py), e.g. `head.layer='${lp.chosen_layer:<run>,linear}'`,
    which adaptation, serving and costs follow through `readout`."""
    if not OmegaConf.has_resolver("lp.home"):
        OmegaConf.register_new_resolver("lp.home", lambda: str(home()))
    if not OmegaConf.has_resolver("lp.repo"):
        OmegaConf.register_new_resolver("lp.repo", lambda: str(REPO_ROOT))
    if not OmegaConf.has_resolver("lp.reference_dir"):
        OmegaConf.register_new_resolver("lp.reference_dir", lambda data: str(reference_dir(data)))
    if not OmegaConf.has_resolver("lp.datasets_root"):
        OmegaConf.register_new_resolver("lp.datasets_root", lambda: str(default_datasets_root()))
    if not OmegaConf.has_resolver("lp.chosen_layer"):
        OmegaConf.register_new_resolver("lp.chosen_layer", lambda path, head: read_layer(resolve(str(path)), str(head)))


def set_run_id() -> None:
    """`LP_RUN_ID`, which conf/hydra/default.yaml puts after the time in run folder names (`${oc.env:LP_RUN_ID}`),
    so two runs started in the same second never share a folder: this process's id (with the scheduler's job
    id when there is one). A launcher's worker (joblib) keeps its parent's, so a multirun's jobs agree on
    their sweep folder."""
    if multiprocessing.parent_process() is None:
        job = os.environ.get("SLURM_JOB_ID") or os.environ.get("PBS_JOBID")
        os.environ["LP_RUN_ID"] = f"{job}-{os.getpid()}" if job else str(os.getpid())


register_resolvers()
set_run_id()
register_head_params()  # conf/head/*.yaml start from each head constructor's keywords and defaults


# what Hydra writes into a run folder before the script's body runs
HYDRA_OWN = (".hydra",)


def check_fresh_run_dir(run_dir: Path) -> None:
    """Refuse a run folder that already holds another run's files (results would mix and its provenance would
    be wrong): only Hydra's own `.hydra/` and the job's log may be there. A pipeline stage's folder is the
    pipeline's to empty or resume (`lengthpred.stages.resume`)."""
    if not run_dir.is_dir() or pipeline_owned(run_dir):
        return
    others = sorted(p.name for p in run_dir.iterdir() if p.name not in HYDRA_OWN and p.suffix != ".log")
    if others:
        raise ConfigError(f"run folder {run_dir} already holds another run's files ({', '.join(others[:4])}"
                          f"{', …' if len(others) > 4 else ''}): give this run its own hydra.run.dir, or empty "
                          "that folder")


class RunDirGuard(Callback):
    """Hydra callback (conf/hydra/default.yaml): a run or sweep folder that already holds anything is refused
    before Hydra writes its `.hydra/` into it, which would overwrite the earlier run's provenance. It runs
    before the job, outside `stage`, so it prints the one line itself."""

    def _refuse_used(self, config: DictConfig, key: str) -> None:
        folder = Path(str(OmegaConf.select(config, key)))
        if folder.is_dir() and any(folder.iterdir()) and not pipeline_owned(folder):
            print(f"error: {key}={folder} already holds another run's files: give this run a new folder, or "
                  "empty that one", file=sys.stderr)
            sys.exit(2)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._refuse_used(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._refuse_used(config, "hydra.sweep.dir")


def stage(fn: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """Wrap a script's main: the config is checked (`lengthpred.stages.validate`) and the run folder must be
    fresh before any work; a LengthpredError, or an interpolation that cannot resolve (a resolver's own error
    among them), becomes one line on stderr and exit code 2."""
    script = Path(inspect.getfile(fn)).stem

    @functools.wraps(fn)
    def wrapper(cfg: DictConfig) -> Any:
        try:
            validate(cfg, script)
            if HydraConfig.initialized():
                check_fresh_run_dir(Path(HydraConfig.get().runtime.output_dir))
            return fn(cfg)
        except LengthpredError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        except InterpolationResolutionError as e:
            print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
            sys.exit(2)

    return wrapper
