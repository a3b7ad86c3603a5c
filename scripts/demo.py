"""Every stage in order on one experiment, each cached: `make demo` / `make paper` call this.

    .venv/bin/python scripts/demo.py experiment=demo          # ≈11 min on 2 CPU cores, ≈1 s when cached
    .venv/bin/python scripts/demo.py experiment=paper         # everything at paper scale
    .venv/bin/python scripts/demo.py experiment=demo pipeline.force=true   # rerun every stage

Each stage is the user-facing script (scripts/<stage>.py) run as a subprocess with the same overrides,
writing to outputs/<experiment>/<stage>/; a stage reruns only when code, configs, the committed
reference trace or the overrides changed since it last finished.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.errors import LengthpredError
from lengthpred.eval.inputs import read_sched
from lengthpred.paths import REPO_ROOT, default_datasets_root
from lengthpred.pipeline import run_stage, source_hash
from lengthpred.sched.summary import short_t5
from lengthpred.stages.locations import experiment_dir


def stage_commands(cfg: DictConfig) -> list[tuple[str, list[str]]]:
    """(name, script + stage-specific overrides) in run order; the experiment's overrides are added to each."""
    p = cfg.pipeline
    train_sweep = ["hydra/launcher=basic", "hydra.sweep.subdir=${hydra.runtime.choices.head}"]
    # without ../shared/datasets (a machine elsewhere), the datasets are downloaded from their pinned sources
    fetch = [] if default_datasets_root().is_dir() else [("datasets", ["fetch_datasets.py"])]
    return [
        *fetch,
        ("model", ["prepare_model.py"]),
        ("data", ["prepare_data.py"]),
        ("generate", ["generate.py", *p.generate_overrides]),
        ("features", ["extract.py"]),
        ("train", ["train.py", "-m", "head=" + ",".join(p.feature_heads), *train_sweep]),
        ("train_proxy", ["train.py", "-m", "head=" + ",".join(p.proxy_heads), *train_sweep, *p.proxy_overrides]),
        ("sweep", ["sweep_features.py"]),
        ("adapt", ["adapt.py"]),
        ("costs", ["measure_costs.py"]),
        ("simulate", ["simulate.py"]),
        ("traces", ["simulate_traces.py"]),  # real serving traces: policies, gain vs Spearman (outputs not sched_*)
        ("batching", ["simulate_batching.py"]),  # static batches: padding and useful throughput per head
        ("evaluate", ["evaluate.py"]),
        ("tables", ["make_tables.py"]),
    ]


def print_summary(tables_dir: Path, names: list[str], sched_dir: Path | None = None) -> None:
    """Print the headline tables from their files, so a cached rerun shows them too."""
    for name in names:
        md = tables_dir / f"{name}.md"
        if md.is_file():
            print("\n" + md.read_text().strip())
    if sched_dir is not None and (sched_dir / "sched_results.csv").is_file():
        print("\n" + t5_summary(sched_dir))


def t5_summary(sched_dir: Path) -> str:
    """T5 at the highest load below capacity, from the simulate stage's tidy results (sched_results.csv,
    sched_gains.csv): FCFS, the clairvoyant and mean oracles, and SJF on every head."""
    gains = sched_dir / "sched_gains.csv"
    return short_t5(read_sched(sched_dir / "sched_results.csv"), read_sched(gains) if gains.is_file() else None)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    exp_dir = experiment_dir(cfg)
    user = [o for o in HydraConfig.get().overrides.task if not o.startswith("pipeline.")]
    key = source_hash(REPO_ROOT, user)
    skip = set(cfg.pipeline.skip or [])
    for name, (script, *args) in stage_commands(cfg):
        if name in skip:
            print(f"[{name}] skipped (pipeline.skip)", flush=True)
            continue
        out = exp_dir / name
        where = f"hydra.sweep.dir={out}" if "-m" in args else f"hydra.run.dir={out}"
        cmd = [sys.executable, str(REPO_ROOT / "scripts" / script), *args, *user, where]

        def run(_out, cmd=cmd, name=name):
            r = subprocess.run(cmd, cwd=REPO_ROOT)
            if r.returncode != 0:
                raise LengthpredError(f"stage {name} failed (exit {r.returncode}): {' '.join(cmd[1:])}")

        run_stage(name, out, key, run, force=bool(cfg.pipeline.force))
    print_summary(Path(cfg.eval.tables_dir), cfg.pipeline.print_tables, exp_dir / "simulate")
    print(f"\nAll stages done. Tables and plots: {exp_dir / 'tables'}; runs: {exp_dir}; W&B offline: "
          f"{cfg.paths.outputs_dir}/wandb")


if __name__ == "__main__":
    main()
