"""Run stages in order with a progress line each, skipping a stage whose own inputs are unchanged.

A stage's cache key is the hash of what it reads, as `lengthpred.stagegraph` declares it: its own config nodes,
the source of the `lengthpred` modules its script imports, the script and its arguments, the committed files it
reads, the keys and output digests of the earlier stages it reads, and (for a stage that scans the experiment
folder) whatever another script left there under a name it reads (`stages.locations.stray_outputs`). So a change in the tables code reruns the
tables stage only, and a change in the heads code reruns train and what reads it, not features. A rerun's log
line says which part changed (`stagegraph.why_changed`).

A stage's output folder holds `_stage.json` with that key, its parts, and what it wrote: the files of its folder
and the outputs it declared elsewhere (`lengthpred.stages.outputs`: the prepared prompts, a feature store, the
model cache), with their content digests. A rerun with the same key and every output still there, unchanged,
costs nothing; a missing or changed output reruns the stage (saying which), and the stages that read it see its
new digests in their keys. A crash mid-stage leaves no marker so the stage runs again (stages are themselves
resumable where they are long). A stage reruns in an emptied folder, so no file of its previous run mixes with
the new ones, except after its own interrupted run with the same key (`STARTED` says which key): then the folder is
kept and the stage resumes (the train stage skips the heads it finished, `lengthpred.stages.resume`). `run_pipeline` is scripts/demo.py's body: every stage's script (`stage_commands`) as a
subprocess, cached this way, then the headline tables.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthpred.artefacts import SCHED_GAINS, SCHED_RESULTS
from lengthpred.errors import LengthpredError
from lengthpred.eval.inputs import read_sched
from lengthpred.integrity import atomic_write_text, file_digest, folder_lock, tree_digest
from lengthpred.paths import CONF_DIR, HOME_ENV, REPO_ROOT, default_datasets_root, home
from lengthpred.sched.sweep.summary import short_t5
from lengthpred.stagegraph import SourceCache, StageDeps, config_nodes, digest, key_parts, why_changed
from lengthpred.stages.commands import STAGES
from lengthpred.stages.locations import experiment_dir, stray_outputs
from lengthpred.stages.outputs import OUTPUTS, read_outputs
from lengthpred.stages.resume import STARTED

MARKER = "_stage.json"


def config_hash(*parts: Any) -> str:
    """A short stable hash of configs (DictConfig or plain values)."""
    plain = [OmegaConf.to_container(p, resolve=True) if isinstance(p, DictConfig) else p for p in parts]
    return hashlib.sha1(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _read_marker(marker: Path) -> dict[str, Any] | None:
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


def _run_files(out_dir: Path) -> list[str]:
    """The files a stage's run left in its folder (Hydra's own and the logs left out)."""
    return sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*")
                  if p.is_file() and p.name not in (MARKER, STARTED, OUTPUTS) and ".hydra" not in p.parts
                  and p.suffix != ".log")


def _missing(out_dir: Path, done: dict[str, Any]) -> list[str]:
    return ([p for p in done.get("outputs", {}) if not Path(p).exists()]
            + [str(out_dir / f) for f in done.get("files", []) if not (out_dir / f).exists()])


def outputs_digests(out_dir: Path) -> dict[str, str | None]:
    """Content digests of what a finished stage wrote: its folder's files (`files`) and each declared output
    (parts with stored checksums enter by them; None: gone)."""
    digests = {"files": tree_digest(out_dir, skip=(MARKER, STARTED, OUTPUTS, ".hydra"), use_checksums=True)
               if out_dir.is_dir() else None}
    for p in read_outputs(out_dir):
        digests[p] = tree_digest(p, use_checksums=True) if Path(p).exists() else None
    return digests


def outputs_digest(out_dir: Path) -> str:
    """One fingerprint of `outputs_digests`: what the stages after this one read."""
    return config_hash(outputs_digests(out_dir))


def _why_rerun(out_dir: Path, done: dict[str, Any]) -> str | None:
    """Why a finished stage with the right key must run again: an output gone or changed since (None: it
    need not)."""
    gone = _missing(out_dir, done)
    if gone:
        return f"output {gone[0]} is missing"
    if "digests" not in done:
        return None
    now = outputs_digests(out_dir)
    changed = [k for k in done["digests"] if now.get(k) != done["digests"][k]]
    if changed:
        where = f"files in {out_dir}" if changed[0] == "files" else changed[0]
        return f"{where} changed since it ran"
    return None


def run_stage(name: str, out_dir: Path, key: str, fn: Callable[[Path], Any], *, force: bool = False,
              parts: dict[str, Any] | None = None) -> bool:
    """Run `fn(out_dir)` unless `out_dir` already holds a finished run with the same key whose outputs are all
    still there, unchanged; a rerun starts from an emptied `out_dir`, unless `out_dir` holds this key's own
    interrupted run (`STARTED`, no marker): then `fn` resumes there. The marker records the key's `parts`
    (what a later rerun's log line compares to say why), the outputs and their digests (`outputs_digests`).

    Returns True when the stage ran, False when it was cached.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    marker = out_dir / MARKER
    done = _read_marker(marker)
    if force:
        print(f"[{name}] pipeline.force: rerunning", flush=True)
    elif done is not None and done.get("key") == key:
        why = _why_rerun(out_dir, done)
        if why is None:
            print(f"[{name}] cached → {out_dir}", flush=True)
            return False
        print(f"[{name}] {why}: rerunning", flush=True)
    elif done is not None:
        why = why_changed(done.get("parts"), parts) if parts is not None else "key changed"
        print(f"[{name}] {why}: rerunning", flush=True)
    started = _read_marker(out_dir / STARTED)
    if done is None and not force and started is not None and started.get("key") == key:
        print(f"[{name}] resuming its interrupted run (same key) in {out_dir} …", flush=True)
    else:
        for old in out_dir.iterdir():  # the previous run's files: none may mix with this run's
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
        atomic_write_text(out_dir / STARTED, json.dumps({"key": key, "started": time.time()}))
        print(f"[{name}] running …", flush=True)
    t0 = time.perf_counter()
    fn(out_dir)
    dt = time.perf_counter() - t0
    (out_dir / STARTED).unlink(missing_ok=True)
    atomic_write_text(marker, json.dumps({"key": key, "parts": parts, "seconds": round(dt, 1), "finished": time.time(),
                                          "outputs": read_outputs(out_dir), "files": _run_files(out_dir),
                                          "digests": outputs_digests(out_dir)}))
    print(f"[{name}] done in {dt:.0f} s → {out_dir}", flush=True)
    return True


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
    if sched_dir is not None and (sched_dir / SCHED_RESULTS).is_file():
        print("\n" + t5_summary(sched_dir))


def t5_summary(sched_dir: Path) -> str:
    """T5 at the highest load below capacity, from the simulate stage's tidy results (SCHED_RESULTS,
    SCHED_GAINS): FCFS, the clairvoyant and mean oracles, and SJF on every head."""
    gains = sched_dir / SCHED_GAINS
    return short_t5(read_sched(sched_dir / SCHED_RESULTS), read_sched(gains) if gains.is_file() else None)


def run_pipeline(cfg: DictConfig, overrides: list[str]) -> None:
    """Every stage of `stage_commands` in order, each its script run as a subprocess with the user's `overrides`
    into outputs/<experiment>/<stage>/, skipped when cached (`run_stage`, keyed by `stagegraph.key_parts`); then the
    headline tables."""
    exp_dir = experiment_dir(cfg)
    exp_dir.mkdir(parents=True, exist_ok=True)
    with folder_lock(exp_dir, ".pipeline.lock"):  # a second pipeline on this experiment waits: stages never mix
        _run_stages(cfg, overrides, exp_dir)
    if cfg.pipeline.get("dry_run", False):
        return
    print_summary(Path(cfg.eval.tables_dir), cfg.pipeline.print_tables, exp_dir / "simulate")
    print(f"\nAll stages done. Tables and plots: {exp_dir / 'tables'}; runs: {exp_dir}; W&B offline: "
          f"{cfg.paths.outputs_dir}/wandb")


def _stray_digest(exp_dir: Path, own: list[str]) -> str | None:
    """What another script left where the scanning stages read (`locations.stray_outputs`): names and contents,
    None when there is nothing."""
    found = stray_outputs(exp_dir, own)
    return digest({str(f.relative_to(exp_dir)): file_digest(f) for f in found}) if found else None


def _reference_digest(cfg: DictConfig) -> str | None:
    """The model's committed reference traces (what the stages declaring "reference" read), or None."""
    root = Path(str(cfg.paths.reference_dir)) / str(cfg.model.name)
    return tree_digest(root) if root.is_dir() else None


def _would_run(name: str, out_dir: Path, key: str, parts: dict[str, Any], force: bool) -> bool:
    """`run_stage`'s decision without the work: print whether `name` would run, and why."""
    done = _read_marker(out_dir / MARKER)
    if force:
        why = "pipeline.force"
    elif done is None:
        started = _read_marker(out_dir / STARTED)
        why = "resumes its interrupted run" if started and started.get("key") == key else "never finished"
    elif done.get("key") != key:
        why = why_changed(done.get("parts"), parts)
    else:
        why = _why_rerun(out_dir, done)
    print(f"[{name}] " + (f"would run: {why}" if why else "cached"), flush=True)
    return why is not None


@dataclass(frozen=True)
class Stage:
    """One stage of a pipeline run: its script (whose imports its key hashes), arguments, and the work itself."""

    name: str
    script: Path
    args: list[str]
    fn: Callable[[Path], Any]


def run_stages(stages: list[Stage], out_root: Path, nodes: dict[str, Any], files: dict[str, str | None], *,
               src_root: Path = REPO_ROOT, conf_dir: Path | None = None, deps: Mapping[str, StageDeps] | None = None,
               force: bool = False, skip: Iterable[str] = (), dry_run: bool = False) -> list[str]:
    """Each stage in order into `out_root/<name>`, keyed by `stagegraph.key_parts` on the config `nodes`
    (`stagegraph.config_nodes`), the committed `files`' digests and the earlier stages' keys and outputs.
    `dry_run`: say which stages would run and why, run none. Returns the names of the stages that ran (would)."""
    cache = SourceCache()  # each module's source read once per run
    done: dict[str, Any] = {}  # stage -> its key and output digests, as checked or written: what readers hash
    ran = []
    for st in stages:
        out = out_root / st.name
        if st.name in skip:
            print(f"[{st.name}] skipped (pipeline.skip)", flush=True)
        else:
            parts = key_parts(st.name, st.script, st.args, nodes, src_root, conf_dir or src_root / "conf", done,
                              files, cache, deps=deps)
            key = digest(parts)
            if dry_run:
                if _would_run(st.name, out, key, parts, force):
                    ran.append(st.name)
                    done[st.name] = {"key": key, "digests": "rebuilt"}  # its readers would rerun too
                    continue
            elif run_stage(st.name, out, key, st.fn, force=force, parts=parts):
                ran.append(st.name)
        marker = _read_marker(out / MARKER) or {}  # a skipped stage: its last run's, if any
        done[st.name] = {"key": marker.get("key"), "digests": marker.get("digests")}
    return ran


def run_demo(cfg: DictConfig, out: str | Path) -> Path:
    """The pipeline as a stage (`scripts/demo.py`, `lengthpred demo`): every stage with this run's overrides.
    Returns the experiment folder."""
    from hydra.core.hydra_config import HydraConfig

    run_pipeline(cfg, list(HydraConfig.get().overrides.task))
    return experiment_dir(cfg)


def stage_entry(script: str) -> tuple[list[str], Path]:
    """(the command that runs a stage, the file its cache key hashes as its script): `scripts/<script>` in a
    checkout; in an installed package, which has no scripts, `python -m lengthpred <stage>` and the stage's module."""
    path = REPO_ROOT / "scripts" / script
    if path.is_file():
        return [sys.executable, str(path)], path
    import importlib.util

    name = Path(script).stem
    module = STAGES[name].split(":")[0]
    return [sys.executable, "-m", "lengthpred", name], Path(importlib.util.find_spec(module).origin)


def _run_stages(cfg: DictConfig, overrides: list[str], exp_dir: Path) -> None:
    user = [o for o in overrides if not o.startswith("pipeline.")]
    stages = []
    for name, (script, *args) in stage_commands(cfg):
        where = f"hydra.sweep.dir={exp_dir / name}" if "-m" in args else f"hydra.run.dir={exp_dir / name}"
        entry, key_file = stage_entry(script)
        cmd = [*entry, *args, *user, where]

        def run(_out, cmd=cmd, name=name):
            # the stages run in the checkout (if any) but write where this process does (lengthpred.paths.home)
            cwd = REPO_ROOT if (REPO_ROOT / "scripts").is_dir() else home()
            r = subprocess.run(cmd, cwd=cwd, env=os.environ | {HOME_ENV: str(home())})
            if r.returncode != 0:
                raise LengthpredError(f"stage {name} failed (exit {r.returncode}): {' '.join(cmd[1:])}")

        stages.append(Stage(name, key_file, args, run))
    # the composed config holds the user's overrides: each stage's nodes carry those it reads
    files = {"reference": _reference_digest(cfg), "stray": _stray_digest(exp_dir, [s.name for s in stages])}
    run_stages(stages, exp_dir, config_nodes(cfg), files, conf_dir=CONF_DIR,
               force=bool(cfg.pipeline.force), skip=set(cfg.pipeline.skip or []),
               dry_run=bool(cfg.pipeline.get("dry_run", False)))
