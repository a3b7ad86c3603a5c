"""Glue for the thin Hydra entry points in `scripts/`: resolvers and the heads' constructor defaults
(registered on import, before any config is composed), one-line errors, the checks every script makes
before any work (its config's values, a fresh run folder), and `parse_shard` (from `lengthpred.stages.shards`)."""

from __future__ import annotations

import errno
import functools
import importlib.util
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
from lengthpred.locks import claim
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
    if not OmegaConf.has_resolver("lp.run_id"):  # cached: a launcher's jobs resolve the launching process's value
        OmegaConf.register_new_resolver("lp.run_id", lambda: os.environ.get("LP_RUN_ID", "0"), use_cache=True)
    if not OmegaConf.has_resolver("lp.chosen_layer"):
        OmegaConf.register_new_resolver("lp.chosen_layer", lambda path, head: read_layer(resolve(str(path)), str(head)))


def set_run_id() -> None:
    """`LP_RUN_ID`, which conf/hydra/default.yaml puts after the time in run folder names (`${lp.run_id:}`),
    so two runs started in the same second never share a folder: this process's id (with the scheduler's job
    id when there is one). A launcher's worker (joblib) keeps its parent's; a submitit job (local or Slurm) sets
    its own at import, but `lp.run_id` is a cached resolver and Hydra hands each job the launching process's
    resolver cache with its config, so a multirun's jobs agree on their sweep folder whatever the launcher."""
    if multiprocessing.parent_process() is None:
        job = os.environ.get("SLURM_JOB_ID") or os.environ.get("PBS_JOBID")
        os.environ["LP_RUN_ID"] = f"{job}-{os.getpid()}" if job else str(os.getpid())


# launcher presets (conf/hydra/launcher/) and the extra that provides them
LAUNCHER_EXTRAS = {"slurm": "slurm", "local": "slurm", "submitit_slurm": "slurm", "submitit_local": "slurm"}
_LAUNCHER_MODULES = {"slurm": "hydra_plugins.hydra_submitit_launcher"}


def check_launcher_extra(argv: list[str]) -> None:
    """A `hydra/launcher=<preset>` whose plugin is not installed: one line and exit 2, before Hydra composes
    (it would fail with a multi-line composition error)."""
    for arg in argv:
        group, _, preset = arg.partition("=")
        if group.lstrip("+") != "hydra/launcher" or preset not in LAUNCHER_EXTRAS:
            continue
        extra = LAUNCHER_EXTRAS[preset]
        try:
            found = importlib.util.find_spec(_LAUNCHER_MODULES[extra]) is not None
        except ModuleNotFoundError:  # not even the hydra_plugins namespace
            found = False
        if not found:
            print(f"error: hydra/launcher={preset} needs the {extra} extra: pip install 'lengthpred[{extra}]' "
                  f"(hydra-submitit-launcher)", file=sys.stderr)
            sys.exit(2)


register_resolvers()
set_run_id()
check_launcher_extra(sys.argv[1:])
register_head_params()  # conf/head/*.yaml start from each head constructor's keywords and defaults


# what Hydra writes into a run folder before the script's body runs, and the run's claim on it
CLAIM = ".run-claim.lock"  # host and pid of the run that owns the folder (a `.lock` name: no digest counts it)
HYDRA_OWN = (".hydra", CLAIM)
# a write the user can fix (a full disk or quota, a read-only or foreign folder): one line naming the path
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def claim_run_dir(run_dir: Path) -> None:
    """Claim `run_dir` for this run (`lengthpred.locks.claim`: `CLAIM` created exclusively, atomic also over NFS),
    so of two runs given the same folder exactly one proceeds; a folder this process already claimed is kept."""
    try:
        holder = claim(run_dir, CLAIM)
    except OSError as e:
        raise ConfigError(f"cannot create the run folder {run_dir}: {e.strerror}") from None
    if holder is not None:
        raise ConfigError(f"run folder {run_dir} is claimed by another run ({holder}): give this run its own "
                          "hydra.run.dir")


def check_fresh_run_dir(run_dir: Path) -> None:
    """Claim the run folder (`claim_run_dir`) and refuse one that already holds another run's files (results would
    mix and its provenance would be wrong): only Hydra's own `.hydra/`, the claim and the job's log may be there.
    A pipeline stage's folder is the pipeline's to empty or resume (`lengthpred.stages.resume`)."""
    if pipeline_owned(run_dir):
        return
    claim_run_dir(run_dir)
    others = sorted(p.name for p in run_dir.iterdir() if p.name not in HYDRA_OWN and p.suffix != ".log")
    if others:
        raise ConfigError(f"run folder {run_dir} already holds another run's files ({', '.join(others[:4])}"
                          f"{', …' if len(others) > 4 else ''}): give this run its own hydra.run.dir, or empty "
                          "that folder")


class RunDirGuard(Callback):
    """Hydra callback (conf/hydra/default.yaml): a run or sweep folder is claimed (`claim_run_dir`) before Hydra
    writes its `.hydra/` into it, and one that already holds anything is refused, since `.hydra/` would overwrite
    the earlier run's provenance. It runs before the job, outside `stage`, so it prints the one line itself."""

    def _claim(self, config: DictConfig, key: str) -> None:
        folder = Path(str(OmegaConf.select(config, key)))
        if pipeline_owned(folder):
            return
        try:
            used = folder.is_dir() and any(p.name != CLAIM for p in folder.iterdir())
            if used:
                raise ConfigError(f"{key}={folder} already holds another run's files: give this run a new folder, "
                                  "or empty that one")
            claim_run_dir(folder)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._claim(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._claim(config, "hydra.sweep.dir")


def stage(fn: Callable[[DictConfig], Any], *, name: str | None = None) -> Callable[[DictConfig], Any]:
    """Wrap a script's main: the config is checked (`lengthpred.stages.validate`) and the run folder must be
    fresh before any work; a LengthpredError, or an interpolation that cannot resolve (a resolver's own error
    among them), becomes one line on stderr and exit code 2. `name`: the stage's (default: the script's file
    name; `lengthpred <stage>` gives it)."""
    script = name or Path(inspect.getfile(fn)).stem

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
        except OSError as e:
            if e.errno not in WRITE_ERRNOS:
                raise
            where = e.filename or "a file"
            print(f"error: cannot write {where}: {e.strerror} (free space or choose a writable folder: "
                  "paths.data_dir, paths.outputs_dir)", file=sys.stderr)
            sys.exit(2)

    return wrapper
