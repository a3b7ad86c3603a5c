"""The job after a sharded multirun: once every `shard=i/n` job of `extract`, `generate` or `extract_decode` has
finished, one more job checks the whole store and merges (generations) or compacts (`features.compact`) it.

Hydra callback (conf/hydra/default.yaml `merge_shards`), active only in a multirun that swept `shard`:

    lengthpred extract --shards 8 hydra/launcher=slurm device=cuda     # 8 array tasks, then the merge job

On a submitit launcher (`hydra/launcher=slurm` or `local`) the merge is a job of its own on the same cluster and
partition (CPU only), submitted when the array has finished without error (Hydra's submitit launcher waits for
the array); on joblib or basic it runs in the launching process. Its one-line result is printed and written to
`<sweep dir>/merge.txt`; a store that is incomplete or damaged is one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from lengthpred.errors import LengthpredError
from lengthpred.stages.merge import MERGED_STAGES, job_config, merge_job

MERGE_FILE = "merge.txt"
_SLURM_KEYS = ("partition", "account", "qos", "constraint", "comment", "exclude")
_GPU_KEYS = {"gres", "gpus", "gpus_per_node", "gpus_per_task", "gpus-per-node", "gpus-per-task", "gpu_bind"}


def swept_shards(task_overrides: list[str]) -> bool:
    """Whether a multirun's overrides sweep `shard` over several values (`shard=0/4,1/4,...`)."""
    return any(o.lstrip("+~").startswith("shard=") and "," in o for o in task_overrides)


def first_job_dir(sweep_dir: Path) -> Path | None:
    jobs = sorted((p for p in sweep_dir.iterdir() if (p / ".hydra" / "config.yaml").is_file()), key=lambda p: p.name)
    return jobs[0] if jobs else None


def merge_parameters(launcher: dict[str, Any], cluster: str, stage: str) -> dict[str, Any]:
    """The merge job's submitit parameters, from the array's launcher config: its time, cores, memory and, on
    Slurm, where it runs and how it starts (`setup` lines such as activating the venv, `srun_args`, and the
    `additional_parameters`), without the array's GPUs: the merge job reads and writes files only."""
    params: dict[str, Any] = {"timeout_min": int(launcher.get("timeout_min") or 60), "cpus_per_task":
                              int(launcher.get("cpus_per_task") or 1), "name": f"{stage}-merge"}
    if launcher.get("mem_gb"):
        params["mem_gb"] = int(launcher["mem_gb"])
    if cluster == "slurm":
        params |= {f"slurm_{k}": launcher[k] for k in _SLURM_KEYS if launcher.get(k)}
        if launcher.get("setup"):
            params["slurm_setup"] = list(launcher["setup"])
        if launcher.get("srun_args"):
            params["slurm_srun_args"] = list(launcher["srun_args"])
        extra = {k: v for k, v in dict(launcher.get("additional_parameters") or {}).items() if k not in _GPU_KEYS}
        if extra:
            params["slurm_additional_parameters"] = extra
    return params


def run_merge(launcher: dict[str, Any], sweep_dir: Path, config: dict[str, Any], stage: str) -> str:
    """`merge_and_verify` as a job on the multirun's own submitit cluster, or here for other launchers."""
    target = str(launcher.get("_target_", ""))
    if "hydra_submitit_launcher" not in target:
        ok, line = merge_job(config, stage)
    else:
        import submitit

        cluster = "slurm" if target.endswith("SlurmLauncher") else "local"
        executor = submitit.AutoExecutor(folder=str(sweep_dir / ".submitit" / "merge"), cluster=cluster)
        executor.update_parameters(**merge_parameters(launcher, cluster, stage))
        ok, line = executor.submit(merge_job, config, stage).result()
    if not ok:
        raise LengthpredError(line)
    return line


class MergeShards(Callback):
    """Merge-and-verify after a multirun over `shard` (module docstring)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        stage = str(config.hydra.job.name)
        if stage not in MERGED_STAGES or not swept_shards(list(config.hydra.overrides.task)):
            return
        sweep_dir = Path(str(config.hydra.sweep.dir))
        job = first_job_dir(sweep_dir)
        if job is None:
            return
        launcher = OmegaConf.to_container(config.hydra.launcher, resolve=True)
        try:
            line = run_merge(launcher, sweep_dir, job_config(job), stage)  # type: ignore[arg-type]
        except LengthpredError as e:
            print(f"error: merge-and-verify after the {stage} shards in {sweep_dir}: {e}", file=sys.stderr)
            sys.exit(2)
        (sweep_dir / MERGE_FILE).write_text(line + "\n")
        print(f"merge-and-verify: {line}", flush=True)
