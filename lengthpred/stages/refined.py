"""Refined SRPT/SJF on T5's workloads (issue 27 item 4; scripts/simulate_refined.py): which source each row's
predictions come from is in lengthpred/sched/sweep/refined.py, the rows and the noise model's settings in
conf/sched/default.yaml `refined`. With `sched.refined.checkpoints` the pool is a decode curve's test answers and
the refined rows read each decode head's own per-checkpoint predictions (`measured_entries`); without it, the
noise model fitted to a curve's Spearman (`entries`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from lengthpred.artefacts import DECODE_CHECKPOINTS, DECODE_CHOSEN
from lengthpred.errors import ConfigError, DataError
from lengthpred.paths import resolve
from lengthpred.sched.core.hardware import get_profile
from lengthpred.sched.core.refine import fit_sigma, read_curve_spearman
from lengthpred.sched.sweep import refined as rf
from lengthpred.sched.sweep.summary import gains, summarize_runs
from lengthpred.stages.simulate import load_source


def noise_model(rc: DictConfig, lengths: Any, seed: int) -> dict[str, Any]:
    """The decode-cal σ(t) fitted to the curve's decode row (or the `spearman` what-if) and prompt-cal's σ."""
    curve = resolve(str(rc.curve))
    # `spearman` ({t: Spearman}) replaces the measured curve: a what-if decode head, not a measurement
    target = ({float(k): float(v) for k, v in rc.spearman.items()} if rc.get("spearman")
              else read_curve_spearman(curve, str(rc.decode_head)))
    prompt_rho = read_curve_spearman(curve, str(rc.prompt_row))[0.0]
    return {"sigma_decode": fit_sigma(lengths, target, seed=seed), "target": target, "prompt_spearman": prompt_rho,
            "sigma_prompt": fit_sigma(lengths, {0.0: prompt_rho}, seed=seed)[0.0]}


def checkpoints_file(given: Any, every: int) -> Path:
    """`sched.refined.checkpoints` (the file or the decode curve's run folder); its store's checkpoint interval
    (`chosen.json` beside it) must be `sched.refined.every`, or the policy would re-check on another grid."""
    path = resolve(str(given))
    if path.is_dir():
        path = path / DECODE_CHECKPOINTS
    if not path.is_file():
        raise DataError(f"sched.refined.checkpoints: no file {path} (scripts/decode_curve.py writes it)")
    chosen = path.with_name(DECODE_CHOSEN)
    stored = json.loads(chosen.read_text()).get("every") if chosen.is_file() else None
    if stored is not None and int(stored) != every:
        raise ConfigError(f"sched.refined.every={every} but the decode store's checkpoints are every {stored} "
                          f"({chosen}): set sched.refined.every={stored}")
    return path


def run_refined_sched(cfg: DictConfig, out: Path) -> Path:
    """Write refined_runs.csv, refined_results.csv, refined_gains.csv, refined.md and refined.json into `out`."""
    sc, rc = cfg.sched, cfg.sched.refined
    out.mkdir(parents=True, exist_ok=True)
    profile = get_profile(sc.hardware, OmegaConf.to_container(sc.hardware_overrides))
    if rc.get("checkpoints"):
        path = checkpoints_file(rc.checkpoints, int(rc.every))
        entries = rf.parse_entries(OmegaConf.to_container(rc.measured_entries, resolve=True))
        src, tables = rf.checkpoint_pool(pd.read_parquet(path), int(rc.every), name=str(path))
        head, fitted = rf.PROMPT_ONLY, {"checkpoints": str(path)}
        print(f"source {path}: {len(src.output)} test answers, checkpoints every {rc.every} up to "
              f"t={(next(iter(tables.values())).shape[1] - 1) * int(rc.every)}")
    else:
        entries = rf.parse_entries(OmegaConf.to_container(rc.entries, resolve=True))
        src, tables, head = load_source(cfg), None, str(rc.head)
        fitted = noise_model(rc, rf.pool_lengths(src), int(cfg.seed))
        print(f"source {src.name}: {len(src.output)} prompts; {fitted}")
    runs = rf.run_refined(src, profile, entries, head=head, loads=list(rc.loads), seeds=list(rc.seeds),
                          n_requests=int(rc.n_requests), every=int(rc.every), sigma_decode=fitted.get("sigma_decode"),
                          sigma_prompt=fitted.get("sigma_prompt"), rho=float(rc.rho),
                          sim=OmegaConf.to_container(sc.sim), tables=tables)
    summary = summarize_runs(runs)
    gain = gains(runs, min_oracle_gain=float(sc.min_oracle_gain))
    runs.to_csv(out / "refined_runs.csv", index=False)
    summary.to_csv(out / "refined_results.csv", index=False)
    gain.to_csv(out / "refined_gains.csv", index=False)
    parts = []
    for load in rc.loads:
        parts.append(f"**load {load}**, {len(rc.seeds)} seeds, {rc.n_requests} requests each, {profile.name}\n\n"
                     + rf.markdown_table(summary, gain, float(load), entries))
    (out / "refined.md").write_text("\n\n".join(parts) + "\n")
    (out / "refined.json").write_text(json.dumps({"source": src.name, **fitted,
                                                  "config": OmegaConf.to_container(sc, resolve=True)},
                                                 indent=1, default=str))
    print(rf.markdown_table(summary, gain, float(rc.table_load), entries))
    print(f"→ {out}")
    return out
